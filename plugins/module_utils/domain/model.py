# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tenant domain as data: DomainSpec and its parts, built from a plan or from
options and validated, with the guest address width it needs (maxphysaddr). No XML here:
xml.py builds the domain XML from a DomainSpec, canonical.py compares it with libvirt's.

The runbook's section 8 is the model: q35, host-passthrough, whole-core vCPU pins,
emulator and iothreads on housekeeping CPUs, strict numatune, hugepages + locked, the
GPU with every companion function in one guest slot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    MAX_CPUS, MAX_NODE, format_cpulist, parse_cpulist)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import address_width
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PciAddress, normalize_address
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    domain_name, finite_number, hugepage_size_kib, validate_mac, validate_vlan, whole_number)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.vf_settings import vf_settings

KIB = 1024
GIB_KIB = 1024 * 1024
# The first PCIe root port this module adds for the GPUs; index 0 is pcie-root.
FIRST_GPU_ROOT_PORT = 1
# The guest firmware (the firmware option). efi and efi-secure use libvirt's firmware
# auto-selection (<os firmware='efi'> with <firmware><feature/>), not explicit
# <loader>/<nvram> paths: libvirt matches the features against the JSON descriptors the
# firmware package installs in /usr/share/qemu/firmware (Debian's ovmf ships them, its
# README.Debian says libvirt pairs OVMF_CODE_4M.ms.fd with OVMF_VARS_4M.ms.fd through
# them; RHEL's edk2-ovmf ships its own), so one XML serves both OS families and a
# firmware update or a renamed file needs no change here. Each feature is
# (name, enabled), in the order libvirt writes them back (enrolled-keys first), since
# the comparison keeps the order of <os>'s children.
#   efi:        UEFI without Secure Boot (Debian: OVMF_CODE_4M.fd + OVMF_VARS_4M.fd);
#               the runbook's fix for Code 43 on q35.
#   efi-secure: Secure Boot on, Microsoft keys enrolled (Debian: OVMF_CODE_4M.ms.fd +
#               OVMF_VARS_4M.ms.fd); needs SMM, written as <smm state='on'/>.
FIRMWARE_CHOICES = ("bios", "efi", "efi-secure")
FIRMWARE_FEATURES = {
    "efi": (("enrolled-keys", "no"), ("secure-boot", "no")),
    "efi-secure": (("enrolled-keys", "yes"), ("secure-boot", "yes")),
}
# What libvirt's auto-selection writes into <os> (the chosen code and the guest's own
# variable store) when it expands <os firmware='efi'>; not a difference from the wanted
# XML, which names only the features.
AUTOSELECTED_OS_CHILDREN = {"loader", "nvram"}


@dataclass
class GpuSpec:
    """One passed-through GPU with its companion functions (HDA, USB-C, ...)."""

    address: str
    functions: Tuple[str, ...] = ()      # every host function, the GPU included
    bar64_total: int = 0                 # bytes of 64-bit prefetchable BARs (legacy)
    # The size of each 64-bit memory BAR of the GPU and its companions; empty: one BAR
    # of bar64_total (plans written before the sizes were carried).
    bar64_sizes: Tuple[int, ...] = ()
    # The option the GPU came from, for errors: gpus[0] or plan.gpus[0].
    origin: str = field(default="gpus", compare=False, repr=False)

    def __post_init__(self):
        self.address = str(PciAddress.parse(self.address, field="%s.address" % self.origin))
        functions = self.functions or (self.address,)
        parsed = sorted(set(PciAddress.parse(f, field="%s.functions" % self.origin)
                            for f in functions))
        slot = PciAddress.parse(self.address).slot_key
        for function in parsed:
            if function.slot_key != slot:
                raise GpuhostError(
                    "function %s is not in the slot of GPU %s" % (function, self.address),
                    field="%s.functions" % self.origin,
                    fix="list only functions of the GPU's own slot (same bus and slot, "
                        "e.g. %s.1); pass other devices as separate hostdevs" % self.address[:-2])
        self.functions = tuple(str(f) for f in parsed)
        self.bar64_sizes = tuple(int(size) for size in self.bar64_sizes or ())

    def bar_sizes(self):
        """Each 64-bit BAR's size, from bar64_sizes or else the legacy total."""
        if self.bar64_sizes:
            return self.bar64_sizes
        return (int(self.bar64_total),) if self.bar64_total else ()


