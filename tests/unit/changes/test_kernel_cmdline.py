# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuhost.kvm.kernel_cmdline against temporary root trees. Only the host commands
(update-grub, grubby) are mocked, and each test that mocks one says so in its name."""

import os

import pytest

from support.sysfs_sim import run_module, snapshot
from support.helpers import read_under as _read, write_under as _write

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import kernel_cmdline as cmdline_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.modules import kernel_cmdline

ARGS = ["intel_iommu=on", "iommu=pt", "hugepagesz=1G", "hugepages=64"]
DROPIN = "/etc/default/grub.d/90-gpuhost.cfg"
GRUB_CFG = "/boot/grub/grub.cfg"


def _grub_cfg(args):
    return ("menuentry 'Debian' {\n\tlinux\t/boot/vmlinuz-6.1.0-18-amd64 root=/dev/vda1 ro %s quiet\n}\n"
            % " ".join(args))


class UpdateGrub:
    """Plays update-grub: regenerates grub.cfg from the drop-in's arguments."""

    def __init__(self, root, rc=0):
        self.root, self.rc, self.calls = str(root), rc, []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if self.rc:
            return self.rc, "", "grub-mkconfig: error: cannot find a device for /\n"
        text = _read(self.root, DROPIN)
        args = text.split("${GRUB_CMDLINE_LINUX} ", 1)[1].rstrip('"\n').split()
        _write(self.root, GRUB_CFG, _grub_cfg(args))
        return 0, "", ""


class Grubby:
    """Plays grubby: --info=DEFAULT prints the default entry; --update-kernel adds args."""

    def __init__(self, args):
        self.args, self.calls = list(args), []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[1] == "--info=DEFAULT":
            return 0, 'index=0\nkernel="/boot/vmlinuz-5.14"\nargs="%s"\nroot="/dev/vda1"\n' % " ".join(self.args), ""
        self.args += argv[2].partition("=")[2].split()
        return 0, "", ""


def _run(root, check_mode=False, commands=None, **args):
    params = dict({"args": ARGS, "root": str(root), "method": "grub"}, **args)
    return run_module(kernel_cmdline, "KernelCmdline", params, HostWriter(str(root)),
                      check_mode=check_mode, run_command=commands)


def _host(root, running="root=/dev/vda1 ro quiet"):
    _write(root, "/proc/cmdline", running + "\n")
    _write(root, GRUB_CFG, _grub_cfg([]))


def test_grub_with_mocked_update_grub_writes_regenerates_then_is_idempotent(tmp_path):
    _host(tmp_path)
    grub = UpdateGrub(tmp_path)
    first = _run(tmp_path, commands=grub).result
    assert first["changed"] and first["steps"] == ["create %s" % DROPIN, "run update-grub"]
    assert first["missing_active"] == ARGS and first["reboot_required"]
    assert first["missing_next_boot"] == ARGS
    assert _read(tmp_path, DROPIN) == (
        "# Managed by gpuhost.kvm (iommu role). Sourced by grub-mkconfig after /etc/default/grub.\n"
        'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} intel_iommu=on iommu=pt hugepagesz=1G hugepages=64"\n')
    assert oct(os.stat(os.path.join(str(tmp_path), DROPIN.lstrip("/"))).st_mode & 0o777) == "0o644"
    again = _run(tmp_path, commands=grub).result
    assert not again["changed"] and again["steps"] == [] and again["missing_next_boot"] == []
    assert len(grub.calls) == 1
    assert again["reboot_required"]   # the running kernel still lacks them


def test_running_kernel_with_the_args_needs_no_reboot_with_mocked_update_grub(tmp_path):
    _host(tmp_path, running="root=/dev/vda1 " + " ".join(ARGS))
    result = _run(tmp_path, commands=UpdateGrub(tmp_path)).result
    assert result["missing_active"] == [] and not result["reboot_required"]


