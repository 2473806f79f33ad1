# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner on topologies read from sysfs trees: the synthetic hosts of
tests/support/fixturegen.py and the recorded real machines in tests/fixtures/topologies/."""

import copy
import json

import pytest

from support import fixturegen
from support import realtrees
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    read_host_topology,
    topology_from_dict,
    topology_to_dict,
)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """Each synthetic host written once and read once through the real readers."""
    base = tmp_path_factory.mktemp("hosts")
    built = {}
    for name in ("runbook", "eight_gpu", "dirty_usb", "amd_nps4"):
        root = fixturegen.HOSTS[name](str(base / name))
        built[name] = read_host_topology(root, with_irqs=False)
    return built


def real(name):
    return read_host_topology(realtrees.tree(name), with_irqs=False)


def a100(**changes):
    data = {"name": "tenant-a100", "gpus": 1, "vcpus": 30, "memory_gib": 64,
            "hugepage_size": "1G", "nic_vf": True, "iothreads": 2}
    data.update(changes)
    return data


# ------------------------------------------------------------------ the runbook host

def test_runbook_host_refuses_32_vcpus_next_to_the_default_housekeeping(hosts):
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(hosts["runbook"], [a100(vcpus=32)])
    message = excinfo.value.message
    assert excinfo.value.field == "tenants[0].vcpus"
    for words in ("node 0", "whole cores", "needs 16", "free 15 (1-15,33-47)"):
        assert words in message, message


def test_runbook_host_places_30_vcpus_with_gpu_hda_and_a_vf_on_node_0(hosts):
    topo = hosts["runbook"]
    plan = plan_placement(topo, [a100()])
    entry = plan["tenants"][0]
    assert entry["node"] == 0
    assert entry["vcpu_pins"] == [c for n in range(1, 16) for c in (n, n + 32)]
    assert entry["gpus"][0]["address"] == fixturegen.RUNBOOK_GPU
    assert entry["gpus"][0]["functions"] == [fixturegen.RUNBOOK_GPU, fixturegen.RUNBOOK_HDA]
    assert entry["gpus"][0]["iommu_group"] == topo.pci[fixturegen.RUNBOOK_GPU].iommu_group
    assert entry["gpus"][0]["bar64_total"] == \
        topo.pci[fixturegen.RUNBOOK_GPU].bar64_prefetchable_total > 0
    assert entry["vf"]["pf"] == fixturegen.RUNBOOK_PF
    assert entry["vf"]["address"] == topo.pci[fixturegen.RUNBOOK_PF].virtfns[0]
    assert plan["irqbalance"]["banned_cpus_mask"] == "0000fffe,0000fffe"
    assert plan["hugepages"] == {"0": {"1048576": 64}}


def test_runbook_host_with_free_check_sees_only_32_free_1g_pages(hosts):
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(hosts["runbook"], [a100()], hugepage_check="free")
    assert excinfo.value.field == "tenants[0].memory_gib"
    assert "needs 64 pages, free 32 pages" in excinfo.value.message


def test_plan_from_the_dict_form_equals_the_plan_from_the_objects(hosts):
    data = json.loads(json.dumps(topology_to_dict(hosts["runbook"])))
    from_dict = plan_placement(data, [a100()])
    assert from_dict == plan_placement(hosts["runbook"], [a100()])
    assert from_dict == plan_placement(topology_from_dict(data), [a100()])


# -------------------------------------------------------------------- the 8-GPU host

def test_eight_gpu_host_spreads_tenants_and_keeps_each_on_its_gpu_node(hosts):
    topo = hosts["eight_gpu"]
    tenants = [a100(name="t%d" % i, vcpus=14, memory_gib=4) for i in range(8)]
    plan = plan_placement(topo, tenants)
    nodes = [t["node"] for t in plan["tenants"]]
    assert nodes == [0, 1, 0, 1, 0, 1, 0, 1]
    gpus = [t["gpus"][0]["address"] for t in plan["tenants"]]
    assert len(set(gpus)) == 8
    for entry in plan["tenants"]:
        assert topo.pci[entry["gpus"][0]["address"]].numa_node == entry["node"]
        assert topo.pci[entry["vf"]["pf"]].numa_node == entry["node"]
        assert entry["gpus"][0]["functions"] == [entry["gpus"][0]["address"]]
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(topo, [a100(name="ninth", vcpus=2, memory_gib=4)],
                       existing=plan["tenants"])
    assert "not enough GPUs" in excinfo.value.message
    assert "taken by t0" in excinfo.value.message


def test_eight_gpu_host_onboarding_keeps_the_first_tenants(hosts):
    topo = hosts["eight_gpu"]
    first = plan_placement(topo, [a100(name="a", vcpus=8, memory_gib=8),
                                  a100(name="b", vcpus=8, memory_gib=8)])
    second = plan_placement(topo, [a100(name="c", vcpus=8, memory_gib=8)],
                            existing=first["tenants"])
    assert second["tenants"][:2] == first["tenants"]
    assert second["tenants"][2]["gpus"][0]["address"] not in {
        t["gpus"][0]["address"] for t in first["tenants"]}


# -------------------------------------------------------------------- AMD NPS4 host

def test_amd_nps4_host_places_on_the_gpu_node_with_siblings_64_apart(hosts):
    topo = hosts["amd_nps4"]
    plan = plan_placement(topo, [a100(vcpus=4, memory_gib=8, nic_vf=False)])
    entry = plan["tenants"][0]
    gpu = entry["gpus"][0]["address"]
    assert topo.pci[gpu].numa_node == entry["node"]
    pins = entry["vcpu_pins"]
    assert pins[1] == pins[0] + 64 and pins[3] == pins[2] + 64
    assert set(pins) <= set(topo.nodes[entry["node"]].cpus)
    assert entry["numatune"] == {"mode": "strict", "nodeset": str(entry["node"])}
    assert len(plan["housekeeping"]) == 8


def test_amd_nps4_host_refuses_gpus_of_two_nodes(hosts):
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(hosts["amd_nps4"], [a100(gpus=["41:00.0", "61:00.0"], vcpus=4,
                                                memory_gib=8, nic_vf=False)])
    assert excinfo.value.field == "tenants[0].gpus"
    assert "different NUMA nodes (1-2)" in excinfo.value.message


def test_amd_nps4_host_vf_only_exists_on_node_0(hosts):
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(hosts["amd_nps4"], [a100(gpus=["41:00.0"], vcpus=4, memory_gib=8)])
    assert excinfo.value.field == "tenants[0].nic_vf"
    assert "no SR-IOV PF on node 1" in excinfo.value.message


def test_a_vf_of_an_sriov_pf_that_is_no_network_controller_is_no_nic_vf(hosts):
    # The lab's node 0 has an SR-IOV NVMe PF (secondary controllers) before its NIC: a
    # tenant's nic_vf must come from the NIC. Here the runbook host's only PF is made an
    # NVMe controller: no VF is offered, and the error says why.
    topo = copy.deepcopy(hosts["runbook"])
    pf = topo.pci[fixturegen.RUNBOOK_PF]
    pf.class_code = 0x010802
    for vf in pf.virtfns:
        topo.pci[vf].class_code = 0x010802
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(topo, [a100()])
    assert excinfo.value.field == "tenants[0].nic_vf"
    assert "no SR-IOV PF on node 0 among its network controllers" in excinfo.value.message
    # without a VF the same tenant fits
    assert plan_placement(topo, [a100(nic_vf=False)])["tenants"][0]["vf"] is None


# ------------------------------------------------------------------ dirty USB group

def test_dirty_group_gpu_is_skipped_by_count(hosts):
    plan = plan_placement(hosts["dirty_usb"], [a100(vcpus=4, memory_gib=8, nic_vf=False)])
    assert plan["tenants"][0]["gpus"][0]["address"] == "0000:05:00.0"


def test_dirty_group_gpu_by_address_is_refused_naming_the_usb_controller(hosts):
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(hosts["dirty_usb"], [a100(gpus=[fixturegen.DIRTY_GPU], vcpus=4,
                                                 memory_gib=8, nic_vf=False)])
    assert excinfo.value.field == "tenants[0].gpus"
    assert fixturegen.DIRTY_USB in excinfo.value.message
    assert "USB" in excinfo.value.message


# ---------------------------------------------------------------------- real trees

def test_real_xeon_with_siblings_16_apart_pairs_n_and_n_plus_16():
    plan = plan_placement(real(realtrees.XEON_SILVER),
                          [a100(gpus=0, vcpus=4, memory_gib=2, hugepage_size="2M",
                                nic_vf=False)])
    assert plan["housekeeping"] == {"0": "0,16", "1": "8,24"}
    assert plan["tenants"][0]["vcpu_pins"] == [1, 17, 2, 18]


def test_real_xeon_pf_without_created_vfs_gives_no_vf():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(real(realtrees.XEON_SILVER),
                       [a100(gpus=0, vcpus=4, memory_gib=2, hugepage_size="2M")])
    assert "0000:60:00.0: 0 VFs, 0 free" in excinfo.value.message


def test_real_host_with_cpu0_offline_uses_only_the_online_node():
    topo = real(realtrees.OFFLINE_CPU0)
    plan = plan_placement(topo, [a100(gpus=0, vcpus=4, memory_gib=2, hugepage_size="2M",
                                      nic_vf=False)])
    assert plan["housekeeping"] == {"1": "5"}
    assert plan["tenants"][0]["node"] == 1
    assert plan["tenants"][0]["vcpu_pins"] == [7, 9, 11, 13]
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(topo, [], housekeeping={"1": "1,3"})
    assert excinfo.value.field == "housekeeping.1"
    assert "1,3" in excinfo.value.message and "offline" in excinfo.value.message


def test_real_power9_with_smt4_needs_multiples_of_4_under_require():
    topo = real(realtrees.POWER9)
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(topo, [a100(gpus=0, vcpus=2, memory_gib=2, hugepage_size="2M")])
    assert "4 threads per core" in excinfo.value.message
    plan = plan_placement(topo, [a100(gpus=0, vcpus=4, memory_gib=2, hugepage_size="2M",
                                      nic_vf=False)])
    entry = plan["tenants"][0]
    assert plan["threads_per_core"] == 4
    assert entry["guest_topology"]["threads"] == 4
    # GPU-memory nodes 250-255 have no CPUs: never a tenant's node, no housekeeping.
    assert set(plan["housekeeping"]) == {"0", "8"}
    assert entry["node"] in (0, 8)


def test_real_snc2_server_keeps_interleaved_cpus_on_their_node():
    topo = real(realtrees.SNC2_SERVER)
    plan = plan_placement(topo, [a100(gpus=0, vcpus=2, memory_gib=2, hugepage_size="2M",
                                      nic_vf=False)])
    entry = plan["tenants"][0]
    assert set(entry["vcpu_pins"]) <= set(topo.nodes[entry["node"]].cpus)
    for node, cpus in plan["housekeeping"].items():
        assert int(node) in topo.nodes and topo.nodes[int(node)].cpus


def test_real_epyc_without_node_memfree_plans_with_a_warning():
    plan = plan_placement(real(realtrees.EPYC_7451),
                          [a100(gpus=0, vcpus=2, memory_gib=2, hugepage_size="2M",
                                nic_vf=False)])
    assert len(plan["housekeeping"]) == 8
    assert plan["tenants"][0]["vcpu_pins"] == [1, 49]
    assert any("MemFree" in w for w in plan["warnings"])


def test_real_sandy_bridge_gpu_without_iommu_group_is_skipped_with_the_reason():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(real(realtrees.SANDY_BRIDGE),
                       [a100(vcpus=2, memory_gib=2, hugepage_size="2M", nic_vf=False)])
    assert "0000:05:00.0" in excinfo.value.message
    assert "no IOMMU group" in excinfo.value.message


# ------------------------------------------------------------ iothreads (runbook section 8)

def small(name, vcpus, iothreads=0):
    return a100(name=name, gpus=0, vcpus=vcpus, memory_gib=2, hugepage_size="2M",
                nic_vf=False, iothreads=iothreads)


def test_real_xeon_gives_iothreads_a_spare_core_and_the_ledger_holds_it():
    """XEON_SILVER: 2 nodes of 8 cores, siblings N and N+16, housekeeping 0,16 and
    8,24. One small tenant leaves node 0 cores to spare: its iothreads get the next
    whole core, which joins its dedicated CPUs, the plan's tenant CPUs and the
    irqbalance ban list."""
    topo = real(realtrees.XEON_SILVER)
    plan = plan_placement(topo, [small("t-io", 4, iothreads=2)])
    entry = plan["tenants"][0]
    assert entry["vcpu_pins"] == [1, 17, 2, 18] and entry["emulator_cpus"] == "0,16"
    assert (entry["iothread_placement"], entry["iothread_cpus"]) == ("dedicated", "3,19")
    assert entry["dedicated_cpus"] == "1-3,17-19"
    assert plan["tenant_cpus"] == "1-3,17-19"
    assert plan["irqbalance"]["banned_cpulist"] == "1-3,17-19"
    # A later plan holds it for t-io (the ledger's path: existing tenants by their
    # dedicated_cpus, or, in an entry written without them, by iothread_placement): a
    # 5-core tenant finds 4 free cores on node 0, not 5, with node 1 all housekeeping.
    legacy = copy.deepcopy(plan["tenants"])
    del legacy[0]["dedicated_cpus"]
    for existing in (plan["tenants"], legacy):
        with pytest.raises(GpuhostError) as excinfo:
            plan_placement(topo, [small("t-big", 10)], existing=existing,
                           housekeeping={"0": "0,16", "1": "8-15,24-31"})
        assert "free 4 (4-7,20-23)" in excinfo.value.message, excinfo.value.message
    fits = plan_placement(topo, [small("t-next", 8)], existing=plan["tenants"],
                          housekeeping={"0": "0,16", "1": "8-15,24-31"})
    assert fits["tenants"][1]["vcpu_pins"] == [4, 20, 5, 21, 6, 22, 7, 23]
    assert fits["tenants"][0] == plan["tenants"][0]


def test_iothreads_take_a_spare_core_only_after_every_tenant_of_the_plan():
    """Placed one by one with the core taken at once, t-io would hold node 0's core 3 and
    t-c (5 cores) would fit nowhere; the iothreads wait until every tenant has its cores,
    then find node 0 full and share the emulator's CPUs."""
    topo = real(realtrees.XEON_SILVER)
    plan = plan_placement(topo, [small("t-io", 4, iothreads=1), small("t-b", 10),
                                 small("t-c", 10)])
    by_name = {t["name"]: t for t in plan["tenants"]}
    assert [by_name[n]["node"] for n in ("t-io", "t-b", "t-c")] == [0, 1, 0]
    io = by_name["t-io"]
    assert (io["iothread_placement"], io["iothread_cpus"]) == ("shared_with_emulator",
                                                               "0,16")
    assert io["dedicated_cpus"] == "1-2,17-18"
    assert by_name["t-b"]["iothread_placement"] is None       # no iothreads asked


def test_runbook_tenant_filling_its_node_shares_the_emulator_and_a_smaller_one_does_not(
        hosts):
    full = plan_placement(hosts["runbook"], [a100()])["tenants"][0]
    assert (full["iothread_placement"], full["iothread_cpus"]) == ("shared_with_emulator",
                                                                   "0,32")
    smaller = plan_placement(hosts["runbook"], [a100(vcpus=28)])["tenants"][0]
    assert (smaller["iothread_placement"], smaller["iothread_cpus"]) == ("dedicated",
                                                                         "15,47")
    assert smaller["dedicated_cpus"] == "1-15,33-47"