@dataclass
class DiskSpec:
    path: str
    format: str = "qcow2"
    bus: str = "virtio"
    target: str = "vda"
    iothread: Optional[int] = 1          # None: no dedicated iothread


@dataclass
class NetworkSpec:
    kind: str = "none"                   # bridge, vf or none
    bridge: Optional[str] = None
    vf_address: Optional[str] = None
    vf_mode: str = "interface"           # interface (<interface type='hostdev'>) or hostdev
    mac: Optional[str] = None
    model: str = "virtio"
    vlan: Optional[int] = None           # <vlan><tag id=N/>: a VF interface only; 0/None: none


@dataclass(frozen=True)
class GuestCell:
    """One guest NUMA node of a tenant over several host nodes: its vCPUs (by number),
    its memory and the host node that backs it, and the GPUs that sit on that host node."""

    vcpus: Tuple[int, ...]
    memory_kib: int
    host_node: int
    gpus: Tuple[str, ...] = ()


@dataclass
class DomainSpec:
    name: str
    vcpus: int
    vcpu_pins: Tuple[Tuple[int, ...], ...]          # per vCPU, its host CPU set
    memory_kib: int
    memory_nodeset: Tuple[int, ...] = ()
    # The plan's memory_node: the nearest node with memory, for a GPU node without any.
    memory_node: Optional[int] = None
    numa_mode: str = "strict"
    # A tenant over several host nodes (a whole NVSwitch board): one guest NUMA cell per
    # host node; none: one cell of every vCPU and all memory.
    guest_cells: Tuple[GuestCell, ...] = ()
    guest_topology: Optional[dict] = None           # sockets, dies, cores, threads
    emulator_cpus: Tuple[int, ...] = ()
    iothreads: int = 0
    iothread_cpus: Tuple[int, ...] = ()
    vcpusched: Optional[dict] = None                # scheduler, priority, vcpus
    hugepage_size_kib: Optional[int] = None
    locked: bool = True
    memory_access: Optional[str] = None             # shared: only for vhost-user/virtiofs
    gpus: List[GpuSpec] = field(default_factory=list)
    extra_hostdevs: Tuple[str, ...] = ()
    # host function -> "on"/"off": its <rom bar=...>; a function not named gets no
    # <rom> element (QEMU's default, the ROM BAR shown).
    rom_bar: dict = field(default_factory=dict)
    network: NetworkSpec = field(default_factory=NetworkSpec)
    disk: Optional[DiskSpec] = None
    seed_path: Optional[str] = None
    # direct_boot.DirectBoot: <os> boots this kernel (and initrd, cmdline), not the disk
    direct_boot: Optional[object] = None
    serial_log: Optional[str] = None                # virtlogd's file of the serial console
    # <kvm><hidden state='on'/>: only for NVIDIA's consumer drivers on Windows (Code
    # 43); it hides KVM's CPUID leaves, so a Linux guest loses kvmclock, steal time and
    # the other paravirtual features.
    hide_kvm: bool = False
    domain_type: str = "kvm"
    machine: str = "q35"
    arch: str = "x86_64"
    cpu_mode: str = "host-passthrough"
    maxphysaddr_mode: str = "auto"                   # auto, emulate, passthrough, none
    maxphysaddr_bits: Optional[int] = None
    # The guest CPU as the firmware sees it (host-passthrough: the host's): vendor_id
    # (None: unknown, only widths every vendor's rule trusts), pdpe1gb, and the host's
    # own width (None: not checked). domain.address_width uses them to choose the width.
    cpu_vendor: Optional[str] = None
    cpu_1g_pages: bool = True
    host_phys_bits: Optional[int] = None
    # The libvirt daemon's version (major, minor, micro); None: unknown, taken as one
    # that knows <maxphysaddr> (MAXPHYSADDR_SINCE).
    libvirt_version: Optional[Tuple[int, int, int]] = None
    firmware: str = "bios"                           # FIRMWARE_CHOICES
    uuid: Optional[str] = None
    # What the spec's parts are called among the module's options (OPTION_NAMES or
    # PLAN_OPTION_NAMES), so that every error names what the user set.
    options: dict = field(default_factory=dict, compare=False, repr=False)

    def option(self, key):
        """The module option (or plan key) a part of the spec came from."""
        return self.options.get(key) or OPTION_NAMES.get(key, key)

    def from_plan(self):
        return self.option("vcpus").startswith("plan.")

    def hostdev_addresses(self):
        """Every host PCI function the domain takes: GPUs, companions, VFs."""
        addresses = [f for gpu in self.gpus for f in gpu.functions]
        addresses.extend(self.extra_hostdevs)
        if self.network.kind == "vf" and self.network.vf_address:
            addresses.append(self.network.vf_address)
        return addresses

    def pinned_cpus(self):
        return tuple(sorted(set(c for pins in self.vcpu_pins for c in pins)))


