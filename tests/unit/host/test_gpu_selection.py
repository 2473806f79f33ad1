# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What counts as a GPU (pci.GpuSelection): the display classes and processing
accelerators by default, plus the inventory's gpu_devices list of vendor:device IDs
or addresses, taken alike by the planner, the IOMMU analysis, vfio_bind and validation.

The host is the sysfs simulator's (support.sysfs_sim.build_sim_host) plus two cards on
node 1: a processing accelerator (class 0x1200, no HDA companion) and QEMU's
pci-testdev (1b36:0005, class 0x00ff) with one 64 GiB 64-bit prefetchable BAR, the
lab's large-BAR stand-in (shared/LAB.md)."""

import json
import os

import pytest

from support.module_args import patch_module_args
from support.sysfs_sim import SimulatedKernel, TreeBuilder, build_sim_host, run_module, snapshot

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.address_width import (
    choose_address_width)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.iommu import analyse_iommu
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    DEFAULT_GPU_SELECTION, MAX_GPU_DEVICES, GpuSelection, read_pci_functions)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
    PLAN_FIRMWARE, plan_placement)
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import fleet
from ansible_collections.gpuhost.kvm.plugins.modules import (
    capacity_facts, host_facts, iommu_groups_facts, numa_cpuset, tenant_ledger, vfio_bind)
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import validation

ACCEL = "0000:45:00.0"
TESTDEV = "0000:46:00.0"
TESTDEV_ID = "1b36:0005"
# The simulator host's GPUs by class: two NVIDIA cards and the bochs display controller.
CLASS_GPUS = ["0000:02:01.0", "0000:41:00.0", "0000:42:00.0"]
BAR_64G = 64 << 30
# IORESOURCE_MEM | IORESOURCE_PREFETCH | IORESOURCE_MEM_64 (what sysfs shows for a 64-bit
# prefetchable memory BAR)
MEM64_PREF = 0x0014220C
TENANT = {"vcpus": 1, "memory_gib": 1, "hugepage_size": "2M"}


def _resource(bars):
    """A ``resource`` file: 13 lines, ``bars`` {index: (start, size, flags)}."""
    lines = []
    for index in range(13):
        start, size, flags = bars.get(index, (0, 0, 0))
        lines.append("0x%016x 0x%016x 0x%016x" % (start, start + size - 1 if size else 0,
                                                  flags))
    return "\n".join(lines) + "\n"


def build_host(root):
    build_sim_host(root)
    tree = TreeBuilder(root)
    for port, group in (("0000:00:07.0", 17), ("0000:00:08.0", 19)):
        tree.pci(port, 0x060400, vendor=0x8086, device=0x7c00, driver="pcieport",
                 iommu_group=group)
    tree.pci(ACCEL, 0x120000, vendor=0x1da3, device=0x1000, driver="habanalabs",
             numa_node=1, iommu_group=16, parent="0000:00:07.0")
    dev = tree.pci(TESTDEV, 0x00ff00, vendor=0x1b36, device=0x0005, numa_node=1,
                   iommu_group=18, parent="0000:00:08.0")
    tree.write(dev + "/resource", _resource({0: (0xfe000000, 4096, 0x00040200),
                                             2: (0x8000000000, BAR_64G, MEM64_PREF)}))
    return root


@pytest.fixture
def root(tmp_path):
    return build_host(str(tmp_path / "host"))


def _plan(root, gpus, selection=None):
    return plan_placement(read_host_topology(root, with_irqs=False),
                          [dict(TENANT, name="t1", gpus=gpus)], hugepage_check="none",
                          gpu_selection=selection)


# -- processing accelerators -----------------------------------------------------------

def test_a_processing_accelerator_is_a_gpu_by_default_and_has_no_companion(root):
    functions = read_pci_functions(root)
    assert DEFAULT_GPU_SELECTION.reason(functions[ACCEL]) == "class 0x1200"
    assert DEFAULT_GPU_SELECTION.gpus(functions) == tuple(CLASS_GPUS + [ACCEL])
    verdict = [g for g in analyse_iommu(read_host_topology(root)).gpus if g.address == ACCEL]
    assert len(verdict) == 1 and verdict[0].isolated and verdict[0].companions == ()
    assert verdict[0].selected_by == "class 0x1200"
    tenant = _plan(root, [ACCEL])["tenants"][0]
    # Passed alone: no HDA function is assumed beside it.
    assert tenant["gpus"][0]["functions"] == [ACCEL] and tenant["node"] == 1


def test_a_count_request_lands_on_the_accelerator_once_the_cards_are_taken(root):
    topology = read_host_topology(root, with_irqs=False)
    plan = plan_placement(topology, [dict(TENANT, name="t%d" % n, gpus=1) for n in (1, 2)],
                          hugepage_check="none")
    # 41:00.0 is clean; 42:00.0 is the boot VGA and 02:01.0 shares a dirty group: the
    # accelerator is the other GPU a count can take.
    assert sorted(t["gpus"][0]["address"] for t in plan["tenants"]) == ["0000:41:00.0", ACCEL]


