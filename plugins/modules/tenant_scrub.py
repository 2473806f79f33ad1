#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: tenant_scrub
short_description: Reset a released tenant's GPU and VF before another tenant can get them
version_added: "0.1.0"
description:
  - Reads the tenant's entry in the allocation ledger and wipes what the tenant leaves
    in its devices. Every PCI function of each of its GPUs (the HDA function too) is
    reset through sysfs (C(echo 1 > /sys/bus/pci/devices/<address>/reset); the kernel
    tries the methods in the device's C(reset_method), such as FLR, in order). Its SR-IOV
    VF, if it has one, gets MAC C(00:00:00:00:00:00), VLAN 0, spoof checking on and
    trust off, through the same C(ip link set dev <pf> vf <n>) steps as
    M(gpuhost.kvm.sriov_vfs).
  - Run it after the tenant's domain is removed and before M(gpuhost.kvm.tenant_ledger)
    releases the tenant (C(playbooks/tenant_offboard.yml) does). A refused or failed
    scrub leaves the tenant in the ledger, so its GPU is never placed for another
    tenant; the failure says which functions were reset before it stopped.
  - Refuses, before anything is written, a function that is not on vfio-pci (a host
    driver would use it while it is reset), one whose C(/dev/vfio/<group>) is still open
    (a domain still runs), one whose C(reset) file is a symbolic link, one that only a
    bus reset can reset while other devices share its bus (they would be reset too),
    and one without a usable reset method (unless O(allow_no_reset)).
  - A tenant the ledger does not hold has nothing to scrub (C(changed=false)).
  - After the resets, reads each GPU's state as the kernel shows it (whether it answers
    on its bus, its link width against its maximum, its fatal AER errors) into
    RV(unfit); M(gpuhost.kvm.tenant_ledger) quarantines such a GPU when it releases the
    tenant.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.change_attributes
options:
  name:
    description: The tenant, as named in the ledger (and its domain).
    type: str
    required: true
  ledger_path:
    description: The allocation ledger that holds the tenant (a host path, not resolved
      under O(root)).
    type: path
    default: /var/lib/gpuhost/ledger.json
  allow_no_reset:
    description:
      - Scrub a tenant whose GPU has a function without a usable reset method (no
        C(reset) file, or a C(reset_method) that lists no method), leaving that function
        as the tenant left it; a warning instead of a refusal. Whoever gets the GPU next
        may see what this tenant left in it. The same override as
        M(gpuhost.kvm.libvirt_pinned_domain)'s.
    type: bool
    default: false
notes:
  - A reset cannot be undone, so a scrub always resets (every run reports
    C(changed=true) for a tenant with a GPU). A VF step that fails after the resets sets
    the VF's old settings back; the resets stay done and are listed in RV(reset).
  - With O(root) other than C(/), the VF settings are not read or set (iproute2 works on
    the live host only); RV(skipped_actions) says so.
seealso:
  - module: gpuhost.kvm.tenant_ledger
  - module: gpuhost.kvm.iommu_groups_facts
  - name: Documentation/ABI/testing/sysfs-bus-pci
    description: The kernel's reset and reset_method files.
    link: https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-bus-pci
"""

EXAMPLES = r"""
- name: Wipe tenant-b's GPU and VF before its ledger entry is released
  gpuhost.kvm.tenant_scrub:
    name: tenant-b

- name: Show the resets it would do
  gpuhost.kvm.tenant_scrub:
    name: tenant-b
  check_mode: true
  diff: true
"""

RETURN = r"""
tenant:
  description: The tenant scrubbed.
  returned: always
  type: str
  sample: tenant-b
in_ledger:
  description: Whether the ledger holds the tenant (false, nothing to scrub).
  returned: always
  type: bool
  sample: true
devices:
  description: Each function of the tenant's GPUs, its reset methods and what the scrub
    does with it (C(reset), or C(not reset (allow_no_reset))).
  returned: always
  type: list
  elements: dict
  sample: [{address: "0000:41:00.0", reset_methods: [flr, bus], action: reset}]
reset:
  description: The functions reset by this run, in order (on failure, those reset
    before it stopped). Empty in check mode.
  returned: always
  type: list
  elements: str
  sample: ["0000:41:00.0", "0000:41:00.1"]
vf:
  description: The tenant's VF and the settings it is given back with; null without one.
  returned: always
  type: dict
  sample: {pf: "0000:03:00.0", netdev: eno1, index: 0, address: "0000:03:00.2",
           settings: {mac: "00:00:00:00:00:00", vlan: 0, spoofchk: true, trust: false},
           changed: true}
steps:
  description: The steps, in order (done, or to do in check mode).
  returned: always
  type: list
  elements: str
unfit:
  description:
    - Per GPU (first function) reset by this run, why the host finds it unfit for the next
      tenant after the reset; empty for a sound GPU. Not read in check mode.
  returned: always
  type: dict
  sample: {"0000:41:00.0": ["0000:41:00.0's link trained at x8, below its x16: it has a fraction of its bandwidth"]}
warnings_scrub:
  description: What was allowed by O(allow_no_reset).
  returned: always
  type: list
  elements: str
