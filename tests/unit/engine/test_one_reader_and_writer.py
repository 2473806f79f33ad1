# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one reader (reader.read_bytes) and the writer's refusals, as classes: a host file
is read inside root, only when it is a regular file, with a bounded size and without a
decoding error; a destination is written only when it is a regular file with one name.

Each test names in a comment what happened before the fix."""

import json
import os
import stat
import threading

import pytest
from support.module_args import patch_module_args

from support.sysfs_sim import run_module, snapshot

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.guest import gpu_health
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import reader
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.modules import (
    host_facts, host_files, initramfs, kernel_cmdline)


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def _finishes(call, seconds=10):
    """call()'s outcome, raised or returned; a hang fails the test instead of the run."""
    outcome = {}

    def target():
        try:
            outcome["value"] = call()
        except BaseException as err:   # handed to the test below
            outcome["error"] = err
    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "the read hung"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# -- the reader ---------------------------------------------------------------------------

def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = str(tmp_path / "kern.log")
    os.mkfifo(fifo)
    with pytest.raises(GpuhostError) as info:
        _finishes(lambda: reader.read_bytes(fifo, field="kernel_log_file"))
    assert info.value.field == "kernel_log_file" and "a FIFO" in info.value.message


def test_a_device_node_and_a_directory_are_refused_unless_the_caller_allows_them(tmp_path):
    # /dev/null: a character device that exists on every host this runs on
    with pytest.raises(GpuhostError) as info:
        reader.read_bytes(os.devnull)
    assert "a character device" in info.value.message
    assert reader.read_bytes(os.devnull, special_ok=True) == b""
    with pytest.raises(GpuhostError) as info:
        reader.read_bytes(str(tmp_path))
    assert "a directory" in info.value.message


def test_the_size_read_is_bounded(tmp_path):
    path = str(tmp_path / "big")
    _write(path, b"x" * 1001)
    assert reader.read_bytes(path, max_bytes=1001) == b"x" * 1001
    with pytest.raises(GpuhostError) as info:
        reader.read_bytes(path, max_bytes=1000, field="f")
    assert info.value.field == "f" and "larger than the 1000 bytes" in info.value.message


def test_a_link_out_of_root_is_refused_unless_the_caller_reads_sysfs(tmp_path):
    _write(str(tmp_path / "outside" / "secret"), b"key\n")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    os.symlink(str(tmp_path / "outside" / "secret"), str(root / "etc" / "conf"))
    with pytest.raises(GpuhostError) as info:
        reader.read_bytes(str(root / "etc" / "conf"), root=str(root), field="f")
    assert "leads out of" in info.value.message
    assert reader.read_bytes(str(root / "etc" / "conf"), root=str(root),
                             links_out_of_root=True) == b"key\n"
    with pytest.raises(GpuhostError):
        reader.read_bytes(str(root / "etc" / ".." / ".." / "outside" / "secret"), root=str(root))


def test_text_is_decoded_without_raising(tmp_path):
    path = str(tmp_path / "attr")
    _write(path, b"caf\xe9\n")
    assert reader.read_file_text(path) == "caf\ufffd\n"
    assert sysfs.read_text(path) == "caf\ufffd"


def test_host_facts_refuses_a_fifo_as_the_kernel_log(tmp_path, capsys):
    # Before: host_facts hung for ever on open() of the FIFO.
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    fifo = str(tmp_path / "kern.log")
    os.mkfifo(fifo)

    def main():
        with patch_module_args({"root": str(root), "gather": ["kernel_log"],
                                "kernel_log_pattern": "vfio", "kernel_log_file": fifo}):
            with pytest.raises(SystemExit) as info:
                host_facts.main()
        return info.value.code
    assert _finishes(main) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and "kernel_log_file" in result["msg"]
    assert "is not a regular file (a FIFO)" in result["msg"]


@pytest.mark.parametrize("output", [
    # run_command hands a byte that is not UTF-8 on as a lone surrogate
    b"<?xml version=\"1.0\" ?><nvidia_smi_log><driver_version>550\xff</driver_version>"
    b"</nvidia_smi_log>".decode("utf-8", "surrogateescape"),
    b"<?xml version=\"1.0\" ?><nvidia_smi_log><driver_version>550\xff</driver_version>"
    b"</nvidia_smi_log>"])
def test_a_byte_that_is_not_utf8_in_nvidia_smi_xml_is_no_traceback(output):
    # Before: UnicodeEncodeError (a surrogate) or "not XML" (the raw byte).
    root = gpu_health.parse_xml(output)
    assert root.find("driver_version").text == "550\ufffd"


# -- the writer ---------------------------------------------------------------------------

