# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hosts whose kernel or firmware leaves something out or gets it wrong: node CPU lists
missing or overlapping, no NUMA at all, CPU nodes without memory, and /proc/interrupts
rows with one system-wide value. Real recorded trees are copied to tmp_path and changed
there in the one way each test is about, so every other file stays a real machine's."""

import bz2
import json
import os
import shutil

import pytest

from support import realtrees
from support.realtrees import tree
from support.sysfs_sim import TreeBuilder

from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs, topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.fleet import evaluate_host
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.ledger import LedgerData, reserve
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PciFunction
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    Cpu, CpuState, HostTopology, HugepagePool, IommuState, NumaNode)
from ansible_collections.gpuhost.kvm.plugins.modules import numa_cpuset

NODE_DIR = "sys/devices/system/node"
GIB_KIB = 1048576


def copy_tree(name, tmp_path):
    """A writable copy of a recorded tree, its sysfs links kept as links."""
    root = str(tmp_path / name)
    shutil.copytree(tree(name), root, symlinks=True)
    return root


def node_dirs(root):
    base = os.path.join(root, NODE_DIR)
    return [os.path.join(base, e) for e in sorted(os.listdir(base)) if e[4:].isdigit()]


def set_cpulist(root, node, cpus):
    with open(os.path.join(root, NODE_DIR, "node%d" % node, "cpulist"), "w") as handle:
        handle.write(cpus + "\n")


def planner_warnings(root, tenants, **args):
    """Run numa_cpuset on ``root``; return its plan and what it passed to module.warn."""
    with patch_module_args(dict(args, root=root, tenants=tenants)):
        module = numa_cpuset.build_module()
    warned = []
    module.warn = warned.append
    run = numa_cpuset.NumaCpusetPlanner(module)
    run.run()
    return run.result["plan"], warned


# ------------------------------------------- 11: node CPUs from the nodeN/cpuM links

@pytest.mark.parametrize("name", [realtrees.SNC2_SERVER, realtrees.XEON_SILVER,
                                  realtrees.OFFLINE_CPU0, realtrees.SANDY_BRIDGE,
                                  realtrees.LAPTOP_IOMMU])
def test_node_cpus_come_from_the_cpu_links_without_cpulist_and_cpumap(tmp_path, name):
    expected_nodes = topology.read_numa_nodes(tree(name))
    expected_cpus = topology.read_cpu_state(tree(name))
    root = copy_tree(name, tmp_path)
    for node_dir in node_dirs(root):
        for attr in ("cpulist", "cpumap"):
            if os.path.exists(os.path.join(node_dir, attr)):
                os.unlink(os.path.join(node_dir, attr))
    assert topology.read_numa_nodes(root) == expected_nodes
    assert topology.read_cpu_state(root) == expected_cpus
    assert topology.read_host_topology(root).warnings == ()


def test_node_cpu_links_flattened_to_plain_files_count_as_well(tmp_path):
    # Dumps made with cp -L or tar --dereference keep each link as a small file.
    builder = TreeBuilder(tmp_path)
    builder.cpus(online="0-3", nodes={0: "0-1", 1: "2-3"})
    for node, cpus in ((0, (0, 1)), (1, (2, 3))):
        os.unlink(builder.p("/%s/node%d/cpulist" % (NODE_DIR, node)))
        for cpu in cpus:
            builder.write("/%s/node%d/cpu%d" % (NODE_DIR, node, cpu),
                          "../../cpu/cpu%d" % cpu)
    assert sysfs.read_node_cpus(str(tmp_path)) == {0: (0, 1), 1: (2, 3)}


def test_an_empty_cpulist_is_a_cpu_less_node_not_a_reason_to_look_at_links(tmp_path):
    root = str(tmp_path)
    TreeBuilder(root).cpus(online="0-1", nodes={0: "0-1", 1: ""})
    assert sysfs.read_node_cpus(root) == {0: (0, 1), 1: ()}


# ------------------------------------- 12: overlapping node CPU lists, cpuN/nodeM decides

def test_overlapping_node_lists_are_settled_by_each_cpus_own_node_link(tmp_path):
    expected = topology.read_numa_nodes(tree(realtrees.SNC2_SERVER))
    root = copy_tree(realtrees.SNC2_SERVER, tmp_path)
    # node 0 also claims CPUs 1 and 5, whose cpu1/node1 and cpu5/node1 links say node 1
    set_cpulist(root, 0, "0-1,4-5,8,12,16,20,24,28,32,36,40,44,48,52,56,60,64,68,72,76,"
                         "80,84,88,92,96,100,104,108")
    host = topology.read_host_topology(root, with_irqs=False)
    assert {n: node.cpus for n, node in host.nodes.items()} == {
        n: node.cpus for n, node in expected.items()}
    assert host.cpus.cpus[1].node == 1 and host.cpus.cpus[5].node == 1
    assert host.warnings == (
        "NUMA nodes 0, 1 all list CPU(s) 1,5, a firmware fault (overlapping node CPU "
        "lists); they are counted in node 1 only, as each one's own cpuN/nodeM link "
        "says",)


