# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one writer that touches the host, and the lock its state files take.

``HostWriter`` is the only place that writes to sysfs, procfs or configuration files.
Every path it takes is a host path (``/sys/bus/pci/drivers_probe``) resolved under
``root``, so tests point it at a recorded tree; ``tests/support/sysfs_sim.py`` subclasses it to
add the kernel's reactions to attribute writes. Nothing is written through a link, and
files are replaced atomically (a temporary file in the same folder, fsync, rename). Where
SELinux is enabled, what it creates or replaces gets the default context of its host path
after the rename (``restore_default_context``), as ``restorecon`` would give it.

``FileLock`` is the flock a state file's read-modify-write holds (engine/state_file.py).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import tempfile
import time

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import HostReader

# The SELinux calls Ansible's own file handling makes (AnsibleModule.atomic_move): libselinux
# through ctypes, an ImportError where the library is absent. Imported here so that
# AnsiballZ ships it with every module; looked up by name at each use.
SELINUX_BINDINGS = "ansible.module_utils.compat.selinux"
try:
    from ansible.module_utils.compat import selinux as _libselinux
except ImportError:
    _libselinux = None


def _selinux():
    """The SELinux bindings when SELinux is enabled, else None (no library, disabled)."""
    bindings = sys.modules.get(SELINUX_BINDINGS, _libselinux)
    if bindings is None or bindings.is_selinux_enabled() != 1:
        return None
    return bindings


def restore_default_context(host_path, target, file_type, field=None):
    """Give ``target`` (the file or folder below ``root`` that stands for ``host_path``)
    the default SELinux context the loaded policy has for ``host_path``, as restorecon
    does, when it has another one. ``file_type`` (stat.S_IFREG, stat.S_IFDIR) selects the
    policy's entries for that kind of file. Below a root other than / the context is
    still the one of the host path: the tree stands for the host's file system (an image
    mounted for the host), so its files get the labels the host gives those paths.
    Without the bindings, with SELinux disabled, or where the policy has no default for
    the path, it does nothing and says nothing. Returns the context it set, or None."""
    bindings = _selinux()
    if bindings is None:
        return None
    try:
        found, context = bindings.matchpathcon(host_path, file_type)
    except OSError:
        return None     # no default for the path (ENOENT): nothing to restore
    if found == -1 or not context:
        return None
    try:
        current = bindings.lgetfilecon_raw(target)[1]
    except OSError:
        current = None
    if current == context:
        return None
    try:
        bindings.lsetfilecon(target, context)
    except OSError as err:
        raise GpuhostError(
            "cannot set the SELinux context %s of %s: %s" % (context, host_path, err),
            field=field or "path",
            fix="check the policy's entry for the path (matchpathcon %s) and that the file "
                "system takes labels, then run again" % host_path) from err
    return context


# How long a run waits for another run's lock on a state file before it gives up.
STATE_LOCK_TIMEOUT = 120.0


