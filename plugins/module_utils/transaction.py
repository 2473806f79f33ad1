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
"""

from __future__ import annotations

import errno
import hashlib
import importlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError


class HostWriter:
    """Reads and writes host paths under ``root``."""

    def __init__(self, root="/"):
        self.root = root or "/"

    def path(self, host_path):
        return os.path.join(self.root, str(host_path).lstrip("/"))

    def write_target(self, host_path):
        """The path below ``root`` that a write of ``host_path`` may use, or a
        GpuhostError: no ".." component, and the folder it lands in, links resolved,
        inside ``root`` (an absolute link in a test tree, or a planted one, would
        otherwise send the write out of it). With root / every path qualifies."""
        parts = [part for part in str(host_path).split("/") if part not in ("", ".")]
        if ".." in parts:
            raise GpuhostError("%s has a '..' component" % host_path, field="path",
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

    def _replaceable(self, host_path, target):
        """``target`` may be replaced: absent, or a regular file that is no link."""
        if os.path.islink(target):
            raise GpuhostError(
                "%s is a symbolic link (to %s): gpuhost.kvm never writes through a link"
                % (host_path, os.readlink(target)), field="path",
                fix="remove the link (or put the real file in its place) and run again")
        if os.path.lexists(target) and not os.path.isfile(target):
            raise GpuhostError("%s is not a regular file" % host_path, field="path",
                               fix="move it away and run again")

    def exists(self, host_path):
        return os.path.lexists(self.path(host_path))

    def read(self, host_path, default=None):
        """The stripped text of a file, or ``default`` when it cannot be read."""
        try:
            with open(self.path(host_path), "r") as handle:
                return handle.read().strip()
        except (IOError, OSError):
            return default

    def read_file(self, host_path):
        """The exact content of a regular file, or None when it does not exist."""
        try:
            with open(self.path(host_path), "r") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

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

    def write_file(self, host_path, content, mode=None):
        """Replace a configuration file atomically: temp file in the same folder, rename.

        ``mode`` None keeps the mode of the file it replaces (0644 for a new file).
        Returns the host paths of the folders it had to create, deepest first, so that
        an undo can remove them again; on failure it removes them itself.
        """
        target = self.write_target(host_path)
        self._replaceable(host_path, target)
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
            with os.fdopen(fd, "w") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
            os.rename(tmp, target)
        except BaseException:
            if tmp and os.path.exists(tmp):
                os.unlink(tmp)
            self.remove_empty_folders(created)
            raise
        return created

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


def read_state_file(writer, path, key, entries, field, fix):
    """A JSON state file the collection keeps on the host: ``{key: entries}`` where
    ``entries`` is ``dict`` (each value a dict) or ``list`` (each item a dict). A missing
    or empty file is the empty state. Anything else (not JSON, JSON of another shape, as
    a hand edit or another tool leaves it) is a GpuhostError naming the file, the shape
    it should have, ``field`` and ``fix``, never a traceback from a later ``.get``."""
    text = writer.read_file(path)
    if not text or not text.strip():
        return {key: entries()}
    try:
        data = json.loads(text)
    except ValueError:
        raise GpuhostError("%s is not valid JSON" % path, field=field, fix=fix)
    values = data.get(key, entries()) if isinstance(data, dict) else None
    if isinstance(values, dict):
        items = list(values.values())
    else:
        items = values if isinstance(values, list) else None
    if not isinstance(values, entries) or any(not isinstance(item, dict) for item in items):
        raise GpuhostError(
            "%s is valid JSON of another shape: gpuhost.kvm keeps {\"%s\": %s} there"
            % (path, key, "{...: {...}}" if entries is dict else "[{...}, ...]"),
            field=field, fix=fix)
    data[key] = values
    return data


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

    def put_file(self, writer, host_path, content, mode=None, summarize=False):
        """Make a file hold ``content`` (None: remove it); no step when it already does."""
        before = writer.read_file(host_path)
        if before == content:
            return False
        self.files.append(FileChange(host_path, before, content, mode, summarize))
        created = []

        def apply():
            if content is None:
                writer.remove_file(host_path)
            else:
                created[:] = writer.write_file(host_path, content, mode) or []

        def undo():
            if before is None:
                writer.remove_file(host_path)
                writer.remove_empty_folders(created)
            else:
                writer.write_file(host_path, before, mode)

        verb = "remove" if content is None else ("create" if before is None else "update")
        self.add("%s %s" % (verb, host_path), apply, undo)
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
    reason = err.message if isinstance(err, GpuhostError) else describe_os_error(err)
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


_GPUHOST_IMPORT = re.compile(
    r"ansible_collections\.gpuhost\.kvm\.plugins\.module_utils(?:\.(\w+)|\s+import\s+\(?([\w, ]+))")
_PACKAGE = "ansible_collections.gpuhost.kvm.plugins.module_utils"


def python_library_files(module_names, dest="/usr/local/lib/gpuhost/python"):
    """The sources of gpuhost.kvm module_utils, as {host path: text}, for a boot helper.

    Boot-time helpers (SR-IOV re-creation, IRQ re-pinning) run the same Python as the
    modules: ``module_names`` (short names such as ``irq_pinning``) and every
    gpuhost.kvm module_utils they import, found by reading their sources, so the set
    does not depend on what else the process has loaded. The sources come from the
    importer that loaded them, which also works inside Ansible's zipped module payload.
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
        files["%s/%s.py" % (dest.rstrip("/"), name.replace(".", "/"))] = source
        for match in _GPUHOST_IMPORT.finditer(source):
            if match.group(1):
                pending.append(match.group(1))
            else:
                pending += [n.strip() for n in match.group(2).split(",") if n.strip()]
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


def systemctl(module, *args, field="persistent", fix="check systemd on the host"):
    """Run ``systemctl ARGS`` on the host; a failure raises (a change set rolls back)."""
    rc, out, err = module.run_command(["systemctl"] + list(args))
    if rc != 0:
        raise GpuhostError("systemctl %s failed: %s" % (" ".join(args), (err or out).strip()),
                           field=field, fix=fix)


def run_host_change(module, worker):
    """Run one host-changing module's worker and report it, in the one place that turns a
    GpuhostError into fail_json for vfio_bind, sriov_vfs and irq_affinity.

    A failed run reports ``changed`` only when its rollback failed too: a change that was
    rolled back left the host as it found it.
    """
    try:
        worker.run()
    except GpuhostError as err:
        failure = dict(worker.result, **err.to_result())
        failure["changed"] = bool(err.details.get("rollback_failed"))
        module.fail_json(**failure)
    module.exit_json(**worker.result)
