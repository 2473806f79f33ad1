# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every task result a role tests (``x is changed``, ``x is failed``, ...) is registered by
a task of that role, on every OS family the testing file runs on. A test of a name nothing
registers fails only when the task runs, with "is undefined", and for the per-OS task files
that can be a platform this machine cannot run (RHEL): the roles test more and more results
since they decide from registered reads of the host, so this is checked statically."""

import glob
import os
import re

import pytest
from support import REPO

ROLES = sorted(os.path.basename(path) for path in glob.glob(os.path.join(REPO, "roles", "*"))
               if os.path.isdir(os.path.join(path, "tasks")))
RESULT_TEST_RE = re.compile(r"\b([A-Za-z_]\w*)\s+is\s+(?:not\s+)?"
                            r"(?:changed|change|failed|failure|succeeded|success|skipped|finished|unreachable)\b")
OS_FAMILIES = ("Debian", "RedHat")
REGISTER_RE = re.compile(r"^\s*register:\s*(\w+)\s*$", re.M)


def _texts(role, *folders):
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(REPO, "roles", role, folder, "*.yml"))):
            with open(path, encoding="utf-8") as handle:
                yield os.path.relpath(path, REPO), handle.read()


def _family(path):
    """The OS family a per-OS task file is for (``packages_RedHat.yml``), else None."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return next((family for family in OS_FAMILIES if stem.endswith("_" + family) or stem == family), None)


def results_tested_but_not_registered(role):
    """[(name, file)] of the results tested in ``role`` that no task registers on every OS
    family the testing file runs on: a per-OS file sees the common task files and its own
    family's; any other file sees what every family registers."""
    common, per_family = set(), {family: set() for family in OS_FAMILIES}
    for path, text in _texts(role, "tasks", "handlers"):
        family = _family(path)
        (per_family[family] if family else common).update(REGISTER_RE.findall(text))
    on_every_family = set.intersection(*per_family.values())
    missing = set()
    for path, text in _texts(role, "tasks", "handlers", "vars", "defaults"):
        family = _family(path)
        registered = common | (per_family[family] if family else on_every_family)
        missing.update((match.group(1), path) for match in RESULT_TEST_RE.finditer(text)
                       if match.group(1) not in registered)
    return sorted(missing)


def test_the_roles_are_found():
    assert {"iommu", "numa", "guest", "vfio"} <= set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_every_tested_result_is_registered_in_the_role(role):
    assert results_tested_but_not_registered(role) == []


def test_the_check_finds_a_result_nothing_registers(tmp_path, monkeypatch):
    tasks = tmp_path / "roles" / "demo" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text("- name: Add the repository\n  ansible.builtin.copy: {}\n"
                                    "- name: Install\n  ansible.builtin.package:\n"
                                    "    update_cache: \"{{ __demo_repo is changed }}\"\n"
                                    "- name: Read\n  ansible.builtin.command: x\n  register: __demo_read\n"
                                    "  when: __demo_read is not skipped\n")
    monkeypatch.setattr(__import__(__name__), "REPO", str(tmp_path))
    assert results_tested_but_not_registered("demo") == [("__demo_repo", "roles/demo/tasks/main.yml")]


def test_a_result_registered_for_one_os_family_only_is_missing_on_the_other(tmp_path, monkeypatch):
    # toolkit_Debian.yml registers the repository, toolkit_RedHat.yml tests it without
    # registering it, and main.yml tests it too.
    tasks = tmp_path / "roles" / "demo" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "toolkit_Debian.yml").write_text("- name: Add\n  ansible.builtin.copy: {}\n  register: __demo_list\n"
                                              "- name: Install\n  ansible.builtin.apt:\n"
                                              "    update_cache: \"{{ __demo_list is changed }}\"\n")
    (tasks / "toolkit_RedHat.yml").write_text("- name: Add\n  ansible.builtin.yum_repository: {}\n"
                                              "- name: Install\n  ansible.builtin.package:\n"
                                              "    update_cache: \"{{ __demo_list is changed }}\"\n")
    (tasks / "main.yml").write_text("- name: Report\n  ansible.builtin.debug: {}\n  when: __demo_list is changed\n")
    monkeypatch.setattr(__import__(__name__), "REPO", str(tmp_path))
    assert results_tested_but_not_registered("demo") == [
        ("__demo_list", "roles/demo/tasks/main.yml"),
        ("__demo_list", "roles/demo/tasks/toolkit_RedHat.yml"),
    ]
