# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The placement planner on literal topologies (no sysfs), one behaviour per test."""

import copy
import dataclasses
import json

import pytest
from support.sysfs_sim import SimulatedKernel, build_sim_host, run_module

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PciFunction
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
    default_housekeeping, plan_placement, resolve_housekeeping, tenant_request_from_dict)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
from ansible_collections.gpuhost.kvm.plugins.modules import sriov_vfs
from support.hosts import (
    GIB_KIB, VF_DEFAULTS, build_host, fails, gpu, hda, lab_host, runbook_host, sriov_pf,
    tenant, two_node_gpu_host)
from support import TESTS


# ---------------------------------------------------------------- the runbook tenant

def test_runbook_tenant_with_32_vcpus_does_not_fit_next_to_default_housekeeping():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(vcpus=32)])
    err = excinfo.value
    fails("tenants[0].vcpus", "tenant-a100", "node 0", "whole cores", "needs 16",
          "free 15", "1-15,33-47")(err)
    assert err.details["nodes"] == [{"node": 0, "resource": "whole cores",
                                     "needed": err.details["nodes"][0]["needed"],
                                     "free": "15 (1-15,33-47)"}]


def test_runbook_tenant_with_30_vcpus_gets_node_0_pairs_gpu_hda_and_vf():
    plan = plan_placement(runbook_host(), [tenant()])
    entry = plan["tenants"][0]
    assert entry["node"] == 0
    assert entry["vcpu_pins"] == [c for n in range(1, 16) for c in (n, n + 32)]
    assert entry["vcpu_pins"][:2] == [1, 33]
    assert entry["guest_topology"] == {"sockets": 1, "dies": 1, "cores": 15, "threads": 2}
    assert entry["gpus"] == [{"address": "0000:65:00.0",
                              "functions": ["0000:65:00.0", "0000:65:00.1"],
                              "iommu_group": 27, "bar64_total": 32 * GIB_KIB * 1024,
                              "bar64_sizes": [32 * GIB_KIB * 1024]}]
    assert entry["emulator_cpus"] == "0,32"
    assert entry["iothread_cpus"] == "0,32"
    assert entry["iothreads"] == 2
    assert entry["numatune"] == {"mode": "strict", "nodeset": "0"}
    assert entry["hugepage_size_kib"] == GIB_KIB
    assert entry["hugepages"] == {"0": 64}
    assert entry["vf"] == {"pf": "0000:41:00.0", "address": "0000:41:00.2", "iommu_group": 40,
                           "index": 0, **VF_DEFAULTS}
    assert entry["reserved_cpus"] == ""
    assert entry["dedicated_cpus"] == "1-15,33-47"

    assert plan["smt_policy"] == "require"
    assert plan["threads_per_core"] == 2
    assert plan["online_cpus"] == "0-63"
    assert plan["housekeeping"] == {"0": "0,32", "1": "16,48"}
    assert plan["housekeeping_cpus"] == "0,16,32,48"
    assert plan["tenant_cpus"] == "1-15,33-47"
    assert plan["irqbalance"] == {"banned_cpulist": "1-15,33-47",
                                  "banned_cpus_mask": "0000fffe,0000fffe"}
    assert plan["hugepages"] == {"0": {"1048576": 64}}
    assert plan["warnings"] == []


def test_plan_survives_a_json_round_trip_unchanged():
    plan = plan_placement(runbook_host(), [tenant(), tenant(name="t2", gpus=0, vcpus=8,
                                                            memory_gib=8, nic_vf=False)])
    assert json.loads(json.dumps(plan)) == plan


def test_same_input_gives_the_identical_plan():
    tenants = [tenant(name="a", gpus=1, vcpus=4, memory_gib=8, nic_vf=False),
               tenant(name="b", gpus=1, vcpus=4, memory_gib=8, nic_vf=False),
               tenant(name="c", gpus=0, vcpus=6, memory_gib=8, nic_vf=False)]
    first = plan_placement(two_node_gpu_host(), copy.deepcopy(tenants))
    second = plan_placement(two_node_gpu_host(), copy.deepcopy(tenants))
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


# ------------------------------------------------------------------ sibling numbering

def test_adjacent_sibling_numbering_keeps_pairs_together():
    plan = plan_placement(lab_host(hugepages={1: {2048: (512, 512)}}),
                          [tenant(vcpus=2, memory_gib=1, hugepage_size="2M", nic_vf=False)])
    entry = plan["tenants"][0]
    assert entry["node"] == 1
    assert plan["housekeeping"] == {"0": "0-1", "1": "4-5"}
    assert entry["vcpu_pins"] == [6, 7]
    assert entry["guest_topology"]["threads"] == 2
    assert entry["hugepages"] == {"1": 512}
    assert entry["emulator_cpus"] == "4-5"
    assert plan["irqbalance"]["banned_cpus_mask"] == "000000c0"


