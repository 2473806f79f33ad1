#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: irq_affinity
short_description: Pin IRQs to host CPUs, ban tenant CPUs in irqbalance, re-pin new IRQs
version_added: "0.1.0"
description:
  - Writes C(/proc/irq/N/smp_affinity_list) for the IRQs selected by name, by PCI device
    (its C(msi_irqs)) or by number.
  - An IRQ is left alone when its C(smp_affinity_list) already equals O(cpus) and its
    C(effective_affinity_list) lies inside them.
  - IRQs whose affinity the kernel manages (NVMe queues, for instance) refuse the write
    with EIO; they are returned in RV(skipped_managed) and do not fail the task.
  - Optionally sets irqbalance's ban list in its environment file and restarts
    irqbalance only when that file changed. When a later step fails, the file is put
    back and irqbalance restarted once more, so it never keeps running on a rolled-back
    configuration.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.host_change
  - gpuhost.kvm.change_attributes
options:
  state:
    description:
      - C(present) pins the selected IRQs to O(cpus) (and, with O(persistent=true), stores
        the pin).
      - C(absent) forgets the stored pin named O(persist_as), so that no re-apply puts it
        back; the IRQs it covered keep their current affinity until irqbalance or another
        pin moves them. The sriov_irq role uses it for a NUMA node that has no devices
        left. The selectors and O(cpus) are ignored; the irqbalance options still apply.
    type: str
    choices: [present, absent]
    default: present
  cpus:
    description:
      - The CPUs (cpulist, e.g. C(0-1,32-33)) the IRQs may run on; all online.
      - Required with O(state=present), unless O(groups) is given.
    type: str
  name_regex:
    description:
      - Select IRQs whose action name in /proc/interrupts matches, e.g. C(mlx5_comp),
        C(nvme) or C(vfio-msix).
    type: str
  pci_devices:
    description: Select the MSI/MSI-X IRQs of these PCI functions.
    type: list
    elements: str
  irqs:
    description: Select these IRQ numbers; each must exist.
    type: list
    elements: int
  persist_as:
    description:
      - With O(persistent=true), the name the pin is stored under; a later run with the
        same name replaces it, whatever its selectors and CPUs. The sriov_irq role names
        one per NUMA node, so a device list that grows (a tenant onboarded) or CPUs that
        change replace the node's pin instead of leaving the old one to fight it.
      - Not given, a pin is stored under its selectors and replaces only a pin with the
        same selectors.
      - Required with O(state=absent).
    type: str
  groups:
    description:
      - Several pinnings in one run, one per NUMA node for instance, instead of one
        task per node (under TCG each module run costs seconds). Mutually exclusive with
        O(state), O(cpus), O(name_regex), O(pci_devices), O(irqs) and O(persist_as).
      - Every group is planned first, from one read of C(/proc/interrupts) and sysfs;
        a device listed in two groups, or two groups with the same C(persist_as), is
        refused before anything changes. Then every group is applied, or, when a step
        fails, every group is rolled back.
      - The irqbalance options and O(persistent) apply once to the whole run; the
        stored pins are read and written once, each group keeping its own entry (by
        C(persist_as)), exactly as one task per group would.
      - At most 1024 groups (the kernel's largest number of NUMA nodes).
      - An empty list pins nothing; the irqbalance options still apply.
    type: list
    elements: dict
    suboptions:
      state:
        description:
          - C(present) pins the group's IRQs to its O(groups[].cpus); C(absent) forgets
            the stored pin named O(groups[].persist_as), as O(state=absent) does.
        type: str
        choices: [present, absent]
        default: present
      pci_devices:
        description: Select the MSI/MSI-X IRQs of these PCI functions; each in one group only.
        type: list
        elements: str
        default: []
      cpus:
        description: The CPUs (a cpulist) the group's IRQs may run on; required with C(state=present).
        type: str
      persist_as:
        description:
          - As O(persist_as), for this group; required with C(state=absent), unique
            among the groups.
        type: str
  irqbalance_banned_cpus:
    description:
      - Ban these CPUs (a cpulist, normally the tenant CPUs) in irqbalance's config. The
        host's isolcpus and nohz_full CPUs are added, because setting a ban list turns off
        irqbalance's own ban of them.
      - Not given, the irqbalance config is left alone.
    type: str
  irqbalance_config:
    description:
      - irqbalance's environment file. The role passes the OS's path
        (C(/etc/sysconfig/irqbalance) on RHEL, C(/etc/default/irqbalance) on Debian).
      - Other lines of the file are kept; a line that is not C(KEY=value), a comment or
        blank is refused.
      - An absolute host path (under O(root)), without C(..). When
        O(irqbalance_banned_cpus) is given the file must exist (the irqbalance package
        installs it); a missing one is refused, never created. Anything but a regular
        file is refused.
    type: path
    default: /etc/sysconfig/irqbalance
  irqbalance_format:
    description:
      - C(cpulist) writes C(IRQBALANCE_BANNED_CPULIST) (irqbalance 1.8 and later);
        C(mask) writes C(IRQBALANCE_BANNED_CPUS) as comma-separated 32-bit hex words.
      - C(auto) asks C(irqbalance --version) on the live host, and uses C(mask) when the
        version is unknown (older versions ignore the cpulist key; newer ones still read
        the mask).
    type: str
    choices: [auto, cpulist, mask]
    default: auto
notes:
  - "Persistence: the kernel requests a NIC's IRQs again when it comes up, and a
    passed-through device's vfio-msix IRQs exist only once the guest enables MSI-X. The
    wanted pins are stored in C(/etc/gpuhost/irq-affinity.json) and the same Python
    re-applies them through C(/usr/local/libexec/gpuhost/gpuhost-irq-reapply), run by a
    udev rule on net add/move events (C(/etc/udev/rules.d/90-gpuhost-irq-affinity.rules)),
    a NetworkManager dispatcher script on link up where NetworkManager is installed, and a
    libvirt qemu hook (C(/etc/libvirt/hooks/qemu.d/gpuhost-irq-affinity)) that, on
    C(started), makes sure the host's one watcher runs in the background (a lock in
    C(/run/gpuhost) keeps it to one process for all tenants): it re-applies the pins every
    2 s for a few minutes after it sees a domain start, for the guest's MSI-X IRQs, then
    every 10 s, and ends when no domain runs (libvirt finds a new hook only at its daemon's start or reload, so a run that writes
    the hook reloads the running C(libvirtd) or C(virtqemud); its guests keep running),
    and the enabled boot unit C(gpuhost-irq-reapply.service), which watches for a few
    minutes after boot (a block device's queues have no udev net event)."
  - Only the write tells a kernel-managed IRQ apart (it fails with EIO). A real run with
    O(persistent=true) stores the action names of those IRQs, and check mode reports them
    in RV(skipped_managed); before any such run, check mode lists them as changing.
  - Runs at once (two onboardings, or one task per NUMA node without O(groups)) share
    C(/etc/gpuhost/irq-affinity.json) safely. Each takes the flock of
    C(/etc/gpuhost/irq-affinity.json.lock), reads the file again under it and changes
    only its own rule (by O(persist_as), else by its selectors) and kernel-managed names,
    so no run drops another run's pin. A file of an unknown C(version) or shape is
    refused, naming the file.
  - irqbalance moves the IRQs it balances among all CPUs it may use. With
    O(persistent=true) and O(irqbalance_banned_cpus), its C(IRQBALANCE_ARGS) names the
    policy script C(/usr/local/libexec/gpuhost/gpuhost-irqbalance-policy), which bans the
    pinned IRQs from balancing; a policy script of someone else's is refused. Without
    them, irqbalance undoes the pins within seconds unless it is stopped.
seealso:
  - module: gpuhost.kvm.vfio_bind
"""

EXAMPLES = r"""
- name: Keep the NIC's completion IRQs on the host's housekeeping CPUs, for good
  gpuhost.kvm.irq_affinity:
    name_regex: "^mlx5_comp"
    cpus: "0-1,32-33"
    persistent: true

- name: Pin the passed-through GPU's vfio IRQs and keep irqbalance off the tenant cores
  gpuhost.kvm.irq_affinity:
    name_regex: "vfio-msix"
    cpus: "0-1,32-33"
    irqbalance_banned_cpus: "2-31,34-63"
    irqbalance_config: /etc/default/irqbalance
    persistent: true

- name: Pin the IRQs of one NVMe controller
  gpuhost.kvm.irq_affinity:
    pci_devices:
      - "0000:01:00.0"
    cpus: "0-1"

- name: One run for every NUMA node; node 1 has no device left and forgets its pin
  gpuhost.kvm.irq_affinity:
    groups:
      - pci_devices: ["0000:01:00.0", "0000:41:00.0"]
        cpus: "0-1,32-33"
        persist_as: sriov_irq node 0
      - state: absent
        persist_as: sriov_irq node 1
    irqbalance_banned_cpus: "2-31,34-63"
    persistent: true

- name: Stop re-applying node 1's stored pin (its last tenant left)
  gpuhost.kvm.irq_affinity:
    state: absent
    persist_as: sriov_irq node 1
"""

RETURN = r"""
selected:
  description: IRQ numbers the selectors cover.
  returned: always
  type: list
  elements: int
changed_irqs:
  description: IRQs whose affinity was written (in check mode, those that would be).
  returned: always
  type: list
  elements: int
skipped_managed:
  description: IRQs the kernel manages, which refused the write (EIO).
  returned: always
  type: list
  elements: int
previous:
  description: IRQ number -> smp_affinity_list before the run, for the changed ones.
  returned: always
  type: dict
groups:
  description:
    - Per group, in the order given (one entry, for the single-group options, without
      O(groups)); the top-level RV(selected), RV(changed_irqs) and RV(skipped_managed)
      are the union of the groups'.
  returned: always
  type: list
  elements: dict
  contains:
    persist_as:
      description: The group's O(groups[].persist_as), or null.
      type: str
    state:
      description: C(present) or C(absent).
      type: str
    cpus:
      description: The group's CPUs as a cpulist; null with C(state=absent).
      type: str
    selected:
      description: IRQ numbers the group's selectors cover.
      type: list
      elements: int
    changed_irqs:
      description: The group's IRQs whose affinity was written (in check mode, would be).
      type: list
      elements: int
    skipped_managed:
      description: The group's kernel-managed IRQs.
      type: list
      elements: int
irqbalance_banned_cpus:
  description: The ban list written (asked CPUs plus isolcpus and nohz_full), as a cpulist.
  returned: when O(irqbalance_banned_cpus) is given
  type: str
  sample: "2-31,34-63"
irqbalance_restarted:
  description: Whether irqbalance was restarted (only when its config or, with its policy script in place, the stored pins changed; on the live host).
  returned: always
  type: bool
steps:
  description: The planned (check mode) or applied steps, in order.
  returned: always
  type: list
  elements: str
skipped_actions:
  description: Actions left out because O(root) is not C(/).
  returned: always
  type: list
  elements: str
field:
  description: On failure, the option at fault.
  returned: failure
  type: str
"""

import os
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.validation import check_required_if

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist, parse_cpulist)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity.pinning import (
    LIBVIRT_HOOK, POLICY_SCRIPT, UNIT_FILE, UNIT_NAME, AffinityPlan, add_managed_record, build_rule,
    plan_persistence, plan_pins, select_irqs, validate_cpus)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.irq_pins import known_managed_names
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity.irqbalance import format_for_version, plan_config
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.irqbalance_config import read_config
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.mechanisms import LIBVIRT_UNITS
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    read_cpu_state, read_irqs, read_online_cpus)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.systemd import (
    systemctl, systemctl_argv)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import config_path


# Linux's MAX_NUMNODES at its largest (CONFIG_NODES_SHIFT=10): one group per node.
MAX_GROUPS = 1024
# The daemons that run QEMU guests, monolithic or modular (the sockets start them).
LIBVIRT_DAEMONS = tuple(unit for units in LIBVIRT_UNITS.values() for unit in units
                        if unit.endswith(".service"))
SINGLE_GROUP_OPTIONS = ("state", "cpus", "name_regex", "pci_devices", "irqs", "persist_as")
SINGLE_REQUIRED_IF = [("state", "present", ["cpus"]),
                      ("state", "present", ["name_regex", "pci_devices", "irqs"], True),
                      ("state", "absent", ["persist_as"])]


def build_module():
    spec = argument_spec(
        ROOT_ARGUMENT_SPEC,
        state=dict(type="str", choices=["present", "absent"], default="present"),
        cpus=dict(type="str"),
        name_regex=dict(type="str"),
        pci_devices=dict(type="list", elements="str"),
        irqs=dict(type="list", elements="int"),
        groups=dict(type="list", elements="dict", options=dict(
            pci_devices=dict(type="list", elements="str", default=[]),
            cpus=dict(type="str"),
            persist_as=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ), required_if=[("state", "present", ["cpus"]), ("state", "absent", ["persist_as"])]),
        irqbalance_banned_cpus=dict(type="str"),
        irqbalance_config=dict(type="path", default="/etc/sysconfig/irqbalance"),
        irqbalance_format=dict(type="str", choices=["auto", "cpulist", "mask"],
                               default="auto"),
        persistent=dict(type="bool", default=False),
        persist_as=dict(type="str"),
    )
    # The argument spec checks required_if after it sets state's default: with groups,
    # the single-group requirements are checked here instead, only without groups.
    module = new_module(AnsibleModule, argument_spec=spec, supports_check_mode=True,
                        mutually_exclusive=[["groups", name]
                                            for name in SINGLE_GROUP_OPTIONS])
    if module.params["groups"] is None:
        try:
            check_required_if(SINGLE_REQUIRED_IF, {key: value for key, value
                                                   in module.params.items()
                                                   if value is not None})
        except TypeError as err:
            module.fail_json(msg=str(err))
    return module


def _in_group(index, func, *args):
    """Call ``func``; a refusal names the group's option (groups[1].cpus)."""
    try:
        return func(*args)
    except GpuhostError as err:
        raise GpuhostError(err.msg, field="groups[%d].%s" % (index, err.field or "pci_devices"),
                           fix=err.fix, details=err.details) from err


class Group(object):
    """One pinning of a run: the single-group options, or one entry of groups."""

    def __init__(self, index, state, persist_as, rule=None):
        self.index = index                  # None: the single-group options
        self.present = state == "present"
        self.persist_as = persist_as or None
        self.rule = rule
        self.pins = None

    def call(self, func, *args):
        if self.index is None:
            return func(*args)
        return _in_group(self.index, func, *args)

    def result(self, check):
        pins = self.pins
        changed = (pins.to_change if check else pins.changed_irqs) if pins else []
        return {"persist_as": self.persist_as,
                "state": "present" if self.present else "absent",
                "cpus": format_cpulist(self.rule.cpus) if self.rule else None,
                "selected": pins.selected if pins else [],
                "changed_irqs": sorted(changed),
                "skipped_managed": sorted(pins.skipped_managed) if pins else []}


def parse_groups(params):
    """The run's groups, each rule built and checked, and no device in two groups."""
    if params["groups"] is None:
        rule = None
        if params["state"] == "present":
            rule = build_rule(params["cpus"], params["name_regex"], params["pci_devices"],
                              params["irqs"], params["persist_as"])
        return [Group(None, params["state"], params["persist_as"], rule)]
    if len(params["groups"]) > MAX_GROUPS:
        raise GpuhostError("%d groups, more than %d (one per NUMA node)"
                           % (len(params["groups"]), MAX_GROUPS), field="groups",
                           fix="give one group per NUMA node")
    groups, owners, names = [], {}, {}
    for index, entry in enumerate(params["groups"]):
        group = Group(index, entry["state"], entry["persist_as"])
        if not group.present and group.persist_as is None:
            # An empty name would forget nothing by name: refused, not guessed at.
            raise GpuhostError("state=absent needs the name of the pin to forget",
                               field="groups[%d].persist_as" % index,
                               fix="give the persist_as the group was stored under")
        if group.persist_as is not None:
            if group.persist_as in names:
                raise GpuhostError(
                    "%r is also the persist_as of groups[%d]"
                    % (group.persist_as, names[group.persist_as]),
                    field="groups[%d].persist_as" % index,
                    fix="give each group its own persist_as (one per NUMA node)")
            names[group.persist_as] = index
        if group.present:
            group.rule = group.call(build_rule, entry["cpus"], None, entry["pci_devices"],
                                    None, entry["persist_as"])
            for address in group.rule.pci_devices:
                if address in owners:
                    raise GpuhostError(
                        "%s is also in groups[%d].pci_devices" % (address, owners[address]),
                        field="groups[%d].pci_devices" % index,
                        fix="list each device in one group only, the one of its NUMA node")
                owners[address] = index
        groups.append(group)
    return groups


class IrqPinner(PlannedChange):
    """Plans and applies one irq_affinity task: every group in one change set."""

    def __init__(self, module, writer=None):
        super(IrqPinner, self).__init__(module)
        self.params = module.params
        self.writer = writer or HostWriter(self.params["root"])
        self.groups = []
        self.recorded_managed = []
        self.banned = None
        self.irqbalance_changed = False
        self.restarted = False
        self.skipped = []

    def _irqbalance_format(self):
        wanted = self.params["irqbalance_format"]
        if wanted != "auto":
            return wanted
        binary = self.module.get_bin_path("irqbalance") if self.live else None
        if not binary:
            return "mask"
        # irqbalance 1.9.2 (Debian 12) prints its version and exits 1: read the text,
        # whatever the exit status; no version in it means the mask form.
        dummy, out, err = self.module.run_command([binary, "--version"])
        return format_for_version(out + err)

    def _irqbalance_asks_policy(self):
        try:
            return POLICY_SCRIPT in read_config(self.writer, self.params["irqbalance_config"])
        except GpuhostError:
            return False

    def _restart_irqbalance(self):
        systemctl(self.module, "try-restart", "irqbalance", field="irqbalance_config",
                  fix="check systemctl status irqbalance")
        self.restarted = True

    def _systemctl(self, *args):
        systemctl(self.module, *args)

    def _plan_unit_enabled(self, changes, unit_changed):
        if not self.live:
            if unit_changed:
                self.skipped.append("systemctl enable %s (root is not /)" % UNIT_NAME)
            return
        if unit_changed:
            changes.add("systemctl daemon-reload", lambda: self._systemctl("daemon-reload"))
        else:
            # The unit is in place; someone may have disabled it since.
            rc, dummy, dummy = self.module.run_command(systemctl_argv("is-enabled", UNIT_NAME))
            if rc == 0:
                return
        changes.add("systemctl enable %s" % UNIT_NAME,
                    lambda: self._systemctl("enable", UNIT_NAME),
                    lambda: self._systemctl("disable", UNIT_NAME))

    def _plan_libvirt_reload(self, changes, hook_changed):
        """libvirt looks for hook scripts when its daemon starts and on SIGHUP, and
        remembers what it found (virhook.c): a hook written while the daemon runs would
        not run before the daemon's next start, so the tenants started until then would
        keep their vfio IRQs on tenant CPUs. A running daemon is reloaded (SIGHUP; its
        guests keep running); one that is not running reads the hook when it starts."""
        if not hook_changed:
            return
        if not self.live:
            self.skipped.append("systemctl reload the running libvirt daemon (root is not /)")
            return
        running = [unit for unit in LIBVIRT_DAEMONS
                   if self.module.run_command(systemctl_argv("is-active", unit))[0] == 0]
        if not running:
            return

        def reload_daemons():
            systemctl(self.module, "reload", *running, field="persistent",
                      fix="check systemctl status %s" % " ".join(running))
        # Undone by a second reload once the hook is gone again, so that the daemon does
        # not keep calling a hook the rollback removed.
        changes.add("systemctl reload %s" % " ".join(running), reload_daemons,
                    reload_daemons, undo_last=True)

    def decide(self):
        params = self.params
        root = params["root"]
        check = self.module.check_mode
        # The shared validator, as for every config path: absolute, plain, and a file;
        # missing only when no ban list is to be written into it.
        # Decide, then act: every input and every host file this run depends on is
        # checked here, before anything is computed from it, and each refusal names the
        # option the user set. A link at irqbalance_config is refused unread (the write
        # would refuse it anyway, after the pins were decided, naming no option).
        banned_wanted = None
        if params["irqbalance_banned_cpus"] is not None:
            banned_wanted = parse_cpulist(params["irqbalance_banned_cpus"],
                                          field="irqbalance_banned_cpus")
        # Check mode may run before the irqbalance package (an earlier task) is in: a
        # missing file is then reported, and refused by the real run if still missing.
        params["irqbalance_config"] = config_path(
            params["irqbalance_config"], "irqbalance_config", root=root,
            missing_ok=banned_wanted is None or check)
        if banned_wanted is not None and check and not os.path.lexists(
                sysfs.path(root, params["irqbalance_config"])):
            self.module.warn("irqbalance_config %s does not exist yet: the ban list is shown "
                             "as written into an empty file; a real run refuses it unless "
                             "the irqbalance package has installed it by then"
                             % params["irqbalance_config"])
        self.writer.refuse_link(params["irqbalance_config"], "irqbalance_config")
        read_online_cpus(root, field="root")
        cpu_state = read_cpu_state(root)
        groups = self.groups = parse_groups(params)
        present = [group for group in groups if group.present]
        irqs = None
        if present:
            # One read of /proc/interrupts and of the stored managed names for every group.
            for group in present:
                group.call(validate_cpus, group.rule, cpu_state.online)
            irqs = read_irqs(root)
            known = known_managed_names(self.writer) if check else ()
            for group in present:
                numbers = group.call(select_irqs, root, irqs, group.rule, True)
                group.pins = plan_pins(self.writer, irqs, numbers, group.rule.cpus, known)
        # irqbalance's config, the stored pins and its restart come before the pins: a
        # pin written while the old irqbalance still runs can be moved again before the
        # restart makes it ask the policy script.
        changes = ChangeSet()
        if banned_wanted is not None:
            wanted = banned_wanted
            pinned_cpus = set(cpu for group in present for cpu in group.rule.cpus)
            overlap = sorted(set(wanted) & pinned_cpus)
            if overlap:
                raise GpuhostError(
                    "CPU(s) %s are both in cpus and in irqbalance_banned_cpus"
                    % format_cpulist(overlap), field="irqbalance_banned_cpus",
                    fix="ban only the tenant CPUs, not the ones the IRQs are pinned to")
            self.irqbalance_changed, self.banned = plan_config(
                changes, self.writer, params["irqbalance_config"], wanted, cpu_state,
                self._irqbalance_format(),
                policy_script=POLICY_SCRIPT if params["persistent"] else None)
        # One read and at most one write of the stored pins for every group: those
        # present store their rule (with persistent), those absent forget theirs.
        forget = [group.persist_as for group in groups if not group.present]
        stored = [group.rule for group in present] if params["persistent"] else []
        pins_changed = hook_changed = False
        if stored or forget:
            files_before = len(changes.files)
            pins_changed = plan_persistence(changes, self.writer, stored, sys.executable,
                                            forget=forget)
            if stored:
                written = [f.path for f in changes.files[files_before:]]
                self._plan_unit_enabled(changes, UNIT_FILE in written)
                hook_changed = LIBVIRT_HOOK in written
        # irqbalance asks its policy script about each IRQ when it starts: changed stored
        # pins reach it only through a restart.
        if self.irqbalance_changed or (pins_changed and self._irqbalance_asks_policy()):
            if self.live:
                # A rollback restores the config and stored pins, then restarts again:
                # else irqbalance would keep running on what was rolled back.
                changes.add("systemctl try-restart irqbalance", self._restart_irqbalance,
                            self._restart_irqbalance, undo_last=True)
            else:
                self.skipped.append("systemctl try-restart irqbalance (root is not /)")
        # After irqbalance's restart, so that a rollback restarts irqbalance last.
        self._plan_libvirt_reload(changes, hook_changed)
        setup_steps = len(changes)
        plans = [group.pins for group in present]
        for plan in plans:
            changes.extend(plan.changes)
        if params["persistent"] and any(plan.to_change for plan in plans) and not check:
            self.recorded_managed = add_managed_record(changes, self.writer, plans, irqs)
        # All or nothing: a failure in any group undoes every group's pins and files.
        return AffinityPlan(changes=changes, setup_steps=setup_steps)

    @property
    def result(self):
        check = self.module.check_mode
        groups = [group.result(check) for group in self.groups]
        changed_irqs = sorted(n for group in groups for n in group["changed_irqs"])
        previous = {}
        for group in self.groups:
            if group.pins:
                previous.update(group.pins.previous)
        changes = self.plan.changes if self.plan else None
        setup_steps = self.plan.setup_steps if self.plan else 0
        # A pin step can end as a kernel-managed IRQ, left alone: not a change.
        result = {"changed": bool(changed_irqs or setup_steps or self.recorded_managed),
                  "selected": sorted(n for group in groups for n in group["selected"]),
                  "changed_irqs": changed_irqs,
                  "skipped_managed": sorted(n for group in groups
                                            for n in group["skipped_managed"]),
                  "previous": {str(n): previous[n] for n in changed_irqs},
                  "groups": groups,
                  "irqbalance_restarted": self.restarted,
                  "steps": changes.descriptions if changes is not None else [],
                  "skipped_actions": self.skipped}
        if self.banned is not None:
            result["irqbalance_banned_cpus"] = format_cpulist(self.banned)
        if changes is not None and self.module._diff:
            result["diff"] = changes.diff()
        return result


def main():
    module = build_module()
    run_module(module, IrqPinner(module), changes_host=True)


if __name__ == "__main__":
    main()
