"""What the roles ask of a plan (plan_query) and the section 14 checks (validation),
on the planner's real output for the synthetic runbook host."""

import pytest

from support.fixturegen import build_runbook_host

from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_query, validation
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.plan_layout import layout_from_topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology

TENANT = {"name": "tenant-a100", "gpus": ["0000:65:00.0"], "vcpus": 30, "memory_gib": 64,
          "hugepage_size": "1G", "nic_vf": True, "iothreads": 2}
SMALL = {"name": "tenant-b", "gpus": 0, "vcpus": 4, "memory_gib": 8, "hugepage_size": "2M"}


@pytest.fixture(scope="module")
def runbook(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("runbook"))
    build_runbook_host(root)
    topo = read_host_topology(root, with_irqs=False)
    return plan_placement(topo, [TENANT, SMALL]), layout_from_topology(topo)


def test_hugepage_totals_and_rows(runbook):
    plan = runbook[0]
    assert plan_query.hugepages_total(plan, 1048576) == 64
    assert plan_query.hugepages_total(plan, 2048) == 4096
    rows = plan_query.hugepages_per_node(plan)
    assert {"node": 0, "size_kib": 1048576, "pages": 64} in rows
    assert {"node": 1, "size_kib": 2048, "pages": 4096} in rows


def test_devices_scope_and_irq_groups(runbook):
    plan, layout = runbook
    assert plan_query.passthrough_functions(plan) == ["0000:65:00.0", "0000:65:00.1"]
    assert plan_query.passthrough_functions(plan, ["tenant-b"]) == []
    assert [t["name"] for t in plan_query.tenants_in_scope(plan, "tenant-b")] == ["tenant-b"]
    assert plan_query.vf_pfs(plan) == ["0000:41:00.0"]
    groups = {g["node"]: g for g in plan_query.irq_groups(plan, layout)}
    vf = plan["tenants"][0]["vf"]["address"]
    assert groups["0"]["cpus"] == "0,32"
    assert groups["0"]["devices"] == ["0000:41:00.0", "0000:65:00.0", "0000:65:00.1", vf]
    assert "0000:b1:00.0" in groups["1"]["host"] and groups["1"]["guest"] == []
    only_host = plan_query.irq_groups(plan, layout, with_passthrough=False)
    assert only_host[0]["devices"] == ["0000:41:00.0"]


def test_tenant_summary_names_everything_the_sre_needs(runbook):
    plan = runbook[0]
    lines = plan_query.tenant_summary(plan, "tenant-a100")
    assert lines[0] == "tenant tenant-a100 on NUMA node 0"
    assert "0000:65:00.1" in lines[1]
    assert "vCPUs 30 pinned to CPUs 1-15,33-47 (guest topology 1s/15c/2t)" == lines[2]
    assert plan_query.tenant_summary(plan, "nobody") == ["tenant nobody is not in the plan"]


def _libvirt_pins(pins):
    """vCPU pins as host_facts reads them from libvirt: {vcpu: cpulist}, strings."""
    return {str(vcpu): str(cpu) for vcpu, cpu in enumerate(pins)}


def test_validation_passes_on_matching_evidence_and_fails_naming_the_fault(runbook):
    plan = runbook[0]
    a100 = plan["tenants"][0]
    groups = [{"group": 4, "devices": [{"address": "0000:65:00.0", "driver": "vfio-pci"},
                                       {"address": "0000:65:00.1", "driver": "vfio-pci"}]},
              {"group": 6, "devices": [{"address": a100["vf"]["address"], "driver": "vfio-pci"}]}]
    iommu = {"enabled": True, "vendor": "intel", "mode": "identity", "groups": groups,
             "cmdline": {"intel_iommu": "on", "iommu": "pt"}}
    assert validation.check_iommu(iommu)["status"] == "pass"
    assert validation.check_iommu(dict(iommu, cmdline={}))["status"] == "fail"
    assert validation.check_vfio(plan, iommu)["status"] == "pass"
    groups[0]["devices"][1]["driver"] = "snd_hda_intel"
    vfio = validation.check_vfio(plan, iommu)
    assert vfio["status"] == "fail" and "0000:65:00.1 on snd_hda_intel" in vfio["detail"]

    pins = {t["name"]: _libvirt_pins(t["vcpu_pins"]) for t in plan["tenants"]}
    nodes = {address: {"present": True, "numa_node": 0}
             for address in ("0000:65:00.0", "0000:65:00.1", a100["vf"]["address"])}
    assert validation.check_numa(plan, nodes, pins)["status"] == "pass"
    moved = dict(pins, **{"tenant-a100": _libvirt_pins([17] + a100["vcpu_pins"][1:])})
    numa = validation.check_numa(plan, dict(nodes, **{"0000:65:00.1": {"present": True, "numa_node": 1}}), moved)
    assert numa["status"] == "fail"
    assert "vCPU 0 runs on 17, the plan pins it to 1" in numa["detail"]
    assert "0000:65:00.1 of tenant-a100 is on node 1" in numa["detail"]

    pools = {"0": {"1048576": {"nr": 64, "free": 0}}, "1": {"2048": {"nr": 4096, "free": 0}}}
    meminfo = {"HugePages_Total": 64, "HugePages_Free": 0, "Hugepagesize": 2048}
    running = ["tenant-a100", "tenant-b"]
    assert validation.check_hugepages(plan, pools, meminfo, running)["status"] == "pass"
    short = validation.check_hugepages(plan, dict(pools, **{"0": {"1048576": {"nr": 64, "free": 64}}}),
                                       meminfo, running)
    assert short["status"] == "fail" and "only 0 are in use" in short["detail"]

    assert validation.check_irqs([120, 121], managed=[121])["status"] == "fail"
    assert validation.check_irqs([121], managed=[121])["status"] == "pass"
    absent = validation.check_irqs([], absent=["0000:41:00.2"])
    assert absent["status"] == "fail" and "do not exist: 0000:41:00.2" in absent["detail"]
    not_run = validation.check_evidence("guest", "Guest", {})
    assert not_run["status"] == "not_run" and "needs a tenant guest" in not_run["detail"] \
        and "NVIDIA GPU" in not_run["detail"], not_run
    bench = validation.check_evidence("bench", "Bench", {"tenant-a100": {"passed": False,
                                                                         "detail": "P95 9.1 ms"}})
    assert bench["status"] == "fail" and "P95 9.1 ms" in bench["detail"]

    report = validation.report("hk-gpu-01", [validation.check_iommu(iommu), vfio])
    assert report["passed"] is False and report["failed"] == ["vfio"]
    markdown = validation.report_markdown(report)
    assert markdown.startswith("# Validation of hk-gpu-01: FAIL")
    assert "| Devices on vfio-pci | FAIL |" in markdown