def test_smt_off_host_accepts_any_count_under_require():
    cores = {0: [(n,) for n in range(8)], 1: [(n,) for n in range(8, 16)]}
    host = build_host(cores, [gpu("0000:3b:00.0", 1, 5), hda("0000:3b:00.1", 1, 5)],
                      hugepages={1: {GIB_KIB: (16, 16)}})
    plan = plan_placement(host, [tenant(vcpus=3, memory_gib=4, nic_vf=False)])
    entry = plan["tenants"][0]
    assert plan["threads_per_core"] == 1
    assert plan["housekeeping"] == {"0": "0", "1": "8"}
    assert entry["vcpu_pins"] == [9, 10, 11]
    assert entry["guest_topology"] == {"sockets": 1, "dies": 1, "cores": 3, "threads": 1}


# ------------------------------------------------------------------------ SMT policies

def test_require_refuses_an_odd_count_and_names_the_next_even_ones():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(vcpus=31)])
    fails("tenants[0].vcpus", "31 vCPUs", "multiple", "2 threads per core")(excinfo.value)
    assert "30 or 32" in excinfo.value.message
    assert "prefer" in excinfo.value.message


def test_zero_vcpus_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(vcpus=0)])
    fails("tenants[0].vcpus", "below 1")(excinfo.value)


def test_unknown_smt_policy_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant()], smt_policy="mixed")
    fails("smt_policy", "mixed", "require, prefer, isolate")(excinfo.value)


def test_prefer_fills_whole_cores_then_one_thread_for_an_odd_count():
    plan = plan_placement(runbook_host(), [tenant(vcpus=29)], smt_policy="prefer")
    entry = plan["tenants"][0]
    assert entry["vcpu_pins"] == [c for n in range(1, 15) for c in (n, n + 32)] + [15]
    # The guest cannot be shown SMT pairs for an odd count.
    assert entry["guest_topology"] == {"sockets": 1, "dies": 1, "cores": 29, "threads": 1}
    assert 47 not in entry["vcpu_pins"]


def test_prefer_uses_partly_used_cores_before_breaking_a_whole_one():
    plan = plan_placement(runbook_host(), [tenant(vcpus=3)], smt_policy="prefer",
                          housekeeping={"0": "0"})
    entry = plan["tenants"][0]
    # 32 is the lone free thread of core 0 (its sibling 0 is housekeeping).
    assert entry["vcpu_pins"] == [1, 33, 32]
    assert plan["housekeeping"]["0"] == "0"


def test_isolate_gives_one_thread_per_core_and_reserves_the_siblings():
    plan = plan_placement(runbook_host(), [
        tenant(name="iso", vcpus=4, memory_gib=8, nic_vf=False),
        tenant(name="next", gpus=0, vcpus=2, memory_gib=8, nic_vf=False),
    ], smt_policy="isolate")
    iso, following = plan["tenants"]
    assert iso["vcpu_pins"] == [1, 2, 3, 4]
    assert iso["reserved_cpus"] == "33-36"
    assert iso["guest_topology"] == {"sockets": 1, "dies": 1, "cores": 4, "threads": 1}
    assert iso["smt_policy"] == "isolate"
    assert not set(following["vcpu_pins"]) & set(range(33, 37))
    assert set(range(33, 37)) <= set(_cpus(plan["tenant_cpus"]))
    assert set(range(33, 37)) <= set(_cpus(plan["irqbalance"]["banned_cpulist"]))


def test_isolate_counts_a_whole_core_per_vcpu():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(vcpus=16)], smt_policy="isolate")
    fails("tenants[0].vcpus", "node 0", "needs 16", "free 15", "isolate")(excinfo.value)


def test_dedicated_emulator_policy_takes_one_more_whole_core():
    plan = plan_placement(runbook_host(), [tenant(vcpus=4, emulator_policy="dedicated",
                                                  iothreads=1)])
    entry = plan["tenants"][0]
    assert entry["vcpu_pins"] == [1, 33, 2, 34]
    assert entry["emulator_cpus"] == "3,35"
    # node 0 has spare cores, so the iothread gets the next one (the runbook's layout)
    assert entry["iothread_cpus"] == "4,36"
    assert entry["iothread_placement"] == "dedicated"
    assert entry["dedicated_cpus"] == "1-4,33-36"
    assert plan["tenant_cpus"] == "1-4,33-36"


def test_dedicated_emulator_core_is_counted_in_the_shortage():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(emulator_policy="dedicated")])
    fails("tenants[0].vcpus", "needs 16", "dedicated emulator core", "free 15")(excinfo.value)


