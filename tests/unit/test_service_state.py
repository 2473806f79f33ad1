# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a running unit has applied its files, read from the host. The state command
runs for real (sh, stat) on a tree with set modification times; systemctl is a stand-in
script on PATH printing what systemd 252 prints (this machine runs no systemd), and the
lab's converge runs the real one (tests/lab/test_site_on_lab.py)."""

import os
import shutil
import subprocess

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils import service_state
from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError

UNIT_FILE = "/etc/systemd/system/gpuhost-numa.service"
CONF = "/etc/gpuhost/numa.conf"
SCRIPT = "/usr/local/libexec/gpuhost/gpuhost-numa-setup"
STARTED = 1764540000


def _host(tmp_path, mtimes, properties):
    """A tree with the inputs at the given times and a systemctl that prints ``properties``
    (and records its arguments)."""
    root = tmp_path / "root"
    for path, mtime in mtimes.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("x\n")
        os.utime(target, (mtime, mtime))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text("#!/bin/sh\nprintf '%%s\\n' \"$*\" > %s\nprintf '%%s' '%s'\n"
                         % (tmp_path / "systemctl.args", properties))
    systemctl.chmod(0o755)
    return root, bin_dir


def _run(tmp_path, root, bin_dir, inputs=(UNIT_FILE, CONF, SCRIPT)):
    argv = service_state.service_state_argv("gpuhost-numa.service", list(inputs), str(root))
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]))
    proc = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
    return proc.stdout


def _properties(active="active", reload_needed="no", entered="@%d" % STARTED):
    return "ActiveState=%s\nNeedDaemonReload=%s\nActiveEnterTimestamp=%s\n" % (active, reload_needed, entered)


def test_a_file_written_after_the_unit_started_needs_a_restart(tmp_path):
    # The killed run: numa.conf written at STARTED+30, the restart never came.
    root, bin_dir = _host(tmp_path, {UNIT_FILE: STARTED - 100, CONF: STARTED + 30, SCRIPT: STARTED - 100},
                          _properties())
    output = _run(tmp_path, root, bin_dir)
    refresh = service_state.service_refresh(output)
    assert refresh == {"daemon_reload": False, "restart": True,
                       "reasons": ["changed since the unit started: %s" % (str(root) + CONF)]}
    args = (tmp_path / "systemctl.args").read_text().split()
    assert args == ["show", "--timestamp=unix", "-p", "ActiveState,NeedDaemonReload,ActiveEnterTimestamp",
                    "--", "gpuhost-numa.service"]


def test_files_older_than_the_start_or_written_in_its_second_need_nothing(tmp_path):
    root, bin_dir = _host(tmp_path, {UNIT_FILE: STARTED - 100, CONF: STARTED, SCRIPT: STARTED - 1},
                          _properties())
    assert service_state.service_refresh(_run(tmp_path, root, bin_dir)) == {
        "daemon_reload": False, "restart": False, "reasons": []}


def test_a_unit_file_systemd_has_not_loaded_needs_a_daemon_reload(tmp_path):
    root, bin_dir = _host(tmp_path, {UNIT_FILE: STARTED + 5, CONF: STARTED - 1, SCRIPT: STARTED - 1},
                          _properties(reload_needed="yes"))
    refresh = service_state.service_refresh(_run(tmp_path, root, bin_dir))
    assert refresh["daemon_reload"] and refresh["restart"]
    assert refresh["reasons"][0] == "systemd has not loaded the unit file on disk"


@pytest.mark.parametrize("active, entered", [("inactive", ""), ("failed", "@%d" % STARTED),
                                             ("activating", "")])
def test_a_unit_that_is_not_active_needs_no_restart_since_starting_it_reads_the_files(tmp_path, active, entered):
    root, bin_dir = _host(tmp_path, {UNIT_FILE: STARTED + 5, CONF: STARTED + 5, SCRIPT: STARTED + 5},
                          _properties(active=active, entered=entered))
    assert service_state.service_refresh(_run(tmp_path, root, bin_dir))["restart"] is False


def test_missing_inputs_and_a_host_without_systemctl_print_nothing_and_succeed(tmp_path):
    # A PATH with the shell and stat, and no systemctl.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "stat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    argv = service_state.service_state_argv("gpuhost-numa.service", [CONF], str(tmp_path))
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=dict(os.environ, PATH=str(bin_dir)))
    assert proc.returncode == 0 and proc.stdout == ""
    assert service_state.service_refresh("") == {"daemon_reload": False, "restart": False, "reasons": []}


def test_a_systemctl_that_fails_is_reported_not_read_as_no_restart_needed(tmp_path):
    root, bin_dir = _host(tmp_path, {CONF: STARTED + 30}, "")
    (bin_dir / "systemctl").write_text("#!/bin/sh\necho 'Invalid value: unix.' >&2\nexit 1\n")
    output = _run(tmp_path, root, bin_dir, inputs=(CONF,))
    assert output.splitlines()[0] == "systemctl-failed 1 Invalid value: unix."
    with pytest.raises(GpuhostError) as err:
        service_state.service_refresh(output)
    assert "Invalid value: unix." in str(err.value) and "systemd 247" in err.value.fix


def test_the_inputs_are_read_below_the_root():
    argv = service_state.service_state_argv("gpuhost-triton.service", ["/etc/a.conf", "/b"], "/srv/tree/")
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["sh", "gpuhost-triton.service", "/srv/tree/etc/a.conf",
                                                     "/srv/tree/b"]
    assert service_state.service_state_argv("x.service", ["/etc/a.conf"])[-1] == "/etc/a.conf"


@pytest.mark.parametrize("unit, inputs, field", [
    ("", ["/etc/a"], "unit"),
    ("../x.service", ["/etc/a"], "unit"),
    ("--all", ["/etc/a"], "unit"),
    ("x.service", "/etc/a", "inputs"),
    ("x.service", [], "inputs"),
    ("x.service", ["etc/a"], "inputs"),
])
def test_bad_arguments_are_refused_with_the_field_named(unit, inputs, field):
    with pytest.raises(GpuhostError) as err:
        service_state.service_state_argv(unit, inputs)
    assert err.value.field == field


@pytest.mark.parametrize("output", [
    "ActiveState=active\nSomething else\n",
    "input abc /etc/a\n",
    "ActiveState=active\nActiveEnterTimestamp=Mon 2026-11-30 23:00:00 UTC\n",
    "Description=not asked for\n",
])
def test_output_not_from_the_command_is_refused(output):
    with pytest.raises(GpuhostError):
        service_state.service_refresh(output)
