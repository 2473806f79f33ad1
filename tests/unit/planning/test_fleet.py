"""Fleet capacity and host choice (plugins/module_utils/planning/fleet.py) on synthetic hosts:
the runbook host (2 x 16 cores x 2 threads, one GPU and 8 VFs on node 0, per node 32 of
64 1G pages free), the eight-GPU host (2 x 32 cores, 4 GPUs and 16 VFs per node, all 64
1G pages free) and the desktop board whose first GPU shares its IOMMU group with USB."""

import json
from xml.etree import ElementTree

import pytest

from support.fixturegen import (
    DIRTY_GPU,
    RUNBOOK_GPU,
    build_dirty_usb_group_host,
    build_eight_gpu_host,
    build_runbook_host,
)

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import fleet, fleet_render, ledger
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    read_host_topology,
    topology_to_dict,
)

TENANT_A = {"name": "tenant-a100", "gpus": [RUNBOOK_GPU], "vcpus": 30, "memory_gib": 64,
            "hugepage_size": "1G", "nic_vf": True, "iothreads": 2,
            "guest_address": "192.0.2.51/24"}
SMALL = {"name": "small", "gpus": 1, "vcpus": 4, "memory_gib": 16, "hugepage_size": "1G"}


@pytest.fixture(scope="module")
def topologies(tmp_path_factory):
    built = {}
    for name, builder in (("runbook", build_runbook_host), ("eight", build_eight_gpu_host),
                          ("dirty", build_dirty_usb_group_host)):
        root = tmp_path_factory.mktemp(name)
        builder(str(root))
        built[name] = read_host_topology(str(root), with_irqs=False)
    return built


def with_tenants(topology, tenants):
    data = ledger.reserve(ledger.LedgerData(), topology, tenants, hugepage_check="none")[0]
    return {"tenants": data.tenants, "housekeeping": data.housekeeping,
            "smt_policy": data.smt_policy}


def test_empty_runbook_host_has_one_clean_gpu_fifteen_whole_cores_per_node_and_eight_vfs(
        topologies):
    capacity = fleet.host_capacity(topologies["runbook"])
    node0, node1 = capacity["nodes"]["0"], capacity["nodes"]["1"]
    # Core 0 (CPUs 0 and 32) of each node stays with the host (default housekeeping).
    assert (node0["cores_total"], node0["cores_free"], node0["cpus_free"]) == (16, 15, 30)
    assert (node1["cores_total"], node1["cores_free"]) == (16, 15)
    assert node0["gpus"] == [{"address": RUNBOOK_GPU, "iommu_group": node0["gpus"][0]["iommu_group"],
                              "clean": True, "tenant": None}]
    assert (node0["gpus_free"], node0["gpus_free_clean"], node1["gpus_free"]) == (1, 1, 0)
    assert (node0["vfs_total"], node0["vfs_free"], node1["vfs_total"]) == (8, 8, 0)
    assert node0["hugepages"] == {"2M": {"total": 1024, "free": 1024},
                                  "1G": {"total": 64, "free": 32}}
    assert capacity["tenants"] == []
    assert capacity["totals"]["gpus_stranded"] == 0


def test_runbook_tenant_takes_node_zero_cores_gpu_and_one_vf(topologies):
    capacity = fleet.host_capacity(topologies["runbook"],
                                   with_tenants(topologies["runbook"], [TENANT_A]))
    node0 = capacity["nodes"]["0"]
    assert (node0["cores_free"], node0["gpus_free"], node0["vfs_free"]) == (0, 0, 7)
    assert node0["gpus"][0]["tenant"] == "tenant-a100"
    assert capacity["nodes"]["1"]["cores_free"] == 15
    assert [(t["name"], t["node"], t["gpus"], t["hugepage_size"]) for t in capacity["tenants"]] \
        == [("tenant-a100", 0, [RUNBOOK_GPU], "1G")]
    assert capacity["tenants"][0]["vf"] is not None


def test_dirty_group_gpu_counts_free_but_not_clean(topologies):
    capacity = fleet.host_capacity(topologies["dirty"])
    gpus = {g["address"]: g["clean"] for g in capacity["nodes"]["0"]["gpus"]}
    assert gpus == {DIRTY_GPU: False, "0000:05:00.0": True}
    assert (capacity["totals"]["gpus_free"], capacity["totals"]["gpus_free_clean"]) == (2, 1)


def test_gpus_on_a_node_without_a_free_core_are_stranded(topologies):
    eight = topologies["eight"]
    # 31 cores x 2 threads: every whole core of node 0 but the housekeeping one.
    big = {"name": "big", "gpus": 1, "vcpus": 62, "memory_gib": 16, "hugepage_size": "1G"}
    capacity = fleet.host_capacity(eight, with_tenants(eight, [big]))
    node = str(capacity["tenants"][0]["node"])
    assert capacity["nodes"][node]["cores_free"] == 0
    assert capacity["nodes"][node]["gpus_free_clean"] == 3
    assert capacity["totals"]["gpus_stranded"] == 3


