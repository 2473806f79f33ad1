# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The command runner every module gets from new_module(): real commands, run with the
scheduling that makes ansible-core's own run_command drop a command's answer (a wait for
output that ends empty just before the command prints and exits), forced by a selector
that sleeps through its first wait."""

import contextlib
import io
import json
import os
import selectors
import time

import pytest
from support.module_args import patch_module_args

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import commands
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import host_units

# Prints its answer 0.2 s after it starts, then exits.
ANSWER_LATE = ["sh", "-c", "sleep 0.2; printf 'LoadState=loaded\\n'"]


@pytest.fixture
def first_wait_sleeps_past_the_exit(monkeypatch):
    """Every new poll selector's first select() sleeps until the command above has
    printed and exited, then reports no event: a busy host that did not schedule the
    reader during the command's last second."""
    real_select = selectors.PollSelector.select

    def select(self, timeout=None):
        if not getattr(self, "_waited", False):
            self._waited = True
            time.sleep(0.8)
            return []
        return real_select(self, timeout)
    monkeypatch.setattr(selectors.PollSelector, "select", select)


def _module(args=None):
    with patch_module_args(args or {}):
        return AnsibleModule(argument_spec={}, supports_check_mode=True)


def test_ansible_cores_run_command_drops_the_answer_with_that_scheduling(first_wait_sleeps_past_the_exit):
    """Why the modules do not use it: the status is 0 and the answer is gone."""
    rc, out, dummy = _module().run_command(ANSWER_LATE)
    assert (rc, out) == (0, "")


def test_the_runner_keeps_the_whole_answer_with_that_scheduling(first_wait_sleeps_past_the_exit):
    rc, out, err = commands.run_to_the_end(_module(), ANSWER_LATE)
    assert (rc, out, err) == (0, "LoadState=loaded\n", "")


def test_every_module_built_by_new_module_runs_commands_to_the_end(first_wait_sleeps_past_the_exit):
    with patch_module_args({"units": [{"name": "ssh.service"}]}):
        module = host_units.build_module()
    assert module.run_command(ANSWER_LATE) == (0, "LoadState=loaded\n", "")


def test_status_stderr_environment_and_input_are_as_run_command_gives_them(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/tmp/ansible_x/ansible_modlib.zip:/opt/lib")
    module = _module()
    module.run_command_environ_update = {"FROM_MODULE_ENV": "m"}
    script = ('printf "%s|%s|%s|%s" "$FROM_MODULE_ENV" "$TZ" "$PYTHONPATH" "$(cat)"; '
              'printf oops >&2; exit 3')
    rc, out, err = commands.run_to_the_end(module, ["sh", "-c", script], environ_update={"TZ": "UTC"},
                                           data="typed")
    assert (rc, out, err) == (3, "m|UTC|/opt/lib|typed", "oops")
    # without data, stdin is empty: a command that reads it ends instead of waiting
    assert commands.run_to_the_end(module, ["cat"]) == (0, "", "")


def test_output_that_is_not_utf8_comes_back_as_run_command_gives_it():
    rc, out, dummy = commands.run_to_the_end(_module(), ["printf", "\\377ok"])
    assert rc == 0 and out == b"\xffok".decode("utf-8", "surrogateescape")


@pytest.mark.parametrize("args", ["systemctl show ssh", [], b"ls"])
def test_a_shell_line_or_no_command_is_refused(args):
    with pytest.raises(GpuhostError, match="list of arguments"):
        commands.run_to_the_end(_module(), args)


def test_a_missing_tool_is_an_error_naming_the_command_and_the_fix():
    with pytest.raises(GpuhostError) as raised:
        commands.run_to_the_end(_module(), ["gpuhost-no-such-tool", "--version"])
    message = str(raised.value)
    assert "cannot run gpuhost-no-such-tool --version" in message and "PATH" in message


def test_check_rc_fails_the_module_with_the_status_and_both_outputs():
    out = io.StringIO()
    with patch_module_args({}), contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        module = AnsibleModule(argument_spec={}, supports_check_mode=True)
        commands.run_to_the_end(module, ["sh", "-c", "echo to-out; echo to-err >&2; exit 4"],
                                check_rc=True)
    result = json.loads(out.getvalue())
    assert result["failed"] is True and result["rc"] == 4
    assert (result["stdout"], result["stderr"], result["msg"]) == ("to-out\n", "to-err\n", "to-err")


def test_no_module_calls_subprocess_itself():
    """One runner: a module that ran commands its own way would bring the race back, or
    another."""
    modules = os.path.join(os.path.dirname(commands.__file__), "..", "..", "modules")
    found = sorted(name for name in os.listdir(modules) if name.endswith(".py")
                   and "import subprocess" in open(os.path.join(modules, name), encoding="utf-8").read())
    assert found == []
