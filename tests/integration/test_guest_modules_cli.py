# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_health and container_facts, the guest's modules, through real ``ansible -m`` runs
(the module_python fixture runs each with RHEL 9's Python 3.9 too). No NVIDIA GPU and no
container runtime run here: nvidia-smi and the runtime are executables standing in for
them (support.fakes), run by the module through run_command like the real ones."""

import os
import stat

from support import FIXTURES
from support.fakes import fake_dmesg, fake_nvidia_smi
from support.helpers import run_module_adhoc

T4 = os.path.join(FIXTURES, "published", "nvidia_smi_q_x_tesla_t4_passthrough_515_105_01.xml")


def test_gpu_health_fake_nvidia_smi_t4_report_passes_the_limits(tmp_path, module_python):
    kernel = tmp_path / "kernel"
    kernel.mkdir()
    proc, result = run_module_adhoc("gpuhost.kvm.gpu_health",
                                    {"nvidia_smi": fake_nvidia_smi(tmp_path, T4), "dmesg": fake_dmesg(kernel),
                                     "max_temperature_c": 85, "max_uncorrected_ecc": 0},
                                    check=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["passed"] is True and result["changed"] is False
    assert result["health"]["gpus"][0]["name"] == "Tesla T4"
    assert sorted(f["check"] for f in result["findings"]) == [
        "ecc", "memory_repair", "mig_off", "recovery_action", "temperature", "throttle", "xid"]


def test_gpu_health_fake_dmesg_xid_79_names_the_gpu_that_fell_off_the_bus(tmp_path, module_python):
    """Derived from a published Xid line: the GPU that fell off is no longer listed by
    nvidia-smi (the T4 is), so the finding names its bus and asks for a reboot."""
    kernel = tmp_path / "kernel"
    kernel.mkdir()
    dmesg = fake_dmesg(kernel, ["[  812.1] NVRM: Xid (PCI:0000:00:1f): 79, pid=0, GPU has fallen off the bus."])
    proc, result = run_module_adhoc("gpuhost.kvm.gpu_health",
                                    {"nvidia_smi": fake_nvidia_smi(tmp_path, T4), "dmesg": dmesg,
                                     "fail_on_findings": True}, check=False)
    assert proc.returncode != 0 and result["passed"] is False
    lost = [f for f in result["findings"] if f["check"] == "xid" and not f["passed"]]
    assert [(f["gpu"], f["action"]) for f in lost] == [("0000:00:1f", "reboot")]
    assert "GPU has fallen off the bus" in result["msg"]


def fake_runtime(tmp_path, image_id):
    """A container runtime standing in for podman: ``image inspect`` of ``x:1`` prints
    ``image_id``; any other image is unknown (rc 125, with podman's message)."""
    script = tmp_path / "podman"
    script.write_text('#!/bin/sh\n'
                      '[ "$1 $2 $3 $4 $5" = "image inspect --format {{.Id}} --" ] || exit 2\n'
                      '[ "$6" = x:1 ] && { echo %s; exit 0; }\n'
                      'echo "Error: x:2: image not known" >&2; exit 125\n' % image_id)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_container_facts_fake_runtime_tells_a_present_image_from_a_missing_one(tmp_path,
                                                                               module_python):
    runtime = fake_runtime(tmp_path, "sha256:0123")
    proc, result = run_module_adhoc("gpuhost.kvm.container_facts",
                                    {"runtime": runtime, "image": "x:1"}, check=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["changed"] is False
    assert result["image"]["present"] is True and result["image"]["id"] == "sha256:0123"
    proc, result = run_module_adhoc("gpuhost.kvm.container_facts",
                                    {"runtime": runtime, "image": "x:2"}, check=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["image"]["present"] is False
    assert result["image"]["error"] == "Error: x:2: image not known"
