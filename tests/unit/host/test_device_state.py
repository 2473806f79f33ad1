# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GPU's state between tenants, read from a simulated sysfs tree whose attributes are
written in the kernel's own formats (drivers/pci/pcie/aer.c prints one "Name count" line
per error kind and a TOTAL_ERR_* line; pci-sysfs.c prints "16.0 GT/s PCIe"). The lab's
real kernel proves the same reads in tests/lab."""

from __future__ import annotations

import pytest
from support.sysfs_sim import TreeBuilder

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import device_state

GPU = "0000:41:00.0"
CORRECTABLE = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF")
UNCORRECTABLE = ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF",
                 "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked",
                 "TLPBlockedErr", "PoisonTLPBlocked")


def aer_text(names, total_name, counts=None):
    counts = counts or {}
    lines = ["%s %d" % (name, counts.get(name, 0)) for name in names]
    lines.append("%s %d" % (total_name, sum(counts.values())))
    return "\n".join(lines) + "\n"


def gpu_tree(tmp_path, config=b"\xde\x10\x35\x23", power="D3hot", speed=("16.0 GT/s PCIe", "16.0 GT/s PCIe"),
             width=("16", "16"), fatal=None, nonfatal=None, correctable=None, aer=True):
    tree = TreeBuilder(tmp_path)
    dev = tree.pci(GPU, 0x030200, vendor=0x10de, device=0x2335, driver="vfio-pci", iommu_group=40)
    if config is not None:
        with open(tree.p(dev + "/config"), "wb") as handle:
            handle.write(config + b"\x00" * 252)
    if power is not None:
        tree.write(dev + "/power_state", power + "\n")
    if speed is not None:
        tree.write(dev + "/current_link_speed", speed[0] + "\n")
        tree.write(dev + "/max_link_speed", speed[1] + "\n")
    if width is not None:
        tree.write(dev + "/current_link_width", width[0] + "\n")
        tree.write(dev + "/max_link_width", width[1] + "\n")
    if aer:
        tree.write(dev + "/aer_dev_correctable", aer_text(CORRECTABLE, "TOTAL_ERR_COR", correctable))
        tree.write(dev + "/aer_dev_fatal", aer_text(UNCORRECTABLE, "TOTAL_ERR_FATAL", fatal))
        tree.write(dev + "/aer_dev_nonfatal", aer_text(UNCORRECTABLE, "TOTAL_ERR_NONFATAL", nonfatal))
    return str(tmp_path)


def test_a_sound_gpu_on_vfio_reads_as_sound(tmp_path):
    state = device_state.read_device_state(GPU, gpu_tree(tmp_path))
    assert state.answers is True and state.power_state == "D3hot"
    assert state.link == device_state.LinkState(16.0, 16.0, 16, 16)
    assert [state.aer_total(kind) for kind in device_state.AER_KINDS] == [0, 0, 0]
    assert device_state.unfit_reasons(state) == [] and device_state.notes(state) == []
    shown = state.as_dict()
    assert shown["aer_totals"] == {"correctable": 0, "fatal": 0, "nonfatal": 0}
    assert shown["aer"]["fatal"]["CmpltTO"] == 0 and shown["link"]["max_width"] == 16


def test_a_gpu_that_fell_off_the_bus_is_unfit(tmp_path):
    state = device_state.read_device_state(GPU, gpu_tree(tmp_path, config=b"\xff\xff\xff\xff", power="unknown"))
    reasons = device_state.unfit_reasons(state)
    assert state.answers is False
    assert any("fell off the bus" in reason for reason in reasons)
    assert any("power state unknown" in reason for reason in reasons)


def test_fatal_aer_errors_make_it_unfit_counted_from_the_last_sound_read(tmp_path):
    state = device_state.read_device_state(GPU, gpu_tree(tmp_path, fatal={"CmpltTO": 2, "MalfTLP": 1}))
    assert state.aer_total("fatal") == 3 and state.aer["fatal"]["CmpltTO"] == 2
    assert device_state.unfit_reasons(state) == ["%s reported 3 fatal AER error(s)" % GPU]
    assert device_state.unfit_reasons(state, fatal_before=3) == []
    assert device_state.unfit_reasons(state, fatal_before=1) == [
        "%s reported 2 fatal AER error(s) since it was last sound" % GPU]
    assert device_state.fatal_count(state) == 3


def test_a_narrower_link_is_unfit_a_slower_one_only_noted(tmp_path):
    narrow = device_state.read_device_state(GPU, gpu_tree(tmp_path / "a", width=("8", "16")))
    assert narrow.link.width_degraded
    assert device_state.unfit_reasons(narrow) == [
        "%s's link trained at x8, below its x16: it has a fraction of its bandwidth" % GPU]
    slow = device_state.read_device_state(GPU, gpu_tree(tmp_path / "b", speed=("2.5 GT/s PCIe", "32.0 GT/s PCIe"),
                                                        nonfatal={"UnsupReq": 1}, correctable={"BadTLP": 4}))
    assert device_state.unfit_reasons(slow) == []
    assert device_state.notes(slow) == [
        "%s's link runs at 2.5 GT/s of its 32 (a GPU lowers its link speed when idle)" % GPU,
        "%s reported 1 non-fatal AER error(s)" % GPU, "%s reported 4 correctable AER error(s)" % GPU]


def test_what_the_kernel_does_not_show_is_unknown_not_sound_or_broken(tmp_path):
    """An older kernel (no power_state before 5.18), a function without AER, a link the
    kernel cannot name: None, and no reason either way."""
    state = device_state.read_device_state(GPU, gpu_tree(
        tmp_path, config=None, power=None, speed=("Unknown", "Unknown speed"), width=("0", "16"), aer=False))
    assert state.answers is None and state.power_state is None and state.aer == {}
    assert state.link == device_state.LinkState(None, None, None, 16)
    assert state.link.width_degraded is None and device_state.unfit_reasons(state) == []
    assert state.aer_total("fatal") is None


def test_older_kernels_print_no_pcie_suffix():
    assert device_state.parse_link_speed("8 GT/s") == 8.0
    assert device_state.parse_link_speed("5.0 GT/s PCIe") == 5.0
    assert device_state.parse_link_speed("64.0 GT/s PCIe junk") is None


@pytest.mark.parametrize("text", ["RxErr 0\nTOTAL_ERR_COR -1\n", "RxErr zero\n", "Rx Err 0\n",
                                  "\n".join("E%d 0" % n for n in range(65))])
def test_an_aer_attribute_not_in_the_kernels_format_is_refused(tmp_path, text):
    root = gpu_tree(tmp_path)
    TreeBuilder(root).write("/sys/bus/pci/devices/%s/aer_dev_correctable" % GPU, text)
    with pytest.raises(GpuhostError) as refused:
        device_state.read_device_state(GPU, root)
    assert "aer_dev_correctable" in str(refused.value) and refused.value.field == "root"


def test_a_function_the_host_lacks_is_refused_with_the_rescan_hint(tmp_path):
    with pytest.raises(GpuhostError) as refused:
        device_state.read_device_state("0000:42:00.0", gpu_tree(tmp_path))
    assert "rescan" in str(refused.value)


def test_a_config_file_linked_out_of_root_is_not_read(tmp_path):
    root = gpu_tree(tmp_path / "host")
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"\xff\xff\xff\xff")
    config = tmp_path / "host" / "sys/bus/pci/devices" / GPU / "config"
    config.unlink()
    config.symlink_to(outside)
    assert device_state.read_device_state(GPU, root).answers is None


def test_validate_fails_a_gpu_that_fell_off_and_names_a_slow_link(tmp_path):
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host import host_facts
    from ansible_collections.gpuhost.kvm.plugins.plugin_utils import validation
    plan = {"tenants": [{"name": "t1", "gpus": [{"address": GPU}]}]}
    sound = host_facts.read_devices([GPU], gpu_tree(tmp_path / "a", speed=("2.5 GT/s PCIe", "16.0 GT/s PCIe")))
    check = validation.check_gpu_state(plan, sound)
    assert check["status"] == validation.PASS and "lowers its link speed when idle" in check["detail"]
    lost = host_facts.read_devices([GPU], gpu_tree(tmp_path / "b", config=b"\xff\xff\xff\xff", width=("8", "16")))
    check = validation.check_gpu_state(plan, lost)
    assert check["status"] == validation.FAIL
    assert "t1: %s does not answer on its bus" % GPU in check["detail"] and "x8, below its x16" in check["detail"]
    assert validation.check_gpu_state(plan, {})["status"] == validation.NOT_RUN
