# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every module that changes the host decides, then acts, on the one worker base
(engine/runner.py PlannedChange): read from the source with ast. A module changes the
host when it builds a change set, writes a state file, runs systemctl, or reports
through ``run_module(..., changes_host=True)``; each such module's worker subclasses
PlannedChange, and a module that changes nothing has no such worker. (The writer alone
is no sign: host_facts reads the irqbalance config through it, as the irq_affinity core
that it shares reads it.)"""

import ast
import os

import pytest
from support import REPO

MODULES = os.path.join(REPO, "plugins", "modules")
PACKAGE = "ansible_collections.gpuhost.kvm.plugins.module_utils."
WRITERS = {"engine.changeset", "engine.state_file", "engine.systemd"}


def _tree(name):
    with open(os.path.join(MODULES, name + ".py"), encoding="utf-8") as handle:
        return ast.parse(handle.read())


def _changes_host(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE) \
                and node.module[len(PACKAGE):] in WRITERS:
            return True
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_module" and any(
                k.arg == "changes_host" and getattr(k.value, "value", None) is True for k in node.keywords):
            return True
    return False


def _planned_workers(tree):
    return [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            and any(getattr(base, "id", None) == "PlannedChange" for base in node.bases)]


NAMES = sorted(name[:-3] for name in os.listdir(MODULES)
               if name.endswith(".py") and not name.startswith("_"))


@pytest.mark.parametrize("name", NAMES)
def test_a_module_that_changes_the_host_has_a_planned_change_worker(name):
    tree = _tree(name)
    if _changes_host(tree):
        assert _planned_workers(tree), (
            "%s changes the host but its worker does not subclass PlannedChange: decide "
            "in decide(), act in apply() (engine/runner.py)" % name)
    else:
        assert not _planned_workers(tree), "%s changes nothing: it needs no PlannedChange" % name


def test_the_changing_modules_are_the_ones_the_guard_finds():
    # A module this guard stopped seeing as changing (an import renamed) fails here.
    changing = [name for name in NAMES if _changes_host(_tree(name))]
    assert changing == [
        "fabric_partition", "fleet_report", "host_files", "host_units", "initramfs", "irq_affinity",
        "kernel_cmdline", "libvirt_pinned_domain", "sriov_vfs", "tenant_drain", "tenant_ledger",
        "tenant_scrub", "vfio_bind"], changing


# The worker base's methods: an attribute of the same name set on a worker hides the
# method (tenant_drain's list ``pending`` once hid a method of that name).
BASE_METHODS = {"run", "decide", "apply", "has_work", "diff", "change_result", "done", "result"}


@pytest.mark.parametrize("name", NAMES)
def test_no_worker_hides_a_method_of_the_base_with_an_attribute(name):
    hidden = set()
    for worker in ast.walk(_tree(name)):
        if isinstance(worker, ast.ClassDef) and worker.name in _planned_workers(_tree(name)):
            for node in ast.walk(worker):
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
                for target in targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Attribute) and getattr(leaf.value, "id", None) == "self" \
                                and leaf.attr in BASE_METHODS:
                            hidden.add(leaf.attr)
    assert not hidden, "%s sets self.%s, which hides PlannedChange's own" % (name, ", self.".join(sorted(hidden)))
