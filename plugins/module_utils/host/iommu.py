# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""IOMMU analysis: may each GPU be handed to a tenant, and what stands in the way?

A GPU is isolated when its IOMMU group holds nothing but the GPU's own slot functions
(the HDA audio function beside it) and PCI bridges, the IOMMU is on, and the group
boundaries are the hardware's own. ``pcie_acs_override`` makes the kernel *pretend*
that devices are isolated: groups look clean, but peer-to-peer DMA between tenants
stays possible. It is reported as a security finding and makes no GPU isolated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    PciAddress, class_name, format_class_code, format_vendor_device, gpu_selection,
    normalize_address, reset_capability, slot_bar64_sizes, vfio_resets_on_release)

# Functions that may share a group with a passed-through device: vfio accepts bridges
# (bound to pcieport or to no driver), and a host bridge does no DMA of its own.
NEUTRAL_CLASSES = (0x0600, 0x0604, 0x0609)
_VENDOR_RE = re.compile(r"^(0x)?[0-9a-fA-F]{4}\Z")


@dataclass
class GroupVerdict:
    clean: bool
    group: Optional[int]
    foreign: List[dict] = field(default_factory=list)   # address, class_name,
    #                                                     class_code, driver
    reasons: List[str] = field(default_factory=list)
    groups: Tuple[int, ...] = ()                        # every group the devices use


@dataclass
class GpuVerdict:
    address: str
    isolated: bool
    reasons: List[str]
    companions: Tuple[str, ...]
    numa_node: Optional[int]
    bar64_total: int
    reset_method: Tuple[str, ...]
    driver: Optional[str]
    iommu_group: Optional[int]
    vendor_device: Optional[str] = None
    class_code: Optional[str] = None
    class_name: Optional[str] = None
    numa_node_source: str = "unknown"
    boot_vga: Optional[bool] = None
    # ResetCapability.as_dict() of the GPU and of each companion, GPU first
    reset_methods: List[dict] = field(default_factory=list)
    # each 64-bit prefetchable BAR of the GPU and its companions, largest first: what
    # the guest's root-port window holds (domain.address_width)
    bar64_sizes: Tuple[int, ...] = ()
    # why the GPU selection counts it ("class 0x0302", "listed as 1b36:0005")
    selected_by: Optional[str] = None

    def to_dict(self):
        return {
            "address": self.address, "isolated": self.isolated,
            "reasons": list(self.reasons), "companions": list(self.companions),
            "numa_node": self.numa_node, "numa_node_source": self.numa_node_source,
            "bar64_total": self.bar64_total, "bar64_sizes": list(self.bar64_sizes),
            "reset_method": list(self.reset_method),
            "driver": self.driver, "iommu_group": self.iommu_group,
            "vendor_device": self.vendor_device, "class_code": self.class_code,
            "class_name": self.class_name, "boot_vga": self.boot_vga,
            "reset_methods": [dict(r) for r in self.reset_methods],
            "selected_by": self.selected_by,
        }


@dataclass
class IommuReport:
    enabled: bool
    vendor: Optional[str]
    mode: Optional[str]
    passthrough: bool
    units: Tuple[str, ...]
    acpi_tables: Tuple[str, ...]
    cmdline: Dict[str, str]
    interrupt_remapping: Optional[bool]
    interrupt_remapping_source: str
    groups: List[dict]
    gpus: List[GpuVerdict]
    dirty_groups: List[dict]
    sriov_pfs: List[dict]
    security_findings: List[dict]
    reset_findings: List[dict] = field(default_factory=list)
    gpu_selection: dict = field(default_factory=dict)   # GpuSelection.as_dict()

    def to_dict(self):
        """The ``gpuhost_iommu`` fact: plain data only."""
        return {
            "enabled": self.enabled, "vendor": self.vendor, "mode": self.mode,
            "passthrough": self.passthrough, "units": list(self.units),
            "acpi_tables": list(self.acpi_tables), "cmdline": dict(self.cmdline),
            "interrupt_remapping": self.interrupt_remapping,
            "interrupt_remapping_source": self.interrupt_remapping_source,
            "groups": self.groups, "gpus": [g.to_dict() for g in self.gpus],
            "dirty_groups": self.dirty_groups, "sriov_pfs": self.sriov_pfs,
            "security_findings": self.security_findings,
            "reset_findings": self.reset_findings,
            "gpu_selection": dict(self.gpu_selection),
        }