# The spec's parts -> the module option a refusal names: with structured options, and
# from a plan entry (docs/plan-format.md).
SPEC_PART_OPTIONS = {
    "vcpus": ("vcpus", "plan.vcpus"),
    "vcpu_pins": ("vcpu_pins", "plan.vcpu_pins"),
    "memory_gib": ("memory_gib", "plan.memory_gib"),
    "memory_nodeset": ("memory_nodes", "plan.numatune.nodeset"),
    "numa_mode": ("memory_nodes", "plan.numatune.mode"),
    "emulator_cpus": ("emulator_cpus", "plan.emulator_cpus"),
    "iothreads": ("iothreads", "plan.iothreads"),
    "iothread_cpus": ("iothread_cpus", "plan.iothread_cpus"),
    "guest_topology": ("guest_topology", "plan.guest_topology"),
    "guest_cells": ("plan", "plan.guest_cells"),
    "hugepage_size": ("hugepage_size", "plan.hugepage_size_kib"),
    "gpus": ("gpus", "plan.gpus"),
}
OPTION_NAMES = {part: names[0] for part, names in SPEC_PART_OPTIONS.items()}
PLAN_OPTION_NAMES = {part: names[1] for part, names in SPEC_PART_OPTIONS.items()}


def hostdev_origins(spec, from_plan=None, vf_option_given=False):
    """Hostdev address -> the module option that names it, for refusals."""
    if from_plan is None:
        from_plan = spec.from_plan()
    gpu_option = "plan" if from_plan else "gpus"
    origins = {a: gpu_option for gpu in spec.gpus for a in gpu.functions}
    origins.update((a, "hostdevs") for a in spec.extra_hostdevs)
    if spec.network.kind == "vf" and spec.network.vf_address:
        origins[spec.network.vf_address] = ("network.vf_address" if vf_option_given or
                                            not from_plan else "plan")
    return origins


def parse_nodeset(text, field_name):
    """A list of host NUMA nodes (``0``, ``0-1``), refused in node words, not CPU ones."""
    try:
        return parse_cpulist(text, field=field_name)
    except GpuhostError as err:
        raise GpuhostError("%r is not a NUMA node list" % (text,), field=field_name,
                           fix="write host NUMA nodes as numactl -H numbers them, e.g. 0 "
                               "or 0-1") from err


# --------------------------------------------------------------------------------------
# specs from a plan or from options

def _pins(value, field_name):
    pins = []
    for index, item in enumerate(value or ()):
        cpus = parse_cpulist(item, field="%s[%d]" % (field_name, index))
        if not cpus:
            raise GpuhostError("vCPU %d has an empty pin" % index, field=field_name,
                               fix="give every vCPU one host CPU (or a cpulist)")
        pins.append(cpus)
    return tuple(pins)


# Bounds of a domain's numbers (past them a value is a typo or a hostile input): vCPUs
# and guest topology parts, and NUMA node numbers, the kernel's limits (cpuset.py); BAR
# sizes and totals, the 57-bit address space of 5-level paging; I/O threads, more than a
# guest uses; a hugepage size, 16 GiB (in KiB), the largest any architecture has.
MAX_BAR_BYTES = 1 << 57
MAX_IOTHREADS = 64
MAX_HUGEPAGE_KIB = 16 << 20


def bar64_sizes_of(value, field_name):
    """A list of 64-bit BAR sizes in bytes (a plan's or an option's) as a tuple of ints,
    each refused like any count when it is not a whole number."""
    if value in (None, ""):
        return ()
    if not isinstance(value, (list, tuple)):
        raise GpuhostError("%r is not a list of BAR sizes" % (value,), field=field_name,
                           fix="give the size in bytes of each 64-bit BAR, e.g. "
                               "[137438953472, 33554432]")
    return tuple(whole_number(size, "%s[%d]" % (field_name, index), 0, MAX_BAR_BYTES)
                 for index, size in enumerate(value))


