# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a running systemd unit has applied the files it reads, decided from the host
rather than from what the current run changed.

The roles write a unit's inputs (its unit file, a configuration, a helper script), then
restart the unit. A run killed between the two leaves the new files on disk and the old
settings in force: the next run finds the files unchanged, so a restart keyed on "this
task changed" never comes, and the host stays half-applied until its next boot. The same
flaw in the iommu role (grub.cfg, initramfs) is handled by boot_config; this module does
it for units applied at run time:

- restart when the unit is active but entered that state before the newest input was
  last modified (it runs with settings older than the files);
- reload systemd's configuration when systemd says a unit file changed on disk since it
  was loaded (``NeedDaemonReload=yes``); restarting without it would run the old unit.

A unit that is not active needs no restart: starting it reads the files as they are.
Times are whole seconds (``stat %Y``, ``systemctl --timestamp=unix``): an input written in
the same second as the unit started counts as applied, so a run that writes and then
restarts within one second is not restarted again by the next run.
"""

from __future__ import annotations

import posixpath

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError

SHOWN_PROPERTIES = ("ActiveState", "NeedDaemonReload", "ActiveEnterTimestamp")

# $1: the unit; the rest: its inputs. Prints systemctl's "Property=value" lines (for a
# unit systemd does not know: inactive, never entered), then "input MTIME PATH" per
# existing input. A host without systemctl prints no properties; a systemctl that fails
# (a systemd older than 247 rejects --timestamp=unix) prints "systemctl-failed RC ERROR",
# which the parser refuses: a silent empty answer would mean "no restart needed".
_SHOW_SCRIPT = r"""unit=$1; shift
if command -v systemctl >/dev/null 2>&1; then
  show() { systemctl show --timestamp=unix -p %s -- "$unit"; }
  if out=$(show 2>/dev/null); then printf '%%s\n' "$out"
  else rc=$?; printf 'systemctl-failed %%s %%s\n' "$rc" "$(show 2>&1 >/dev/null | head -n 1)"; fi
fi
for f in "$@"; do [ -e "$f" ] && stat -c 'input %%Y %%n' -- "$f"; done
exit 0""" % ",".join(SHOWN_PROPERTIES)


def service_state_argv(unit, inputs, root="/"):
    """The argv that prints ``unit``'s state as systemd sees it and the modification times
    of ``inputs`` (absolute paths on the host, read below ``root``)."""
    if not isinstance(unit, str) or not unit.strip() or "/" in unit or unit.startswith("-"):
        raise GpuhostError("%r is not a systemd unit name" % (unit,), field="unit",
                           fix="name the unit as systemctl does, such as gpuhost-numa.service")
    if isinstance(inputs, str) or not isinstance(inputs, (list, tuple)) or not inputs:
        raise GpuhostError("expected a non-empty list of the unit's input files, got %r" % (inputs,),
                           field="inputs", fix="pass the files the unit reads, its unit file first")
    for path in inputs:
        if not isinstance(path, str) or not path.startswith("/"):
            raise GpuhostError("%r is not an absolute path" % (path,), field="inputs",
                               fix="name each input by its absolute path on the host")
    return (["sh", "-c", _SHOW_SCRIPT, "sh", unit]
            + [posixpath.join(root or "/", path.lstrip("/")) for path in inputs])


def parse_service_state(output):
    """{"properties": {name: value}, "inputs": {path: mtime}} from the command's stdout."""
    state = {"properties": {}, "inputs": {}}
    for line in (output or "").splitlines():
        if line.startswith("systemctl-failed "):
            raise GpuhostError("systemctl show could not report the unit's state: %s" % line[len("systemctl-failed "):],
                               field="output", fix="this needs systemd 247 or later (systemctl show --timestamp=unix), "
                               "as on RHEL 9 and Debian 12; check that systemd runs as PID 1")
        if line.startswith("input "):
            fields = line.split(" ", 2)
            if len(fields) == 3 and fields[1].isdigit() and fields[2]:
                state["inputs"][fields[2]] = int(fields[1])
                continue
        else:
            name, sep, value = line.partition("=")
            if sep and name in SHOWN_PROPERTIES:
                state["properties"][name] = value
                continue
        raise GpuhostError("unexpected line %r in the unit's state" % (line,), field="output",
                           fix="pass the stdout of the command service_state_argv built")
    return state


def _unix_time(value):
    """Seconds from systemctl's ``--timestamp=unix`` form (``@1700000000``); None for a
    state never entered (an empty value)."""
    if not value:
        return None
    if not value.startswith("@") or not value[1:].isdigit():
        raise GpuhostError("%r is not a systemd unix timestamp" % (value,), field="output",
                           fix="systemctl must support --timestamp=unix (systemd 247 or later)")
    return int(value[1:])


def service_refresh(output):
    """{"daemon_reload": bool, "restart": bool, "reasons": [str]}: what the unit needs so
    that it runs with its files as they are on disk."""
    state = parse_service_state(output)
    properties = state["properties"]
    refresh = {"daemon_reload": properties.get("NeedDaemonReload") == "yes", "restart": False,
               "reasons": []}
    if refresh["daemon_reload"]:
        refresh["reasons"].append("systemd has not loaded the unit file on disk")
    entered = _unix_time(properties.get("ActiveEnterTimestamp", ""))
    if properties.get("ActiveState") == "active" and entered is not None:
        newer = sorted(path for path, mtime in state["inputs"].items() if mtime > entered)
        if newer:
            refresh["restart"] = True
            refresh["reasons"].append("changed since the unit started: %s" % ", ".join(newer))
    return refresh