def parse_gpu_vendor(value, field="gpu_vendor"):
    """``10de`` or ``0x10de`` -> 0x10de; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= 0xFFFF:
            return value
    elif _VENDOR_RE.match(str(value).strip()):
        return int(str(value).strip(), 16)
    raise GpuhostError("%r is not a PCI vendor id" % (value,), field=field,
                       fix="give four hex digits such as 10de (NVIDIA), 1002 (AMD) "
                           "or 8086 (Intel), as lspci -nn shows them")


def _is_neutral(function):
    return function.base_class in NEUTRAL_CLASSES


def _member(function, address):
    if function is None:
        known = _pci_address(address) is not None
        return {"address": address, "class_code": None,
                "class_name": "Unknown device" if known else "not a PCI device",
                "vendor_device": None, "driver": None, "numa_node": None}
    return {"address": address, "class_code": format_class_code(function.class_code),
            "class_name": class_name(function.class_code),
            "vendor_device": format_vendor_device(function), "driver": function.driver,
            "numa_node": function.numa_node}


def _pci_address(name):
    """The PciAddress of a group member's name, None for a name that is not one."""
    try:
        return PciAddress.parse(name)
    except GpuhostError:
        return None


def _group_members(topo, group):
    """The members of a group: from iommu_groups, else from the devices' links. PCI
    addresses are canonical; any other name is kept as it is. A group can hold devices
    that are not PCI functions (platform devices on ARM), and whatever it holds shares
    the group's DMA isolation, so such a member counts as a foreign device rather than
    being dropped or failing the whole report."""
    members = topo.iommu.groups.get(group)
    if members:
        return tuple(str(address) if address is not None else name
                     for name, address in ((m, _pci_address(m)) for m in members))
    return tuple(a for a, f in topo.pci.items() if f.iommu_group == group)


def group_members_verdict(topo, addresses):
    """Is the IOMMU group of ``addresses`` clean for handing them to one tenant?

    Clean means each group holding one of the devices holds nothing but functions on
    the same slots as the devices (a GPU's HDA) and PCI/host bridges. An unknown
    address raises GpuhostError naming it.
    """
    wanted = []
    for address in addresses:
        canonical = normalize_address(address, field="addresses")
        if canonical not in topo.pci:
            raise GpuhostError("no PCI function %s on this host" % canonical,
                               field="addresses",
                               fix="use an address that lspci -D lists on the host")
        wanted.append(canonical)
    verdict = GroupVerdict(clean=True, group=None)
    slots = {PciAddress.parse(a).slot_key for a in wanted}
    groups = []
    for address in wanted:
        group = topo.pci[address].iommu_group
        if group is None:
            verdict.clean = False
            verdict.reasons.append(
                "%s has no IOMMU group: the IOMMU is off or not used for it" % address)
        elif group not in groups:
            groups.append(group)
    verdict.groups = tuple(groups)
    verdict.group = groups[0] if groups else None
    if len(groups) > 1:
        verdict.reasons.append("the devices span IOMMU groups %s" %
                               ", ".join(str(g) for g in groups))
    seen = set(wanted)
    for group in groups:
        for member in _group_members(topo, group):
            if member in seen:
                continue
            seen.add(member)
            function = topo.pci.get(member)
            address = _pci_address(member)
            if address is not None and address.slot_key in slots:
                continue
            if function is not None and _is_neutral(function):
                continue
            entry = _member(function, member)
            verdict.foreign.append({k: entry[k] for k in
                                    ("address", "class_name", "class_code", "driver")})
    if verdict.foreign:
        verdict.clean = False
        verdict.reasons.append("IOMMU group %s also holds %s" % (
            ", ".join(str(g) for g in groups),
            "; ".join("%s (%s, class %s)" % (f["address"], f["class_name"], f["class_code"])
                      for f in verdict.foreign)))
    return verdict


