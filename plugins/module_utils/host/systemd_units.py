# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether systemd units run with their files as they are on disk, as ``systemctl show``
reports it: the reading that host_facts reports (its ``units`` subset) and host_units
(changes/host_units.py) acts on. Nothing here runs a command or changes a unit.
"""

from __future__ import annotations

import datetime
import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

# The unit properties unit_refresh decides on.
UNIT_PROPERTIES = ("ActiveState", "UnitFileState", "NeedDaemonReload", "ActiveEnterTimestamp")
# host_units also needs to know whether systemd has the unit at all.
SHOW_PROPERTIES = ("LoadState",) + UNIT_PROPERTIES
# systemctl show prints ActiveEnterTimestamp as "Www YYYY-MM-DD HH:MM:SS ZONE" in the zone
# of its own TZ, so run with TZ=UTC it prints UTC, in whole seconds, on every systemd. Not
# --timestamp=unix (@SECONDS): systemd 247 (Debian 11, the el9like lab) refuses that
# value ("Invalid value: unix"); RHEL 9's own systemd (250 or 252 by minor release) was
# not checked, and needs no check this way.
SHOW_ENVIRON = {"TZ": "UTC", "LC_ALL": "C"}
_UNIX_TIME_RE = re.compile(r"^@([0-9]+)\Z")
_UTC_TIME_RE = re.compile(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([0-9]{4})-([0-9]{2})-([0-9]{2}) "
                          r"([0-9]{2}):([0-9]{2}):([0-9]{2}) UTC\Z")


def show_argv(names, properties=SHOW_PROPERTIES):
    """One ``systemctl show`` for every unit, ``--`` before the names; run it with
    SHOW_ENVIRON."""
    return ["systemctl", "show", "-p", ",".join(properties), "--"] + list(names)


def parse_unit_properties(text, properties=UNIT_PROPERTIES):
    """``systemctl show -p ...`` output as {property: value}, only ``properties``."""
    found = {}
    for line in (text or "").splitlines():
        name, sep, value = line.partition("=")
        if sep and name in properties:
            found[name] = value
    return found


def parse_show_blocks(text, count):
    """``systemctl show`` for ``count`` units (one block each, in the order asked,
    separated by an empty line) as a list of {property: value}."""
    blocks = [block for block in re.split(r"\n\s*\n", (text or "").strip("\n")) if block.strip()]
    if len(blocks) != count:
        raise GpuhostError("systemctl show answered %d blocks for %d units" % (len(blocks), count),
                           field="units", fix="run the systemctl show command of the result on the host")
    return [parse_unit_properties(block, SHOW_PROPERTIES) for block in blocks]


def _unix_time(value):
    """Seconds since the epoch from systemctl's timestamp in UTC (``Sat 2026-12-05
    01:23:41 UTC``, what SHOW_ENVIRON makes it print) or its ``--timestamp=unix`` form
    (``@1700000000``); None for a state never entered (an empty value)."""
    if not value:
        return None
    match = _UNIX_TIME_RE.match(value)
    if match:
        return int(match.group(1))
    match = _UTC_TIME_RE.match(value)
    try:
        if match:
            moment = datetime.datetime(*(int(part) for part in match.groups()),
                                       tzinfo=datetime.timezone.utc)
            return int(moment.timestamp())
    except ValueError:      # a month 13, a day 31 of a month of 30
        pass
    raise GpuhostError("%r is not a systemd timestamp in UTC" % (value,), field="units",
                       fix="run systemctl show with TZ=UTC, as the modules do, so that it "
                           "prints 'Www YYYY-MM-DD HH:MM:SS UTC'")


def unit_refresh(properties, inputs):
    """What a unit needs so that it runs with its files as they are on disk, decided
    from the host rather than from what the current run changed (a run killed between
    writing the files and restarting leaves them unchanged for the next run):

    - ``restart`` when the unit is active but entered that state before the newest
      input was modified (whole seconds: an input written in the second the unit
      started counts as applied);
    - ``daemon_reload`` when systemd says the unit file changed since it was loaded.

    ``properties``: parse_unit_properties()'s answer; ``inputs``: {path: mtime}."""
    refresh = {"active": properties.get("ActiveState") == "active",
               "enabled": properties.get("UnitFileState") == "enabled",
               "daemon_reload": properties.get("NeedDaemonReload") == "yes",
               "restart": False, "reasons": []}
    if refresh["daemon_reload"]:
        refresh["reasons"].append("systemd has not loaded the unit file on disk")
    entered = _unix_time(properties.get("ActiveEnterTimestamp", ""))
    if refresh["active"] and entered is not None:
        newer = sorted(path for path, mtime in inputs.items() if mtime > entered)
        if newer:
            refresh["restart"] = True
            refresh["reasons"].append("changed since the unit started: %s" % ", ".join(newer))
    return refresh
