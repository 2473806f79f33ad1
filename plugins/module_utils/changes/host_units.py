# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether systemd units run with their files as they are on disk, and what brings them
there: the pure decision that host_facts reports (``units`` subset) and host_units acts on.

Nothing here runs a command. The module asks ``systemctl show`` once for every unit
(:func:`show_argv`), hands the text to :func:`parse_show_blocks`, and :func:`plan_units`
turns the answers and the inputs' modification times into an ordered list of steps.
"""

from __future__ import annotations

import datetime
import functools
import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
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
# UnitFileState values that already mean "starts at boot" (or cannot be enabled: static
# units have no [Install] section), and the ones an enable changes.
_ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "transient")
_DISABLED_STATES = ("disabled", "")
_MASKED_STATES = ("masked", "masked-runtime")
# What undoes a step; the others (daemon-reload, restart, stop) have no meaningful undo.
UNDO = {"enable": "disable", "disable": "enable", "start": "stop"}


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


def plan_unit(unit, properties, inputs, index=0):
    """The actions one unit needs: ``unit`` is the module's entry (name, enabled, state,
    restart_on_change), ``properties`` systemctl's answer, ``inputs`` {path: mtime}.

    Returns {"actions": [...], "reasons": [...], "daemon_reload": bool, ...}: a unit
    systemd does not know (LoadState not-found, a unit file just written) needs a
    daemon-reload and is then treated as inactive and disabled."""
    name = unit["name"]
    load_state = properties.get("LoadState", "")
    refresh = unit_refresh(properties, inputs)
    unknown = load_state in ("not-found", "")
    # A unit asked only to be disabled or stopped that systemd does not know is not
    # installed: nothing to do, and no daemon-reload (host slimming lists such units).
    absent = unknown and unit.get("enabled") is not True and unit.get("state") != "started"
    file_state = properties.get("UnitFileState", "")
    plan = {"load_state": load_state, "active": refresh["active"], "unit_file_state": file_state,
            "daemon_reload": refresh["daemon_reload"] or (unknown and not absent), "actions": [],
            "reasons": list(refresh["reasons"])}
    if absent:
        plan["reasons"].append("not installed (LoadState %s): nothing to disable or stop"
                               % (load_state or "empty"))
        return plan
    if unknown:
        plan["reasons"].append("systemd does not know the unit yet (LoadState %s)" % (load_state or "empty"))
    field = "units[%d].name" % index
    if unit.get("enabled") is True and file_state in _MASKED_STATES:
        raise GpuhostError("%s is masked, so it cannot be enabled" % name, field=field,
                           fix="systemctl unmask -- %s, if masking it was not deliberate" % name)
    if unit.get("enabled") is True and (unknown or file_state in _DISABLED_STATES):
        plan["actions"].append("enable")
    elif unit.get("enabled") is False and file_state in ("enabled", "enabled-runtime"):
        plan["actions"].append("disable")
    stale = refresh["restart"] or (refresh["daemon_reload"] and refresh["active"])
    wanted = unit.get("state")
    if wanted == "stopped":
        if refresh["active"]:
            plan["actions"].append("stop")
    elif wanted == "started" and not refresh["active"]:
        if file_state in _MASKED_STATES:
            raise GpuhostError("%s is masked, so it cannot be started" % name, field=field,
                               fix="systemctl unmask -- %s, if masking it was not deliberate" % name)
        plan["actions"].append("start")
    elif stale and unit.get("restart_on_change", True):
        # started, or no state given: a running unit restarts on changed inputs.
        plan["actions"].append("restart")
        if refresh["daemon_reload"] and not refresh["restart"]:
            plan["reasons"].append("restart: its unit file changed")
    return plan


def plan_units(units, properties, inputs):
    """Every unit's plan and the ordered steps: one daemon-reload first when any unit
    needs it, then each unit's enablement and state change, in the order given.

    ``units``: the module's entries; ``properties``: one answer per unit;
    ``inputs``: one {path: mtime} per unit. Steps are (verb, unit) pairs; the
    daemon-reload's unit is None."""
    plans = {}
    steps = []
    for index, (unit, props, mtimes) in enumerate(zip(units, properties, inputs)):
        plans[unit["name"]] = plan_unit(unit, props, mtimes, index)
    if any(plan["daemon_reload"] for plan in plans.values()):
        steps.append(("daemon-reload", None))
    for unit in units:
        steps.extend((verb, unit["name"]) for verb in plans[unit["name"]]["actions"])
    return plans, steps