skipped_actions:
  description: What was left out because O(root) is not C(/).
  returned: always
  type: list
  elements: str
"""

import datetime

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.ledger import (
    DEFAULT_LEDGER_PATH, locked, quarantine, read_ledger, write_ledger)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import device_state, kernel_log
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import read_pci_functions
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    absolute_path, domain_name)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.tenant_scrub import (
    ScrubPlan, ledger_held_message, plan_scrub, tenant_entry)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.sysfs import validate_root
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter


def build_module():
    return new_module(
        AnsibleModule, argument_spec=argument_spec(
            ROOT_ARGUMENT_SPEC,
            name=dict(type="str", required=True),
            ledger_path=dict(type="path", default=DEFAULT_LEDGER_PATH),
            allow_no_reset=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )


class TenantScrub(PlannedChange):
    """Decides the scrub of one tenant, then applies it outside check mode."""

    def __init__(self, module, writer=None, runner=None):
        super(TenantScrub, self).__init__(module)
        self.params = module.params
        self.writer = writer or HostWriter(self.params["root"])
        self.runner = runner or (module.run_command if self.live else None)
        self.in_ledger = False
        self.ledger = None
        self.unfit = {}

    def decide(self):
        params = self.params
        domain_name(params["name"], field="name")
        validate_root(params["root"])
        path = absolute_path(params["ledger_path"], "ledger_path", kind="ledger file")
        # a shared lock: an onboarding writing the ledger now is waited for
        with locked(path, read_only=True, field="ledger_path"):
            data = read_ledger(path, "ledger_path")
        entry = tenant_entry(data, params["name"])
        self.in_ledger = entry is not None
        if entry is None:
            return ScrubPlan(params["name"], ChangeSet())
        self.ledger = (path, entry)
        held = {function for gpu in data.quarantine.values()
                for function in gpu.get("functions") or () if not gpu.get("wiped", True)}
        return plan_scrub(self.writer, read_pci_functions(params["root"]), entry,
                          params["allow_no_reset"], self.runner, quarantined=held)

    def apply(self):
        params = self.params
        path, entry = self.ledger
        # The kernel log's position before the resets: what it says after it, it says of them.
        before = kernel_log.read_kernel_log(params["root"])
        try:
            super(TenantScrub, self).apply()
        except GpuhostError as err:
            details = dict(err.details or {}, reset=list(self.plan.reset))
            message = ledger_held_message(params["name"], err)
            fix = err.fix or "see the failed step, fix it and run the offboarding again"
            if self.plan.failed_reset:
                gpu = self.quarantine_failed_reset(path, entry)
                details["quarantined"] = gpu
                message += ("; GPU %s is quarantined in the ledger (its reset failed), so nobody "
                            "gets it with what the tenant left in it" % gpu)
                fix = ("run the offboarding again: it releases the tenant without resetting %s "
                       "again; then bring the GPU back and wipe it with tenant_ledger's recover "
                       "and recover_action reset" % gpu)
            raise GpuhostError(message, field=err.field, fix=fix, details=details)
        log = kernel_log.read_kernel_log(params["root"]) if before is not None else None
        for gpu in entry.get("gpus") or ():
            address = gpu.get("address") if isinstance(gpu, dict) else None
            if address in self.plan.reset:
                try:
                    state = device_state.read_device_state(
                        address, params["root"], kernel_log=log, log_since=before.mark() if log else None)
                    self.unfit[address] = device_state.unfit_reasons(state)
                except GpuhostError as err:
                    self.unfit[address] = [err.msg]

    def quarantine_failed_reset(self, path, entry):
        """Quarantine the GPU whose function's reset failed, as not wiped, under the
        ledger's lock; its address."""
        function, error = self.plan.failed_reset
        gpus = {}
        for gpu in entry.get("gpus") or ():
            functions = list(gpu.get("functions") or [gpu.get("address")])
            gpus[gpu.get("address")] = functions
        gpu = next((address for address, functions in gpus.items() if function in functions), function)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        with locked(path, field="ledger_path"):
            data = read_ledger(path, "ledger_path")
            write_ledger(path, quarantine(
                data, {gpu: ["the reset of %s failed when tenant %s left: %s"
                             % (function, self.params["name"], error.strerror or error)]},
                self.params["name"], now, functions={gpu: gpus.get(gpu, [gpu])}, wiped=False))
        return gpu

    @property
    def done(self):
        """A reset done before a failure cannot be rolled back: it counts as a change."""
        return super(TenantScrub, self).done or bool(self.plan and self.plan.reset)

    @property
    def result(self):
        plan = self.plan
        return self.change_result(
            tenant=self.params["name"], in_ledger=self.in_ledger,
            devices=list(plan.devices) if plan else [],
            reset=list(plan.reset) if plan else [],
            vf=plan.vf if plan else None,
            warnings_scrub=list(plan.warnings) if plan else [],
            unfit=dict(self.unfit),
            skipped_actions=list(plan.skipped) if plan else [])


def main():
    module = build_module()
    # not changes_host: a reset done before a failure cannot be rolled back, and the
    # result's changed says whether one was done
    run_module(module, TenantScrub(module))


if __name__ == "__main__":
    main()