def memory_kib_of(memory_gib, field_name):
    """GiB (a finite positive number, shared validator) -> KiB."""
    return int(round(finite_number(memory_gib, field_name, unit="GiB") * GIB_KIB))


def hugepage_size_to_kib(value, field_name="hugepage_size"):
    """``1G``/``2M``/``1048576``/``none`` -> KiB (None for no hugepages): the shared
    validator (validators.hugepage_size_kib); the number 0 stays "no hugepages"."""
    if value == 0 and not isinstance(value, bool):
        return None
    return hugepage_size_kib(value, field_name)


def spec_from_plan(tenant, **overrides):
    """A DomainSpec from one ``tenants[]`` entry of a numa_cpuset plan.

    ``overrides`` sets the DomainSpec fields the plan does not carry (disk, network,
    seed_path, domain_type, hide_kvm, vcpusched, ...).
    """
    if not isinstance(tenant, dict):
        raise GpuhostError("the plan entry is not a mapping", field="plan",
                           fix="pass one element of the plan's tenants list, e.g. "
                               "plan.tenants[0] (see docs/plan-format.md)")
    for key in ("name", "vcpus", "vcpu_pins", "memory_gib"):
        if key not in tenant:
            raise GpuhostError("the plan entry has no %r" % key, field="plan.%s" % key,
                               fix="pass a tenants[] entry of the numa_cpuset plan "
                                   "(docs/plan-format.md)")
    numatune = tenant.get("numatune") or {}
    nodeset = numatune.get("nodeset")
    if nodeset is None and tenant.get("node") is not None:
        nodeset = str(tenant["node"])
    gpus = [GpuSpec(address=g["address"], functions=tuple(g.get("functions") or ()),
                    bar64_total=whole_number(g.get("bar64_total") or 0,
                                             "plan.gpus[%d].bar64_total" % index, 0,
                                             MAX_BAR_BYTES),
                    bar64_sizes=bar64_sizes_of(g.get("bar64_sizes"),
                                               "plan.gpus[%d].bar64_sizes" % index),
                    origin="plan.gpus[%d]" % index)
            for index, g in enumerate(tenant.get("gpus") or ())]
    network = overrides.pop("network", None)
    vf = tenant.get("vf") or None
    if network is None:
        network = NetworkSpec(kind="vf", vf_address=vf["address"]) if vf else NetworkSpec()
    elif network.kind == "vf" and not network.vf_address:
        if not vf:
            raise GpuhostError("network is 'vf' but the plan gave this tenant no VF",
                               field="network.type",
                               fix="set nic_vf: true in the tenant request, or give "
                                   "network.vf_address, or use a bridge")
        network.vf_address = vf["address"]
    if vf and network.kind == "vf" and network.vf_mode == "interface" and \
            str(PciAddress.parse(network.vf_address, field="network.vf_address")) == \
            str(PciAddress.parse(vf["address"], field="plan.vf.address")):
        # The plan's VF: its MAC and VLAN, unless the network options say otherwise.
        # libvirt sets both on the VF when the domain starts (and clears a VLAN the XML
        # does not name), so they must be in the XML, not only set by sriov_vfs.
        settings = vf_settings(vf)
        if network.mac is None:
            network.mac = settings["mac"]
        if network.vlan is None:
            network.vlan = settings["vlan"] or None
    size = tenant.get("hugepage_size_kib")
    memory_node = tenant.get("memory_node")
    # A whole NVSwitch board's NVSwitches go to its one tenant with the GPUs.
    switches = tuple(normalize_address(s.get("address") if isinstance(s, dict) else None,
                                       field="plan.nvswitches[%d]" % index)
                     for index, s in enumerate(tenant.get("nvswitches") or ()))
    if switches:
        overrides["extra_hostdevs"] = tuple(overrides.get("extra_hostdevs") or ()) + tuple(
            s for s in switches if s not in (overrides.get("extra_hostdevs") or ()))
    values = dict(
        name=tenant["name"],
        vcpus=whole_number(tenant["vcpus"], "plan.vcpus", 1, MAX_CPUS),
        vcpu_pins=_pins(tenant["vcpu_pins"], "plan.vcpu_pins"),
        memory_kib=memory_kib_of(tenant["memory_gib"], "plan.memory_gib"),
        memory_nodeset=parse_nodeset(nodeset, "plan.numatune.nodeset"),
        memory_node=None if memory_node is None
        else whole_number(memory_node, "plan.memory_node", 0, MAX_NODE),
        numa_mode=numatune.get("mode", "strict"),
        guest_cells=_guest_cells(tenant.get("guest_cells")),
        guest_topology=tenant.get("guest_topology"),
        emulator_cpus=parse_cpulist(tenant.get("emulator_cpus"), field="plan.emulator_cpus"),
        iothreads=whole_number(tenant.get("iothreads") or 0, "plan.iothreads", 0,
                               MAX_IOTHREADS),
        iothread_cpus=parse_cpulist(tenant.get("iothread_cpus"), field="plan.iothread_cpus"),
        hugepage_size_kib=whole_number(size, "plan.hugepage_size_kib", 1, MAX_HUGEPAGE_KIB)
        if size else None,
        gpus=gpus,
        network=network,
        options=dict(PLAN_OPTION_NAMES),
    )
    values.update(overrides)
    spec = DomainSpec(**values)
    validate_spec(spec)
    return spec