def step_text(step):
    """A step as the command it runs."""
    verb, name = step
    return "systemctl %s" % verb + (" -- %s" % name if name else "")


def wanted_text(unit):
    """What a unit entry asks for, in words: ``enabled, started`` (the inputs' refresh of
    a running unit included), for a run that cannot ask systemd."""
    wanted = []
    if unit.get("enabled") is not None:
        wanted.append("enabled" if unit["enabled"] else "disabled")
    if unit.get("state"):
        wanted.append(unit["state"])
    if unit.get("inputs") and unit.get("restart_on_change", True) and unit.get("state") != "stopped":
        wanted.append("restarted if running before its inputs changed")
    return ", ".join(wanted) or "nothing asked"


def state_lines(units, plans, after=False):
    """The units' enablement and activity before (or as predicted after) the steps, one
    line each: the text of --diff."""
    lines = []
    for unit in units:
        plan = plans[unit["name"]]
        enabled = plan["unit_file_state"] or "unknown"
        active = "active" if plan["active"] else "inactive"
        if after:
            actions = plan["actions"]
            if "enable" in actions:
                enabled = "enabled"
            elif "disable" in actions:
                enabled = "disabled"
            if "start" in actions:
                active = "active"
            elif "stop" in actions:
                active = "inactive"
            elif "restart" in actions:
                active = "active (restarted)"
        lines.append("%s: %s, %s\n" % (unit["name"], enabled, active))
    return "".join(lines)


def systemctl_step_argv(step):
    """A step's argv: ``systemctl VERB -- UNIT`` (``daemon-reload`` takes no unit)."""
    verb, name = step
    return ["systemctl", verb] + (["--", name] if name else [])


class UnitSteps(ChangeSet):
    """host_units' steps as a change set whose rollback is its own: each (verb, unit)
    of ``unit_steps`` runs through ``run``; on a failure the done steps are undone
    newest first by their UNDO verb, and a step without one (a restart, a
    daemon-reload) or of a unit listed in ``keep`` (its entry's undo: false) is
    reported as not undone, which leaves the rollback incomplete. ``done``: the steps
    that ran; ``diff()``: the units' states before and after, as given."""

    def __init__(self, unit_steps, run, keep=(), diff=None):
        super(UnitSteps, self).__init__()
        self.unit_steps = list(unit_steps)
        self.run = run
        self.keep = set(keep)
        self.done = []
        self._diff = diff
        for step in self.unit_steps:
            self.add(step_text(step), functools.partial(run, step))

    def diff(self):
        return self._diff

    def apply(self):
        for step in self.unit_steps:
            try:
                self.run(step)
            except GpuhostError as err:
                raise self.undo(step, err) from None
            self.done.append(step)

    def undo(self, failed, err):
        """Undo the done steps in reverse; the error to raise says what was and was not."""
        undone, not_undone, undo_failed = [], [], []
        for step in reversed(self.done):
            verb, name = step
            if verb not in UNDO or name in self.keep:
                not_undone.append(step_text(step))
                continue
            try:
                self.run((UNDO[verb], name))
                undone.append(step_text(step))
            except GpuhostError as undo_err:
                undo_failed.append("%s (%s)" % (step_text(step), undo_err.msg))
        details = {"failed_step": step_text(failed), "undone": undone,
                   "not_undone": not_undone, "undo_failed": undo_failed,
                   "rollback_failed": bool(not_undone or undo_failed)}
        summary = "undone: %s" % (", ".join(undone) or "nothing")
        if not_undone or undo_failed:
            summary += "; not undone: %s" % ", ".join(not_undone + undo_failed)
        return GpuhostError("%s (%s)" % (err.msg, summary), field=err.field, fix=err.fix, details=details)
