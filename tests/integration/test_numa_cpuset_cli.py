# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""numa_cpuset through the real ansible and ansible-doc command-line tools."""

import json

import pytest
import yaml

from support import fixturegen
from support.helpers import ansible_env, run_tool
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    read_host_topology,
    topology_to_dict,
)

MODULE = "gpuhost.kvm.numa_cpuset"
A100 = {"name": "tenant-a100", "gpus": 1, "vcpus": 30, "memory_gib": 64,
        "hugepage_size": "1G", "nic_vf": True, "iothreads": 2}


@pytest.fixture(scope="module")
def runbook_root(tmp_path_factory):
    return fixturegen.build_runbook_host(str(tmp_path_factory.mktemp("runbook")))


def adhoc(args, *extra, check=True):
    """Run the module ad hoc on localhost; return (rc, status, result dict)."""
    env = ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = run_tool("ansible", "localhost", "-c", "local", "-m", MODULE,
                    "-a", json.dumps(args), *extra, env=env, check=check)
    marker = "localhost | "
    start = proc.stdout.index(marker) + len(marker)
    status, dummy, body = proc.stdout[start:].partition(" => ")
    return proc.returncode, status.strip(), json.loads(body)


def test_module_plans_the_runbook_tenant_from_a_root_tree(runbook_root, module_python):
    rc, status, result = adhoc({"root": runbook_root, "tenants": [A100]})
    assert (rc, status) == (0, "SUCCESS")
    assert result["changed"] is False
    entry = result["plan"]["tenants"][0]
    assert entry["node"] == 0
    assert entry["vcpu_pins"] == [c for n in range(1, 16) for c in (n, n + 32)]
    assert entry["gpus"][0]["functions"] == [fixturegen.RUNBOOK_GPU, fixturegen.RUNBOOK_HDA]
    assert entry["vf"]["pf"] == fixturegen.RUNBOOK_PF
    assert result["plan"]["irqbalance"]["banned_cpulist"] == "1-15,33-47"


def test_module_fails_32_vcpus_with_the_node_and_what_is_free(runbook_root):
    rc, status, result = adhoc({"root": runbook_root, "tenants": [dict(A100, vcpus=32)]},
                               check=False)
    assert rc != 0 and status == "FAILED!"
    assert result["field"] == "tenants[0].vcpus"
    assert "node 0" in result["msg"] and "free 15 (1-15,33-47)" in result["msg"]
    assert result["changed"] is False


def test_module_takes_the_topology_as_data_in_check_mode(runbook_root, tmp_path):
    data = topology_to_dict(read_host_topology(runbook_root, with_irqs=False))
    vars_file = tmp_path / "topology.json"
    vars_file.write_text(json.dumps({"recorded_topology": data}))
    rc, status, result = adhoc(
        {"root": str(tmp_path / "no-such-root"), "topology": "{{ recorded_topology }}",
         "tenants": [dict(A100, vcpus=8)], "smt_policy": "isolate"},
        "-e", "@%s" % vars_file, "--check")
    assert (rc, status) == (0, "SUCCESS")
    entry = result["plan"]["tenants"][0]
    assert entry["vcpu_pins"] == list(range(1, 9))
    assert entry["reserved_cpus"] == "33-40"


def test_module_rejects_an_unknown_smt_policy_through_the_spec(runbook_root):
    rc, status, result = adhoc({"root": runbook_root, "tenants": [A100],
                                "smt_policy": "mixed"}, check=False)
    assert rc != 0 and status == "FAILED!"
    assert "smt_policy" in result["msg"] and "require, prefer, isolate" in result["msg"]


def test_ansible_doc_renders_complete_documentation():
    text = run_tool("ansible-doc", MODULE).stdout
    for option in ("root", "topology", "tenants", "housekeeping", "smt_policy", "existing",
                   "hugepage_check", "emulator_policy", "EXAMPLES", "RETURN VALUES"):
        assert option in text, option
    doc = json.loads(run_tool("ansible-doc", "--json", MODULE).stdout)[MODULE]
    assert doc["doc"]["attributes"]["check_mode"]["support"] == "full"
    assert set(doc["return"]["plan"]["contains"]) >= {
        "tenants", "irqbalance", "hugepages", "housekeeping", "tenant_cpus"}
    examples = yaml.safe_load(doc["examples"])
    assert examples
    for task in examples:
        assert task.get("name"), task
        modules = [key for key in task if "." in key]
        assert modules and all(key.count(".") == 2 for key in modules), task
