"""Tenant guests as inventory hosts: the pure builder (plugin_utils/tenant_inventory.py)
behind the gpuhost.kvm.tenants inventory plugin."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.plugin_utils.tenant_inventory import guest_hosts

A = {"name": "tenant-a", "gpus": 1, "vcpus": 4, "memory_gib": 8,
     "guest_address": "192.0.2.51/24", "guest_user": "ops"}
B = {"name": "tenant-b", "gpus": 1, "vcpus": 4, "memory_gib": 8,
     "guest_address": "192.0.2.52/24"}
NO_ADDRESS = {"name": "tenant-c", "gpus": 0, "vcpus": 2, "memory_gib": 4}


def test_definitions_become_guests_with_address_user_and_gpu_host():
    guests, skipped = guest_hosts({"gpu-1": [A, NO_ADDRESS], "gpu-2": [B]})
    assert sorted(guests) == ["tenant-a", "tenant-b"]
    assert guests["tenant-a"] == {"ansible_host": "192.0.2.51", "ansible_user": "ops",
                                  "gpuhost_tenant_host": "gpu-1", "gpuhost_tenant": A}
    assert guests["tenant-b"]["ansible_user"] == "gpuhost"
    assert guests["tenant-b"]["gpuhost_tenant_host"] == "gpu-2"
    assert skipped == [("tenant-c", "gpu-1", "no guest_address")]


def test_ledger_source_keeps_only_placed_tenants_and_adds_their_plan_entry():
    plan_entry = {"name": "tenant-a", "node": 0, "vcpu_pins": [1, 33]}
    ghost = {"name": "ghost", "node": 1}
    guests, skipped = guest_hosts({"gpu-1": [A, B]}, {"gpu-1": [plan_entry, ghost]})
    assert list(guests) == ["tenant-a"]
    assert guests["tenant-a"]["gpuhost_tenant_plan"] == plan_entry
    assert sorted(skipped) == [
        ("ghost", "gpu-1", "in the ledger but not defined in gpuhost_tenants, so its "
                           "address is unknown"),
        ("tenant-b", "gpu-1", "defined but not in the ledger (not onboarded)")]


def test_same_tenant_name_on_two_hosts_is_refused():
    with pytest.raises(GpuhostError) as info:
        guest_hosts({"gpu-1": [A], "gpu-2": [dict(B, name="tenant-a")]})
    assert "tenant-a is defined on both gpu-1 and gpu-2" in str(info.value)


def test_nameless_tenant_is_refused_with_its_place():
    with pytest.raises(GpuhostError) as info:
        guest_hosts({"gpu-1": [{"gpus": 1}]})
    assert info.value.field == "gpu-1.gpuhost_tenants[0]"
