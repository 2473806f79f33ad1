# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PCI function readers on real trees (against hwloc's answers) and synthetic ones."""

import re
from xml.etree import ElementTree

import pytest

from support import realtrees
from support.realtrees import tree

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import pci
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

from support import fixturegen


def _hwloc_xml_pci_nodes(path):
    """busid -> NUMA node hwloc attached the device to (None: machine level)."""
    found = {}

    def walk(element, node):
        if element.get("type") == "Package":
            nodes = [c for c in element if c.get("type") == "NUMANode"]
            node = int(nodes[0].get("os_index")) if nodes else None
        busid = element.get("pci_busid")
        if busid:
            found[busid] = node
        for child in element:
            walk(child, node)

    walk(ElementTree.parse(path).getroot(), None)
    return found


def test_sandy_bridge_numa_of_every_device_matches_hwloc():
    expected = _hwloc_xml_pci_nodes(realtrees.meta(
        realtrees.SANDY_BRIDGE, "32em64t-2n8c+dax+nvme+mic+dimms.xml"))
    functions = pci.read_pci_functions(tree(realtrees.SANDY_BRIDGE))
    assert len(functions) == 137
    assert len(expected) > 100
    for busid, node in expected.items():
        assert functions[busid].numa_node == node, busid
    unknown = [f for f in functions.values() if f.numa_node is None]
    assert all(f.numa_node_source == "unknown" for f in unknown)
    assert len(unknown) == sum(1 for node in expected.values() if node is None)
    # the README's count: 93 report -1, and only the NVMe can be placed from its CPUs
    derived = [f for f in functions.values() if f.numa_node_source == "local_cpulist"]
    assert len(unknown) + len(derived) == 93 and [f.address for f in derived] == [
        "0000:00:02.0"]


def test_sandy_bridge_nvme_node_comes_from_local_cpulist():
    nvme = pci.read_pci_function("00:02.0", root=tree(realtrees.SANDY_BRIDGE))
    assert nvme.class_code == 0x010802 and nvme.driver == "nvme"
    assert nvme.local_cpus == (0, 1, 2, 3)
    assert (nvme.numa_node, nvme.numa_node_source) == (0, "local_cpulist")
    assert pci.class_name(nvme.class_code) == "Non-Volatile memory controller"


def test_sandy_bridge_parent_chain_from_the_device_path():
    functions = pci.read_pci_functions(tree(realtrees.SANDY_BRIDGE))
    assert functions["0000:02:00.3"].parents == ("0000:00:01.1",)
    assert functions["0000:05:00.0"].parents == ("0000:00:1c.0", "0000:04:00.0")
    assert pci.DEFAULT_GPU_SELECTION.selects(functions["0000:05:00.0"])


def test_xeon_silver_sriov_nic_and_its_bars():
    functions = pci.read_pci_functions(tree(realtrees.XEON_SILVER))
    assert len(functions) == 28
    nic = functions["0000:60:00.0"]
    assert (nic.vendor_id, nic.device_id, nic.class_code) == (0x8086, 0x37D2, 0x020000)
    assert nic.subsystem_vendor_id == 0x15D9
    assert (nic.sriov_totalvfs, nic.sriov_numvfs, nic.is_sriov_pf) == (64, 0, True)
    assert nic.driver == "i40e" and nic.driver_override is None
    assert nic.netdevs == ("enp96s0f0",)
    assert nic.parents == ("0000:5d:02.0", "0000:5e:00.0", "0000:5f:03.0")
    assert [(b.index, b.size) for b in nic.bars] == [(0, 16 << 20), (3, 32 << 10),
                                                     (6, 512 << 10)]
    assert nic.bar64_prefetchable_total == (16 << 20) + (32 << 10)
    assert nic.msi_irqs
    # the ROM (index 6) is neither 64-bit nor counted
    assert not nic.bars[2].is_64bit


def test_xeon_silver_numa_matches_lstopo_host_bridges():
    console = open(realtrees.meta(realtrees.XEON_SILVER,
                                  "32intel64-2p8co2t+8ve.console")).read()
    package_of = {}
    package = None
    for line in console.splitlines():
        match = re.match(r"^\s*Package L#\d+ \(P#(\d+)", line)
        if match:
            package = int(match.group(1))
        match = re.search(r"busid=(\S+)", line)
        if match:
            package_of[match.group(1)] = package
    functions = pci.read_pci_functions(tree(realtrees.XEON_SILVER))
    assert len(package_of) == 28
    for busid, package in package_of.items():
        assert functions[busid].numa_node == package, busid


