#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: host_units
short_description: Enable, start and refresh systemd units against the files they read, in one run
version_added: 0.1.0
description:
  - Brings a list of systemd units to the wanted enablement and state, and restarts a
    running unit whose inputs (unit file, configuration, scripts) are newer than its
    last activation, or whose unit file systemd has not loaded yet.
  - The decision comes from the host, not from what the current run changed, so a run
    that was killed between writing the files and restarting is completed by the next.
  - Every unit is read in one C(systemctl show) call; then the whole change set is
    computed (one C(daemon-reload) when any unit needs it, then each unit's enable or
    disable and its start, stop or restart, in the order of O(units)) and, outside check
    mode, applied.
  - One module run replaces a loop of C(ansible.builtin.systemd_service) tasks and the
    read before them; under TCG every module run costs seconds.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.change_attributes
options:
  units:
    description:
      - The units, in the order their steps run.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - The unit's name with its suffix, such as V(gpuhost-numa.service). Names
            that systemctl could read as an option or a pattern are refused.
        type: str
        required: true
      enabled:
        description:
          - Whether the unit starts at boot. Unset leaves the enablement alone. A static
            unit counts as enabled; a masked one is refused.
        type: bool
      state:
        description:
          - V(started) starts an inactive unit, and restarts an active one whose inputs
            changed (see O(units[].restart_on_change)). V(stopped) stops it.
          - Unset only restarts a running unit whose inputs changed.
        type: str
        choices: [started, stopped]
      inputs:
        description:
          - Absolute paths the unit reads (host paths, looked up below O(root)). A
            running unit that entered its active state before one of them was last
            modified is restarted. Missing files are ignored.
        type: list
        elements: path
        default: []
      restart_on_change:
        description:
          - Restart the running unit when an input is newer than its start or its unit
            file changed. V(false) only reports it in RV(units).
        type: bool
        default: true
      undo:
        description:
          - Whether a failed run undoes this unit's enable, disable and start.
          - V(false) keeps them, for a boot-time unit whose enablement must survive a
            start that failed now (a reboot then applies it).
        type: bool
        default: true
  disable:
    description:
      - Host slimming (runbook section 13) - services to disable and stop, after
        O(units). A bare name gets C(.service). One the host needs (sshd/ssh,
        systemd-networkd, NetworkManager, libvirtd, virtqemud and virtlogd, tuned,
        gpuhost-numa, journald, udevd, dbus) or one of O(needed) is refused by name with
        the reason. One systemd does not know is reported in RV(slimmed) as absent, not
        an error.
    type: list
    elements: str
    default: []
  needed:
    description:
      - Further services the caller needs, name (without suffix) to the reason, refused
        in O(disable) as the built-in ones are (the numa role gives irqbalance while the
        sriov_irq role bans the tenant CPUs through it).
    type: dict
    default: {}
  allow_host_critical:
    description:
      - Stop, disable or restart a unit the host is reached through (C(ssh), C(sshd),
        C(networking), C(NetworkManager), C(systemd-networkd), their sockets too), or
        libvirt (C(libvirtd), C(virtqemud), C(virtlogd)) while tenants run (a status
        file in C(/run/libvirt/qemu)). Without it such a request is refused before any
        systemctl call, whether it comes as a unit entry, in O(disable) or as a restart
        on changed inputs.
    type: bool
    default: false
  changed_paths:
    description:
      - Paths this run wrote or, in check mode, would write (such as the C(changed_paths)
        of M(gpuhost.kvm.host_files)). An input among them counts as newer than the
        unit's start whatever its modification time, so that check mode predicts the
        restart of a file still to be written, and a file written in the second the unit
        started is not missed.
    type: list
    elements: path
    default: []
notes:
  - Outside check mode, if a step fails the steps already done are undone in reverse
    order where that is meaningful (an enable is disabled again, a disable enabled, a
    unit this run started is stopped); a daemon-reload, a restart and a stop are not
    undone, nor are the steps of a unit with O(units[].undo=false). The failure lists in
    C(details) what was undone and what was not.
  - Acting on units needs the running system. Below an O(root) other than V(/) (a
    recorded tree or an image being built, which has no running systemd to ask) the
    module checks its options, changes nothing and lists in RV(skipped_actions) what it
    leaves to a run on the live host, so a role needs no condition of its own.
  - Timestamps are read from C(systemctl show) run with C(TZ=UTC), in whole seconds;
    not with C(--timestamp=unix), which systemd 247 (Debian 11) refuses.
