# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one reader of host files: bounded, non-blocking, regular files only unless the
caller says otherwise, confined to a root. ``HostReader`` reads host paths under a root
without following a link at the path; its writer twin is engine/writer.py's HostWriter,
which adds the writes. Nothing here writes, so host/ (which only reads) builds on it."""

from __future__ import annotations

import errno
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


class HostReader:
    """Reads host paths under ``root``: confined to it, never through a link at the path
    (``read_unlinked``). HostWriter (engine/writer.py) adds the writes."""

    def __init__(self, root="/"):
        self.root = root or "/"

    def path(self, host_path):
        return os.path.join(self.root, str(host_path).lstrip("/"))

    def confined_target(self, host_path, field=None):
        """The path below ``root`` that a write of ``host_path`` may use, or a
        GpuhostError: no ".." component, and the folder it lands in, links resolved,
        inside ``root`` (an absolute link in a test tree, or a planted one, would
        otherwise send the write out of it). With root / every path qualifies.

        ``field`` is the module option that chose the file, named by the refusal of a
        '..' ("path" without it); a way out of root names "root", the option that chose
        the tree (with root / it cannot happen)."""
        parts = [part for part in str(host_path).split("/") if part not in ("", ".")]
        if ".." in parts:
            raise GpuhostError("%s has a '..' component" % host_path, field=field or "path",
                               fix="name the file by its absolute path on the host, "
                                   "without '..'")
        if not parts:
            # "/" (or "/./") is the tree itself: no file of it could be replaced.
            raise GpuhostError("%s names the host's root folder, not a file" % host_path,
                               field=field or "path",
                               fix="give the absolute path of the file itself")
        target = os.path.join(self.root, *parts)
        root_real = os.path.realpath(self.root)
        folder_real = os.path.realpath(os.path.dirname(target))
        if root_real != "/" and folder_real != root_real and \
                not folder_real.startswith(root_real + os.sep):
            raise GpuhostError(
                "%s leads out of %s through a link (to %s)" % (host_path, self.root, folder_real),
                field="root", fix="remove the link, or give a root whose tree holds the file")
        return target

    @staticmethod
    def link_error(host_path, target, field="path"):
        """The one refusal of a symbolic link at ``target``, by writers and readers."""
        try:
            to = os.readlink(target)
        except OSError:
            to = "somewhere"    # gone again since it was seen
        return GpuhostError(
            "%s is a symbolic link (to %s): gpuhost.kvm never writes through a link"
            % (host_path, to), field=field,
            fix="remove the link (or put the real file in its place) and run again")

    def refuse_link(self, host_path, field):
        """Refuse ``host_path`` when a symbolic link stands at its place, without
        following it. For a file a module reads and then replaces (a state file, a config
        it owns a line of): reading through the link would show the module another file,
        and the write would be refused later anyway, after everything else was decided.
        A '..' or a folder link out of ``root`` is refused first, as a write would be.
        ``field``: the option the error names (the one that chose or keeps the file)."""
        self.confined_target(host_path, field)
        full = self.path(host_path)
        if os.path.islink(full):
            raise self.link_error(host_path, full, field)
        return host_path

    def exists(self, host_path):
        return os.path.lexists(self.path(host_path))

    def stat(self, host_path):
        """``os.lstat`` of the path (a link is reported as the link), None when absent
        (or when a folder on the way is a file, so it cannot exist)."""
        try:
            return os.lstat(self.path(host_path))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_bytes(self, host_path, field=None):
        """The exact bytes of a regular file, None when it does not exist. A link at the
        path is not followed (ELOOP), so a planted link cannot show another file; a
        directory, FIFO or device there is refused (``read_bytes``, naming ``field``)."""
        try:
            return read_bytes(self.path(host_path), no_follow=True, field=field or "path",
                              shown=host_path)
        except FileNotFoundError:
            return None

    def read_unlinked(self, host_path, field=None):
        """``read_bytes`` behind a refusal of a link at the path: lstat first (the link
        is refused unread, with the writer's wording), then O_NOFOLLOW (a link planted in
        between fails with ELOOP and is refused the same way). The one no-follow reader:
        state files, owned configs and the ledger all come through here."""
        full = self.path(host_path)
        if os.path.islink(full):
            raise self.link_error(host_path, full, field or "path")
        try:
            return self.read_bytes(host_path, field)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise self.link_error(host_path, full, field or "path") from err
            raise

    def read(self, host_path, default=None, field="path"):
        """The stripped text of a file, or ``default`` when it cannot be read. A link at
        the path is refused (a GpuhostError naming ``field``), never followed."""
        try:
            data = self.read_unlinked(host_path, field)
        except (IOError, OSError):
            return default
        if data is None:
            return default
        return data.decode("utf-8", "replace").strip()

    def read_file(self, host_path, field=None):
        """The exact content of a regular file, or None when it does not exist. The
        path must qualify for a write (``confined_target``: no '..', no folder link out of
        root) and a link at it is refused, never followed (``read_unlinked``), so a
        planted link cannot show the caller another file; errors name ``field``. An
        unreadable file raises its OSError, one that is not UTF-8 UnicodeDecodeError."""
        self.confined_target(host_path, field)
        data = self.read_unlinked(host_path, field)
        return None if data is None else data.decode("utf-8")


def describe_os_error(err):
    if isinstance(err, OSError) and err.errno:
        return "%s (%s)" % (os.strerror(err.errno), errno.errorcode.get(err.errno, err.errno))
    return str(err)


# A file a module reads and then replaces is refused before it is read when a link stands
# at its place (HostReader.refuse_link and HostReader.read_unlinked say why).

def read_host_text(host, host_path, field, fix):
    """The text of a host file the module keeps, None when absent. A link at its place is
    refused unread (``HostReader.refuse_link``); the open itself never follows one
    either (``HostReader.read_unlinked``, for a link planted in between). An unreadable
    file or one that is not UTF-8 is a GpuhostError naming ``field``."""
    host.refuse_link(host_path, field)
    try:
        data = host.read_unlinked(host_path, field)
    except OSError as err:
        raise GpuhostError("cannot read %s: %s" % (host_path, describe_os_error(err)),
                           field=field, fix=fix)
    except GpuhostError as err:     # the reader's refusal (a directory, a FIFO, too large)
        raise GpuhostError("cannot read %s: %s" % (host_path, err.msg), field=field, fix=fix)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise GpuhostError("%s is not a text file (%s)" % (host_path, err), field=field,
                           fix=fix)
