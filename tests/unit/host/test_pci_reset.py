# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reset capability of PCI functions (the reset and reset_method files of
Documentation/ABI/testing/sysfs-bus-pci) as the readers see it below a root, and the
facts iommu_groups_facts reports from it, on the sysfs simulator's trees and real dumps."""

import json
import os

import pytest
from support.module_args import patch_module_args

from support.sysfs_sim import TreeBuilder, build_sim_host
from support.realtrees import LAPTOP_IOMMU, tree as tree_path

from ansible_collections.gpuhost.kvm.plugins.module_utils.host.iommu import analyse_iommu
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    RESET_METHOD_MAX_CHARS, parse_reset_methods, read_pci_function, read_pci_functions,
    reset_capability)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
from ansible_collections.gpuhost.kvm.plugins.modules import iommu_groups_facts

GPU, HDA = "0000:41:00.0", "0000:41:00.1"


def _device_file(root, address, name):
    return os.path.join(os.path.realpath(os.path.join(root, "sys/bus/pci/devices", address)),
                        name)


def _set_reset_method(root, address, text):
    with open(_device_file(root, address, "reset_method"), "w") as handle:
        handle.write(text)


def _remove_reset(root, address):
    for name in ("reset", "reset_method"):
        os.unlink(_device_file(root, address, name))


@pytest.fixture
def host(tmp_path):
    return build_sim_host(str(tmp_path / "host"))


def test_gpu_with_flr_and_bus_is_resettable_and_names_its_bus(host):
    functions = read_pci_functions(host)
    gpu = functions[GPU]
    assert gpu.reset_file is True and gpu.reset_method == ("flr", "bus")
    capability = reset_capability(gpu, functions)
    assert capability.usable is True and capability.reason is None
    assert capability.bus_only is False
    # bus 41 behind root port 00:02.0 holds the GPU and its HDA: a bus reset hits both
    assert capability.bus_siblings == (HDA,)


def test_no_reset_file_is_no_usable_reset(host):
    _remove_reset(host, GPU)
    gpu = read_pci_function(GPU, host)
    assert gpu.reset_file is False and gpu.reset_method == ()
    capability = reset_capability(gpu, read_pci_functions(host))
    assert capability.usable is False
    assert "no reset file" in capability.reason and GPU in capability.reason


def test_reset_disabled_by_empty_reset_method(host):
    # writing "" to reset_method disables resets; the reset file stays (sysfs-bus-pci)
    _set_reset_method(host, GPU, "\n")
    capability = reset_capability(read_pci_function(GPU, host), read_pci_functions(host))
    assert capability.usable is False and "disabled" in capability.reason


@pytest.mark.parametrize("text, known, unknown", [
    ("flr bus\n", ("flr", "bus"), ()),
    ("pm\nflr\n", ("pm", "flr"), ()),
    ("flr bogus bus", ("flr", "bus"), ("bogus",)),
    ("flr flr bus flr", ("flr", "bus"), ()),
    ("warp_reset", (), ("warp_reset",)),
    ("flr " + "x" * 100, ("flr",), ("x" * 32,)),
    ("flr \x1b[31mred", ("flr",), (ascii("\x1b[31mred")[:32],)),
    ("", (), ()),
    (None, (), ()),
])
def test_parse_reset_methods_keeps_known_words_and_shows_others(text, known, unknown):
    assert parse_reset_methods(text) == (known, unknown)


def test_huge_reset_method_is_not_parsed(host):
    _set_reset_method(host, GPU, "flr " * 10000)
    gpu = read_pci_function(GPU, host)
    assert gpu.reset_method == ()
    assert "39999 characters" in gpu.reset_method_unknown[0]   # read_text strips the blank
    capability = reset_capability(gpu, read_pci_functions(host))
    assert capability.usable is False and "no method the kernel knows" in capability.reason
    assert len(parse_reset_methods("b" * (RESET_METHOD_MAX_CHARS + 1))[1]) == 1


def test_unknown_words_only_is_no_usable_reset(host):
    _set_reset_method(host, GPU, "bogus\nmore")
    capability = reset_capability(read_pci_function(GPU, host), read_pci_functions(host))
    assert capability.usable is False
    assert capability.unknown_methods == ("bogus", "more")


def test_facts_report_reset_methods_per_function(host):
    report = analyse_iommu(read_host_topology(host, with_irqs=False))
    gpu = next(g for g in report.gpus if g.address == GPU)
    assert [r["address"] for r in gpu.reset_methods] == [GPU, HDA]
    assert gpu.reset_methods[0]["reset_methods"] == ["flr", "bus"]
    assert gpu.reset_methods[0]["usable"] is True
    assert report.reset_findings == []


