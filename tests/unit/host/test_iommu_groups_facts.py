# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The iommu_groups_facts module: arguments in, one fact out, failures name the field."""

import json
import os

import pytest
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.modules import iommu_groups_facts

from support import fixturegen


def _run(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            iommu_groups_facts.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_returns_only_the_fact_and_changes_nothing(tmp_path, capsys):
    root = fixturegen.build_dirty_usb_group_host(str(tmp_path))
    before = sorted(os.walk(root))
    code, result = _run(capsys, root=root, _ansible_check_mode=True)
    assert code == 0 and result["changed"] is False
    assert list(result["ansible_facts"]) == ["gpuhost_iommu"]
    facts = result["ansible_facts"]["gpuhost_iommu"]
    assert facts["dirty_groups"][0]["foreign"][0]["class_name"] == "USB controller"
    assert sorted(os.walk(root)) == before


def test_gpu_vendor_filter(tmp_path, capsys):
    root = fixturegen.build_amd_nps4_host(str(tmp_path))
    _code, result = _run(capsys, root=root, gpu_vendor="1002")
    assert [g["address"] for g in result["ansible_facts"]["gpuhost_iommu"]["gpus"]] == [
        "0000:81:00.0"]


@pytest.mark.parametrize("args, field", [
    ({"root": "/does/not/exist"}, "root"),
    ({"root": "/", "gpu_vendor": "nvidia"}, "gpu_vendor"),
])
def test_bad_input_names_field_and_fix(capsys, args, field):
    code, result = _run(capsys, **args)
    assert code == 1 and result["failed"]
    assert result["field"] == field and "Fix:" in result["msg"]
    assert result["ansible_facts"] == {}


def test_root_without_sys_or_proc_is_refused(tmp_path, capsys):
    code, result = _run(capsys, root=str(tmp_path))
    assert code == 1 and result["field"] == "root" and "neither sys/ nor proc/" in result["msg"]
