# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Literal host topologies for the planner's tests (no sysfs): ``build_host`` from cores
and PCI functions, the runbook's host, the lab's, a two-node GPU host, the runbook's
A100 tenant request, and ``fails``, the check that a GpuhostError names its field."""

from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import Bar, PciFunction
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    Cpu, CpuState, HostTopology, HugepagePool, IommuState, NumaNode)


GIB_KIB = 1048576
# The settings of a plan's vf entry for nic_vf: true (docs/plan-format.md).
VF_DEFAULTS = {"mac": None, "vlan": 0, "spoofchk": True, "trust": False}
A100_BARS = (Bar(0, 0xD0000000, 0xD0FFFFFF, 0x40200),
             Bar(1, 0x38000000000, 0x387FFFFFFFF, 0x14220C))   # 32 GiB, 64-bit prefetchable


def build_host(cores_by_node, functions=(), flags=("pdpe1gb",), mem_total_gib=256,
               mem_free_gib=240, hugepages=None, offline=()):
    """A HostTopology from {node: [(thread, thread), ...]} and PciFunction objects.

    ``hugepages`` is {node: {size_kib: (nr, free)}}. IOMMU groups are derived from the
    functions' iommu_group, as the kernel's /sys/kernel/iommu_groups would show them.
    """
    cpus = {}
    node_cpus = {}
    for node, cores in cores_by_node.items():
        for core_index, threads in enumerate(cores):
            for thread in threads:
                cpus[thread] = Cpu(id=thread, online=thread not in offline, package=node,
                                   die=0, core=core_index,
                                   thread_siblings=tuple(t for t in sorted(threads)
                                                         if t not in offline),
                                   node=node)
                node_cpus.setdefault(node, []).append(thread)
    all_cpus = tuple(sorted(cpus))
    state = CpuState(possible=all_cpus, present=all_cpus,
                     online=tuple(c for c in all_cpus if c not in offline),
                     cpus=cpus, flags=tuple(flags), vendor="GenuineIntel")
    nodes = {}
    for node in cores_by_node:
        pools = {size: HugepagePool(size_kib=size, nr=nr, free=free)
                 for size, (nr, free) in (hugepages or {}).get(node, {}).items()}
        nodes[node] = NumaNode(id=node, cpus=tuple(sorted(node_cpus.get(node, ()))),
                               mem_total_kib=mem_total_gib * GIB_KIB,
                               mem_free_kib=mem_free_gib * GIB_KIB, hugepages=pools,
                               distances={n: (10 if n == node else 21)
                                          for n in cores_by_node})
    pci = {f.address: f for f in functions}
    groups = {}
    for function in functions:
        if function.iommu_group is not None:
            groups.setdefault(function.iommu_group, []).append(function.address)
    iommu = IommuState(enabled=True, vendor="intel", passthrough=True, units=("dmar0",),
                       acpi_tables=("DMAR",),
                       groups={g: tuple(sorted(a)) for g, a in groups.items()})
    return HostTopology(cpus=state, nodes=nodes, pci=pci, iommu=iommu)


def gpu(address, node, group, boot_vga=False):
    return PciFunction(address=address, class_code=0x030200, vendor_id=0x10DE,
                       device_id=0x20B5, driver="vfio-pci", numa_node=node,
                       numa_node_source="numa_node", iommu_group=group, boot_vga=boot_vga,
                       bars=A100_BARS, reset_method=("flr", "bus"))


def hda(address, node, group):
    return PciFunction(address=address, class_code=0x040300, vendor_id=0x10DE,
                       device_id=0x1AEF, driver="vfio-pci", numa_node=node,
                       numa_node_source="numa_node", iommu_group=group)


def sriov_pf(address, node, group, vfs, vf_group_base, vf_driver="vfio-pci"):
    """A mlx5 PF and its VFs, each VF in its own group."""
    pf = PciFunction(address=address, class_code=0x020000, vendor_id=0x15B3,
                     device_id=0x101D, driver="mlx5_core", numa_node=node,
                     numa_node_source="numa_node", iommu_group=group,
                     virtfns=tuple(vfs), sriov_totalvfs=len(vfs), sriov_numvfs=len(vfs),
                     netdevs=("ens1f0np0",))
    functions = [pf]
    for index, vf in enumerate(vfs):
        functions.append(PciFunction(address=vf, class_code=0x020000, vendor_id=0x15B3,
                                     device_id=0x101E, driver=vf_driver, numa_node=node,
                                     numa_node_source="numa_node",
                                     iommu_group=vf_group_base + index, physfn=address))
    return functions


RUNBOOK_VFS = ["0000:41:00.%d" % f for f in range(2, 8)] + ["0000:41:01.0", "0000:41:01.1"]


def runbook_host(**kwargs):
    """Runbook host: 2 x 16 cores x 2 threads, siblings N and N+32; GPU 65:00.0 + HDA on
    node 0; mlx5 PF 41:00.0 with 8 VFs on node 0."""
    cores = {0: [(n, n + 32) for n in range(0, 16)],
             1: [(n, n + 32) for n in range(16, 32)]}
    functions = [gpu("0000:65:00.0", 0, 27), hda("0000:65:00.1", 0, 27)]
    functions += sriov_pf("0000:41:00.0", 0, 39, RUNBOOK_VFS, 40)
    kwargs.setdefault("hugepages", {0: {GIB_KIB: (64, 64)}, 1: {GIB_KIB: (0, 0)}})
    return build_host(cores, functions, **kwargs)


def lab_host(**kwargs):
    """The QEMU lab: 2 nodes x 2 cores x 2 threads, siblings adjacent (0-1, 2-3); its
    "GPUs" are not the boot VGA (00:01.0 is, lab/README.md)."""
    cores = {0: [(0, 1), (2, 3)], 1: [(4, 5), (6, 7)]}
    functions = [gpu("0000:41:00.0", 1, 12), hda("0000:41:00.1", 1, 12)]
    return build_host(cores, functions, mem_total_gib=1, mem_free_gib=1, **kwargs)


def two_node_gpu_host(gpus_per_node=2, threads=2, cores_per_node=8):
    """A small host with GPUs on both nodes (like the 8-GPU host, in miniature)."""
    cores = {}
    cpu = 0
    total = 2 * cores_per_node
    for node in (0, 1):
        cores[node] = []
        for dummy in range(cores_per_node):
            cores[node].append(tuple(cpu + t * total for t in range(threads)))
            cpu += 1
    functions = []
    group = 10
    for node in (0, 1):
        for index in range(gpus_per_node):
            bus = 0x17 + node * 0x80 + index * 0x10
            functions.append(gpu("0000:%02x:00.0" % bus, node, group))
            functions.append(hda("0000:%02x:00.1" % bus, node, group))
            group += 1
    return build_host(cores, functions,
                      hugepages={0: {GIB_KIB: (64, 64)}, 1: {GIB_KIB: (64, 64)}})


A100 = {"name": "tenant-a100", "gpus": 1, "vcpus": 30, "memory_gib": 64,
        "hugepage_size": "1G", "nic_vf": True, "iothreads": 2,
        "emulator_policy": "housekeeping"}


def tenant(**changes):
    data = dict(A100)
    data.update(changes)
    return data


def fails(excinfo_field, *words):
    """Assert a GpuhostError names its field and carries each word of the message."""
    def check(err):
        assert err.field == excinfo_field, err.message
        for word in words:
            assert word in err.message, (word, err.message)
        assert err.fix, err.message
    return check
