# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host topology model: CPUs, NUMA nodes, IRQs, the IOMMU and PCI functions.

Every reader takes ``root`` (default ``/``) so that tests can point it at a recorded
tree. A HostTopology can be turned into plain data (``to_dict``) and back
(``from_dict``), which is how numa_cpuset accepts a topology "passed in as data".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from typing import Dict, Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import reader
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import MAX_CPUS
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    Bar, PciFunction, read_pci_functions)


@dataclass
class Cpu:
    id: int
    online: bool
    package: Optional[int] = None
    die: Optional[int] = None
    core: Optional[int] = None
    thread_siblings: Tuple[int, ...] = ()   # includes the CPU itself
    node: Optional[int] = None


@dataclass
class CpuState:
    possible: Tuple[int, ...] = ()
    present: Tuple[int, ...] = ()
    online: Tuple[int, ...] = ()
    isolated: Tuple[int, ...] = ()
    nohz_full: Tuple[int, ...] = ()
    cpus: Dict[int, Cpu] = field(default_factory=dict)
    flags: Tuple[str, ...] = ()             # from /proc/cpuinfo, e.g. pdpe1gb
    vendor: Optional[str] = None            # GenuineIntel, AuthenticAMD, ...
    phys_bits: Optional[int] = None         # "address sizes : N bits physical"


@dataclass
class HugepagePool:
    size_kib: int
    nr: int = 0
    free: int = 0
    surplus: int = 0


@dataclass
class NumaNode:
    id: int
    cpus: Tuple[int, ...] = ()
    mem_total_kib: Optional[int] = None
    mem_free_kib: Optional[int] = None
    hugepages: Dict[int, HugepagePool] = field(default_factory=dict)   # by size_kib
    distances: Dict[int, int] = field(default_factory=dict)           # to node id


@dataclass
class Irq:
    irq: str                                # "24", or "NMI", "LOC", ... for summary rows
    number: Optional[int] = None            # None for the summary rows
    counts: Tuple[int, ...] = ()
    chip: Optional[str] = None
    hwirq: Optional[str] = None
    name: Optional[str] = None              # the action names, e.g. "nvme0q1"
    smp_affinity_list: Optional[Tuple[int, ...]] = None
    effective_affinity_list: Optional[Tuple[int, ...]] = None
    cpus: Tuple[int, ...] = ()              # the CPU of each entry of ``counts``: the
    #                                         header's columns (offline CPUs have none)
    trigger: Optional[str] = None           # edge, level, fasteoi, ... when printed
    total: Optional[int] = None             # rows with one system-wide value (ERR, MIS):
    #                                         that value, and no per-CPU ``counts``


@dataclass
class IommuState:
    enabled: bool = False
    vendor: Optional[str] = None            # "intel", "amd" or None
    passthrough: bool = False               # iommu=pt (default domain type identity)
    units: Tuple[str, ...] = ()             # /sys/class/iommu entries: dmar0, ivhd0
    acpi_tables: Tuple[str, ...] = ()       # DMAR and/or IVRS
    groups: Dict[int, Tuple[str, ...]] = field(default_factory=dict)
    cmdline: Dict[str, str] = field(default_factory=dict)   # intel_iommu, amd_iommu,
    #                                          iommu, pcie_acs_override, vfio-pci.ids
    interrupt_remapping: Optional[bool] = None
    interrupt_remapping_source: str = "unknown"
    acs_override: Optional[str] = None
    mode: Optional[str] = None              # default domain type: identity, DMA, DMA-FQ
    group_types: Dict[int, str] = field(default_factory=dict)   # group -> type file


@dataclass
class HostTopology:
    cpus: CpuState
    nodes: Dict[int, NumaNode]
    pci: Dict[str, PciFunction]
    iommu: IommuState
    irqs: Dict[str, Irq] = field(default_factory=dict)
    warnings: Tuple[str, ...] = ()          # firmware faults the readers worked around


CPU_DIR = sysfs.SYS_CPU_DIR
LOCAL_DISTANCE = 10                         # the kernel's distance of a node to itself
_NODE_LINK_RE = re.compile(r"^node(\d+)\Z")
_HUGEPAGE_DIR_RE = re.compile(r"^hugepages-(\d+)kB\Z")
# A node's meminfo ("Node 0 MemTotal:  1024 kB") and /proc/meminfo ("MemTotal:  1024 kB")
_MEMINFO_RE = re.compile(r"^(?:Node\s+\d+\s+)?(\w+):\s+(\d+)")
_TRIGGERS = ("edge", "level", "fasteoi", "simple", "percpu", "percpu_devid", "bad")


