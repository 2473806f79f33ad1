"""The gpuhost.kvm.tenants inventory plugin, run by the real ansible-inventory on an
inventory directory with host_vars, and on ledgers fetched to the controller."""

import json

import yaml

from support.helpers import run_tool

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger

A = {"name": "tenant-a", "gpus": 1, "vcpus": 4, "memory_gib": 8,
     "guest_address": "192.0.2.51/24", "guest_user": "ops"}
B = {"name": "tenant-b", "gpus": 1, "vcpus": 4, "memory_gib": 8,
     "guest_address": "192.0.2.52/24"}
NO_ADDRESS = {"name": "tenant-c", "gpus": 0, "vcpus": 2, "memory_gib": 4}


def plain(value):
    """ansible-inventory marks values from inventory plugins as unsafe in its JSON."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def write_inventory(tmp_path, plugin_config):
    # The ledgers stay out of the inventory directory, which Ansible reads file by file.
    tmp_path = tmp_path / "inventory"
    (tmp_path / "host_vars").mkdir(parents=True)
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"gpu_hosts": {"hosts": {"gpu-1": {}, "gpu-2": {}}}}}}))
    (tmp_path / "host_vars" / "gpu-1.yml").write_text(
        yaml.safe_dump({"gpuhost_tenants": [A, NO_ADDRESS]}))
    (tmp_path / "host_vars" / "gpu-2.yml").write_text(yaml.safe_dump({"gpuhost_tenants": [B]}))
    (tmp_path / "zz.tenants.yml").write_text(yaml.safe_dump(plugin_config))
    return tmp_path


def test_plugin_adds_guests_from_host_vars(tmp_path):
    inventory = write_inventory(tmp_path, {"plugin": "gpuhost.kvm.tenants"})
    proc = run_tool("ansible-inventory", "-i", inventory, "--list")
    data = plain(json.loads(proc.stdout))
    assert sorted(data["gpuhost_guests"]["hosts"]) == ["tenant-a", "tenant-b"]
    assert data["gpuhost_guests_gpu_1"]["hosts"] == ["tenant-a"]
    host_vars = data["_meta"]["hostvars"]["tenant-a"]
    assert (host_vars["ansible_host"], host_vars["ansible_user"],
            host_vars["gpuhost_tenant_host"]) == ("192.0.2.51", "ops", "gpu-1")
    assert "tenant-c of gpu-1 is not added: no guest_address" in proc.stderr


def test_plugin_ledger_source_reads_fetched_ledgers(tmp_path):
    ledgers = tmp_path / "ledgers"
    ledgers.mkdir()
    entry = {"name": "tenant-b", "node": 1, "vcpu_pins": [2, 34]}
    ledger.write_ledger(str(ledgers / "gpu-2.json"), ledger.LedgerData(tenants=[entry]))
    inventory = write_inventory(tmp_path, {"plugin": "gpuhost.kvm.tenants", "source": "ledger",
                                           "ledger_dir": "../ledgers"})
    proc = run_tool("ansible-inventory", "-i", inventory, "--list")
    data = plain(json.loads(proc.stdout))
    assert data["gpuhost_guests"]["hosts"] == ["tenant-b"]
    assert data["_meta"]["hostvars"]["tenant-b"]["gpuhost_tenant_plan"] == entry
    assert "tenant-a of gpu-1 is not added: defined but not in the ledger" in proc.stderr


def test_plugin_stops_on_a_corrupt_ledger(tmp_path):
    ledgers = tmp_path / "ledgers"
    ledgers.mkdir()
    (ledgers / "gpu-1.json").write_text('{"format": "gpuhost.kvm/ledger", "trunc')
    inventory = write_inventory(tmp_path, {"plugin": "gpuhost.kvm.tenants", "source": "ledger",
                                           "ledger_dir": "../ledgers"})
    proc = run_tool("ansible-inventory", "-i", inventory, "--list", check=False)
    # Ansible reports a failed inventory source and goes on with the others: the GPU
    # hosts are there, the guests are not (no guess from a ledger that cannot be trusted).
    assert "ledgers/gpu-1.json is corrupt" in proc.stderr
    data = plain(json.loads(proc.stdout))
    assert "gpuhost_guests" not in data
    assert sorted(data["gpu_hosts"]["hosts"]) == ["gpu-1", "gpu-2"]
