# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decide, then act: a change set of ordered steps.

A module first computes every step (each with an ``apply`` and, where the change can be
reversed, an ``undo``), shows them in check mode, and only then calls
``ChangeSet.apply()``. If a step fails, the steps already applied are undone in reverse
order and a ChangeSetError tells what failed and what was rolled back. The files a step
writes go through the one writer (engine/writer.py).
"""

from __future__ import annotations

import errno
import hashlib
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.state_file import ABSENT
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import describe_os_error
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError


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
            record["undo"] = {unit: old.get(unit, ABSENT) for unit in delta
                              if old.get(unit, ABSENT) != new.get(unit, ABSENT)}
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
