# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Direct kernel boot of a tenant (``<os><kernel/><initrd/><cmdline/>``) and its serial
console log, from libvirt_pinned_domain's options.

QEMU reads the kernel and the initrd when the domain starts, with the rights of the
host's QEMU user (and, on RHEL 9, the SELinux label of its directory), so they must
come from one directory the SRE chose for boot images, ``boot_images_dir``
(``/var/lib/libvirt/boot``, libvirt's own place for them, labelled ``virt_content_t``
by RHEL's policy), never through a link and never from anywhere a tenant's owner could
point the host at."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import absolute_path

DEFAULT_BOOT_IMAGES_DIR = "/var/lib/libvirt/boot"
# virtlogd writes a serial <log> there; RHEL's policy labels it virt_log_t.
SERIAL_LOG_DIR = "/var/log/libvirt"
PATH_MAX = 4096
# x86's COMMAND_LINE_SIZE is 2048 bytes with the terminating NUL.
CMDLINE_MAX = 2047
_CMDLINE = re.compile(r"[\x20-\x7e]*")


@dataclass(frozen=True)
class DirectBoot:
    """What ``<os>`` boots instead of the disk: a kernel, an optional initrd and
    command line, every path absolute and normalised."""

    kernel: str
    initrd: Optional[str] = None
    cmdline: Optional[str] = None


def _below(directory, path, field, kind):
    path = absolute_path(path, field, kind)
    if len(path) > PATH_MAX:
        raise GpuhostError("the path of the %s is %d characters long" % (kind, len(path)),
                           field=field, fix="give a path of at most %d characters" % PATH_MAX)
    if os.path.commonpath([directory, path]) != directory or path == directory:
        raise GpuhostError("%s is not below %s" % (path, directory), field=field,
                           fix="put the %s into %s (or set boot_images_dir to the directory "
                               "that holds it)" % (kind, directory))
    return path


def direct_boot_from_params(params):
    """The DirectBoot of ``kernel``, ``initrd`` and ``cmdline`` (None without a kernel),
    checked before anything reads the host: absolute paths below ``boot_images_dir``
    without '..' or control characters, and a command line of printable ASCII within the
    kernel's limit."""
    if not params.get("kernel"):
        return None    # initrd and cmdline need kernel: the argument spec's required_by
    directory = absolute_path(params.get("boot_images_dir") or DEFAULT_BOOT_IMAGES_DIR,
                              "boot_images_dir", "directory")
    if directory == "/":
        raise GpuhostError("boot_images_dir is /", field="boot_images_dir",
                           fix="name the one directory that holds the tenants' boot images, "
                               "such as %s" % DEFAULT_BOOT_IMAGES_DIR)
    kernel = _below(directory, params["kernel"], "kernel", "kernel")
    initrd = _below(directory, params["initrd"], "initrd", "initrd") \
        if params.get("initrd") else None
    cmdline = params.get("cmdline")
    if cmdline is not None:
        if not isinstance(cmdline, str) or not _CMDLINE.fullmatch(cmdline):
            raise GpuhostError("cmdline %r holds characters other than printable ASCII"
                               % (cmdline,), field="cmdline",
                               fix="write the kernel arguments in printable ASCII, without "
                                   "newlines or control characters")
        if len(cmdline) > CMDLINE_MAX:
            raise GpuhostError("cmdline is %d characters long" % len(cmdline), field="cmdline",
                               fix="keep it within the kernel's %d" % CMDLINE_MAX)
        cmdline = cmdline.strip() or None
    return DirectBoot(kernel=kernel, initrd=initrd, cmdline=cmdline)


def serial_log_from_params(params):
    """The serial console's log file (virtlogd's), absolute, below SERIAL_LOG_DIR."""
    value = params.get("serial_log")
    if not value:
        return None
    return _below(SERIAL_LOG_DIR, value, "serial_log", "serial log")


def check_boot_files(boot, root="/"):
    """Refuse a kernel or initrd that is missing, not a regular file, or reached through
    a link (a link could lead QEMU out of the boot images' directory). Read below
    ``root``, the module's host tree."""
    if boot is None:
        return
    for option, host_path in (("kernel", boot.kernel), ("initrd", boot.initrd)):
        if host_path is None:
            continue
        parts = host_path.strip("/").split("/")
        where = root or "/"
        for depth, part in enumerate(parts):
            where = os.path.join(where, part)
            try:
                info = os.lstat(where)
            except OSError:
                raise GpuhostError("%s does not exist" % host_path, field=option,
                                   fix="copy the %s there first" % option) from None
            if stat.S_ISLNK(info.st_mode):
                raise GpuhostError(
                    "%s is reached through the symbolic link %s" % (
                        host_path, "/" + "/".join(parts[:depth + 1])), field=option,
                    fix="put the real file there: a link could lead QEMU elsewhere")
        if not stat.S_ISREG(info.st_mode):
            raise GpuhostError("%s is not a regular file" % host_path, field=option,
                               fix="give the %s's file" % option)