def test_laptop_drivers_and_iommu_groups():
    functions = pci.read_pci_functions(tree(realtrees.LAPTOP_IOMMU))
    assert len(functions) == 23
    assert functions["0000:00:14.0"].driver == "xhci_hcd"
    assert functions["0000:00:14.0"].iommu_group == 9
    assert functions["0000:04:00.0"].iommu_group == 14
    assert functions["0000:04:00.0"].parents == ("0000:00:06.0",)
    # a single-node laptop: numa_node -1 but every local CPU is on node 0
    assert all(f.numa_node == 0 and f.numa_node_source == "local_cpulist"
               for f in functions.values())


def test_trees_without_pci_give_none():
    assert pci.read_pci_functions(tree(realtrees.POWER9)) == {}


def test_runbook_gpu_hda_and_sriov(tmp_path):
    root = fixturegen.build_runbook_host(str(tmp_path))
    functions = pci.read_pci_functions(root)
    gpu = functions[fixturegen.RUNBOOK_GPU]
    assert (gpu.vendor_id, gpu.device_id, gpu.class_code) == (0x10DE, 0x20B5, 0x030200)
    assert pci.DEFAULT_GPU_SELECTION.selects(gpu) and gpu.numa_node == 0 and gpu.reset_method == ("flr", "bus")
    assert gpu.bar64_prefetchable_total == (128 << 30) + (32 << 20)
    assert gpu.parents == ("0000:64:01.0",) and gpu.boot_vga is None
    hda = functions[fixturegen.RUNBOOK_HDA]
    assert hda.class_code == 0x040300 and hda.iommu_group == gpu.iommu_group
    pf = functions[fixturegen.RUNBOOK_PF]
    assert (pf.sriov_totalvfs, pf.sriov_numvfs, pf.sriov_drivers_autoprobe) == (8, 8, True)
    assert len(pf.virtfns) == 8 and pf.virtfns[0] == "0000:41:00.2"
    assert pf.virtfns[-1] == "0000:41:01.1"
    for vf in pf.virtfns:
        assert functions[vf].physfn == pf.address and functions[vf].is_vf
        assert functions[vf].iommu_group not in (None, pf.iommu_group)
    assert len(pf.msi_irqs) == 9 and pf.netdevs == ("ens1f0np0",)


def test_five_digit_vmd_domain(tmp_path):
    spec = fixturegen.HostSpec(sockets=1, cores_per_socket=4, devices=fixturegen.endpoint(
        "10000:01:00.0", 0, 0x010802, 0x144D, 0xA80A, "nvme"))
    root = fixturegen.build_host(str(tmp_path), spec)
    functions = pci.read_pci_functions(root)
    assert "10000:01:00.0" in functions
    assert functions["10000:01:00.0"].parents == ("10000:00:01.0",)
    assert pci.read_pci_function("10000:01:00.0", root=root).driver == "nvme"


def test_numa_minus_one_spanning_nodes_is_unknown(tmp_path):
    devices = fixturegen.endpoint("0000:21:00.0", None, 0x020000, 0x8086, 0x1572, "i40e")
    devices += fixturegen.endpoint("0000:31:00.0", 1, 0x020000, 0x8086, 0x1572, "i40e")
    devices[1].numa_node_file = -1
    root = fixturegen.build_host(str(tmp_path), fixturegen.HostSpec(
        cores_per_socket=4, devices=devices))
    functions = pci.read_pci_functions(root)
    assert (functions["0000:21:00.0"].numa_node,
            functions["0000:21:00.0"].numa_node_source) == (None, "unknown")
    assert (functions["0000:31:00.0"].numa_node,
            functions["0000:31:00.0"].numa_node_source) == (1, "local_cpulist")


def test_read_pci_function_errors(tmp_path):
    root = fixturegen.build_runbook_host(str(tmp_path))
    with pytest.raises(GpuhostError) as err:
        pci.read_pci_function("0000:99:00.0", root=root)
    assert err.value.field == "address" and "lspci" in err.value.message
    with pytest.raises(GpuhostError) as err:
        pci.read_pci_function("65:00", root=root)
    assert err.value.field == "address"


def test_parse_resource_skips_empty_regions():
    bars = pci.parse_resource(
        "0x00000000c4000000 0x00000000c4ffffff 0x0000000000040200\n"
        "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
        "0x0000038000000000 0x0000039fffffffff 0x000000000014220c\n")
    assert [(b.index, b.size, b.is_64bit, b.is_prefetchable) for b in bars] == [
        (0, 16 << 20, False, False), (2, 128 << 30, True, True)]


@pytest.mark.parametrize("code, name", [
    (0x0C0330, "USB controller"), (0x010802, "Non-Volatile memory controller"),
    (0x020000, "Ethernet controller"), (0x030200, "3D controller"),
    (0x040300, "Audio device"), (0x060400, "PCI bridge"), (0x0B4000, "Co-processor"),
    (0x118000, "Signal processing controller"), (0x0E0000, "Intelligent controller"),
])
def test_class_names_as_lspci_prints_them(code, name):
    assert pci.class_name(code) == name
