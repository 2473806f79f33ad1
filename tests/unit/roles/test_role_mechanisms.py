# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' mechanisms come from the host's files: the detector
runs on fixture trees, and the roles' own expressions (read from roles/, rendered with
ansible-core's Templar) turn its answer into the module arguments, packages and
services. No play runs; what the modules then do with the arguments is their own tests'."""

import os

import pytest
import yaml

from support.mechanism_trees import debian12, debian12_with_dracut, rhel9

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import mechanisms
from support.helpers import role_tasks
from support.role_templar import OMITTED, render_in_process as _render
from support import REPO

ROLES = os.path.join(REPO, "roles")


def _yaml(*parts):
    with open(os.path.join(ROLES, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _task(role, starts, module, file="main.yml"):
    task = next(t for t in role_tasks(role, file) if t.get("name", "").startswith(starts))
    return task[module], task.get("when", [])


def _facts(tree, family, tmp_path):
    tree(tmp_path)
    return mechanisms.detect_mechanisms(str(tmp_path), family)


def _iommu_args(found, family):
    variables = dict(_yaml("iommu", "vars", "%s.yml" % family), gpuhost_mechanisms=found)
    cmdline, dummy = _task("iommu", "Put the plan's kernel arguments", "gpuhost.kvm.kernel_cmdline",
                           "kernel_cmdline.yml")
    initramfs, dummy = _task("iommu", "Blacklist the GPU drivers", "gpuhost.kvm.initramfs")
    keys = ("method", "grub_cfg", "grub_update_argv")
    rendered = dict((key, _render(cmdline[key], variables)) for key in keys)
    for key in ("tool", "early_modules_path", "image_pattern", "rebuild_argv", "extra_inputs"):
        rendered[key] = _render(initramfs[key], variables)
    rendered["packages"] = _render(variables["__iommu_packages"], variables)
    return rendered


def test_iommu_role_on_rhel9_uses_grubby_and_dracut(tmp_path):
    args = _iommu_args(_facts(rhel9, "RedHat", tmp_path), "RedHat")
    assert args["method"] == "grubby"
    assert args["grub_cfg"] == args["grub_update_argv"] == OMITTED
    assert args["tool"] == "dracut"
    assert args["early_modules_path"] == "/etc/dracut.conf.d/gpuhost-iommu-vfio.conf"
    assert args["image_pattern"] == "/boot/initramfs-%s.img"
    assert args["extra_inputs"] == ["/etc/dracut.conf.d/gpuhost-vfio.conf"]
    assert args["packages"] == ["grubby", "dracut"]


def test_iommu_role_on_debian12_uses_update_grub_and_initramfs_tools(tmp_path):
    args = _iommu_args(_facts(debian12, "Debian", tmp_path), "Debian")
    assert (args["method"], args["grub_update_argv"], args["grub_cfg"]) == (
        "grub", ["update-grub"], "/boot/grub/grub.cfg")
    assert args["tool"] == "initramfs-tools"
    assert args["rebuild_argv"] == ["update-initramfs", "-u", "-k", "all"]
    assert args["packages"] == ["grub2-common", "initramfs-tools"]


def test_iommu_role_on_debian_with_dracut_rebuilds_with_dracut_and_keeps_initramfs_tools_out(tmp_path):
    args = _iommu_args(_facts(debian12_with_dracut, "Debian", tmp_path), "Debian")
    assert args["tool"] == "dracut"
    assert args["rebuild_argv"] == ["dracut", "--force", "--regenerate-all"]
    assert args["image_pattern"] == "/boot/initrd.img-%s"
    # Installing initramfs-tools would remove dracut again (the packages conflict).
    assert "initramfs-tools" not in args["packages"]


def test_iommu_role_on_an_undecided_tree_leaves_auto_to_the_module_refusal(tmp_path):
    found = mechanisms.detect_mechanisms(str(tmp_path), None)
    args = _iommu_args(found, "Debian")
    assert args["method"] == "auto" and args["tool"] == "auto"
    assert args["image_pattern"] == args["rebuild_argv"] == OMITTED


@pytest.mark.parametrize("tree, family, services", [
    (rhel9, "RedHat", ["virtqemud.service"]),
    (debian12, "Debian", ["libvirtd.service"]),
    # Debian's libvirtd enabled on a host booked as RedHat: the files win.
    (debian12, "RedHat", ["libvirtd.service"]),
])
def test_vm_role_starts_the_libvirt_daemon_the_host_has(tmp_path, tree, family, services):
    found = _facts(tree, family, tmp_path)
    variables = dict(_yaml("vm", "vars", "%s.yml" % family), gpuhost_mechanisms=found)
    assert _render(variables["__vm_services"], variables) == services


def test_vfio_role_rebuilds_only_when_the_host_runs_dracut(tmp_path):
    dummy, when = _task("vfio", "List the binding's files for dracut", "gpuhost.kvm.initramfs")
    condition = next(item for item in when if "gpuhost_mechanisms" in item)
    for tree, expected in ((debian12, False), (debian12_with_dracut, True)):
        root = tmp_path / tree.__name__
        root.mkdir()
        found = _facts(tree, "Debian", root)
        assert _render("{{ %s }}" % condition, {"gpuhost_mechanisms": found}) is expected


def test_stage_reads_the_mechanisms_once_per_play():
    stage = next(t for t in _yaml("plan", "tasks", "stage.yml") if "gpuhost.kvm.host_facts" in t)
    expression = stage["vars"]["__stage_missing"]
    base = {"ansible_facts": {"pkg_mgr": "apt", "os_family": "Debian", "packages": {}}}
    assert _render(expression, base) == ["mechanisms"]
    assert _render(expression, dict(base, gpuhost_mechanisms={})) == []
    bios = next(t for t in _yaml("bios", "tasks", "main.yml") if "gpuhost.kvm.host_facts" in t)
    # The bios role's read, the first of the play, takes the mechanisms and the packages
    # with it, so the stage include of every role after it reads neither again.
    assert {"mechanisms", "packages"} <= set(bios["gpuhost.kvm.host_facts"]["gather"])
    assert _render(expression, dict(base, ansible_facts={"pkg_mgr": "apt", "os_family": "Debian"},
                                    gpuhost_mechanisms={}, gpuhost_host_read={})) == []
    assert _render(expression, dict(base, ansible_facts={"pkg_mgr": "apt", "os_family": "Debian"},
                                    gpuhost_mechanisms={})) == ["packages"]