def test_overlapping_node_cpu_links_are_settled_the_same_way(tmp_path):
    # The real SNC-2 tree read from its nodeN/cpuM links only, with one extra link
    # node0/cpu1: cpu1's own cpu1/node1 link keeps it in node 1.
    expected = topology.read_numa_nodes(tree(realtrees.SNC2_SERVER))
    root = copy_tree(realtrees.SNC2_SERVER, tmp_path)
    for node_dir in node_dirs(root):
        for attr in ("cpulist", "cpumap"):
            if os.path.exists(os.path.join(node_dir, attr)):
                os.unlink(os.path.join(node_dir, attr))
    os.symlink("../../cpu/cpu1", os.path.join(root, NODE_DIR, "node0", "cpu1"))
    host = topology.read_host_topology(root, with_irqs=False)
    assert {n: node.cpus for n, node in host.nodes.items()} == {
        n: node.cpus for n, node in expected.items()}
    assert host.cpus.cpus[1].node == 1
    assert host.warnings == (
        "NUMA nodes 0, 1 all list CPU(s) 1, a firmware fault (overlapping node CPU "
        "lists); they are counted in node 1 only, as each one's own cpuN/nodeM link "
        "says",)


def test_overlap_without_cpu_links_keeps_the_lowest_node_and_says_so(tmp_path):
    root = str(tmp_path)
    TreeBuilder(root).cpus(online="0-5", nodes={0: "0-3", 1: "2-5"})
    membership = sysfs.read_node_membership(root)
    assert membership.cpus == {0: (0, 1, 2, 3), 1: (4, 5)}
    assert membership.warnings == (
        "NUMA nodes 0, 1 all list CPU(s) 2-3, a firmware fault (overlapping node CPU "
        "lists); they are counted in node 0 only, the lowest, as no cpuN/nodeM link "
        "names one of them",)


def test_overlap_warning_reaches_the_plan_and_the_module_warnings(tmp_path):
    root = copy_tree(realtrees.SNC2_SERVER, tmp_path)
    set_cpulist(root, 2, "1-2,6,10,14,18,22,26,30,34,38,42,46,50,54,58,62,66,70,74,78,82,"
                         "86,90,94,98,102,106,110")
    plan, warned = planner_warnings(root, [{"name": "t1", "gpus": 0, "vcpus": 4,
                                            "memory_gib": 1, "hugepage_size": "2M"}],
                                    hugepage_check="none")
    assert warned == plan["warnings"]
    assert warned[0].startswith("NUMA nodes 1, 2 all list CPU(s) 1, a firmware fault")
    topo = topology.read_host_topology(root, with_irqs=False)
    data = json.loads(json.dumps(topology.topology_to_dict(topo)))
    assert topology.topology_from_dict(data).warnings == topo.warnings
    # the topology passed in as data keeps the warning for the plan
    assert plan_placement(data, [])["warnings"] == list(topo.warnings)


# ---------------------------------------------------- 13: a kernel without NUMA