# ---------------------------------------------------------------- CPUs

_ADDRESS_SIZES_RE = re.compile(r"^\s*(\d+)\s+bits\s+physical")


def read_cpuinfo_summary(root="/"):
    """Vendor, flags and physical address bits of the first CPU in /proc/cpuinfo (all
    CPUs share them); each None or () when the file does not say."""
    vendor = None
    flags = ()
    phys_bits = None
    try:
        lines = reader.read_file_text(sysfs.path(root, "proc/cpuinfo")).splitlines()
    except (OSError, GpuhostError):
        lines = []
    for line in lines:
        if "\x00" in line:
            # not a line the kernel printed: its value is unknown, as in
            # sysfs.read_text, and the next CPU's line gives it
            continue
        key, dummy, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and vendor is None:
            vendor = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = tuple(value.split())
        elif key == "address sizes" and phys_bits is None:
            match = _ADDRESS_SIZES_RE.match(value)
            phys_bits = int(match.group(1)) if match else None
        if vendor is not None and flags and phys_bits is not None:
            break
    return vendor, flags, phys_bits


def _optional_id(file_path):
    value = sysfs.read_int(file_path)
    return None if value is None or value < 0 else value


def read_online_cpus(root="/", field="root"):
    """/sys/devices/system/cpu/online, strict, for a module about to act on CPUs: None
    when the file is absent (read_cpu_state then asks each cpuN/online), else its CPUs.
    A file that is there but empty, unreadable, holding a NUL inside or anything but a
    cpulist is refused, naming the file and ``field`` (the option that chose the tree):
    the kernel always has one online CPU, so such a file is not the kernel's."""
    file_path = sysfs.path(root, CPU_DIR, "online")
    if not os.path.lexists(file_path):
        return None
    text = sysfs.read_text(file_path, inner_nul_unknown=False)
    cpus = sysfs.parse_cpus_text(text) if text is not None and "\x00" not in text else None
    if not cpus:
        raise GpuhostError(
            "/%s/online holds %s, not the list of online CPUs the kernel prints"
            % (CPU_DIR, "nothing readable" if text is None else sysfs.shown_value(text)),
            field=field,
            fix="check what is mounted at sys/ under root (on a live host: cat "
                "/sys/devices/system/cpu/online), then run again")
    return cpus


def read_cpu_state(root="/", node_cpus=None):
    """Online/present/possible CPUs, isolation and each CPU's package/die/core/node.

    Offline CPUs have no topology/ directory: their package, core and siblings stay
    unknown (None, ()). Old kernels give siblings only as hex masks (thread_siblings).
    A CPU's node comes from ``node_cpus`` (sysfs.read_node_cpus: one node per CPU).
    """
    base = sysfs.path(root, CPU_DIR)
    state = CpuState()
    state.possible = sysfs.read_cpus_attr(os.path.join(base, "possible"), default=())
    state.present = sysfs.read_cpus_attr(os.path.join(base, "present"), default=())
    state.isolated = sysfs.read_cpus_attr(os.path.join(base, "isolated"), default=())
    state.nohz_full = sysfs.read_cpus_attr(os.path.join(base, "nohz_full"), default=())
    state.vendor, state.flags, state.phys_bits = read_cpuinfo_summary(root)

    ids = sysfs.read_cpu_ids(root)
    state.online = sysfs.read_online_cpu_ids(root, ids=ids)
    online_set = set(state.online)

    if node_cpus is None:
        node_cpus = sysfs.read_node_cpus(root)
    cpu_node = {}
    for node, cpus in node_cpus.items():
        for cpu in cpus:
            cpu_node.setdefault(cpu, node)

    for cpu in ids:
        cpu_dir = os.path.join(base, "cpu%d" % cpu)
        record = Cpu(id=cpu, online=cpu in online_set)
        topo = os.path.join(cpu_dir, "topology")
        if os.path.isdir(topo):
            record.package = _optional_id(os.path.join(topo, "physical_package_id"))
            record.die = _optional_id(os.path.join(topo, "die_id"))
            record.core = _optional_id(os.path.join(topo, "core_id"))
            siblings = sysfs.read_cpus_attr(os.path.join(topo, "thread_siblings_list"))
            if siblings is None:
                siblings = sysfs.read_cpus_attr(os.path.join(topo, "core_cpus_list"))
            if siblings is None:
                siblings = sysfs.read_cpus_attr(os.path.join(topo, "thread_siblings"),
                                                is_mask=True, default=())
            record.thread_siblings = siblings
        record.node = cpu_node.get(cpu)
        if record.node is None and not node_cpus:
            # only without node directories: a cpuN/nodeM link to a node that is not
            # online (hwloc's offline-node0 tree) must not invent that node
            for entry in sysfs.list_dir(cpu_dir):
                match = _NODE_LINK_RE.match(entry)
                if match:
                    record.node = int(match.group(1))
                    break
        state.cpus[cpu] = record
    return state