def _security_findings(iommu):
    findings = []
    if iommu.acs_override:
        findings.append({
            "id": "pcie_acs_override",
            "severity": "high",
            "msg": ("pcie_acs_override=%s is active: the kernel splits IOMMU groups that "
                    "the hardware does not isolate, so a tenant's device may still reach "
                    "another tenant's memory by peer-to-peer DMA" % iommu.acs_override),
            "fix": ("remove pcie_acs_override from the kernel command line; move the GPU "
                    "to a slot whose root port has ACS, or change PCIe bifurcation in the "
                    "BIOS (runbook section 13)"),
        })
    if iommu.cmdline.get("vfio_iommu_type1.allow_unsafe_interrupts") in ("1", "y", "Y"):
        findings.append({
            "id": "allow_unsafe_interrupts",
            "severity": "high",
            "msg": "vfio_iommu_type1.allow_unsafe_interrupts lets a guest inject MSIs "
                   "without interrupt remapping",
            "fix": "enable interrupt remapping and drop allow_unsafe_interrupts",
        })
    if iommu.enabled and iommu.interrupt_remapping is False:
        findings.append({
            "id": "no_interrupt_remapping",
            "severity": "medium",
            "msg": "interrupt remapping is off: a passed-through device can forge MSIs",
            "fix": "enable x2APIC/interrupt remapping in the BIOS and remove intremap=off",
        })
    return findings


def reset_findings_of(gpu_address, capabilities, reset_by_vfio=()):
    """Findings about how a GPU's functions can be wiped between tenants.

    ``gpu_no_reset``: a function of the GPU has no usable reset method, so what a tenant
    left in it (video memory, firmware state) reaches the next tenant; tenant_scrub and
    libvirt_pinned_domain refuse it unless allow_no_reset is set. ``gpu_bus_reset_only``:
    the kernel can only reset it with a secondary bus reset, which resets every other
    device behind the same bridge too (named in ``siblings``). ``gpu_reset_by_vfio``: a
    function in ``reset_by_vfio`` has no reset of its own, but vfio-pci resets its bus when
    the tenant's domain lets the GPU's functions go (pci.vfio_resets_on_release)."""
    findings = []
    for capability in capabilities:
        if capability.usable is False and capability.address in reset_by_vfio:
            findings.append({
                "id": "gpu_reset_by_vfio", "severity": "low", "gpu": gpu_address,
                "address": capability.address,
                "msg": "%s; vfio-pci resets its bus instead, since that bus holds only this "
                       "GPU's functions" % capability.reason,
                "fix": "none needed while the GPU's functions stay alone on their bus"})
        elif capability.usable is False:
            findings.append({
                "id": "gpu_no_reset", "severity": "high", "gpu": gpu_address,
                "address": capability.address,
                "msg": "%s; a tenant's data in it would reach the next tenant"
                       % capability.reason,
                "fix": "put the GPU in a slot or on firmware where it supports FLR or a "
                       "bus reset (lspci -vv shows FLReset+ under DevCap), or give it to "
                       "one tenant for good; assigning it anyway needs allow_no_reset"})
        elif capability.bus_only and capability.bus_siblings:
            findings.append({
                "id": "gpu_bus_reset_only", "severity": "medium", "gpu": gpu_address,
                "address": capability.address, "siblings": list(capability.bus_siblings),
                "msg": "%s can only be reset by a bus reset, which resets %s too"
                       % (capability.address, ", ".join(capability.bus_siblings)),
                "fix": "keep the devices behind that bridge with the same tenant, or move "
                       "the GPU to a slot of its own"})
    return findings


