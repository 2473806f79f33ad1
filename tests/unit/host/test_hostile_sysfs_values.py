# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Sysfs integers the modules act on are read through sysfs.read_checked_int;
a NUL inside, a negative count or a count above its limit is a refusal that names the
file and the option, never a traceback, and the tree is left alone."""

import json

import pytest

from support.sysfs_sim import SimulatedKernel, build_sim_host, run_module, snapshot

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs, topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.vf_settings import parse_vfinfo
from ansible_collections.gpuhost.kvm.plugins.modules import sriov_vfs

PF = "0000:03:00.0"


def _write(path, data):
    with open(path, "wb") as handle:
        handle.write(data)


# NULs around a value are padding (sysfs.read_text), as blanks are
@pytest.mark.parametrize("data, value", [(b"7\n", 7), (b"0\x00\x00", 0), (b" 12 \n", 12),
                                         (b"\x008\x00", 8)])
def test_read_checked_int_reads_what_the_kernel_prints(tmp_path, data, value):
    _write(str(tmp_path / "attr"), data)
    assert sysfs.read_checked_int(str(tmp_path / "attr"), field="pf") == value


def test_read_checked_int_absent_is_the_default(tmp_path):
    assert sysfs.read_checked_int(str(tmp_path / "none"), default=3) == 3


@pytest.mark.parametrize("data, words", [
    (b"8\x004\n", "not an integer"), ("\u0661".encode(), "not an integer"),
    (b"", "not an integer"), (b"1_0", "not an integer"), (b"eight", "not an integer"),
    (b"-1\n", "below 0"), (b"9\n", "above the limit (8)")])
def test_read_checked_int_refuses_what_the_kernel_cannot_print(tmp_path, data, words):
    _write(str(tmp_path / "attr"), data)
    with pytest.raises(GpuhostError) as info:
        sysfs.read_checked_int(str(tmp_path / "attr"), shown="/sys/x/attr", field="pf",
                               fix="do this", maximum=8, maximum_name="the limit")
    message = info.value.message
    assert message.startswith("pf: /sys/x/attr holds ") and words in message
    assert message.count("Fix:") == 1 and message.endswith("Fix: do this")


@pytest.fixture
def sim(tmp_path):
    return SimulatedKernel(build_sim_host(str(tmp_path / "host")),
                           vf_drivers={PF: "mlx5_core"})


def _refused(sim, attr, data, **args):
    _write(sim.path("/sys/bus/pci/devices/%s/%s" % (PF, attr)), data)
    before = snapshot(sim.root)
    args.setdefault("root", sim.root)
    with pytest.raises(GpuhostError) as info:
        run_module(sriov_vfs, "SriovConfigurator", dict(dict(pf=PF, num_vfs=1), **args), sim)
    assert snapshot(sim.root) == before and sim.writes == []
    assert info.value.field == "pf"
    assert "/sys/bus/pci/devices/%s/%s" % (PF, attr) in info.value.message
    assert info.value.message.count("Fix:") == 1
    return info.value.message


@pytest.mark.parametrize("attr, data, words", [
    ("sriov_totalvfs", b"8\x004\n", "not an integer"),
    ("sriov_totalvfs", b"-4\n", "below 0"),
    ("sriov_numvfs", b"-1\n", "below 0"),
    ("sriov_numvfs", b"2\x003", "not an integer"),
    ("sriov_numvfs", b"4096\n", "above /sys/bus/pci/devices/%s/sriov_totalvfs" % PF),
    ("sriov_offset", b"2\x001", "not an integer"),
    ("sriov_stride", b"-1", "below 0"),
    ("sriov_drivers_autoprobe", b"7", "above 1"),
])
def test_sriov_vfs_refuses_hostile_sriov_attributes(sim, attr, data, words):
    assert words in _refused(sim, attr, data)


def test_sriov_vfs_check_mode_refuses_too(sim):
    _write(sim.path("/sys/bus/pci/devices/%s/sriov_numvfs" % PF), b"-1\n")
    with pytest.raises(GpuhostError):
        run_module(sriov_vfs, "SriovConfigurator", dict(pf=PF, num_vfs=1, root=sim.root),
                   sim, check_mode=True)


def test_vf_facts_with_a_nul_are_unknown_not_a_traceback(sim):
    run_module(sriov_vfs, "SriovConfigurator", dict(pf=PF, num_vfs=1, root=sim.root), sim)
    vf = "0000:03:00.2"
    _write(sim.path("/sys/bus/pci/devices/%s/numa_node" % vf), b"0\x001")
    _write(sim.path("/sys/bus/pci/devices/%s/driver_override" % vf), b"vfio\x00-pci")
    result = run_module(sriov_vfs, "SriovConfigurator",
                        dict(pf=PF, num_vfs=1, root=sim.root), sim).result
    assert result["changed"] is False
    assert result["vfs"][0]["numa_node"] is None


@pytest.mark.parametrize("text, words", [
    ("not json", "does not print JSON"), ('{"a": 1}', "another shape"),
    ('[{"vfinfo_list": [{"vf": -1}]}]', "VF number -1"),
    ('[{"vfinfo_list": [{"mac": "00:11:22:33:44:55"}]}]', "VF number None"),
    ('[{"vfinfo_list": [{"vf": 0, "vlan": 5000}]}]', "VLAN 5000"),
    ('[{"vfinfo_list": [{"vf": 0, "vlan_list": ["x"]}]}]', "vlan_list"),
    ('[{"vfinfo_list": {"vf": 0}}]', "vfinfo_list")])
def test_parse_vfinfo_refuses_other_output_with_the_option(text, words):
    with pytest.raises(GpuhostError) as info:
        parse_vfinfo(text)
    assert info.value.field == "vfs" and words in info.value.message


def test_parse_vfinfo_still_reads_iproute_json():
    found = parse_vfinfo(json.dumps([{"vfinfo_list": [
        {"vf": 1, "address": "AA:BB:CC:DD:EE:FF", "vlan_list": [{"vlan": 100}]}]}]))
    assert found[1]["vlan"] == 100 and found[1]["mac"] == "aa:bb:cc:dd:ee:ff"


def test_cpuinfo_lines_with_a_nul_are_unknown(sim):
    with open(sim.path("/proc/cpuinfo"), "w") as handle:
        handle.write("vendor_id\t: Genu\x00ineIntel\nflags\t\t: fpu vmx\x00 pdpe1gb\n"
                     "vendor_id\t: GenuineIntel\nflags\t\t: fpu vmx pdpe1gb\n")
    state = topology.read_cpu_state(sim.root)
    assert state.vendor == "GenuineIntel" and "vmx" in state.flags


def test_a_nul_in_an_interrupts_row_is_refused_naming_the_file():
    text = "           CPU0       CPU1\n 60:          1          2  PCI-MSI 1048576-edge  eno\x001\n"
    with pytest.raises(GpuhostError) as info:
        topology.parse_proc_interrupts(text, field="root")
    assert info.value.field == "root"
    assert "line 2 of /proc/interrupts holds a NUL byte" in info.value.message