# -- the listed large-BAR stand-in -------------------------------------------------------

def test_pci_testdev_is_no_gpu_unless_listed(root):
    functions = read_pci_functions(root)
    assert DEFAULT_GPU_SELECTION.reason(functions[TESTDEV]) is None
    assert TESTDEV not in [g.address for g in analyse_iommu(read_host_topology(root)).gpus]
    with pytest.raises(GpuhostError) as info:
        _plan(root, [TESTDEV])
    assert info.value.field == "tenants[0].gpus[0]"
    assert "is not a GPU (class 0x00ff00)" in str(info.value) and "gpu_devices" in str(info.value)


@pytest.mark.parametrize("entry, why", [(TESTDEV_ID, "listed as 1b36:0005"),
                                        (TESTDEV, "listed as 0000:46:00.0"),
                                        ("1B36:0005", "listed as 1b36:0005")])
def test_pci_testdev_listed_by_id_or_address_is_a_gpu_with_its_64g_bar_counted(root, entry, why):
    selection = GpuSelection.from_options([entry])
    functions = read_pci_functions(root)
    assert selection.reason(functions[TESTDEV]) == why
    assert functions[TESTDEV].bar64_sizes == (BAR_64G,)
    verdict = [g for g in analyse_iommu(read_host_topology(root), selection=selection).gpus
               if g.address == TESTDEV][0]
    assert verdict.isolated and verdict.bar64_sizes == (BAR_64G,)
    assert verdict.selected_by == why
    tenant = _plan(root, [TESTDEV], selection)["tenants"][0]
    assert tenant["gpus"][0]["bar64_sizes"] == [BAR_64G]
    assert tenant["gpus"][0]["bar64_total"] == BAR_64G
    # The width rule got the 64 GiB BAR: the plan's width is the one for that BAR, and a
    # window of 64 GiB at least.
    width = choose_address_width("t1", 1 << 30, [(BAR_64G,)], firmware=PLAN_FIRMWARE)
    assert tenant["address_width"]["bits"] == width.bits
    assert tenant["address_width"]["size_gib"] >= 64
    assert width.bits > choose_address_width("t1", 1 << 30, [()], firmware=PLAN_FIRMWARE).bits


def test_listed_only_counts_the_list_alone(root):
    selection = GpuSelection.from_options([TESTDEV_ID], listed_only=True)
    assert selection.gpus(read_pci_functions(root)) == (TESTDEV,)
    with pytest.raises(GpuhostError) as info:
        _plan(root, ["0000:41:00.0"], selection)
    assert "is not a GPU" in str(info.value)


def test_several_listed_functions_of_one_slot_are_one_gpu(root):
    tree = TreeBuilder(root)
    dev = tree.pci("0000:46:00.1", 0x00ff00, vendor=0x1b36, device=0x0005, numa_node=1,
                   iommu_group=18, parent="0000:00:08.0")
    tree.write(dev + "/resource", _resource({2: (0xa000000000, BAR_64G, MEM64_PREF)}))
    selection = GpuSelection.from_options([TESTDEV_ID])
    assert TESTDEV in selection.gpus(read_pci_functions(root))
    assert "0000:46:00.1" not in selection.gpus(read_pci_functions(root))
    tenant = _plan(root, 1, GpuSelection.from_options([TESTDEV_ID], listed_only=True))
    gpu = tenant["tenants"][0]["gpus"][0]
    assert gpu["functions"] == [TESTDEV, "0000:46:00.1"]
    assert gpu["bar64_sizes"] == [BAR_64G, BAR_64G]


def test_a_listed_entry_no_function_matches_is_a_planner_warning(root):
    plan = _plan(root, 0, GpuSelection.from_options(["10de:2335", "0000:99:00.0"]))
    assert ("gpu_devices lists 0000:99:00.0, 10de:2335, which no PCI function of this host "
            "matches") in plan["warnings"]


# -- hostile lists -----------------------------------------------------------------------

HOSTILE = [
    (["10de:2335\n"], "gpu_devices[0]"),
    (["0000:46:00.0\n"], "gpu_devices[0]"),
    ([" 0000:46:00.0"], "gpu_devices[0]"),
    (["46:00.0"], "gpu_devices[0]"),             # the domain left out: not lspci -D's form
    (["0000:46:20.0"], "gpu_devices[0]"),        # slot above 1f
    (["10de:2335", "10de"], "gpu_devices[1]"),
    (["10de:23355"], "gpu_devices[0]"),
    (["../../../etc/passwd"], "gpu_devices[0]"),
    ([["10de:2335"]], "gpu_devices[0]"),
    ("10de:2335", "gpu_devices"),               # a string, not a list
    (["10de:2335"] * 10000, "gpu_devices"),
]