def test_check_mode_reports_and_writes_nothing_with_mocked_update_grub(tmp_path):
    _host(tmp_path)
    before = snapshot(str(tmp_path))
    grub = UpdateGrub(tmp_path)
    result = _run(tmp_path, check_mode=True, commands=grub).result
    assert result["changed"] and result["steps"] == ["create %s" % DROPIN, "run update-grub"]
    assert result["diff"][0]["after"].endswith('hugepages=64"\n')
    assert snapshot(str(tmp_path)) == before and grub.calls == []


def test_killed_run_drop_in_present_grub_cfg_stale_regenerates_with_mocked_update_grub(tmp_path):
    _host(tmp_path)
    _write(tmp_path, DROPIN, cmdline_core.grub_dropin_content(ARGS))
    os.chmod(os.path.join(str(tmp_path), DROPIN.lstrip("/")), 0o644)
    grub = UpdateGrub(tmp_path)
    result = _run(tmp_path, commands=grub).result
    assert result["steps"] == ["run update-grub"] and result["changed"]
    assert grub.calls == [["update-grub"]]
    assert cmdline_core.cmdline_missing(
        cmdline_core.generated_kernel_args(_read(tmp_path, GRUB_CFG)), ARGS) == []


def test_failed_update_grub_mocked_rolls_the_drop_in_back(tmp_path):
    _host(tmp_path)
    _write(tmp_path, DROPIN, cmdline_core.grub_dropin_content(["intel_iommu=on"]))
    before = snapshot(str(tmp_path))
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, commands=UpdateGrub(tmp_path, rc=1))
    assert "update-grub exited 1" in info.value.message
    assert info.value.details["rolled_back"] == ["update %s" % DROPIN]
    assert snapshot(str(tmp_path)) == before


def test_failed_update_grub_mocked_removes_a_new_drop_in(tmp_path):
    _host(tmp_path)
    before = snapshot(str(tmp_path))
    with pytest.raises(GpuhostError):
        _run(tmp_path, commands=UpdateGrub(tmp_path, rc=2))
    assert snapshot(str(tmp_path)) == before


def test_other_root_writes_the_drop_in_and_runs_no_command(tmp_path):
    _host(tmp_path)
    result = _run(tmp_path).result
    assert result["skipped"] == ["update-grub"] and result["steps"] == ["create %s" % DROPIN]
    assert os.path.isfile(os.path.join(str(tmp_path), DROPIN.lstrip("/")))


def test_grubby_mocked_adds_only_the_missing_args_then_is_idempotent(tmp_path):
    _write(tmp_path, "/proc/cmdline", "root=/dev/vda1 intel_iommu=on\n")
    _write(tmp_path, "/usr/sbin/grubby", "")
    # auto needs a BLS host: grubby and an entry (grubby alone is not one).
    _write(tmp_path, "/boot/loader/entries/a-5.14.0.conf", "title RHEL\n")
    grubby = Grubby(["root=/dev/vda1", "intel_iommu=on"])
    result = _run(tmp_path, commands=grubby, method="auto").result
    assert result["method"] == "grubby" and result["changed"]
    assert grubby.calls[-1] == ["grubby", "--update-kernel=ALL", "--args=iommu=pt hugepagesz=1G hugepages=64"]
    assert result["missing_active"] == ARGS[1:]
    again = _run(tmp_path, commands=grubby, method="auto").result
    assert not again["changed"] and again["missing_next_boot"] == []
    assert grubby.calls[-1] == ["grubby", "--info=DEFAULT"]


def test_grubby_mocked_check_mode_reads_but_does_not_update(tmp_path):
    _write(tmp_path, "/proc/cmdline", "root=/dev/vda1\n")
    grubby = Grubby([])
    result = _run(tmp_path, commands=grubby, method="grubby", check_mode=True).result
    assert result["changed"] and grubby.calls == [["grubby", "--info=DEFAULT"]]


def test_grubby_on_another_root_runs_nothing(tmp_path):
    _write(tmp_path, "/proc/cmdline", "root=/dev/vda1\n")
    result = _run(tmp_path, method="grubby").result
    assert result["skipped"] == ["grubby --info=DEFAULT"] and not result["changed"]


@pytest.mark.parametrize("bad", ["intel_iommu=on\nGRUB_X=1", 'a="b"', "a'b", "a b", "a\0b", "",
                                 "x" * 300])