def _guest_cells(cells):
    """GuestCells of a plan entry's ``guest_cells``; checked against the rest of the spec
    by validate_spec."""
    if cells is None:
        return ()
    if not isinstance(cells, (list, tuple)) or len(cells) > MAX_NODE + 1:
        raise GpuhostError("guest_cells is not a list of cells", field="plan.guest_cells",
                           fix="pass the plan entry unchanged (docs/plan-format.md)")
    found = []
    for index, cell in enumerate(cells):
        where = "plan.guest_cells[%d]" % index
        if not isinstance(cell, dict):
            raise GpuhostError("%s is not a mapping" % where, field=where,
                               fix="pass the plan entry unchanged (docs/plan-format.md)")
        found.append(GuestCell(
            vcpus=parse_cpulist(cell.get("vcpus"), field=where + ".vcpus"),
            memory_kib=memory_kib_of(cell.get("memory_gib"), where + ".memory_gib"),
            host_node=whole_number(cell.get("memory_node"), where + ".memory_node", 0, MAX_NODE),
            gpus=tuple(normalize_address(g, field=where + ".gpus")
                       for g in cell.get("gpus") or ())))
    return tuple(found)


def spec_from_options(name, vcpus, vcpu_pins, memory_gib, **kwargs):
    """A DomainSpec from the module's structured options."""
    pins = _pins(vcpu_pins, "vcpu_pins")
    values = dict(
        name=name, vcpus=whole_number(vcpus, "vcpus", 1, MAX_CPUS), vcpu_pins=pins,
        memory_kib=memory_kib_of(memory_gib, "memory_gib"),
    )
    for key in ("emulator_cpus", "iothread_cpus"):
        if key in kwargs:
            kwargs[key] = parse_cpulist(kwargs[key], field=OPTION_NAMES[key])
    if "memory_nodeset" in kwargs:
        kwargs["memory_nodeset"] = parse_nodeset(kwargs["memory_nodeset"],
                                                 OPTION_NAMES["memory_nodeset"])
    values.update(kwargs)
    spec = DomainSpec(**values)
    validate_spec(spec)
    return spec


def _validate_cells(spec):
    """Guest cells share the vCPUs and the memory out exactly, each from a node of the
    numatune nodeset, so that libvirt and the guest see the layout the plan made."""
    if not spec.guest_cells:
        return
    field = spec.option("guest_cells")
    vcpus = sorted(v for cell in spec.guest_cells for v in cell.vcpus)
    if vcpus != list(range(spec.vcpus)):
        raise GpuhostError("the guest cells hold vCPUs %s, not each of 0-%d once"
                           % (format_cpulist(vcpus), spec.vcpus - 1), field=field,
                           fix="pass the plan entry unchanged (docs/plan-format.md)")
    memory = sum(cell.memory_kib for cell in spec.guest_cells)
    if memory != spec.memory_kib:
        raise GpuhostError("the guest cells hold %d KiB of the tenant's %d KiB"
                           % (memory, spec.memory_kib), field=field,
                           fix="pass the plan entry unchanged (docs/plan-format.md)")
    outside = sorted({c.host_node for c in spec.guest_cells} - set(spec.memory_nodeset))
    if outside:
        raise GpuhostError("guest cells are backed by node %s, outside the numatune nodeset %s"
                           % (format_cpulist(outside), format_cpulist(spec.memory_nodeset)),
                           field=field, fix="pass the plan entry unchanged (docs/plan-format.md)")


