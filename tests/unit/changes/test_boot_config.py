# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether grub.cfg and the initramfs images reflect the iommu role's inputs, read from
the host: the grub.cfg files are the lab's own (tests/fixtures/boot-config), and the
initramfs images are read by host_facts' reader on a tree with set modification times."""

import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import kernel_cmdline as cmdline_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import host_facts
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from support import TESTS

FIXTURES = os.path.join(TESTS, "fixtures",
                        "boot-config")
ARGS = ["intel_iommu=on", "iommu=pt", "kvm.ignore_msrs=1"]
BLACKLIST = "/etc/modprobe.d/gpuhost-blacklist-gpu.conf"
MODULES = "/etc/initramfs-tools/modules"
DEBIAN_IMAGE = "/boot/initrd.img-%s"


def _fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def test_grub_cfg_left_by_the_interrupted_run_lacks_the_drop_ins_arguments():
    args = cmdline_core.generated_kernel_args(_fixture("lab-image-grub.cfg"))
    assert args.split()[:2] == ["root=UUID=9ffb3baa-3bde-4f17-9e7e-c823978a8453", "ro"]
    assert cmdline_core.cmdline_missing(args, ARGS) == ARGS


def test_grub_cfg_after_update_grub_has_them_and_keeps_the_operators_arguments():
    args = cmdline_core.generated_kernel_args(_fixture("lab-update-grub.cfg"))
    assert cmdline_core.cmdline_missing(args, ARGS) == []
    assert "mitigations=off" in args.split() and "console=ttyS0,115200n8" in args.split()
    assert not args.startswith("/boot/vmlinuz")          # the image path is not an argument


@pytest.mark.parametrize("text", ["", None, "set timeout=0\nmenuentry 'x' {\n  echo 'Loading Linux'\n}\n"])
def test_grub_cfg_without_a_linux_line_has_no_arguments(text):
    assert cmdline_core.generated_kernel_args(text) is None


def _tree(tmp_path, kernels, files):
    """A root with /lib/modules/<version>/ per kernel and files with set mtimes."""
    for version in kernels:
        (tmp_path / "lib" / "modules" / version).mkdir(parents=True)
    for path, mtime in files.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("x\n")
        os.utime(target, (mtime, mtime))
    return str(tmp_path)


def test_images_built_before_an_input_changed_are_stale(tmp_path):
    root = _tree(tmp_path, ["6.1.0-57-amd64", "6.1.0-58-amd64"], {
        BLACKLIST: 1000, MODULES: 1500,
        "/boot/initrd.img-6.1.0-57-amd64": 1200,     # built between the two writes
        "/boot/initrd.img-6.1.0-58-amd64": 1600})
    state = host_facts.read_initramfs([BLACKLIST, MODULES], DEBIAN_IMAGE, root)
    assert state["inputs"] == {BLACKLIST: 1000, MODULES: 1500}
    assert sorted(state["images"]) == ["/boot/initrd.img-6.1.0-57-amd64",
                                       "/boot/initrd.img-6.1.0-58-amd64"]
    assert state["stale"] == ["/boot/initrd.img-6.1.0-57-amd64"]


def test_images_rebuilt_after_every_input_are_current(tmp_path):
    root = _tree(tmp_path, ["6.1.0-57-amd64"], {
        BLACKLIST: 1000, MODULES: 1500, "/boot/initrd.img-6.1.0-57-amd64": 1500})
    assert host_facts.read_initramfs([BLACKLIST, MODULES], DEBIAN_IMAGE, root)["stale"] == []


def test_missing_inputs_and_kernels_without_an_image_are_skipped(tmp_path):
    # A module directory left behind by a removed kernel has no image; no input exists yet
    # on a host the role never ran on, and check mode must not fail there.
    root = _tree(tmp_path, ["6.1.0-57-amd64", "5.10.0-old"], {
        "/boot/initrd.img-6.1.0-57-amd64": 1200})
    state = host_facts.read_initramfs([BLACKLIST, MODULES], DEBIAN_IMAGE, root)
    assert state["inputs"] == {}
    assert list(state["images"]) == ["/boot/initrd.img-6.1.0-57-amd64"]
    assert state["stale"] == []


def test_rhel_image_pattern_names_one_image_per_installed_kernel(tmp_path):
    # The rescue and kdump images are not built from these inputs: only a kernel's own.
    root = _tree(tmp_path, ["5.14.0-427.el9.x86_64"], {
        "/etc/dracut.conf.d/gpuhost-vfio.conf": 2000,
        "/boot/initramfs-5.14.0-427.el9.x86_64.img": 1000,
        "/boot/initramfs-0-rescue-0123456789abcdef.img": 10,
        "/boot/initramfs-5.14.0-427.el9.x86_64kdump.img": 10})
    state = host_facts.read_initramfs(["/etc/dracut.conf.d/gpuhost-vfio.conf"], "/boot/initramfs-%s.img", root)
    assert state["stale"] == ["/boot/initramfs-5.14.0-427.el9.x86_64.img"]


def test_a_path_with_spaces_is_read_as_it_is(tmp_path):
    root = _tree(tmp_path / "a b", ["6.1.0"], {"/etc/x y.conf": 5, "/boot/initrd.img-6.1.0": 4})
    assert host_facts.read_initramfs(["/etc/x y.conf"], DEBIAN_IMAGE, root)["stale"] == ["/boot/initrd.img-6.1.0"]


@pytest.mark.parametrize("pattern", ["/boot/initrd.img", "boot/initrd.img-%s", "/boot/%s-%s.img",
                                     "/boot/initrd-%d-%s", None])
def test_bad_image_patterns_name_the_field_and_the_fix(pattern):
    with pytest.raises(GpuhostError) as err:
        host_facts.read_initramfs([MODULES], pattern, "/")
    assert err.value.field == "initramfs_image_pattern" and err.value.fix


# -- the C-state limit (runbook section 1: C1/C1E at most) ------------------------------

@pytest.mark.parametrize("asked, wanted", [
    (None, []), ("", []),
    (1, ["intel_idle.max_cstate=1", "processor.max_cstate=1"]),
    (0, ["intel_idle.max_cstate=0", "processor.max_cstate=0"]),
    (9, ["intel_idle.max_cstate=9", "processor.max_cstate=9"]),
    ("2", ["intel_idle.max_cstate=2", "processor.max_cstate=2"]),   # an inventory string
])
def test_cstate_limit_becomes_both_drivers_arguments(asked, wanted):
    assert cmdline_core.cstate_limit_args(asked) == wanted


@pytest.mark.parametrize("asked, words", [
    (10, "gpuhost_max_cstate must be at most 9, got 10"),
    (10 ** 30, "gpuhost_max_cstate must be at most 9"),
    (-1, "gpuhost_max_cstate must be at least 0, got -1"),
    (True, "True is not a whole number"),
    (1.5, "1.5 is not a whole number"),
    (float("nan"), "nan is not a whole number"),
    ("1\nrd.break", "'1\\nrd.break' is not a whole number"),
    ("C1", "'C1' is not a whole number"),
    ("-1", "'-1' is not a whole number"),
    ([1], "[1] is not a whole number"),
])
def test_hostile_cstate_limits_are_refused_naming_the_variable(asked, words):
    with pytest.raises(GpuhostError) as err:
        cmdline_core.cstate_limit_args(asked)
    assert words in err.value.message
    assert err.value.field == "gpuhost_max_cstate"
    assert "at most 9" in err.value.fix or "null for no limit" in err.value.fix
