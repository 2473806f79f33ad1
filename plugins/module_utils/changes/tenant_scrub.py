# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Offboarding scrubs: wipe a released tenant's GPU and VF before another tenant can get
them, and the reset-method gate that refuses to give away a GPU that cannot be wiped.

A tenant leaves state in its devices: video memory, the GPU's firmware and engine state,
its VF's MAC and VLAN. The host resets every function of the tenant's GPU through sysfs
(``/sys/bus/pci/devices/<bdf>/reset``, "writing 1 to this file will perform reset",
Documentation/ABI/testing/sysfs-bus-pci; the kernel tries the methods of the device's
``reset_method`` in order) and gives the VF back without the tenant's network identity
(sriov.SCRUBBED_VF, through sriov_vfs's own ``ip link set`` steps).

The scrub runs after the tenant's domain is removed and before the ledger releases the
tenant (playbooks/tenant_offboard.yml): a scrub that is refused or fails leaves the
tenant in the ledger, so its GPU is never placed for anyone else. It refuses a function
that is still in use (its /dev/vfio/<group> open, as by the QEMU of a domain that still
runs) or not on vfio-pci (a host driver would be using the device while it is reset),
and one whose reset file is a link (the one writer never writes through a link).

A GPU function without a usable reset method (pci.reset_capability) cannot be wiped:
the scrub and the domain gate (``check_reset_methods``, called by libvirt_pinned_domain)
refuse it unless ``allow_no_reset`` is set, or unless vfio-pci resets it itself
(pci.vfio_resets_on_release): a multi-function GPU without FLR (an HDA function,
most GeForce boards) has no ``reset`` file of its own, since the kernel offers a bus reset
only to the one device on a bus, yet vfio-pci resets its whole slot or bus once every
device there is a vfio-pci device nobody holds open. A function whose only methods are bus
resets is refused when the bus holds other devices than the tenant's own, since the
secondary bus reset would reset them under whoever uses them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy.host_safety import Refusal
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.safety_context import vfio_group_holders
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    is_kernel_address, normalize_address, reset_capability, vfio_resets_on_release)
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.sriov_vfs import (
    SCRUBBED_VF, current_vfs, plan_vf_scrub)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.vfio_bind import (
    current_driver, device_path)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import VFIO_PCI

ALLOW_NO_RESET = "allow_no_reset"
RESCAN_ALL = "/sys/bus/pci/rescan"
NO_RESET_FIX = ("put the GPU in a slot or on firmware where it supports FLR or a bus reset "
                "(lspci -vv shows FLReset+ under DevCap), or keep it with one tenant for "
                "good; set %s: true only when whoever gets the GPU next may see what the "
                "last tenant left in it" % ALLOW_NO_RESET)


def no_reset_functions(functions, addresses):
    """The ResetCapability of each of ``addresses`` (address -> PciFunction in
    ``functions``) that has no usable reset method and that vfio-pci does not reset on
    release either (the other ``addresses`` count as the tenant's own); unknown ones (a
    topology that was not read from sysfs) are not counted."""
    found = []
    canonical = [normalize_address(address) for address in addresses]
    for address in canonical:
        function = functions.get(address)
        if function is None:
            continue
        capability = reset_capability(function, functions)
        if capability.usable is False and not (
                capability.reset_file is False
                and vfio_resets_on_release(function, functions, canonical)):
            found.append(capability)
    return found


def check_reset_methods(spec, topo, report, allow_no_reset=False):
    """The gate of libvirt_pinned_domain, run after its preflight: a GPU function (the
    GPU and its HDA) without a usable reset method is refused for a tenant unless
    ``allow_no_reset``, which turns the refusal into a warning. ``report`` is the
    preflight's PreflightReport; the refusal joins the others there."""
    addresses = [a for gpu in spec.gpus for a in gpu.functions]
    for capability in no_reset_functions(topo.pci, addresses):
        if allow_no_reset:
            report.warnings.append("%s; allowed by %s" % (capability.reason, ALLOW_NO_RESET))
            continue
        report.refusals.append(Refusal(
            field=ALLOW_NO_RESET,
            reason="refusing to give %s to a tenant: %s, so it cannot be wiped when the tenant "
            "leaves" % (capability.address, capability.reason),
            fix=NO_RESET_FIX, override=ALLOW_NO_RESET, kind="no_reset"))


@dataclass
class ScrubPlan:
    tenant: str
    changes: ChangeSet
    devices: List[dict] = field(default_factory=list)   # address, reset_methods, action
    vf: Optional[dict] = None
    reset: List[str] = field(default_factory=list)      # functions reset so far
    failed_reset: Optional[tuple] = None                # (function, OSError) of a failed reset
    skipped: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)


def tenant_entry(ledger_data, name):
    """The ledger entry of tenant ``name``, None when the ledger does not hold it."""
    for entry in ledger_data.tenants:
        if entry.get("name") == name:
            return entry
    return None


