#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: tenant_ledger
short_description: Reserve or release tenants' GPUs, cores, VFs and hugepages in the host's allocation ledger
version_added: "0.1.0"
description:
  - Keeps the allocation ledger of a GPU host, a JSON file on the host
    (C(/var/lib/gpuhost/ledger.json)), and returns the host's placement plan
    (see C(docs/plan-format.md)) with every tenant in the ledger.
  - With I(state=present), takes an exclusive lock on the ledger, re-reads it, plans the
    requested tenants around the tenants already in it with the C(numa_cpuset) planner
    (tenants already placed keep their pins unchanged), refuses any conflict with a
    message that names the tenant holding the resource, and writes the new ledger
    atomically (temporary file, fsync, rename) before releasing the lock. Two onboardings
    started at the same time therefore get different GPUs, cores and VFs, or one of them
    fails cleanly.
  - With I(state=absent), removes the named tenants from the ledger. A released tenant's
    GPU that the host finds unfit for the next tenant (it does not answer on its bus, it
    reported fatal AER errors since it was last sound, or its link trained narrower than
    it can go) is quarantined in the same write, with the reasons, and no onboarding gets it
    (a count skips it, naming it is refused) until O(recover) finds it sound.
  - A ledger that is truncated, not JSON, or fails its checksum is reported with recovery
    steps and never reset.
