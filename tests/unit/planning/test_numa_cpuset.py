# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The numa_cpuset module object: argument spec, the planner class and its result."""

import json

import pytest

from support.module_args import patch_module_args

from support import fixturegen
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    read_host_topology,
    topology_to_dict,
)
from ansible_collections.gpuhost.kvm.plugins.modules import numa_cpuset as mod

A100 = {"name": "tenant-a100", "gpus": 1, "vcpus": 30, "memory_gib": 64,
        "hugepage_size": "1G", "nic_vf": True, "iothreads": 2}


@pytest.fixture(scope="module")
def runbook_root(tmp_path_factory):
    return fixturegen.build_runbook_host(str(tmp_path_factory.mktemp("runbook")))


def planner(args):
    with patch_module_args(args):
        module = mod.build_module()
    return mod.NumaCpusetPlanner(module)


def test_module_reads_the_root_tree_and_returns_an_unchanged_plan(runbook_root):
    run = planner({"root": runbook_root, "tenants": [A100]})
    run.run()
    result = run.result
    assert result["changed"] is False
    assert result["plan"]["tenants"][0]["vcpu_pins"][:4] == [1, 33, 2, 34]
    assert result["plan"]["tenants"][0]["vf"]["pf"] == fixturegen.RUNBOOK_PF


def test_module_fills_tenant_defaults_from_the_spec(runbook_root):
    run = planner({"root": runbook_root,
                   "tenants": [{"name": "small", "vcpus": 2, "memory_gib": 4}]})
    run.run()
    entry = run.result["plan"]["tenants"][0]
    assert entry["gpus"][0]["address"] == fixturegen.RUNBOOK_GPU     # gpus: 1
    assert entry["hugepage_size_kib"] == 1048576                     # 1G
    assert entry["vf"] is None                                       # nic_vf: false
    assert entry["iothreads"] == 0 and entry["iothread_cpus"] is None
    assert entry["emulator_policy"] == "housekeeping"
    assert run.result["plan"]["smt_policy"] == "require"


def test_module_with_topology_data_plans_the_same_as_from_the_tree(runbook_root):
    data = json.loads(json.dumps(topology_to_dict(read_host_topology(runbook_root))))
    from_data = planner({"root": "/nonexistent", "topology": data, "tenants": [A100]})
    from_data.run()
    from_tree = planner({"root": runbook_root, "tenants": [A100]})
    from_tree.run()
    assert from_data.result == from_tree.result


def test_module_keeps_existing_tenants(runbook_root):
    first = planner({"root": runbook_root, "tenants": [dict(A100, vcpus=8)]})
    first.run()
    second = planner({"root": runbook_root, "existing": first.result["plan"]["tenants"],
                      "tenants": [{"name": "b", "gpus": 0, "vcpus": 4, "memory_gib": 4}]})
    second.run()
    assert second.result["plan"]["tenants"][0] == first.result["plan"]["tenants"][0]


def test_module_failure_is_a_gpuhost_error_with_the_field(runbook_root):
    run = planner({"root": runbook_root, "tenants": [dict(A100, vcpus=32)]})
    with pytest.raises(GpuhostError) as excinfo:
        run.run()
    result = dict(run.result, **excinfo.value.to_result())
    assert result["changed"] is False
    assert result["plan"] is None
    assert result["field"] == "tenants[0].vcpus"
    assert "node 0" in result["msg"] and "whole cores" in result["msg"]
    assert result["details"]["nodes"][0]["free"] == "15 (1-15,33-47)"


def test_module_spec_offers_the_documented_choices():
    with patch_module_args({"tenants": []}):
        module = mod.build_module()
    spec = module.argument_spec
    assert spec["smt_policy"]["choices"] == ["require", "prefer", "isolate"]
    assert spec["hugepage_check"]["choices"] == ["memory", "free", "none"]
    assert spec["tenants"]["options"]["emulator_policy"]["choices"] == \
        ["housekeeping", "dedicated"]
    assert spec["root"]["default"] == "/"
    assert module.supports_check_mode


def test_module_takes_nic_vf_as_a_mapping_of_vf_settings(runbook_root):
    run = planner({"root": runbook_root,
                   "tenants": [dict(A100, nic_vf={"mac": "52:54:00:6C:00:01", "vlan": 100})]})
    run.run()
    vf = run.result["plan"]["tenants"][0]["vf"]
    assert (vf["index"], vf["mac"], vf["vlan"], vf["spoofchk"], vf["trust"]) == \
        (0, "52:54:00:6c:00:01", 100, True, False)
    bad = planner({"root": runbook_root, "tenants": [dict(A100, nic_vf={"vlan": 4095})]})
    with pytest.raises(GpuhostError) as excinfo:
        bad.run()
    assert excinfo.value.field == "tenants[0].nic_vf.vlan"
