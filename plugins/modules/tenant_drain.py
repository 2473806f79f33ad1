#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tenant_drain: refuse a host reboot while domains run, or drain them around it."""

DOCUMENTATION = r"""
---
module: tenant_drain
short_description: Refuse a host reboot while tenant domains run, or shut them down around it and start them again
version_added: "0.1.0"
description:
  - A reboot stops every running libvirt domain. This module is what the roles run
    before they reboot the host, so that a reboot never surprises a tenant.
  - Domains that are tenants of this collection are recognised by name in the
    allocation ledger (O(ledger_path)); the vm role names each domain after its tenant.
    A running domain the ledger does not hold blocks a reboot and is drained the same
    way, because the reboot would stop it too; the result tells the two apart.
  - With O(state=checked), lists the running domains and fails when there are any,
    naming them and saying how to proceed (drain them, or stop them), unless
    O(fail_when_running=false). Changes nothing.
  - With O(state=drained), records the running domains in O(record_path), then asks each
    one to shut down gracefully (ACPI, as C(virsh shutdown)), tenants first, by name,
    and waits up to O(timeout) seconds from each request for it to power off. A domain
    still running then is handled as O(on_timeout) says. A paused or suspended domain,
    which cannot act on the request, is refused before anything is done.
  - With O(state=restored), starts again exactly the domains the record holds for O(uri)
    that are off, and takes every recorded domain that runs (started here or by
    libvirt's autostart at boot) off the record.
options:
  state:
    description:
      - V(checked) reports (and by default refuses) running domains.
      - V(drained) shuts the running domains down and records them.
      - V(restored) starts the recorded domains again.
    type: str
    choices: [checked, drained, restored]
    default: checked
  fail_when_running:
    description:
      - With O(state=checked), fail when any domain runs. V(false) returns the list
        (RV(running)) without failing.
    type: bool
    default: true
  timeout:
    description:
      - Seconds each domain has, from its own shutdown request, to power off. More than
        0, at most 86400.
    type: float
    default: 300
  on_timeout:
    description:
      - What happens to a domain still running when its O(timeout) has passed.
      - >-
        V(fail) undoes the drain: the domains already off are started again, the late
        ones are left running (they got the request and may still act on it), the
        record is taken back, and the task fails naming the late domains. The host is
        not rebooted.
      - >-
        V(destroy) forces the late domains off (as C(virsh destroy): like pulling the
        power cord, the guest loses what it did not write to disk) and names them in
        RV(destroyed). They are recorded and started again by O(state=restored) like
        the others.
    type: str
    choices: [fail, destroy]
    default: fail
  ledger_path:
    description:
      - The allocation ledger whose tenants are this collection's domains (a host path).
        A missing ledger holds no tenant; an unreadable one is a warning, and every
        domain is then reported as not in the ledger.
    type: path
    default: /var/lib/gpuhost/ledger.json
  record_path:
    description:
      - The state file that lists the domains a drain stopped until a restore starts
        them again (a host path). Written through the collection's locked state-file
        writer, merged per domain, so a second drain before the restore keeps the first
        one's domains.
    type: path
    default: /var/lib/gpuhost/drain.json
extends_documentation_fragment:
  - gpuhost.kvm.libvirt
notes:
  - >-
    With the default O(uri) on a host where libvirt cannot be reached (not installed yet,
    daemon stopped), the module reads libvirt's status directory C(/run/libvirt/qemu):
    without a C(.pid) file there no domain runs, and it warns and reports none;
    otherwise it fails, since it cannot tell which domains a reboot would stop.
  - The record is written before the first shutdown request, so a run killed during the
    drain still leaves the restore the names it needs.
  - libvirt's autostart starts domains marked autostart at boot by itself, including
    ones that were shut off before the drain; this module starts only recorded ones.
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Reports the domains it would shut down or start (RV(to_stop), RV(to_start))
      and the steps; shuts down, starts and writes nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
    details: Shows each domain's state before and after, and the record file.
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: linux
author:
  - gpuhost.kvm contributors (@gpuhost)
seealso:
  - module: gpuhost.kvm.tenant_ledger
  - module: gpuhost.kvm.libvirt_pinned_domain
"""

EXAMPLES = r"""
- name: Refuse to go on while domains run (the reboot would stop them)
  gpuhost.kvm.tenant_drain:
    state: checked

- name: List the running domains without failing
  gpuhost.kvm.tenant_drain:
    state: checked
    fail_when_running: false
  register: running_domains

- name: Shut the tenants down gracefully, giving each 10 minutes, and force late ones off
  gpuhost.kvm.tenant_drain:
    state: drained
    timeout: 600
    on_timeout: destroy

- name: Reboot the host
  ansible.builtin.reboot:

- name: Start again the domains the drain stopped
  gpuhost.kvm.tenant_drain:
    state: restored
"""

