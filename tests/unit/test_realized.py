# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a running tenant really is (module_utils/host/realized.py, host_facts' realized
subset): QEMU's threads and numa_maps in a /proc tree below a root, compared with the
plan. The lab test test_modules_on_lab.py::test_planned_tenant_starts_with_its_devices_on_vfio_under_tcg
reads a real QEMU the same way."""

import json

import pytest
from ansible.module_utils.testing import patch_module_args

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
        "hugepage memory on node(s) 1 (524288 kB), planned only on node 0",
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


def test_validate_passes_a_running_tenant_placed_as_planned_and_names_the_idle_one(tmp_path):
    plan = {"tenants": [TENANT, dict(TENANT, name="tenant-b")]}
    check = validation.check_realized(plan, _realized_answer(tmp_path))
    assert check["id"] == "realized" and check["status"] == "pass", check
    assert check["detail"].startswith("1 running tenant(s) placed as planned")
    assert check["detail"].endswith("not running, so not observed: tenant-b")


def test_validate_fails_naming_the_tenant_and_each_difference(tmp_path):
    plan = {"tenants": [dict(TENANT, vcpu_pins=[2, 4])]}
    check = validation.check_realized(plan, _realized_answer(tmp_path))
    assert check["status"] == "fail" and check["detail"] == "tenant-a: vCPU 1 runs on CPUs 3, planned 4"


def test_validate_without_a_running_tenant_has_not_run(tmp_path):
    plan = {"tenants": [dict(TENANT, name="tenant-b")]}
    check = validation.check_realized(plan, _realized_answer(tmp_path))
    assert check["status"] == "not_run" and check["detail"] == "no tenant runs: tenant-b"
    assert validation.check_realized({"tenants": []}, {})["status"] == "not_run"
