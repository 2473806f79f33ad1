# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Direct kernel boot and the serial console's log in libvirt_pinned_domain: the
options are refused before anything reads the host when they could send QEMU outside
the boot images' directory or carry what a kernel command line cannot; the XML passes
libvirt's schema and round-trips through libvirt's test driver (the comparison sees no
difference on a second run, check mode and --diff show the change); a changed command
line of a running tenant waits for its restart."""

import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import direct_boot as db
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

from support.domain_xml import Env, plan_args

pytest.importorskip("libvirt", reason="libvirt-python is in requirements.txt")

BOOT = "/var/lib/libvirt/boot"
KERNEL, INITRD = BOOT + "/vmlinuz", BOOT + "/initrd.img"
CMDLINE = "console=ttyS0,115200 break=premount panic=-1"
SERIAL_LOG = "/var/log/libvirt/qemu/tenant-a100-serial.log"


def _boot_files(env, *paths):
    for path in paths or (KERNEL, INITRD):
        full = os.path.join(env.root, path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as out:
            out.write(b"\x00" * 64)


def _boot_args(**extra):
    args = plan_args(kernel=KERNEL, initrd=INITRD, cmdline=CMDLINE, serial_log=SERIAL_LOG)
    args.update(extra)
    return args


@pytest.fixture
def env(tmp_path):
    return Env(tmp_path)


def test_direct_boot_renders_kernel_initrd_cmdline_and_serial_log(env):
    _boot_files(env)
    result = env.run(**_boot_args())
    assert result["changed"]
    xml = env.domain("tenant-a100").XMLDesc(0)
    for text in ("<kernel>%s</kernel>" % KERNEL, "<initrd>%s</initrd>" % INITRD,
                 "<cmdline>%s</cmdline>" % CMDLINE,
                 "<log file='%s' append='off'/>" % SERIAL_LOG):
        assert text in xml, xml
    # libvirt's order: the kernel before <boot>
    assert xml.index("<kernel>") < xml.index("<boot dev='hd'/>")


def test_direct_boot_second_run_is_unchanged(env):
    _boot_files(env)
    env.run(**_boot_args())
    again = env.run(**_boot_args())
    assert not again["changed"], again["changed_elements"]


def test_direct_boot_with_uefi_second_run_is_unchanged(env):
    _boot_files(env)
    env.run(**_boot_args(firmware="efi"))
    again = env.run(**_boot_args(firmware="efi"))
    assert not again["changed"], again["changed_elements"]


def test_direct_boot_check_mode_shows_the_os_change_and_defines_nothing(env):
    _boot_files(env)
    env.run(**plan_args())
    result = env.run(check=True, **_boot_args())
    assert result["changed"] and "os" in result["changed_elements"], result["changed_elements"]
    assert "<kernel>%s</kernel>" % KERNEL in result["diff"]["after"]
    assert "<kernel>" not in result["diff"]["before"]
    assert "<kernel>" not in env.domain("tenant-a100").XMLDesc(0)


def test_changed_cmdline_of_a_running_tenant_waits_for_its_restart(env):
    _boot_files(env)
    env.run(**_boot_args(state="running"))
    result = env.run(**_boot_args(state="running", cmdline=CMDLINE + " quiet"))
    assert result["changed"] and result["restart_required"], result
    assert env.domain("tenant-a100").isActive()


@pytest.mark.parametrize("option, value, words", [
    ("kernel", "/etc/shadow", "is not below /var/lib/libvirt/boot"),
    ("kernel", "/var/lib/libvirt/boot/../../../etc/shadow", "is not below"),
    ("kernel", "vmlinuz", "relative path"),
    ("kernel", "/var/lib/libvirt/boot", "is not below"),
    ("kernel", "/var/lib/libvirt/boot/vm\nlinuz", "control characters"),
    ("kernel", "/var/lib/libvirt/boot/" + "k" * 5000, "characters long"),
    ("initrd", "/tmp/initrd.img", "is not below"),
    ("cmdline", "console=ttyS0\ninit=/bin/sh", "printable ASCII"),
    ("cmdline", "console=ttyS0\x00", "printable ASCII"),
    ("cmdline", "root=/dev/vda ＝", "printable ASCII"),
    ("cmdline", "a" * 2048, "characters long"),
    ("serial_log", "/etc/passwd", "is not below /var/log/libvirt"),
    ("boot_images_dir", "/", "boot_images_dir is /"),
    ("boot_images_dir", "relative/boot", "relative path"),
])
def test_hostile_boot_options_are_refused_before_anything_is_defined(env, option, value, words):
    _boot_files(env)
    err = env.fail(**_boot_args(**{option: value}))
    assert err.field == option and words in str(err), (err.field, str(err))
    assert env.names() == []


def test_a_missing_kernel_is_refused_with_the_fix(env):
    err = env.fail(**_boot_args())
    assert err.field == "kernel" and "does not exist" in str(err) and "copy" in err.fix
    assert env.names() == []


def test_a_kernel_reached_through_a_link_is_refused(env, tmp_path):
    outside = tmp_path / "outside-vmlinuz"
    outside.write_bytes(b"\x00")
    _boot_files(env, INITRD)
    os.symlink(str(outside), os.path.join(env.root, KERNEL.lstrip("/")))
    err = env.fail(**_boot_args())
    assert err.field == "kernel" and "symbolic link" in str(err)
    assert env.names() == []


def test_a_boot_dir_that_is_a_link_is_refused(env, tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / "vmlinuz").write_bytes(b"\x00")
    os.makedirs(os.path.join(env.root, "var/lib/libvirt"))
    os.symlink(str(real), os.path.join(env.root, BOOT.lstrip("/")))
    err = env.fail(**plan_args(kernel=KERNEL))
    assert err.field == "kernel" and "symbolic link /var/lib/libvirt/boot" in str(err)


def test_a_kernel_that_is_a_directory_is_refused(env):
    os.makedirs(os.path.join(env.root, KERNEL.lstrip("/")))
    err = env.fail(**plan_args(kernel=KERNEL))
    assert err.field == "kernel" and "not a regular file" in str(err)


def test_initrd_without_kernel_is_refused_by_the_argument_spec():
    from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.argument_spec import MODULE_RULES
    assert MODULE_RULES["required_by"] == {"initrd": ("kernel",), "cmdline": ("kernel",)}


def test_the_core_normalises_and_keeps_an_empty_cmdline_out():
    boot = db.direct_boot_from_params(dict(kernel="/var/lib/libvirt/boot/./k", initrd=None,
                                           cmdline="  ", boot_images_dir=BOOT))
    assert boot == db.DirectBoot(kernel="/var/lib/libvirt/boot/k")
    assert db.direct_boot_from_params(dict(kernel=None)) is None


def test_a_refusal_names_the_option_and_the_fix():
    with pytest.raises(GpuhostError) as err:
        db.direct_boot_from_params(dict(kernel="/srv/k", boot_images_dir=BOOT))
    assert err.value.field == "kernel" and "boot_images_dir" in err.value.fix
