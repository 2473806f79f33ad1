# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Synthetic sysfs/procfs trees for tests and benchmarks, and the importer of real ones.

One builder, ``build_host(root, HostSpec)``, writes a fake root (``sys/...``,
``proc/...``) the way the kernel lays it out, with symlinks where sysfs has them
(``bus/pci/devices/*``, ``driver``, ``iommu_group``, ``physfn``, ``virtfnN``,
``kernel/iommu_groups/N/devices/*``, ``class/iommu/*``, ``node/nodeN/cpuM``). The named
hosts (``build_runbook_host`` ...) are thin wrappers that only choose a spec.

``import_real_tree`` copies a recorded tree from ../shared/topologies. Those copies store
each sysfs symlink as a small file holding the link text; the importer turns them back
into real symlinks so that the readers see what a live /sys shows.

Command line: ``python tests/support/fixturegen.py runbook /tmp/host`` writes one host.
"""

from __future__ import annotations

import bz2
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

DEFAULT_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts "
    "acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc "
    "arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni "
    "pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid "
    "dca sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand "
    "lahf_lm abm 3dnowprefetch cpuid_fault epb cat_l3 invpcid_single intel_ppin ssbd mba "
    "ibrs ibpb stibp ibrs_enhanced tpr_shadow vnmi flexpriority ept vpid ept_ad fsgsbase "
    "tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm cqm mpx rdt_a avx512f avx512dq "
    "rdseed adx smap clflushopt clwb intel_pt avx512cd avx512bw avx512vl xsaveopt xsavec "
    "xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local dtherm ida arat pln "
    "pts pku ospke avx512_vnni md_clear flush_l1d arch_capabilities")
AMD_FLAGS = DEFAULT_FLAGS.replace("vmx smx", "svm").replace(" ept vpid ept_ad", " npt")

# resource flags, include/linux/ioport.h: MEM | PREFETCH | MEM_64 | SIZEALIGN ...
BAR_MEM32 = 0x00040200
BAR_MEM64_PREF = 0x0014220C
BAR_IO = 0x00040101
BAR_ROM = 0x0004E200

GIB = 1 << 30
MIB = 1 << 20


@dataclass
class PciDeviceSpec:
    """One PCI function to write. ``bars`` are (index, size, flags)."""
    address: str
    class_code: int
    vendor: int
    device: int
    driver: Optional[str] = None
    node: Optional[int] = 0
    subsystem: Tuple[int, int] = (0, 0)
    bars: Tuple[Tuple[int, int, int], ...] = ()
    reset_method: str = "flr bus"
    boot_vga: Optional[int] = None
    netdevs: Tuple[str, ...] = ()
    msi_names: Tuple[str, ...] = ()            # one MSI-X vector per name
    group: Optional[str] = None                # functions with one label share a group
    sriov_totalvfs: Optional[int] = None
    sriov_numvfs: int = 0
    vf_device: Optional[int] = None
    vf_driver: Optional[str] = None
    physfn: Optional[str] = None
    virtfns: Tuple[str, ...] = ()
    numa_node_file: Optional[int] = None       # what numa_node says; None: the node
    port: Optional[str] = None                 # root port above it; default (bus-1):01.0
    port_group: Optional[str] = None           # the port's group label; default its own


@dataclass
class HostSpec:
    sockets: int = 2
    cores_per_socket: int = 16
    threads_per_core: int = 2
    nodes_per_socket: int = 1
    cpu_vendor: str = "GenuineIntel"
    model_name: str = "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"
    flags: str = DEFAULT_FLAGS
    phys_bits: int = 46                  # "address sizes" of a Xeon of the runbook's era
    cmdline: str = ("BOOT_IMAGE=/vmlinuz-6.1.0-18-amd64 root=/dev/mapper/vg0-root ro quiet "
                    "intel_iommu=on iommu=pt")
    iommu: Optional[str] = "intel"             # "intel", "amd" or None (no IOMMU)
    iommu_units: int = 2
    interrupt_remapping: bool = True
    mem_per_node_kib: int = 256 * 1024 * 1024
    hugepages: Dict[int, Tuple[int, int, int]] = field(
        default_factory=lambda: {2048: (0, 0, 0), 1048576: (64, 64, 0)})
    isolated: str = ""
    nohz_full: str = ""
    devices: List[PciDeviceSpec] = field(default_factory=list)
    irq_lines: int = 0                         # pad /proc/interrupts to this many rows
    distances: Optional[List[List[int]]] = None

    @property
    def nodes(self):
        return self.sockets * self.nodes_per_socket

    @property
    def ncpus(self):
        return self.sockets * self.cores_per_socket * self.threads_per_core


# ---------------------------------------------------------------- small writers

def _write(root, rel, text, mode="w"):
    full = os.path.join(root, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, mode) as handle:
        handle.write(text)
    return full


def _link(root, rel_link, rel_target):
    """A relative symlink, as sysfs makes them."""
    link = os.path.join(root, rel_link)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    target = os.path.relpath(os.path.join(root, rel_target), os.path.dirname(link))
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)


def _cpulist(cpus):
    cpus = sorted(cpus)
    parts, start, prev = [], None, None
    for cpu in cpus:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            parts.append(str(start) if start == prev else "%s-%s" % (start, prev))
            start = prev = cpu
    if start is not None:
        parts.append(str(start) if start == prev else "%s-%s" % (start, prev))
    return ",".join(parts)


def _cpumask(cpus, nbits):
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    words = max(1, (nbits + 31) // 32)
    return ",".join("%08x" % ((value >> (32 * i)) & 0xFFFFFFFF)
                    for i in reversed(range(words)))


def _parse_address(address):
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(slot, 16), int(function)


def _address(domain, bus, devfn):
    return "%04x:%02x:%02x.%d" % (domain, bus, devfn >> 3, devfn & 7)


# ---------------------------------------------------------------- the builder

class _Builder:
    def __init__(self, root, spec):
        self.root = root
        self.spec = spec
        self.cpu_node = {}
        self.node_cpus = {n: [] for n in range(spec.nodes)}
        self.irq_rows = []          # (number, chip, hwirq, name, affinity cpus)
        self.next_irq = 24
        self.groups = {}            # label -> group number
        self.dev_dirs = {}

    # CPUs ---------------------------------------------------------
    def cpu_id(self, socket, core, thread):
        spec = self.spec
        return thread * spec.sockets * spec.cores_per_socket + socket * spec.cores_per_socket + core

    def write_cpus(self):
        spec, root = self.spec, self.root
        ncpus = spec.ncpus
        cores_per_node = spec.cores_per_socket // spec.nodes_per_socket
        cpudir = "sys/devices/system/cpu"
        everything = _cpulist(range(ncpus))
        for name in ("possible", "present", "online"):
            _write(root, "%s/%s" % (cpudir, name), everything + "\n")
        _write(root, cpudir + "/offline", "\n")
        _write(root, cpudir + "/kernel_max", "8191\n")
        _write(root, cpudir + "/isolated", spec.isolated + "\n")
        _write(root, cpudir + "/nohz_full", spec.nohz_full + "\n")
        cpuinfo = []
        for socket in range(spec.sockets):
            package = [self.cpu_id(socket, c, t) for c in range(spec.cores_per_socket)
                       for t in range(spec.threads_per_core)]
            for core in range(spec.cores_per_socket):
                siblings = [self.cpu_id(socket, core, t) for t in range(spec.threads_per_core)]
                node = socket * spec.nodes_per_socket + core // cores_per_node
                for thread, cpu in enumerate(siblings):
                    self.cpu_node[cpu] = node
                    self.node_cpus[node].append(cpu)
                    topo = "%s/cpu%d/topology/" % (cpudir, cpu)
                    _write(root, topo + "physical_package_id", "%d\n" % socket)
                    _write(root, topo + "die_id", "0\n")
                    _write(root, topo + "core_id", "%d\n" % core)
                    _write(root, topo + "thread_siblings_list", _cpulist(siblings) + "\n")
                    _write(root, topo + "thread_siblings", _cpumask(siblings, ncpus) + "\n")
                    _write(root, topo + "core_cpus_list", _cpulist(siblings) + "\n")
                    _write(root, topo + "package_cpus_list", _cpulist(package) + "\n")
                    _write(root, "%s/cpu%d/online" % (cpudir, cpu), "1\n")
                    _link(root, "%s/cpu%d/node%d" % (cpudir, cpu, node),
                          "sys/devices/system/node/node%d" % node)
                    cpuinfo.append(
                        "processor\t: %d\nvendor_id\t: %s\nmodel name\t: %s\n"
                        "physical id\t: %d\nsiblings\t: %d\ncore id\t\t: %d\n"
                        "cpu cores\t: %d\nflags\t\t: %s\n"
                        "address sizes\t: %d bits physical, 48 bits virtual\n" % (
                            cpu, spec.cpu_vendor, spec.model_name, socket, len(package),
                            core, spec.cores_per_socket, spec.flags, spec.phys_bits))
        order = sorted(range(len(cpuinfo)), key=lambda i: int(cpuinfo[i].split()[2]))
        _write(root, "proc/cpuinfo", "\n".join(cpuinfo[i] for i in order) + "\n")

    # NUMA ---------------------------------------------------------
    def distance(self, a, b):
        spec = self.spec
        if spec.distances:
            return spec.distances[a][b]
        if a == b:
            return 10
        if a // spec.nodes_per_socket == b // spec.nodes_per_socket:
            return 12
        return 32 if spec.nodes_per_socket > 1 else 21

    def write_nodes(self):
        spec, root = self.spec, self.root
        base = "sys/devices/system/node"
        all_nodes = _cpulist(range(spec.nodes))
        for name in ("possible", "online", "has_cpu", "has_memory", "has_normal_memory"):
            _write(root, "%s/%s" % (base, name), all_nodes + "\n")
        total_mem = 0
        for node in range(spec.nodes):
            ndir = "%s/node%d/" % (base, node)
            cpus = sorted(self.node_cpus[node])
            _write(root, ndir + "cpulist", _cpulist(cpus) + "\n")
            _write(root, ndir + "cpumap", _cpumask(cpus, spec.ncpus) + "\n")
            _write(root, ndir + "distance",
                   " ".join(str(self.distance(node, o)) for o in range(spec.nodes)) + "\n")
            huge_kib = sum(size * nr for size, (nr, _f, _s) in spec.hugepages.items())
            total = spec.mem_per_node_kib
            free = total - huge_kib - 4 * 1024 * 1024
            total_mem += total
            _write(root, ndir + "meminfo",
                   "Node %d MemTotal:       %d kB\nNode %d MemFree:        %d kB\n"
                   "Node %d MemUsed:        %d kB\nNode %d HugePages_Total: %5d\n" % (
                       node, total, node, free, node, total - free, node,
                       spec.hugepages.get(2048, (0, 0, 0))[0]))
            for size, (nr, free_pages, surplus) in spec.hugepages.items():
                hdir = ndir + "hugepages/hugepages-%dkB/" % size
                _write(root, hdir + "nr_hugepages", "%d\n" % nr)
                _write(root, hdir + "free_hugepages", "%d\n" % free_pages)
                _write(root, hdir + "surplus_hugepages", "%d\n" % surplus)
            for cpu in cpus:
                _link(root, ndir + "cpu%d" % cpu, "sys/devices/system/cpu/cpu%d" % cpu)
        _write(root, "proc/meminfo",
               "MemTotal:       %d kB\nMemFree:        %d kB\nHugepagesize:       2048 kB\n"
               % (total_mem, total_mem // 2))

    # PCI ----------------------------------------------------------
    def group_of(self, device):
        label = device.group or device.address
        if label not in self.groups:
            self.groups[label] = len(self.groups) + 1
        return self.groups[label]

    def write_function(self, device, parent_rel):
        """Write one function under ``parent_rel`` (a sys/devices/... directory)."""
        root, spec = self.root, self.spec
        rel = "%s/%s" % (parent_rel, device.address)
        self.dev_dirs[device.address] = rel
        node = device.node
        local = self.node_cpus.get(node, []) if node is not None else list(range(spec.ncpus))

        def put(name, value):
            _write(root, "sys/devices/%s/%s" % (rel, name), value)

        put("class", "0x%06x\n" % device.class_code)
        put("vendor", "0x%04x\n" % device.vendor)
        put("device", "0x%04x\n" % device.device)
        put("subsystem_vendor", "0x%04x\n" % device.subsystem[0])
        put("subsystem_device", "0x%04x\n" % device.subsystem[1])
        put("revision", "0xa1\n")
        put("driver_override", "(null)\n")
        numa_file = device.numa_node_file if device.numa_node_file is not None else (
            node if node is not None else -1)
        put("numa_node", "%d\n" % numa_file)
        put("local_cpulist", _cpulist(local) + "\n")
        put("local_cpus", _cpumask(local, spec.ncpus) + "\n")
        put("enable", "1\n")
        put("irq", "%d\n" % (self.next_irq if device.msi_names else 0))
        if device.reset_method:
            # the kernel shows both files only for a device with a reset method
            put("reset_method", device.reset_method + "\n")
            put("reset", "")
        if device.boot_vga is not None:
            put("boot_vga", "%d\n" % device.boot_vga)
        lines = []
        bars = dict((index, (size, flags)) for index, size, flags in device.bars)
        domain, bus, slot, func = _parse_address(device.address)
        cursor = 0x38000000000 + ((bus << 8 | slot << 3 | func) << 36)
        mmio32 = 0xD0000000 + ((bus << 3 | func) << 20)
        for index in range(13):
            if index not in bars:
                lines.append("0x%016x 0x%016x 0x%016x" % (0, 0, 0))
                continue
            size, flags = bars[index]
            if flags == BAR_MEM32 or flags == BAR_ROM:
                start = mmio32
                mmio32 += max(size, 1 * MIB)
            else:
                start = cursor
                cursor += size
            lines.append("0x%016x 0x%016x 0x%016x" % (start, start + size - 1, flags))
        put("resource", "\n".join(lines) + "\n")
        _link(root, "sys/bus/pci/devices/" + device.address, "sys/devices/" + rel)
        _link(root, "sys/devices/%s/subsystem" % rel, "sys/bus/pci")
        if device.driver:
            drv = "sys/bus/pci/drivers/" + device.driver
            _link(root, "sys/devices/%s/driver" % rel, drv)
            _link(root, "%s/%s" % (drv, device.address), "sys/devices/" + rel)
        if spec.iommu:
            group = self.group_of(device)
            gdir = "sys/kernel/iommu_groups/%d" % group
            _link(root, "sys/devices/%s/iommu_group" % rel, gdir)
            _link(root, "%s/devices/%s" % (gdir, device.address), "sys/devices/" + rel)
            _write(root, gdir + "/type",
                   ("unmanaged" if device.driver == "vfio-pci" else
                    "identity" if "iommu=pt" in spec.cmdline else "DMA-FQ") + "\n")
        for name in device.netdevs:
            _write(root, "sys/devices/%s/net/%s/address" % (rel, name), "02:00:00:00:00:00\n")
        if device.sriov_totalvfs is not None:
            put("sriov_totalvfs", "%d\n" % device.sriov_totalvfs)
            put("sriov_numvfs", "%d\n" % device.sriov_numvfs)
            put("sriov_drivers_autoprobe", "1\n")
            put("sriov_offset", "2\n")
            put("sriov_stride", "1\n")
            put("sriov_vf_device", "%04x\n" % (device.vf_device or device.device))
        for index, name in enumerate(device.msi_names):
            number = self.next_irq
            self.next_irq += 1
            put("msi_irqs/%d" % number, "msix\n")
            hwirq = ((bus << 8 | slot << 3 | func) << 11) | index
            self.irq_rows.append((number, self.msi_chip(), "%d-edge" % hwirq, name,
                                  local or list(range(spec.ncpus))))
        return rel

    def msi_chip(self):
        return "IR-PCI-MSI" if self.spec.iommu and self.spec.interrupt_remapping else "PCI-MSI"

    def write_pci(self):
        spec, root = self.spec, self.root
        by_address = dict((d.address, d) for d in spec.devices)
        parents = {}
        for device in spec.devices:
            if device.physfn:
                continue
            domain, bus, _slot, _func = _parse_address(device.address)
            port = device.port or _address(domain, bus - 1, (1 << 3))
            port_domain, port_bus, _s, _f = _parse_address(port)
            host = "pci%04x:%02x" % (port_domain, port_bus)
            parents[device.address] = "%s/%s" % (host, port)
            if port not in self.dev_dirs:
                self.write_function(PciDeviceSpec(
                    address=port, class_code=0x060400, vendor=0x8086, device=0x347a,
                    driver="pcieport", node=device.node, reset_method="",
                    group=device.port_group), host)
        for device in spec.devices:
            if device.physfn:
                continue
            self.write_function(device, parents[device.address])
            for vf_address in device.virtfns:
                vf = by_address[vf_address]
                self.write_function(vf, parents[device.address])
                index = device.virtfns.index(vf_address)
                _link(root, "sys/devices/%s/virtfn%d" % (self.dev_dirs[device.address], index),
                      "sys/devices/" + self.dev_dirs[vf_address])
                _link(root, "sys/devices/%s/physfn" % self.dev_dirs[vf_address],
                      "sys/devices/" + self.dev_dirs[device.address])

    # IOMMU --------------------------------------------------------
    def write_iommu(self):
        spec, root = self.spec, self.root
        _write(root, "proc/cmdline", spec.cmdline + "\n")
        if spec.iommu == "intel":
            _write(root, "sys/firmware/acpi/tables/DMAR", "DMAR", mode="w")
            ecap = 0xF020DF if spec.interrupt_remapping else 0xF020D7
            for unit in range(spec.iommu_units):
                rel = "sys/devices/virtual/iommu/dmar%d" % unit
                _write(root, rel + "/intel-iommu/cap", "d2008c40660462\n")
                _write(root, rel + "/intel-iommu/ecap", "%x\n" % ecap)
                _write(root, rel + "/intel-iommu/version", "1:0\n")
                _link(root, "sys/class/iommu/dmar%d" % unit, rel)
                self.irq_rows.append((self.next_irq, "DMAR-MSI", "%d-edge" % unit,
                                      "dmar%d" % unit, [0]))
                self.next_irq += 1
        elif spec.iommu == "amd":
            _write(root, "sys/firmware/acpi/tables/IVRS", "IVRS", mode="w")
            for unit in range(spec.iommu_units):
                rel = "sys/devices/pci0000:%02x/0000:%02x:00.2/iommu/ivhd%d" % (
                    unit * 0x20, unit * 0x20, unit)
                _write(root, rel + "/amd-iommu/cap", "0x00190040\n")
                _write(root, rel + "/amd-iommu/features", "0x25bf732fa2295afe\n")
                _link(root, "sys/class/iommu/ivhd%d" % unit, rel)
                self.irq_rows.append((self.next_irq, "PCI-MSI", "%d-edge" % (unit * 4096),
                                      "AMD-Vi", [0]))
                self.next_irq += 1

    # IRQs ---------------------------------------------------------
    def write_irqs(self):
        spec, root = self.spec, self.root
        ncpus = spec.ncpus
        chip_apic = "IR-IO-APIC" if spec.iommu and spec.interrupt_remapping else "IO-APIC"
        rows = [(0, chip_apic, "2-edge", "timer", [0]), (8, chip_apic, "8-edge", "rtc0", [0]),
                (9, chip_apic, "9-fasteoi", "acpi", [0])]
        rows += self.irq_rows
        filler = 0
        while len(rows) < spec.irq_lines - 3:
            number = self.next_irq
            self.next_irq += 1
            node = filler % max(1, spec.nodes)
            rows.append((number, self.msi_chip(), "%d-edge" % (524288 + filler),
                         "nvme%dq%d" % (filler // 64, filler % 64), self.node_cpus[node]))
            filler += 1
        width = 10
        header = " " * 11 + "".join(("CPU%d" % c).ljust(11) for c in range(ncpus)).rstrip()
        out = [header]
        for number, chip, hwirq, name, affinity in rows:
            counts = "".join("%*d " % (width, (number * 7 + c) % 97 if c in affinity else 0)
                             for c in range(ncpus))
            out.append("%4d: %s %8s %s   %s" % (number, counts, chip, hwirq, name))
            irq_dir = "proc/irq/%d/" % number
            _write(root, irq_dir + "smp_affinity_list", _cpulist(affinity) + "\n")
            _write(root, irq_dir + "smp_affinity", _cpumask(affinity, ncpus) + "\n")
            _write(root, irq_dir + "effective_affinity_list", "%d\n" % affinity[0])
            _write(root, irq_dir + "effective_affinity", _cpumask(affinity[:1], ncpus) + "\n")
            _write(root, irq_dir + "node", "%d\n" % self.cpu_node.get(affinity[0], 0))
        for name, text in (("NMI", "Non-maskable interrupts"), ("LOC", "Local timer interrupts"),
                           ("RES", "Rescheduling interrupts"), ("CAL", "Function call interrupts"),
                           ("TLB", "TLB shootdowns")):
            out.append("%s: %s  %s" % (name, "".join("%10d " % (c + 1) for c in range(ncpus)),
                                       text))
        out.append("ERR:          0")
        out.append("MIS:          0")
        _write(root, "proc/interrupts", "\n".join(out) + "\n")

    def build(self):
        self.write_cpus()
        self.write_nodes()
        self.write_pci()
        self.write_iommu()
        self.write_irqs()
        return self.root


def build_host(root, spec):
    """Write the host described by ``spec`` under ``root`` and return ``root``."""
    os.makedirs(root, exist_ok=True)
    return _Builder(str(root), spec).build()


# ---------------------------------------------------------------- device recipes

def gpu(address, node, vendor=0x10DE, device=0x20B5, class_code=0x030200, hda=True,
        driver="nvidia", bar1=128 * GIB, boot_vga=0, group=None, port=None, port_group=None):
    """A GPU (and its HDA audio function on the same slot) with realistic BARs."""
    functions = [PciDeviceSpec(
        address=address, class_code=class_code, vendor=vendor, device=device,
        driver=driver, node=node, subsystem=(vendor, 0x1533),
        bars=((0, 16 * MIB, BAR_MEM32), (1, bar1, BAR_MEM64_PREF),
              (3, 32 * MIB, BAR_MEM64_PREF), (5, 128, BAR_IO), (6, 512 * 1024, BAR_ROM)),
        reset_method="flr bus", boot_vga=boot_vga if class_code >> 8 == 0x0300 else None,
        msi_names=("nvidia",), group=group or address, port=port, port_group=port_group)]
    if hda:
        functions.append(PciDeviceSpec(
            address=address[:-1] + "1", class_code=0x040300, vendor=vendor, device=0x1AEF,
            driver="snd_hda_intel", node=node, subsystem=(vendor, 0x1533),
            bars=((0, 16 * 1024, BAR_MEM32),), reset_method="bus",
            msi_names=("snd_hda_intel:card0",), group=group or address, port=port,
            port_group=port_group))
    return functions


def sriov_pf(address, node, vfs, totalvfs=None, device=0x101D, vf_device=0x101E,
             netdev="ens1f0np0", comp_vectors=8):
    """An mlx5 PF with ``vfs`` VFs created (VF offset 2, stride 1, ARI numbering)."""
    domain, bus, slot, func = _parse_address(address)
    pf_devfn = slot << 3 | func
    vf_addresses = tuple(_address(domain, bus, pf_devfn + 2 + i) for i in range(vfs))
    pf = PciDeviceSpec(
        address=address, class_code=0x020000, vendor=0x15B3, device=device,
        driver="mlx5_core", node=node, subsystem=(0x15B3, 0x0040),
        bars=((0, 32 * MIB, BAR_MEM64_PREF), (7, 64 * MIB, BAR_MEM64_PREF)),
        reset_method="flr bus", netdevs=(netdev,),
        msi_names=tuple(["mlx5_async0@pci:%s" % address] +
                        ["mlx5_comp%d@pci:%s" % (i, address) for i in range(comp_vectors)]),
        sriov_totalvfs=totalvfs if totalvfs is not None else max(vfs, 8), sriov_numvfs=vfs,
        vf_device=vf_device, virtfns=vf_addresses)
    functions = [pf]
    for index, vf_address in enumerate(vf_addresses):
        functions.append(PciDeviceSpec(
            address=vf_address, class_code=0x020000, vendor=0x15B3, device=vf_device,
            driver="mlx5_core", node=node, subsystem=(0x15B3, 0x0040),
            bars=((0, 1 * MIB, BAR_MEM64_PREF),), reset_method="flr",
            netdevs=("%sv%d" % (netdev.replace("np0", ""), index),),
            msi_names=("mlx5_comp0@pci:%s" % vf_address,), physfn=address))
    return functions


def endpoint(address, node, class_code, vendor, device, driver, group=None, msi=()):
    return [PciDeviceSpec(address=address, class_code=class_code, vendor=vendor,
                          device=device, driver=driver, node=node, group=group,
                          bars=((0, 64 * 1024, BAR_MEM32),), reset_method="flr",
                          msi_names=tuple(msi))]


# ---------------------------------------------------------------- named hosts

RUNBOOK_GPU = "0000:65:00.0"
RUNBOOK_HDA = "0000:65:00.1"
RUNBOOK_PF = "0000:41:00.0"


def build_runbook_host(root, **overrides):
    """The runbook's host: 2 x 16 cores x 2 threads (siblings N and N+32), an A100
    (65:00.0 + HDA 65:00.1) and an mlx5 PF 41:00.0 with 8 VFs, all on node 0."""
    devices = (gpu(RUNBOOK_GPU, 0) + sriov_pf(RUNBOOK_PF, 0, vfs=8, totalvfs=8)
               + endpoint("0000:b1:00.0", 1, 0x010802, 0x144D, 0xA80A, "nvme",
                          msi=["nvme0q%d" % q for q in range(4)]))
    spec = HostSpec(devices=devices,
                    hugepages={2048: (1024, 1024, 0), 1048576: (64, 32, 0)},
                    isolated="", nohz_full="")
    for key, value in overrides.items():
        setattr(spec, key, value)
    return build_host(root, spec)


def build_eight_gpu_host(root, **overrides):
    """2 sockets x 32 cores x 2 threads, 8 H100 SXM (3D controllers, no HDA), 4 per
    socket, one mlx5 PF per socket with 16 VFs."""
    return build_host(root, _eight_gpu_spec((), overrides))


def _eight_gpu_spec(extra_devices, overrides):
    """The eight-H100 host's spec, with ``extra_devices`` and the ``overrides`` set."""
    devices = []
    for index in range(8):
        bus = (0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb)[index]
        devices += gpu("0000:%02x:00.0" % bus, index // 4, device=0x2330, hda=False,
                       bar1=128 * GIB)
    devices += list(extra_devices)
    devices += sriov_pf("0000:1b:00.0", 0, vfs=16, netdev="ens1np0")
    devices += sriov_pf("0000:9c:00.0", 1, vfs=16, netdev="ens9np0")
    spec = HostSpec(cores_per_socket=32, devices=devices)
    for key, value in overrides.items():
        setattr(spec, key, value)
    return spec


def nvswitch(address, node):
    """An H100/H200 HGX board's NVSwitch as the published lspci line shows one
    ("Bridge [0680]: NVIDIA Corporation Device [10de:22a3]", subsystem [10de:1796],
    driver nvidia-nvswitch; tests/fixtures/published/README.md names the source)."""
    return [PciDeviceSpec(address=address, class_code=0x068000, vendor=0x10DE, device=0x22A3,
                          driver="nvidia-nvswitch", node=node, subsystem=(0x10DE, 0x1796),
                          bars=((0, 32 * MIB, BAR_MEM64_PREF),), reset_method="flr bus",
                          group=address)]


def build_hgx_h100_host(root, **overrides):
    """The eight-H100 host of build_eight_gpu_host with its HGX board's four NVSwitches
    (two per socket; their addresses are this fake's, the device IDs the published ones)."""
    switches = []
    for address, node in (("0000:0b:00.0", 0), ("0000:0c:00.0", 0), ("0000:8b:00.0", 1),
                          ("0000:8c:00.0", 1)):
        switches += nvswitch(address, node)
    return build_host(root, _eight_gpu_spec(switches, overrides))


DIRTY_GPU = "0000:01:00.0"
DIRTY_USB = "0000:02:00.0"


def build_dirty_usb_group_host(root, **overrides):
    """A desktop-class board: the GPU (01:00.0 + HDA) and a USB controller (02:00.0) sit
    behind root ports without ACS, so the kernel puts them in one IOMMU group."""
    devices = gpu(DIRTY_GPU, 0, device=0x2684, class_code=0x030000, group="chipset",
                  boot_vga=0, bar1=32 * GIB, port="0000:00:01.0", port_group="chipset")
    devices += [PciDeviceSpec(address=DIRTY_USB, class_code=0x0C0330, vendor=0x1B21,
                              device=0x2142, driver="xhci_hcd", node=0, group="chipset",
                              bars=((0, 32 * 1024, BAR_MEM64_PREF),), reset_method="bus",
                              port="0000:00:01.1", port_group="chipset")]
    devices += gpu("0000:05:00.0", 0, device=0x1EB8, class_code=0x030200, hda=False)
    spec = HostSpec(sockets=1, cores_per_socket=8, devices=devices)
    for key, value in overrides.items():
        setattr(spec, key, value)
    return build_host(root, spec)


def build_amd_nps4_host(root, **overrides):
    """2-socket AMD EPYC in NPS4: 8 NUMA nodes, 2 x 32 cores x 2 threads (siblings N and
    N+64), IVRS and AMD-Vi units; GPUs on nodes 1, 2, 5 and 6."""
    devices = []
    for index, (bus, node) in enumerate(((0x41, 1), (0x61, 2), (0xc1, 5), (0xe1, 6))):
        devices += gpu("0000:%02x:00.0" % bus, node, device=0x26B9, class_code=0x030200,
                       hda=False, bar1=64 * GIB)
    devices += gpu("0000:81:00.0", 4, vendor=0x1002, device=0x740F, class_code=0x038000,
                   hda=False, driver="amdgpu", bar1=64 * GIB)
    devices += sriov_pf("0000:21:00.0", 0, vfs=8, netdev="ens2f0np0")
    spec = HostSpec(cores_per_socket=32, nodes_per_socket=4, cpu_vendor="AuthenticAMD",
                    model_name="AMD EPYC 7543 32-Core Processor", flags=AMD_FLAGS,
                    cmdline="BOOT_IMAGE=/vmlinuz root=/dev/sda2 ro amd_iommu=on iommu=pt",
                    iommu="amd", iommu_units=8, devices=devices,
                    mem_per_node_kib=64 * 1024 * 1024)
    for key, value in overrides.items():
        setattr(spec, key, value)
    return build_host(root, spec)


def build_large_host(root, cpus=256, gpus=16, pfs=4, vfs_per_pf=64, irqs=4000, **overrides):
    """The benchmark host: 2 sockets, ``cpus`` CPUs (SMT2), ``gpus`` GPUs with HDA,
    ``pfs`` PFs of ``vfs_per_pf`` VFs, and ``irqs`` rows in /proc/interrupts."""
    sockets = 2
    devices = []
    for index in range(gpus):
        devices += gpu("0000:%02x:00.0" % (0x10 + 4 * index), index * sockets // gpus)
    for index in range(pfs):
        devices += sriov_pf("0000:%02x:00.0" % (0x90 + 4 * index), index * sockets // pfs,
                            vfs=vfs_per_pf, totalvfs=max(vfs_per_pf, 64),
                            netdev="ens%df0np0" % index)
    spec = HostSpec(sockets=sockets, cores_per_socket=cpus // (2 * sockets),
                    devices=devices, irq_lines=irqs)
    for key, value in overrides.items():
        setattr(spec, key, value)
    return build_host(root, spec)


HOSTS = {
    "runbook": build_runbook_host,
    "eight_gpu": build_eight_gpu_host,
    "dirty_usb": build_dirty_usb_group_host,
    "amd_nps4": build_amd_nps4_host,
    "large": build_large_host,
}


# ---------------------------------------------------------------- real trees

def _is_flattened_link(file_path):
    """A recorded sysfs symlink: one short line of link text, no trailing newline."""
    if os.path.islink(file_path) or os.path.getsize(file_path) > 512:
        return False
    with open(file_path, "rb") as handle:
        data = handle.read()
    return data.startswith(b"../") and b"\n" not in data and b"\0" not in data


def import_real_tree(source, destination, compress_larger_than=1 << 20):
    """Copy a recorded tree with its _meta/, restoring symlinks; big files go bz2.

    Returns (files, links, compressed) counts. A file larger than
    ``compress_larger_than`` (the 13 MB /proc/interrupts of the 1152-CPU host) is
    stored as ``NAME.bz2``, as its upstream project ships it.
    """
    files = links = compressed = 0
    if os.path.exists(destination):
        shutil.rmtree(destination)
    for dirpath, _dirnames, filenames in os.walk(source):
        rel_dir = os.path.relpath(dirpath, source)
        out_dir = os.path.normpath(os.path.join(destination, rel_dir))
        os.makedirs(out_dir, exist_ok=True)
        os.chmod(out_dir, 0o755)
        for name in filenames:
            src = os.path.join(dirpath, name)
            dst = os.path.join(out_dir, name)
            if rel_dir.split(os.sep)[0] != "_meta" and _is_flattened_link(src):
                with open(src) as handle:
                    os.symlink(handle.read(), dst)
                links += 1
            elif os.path.getsize(src) > compress_larger_than:
                with open(src, "rb") as handle, bz2.open(dst + ".bz2", "wb") as out:
                    shutil.copyfileobj(handle, out)
                os.chmod(dst + ".bz2", 0o644)
                compressed += 1
            else:
                shutil.copyfile(src, dst)
                os.chmod(dst, 0o644)
                files += 1
    return files, links, compressed


def main(argv):
    if len(argv) != 3 or argv[1] not in HOSTS:
        sys.stderr.write("usage: fixturegen.py {%s} DIRECTORY\n" % ",".join(sorted(HOSTS)))
        return 2
    print(HOSTS[argv[1]](argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