class FileLock:
    """An flock on a lock file for a whole read-modify-write: exclusive, or shared with
    ``read_only`` (which creates nothing; without the file there is nothing to wait for).

    The lock is a file of its own because the files it guards are replaced by rename: a
    lock on their inode would go with the old inode. The file is opened with O_NOFOLLOW
    (a link planted there would send the holder's PID into its target) and must be a
    regular file. After the flock is granted, the path must still name the locked inode;
    otherwise a holder removed it (``remove``) and the lock is taken again on the new
    file, so removing a lock file under its lock is safe. Waiting ends after ``timeout``
    seconds in ``busy_error(holder_pid)``.
    """

    what = "the lock file"

    def __init__(self, lock_path, timeout, read_only=False, poll=0.05, field="path",
                 shown_as=None):
        self.lock_path = lock_path
        self.shown_as = shown_as or lock_path
        self.timeout = timeout
        self.read_only = read_only
        self.poll = poll
        self.field = field
        self.fd = None
        self.created_file = False
        self.created_folders = []

    def link_error(self):
        return GpuhostError("%s %s is a symbolic link" % (self.what, self.shown_as),
                            field=self.field, fix="remove the link (nothing but gpuhost.kvm "
                                                  "should write there) and run again")

    def busy_error(self, holder):
        return GpuhostError(
            "%s is locked by another run%s for more than %s s"
            % (self.shown_as, " (PID %s)" % holder if holder else "", self.timeout),
            field=self.field, fix="wait for the other gpuhost.kvm run on this host to finish, "
                                  "then run again")

    def not_regular_error(self):
        return GpuhostError("%s %s is not a regular file" % (self.what, self.shown_as),
                            field=self.field, fix="move it away and run again")

    def check(self):
        """Refuse now what taking the lock would refuse later: a link or a non-regular
        file at its place (a plan checks this before its first write)."""
        try:
            mode = os.lstat(self.lock_path).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISLNK(mode):
            raise self.link_error()
        if not stat.S_ISREG(mode):
            raise self.not_regular_error()

    def _open(self, flags):
        try:
            fd = os.open(self.lock_path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise self.link_error() from err
            if err.errno == errno.EISDIR:
                raise self.not_regular_error() from err
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise self.not_regular_error()
        return fd

    def _still_named(self):
        try:
            named = os.stat(self.lock_path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        held = os.fstat(self.fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def __enter__(self):
        mode = fcntl.LOCK_SH if self.read_only else fcntl.LOCK_EX
        deadline = time.monotonic() + self.timeout
        while True:
            if self.read_only:
                try:
                    self.fd = self._open(os.O_RDONLY)
                except FileNotFoundError:
                    return self
            else:
                folder = os.path.dirname(os.path.abspath(self.lock_path))
                self.created_folders = _missing_folders(folder)
                os.makedirs(folder, mode=0o700, exist_ok=True)
                self.created_file = not os.path.lexists(self.lock_path)
                self.fd = self._open(os.O_RDWR | os.O_CREAT)
            if self._wait(mode, deadline) and self._still_named():
                break
            os.close(self.fd)    # removed by the holder before us: lock the new one
            self.fd = None
        if not self.read_only:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, ("%d\n" % os.getpid()).encode("ascii"), 0)
        return self

    def _wait(self, mode, deadline):
        while True:
            try:
                fcntl.flock(self.fd, mode | fcntl.LOCK_NB)
                return True
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(self.fd)
                    self.fd = None
                    raise
            if time.monotonic() >= deadline:
                holder = self._holder()
                os.close(self.fd)
                self.fd = None
                raise self.busy_error(holder)
            time.sleep(self.poll)

    def _holder(self):
        try:
            return os.pread(self.fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:
            return ""

    def remove(self):
        """Remove the lock file while holding it (waiters then lock a new one)."""
        if self.fd is not None and self._still_named():
            os.unlink(self.lock_path)

    def discard(self):
        """Leave nothing of this lock behind: remove the lock file while holding it and
        the folders taking it created (when empty). For a run that then wrote nothing:
        a refusal creates no lock file nor directory."""
        self.remove()
        for folder in self.created_folders:
            try:
                os.rmdir(folder)
            except OSError:
                break   # not empty (another run's lock or file): leave it
        self.created_folders = []

    def __exit__(self, *exc):
        if exc[0] is not None and self.created_file and self.fd is not None:
            self.discard()     # refused or failed under the lock: nothing left behind
        if self.fd is not None:
            if not self.read_only:
                # The file names its holder only while held: a PID left behind would
                # name a finished run, and make the host's state differ from run to run.
                os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
        return False


def _missing_folders(folder):
    """The folders of the absolute path ``folder`` that do not exist yet, deepest first."""
    missing = []
    while folder not in ("/", "") and not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def _fsync_folder(folder):
    """Make a rename in ``folder`` durable; a file system that cannot sync a directory
    (EINVAL) has nothing more to offer."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.EROFS):
            raise
    finally:
        os.close(fd)


class HostWriter(HostReader):
    """Writes host paths under ``root`` (and reads them, as its HostReader)."""

    def check_replaceable(self, host_path, field=None):
        """Refuse now what ``write_file`` would refuse later (a '..' component, a way out
        of ``root``, a link or a non-regular file at the path), so that a caller writing
        several files checks them all before the first write. Returns the target.
        ``field``: the module option the errors name (see ``confined_target``)."""
        target = self.confined_target(host_path, field)
        self._replaceable(host_path, target, field or "path")
        return target

    def _replaceable(self, host_path, target, field="path"):
        """``target`` may be replaced: absent, or a regular file that is no link and has
        no second hard link."""
        if os.path.islink(target):
            raise self.link_error(host_path, target, field)
        if os.path.lexists(target) and not os.path.isfile(target):
            raise GpuhostError("%s is not a regular file" % host_path, field=field,
                               fix="move it away and run again")
        try:
            self.refuse_hard_links(host_path, os.lstat(target), field)
        except FileNotFoundError:
            pass
        except NotADirectoryError:      # a file, a FIFO or a device where a folder is due
            raise GpuhostError("%s is not a folder" % os.path.dirname(host_path), field=field,
                               fix="move it away and run again, or name a folder") from None

    @staticmethod
    def refuse_hard_links(host_path, status, field="path"):
        """A file with more than one hard link is refused: its other name may lie out of
        root, and a change of its mode or content would reach that file too."""
        if not stat.S_ISDIR(status.st_mode) and status.st_nlink > 1:
            raise GpuhostError(
                "%s has %d hard links: gpuhost.kvm never changes a file that has another name"
                % (host_path, status.st_nlink), field=field,
                fix="replace the hard link by a copy of the file (cp then mv) and run again")

    def write(self, host_path, value):
        """Write a kernel attribute in one write(2), as sysfs requires.

        The OSError of a refused write (EBUSY, EIO, EINVAL, ...) is passed on unchanged:
        callers tell "kernel-managed IRQ" from a real failure by its errno.
        """
        data = str(value).encode()
        fd = os.open(self.confined_target(host_path), os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def write_file(self, host_path, content, mode=None, owner=None, field=None):
        """Replace a configuration file atomically: temp file in the same folder, fsync,
        rename, fsync of the folder (a crash leaves the old file or the new one).

        ``content`` is text or bytes. ``mode`` None keeps the mode of the file it
        replaces (0644 for a new file); ``owner`` (uid, gid) is set on the temp file
        before the rename, None leaves the writer's. Returns the host paths of the
        folders it had to create, deepest first, so that an undo can remove them again;
        on failure it removes them itself. ``field``: the module option a refusal names.
        """
        target = self.check_replaceable(host_path, field)
        if mode is None:
            try:
                mode = os.stat(target).st_mode & 0o7777
            except OSError:
                mode = 0o644
        folder = os.path.dirname(target)
        created = self.missing_folders(host_path)
        os.makedirs(folder, exist_ok=True)
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".gpuhost-", dir=folder)
            with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            if owner is not None:
                os.chown(tmp, owner[0], owner[1])
            os.chmod(tmp, mode)
            os.rename(tmp, target)
        except BaseException:
            if tmp and os.path.exists(tmp):
                os.unlink(tmp)
            self.remove_empty_folders(created)
            raise
        # After the rename: the temporary file had the label of its folder's default
        # transition, which the rename keeps.
        for folder_path in reversed(created):
            restore_default_context(folder_path, self.path(folder_path), stat.S_IFDIR, field)
        restore_default_context("/" + str(host_path).lstrip("/"), target, stat.S_IFREG, field)
        _fsync_folder(folder)
        return created

    def make_folder(self, host_path, mode, owner=None):
        """Create a directory (and its missing parents, as ``mkdir -p`` would) with
        ``mode`` (not masked by the umask) and ``owner`` (uid, gid). Returns the host
        paths it created, deepest first, the directory included; on failure it removes
        them itself."""
        target = self.confined_target(host_path)
        host_path = "/" + str(host_path).strip("/")
        created = [host_path] + self.missing_folders(host_path)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.mkdir(target, 0o700)
            self.set_attributes(host_path, mode, owner)
            for folder_path in reversed(created):
                restore_default_context(folder_path, self.path(folder_path), stat.S_IFDIR)
        except BaseException:
            self.remove_empty_folders(created)
            raise
        return created

    def set_attributes(self, host_path, mode=None, owner=None, field=None):
        """Set the mode and the owner (uid, gid) of a file or directory, through a
        descriptor opened without following a link: never the mode of a link's target,
        nor of a file with another hard link (``refuse_hard_links``)."""
        fd = os.open(self.confined_target(host_path, field),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            self.refuse_hard_links(host_path, os.fstat(fd), field or "path")
            if owner is not None:
                os.fchown(fd, owner[0], owner[1])
            if mode is not None:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def missing_folders(self, host_path):
        """The ancestors of ``host_path`` that do not exist yet, deepest first."""
        folder = os.path.dirname("/" + str(host_path).lstrip("/"))
        if folder == "/":
            return []
        root = self.path("/")
        return ["/" + os.path.relpath(full, root) for full in
                _missing_folders(self.path(folder))
                if os.path.relpath(full, root) not in (".", "") and
                not os.path.relpath(full, root).startswith("..")]

    def remove_empty_folders(self, host_folders):
        for folder in host_folders:
            try:
                os.rmdir(self.path(folder))
            except OSError:
                break   # not empty (or gone): leave it and its parents

    def remove_file(self, host_path):
        try:
            os.unlink(self.confined_target(host_path))
        except FileNotFoundError:
            pass

    def lock(self, host_path, field, timeout=None):
        """The FileLock of the state file ``host_path``: ``<host_path>.lock`` beside it,
        confined to ``root`` like every write."""
        lock_path = host_path + ".lock"
        return FileLock(self.confined_target(lock_path, field),
                        STATE_LOCK_TIMEOUT if timeout is None else timeout,
                        field=field, shown_as=lock_path)
