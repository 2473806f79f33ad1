# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVSwitch boards, on a fake HGX H100 host built from published lspci output (the
NVSwitch's class, IDs and driver; tests/fixtures/published/README.md names the source):
the plan reports the fabric, a one-GPU tenant is placed as on any host, and a tenant with
several of the board's GPUs is refused with the reason (CUDA error 802 without an NVLink
partition) and what to do. No Fabric Manager runs here."""

from __future__ import annotations

import pytest
from support.fixturegen import build_eight_gpu_host, build_hgx_h100_host

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement

NVSWITCHES = ["0000:0b:00.0", "0000:0c:00.0", "0000:8b:00.0", "0000:8c:00.0"]
ONE = {"name": "one", "gpus": 1, "vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"}


@pytest.fixture(scope="module")
def hgx(tmp_path_factory):
    root = tmp_path_factory.mktemp("hgx")
    build_hgx_h100_host(str(root))
    return read_host_topology(str(root), with_irqs=False)


def test_the_hgx_fake_from_published_lspci_reports_its_fabric(hgx):
    assert [a for a, f in sorted(hgx.pci.items()) if f.is_nvswitch] == NVSWITCHES
    plan = plan_placement(hgx, [ONE], hugepage_check="none")
    assert plan["fabric"]["nvswitches"] == NVSWITCHES
    assert len(plan["fabric"]["gpus"]) == 8 and "0000:18:00.0" in plan["fabric"]["gpus"]
    # the NVSwitches are no GPUs: a one-GPU tenant gets an H100, as on any host
    assert plan["tenants"][0]["gpus"][0]["address"] in plan["fabric"]["gpus"]


@pytest.mark.parametrize("gpus", [2, ["0000:18:00.0", "0000:2a:00.0"]])
def test_a_multi_gpu_tenant_on_the_hgx_fake_is_refused_with_the_reason(hgx, gpus):
    with pytest.raises(GpuhostError) as refused:
        plan_placement(hgx, [dict(ONE, name="two", gpus=gpus)], hugepage_check="none")
    assert refused.value.field == "tenants[0].gpus"
    assert "error 802" in refused.value.msg and "0000:0b:00.0" in refused.value.msg
    assert "give the tenant one GPU" in refused.value.fix


def test_a_host_without_nvswitches_has_no_fabric_and_places_two_gpus(tmp_path):
    build_eight_gpu_host(str(tmp_path))
    plan = plan_placement(read_host_topology(str(tmp_path), with_irqs=False),
                          [dict(ONE, name="two", gpus=2)], hugepage_check="none")
    assert "fabric" not in plan and len(plan["tenants"][0]["gpus"]) == 2


# -- the full-passthrough model: the whole board to one tenant, one guest cell per node --

BOARD = {"name": "board", "gpus": 8, "vcpus": 32, "memory_gib": 64, "hugepage_size": "2M",
         "nic_vf": True}
NODE0_GPUS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"]
NODE1_GPUS = ["0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]


def _node_of(hgx, cpu):
    return next(n for n, node in hgx.nodes.items() if cpu in node.cpus)


def test_full_passthrough_gives_one_tenant_the_board_one_guest_cell_per_node(hgx):
    plan = plan_placement(hgx, [BOARD], hugepage_check="none", nvswitch_model="full")
    tenant = plan["tenants"][0]
    assert plan["fabric"]["model"] == "full"
    assert [s["address"] for s in tenant["nvswitches"]] == NVSWITCHES
    assert [g["address"] for g in tenant["gpus"]] == NODE0_GPUS + NODE1_GPUS
    assert tenant["nodes"] == [0, 1] and tenant["fabric_model"] == "full"
    assert tenant["guest_cells"] == [
        {"id": 0, "node": 0, "memory_node": 0, "vcpus": "0-15", "memory_gib": 32, "gpus": NODE0_GPUS},
        {"id": 1, "node": 1, "memory_node": 1, "vcpus": "16-31", "memory_gib": 32, "gpus": NODE1_GPUS}]
    # each cell's vCPUs on its own node's whole cores, siblings together
    pins = tenant["vcpu_pins"]
    assert {_node_of(hgx, c) for c in pins[:16]} == {0} and {_node_of(hgx, c) for c in pins[16:]} == {1}
    assert tenant["guest_topology"] == {"sockets": 2, "dies": 1, "cores": 8, "threads": 2}
    # memory from each node's own hugepages, bound per cell
    assert tenant["hugepages"] == {"0": 16384, "1": 16384}
    assert tenant["numatune"] == {"mode": "strict", "nodeset": "0-1"}
    assert plan["hugepages"] == {"0": {"2048": 16384}, "1": {"2048": 16384}}
    # the emulator and the VF stay with the first cell
    assert tenant["vf"]["pf"] == "0000:1b:00.0"
    assert {_node_of(hgx, int(c)) for c in tenant["emulator_cpus"].split(",")} == {0}


@pytest.mark.parametrize("gpus", [1, 2, NODE0_GPUS])
def test_full_passthrough_refuses_part_of_the_board_with_the_fix(hgx, gpus):
    with pytest.raises(GpuhostError) as refused:
        plan_placement(hgx, [dict(BOARD, gpus=gpus)], hugepage_check="none", nvswitch_model="full")
    assert refused.value.field == "tenants[0].gpus"
    assert "one tenant gets the whole board" in refused.value.msg
    assert "ask for all 8 GPUs" in refused.value.fix and "shared" in refused.value.fix


@pytest.mark.parametrize("key, value, field", [("vcpus", 30, "tenants[0].vcpus"),
                                               ("memory_gib", 63, "tenants[0].memory_gib")])
def test_full_passthrough_refuses_a_tenant_that_cannot_split_evenly_over_the_nodes(hgx, key, value, field):
    with pytest.raises(GpuhostError) as refused:
        plan_placement(hgx, [dict(BOARD, **{key: value})], hugepage_check="none", nvswitch_model="full")
    assert refused.value.field == field and "split evenly" in refused.value.msg


def test_full_passthrough_takes_no_cell_when_one_node_is_short(hgx):
    # 64 vCPUs per node: no node has 32 whole cores next to its housekeeping core
    with pytest.raises(GpuhostError) as refused:
        plan_placement(hgx, [dict(BOARD, vcpus=128)], hugepage_check="none", nvswitch_model="full")
    assert "cell on node 0 does not fit" in refused.value.msg


def test_after_the_board_tenant_the_ledger_holds_it_all_and_cpu_tenants_still_fit(hgx):
    first = plan_placement(hgx, [BOARD], hugepage_check="none", nvswitch_model="full")
    again = plan_placement(hgx, [dict(ONE, gpus=0, name="cpu-only")], existing=first["tenants"],
                           hugepage_check="none", nvswitch_model="full")
    assert again["tenants"][0] == first["tenants"][0]
    assert again["tenants"][1]["gpus"] == []
    with pytest.raises(GpuhostError) as refused:
        plan_placement(hgx, [dict(BOARD, name="board-2")], existing=first["tenants"],
                       hugepage_check="none", nvswitch_model="full")
    assert "is given to tenant board" in refused.value.msg


def test_partitions_belong_to_the_shared_model_only(hgx):
    with pytest.raises(GpuhostError) as refused:
        plan_placement(hgx, [ONE], hugepage_check="none", nvswitch_model="full",
                       fabric_partitions=[{"id": 0, "gpus": NODE0_GPUS}])
    assert refused.value.field == "fabric_partitions"
    with pytest.raises(GpuhostError) as refused:
        plan_placement(hgx, [ONE], hugepage_check="none", nvswitch_model="shared")
    assert "needs Fabric Manager's partitions" in refused.value.msg
    with pytest.raises(GpuhostError) as refused:
        plan_placement(hgx, [ONE], hugepage_check="none", nvswitch_model="fabric")
    assert refused.value.field == "nvswitch_model"


def test_a_one_gpu_tenant_on_a_board_without_a_model_is_planned_as_on_any_host(hgx):
    plan = plan_placement(hgx, [ONE], hugepage_check="none")
    assert len(plan["tenants"][0]["gpus"]) == 1 and "guest_cells" not in plan["tenants"][0]


def test_the_stages_bind_the_nvswitches_and_pin_each_cells_irqs_on_its_node(hgx):
    """What the vfio stage binds (plan_passthrough_functions) and where the sriov_irq
    stage pins the IRQs of each function (plan_irq_groups) for the whole-board tenant."""
    from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_query
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.plan_layout import layout_from_topology
    plan = plan_placement(hgx, [BOARD], hugepage_check="none", nvswitch_model="full")
    assert plan_query.passthrough_functions(plan) == NODE0_GPUS + NODE1_GPUS + NVSWITCHES
    groups = {g["node"]: g["guest"] for g in plan_query.irq_groups(plan, layout_from_topology(hgx))}
    vf = plan["tenants"][0]["vf"]["address"]
    assert groups == {"0": NODE0_GPUS + NVSWITCHES[:2] + [vf], "1": NODE1_GPUS + NVSWITCHES[2:]}


def test_the_plan_page_and_summary_show_each_cell_on_its_node(hgx):
    from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_query, plan_render
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.plan_layout import layout_from_topology
    plan = plan_placement(hgx, [BOARD], hugepage_check="none", nvswitch_model="full")
    layout = layout_from_topology(hgx)
    node0, node1 = (plan_render._devices(plan, layout, node) for node in ("0", "1"))
    assert {(k, a) for k, a, o, _n in node0 if o == "board"} == {("GPU", g) for g in NODE0_GPUS} | {
        ("NVSwitch", s) for s in NVSWITCHES[:2]} | {("VF", plan["tenants"][0]["vf"]["address"])}
    assert {(k, a) for k, a, o, _n in node1 if o == "board"} == {("GPU", g) for g in NODE1_GPUS} | {
        ("NVSwitch", s) for s in NVSWITCHES[2:]}
    summary = plan_query.tenant_summary(plan, "board")
    assert summary[0] == "tenant board on NUMA nodes 0-1, one guest cell per node"
    assert "node 0 (32 GiB, guest cell 0), node 1 (32 GiB, guest cell 1)" in summary[4]
    assert "0000:8c:00.0" in plan_render.render_markdown(plan, layout)
