# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU verdicts, dirty groups, SR-IOV listing and security findings."""


import pytest

from support import realtrees

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import iommu, topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

from support import fixturegen


def _report(root, **kwargs):
    return iommu.analyse_iommu(topology.read_host_topology(root, with_irqs=False), **kwargs)


def test_runbook_gpu_is_isolated_with_its_hda(tmp_path):
    report = _report(fixturegen.build_runbook_host(str(tmp_path)))
    assert report.enabled and report.vendor == "intel" and report.passthrough
    assert [g.address for g in report.gpus] == [fixturegen.RUNBOOK_GPU]
    gpu = report.gpus[0]
    assert gpu.isolated and gpu.reasons == []
    assert gpu.companions == (fixturegen.RUNBOOK_HDA,)
    assert gpu.numa_node == 0 and gpu.driver == "nvidia"
    assert gpu.bar64_total == (128 << 30) + (32 << 20)
    # read from sysfs resource files: each 64-bit prefetchable BAR of GPU and HDA
    assert gpu.bar64_sizes == (128 << 30, 32 << 20)
    assert gpu.to_dict()["bar64_sizes"] == [128 << 30, 32 << 20]
    assert gpu.reset_method == ("flr", "bus") and gpu.vendor_device == "10de:20b5"
    assert report.dirty_groups == [] and report.security_findings == []


def test_runbook_sriov_pf_lists_its_vfs(tmp_path):
    report = _report(fixturegen.build_runbook_host(str(tmp_path)))
    assert len(report.sriov_pfs) == 1
    pf = report.sriov_pfs[0]
    assert pf["address"] == fixturegen.RUNBOOK_PF and pf["vendor_device"] == "15b3:101d"
    assert (pf["totalvfs"], pf["numvfs"], pf["numa_node"]) == (8, 8, 0)
    assert [vf["address"] for vf in pf["vfs"]][:2] == ["0000:41:00.2", "0000:41:00.3"]
    assert len({vf["iommu_group"] for vf in pf["vfs"]}) == 8


def test_gpu_sharing_a_group_with_a_usb_controller_is_dirty(tmp_path):
    report = _report(fixturegen.build_dirty_usb_group_host(str(tmp_path)))
    verdicts = {g.address: g for g in report.gpus}
    dirty = verdicts[fixturegen.DIRTY_GPU]
    assert not dirty.isolated
    assert "0000:02:00.0 (USB controller, class 0x0c0330)" in dirty.reasons[0]
    assert dirty.companions == ("0000:01:00.1",)
    assert verdicts["0000:05:00.0"].isolated
    assert report.dirty_groups == [{
        "group": dirty.iommu_group, "gpus": [fixturegen.DIRTY_GPU],
        "foreign": [{"address": fixturegen.DIRTY_USB, "class_name": "USB controller",
                     "class_code": "0x0c0330", "driver": "xhci_hcd"}]}]
    # the two root ports share the group too, and bridges are no reason to refuse
    members = [g for g in report.groups if g["group"] == dirty.iommu_group][0]["devices"]
    assert {m["class_name"] for m in members} == {
        "PCI bridge", "VGA compatible controller", "Audio device", "USB controller"}


def test_group_members_verdict(tmp_path):
    topo = topology.read_host_topology(
        fixturegen.build_dirty_usb_group_host(str(tmp_path)), with_irqs=False)
    verdict = iommu.group_members_verdict(topo, ["01:00.0", "0000:01:00.1"])
    assert not verdict.clean and verdict.group == topo.pci[fixturegen.DIRTY_GPU].iommu_group
    assert [f["address"] for f in verdict.foreign] == [fixturegen.DIRTY_USB]
    clean = iommu.group_members_verdict(topo, ["0000:05:00.0"])
    assert clean.clean and clean.foreign == [] and clean.reasons == []
    with pytest.raises(GpuhostError) as err:
        iommu.group_members_verdict(topo, ["0000:77:00.0"])
    assert err.value.field == "addresses"
    with pytest.raises(GpuhostError):
        iommu.group_members_verdict(topo, ["not-an-address"])


