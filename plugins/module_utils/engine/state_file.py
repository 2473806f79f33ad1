# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The JSON state files the modules keep on the host (vfio_bind's previous drivers, the
stored IRQ pins, the SR-IOV configuration).

A ``StateFile`` describes one: its format, how it is read and how its entries merge.
Nothing here writes, so readers (host/) may read a state file too. It is changed only
through ``ChangeSet.put_state`` (engine/changeset.py): its step takes the file's lock
(``FileLock``, an flock on ``<file>.lock``, never opened through a link), re-reads the
file under it, merges the run's per-entry changes into what it finds
(``update_state_file``), writes atomically and lets go. Two runs at once (two
onboardings) therefore both keep their entries, whichever plans first.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Callable, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import describe_os_error, read_host_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

STATE_VERSION = 1
ABSENT = object()


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
        """The per-unit changes from ``before`` to ``after``: {unit: value or ABSENT}."""
        old, new = self.units(before), self.units(after)
        return {unit: new.get(unit, ABSENT) for unit in list(new) + list(old)
                if old.get(unit, ABSENT) != new.get(unit, ABSENT)}

    def merge(self, data, delta):
        """``data`` with ``delta`` applied: per key, per list identity (a new entry takes
        the place of the first one removed, else goes last), per name."""
        data = copy.deepcopy(data)
        mine = {unit[1]: value for unit, value in delta.items() if unit[0] == self.key}
        if self.entries is dict:
            values = data.setdefault(self.key, {})
            for name, value in mine.items():
                if value is ABSENT:
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
                    if mine[name] is ABSENT:
                        insert_at = len(kept) if insert_at is None else insert_at
                    else:
                        kept.append(copy.deepcopy(mine[name]))
            added = [copy.deepcopy(value) for name, value in mine.items()
                     if name not in placed and value is not ABSENT]
            insert_at = len(kept) if insert_at is None else insert_at
            data[self.key] = kept[:insert_at] + added + kept[insert_at:]
        for top in self.sets:
            names = {unit[1]: value for unit, value in delta.items() if unit[0] == top}
            if not names:
                continue
            current = set(data.get(top) or ())
            current |= {n for n, value in names.items() if value is not ABSENT}
            current -= {n for n, value in names.items() if value is ABSENT}
            data[top] = sorted(current)
        return data


def read_state_nofollow(writer, spec):
    """A StateFile read through ``read_host_text``: a link at its place
    is refused before it is read, naming the spec's field."""
    return spec.parse(read_host_text(writer, spec.path, spec.field, spec.fix))
