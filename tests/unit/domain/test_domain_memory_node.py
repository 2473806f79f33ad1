"""A GPU on a memoryless NUMA node: the planner backs the tenant with the
nearest node that has memory and records it as the plan's ``memory_node``; the domain
preflight accepts that node for the memory, and only for a GPU node without memory."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_query
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.preflight import run_preflight
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

from support.domain_xml import runbook_tenant, runbook_topology


def memoryless(topo, node=0):
    topo.nodes[node].mem_total_kib = 0
    topo.nodes[node].mem_free_kib = 0
    return topo


def borrowing_tenant(memory_node=1):
    tenant = runbook_tenant()
    tenant["memory_node"] = memory_node
    tenant["numatune"] = {"mode": "strict", "nodeset": str(memory_node)}
    tenant["hugepages"] = {str(memory_node): tenant["memory_gib"]}
    return tenant


def test_the_plans_memory_node_is_accepted_for_a_memoryless_gpu_node():
    report = run_preflight(domain_model.spec_from_plan(borrowing_tenant()), memoryless(runbook_topology()), [])
    assert report.refusals == [] and report.warnings == []


def test_the_memory_node_is_refused_when_the_gpu_node_has_memory():
    report = run_preflight(domain_model.spec_from_plan(borrowing_tenant()), runbook_topology(), [])
    [refusal] = report.refusals
    assert refusal.field == "plan.numatune.nodeset"
    assert "memory nodeset is 1" in refusal.reason
    assert "memory_node" in refusal.reason and "has memory" in refusal.reason
    assert refusal.override == "allow_cross_node"


def test_without_memory_node_another_nodeset_is_still_refused():
    tenant = borrowing_tenant()
    del tenant["memory_node"]
    report = run_preflight(domain_model.spec_from_plan(tenant), memoryless(runbook_topology()), [])
    assert [r.field for r in report.refusals] == ["plan.numatune.nodeset"]


def test_a_memory_node_that_is_not_the_nodeset_or_has_no_memory_is_refused():
    # nodeset and memory_node disagree: the plan was edited by hand.
    tenant = borrowing_tenant()
    tenant["memory_node"] = 0
    report = run_preflight(domain_model.spec_from_plan(tenant), memoryless(runbook_topology()), [])
    assert [r.field for r in report.refusals] == ["plan.numatune.nodeset"]
    # Both nodes without memory: node 1 cannot back the tenant either.
    topo = memoryless(memoryless(runbook_topology()), 1)
    report = run_preflight(domain_model.spec_from_plan(borrowing_tenant()), topo, [])
    assert "plan.numatune.nodeset" in [r.field for r in report.refusals]


@pytest.mark.parametrize("value", ["one", -1, float("inf"), True])
def test_a_memory_node_that_is_not_a_node_number_is_refused(value):
    tenant = borrowing_tenant()
    tenant["memory_node"] = value
    with pytest.raises(GpuhostError) as info:
        domain_model.spec_from_plan(tenant)
    assert info.value.field == "plan.memory_node"


def test_tenant_summary_names_the_memory_node():
    tenant = borrowing_tenant()
    lines = plan_query.tenant_summary({"tenants": [tenant]}, "tenant-a100")
    assert "memory 32 GiB in 1G pages on node 1 (the nearest node with memory to " \
        "node 0, which has none)" in lines
    assert lines[0] == "tenant tenant-a100 on NUMA node 0"
    same = runbook_tenant()
    same["memory_node"] = 0
    assert "memory 32 GiB in 1G pages on node 0" in plan_query.tenant_summary(
        {"tenants": [same]}, "tenant-a100")
    # A plan from before memory_node existed: the memory is on the tenant's node.
    assert "memory 32 GiB in 1G pages on node 0" in plan_query.tenant_summary(
        {"tenants": [runbook_tenant()]}, "tenant-a100")