# ---------------------------------------------------------------- NUMA nodes

def _read_node_meminfo(file_path):
    values = {}
    text = sysfs.read_text(file_path)
    for line in (text or "").splitlines():
        match = _MEMINFO_RE.match(line)
        if match:
            values[match.group(1)] = int(match.group(2))
    return values


def _read_node_memory(node, meminfo_path, hugepages_dir):
    """MemTotal, MemFree and the hugepage pools of one node (or of the whole host)."""
    meminfo = _read_node_meminfo(meminfo_path)
    node.mem_total_kib = meminfo.get("MemTotal")
    node.mem_free_kib = meminfo.get("MemFree")
    for entry in sysfs.list_dir(hugepages_dir):
        match = _HUGEPAGE_DIR_RE.match(entry)
        if not match:
            continue
        size = int(match.group(1))
        pool_dir = os.path.join(hugepages_dir, entry)
        node.hugepages[size] = HugepagePool(
            size_kib=size,
            nr=sysfs.read_int(os.path.join(pool_dir, "nr_hugepages"), 0),
            free=sysfs.read_int(os.path.join(pool_dir, "free_hugepages"), 0),
            surplus=sysfs.read_int(os.path.join(pool_dir, "surplus_hugepages"), 0))
    node.hugepages = dict(sorted(node.hugepages.items()))


def read_numa_nodes(root="/", node_cpus=None, present=None):
    """NUMA nodes by id (ids may be sparse: 0, 8, 250-255).

    A node's CPUs come from sysfs.read_node_cpus, limited to the present CPUs: some
    kernels (POWER9) list possible-but-absent CPUs there. CPU-less and memory-less
    nodes are kept, with no CPUs or a MemTotal of 0. ``distances`` maps every other
    node id to the firmware's (SLIT) distance.

    A kernel without NUMA has no node directory: its one node 0 takes its memory from
    /proc/meminfo and its hugepage pools from /sys/kernel/mm/hugepages, which is where
    such a kernel keeps them, and its distance to itself is the kernel's local 10.
    """
    base = sysfs.path(root, sysfs.SYS_NODE_DIR)
    numa_absent = not os.path.isdir(base)
    if node_cpus is None:
        node_cpus = sysfs.read_node_cpus(root)
    if present is None:
        present = sysfs.read_cpus_attr(sysfs.path(root, CPU_DIR, "present"), default=())
    present_set = set(present)
    ids = sorted(node_cpus)
    # The kernel prints one distance per online node; recorded trees with a node taken
    # offline by hand still list the possible ones, so match by length.
    orders = [sysfs.read_cpus_attr(os.path.join(base, "online")),
              sysfs.read_cpus_attr(os.path.join(base, "possible")), tuple(ids)]
    nodes = {}
    for node_id in ids:
        node_dir = os.path.join(base, "node%d" % node_id)
        cpus = node_cpus[node_id]
        if present_set:
            cpus = tuple(cpu for cpu in cpus if cpu in present_set)
        node = NumaNode(id=node_id, cpus=cpus)
        if numa_absent:
            _read_node_memory(node, sysfs.path(root, "proc/meminfo"),
                              sysfs.path(root, "sys/kernel/mm/hugepages"))
            node.distances = {node_id: LOCAL_DISTANCE}
            nodes[node_id] = node
            continue
        _read_node_memory(node, os.path.join(node_dir, "meminfo"),
                          os.path.join(node_dir, "hugepages"))
        distances = (sysfs.read_text(os.path.join(node_dir, "distance")) or "").split()
        if not all(value.isdigit() and value.isascii() for value in distances):
            # Not the kernel's list of numbers: the distances are unknown, as when the
            # file is missing (nothing decides on them; they are reported).
            distances = []
        for order in orders:
            if order and len(order) == len(distances):
                node.distances = {other: int(value)
                                  for other, value in zip(order, distances)}
                break
        nodes[node_id] = node
    return nodes


