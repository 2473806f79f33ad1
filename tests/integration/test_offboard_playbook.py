# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tenant_offboard.yml for real (ansible-playbook, local connection, libvirt's test
driver) on the synthetic runbook host: a scrub that is refused stops the play before
the ledger step, so the tenant stays held and its GPU cannot go to anyone else."""

import json
import os

from support.helpers import REPO, folded, run_tool
from support.helpers import INVENTORY, point_hk_gpu_01_at

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger as ledger_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology

TENANT = {"name": "tenant-a100", "gpus": ["0000:65:00.0"], "vcpus": 4, "memory_gib": 4,
          "hugepage_size": "2M"}


def _host_holding_the_tenant(tmp_path):
    """The synthetic runbook host for hk-gpu-01, its ledger holding TENANT: (host, path)."""
    host = point_hk_gpu_01_at(tmp_path)
    path = host["vars"]["gpuhost_ledger_path"]
    data = ledger_core.reserve(ledger_core.LedgerData(),
                               read_host_topology(host["root"], with_irqs=False), [TENANT])[0]
    with ledger_core.locked(path):
        ledger_core.write_ledger(path, data)
    return host, path


def test_a_refused_scrub_keeps_the_tenant_in_the_ledger(tmp_path, module_python):
    host, path = _host_holding_the_tenant(tmp_path)
    with open(path) as handle:
        before = handle.read()
    # The runbook host's GPU is still on nvidia: its domain's device went back to a host
    # driver, so the scrub must refuse to reset it under that driver.
    proc = run_tool("ansible-playbook", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", host["extra"], "-e", "tenant=tenant-a100",
                    os.path.join(REPO, "playbooks", "tenant_offboard.yml"), check=False)
    assert proc.returncode != 0, proc.stdout[-3000:]
    # The YAML callback wraps the message where its version's width says: folded.
    out = folded(proc.stdout)
    assert "Reset the tenant's GPU functions and clear its VF" in out
    assert "0000:65:00.0 is on nvidia, not vfio-pci" in out
    assert "its ledger entry stays held" in out
    assert "Release the tenant's resources in the ledger" not in out
    with open(path) as handle:
        assert handle.read() == before
    assert json.loads(before)["body"]["tenants"][0]["name"] == "tenant-a100"


def _to_vfio(root, address):
    """What vfio_bind leaves: the function bound to vfio-pci (driver link both ways)."""
    device = os.path.realpath(os.path.join(root, "sys/bus/pci/devices", address))
    drivers = os.path.join(root, "sys/bus/pci/drivers", "vfio-pci")
    os.makedirs(drivers, exist_ok=True)
    link = os.path.join(device, "driver")
    if os.path.lexists(link):
        old = os.path.realpath(link)
        os.unlink(link)
        if os.path.lexists(os.path.join(old, address)):
            os.unlink(os.path.join(old, address))
    os.symlink(os.path.relpath(drivers, device), link)
    os.symlink(os.path.relpath(device, drivers), os.path.join(drivers, address))
    return device


def test_offboarding_scrubs_then_releases(tmp_path):
    host, path = _host_holding_the_tenant(tmp_path)
    devices = [_to_vfio(host["root"], a) for a in ("0000:65:00.0", "0000:65:00.1")]
    proc = run_tool("ansible-playbook", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", host["extra"], "-e", "tenant=tenant-a100",
                    os.path.join(REPO, "playbooks", "tenant_offboard.yml"), timeout=600)
    out = proc.stdout
    scrub_at = out.index("Reset the tenant's GPU functions and clear its VF")
    assert out.index("Remove the tenant's domain") < scrub_at < out.index(
        "Release the tenant's resources in the ledger")
    # below a test root the one writer writes the reset files as plain files: the GPU's
    # (FLR) got its "1"; the HDA's only method is a bus reset, which the kernel refuses
    # beside the GPU (ENOTTY, as on the lab), so it is left to vfio-pci's bus reset
    gpu, hda = devices
    with open(os.path.join(gpu, "reset")) as handle:
        assert handle.read() == "1"
    with open(os.path.join(hda, "reset")) as handle:
        assert handle.read() == ""
    assert "tenant-a100" not in ledger_core.read_ledger(path).names()