def test_acs_override_is_a_finding_and_isolates_nothing(tmp_path):
    root = fixturegen.build_runbook_host(
        str(tmp_path), cmdline="ro intel_iommu=on iommu=pt pcie_acs_override=downstream")
    report = _report(root)
    assert [f["id"] for f in report.security_findings] == ["pcie_acs_override"]
    assert "peer-to-peer" in report.security_findings[0]["msg"]
    assert not report.gpus[0].isolated
    assert "pcie_acs_override" in report.gpus[0].reasons[0]


def test_iommu_off_means_no_gpu_is_isolated(tmp_path):
    root = fixturegen.build_runbook_host(str(tmp_path), iommu=None, cmdline="ro quiet")
    report = _report(root)
    assert not report.enabled and report.groups == []
    assert not report.gpus[0].isolated and report.gpus[0].iommu_group is None
    assert report.gpus[0].reasons == [
        "the IOMMU is off: enable VT-d/AMD-Vi in the BIOS and boot with intel_iommu=on "
        "or amd_iommu=on"]


def test_missing_interrupt_remapping_is_a_finding(tmp_path):
    report = _report(fixturegen.build_runbook_host(str(tmp_path), interrupt_remapping=False))
    assert [f["id"] for f in report.security_findings] == ["no_interrupt_remapping"]


def test_gpu_vendor_filter_on_amd_host(tmp_path):
    root = fixturegen.build_amd_nps4_host(str(tmp_path))
    everything = _report(root)
    assert len(everything.gpus) == 5 and everything.vendor == "amd"
    nvidia = _report(root, gpu_vendor="10de")
    amd = _report(root, gpu_vendor="0x1002")
    assert len(nvidia.gpus) == 4 and [g.address for g in amd.gpus] == ["0000:81:00.0"]
    assert amd.gpus[0].class_name == "Display controller"
    assert {g.numa_node for g in nvidia.gpus} == {1, 2, 5, 6}
    assert len(nvidia.groups) == len(everything.groups)


@pytest.mark.parametrize("value", ["nvidia", "10de0", "0x", 70000, True])
def test_bad_gpu_vendor_names_the_field(value):
    with pytest.raises(GpuhostError) as err:
        iommu.parse_gpu_vendor(value)
    assert err.value.field == "gpu_vendor" and "10de" in err.value.message


def test_eight_gpu_host_all_isolated(tmp_path):
    report = _report(fixturegen.build_eight_gpu_host(str(tmp_path)))
    assert len(report.gpus) == 8 and all(g.isolated for g in report.gpus)
    assert [g.numa_node for g in report.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(g.companions == () for g in report.gpus)
    assert len(report.sriov_pfs) == 2


def test_real_laptop_groups_and_its_igpu():
    report = _report(realtrees.tree(realtrees.LAPTOP_IOMMU))
    assert len(report.groups) == 15
    assert [g.address for g in report.gpus] == ["0000:00:02.0"]
    assert report.gpus[0].isolated and report.gpus[0].iommu_group == 0
    shared = [g for g in report.groups if g["group"] == 13][0]
    assert [d["class_name"] for d in shared["devices"]] == [
        "ISA bridge", "Audio device", "SMBus", "Serial bus controller"]


def test_real_tree_without_iommu_still_reports_gpu():
    report = _report(realtrees.tree(realtrees.SANDY_BRIDGE))
    assert not report.enabled
    assert [g.address for g in report.gpus] == ["0000:05:00.0"]
    assert not report.gpus[0].isolated


def test_report_is_plain_data(tmp_path):
    data = _report(fixturegen.build_runbook_host(str(tmp_path))).to_dict()
    assert set(data) == {"enabled", "vendor", "mode", "passthrough", "units",
                         "acpi_tables", "cmdline", "interrupt_remapping",
                         "interrupt_remapping_source", "groups", "gpus", "dirty_groups",
                         "sriov_pfs", "security_findings", "reset_findings", "gpu_selection"}
    assert data["gpus"][0]["companions"] == [fixturegen.RUNBOOK_HDA]
    assert data["gpus"][0]["selected_by"] == "class 0x0302"
    assert data["gpu_selection"] == {"classes": ["0x0300", "0x0302", "0x0380", "0x1200"],
                                     "ids": [], "addresses": [], "listed_only": False}