# ---------------------------------------------------------------- IRQs

def _split_trigger(token):
    """``65536-edge`` -> ("65536", "edge"); ``IR-PCI-MSI-edge`` -> ("IR-PCI-MSI", "edge")."""
    head, sep, tail = token.rpartition("-")
    if sep and tail.lower() in _TRIGGERS:
        return head, tail.lower()
    return token, None


# x86 and MIPS print these with one system-wide count (irq_err_count, irq_mis_count),
# ARM with "Err": "%*s: %10u\n", not one column per CPU.
_SYSTEM_WIDE_ROWS = ("ERR", "MIS", "Err")


def _parse_irq_row(label, tokens, ncpus, columns):
    """One /proc/interrupts row after its ``label:``."""
    if not label.isdigit() and len(tokens) == 1 and tokens[0].isdigit() and (
            ncpus > 1 or label in _SYSTEM_WIDE_ROWS):
        # One number and no description under several CPU columns: a system-wide
        # total (ERR, MIS); pairing it with the first column would count it as CPU0's.
        return Irq(irq=label, total=int(tokens[0]))
    try:
        counts = tuple(map(int, tokens[:ncpus]))
        rest = tokens[ncpus:]
        if len(counts) < ncpus and rest:
            raise ValueError
    except ValueError:
        taken = []
        for token in tokens[:ncpus]:
            if not token.isdigit():
                break
            taken.append(int(token))
        counts = tuple(taken)
        rest = tokens[len(taken):]
    irq = Irq(irq=label, counts=counts, cpus=columns[:len(counts)])
    if not label.isdigit():
        irq.name = " ".join(rest) or None
        return irq
    irq.number = int(label)
    if not rest:
        return irq
    irq.chip, irq.trigger = _split_trigger(rest[0])
    position = 1
    if position < len(rest):
        hwirq, trigger = _split_trigger(rest[position])
        if re.match(r"^(0x)?[0-9a-fA-F]+\Z", hwirq) and (trigger or hwirq.isdigit()):
            irq.hwirq = hwirq
            irq.trigger = trigger or irq.trigger
            position += 1
            if position < len(rest) and rest[position].lower() in _TRIGGERS:
                irq.trigger = rest[position].lower()
                position += 1
    irq.name = " ".join(rest[position:]) or None
    return irq


_INTERRUPTS_COLUMN_RE = re.compile(r"CPU([0-9]{1,4})")


def _interrupts_columns(header_line, field):
    """The CPU of each column of /proc/interrupts' header (``CPU0 CPU1 CPU4``).

    Each word is CPU and a number below the kernel's 8192 CPUs, in increasing order
    (show_interrupts() prints the online CPUs in order): anything else cannot be paired
    with the counts below it, so it is refused, naming the file and the word."""
    header = header_line.split()
    fix = ("the file is not the kernel's /proc/interrupts: check what is mounted at "
           "proc/ under root, or read it again from a live host")
    if not header:
        raise GpuhostError("the first line of /proc/interrupts does not name CPUs",
                           field=field, fix=fix)
    columns = []
    for word in header:
        match = _INTERRUPTS_COLUMN_RE.fullmatch(word)
        if match is None or int(match.group(1)) >= MAX_CPUS:
            raise GpuhostError("the header of /proc/interrupts names %r, not a CPU below %d"
                               % (word[:40], MAX_CPUS), field=field, fix=fix)
        cpu = int(match.group(1))
        if columns and cpu <= columns[-1]:
            raise GpuhostError("the header of /proc/interrupts names CPU%d after CPU%d: "
                               "the columns are not in increasing order"
                               % (cpu, columns[-1]), field=field, fix=fix)
        columns.append(cpu)
    return tuple(columns)


