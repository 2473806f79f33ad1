"""What the roles ask of a plan (plan_query) and the section 14 checks (validation),
on the planner's real output for the synthetic runbook host."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

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


def test_kernel_args_by_vendor_with_hugepages_and_isolation(runbook):
    plan = runbook[0]
    intel = plan_query.kernel_args(plan, "GenuineIntel")
    assert intel == ["intel_iommu=on", "iommu=pt", "kvm.ignore_msrs=1", "hugepagesz=1G",
                     "hugepages=64"]
    amd = plan_query.kernel_args(plan, "AuthenticAMD", iommu_pt=False, ignore_msrs=False)
    assert amd[0] == "amd_iommu=on" and "iommu=pt" not in amd
    isolated = plan_query.kernel_args(plan, "GenuineIntel", isolate=True, extra=["quiet"])
    assert "nohz_full=1-15,17-31,33-47,49-63" in isolated
    assert "isolcpus=managed_irq,domain,1-15,17-31,33-47,49-63" in isolated
    assert isolated[-1] == "quiet"


def test_cmdline_missing_compares_values(runbook):
    wanted = ["intel_iommu=on", "iommu=pt", "hugepagesz=1G", "hugepages=64"]
    line = "BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt hugepagesz=2M hugepages=8 hugepagesz=1G"
    assert plan_query.cmdline_missing(line, wanted) == ["hugepages=64"]
    assert plan_query.cmdline_missing("intel_iommu=off", ["intel_iommu=on"]) == ["intel_iommu=on"]


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


def test_1g_pages_are_reserved_per_node_at_boot_on_a_kernel_that_reads_the_node_form(runbook):
    plan = runbook[0]   # the planner's: 64 1G pages on node 0, 2M pages on node 1
    args = plan_query.kernel_args(plan, "GenuineIntel", kernel_release="6.8.0-45-generic")
    # 2M pages are in the plan too: the default size stays 2M (vm.nr_hugepages counts them).
    assert args[3:] == ["hugepagesz=1G", "hugepages=0:64"]
    assert plan_query.gigantic_boot_warning(plan, "6.8.0-45-generic") == ""
    assert plan_query.gigantic_boot_args(TWO_NODES_1G, "5.16.0") == [
        "hugepagesz=1G", "hugepages=0:64,1:16"]
    only_1g = {"hugepages": {"0": {"1048576": 4}, "1": {"1048576": 2, "2048": 0}}}
    assert plan_query.gigantic_boot_args(only_1g, "6.1.0-18-amd64") == [
        "default_hugepagesz=1G", "hugepagesz=1G", "hugepages=0:4,1:2"]


@pytest.mark.parametrize("release", ["5.15.0-105-generic", "4.18.0-553.el8_10.x86_64",
                                     "5.14.0-427.13.1.el9_4.x86_64", None, "", "garbage\n6.8"])
def test_an_older_or_unknown_kernel_gets_the_host_wide_count_and_a_warning(release):
    assert plan_query.gigantic_boot_args(TWO_NODES_1G, release) == ["hugepagesz=1G", "hugepages=80"]
    warning = plan_query.gigantic_boot_warning(TWO_NODES_1G, release)
    assert "fallback" in warning and "fragmented" in warning and "section 13" in warning
    assert "hugepages=80" in warning and "5.16" in warning
    if release and release.startswith(("4.", "5.1")):
        assert release in warning


def test_the_boot_time_check_names_node_wanted_and_got():
    memory = {"hugepages": {"0": {"1048576": {"nr": 64, "free": 64, "surplus": 0}},
                            "1": {"1048576": {"nr": 9, "free": 9, "surplus": 0}},
                            "2": {"2048": {"nr": 512, "free": 512, "surplus": 0}}}}
    assert plan_query.gigantic_pool_shortfalls(TWO_NODES_1G, memory, "6.8.0") == [
        "node 1: wanted 16 pages of 1G reserved at boot, got 9"]
    # Without the node form the kernel spread them: only the total can be held to the plan.
    assert plan_query.gigantic_pool_shortfalls(TWO_NODES_1G, memory, "5.15.0") == [
        "all nodes: wanted 80 pages of 1G reserved at boot, got 73"]
    memory["hugepages"]["1"]["1048576"]["nr"] = 16
    assert plan_query.gigantic_pool_shortfalls(TWO_NODES_1G, memory, "6.8.0") == []
    assert plan_query.gigantic_pool_shortfalls(TWO_NODES_1G, {}, "6.8.0") == [
        "node 0: wanted 64 pages of 1G reserved at boot, got 0",
        "node 1: wanted 16 pages of 1G reserved at boot, got 0"]


@pytest.mark.parametrize("hugepages, words", [
    ({"0\n1": {"1048576": 4}}, "is not a NUMA node number"),
    ({"-1": {"1048576": 4}}, "is not a NUMA node number"),
    ({"4096": {"1048576": 4}}, "at most 1023"),
    ({"0": {"1048576": float("nan")}}, "is not a whole number"),
    ({"0": {"1048576": True}}, "is not a whole number"),
    ({"0": {"1048576": 10 ** 12}}, "at most 65536"),
    ({"0": {"1048576": "4,1:9"}}, "is not a whole number"),
    ({"0": {"1048576": -3}}, "at least 0"),
])
def test_hostile_node_numbers_and_counts_are_refused(hugepages, words):
    with pytest.raises(GpuhostError) as err:
        plan_query.kernel_args({"hugepages": hugepages}, "GenuineIntel", kernel_release="6.8.0")
    assert words in err.value.message
    assert err.value.field.startswith("plan.hugepages[")


def test_the_per_node_value_compares_without_a_perpetual_change():
    wanted = ["intel_iommu=on", "hugepagesz=1G", "hugepages=0:64,1:16"]
    # What the kernel_cmdline module wrote, read back from /proc/cmdline: nothing missing.
    assert plan_query.cmdline_missing("ro intel_iommu=on hugepagesz=1G hugepages=0:64,1:16", wanted) == []
    # The same reservation written by hand in another order is the same reservation.
    assert plan_query.cmdline_missing("intel_iommu=on hugepagesz=1G hugepages=1:16,0:64", wanted) == []
    # The old host-wide count, another node's count, or the count under the 2M size differ.
    for line in ("intel_iommu=on hugepagesz=1G hugepages=80",
                 "intel_iommu=on hugepagesz=1G hugepages=0:64,1:8",
                 "intel_iommu=on hugepagesz=2M hugepages=0:64,1:16 hugepagesz=1G"):
        assert plan_query.cmdline_missing(line, wanted) == ["hugepages=0:64,1:16"], line


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
