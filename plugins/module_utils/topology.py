# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host topology model: CPUs, NUMA nodes, IRQs, the IOMMU and PCI functions.

Every reader takes ``root`` (default ``/``) so that tests can point it at a recorded
tree. A HostTopology can be turned into plain data (``to_dict``) and back
(``from_dict``), which is how numa_cpuset accepts a topology "passed in as data".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.pci import PciFunction


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
    acs_override: Optional[str] = None


@dataclass
class HostTopology:
    cpus: CpuState
    nodes: Dict[int, NumaNode]
    pci: Dict[str, PciFunction]
    iommu: IommuState
    irqs: Dict[str, Irq] = field(default_factory=dict)