def parse_proc_interrupts(text, field="interrupts"):
    """Parse /proc/interrupts into Irq records keyed by their label ("24", "NMI").

    ``field`` is what an error names: the text itself when it was given as a value, or
    ``root`` when it was read from the host (the readers below).

    The header names the CPU of each column; offline CPUs have no column, so counts
    are paired with ``Irq.cpus``. Rows of many thousand characters (1152 CPUs) are
    handled with one split per row.
    """
    lines = text.splitlines()
    if not lines:
        return {}
    columns = _interrupts_columns(lines[0], field)
    ncpus = len(columns)
    irqs = {}
    for number, line in enumerate(lines[1:], 2):
        if "\x00" in line:
            # show_interrupts() prints text: a NUL means the row is not the kernel's,
            # and its counts and action names (which irq_affinity selects by) are not
            # to be guessed at
            raise GpuhostError(
                "line %d of /proc/interrupts holds a NUL byte (%s)"
                % (number, sysfs.shown_value(line.strip(), 60)), field=field,
                fix="the file is not the kernel's /proc/interrupts: check what is mounted "
                    "at proc/ under root, or read it again from a live host")
        label, sep, rest = line.partition(":")
        if not sep:
            continue
        label = label.strip()
        if not label:
            continue
        irqs[label] = _parse_irq_row(label, rest.split(), ncpus, columns)
    return irqs


# vfio-pci's request_irq names (drivers/vfio/pci/vfio_pci_intrs.c): vfio-intx(ADDR),
# vfio-msi[N](ADDR), vfio-msix[N](ADDR).
_VFIO_ACTION_RE = re.compile(r"^vfio-(msix|msi|intx)(?:\[([0-9]{1,6})\])?"
                             r"\(([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\)\Z")


def vfio_actions(name):
    """[(action name, kind, PCI address)] of the vfio-pci handlers among an IRQ's action
    names (a shared line's names, joined with ", " in /proc/interrupts and with "," in
    /sys/kernel/irq/N/actions); kind is msix, msi or intx."""
    found = []
    for action in (name or "").split(","):
        match = _VFIO_ACTION_RE.match(action.strip())
        if match:
            found.append((action.strip(), match.group(1), match.group(3)))
    return found


def read_irqs(root="/", with_affinity=True):
    """/proc/interrupts, plus each IRQ's smp_affinity_list and effective_affinity_list."""
    text = sysfs.read_text(sysfs.path(root, "proc/interrupts"), inner_nul_unknown=False)
    if text is None:
        return {}
    irqs = parse_proc_interrupts(text, field="root")
    if with_affinity:
        base = sysfs.path(root, "proc/irq")
        for irq in irqs.values():
            if irq.number is None:
                continue
            irq_dir = os.path.join(base, irq.irq)
            irq.smp_affinity_list = sysfs.read_cpus_attr(
                os.path.join(irq_dir, "smp_affinity_list"))
            irq.effective_affinity_list = sysfs.read_cpus_attr(
                os.path.join(irq_dir, "effective_affinity_list"))
    return irqs


# ---------------------------------------------------------------- IOMMU

CMDLINE_KEYS = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict",
                "pcie_acs_override", "vfio-pci.ids", "intremap",
                "vfio_iommu_type1.allow_unsafe_interrupts")
# DMAR extended capability register, bit 3: Interrupt Remapping support (VT-d spec 11.4.3)
ECAP_IR = 1 << 3


def parse_cmdline(text):
    """The IOMMU-related flags of a kernel command line (last one wins, as in the
    kernel). Module parameters treat ``-`` and ``_`` alike: vfio_pci.ids is vfio-pci.ids."""
    flags = {}
    for token in (text or "").split():
        key, _sep, value = token.partition("=")
        module, dot, param = key.partition(".")
        if dot:
            key = "%s.%s" % (module.replace("_", "-") if module == "vfio_pci" else module,
                             param)
        if key in CMDLINE_KEYS:
            flags[key] = value
    return flags


_IR_CHIP_RE = re.compile(r"\sIR-[\w-]")
_PLAIN_CHIP_RE = re.compile(r"\s(PCI-MSI|IO-APIC)")


def _interrupt_chips(root, interrupts_text=None):
    """(any IR- chip, any PCI-MSI/IO-APIC chip) in /proc/interrupts, read through
    sysfs.read_text when the caller has not read it yet."""
    if interrupts_text is None:
        interrupts_text = sysfs.read_text(sysfs.path(root, "proc/interrupts"), "",
                                          inner_nul_unknown=False)
    remapped = bool(_IR_CHIP_RE.search(interrupts_text))
    return remapped, remapped or bool(_PLAIN_CHIP_RE.search(interrupts_text))


