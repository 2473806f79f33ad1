# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The iommu role hands kernel_cmdline the plan and its own settings (from_plan), rendered
by ansible-core's Templar from the role's and the plan role's defaults, and checks the new
boot with the same task file in check mode. What the module makes of them is its own
tests' (tests/unit/changes/test_kernel_cmdline_from_plan.py); the reboot itself is the
lab's (tests/lab/test_lab_boot.py, tests/lab/test_el9like_on_lab.py)."""

import os

import pytest
import yaml

from support import REPO
from support.helpers import role_tasks
from support.role_templar import OMITTED, render_in_process

PLAN = {"hugepages": {"0": {"1048576": 8}}, "online_cpus": "0-7", "housekeeping_cpus": "0,4"}


def _defaults(role):
    with open(os.path.join(REPO, "roles", role, "defaults", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _kernel_cmdline_task():
    task, = role_tasks("iommu", "kernel_cmdline.yml")
    return task["gpuhost.kvm.kernel_cmdline"]


def _rendered(**variables):
    values = dict(_defaults("plan"), **_defaults("iommu"))
    values.update(gpuhost_plan=PLAN, **variables)
    task = _kernel_cmdline_task()
    rendered = {key: render_in_process(value, values) for key, value in task["from_plan"].items()}
    rendered["args"] = render_in_process(task["args"], values)
    return rendered


def test_the_role_defaults_hand_the_module_the_plan_and_the_runbooks_choices():
    assert _rendered() == {"plan": PLAN, "iommu_passthrough": True, "ignore_msrs": True,
                           "isolate_tenant_cpus": False, "max_cstate": OMITTED, "args": []}


@pytest.mark.parametrize("asked, given", [(None, OMITTED), ("", OMITTED), (1, 1), (0, 0), ("2", "2")])
def test_the_cstate_limit_is_left_out_unless_set(asked, given):
    # The module's int option takes "2" as 2 and refuses what is not a C-state (its tests).
    assert _rendered(gpuhost_max_cstate=asked)["max_cstate"] == given


def test_the_role_settings_reach_the_module():
    rendered = _rendered(iommu_passthrough_mode=False, iommu_kvm_ignore_msrs="false",
                         gpuhost_isolate_tenant_cpus=True, iommu_extra_kernel_args=["quiet"])
    assert rendered["iommu_passthrough"] is False and rendered["ignore_msrs"] is False
    assert rendered["isolate_tenant_cpus"] is True and rendered["args"] == ["quiet"]


def test_after_the_reboot_the_same_task_file_runs_in_check_mode_and_both_results_are_asserted():
    tasks = role_tasks("iommu", "reboot.yml")
    include, = [t for t in tasks if "ansible.builtin.include_tasks" in t]
    assert include["ansible.builtin.include_tasks"] == {
        "file": "kernel_cmdline.yml", "apply": {"check_mode": True}}
    asserted = " ".join(str(t["ansible.builtin.assert"]["that"]) for t in tasks
                        if "ansible.builtin.assert" in t)
    assert "__iommu_cmdline.missing_active | length == 0" in asserted
    assert "__iommu_cmdline.gigantic_shortfalls | length == 0" in asserted
    main, = [t for t in role_tasks("iommu") if "ansible.builtin.include_tasks" in t
             and t["ansible.builtin.include_tasks"] == "kernel_cmdline.yml"]
    assert "when" not in main    # the boot configuration is written on every run
