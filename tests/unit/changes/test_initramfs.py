# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuhost.kvm.initramfs against temporary root trees. Only the generator
(update-initramfs, dracut) is mocked, and each test that mocks it says so in its name."""

import os
import time

import pytest

from support.sysfs_sim import run_module, snapshot

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.modules import initramfs

BLACKLIST = "/etc/modprobe.d/gpuhost-blacklist-gpu.conf"
MODULES = "/etc/initramfs-tools/modules"
IMAGE = "/boot/initrd.img-6.1.0-18-amd64"
ARGS = {"blacklist_modules": ["nouveau", "nvidia"], "module_options": ["nouveau modeset=0"],
        "early_modules": ["vfio", "vfio_iommu_type1", "vfio_pci"],
        "image_pattern": "/boot/initrd.img-%s", "rebuild_argv": ["update-initramfs", "-u", "-k", "all"]}


def _full(root, path):
    return os.path.join(str(root), path.lstrip("/"))


def _write(root, path, text, age=0):
    full = _full(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(text)
    if age:
        stamp = time.time() - age
        os.utime(full, (stamp, stamp))


def _read(root, path):
    with open(_full(root, path), encoding="utf-8") as handle:
        return handle.read()


class UpdateInitramfs:
    """Plays update-initramfs: writes every installed kernel's image anew."""

    def __init__(self, root, rc=0):
        self.root, self.rc, self.calls = str(root), rc, []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if self.rc:
            return self.rc, "", "mkinitramfs: failed to determine device for /\n"
        _write(self.root, IMAGE, "image\n")
        return 0, "", ""


def _host(root):
    os.makedirs(_full(root, "/lib/modules/6.1.0-18-amd64"))
    _write(root, MODULES, "# admin's line\nloop\n", age=3600)
    _write(root, IMAGE, "old image\n", age=60)


def _run(root, check_mode=False, commands=None, **args):
    params = dict(ARGS, root=str(root), **args)
    return run_module(initramfs, "Initramfs", params, HostWriter(str(root)),
                      check_mode=check_mode, run_command=commands)


def test_mocked_update_initramfs_writes_rebuilds_then_is_idempotent(tmp_path):
    _host(tmp_path)
    gen = UpdateInitramfs(tmp_path)
    first = _run(tmp_path, commands=gen).result
    assert first["steps"] == ["create %s" % BLACKLIST, "update %s" % MODULES,
                              "run update-initramfs -u -k all"]
    assert first["rebuilt"] and first["reboot_required"] and first["changed"]
    assert _read(tmp_path, BLACKLIST) == (
        "# Managed by gpuhost.kvm (iommu role): this host passes its GPUs through whole,\n"
        "# so no host driver may claim them before vfio-pci (runbook section 4).\n"
        "blacklist nouveau\nblacklist nvidia\noptions nouveau modeset=0\n")
    assert _read(tmp_path, MODULES) == (
        "# admin's line\nloop\n"
        "# BEGIN gpuhost.kvm iommu role: load vfio-pci before any GPU driver\n"
        "vfio\nvfio_iommu_type1\nvfio_pci\n"
        "# END gpuhost.kvm iommu role: load vfio-pci before any GPU driver\n")
    again = _run(tmp_path, commands=gen).result
    assert not again["changed"] and not again["rebuilt"] and again["stale"] == []
    assert len(gen.calls) == 1


def test_check_mode_reports_and_writes_nothing_with_mocked_update_initramfs(tmp_path):
    _host(tmp_path)
    before = snapshot(str(tmp_path))
    gen = UpdateInitramfs(tmp_path)
    result = _run(tmp_path, check_mode=True, commands=gen).result
    assert result["changed"] and result["rebuilt"] and len(result["diff"]) == 2
    assert snapshot(str(tmp_path)) == before and gen.calls == []


def test_killed_run_inputs_written_image_stale_rebuilds_with_mocked_update_initramfs(tmp_path):
    _host(tmp_path)
    _run(tmp_path)   # another root: files written, no rebuild (as a run killed before it)
    gen = UpdateInitramfs(tmp_path)
    result = _run(tmp_path, commands=gen).result
    assert result["stale"] == [IMAGE] and result["rebuilt"]
    assert result["steps"] == ["run update-initramfs -u -k all"] and gen.calls