def test_prefer_with_a_dedicated_emulator_keeps_the_low_cores_for_vcpus():
    plan = plan_placement(runbook_host(), [tenant(vcpus=3, emulator_policy="dedicated")],
                          smt_policy="prefer")
    entry = plan["tenants"][0]
    assert entry["vcpu_pins"] == [1, 33, 2]
    assert entry["emulator_cpus"] == "3,35"


def test_no_iothreads_means_no_iothread_cpus():
    plan = plan_placement(runbook_host(), [tenant(iothreads=0)])
    assert plan["tenants"][0]["iothread_cpus"] is None


# ---------------------------------------------------------------------- housekeeping

def test_default_housekeeping_is_the_first_core_of_each_node_with_its_siblings():
    assert default_housekeeping(runbook_host()) == {0: (0, 32), 1: (16, 48)}
    assert default_housekeeping(lab_host()) == {0: (0, 1), 1: (4, 5)}


def test_explicit_housekeeping_replaces_the_default_of_that_node_only():
    result = resolve_housekeeping(runbook_host(), {"0": "0-1,32-33"})
    assert result == {0: (0, 1, 32, 33), 1: (16, 48)}
    plan = plan_placement(runbook_host(), [tenant(vcpus=28)],
                          housekeeping={0: "0-1,32-33"})
    assert plan["tenants"][0]["vcpu_pins"][:2] == [2, 34]
    assert plan["tenants"][0]["emulator_cpus"] == "0-1,32-33"


def test_offline_housekeeping_cpus_are_refused():
    host = runbook_host(offline=(32,))
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [tenant(vcpus=2)], housekeeping={"0": "0,32"})
    fails("housekeeping.0", "32", "offline", "node 0")(excinfo.value)


def test_default_housekeeping_skips_an_offline_sibling():
    host = runbook_host(offline=(32,))
    assert default_housekeeping(host)[0] == (0,)


def test_housekeeping_cpu_of_another_node_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(vcpus=2)], housekeeping={"0": "16"})
    fails("housekeeping.0", "not on node 0")(excinfo.value)


def test_unparseable_housekeeping_cpuset_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(vcpus=2)], housekeeping={"0": "0-x"})
    fails("housekeeping.0", "cannot parse")(excinfo.value)


def test_housekeeping_on_an_unknown_node_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(vcpus=2)], housekeeping={"7": "0"})
    fails("housekeeping.7", "node 7 does not exist")(excinfo.value)


def test_empty_housekeeping_everywhere_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(vcpus=2)], housekeeping={"0": "", "1": ""})
    fails("housekeeping", "no housekeeping CPU")(excinfo.value)


def test_emulator_on_a_node_without_housekeeping_cpus_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(vcpus=2)], housekeeping={"0": ""})
    fails("tenants[0].emulator_policy", "node 0", "housekeeping CPUs")(excinfo.value)


# ------------------------------------------------------------------------------ GPUs

def test_tenants_spread_over_the_nodes_with_the_most_room():
    plan = plan_placement(two_node_gpu_host(), [
        tenant(name="a", vcpus=4, memory_gib=8, nic_vf=False),
        tenant(name="b", vcpus=4, memory_gib=8, nic_vf=False),
        tenant(name="c", vcpus=2, memory_gib=8, nic_vf=False),
    ])
    a, b, c = plan["tenants"]
    assert (a["node"], a["gpus"][0]["address"]) == (0, "0000:17:00.0")
    assert (b["node"], b["gpus"][0]["address"]) == (1, "0000:97:00.0")
    # Node 0 and node 1 now have equal room; the lower GPU address wins.
    assert (c["node"], c["gpus"][0]["address"]) == (0, "0000:27:00.0")


def test_multi_gpu_tenant_takes_gpus_of_one_node():
    plan = plan_placement(two_node_gpu_host(), [tenant(name="big", gpus=2, vcpus=4,
                                                       memory_gib=8, nic_vf=False)])
    entry = plan["tenants"][0]
    assert [g["address"] for g in entry["gpus"]] == ["0000:17:00.0", "0000:27:00.0"]
    assert {g["functions"][1] for g in entry["gpus"]} == {"0000:17:00.1", "0000:27:00.1"}


def test_explicit_gpus_on_two_nodes_are_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(two_node_gpu_host(), [tenant(gpus=["17:00.0", "0000:97:00.0"],
                                                    vcpus=4, memory_gib=8, nic_vf=False)])
    fails("tenants[0].gpus", "different NUMA nodes")(excinfo.value)