attributes:
  diff_mode:
    details: One line per unit with its enablement and activity, before and after.
seealso:
  - module: gpuhost.kvm.host_facts
"""

EXAMPLES = r"""
- name: Enable the NUMA boot unit and apply its files now
  gpuhost.kvm.host_units:
    units:
      - name: gpuhost-numa.service
        enabled: true
        state: started
        inputs: [/etc/systemd/system/gpuhost-numa.service, /etc/gpuhost/numa.conf]
      - name: tuned.service
        enabled: true
        state: started
        inputs: [/etc/tuned/active_profile, /etc/tuned/profile_mode]

- name: Write the unit's configuration
  gpuhost.kvm.host_files:
    files:
      - {path: /etc/gpuhost/numa.conf, content: "HUGEPAGES 0 2048 512\n", mode: "0644"}
  register: numa_files

- name: Restart the unit when it changed (check mode predicts it too)
  gpuhost.kvm.host_units:
    units:
      - {name: gpuhost-numa.service, enabled: true, state: started, inputs: [/etc/gpuhost/numa.conf]}
    changed_paths: "{{ numa_files.changed_paths }}"

- name: Start libvirt
  gpuhost.kvm.host_units:
    units:
      - {name: virtqemud.service, enabled: true, state: started}
"""

RETURN = r"""
skipped_actions:
  description:
    - Below an O(root) other than V(/), each unit with what the run leaves to the live
      host; empty on the live host.
  returned: always
  type: list
  elements: str
  sample: ["gpuhost-numa.service: enabled, started (root is not /)"]
steps:
  description: The commands of the change set, in order (done, or in check mode to do).
  returned: always
  type: list
  elements: str
  sample: ["systemctl daemon-reload", "systemctl enable -- gpuhost-numa.service",
           "systemctl restart -- gpuhost-numa.service"]
slimmed:
  description:
    - For O(disable), the units disabled, stopped (in check mode, to be), already
      disabled and inactive, and absent (systemd does not know them).
  returned: always
  type: dict
  sample: {disabled: [cups.service], stopped: [cups.service], already: [bluetooth.service],
           absent: [ModemManager.service]}
restarted:
  description: The units restarted (in check mode, to restart).
  returned: always
  type: list
  elements: str
  sample: [tuned.service]
units:
  description: Per unit, what systemd said and the actions decided, with their reasons.
  returned: always
  type: dict
  sample:
    tuned.service:
      load_state: loaded
      active: true
      unit_file_state: enabled
      daemon_reload: false
      actions: [restart]
      reasons: ["changed since the unit started: /etc/tuned/active_profile"]
diff:
  description: The units' enablement and activity before and after, one line each (with C(--diff)).
  returned: when diff mode is on
  type: dict
  sample:
    before: "tuned.service: disabled, inactive\n"
    after: "tuned.service: enabled, active\n"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import host_units as unit_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import systemd_units
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.host_facts import input_mtimes
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.critical import running_tenants
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy.host_safety import (
    check_slim_services, check_unit_verbs)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, StepPlan, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    absolute_path, unit_name)


# The modification time given to an input this run changed: newer than any start.
CHANGED_NOW = float("inf")


def _requested_verbs(unit):
    """The verbs a unit entry asks for whatever the unit's state now."""
    return (["disable"] if unit.get("enabled") is False else []) + (
        ["stop"] if unit.get("state") == "stopped" else [])