def test_extra_input_newer_than_the_image_rebuilds_with_mocked_dracut(tmp_path):
    os.makedirs(_full(tmp_path, "/lib/modules/5.14.0"))
    _write(tmp_path, "/boot/initramfs-5.14.0.img", "old\n", age=60)
    _write(tmp_path, "/etc/dracut.conf.d/gpuhost-vfio.conf", "install_items+=\" x \"\n")
    calls = []
    result = _run(tmp_path, commands=lambda argv: calls.append(argv) or (0, "", ""),
                  tool="dracut", blacklist_modules=[], module_options=[], early_modules=[],
                  extra_inputs=["/etc/dracut.conf.d/gpuhost-vfio.conf"],
                  image_pattern="/boot/initramfs-%s.img",
                  rebuild_argv=["dracut", "--force", "--regenerate-all"]).result
    assert calls == [["dracut", "--force", "--regenerate-all"]] and result["rebuilt"]


def test_dracut_block_is_a_force_drivers_line(tmp_path):
    result = _run(tmp_path, tool="dracut", early_modules_path="/etc/dracut.conf.d/gpuhost-iommu-vfio.conf",
                  image_pattern="/boot/initramfs-%s.img").result
    assert result["skipped"] == ["update-initramfs -u -k all"]
    assert 'force_drivers+=" vfio vfio_iommu_type1 vfio_pci "\n' in _read(
        tmp_path, "/etc/dracut.conf.d/gpuhost-iommu-vfio.conf")


def test_failed_update_initramfs_mocked_rolls_the_files_back(tmp_path):
    _host(tmp_path)
    before = snapshot(str(tmp_path))
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, commands=UpdateInitramfs(tmp_path, rc=1))
    assert "update-initramfs -u -k all exited 1" in info.value.message
    assert info.value.details["rolled_back"] == ["update %s" % MODULES, "create %s" % BLACKLIST]
    assert snapshot(str(tmp_path)) == before


@pytest.mark.parametrize("key,value,field", [
    ("blacklist_modules", ["nouveau\ninstall x /bin/sh"], "blacklist_modules[0]"),
    ("blacklist_modules", ['a"b'], "blacklist_modules[0]"),
    ("early_modules", ["vfio pci"], "early_modules[0]"),
    ("module_options", ["nouveau modeset=0\ninstall"], "module_options[0]"),
    ("early_modules", ["m%d" % n for n in range(500)], "early_modules"),
    ("rebuild_argv", ["update-initramfs\n-u"], "rebuild_argv[0]"),
    ("image_pattern", "/boot/initrd.img", "image_pattern"),
])
def test_hostile_values_are_refused_before_anything_is_written(tmp_path, key, value, field):
    _host(tmp_path)
    before = snapshot(str(tmp_path))
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, commands=UpdateInitramfs(tmp_path), **{key: value})
    assert info.value.field == field
    assert snapshot(str(tmp_path)) == before


def test_force_rebuilds_without_a_newer_input_with_mocked_update_initramfs(tmp_path):
    _host(tmp_path)
    gen = UpdateInitramfs(tmp_path)
    _run(tmp_path, commands=gen)
    result = _run(tmp_path, commands=gen, force=True).result
    assert result["rebuilt"] and result["steps"] == ["run update-initramfs -u -k all"]
    assert len(gen.calls) == 2


DRACUT = {"tool": "dracut", "blacklist_modules": [], "module_options": [], "early_modules": [],
          "image_pattern": "/boot/initramfs-%s.img",
          "rebuild_argv": ["dracut", "--force", "--regenerate-all"]}
RULE = "/etc/udev/rules.d/61-gpuhost-vfio-0000:41:00.0.rules"


def test_install_items_file_is_the_modules_own_and_rebuilds_with_mocked_dracut(tmp_path):
    os.makedirs(_full(tmp_path, "/lib/modules/5.14.0"))
    _write(tmp_path, "/boot/initramfs-5.14.0.img", "old\n", age=60)
    _write(tmp_path, RULE, "rule\n", age=120)
    # What vfio_bind wrote itself before the initramfs module owned the file goes.
    _write(tmp_path, "/etc/dracut.conf.d/gpuhost-vfio.conf",
           "# Managed by gpuhost.kvm vfio_bind\nforce_drivers+=\" vfio \"\n", age=120)
    calls = []
    result = _run(tmp_path, commands=lambda argv: calls.append(argv) or (0, "", ""),
                  install_items=[RULE, "/bin/cat", RULE], **DRACUT).result
    assert _read(tmp_path, "/etc/dracut.conf.d/gpuhost-vfio.conf").endswith(
        'install_items+=" /bin/cat %s "\n' % RULE)
    assert "force_drivers" not in _read(tmp_path, "/etc/dracut.conf.d/gpuhost-vfio.conf")
    assert calls == [["dracut", "--force", "--regenerate-all"]] and result["rebuilt"]