def test_a_single_gpu_address_without_a_list_is_accepted():
    plan = plan_placement(two_node_gpu_host(), [tenant(gpus="0000:97:00.0", vcpus=4,
                                                       memory_gib=8, nic_vf=False)])
    assert plan["tenants"][0]["gpus"][0]["address"] == "0000:97:00.0"


def test_explicit_gpu_address_is_normalized_and_used():
    plan = plan_placement(two_node_gpu_host(), [tenant(gpus=["97:00.0"], vcpus=4,
                                                       memory_gib=8, nic_vf=False)])
    assert plan["tenants"][0]["gpus"][0]["address"] == "0000:97:00.0"
    assert plan["tenants"][0]["node"] == 1


def test_malformed_gpu_address_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(gpus=["65:00"])])
    fails("tenants[0].gpus[0]", "not a PCI address")(excinfo.value)


def test_unknown_gpu_address_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(gpus=["0000:66:00.0"])])
    fails("tenants[0].gpus[0]", "does not exist", "0000:65:00.0")(excinfo.value)


def test_a_nic_is_not_a_gpu():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(gpus=["0000:41:00.0"])])
    fails("tenants[0].gpus[0]", "not a GPU", "0x020000")(excinfo.value)


def test_the_same_gpu_for_two_tenants_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [
            tenant(name="one", gpus=["0000:65:00.0"], vcpus=2, memory_gib=8),
            tenant(name="two", gpus=["0000:65:00.0"], vcpus=2, memory_gib=8),
        ])
    fails("tenants[1].gpus[0]", "0000:65:00.0", "already given to tenant one")(excinfo.value)


def test_not_enough_gpus_names_what_is_free_and_why_others_were_skipped():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [
            tenant(name="one", vcpus=2, memory_gib=8),
            tenant(name="two", vcpus=2, memory_gib=8),
        ])
    fails("tenants[1].gpus", "not enough GPUs", "needs 1", "taken by one")(excinfo.value)
    assert excinfo.value.details["nodes"] == [
        {"node": 0, "resource": "GPUs", "needed": 1, "free": "0 (none)"},
        {"node": 1, "resource": "GPUs", "needed": 1, "free": "0 (none)"}]


def _dirty_host():
    cores = {0: [(n, n + 8) for n in range(0, 8)]}
    usb = PciFunction(address="0000:02:02.0", class_code=0x0C0330, driver="xhci_hcd",
                      numa_node=0, iommu_group=7)
    return build_host(cores, [gpu("0000:02:01.0", 0, 7), usb, gpu("0000:03:00.0", 0, 8),
                              hda("0000:03:00.1", 0, 8)],
                      hugepages={0: {GIB_KIB: (8, 8)}})


def test_count_skips_a_gpu_in_a_dirty_group():
    plan = plan_placement(_dirty_host(), [tenant(vcpus=2, memory_gib=4, nic_vf=False)])
    assert plan["tenants"][0]["gpus"][0]["address"] == "0000:03:00.0"


def test_explicit_gpu_in_a_dirty_group_is_refused_with_the_intruder_named():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(_dirty_host(), [tenant(gpus=["02:01.0"], vcpus=2, memory_gib=4,
                                              nic_vf=False)])
    fails("tenants[0].gpus", "IOMMU group 7", "0000:02:02.0")(excinfo.value)


def test_gpu_less_tenant_goes_to_the_node_with_most_room():
    plan = plan_placement(runbook_host(), [
        tenant(name="gpu", vcpus=8, memory_gib=8, nic_vf=False),
        tenant(name="cpu-only", gpus=0, vcpus=4, memory_gib=8, nic_vf=False,
               hugepage_size="2M"),
    ])
    entry = plan["tenants"][1]
    assert entry["gpus"] == []
    assert entry["node"] == 1
    assert entry["vcpu_pins"] == [17, 49, 18, 50]


# ------------------------------------------------------------------ memory and pages

def test_not_enough_memory_names_node_and_amounts():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(mem_total_gib=48, mem_free_gib=40), [tenant()])
    fails("tenants[0].memory_gib", "node 0", "not enough memory", "needs 64 GiB",
          "48 GiB")(excinfo.value)


def test_free_check_counts_pages_of_tenants_planned_before():
    host = runbook_host(hugepages={0: {GIB_KIB: (96, 96)}})
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [tenant(name="one", vcpus=4),
                              tenant(name="two", gpus=0, vcpus=4, nic_vf=False)],
                       hugepage_check="free")
    err = excinfo.value
    fails("tenants[1].memory_gib", "tenant two fits on no NUMA node",
          "node 0: not enough 1G hugepages: needs 64 pages, free 32 pages",
          "64 taken by tenants planned before",
          "node 1: not enough 1G hugepages: needs 64 pages, free 0 pages")(err)


