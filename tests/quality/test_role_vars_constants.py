# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role's vars/main.yml holds constants only: role vars outrank the
inventory and the play, so a derived expression there (one that reads a registered
result, a fact or another variable) cannot be overridden and is hard to find from the
task that reads it. Derived names live in the vars of the task, block or include that
reads them. Checked on the parsed YAML, so a comment that mentions Jinja does not count."""

import glob
import os

import pytest
import yaml
from support import REPO

ROLES = sorted(os.path.basename(path) for path in glob.glob(os.path.join(REPO, "roles", "*"))
               if os.path.isdir(os.path.join(path, "tasks")))

JINJA_MARKERS = ("{{", "{%")


def _holds_jinja(value):
    if isinstance(value, str):
        return any(marker in value for marker in JINJA_MARKERS)
    if isinstance(value, dict):
        return any(_holds_jinja(key) or _holds_jinja(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_jinja(item) for item in value)
    return False


def derived_role_vars(role):
    """The names in ``role``'s vars/main.yml whose values (nested lists and dicts
    included) hold Jinja; [] when the role has no such file."""
    path = os.path.join(REPO, "roles", role, "vars", "main.yml")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        variables = yaml.safe_load(handle) or {}
    return sorted(name for name, value in variables.items() if _holds_jinja(name) or _holds_jinja(value))


def test_every_role_is_checked():
    assert {"bios", "iommu", "vfio", "numa", "vm", "sriov_irq", "guest", "benchmark",
            "validate", "plan"} <= set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_vars_main_holds_constants_only(role):
    assert derived_role_vars(role) == [], (
        "roles/%s/vars/main.yml holds Jinja: move these names to the vars of the task, block or "
        "include that reads them" % role)


def test_the_check_finds_jinja_in_values_not_in_comments(tmp_path, monkeypatch):
    vars_dir = tmp_path / "roles" / "demo" / "vars"
    vars_dir.mkdir(parents=True)
    (vars_dir / "main.yml").write_text(
        "---\n"
        "# {{ in a comment }} is no value\n"
        "__demo_service: demo\n"
        "__demo_flags: ['!all', '!min']\n"
        "__demo_port: 8000\n"
        "__demo_root: \"{{ gpuhost_sysfs_root | default('/') }}\"\n"
        "__demo_files:\n"
        "  - {ext: json, text: \"{{ __demo_report | to_json }}\"}\n"
        "__demo_by_runtime:\n"
        "  docker: {bin: \"{% if x %}/usr/bin/docker{% endif %}\"}\n"
        "__demo_path: /etc/{{ __demo_service }}.service\n")
    monkeypatch.setattr(__import__(__name__), "REPO", str(tmp_path))
    assert derived_role_vars("demo") == ["__demo_by_runtime", "__demo_files", "__demo_path", "__demo_root"]
    assert derived_role_vars("absent") == []
