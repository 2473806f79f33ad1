# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVSwitch boards, on a fake HGX H100 host built from published lspci output (the
NVSwitch's class, IDs and driver; tests/fixtures/published/README.md names the source):
the plan reports the fabric, a one-GPU tenant is placed as on any host, and a tenant with
several of the board's GPUs is refused with the reason (CUDA error 802 without an NVLink
partition) and what to do. No Fabric Manager runs here."""

from __future__ import annotations

import pytest
from support.fixturegen import build_eight_gpu_host, build_hgx_h100_host

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement

NVSWITCHES = ["0000:0b:00.0", "0000:0c:00.0", "0000:8b:00.0", "0000:8c:00.0"]
ONE = {"name": "one", "gpus": 1, "vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"}


@pytest.fixture(scope="module")
def hgx(tmp_path_factory):
    root = tmp_path_factory.mktemp("hgx")
    build_hgx_h100_host(str(root))
    return read_host_topology(str(root), with_irqs=False)


def test_the_hgx_fake_from_published_lspci_reports_its_fabric(hgx):
    assert [a for a, f in sorted(hgx.pci.items()) if f.is_nvswitch] == NVSWITCHES
    plan = plan_placement(hgx, [ONE], hugepage_check="none")
    assert plan["fabric"]["nvswitches"] == NVSWITCHES
    assert len(plan["fabric"]["gpus"]) == 8 and "0000:18:00.0" in plan["fabric"]["gpus"]
    # the NVSwitches are no GPUs: a one-GPU tenant gets an H100, as on any host
    assert plan["tenants"][0]["gpus"][0]["address"] in plan["fabric"]["gpus"]


@pytest.mark.parametrize("gpus", [2, ["0000:18:00.0", "0000:2a:00.0"]])
def test_a_multi_gpu_tenant_on_the_hgx_fake_is_refused_with_the_reason(hgx, gpus):
    with pytest.raises(GpuhostError) as refused:
        plan_placement(hgx, [dict(ONE, name="two", gpus=gpus)], hugepage_check="none")
    assert refused.value.field == "tenants[0].gpus"
    assert "error 802" in refused.value.msg and "0000:0b:00.0" in refused.value.msg
    assert "give the tenant one GPU" in refused.value.fix


def test_a_host_without_nvswitches_has_no_fabric_and_places_two_gpus(tmp_path):
    build_eight_gpu_host(str(tmp_path))
    plan = plan_placement(read_host_topology(str(tmp_path), with_irqs=False),
                          [dict(ONE, name="two", gpus=2)], hugepage_check="none")
    assert "fabric" not in plan and len(plan["tenants"][0]["gpus"]) == 2