def test_facts_flag_a_gpu_without_reset(host):
    # Its bus also holds another device (41:01.0, the host's), so vfio-pci cannot reset
    # that bus either: nothing wipes the HDA.
    TreeBuilder(host).pci("0000:41:01.0", 0x0c0330, driver="xhci_hcd", iommu_group=9,
                          parent="0000:00:02.0", reset_method=None)
    _remove_reset(host, HDA)
    report = analyse_iommu(read_host_topology(host, with_irqs=False))
    findings = [f for f in report.reset_findings if f["id"] == "gpu_no_reset"]
    assert [(f["gpu"], f["address"]) for f in findings] == [(GPU, HDA)]
    assert findings[0]["severity"] == "high" and "allow_no_reset" in findings[0]["fix"]
    assert "next tenant" in findings[0]["msg"]


def test_facts_say_vfio_resets_an_hda_without_reset_alone_on_the_gpus_bus(host):
    # The lab's GPU: the HDA has no reset file, but its bus holds only the GPU's functions
    _remove_reset(host, HDA)
    report = analyse_iommu(read_host_topology(host, with_irqs=False))
    assert [(f["id"], f["address"], f["severity"]) for f in report.reset_findings] == [
        ("gpu_reset_by_vfio", HDA, "low")]


def test_facts_say_a_bus_only_reset_resets_siblings(tmp_path):
    root = str(tmp_path / "host")
    tree = TreeBuilder(root)
    tree.cpus(online="0-3")
    tree.iommu()
    tree.pci("0000:00:02.0", 0x060400, vendor=0x8086, driver="pcieport", iommu_group=1)
    tree.pci("0000:05:00.0", 0x030200, driver="vfio-pci", iommu_group=2,
             parent="0000:00:02.0", reset_method="bus")
    tree.pci("0000:05:01.0", 0x010802, vendor=0x144d, driver="nvme", iommu_group=3,
             parent="0000:00:02.0", reset_method="flr")
    report = analyse_iommu(read_host_topology(root, with_irqs=False))
    assert report.gpus[0].reset_methods[0]["bus_only"] is True
    assert report.gpus[0].reset_methods[0]["bus_siblings"] == ["0000:05:01.0"]
    finding = report.reset_findings[0]
    assert finding["id"] == "gpu_bus_reset_only" and finding["siblings"] == ["0000:05:01.0"]
    assert "resets 0000:05:01.0 too" in finding["msg"]


def test_real_dump_without_reset_files_is_flagged():
    # ghw's dump of a laptop (its iGPU at 00:02.0) recorded no reset or reset_method
    # file: below that root the GPU has no way to be reset, and the facts say so.
    root = tree_path(LAPTOP_IOMMU)
    report = analyse_iommu(read_host_topology(root, with_irqs=False))
    assert report.gpus, "the dump has GPUs"
    assert all(g.reset_methods[0]["reset_file"] is False for g in report.gpus)
    assert {f["gpu"] for f in report.reset_findings
            if f["id"] == "gpu_no_reset"} == {g.address for g in report.gpus}


def test_iommu_groups_facts_module_returns_reset_facts(host, capsys):
    _remove_reset(host, GPU)
    with patch_module_args({"root": host, "_ansible_check_mode": True}):
        with pytest.raises(SystemExit):
            iommu_groups_facts.main()
    facts = json.loads(capsys.readouterr().out)["ansible_facts"]["gpuhost_iommu"]
    gpu = next(g for g in facts["gpus"] if g["address"] == GPU)
    assert gpu["reset_methods"][0]["usable"] is False
    assert gpu["reset_methods"][1] == {
        "address": HDA, "reset_file": True, "reset_methods": ["flr", "bus"],
        "unknown_reset_methods": [], "usable": True, "reason": None, "bus_only": False,
        "bus_siblings": [GPU]}
    assert [f["address"] for f in facts["reset_findings"]] == [GPU]


def test_a_bus_reset_reaches_devices_below_a_bridge_on_the_same_bus(tmp_path):
    root = str(tmp_path / "host")
    tree = TreeBuilder(root)
    tree.cpus(online="0-3")
    tree.iommu()
    tree.pci("0000:00:02.0", 0x060400, driver="pcieport", iommu_group=1)
    tree.pci("0000:05:00.0", 0x030200, driver="vfio-pci", iommu_group=2,
             parent="0000:00:02.0", reset_method="bus")
    tree.pci("0000:05:01.0", 0x060400, driver="pcieport", iommu_group=3,
             parent="0000:00:02.0")
    tree.pci("0000:06:00.0", 0x020000, driver="igb", iommu_group=4, parent="0000:05:01.0")
    functions = read_pci_functions(root)
    capability = reset_capability(functions["0000:05:00.0"], functions)
    assert capability.bus_only is True
    assert capability.bus_siblings == ("0000:05:01.0", "0000:06:00.0")