def test_free_check_with_nothing_reserved_points_to_the_memory_check():
    host = runbook_host(hugepages={0: {}, 1: {}})
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [tenant()], hugepage_check="free")
    assert "hugepage_check memory" in excinfo.value.message


def test_memory_check_plans_pages_not_yet_reserved():
    host = runbook_host(hugepages={0: {}, 1: {}})
    plan = plan_placement(host, [tenant()])
    assert plan["hugepages"] == {"0": {"1048576": 64}}


def test_memory_check_refuses_pages_beyond_free_memory():
    host = runbook_host(hugepages={0: {GIB_KIB: (16, 16)}}, mem_free_gib=40)
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [tenant()])
    fails("tenants[0].memory_gib", "node 0", "memory for hugepages", "48 GiB still to "
          "reserve", "40 GiB of free memory")(excinfo.value)


def test_2m_pages_are_counted_in_2m_units():
    plan = plan_placement(runbook_host(), [tenant(hugepage_size="2M", memory_gib=3)])
    assert plan["tenants"][0]["hugepage_size_kib"] == 2048
    assert plan["tenants"][0]["hugepages"] == {"0": 1536}
    assert plan["hugepages"] == {"0": {"2048": 1536}}


def test_1g_pages_need_pdpe1gb():
    host = runbook_host(flags=("sse4_2",), hugepages={0: {2048: (0, 0)}})
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [tenant()])
    fails("tenants[0].hugepage_size", "pdpe1gb", "2M")(excinfo.value)


def test_unknown_hugepage_check_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant()], hugepage_check="maybe")
    fails("hugepage_check", "maybe")(excinfo.value)


# ------------------------------------------------------------------------------- VFs

def test_vfs_run_out_after_the_pf_is_used_up():
    tenants = [tenant(name="t%d" % i, gpus=0, vcpus=2, memory_gib=1, hugepage_size="2M")
               for i in range(9)]
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), tenants)
    fails("tenants[8].nic_vf", "node 0: not enough VFs", "0000:41:00.0: 8 VFs, 0 free",
          "no SR-IOV PF on node 1")(excinfo.value)


def test_vf_needs_a_pf_on_the_tenant_node():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(two_node_gpu_host(), [tenant(vcpus=4, memory_gib=8)])
    fails("tenants[0].nic_vf", "no SR-IOV PF on node")(excinfo.value)


def test_vfs_already_on_vfio_pci_are_preferred():
    cores = {0: [(n, n + 8) for n in range(0, 8)]}
    functions = [gpu("0000:65:00.0", 0, 27), hda("0000:65:00.1", 0, 27)]
    functions += sriov_pf("0000:41:00.0", 0, 39, ["0000:41:00.2", "0000:41:00.3"], 40,
                          vf_driver="mlx5_core")
    functions += sriov_pf("0000:42:00.0", 0, 49, ["0000:42:00.2"], 50)
    host = build_host(cores, functions, hugepages={0: {GIB_KIB: (64, 64)}})
    plan = plan_placement(host, [tenant(vcpus=2, memory_gib=4)])
    assert plan["tenants"][0]["vf"] == {"pf": "0000:42:00.0", "address": "0000:42:00.2",
                                        "iommu_group": 50, "index": 0, **VF_DEFAULTS}


def test_a_vf_sharing_its_group_is_not_used():
    cores = {0: [(n, n + 8) for n in range(0, 8)]}
    functions = [gpu("0000:65:00.0", 0, 27), hda("0000:65:00.1", 0, 27)]
    functions += sriov_pf("0000:41:00.0", 0, 39, ["0000:41:00.2", "0000:41:00.3"], 39)
    host = build_host(cores, functions, hugepages={0: {GIB_KIB: (64, 64)}})
    # Both VFs sit in the PF's group 39 with the PF; the second even in group 40 alone.
    host.pci["0000:41:00.3"].iommu_group = 40
    host.iommu.groups = {27: ("0000:65:00.0", "0000:65:00.1"),
                         39: ("0000:41:00.0", "0000:41:00.2"), 40: ("0000:41:00.3",)}
    plan = plan_placement(host, [tenant(vcpus=2, memory_gib=4)])
    assert plan["tenants"][0]["vf"]["address"] == "0000:41:00.3"


# ---------------------------------------------------------------- existing allocation