def test_kernel_without_numa_is_one_node_with_the_hosts_memory(tmp_path):
    root = copy_tree(realtrees.XEON_SILVER, tmp_path)
    shutil.rmtree(os.path.join(root, NODE_DIR))
    cpu_dir = os.path.join(root, "sys/devices/system/cpu")
    for cpu in range(32):                   # a !CONFIG_NUMA kernel makes no cpuN/nodeM
        os.unlink(os.path.join(cpu_dir, "cpu%d" % cpu, "node%d" % (cpu // 8 % 2)))
    builder = TreeBuilder(root)
    for attr, value in (("nr", 16), ("free", 12), ("surplus", 0)):
        builder.write("/sys/kernel/mm/hugepages/hugepages-2048kB/%s_hugepages" % attr,
                      "%d\n" % value)
    host = topology.read_host_topology(root, with_irqs=False)
    assert list(host.nodes) == [0]
    node = host.nodes[0]
    assert node.cpus == host.cpus.online == tuple(range(32))
    assert (node.mem_total_kib, node.mem_free_kib) == (97445600, 35200008)   # /proc/meminfo
    assert node.hugepages == {2048: HugepagePool(size_kib=2048, nr=16, free=12, surplus=0)}
    assert node.distances == {0: 10}
    assert {cpu.node for cpu in host.cpus.cpus.values()} == {0}
    assert host.warnings == ()
    plan = plan_placement(host, [{"name": "t1", "gpus": 0, "vcpus": 4, "memory_gib": 1,
                                  "hugepage_size": "2M"}])
    assert plan["tenants"][0]["node"] == 0 and plan["tenants"][0]["hugepages"] == {"0": 512}


def test_kernel_without_numa_counts_only_online_cpus(tmp_path):
    root = str(tmp_path)
    TreeBuilder(root).cpus(online="0-2,5", possible="0-7")
    shutil.rmtree(os.path.join(root, NODE_DIR))
    TreeBuilder(root).write("/proc/meminfo", "MemTotal:  8388608 kB\nMemFree:  4194304 kB\n")
    nodes = topology.read_numa_nodes(root)
    assert nodes[0].cpus == (0, 1, 2, 5)
    assert (nodes[0].mem_total_kib, nodes[0].hugepages) == (8388608, {})


def test_kernel_without_numa_and_without_cpu_online_asks_each_cpu(tmp_path):
    # ghw's laptop snapshot has no cpu/online or cpu/present, only cpuN/online (and
    # none for cpu0, which cannot be offlined): node 0 must still hold all 16 CPUs.
    root = copy_tree(realtrees.LAPTOP_IOMMU, tmp_path)
    assert not os.path.exists(os.path.join(root, "sys/devices/system/cpu/online"))
    shutil.rmtree(os.path.join(root, NODE_DIR))
    host = topology.read_host_topology(root, with_irqs=False)
    assert host.cpus.online == tuple(range(16))
    assert list(host.nodes) == [0] and host.nodes[0].cpus == host.cpus.online
    assert host.nodes[0].mem_total_kib == 32542668                       # /proc/meminfo
    assert {cpu.node for cpu in host.cpus.cpus.values()} == {0}


@pytest.mark.parametrize("name", [realtrees.SANDY_BRIDGE, realtrees.XEON_SILVER,
                                  realtrees.POWER9, realtrees.OFFLINE_CPU0,
                                  realtrees.LAPTOP_IOMMU, realtrees.EPYC_7451,
                                  realtrees.SNC2_SERVER])
def test_kernel_without_numa_puts_exactly_the_online_cpus_in_node_0(tmp_path, name):
    root = copy_tree(name, tmp_path)
    shutil.rmtree(os.path.join(root, NODE_DIR))
    cpus = topology.read_cpu_state(root)
    assert cpus.online
    assert sysfs.read_node_cpus(root) == {0: cpus.online}
    assert topology.read_numa_nodes(root)[0].cpus == cpus.online


# ------------------------------------------------ 14: CPU nodes without memory

def literal_host(distances=True):
    """Node 0: CPUs and memory; node 1: CPUs, a GPU and no memory; node 2: memory only.
    Node 1 is nearer to node 2 (12) than to node 0 (21)."""
    table = {0: {0: 10, 1: 21, 2: 17}, 1: {0: 21, 1: 10, 2: 12}, 2: {0: 17, 1: 12, 2: 10}}
    node_cpus = {0: (0, 1, 2, 3), 1: (4, 5, 6, 7), 2: ()}
    memory = {0: 64, 1: 0, 2: 32}
    cpus = {c: Cpu(id=c, online=True, package=0, core=c, thread_siblings=(c,), node=n)
            for n, members in node_cpus.items() for c in members}
    state = CpuState(possible=tuple(range(8)), present=tuple(range(8)),
                     online=tuple(range(8)), cpus=cpus, flags=("pdpe1gb",))
    nodes = {n: NumaNode(id=n, cpus=node_cpus[n], mem_total_kib=memory[n] * GIB_KIB,
                         mem_free_kib=memory[n] * GIB_KIB,
                         hugepages={2048: HugepagePool(size_kib=2048)},
                         distances=table[n] if distances else {})
             for n in node_cpus}
    gpu = PciFunction(address="0000:41:00.0", class_code=0x030200, vendor_id=0x10DE,
                      device_id=0x20B5, driver="vfio-pci", numa_node=1,
                      numa_node_source="numa_node", iommu_group=7)
    iommu = IommuState(enabled=True, vendor="intel", groups={7: ("0000:41:00.0",)})
    return HostTopology(cpus=state, nodes=nodes, pci={gpu.address: gpu}, iommu=iommu)


TENANT = {"name": "t1", "gpus": 1, "vcpus": 2, "memory_gib": 8, "hugepage_size": "2M"}


def test_tenant_on_a_memoryless_node_gets_the_nearest_nodes_memory_and_a_warning():
    plan = plan_placement(literal_host(), [TENANT])
    tenant = plan["tenants"][0]
    assert (tenant["node"], tenant["memory_node"]) == (1, 2)
    assert tenant["numatune"] == {"mode": "strict", "nodeset": "2"}
    assert tenant["hugepages"] == {"2": 4096} and plan["hugepages"] == {"2": {"2048": 4096}}
    assert set(tenant["vcpu_pins"]) <= {4, 5, 6, 7}
    assert plan["warnings"] == [
        "node 1 has CPUs but no memory: tenant t1's 8 GiB come from node 2, the nearest "
        "node with memory (distance 12); its memory accesses cross nodes"]


def test_memory_taken_from_the_nearest_node_is_counted_against_that_node():
    first = plan_placement(literal_host(), [dict(TENANT, memory_gib=30)])
    assert first["tenants"][0]["memory_node"] == 2
    # 65 GiB: more than node 0 has, so t2 is tried on node 1 too, whose memory is node 2's
    t2 = dict(TENANT, gpus=0, name="t2", vcpus=1, memory_gib=65)
    with pytest.raises(GpuhostError) as err:
        plan_placement(literal_host(), [t2], existing=first["tenants"], hugepage_check="none")
    assert ("node 1: not enough memory of node 2: needs 65 GiB, free 2 GiB of 32 GiB "
            "(tenants hold 30 GiB)") in str(err.value)


def test_a_memoryless_node_without_a_distance_table_is_refused_with_the_reason():
    with pytest.raises(GpuhostError) as err:
        plan_placement(literal_host(distances=False), [TENANT])
    assert err.value.field == "tenants[0].memory_gib"
    assert "no memory and its distance table names no node with memory" in str(err.value)


def test_hugepage_shortfall_names_the_node_the_memory_comes_from():
    host = literal_host()
    host.nodes[2].mem_free_kib = 2 * GIB_KIB
    with pytest.raises(GpuhostError) as err:
        plan_placement(host, [TENANT])
    assert "memory for hugepages of node 2" in str(err.value)


def test_real_snc2_server_with_a_dimmless_node_takes_memory_from_its_sibling_node(tmp_path):
    root = copy_tree(realtrees.SNC2_SERVER, tmp_path)
    with open(os.path.join(root, NODE_DIR, "node1", "meminfo"), "w") as handle:
        handle.write("Node 1 MemTotal:       0 kB\nNode 1 MemFree:        0 kB\n")
    tenants = [{"name": "t%d" % i, "gpus": 0, "vcpus": 4, "memory_gib": 4,
                "hugepage_size": "2M"} for i in (1, 2)]
    plan, warned = planner_warnings(root, tenants, hugepage_check="none")
    by_name = {t["name"]: t for t in plan["tenants"]}
    assert (by_name["t1"]["node"], by_name["t1"]["memory_node"]) == (0, 0)
    # node 1's distance row is 21 10 21 11 28 28: node 3 is the nearest with memory
    assert (by_name["t2"]["node"], by_name["t2"]["memory_node"]) == (1, 3)
    assert by_name["t2"]["numatune"]["nodeset"] == "3"
    assert warned == ["node 1 has CPUs but no memory: tenant t2's 4 GiB come from node 3, "
                      "the nearest node with memory (distance 11); its memory accesses "
                      "cross nodes"]


def test_real_power9_cpu_node_without_memory_skips_the_far_gpu_memory_nodes(tmp_path):
    # node 8's distance row is 40 10 80 80 80 80 80 80: node 0 (40) is nearer than the
    # V100s' memory nodes 250-255 (80), which have memory but no CPUs.
    root = copy_tree(realtrees.POWER9, tmp_path)
    with open(os.path.join(root, NODE_DIR, "node8", "meminfo"), "w") as handle:
        handle.write("Node 8 MemTotal:       0 kB\nNode 8 MemFree:        0 kB\n")
    host = topology.read_host_topology(root, with_irqs=False)
    tenants = [{"name": "t%d" % i, "gpus": 0, "vcpus": 8, "memory_gib": 4,
                "hugepage_size": "2M"} for i in (1, 2)]
    plan = plan_placement(host, tenants, hugepage_check="none")
    by_name = {t["name"]: t for t in plan["tenants"]}
    assert (by_name["t2"]["node"], by_name["t2"]["memory_node"]) == (8, 0)
    assert by_name["t2"]["hugepages"] == {"0": 2048}
    assert plan["warnings"] == [
        "node 8 has CPUs but no memory: tenant t2's 4 GiB come from node 0, the nearest "
        "node with memory (distance 40); its memory accesses cross nodes"]


def test_host_choice_counts_the_hugepages_of_the_node_the_memory_comes_from():
    # The candidate's pages are node 2's (the memory node), not the CPU node 1's pool.
    candidate = evaluate_host(literal_host(), None, TENANT)
    assert (candidate["fits"], candidate["node"], candidate["hugepages_ready"]) == (
        True, 1, False)
    assert "4096 2M hugepages of node 2 to reserve" in candidate["why"]
    host = literal_host()
    host.nodes[2].hugepages[2048] = HugepagePool(size_kib=2048, nr=4096, free=4096)
    candidate = evaluate_host(host, None, TENANT)
    assert candidate["hugepages_ready"] is True
    assert "4096 2M hugepages of node 2 already free" in candidate["why"]


def test_real_snc2_host_choice_for_a_dimmless_node_reads_its_sibling_nodes_pool(tmp_path):
    root = copy_tree(realtrees.SNC2_SERVER, tmp_path)
    with open(os.path.join(root, NODE_DIR, "node1", "meminfo"), "w") as handle:
        handle.write("Node 1 MemTotal:       0 kB\nNode 1 MemFree:        0 kB\n")
    host = topology.read_host_topology(root, with_irqs=False)
    # a tenant holding 30 of node 0's 31.5 GiB leaves node 1 (with node 3's memory) next
    ledger = reserve(LedgerData(), host, [{"name": "first", "gpus": 0, "vcpus": 4,
                                           "memory_gib": 30, "hugepage_size": "2M"}],
                     smt_policy="require", hugepage_check="none")[0]
    request = {"name": "next", "gpus": 0, "vcpus": 4, "memory_gib": 8, "hugepage_size": "2M"}
    candidate = evaluate_host(host, ledger, request, hugepage_check="none")
    assert candidate["fits"] and candidate["node"] == 1, candidate
    pool = host.nodes[3].hugepages[2048]
    assert candidate["hugepages_ready"] is (pool.free >= 4096)
    assert "4096 2M hugepages of node 3" in candidate["why"]


# ------------------------------------------ 15: /proc/interrupts system-wide rows

def test_err_and_mis_of_the_1152_cpu_host_are_totals_not_cpu0_counts():
    path = os.path.join(tree(realtrees.INTERRUPTS_1152), "proc", "interrupts.bz2")
    with bz2.open(path, "rt") as handle:
        irqs = topology.parse_proc_interrupts(handle.read())
    for label in ("ERR", "MIS"):
        assert (irqs[label].total, irqs[label].counts, irqs[label].cpus) == (0, (), ())
    assert [label for label, irq in irqs.items() if irq.total is not None] == ["ERR", "MIS"]
    assert len(irqs["NMI"].counts) == 1152 and irqs["NMI"].total is None


def test_system_wide_rows_stay_out_of_every_cpus_sum():
    text = ("           CPU0       CPU1       CPU2\n"
            "  0:         10          0          0   IO-APIC    2-edge      timer\n"
            "NMI:          1          2          3   Non-maskable interrupts\n"
            "ERR:          7\n"
            "MIS:          3\n")
    irqs = topology.parse_proc_interrupts(text)
    assert (irqs["ERR"].total, irqs["MIS"].total) == (7, 3)
    assert sum(i.counts[0] for i in irqs.values() if i.counts) == 11
    data = json.loads(json.dumps(topology.topology_to_dict(HostTopology(
        cpus=CpuState(), nodes={}, pci={}, iommu=IommuState(), irqs=irqs))))
    assert topology.topology_from_dict(data).irqs == irqs


def test_one_cpu_host_keeps_err_as_a_total_and_other_rows_as_its_counts():
    text = ("           CPU0\n"
            "  0:         10   IO-APIC    2-edge      timer\n"
            "LOC:        500   Local timer interrupts\n"
            "Err:          2\n"
            "ERR:          4\n"
            "XYZ:          9\n")
    irqs = topology.parse_proc_interrupts(text)
    assert (irqs["Err"].total, irqs["ERR"].total) == (2, 4)
    assert irqs["LOC"].counts == (500,) and irqs["XYZ"].counts == (9,)
    assert irqs["XYZ"].total is None
