# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/variables.md names every shared ``gpuhost_*`` variable: each option of the plan
role's argument spec (with its default), each fact a role publishes with set_fact or a
module returns, and each one the playbooks read or set."""

import glob
import os
import re

import yaml
from support import REPO

NAME = re.compile(r"\bgpuhost_[a-z0-9_]+\b")


def _doc():
    with open(os.path.join(REPO, "docs", "variables.md"), encoding="utf-8") as handle:
        return handle.read()


def _documented():
    return set(re.findall(r"`(gpuhost_[a-z0-9_]+)`", _doc()))


def _files(*patterns):
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(REPO, pattern), recursive=True)):
            with open(path, encoding="utf-8") as handle:
                yield path, handle.read()


def test_every_option_of_the_plan_role_is_documented_with_its_default():
    with open(os.path.join(REPO, "roles", "plan", "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    with open(os.path.join(REPO, "roles", "plan", "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle) or {}
    shared = sorted(name for name in options if name.startswith("gpuhost_"))
    assert shared, "the plan role's argument spec lists no gpuhost_ variable"
    rows = {match.group(1): match.group(2) for match in
            re.finditer(r"^\| `(gpuhost_[a-z0-9_]+)` \| `?([^|`]*)`? \|", _doc(), re.M)}
    for name in shared:
        assert name in rows, "%s (roles/plan/meta/argument_specs.yml) has no row in docs/variables.md" % name
        if name in defaults:
            default = defaults[name]
            # an empty string is shown as "", as the other roles' rows show it
            shown = '""' if default == "" else {None: "null", True: "true", False: "false"}.get(default, default) \
                if not isinstance(default, (list, dict)) else ("[]" if default == [] else "{}" if default == {} else None)
            if shown is not None:
                assert rows[name] == str(shown), "%s: docs/variables.md says %r, the default is %r" % (
                    name, rows[name], default)


def test_every_gpuhost_name_the_roles_and_playbooks_use_is_documented():
    used = {}
    for path, text in _files("roles/**/*.yml", "playbooks/**/*.yml", "site.yml"):
        for name in NAME.findall(text):
            used.setdefault(name, os.path.relpath(path, REPO))
    # Names that only appear in comments still count: they name a shared concept.
    missing = sorted("%s (first in %s)" % (name, where) for name, where in used.items()
                     if name not in _documented())
    assert not missing, "docs/variables.md lacks: " + ", ".join(missing)


def test_every_fact_a_module_returns_is_documented():
    facts = set()
    for dummy, text in _files("plugins/modules/*.py"):
        facts.update(re.findall(r'\["ansible_facts"\]\["(gpuhost_[a-z0-9_]+)"\]', text))
        facts.update(re.findall(r'"ansible_facts": \{"(gpuhost_[a-z0-9_]+)"', text))
    assert {"gpuhost_host", "gpuhost_iommu"} <= facts, facts
    assert not sorted(facts - _documented())