RETURN = r"""
running:
  description:
    - The active domains a reboot would stop, tenants first, each by name, as found when
      the module started.
    - Empty with O(state=restored) when nothing is recorded (libvirt is then not asked).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Domain name.
      type: str
      sample: tenant-a100
    state:
      description: libvirt's state, in virsh's words.
      type: str
      sample: running
    tenant:
      description: Whether the allocation ledger holds a tenant of this name.
      type: bool
    autostart:
      description: Whether libvirt starts the domain at boot by itself.
      type: bool
to_stop:
  description: With O(state=drained), the domains asked to shut down, in the order of the requests (planned in check mode).
  returned: always
  type: list
  elements: str
  sample: [tenant-a100, tenant-b]
stopped:
  description: Domains that powered off after the graceful request.
  returned: always
  type: list
  elements: str
destroyed:
  description: Domains forced off because their O(timeout) passed (O(on_timeout=destroy)).
  returned: always
  type: list
  elements: str
late:
  description: Domains still running when their O(timeout) passed.
  returned: always
  type: list
  elements: str
restarted:
  description: After a failed drain (O(on_timeout=fail)), the domains it had shut down and started again.
  returned: always
  type: list
  elements: str
to_start:
  description: With O(state=restored), the recorded domains that are off (planned in check mode).
  returned: always
  type: list
  elements: str
started:
  description: Domains this restore started.
  returned: always
  type: list
  elements: str
already_running:
  description: Recorded domains found running (libvirt's autostart started them); taken off the record.
  returned: always
  type: list
  elements: str
pending_restore:
  description: The domains the record holds for O(uri) after this call, which a restore would start.
  returned: always
  type: list
  elements: str
record_path:
  description: The record file.
  returned: always
  type: str
  sample: /var/lib/gpuhost/drain.json
steps:
  description: The planned (check mode) or applied steps, in order.
  returned: always
  type: list
  elements: str
field:
  description: On failure, the option at fault, or the one that decides (O(state), O(timeout)).
  returned: failure
  type: str
details:
  description: On failure, the names concerned (C(running), C(late) and C(restarted), C(missing), C(cannot_shut_down)).
  returned: failure
  type: dict
"""

import functools
import os
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import tenant_drain as core
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.ledger import (
    DEFAULT_LEDGER_PATH, read_ledger)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.libvirt_conn import (
    DEFAULT_URI, HAS_LIBVIRT, LIBVIRT_IMPORT_ERROR, LIBVIRT_REQUIREMENT, libvirt,
    libvirt_error_text, open_connection)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, StepPlan, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import (
    ChangeSet, ChangeSetError)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter


def build_module():
    return new_module(
        AnsibleModule, argument_spec=dict(
            state=dict(type="str", choices=["checked", "drained", "restored"],
                       default="checked"),
            uri=dict(type="str", default=DEFAULT_URI),
            fail_when_running=dict(type="bool", default=True),
            timeout=dict(type="float", default=300.0),
            on_timeout=dict(type="str", choices=list(core.ON_TIMEOUT), default="fail"),
            ledger_path=dict(type="path", default=DEFAULT_LEDGER_PATH),
            record_path=dict(type="path", default=core.DEFAULT_RECORD_PATH),
        ),
        supports_check_mode=True,
    )


class LibvirtDomains:
    """The host's domains through one libvirt connection: what the core decides on, and
    the actions a drain and a restore take. Every libvirt failure becomes a GpuhostError
    naming the domain, so a change set rolls back and the task says what to look at."""

    def __init__(self, conn):
        self.conn = conn

    def read(self, tenants):
        found = []
        for domain in self.conn.listAllDomains(0) if self.conn is not None else ():
            try:
                code = domain.state()[0]
                active = bool(domain.isActive())
                name = domain.name()
            except libvirt.libvirtError:
                continue                     # undefined while we looked
            try:
                autostart = bool(domain.autostart())
            except libvirt.libvirtError:
                autostart = False            # a transient domain has no autostart
            found.append(core.Domain(name=name, state=core.state_name(code), active=active,
                                     autostart=autostart, tenant=name in tenants))
        return found

    def _call(self, name, what, action):
        try:
            return action(self.conn.lookupByName(name))
        except libvirt.libvirtError as exc:
            raise GpuhostError("cannot %s %s: %s" % (what, name, libvirt_error_text(exc)),
                               field="uri",
                               fix="see /var/log/libvirt/qemu/%s.log and the daemon's "
                                   "journal" % name)

    def is_active(self, name):
        return self._call(name, "read the state of", lambda d: bool(d.isActive()))

    def request_shutdown(self, name):
        self._call(name, "ask a shutdown of", lambda d: d.shutdown())

    def destroy_if_active(self, name):
        """Force ``name`` off; False when it powered off by itself meanwhile."""
        def destroy(domain):
            if not domain.isActive():
                return False
            domain.destroy()
            return True
        return self._call(name, "force off", destroy)

    def start_if_off(self, name):
        """Start ``name``; False when it already runs."""
        def start(domain):
            if domain.isActive():
                return False
            domain.create()
            return True
        return self._call(name, "start", start)


