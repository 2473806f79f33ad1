# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""runner.run_module, the one main() body of every module: what a run, a refusal, a
rolled-back change, a gate and an unexpected OSError report; runner.new_module, the one
way every module builds its AnsibleModule: a value ansible-core's own checks crash on is
a refusal naming the option."""

import ast
import contextlib
import glob
import io
import json
import os
import re

import pytest
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import run_module
from ansible_collections.gpuhost.kvm.plugins.modules import (
    gpu_health, initramfs, kernel_cmdline, kserve_loadgen, libvirt_pinned_domain, sriov_vfs,
    vfio_bind)
from support import REPO

MODULES = os.path.join(REPO,
                       "plugins", "modules")


class Reported(Exception):
    def __init__(self, kind, result):
        super().__init__(kind)
        self.kind, self.result = kind, result


class Module:
    def fail_json(self, **result):
        raise Reported("fail", result)

    def exit_json(self, **result):
        raise Reported("exit", result)


class Worker:
    def __init__(self, error=None, result=None, **extra):
        self.error = error
        self._result = result if result is not None else {"changed": True, "planned": ["x"]}
        for name, value in extra.items():
            setattr(self, name, value)

    @property
    def result(self):
        return dict(self._result)

    def run(self):
        if self.error is not None:
            raise self.error


def _report(worker, **kwargs):
    with pytest.raises(Reported) as reported:
        run_module(Module(), worker, **kwargs)
    return reported.value.kind, reported.value.result


def test_a_run_exits_with_the_workers_result():
    assert _report(Worker()) == ("exit", {"changed": True, "planned": ["x"]})


def test_a_refusal_keeps_the_result_and_adds_the_field_and_the_fix():
    kind, result = _report(Worker(GpuhostError("bad cpu 999", field="cpus", fix="give a host CPU")))
    assert kind == "fail" and result["field"] == "cpus" and "give a host CPU" in result["msg"]
    assert result["planned"] == ["x"] and result["changed"] is True


@pytest.mark.parametrize("rollback_failed, changed", [(False, False), (True, True)])
def test_a_host_change_that_failed_is_changed_only_when_its_rollback_failed(rollback_failed, changed):
    error = GpuhostError("write failed", field="path", fix="free space",
                         details={"rollback_failed": True} if rollback_failed else {})
    kind, result = _report(Worker(error), changes_host=True)
    assert kind == "fail" and result["changed"] is changed


def test_a_facts_worker_reports_no_partial_fact_when_it_fails():
    worker = Worker(GpuhostError("no", field="root", fix="fix"), result={"ansible_facts": {"x": {"half": 1}}},
                    failed_result={"changed": False, "ansible_facts": {}})
    kind, result = _report(worker)
    assert kind == "fail" and result["ansible_facts"] == {} and result["field"] == "root"


def test_a_gate_that_was_not_met_fails_with_the_whole_result():
    kind, result = _report(Worker(result={"changed": False, "msg": "P99 over target"}, failed=True))
    assert kind == "fail" and result == {"changed": False, "msg": "P99 over target"}


def test_an_oserror_is_reported_with_the_workers_message_and_traceback():
    worker = Worker(OSError(28, "No space left on device"), os_error_message="cannot update the ledger /l: %s")
    kind, result = _report(worker)
    assert kind == "fail" and result["msg"].startswith("cannot update the ledger /l: [Errno 28] No space left")
    assert "Traceback" in result["exception"]


def test_an_oserror_without_a_message_is_not_hidden():
    with pytest.raises(OSError):
        run_module(Module(), Worker(OSError(5, "I/O error")))


def test_every_module_reports_through_run_module():
    """No copied try/except main(): each main() builds its module and calls run_module."""
    for path in sorted(glob.glob(os.path.join(MODULES, "*.py"))):
        tree = ast.parse(open(path, encoding="utf-8").read())
        main = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"]
        assert main, path
        calls = [node.func.id for node in ast.walk(main[0])
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
        assert "run_module" in calls, "%s: main() does not call run_module" % path
        assert not any(isinstance(node, ast.Try) for node in ast.walk(main[0])), "%s: main() has its own try" % path


def build_outcome(module_file, args):
    """Build ``module_file``'s module from ``args``: ("built", module) or ("failed",
    the JSON result its fail_json printed)."""
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out):
        try:
            return "built", module_file.build_module()
        except SystemExit as exit_info:
            assert exit_info.code == 1
    return "failed", json.loads(out.getvalue())


@pytest.mark.parametrize("module_file, args, field, crash", [
    # check_type_float: float(10**400) raises OverflowError
    (gpu_health, {"max_temperature_c": 10 ** 400}, "max_temperature_c", "OverflowError"),
    (kserve_loadgen, {"url": "http://127.0.0.1:1/v2/models/m/infer", "model": "m",
                      "requests": 1, "timeout_s": -10 ** 400}, "timeout_s", "OverflowError"),
    # set_fallbacks: "in" on the int of a list given where a dict with suboptions is due
    (vfio_bind, {"match": [1]}, "match", "TypeError"),
])
def test_a_value_ansible_core_crashes_on_is_a_refusal_naming_the_option(
        module_file, args, field, crash):
    kind, result = build_outcome(module_file, args)
    assert kind == "failed"
    assert result["failed"] is True and result["changed"] is False
    assert result["field"] == field
    assert result["msg"].startswith(field + ": ansible-core could not check the value given (" + crash)
    assert "Fix: give %s a value of type " % field in result["msg"]
    assert "Traceback" not in json.dumps(result)


def test_a_crash_of_the_checks_that_no_single_option_causes_names_none(monkeypatch):
    """An option alone passes its check again: the message is the generic one."""
    from ansible.module_utils.basic import AnsibleModule
    calls = []

    def crashing_once(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise ValueError("crash of the checks")
        return AnsibleModule(*args, **kwargs)
    monkeypatch.setattr(gpu_health, "AnsibleModule", crashing_once)
    kind, result = build_outcome(gpu_health, {"max_temperature_c": 80})
    assert kind == "failed" and "field" not in result
    assert result["msg"].startswith("ansible-core could not check the options given "
                                    "(ValueError: crash of the checks). Fix: ")


def test_valid_input_builds_the_same_module_as_ansible_module():
    kind, module = build_outcome(vfio_bind, {"devices": ["0000:41:00.0"],
                                             "match": {"vendor": "10de"}})
    assert kind == "built"
    assert module.params["match"] == {"vendor": "10de", "device": None, "class": None, "gpu": False}
    assert module.params["devices"] == ["0000:41:00.0"]


def test_every_module_builds_its_ansible_module_through_new_module():
    for path in sorted(glob.glob(os.path.join(MODULES, "*.py"))):
        source = open(path, encoding="utf-8").read()
        assert re.search(r"new_module\(\s*AnsibleModule, argument_spec=", source), path
        assert "AnsibleModule(" not in source, "%s builds AnsibleModule itself" % path


def test_a_list_option_of_a_million_items_is_refused_before_ansible_core_checks_each():
    kind, result = build_outcome(vfio_bind, {"devices": ["0000:41:00.0"] * 10 ** 6})
    assert kind == "failed" and result["field"] == "devices" and result["changed"] is False
    assert result["msg"].startswith("devices: 1000000 items are more than the 65536 a list "
                                    "option takes")


@pytest.mark.parametrize("root, words", [("a\x00b", "holds control characters"),
                                         ("../../etc", "is a relative path"),
                                         ("/etc/hostname", "is not a directory")])
def test_the_shared_root_is_checked_for_every_module(root, words):
    kind, result = build_outcome(vfio_bind,
                                 {"devices": ["0000:41:00.0"], "root": root})
    assert kind == "failed" and result["field"] == "root" and words in result["msg"]


@pytest.mark.parametrize("value, words", [("a,b", "'a,b' is text, not a list of mappings"),
                                          (["a"], "an item is text, not a mapping")])
def test_text_for_a_list_of_mappings_is_refused_naming_the_option(value, words):
    """ansible-core's own message for it names no option."""
    kind, result = build_outcome(sriov_vfs, {"pf": "eno1", "num_vfs": 1, "vfs": value})
    assert kind == "failed" and result["field"] == "vfs" and words in result["msg"]


