# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What brings systemd units to run with their files as they are on disk: host_units'
core. Whether a unit needs it is read in host/systemd_units.py, which host_facts reports.

Nothing here runs a command. The module asks ``systemctl show`` once for every unit
(:func:`show_argv`), hands the text to :func:`parse_show_blocks`, and :func:`plan_units`
turns the answers and the inputs' modification times into an ordered list of steps.
"""

from __future__ import annotations

import functools

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.systemd_units import unit_refresh

# UnitFileState values that already mean "starts at boot" (or cannot be enabled: static
# units have no [Install] section), and the ones an enable changes.
_ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "transient")
_DISABLED_STATES = ("disabled", "")
_MASKED_STATES = ("masked", "masked-runtime")
# What undoes a step; the others (daemon-reload, restart, stop) have no meaningful undo.
UNDO = {"enable": "disable", "disable": "enable", "start": "stop"}


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
