# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A whole set of host files in one change: the core of gpuhost.kvm.host_files.

A role that writes N files with N copy/template/file tasks pays N module runs (2N for
copy and template: a stat, then the copy); on the TCG lab each costs 10 to 20 s. Here
the role renders every content on the controller and hands the set over at once:

* ``validate_entries`` checks every entry before anything is read (an absolute,
  normalised path without ``..``, no path twice, a quoted octal mode, content for a
  file and none for a directory or an absent file, a bounded total size);
* ``plan_host_files`` reads what is there (never through a link, refusing what is not a
  regular file or a directory) and returns a ``ChangeSet`` with one step per path that
  differs, each with its undo, plus the per-path diff and the changed paths;
* the module applies the set: every file is replaced atomically by ``HostWriter`` and a
  failure undoes the paths already changed, newest first.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
from dataclasses import dataclass, field
from typing import List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.blocks import add_block_step, replace_block
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import account_name
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import (
    ChangeSet, FileChange)

STATES = ("file", "directory", "absent")
MAX_ENTRIES = 256
# The contents of one call together, in UTF-8 bytes: configuration, plans and scripts,
# not images (those travel with copy or get_url).
MAX_TOTAL_BYTES = 4 * 1024 * 1024
_MODE = re.compile(r"0?[0-7]{3,4}")


@dataclass(frozen=True)
class FileEntry:
    """One wanted path: a file with ``content``, a directory, or an absent file."""

    path: str
    state: str
    content: Optional[str] = None
    mode: Optional[int] = None
    owner: str = "root"
    group: str = "root"
    # Instead of content: a marked block the file holds among lines others own.
    block: Optional[str] = None
    marker: Optional[str] = None


@dataclass
class HostFilesPlan:
    """The change set, the paths it changes (in the order given) and the diff."""

    changes: ChangeSet
    changed_paths: List[str] = field(default_factory=list)
    diff: List[dict] = field(default_factory=list)


def _field(index, name):
    return "files[%d].%s" % (index, name)


def _mode(index, value, state):
    where = _field(index, "mode")
    if value is None:
        raise GpuhostError("a %s needs a mode" % state, field=where,
                           fix="give the mode as a quoted octal string, for example '0644'")
    if isinstance(value, bool) or not isinstance(value, str):
        raise GpuhostError(
            "mode %r is not a string: YAML reads an unquoted 0644 as the number 420" % (value,),
            field=where, fix="quote the mode as an octal string, for example mode: '0644'")
    if not _MODE.fullmatch(value):
        raise GpuhostError("mode %r is not an octal mode" % value, field=where,
                           fix="write three or four octal digits, for example '0644' or '0755'")
    return int(value, 8)


def _path(index, value):
    where = _field(index, "path")
    if not isinstance(value, str) or not value:
        raise GpuhostError("every entry needs a path", field=where,
                           fix="give the file's absolute path on the host")
    if "\0" in value:
        raise GpuhostError("%r holds a NUL byte" % value, field=where,
                           fix="give the file's absolute path on the host")
    if not value.startswith("/"):
        raise GpuhostError("%s is not an absolute path" % value, field=where,
                           fix="give the absolute path on the host, starting with /")
    if ".." in value.split("/"):
        raise GpuhostError("%s has a '..' component" % value, field=where,
                           fix="name the file by its absolute path on the host, without '..'")
    normal = os.path.normpath(value)
    if normal == "/" or normal.startswith("//"):
        raise GpuhostError("%s names the root directory" % value, field=where,
                           fix="give the path of a file or directory below /")
    if normal != value:
        raise GpuhostError("%s is not written in its plain form" % value, field=where,
                           fix="write it as %s" % normal)
    return value