def tenant_functions(entry):
    """Every PCI function of the tenant's GPUs, canonical, in the ledger's order."""
    found = []
    for position, gpu in enumerate(entry.get("gpus") or []):
        if not isinstance(gpu, dict):
            raise GpuhostError("gpus[%d] of tenant %s in the ledger is not a mapping"
                               % (position, entry.get("name")), field="name",
                               fix="check the ledger (tenant_ledger shows it)")
        for address in gpu.get("functions") or [gpu.get("address")]:
            canonical = normalize_address(address, field="name")
            if canonical not in found:
                found.append(canonical)
    return found


def _held_refusal(writer, functions, address, what="reset", unbound_ok=False):
    """Why ``address`` cannot be ``what`` now: gone from the host, on a host driver (or,
    unless ``unbound_ok``, on none), or held open by a process; None when it can."""
    function = functions.get(address)
    if function is None:
        return "%s is not on this host any more" % address
    driver = current_driver(writer, address)
    if driver != VFIO_PCI and not (unbound_ok and not driver):
        return ("%s is on %s, not vfio-pci: a host driver would use the device while it "
                "is %s" % (address, driver or "no driver", what))
    holders = vfio_group_holders(writer.root, [function.iommu_group])
    if holders:
        return "%s is still in use: %s (a domain still runs?)" % (address, "; ".join(holders))
    return None


def _function_refusal(writer, functions, address, own, allow_no_reset, plan):
    """(why ``address`` cannot be reset now, the option that overrides it or None), or
    None when it can, or when it has no reset method and allow_no_reset is set (then
    with a warning)."""
    held = _held_refusal(writer, functions, address)
    if held:
        return held, None
    function = functions[address]
    capability = reset_capability(function, functions)
    entry = {"address": address, "reset_methods": list(capability.methods),
             "action": "reset"}
    plan.devices.append(entry)
    if capability.usable is False and capability.reset_file is False and \
            vfio_resets_on_release(function, functions, own):
        entry["action"] = "reset by vfio-pci (its bus, when the domain let it go)"
        return None
    if capability.usable is False:
        if allow_no_reset:
            entry["action"] = "not reset (%s)" % ALLOW_NO_RESET
            plan.warnings.append("%s; not reset, allowed by %s"
                                 % (capability.reason, ALLOW_NO_RESET))
            return None
        return ("%s, so what the tenant left in it would reach the next tenant"
                % capability.reason), ALLOW_NO_RESET
    others = [a for a in capability.bus_siblings if a not in own]
    if capability.bus_only and capability.bus_siblings and not others and \
            vfio_resets_on_release(function, functions, own):
        # The kernel refuses a bus reset through ``reset`` while any other function sits
        # on the bus (pci_parent_bus_reset: ENOTTY), even one probed as "bus" before its
        # siblings appeared, as the lab's GPU 21:00.0 is: vfio-pci's reset of the whole
        # bus on release is what wipes it.
        entry["action"] = "reset by vfio-pci (its bus, when the domain let it go)"
        return None
    if capability.bus_only and others:
        return ("%s can only be reset by a bus reset, which would reset %s too"
                % (address, ", ".join(others))), None
    mode = writer.stat(device_path(address, "reset"))
    if mode is not None and stat.S_ISLNK(mode.st_mode):
        return ("%s is a symbolic link: gpuhost.kvm never writes through a link"
                % device_path(address, "reset")), None
    return None


def plan_scrub(writer, functions, entry, allow_no_reset=False, runner=None, quarantined=()):
    """Decide the scrub of a released tenant's ledger ``entry``: a reset of every
    function of its GPUs, then its VF's settings back to SCRUBBED_VF. Every refusal is
    collected first and raised together, before anything is written. ``quarantined``:
    functions of GPUs the ledger holds in quarantine after their reset failed; they are
    not reset again here (nobody gets them until a recovery resets them)."""
    name = entry.get("name")
    own = tenant_functions(entry)
    plan = ScrubPlan(name, ChangeSet())
    refusals = []
    for address in own:
        refused = _function_refusal(writer, functions, address, own, allow_no_reset, plan)
        if refused:
            refusals.append({"address": address, "reason": refused[0],
                             "override": refused[1]})
    if refusals:
        raise GpuhostError(
            "refusing to scrub tenant %s: %s; its ledger entry stays held, so nobody gets "
            "these devices" % (name, "; ".join(r["reason"] for r in refusals)),
            field=ALLOW_NO_RESET if all(r["override"] for r in refusals) else "name",
            fix="stop and remove the tenant's domain first (libvirt_pinned_domain "
                "state=absent) and bind its devices to vfio-pci (vfio_bind); for a GPU "
                "without a reset method: %s" % NO_RESET_FIX,
            details={"refusals": refusals})
    for device in plan.devices:
        if device["action"] == "reset" and device["address"] in quarantined:
            device["action"] = ("not reset (quarantined: its reset failed; tenant_ledger's "
                                "recover_action reset wipes it before anyone gets it)")
        elif device["action"] == "reset":
            _reset_step(plan, writer, device["address"])
    vf = entry.get("vf")
    if vf:
        _vf_steps(plan, writer, vf, runner)
    return plan


