# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one main() body of every gpuhost.kvm module, in the shape of community.general's
``ModuleHelper.run`` without its VarDict: the module builds its AnsibleModule and its
worker, and this runs the worker and reports it.

A worker has ``run()`` and a ``result`` property (the result so far, which a failure
reports too). Optional:

- ``failed_result``: what a failed run reports instead of ``result`` (a facts module
  returns no partial fact, so that a failed read never looks like a host without the rest);
- ``failed``: true when the run completed but the module must fail (a gate that was not
  met reports its whole result as a failure);
- ``os_error_message``: a format with one ``%s``; when set, an OSError the worker did not
  turn into a GpuhostError is reported with it and its traceback instead of crashing.
"""

from __future__ import annotations

import copy
import os
import traceback
from dataclasses import dataclass, field

from ansible.module_utils import basic
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.commands import install_runner
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import ROOT_ARGUMENT_SPEC
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.roots import is_live_root
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import absolute_path

# What ansible-core's own checks raise, before a module's code runs, for a value they
# cannot check (float(10**400), a list where a dict with suboptions is due). Not
# RuntimeError: ansible-test's validate-modules stops AnsibleModule with one.
_CHECK_CRASHES = (TypeError, ValueError, ArithmeticError, LookupError, AttributeError)


def new_module(module_class, argument_spec, **kwargs):
    """``module_class(argument_spec=..., **kwargs)`` (the module's AnsibleModule), the one
    way every module builds its own. What ansible-core's checks crash on, take for a
    number or refuse without a name (a list past MAX_LIST_ITEMS, text for a list of
    mappings, look-alike digits) fails the module naming the option (its ``field``),
    never with a traceback; then the shared root is checked. Valid input builds the
    very same module, whose run_command reads a command's output to the end
    (engine/commands.py)."""
    spec = copy.deepcopy(argument_spec)
    loaded = _loaded_params()
    params = {key: value for key, value in loaded.items() if not key.startswith("_ansible_")}
    unfit = (_too_long_list(spec, params) or _text_for_mappings(spec, params)
             or _lookalike_digits(spec, params))
    if unfit is not None:
        _refuse(spec, loaded, unfit)
    try:
        module = module_class(argument_spec=argument_spec, **kwargs)
    except _CHECK_CRASHES as err:
        _refuse(spec, loaded, _check_crash_error(spec, params, err))
        raise       # not reached: fail_json exits
    _check_shared_options(module, spec)
    return install_runner(module)


def _loaded_params():
    """The options as given, read the way AnsibleModule reads them (and kept for it),
    with ansible-core's internal ``_ansible_*`` settings (check mode, no_log, diff); none
    before a module run (AnsiballZ) or a test has handed them over, nor where they cannot
    be read: AnsibleModule then reads them, or fails on them, by itself."""
    if getattr(basic, "_ANSIBLE_ARGS", None) is None:
        return {}
    try:
        params = basic._load_params()  # pylint: disable=protected-access
    except Exception:  # pylint: disable=broad-except
        return {}
    return params if isinstance(params, dict) else {}


def _refuse(spec, loaded, error):
    """fail_json with ``error`` where the module's own spec cannot build a module: an
    AnsibleModule that takes every option (``loaded``: as _loaded_params read them) as it
    is still reports, with no_log kept."""
    # A list past MAX_LIST_ITEMS is shown by its length, and the reporter is handed the
    # options already read instead of reading (and deep-copying) them again: ansible-core's
    # load, checks, no_log scrub and JSON of a million items would outlast the refusal.
    shown = {key: "(%d items, not shown)" % len(value)
             if isinstance(value, (list, dict)) and len(value) > MAX_LIST_ITEMS else value
             for key, value in loaded.items()}
    # The reporter's spec is flat, so it knows no secret inside a mapping option (a
    # domain's cloud-init user data): they are hidden here, from the invocation and from
    # every text of the result.
    secrets = set()
    shown = _hide_secrets(spec, shown, secrets)
    given = {key: value for key, value in shown.items() if not key.startswith("_ansible_")}

    class _Reporter(basic.AnsibleModule):  # pylint: disable=too-few-public-methods
        def _load_params(self):
            self.params = dict(shown)

    reporter = _Reporter(
        argument_spec={key: {"type": "raw"} for key in given},
        supports_check_mode=True)
    reporter.no_log_values.update(secrets)
    reporter.fail_json(changed=False, invocation={"module_args": given}, **error.to_result())


HIDDEN = "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"  # what ansible-core shows for one


def _hide_secrets(spec, params, secrets):
    """``params`` with the value of every no_log option, at any depth of ``spec``, shown
    as ansible-core shows one; each hidden text is added to ``secrets``. Whatever shape
    the options were given in: a value of the wrong type is kept as it is."""
    if not isinstance(params, dict):
        return params
    hidden = dict(params)
    for name, option in spec.items():
        for key in [name] + list(option.get("aliases") or ()):
            if key not in hidden or hidden[key] is None:
                continue
            value = hidden[key]
            if option.get("no_log"):
                secrets.update(_texts_in(value))
                hidden[key] = HIDDEN
            elif option.get("options") and isinstance(value, dict):
                hidden[key] = _hide_secrets(option["options"], value, secrets)
            elif option.get("options") and isinstance(value, list) and len(value) <= MAX_LIST_ITEMS:
                hidden[key] = [_hide_secrets(option["options"], item, secrets) for item in value]
    return hidden


def _texts_in(value):
    """The texts (and numbers, as text) a no_log value holds, at any depth."""
    if isinstance(value, dict):
        return {text for item in value.values() for text in _texts_in(item)}
    if isinstance(value, (list, tuple)):
        return {text for item in value for text in _texts_in(item)}
    text = str(value)
    return {text} if text else set()


# The most items a list option takes: far above any host's CPUs (8192), IRQs or files,
# far below the million items that keep ansible-core's checks busy for minutes.
MAX_LIST_ITEMS = 65536


def _text_for_mappings(spec, params):
    """The GpuhostError for a list-of-mappings option given text (or text items):
    ansible-core's own refusal of it ("dictionary requested, could not parse JSON or
    key=value") names no option."""
    for name, option in spec.items():
        if option.get("type") != "list" or option.get("elements") != "dict":
            continue
        for key in [name] + list(option.get("aliases") or ()):
            value = params.get(key)
            items = value if isinstance(value, list) else [value]
            if any(isinstance(item, str) for item in items):
                return GpuhostError("%r is text, not a list of mappings" % (value,)
                                    if isinstance(value, str) else
                                    "an item is text, not a mapping", field=name,
                                    fix="give %s as a list of mappings (YAML: one '- key: value' "
                                        "block per item)" % name)
    return None


def _lookalike_digits(spec, params, prefix=""):
    """The GpuhostError for a number option given text with digits other than 0-9:
    ansible-core's int() and float() read Arabic-Indic or fullwidth digits as numbers
    (u'\u0661' is 1), which no one types for a count on purpose."""
    for name, option in spec.items():
        value = params.get(name) if isinstance(params, dict) else None
        field = prefix + name
        if option.get("type") in ("int", "float") and isinstance(value, str) and any(
                char.isdigit() and char not in "0123456789" for char in value):
            return GpuhostError("%r holds digits other than 0-9" % (value,), field=field,
                                fix="write the number with the digits 0-9")
        subs = option.get("options")
        if subs and isinstance(value, dict):
            found = _lookalike_digits(subs, value, field + ".")
        elif subs and isinstance(value, list):
            found = next((error for error in (
                _lookalike_digits(subs, item, "%s[%d]." % (field, index))
                for index, item in enumerate(value[:MAX_LIST_ITEMS])) if error), None)
        else:
            found = None
        if found:
            return found
    return None


def _too_long_list(spec, params):
    """The GpuhostError for the first list option given more than MAX_LIST_ITEMS items,
    refused before ansible-core checks each item."""
    for name, option in spec.items():
        for key in [name] + list(option.get("aliases") or ()):
            value = params.get(key)
            if option.get("type") == "list" and isinstance(value, list) \
                    and len(value) > MAX_LIST_ITEMS:
                return GpuhostError("%d items are more than the %d a list option takes"
                                    % (len(value), MAX_LIST_ITEMS), field=name,
                                    fix="give %s fewer items" % name)
    return None


def _path_errors(spec, params, prefix=""):
    """Raise the GpuhostError of the first path option (``type: path``, a list of paths,
    or one inside a mapping option) that is not an absolute path without control
    characters: every path option names a host file or folder, a relative one would
    depend on the directory the module runs in, and a control character reaches
    libvirt's XML, a command line or a log line before any later check."""
    for name, option in spec.items():
        value = params.get(name) if isinstance(params, dict) else None
        if value in (None, ""):
            continue        # not given: the module's default or its own meaning of ""
        field = prefix + name
        kind = option.get("type")
        if kind == "path":
            absolute_path(value, field, kind="file or folder")
        elif kind == "list" and option.get("elements") == "path" and isinstance(value, list):
            for index, item in enumerate(value):
                if item not in (None, ""):
                    absolute_path(item, "%s[%d]" % (field, index), kind="file")
        elif option.get("options") and isinstance(value, dict):
            _path_errors(option["options"], value, field + ".")
        elif option.get("options") and isinstance(value, list):
            for index, item in enumerate(value):
                _path_errors(option["options"], item, "%s[%d]." % (field, index))


def _check_shared_options(module, spec):
    """Every path option is checked here, once for every module, before any reader
    joins a host path to it (``_path_errors``); so is the shared ``root``
    (common_args.ROOT_ARGUMENT_SPEC): a FIFO or a file is no tree. A root that is not
    there yet is left to the module (numa_cpuset plans from topology data without
    reading it)."""
    params = getattr(module, "params", {})
    root = params.get("root")
    try:
        if spec.get("root") == ROOT_ARGUMENT_SPEC["root"] and root is not None:
            absolute_path(root, "root", kind="root directory (/ for the running host)")
            if os.path.exists(root) and not os.path.isdir(root):
                raise GpuhostError("%s is not a directory" % root, field="root",
                                   fix="give the directory that holds the host's tree "
                                       "(/ for the running host)")
        _path_errors(spec, params)
    except GpuhostError as err:
        module.fail_json(changed=False, **err.to_result())


def _check_crash_error(spec, params, crash):
    """The GpuhostError for ``crash``: the first option whose value alone crashes the
    check again, or none named when no single one does."""
    reason = "%s: %s" % (type(crash).__name__, crash)
    for name, option in spec.items():
        given = [key for key in [name] + list(option.get("aliases") or ()) if key in params]
        if not given:
            continue
        try:
            ArgumentSpecValidator({name: option}).validate({given[0]: params[given[0]]})
        except _CHECK_CRASHES:
            return GpuhostError(
                "ansible-core could not check the value given (%s)" % reason, field=name,
                fix="give %s a value of type %s, as the module's documentation says"
                    % (name, _described_type(option)))
    return GpuhostError(
        "ansible-core could not check the options given (%s)" % reason,
        fix="give each option a value of its documented type (ansible-doc gpuhost.kvm.<module>)")


def _described_type(option):
    kind = option.get("type") or "str"
    if kind == "list" and option.get("elements"):
        return "list of %s" % option["elements"]
    if kind == "dict" and option.get("options"):
        return "dict with the options %s" % ", ".join(sorted(option["options"]))
    return kind


def run_module(module, worker, changes_host=False):
    """Run ``worker`` and exit ``module`` with its result, or fail with the error's field
    and fix. ``changes_host``: a failed run reports ``changed`` only when its rollback
    failed too, since a change that was rolled back left the host as it found it."""
    try:
        worker.run()
    except GpuhostError as err:
        failure = dict(getattr(worker, "failed_result", None) or worker.result, **err.to_result())
        if changes_host:
            failure["changed"] = bool(err.details.get("rollback_failed"))
        module.fail_json(**failure)
    except OSError as err:
        message = getattr(worker, "os_error_message", None)
        if not message:
            raise
        module.fail_json(**dict(worker.result, msg=message % err, exception=traceback.format_exc()))
    if getattr(worker, "failed", False):
        module.fail_json(**worker.result)
    module.exit_json(**worker.result)


@dataclass
class StepPlan:
    """The plan of a worker that keeps what it found on itself: its change set alone."""
    changes: ChangeSet = field(default_factory=ChangeSet)


class PlannedChange(object):
    """A worker that decides first and acts second: ``decide()`` returns a plan whose
    ``changes`` is a changeset.ChangeSet; ``run()`` applies it outside check mode through
    ``apply()`` (the change set rolls itself back when a step fails).
    ``change_result(**fields)`` is the result every such module reports: ``changed``
    (what was applied, or would be in check mode), ``steps``, the module's own fields
    and, with --diff, the change set's diff."""

    def __init__(self, module):
        self.module = module
        self.plan = None
        self.applied = False
        self._live = None

    @property
    def live(self):
        """Whether this run acts on the running host (``is_live_root``), unless set: a
        simulated tree that stands for / (the tests' simulator) sets it to True."""
        if self._live is not None:
            return self._live
        return is_live_root(self.module.params.get("root"))

    @live.setter
    def live(self, value):
        self._live = bool(value)

    def decide(self):
        raise NotImplementedError

    def run(self):
        self.plan = self.decide()
        if self.has_work() and not self.module.check_mode:
            self.apply()
            self.applied = True

    def has_work(self):
        """Whether the plan has anything to apply: its change set, unless the module's
        plan holds more than one (a domain's run state and autostart)."""
        return bool(self.plan.changes)

    def apply(self):
        """Applies the plan; a module that reads the host again afterwards extends this."""
        self.plan.changes.apply()

    @property
    def done(self):
        """True once the plan was applied, or, in check mode, once it was made."""
        return self.plan is not None and (self.applied or self.module.check_mode)

    def diff(self):
        return self.plan.changes.diff()

    def change_result(self, **fields):
        plan = self.plan
        result = dict(changed=bool(self.done and plan.changes),
                      steps=plan.changes.descriptions if plan else [], **fields)
        if plan and self.module._diff:  # pylint: disable=protected-access
            result["diff"] = self.diff()
        return result