def host_data(topology, ledger_body=None):
    return {"topology": topology_to_dict(topology), "ledger": ledger_body}


def test_best_fit_wins_when_hugepages_are_ready_on_both(topologies):
    hosts = {"a-eight": host_data(topologies["eight"]),
             "b-runbook": host_data(topologies["runbook"])}
    choice = fleet.choose_host(hosts, SMALL)
    # 16 1G pages are free on both; the runbook node keeps 13 whole cores, the
    # eight-GPU node 29: the tighter fit keeps the big holes for big tenants.
    assert (choice["host"], choice["node"], choice["gpus"]) == ("b-runbook", 0, [RUNBOOK_GPU])
    assert [c["host"] for c in choice["candidates"]] == ["b-runbook", "a-eight"]
    assert choice["candidates"][0]["cores_left_on_node"] == 13
    assert "b-runbook chosen for small" in choice["why"]
    assert "next best a-eight" in choice["why"]


def test_hugepages_already_free_beat_best_fit(topologies):
    hosts = {"a-eight": host_data(topologies["eight"]),
             "b-runbook": host_data(topologies["runbook"])}
    request = dict(SMALL, memory_gib=40)    # 40 1G pages: the runbook node has 32 free
    choice = fleet.choose_host(hosts, request)
    assert choice["host"] == "a-eight"
    by_host = {c["host"]: c for c in choice["candidates"]}
    assert by_host["a-eight"]["hugepages_ready"] is True
    assert by_host["b-runbook"]["hugepages_ready"] is False
    assert by_host["b-runbook"]["fits"] is True
    assert "40 1G hugepages already free" in choice["why"]


def test_host_without_data_or_already_holding_the_tenant_is_listed_with_its_reason(topologies):
    runbook = topologies["runbook"]
    hosts = {"down": None,
             "holder": host_data(runbook, with_tenants(runbook, [dict(SMALL)])),
             "free": host_data(runbook)}
    choice = fleet.choose_host(hosts, SMALL)
    assert choice["host"] == "free"
    reasons = {c["host"]: c["why"] for c in choice["candidates"] if not c["fits"]}
    assert reasons == {"down": "no data for this host",
                       "holder": "tenant small is already on this host"}


def test_no_fit_anywhere_names_every_host_and_why(topologies):
    hosts = {"dirty": host_data(topologies["dirty"]),
             "runbook": host_data(topologies["runbook"])}
    with pytest.raises(GpuhostError) as info:
        fleet.choose_host(hosts, dict(SMALL, gpus=2))
    message = str(info.value)
    assert "tenant small fits on no host" in message
    assert "dirty: " in message and "runbook: " in message
    assert "not clean" in message      # the desktop GPU shares its group with USB


def test_report_totals_and_hosts_without_data(topologies):
    runbook = topologies["runbook"]
    report = fleet.fleet_report({
        "gpu-1": host_data(runbook, with_tenants(runbook, [TENANT_A])),
        "gpu-2": host_data(topologies["eight"]),
        "gpu-3": {"error": "unreachable"},
    })
    assert report["format"] == "gpuhost.kvm/fleet-report"
    totals = report["totals"]
    assert (totals["hosts"], totals["hosts_without_data"], totals["tenants"]) == (3, 1, 1)
    assert (totals["gpus_total"], totals["gpus_free"]) == (9, 8)
    assert totals["cores_free"] == 15 + 31 + 31
    assert report["hosts"]["gpu-3"] == {"error": "unreachable"}
    json.dumps(report)      # plain data all the way down


def test_markdown_and_svg_show_every_host_and_node(topologies):
    report = fleet.fleet_report({"gpu-1": host_data(topologies["runbook"]),
                                 "gpu-2": host_data(topologies["dirty"]), "gpu-3": None})
    markdown = fleet_render.render_markdown(report)
    assert "| gpu-1 | 0 | 1 (1) | 15/16 | 2M 1024/1024, 1G 32/64 | 8/8 |" in markdown
    assert "| gpu-2 | 0 | 2 (1) | 7/8 |" in markdown
    assert "| gpu-3 | - | no data:" in markdown
    svg = ElementTree.fromstring(fleet_render.render_svg(report))
    ns = "{http://www.w3.org/2000/svg}"
    colours = [r.get("fill") for r in svg.iter(ns + "rect")]
    # GPUs: one clean free (runbook), one amber (dirty group) and one clean free (desktop).
    assert colours.count("#2a2") == 2 and colours.count("#e90") == 1
    texts = [t.text for t in svg.iter(ns + "text")]
    assert "gpu-3" in texts and "no data" in texts


def test_bad_ledger_shape_is_refused_with_a_fix():
    with pytest.raises(GpuhostError) as info:
        fleet.as_ledger(["not", "a", "mapping"])
    assert info.value.field == "ledger"