class HostUnits(PlannedChange):
    """Reads every unit once, decides the whole change set, then applies it."""

    def __init__(self, module):
        super(HostUnits, self).__init__(module)
        self.params = module.params
        self.plans = {}
        self.changed_paths = set()
        self.slim = []
        self.skipped = []

    def check(self):
        seen = set()
        for index, unit in enumerate(self.params["units"]):
            unit_name(unit["name"], "units[%d].name" % index)
            if unit["name"] in seen:
                raise GpuhostError("%s is listed twice" % unit["name"], field="units[%d].name" % index,
                                   fix="list each unit once, with all its inputs")
            seen.add(unit["name"])
            unit["inputs"] = [absolute_path(path, "units[%d].inputs[%d]" % (index, number))
                              for number, path in enumerate(unit["inputs"])]
        self.changed_paths = {absolute_path(path, "changed_paths[%d]" % index)
                              for index, path in enumerate(self.params["changed_paths"])}
        slim = check_slim_services(self.params["disable"], self.params["needed"], "disable")
        for name in slim:
            if name in seen:
                raise GpuhostError("%s is both in units and in disable" % name, field="disable",
                                   fix="list it in one of them")
        self.params["units"] = list(self.params["units"]) + [
            {"name": name, "enabled": False, "state": "stopped", "inputs": [],
             "restart_on_change": False, "undo": True} for name in slim]
        self.slim = slim
        if not self.params["units"]:
            raise GpuhostError("no unit given", field="units",
                               fix="name at least one unit, or one service to disable")
        self.check_verbs([(index, unit["name"], _requested_verbs(unit))
                          for index, unit in enumerate(self.params["units"])])

    def check_verbs(self, requests):
        """The host-safety policy of every verb, below any root: nothing stops, disables
        or restarts what the host is reached through, or libvirt under running tenants."""
        check_unit_verbs(requests, running_tenants(self.params["root"]),
                         self.params["allow_host_critical"])

    def systemctl(self, argv):
        rc, out, err = self.module.run_command(argv, environ_update=systemd_units.SHOW_ENVIRON)
        if rc != 0:
            raise GpuhostError("%s failed: %s" % (" ".join(argv), (err or out).strip() or "rc=%d" % rc),
                               field="units", fix="journalctl -u UNIT on the host shows why")
        return out

    def _run_step(self, step):
        self.systemctl(unit_core.systemctl_step_argv(step))

    def decide(self):
        self.check()
        units = self.params["units"]
        keep = [unit["name"] for unit in units if not unit["undo"]]
        if not self.live:
            self.skipped = ["%s: %s (root is not /)" % (unit["name"], unit_core.wanted_text(unit))
                            for unit in units]
            return StepPlan(unit_core.UnitSteps([], self._run_step, keep))
        names = [unit["name"] for unit in units]
        properties = systemd_units.parse_show_blocks(self.systemctl(systemd_units.show_argv(names)), len(names))
        mtimes = [dict(input_mtimes(unit["inputs"], self.params["root"]),
                       **{path: CHANGED_NOW for path in unit["inputs"] if path in self.changed_paths})
                  for unit in units]
        self.plans, steps = unit_core.plan_units(units, properties, mtimes)
        # a restart on changed inputs is decided only now, still before any step
        self.check_verbs([(index, unit["name"], self.plans[unit["name"]]["actions"])
                          for index, unit in enumerate(units)])
        diff = None
        if self.module._diff:
            diff = {"before": unit_core.state_lines(units, self.plans),
                    "after": unit_core.state_lines(units, self.plans, after=True)}
        return StepPlan(unit_core.UnitSteps(steps, self._run_step, keep, diff))

    def slimmed(self, done):
        """What became of each unit of ``disable``: the report host slimming asks for."""
        answer = {"disabled": [], "stopped": [], "already": [], "absent": []}
        for name in self.slim:
            plan = self.plans.get(name)
            if plan is None:
                continue
            if plan["load_state"] in ("not-found", ""):
                answer["absent"].append(name)
                continue
            verbs = [verb for verb, unit in done if unit == name]
            if "disable" in verbs:
                answer["disabled"].append(name)
            if "stop" in verbs:
                answer["stopped"].append(name)
            if not plan["actions"]:
                answer["already"].append(name)
        return answer

    @property
    def result(self):
        steps = self.plan.changes if self.plan else unit_core.UnitSteps([], None)
        done = steps.unit_steps if self.module.check_mode else steps.done
        result = {"changed": bool(done),
                  "steps": [unit_core.step_text(step) for step in done],
                  "restarted": [name for verb, name in done if verb == "restart"],
                  "units": self.plans,
                  "slimmed": self.slimmed(done),
                  "skipped_actions": self.skipped}
        if steps.diff() is not None:
            result["diff"] = steps.diff()
        return result


def build_module():
    return new_module(
        AnsibleModule, argument_spec=argument_spec(
            ROOT_ARGUMENT_SPEC,
            units={"type": "list", "elements": "dict", "required": True,
                   "options": {"name": {"type": "str", "required": True},
                               "enabled": {"type": "bool"},
                               "state": {"type": "str", "choices": ["started", "stopped"]},
                               "inputs": {"type": "list", "elements": "path", "default": []},
                               "restart_on_change": {"type": "bool", "default": True},
                               "undo": {"type": "bool", "default": True}}},
            changed_paths={"type": "list", "elements": "path", "default": []},
            disable={"type": "list", "elements": "str", "default": []},
            needed={"type": "dict", "default": {}},
            allow_host_critical={"type": "bool", "default": False},
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    run_module(module, HostUnits(module), changes_host=True)


if __name__ == "__main__":
    main()