@pytest.mark.parametrize("devices, field", HOSTILE)
def test_a_hostile_list_is_refused_naming_the_option(devices, field):
    with pytest.raises(GpuhostError) as info:
        GpuSelection.from_options(devices)
    assert info.value.field == field
    assert "lspci" in info.value.fix


def test_the_list_is_bounded():
    assert len(GpuSelection.from_options(["10de:%04x" % n for n in range(MAX_GPU_DEVICES)]).ids) \
        == MAX_GPU_DEVICES
    with pytest.raises(GpuhostError) as info:
        GpuSelection.from_options(["10de:%04x" % n for n in range(MAX_GPU_DEVICES + 1)])
    assert "more than %d" % MAX_GPU_DEVICES in str(info.value)


def test_listed_only_without_a_list_is_refused():
    with pytest.raises(GpuhostError) as info:
        GpuSelection.from_options([], listed_only=True)
    assert info.value.field == "gpu_devices_only"


@pytest.mark.parametrize("devices, field", [(["10de:2335\n"], "gpu_devices[0]"),
                                            (["10de:2335"] * 10000, "gpu_devices")])
def test_every_module_refuses_a_hostile_list_before_any_side_effect(tmp_path, capsys,
                                                                    devices, field):
    root = build_host(str(tmp_path / "host"))
    sim = SimulatedKernel(root)
    ledger = str(tmp_path / "state" / "ledger.json")
    before = snapshot(root)
    with pytest.raises(GpuhostError) as info:
        run_module(vfio_bind, "VfioBinder", {"root": root, "match": {"gpu": True},
                                             "gpu_devices": devices}, sim)
    assert info.value.field == field
    with patch_module_args({"root": root, "path": ledger, "gpu_devices": devices,
                            "tenants": [dict(TENANT, name="t1", gpus=1)]}):
        module = tenant_ledger.build_module()
    with pytest.raises(GpuhostError) as info:
        tenant_ledger.TenantLedger(module).run()
    assert info.value.field == field
    assert not os.path.exists(os.path.dirname(ledger))       # not even the ledger's folder
    with patch_module_args({"root": root, "gpu_devices": devices,
                            "tenants": [dict(TENANT, name="t1", gpus=1)]}):
        module = numa_cpuset.build_module()
    with pytest.raises(GpuhostError) as info:
        numa_cpuset.NumaCpusetPlanner(module).run()
    assert info.value.field == field
    with patch_module_args({"root": root, "gpu_devices": devices}):
        with pytest.raises(SystemExit):
            iommu_groups_facts.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and result["field"] == field and result["ansible_facts"] == {}
    for gather in (["iommu"], ["memory"]):
        with patch_module_args({"root": root, "gather": gather, "gpu_devices": devices}):
            with pytest.raises(SystemExit):
                host_facts.main()
        result = json.loads(capsys.readouterr().out)
        assert result["failed"] and result["field"] == field
    with patch_module_args({"root": root, "ledger_path": ledger, "gpu_devices": devices}):
        with pytest.raises(SystemExit):
            capacity_facts.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and result["field"] == field
    assert snapshot(root) == before


# -- every consumer counts the same GPUs -----------------------------------------------

@pytest.mark.parametrize("devices, only", [([], False), ([TESTDEV_ID], False),
                                           ([TESTDEV], False), ([TESTDEV_ID, ACCEL], True)])