@pytest.mark.parametrize("args, field", [
    ({"pf": "eno1", "num_vfs": "\u0661"}, "num_vfs"),                            # Arabic-Indic 1
    ({"pf": "eno1", "num_vfs": 1, "vfs": [{"index": "\uff10"}]}, "vfs[0].index"),  # fullwidth 0
])
def test_a_number_in_lookalike_digits_is_refused_naming_the_option(args, field):
    """int() reads them as numbers; ansible-core's check of an int option uses int()."""
    kind, result = build_outcome(sriov_vfs, args)
    assert kind == "failed" and result["field"] == field
    assert "holds digits other than 0-9" in result["msg"]


def test_a_refused_million_items_are_shown_by_their_count_in_the_invocation():
    """ansible-core's no_log scrub and JSON of a million items took longer than the
    fuzzer's 20 s bound for a run on a busy machine."""
    kind, result = build_outcome(vfio_bind, {"devices": ["0000:41:00.0"] * 10 ** 6})
    assert kind == "failed"
    assert result["invocation"]["module_args"]["devices"] == "(1000000 items, not shown)"


def test_a_refusal_hides_a_secret_inside_a_mapping_option():
    """The reporter of a refusal takes every option as raw: a no_log suboption (a
    domain's cloud-init user data) was shown in the invocation in the clear."""
    secret = "password: hunter2-7f3a"
    kind, result = build_outcome(libvirt_pinned_domain, {
        "name": "t1", "state": "absent", "vcpus": "\u0661",
        "cloud_init": {"user_data": secret, "seed_path": "/var/lib/seed.iso"}})
    assert kind == "failed" and result["field"] == "vcpus"
    shown = result["invocation"]["module_args"]["cloud_init"]
    assert shown == {"user_data": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER",
                     "seed_path": "/var/lib/seed.iso"}
    assert secret not in json.dumps(result)


