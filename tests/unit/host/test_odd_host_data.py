# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Odd host data gets an answer, never a traceback.

A sysfs value with NULs or a non-number is either unknown (where nothing decides on
it) or an error that names the file; an odd /proc/interrupts header is an error that
names the file; an IOMMU group entry that is not a PCI address is a member of the group
like any other, never an error about an option the module does not have.
"""

import json
import os

import pytest
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import (
    iommu_facts, pci, sysfs, topology)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import iommu_groups_facts

from support import fixturegen

GPU = "0000:65:00.0"
NODE0 = "sys/devices/system/node/node0"


def _write(root, rel, text):
    with open(os.path.join(root, rel), "w", encoding="utf-8") as handle:
        handle.write(text)


@pytest.fixture(name="runbook")
def _runbook(tmp_path):
    return fixturegen.build_runbook_host(str(tmp_path))


def _facts(capsys, root):
    with patch_module_args({"root": root}):
        with pytest.raises(SystemExit) as exit_info:
            iommu_groups_facts.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


# -- sysfs values with NULs or non-numbers -------------------------------------------------

def test_trailing_nuls_are_padding_and_inner_nuls_make_the_value_unknown(tmp_path):
    attr = str(tmp_path / "attr")
    _write(str(tmp_path), "attr", "vfio-pci\x00\x00\n")
    assert sysfs.read_text(attr) == "vfio-pci"
    _write(str(tmp_path), "attr", "vfio\x00-pci\n")
    assert sysfs.read_text(attr, default="unknown") == "unknown"
    _write(str(tmp_path), "attr", "1\x002")
    assert sysfs.read_int(attr, default=-7) == -7


@pytest.mark.parametrize("text", ["a b", "10\x00 21\x00x", "10 twenty-one", "\u0661\u0660 21"])
def test_a_node_distance_that_is_not_numbers_is_unknown(runbook, text):
    # Before: int() raised ValueError out of read_numa_nodes, and every module that reads
    # the topology failed with a traceback.
    _write(runbook, NODE0 + "/distance", text)
    nodes = topology.read_numa_nodes(runbook)
    assert nodes[0].distances == {}
    assert nodes[1].distances == {0: 21, 1: 10}


def test_numa_node_and_iommu_facts_survive_nuls_in_device_attributes(runbook, capsys):
    device = os.path.join("sys/bus/pci/devices", GPU)
    _write(runbook, device + "/numa_node", "0\x00")
    _write(runbook, device + "/class", "0x030200\x00junk")
    _write(runbook, device + "/driver_override", "\x00")
    code, result = _facts(capsys, runbook)
    assert code == 0, result
    function = pci.read_pci_function(GPU, root=runbook)
    assert function.driver_override is None          # all padding: nothing set
    assert function.numa_node == 0                    # "0" and padding
    assert function.class_code == 0xFF0000            # unknown class: not taken for a GPU


# -- /proc/interrupts headers -----------------------------------------------------------------

@pytest.mark.parametrize("header, message", [
    ("CPU0 CPUx", "names 'CPUx', not a CPU below 8192"),
    ("CPU0 CPU", "names 'CPU', not a CPU below 8192"),
    ("CPU0 CPU99999", "names 'CPU99999', not a CPU below 8192"),
    ("CPU0\x00 CPU1", "names 'CPU0\\x00', not a CPU below 8192"),
    ("CPU1 CPU0", "names CPU0 after CPU1"),
    ("CPU0 CPU0", "names CPU0 after CPU0"),
    ("CPU\u0663", "names 'CPU\u0663', not a CPU below 8192"),
])
def test_an_odd_interrupts_header_is_an_error_naming_the_file(runbook, header, message):
    # Before: "CPUx" and "CPU" raised ValueError from int(); "CPU0 CPU0" paired counts
    # with the wrong CPUs in silence.
    with open(os.path.join(runbook, "proc/interrupts"), encoding="utf-8") as handle:
        body = handle.read().split("\n", 1)[1]
    _write(runbook, "proc/interrupts", header + "\n" + body)
    with pytest.raises(GpuhostError) as err:
        topology.read_irqs(runbook)
    assert err.value.field == "root" and message in err.value.message
    assert "/proc/interrupts" in err.value.message and "proc/ under root" in err.value.fix
    with pytest.raises(GpuhostError) as err:
        topology.read_host_topology(runbook)
    assert err.value.field == "root"


def test_interrupts_text_given_as_a_value_still_names_that_value():
    with pytest.raises(GpuhostError) as err:
        topology.parse_proc_interrupts("CPU0 CPUx\n 0: 1 2\n")
    assert err.value.field == "interrupts"


# -- links and directory entries that are not PCI addresses ---------------------------------------

def test_a_physfn_or_virtfn_link_to_a_non_address_is_unknown(runbook):
    vf_dir = os.path.join(runbook, "sys/bus/pci/devices/0000:41:01.0")
    os.unlink(os.path.join(vf_dir, "physfn"))
    os.symlink("../not-a-device", os.path.join(vf_dir, "physfn"))
    pf_dir = os.path.join(runbook, "sys/bus/pci/devices/0000:41:00.0")
    os.unlink(os.path.join(pf_dir, "virtfn0"))
    os.symlink("../0000:41:3f.0", os.path.join(pf_dir, "virtfn0"))      # slot above 1f
    functions = pci.read_pci_functions(runbook)
    assert functions["0000:41:01.0"].physfn is None
    assert "0000:41:00.3" in functions["0000:41:00.0"].virtfns
    assert len(functions["0000:41:00.0"].virtfns) == 7


def test_a_pci_devices_entry_with_an_impossible_slot_is_skipped(runbook):
    os.makedirs(os.path.join(runbook, "sys/bus/pci/devices/0000:00:3f.0"))
    assert "0000:00:3f.0" not in pci.read_pci_functions(runbook)


def test_an_iommu_group_entry_that_is_not_an_address_is_a_foreign_member(runbook, capsys):
    # Before: the whole module failed with "address: 'ff3b0000.usb' is not a PCI
    # address", an option iommu_groups_facts does not have.
    _write(runbook, "sys/kernel/iommu_groups/4/devices/ff3b0000.usb", "")
    code, result = _facts(capsys, runbook)
    assert code == 0, result
    facts = result["ansible_facts"]["gpuhost_iommu"]
    group = next(g for g in facts["groups"] if g["group"] == 4)
    assert {"address": "ff3b0000.usb", "class_name": "not a PCI device"}.items() <= \
        next(d for d in group["devices"] if d["address"] == "ff3b0000.usb").items()
    gpu = next(g for g in facts["gpus"] if g["address"] == GPU)
    assert gpu["isolated"] is False
    assert any("ff3b0000.usb (not a PCI device" in reason for reason in gpu["reasons"])


class _NoCommands:
    """A module stand-in for the live host (root /) that must run nothing."""

    params = {"root": "/", "gpu_vendor": None}

    def get_bin_path(self, name):
        return "/usr/sbin/" + name

    def run_command(self, argv):
        raise AssertionError("ran %r" % (argv,))


@pytest.mark.parametrize("netdev", ["-ens1f0", "ens1f0\nx", "a" * 16, "../x"])
def test_an_odd_pf_interface_name_from_sysfs_never_reaches_ip(netdev):
    # Before: the name went to ip's command line as it was read.
    pf = {"vfs": [{"index": 0}], "netdevs": [netdev]}
    iommu_facts.add_vf_settings(_NoCommands(), pf, "/")
    assert "interface name" in pf["vf_settings_error"]
    assert pf["vfs"][0]["settings"] is None