def test_adding_a_tenant_never_moves_an_existing_one():
    host = two_node_gpu_host()
    first = plan_placement(host, [tenant(name="a", vcpus=4, memory_gib=8, nic_vf=False)])
    before = json.dumps(first["tenants"][0], sort_keys=True)
    second = plan_placement(host, [tenant(name="b", vcpus=6, memory_gib=8, nic_vf=False)],
                            existing=json.loads(json.dumps(first["tenants"])))
    assert json.dumps(second["tenants"][0], sort_keys=True) == before
    a, b = second["tenants"]
    assert not set(a["vcpu_pins"]) & set(b["vcpu_pins"])
    assert a["gpus"][0]["address"] != b["gpus"][0]["address"]


def test_existing_tenant_keeps_its_pins_even_if_a_new_plan_would_differ():
    host = runbook_host()
    first = plan_placement(host, [tenant(name="a", vcpus=4, memory_gib=8)],
                           smt_policy="isolate")
    # The same request under another policy, listed with a newcomer: "a" is not re-planned.
    second = plan_placement(host, [tenant(name="a", vcpus=4, memory_gib=8),
                                   tenant(name="b", gpus=0, vcpus=4, memory_gib=8,
                                          nic_vf=True)],
                            existing=first)
    assert second["tenants"][0] == first["tenants"][0]
    b = second["tenants"][1]
    assert not set(b["vcpu_pins"]) & set(_cpus(first["tenants"][0]["dedicated_cpus"]))
    assert b["vf"]["address"] != first["tenants"][0]["vf"]["address"]
    # Node 1 has more room but no SR-IOV PF, so b lands on node 0 next to a.
    assert b["node"] == 0
    assert second["hugepages"] == {"0": {"1048576": 16}}


def test_a_request_that_differs_from_the_existing_tenant_is_refused():
    host = runbook_host()
    first = plan_placement(host, [tenant(name="a", vcpus=4, memory_gib=8)])
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [tenant(name="a", vcpus=6, memory_gib=8)], existing=first)
    fails("tenants[0]", "already placed", "vcpus 6, placed with 4", "offboard")(excinfo.value)


def test_existing_tenants_with_the_same_cpu_are_refused():
    host = runbook_host()
    first = plan_placement(host, [tenant(name="a", vcpus=4, memory_gib=8)])
    clone = dict(first["tenants"][0], name="b", gpus=[], vf=None)
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [], existing=[first["tenants"][0], clone])
    fails("existing[1]", "CPU 1 is held by both a and b")(excinfo.value)


def test_housekeeping_may_not_take_an_existing_tenant_cpu():
    host = runbook_host()
    first = plan_placement(host, [tenant(name="a", vcpus=4, memory_gib=8)])
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [], existing=first["tenants"], housekeeping={"0": "1,33"})
    fails("housekeeping.0", "pinned to existing tenant a")(excinfo.value)


def test_existing_gpu_cannot_be_requested_again():
    host = runbook_host()
    first = plan_placement(host, [tenant(name="a", vcpus=4, memory_gib=8)])
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [tenant(name="b", gpus=["65:00.0"], vcpus=2, memory_gib=8)],
                       existing=first["tenants"])
    fails("tenants[0].gpus[0]", "already given to tenant a")(excinfo.value)


def test_existing_tenant_on_an_offline_cpu_is_kept_with_a_warning():
    first = plan_placement(runbook_host(), [tenant(name="a", vcpus=4, memory_gib=8)])
    plan = plan_placement(runbook_host(offline=(33,)), [], existing=first["tenants"])
    assert plan["tenants"] == first["tenants"]
    assert any("33" in w and "not online" in w for w in plan["warnings"])


# ------------------------------------------------------------------------ bad requests

@pytest.mark.parametrize("name", ["../etc", ".", "..", "a/b", "-lead", "", "x" * 64,
                                  "sp ace", None])
def test_invalid_tenant_names_are_refused(name):
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(name=name)])
    field = "tenants[0].name"
    assert excinfo.value.field == field
    assert excinfo.value.fix


def test_duplicate_tenant_names_are_refused():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(), tenant()])
    fails("tenants[1].name", "tenant-a100", "used twice")(excinfo.value)


@pytest.mark.parametrize("changes, field, word", [
    ({"hugepage_size": "4M"}, "tenants[0].hugepage_size", "not supported"),
    ({"emulator_policy": "shared"}, "tenants[0].emulator_policy", "unknown"),
    ({"iothreads": -1}, "tenants[0].iothreads", "below 0"),
    ({"memory_gib": 0}, "tenants[0].memory_gib", "below 1"),
    ({"nic_vf": "yes"}, "tenants[0].nic_vf", "true or false"),
    ({"gpus": []}, "tenants[0].gpus", "empty"),
    ({"gpus": ["65:00.0", "0000:65:00.0"]}, "tenants[0].gpus[1]", "twice"),
    ({"vcpus": True}, "tenants[0].vcpus", "whole number"),
    ({"colour": "red"}, "tenants[0]", "unknown tenant keys colour"),
])
def test_bad_tenant_fields_are_refused(changes, field, word):
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(**changes)])
    fails(field, word)(excinfo.value)