def analyse_iommu(topo, gpu_vendor=None, selection=None):
    """The IOMMU report of a host: groups, GPU verdicts, dirty groups, SR-IOV PFs.
    ``selection``: what counts as a GPU (pci.GpuSelection; None: the default classes)."""
    vendor_filter = parse_gpu_vendor(gpu_vendor)
    selection = gpu_selection(selection)
    iommu = topo.iommu
    pci = topo.pci

    groups = []
    for group in sorted(iommu.groups):
        groups.append({"group": group, "type": iommu.group_types.get(group),
                       "devices": [_member(pci.get(a), a) for a in _group_members(topo, group)]})

    by_slot = {}
    for address in pci:
        by_slot.setdefault(PciAddress.parse(address).slot_key, []).append(address)

    gpus = []
    dirty = {}
    reset_findings = []
    for address in selection.gpus(pci):
        function = pci[address]
        if function.is_vf:
            continue
        if vendor_filter is not None and function.vendor_id != vendor_filter:
            continue
        companions = tuple(a for a in by_slot[PciAddress.parse(address).slot_key]
                           if a != address)
        capabilities = [reset_capability(pci[a], pci) for a in (address,) + companions]
        reset_by_vfio = {c.address for c in capabilities if c.reset_file is False
                         and vfio_resets_on_release(pci[c.address], pci, (address,) + companions)}
        reasons = []
        if not iommu.enabled:
            reasons.append("the IOMMU is off: enable VT-d/AMD-Vi in the BIOS and boot "
                           "with intel_iommu=on or amd_iommu=on")
        group_verdict = group_members_verdict(topo, (address,) + companions)
        reasons.extend(r for r in group_verdict.reasons
                       if iommu.enabled or "no IOMMU group" not in r)
        if group_verdict.foreign:
            entry = dirty.setdefault(group_verdict.group, {
                "group": group_verdict.group, "gpus": [], "foreign": []})
            entry["gpus"].append(address)
            for foreign in group_verdict.foreign:
                if foreign not in entry["foreign"]:
                    entry["foreign"].append(foreign)
        if iommu.acs_override:
            reasons.append("pcie_acs_override is active: this group boundary is forced by "
                           "the kernel, not enforced by the hardware")
        gpus.append(GpuVerdict(
            address=address, isolated=not reasons, reasons=reasons, companions=companions,
            numa_node=function.numa_node, bar64_total=function.bar64_prefetchable_total,
            bar64_sizes=slot_bar64_sizes(pci[a] for a in (address,) + companions),
            reset_method=function.reset_method, driver=function.driver,
            iommu_group=function.iommu_group, vendor_device=format_vendor_device(function),
            class_code=format_class_code(function.class_code),
            class_name=class_name(function.class_code),
            numa_node_source=function.numa_node_source, boot_vga=function.boot_vga,
            reset_methods=[c.as_dict() for c in capabilities],
            selected_by=selection.reason(function)))
        reset_findings.extend(reset_findings_of(address, capabilities, reset_by_vfio))

    sriov_pfs = []
    for address, function in pci.items():
        if not function.is_sriov_pf:
            continue
        sriov_pfs.append({
            "address": address, "vendor_device": format_vendor_device(function),
            "driver": function.driver, "numa_node": function.numa_node,
            "totalvfs": function.sriov_totalvfs, "numvfs": function.sriov_numvfs,
            "drivers_autoprobe": function.sriov_drivers_autoprobe,
            "netdevs": list(function.netdevs), "iommu_group": function.iommu_group,
            "vfs": [{"address": vf, "index": index,
                     "driver": pci[vf].driver if vf in pci else None,
                     "iommu_group": pci[vf].iommu_group if vf in pci else None,
                     "netdevs": list(pci[vf].netdevs) if vf in pci else []}
                    for index, vf in enumerate(function.virtfns)],
        })

    return IommuReport(
        enabled=iommu.enabled, vendor=iommu.vendor, mode=iommu.mode,
        passthrough=iommu.passthrough, units=iommu.units, acpi_tables=iommu.acpi_tables,
        cmdline=dict(iommu.cmdline), interrupt_remapping=iommu.interrupt_remapping,
        interrupt_remapping_source=iommu.interrupt_remapping_source, groups=groups,
        gpus=gpus, dirty_groups=[dirty[g] for g in sorted(dirty, key=lambda g: (g is None, g))],
        sriov_pfs=sriov_pfs, security_findings=_security_findings(iommu),
        reset_findings=reset_findings, gpu_selection=selection.as_dict())