def test_a_refusal_in_check_mode_reports_what_was_given_and_changes_nothing():
    kind, result = build_outcome(vfio_bind, {"devices": ["0000:41:00.0"] * (10 ** 5),
                                             "_ansible_check_mode": True})
    assert kind == "failed" and result["changed"] is False
    assert result["invocation"]["module_args"] == {"devices": "(100000 items, not shown)"}


@pytest.mark.parametrize("module_file, args, field, words", [
    # a control character in a path inside a mapping option reached libvirt's XML
    (libvirt_pinned_domain, {"name": "t1", "state": "absent",
                             "cloud_init": {"seed_path": "/var/lib/seed\x1f.iso"}},
     "cloud_init.seed_path", "holds control characters"),
    (libvirt_pinned_domain, {"name": "t1", "state": "absent",
                             "disk": {"path": "overlay.qcow2"}},
     "disk.path", "is a relative path"),
    (initramfs, {"blacklist_modules": ["nouveau"], "extra_inputs": ["/etc/a", "etc/b"]},
     "extra_inputs[1]", "is a relative path"),
    (kernel_cmdline, {"args": ["iommu=pt"], "grub_cfg": "/boot/grub/grub.cfg\n"},
     "grub_cfg", "holds control characters"),
])
def test_every_path_option_is_checked_before_the_module_runs(module_file, args, field, words):
    kind, result = build_outcome(module_file, args)
    assert kind == "failed" and result["field"] == field and words in result["msg"]
    assert result["changed"] is False