def validate_spec(spec):
    """Refuse a spec libvirt would reject or that could not be what was meant."""
    domain_name(spec.name)
    if spec.vcpus < 1:
        raise GpuhostError("vcpus is %d" % spec.vcpus, field=spec.option("vcpus"),
                           fix="give 1 or more")
    if len(spec.vcpu_pins) != spec.vcpus:
        raise GpuhostError(
            "%d vCPUs but %d vcpu pins" % (spec.vcpus, len(spec.vcpu_pins)),
            field=spec.option("vcpu_pins"), fix="give exactly one pin per vCPU (index = vCPU number)")
    topo = spec.guest_topology
    if topo:
        product = 1
        for key in ("sockets", "dies", "cores", "threads"):
            product *= whole_number(topo.get(key, 1),
                                    "%s.%s" % (spec.option("guest_topology"), key), 1, MAX_CPUS)
        if product != spec.vcpus:
            raise GpuhostError(
                "guest_topology gives %d vCPUs (sockets*dies*cores*threads) but vcpus is %d"
                % (product, spec.vcpus), field=spec.option("guest_topology"),
                fix="make sockets*dies*cores*threads equal vcpus")
    _validate_cells(spec)
    if spec.memory_kib < 1024:
        raise GpuhostError("memory of %d KiB is too small" % spec.memory_kib,
                           field=spec.option("memory_gib"),
                           fix="give at least a few hundred MiB")
    if spec.hugepage_size_kib and spec.memory_kib % spec.hugepage_size_kib:
        raise GpuhostError(
            "memory %d KiB is not a multiple of the hugepage size %d KiB"
            % (spec.memory_kib, spec.hugepage_size_kib), field=spec.option("memory_gib"),
            fix="round memory_gib to a whole number of hugepages")
    whole_number(spec.iothreads, spec.option("iothreads"), 0, MAX_IOTHREADS)
    if spec.disk and spec.disk.iothread and spec.disk.iothread > spec.iothreads:
        spec.disk.iothread = None
    if spec.numa_mode not in ("strict", "preferred", "interleave", "restrictive"):
        raise GpuhostError("numatune mode %r" % spec.numa_mode,
                           field=spec.option("numa_mode"),
                           fix="use strict (the runbook's choice)")
    if spec.vcpusched:
        scheduler = spec.vcpusched.get("scheduler")
        priority = spec.vcpusched.get("priority")
        if scheduler not in ("fifo", "rr"):
            raise GpuhostError("vcpusched scheduler %r" % (scheduler,),
                               field="vcpusched.scheduler", fix="use fifo or rr")
        if priority is None or not 1 <= int(priority) <= 99:
            raise GpuhostError("vcpusched priority %r" % (priority,),
                               field="vcpusched.priority",
                               fix="give a real-time priority from 1 to 99 (1 is enough "
                                   "to beat normal tasks; keep it below the kernel's "
                                   "threaded IRQs at 50)")
    if spec.maxphysaddr_mode not in ("auto", "emulate", "passthrough", "none"):
        raise GpuhostError("maxphysaddr mode %r" % spec.maxphysaddr_mode,
                           field="maxphysaddr.mode",
                           fix="use auto, emulate, passthrough or none")
    if spec.maxphysaddr_mode == "passthrough" and spec.cpu_mode != "host-passthrough":
        raise GpuhostError("maxphysaddr passthrough needs cpu mode host-passthrough",
                           field="maxphysaddr.mode", fix="use auto or emulate")
    validate_firmware(spec)
    if spec.network.kind == "bridge" and not spec.network.bridge:
        raise GpuhostError("network type bridge without a bridge name",
                           field="network.bridge", fix="give the host bridge, e.g. br0")
    if spec.network.mac is not None:
        spec.network.mac = validate_mac(spec.network.mac, field="network.mac")
    if spec.network.vlan is not None:
        spec.network.vlan = validate_vlan(spec.network.vlan, field="network.vlan") or None
        if spec.network.vlan and not (spec.network.kind == "vf"
                                      and spec.network.vf_mode == "interface"):
            raise GpuhostError(
                "a VLAN tag needs network type vf with vf_mode interface (here %s%s)"
                % (spec.network.kind, ", vf_mode %s" % spec.network.vf_mode
                   if spec.network.kind == "vf" else ""), field="network.vlan",
                fix="use vf_mode interface, or set the VLAN on the VF with "
                    "gpuhost.kvm.sriov_vfs (vfs: vlan) for a plain hostdev")
    seen = {}
    origins = hostdev_origins(spec)
    for address in spec.hostdev_addresses():
        where = origins.get(address, "hostdevs")
        canonical = str(PciAddress.parse(address, field=where))
        if canonical in seen:
            raise GpuhostError("%s is passed through twice" % canonical, field=where,
                               fix="list every host PCI function once")
        seen[canonical] = True