def test_host_files_refuses_a_destination_with_a_second_hard_link(tmp_path):
    # Before: host_files changed the mode of the file outside root through the hard link.
    outside = tmp_path / "outside"
    outside.mkdir()
    _write(str(outside / "shadow"), b"secret\n")
    os.chmod(str(outside / "shadow"), 0o600)
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    os.link(str(outside / "shadow"), str(root / "etc" / "app.conf"))
    before = snapshot(str(tmp_path))
    for entry in ({"path": "/etc/app.conf", "content": "secret\n", "mode": "0644"},
                  {"path": "/etc/app.conf", "content": "other\n", "mode": "0600"}):
        with pytest.raises(GpuhostError) as info:
            run_module(host_files, "HostFiles", {"files": [entry], "root": str(root)},
                       HostWriter(str(root)))
        assert info.value.field == "files[0].path"
        assert "has 2 hard links" in info.value.message and "copy" in info.value.fix
    assert snapshot(str(tmp_path)) == before
    assert stat.S_IMODE(os.stat(str(outside / "shadow")).st_mode) == 0o600


def test_the_writer_refuses_a_hard_link_at_set_attributes_too(tmp_path):
    _write(str(tmp_path / "a"), b"x")
    os.link(str(tmp_path / "a"), str(tmp_path / "b"))
    with pytest.raises(GpuhostError) as info:
        HostWriter(str(tmp_path)).set_attributes("/b", 0o777, field="files[0].path")
    assert info.value.field == "files[0].path"
    assert stat.S_IMODE(os.stat(str(tmp_path / "a")).st_mode) != 0o777


def test_kernel_cmdline_refuses_a_directory_at_the_grub_drop_in(tmp_path):
    # Before: IsADirectoryError, a traceback.
    _write(str(tmp_path / "proc" / "cmdline"), b"root=/dev/vda1 ro\n")
    (tmp_path / "etc" / "default" / "grub.d" / "90-gpuhost.cfg").mkdir(parents=True)
    before = snapshot(str(tmp_path))
    with pytest.raises(GpuhostError) as info:
        run_module(kernel_cmdline, "KernelCmdline",
                   {"args": ["iommu=pt"], "root": str(tmp_path), "method": "grub"},
                   HostWriter(str(tmp_path)), run_command=lambda argv: (0, "", ""))
    assert info.value.field == "grub_dropin" and "not a regular file" in info.value.message
    assert snapshot(str(tmp_path)) == before


def test_initramfs_refuses_a_directory_at_the_blacklist_path(tmp_path):
    # Before: IsADirectoryError, a traceback.
    (tmp_path / "etc" / "modprobe.d" / "gpuhost-blacklist.conf").mkdir(parents=True)
    (tmp_path / "lib" / "modules" / "6.1.0-18-amd64").mkdir(parents=True)
    before = snapshot(str(tmp_path))
    with pytest.raises(GpuhostError) as info:
        run_module(initramfs, "Initramfs",
                   {"blacklist_modules": ["nouveau"], "root": str(tmp_path),
                    "blacklist_path": "/etc/modprobe.d/gpuhost-blacklist.conf",
                    "image_pattern": "/boot/initrd.img-%s",
                    "rebuild_argv": ["update-initramfs", "-u", "-k", "all"]},
                   HostWriter(str(tmp_path)), run_command=lambda argv: (0, "", ""))
    assert info.value.field == "blacklist_path" and "not a regular file" in info.value.message
    assert snapshot(str(tmp_path)) == before


@pytest.mark.parametrize("dropin", ["/", "/./", "//"])
def test_kernel_cmdline_refuses_the_root_folder_as_the_grub_drop_in(tmp_path, dropin):
    # Before: "root: / leads out of <root> through a link", blaming root for the option.
    _write(str(tmp_path / "proc" / "cmdline"), b"root=/dev/vda1 ro\n")
    before = snapshot(str(tmp_path))
    with pytest.raises(GpuhostError) as info:
        run_module(kernel_cmdline, "KernelCmdline",
                   {"args": ["iommu=pt"], "root": str(tmp_path), "method": "grub",
                    "grub_dropin": dropin},
                   HostWriter(str(tmp_path)), run_command=lambda argv: (0, "", ""))
    assert info.value.field == "grub_dropin"
    assert "names the host's root folder, not a file" in info.value.message
    assert snapshot(str(tmp_path)) == before


def test_the_writer_refuses_to_read_or_write_the_root_folder_as_a_file(tmp_path):
    writer = HostWriter(str(tmp_path))
    for call in (lambda: writer.confined_target("/", "dest"),
                 lambda: writer.check_replaceable("/.", "dest"),
                 lambda: writer.read_file("/", "dest")):
        with pytest.raises(GpuhostError) as info:
            call()
        assert info.value.field == "dest" and "root folder" in info.value.msg
