# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt_pinned_domain through real ``ansible localhost -m`` runs: the host topology
read from a fixturegen tree through ``root``, and a Python without libvirt-python."""

import shutil

import pytest

from support.fixturegen import build_runbook_host
from support.helpers import run_module_adhoc, run_tool


def adhoc(args, python=None, check=False):
    return run_module_adhoc("gpuhost.kvm.libvirt_pinned_domain", args, python=python, check=check,
                            timeout=120)


def test_check_mode_reads_the_runbook_host_through_root(tmp_path, module_python):
    root = build_runbook_host(str(tmp_path / "host"))
    args = dict(name="tenant-a100", uri="test:///default", domain_type="test", root=root,
                state_dir=str(tmp_path / "state"), vcpus=4, vcpu_pins=[1, 33, 2, 34],
                guest_topology={"cores": 2, "threads": 2}, memory_gib=4,
                memory_nodes="0", emulator_cpus="0,32", gpus=["0000:65:00.0"])
    proc, result = adhoc(args, check=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["changed"] and result["changed_elements"] == ["domain"]
    # companions and BARs came from the tree: the HDA function is in the same slot
    assert "bus=\"0x65\" slot=\"0x00\" function=\"0x1\"" in result["xml"]


def test_missing_libvirt_python_is_reported_by_missing_required_lib(tmp_path):
    python = shutil.which("python3", path="/usr/bin")
    if python is None:
        pytest.skip("no system /usr/bin/python3 to run the module without the venv")
    probe = run_tool("ansible", "localhost", "-i", "localhost,", "-c", "local", "-m",
                     "ansible.builtin.command", "-a", "%s -c 'import libvirt'" % python,
                     "-e", "ansible_python_interpreter=%s" % python, check=False)
    if probe.returncode == 0:
        pytest.skip("system python3 has libvirt-python; nothing to show")
    proc, result = adhoc(dict(name="x", state="absent", state_dir=str(tmp_path)),
                         python=python)
    assert proc.returncode != 0
    assert "Failed to import the required Python library (libvirt-python" in result["msg"]