def validate_entries(entries):
    """The entries of the ``files`` option as FileEntry objects, or the first bad one as
    a GpuhostError naming ``files[N].<key>`` and the fix. Nothing is read from the host."""
    if not isinstance(entries, list) or not entries:
        raise GpuhostError("no files given", field="files",
                           fix="list at least one {path, content, mode} entry")
    if len(entries) > MAX_ENTRIES:
        raise GpuhostError("%d entries are more than the %d one call takes"
                           % (len(entries), MAX_ENTRIES), field="files",
                           fix="split the set over several tasks")
    result, seen, total = [], {}, 0
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise GpuhostError("entry %r is not a mapping" % (entry,), field=_field(index, "path"),
                               fix="give each entry as {path: ..., content: ..., mode: ...}")
        path = _path(index, entry.get("path"))
        if path in seen:
            raise GpuhostError("%s is listed twice (files[%d] and files[%d])"
                               % (path, seen[path], index), field=_field(index, "path"),
                               fix="keep one entry per path")
        seen[path] = index
        state = entry.get("state") or "file"
        if state not in STATES:
            raise GpuhostError("state %r is not one of %s" % (state, ", ".join(STATES)),
                               field=_field(index, "state"),
                               fix="use file (with content), directory or absent")
        content, block, marker = entry.get("content"), entry.get("block"), entry.get("marker")
        if state == "file":
            key = _text_key(index, path, content, block, marker)
            total += len((content if key == "content" else block).encode(
                "utf-8", "surrogateescape"))
            if total > MAX_TOTAL_BYTES:
                raise GpuhostError(
                    "the contents add up to more than %d bytes at %s" % (MAX_TOTAL_BYTES, path),
                    field=_field(index, key),
                    fix="copy large files with ansible.builtin.copy, or split the set")
        else:
            for key, value in (("content", content), ("block", block), ("marker", marker)):
                if value is not None:
                    raise GpuhostError("a path with state %s takes no %s" % (state, key),
                                       field=_field(index, key),
                                       fix="drop the %s, or drop state: %s" % (key, state))
        if state == "absent":
            for key in ("mode", "owner", "group"):
                if entry.get(key) is not None:
                    raise GpuhostError("an absent file has no %s" % key,
                                       field=_field(index, key), fix="drop the %s" % key)
            result.append(FileEntry(path, state))
            continue
        owner, group = entry.get("owner") or "root", entry.get("group") or "root"
        account_name(owner, _field(index, "owner"))
        account_name(group, _field(index, "group"))
        result.append(FileEntry(path, state, content, _mode(index, entry.get("mode"), state),
                                owner, group, block, marker))
    return result


def _text_key(index, path, content, block, marker):
    """Which of content and block a file entry gives ("content" or "block"), checked."""
    if content is not None and block is not None:
        raise GpuhostError("%s has both content and a block" % path,
                           field=_field(index, "block"),
                           fix="give content for a whole file, or block and marker for a "
                               "marked part of it")
    if content is None and block is None:
        raise GpuhostError("%s has no content" % path, field=_field(index, "content"),
                           fix="give its content (or a block and marker), or state: "
                               "directory or absent")
    key, value = ("content", content) if content is not None else ("block", block)
    if not isinstance(value, str):
        raise GpuhostError("the %s of %s is a %s, not text" % (key, path, type(value).__name__),
                           field=_field(index, key),
                           fix="render it to text first, for example with to_nice_json")
    if key == "content":
        if marker is not None:
            raise GpuhostError("a marker goes with a block, not with content",
                               field=_field(index, "marker"), fix="drop the marker")
        return key
    if not isinstance(marker, str) or "{mark}" not in marker or "\n" in marker:
        raise GpuhostError("a block needs a one-line marker with {mark} in it, got %r" % (marker,),
                           field=_field(index, "marker"),
                           fix="give a marker such as '# {mark} managed by gpuhost.kvm'")
    return key


def _owner_ids(index, entry):
    """(uid, gid) of the entry's owner and group, by name or number, on this host."""
    ids = []
    for key, database, kind in (("owner", pwd.getpwnam, "user"), ("group", grp.getgrnam, "group")):
        name = account_name(getattr(entry, key), _field(index, key))
        if isinstance(name, int):
            ids.append(name)
            continue
        try:
            record = database(name)
        except KeyError:
            raise GpuhostError("no %s %r on the host" % (kind, name), field=_field(index, key),
                               fix="create the %s first, or name one that exists" % kind)
        ids.append(record.pw_uid if kind == "user" else record.gr_gid)
    return tuple(ids)


def _describe(kind, mode, owner):
    if kind is None:
        return "(absent)\n"
    return "%s, mode %04o, owner %d:%d\n" % (kind, mode, owner[0], owner[1])


def _text(data):
    return None if data is None else data.decode("utf-8", "replace")


def _check_folder(writer, index, path):
    """The nearest existing ancestor of ``path`` must be a directory; otherwise the write
    would fail halfway through the set."""
    folder = os.path.dirname(path)
    while folder != "/":
        full = writer.path(folder)
        if os.path.lexists(full):
            if not os.path.isdir(full):
                raise GpuhostError("%s cannot be made: %s is not a directory" % (path, folder),
                                   field=_field(index, "path"),
                                   fix="move %s away, or give another path" % folder)
            return
        folder = os.path.dirname(folder)


def _current(writer, index, entry):
    """(kind, mode, (uid, gid)) of what the path holds now: kind None when absent. A
    link, or anything that is neither a regular file nor a directory, is refused."""
    writer.confined_target(entry.path, _field(index, "path"))   # no '..', no way out of root through a link
    st = writer.stat(entry.path)
    if st is None:
        _check_folder(writer, index, entry.path)
        return None, None, None
    where = _field(index, "path")
    if stat.S_ISLNK(st.st_mode):
        raise GpuhostError(
            "%s is a symbolic link (to %s): gpuhost.kvm never writes through a link"
            % (entry.path, os.readlink(writer.path(entry.path))), field=where,
            fix="remove the link (or put the real file in its place) and run again")
    if stat.S_ISREG(st.st_mode):
        kind = "file"
        writer.refuse_hard_links(entry.path, st, where)
    elif stat.S_ISDIR(st.st_mode):
        kind = "directory"
    else:
        raise GpuhostError("%s is neither a regular file nor a directory" % entry.path,
                           field=where, fix="move it away and run again")
    wanted = "file" if entry.state == "absent" else entry.state
    if kind != wanted:
        raise GpuhostError(
            "%s is a %s; host_files %s" % (entry.path, kind, {
                "file": "writes or removes only regular files there",
                "directory": "makes a directory there"}[wanted]),
            field=where, fix="move it away by hand, or give another path")
    return kind, stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)


