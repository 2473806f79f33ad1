# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a running tenant really is (module_utils/host/realized.py, host_facts' realized
subset): QEMU's threads and numa_maps in a /proc tree below a root, compared with the
plan. The lab test test_modules_on_lab.py::test_planned_tenant_starts_with_its_devices_on_vfio_under_tcg
reads a real QEMU the same way."""

import json
import os

import pytest
from support.module_args import patch_module_args

from support import sysfs_sim

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import realized
from ansible_collections.gpuhost.kvm.plugins.modules import host_facts as host_facts_module
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import validation

PID = 4242
# The shape of a real numa_maps of a hugepage-backed QEMU (2 MiB pages on node 0).
NUMA_MAPS = """\
55d0c0a00000 default file=/usr/bin/qemu-system-x86_64 mapped=1024 mapmax=2 N0=900 N1=124 kernelpagesize_kB=4
7f1c00000000 bind:0 file=/dev/hugepages/libvirt/qemu/1-tenant-a/qemu_back_mem.pc.ram huge dirty=512 N0=512 kernelpagesize_kB=2048
7f1d00000000 default anon=30 dirty=30 N0=20 N1=10 kernelpagesize_kB=4
"""
TENANT = {"name": "tenant-a", "node": 0, "memory_node": 0, "memory_gib": 1, "vcpu_pins": [2, 3],
          "emulator_cpus": "0-1", "iothread_cpus": "0-1", "iothreads": 1}


def _process(root, threads, numa_maps=NUMA_MAPS, name="tenant-a"):
    (root / "run/libvirt/qemu").mkdir(parents=True, exist_ok=True)
    (root / "run/libvirt/qemu" / ("%s.pid" % name)).write_text("%d" % PID)
    proc = root / "proc" / str(PID)
    for tid, comm, cpus in threads:
        task = proc / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "comm").write_text(comm + "\n")
        (task / "status").write_text("Name:\t%s\nCpus_allowed:\tf\nCpus_allowed_list:\t%s\n" % (comm[:15], cpus))
    if numa_maps is not None:
        (proc / "numa_maps").write_text(numa_maps)
    return str(root)


# As the lab's QEMU 10 showed them (plus an iothread): the monitor's "IO mon_iothread"
# and the preallocation's "TC tc-ram-node0" are emulator threads.
THREADS = [(PID, "qemu-system-x86", "0-1"), (PID + 1, "IO mon_iothread", "0-1"), (PID + 2, "IO iothread1", "0-1"),
           (PID + 3, "CPU 0/TCG", "2"), (PID + 4, "CPU 1/TCG", "3"), (PID + 6, "TC tc-ram-node0", "0-1")]


def test_a_tenant_placed_as_planned_has_no_findings(tmp_path):
    root = _process(tmp_path, THREADS)
    placement = realized.read_realized(realized.domain_pid("tenant-a", root), root)
    assert placement["vcpus"] == {0: (2,), 1: (3,)}
    assert placement["iothreads"] == {"iothread1": (0, 1)}
    assert [t["name"] for t in placement["emulator"]] == ["qemu-system-x86", "IO mon_iothread", "TC tc-ram-node0"]
    assert placement["memory_kib"] == {"huge": {0: 512 * 2048}, "other": {0: 3680, 1: 536}}
    assert realized.placement_findings(placement, TENANT) == []


def test_every_difference_is_a_finding(tmp_path):
    threads = [(PID, "qemu-system-x86", "0-7"), (PID + 2, "IO iothread1", "0-1"),
               (PID + 3, "CPU 0/KVM", "2-3"), (PID + 5, "CPU 2/KVM", "4")]
    maps = NUMA_MAPS.replace("huge dirty=512 N0=512", "huge dirty=512 N0=256 N1=256")
    root = _process(tmp_path, threads, maps)
    findings = realized.placement_findings(realized.read_realized(PID, root), TENANT)
    assert findings == [
        "vCPU 0 runs on CPUs 2-3, planned 2",
        "vCPU 1: no QEMU thread 'CPU 1/...'",
        "vCPU thread(s) 2 not in the plan",
        "emulator thread 'qemu-system-x86' runs on CPUs 0-7, planned 0-1",
        "hugepage mapping 7f1c00000000 has 256 page(s) of 2048 kB on node 1, planned only on node 0",
        "node 0 backs 524288 kB of hugepage memory, the tenant has 1048576 kB"]


def test_unreadable_numa_maps_is_a_finding_not_a_pass(tmp_path):
    root = _process(tmp_path, THREADS, numa_maps=None)
    assert realized.placement_findings(realized.read_realized(PID, root), TENANT) == [
        "numa_maps of pid %d could not be read" % PID]


@pytest.mark.parametrize("content", ["", "abc", "-1", "0", "12 34", "1" * 11])
def test_a_pid_file_without_a_pid_reads_as_not_running(tmp_path, content):
    (tmp_path / "run/libvirt/qemu").mkdir(parents=True)
    (tmp_path / "run/libvirt/qemu/tenant-a.pid").write_text(content)
    assert realized.domain_pid("tenant-a", str(tmp_path)) is None


def test_host_facts_realized_subset_on_a_recorded_tree_compares_after_json(tmp_path, capsys):
    root = _process(tmp_path, THREADS)
    with patch_module_args({"root": root, "gather": ["realized"], "domains": ["tenant-a", "tenant-b"]}):
        with pytest.raises(SystemExit):
            host_facts_module.main()
    answer = json.loads(capsys.readouterr().out)["ansible_facts"]["gpuhost_host"]["realized"]
    assert answer["tenant-b"] == {"running": False, "pid": None, "placement": None}
    assert answer["tenant-a"]["running"] is True and answer["tenant-a"]["pid"] == PID
    assert realized.placement_findings(answer["tenant-a"]["placement"], TENANT) == []
    moved = dict(TENANT, vcpu_pins=[3, 2])
    assert realized.placement_findings(answer["tenant-a"]["placement"], moved) == [
        "vCPU 0 runs on CPUs 2, planned 3", "vCPU 1 runs on CPUs 3, planned 2"]


def _realized_answer(tmp_path):
    root = _process(tmp_path, THREADS)
    return {"tenant-a": {"running": True, "pid": PID,
                         "placement": json.loads(json.dumps(realized.read_realized(PID, root)))},
            "tenant-b": {"running": False, "pid": None, "placement": None}}


def test_validate_passes_a_running_tenant_and_names_the_idle_one_the_inventory_accepts(tmp_path):
    plan = {"tenants": [TENANT, dict(TENANT, name="tenant-b")]}
    check = validation.check_realized(plan, _realized_answer(tmp_path), ["tenant-b"])
    assert check["id"] == "realized" and check["status"] == "pass", check
    assert check["detail"].startswith("1 running tenant(s) placed as planned, realized ratio 1 ")
    assert check["detail"].endswith("not running, accepted without evidence: tenant-b")


def test_validate_fails_a_tenant_without_guest_evidence_naming_it(tmp_path):
    """A host whose tenants have no guest evidence fails unless the inventory
    says that is acceptable; each such tenant is named."""
    plan = {"tenants": [TENANT, dict(TENANT, name="tenant-b"), dict(TENANT, name="tenant-c")]}
    answer = _realized_answer(tmp_path)
    check = validation.check_realized(plan, answer)
    assert check["status"] == "fail"
    assert check["detail"] == ("no guest evidence (not running or not read), and the inventory does not accept "
                               "that (validate_allow_tenants_without_evidence): tenant-b, tenant-c")
    assert validation.check_realized(plan, answer, True)["status"] == "pass"
    only_b = validation.check_realized(plan, answer, ["tenant-b"])
    assert only_b["status"] == "fail" and only_b["detail"].endswith(
        "(validate_allow_tenants_without_evidence): tenant-c; not running, accepted without evidence: tenant-b")


@pytest.mark.parametrize("allow", ["tenant-b", [1], {"tenant-b": True}])
def test_an_allow_list_of_another_shape_is_refused(tmp_path, allow):
    with pytest.raises(ValueError, match="true, false or a list of tenant names"):
        validation.check_realized({"tenants": [TENANT]}, _realized_answer(tmp_path), allow)


def test_validate_fails_naming_the_tenant_and_each_difference(tmp_path):
    plan = {"tenants": [dict(TENANT, vcpu_pins=[2, 4])]}
    check = validation.check_realized(plan, _realized_answer(tmp_path))
    assert check["status"] == "fail" and check["detail"] == "tenant-a: vCPU 1 runs on CPUs 3, planned 4"


def test_validate_without_a_running_tenant_fails_unless_accepted(tmp_path):
    plan = {"tenants": [dict(TENANT, name="tenant-b")]}
    answer = _realized_answer(tmp_path)
    assert validation.check_realized(plan, answer)["status"] == "fail"
    check = validation.check_realized(plan, answer, True)
    assert check["status"] == "not_run" and check["detail"] == "no tenant runs: tenant-b"
    assert validation.check_realized({"tenants": []}, {})["status"] == "not_run"


# A tenant on node 1 of a small simulated host (tests/support/sysfs_sim.py): its GPU and
# HDA in IOMMU group 2, QEMU holding /dev/vfio/2 (and the container), two vfio-msix IRQs.
GPU, HDA = "0000:41:00.0", "0000:41:00.1"
NODE1_TENANT = {"name": "tenant-a", "node": 1, "memory_node": 1, "memory_gib": 1, "vcpu_pins": [5, 6],
                "emulator_cpus": "4", "gpus": [{"address": GPU, "functions": [GPU, HDA]}]}
NODE1_PLAN = {"housekeeping": {"0": "0-1", "1": "4"}, "tenants": [NODE1_TENANT]}
NODE1_THREADS = [(PID, "qemu-system-x86", "4"), (PID + 1, "IO mon_iothread", "4"),
                 (PID + 3, "CPU 0/KVM", "5"), (PID + 4, "CPU 1/KVM", "6")]


def _vfio_host(tmp_path, hda_driver="vfio-pci", irq_cpus=("4", "4")):
    tree = sysfs_sim.TreeBuilder(tmp_path)
    tree.cpus(online="0-7", nodes={0: "0-3", 1: "4-7"}).iommu()
    tree.pci(GPU, 0x030200, vendor=0x10de, device=0x20b5, driver="vfio-pci", numa_node=1, iommu_group=2)
    tree.pci(HDA, 0x040300, vendor=0x10de, device=0x1aef, driver=hda_driver, numa_node=1, iommu_group=2)
    tree.irq(30, "nvme0q0", cpus="0-7")
    for index, cpus in enumerate(irq_cpus):
        tree.irq(70 + index, "vfio-msix[%d](%s)" % (index, GPU), chip="DMAR-MSI", cpus=cpus)
    tree.open_fd(PID, 18, "/dev/vfio/vfio", comm="qemu-system-x86")
    tree.open_fd(PID, 19, "/dev/vfio/2", comm="qemu-system-x86")
    tree.open_fd(PID, 20, "/dev/kvm", comm="qemu-system-x86")
    maps = NUMA_MAPS.replace("bind:0", "bind:1").replace("N0=512", "N1=512")
    return _process(tmp_path, NODE1_THREADS, maps)


def test_vfio_groups_drivers_irqs_and_hugepages_are_realized_items(tmp_path):
    root = _vfio_host(tmp_path)
    seen = realized.read_realized(PID, root)
    assert seen["vfio"] == {"fds_read": True, "groups": {2: {GPU: "vfio-pci", HDA: "vfio-pci"}}, "bridges": []}
    assert [(irq["irq"], irq["name"], irq["cpus"]) for irq in seen["vfio_irqs"]] == [
        (70, "vfio-msix[0](0000:41:00.0)", [4]), (71, "vfio-msix[1](0000:41:00.0)", [4])]
    assert seen["hugepages"] == {1: {2048: 512}}
    items = realized.realized_items(json.loads(json.dumps(seen)), NODE1_TENANT, [GPU, HDA], "4")
    assert [(item["item"], item["as_planned"]) for item in items] == [
        ("vCPU 0", True), ("vCPU 1", True),
        ("emulator thread qemu-system-x86", True), ("emulator thread IO mon_iothread", True),
        ("hugepages at 7f1c00000000", True), ("hugepage memory on node 1", True),
        ("device 0000:41:00.0", True), ("device 0000:41:00.1", True),
        ("IRQ 70 vfio-msix[0](0000:41:00.0)", True), ("IRQ 71 vfio-msix[1](0000:41:00.0)", True)]
    assert realized.realized_ratio(items) == 1.0
    check = validation.check_realized(NODE1_PLAN, {"tenant-a": {"running": True, "pid": PID, "placement": seen}})
    assert check["status"] == "pass" and "realized ratio 1 " in check["detail"], check


def test_a_group_device_off_vfio_and_an_irq_on_tenant_cpus_lower_the_ratio(tmp_path):
    root = _vfio_host(tmp_path, hda_driver="snd_hda_intel", irq_cpus=("4", "0-7"))
    seen = realized.read_realized(PID, root)
    items = realized.realized_items(seen, NODE1_TENANT, [GPU, HDA], "4")
    assert realized.placement_findings(seen, NODE1_TENANT, [GPU, HDA], "4") == [
        "0000:41:00.1 (group 2) is on snd_hda_intel, not vfio-pci",
        "IRQ 71 vfio-msix[1](0000:41:00.0) may fire on CPUs 0-7 (effective 0), planned housekeeping 4"]
    assert realized.realized_ratio(items) == round(8 / 10, 6)
    check = validation.check_realized(NODE1_PLAN, {"tenant-a": {"running": True, "pid": PID, "placement": seen}})
    assert check["status"] == "fail" and check["detail"].startswith("tenant-a: 0000:41:00.1 (group 2) is on snd_hda_intel")


def test_a_bridge_in_a_held_group_keeps_its_driver_without_a_finding(tmp_path):
    root = _vfio_host(tmp_path)
    sysfs_sim.TreeBuilder(tmp_path).pci("0000:40:01.0", 0x060400, vendor=0x1022, device=0x1483,
                                        driver="pcieport", iommu_group=2)
    seen = realized.read_realized(PID, root)
    assert seen["vfio"]["groups"][2]["0000:40:01.0"] == "pcieport" and seen["vfio"]["bridges"] == ["0000:40:01.0"]
    assert realized.placement_findings(seen, NODE1_TENANT, [GPU, HDA], "4") == []


def test_a_planned_function_whose_group_qemu_does_not_hold_is_a_finding(tmp_path):
    root = _vfio_host(tmp_path)
    os.unlink(os.path.join(root, "proc/%d/fd/19" % PID))
    seen = realized.read_realized(PID, root)
    assert seen["vfio"]["groups"] == {} and seen["vfio_irqs"] == []
    assert realized.placement_findings(seen, NODE1_TENANT, [GPU], "4") == [
        "0000:41:00.0: QEMU does not hold its /dev/vfio group"]


@pytest.mark.parametrize("target", ["/dev/vfio/2\n", "../../../dev/vfio/2", "/dev/vfio/devices/vfio0",
                                    "/dev/vfio/99999999999", "dev/vfio/2", "/dev/vfio/-1"])
def test_an_fd_link_that_is_not_a_group_node_is_not_a_held_group(tmp_path, target):
    """fd links are read with readlink and matched whole; none of these names a group
    (a link out of root is never followed: nothing below /dev is read)."""
    sysfs_sim.TreeBuilder(tmp_path).open_fd(PID, 3, target)
    assert realized.read_vfio_groups(PID, str(tmp_path)) == ([], True)


def test_unreadable_fds_and_irq_affinity_are_unknown_items_not_passes(tmp_path):
    root = _vfio_host(tmp_path)
    seen = json.loads(json.dumps(realized.read_realized(PID, root)))
    seen["vfio"] = {"fds_read": False, "groups": {}, "bridges": []}
    seen["vfio_irqs"][0]["cpus"] = None
    items = realized.realized_items(seen, NODE1_TENANT, [GPU], "4")
    unknown = [item for item in items if item["as_planned"] is None]
    assert [item["finding"] for item in unknown] == [
        "the fds of pid %d could not be read: is %s's group held?" % (PID, GPU),
        "IRQ 70 vfio-msix[0](0000:41:00.0): its smp_affinity_list could not be read"]
    assert realized.realized_ratio(items) == round(7 / 9, 6)
    no_housekeeping = realized.realized_items(json.loads(json.dumps(realized.read_realized(PID, root))),
                                              NODE1_TENANT, [GPU, HDA], None)
    assert realized.realized_ratio(no_housekeeping) == round(8 / 10, 6)


def test_the_free_hugepages_drop_is_an_item_when_before_and_after_are_given(tmp_path):
    root = _vfio_host(tmp_path)
    seen = realized.read_realized(PID, root)
    before = {"1": {"2048": {"nr": 1024, "free": 1024}}}

    def drop(after, given):
        items = realized.realized_items(seen, NODE1_TENANT, (), "4", given, after)
        return [item for item in items if item["item"] == "free hugepages on node 1"]

    assert drop({"1": {"2048": {"free": 512}}}, before) == [{
        "kind": "memory", "item": "free hugepages on node 1", "planned": "drop of 512",
        "observed": "drop of 512 (1024 -> 512)", "as_planned": True, "finding": None}]
    assert drop({"1": {"2048": {"free": 768}}}, before)[0]["finding"] == \
        "free 2048 kB hugepages of node 1 dropped by 256, the domain has 512"
    assert drop({"1": {"2048": 512}}, {})[0]["as_planned"] is None
    assert drop(None, before) == []


# -- irqbalance's ban list: its content (the file) and its effect (effective affinities)

PLAN_CPUS = {"irqbalance": {"banned_cpulist": "2-7"}}


def _irqbalance_host(tmp_path, config_text, nvme_effective="3"):
    tree = sysfs_sim.TreeBuilder(tmp_path)
    tree.cpus(online="0-7", nodes={0: "0-3", 1: "4-7"})
    tree.irq(24, "virtio0-input.0", cpus="0-1")
    tree.irq(40, "nvme0q1", cpus=nvme_effective)            # kernel-managed: stays per CPU
    tree.irq(41, "mlx5_comp0@pci:0000:03:00.0", cpus="1,5")  # may use CPU 1, fires on 1
    tree.write("/proc/irq/41/effective_affinity_list", "5\n")     # ... but fires on tenant CPU 5
    tree.irq(42, "virtio1-req.3", cpus="6")                   # a queue of CPU 6 only
    if config_text is not None:
        tree.write("/etc/default/irqbalance", config_text)
    tree.write("/etc/gpuhost/irq-affinity.json", json.dumps({"rules": [], "kernel_managed": ["nvme0q1"]}))
    return str(tmp_path)


def _irqbalance_facts(root, capsys, config="/etc/default/irqbalance"):
    with patch_module_args({"root": root, "gather": ["irqbalance"], "irqbalance_config": config}):
        with pytest.raises(SystemExit):
            host_facts_module.main()
    return json.loads(capsys.readouterr().out)


def test_host_facts_reads_the_ban_list_and_every_effective_affinity(tmp_path, capsys):
    root = _irqbalance_host(tmp_path, 'IRQBALANCE_ONESHOT=0\nIRQBALANCE_BANNED_CPULIST="2-7"\n')
    facts = _irqbalance_facts(root, capsys)["ansible_facts"]["gpuhost_host"]["irqbalance"]
    assert (facts["exists"], facts["key"], facts["banned_cpus"]) == (True, "IRQBALANCE_BANNED_CPULIST", "2-7")
    assert facts["kernel_managed_names"] == ["nvme0q1"]
    assert [(irq["irq"], irq["cpus"], irq["effective"]) for irq in facts["irqs"]] == [
        (24, [0, 1], [0]), (40, [3], [3]), (41, [1, 5], [5]), (42, [6], [6])]
    check = validation.check_irqbalance(PLAN_CPUS, facts)
    assert check["status"] == "fail" and check["detail"] == (
        "IRQ 41 (mlx5_comp0@pci:0000:03:00.0) fires on tenant CPU(s) 5, which irqbalance's ban list should "
        "keep it off; 1 kernel-managed IRQ(s) not counted; allowed only on tenant CPUs, so not irqbalance's "
        "to move: IRQ 42")


def test_the_ban_list_passes_when_no_unmanaged_irq_is_on_a_tenant_cpu(tmp_path, capsys):
    root = _irqbalance_host(tmp_path, "IRQBALANCE_BANNED_CPULIST=2-7\n")
    facts = _irqbalance_facts(root, capsys)["ansible_facts"]["gpuhost_host"]["irqbalance"]
    facts["irqs"] = [irq for irq in facts["irqs"] if irq["irq"] not in (41, 42)]
    check = validation.check_irqbalance(PLAN_CPUS, facts)
    assert check["status"] == "pass" and check["detail"] == (
        "IRQBALANCE_BANNED_CPULIST=2-7 bans the tenant CPUs 2-7; no IRQ irqbalance balances "
        "fires on one"), check
    # a managed IRQ this run met (irq_affinity's skipped_managed) counts as managed too
    facts["kernel_managed_names"] = []
    facts["irqs"][1]["cpus"] = [1, 3]      # a managed queue spread over CPUs 1 and 3
    assert validation.check_irqbalance(PLAN_CPUS, facts, [40])["status"] == "pass"
    assert validation.check_irqbalance(PLAN_CPUS, facts)["detail"].startswith("IRQ 40 (nvme0q1) fires on tenant")


def test_a_legacy_io_apic_irq_on_a_tenant_cpu_is_named_not_failed(tmp_path, capsys):
    # What the lab's converge showed: irqbalance leaves the i8042 keyboard and mouse IRQs
    # (IO-APIC 1-edge, 12-edge) on banned CPUs; irq_affinity does not pin legacy GSIs yet.
    root = _irqbalance_host(tmp_path, "IRQBALANCE_BANNED_CPULIST=2-7\n")
    facts = _irqbalance_facts(root, capsys)["ansible_facts"]["gpuhost_host"]["irqbalance"]
    assert {irq["irq"]: irq["chip"] for irq in facts["irqs"]}[24]     # the chip is read
    facts["irqs"] = [irq for irq in facts["irqs"] if irq["irq"] not in (41, 42)]
    facts["irqs"].append({"irq": 1, "name": "i8042", "chip": "IO-APIC", "cpus": [0, 1, 2, 3, 4, 5, 6, 7],
                          "effective": [3]})
    check = validation.check_irqbalance(PLAN_CPUS, facts)
    # a pass detail stays the same whether irqbalance has moved the legacy IRQ yet or not
    # (the lab's second converge found it moved), so a re-run of validate changes nothing
    assert check == validation.check_irqbalance(PLAN_CPUS, dict(facts, irqs=facts["irqs"][:-1])), check
    assert check["status"] == "pass", check
    facts["irqs"][-1]["chip"] = "IR-IO-APIC"                     # with interrupt remapping
    assert validation.check_irqbalance(PLAN_CPUS, facts)["status"] == "pass"
    facts["irqs"][-1]["chip"] = "PCI-MSIX-0000:03:00.0"          # a device's IRQ still fails
    assert validation.check_irqbalance(PLAN_CPUS, facts)["status"] == "fail"


@pytest.mark.parametrize("text, detail", [
    (None, "/etc/default/irqbalance does not exist: run the sriov_irq stage (irqbalance bans no CPU)"),
    ("IRQBALANCE_ONESHOT=0\n", "/etc/default/irqbalance sets no ban list (IRQBALANCE_BANNED_CPULIST or "
                               "IRQBALANCE_BANNED_CPUS): run the sriov_irq stage"),
    ("IRQBALANCE_BANNED_CPULIST=2-5\n", "IRQBALANCE_BANNED_CPULIST=2-5 leaves tenant CPU(s) 6-7 to irqbalance: "
                                        "run the sriov_irq stage"),
    ("IRQBALANCE_BANNED_CPUS=000000fc\n", None),
    ("IRQBALANCE_BANNED_CPULIST=2-x\n", "IRQBALANCE_BANNED_CPULIST in /etc/default/irqbalance is no CPU list: "
                                        "run the sriov_irq stage"),
])
def test_the_ban_list_content_is_read_from_the_file(tmp_path, capsys, text, detail):
    root = _irqbalance_host(tmp_path, text)
    facts = _irqbalance_facts(root, capsys)["ansible_facts"]["gpuhost_host"]["irqbalance"]
    facts["irqs"] = []
    check = validation.check_irqbalance(PLAN_CPUS, facts)
    if detail is None:
        assert check["status"] == "pass" and check["detail"].startswith("IRQBALANCE_BANNED_CPUS=2-7 bans"), check
    else:
        assert check["status"] == "fail" and check["detail"] == detail


def test_a_link_at_the_irqbalance_config_is_refused_unread(tmp_path, capsys):
    root = _irqbalance_host(tmp_path, None)
    os.makedirs(os.path.join(root, "etc/default"), exist_ok=True)
    os.symlink("/etc/shadow", os.path.join(root, "etc/default/irqbalance"))
    answer = _irqbalance_facts(root, capsys)
    assert answer["failed"] and answer["field"] == "irqbalance_config", answer


def test_irqbalance_without_tenant_cpus_or_facts_has_not_run():
    assert validation.check_irqbalance({"irqbalance": {"banned_cpulist": ""}}, {"irqs": []})["status"] == "not_run"
    assert validation.check_irqbalance(PLAN_CPUS, None)["status"] == "not_run"


# A whole-board tenant (the full-passthrough model): two guest cells, one per node; its
# realized placement as read_realized gives it (QEMU maps one hugepage backend per cell).
BOARD = {"name": "board", "node": 0, "memory_node": None, "memory_gib": 2, "vcpu_pins": [2, 10],
         "hugepage_size_kib": 2048, "emulator_cpus": "0",
         "guest_cells": [{"id": 0, "node": 0, "memory_node": 0, "vcpus": "0", "memory_gib": 1,
                          "gpus": ["0000:18:00.0"]},
                         {"id": 1, "node": 1, "memory_node": 1, "vcpus": "1", "memory_gib": 1,
                          "gpus": ["0000:9a:00.0"]}],
         "gpus": [{"address": "0000:18:00.0", "functions": ["0000:18:00.0"]},
                  {"address": "0000:9a:00.0", "functions": ["0000:9a:00.0"]}],
         "nvswitches": [{"address": "0000:0b:00.0", "node": 0}]}
BOARD_PLAN = {"housekeeping": {"0": "0", "1": "8"}, "tenants": [BOARD]}


def _board_seen(cell1_pages=None, irq_cpus=(0, 8)):
    cell1_pages = cell1_pages or {"1": 512}
    return {"pid": PID, "vcpus": {0: [2], 1: [10]}, "iothreads": {}, "emulator": [{"name": "qemu", "cpus": [0]}],
            "numa_maps_read": True,
            "huge_mappings": [{"address": "7f1c00000000", "page_kib": 2048, "pages": {"0": 512}},
                              {"address": "7f2c00000000", "page_kib": 2048, "pages": cell1_pages}],
            "memory_kib": {"huge": {int(n): p * 2048 for n, p in
                                    {"0": 512 + int(cell1_pages.get("0", 0)), "1": int(cell1_pages.get("1", 0))}.items()},
                           "other": {}},
            "vfio": {"fds_read": True, "bridges": [],
                     "groups": {1: {"0000:18:00.0": "vfio-pci"}, 2: {"0000:9a:00.0": "vfio-pci"},
                                3: {"0000:0b:00.0": "vfio-pci"}}},
            "vfio_irqs": [{"irq": 70, "name": "vfio-msix[0](0000:18:00.0)", "cpus": [irq_cpus[0]], "effective": [irq_cpus[0]]},
                          {"irq": 71, "name": "vfio-msix[0](0000:9a:00.0)", "cpus": [irq_cpus[1]], "effective": [irq_cpus[1]]}]}


def test_a_whole_board_tenant_realized_as_planned_per_cell_passes():
    check = validation.check_realized(BOARD_PLAN, {"board": {"running": True, "pid": PID, "placement": _board_seen()}})
    assert check["status"] == "pass", check
    items = validation.realized_tenant(BOARD_PLAN, BOARD, {"placement": _board_seen()})
    assert [i["item"] for i in items if i["kind"] == "memory"] == [
        "hugepages at 7f1c00000000", "hugepages at 7f2c00000000",
        "hugepage memory on node 0", "hugepage memory on node 1"]
    assert "device 0000:0b:00.0" in [i["item"] for i in items]


def test_a_cell_mapping_split_over_nodes_and_an_irq_off_its_node_are_findings():
    seen = _board_seen(cell1_pages={"0": 12, "1": 500}, irq_cpus=(0, 0))
    findings = [i["finding"] for i in validation.realized_tenant(BOARD_PLAN, BOARD, {"placement": seen})
                if i["as_planned"] is False]
    assert findings == [
        "hugepage mapping 7f2c00000000 has 12 page(s) of 2048 kB on node 0, planned only on node 1",
        "node 1 backs 1024000 kB of hugepage memory, the tenant has 1048576 kB",
        "IRQ 71 vfio-msix[0](0000:9a:00.0) may fire on CPUs 0 (effective 0), planned housekeeping 8"]


def test_the_numa_check_reads_each_cells_gpus_on_the_cells_node():
    devices = {"0000:18:00.0": {"numa_node": 0}, "0000:9a:00.0": {"numa_node": 1}, "0000:0b:00.0": {"numa_node": 0}}
    pins = {"board": {"0": "2", "1": "10"}}
    assert validation.check_numa(BOARD_PLAN, devices, pins)["status"] == "pass"
    moved = dict(devices, **{"0000:9a:00.0": {"numa_node": 0}})
    check = validation.check_numa(BOARD_PLAN, moved, pins)
    assert check["status"] == "fail"
    assert "0000:9a:00.0 of board is on node 0, the tenant's guest cell for it on node 1" in check["detail"]
