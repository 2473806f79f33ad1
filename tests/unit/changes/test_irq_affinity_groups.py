# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""irq_affinity's groups option against the simulator: every NUMA node in one module run
(under TCG each run costs seconds), decided for all groups first, applied or rolled back
as a whole, stored per node exactly as one run per node stored it."""

import errno
import json

import pytest

from support.sysfs_sim import (SimulatedKernel, TreeBuilder, build_sim_host, kernel_managed_irqs,
                               run_module, snapshot)

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity import pinning as irq_pinning
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_query
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_irqs
from ansible_collections.gpuhost.kvm.plugins.modules import irq_affinity

NODE0 = {"pci_devices": ["0000:01:00.0", "0000:03:00.0"], "cpus": "0-1",
         "persist_as": "sriov_irq node 0"}
NODE1 = {"pci_devices": ["0000:41:00.0", "0000:41:00.1"], "cpus": "4-5",
         "persist_as": "sriov_irq node 1"}


def make_sim(root):
    root = build_sim_host(root)
    return SimulatedKernel(root, managed_irqs=kernel_managed_irqs(root))


@pytest.fixture
def sim(tmp_path):
    return make_sim(str(tmp_path / "host"))


def pin(sim, check_mode=False, **args):
    args.setdefault("root", sim.root)
    return run_module(irq_affinity, "IrqPinner", args, sim, check_mode=check_mode)


def refused(sim, **args):
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        pin(sim, **args)
    assert snapshot(sim.root) == before
    return info.value


def smp(sim, irq):
    return read_irqs(sim.root)[str(irq)].smp_affinity_list


def stored_rules(sim):
    return json.loads(sim.read_file(irq_pinning.CONFIG_FILE))["rules"]


def test_one_run_pins_every_node_then_is_idempotent(sim):
    result = pin(sim, groups=[NODE0, NODE1], persistent=True).result
    assert result["changed"] is True
    assert result["selected"] == [40, 41, 42, 43, 50, 51, 52, 53, 60, 61]
    assert result["changed_irqs"] == [40, 50, 51, 52, 53, 60, 61]
    assert result["skipped_managed"] == [41, 42, 43]
    assert result["previous"]["60"] == "0-7"
    by_node = {g["persist_as"]: g for g in result["groups"]}
    assert by_node["sriov_irq node 0"]["changed_irqs"] == [40, 50, 51, 52, 53]
    assert by_node["sriov_irq node 0"]["skipped_managed"] == [41, 42, 43]
    assert by_node["sriov_irq node 1"] == {
        "persist_as": "sriov_irq node 1", "state": "present", "cpus": "4-5",
        "selected": [60, 61], "changed_irqs": [60, 61], "skipped_managed": []}
    assert smp(sim, 40) == (0, 1) and smp(sim, 61) == (4, 5)
    # One write of the stored pins for both nodes.
    assert result["steps"].count("create %s" % irq_pinning.CONFIG_FILE) == 1
    stored = sim.read_file(irq_pinning.CONFIG_FILE)
    again = pin(sim, groups=[NODE1, NODE0], persistent=True).result
    assert again["changed"] is False, again["steps"]
    assert again["skipped_managed"] == [41, 42, 43]
    assert sim.read_file(irq_pinning.CONFIG_FILE) == stored


def test_the_stored_pins_are_those_of_one_run_per_node(sim, tmp_path):
    pin(sim, groups=[NODE0, NODE1], persistent=True)
    per_node = make_sim(str(tmp_path / "per-node"))
    for node in (NODE0, NODE1):
        pin(per_node, persistent=True, **node)
    assert sim.read_file(irq_pinning.CONFIG_FILE) == per_node.read_file(irq_pinning.CONFIG_FILE)
    assert [r["name"] for r in stored_rules(sim)] == ["sriov_irq node 0", "sriov_irq node 1"]
    # ...and a single-group run after it replaces its own node's entry only.
    pin(sim, pci_devices=["0000:41:00.0"], cpus="6", persistent=True,
        persist_as="sriov_irq node 1")
    rules = stored_rules(sim)
    assert [r["name"] for r in rules] == ["sriov_irq node 0", "sriov_irq node 1"]
    assert rules[1]["cpus"] == "6" and rules[0]["cpus"] == "0-1"


def test_check_mode_reports_every_group_and_changes_nothing(sim):
    TreeBuilder(sim.root).write("/etc/sysconfig/irqbalance", "IRQBALANCE_ONESHOT=0\n")
    before = snapshot(sim.root)
    result = pin(sim, check_mode=True, groups=[NODE0, NODE1], persistent=True,
                 irqbalance_banned_cpus="2-3,6-7", irqbalance_format="cpulist").result
    assert snapshot(sim.root) == before
    assert result["changed"] is True
    # Nothing tells a managed IRQ apart before a real run stored its name.
    assert result["changed_irqs"] == [40, 41, 42, 43, 50, 51, 52, 53, 60, 61]
    assert [g["changed_irqs"] for g in result["groups"]] == [
        [40, 41, 42, 43, 50, 51, 52, 53], [60, 61]]
    assert result["irqbalance_banned_cpus"] == "2-3,6-7"
    assert "pin IRQ 61 to 4-5" in result["steps"]
    assert "/proc/irq/61/smp_affinity_list = 4-5\n" in result["diff"][0]["after"]
    pin(sim, groups=[NODE0, NODE1], persistent=True)
    check = pin(sim, check_mode=True, groups=[NODE0, NODE1], persistent=True).result
    assert check["changed"] is False and check["changed_irqs"] == []
    assert check["skipped_managed"] == [41, 42, 43]


def test_a_failure_in_the_second_group_rolls_back_the_first(sim):
    TreeBuilder(sim.root).write("/etc/sysconfig/irqbalance", "IRQBALANCE_ARGS=\n")
    sim.fail_on["/proc/irq/61/smp_affinity_list"] = errno.ENOSPC
    err = refused(sim, groups=[NODE0, NODE1], persistent=True,
                  irqbalance_banned_cpus="2-3,6-7", irqbalance_format="cpulist")
    rolled_back = err.details["rolled_back"]
    assert "pin IRQ 60 to 4-5" in rolled_back and "pin IRQ 40 to 0-1" in rolled_back
    assert "create %s" % irq_pinning.CONFIG_FILE in rolled_back
    assert err.details["errno"] == "ENOSPC"
    assert smp(sim, 40) == tuple(range(8)) and smp(sim, 60) == tuple(range(8))


def test_absent_group_forgets_its_node_and_keeps_the_other(sim):
    pin(sim, groups=[NODE0, NODE1], persistent=True)
    gone = {"state": "absent", "persist_as": "sriov_irq node 1", "pci_devices": [],
            "cpus": "4-5"}
    preview = pin(sim, check_mode=True, groups=[NODE0, gone], persistent=True).result
    assert preview["changed"] is True
    assert preview["steps"] == ["update %s" % irq_pinning.CONFIG_FILE]
    assert len(stored_rules(sim)) == 2
    result = pin(sim, groups=[NODE0, gone], persistent=True).result
    assert result["changed"] is True and result["changed_irqs"] == []
    assert result["groups"][1] == {"persist_as": "sriov_irq node 1", "state": "absent",
                                   "cpus": None, "selected": [], "changed_irqs": [],
                                   "skipped_managed": []}
    assert [r["name"] for r in stored_rules(sim)] == ["sriov_irq node 0"]
    assert smp(sim, 60) == (4, 5)       # left where it is; only the re-apply forgets
    TreeBuilder(sim.root).write("/proc/irq/60/smp_affinity_list", "0-7\n")
    TreeBuilder(sim.root).write("/proc/irq/50/smp_affinity_list", "0-7\n")
    assert irq_pinning.reapply_main([], writer=sim) == 0
    assert smp(sim, 60) == tuple(range(8)) and smp(sim, 50) == (0, 1)
    again = pin(sim, groups=[NODE0, gone], persistent=True).result
    assert again["changed"] is False, again["steps"]


def test_only_absent_groups_write_no_helper(sim):
    pin(sim, persistent=True, **NODE1)
    result = pin(sim, groups=[{"state": "absent", "persist_as": "sriov_irq node 1"}]).result
    assert result["steps"] == ["update %s" % irq_pinning.CONFIG_FILE]
    assert stored_rules(sim) == []


def test_a_device_in_two_groups_is_refused_before_anything(sim):
    other = dict(NODE1, pci_devices=["0000:41:00.0", "0000:03:00.0"])
    err = refused(sim, groups=[NODE0, other], persistent=True)
    assert err.field == "groups[1].pci_devices"
    assert "0000:03:00.0 is also in groups[0].pci_devices" in err.message
    assert "list each device in one group only" in err.message
    # The same function spelled without its domain is the same function.
    err = refused(sim, groups=[NODE0, dict(NODE1, pci_devices=["01:00.0"])])
    assert err.field == "groups[1].pci_devices"


def test_an_absent_group_with_an_empty_name_forgets_nothing(sim):
    pin(sim, irqs=[60], cpus="4", persistent=True)        # stored without a name
    pin(sim, persistent=True, **NODE0)
    stored = sim.read_file(irq_pinning.CONFIG_FILE)
    err = refused(sim, groups=[{"state": "absent", "persist_as": ""}])
    assert err.field == "groups[0].persist_as"
    # The single-group form, as before: an empty name matches no stored pin.
    result = pin(sim, state="absent", persist_as="").result
    assert result["changed"] is False and result["steps"] == []
    assert sim.read_file(irq_pinning.CONFIG_FILE) == stored


def test_two_groups_with_one_name_are_refused(sim):
    err = refused(sim, groups=[NODE0, dict(NODE1, persist_as="sriov_irq node 0")])
    assert err.field == "groups[1].persist_as" and "groups[0]" in err.message


@pytest.mark.parametrize("group, field, text", [
    ({"cpus": "zero-one", "pci_devices": ["0000:41:00.0"]}, "groups[1].cpus",
     "cannot parse 'zero-one'"),
    ({"cpus": "0-99999999999", "pci_devices": ["0000:41:00.0"]}, "groups[1].cpus",
     "beyond the kernel's limit"),
    ({"cpus": "6-9", "pci_devices": ["0000:41:00.0"]}, "groups[1].cpus", "not online"),
    ({"cpus": "", "pci_devices": ["0000:41:00.0"]}, "groups[1].cpus", "cpus is empty"),
    ({"cpus": "4", "pci_devices": ["0000:99:00.0"]}, "groups[1].pci_devices",
     "no PCI function 0000:99:00.0"),
    ({"cpus": "4", "pci_devices": ["not-an-address"]}, "groups[1].pci_devices", ""),
])
def test_a_bad_second_group_names_itself_and_changes_nothing(sim, group, field, text):
    err = refused(sim, groups=[NODE0, group], persistent=True)
    assert err.field == field and text in err.message


def test_a_huge_list_of_groups_is_refused_unread(sim):
    groups = [{"cpus": "0", "pci_devices": ["0000:%02x:00.0" % (i % 256)]}
              for i in range(irq_affinity.MAX_GROUPS + 1)]
    err = refused(sim, groups=groups)
    assert err.field == "groups" and "more than 1024" in err.message


def test_the_ban_list_applies_once_and_may_not_hold_any_groups_cpus(sim):
    TreeBuilder(sim.root).write("/etc/sysconfig/irqbalance", "IRQBALANCE_ARGS=\n")
    err = refused(sim, groups=[NODE0, NODE1], irqbalance_banned_cpus="2-5",
                  irqbalance_format="cpulist")
    assert err.field == "irqbalance_banned_cpus" and "CPU(s) 4-5" in err.message
    result = pin(sim, groups=[NODE0, NODE1], irqbalance_banned_cpus="2-3,6-7",
                 irqbalance_format="cpulist").result
    assert result["steps"].count("update /etc/sysconfig/irqbalance") == 1
    assert sim.read_file("/etc/sysconfig/irqbalance").endswith(
        "IRQBALANCE_BANNED_CPULIST=2-3,6-7\n")
    # No group at all: the irqbalance check alone (validate's node without devices).
    alone = pin(sim, check_mode=True, groups=[], irqbalance_banned_cpus="2-3,6-7",
                irqbalance_format="cpulist").result
    assert alone["changed"] is False and alone["groups"] == [] and alone["selected"] == []


@pytest.mark.parametrize("args, text", [
    (dict(groups=[NODE0], cpus="0-1"), "mutually exclusive: groups|cpus"),
    (dict(groups=[NODE0], pci_devices=["0000:01:00.0"]), "groups|pci_devices"),
    (dict(groups=[NODE0], persist_as="x"), "groups|persist_as"),
    (dict(groups=[NODE0], state="absent"), "groups|state"),
    (dict(groups=[{"pci_devices": ["0000:01:00.0"]}]), "state is present"),
    (dict(groups=[{"state": "absent"}]), "persist_as"),
    (dict(groups=[dict(NODE0, irqs=[60])]), "irqs"),
])
def test_groups_and_the_single_group_options_do_not_mix(sim, capsys, args, text):
    before = snapshot(sim.root)
    with pytest.raises(SystemExit):
        pin(sim, **args)
    assert snapshot(sim.root) == before
    message = json.loads(capsys.readouterr().out)["msg"]
    assert text in message, message


def test_plan_irq_affinity_groups_shapes_the_roles_groups():
    rows = [{"node": "0", "cpus": "0-1", "devices": ["0000:01:00.0", "0000:03:02.0"]},
            {"node": "1", "cpus": "4-5", "devices": []},
            {"node": "2", "cpus": "8-9", "devices": ["0000:81:00.2"]}]
    # sriov_irq in check mode: the VFs not created yet are left out, per group; a node
    # with no devices at all forgets its stored pin.
    assert plan_query.irq_affinity_groups(rows, ["0000:03:02.0", "0000:81:00.2"],
                                          "sriov_irq node ") == [
        {"pci_devices": ["0000:01:00.0"], "cpus": "0-1", "state": "present",
         "persist_as": "sriov_irq node 0"},
        {"pci_devices": [], "cpus": "4-5", "state": "absent",
         "persist_as": "sriov_irq node 1"},
        {"pci_devices": [], "cpus": "8-9", "state": "present",
         "persist_as": "sriov_irq node 2"}]
    # validate: only the nodes with devices on the host.
    assert plan_query.irq_affinity_groups(rows, ["0000:81:00.2"], drop_empty=True) == [
        {"pci_devices": ["0000:01:00.0", "0000:03:02.0"], "cpus": "0-1", "state": "present"}]
    assert plan_query.irq_affinity_groups(None) == []
