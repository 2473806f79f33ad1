# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one reader of host files: bounded, non-blocking, regular files only unless the
caller says otherwise, confined to a root. Its writer twin is engine/writer.py."""

from __future__ import annotations

import os
import stat

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import file_kind


# The most a reader takes from one host file: far above any sysfs attribute, procfs file
# or kernel log a module reads, far below what would exhaust the host's memory.
MAX_READ_BYTES = 64 * 1024 * 1024


def read_bytes(file_path, root=None, links_out_of_root=False, special_ok=False,
               max_bytes=MAX_READ_BYTES, field=None, shown=None, no_follow=False):
    """The bytes of one host file: THE reader every module's file reads go through.

    ``root``: the file must lie inside it, links resolved; ``links_out_of_root`` lets a
    caller that reads sysfs (made of links, absolute in recorded trees) skip that check.
    Anything but a regular file (a FIFO, a device node, a directory, a socket) is refused
    unless ``special_ok``: the open is non-blocking, so a FIFO given as a file never
    hangs the run. ``no_follow``: a link at the path itself fails (ELOOP), unfollowed.
    More than ``max_bytes`` is refused, never read whole. Absent or
    unreadable: the OSError, unchanged; refused: a GpuhostError naming ``field`` and the
    file (``shown``, its host path, or ``file_path``).
    """
    shown = shown or file_path
    if root is not None and not links_out_of_root:
        root_real = os.path.realpath(root or "/")
        real = os.path.realpath(file_path)
        if root_real != "/" and real != root_real and not real.startswith(root_real + os.sep):
            raise GpuhostError("%s leads out of %s (to %s)" % (shown, root, real), field=field,
                               fix="name a file inside root, without '..' or a link out of it")
    fd = os.open(file_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC |
                 (os.O_NOFOLLOW if no_follow else 0))
    mode = os.fstat(fd).st_mode
    if not special_ok and not stat.S_ISREG(mode):
        os.close(fd)
        raise GpuhostError("%s is not a regular file (%s)" % (shown, file_kind(mode)),
                           field=field, fix="give the path of a regular file")
    with os.fdopen(fd, "rb", buffering=0) as handle:
        chunks = []
        size = 0
        while size <= max_bytes:
            chunk = handle.read(min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    if size > max_bytes:
        raise GpuhostError("%s is larger than the %d bytes read from one file" % (shown, max_bytes),
                           field=field, fix="give a smaller file (cut it to the lines that matter)")
    return b"".join(chunks)


def decode_text(data):
    """Host bytes as text, never raising: a byte that is not UTF-8 becomes U+FFFD."""
    return data.decode("utf-8", "replace")


def read_file_text(file_path, **options):
    """``read_bytes`` decoded (``decode_text``); the same options and refusals."""
    return decode_text(read_bytes(file_path, **options))
