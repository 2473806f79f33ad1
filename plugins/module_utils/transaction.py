# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decide, then act: a change set of ordered steps, and the one writer that touches the host.

A module first computes every step (each with an ``apply`` and, where the change can be
reversed, an ``undo``), shows them in check mode, and only then calls
``ChangeSet.apply()``. If a step fails, the steps already applied are undone in reverse
order and a ChangeSetError tells what failed and what was rolled back.

``HostWriter`` is the only place that writes to sysfs, procfs or configuration files.
Every path it takes is a host path (``/sys/bus/pci/drivers_probe``) resolved under
``root``, so tests point it at a recorded tree; ``tests/sysfs_sim.py`` subclasses it to
add the kernel's reactions to attribute writes.

The JSON state files the modules keep on the host (vfio_bind's previous drivers, the
stored IRQ pins, the SR-IOV configuration) are described by a ``StateFile`` and changed
only through ``ChangeSet.put_state``: its step takes the file's lock (``FileLock``, an
flock on ``<file>.lock``, never opened through a link), re-reads the file under it,
merges the run's per-entry changes into what it finds (``update_state_file``), writes
atomically and lets go. Two runs at once (two onboardings) therefore both keep their
entries, whichever plans first.
"""

from __future__ import annotations

import ast
import copy
import errno
import fcntl
import hashlib
import importlib
import importlib.util
import json
import os
import stat
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError


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
                os.makedirs(os.path.dirname(os.path.abspath(self.lock_path)), mode=0o700,
                            exist_ok=True)
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

    def __exit__(self, *exc):
        if self.fd is not None:
            if not self.read_only:
                # The file names its holder only while held: a PID left behind would
                # name a finished run, and make the host's state differ from run to run.
                os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
        return False


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


class HostWriter:
    """Reads and writes host paths under ``root``."""

    def __init__(self, root="/"):
        self.root = root or "/"

    def path(self, host_path):
        return os.path.join(self.root, str(host_path).lstrip("/"))

    def write_target(self, host_path, field=None):
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
        target = os.path.join(self.root, *parts) if parts else self.root
        root_real = os.path.realpath(self.root)
        folder_real = os.path.realpath(os.path.dirname(target))
        if root_real != "/" and folder_real != root_real and \
                not folder_real.startswith(root_real + os.sep):
            raise GpuhostError(
                "%s leads out of %s through a link (to %s)" % (host_path, self.root, folder_real),
                field="root", fix="remove the link, or give a root whose tree holds the file")
        return target

    def check_replaceable(self, host_path, field=None):
        """Refuse now what ``write_file`` would refuse later (a '..' component, a way out
        of ``root``, a link or a non-regular file at the path), so that a caller writing
        several files checks them all before the first write. Returns the target.
        ``field``: the module option the errors name (see ``write_target``)."""
        target = self.write_target(host_path, field)
        self._replaceable(host_path, target, field or "path")
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
        self.write_target(host_path, field)
        full = self.path(host_path)
        if os.path.islink(full):
            raise self.link_error(host_path, full, field)
        return host_path

    def _replaceable(self, host_path, target, field="path"):
        """``target`` may be replaced: absent, or a regular file that is no link."""
        if os.path.islink(target):
            raise self.link_error(host_path, target, field)
        if os.path.lexists(target) and not os.path.isfile(target):
            raise GpuhostError("%s is not a regular file" % host_path, field=field,
                               fix="move it away and run again")

    def exists(self, host_path):
        return os.path.lexists(self.path(host_path))

    def stat(self, host_path):
        """``os.lstat`` of the path (a link is reported as the link), None when absent
        (or when a folder on the way is a file, so it cannot exist)."""
        try:
            return os.lstat(self.path(host_path))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_bytes(self, host_path):
        """The exact bytes of a regular file, None when it does not exist. A link at the
        path is not followed (ELOOP), so a planted link cannot show another file."""
        try:
            fd = os.open(self.path(host_path),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def read_unlinked(self, host_path, field=None):
        """``read_bytes`` behind a refusal of a link at the path: lstat first (the link
        is refused unread, with the writer's wording), then O_NOFOLLOW (a link planted in
        between fails with ELOOP and is refused the same way). The one no-follow reader:
        state files, owned configs and the ledger all come through here."""
        full = self.path(host_path)
        if os.path.islink(full):
            raise self.link_error(host_path, full, field or "path")
        try:
            return self.read_bytes(host_path)
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
        path must qualify for a write (``write_target``: no '..', no folder link out of
        root) and a link at it is refused, never followed (``read_unlinked``), so a
        planted link cannot show the caller another file; errors name ``field``. An
        unreadable file raises its OSError, one that is not UTF-8 UnicodeDecodeError."""
        self.write_target(host_path, field)
        data = self.read_unlinked(host_path, field)
        return None if data is None else data.decode("utf-8")

    def write(self, host_path, value):
        """Write a kernel attribute in one write(2), as sysfs requires.

        The OSError of a refused write (EBUSY, EIO, EINVAL, ...) is passed on unchanged:
        callers tell "kernel-managed IRQ" from a real failure by its errno.
        """
        data = str(value).encode()
        fd = os.open(self.write_target(host_path), os.O_WRONLY | os.O_TRUNC)
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
        _fsync_folder(folder)
        return created

    def make_folder(self, host_path, mode, owner=None):
        """Create a directory (and its missing parents, as ``mkdir -p`` would) with
        ``mode`` (not masked by the umask) and ``owner`` (uid, gid). Returns the host
        paths it created, deepest first, the directory included; on failure it removes
        them itself."""
        target = self.write_target(host_path)
        host_path = "/" + str(host_path).strip("/")
        created = [host_path] + self.missing_folders(host_path)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.mkdir(target, 0o700)
            self.set_attributes(host_path, mode, owner)
        except BaseException:
            self.remove_empty_folders(created)
            raise
        return created

    def set_attributes(self, host_path, mode=None, owner=None):
        """Set the mode and the owner (uid, gid) of a file or directory, through a
        descriptor opened without following a link: never the mode of a link's target."""
        fd = os.open(self.write_target(host_path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            if owner is not None:
                os.fchown(fd, owner[0], owner[1])
            if mode is not None:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def missing_folders(self, host_path):
        """The ancestors of ``host_path`` that do not exist yet, deepest first."""
        missing = []
        folder = os.path.dirname("/" + str(host_path).lstrip("/"))
        while folder not in ("/", "") and not os.path.isdir(self.path(folder)):
            missing.append(folder)
            folder = os.path.dirname(folder)
        return missing

    def remove_empty_folders(self, host_folders):
        for folder in host_folders:
            try:
                os.rmdir(self.path(folder))
            except OSError:
                break   # not empty (or gone): leave it and its parents

    def remove_file(self, host_path):
        try:
            os.unlink(self.write_target(host_path))
        except FileNotFoundError:
            pass

    def lock(self, host_path, field, timeout=None):
        """The FileLock of the state file ``host_path``: ``<host_path>.lock`` beside it,
        confined to ``root`` like every write."""
        lock_path = host_path + ".lock"
        return FileLock(self.write_target(lock_path, field),
                        STATE_LOCK_TIMEOUT if timeout is None else timeout,
                        field=field, shown_as=lock_path)


# -- state files -----------------------------------------------------------------------

STATE_VERSION = 1
STATE_LOCK_TIMEOUT = 120.0
_ABSENT = object()


def read_state_file(writer, path, key, entries, field, fix, sets=()):
    """A JSON state file the collection keeps on the host: ``{"version": 1, key:
    entries}`` where ``entries`` is ``dict`` (each value a dict) or ``list`` (each item a
    dict), and each key in ``sets`` a list of names. A missing or empty file is the empty
    state; a file without "version" is one written before versions (version 1). Anything
    else (not JSON, JSON of another shape or of another version, as a hand edit, another
    tool or another release leaves it) is a GpuhostError naming the file, what it should
    hold, ``field`` and ``fix``, never a traceback from a later ``.get``."""
    try:
        text = writer.read_file(path, field)
    except (OSError, UnicodeDecodeError) as err:
        raise GpuhostError("cannot read %s: %s" % (path, describe_os_error(err)),
                           field=field, fix=fix)
    return parse_state_text(text, path, key, entries, field, fix, sets)


def parse_state_text(text, path, key, entries, field, fix, sets=()):
    """``read_state_file`` for text already read (None: no file)."""
    if not text or not text.strip():
        return {key: entries()}
    try:
        data = json.loads(text)
    except ValueError:
        raise GpuhostError("%s is not valid JSON" % path, field=field, fix=fix)
    if isinstance(data, dict) and "version" in data and (
            isinstance(data["version"], bool) or not isinstance(data["version"], int)
            or data["version"] != STATE_VERSION):
        raise GpuhostError(
            "%s has version %s; this gpuhost.kvm reads version %d"
            % (path, json.dumps(data["version"]), STATE_VERSION), field=field,
            fix="run the gpuhost.kvm release that wrote it (or a newer one); otherwise "
                + fix)
    values = data.get(key, entries()) if isinstance(data, dict) else None
    if isinstance(values, dict):
        items = list(values.values())
    else:
        items = values if isinstance(values, list) else None
    named = [data.get(name, []) for name in sets] if isinstance(data, dict) else []
    if not isinstance(values, entries) or any(not isinstance(item, dict) for item in items) \
            or any(not isinstance(names, list) or
                   any(not isinstance(n, str) for n in names) for names in named):
        raise GpuhostError(
            "%s is valid JSON of another shape: gpuhost.kvm keeps {\"%s\": %s%s} there"
            % (path, key, "{...: {...}}" if entries is dict else "[{...}, ...]",
               "".join(', "%s": ["...", ...]' % name for name in sets)),
            field=field, fix=fix)
    data[key] = values
    return data


@dataclass(frozen=True)
class StateFile:
    """A versioned JSON state file and how its entries merge.

    ``key`` holds the entries: a dict (merged per key) or a list of dicts (merged per
    ``identity(item)``, in place). Each top-level key in ``sets`` holds a sorted list of
    names, merged per name. ``field`` and ``fix`` go into every error about the file:
    ``field`` must be an option of the module that keeps it.
    """

    path: str
    key: str
    entries: type
    field: str
    fix: str
    identity: Optional[Callable[[dict], object]] = None
    sets: tuple = ()

    def read(self, writer):
        return read_state_file(writer, self.path, self.key, self.entries, self.field,
                               self.fix, self.sets)

    def check_writable(self, writer):
        """Refuse, before a plan's first write, a state file or lock file that the step
        could not write: a link or a non-regular file at its place."""
        writer.check_replaceable(self.path, self.field)
        writer.lock(self.path, self.field).check()

    def parse(self, text):
        return parse_state_text(text, self.path, self.key, self.entries, self.field,
                                self.fix, self.sets)

    @staticmethod
    def dump(data):
        data = dict(data, version=STATE_VERSION)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    def units(self, data):
        """The mergeable units of ``data``, in order: {(top key, entry key): value}."""
        units = {}
        values = data.get(self.key) or self.entries()
        if self.entries is dict:
            for name, value in values.items():
                units[(self.key, name)] = value
        else:
            for item in values:
                units.setdefault((self.key, self.identity(item)), item)
        for name in self.sets:
            for item in data.get(name) or ():
                units[(name, item)] = True
        return units

    def delta(self, before, after):
        """The per-unit changes from ``before`` to ``after``: {unit: value or _ABSENT}."""
        old, new = self.units(before), self.units(after)
        return {unit: new.get(unit, _ABSENT) for unit in list(new) + list(old)
                if old.get(unit, _ABSENT) != new.get(unit, _ABSENT)}

    def merge(self, data, delta):
        """``data`` with ``delta`` applied: per key, per list identity (a new entry takes
        the place of the first one removed, else goes last), per name."""
        data = copy.deepcopy(data)
        mine = {unit[1]: value for unit, value in delta.items() if unit[0] == self.key}
        if self.entries is dict:
            values = data.setdefault(self.key, {})
            for name, value in mine.items():
                if value is _ABSENT:
                    values.pop(name, None)
                else:
                    values[name] = copy.deepcopy(value)
        else:
            kept, placed, insert_at = [], set(), None
            for item in data.get(self.key) or ():
                name = self.identity(item)
                if name not in mine:
                    kept.append(item)
                elif name not in placed:
                    placed.add(name)
                    if mine[name] is _ABSENT:
                        insert_at = len(kept) if insert_at is None else insert_at
                    else:
                        kept.append(copy.deepcopy(mine[name]))
            added = [copy.deepcopy(value) for name, value in mine.items()
                     if name not in placed and value is not _ABSENT]
            insert_at = len(kept) if insert_at is None else insert_at
            data[self.key] = kept[:insert_at] + added + kept[insert_at:]
        for top in self.sets:
            names = {unit[1]: value for unit, value in delta.items() if unit[0] == top}
            if not names:
                continue
            current = set(data.get(top) or ())
            current |= {n for n, value in names.items() if value is not _ABSENT}
            current -= {n for n, value in names.items() if value is _ABSENT}
            data[top] = sorted(current)
        return data


def update_state_file(writer, spec, delta):
    """Merge ``delta`` into the state file ``spec`` under its lock: lock, re-read, merge,
    write atomically (HostWriter.write_file), unlock. Returns the record that
    ``revert_state_file`` takes back: the text before (None: no file) and after, the
    undo delta (empty: nothing was written) and the folders made for the file. A lock
    file and folders made for a file that could not be written are removed again."""
    record = {"before": None, "after": None, "undo": {},
              "created": writer.missing_folders(spec.path + ".lock"),
              "made_lock": not writer.exists(spec.path + ".lock")}
    with writer.lock(spec.path, spec.field) as lock:
        try:
            record["before"] = record["after"] = text = writer.read_file(spec.path, spec.field)
            current = spec.parse(text)
            merged = spec.merge(current, delta)
            old, new = spec.units(current), spec.units(merged)
            record["undo"] = {unit: old.get(unit, _ABSENT) for unit in delta
                              if old.get(unit, _ABSENT) != new.get(unit, _ABSENT)}
            if record["undo"]:
                record["after"] = spec.dump(merged)
                writer.write_file(spec.path, record["after"])
        except BaseException:
            record["undo"] = {}
            raise
        finally:
            if record["made_lock"] and not writer.exists(spec.path):
                # Nothing came of it: no lock file or folder left behind either.
                lock.remove()
                writer.remove_empty_folders(record["created"])
    return record


def revert_state_file(writer, spec, record):
    """Take back an ``update_state_file``: the exact text it found while the file still
    holds what it wrote (no other run wrote it since), otherwise its undo delta merged
    into what is there now, so that another run's entries stay."""
    if not record["undo"]:
        return
    with writer.lock(spec.path, spec.field) as lock:
        now = writer.read_file(spec.path, spec.field)
        if now != record["after"]:
            writer.write_file(spec.path, spec.dump(spec.merge(spec.parse(now), record["undo"])))
        elif record["before"] is not None:
            writer.write_file(spec.path, record["before"])
        else:
            writer.remove_file(spec.path)
            if record["made_lock"]:
                lock.remove()
                writer.remove_empty_folders(record["created"])


@dataclass
class Step:
    description: str
    apply: Callable[[], None]
    undo: Optional[Callable[[], None]] = None
    # Undone after every other step, not in reverse order: a service restart's undo is
    # another restart, which must read the configuration the other undos restored.
    undo_last: bool = False


class ChangeSetError(GpuhostError):
    """A step failed; ``details`` lists the failed step and what was rolled back."""


@dataclass
class FileChange:
    """A configuration file the change set writes (content) or removes (None)."""

    path: str
    before: Optional[str]
    after: Optional[str]
    mode: Optional[int] = None
    summarize: bool = False   # diff a digest instead of the text (vendored Python)

    @property
    def changed(self):
        return self.before != self.after

    def diff(self):
        return {"before_header": self.path, "after_header": self.path,
                "before": self._text(self.before), "after": self._text(self.after)}

    def _text(self, content):
        if content is None:
            return ""
        if self.summarize:
            return "# %d bytes, sha256 %s\n" % (
                len(content), hashlib.sha256(content.encode()).hexdigest())
        return content


@dataclass
class ChangeSet:
    """Ordered steps plus what the diff shows about them."""

    steps: List[Step] = field(default_factory=list)
    value_changes: List[tuple] = field(default_factory=list)   # (host path, before, after)
    files: List[FileChange] = field(default_factory=list)

    def __bool__(self):
        return bool(self.steps)

    def __len__(self):
        return len(self.steps)

    @property
    def descriptions(self):
        return [step.description for step in self.steps]

    def add(self, description, apply, undo=None, undo_last=False):
        self.steps.append(Step(description, apply, undo, undo_last))

    def extend(self, other):
        """Append ``other``'s steps after this set's, with their diff."""
        self.steps.extend(other.steps)
        self.value_changes.extend(other.value_changes)
        self.files.extend(other.files)

    def set_value(self, writer, host_path, after, before, undo_value=None, undo=None):
        """Write a kernel attribute; by default the undo writes ``before`` back."""
        self.value_changes.append((host_path, before, after))
        if undo is None and before is not None:
            restore = before if undo_value is None else undo_value

            def write_back():
                return writer.write(host_path, restore)
            undo = write_back
        self.add("write %s to %s" % (after, host_path),
                 lambda: writer.write(host_path, after), undo)

    def put_file(self, writer, host_path, content, mode=None, summarize=False, field=None):
        """Make a file hold ``content`` (None: remove it); no step when it already does.
        The old content is read without following a link (a link is refused now, before
        anything is written); ``field`` is the module option a refusal names."""
        before = writer.read_file(host_path, field)
        if before == content:
            return False
        self.files.append(FileChange(host_path, before, content, mode, summarize))
        created = []

        def apply():
            if content is None:
                writer.remove_file(host_path)
            else:
                created[:] = writer.write_file(host_path, content, mode, field=field) or []

        def undo():
            if before is None:
                writer.remove_file(host_path)
                writer.remove_empty_folders(created)
            else:
                writer.write_file(host_path, before, mode, field=field)

        verb = "remove" if content is None else ("create" if before is None else "update")
        self.add("%s %s" % (verb, host_path), apply, undo)
        return True

    def put_state(self, writer, spec, before, after):
        """Make the state file ``spec`` take the per-entry changes from ``before`` (what
        the plan read with ``spec.read``) to ``after``; no step when there are none.

        The step does not write ``after``: it merges the changes into the file as it is
        under the file's lock when the step runs (``update_state_file``), so a run that
        wrote the file since the plan read it keeps its entries. The undo takes back
        only this step's changes the same way. Returns whether there is a step."""
        delta = spec.delta(before, after)
        if not delta:
            return False
        spec.check_writable(writer)
        text = writer.read_file(spec.path, spec.field)
        self.files.append(FileChange(spec.path, text, spec.dump(spec.merge(before, delta))))
        record = {"undo": {}}

        def apply():
            record.update(update_state_file(writer, spec, delta))

        def undo():
            revert_state_file(writer, spec, record)
        self.add("%s %s" % ("create" if text is None else "update", spec.path), apply, undo)
        return True

    def diff(self):
        """Ansible's diff: one entry for kernel values, one per file."""
        entries = []
        if self.value_changes:
            entries.append({
                "before_header": "kernel attributes", "after_header": "kernel attributes",
                "before": "".join("%s = %s\n" % (path, _show(before))
                                  for path, before, _after in self.value_changes),
                "after": "".join("%s = %s\n" % (path, _show(after))
                                 for path, _before, after in self.value_changes)})
        entries.extend(change.diff() for change in self.files)
        return entries

    def apply(self):
        """Apply every step in order; on failure undo the applied ones, newest first."""
        applied = []
        for step in self.steps:
            try:
                step.apply()
            except Exception as err:   # any failure must roll back, then surface
                rolled_back, rollback_failed = _undo(applied)
                raise _failure(step, err, rolled_back, rollback_failed) from err
            applied.append(step)
        return [step.description for step in applied]


def _show(value):
    if value is None:
        return "(absent)"
    text = str(value).strip()
    return text if text else "(empty)"


def _undo(applied):
    rolled_back, failed = [], []
    newest_first = list(reversed(applied))
    for step in ([s for s in newest_first if not s.undo_last]
                 + [s for s in newest_first if s.undo_last]):
        if step.undo is None:
            continue
        try:
            step.undo()
            rolled_back.append(step.description)
        except Exception as err:   # keep undoing the rest; report what could not be
            failed.append("%s: %s" % (step.description, describe_os_error(err)))
    return rolled_back, failed


def _failure(step, err, rolled_back, rollback_failed):
    # A GpuhostError's bare text: its field and fix go into the new error once, not
    # inside its message as well (which would show "Fix:" twice).
    reason = err.msg if isinstance(err, GpuhostError) else describe_os_error(err)
    msg = "step '%s' failed: %s; rolled back %d earlier step(s)" % (
        step.description, reason, len(rolled_back))
    fix = getattr(err, "fix", None)
    if rollback_failed:
        msg += "; ROLLBACK INCOMPLETE: %s" % "; ".join(rollback_failed)
        fix = "restore the listed items by hand before running again"
    details = {"failed_step": step.description, "rolled_back": rolled_back,
               "rollback_failed": rollback_failed}
    if isinstance(err, OSError) and err.errno:
        details["errno"] = errno.errorcode.get(err.errno, str(err.errno))
    return ChangeSetError(msg, field=getattr(err, "field", None), fix=fix, details=details)


def describe_os_error(err):
    if isinstance(err, OSError) and err.errno:
        return "%s (%s)" % (os.strerror(err.errno), errno.errorcode.get(err.errno, err.errno))
    return str(err)


_PACKAGE = "ansible_collections.gpuhost.kvm.plugins.module_utils"


def gpuhost_imports(source, module_name):
    """The gpuhost.kvm module_utils ``source`` imports, as names below the package
    (``topology``, ``domain.xml``; a package's own name too, for its ``__init__``).

    Read from the syntax tree, so that an import inside a function, a parenthesized name
    list, an ``as`` alias or a relative import is found, and a name in a comment or a
    string is not. ``module_name`` (the full name of the module whose source it is)
    resolves the relative imports."""
    found = set()

    def add(full_name):
        if full_name == _PACKAGE or not full_name.startswith(_PACKAGE + "."):
            return
        parts = full_name[len(_PACKAGE) + 1:].split(".")
        for depth in range(1, len(parts) + 1):   # every package on the way, then the module
            found.add(".".join(parts[:depth]))

    for node in ast.walk(ast.parse(source, module_name)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module_name.rsplit(".", node.level)[0]
                origin = "%s.%s" % (base, node.module) if node.module else base
            else:
                origin = node.module or ""
            add(origin)
            # "from package import name": the name is a submodule or an attribute.
            if origin == _PACKAGE or origin.startswith(_PACKAGE + "."):
                for alias in node.names:
                    candidate = "%s.%s" % (origin, alias.name)
                    if _is_module(candidate):
                        add(candidate)
    return sorted(found)


def _is_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, AttributeError, ValueError):
        return False


def python_library_files(module_names, dest="/usr/local/lib/gpuhost/python"):
    """The sources of gpuhost.kvm module_utils, as {host path: text}, for a boot helper.

    Boot-time helpers (SR-IOV re-creation, IRQ re-pinning) run the same Python as the
    modules: ``module_names`` (names below module_utils such as ``irq_pinning``) and
    every gpuhost.kvm module_utils they import (:func:`gpuhost_imports`), so the set does
    not depend on what else the process has loaded. The sources come from the importer
    that loaded them, which also works inside Ansible's zipped module payload.
    """
    files = {}
    pending = list(module_names)
    seen = set()
    while pending:
        short = pending.pop()
        if short in seen:
            continue
        seen.add(short)
        name = "%s.%s" % (_PACKAGE, short)
        module = importlib.import_module(name)
        loader = getattr(module, "__loader__", None)
        source = loader.get_source(name) if loader is not None else None
        if isinstance(source, bytes):
            # Ansible's collection loader (ansible-test, controller-side imports) returns
            # the source as bytes; importlib's file loaders return text.
            source = source.decode("utf-8")
        if source is None:
            raise GpuhostError("cannot read the source of %s" % name,
                               fix="run the module from an installed gpuhost.kvm collection")
        is_package = hasattr(module, "__path__")
        path = name.replace(".", "/") + ("/__init__.py" if is_package else ".py")
        files["%s/%s" % (dest.rstrip("/"), path)] = source
        pending += gpuhost_imports(source, name)
    return dict(sorted(files.items()))


def wrapper_script(module_name, function, dest="/usr/local/lib/gpuhost/python",
                   interpreter="/usr/bin/python3"):
    """A thin executable that runs ``module_name.function(sys.argv[1:])``."""
    return ("#!%s\n"
            "# Installed by gpuhost.kvm; the logic lives in %s.\n"
            "import sys\n"
            "sys.path.insert(0, %r)\n"
            "from %s import %s\n"
            "sys.exit(%s(sys.argv[1:]))\n"
            % (interpreter, module_name, dest, module_name, function, function))


def systemctl_argv(verb, *units):
    """``systemctl VERB -- UNITS``: ``--`` before the units, so that no unit is ever
    read as an option (``daemon-reload`` takes none and gets none)."""
    return ["systemctl", verb] + (["--"] + list(units) if units else [])


def systemctl(module, *args, field="persistent", fix="check systemd on the host"):
    """Run ``systemctl ARGS`` on the host; a failure raises (a change set rolls back)."""
    rc, out, err = module.run_command(systemctl_argv(*args))
    if rc != 0:
        raise GpuhostError("systemctl %s failed: %s" % (" ".join(args), (err or out).strip()),
                           field=field, fix=fix)