# libvirt reads <os><firmware><feature> since 7.2.0. 7.0 (Debian 11, the el9like lab)
# drops the element without a word and takes the first descriptor that fits: Debian 11's
# 40-edk2-x86_64-secure-enrolled.json, Secure Boot with Microsoft's keys, whichever of
# efi and efi-secure was asked (checked on the lab: OVMF_CODE_4M.ms.fd and SMM on for a
# plain firmware='efi'; with SMM off it refused to start).
FIRMWARE_FEATURES_SINCE = (7, 2, 0)


def firmware_features_expressible(spec):
    """Whether the spec's libvirt keeps <os><firmware><feature> (unknown: assume it does)."""
    return spec.libvirt_version is None or tuple(spec.libvirt_version) >= FIRMWARE_FEATURES_SINCE


def check_firmware_on_libvirt(spec):
    """Refuse UEFI where the spec's libvirt cannot be told which build to take (on the
    test driver the choice is only left out: boots_a_guest)."""
    if spec.firmware not in FIRMWARE_FEATURES or not boots_a_guest(spec):
        return
    if not firmware_features_expressible(spec):
        raise GpuhostError(
            "firmware %s needs libvirt %s or newer to choose the UEFI build (<os><firmware>"
            "<feature>); libvirt %s drops that choice and boots the first descriptor's "
            "build, on Debian 11 Secure Boot with Microsoft's keys enrolled"
            % (spec.firmware, version_text(FIRMWARE_FEATURES_SINCE),
               version_text(spec.libvirt_version)),
            field="firmware",
            fix="use firmware bios on this host (vm_gpu_firmware, or the tenant's "
                "firmware key), or upgrade libvirt to %s or newer"
                % version_text(FIRMWARE_FEATURES_SINCE))


def validate_firmware(spec):
    """Refuse a firmware choice the machine cannot boot: OVMF is x86_64 firmware for
    q35 (its descriptors name pc-q35-* machines), and Secure Boot needs SMM, which
    i440fx lacks."""
    if spec.firmware not in FIRMWARE_CHOICES:
        raise GpuhostError("firmware %r" % (spec.firmware,), field="firmware",
                           fix="use one of %s" % ", ".join(FIRMWARE_CHOICES))
    if spec.firmware == "bios":
        return
    machine = spec.machine or ""
    if not (machine == "q35" or MACHINE_ALIASES["q35"].match(machine)) \
            or spec.arch != "x86_64":
        raise GpuhostError(
            "firmware %s needs an x86_64 q35 machine, not %s %s"
            % (spec.firmware, spec.arch, machine), field="firmware",
            fix="use machine q35 (the runbook's), or firmware bios for an i440fx guest")


# --------------------------------------------------------------------------------------
# maxphysaddr

# libvirt reads <maxphysaddr> since 8.7.0 (RHEL 9.2's 9.0 does; RHEL 9.0's 8.0 and Debian
# 11's 7.0 do not). An older one drops the element without a word, its parser skipping
# what it does not know: the guest keeps QEMU's default width, and the definition read
# back never matches the one written, so every run would define the domain again.
MAXPHYSADDR_SINCE = (8, 7, 0)


def boots_a_guest(spec):
    """libvirt's test driver boots nothing: what an older libvirt cannot tell QEMU is
    only left out there, never refused, as that libvirt would leave it out."""
    return spec.domain_type != "test"