def _interrupt_remapping(root, cmdline, units, interrupts_text):
    """Is interrupt remapping active? Returns (answer, source).

    The rule, strongest evidence first:
    1. ``intremap=off`` on the command line: no (the admin turned it off).
    2. /proc/interrupts shows an ``IR-`` chip (IR-PCI-MSI, IR-IO-APIC): yes, remapped
       interrupts are being delivered right now.
    3. /proc/interrupts shows PCI-MSI or IO-APIC chips and none with ``IR-``: no.
    4. Without /proc/interrupts: every Intel DMAR unit advertises IR in ecap (bit 3):
       yes, the kernel turns it on when all units support it; one unit without it: no.
    5. Otherwise unknown (None).
    """
    if cmdline.get("intremap") == "off":
        return False, "cmdline"
    remapped, plain = _interrupt_chips(root, interrupts_text)
    if remapped:
        return True, "proc_interrupts"
    if plain:
        return False, "proc_interrupts"
    ecaps = []
    for unit in units:
        value = sysfs.read_text(sysfs.path(root, "sys/class/iommu", unit, "intel-iommu/ecap"))
        if value:
            try:
                ecaps.append(int(value, 16))
            except ValueError:
                continue
    if ecaps:
        return all(ecap & ECAP_IR for ecap in ecaps), "ecap"
    return None, "unknown"


def read_iommu_state(root="/", interrupts_text=None):
    """IOMMU groups, units, ACPI tables, command line flags and interrupt remapping.

    ``enabled`` means the kernel created IOMMU groups: that is what VFIO needs, and
    it is true in passthrough mode (iommu=pt) too. ``mode`` is the default domain type
    most groups carry (identity = passthrough, DMA or DMA-FQ = translated); groups
    owned by vfio ("unmanaged") do not count.
    """
    state = IommuState()
    groups_dir = sysfs.path(root, "sys/kernel/iommu_groups")
    types = {}
    for entry in sysfs.list_dir(groups_dir):
        if not entry.isdigit():
            continue
        group = int(entry)
        members = sysfs.list_dir(os.path.join(groups_dir, entry, "devices"))
        state.groups[group] = tuple(sorted(members))
        group_type = sysfs.read_text(os.path.join(groups_dir, entry, "type"))
        if group_type:
            types[group] = group_type
    state.groups = dict(sorted(state.groups.items()))
    state.group_types = dict(sorted(types.items()))
    state.enabled = bool(state.groups)
    state.units = tuple(sorted(sysfs.list_dir(sysfs.path(root, "sys/class/iommu"))))
    tables = sysfs.path(root, "sys/firmware/acpi/tables")
    state.acpi_tables = tuple(t for t in ("DMAR", "IVRS") if os.path.exists(
        os.path.join(tables, t)))
    state.cmdline = parse_cmdline(sysfs.read_text(sysfs.path(root, "proc/cmdline")))
    state.acs_override = state.cmdline.get("pcie_acs_override") or None

    if any(u.startswith("dmar") for u in state.units):
        state.vendor = "intel"
    elif any(u.startswith("ivhd") for u in state.units):
        state.vendor = "amd"
    elif state.units:
        state.vendor = re.sub(r"\d+\Z", "", state.units[0]) or None
    elif "DMAR" in state.acpi_tables:
        state.vendor = "intel"
    elif "IVRS" in state.acpi_tables:
        state.vendor = "amd"

    counted = {}
    for group_type in types.values():
        if group_type not in ("unmanaged", "blocked"):
            counted[group_type] = counted.get(group_type, 0) + 1
    cmdline_pt = (state.cmdline.get("iommu") == "pt"
                  or state.cmdline.get("iommu.passthrough") in ("1", "y", "on"))
    if counted:
        state.mode = max(sorted(counted), key=lambda t: counted[t])
    elif state.enabled:
        state.mode = "identity" if cmdline_pt else None
    state.passthrough = state.mode == "identity" if state.mode else cmdline_pt

    state.interrupt_remapping, state.interrupt_remapping_source = _interrupt_remapping(
        root, state.cmdline, state.units, interrupts_text)
    return state


# ---------------------------------------------------------------- the whole host