def test_the_validation_report_keeps_a_read_value_inert_in_its_table():
    # A check's detail quotes what the host said (a device name, an error): it may not
    # end the table cell or the line, or become HTML, in the report an SRE reads.
    check = {"id": "vfio", "title": "Devices on vfio-pci", "status": "fail",
             "detail": "0000:41:00.0 on <nvidia> | held\nby Xorg"}
    markdown = validation.report_markdown(validation.report("hk-gpu-01", [check]))
    row = [line for line in markdown.splitlines() if line.startswith("| Devices on vfio-pci")]
    assert row == ["| Devices on vfio-pci | FAIL | 0000:41:00.0 on &lt;nvidia&gt; \\| held by Xorg |"]


def test_the_checklist_is_every_check_in_the_reports_order(runbook):
    """validate_checklist, the validate role's one call, asks every check with what the
    role read and gathers them as ``report`` does, in the report's order."""
    plan = runbook[0]
    a100 = plan["tenants"][0]
    functions = ("0000:65:00.0", "0000:65:00.1", a100["vf"]["address"])
    iommu = {"enabled": True, "vendor": "intel", "mode": "identity", "cmdline": {"intel_iommu": "on", "iommu": "pt"},
             "groups": [{"group": n, "devices": [{"address": a, "driver": "vfio-pci"}]} for n, a in enumerate(functions)]}
    pins = {t["name"]: _libvirt_pins(t["vcpu_pins"]) for t in plan["tenants"]}
    facts = {"devices": {a: {"present": True, "numa_node": 0} for a in functions},
             "memory": {"hugepages": {"0": {"1048576": {"nr": 64, "free": 0}}, "1": {"2048": {"nr": 4096, "free": 0}}},
                        "meminfo": {"HugePages_Total": 64, "HugePages_Free": 0, "Hugepagesize": 2048}},
             "realized": {}, "irqbalance": {},
             "libvirt": {"vcpu_pins": pins, "running": ["tenant-a100", "tenant-b"]}}
    irqs = {"changed_irqs": [120], "skipped_managed": [121]}
    waiting = [{"tenant": "tenant-b", "stage": "vm", "changed": ["vcpus"]}]
    report = validation.checklist(plan, "hk-gpu-01", iommu, facts, irqs, managed_irqs=[7],
                                  guest_results={}, restart_required=waiting)
    expected = validation.report("hk-gpu-01", [
        validation.check_iommu(iommu), validation.check_vfio(plan, iommu), validation.check_vf_settings(plan, iommu),
        validation.check_numa(plan, facts["devices"], pins), validation.check_gpu_state(plan, facts["devices"]),
        validation.check_hugepages(plan, facts["memory"]["hugepages"], facts["memory"]["meminfo"],
                                   facts["libvirt"]["running"]),
        validation.check_realized(plan, {}), validation.check_irqs([120], [7], ()),
        validation.check_irqbalance(plan, {}, [7, 121]),
        validation.check_evidence("guest", "Guest sees its GPU (nvidia-smi)", {}),
        validation.check_evidence("benchmark", "Benchmark met its targets (P95/P99)", {}),
        validation.check_gpu_health({}, {})], waiting)
    assert report == expected
    assert len(report["checks"]) == 12
    # IRQ 120 would move (7 and 121 are kernel-managed); no running tenant was read as realized
    assert report["passed"] is False and report["failed"] == ["realized", "irq"], report["failed"]
    assert report["restart_required"] == waiting


# Two nodes' 1G needs, as the planner writes them (string keys, as JSON keeps them).
TWO_NODES_1G = {"hugepages": {"1": {"1048576": 16}, "0": {"1048576": 64}, "2": {"2048": 512}}}


def test_validate_holds_1g_pages_to_the_plan_per_node_not_host_wide():
    # hugepages=80 spread by the kernel: 40 + 40 adds up to the plan's 64 + 16.
    spread = {"0": {"1048576": {"nr": 40, "free": 40}}, "1": {"1048576": {"nr": 40, "free": 40}},
              "2": {"2048": {"nr": 512, "free": 512}}}
    check = validation.check_hugepages(TWO_NODES_1G, spread, {}, [])
    assert check["status"] == "fail"
    assert "node 0 has 40 pages of 1G, the plan needs 64" in check["detail"]
    assert "node 1" not in check["detail"] and "node 2" not in check["detail"]
    per_node = dict(spread, **{"0": {"1048576": {"nr": 64, "free": 64}},
                               "1": {"1048576": {"nr": 16, "free": 16}}})
    assert validation.check_hugepages(TWO_NODES_1G, per_node, {}, [])["status"] == "pass"