def libvirt_writes_maxphysaddr(spec):
    """Whether the spec's libvirt keeps <maxphysaddr> (an unknown version is taken as one
    that does)."""
    return spec.libvirt_version is None or tuple(spec.libvirt_version) >= MAXPHYSADDR_SINCE


def version_text(version):
    return ".".join(str(part) for part in version)


def qemu_default_width(spec, memory, boards):
    """The AddressWidth a guest gets where libvirt cannot write <maxphysaddr>: QEMU's
    default width, refused when the GPUs' windows need more, or when the mode asks for
    a width libvirt cannot set."""
    version = version_text(spec.libvirt_version)
    if spec.maxphysaddr_mode != "auto" and boots_a_guest(spec):
        raise GpuhostError(
            "maxphysaddr mode %s needs libvirt %s or newer (<maxphysaddr>); this host's "
            "libvirt is %s" % (spec.maxphysaddr_mode, version_text(MAXPHYSADDR_SINCE), version),
            field="maxphysaddr.mode",
            fix="set maxphysaddr.mode auto (QEMU's default width, checked against the GPUs' "
                "BARs) or none, or upgrade libvirt to %s or newer"
                % version_text(MAXPHYSADDR_SINCE))
    width, holds = address_width.evaluate(
        address_width.QEMU_DEFAULT_PHYS_BITS, spec.firmware, memory, boards,
        spec.cpu_vendor, spec.cpu_1g_pages)
    if not holds and boots_a_guest(spec):
        raise GpuhostError(
            "tenant %s needs a guest address width above QEMU's default %d bits for its "
            "GPUs' 64-bit BARs, and libvirt %s cannot set one (<maxphysaddr> needs %s)"
            % (spec.name, address_width.QEMU_DEFAULT_PHYS_BITS, version,
               version_text(MAXPHYSADDR_SINCE)),
            field=spec.option("gpus"),
            fix="upgrade libvirt to %s or newer (RHEL 9.2 and later), or give the tenant "
                "GPUs with smaller BARs" % version_text(MAXPHYSADDR_SINCE))
    return width


def address_width_for(spec):
    """The AddressWidth (domain.address_width) of the spec's <maxphysaddr>, or None when
    it is left out or passed through with the host's width unknown. ``auto`` chooses the
    width by the one rule; an explicit width is reported with the window it yields.
    Where libvirt cannot write the element, the width is QEMU's default, if it holds."""
    mode = spec.maxphysaddr_mode
    if mode == "none":
        return None
    if not libvirt_writes_maxphysaddr(spec):
        return qemu_default_width(spec, spec.memory_kib * KIB,
                                  [gpu.bar_sizes() for gpu in spec.gpus])
    boards = [gpu.bar_sizes() for gpu in spec.gpus]
    memory = spec.memory_kib * KIB
    if mode == "passthrough" or (mode == "emulate" and spec.maxphysaddr_bits):
        bits = spec.maxphysaddr_bits if mode == "emulate" else spec.host_phys_bits
        if not bits:
            return None
        return address_width.evaluate(int(bits), spec.firmware, memory, boards,
                                      spec.cpu_vendor, spec.cpu_1g_pages)[0]
    return address_width.choose_address_width(
        spec.name, memory, boards, firmware=spec.firmware, vendor=spec.cpu_vendor,
        gib_pages=spec.cpu_1g_pages, host_bits=spec.host_phys_bits,
        field=spec.option("gpus"))


def maxphysaddr_for(spec):
    """(mode, bits) for <maxphysaddr>, or None to leave it out (mode none, or a libvirt
    that cannot write it: address_width_for says whether QEMU's default will do)."""
    mode = spec.maxphysaddr_mode
    if mode == "none":
        return None
    if not libvirt_writes_maxphysaddr(spec):
        address_width_for(spec)
        return None
    if mode == "passthrough":
        return ("passthrough", spec.maxphysaddr_bits)
    if mode == "emulate" and spec.maxphysaddr_bits:
        return ("emulate", int(spec.maxphysaddr_bits))
    return ("emulate", address_width_for(spec).bits)


# The machine types libvirt expands a short name to.
MACHINE_ALIASES = {"q35": re.compile(r"^pc-q35-[\d.]+\Z"),
                   "pc": re.compile(r"^pc-i440fx-[\d.]+\Z")}
