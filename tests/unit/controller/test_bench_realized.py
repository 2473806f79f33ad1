# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""bench/bench_realized.py on a simulated host (tests/support/sysfs_sim.py): a tenant's
QEMU on node 1 with its GPU and HDA held through /dev/vfio/2, two vfio-msix IRQs, its
hugepages from node 1's 2 MiB pool; the JSON record it writes, per tenant. The lab test
test_modules_on_lab.py::test_bench_realized_on_the_started_tenant_records_ratio_1 runs
the same core on a real QEMU."""

import importlib.util
import json
import os

import pytest
from support import sysfs_sim
from support.helpers import REPO

_SPEC = importlib.util.spec_from_file_location("bench_realized", os.path.join(REPO, "bench", "bench_realized.py"))
bench_realized = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench_realized)

PID = 5150
GPU, HDA = "0000:41:00.0", "0000:41:00.1"
TENANT = {"name": "tenant-a", "node": 1, "memory_node": 1, "memory_gib": 1, "vcpu_pins": [5, 6],
          "emulator_cpus": "4", "hugepage_size_kib": 2048, "gpus": [{"address": GPU, "functions": [GPU, HDA]}]}
PLAN = {"housekeeping": {"0": "0-1", "1": "4"}, "tenants": [TENANT, dict(TENANT, name="tenant-b", vcpu_pins=[7])]}
NUMA_MAPS = """\
55d0c0a00000 default file=/usr/bin/qemu-system-x86_64 mapped=1024 mapmax=2 N0=900 N1=124 kernelpagesize_kB=4
7f1c00000000 bind:1 file=/dev/hugepages/libvirt/qemu/1-tenant-a/qemu_back_mem.pc.ram huge dirty=512 N1=512 kernelpagesize_kB=2048
7f1d00000000 default anon=30 dirty=30 N1=30 kernelpagesize_kB=4
"""
THREADS = [(PID, "qemu-system-x86", "4"), (PID + 1, "IO mon_iothread", "4"), (PID + 2, "CPU 0/KVM", "5"),
           (PID + 3, "CPU 1/KVM", "6")]


def _host(root, irq_cpus=("4", "4"), free_after=512):
    tree = sysfs_sim.TreeBuilder(root)
    tree.cpus(online="0-7", nodes={0: "0-3", 1: "4-7"}).iommu()
    tree.pci(GPU, 0x030200, vendor=0x10de, device=0x20b5, driver="vfio-pci", numa_node=1, iommu_group=2)
    tree.pci(HDA, 0x040300, vendor=0x10de, device=0x1aef, driver="vfio-pci", numa_node=1, iommu_group=2)
    for index, cpus in enumerate(irq_cpus):
        tree.irq(90 + index, "vfio-msix[%d](%s)" % (index, GPU), chip="DMAR-MSI", cpus=cpus)
    tree.open_fd(PID, 17, "/dev/vfio/vfio", comm="qemu-system-x86")
    tree.open_fd(PID, 18, "/dev/vfio/2", comm="qemu-system-x86")
    for node, free in ((0, 0), (1, free_after)):
        pool = "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/" % node
        tree.write(pool + "nr_hugepages", "%d\n" % (1024 if node else 0))
        tree.write(pool + "free_hugepages", "%d\n" % free)
    tree.write("/run/libvirt/qemu/tenant-a.pid", "%d" % PID)
    for tid, comm, cpus in THREADS:
        tree.write("/proc/%d/task/%d/comm" % (PID, tid), comm + "\n")
        tree.write("/proc/%d/task/%d/status" % (PID, tid), "Name:\t%s\nCpus_allowed_list:\t%s\n" % (comm, cpus))
    tree.write("/proc/%d/numa_maps" % PID, NUMA_MAPS)
    return str(root)


def _run(tmp_path, root, *extra):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    before = tmp_path / "before.json"
    before.write_text(json.dumps({"1": {"2048": {"nr": 1024, "free": 1024}}}))
    out = tmp_path / "results"
    status = bench_realized.main(["--root", root, "--plan", str(plan), "--hugepages-before", str(before),
                                  "--out", str(out)] + list(extra))
    (path,) = list(out.iterdir())
    assert path.name.startswith("realized-") and path.name.endswith("Z.json")
    return status, json.loads(path.read_text())


def test_a_tenant_realized_as_planned_is_recorded_with_ratio_1(tmp_path, capsys):
    status, record = _run(tmp_path, _host(tmp_path / "host"), "--tenant", "tenant-a")
    assert status == 0 and record["realized_ratio"] == 1.0 and list(record["tenants"]) == ["tenant-a"]
    tenant = record["tenants"]["tenant-a"]
    assert tenant["realized_ratio"] == 1.0 and tenant["findings"] == []
    assert [(t["thread"], t["planned"], t["observed"]) for t in tenant["threads"]] == [
        ("vCPU 0", "5", "5"), ("vCPU 1", "6", "6"),
        ("emulator thread qemu-system-x86", "4", "4"), ("emulator thread IO mon_iothread", "4", "4")]
    assert tenant["memory_node_histogram"] == {"huge": {"1": 512 * 2048}, "other": {"0": 3600, "1": 616}}
    assert tenant["hugepages_consumed"] == {"1": {"2048": 512}}
    assert tenant["hugepages_free"]["1"] == {"before": {"2048": 1024}, "after": {"2048": 512}}
    assert tenant["vfio"] == {"fds_read": True, "groups": {"2": {GPU: "vfio-pci", HDA: "vfio-pci"}}, "bridges": []}
    assert tenant["vfio_irqs"] == [
        {"irq": 90, "name": "vfio-msix[0](%s)" % GPU, "device": GPU, "planned": "4", "cpus": "4", "effective": "4"},
        {"irq": 91, "name": "vfio-msix[1](%s)" % GPU, "device": GPU, "planned": "4", "cpus": "4", "effective": "4"}]
    assert [item["item"] for item in tenant["items"]][-5:] == [
        "free hugepages on node 1", "device 0000:41:00.0", "device 0000:41:00.1",
        "IRQ 90 vfio-msix[0](0000:41:00.0)", "IRQ 91 vfio-msix[1](0000:41:00.0)"]
    assert "realized ratio 1.0 (11 of 11 items as planned)" in capsys.readouterr().out


def test_an_irq_on_tenant_cpus_a_short_pool_drop_and_an_idle_tenant_lower_the_ratio(tmp_path):
    status, record = _run(tmp_path, _host(tmp_path / "host", irq_cpus=("4", "4-7"), free_after=768))
    assert status == 1
    tenant = record["tenants"]["tenant-a"]
    assert tenant["findings"] == [
        "free 2048 kB hugepages of node 1 dropped by 256, the domain has 512",
        "IRQ 91 vfio-msix[1](0000:41:00.0) may fire on CPUs 4-7 (effective 4), planned housekeeping 4"]
    assert tenant["realized_ratio"] == round(9 / 11, 6)
    assert record["tenants"]["tenant-b"] == {
        "name": "tenant-b", "node": 1, "running": False, "pid": None, "items": [], "realized_ratio": None,
        "findings": ["tenant-b does not run: no guest evidence"]}
    # the idle tenant is one item not as planned
    assert (record["items"], record["items_as_planned"]) == (12, 9)


@pytest.mark.parametrize("bad", [["--tenant", "../x"], ["--root", "relative/root"]])
def test_a_bad_tenant_name_or_root_is_refused(tmp_path, bad):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(dict(PLAN, tenants=[dict(TENANT, name="../x")]) if "../x" in bad else PLAN))
    with pytest.raises(Exception, match="name|root"):
        bench_realized.main(["--plan", str(plan), "--out", str(tmp_path / "out")] + bad)


def test_a_plan_that_is_not_json_is_refused(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text("tenants: [")
    with pytest.raises(SystemExit, match="cannot be read as JSON"):
        bench_realized.main(["--plan", str(plan), "--root", str(tmp_path)])
