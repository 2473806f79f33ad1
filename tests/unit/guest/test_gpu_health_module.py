# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_health module end to end. No NVIDIA GPU runs here, so nvidia-smi is a fake:
a real executable script that prints a published report (tests/fixtures/published) or
fails as the real tool does; the module runs it through run_command like the real one."""

from __future__ import annotations

import json
import os

import pytest
from support.fakes import fake_dmesg, fake_nvidia_smi
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.modules import gpu_health as gpu_health_module
from support import TESTS

PUBLISHED = os.path.join(TESTS, "fixtures", "published")
A100_MIG = os.path.join(PUBLISHED, "nvidia_smi_q_x_a100_sxm4_mig_535_54_03.xml")
T4 = os.path.join(PUBLISHED, "nvidia_smi_q_x_tesla_t4_passthrough_515_105_01.xml")
# What nvidia-smi prints (on stdout, rc 9) when the kernel module is not loaded.
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")


def run(capsys, **args):
    """The module with ``args``; the kernel log is a fake's (empty unless given) so that
    this machine's own log never decides a test."""
    if args.get("read_xids", True) and "dmesg" not in args and "nvidia_smi" in args:
        args["dmesg"] = fake_dmesg(_kernel_folder(args))
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            gpu_health_module.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def _kernel_folder(args):
    """The fake dmesg goes beside the fake nvidia-smi (each test's own tmp_path)."""
    import pathlib
    folder = pathlib.Path(os.path.dirname(args["nvidia_smi"])) / "kernel"
    folder.mkdir(exist_ok=True)
    return folder


def test_fake_nvidia_smi_t4_report_passes_the_limits(tmp_path, capsys):
    code, result = run(capsys, nvidia_smi=fake_nvidia_smi(tmp_path, T4), max_temperature_c=85,
                       max_uncorrected_ecc=0)
    assert code == 0 and result["passed"] and not result["changed"]
    assert result["health"]["gpus"][0]["name"] == "Tesla T4"
    assert sorted(f["check"] for f in result["findings"]) == [
        "ecc", "memory_repair", "mig_off", "recovery_action", "temperature", "throttle", "xid"]


def test_fake_dmesg_an_xid_on_the_gpu_fails_it_and_names_the_action(tmp_path, capsys):
    """The T4's guest bus 00000000:00:1E.0; Xid 48 (a double-bit ECC error) on it, as
    the driver logs one (derived: the code and bus of a published line changed)."""
    kernel = tmp_path / "kernel"
    kernel.mkdir()
    dmesg = fake_dmesg(kernel, ["[  966.5] NVRM: Xid (PCI:0000:00:1e): 48, pid=0, DBE (0x1) detected"])
    code, result = run(capsys, nvidia_smi=fake_nvidia_smi(tmp_path, T4), dmesg=dmesg)
    xid = [f for f in result["findings"] if f["check"] == "xid"]
    assert code == 0 and not result["passed"]
    assert len(xid) == 1 and xid[0]["action"] == "reset" and xid[0]["measured"] == [48]
    code, result = run(capsys, nvidia_smi=fake_nvidia_smi(tmp_path, T4), dmesg=dmesg, ignored_xids=[48])
    assert result["passed"]


def test_fake_dmesg_a_kernel_log_root_only_is_a_failing_finding(tmp_path, capsys):
    kernel = tmp_path / "kernel"
    kernel.mkdir()
    dmesg = fake_dmesg(kernel, rc=1, message="dmesg: read kernel buffer failed: Operation not permitted")
    code, result = run(capsys, nvidia_smi=fake_nvidia_smi(tmp_path, T4), dmesg=dmesg)
    unread = [f for f in result["findings"] if f["check"] == "xid"]
    assert code == 0 and not result["passed"] and "Operation not permitted" in unread[0]["detail"]
    assert "kernel.dmesg_restrict" in unread[0]["detail"]
    code, result = run(capsys, nvidia_smi=fake_nvidia_smi(tmp_path, T4), read_xids=False)
    assert result["passed"] and "xid" not in [f["check"] for f in result["findings"]]


def test_fake_nvidia_smi_a100_with_mig_fails_when_told(tmp_path, capsys):
    smi = fake_nvidia_smi(tmp_path, A100_MIG)
    code, result = run(capsys, nvidia_smi=smi)
    assert code == 0 and not result["passed"] and "MIG is on" in result["failures"][0]
    code, result = run(capsys, nvidia_smi=smi, fail_on_findings=True)
    assert code == 1 and result["failed"] and "MIG is on" in result["msg"]
    assert result["findings"][0]["check"] == "mig_off"


def test_fake_nvidia_smi_persistence_off_fails_when_required(tmp_path, capsys):
    code, result = run(capsys, nvidia_smi=fake_nvidia_smi(tmp_path, T4), persistence_must_be_on=True)
    assert code == 0 and not result["passed"]
    assert any("nvidia-persistenced" in failure for failure in result["failures"])


def test_fake_nvidia_smi_without_a_driver_fails_with_its_message(tmp_path, capsys):
    code, result = run(capsys, nvidia_smi=fake_nvidia_smi(tmp_path, rc=9, message=NO_DRIVER))
    assert code == 1 and result["field"] == "nvidia_smi"
    assert "couldn't communicate with the NVIDIA driver" in result["msg"] and "lsmod" in result["msg"]


def test_missing_nvidia_smi_names_the_fix(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, result = run(capsys)
    assert code == 1 and result["field"] == "nvidia_smi"
    assert "not installed" in result["msg"] and "install the NVIDIA driver" in result["msg"]


@pytest.mark.parametrize("args, field", [
    ({"max_temperature_c": float("nan")}, "max_temperature_c"),
    ({"max_temperature_c": 1e9}, "max_temperature_c"),
    ({"max_temperature_c": -5}, "max_temperature_c"),
    ({"max_uncorrected_ecc": -1}, "max_uncorrected_ecc"),
    ({"ignored_xids": [10 ** 5]}, "ignored_xids[0]"),
    ({"ignored_xids": [13, -1]}, "ignored_xids[1]"),
])
def test_bad_limits_are_refused_before_nvidia_smi_runs(tmp_path, capsys, args, field):
    # A fake that would fail the test if it ran: the limits are checked first.
    code, result = run(capsys, nvidia_smi=fake_nvidia_smi(tmp_path, rc=3, message="ran"), **args)
    assert code == 1 and result["field"] == field and "ran" not in result["msg"]


def test_documentation_is_valid_yaml():
    import yaml
    for name in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
        assert yaml.safe_load(getattr(gpu_health_module, name))
