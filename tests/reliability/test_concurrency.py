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
"""

import json
import multiprocessing
import os
import subprocess
import sys

import harness
from helpers import REPO, ansible_env

from ansible_collections.gpuhost.kvm.plugins.module_utils import ledger as ledger_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.cpuset import parse_cpulist
from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.topology import read_host_topology

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
            workers = [context.Process(target=_reserve,
                                       args=(host.root, path, name, barrier, results))
                       for name in ("tenant-a", "tenant-b")]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(60)
                assert worker.exitcode == 0
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