options:
  path:
    description:
      - The ledger file on the managed host, an absolute path (a relative one is
        refused). Its directory is created (mode 0700).
    type: path
    default: /var/lib/gpuhost/ledger.json
  state:
    description:
      - C(present) reserves I(tenants); C(absent) releases I(names).
    type: str
    choices: [present, absent]
    default: present
  tenants:
    description:
      - Tenant definitions (C(gpuhost_tenants) entries). Only the request keys
        C(name), C(gpus), C(vcpus), C(memory_gib), C(hugepage_size), C(nic_vf),
        C(iothreads) and C(emulator_policy) reach the planner; other keys (SSH keys,
        guest network) are ignored here.
      - A tenant already in the ledger must be requested exactly as it was placed.
      - Required with I(state=present) unless O(recover) is given; an empty list returns
        the ledger's plan.
    type: list
    elements: dict
  recover:
    description:
      - Quarantined GPUs (PCI addresses) to read again, with I(state=present), after the
        operator brought them back (a reset, or a remove and rescan). Each one the host
        now finds sound leaves the quarantine, before the O(tenants) of the same call are
        placed; one still unfit stays, with what the new read shows (RV(still_unfit)).
      - The fatal AER errors counted when it was quarantined are not held against it
        again (the kernel's counters only grow until the function is removed and found
        again).
      - A GPU whose reset failed when its tenant left (M(gpuhost.kvm.tenant_scrub)
        quarantines it) may hold what that tenant left, so only O(recover_action=reset)
        lifts its quarantine.
    type: list
    elements: str
  recover_action:
    description:
      - What O(recover) does before it reads the GPUs again. V(read) only reads them
        (after the operator brought them back by hand). V(reset) first resets every
        function of each GPU through sysfs, as M(gpuhost.kvm.tenant_scrub) does, with
        its refusals (a function not on vfio-pci or still in use, without a usable reset
        method, or whose bus reset would reach other devices); a GPU whose reset fails
        stays quarantined. V(rescan) first removes every function of each GPU from the
        kernel and rescans the bridge above it (as one brings back a GPU that fell off its
        bus), refused while a function is on a host driver or held open; the functions
        found again on vfio-pci are then reset as with V(reset), and a GPU found on
        another driver stays quarantined, named. Check mode lists the steps and lifts
        nothing.
    type: str
    choices: [read, reset, rescan]
    default: read
  fabric_partitions:
    description:
      - On an NVSwitch board in NVIDIA's shared-NVSwitch model, Fabric Manager's NVLink
        partitions as M(gpuhost.kvm.fabric_partition) reads them (its C(partitions) result, with
        C(id), C(gpus), C(active)). Each new tenant with the board's GPUs then gets
        exactly the GPUs of one partition whose GPUs are free, clean and on one NUMA
        node, and its plan entry names it (C(fabric_partition)), which the vm stage
        activates before the domain starts.
      - Without it, a tenant with several of the board's GPUs is refused (its guest's
        CUDA would fail with error 802); a one-GPU tenant is placed as on any host.
    type: list
    elements: dict
  nvswitch_model:
    description:
      - NVIDIA's passthrough model of an NVSwitch board. Unset, it is V(shared) when
        O(fabric_partitions) is given and V(none) otherwise.
      - V(full) gives one tenant the whole board, its GPUs and NVSwitches, with one guest
        NUMA cell per NUMA node the board's GPUs sit on (the plan entry's C(guest_cells));
        a tenant with part of the board is refused. Its guest runs Fabric Manager.
    type: str
    choices: [none, shared, full]
  names:
    description:
      - Names of the tenants to release. Required with I(state=absent).
      - A tenant whose vfio groups a process (its domain's QEMU) still holds open is
        refused, and nothing is released, since the next tenant would get devices in use.
        Offboard it first (M(gpuhost.kvm.tenant_scrub) refuses such a tenant too).
    type: list
    elements: str
  smt_policy:
    description: The SMT policy (Nova's meanings); must stay the same while tenants run.
    type: str
    choices: [require, prefer, isolate]
    default: require
  housekeeping:
    description:
      - >-
        Housekeeping CPUs per NUMA node, as C({"0": "0,32"}). Default the first core of
        every node. Once tenants are in the ledger, the housekeeping they were placed with
        is kept, and a different value is refused.
    type: dict
  hugepage_check:
    description:
      - How the planner checks hugepages for new tenants (see the planner). C(memory)
        accepts pages that the numa role can still reserve from free memory.
    type: str
    choices: [memory, free, none]
    default: memory
  lock_timeout:
    description: Seconds to wait for another run's lock before failing.
    type: float
    default: 60
  allow_acs_override:
    description:
      - Place GPUs and VFs although C(pcie_acs_override) is on the kernel command line.
        Its IOMMU groups are split by the kernel, not isolated by the hardware, so this
        is for single-tenant hosts only.
    type: bool
    default: false
  vf_count:
    description:
      - How many VFs the SR-IOV stage gives each PF
        (O(gpuhost.kvm.sriov_vfs#module:num_vfs)). VFs that do not exist yet are planned at the addresses the kernel
        will give them (the PF's routing ID plus C(sriov_offset) and C(sriov_stride)),
        existing VFs first. Default every VF the PF offers (C(sriov_totalvfs)).
    type: int
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.gpu_selection
notes:
  - The ledger O(path) is a host path; it is not resolved under O(root).
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Plans under the lock and reports the ledger it would write; writes nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
    details: Shows the ledger's tenant names and their allocations before and after.
author:
  - gpuhost.kvm contributors (@gpuhost)
"""

EXAMPLES = r"""
- name: Reserve the host's tenants and get the plan
  gpuhost.kvm.tenant_ledger:
    state: present
    tenants: "{{ gpuhost_tenants }}"
    smt_policy: require
  register: ledger

- name: Onboard one more tenant without moving the others
  gpuhost.kvm.tenant_ledger:
    state: present
    tenants:
      - name: tenant-b
        gpus: 1
        vcpus: 8
        memory_gib: 32
        hugepage_size: 1G
        nic_vf: true

- name: Release a tenant
  gpuhost.kvm.tenant_ledger:
    state: absent
    names: [tenant-b]

- name: Read a quarantined GPU again after a remove and rescan
  gpuhost.kvm.tenant_ledger:
    state: present
    recover: ["0000:41:00.0"]
"""

RETURN = r"""
plan:
  description: The host's placement plan with every tenant in the ledger (docs/plan-format.md).
  returned: always
  type: dict
layout:
  description: The host's NUMA nodes with their cores, GPUs and SR-IOV PFs, for plan pictures.
  returned: always
  type: dict
  sample: {"cpu_vendor": "GenuineIntel", "nodes": {"0": {"cpus": "0-15,32-47", "cores": [[0, 32]]}}}
allocated:
  description: Tenants added to the ledger by this call.
  returned: always
  type: list
  elements: str
released:
  description: Tenants removed from the ledger by this call.
  returned: always
  type: list
  elements: str
quarantined:
  description: GPUs this call quarantined, with the reasons (I(state=absent)).
  returned: always
  type: dict
  sample: {"0000:41:00.0": ["0000:41:00.0 does not answer on its bus (its configuration space reads all ones): it fell off the bus"]}
lifted:
  description: GPUs of O(recover) that left the quarantine.
  returned: always
  type: list
  elements: str
still_unfit:
  description: GPUs of O(recover) that stay quarantined, with what the host shows now.
  returned: always
  type: dict
recovery_steps:
  description: The removals, rescans and resets of O(recover_action), in order (done, or to do in check mode).
  returned: always
  type: list
  elements: str
quarantine:
  description: Every quarantined GPU after this call, with its reasons, the tenant that
    held it last, when, its fatal AER count then, its functions and whether that tenant's
    state was wiped from it.
  returned: always
  type: dict
ledger:
  description: The ledger after this call.
  returned: always
  type: dict
  sample: {"path": "/var/lib/gpuhost/ledger.json", "serial": 3, "tenants": ["tenant-a100"]}
"""

import datetime
import functools
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.tenant_scrub import (
    plan_rescan, plan_scrub, tenant_entry, tenant_functions)
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.vfio_bind import current_driver
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import VFIO_PCI
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import read_pci_functions
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    GPU_SELECTION_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import device_state, kernel_log
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import GpuSelection, normalize_address
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy.host_safety import (
    check_devices_free)
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger as ledger_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.plan_layout import layout_from_topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, StepPlan, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology


def build_module():
    return new_module(
        AnsibleModule, argument_spec=argument_spec(
            GPU_SELECTION_ARGUMENT_SPEC,
            path=dict(type="path", default=ledger_core.DEFAULT_LEDGER_PATH),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            tenants=dict(type="list", elements="dict"),
            names=dict(type="list", elements="str"),
            smt_policy=dict(type="str", choices=["require", "prefer", "isolate"],
                            default="require"),
            housekeeping=dict(type="dict"),
            hugepage_check=dict(type="str", choices=["memory", "free", "none"],
                                default="memory"),
            lock_timeout=dict(type="float", default=60.0),
            allow_acs_override=dict(type="bool", default=False),
            vf_count=dict(type="int"),
            root=dict(type="path", default="/"),
            recover=dict(type="list", elements="str"),
            recover_action=dict(type="str", choices=["read", "reset", "rescan"], default="read"),
            fabric_partitions=dict(type="list", elements="dict"),
            nvswitch_model=dict(type="str", choices=["none", "shared", "full"]),
        ),
        required_if=[("state", "present", ["tenants", "recover"], True), ("state", "absent", ["names"])],
        mutually_exclusive=[("tenants", "names")],
        supports_check_mode=True,
    )


def _marks(log, reads):
    """{address: the kernel log's position now} for the GPUs read (none without a log)."""
    if log is None:
        return {}
    return {address: log.mark() for address, read in reads.items() if not isinstance(read, GpuhostError)}


def _gpu_addresses(entry):
    """The GPU (first function) addresses of a ledger tenant entry."""
    return [normalize_address(gpu["address"], field="names") for gpu in (entry or {}).get("gpus") or ()
            if isinstance(gpu, dict) and gpu.get("address")]


def _gpu_functions(entry):
    """{GPU address: its functions} of a ledger tenant entry."""
    return {normalize_address(gpu["address"], field="names"):
            [normalize_address(function, field="names") for function in gpu.get("functions") or [gpu["address"]]]
            for gpu in (entry or {}).get("gpus") or () if isinstance(gpu, dict) and gpu.get("address")}


def _summary(data):
    return {t["name"]: {"node": t.get("node"),
                        "gpus": [g.get("address") for g in t.get("gpus") or ()],
                        "cpus": t.get("dedicated_cpus"),
                        "vf": (t.get("vf") or {}).get("address")}
            for t in data.tenants}


class TenantLedger(PlannedChange):
    """One call: lock, read, plan, write (unless check mode), unlock. A recovery acts
    before the plan is made (a quarantined GPU is rescanned or reset, then read again),
    since what it finds decides which GPUs the plan may give; the ledger's write is the
    plan's one step."""

    def __init__(self, module, writer=None):
        super(TenantLedger, self).__init__(module)
        self.params = module.params
        self.writer = writer or HostWriter(module.params["root"])
        self.recovery_steps = []
        self.rescan_steps = []
        # An OSError the ledger code did not name (a disk that fills up mid-write).
        self.os_error_message = "cannot update the allocation ledger %s: %%s" % module.params["path"]
        self.changed = False
        self.placement = {}
        self.layout = {}
        self.selection = None
        self.recover = []
        self.topology = None
        self.allocated = []
        self.released = []
        self.before = None
        self.after = None
        self.serial = None
        self.quarantined = {}
        self.lifted = []
        self.still_unfit = {}
        self.quarantine = {}

    def run(self):
        params = self.params
        # Bad input is refused before the lock: nothing (not even the ledger's folder or
        # lock file) is created for a request that cannot be planned.
        # The ledger's path first: a relative one would be written into whatever folder
        # the module runs in.
        ledger_core.ledger_path(params["path"])
        selection = GpuSelection.from_options(params["gpu_devices"], params["gpu_devices_only"])
        if params["state"] == "present":
            ledger_core.validate_tenants(params["tenants"])
        else:
            ledger_core.validate_names(params["names"])
        self.recover = [normalize_address(address, field="recover[%d]" % index)
                        for index, address in enumerate(params["recover"] or ())]
        self.selection = selection
        self.topology = read_host_topology(params["root"], with_irqs=False)
        self.layout = layout_from_topology(self.topology, selection)
        with ledger_core.locked(params["path"], timeout=params["lock_timeout"],
                                read_only=self.module.check_mode) as lock:
            super(TenantLedger, self).run()
            if not os.path.exists(params["path"]):
                lock.discard()     # no ledger written: no folder, no lock file either

    def decide(self):
        params, selection, recover, topology = self.params, self.selection, self.recover, self.topology
        current = ledger_core.read_ledger(params["path"])
        # what the file holds: a recovery below replaces ``current`` with its lifts
        on_disk = current
        self.before = _summary(current)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if recover:
            # Read again first: a GPU the host finds sound leaves the quarantine before
            # the tenants of this same call are placed, and may be given to one. The
            # fatal AER errors counted when it was quarantined are not held again.
            self.check_quarantined(current, recover)
            off_vfio = {}
            if params["recover_action"] == "rescan":
                off_vfio = self.rescan_quarantined(current, recover)
            reset_done = self.reset_quarantined(
                current, [address for address in recover if address not in off_vfio]) \
                if params["recover_action"] in ("reset", "rescan") else ()
            log = kernel_log.read_kernel_log(params["root"])
            reads = {address: self.read(address, log, current.quarantine.get(address, {})
                                        .get("kernel_log_mark"))
                     for address in recover}
            current, self.lifted, self.still_unfit = ledger_core.lift_quarantine(
                current, {address: self.unfit(address, read, current.quarantine.get(address, {})
                                              .get("fatal_aer", 0)) + off_vfio.get(address, [])
                          for address, read in reads.items()},
                {address: device_state.fatal_count(read) for address, read in reads.items()
                 if not isinstance(read, GpuhostError)}, reset_done,
                log_marks=_marks(log, reads))
        if params["state"] == "present" and params["tenants"]:
            new, self.placement, self.allocated = ledger_core.reserve(
                current, topology, params["tenants"], smt_policy=params["smt_policy"],
                housekeeping=params["housekeeping"],
                hugepage_check=params["hugepage_check"],
                allow_acs_override=params["allow_acs_override"],
                vf_count=params["vf_count"], gpu_selection=selection,
                fabric_partitions=params["fabric_partitions"],
                nvswitch_model=params["nvswitch_model"])
        elif params["state"] == "present":
            new, self.placement = current, ledger_core.release(
                current, topology, [], gpu_selection=selection)[1]
        else:
            self.refuse_held(current, topology)
            new, self.placement, self.released = ledger_core.release(
                current, topology, params["names"], gpu_selection=selection)
            # A GPU the tenant left broken (off the bus, fatal AER errors, a narrower
            # link) is released into the quarantine, in the same write.
            log = kernel_log.read_kernel_log(params["root"]) if self.released else None
            for name in self.released:
                reads = {address: self.read(address, log, current.kernel_log_marks.get(address))
                         for address in _gpu_addresses(tenant_entry(current, name))}
                unfit = {address: self.unfit(address, read, current.aer_baseline.get(address, 0))
                         for address, read in reads.items()}
                unfit = {address: reasons for address, reasons in unfit.items() if reasons}
                self.quarantined.update(unfit)
                new = ledger_core.quarantine(new, unfit, name, now, {
                    address: device_state.fatal_count(read) for address, read in reads.items()
                    if address in unfit and not isinstance(read, GpuhostError)},
                    functions=_gpu_functions(tenant_entry(current, name)),
                    log_marks=_marks(log, {a: r for a, r in reads.items() if a in unfit}))
        self.quarantine = dict(new.quarantine)
        self.after = _summary(new)
        file_missing = not os.path.exists(params["path"])
        self.changed = (new.body() != on_disk.body()) or (
            file_missing and params["state"] == "present")
        self.serial = current.serial
        changes = ChangeSet()
        if self.changed:
            changes.add("write the allocation ledger %s" % params["path"],
                        functools.partial(self.write, new))
        return StepPlan(changes)

    def apply(self):
        # The one step runs as itself, not through ChangeSet.apply: a failed write (a
        # full disk) is reported as the ledger's, and there is nothing before it to undo.
        for step in self.plan.changes.steps:
            step.apply()

    def write(self, new):
        self.serial = ledger_core.write_ledger(self.params["path"], new).serial

    @staticmethod
    def check_quarantined(current, recover):
        """Refuse a GPU of ``recover`` that is not in quarantine, before anything is done."""
        for index, address in enumerate(recover):
            if address not in current.quarantine:
                raise GpuhostError("%s is not quarantined" % address, field="recover[%d]" % index,
                                   fix="give the quarantined GPUs (tenant_ledger's quarantine result)")

    def rescan_quarantined(self, current, recover):
        """Remove every function of the quarantined GPUs of ``recover`` from the kernel and
        rescan the bridge above each (tenant_scrub.plan_rescan, with its refusals), as an
        operator brings back a GPU that fell off its bus. {address: [reason]} of the GPUs
        whose functions came back on another driver than vfio-pci (or did not come back),
        which are neither reset nor lifted; none in check mode."""
        gpus = [{"address": address, "functions": current.quarantine[address].get("functions") or [address]}
                for address in recover]
        plan = plan_rescan(self.writer, read_pci_functions(self.params["root"]), gpus)
        self.rescan_steps = list(plan.changes.descriptions)
        self.recovery_steps = list(self.rescan_steps)
        if self.module.check_mode:
            return {}
        plan.changes.apply()
        off = {}
        for gpu in gpus:
            drivers = {function: current_driver(self.writer, function) for function in gpu["functions"]}
            wrong = sorted(function for function, driver in drivers.items() if driver != VFIO_PCI)
            if wrong:
                off[gpu["address"]] = ["after the rescan, %s %s not on vfio-pci (%s): bind them (the vfio "
                                       "stage, vfio_bind) and recover again with recover_action reset"
                                       % (", ".join(wrong), "is" if len(wrong) == 1 else "are",
                                          ", ".join("%s: %s" % (f, drivers[f] or "no driver") for f in wrong))]
        return off

    def reset_quarantined(self, current, recover):
        """Reset every function of the quarantined GPUs of ``recover`` as tenant_scrub
        resets a leaving tenant's (the same refusals: a function not on vfio-pci, in use,
        without a usable reset method, or whose bus reset would reach other devices);
        the GPUs reset, none in check mode."""
        self.check_quarantined(current, recover)
        if not recover:
            return ()
        entry = {"name": "quarantine", "gpus": [
            {"address": address, "functions": current.quarantine[address].get("functions") or [address]}
            for address in recover]}
        plan = plan_scrub(self.writer, read_pci_functions(self.params["root"]), entry)
        self.recovery_steps = self.rescan_steps + list(plan.changes.descriptions)
        if self.module.check_mode:
            return ()
        try:
            plan.changes.apply()
        except GpuhostError:
            pass            # what was reset is in plan.reset; the rest stays quarantined
        return tuple(address for address in recover
                     if all(function in plan.reset
                            for function in current.quarantine[address].get("functions") or [address]))

    def read(self, address, log=None, log_since=None):
        """The GPU's DeviceState now, or the GpuhostError that says why it cannot be
        read (a GPU removed from the bus). ``log``: the kernel log read once for the
        call, whose reset failures after ``log_since`` (a mark) count."""
        try:
            return device_state.read_device_state(address, self.params["root"], kernel_log=log,
                                                  log_since=log_since)
        except GpuhostError as err:
            return err

    @staticmethod
    def unfit(address, read, fatal_before):
        """Why the GPU is unfit for a tenant (``read``: what read() gave)."""
        if isinstance(read, GpuhostError):
            return [read.msg]
        return device_state.unfit_reasons(read, fatal_before)

    def refuse_held(self, current, topology):
        """The host-safety policy of a release: no tenant whose vfio groups a process
        (its domain's QEMU) still holds open, as tenant_scrub refuses to scrub one."""
        groups = {a: f.iommu_group for a, f in topology.pci.items()}
        for name in self.params["names"]:
            entry = tenant_entry(current, name)
            if entry is not None:
                check_devices_free(self.params["root"], name, tenant_functions(entry), groups)

    @property
    def result(self):
        result = {
            "changed": self.changed,
            "plan": self.placement,
            "layout": self.layout,
            "allocated": self.allocated,
            "released": self.released,
            "quarantined": self.quarantined,
            "lifted": self.lifted,
            "still_unfit": self.still_unfit,
            "quarantine": self.quarantine,
            "recovery_steps": self.recovery_steps,
            "ledger": {"path": self.params["path"], "serial": self.serial,
                       "tenants": sorted((self.after or {}).keys())},
        }
        if self.module._diff and self.before is not None:
            result["diff"] = {"before": self.before, "after": self.after,
                              "before_header": self.params["path"],
                              "after_header": self.params["path"]}
        return result


def main():
    module = build_module()
    run_module(module, TenantLedger(module))


if __name__ == "__main__":
    main()
