# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host as the plan's pictures and queries need it: ``layout_from_topology()`` turns a
HostTopology into plain data (nodes with their cores and hugepage pools, GPUs, SR-IOV
PFs, the host devices whose IRQs belong on housekeeping CPUs). Read on the host by
tenant_ledger, drawn on the controller by plugin_utils/plan_render."""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import format_cpulist
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import gpu_selection


def layout_from_topology(topology, selection=None):
    """The parts of a HostTopology that the pictures need, as plain data; ``selection``
    tells the GPUs (pci.GpuSelection; None: the default classes)."""
    online = set(topology.cpus.online)
    gpu_addresses = set(gpu_selection(selection).gpus(topology.pci))
    nodes = {}
    for node_id in sorted(topology.nodes):
        node = topology.nodes[node_id]
        seen = set()
        cores = []
        for cpu_id in sorted(c for c in node.cpus if c in online):
            if cpu_id in seen:
                continue
            cpu = topology.cpus.cpus.get(cpu_id)
            siblings = sorted(s for s in (cpu.thread_siblings if cpu else ()) if s in online)
            if cpu_id not in siblings:
                siblings = [cpu_id]
            siblings = [s for s in siblings if s not in seen]
            seen.update(siblings)
            cores.append(siblings)
        nodes[str(node_id)] = {
            "cpus": format_cpulist(node.cpus),
            "cores": cores,
            "mem_total_kib": node.mem_total_kib,
            "hugepages": {str(size): {"nr": pool.nr, "free": pool.free}
                          for size, pool in sorted(node.hugepages.items())},
        }
    gpus = []
    pfs = []
    irq_devices = []
    for address in sorted(topology.pci):
        function = topology.pci[address]
        # Host NICs and NVMe controllers: their IRQs belong on housekeeping CPUs.
        if (function.class_code >> 16 == 0x02 or function.class_code >> 8 == 0x0108) \
                and not function.is_vf and function.driver not in (None, "vfio-pci"):
            irq_devices.append({"address": address, "node": function.numa_node,
                                "driver": function.driver})
        if address in gpu_addresses:
            gpus.append({"address": address, "node": function.numa_node,
                         "driver": function.driver, "iommu_group": function.iommu_group})
        if function.is_sriov_pf:
            pfs.append({"address": address, "node": function.numa_node,
                        "driver": function.driver, "netdevs": list(function.netdevs),
                        "sriov_numvfs": function.sriov_numvfs,
                        "sriov_totalvfs": function.sriov_totalvfs})
    return {"cpu_vendor": topology.cpus.vendor, "nodes": nodes, "gpus": gpus, "pfs": pfs,
            "irq_devices": irq_devices}