def plan_host_files(writer, entries):
    """The ChangeSet that makes the host hold ``entries`` (validated FileEntry objects),
    with the changed paths and the diff. Reads only; every entry is checked against the
    host before the first step is planned, so a refusal leaves nothing half-done."""
    current = [_current(writer, index, entry) for index, entry in enumerate(entries)]
    owners = [None if entry.state == "absent" else _owner_ids(index, entry)
              for index, entry in enumerate(entries)]
    plan = HostFilesPlan(ChangeSet())
    for index, (entry, (kind, mode, owner), ids) in enumerate(zip(entries, current, owners)):
        before = writer.read_bytes(entry.path) if kind == "file" else None
        if entry.state == "absent":
            if kind is not None:
                _plan_remove(plan, writer, entry, before, mode, owner)
            continue
        if entry.state == "directory":
            after = None
        elif entry.block is not None:
            after = replace_block(before, entry.block, entry.marker)
        else:
            after = entry.content.encode("utf-8", "surrogateescape")
        attributes = (mode, owner) != (entry.mode, ids)
        if kind is not None and after == before and not attributes:
            continue
        plan.changed_paths.append(entry.path)
        if after != before:
            change = FileChange(entry.path, _text(before), _text(after), entry.mode)
            plan.changes.files.append(change)
            plan.diff.append(change.diff())
        if kind is None or attributes:
            plan.diff.append({"before_header": "%s (type, mode, owner)" % entry.path,
                              "after_header": "%s (type, mode, owner)" % entry.path,
                              "before": _describe(kind, mode, owner),
                              "after": _describe(entry.state, entry.mode, ids)})
        if entry.state == "directory":
            _plan_directory(plan, writer, entry, kind, mode, owner, ids)
        else:
            _plan_file(plan, writer, index, entry, before, after, mode, owner, ids, attributes)
    return plan


def _plan_remove(plan, writer, entry, before, mode, owner):
    plan.changed_paths.append(entry.path)
    change = FileChange(entry.path, _text(before), None)
    plan.changes.files.append(change)
    plan.diff.append(change.diff())
    plan.changes.add("remove %s" % entry.path, lambda: writer.remove_file(entry.path),
                     lambda: writer.write_file(entry.path, before, mode, owner))


def _plan_directory(plan, writer, entry, kind, mode, owner, ids):
    if kind is None:
        created = []

        def make():
            created[:] = writer.make_folder(entry.path, entry.mode, ids)
        plan.changes.add("create directory %s (mode %04o)" % (entry.path, entry.mode), make,
                         lambda: writer.remove_empty_folders(created))
        return
    plan.changes.add(
        "set directory %s to mode %04o, owner %d:%d" % ((entry.path, entry.mode) + ids),
        lambda: writer.set_attributes(entry.path, entry.mode, ids),
        lambda: writer.set_attributes(entry.path, mode, owner))


def _plan_file(plan, writer, index, entry, before, after, mode, owner, ids, attributes):
    if entry.block is not None and after != before:
        add_block_step(plan.changes, writer, entry.path, entry.block, entry.marker,
                       entry.mode, ids, _field(index, "path"),
                       "create %s (mode %04o)" % (entry.path, entry.mode) if before is None else
                       "update %s%s" % (entry.path, " (mode %04o)" % entry.mode if attributes else ""))
        return
    if before is None:
        created = []

        def create():
            created[:] = writer.write_file(entry.path, after, entry.mode, ids) or []

        def uncreate():
            writer.remove_file(entry.path)
            writer.remove_empty_folders(created)
        plan.changes.add("create %s (mode %04o)" % (entry.path, entry.mode), create, uncreate)
        return
    if after == before:
        plan.changes.add(
            "set %s to mode %04o, owner %d:%d" % ((entry.path, entry.mode) + ids),
            lambda: writer.set_attributes(entry.path, entry.mode, ids),
            lambda: writer.set_attributes(entry.path, mode, owner))
        return
    plan.changes.add(
        "update %s%s" % (entry.path, " (mode %04o)" % entry.mode if attributes else ""),
        lambda: writer.write_file(entry.path, after, entry.mode, ids),
        lambda: writer.write_file(entry.path, before, mode, owner))
