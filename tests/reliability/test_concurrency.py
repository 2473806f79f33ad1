# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Two allocations at the same moment for two tenants that both fit only on the runbook
host's one GPU: one succeeds, the other fails naming the conflict, and the ledger gives
no GPU, core or VF twice.

Once through the ledger's public API in two real processes started behind a barrier,
and once through two ansible-playbook runs of the plan role (the reservation step of
playbooks/tenant_onboard.yml) started together. The whole onboarding playbook is not
run here: its later roles change a live host, which this machine is not.

The state-file races add: two onboardings that write the same housekeeping CPUs in other
words both get placed, and two vfio_bind (or irq_affinity) runs that plan from the same
read of their state file both keep their entries in it.
"""

import json
import multiprocessing
import os
import subprocess
import sys

import harness
from support.helpers import REPO, ansible_env
from support.sysfs_sim import SimulatedKernel

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity import pinning as irq_pinning

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import sriov_vfs as sriov, vfio_bind as vfio
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger as ledger_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import parse_cpulist
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
from ansible_collections.gpuhost.kvm.plugins.modules import (
    host_files, initramfs, irq_affinity, sriov_vfs, vfio_bind)

ROUNDS = 3


def _tenant(name):
    return {"name": name, "gpus": 1, "vcpus": 4, "memory_gib": 4, "hugepage_size": "2M",
            "nic_vf": True}


def _reserve(root, path, name, barrier, results):
    topology = read_host_topology(root, with_irqs=False)
    barrier.wait()
    try:
        with ledger_core.locked(path, timeout=30):
            data = ledger_core.read_ledger(path)
            new, _plan, added = ledger_core.reserve(data, topology, [_tenant(name)])
            ledger_core.write_ledger(path, new)
        results[name] = {"ok": True, "added": added}
    except GpuhostError as err:
        results[name] = {"ok": False, "msg": err.message}


def run_together(context, target, arg_lists):
    """One process per argument tuple, all started, all joined, each exiting 0."""
    workers = [context.Process(target=target, args=args) for args in arg_lists]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0


def assert_nothing_given_twice(path):
    data = ledger_core.read_ledger(path)
    gpus, cpus, vfs = [], [], []
    for tenant in data.tenants:
        for gpu in tenant.get("gpus") or ():
            gpus += gpu.get("functions") or [gpu["address"]]
        cpus += parse_cpulist(tenant.get("dedicated_cpus") or ",".join(
            str(c) for c in tenant["vcpu_pins"]))
        if tenant.get("vf"):
            vfs.append(tenant["vf"]["address"])
    for kind, items in (("GPU", gpus), ("CPU", cpus), ("VF", vfs)):
        assert len(items) == len(set(items)), "%s given twice: %s" % (kind, items)
    return data


def _judge(results, tally):
    tally.bump("conflicts", "tried")
    winners = [n for n, r in results.items() if r["ok"]]
    losers = [n for n, r in results.items() if not r["ok"]]
    assert len(winners) == 1 and len(losers) == 1, results
    message = results[losers[0]]["msg"]
    assert "not enough GPUs: tenant %s needs 1 free GPU(s)" % losers[0] in message, message
    assert "0000:65:00.0 (taken by %s)" % winners[0] in message, message
    return winners[0]


def test_two_processes_reserve_the_last_gpu_at_once(tmp_path, tally):
    host = harness.Host(tmp_path / "host", "runbook")
    context = multiprocessing.get_context("fork")
    for round_ in range(ROUNDS):
        path = os.path.join(host.base, "ledger%d" % round_, "ledger.json")
        with context.Manager() as manager:
            results = manager.dict()
            barrier = context.Barrier(2)
            run_together(context, _reserve, [(host.root, path, name, barrier, results)
                                             for name in ("tenant-a", "tenant-b")])
            results = dict(results)
        winner = _judge(results, tally)
        data = assert_nothing_given_twice(path)
        assert data.names() == [winner] and data.serial == 1
        tally.bump("conflicts", "resolved")


def test_two_ansible_playbook_runs_reserve_the_last_gpu_at_once(tmp_path, tally):
    host = harness.Host(tmp_path / "host", "runbook")
    playbook = harness.role_playbook(host, "plan")
    env = ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    procs = {}
    for name in ("tenant-a", "tenant-b"):
        variables = harness.host_extra_vars(host)
        variables.update(gpuhost_tenants=[_tenant("tenant-a"), _tenant("tenant-b")],
                         plan_tenants=[_tenant(name)], gpuhost_tenant_scope=[name])
        vars_file = os.path.join(host.work, "%s.json" % name)
        with open(vars_file, "w") as handle:
            json.dump(variables, handle)
        argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), playbook,
                "-i", harness.INVENTORY, "-l", "hk-gpu-01", "-e", "@" + vars_file]
        procs[name] = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
    results = {}
    for name, proc in procs.items():
        output = proc.communicate(timeout=300)[0]
        if proc.returncode == 0:
            results[name] = {"ok": True}
        else:
            failed = [json.loads(line.split("FAILED! => ", 1)[1]) for line in
                      output.splitlines() if "FAILED! => " in line]
            assert failed, output[-3000:]
            results[name] = {"ok": False, "msg": failed[0]["msg"]}
    winner = _judge(results, tally)
    data = assert_nothing_given_twice(host.ledger)
    assert data.names() == [winner]
    tally.bump("conflicts", "resolved")


# -- state files: two module runs at once, each merging its own record -------------------
# State-file races: each run read the state file while planning and wrote the whole file
# back from that read, so the second writer dropped the first one's record. The barrier
# holds both runs after their planning read, so both always plan from the same (stale)
# file; what each applies must still be merged into the file as it is under its lock.

def _racing(base, read_method):
    """``base`` (a writer class), except that the first ``read_method`` of ``watched``
    (the planning read) waits until the other run has made its own."""
    class Racing(base):
        def __init__(self, root, watched, barrier):
            super().__init__(root)
            self.watched = watched
            self.barrier = barrier

    def read(self, host_path, *args, **kwargs):
        data = getattr(base, read_method)(self, host_path, *args, **kwargs)
        if host_path == self.watched and self.barrier is not None:
            barrier, self.barrier = self.barrier, None
            barrier.wait(30)
        return data
    setattr(Racing, read_method, read)
    return Racing


RacingKernel = _racing(SimulatedKernel, "read_file")


def _race(host, watched, runs):
    """Run ``runs`` ({name: (module, args)}) in two processes behind one barrier; return
    {name: None or the error message}."""
    context = multiprocessing.get_context("fork")
    with context.Manager() as manager:
        results = manager.dict()
        barrier = context.Barrier(len(runs))

        def one(name, target, args):
            kernel = RacingKernel(host.root, watched, barrier)
            worker = {"vfio_bind": vfio_bind.VfioBinder,
                      "irq_affinity": irq_affinity.IrqPinner,
                      "sriov_vfs": sriov_vfs.SriovConfigurator}[target]
            try:
                module = harness._build(getattr(harness, target), dict(args, root=host.root))
                worker(module, writer=kernel).run()
                results[name] = None
            except GpuhostError as err:
                results[name] = err.message
        run_together(context, one, [(name, target, args)
                                    for name, (target, args) in runs.items()])
        return dict(results)


def test_two_vfio_bind_runs_at_once_keep_both_previous_drivers(tmp_path, tally):
    for round_ in range(ROUNDS):
        host = harness.Host(tmp_path / ("host%d" % round_), "sim")
        tally.bump("conflicts", "tried")
        results = _race(host, vfio.STATE_FILE, {
            "gpu": ("vfio_bind", {"devices": ["0000:41:00.0"], "with_companions": False}),
            "hda": ("vfio_bind", {"devices": ["0000:41:00.1"], "with_companions": False})})
        assert results == {"gpu": None, "hda": None}, results
        state = json.loads(host.kernel.read_file(vfio.STATE_FILE))
        assert state["devices"] == {"0000:41:00.0": {"driver": "nvidia"},
                                    "0000:41:00.1": {"driver": "snd_hda_intel"}}, state
        assert state["version"] == 1
        # Each device goes back to the driver it had: neither record was lost.
        for address, driver in (("0000:41:00.0", "nvidia"), ("0000:41:00.1", "snd_hda_intel")):
            assert harness.run_module_case(host, "vfio_bind", {
                "devices": [address], "with_companions": False, "state": "unbound"}) is None
            assert host.kernel.driver_of(address) == driver
        assert json.loads(host.kernel.read_file(vfio.STATE_FILE))["devices"] == {}
        tally.bump("conflicts", "resolved")


def test_two_irq_affinity_runs_at_once_keep_both_stored_pins(tmp_path, tally):
    for round_ in range(ROUNDS):
        host = harness.Host(tmp_path / ("host%d" % round_), "sim")
        tally.bump("conflicts", "tried")
        results = _race(host, irq_pinning.CONFIG_FILE, {
            "nvme": ("irq_affinity", {"irqs": [40], "cpus": "0-1", "persistent": True,
                                      "persist_as": "nvme"}),
            "nic": ("irq_affinity", {"irqs": [50], "cpus": "2-3", "persistent": True,
                                     "persist_as": "nic"})})
        assert results == {"nvme": None, "nic": None}, results
        stored = json.loads(host.kernel.read_file(irq_pinning.CONFIG_FILE))
        assert sorted((r["name"], r["cpus"]) for r in stored["rules"]) == [
            ("nic", "2-3"), ("nvme", "0-1")], stored
        assert stored["version"] == 1
        tally.bump("conflicts", "resolved")


def test_two_sriov_vfs_runs_at_once_keep_both_pfs_for_the_boot(tmp_path, tally):
    for round_ in range(ROUNDS):
        host = harness.Host(tmp_path / ("host%d" % round_), "sim")
        tally.bump("conflicts", "tried")
        results = _race(host, sriov.CONFIG_FILE, {
            "nvme": ("sriov_vfs", {"pf": "0000:01:00.0", "num_vfs": 2, "persistent": True}),
            "nic": ("sriov_vfs", {"pf": "0000:03:00.0", "num_vfs": 2, "persistent": True})})
        assert results == {"nvme": None, "nic": None}, results
        stored = json.loads(host.kernel.read_file(sriov.CONFIG_FILE))
        assert sorted((pf, entry["num_vfs"]) for pf, entry in stored["pfs"].items()) == [
            ("0000:01:00.0", 2), ("0000:03:00.0", 2)], stored
        assert stored["version"] == 1
        tally.bump("conflicts", "resolved")


def _reserve_with(root, path, name, housekeeping, barrier, results):
    topology = read_host_topology(root, with_irqs=False)
    request = {"name": name, "gpus": 1, "vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"}
    barrier.wait()
    try:
        with ledger_core.locked(path, timeout=30):
            data = ledger_core.read_ledger(path)
            new, _plan, added = ledger_core.reserve(data, topology, [request],
                                                    housekeeping=housekeeping)
            ledger_core.write_ledger(path, new)
        results[name] = {"ok": True, "added": added}
    except GpuhostError as err:
        results[name] = {"ok": False, "msg": err.message}


def test_two_onboardings_with_the_same_housekeeping_written_differently(tmp_path, tally):
    """Two inventories (or a hand-written -e) spell node 0's housekeeping differently:
    the same CPUs are the same request, so both tenants are placed, whichever is first."""
    host = harness.Host(tmp_path / "host", "eight_gpu")
    context = multiprocessing.get_context("fork")
    spellings = {"tenant-a": {"0": "64,0", "1": "32,96"}, "tenant-b": {0: "0,64-64"}}
    for round_ in range(ROUNDS):
        tally.bump("conflicts", "tried")
        path = os.path.join(host.base, "ledger%d" % round_, "ledger.json")
        with context.Manager() as manager:
            results = manager.dict()
            barrier = context.Barrier(2)
            run_together(context, _reserve_with, [
                (host.root, path, name, spelling, barrier, results)
                for name, spelling in spellings.items()])
            results = dict(results)
        assert all(r["ok"] for r in results.values()), results
        data = assert_nothing_given_twice(path)
        assert sorted(data.names()) == ["tenant-a", "tenant-b"] and data.serial == 2
        assert data.housekeeping == {"0": "0,64", "1": "32,96"}
        tally.bump("conflicts", "resolved")


# -- shared host files: two block edits at once, whichever module makes them ------------
# Before the block edits took the file's lock, each run wrote the whole file back from
# its planning read, and the second writer dropped the first one's block.

MODULES_FILE = "/etc/initramfs-tools/modules"


RacingWriter = _racing(HostWriter, "read_bytes")


def _block_edit(root, barrier, results, name, target, args):
    writer = RacingWriter(root, MODULES_FILE, barrier)
    module_file, worker = {"host_files": (host_files, host_files.HostFiles),
                           "initramfs": (initramfs, initramfs.Initramfs)}[target]
    extra = {"run_command": lambda argv: (0, "", "")} if target == "initramfs" else {}
    try:
        module = harness._build(module_file, dict(args, root=root))
        worker(module, writer=writer, **extra).run()
        results[name] = None
    except GpuhostError as err:
        results[name] = err.message


def _block_race(root, runs):
    context = multiprocessing.get_context("fork")
    with context.Manager() as manager:
        results = manager.dict()
        barrier = context.Barrier(len(runs))
        run_together(context, _block_edit, [
            (root, barrier, results, name, target, args)
            for name, (target, args) in runs.items()])
        return dict(results)


def _host_files_block(mark, line):
    return ("host_files", {"files": [{"path": MODULES_FILE, "block": line + "\n",
                                      "marker": "# {mark} %s" % mark, "mode": "0644"}]})


def test_two_host_files_runs_at_once_keep_both_blocks(tmp_path, tally):
    for round_ in range(ROUNDS):
        host = harness.Host(tmp_path / ("host%d" % round_), "sim")
        with _new(host.p(MODULES_FILE)) as handle:
            handle.write("# admin's line\nloop\n")
        tally.bump("conflicts", "tried")
        results = _block_race(host.root, {"a": _host_files_block("first", "vfio"),
                                          "b": _host_files_block("second", "vfio_pci")})
        assert results == {"a": None, "b": None}, results
        with open(host.p(MODULES_FILE)) as handle:
            text = handle.read()
        assert text.startswith("# admin's line\nloop\n"), text
        assert "# BEGIN first\nvfio\n# END first\n" in text, text
        assert "# BEGIN second\nvfio_pci\n# END second\n" in text, text
        assert not os.path.exists(host.p(MODULES_FILE + ".lock"))
        tally.bump("conflicts", "resolved")


def test_initramfs_with_mocked_rebuild_and_host_files_at_once_keep_both_blocks(tmp_path, tally):
    for round_ in range(ROUNDS):
        host = harness.Host(tmp_path / ("host%d" % round_), "sim")
        with _new(host.p(MODULES_FILE)) as handle:
            handle.write("loop\n")
        os.makedirs(host.p("/lib/modules/6.1.0-18-amd64"), exist_ok=True)
        tally.bump("conflicts", "tried")
        results = _block_race(host.root, {
            "files": _host_files_block("admin block", "dm_mod"),
            "initramfs": ("initramfs", {
                "early_modules": ["vfio", "vfio_pci"], "tool": "initramfs-tools",
                "early_modules_path": MODULES_FILE, "image_pattern": "/boot/initrd.img-%s",
                "rebuild_argv": ["update-initramfs", "-u", "-k", "all"]})})
        assert results == {"files": None, "initramfs": None}, results
        with open(host.p(MODULES_FILE)) as handle:
            text = handle.read()
        assert "# BEGIN admin block\ndm_mod\n# END admin block\n" in text, text
        assert "vfio_pci" in text and text.startswith("loop\n"), text
        tally.bump("conflicts", "resolved")


def _new(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return open(path, "w")
