"""A simulated fleet for fleet_capacity.yml: N inventory hosts on the local connection,
each reading one of a few synthetic host models (tests/support/fixturegen.py) through
gpuhost_sysfs_root and its own allocation ledger through gpuhost_ledger_path.

Hosts of one model share its sysfs tree (a fleet is mostly identical servers); their
ledgers differ, so their free capacity differs. Building four trees instead of N keeps a
200-host fleet quick to generate."""

import os

import yaml

from . import fixturegen
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger as ledger_mod
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology

MODELS = {
    "runbook": fixturegen.build_runbook_host,
    "eight_gpu": fixturegen.build_eight_gpu_host,
    "amd_nps4": fixturegen.build_amd_nps4_host,
    "dirty_usb": fixturegen.build_dirty_usb_group_host,
}
# Every simulated tenant; a host runs index % 3 of them, at most its model's clean GPUs.
TENANT = {"gpus": 1, "vcpus": 4, "memory_gib": 8, "hugepage_size": "2M"}
MAX_TENANTS = {"runbook": 1, "dirty_usb": 1, "eight_gpu": 2, "amd_nps4": 2}


def model_of(index):
    return sorted(MODELS)[index % len(MODELS)]


def build_models(base):
    roots = {}
    for name, builder in MODELS.items():
        roots[name] = builder(os.path.join(base, "models", name))
    return roots


def host_name(index):
    return "gpu-%03d" % index


def build_fleet(base, count, broken=()):
    """Write models, ledgers and an inventory below ``base``; return (inventory, expected).

    ``expected[host]`` is the list of tenant names the host's ledger holds, or the string
    "error" for the hosts in ``broken`` (their ledger is corrupt)."""
    roots = build_models(base)
    topologies = {name: read_host_topology(root, with_irqs=False) for name, root in roots.items()}
    hosts, expected = {}, {}
    for index in range(count):
        name, model = host_name(index), model_of(index)
        ledger_path = os.path.join(base, "ledgers", name, "ledger.json")
        os.makedirs(os.path.dirname(ledger_path), exist_ok=True)
        if name in broken:
            with open(ledger_path, "w", encoding="utf-8") as handle:
                handle.write('{"format": "gpuhost.kvm/ledger", "trunc')
            expected[name] = "error"
        else:
            wanted = [dict(TENANT, name="t%03d-%d" % (index, k)) for k in range(min(index % 3, MAX_TENANTS[model]))]
            data = ledger_mod.LedgerData()
            if wanted:
                data = ledger_mod.reserve(data, topologies[model], wanted,
                                          hugepage_check="none")[0]
                ledger_mod.write_ledger(ledger_path, data)
            expected[name] = [t["name"] for t in wanted]
        hosts[name] = {"ansible_connection": "local",
                       "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                       "gpuhost_sysfs_root": roots[model],
                       "gpuhost_ledger_path": ledger_path,
                       "fleet_sim_model": model}
    inventory = os.path.join(base, "hosts.yml")
    with open(inventory, "w", encoding="utf-8") as handle:
        yaml.safe_dump({"all": {"children": {"gpu_hosts": {"hosts": hosts}}}}, handle)
    return inventory, expected