def test_hosts_evaluated_on_their_own_rank_the_same_as_topologies_planned_here(topologies):
    # capacity_facts evaluates the tenant on each host; fleet_place only ranks.
    on_hosts = {name: {"candidate": dict(fleet.evaluate_host(topologies[model], None, SMALL),
                                         tenant="small")}
                for name, model in (("a-eight", "eight"), ("b-runbook", "runbook"))}
    here = {"a-eight": host_data(topologies["eight"]), "b-runbook": host_data(topologies["runbook"])}
    ranked_on_hosts = fleet.choose_host(on_hosts, SMALL)
    for candidate in ranked_on_hosts["candidates"]:
        assert candidate.pop("tenant") == "small"
    assert ranked_on_hosts == fleet.choose_host(here, SMALL)


def test_an_evaluation_for_another_tenant_does_not_count(topologies):
    other = dict(fleet.evaluate_host(topologies["runbook"], None, SMALL), tenant="someone")
    with pytest.raises(GpuhostError) as info:
        fleet.choose_host({"gpu-1": {"candidate": other}}, SMALL)
    assert "evaluated for tenant someone, not small" in str(info.value)


# -- one bad host is reported and skipped, never the fleet's failure --------------------------

ODD_HOSTS = {
    "a-string": "not a fact",
    "b-list": ["a", "list"],
    "c-candidate-list": {"candidate": ["fits"]},
    "d-candidate-without-numbers": {"candidate": {"fits": True, "node": 0}},
    "e-candidate-fits-as-text": {"candidate": {"fits": "yes", "why": "trust me"}},
    "f-topology-odd": {"topology": {"cpus": {"online": "x"}, "nodes": {"0": {"cpus": "y"}}}},
    "g-topology-none": {"topology": None},
    "h-ledger-odd-serial": {"topology": None, "ledger": {"serial": "three"}},
    "i-error-not-text": {"error": ["unreachable"]},
}


def test_odd_hosts_do_not_sink_the_choice_for_the_others(topologies):
    # Before: "a-string" and "c-candidate-list" raised AttributeError (.get on a str or
    # a list) and "d-candidate-without-numbers" KeyError in the ranking: one odd host
    # failed the whole choice.
    hosts = dict(ODD_HOSTS, **{"z-good": host_data(topologies["eight"])})
    choice = fleet.choose_host(hosts, SMALL)
    assert choice["host"] == "z-good"
    reasons = {c["host"]: c["why"] for c in choice["candidates"] if not c["fits"]}
    assert set(reasons) == set(ODD_HOSTS)
    assert reasons["a-string"] == "its data is a str, not a capacity fact"
    assert reasons["c-candidate-list"].startswith("its candidate is a list, not a mapping")
    assert reasons["d-candidate-without-numbers"].startswith(
        "its candidate lacks clean_iommu_group, hugepages_ready")
    assert "the topology data is malformed" in reasons["f-topology-odd"]


def test_when_only_odd_hosts_remain_the_refusal_names_each_reason():
    with pytest.raises(GpuhostError) as info:
        fleet.choose_host(ODD_HOSTS, SMALL)
    assert info.value.field == "request"
    for name in ODD_HOSTS:
        assert "%s: " % name in info.value.message


ODD_CAPACITIES = {
    "a-string": "not a fact",
    "b-capacity-list": {"capacity": []},
    "c-totals-text": {"capacity": {"totals": {"gpus_free": "1"}, "nodes": {}}},
    "d-node-without-numbers": {"capacity": {"totals": {}, "nodes": {"0": {"gpus": []}}}},
    "e-topology-odd": {"topology": {"cpus": {"online": 7}}},
    "f-ledger-odd": {"topology": None, "ledger": {"tenants": "t1"}},
}


def test_odd_hosts_are_listed_without_data_and_the_report_still_renders(topologies):
    # Before: "a-string" raised AttributeError, "b-capacity-list" and "c-totals-text"
    # failed in the totals: one odd host and the fleet had no report.
    hosts = dict(ODD_CAPACITIES, **{"z-good": host_data(topologies["runbook"])})
    report = fleet.fleet_report(hosts)
    assert report["totals"]["hosts"] == 7 and report["totals"]["hosts_without_data"] == 6
    assert report["totals"]["gpus_total"] == 1
    for name in ODD_CAPACITIES:
        assert set(report["hosts"][name]) == {"error"}, name
    assert report["hosts"]["a-string"]["error"] == "its data is a str, not a capacity fact"
    assert "has no totals of whole numbers" in report["hosts"]["c-totals-text"]["error"]
    assert "| z-good | 0 | 1 (1) |" in fleet_render.render_markdown(report)
    ElementTree.fromstring(fleet_render.render_svg(report))
    json.dumps(report)


def test_a_ledger_of_another_shape_is_refused_with_a_fix():
    for ledger_data in ({"serial": "3"}, {"tenants": "t1"}, {"tenants": ["t1"]},
                        {"housekeeping": [0, 1]}):
        with pytest.raises(GpuhostError) as info:
            fleet.as_ledger(ledger_data)
        assert info.value.field == "ledger" and "include_topology" in info.value.fix
