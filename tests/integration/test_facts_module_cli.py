# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Real ansible-doc and ansible -m runs of iommu_groups_facts, from the checkout."""

import json
import os
import subprocess
import sys
from support import REPO
from support.helpers import interpreter_args

BIN = os.path.dirname(sys.executable)
sys.path.insert(0, os.path.join(REPO, "tests"))
from support import fixturegen  # noqa: E402


def _ansible(*args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
    if args[0] == "ansible":
        args = args + tuple(interpreter_args())
    return subprocess.run([os.path.join(BIN, args[0])] + list(args[1:]), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=180, check=False)


def _module_result(*module_args):
    proc = _ansible("ansible", "localhost", "-m", "gpuhost.kvm.iommu_groups_facts",
                    *module_args)
    # ad-hoc output is "localhost | SUCCESS => {json}" (FAILED! on failure)
    _host, _sep, payload = proc.stdout.partition(" => ")
    assert payload, proc.stdout + proc.stderr
    return proc, json.loads(payload)


def test_ansible_doc_renders_the_module():
    proc = _ansible("ansible-doc", "gpuhost.kvm.iommu_groups_facts")
    assert proc.returncode == 0, proc.stderr
    for needle in ("gpu_vendor", "root", "dirty_groups", "security_findings", "EXAMPLES",
                   "gpuhost.kvm.iommu_groups_facts:", "check_mode"):
        assert needle in proc.stdout, needle


def test_runs_against_this_machine():
    proc, result = _module_result()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = result["ansible_facts"]["gpuhost_iommu"]
    assert isinstance(facts["enabled"], bool)
    assert facts["enabled"] == bool(os.listdir("/sys/kernel/iommu_groups")
                                    if os.path.isdir("/sys/kernel/iommu_groups") else [])
    assert result["changed"] is False


def test_runs_against_a_fixture_root_in_check_mode(tmp_path, module_python):
    root = fixturegen.build_runbook_host(str(tmp_path))
    proc, result = _module_result("-a", "root=%s gpu_vendor=10de" % root, "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = result["ansible_facts"]["gpuhost_iommu"]
    assert [g["address"] for g in facts["gpus"]] == ["0000:65:00.0"]
    assert facts["gpus"][0]["isolated"] is True
    assert facts["sriov_pfs"][0]["numvfs"] == 8


def test_bad_root_fails_with_field_and_fix():
    proc, result = _module_result("-a", "root=/no/such/tree")
    assert proc.returncode != 0
    assert "localhost | FAILED!" in proc.stdout
    assert result["field"] == "root" and "Fix:" in result["msg"]


def _adhoc_facts(module, args):
    proc = _ansible("ansible", "localhost", "-m", module, "-a", args)
    _host, _sep, payload = proc.stdout.partition(" => ")
    assert proc.returncode == 0 and payload, proc.stdout + proc.stderr
    return json.loads(payload)["ansible_facts"]


def test_host_facts_platform_gives_setups_own_facts(tmp_path, module_python):
    """The roles skip setup when host_facts published the platform: the facts must be
    setup's, key for key, on the real machine, and a recorded root must not change them
    (they choose the commands run on the system itself)."""
    setup = _adhoc_facts("setup", "gather_subset=!all,!min,distribution,pkg_mgr")
    live = _adhoc_facts("gpuhost.kvm.host_facts", "gather=platform")
    recorded = _adhoc_facts("gpuhost.kvm.host_facts",
                            "gather=platform root=%s" % fixturegen.build_runbook_host(str(tmp_path)))
    names = ("distribution", "distribution_version", "distribution_major_version",
             "distribution_release", "os_family", "pkg_mgr")
    expected = {name: setup["ansible_" + name] for name in names}
    assert expected["distribution"] and expected["pkg_mgr"] != "unknown", setup
    assert {name: live[name] for name in names} == expected
    assert {name: recorded[name] for name in names} == expected
    assert live["gpuhost_host"]["platform"] == {"published": list(names)}