@dataclass
class RescanPlan:
    changes: ChangeSet
    removed: List[str] = field(default_factory=list)      # functions removed so far
    rescanned: List[str] = field(default_factory=list)    # rescan files written


def _rescan_path(writer, address):
    """The rescan file that finds ``address`` again once removed: its parent bridge's
    (which rescans that bridge's bus and those below it), or the whole host's when it
    sits on a root bus."""
    parent = os.path.basename(os.path.dirname(os.path.realpath(writer.path(device_path(address)))))
    if is_kernel_address(parent):
        return device_path(parent, "rescan")
    return RESCAN_ALL


def plan_rescan(writer, functions, gpus):
    """Decide the recovery of GPUs by remove and rescan (``gpus``: [{"address",
    "functions"}]): each function leaves the kernel (its ``remove`` file) and the bridge
    above it looks for it again (its ``rescan`` file), as an operator brings back a GPU
    that fell off its bus. Every refusal is collected first and raised together, before
    anything is written: a function gone from the host, on a host driver, or held open.
    A removal's undo is the rescan, so a failure finds the functions again."""
    refusals = []
    rescans = []
    for gpu in gpus:
        for address in gpu["functions"]:
            refused = _held_refusal(writer, functions, address, what="removed", unbound_ok=True)
            if refused:
                refusals.append(refused)
            elif writer.stat(device_path(address, "remove")) is None:
                refusals.append("%s has no remove file" % device_path(address, "remove"))
        if not refusals:
            rescans.append(_rescan_path(writer, gpu["address"]))
    if refusals:
        raise GpuhostError("refusing to remove and rescan %s: %s" % (
            ", ".join(gpu["address"] for gpu in gpus), "; ".join(refusals)), field="recover",
            fix="stop whatever holds the GPU (a domain: libvirt_pinned_domain state=absent) and "
                "bind its functions to vfio-pci (vfio_bind), then recover again")
    plan = RescanPlan(ChangeSet())
    for gpu, rescan in zip(gpus, rescans):
        # function 0 last: the others belong to the device it announces
        for address in sorted(gpu["functions"], reverse=True):
            _remove_step(plan, writer, address, rescan)
    for rescan in sorted(set(rescans)):
        _rescan_step(plan, writer, rescan)
    return plan


def _remove_step(plan, writer, address, rescan):
    path = device_path(address, "remove")

    def remove():
        writer.write(path, "1")
        plan.removed.append(address)
    plan.changes.value_changes.append((path, "(on the bus)", "1 (removed)"))
    plan.changes.add("write 1 to %s" % path, remove, lambda: writer.write(rescan, "1"))


def _rescan_step(plan, writer, rescan):
    def find_again():
        writer.write(rescan, "1")
        plan.rescanned.append(rescan)
    plan.changes.value_changes.append((rescan, "", "1 (rescan)"))
    plan.changes.add("write 1 to %s" % rescan, find_again)


def _reset_step(plan, writer, address):
    path = device_path(address, "reset")

    def reset():
        try:
            writer.write(path, "1")
        except OSError as err:
            plan.failed_reset = (address, err)
            raise
        plan.reset.append(address)
    # A reset cannot be undone: a later step's failure leaves it done, and the result
    # lists it under ``reset``.
    plan.changes.value_changes.append((path, "(the tenant's state)", "1 (reset)"))
    plan.changes.add("write 1 to %s" % path, reset)


def _vf_steps(plan, writer, vf, runner):
    if not isinstance(vf, dict) or not vf.get("pf"):
        raise GpuhostError("the ledger's vf entry of tenant %s names no PF" % plan.tenant,
                           field="name", fix="check the ledger (tenant_ledger shows it)")
    index = vf.get("index")
    address = vf.get("address")
    if index is None and address:
        # A plan written before VF indices: find the index through the PF's virtfn links.
        pf = normalize_address(vf["pf"], field="name")
        by_address = {a: i for i, a in current_vfs(writer, pf).items()}
        index = by_address.get(normalize_address(address, field="name"))
    if index is None:
        raise GpuhostError("VF %s of tenant %s is not a VF of %s any more"
                           % (address, plan.tenant, vf["pf"]), field="name",
                           fix="check the PF's VFs (sriov_vfs) and the ledger")
    sriov_plan = plan_vf_scrub(writer, plan.changes, vf["pf"], index, runner)
    plan.vf = {"pf": sriov_plan.pf, "netdev": sriov_plan.netdev, "index": index,
               "address": address, "settings": dict(SCRUBBED_VF),
               "changed": bool(sriov_plan.settings_changed)}
    plan.skipped.extend(sriov_plan.skipped)


def ledger_held_message(name, err):
    """The message of a failed scrub: what failed, and that the tenant stays held."""
    return "%s; tenant %s stays in the ledger (not released) until a scrub succeeds" % (
        err.msg if isinstance(err, GpuhostError) else str(err), name)