def test_missing_required_tenant_key_is_refused():
    with pytest.raises(GpuhostError) as excinfo:
        tenant_request_from_dict({"name": "x", "vcpus": 2})
    fails("tenants[0].memory_gib", "missing")(excinfo.value)


def test_a_failure_leaves_the_inputs_untouched():
    tenants = [tenant(name="ok", vcpus=4, memory_gib=8), tenant(name="bad", vcpus=64)]
    snapshot = copy.deepcopy(tenants)
    host = runbook_host()
    with pytest.raises(GpuhostError):
        plan_placement(host, tenants)
    assert tenants == snapshot
    assert host.nodes[0].hugepages[GIB_KIB].free == 64


def _cpus(text):
    from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import parse_cpulist
    return parse_cpulist(text)


# ------------------------------------------------- VFs the SR-IOV stage will create

def pf_without_vfs(address, node, group, offset=2, stride=1, total=8):
    """A PF whose VFs are not created yet (sriov_numvfs 0), as on a fresh host."""
    return PciFunction(address=address, class_code=0x020000, vendor_id=0x15B3,
                       device_id=0x101D, driver="mlx5_core", numa_node=node,
                       numa_node_source="numa_node", iommu_group=group,
                       sriov_totalvfs=total, sriov_numvfs=0, sriov_offset=offset,
                       sriov_stride=stride)


def fresh_host(*pfs):
    cores = {0: [(n, n + 8) for n in range(0, 4)], 1: [(n, n + 8) for n in range(4, 8)]}
    functions = [gpu("0000:65:00.0", 0, 27), hda("0000:65:00.1", 0, 27)] + list(pfs)
    return build_host(cores, functions, hugepages={0: {GIB_KIB: (8, 8)}})


SMALL = dict(gpus=0, vcpus=2, memory_gib=1, hugepage_size="2M", iothreads=0)


def test_vf_not_created_yet_is_planned_at_its_routing_id_address():
    plan = plan_placement(fresh_host(pf_without_vfs("0000:41:00.0", 0, 39)),
                          [tenant(**SMALL)], vf_count=2)
    # routing ID 0x4100 + offset 2 + 0 * stride 1 = 0x4102 -> 41:00.2
    assert plan["tenants"][0]["vf"] == {"pf": "0000:41:00.0", "address": "0000:41:00.2",
                                        "iommu_group": None, "index": 0, **VF_DEFAULTS}


def test_predicted_vf_addresses_cross_the_device_boundary_with_the_stride():
    host = fresh_host(pf_without_vfs("0000:41:00.0", 0, 39, offset=7, stride=2))
    plan = plan_placement(host, [tenant(name="a", **SMALL), tenant(name="b", **SMALL)])
    # 0x4100 + 7 = 41:00.7, then + 2 = 0x4109 = 41:01.1
    assert [t["vf"]["address"] for t in plan["tenants"]] == ["0000:41:00.7", "0000:41:01.1"]


def test_vf_count_caps_the_vfs_planned_before_they_exist():
    host = fresh_host(pf_without_vfs("0000:41:00.0", 0, 39))
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [tenant(name="a", **SMALL), tenant(name="b", **SMALL)],
                       vf_count=1)
    fails("tenants[1].nic_vf", "not enough VFs",
          "0000:41:00.0: 0 VFs, 0 free (1 more to be created)")(excinfo.value)
    plan = plan_placement(host, [tenant(name="a", **SMALL), tenant(name="b", **SMALL)],
                          vf_count={"41:00.0": 2})
    assert [t["vf"]["address"] for t in plan["tenants"]] == ["0000:41:00.2", "0000:41:00.3"]


def test_existing_vfs_are_preferred_to_vfs_still_to_be_created():
    functions = sriov_pf("0000:41:00.0", 0, 39, ["0000:41:00.2"], 40)
    pf = dataclasses.replace(functions[0], sriov_totalvfs=8, sriov_offset=2, sriov_stride=1)
    host = fresh_host(pf, *functions[1:])
    plan = plan_placement(host, [tenant(name="a", **SMALL), tenant(name="b", **SMALL)],
                          vf_count=4)
    assert [t["vf"] for t in plan["tenants"]] == [
        {"pf": "0000:41:00.0", "address": "0000:41:00.2", "iommu_group": 40, "index": 0,
         **VF_DEFAULTS},
        {"pf": "0000:41:00.0", "address": "0000:41:00.3", "iommu_group": None, "index": 1,
         **VF_DEFAULTS}]


