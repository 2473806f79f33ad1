# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuhost_gpu_devices through the plan role: playbooks/plan.yml against the synthetic
runbook host with QEMU's pci-testdev (1b36:0005, class 0x00ff, one 64 GiB 64-bit
prefetchable BAR) added beside the A100, and a tenant that asks for the stand-in by
address. The inventory's list makes it a GPU for tenant_ledger; without it, or with a
hostile entry, the plan fails naming the option."""

import json
import re

import pytest

from support import fixturegen
from support.helpers import INVENTORY, point_hk_gpu_01_at, run_tool

TESTDEV = "0000:66:00.0"
GIB = 1 << 30
TENANT = {"name": "tenant-testdev", "gpus": [TESTDEV], "vcpus": 2, "memory_gib": 4,
          "hugepage_size": "2M"}


def _with_testdev(root, **overrides):
    spec_devices = (fixturegen.gpu(fixturegen.RUNBOOK_GPU, 0)
                    + fixturegen.sriov_pf(fixturegen.RUNBOOK_PF, 0, vfs=8, totalvfs=8)
                    + [fixturegen.PciDeviceSpec(
                        address=TESTDEV, class_code=0x00FF00, vendor=0x1B36, device=0x0005,
                        node=0, bars=((2, 64 * GIB, fixturegen.BAR_MEM64_PREF),),
                        reset_method="flr")])
    return fixturegen.build_runbook_host(root, devices=spec_devices, **overrides)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    return point_hk_gpu_01_at(tmp_path_factory.mktemp("testdev"), build=_with_testdev)


def _plan(host, **extra):
    return run_tool("ansible-playbook", "playbooks/plan.yml", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", host["extra"], "-e", json.dumps(dict(extra, gpuhost_tenants=[TENANT])),
                    check=False)


def _failed(proc):
    match = re.search(r"^hk-gpu-01\s*:.*failed=(\d+)", proc.stdout, re.M)
    assert match, proc.stdout[-3000:]
    return int(match.group(1))


@pytest.mark.parametrize("devices", [["1b36:0005"], [TESTDEV]])
def test_the_listed_stand_in_is_planned_as_a_gpu_with_its_64g_bar(host, devices):
    proc = _plan(host, gpuhost_gpu_devices=devices)
    assert _failed(proc) == 0, proc.stdout[-3000:]
    markdown = (host["base"] / "reports" / "hk-gpu-01" / "plan.md").read_text()
    assert re.search(r"^\| GPU \| %s \| tenant-testdev \| IOMMU group \d+, 64-bit BARs 64 GiB \|$"
                     % re.escape(TESTDEV), markdown, re.M), markdown
    # The width rule counted the 64 GiB BAR: the tenant's 64-bit window holds it.
    window = re.search(r"tenant-testdev: guest address width (\d+) bits, 64-bit PCI window "
                       r"[^ ]+ \((\d+) GiB,", markdown)
    assert window and int(window.group(2)) >= 64, markdown


@pytest.mark.parametrize("devices, text", [
    ([], "%s is not a GPU (class 0x00ff00)" % TESTDEV),
    (["1b36:0005\n"], "gpu_devices[0]: '1b36:0005\\n' is neither a vendor:device ID nor a PCI address"),
])
def test_without_the_list_or_with_a_hostile_entry_the_plan_fails_naming_it(host, devices, text):
    proc = _plan(host, gpuhost_gpu_devices=devices)
    assert _failed(proc) == 1
    assert text in proc.stdout, proc.stdout[-3000:]