class TenantDrain(PlannedChange):
    """One tenant_drain call: read the domains, decide, then (outside check mode) act.
    ``result`` is the same on success and failure."""

    def __init__(self, module, conn=None, clock=time.monotonic, sleep=time.sleep,
                 status_dir=core.QEMU_STATUS_DIR):
        super(TenantDrain, self).__init__(module)
        self.params = module.params
        self.conn = conn
        self.clock = clock
        self.sleep = sleep
        self.status_dir = status_dir
        self.writer = HostWriter("/")
        self.libvirt = None
        self.spec = None
        self.domains = []
        self.record = None
        self.record_text = None
        self.changes = ChangeSet()
        self.changed = False
        self.to_stop, self.stopped, self.destroyed, self.late, self.restarted = [], [], [], [], []
        self.to_start, self.started, self.already_running = [], [], []
        self.pending = []
        self.pending_before = []    # what a rolled-back drain leaves pending
        self.timeout = None         # the drain's timeout, checked
        self.missing = []           # recorded domains that libvirt no longer defines
        self.domain_diff = None

    # ------------------------------------------------------------------ reading

    def connect(self):
        """The connection, or None on a host where libvirt cannot be reached and its
        status directory shows that no domain runs (a host not set up yet)."""
        if self.conn is not None:
            return self.conn
        uri = self.params["uri"]
        try:
            return open_connection(uri)
        except GpuhostError as err:
            if uri != DEFAULT_URI:
                raise
            try:
                running = core.qemu_status_names(os.listdir(self.status_dir))
            except FileNotFoundError:
                running = []
            if running:
                raise GpuhostError(
                    "%s; %s shows running domain(s) %s, which a reboot would stop"
                    % (err.msg, self.status_dir, ", ".join(running)), field="uri",
                    fix=err.fix)
            self.module.warn("libvirt at %s cannot be reached (%s) and %s lists no running "
                             "domain: there is nothing to drain" % (uri, err.msg,
                                                                    self.status_dir))
            return None

    def tenants(self):
        try:
            return set(read_ledger(self.params["ledger_path"]).names())
        except GpuhostError as err:
            # The names only label the domains; every running domain is handled alike,
            # so an unreadable ledger must not stand in the way of a maintenance.
            self.module.warn("cannot read the tenants of the allocation ledger (%s): every "
                             "domain is reported as not in the ledger" % err.message)
            return set()

    # ------------------------------------------------------------------ run

    def decide(self):
        params = self.params
        core.check_path(params["ledger_path"], "ledger_path")
        core.check_path(params["record_path"], "record_path")
        if params["state"] == "drained":
            core.check_timeout(params["timeout"])
            core.check_on_timeout(params["on_timeout"])
        self.spec = core.record_spec(params["record_path"])
        self.record = self.spec.read(self.writer)
        self.pending = core.recorded(self.record, params["uri"])
        if params["state"] == "restored" and not self.pending:
            return StepPlan(self.changes)    # nothing recorded: no need for libvirt
        self.libvirt = LibvirtDomains(self.connect())
        self.domains = self.libvirt.read(self.tenants())
        if params["state"] == "checked":
            running = core.running(self.domains)
            if running and params["fail_when_running"]:
                raise core.reboot_refusal(running)
        elif params["state"] == "drained":
            self.plan_drain()
        else:
            if self.libvirt.conn is None:
                raise GpuhostError(
                    "%s lists %s to start again, but libvirt at %s cannot be reached"
                    % (params["record_path"], ", ".join(self.pending), params["uri"]),
                    field="uri", fix="start libvirt (systemctl start libvirtd) and run again")
            self.plan_restore()
        return StepPlan(self.changes)

    def run(self):
        super(TenantDrain, self).run()
        if self.missing:
            raise core.missing_error(self.missing, self.params["record_path"])

    def apply(self):
        try:
            super(TenantDrain, self).apply()
        except ChangeSetError as err:
            if self.params["state"] == "drained":
                # Rolled back: the domains that went off are running again and the
                # record is as it was, so the host is as the run found it.
                self.changed = bool(err.details.get("rollback_failed"))
                if not self.changed:
                    self.pending = self.pending_before
                if self.late and not self.changed:
                    raise core.timeout_error(self.late, self.timeout, self.restarted)
            else:
                # The record step is last: it did not run, so the record still holds
                # every name; the domains started before the failure stay up.
                self.changed = bool(self.started)
                self.pending = core.recorded(self.record, self.params["uri"])
            raise

    def plan_drain(self):
        params = self.params
        plan = core.plan_drain(self.domains, params["timeout"], params["on_timeout"])
        self.timeout = plan.timeout
        self.to_stop = list(plan.order)
        if not plan:
            return
        requested_at = {}
        self.changes.put_state(self.writer, self.spec, self.record,
                               core.record_with(self.record, plan, params["uri"]))
        for name in plan.order:
            self.changes.add("ask %s to shut down (ACPI)" % name,
                             functools.partial(self._request, name, requested_at),
                             functools.partial(self._restart, name))
        self.changes.add("wait up to %s s for %s to power off (%s)"
                         % (core.seconds_text(plan.timeout), ", ".join(plan.order),
                            "late ones are forced off" if plan.on_timeout == "destroy"
                            else "a late one undoes the drain"),
                         functools.partial(self._wait, plan, requested_at))
        self.domain_diff = self._diff_states(plan.order, "shut off")
        self.changed = True
        self.pending_before = self.pending
        self.pending = core.recorded(core.record_with(self.record, plan, params["uri"]),
                                     params["uri"])

    def _request(self, name, requested_at):
        requested_at[name] = self.clock()
        self.libvirt.request_shutdown(name)

    def _restart(self, name):
        if self.libvirt.start_if_off(name):
            self.restarted.insert(0, name)   # undone newest first: keep the plan's order

    def _wait(self, plan, requested_at):
        self.late = core.wait_until_off(requested_at, self.libvirt.is_active, plan.timeout,
                                        self.clock, self.sleep)
        self.stopped = [name for name in plan.order if name not in self.late]
        if not self.late:
            return
        if plan.on_timeout == "fail":
            raise GpuhostError("%s still running" % ", ".join(self.late), field="timeout")
        for name in self.late:
            if self.libvirt.destroy_if_active(name):
                self.destroyed.append(name)
            else:
                self.stopped.append(name)    # powered off between the look and the force
        self.module.warn("forced off after %s s without powering off (on_timeout=destroy): %s"
                         % (core.seconds_text(plan.timeout), ", ".join(self.destroyed)))

    def plan_restore(self):
        params = self.params
        plan = core.plan_restore(self.record, self.domains, params["uri"])
        self.to_start = list(plan.start)
        self.already_running = list(plan.already_running)
        for name in plan.start:
            # No undo: a tenant started here stays up even if a later start fails; the
            # record step comes last, so a rerun finds it running and only drops it.
            self.changes.add("start %s" % name, functools.partial(self._start, name))
        self.changes.put_state(self.writer, self.spec, self.record,
                               core.record_without(self.record, plan.settled))
        self.domain_diff = self._diff_states(plan.start, "running")
        self.changed = bool(self.changes)
        self.pending = list(plan.missing)
        self.missing = list(plan.missing)

    def _start(self, name):
        if self.libvirt.start_if_off(name):
            self.started.append(name)

    def _diff_states(self, names, after):
        states = {d.name: d.state for d in self.domains}
        if not names:
            return None
        return {"before_header": "libvirt domains at %s" % self.params["uri"],
                "after_header": "libvirt domains at %s" % self.params["uri"],
                "before": "".join("%s: %s\n" % (n, states.get(n, "absent")) for n in names),
                "after": "".join("%s: %s\n" % (n, after) for n in names)}

    @property
    def result(self):
        result = {"changed": self.changed,
                  "running": [d.as_dict() for d in core.running(self.domains)],
                  "to_stop": self.to_stop, "stopped": self.stopped,
                  "destroyed": self.destroyed, "late": self.late,
                  "restarted": self.restarted, "to_start": self.to_start,
                  "started": self.started, "already_running": self.already_running,
                  "pending_restore": self.pending,
                  "record_path": self.params["record_path"],
                  "steps": self.changes.descriptions}
        if self.module._diff:
            result["diff"] = ([self.domain_diff] if self.domain_diff else []) \
                + self.changes.diff()
        return result


def main():
    module = build_module()
    if not HAS_LIBVIRT and module.params["uri"] != DEFAULT_URI:
        module.fail_json(msg=missing_required_lib(LIBVIRT_REQUIREMENT),
                         exception=LIBVIRT_IMPORT_ERROR)
    run_module(module, TenantDrain(module))


if __name__ == "__main__":
    main()