def test_vfs_of_a_pf_in_a_shared_group_are_not_planned_before_they_exist():
    nic = pf_without_vfs("0000:41:00.0", 0, 39)
    neighbour = PciFunction(address="0000:41:00.1", class_code=0x020000, vendor_id=0x15B3,
                            device_id=0x101D, driver="mlx5_core", numa_node=0,
                            numa_node_source="numa_node", iommu_group=39)
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(fresh_host(nic, neighbour), [tenant(**SMALL)], vf_count=2)
    fails("tenants[0].nic_vf", "not plannable", "IOMMU group")(excinfo.value)


def test_vfs_predicted_by_the_plan_are_the_ones_sriov_vfs_creates(tmp_path):
    """The plan's address for a VF not created yet and the address the kernel gives it
    when sriov_vfs creates it (the simulator follows sriov_offset/sriov_stride) agree."""
    root = build_sim_host(str(tmp_path / "host"))
    kernel = SimulatedKernel(root, vf_drivers={"0000:03:00.0": "mlx5_core"})
    before = read_host_topology(root)
    assert before.pci["0000:03:00.0"].sriov_offset == 2
    assert before.pci["0000:03:00.0"].sriov_stride == 1
    # The NVMe PF 01:00.0 keeps no VFs (count 0): the NIC's are the ones planned.
    plan = plan_placement(before, [tenant(name="a", **SMALL), tenant(name="b", **SMALL)],
                          housekeeping={"0": "0", "1": "4"}, smt_policy="prefer",
                          hugepage_check="none",
                          vf_count={"0000:03:00.0": 2, "0000:01:00.0": 0})
    planned = [t["vf"]["address"] for t in plan["tenants"] if t["node"] == 0]
    assert planned == ["0000:03:00.2", "0000:03:00.3"][:len(planned)] and planned
    run_module(sriov_vfs, "SriovConfigurator",
               {"pf": "0000:03:00.0", "num_vfs": 2, "vf_driver": "vfio-pci", "root": root},
               kernel)
    after = read_host_topology(root)
    assert set(planned) <= set(after.pci["0000:03:00.0"].virtfns)
    assert all(after.pci[vf].physfn == "0000:03:00.0" for vf in planned)


# ------------------------------------------------------------------- the boot VGA

def test_boot_vga_is_never_chosen_by_count_but_can_be_named():
    cores = {0: [(0, 1), (2, 3)], 1: [(4, 5), (6, 7)]}
    functions = [gpu("0000:41:00.0", 1, 12, boot_vga=True), hda("0000:41:00.1", 1, 12)]
    host = build_host(cores, functions, hugepages={1: {2048: (512, 512)}})
    request = tenant(vcpus=2, memory_gib=1, hugepage_size="2M", nic_vf=False)
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(host, [request])
    fails("tenants[0].gpus", "not enough GPUs", "0000:41:00.0 (boot VGA")(excinfo.value)
    named = plan_placement(host, [dict(request, gpus=["0000:41:00.0"])])
    assert named["tenants"][0]["gpus"][0]["address"] == "0000:41:00.0"


def test_lab_tenant_gets_the_same_nic_vf_before_and_after_the_vfs_exist():
    """The lab's recorded first boot with its igb NIC (no VFs yet) and its boot with 2 VFs
    plan the lab tenant's VF at the same address, the one sriov_vfs then creates (first
    VF offset 128, stride 2), and from the NIC, not from the SR-IOV NVMe PF that comes
    first on the same node."""
    import os
    recording = os.path.join(TESTS, "fixtures",
                             "lab-recording")
    lab_tenant = {"name": "tenant-lab0", "gpus": ["0000:21:00.0"], "vcpus": 2,
                  "memory_gib": 1, "hugepage_size": "2M", "nic_vf": True}
    vfs = {}
    for boot in ("igb-first-boot", "igb-vfs"):
        topology = read_host_topology(os.path.join(recording, boot), with_irqs=False)
        assert topology.pci["0000:22:00.0"].sriov_totalvfs == 4      # the NVMe PF
        vfs[boot] = plan_placement(topology, [lab_tenant], vf_count=2)["tenants"][0]["vf"]
    assert vfs["igb-first-boot"]["address"] == vfs["igb-vfs"]["address"] == "0000:23:10.0"
    assert vfs["igb-first-boot"]["pf"] == vfs["igb-vfs"]["pf"] == "0000:23:00.0"
    assert vfs["igb-first-boot"]["index"] == vfs["igb-vfs"]["index"] == 0
    assert vfs["igb-first-boot"]["iommu_group"] is None
    assert vfs["igb-vfs"]["iommu_group"] is not None
