# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lockout protection, in process against the simulated kernel (the lab proves it again
on a real kernel): vfio_bind never takes the disk controller of "/", the NIC of the
default route or of the SSH session, or the boot VGA with an active console, not even
when such a device is swept up by ``match``; and nothing in the collection reboots
unless gpuhost_reboot_ok is set."""

import glob
import os
import re

import pytest
import yaml

import harness
from support.helpers import REPO

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.safety_context import read_context
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import read_pci_functions
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.vfio_bind import (
    OVERRIDES, plan_vfio, select_devices)

ROOT_DISK, ROUTE_NIC, SSH_NIC, BOOT_VGA = ("0000:01:00.0", "0000:03:00.0", "0000:44:00.0",
                                           "0000:42:00.0")
# ens2 (0000:44:00.0) carries 172.16.0.0/16 in the simulated host's routing table.
SSH_CONNECTION = "10.1.1.1 40000 172.16.0.9 22"


@pytest.fixture
def host(tmp_path):
    return harness.Host(tmp_path / "host", "sim")


def _refused(host, tally, args):
    """vfio_bind must refuse; the host and every driver binding stay as they were."""
    tally.bump("lockout", "tried")
    before = harness.host_state(host)
    err = harness.run_module_case(host, "vfio_bind", args)
    assert err is not None, "vfio_bind accepted %s" % args
    assert harness.state_difference(before, harness.host_state(host)) == []
    tally.bump("lockout", "refused")
    return err


def test_root_disk_controller_is_refused_even_with_every_override(host, tally):
    err = _refused(host, tally, dict({o: True for o in OVERRIDES}, devices=[ROOT_DISK]))
    assert "0000:01:00.0 holds the root filesystem" in err.message
    assert "(no override)" in err.message
    assert host.kernel.driver_of(ROOT_DISK) == "nvme"


def test_default_route_nic_is_refused(host, tally):
    err = _refused(host, tally, {"devices": [ROUTE_NIC]})
    assert "0000:03:00.0 is the NIC of the default route (eno1)" in err.message
    assert err.field == "allow_host_critical"


def test_ssh_session_nic_is_refused(host, tally):
    """The module reads SSH_CONNECTION only on a live root, so this goes through the same
    core with the session given."""
    tally.bump("lockout", "tried")
    before = harness.host_state(host)
    functions = read_pci_functions(host.root)
    selected, companions = select_devices(functions, [SSH_NIC])
    context = read_context(host.root, functions, ssh_connection=SSH_CONNECTION)
    with pytest.raises(GpuhostError) as info:
        plan_vfio(host.kernel, context, selected, companions)
    assert "0000:44:00.0 is the NIC of the current SSH connection (ens2)" in info.value.message
    assert harness.state_difference(before, harness.host_state(host)) == []
    assert host.kernel.writes == []
    tally.bump("lockout", "refused")


def test_boot_vga_with_console_is_refused(host, tally):
    err = _refused(host, tally, {"devices": [BOOT_VGA]})
    assert "0000:42:00.0 boot VGA with an active console" in err.message
    assert host.kernel.driver_of(BOOT_VGA) == "nvidia"


def test_match_that_sweeps_in_the_boot_vga_binds_nothing_at_all(host, tally):
    """match vendor 10de selects the tenant GPU and the console GPU: the whole task is
    refused, the tenant GPU is not bound on its own (never half-applied)."""
    err = _refused(host, tally, {"match": {"vendor": "10de"}})
    assert "0000:42:00.0 boot VGA" in err.message
    assert host.kernel.driver_of("0000:41:00.0") == "nvidia"
    assert host.kernel.writes == []


def test_match_that_sweeps_in_the_route_nic_binds_nothing_at_all(host, tally):
    err = _refused(host, tally, {"match": {"vendor": "15b3"}})
    assert "0000:03:00.0 is the NIC of the default route (eno1)" in err.message
    assert host.kernel.writes == []


# -- reboots -------------------------------------------------------------------------------

REBOOT_MODULES = ("ansible.builtin.reboot", "reboot", "community.general.shutdown",
                  "ansible.builtin.shutdown")
REBOOT_COMMAND = re.compile(r"\b(reboot|shutdown\s+-r|systemctl\s+(reboot|kexec)|init\s+6)\b")
COMMAND_MODULES = ("ansible.builtin.command", "ansible.builtin.shell", "command", "shell",
                   "ansible.builtin.raw", "raw")


def _conditions(task):
    when = task.get("when", [])
    return [str(w) for w in (when if isinstance(when, list) else [when])]


def _walk(tasks, inherited=()):
    for task in tasks or ():
        if not isinstance(task, dict):
            continue
        conditions = list(inherited) + _conditions(task)
        for key in ("block", "rescue", "always"):
            if key in task:
                yield from _walk(task[key], conditions)
        yield task, conditions


def _reboots(task):
    if any(module in task for module in REBOOT_MODULES):
        return True
    for module in COMMAND_MODULES:
        if module in task:
            argv = task[module]
            text = " ".join(argv.get("argv") or [argv.get("cmd", "")]) \
                if isinstance(argv, dict) else str(argv)
            if REBOOT_COMMAND.search(text):
                return True
    return False


def _task_files():
    patterns = ("roles/*/tasks/*.yml", "roles/*/handlers/*.yml", "playbooks/*.yml", "site.yml")
    return sorted(f for p in patterns for f in glob.glob(os.path.join(REPO, p)))


INCLUDE_MODULES = ("ansible.builtin.include_tasks", "include_tasks",
                   "ansible.builtin.import_tasks", "import_tasks")
REBOOT_OK = re.compile(r"\bgpuhost_reboot_ok\s*\|\s*bool\b")


def _file_tasks(path):
    with open(path) as handle:
        data = yaml.safe_load(handle) or []
    plays = data if isinstance(data, list) else []
    tasks = []
    for item in plays:
        if isinstance(item, dict) and "hosts" in item:      # a play
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                tasks += item.get(key) or []
        else:
            tasks.append(item)
    return tasks


def _included_file(path, task):
    """The tasks file an include_tasks/import_tasks task names, relative to its role's
    tasks/ directory (a name with a template resolves to no file)."""
    for module in INCLUDE_MODULES:
        if module in task:
            target = task[module]
            target = target.get("file") if isinstance(target, dict) else target
            if not target or "{{" in str(target):
                return None
            return os.path.normpath(os.path.join(os.path.dirname(path), str(target)))
    return None


def _includes():
    """{included file: [(including file, task name, conditions of the include)]}."""
    found = {}
    for path in _task_files():
        for task, conditions in _walk(_file_tasks(path)):
            target = _included_file(path, task)
            if target is not None:
                found.setdefault(target, []).append((path, task.get("name"), conditions))
    return found


def test_every_reboot_task_is_guarded_by_gpuhost_reboot_ok(tally):
    """Every reboot task is guarded by gpuhost_reboot_ok by itself (its own when or its
    blocks'), and a tasks file holding one is only ever included by tasks guarded by it
    too: roles/iommu/tasks/reboot.yml, which main.yml includes."""
    reboot_tasks = []
    includes = _includes()
    for path in _task_files():
        for task, conditions in _walk(_file_tasks(path)):
            if _reboots(task):
                reboot_tasks.append((os.path.relpath(path, REPO), task.get("name"),
                                     conditions))
    tally.bump("lockout", "tried")
    assert reboot_tasks, "no reboot task found: the scan no longer sees the iommu role's"
    unguarded = [t for t in reboot_tasks if not any(REBOOT_OK.search(c) for c in t[2])]
    assert not unguarded, "reboot tasks without gpuhost_reboot_ok: %s" % unguarded
    # The iommu role is the one place that may reboot (kernel arguments), in its own file.
    assert [t[0] for t in reboot_tasks] == ["roles/iommu/tasks/reboot.yml"], reboot_tasks
    for relpath in {t[0] for t in reboot_tasks}:
        path = os.path.join(REPO, relpath)
        if relpath.endswith("/tasks/main.yml"):
            continue
        includers = includes.get(path, [])
        assert includers, "%s holds a reboot task but nothing includes it" % relpath
        unguarded = [(os.path.relpath(p, REPO), name, c) for p, name, c in includers
                     if not any(REBOOT_OK.search(w) for w in c)]
        assert not unguarded, "%s (a reboot) is included without gpuhost_reboot_ok: %s" % (
            relpath, unguarded)
        assert [os.path.relpath(p, REPO) for p, dummy, dummy in includers] == \
            ["roles/iommu/tasks/main.yml"], includers
    tally.bump("lockout", "refused")


REBOOT_INCLUDE = ("Drain the tenants, reboot to apply the kernel arguments, check them, start "
                  "the tenants again")


def test_check_mode_with_kernel_args_missing_runs_no_reboot(tmp_path, tally):
    """A host whose kernel lacks the IOMMU arguments needs a reboot; without
    gpuhost_reboot_ok the run says so and the reboot task is skipped."""
    tally.bump("lockout", "tried")
    host = harness.Host(tmp_path / "host", "runbook",
                        {"cmdline": "BOOT_IMAGE=/vmlinuz-6.1.0-18-amd64 root=/dev/sda2 ro"})
    env = harness.ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = harness.run_playbook(host, harness.role_playbook(host, ["plan", "iommu"]),
                                {"gpuhost_reboot_ok": False}, check=True, env=env)
    # The reboot is behind one include (roles/iommu/tasks/reboot.yml): skipped, it runs
    # neither the drain nor the reboot, which are not even listed then.
    include = "TASK [gpuhost.kvm.iommu : %s]" % REBOOT_INCLUDE
    assert include in proc.output, proc.output[-3000:]
    assert "Reboot to apply the kernel arguments" not in proc.output
    after = proc.output.split(include, 1)[1].split("TASK [", 1)[0]
    assert "skipping:" in after and "changed:" not in after and "ok:" not in after, after
    assert "gpuhost_reboot_required: True" in proc.output or \
        '"gpuhost_reboot_required: True"' in proc.output, proc.output[-3000:]
    tally.bump("lockout", "refused")