def read_host_topology(root="/", with_irqs=True, with_irq_affinity=True):
    """Everything gpuhost.kvm knows about a host, read once from ``root``.

    ``warnings`` names the firmware faults the readers worked around (overlapping node
    CPU lists); the planner passes them on in its plan, where modules report them.
    """
    membership = sysfs.read_node_membership(root)
    node_cpus = membership.cpus
    cpus = read_cpu_state(root, node_cpus=node_cpus)
    nodes = read_numa_nodes(root, node_cpus=node_cpus, present=cpus.present)
    pci = read_pci_functions(root, node_cpus={n: node.cpus for n, node in nodes.items()})
    interrupts_text = sysfs.read_text(sysfs.path(root, "proc/interrupts"),
                                      inner_nul_unknown=False) if with_irqs else None
    iommu = read_iommu_state(root, interrupts_text=interrupts_text)
    irqs = {}
    if interrupts_text:
        irqs = parse_proc_interrupts(interrupts_text, field="root")
        if with_irq_affinity:
            base = sysfs.path(root, "proc/irq")
            for irq in irqs.values():
                if irq.number is not None:
                    irq_dir = os.path.join(base, irq.irq)
                    irq.smp_affinity_list = sysfs.read_cpus_attr(
                        os.path.join(irq_dir, "smp_affinity_list"))
                    irq.effective_affinity_list = sysfs.read_cpus_attr(
                        os.path.join(irq_dir, "effective_affinity_list"))
    return HostTopology(cpus=cpus, nodes=nodes, pci=pci, iommu=iommu, irqs=irqs,
                        warnings=membership.warnings)


# ---------------------------------------------------------------- plain data

TOPOLOGY_FORMAT = 1


def _plain(value):
    """Dataclasses, tuples and int-keyed dicts as JSON-safe data (keys become strings)."""
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def topology_to_dict(topo):
    """A HostTopology as plain JSON-safe data; ``topology_from_dict`` reverses it."""
    data = _plain(topo)
    data["format"] = TOPOLOGY_FORMAT
    return data


def _ints(values):
    return tuple(int(v) for v in (values or ()))


def _int_keys(mapping, convert=lambda v: v):
    return {int(k): convert(v) for k, v in (mapping or {}).items()}


def _opt_ints(values):
    return None if values is None else _ints(values)


def _build(cls, data, **converters):
    """A dataclass from a dict, ignoring unknown keys, converting named fields."""
    known = {f.name for f in fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key in known:
            kwargs[key] = converters[key](value) if key in converters else value
    return cls(**kwargs)


def topology_from_dict(data):
    """A HostTopology from ``topology_to_dict`` output (or the same data after JSON).

    Raises GpuhostError naming the part that is missing or malformed.
    """
    if not isinstance(data, dict):
        raise GpuhostError("the topology is not a mapping", field="topology",
                           fix="pass the output of topology_to_dict (or of the "
                               "numa_cpuset module's topology result)")
    try:
        cpus_data = data["cpus"]
        cpus = _build(
            CpuState, cpus_data, possible=_ints, present=_ints, online=_ints,
            isolated=_ints, nohz_full=_ints, flags=tuple,
            cpus=lambda m: _int_keys(m, lambda c: _build(
                Cpu, c, thread_siblings=_ints)))
        nodes = _int_keys(data.get("nodes"), lambda n: _build(
            NumaNode, n, cpus=_ints,
            hugepages=lambda m: _int_keys(m, lambda h: _build(HugepagePool, h)),
            distances=lambda m: _int_keys(m, int)))
        pci = {str(k): _build(
            PciFunction, f, local_cpus=_ints, virtfns=tuple, reset_method=tuple,
            reset_method_unknown=tuple,
            parents=tuple, netdevs=tuple, msi_irqs=_ints,
            bars=lambda bars: tuple(_build(Bar, b) for b in bars or ()),
            extra=lambda e: dict(e or {}))
            for k, f in (data.get("pci") or {}).items()}
        iommu = _build(
            IommuState, data.get("iommu") or {}, units=tuple, acpi_tables=tuple,
            groups=lambda m: _int_keys(m, tuple), cmdline=dict,
            group_types=lambda m: _int_keys(m, str))
        irqs = {str(k): _build(
            Irq, i, counts=_ints, cpus=_ints, smp_affinity_list=_opt_ints,
            effective_affinity_list=_opt_ints)
            for k, i in (data.get("irqs") or {}).items()}
        warnings = tuple(str(w) for w in data.get("warnings") or ())
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GpuhostError("the topology data is malformed (%s: %s)" % (
            type(exc).__name__, exc), field="topology",
            fix="pass the unchanged output of topology_to_dict")
    return HostTopology(cpus=cpus, nodes=nodes, pci=pci, iommu=iommu, irqs=irqs,
                        warnings=warnings)