def test_planner_iommu_facts_vfio_bind_and_validate_count_the_same_gpus(tmp_path, capsys,
                                                                        devices, only):
    root = build_host(str(tmp_path / "host"))
    sim = SimulatedKernel(root)
    options = {"gpu_devices": devices, "gpu_devices_only": only}
    expected = sorted(([] if only else CLASS_GPUS + [ACCEL]) + ([ACCEL] if only else [])
                      + ([TESTDEV] if devices else []))
    # One tenant on each clean GPU of node 1 (42:00.0 is the boot VGA, 02:01.0 is in a
    # dirty group), named by address.
    placed = [g for g in ("0000:41:00.0", ACCEL, TESTDEV) if g in expected]

    # The planner's module: the GPUs of its layout, and the tenants placed on them.
    with patch_module_args(dict(options, root=root, path=str(tmp_path / "ledger.json"),
                                hugepage_check="none",
                                tenants=[dict(TENANT, name="t%d" % n, gpus=[gpu])
                                         for n, gpu in enumerate(placed)])):
        module = tenant_ledger.build_module()
    ledger = tenant_ledger.TenantLedger(module)
    ledger.run()
    planner = sorted(g["address"] for g in ledger.layout["gpus"])
    assert sorted(g["address"] for t in ledger.result["plan"]["tenants"] for g in t["gpus"]) == \
        sorted(placed)

    # The IOMMU analysis, as iommu_groups_facts returns it.
    with patch_module_args(dict(options, root=root)):
        with pytest.raises(SystemExit):
            iommu_groups_facts.main()
    iommu = json.loads(capsys.readouterr().out)["ansible_facts"]["gpuhost_iommu"]
    facts = sorted(g["address"] for g in iommu["gpus"])
    assert iommu["gpu_selection"]["listed_only"] is only
    # host_facts' iommu subset, which the bios, iommu and validate roles read.
    with patch_module_args(dict(options, root=root, gather=["iommu"])):
        with pytest.raises(SystemExit):
            host_facts.main()
    host_iommu = json.loads(capsys.readouterr().out)["ansible_facts"]["gpuhost_iommu"]
    assert sorted(g["address"] for g in host_iommu["gpus"]) == facts

    # vfio_bind's GPUs, in check mode: nothing is bound.
    before = snapshot(root)
    binder = run_module(vfio_bind, "VfioBinder",
                        dict(options, root=root, match={"gpu": True}, allow_dirty_group=True,
                             allow_boot_vga=True), sim, check_mode=True)
    bound = sorted(d["address"] for d in binder.result["devices"] if d["gpu_selected_by"])
    assert snapshot(root) == before

    assert planner == facts == bound == expected

    # Validation holds the plan's GPUs to the facts' GPUs: with the same selection it
    # passes; facts read without the list name the listed GPU the plan placed.
    groups = [{"group": 0, "devices": [{"address": a, "driver": "vfio-pci"}
                                       for t in ledger.result["plan"]["tenants"] for g in t["gpus"]
                                       for a in g["functions"]]}]
    assert validation.check_vfio(ledger.result["plan"], dict(iommu, groups=groups))["status"] == "pass"
    default = analyse_iommu(read_host_topology(root)).to_dict()
    check = validation.check_vfio(ledger.result["plan"], dict(default, groups=groups))
    if TESTDEV in placed:
        assert check["status"] == "fail"
        assert "planned GPUs the IOMMU facts do not count as GPUs: %s" % TESTDEV in check["detail"]
    else:
        assert check["status"] == "pass"


# -- the fleet: capacity_facts on the host, fleet_report and choose_host on the controller

def test_capacity_facts_and_the_controller_count_the_listed_gpus_as_the_host_does(root, capsys):
    ledger = os.path.join(root, "ledger.json")
    request = dict(TENANT, name="t9", gpus=[TESTDEV])
    with patch_module_args({"root": root, "ledger_path": ledger, "gpu_devices": [TESTDEV_ID],
                            "include_topology": True, "hugepage_check": "none",
                            "tenant": request}):
        with pytest.raises(SystemExit):
            capacity_facts.main()
    fact = json.loads(capsys.readouterr().out)["ansible_facts"]["gpuhost_capacity"]
    listed = sorted([g["address"] for node in fact["capacity"]["nodes"].values()
                     for g in node["gpus"]]
                    + [g["address"] for g in fact["capacity"]["gpus_unknown_node"]])
    assert listed == sorted(CLASS_GPUS + [ACCEL, TESTDEV])
    assert fact["gpu_devices"] == [TESTDEV_ID] and fact["gpu_devices_only"] is False
    assert fact["candidate"]["fits"] and fact["candidate"]["gpus"] == [TESTDEV]
    # The controller, from the same topology and ledger, counts what the host counted...
    report = fleet.fleet_report({"h1": {"topology": fact["topology"], "ledger": fact["ledger"],
                                        "gpu_devices": fact["gpu_devices"]}})
    assert report["hosts"]["h1"]["totals"]["gpus_total"] == fact["capacity"]["totals"][
        "gpus_total"] == len(listed)
    chosen = fleet.choose_host({"h1": {"topology": fact["topology"], "ledger": fact["ledger"],
                                       "gpu_devices": fact["gpu_devices"]}}, request,
                               hugepage_check="none")
    assert chosen["host"] == "h1"
    # ...and without the list the stand-in is no GPU there, named in the reason; a host
    # whose list is hostile is unusable, naming the entry.
    with pytest.raises(GpuhostError) as info:
        fleet.choose_host({"h1": {"topology": fact["topology"], "ledger": fact["ledger"]}},
                          request, hugepage_check="none")
    assert "0000:46:00.0 is not a GPU" in str(info.value)
    with pytest.raises(GpuhostError) as info:
        fleet.choose_host({"h1": {"topology": fact["topology"], "ledger": fact["ledger"],
                                  "gpu_devices": ["1b36:0005\n"]}}, request,
                          hugepage_check="none")
    assert "h1: gpu_devices[0]" in str(info.value)