def test_hostile_args_are_refused_before_anything_is_written(tmp_path, bad):
    _host(tmp_path)
    before = snapshot(str(tmp_path))
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, commands=UpdateGrub(tmp_path), args=["iommu=pt", bad])
    assert info.value.field == "args[1]"
    assert snapshot(str(tmp_path)) == before


def test_a_huge_list_of_args_is_refused(tmp_path):
    _host(tmp_path)
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, commands=UpdateGrub(tmp_path), args=["a%d=1" % n for n in range(1000)])
    assert info.value.field == "args"


def test_a_link_at_the_drop_in_is_refused(tmp_path):
    _host(tmp_path)
    _write(tmp_path, "/elsewhere", "x\n")
    os.makedirs(os.path.join(str(tmp_path), "etc/default/grub.d"), exist_ok=True)
    os.symlink(os.path.join(str(tmp_path), "elsewhere"),
               os.path.join(str(tmp_path), DROPIN.lstrip("/")))
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, commands=UpdateGrub(tmp_path))
    assert info.value.field == "grub_dropin"


def test_auto_on_a_debian_tree_is_grub_with_the_detectors_evidence(tmp_path):
    _host(tmp_path)
    _write(tmp_path, "/usr/sbin/update-grub", "")
    _write(tmp_path, "/etc/default/grub", "GRUB_CMDLINE_LINUX=\"\"\n")
    result = _run(tmp_path, method="auto", check_mode=True).result
    assert result["method"] == "grub"
    evidence = result["mechanism"]["evidence"]["grub"]
    assert evidence == ["/usr/sbin/update-grub exists", "/etc/default/grub exists"]


def test_auto_with_no_boot_loader_tooling_refuses_with_what_to_install(tmp_path):
    _host(tmp_path)
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, method="auto")
    assert info.value.field == "method" and "install grubby" in info.value.fix


# -- arguments that replace what the host boots ---------------------------------------------

@pytest.mark.parametrize("arg", [
    "root=/dev/sdb1", "init=/bin/sh", "rdinit=/bin/sh", "systemd.unit=rescue.target",
    "rd.systemd.unit=emergency.target", "single", "emergency", "1", "console=tty0",
    "console=ttyS1,115200", "net.ifnames=0", "biosdevname=0", "ip=dhcp",
    "modprobe.blacklist=mlx5_core", "module_blacklist=nvme", "iommu=off", "intel_iommu=off",
    "amd_iommu=off"])
def test_an_argument_that_replaces_the_boot_is_refused_before_anything_is_written(tmp_path, arg):
    """Syntax alone passed these before: each one is refused by the host-safety policy,
    naming the argument, why the next boot would lock the operator out, and the override;
    no drop-in is written and no command runs."""
    _host(tmp_path)
    before = snapshot(str(tmp_path))
    grub = UpdateGrub(tmp_path)
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, commands=grub, args=ARGS + [arg])
    err = info.value
    assert err.field == "args[%d]" % len(ARGS) and "refusing the kernel argument %s" % arg in err.message
    assert "allow_boot_replacing_args: true" in err.fix
    assert snapshot(str(tmp_path)) == before and grub.calls == []


def test_the_override_writes_a_boot_replacing_argument(tmp_path):
    _host(tmp_path)
    grub = UpdateGrub(tmp_path)
    result = _run(tmp_path, commands=grub, args=ARGS + ["console=ttyS0,115200"],
                  allow_boot_replacing_args=True).result
    assert result["changed"] and "console=ttyS0,115200" in _read(tmp_path, DROPIN)


@pytest.mark.parametrize("arg", ["iommu=pt", "intel_iommu=on", "amd_iommu=on", "console_msg_format=syslog",
                                 "initcall_debug", "rootdelay=5"])
def test_look_alike_safe_arguments_pass(tmp_path, arg):
    _host(tmp_path)
    result = _run(tmp_path, commands=UpdateGrub(tmp_path), args=ARGS + [arg]).result
    assert result["changed"]