def test_a_rule_newer_than_the_image_rebuilds_though_the_list_is_the_same(tmp_path):
    # A run killed after vfio_bind rewrote a rule and before the rebuild: the list in
    # dracut's file is unchanged, the rule's own age says the image is stale.
    os.makedirs(_full(tmp_path, "/lib/modules/5.14.0"))
    _write(tmp_path, "/etc/dracut.conf.d/gpuhost-vfio.conf", "x\n", age=300)
    _run(tmp_path, install_items=[RULE], **DRACUT)
    os.utime(_full(tmp_path, "/etc/dracut.conf.d/gpuhost-vfio.conf"),
             (time.time() - 300, time.time() - 300))
    _write(tmp_path, "/boot/initramfs-5.14.0.img", "image\n", age=60)
    _write(tmp_path, RULE, "rule\n")
    result = _run(tmp_path, commands=lambda argv: (0, "", ""), install_items=[RULE],
                  **DRACUT).result
    assert result["stale"] == ["/boot/initramfs-5.14.0.img"] and result["rebuilt"]
    assert result["steps"] == ["run dracut --force --regenerate-all"]


def test_no_install_items_left_removes_the_file(tmp_path):
    _write(tmp_path, "/etc/dracut.conf.d/gpuhost-vfio.conf", "install_items+=\" x \"\n")
    result = _run(tmp_path, install_items=[], **DRACUT).result
    assert result["changed"] and not os.path.exists(
        _full(tmp_path, "/etc/dracut.conf.d/gpuhost-vfio.conf"))
    assert _run(tmp_path, install_items=[], **DRACUT).result["changed"] is False


def test_unset_install_items_leaves_the_file_alone(tmp_path):
    _write(tmp_path, "/etc/dracut.conf.d/gpuhost-vfio.conf", "admin's\n")
    _run(tmp_path, **DRACUT)
    assert _read(tmp_path, "/etc/dracut.conf.d/gpuhost-vfio.conf") == "admin's\n"


@pytest.mark.parametrize("item", ["relative/path", "/etc/a b", '/etc/a"', "/etc/$(reboot)",
                                  "/etc/../shadow", "/etc//x", "/etc/`id`", "/etc/a\nb",
                                  "/" + "a" * 300])
def test_install_items_that_dracut_conf_could_misread_are_refused(tmp_path, item):
    before = snapshot(tmp_path)
    with pytest.raises(GpuhostError) as err:
        _run(tmp_path, install_items=["/bin/cat", item], **DRACUT)
    assert err.value.field == "install_items[1]" and snapshot(tmp_path) == before


def test_install_items_with_initramfs_tools_are_refused(tmp_path):
    with pytest.raises(GpuhostError) as err:
        _run(tmp_path, install_items=[RULE])
    assert err.value.field == "install_items" and "initramfs-tools" in err.value.fix


def test_auto_on_debian_with_dracut_installed_picks_dracut_and_says_why(tmp_path):
    # The detector's fixture: dracut's binary and dracut.conf.d, initramfs-tools' old
    # configuration left behind (Debian's dracut replaces initramfs-tools).
    _host(tmp_path)
    _write(tmp_path, "/usr/bin/dracut", "")
    os.makedirs(_full(tmp_path, "/etc/dracut.conf.d"))
    result = _run(tmp_path, tool="auto", early_modules_path="/etc/dracut.conf.d/gpuhost-iommu-vfio.conf",
                  check_mode=True).result
    assert result["tool"] == "dracut"
    assert result["mechanism"]["source"] == "detected"
    assert result["mechanism"]["evidence"]["dracut"] == ["/usr/bin/dracut exists", "/etc/dracut.conf.d exists"]
    assert "create /etc/dracut.conf.d/gpuhost-iommu-vfio.conf" in result["steps"]
    assert result["skipped"] == ["update-initramfs -u -k all"]   # root is a tree: nothing runs


def test_auto_with_no_generator_refuses_with_what_to_install(tmp_path):
    _host(tmp_path)
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, tool="auto")
    assert info.value.field == "tool"
    assert "none found" in info.value.msg and "install dracut or initramfs-tools" in info.value.fix
