# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reset facts and tenant_scrub against the lab's real kernel (offboarding
scrubs): what iommu_groups_facts reports about GPU0's reset capability must be what the
kernel's own ``reset`` and ``reset_method`` files say, and tenant_scrub must reset the
functions the kernel can reset (the write reaches pci_reset_function) or refuse the
ones it cannot, with the ledger left as it was either way.

Whether QEMU's emulated display and HDA functions have a reset method is the kernel's
answer, read here first; the test checks the module against it in both cases.
"""

import json
import shlex

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger as ledger_core

pytestmark = pytest.mark.lab

GPU0, GPU0_HDA = "0000:21:00.0", "0000:21:00.1"
PCI = "/sys/bus/pci/devices/"
LEDGER = "/tmp/gpuhost-scrub-lab/ledger.json"
TENANT = "tenant-scrublab"


def _ok(lab, name, args, **kwargs):
    rc, result = lab.module(name, args, **kwargs)
    assert rc == 0, "%s failed: %s; console log: %s" % (
        name, json.dumps(result, indent=1)[:6000], lab.console_log)
    return result


def _kernel_reset(lab, address):
    """(reset file present, reset_method words or None without the file), from the lab."""
    has_reset = lab.ssh("test -e %s%s/reset" % (PCI, address), check=False).returncode == 0
    proc = lab.ssh("cat %s%s/reset_method" % (PCI, address), check=False)
    return has_reset, (proc.stdout.split() if proc.returncode == 0 else None)


def _write_ledger(lab):
    data = ledger_core.LedgerData(tenants=[{
        "name": TENANT, "gpus": [{"address": GPU0, "functions": [GPU0, GPU0_HDA]}],
        "vf": None}], serial=1)
    lab.ssh("mkdir -p %s && cat > %s" % (shlex.quote(LEDGER.rsplit("/", 1)[0]),
                                         shlex.quote(LEDGER)),
            input_text=ledger_core.render_ledger(data, now="2026-12-03T00:00:00Z"))


def test_reset_facts_match_the_kernel_and_the_scrub_resets_or_refuses(lab):
    kernel = {a: _kernel_reset(lab, a) for a in (GPU0, GPU0_HDA)}
    facts = _ok(lab, "gpuhost.kvm.iommu_groups_facts", None)["ansible_facts"]["gpuhost_iommu"]
    gpu = next(g for g in facts["gpus"] if g["address"] == GPU0)
    reported = {r["address"]: r for r in gpu["reset_methods"]}
    for address, (has_reset, methods) in kernel.items():
        assert reported[address]["reset_file"] is has_reset, (address, reported, kernel)
        if methods is not None:
            assert reported[address]["reset_methods"] == methods, (address, reported)
    usable = {a: reported[a]["usable"] for a in kernel}
    # A function without a reset file of its own, alone with its GPU on a bus behind a
    # bridge, is reset by vfio-pci when the domain lets it go (pci.vfio_resets_on_release):
    # the facts say so, and the scrub neither writes to it nor refuses it.
    by_vfio = {f["address"] for f in facts["reset_findings"]
               if f["gpu"] == GPU0 and f["id"] == "gpu_reset_by_vfio"}
    assert by_vfio <= {a for a, ok in usable.items() if ok is False}, (by_vfio, usable)
    # A function whose only method is a bus reset, beside another function on its bus
    # (the lab's 21:00.0 reads "bus" beside its HDA), is refused that reset by the kernel
    # (ENOTTY: the first run of this test); vfio-pci's bus reset on release wipes it.
    bus_beside = {a for a in (GPU0, GPU0_HDA)
                  if reported[a]["bus_only"] and reported[a]["bus_siblings"]}
    writable = [a for a in (GPU0, GPU0_HDA) if usable[a] and a not in bus_beside]
    wiped = all(usable[a] or a in by_vfio for a in (GPU0, GPU0_HDA))
    print("kernel reset files: %s; reset by vfio-pci: %s" % (kernel, sorted(by_vfio)))

    _ok(lab, "gpuhost.kvm.vfio_bind", {"devices": [GPU0]})
    try:
        _write_ledger(lab)
        ledger_before = lab.read(LEDGER)
        args = {"name": TENANT, "ledger_path": LEDGER}
        if wiped:
            planned = _ok(lab, "gpuhost.kvm.tenant_scrub", args, check_mode=True)
            assert planned["steps"] == ["write 1 to %s%s/reset" % (PCI, a)
                                        for a in writable], planned
            assert planned["reset"] == []
            done = _ok(lab, "gpuhost.kvm.tenant_scrub", args)
            assert done["reset"] == writable, done
            for address in (GPU0, GPU0_HDA):      # still vfio-pci's, ready for the next
                link = lab.ssh("readlink %s%s/driver" % (PCI, address)).stdout.strip()
                assert link.endswith("/vfio-pci"), (address, link)
        else:
            rc, refused = lab.module("gpuhost.kvm.tenant_scrub", args)
            assert rc != 0 and refused.get("field") == "allow_no_reset", refused
            assert "stays held" in refused["msg"]
            assert {f["address"] for f in facts["reset_findings"]
                    if f["gpu"] == GPU0 and f["id"] == "gpu_no_reset"} == {
                a for a, ok in usable.items() if ok is False and a not in by_vfio}
        assert lab.read(LEDGER) == ledger_before       # the scrub never releases
    finally:
        lab.ssh("rm -rf %s" % shlex.quote(LEDGER.rsplit("/", 1)[0]), check=False)
        _ok(lab, "gpuhost.kvm.vfio_bind", {"devices": [GPU0], "state": "unbound"})
