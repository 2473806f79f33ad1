# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host_units and its pure core (module_utils/changes/host_units.py): the decision from systemctl's
answer and the inputs' modification times, then the module run end to end.

Only systemctl is faked (FakeSystemd, every test that uses it says "fake_systemctl" in
its name); the inputs are real files under tmp_path with set modification times, and the
module runs through main() with its real argument spec and runner."""

import datetime
import json
import os

import pytest
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import commands
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import host_units as units
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import systemd_units as unit_state
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import host_units

STARTED = 1_700_000_000


def _write(path, mtime):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write("x\n")
    os.utime(path, (mtime, mtime))
    return path


class FakeSystemd:
    """systemctl show / daemon-reload / enable / disable / start / stop / restart over a
    dict of units; ``fail`` names a "verb unit" whose command exits 1."""

    def __init__(self, **units_state):
        self.units = units_state
        self.calls = []
        self.fail = set()

    @staticmethod
    def unit(active=True, enabled="enabled", reload="no", entered=STARTED, load="loaded"):
        return {"LoadState": load, "ActiveState": "active" if active else "inactive",
                "UnitFileState": enabled, "NeedDaemonReload": reload,
                "ActiveEnterTimestamp": "@%d" % entered if active else ""}

    def __call__(self, module, argv, *args, **kwargs):
        argv = list(argv)
        self.calls.append(argv)
        assert argv[0] == "systemctl"
        verb = argv[1]
        names = argv[argv.index("--") + 1:] if "--" in argv else []
        if " ".join([verb] + names) in self.fail:
            return 1, "", "Job for %s failed." % " ".join(names)
        if verb == "show":
            # As systemd 247 does: no --timestamp=unix, and timestamps in the zone of TZ.
            if "--timestamp=unix" in argv:
                return 1, "", "Invalid value: unix"
            if (kwargs.get("environ_update") or {}).get("TZ") != "UTC":
                return 1, "", "the fake prints only UTC timestamps: run systemctl show with TZ=UTC"
            blocks = []
            for name in names:
                state = self.units.get(name) or {"LoadState": "not-found", "ActiveState": "inactive",
                                                 "UnitFileState": "", "NeedDaemonReload": "no",
                                                 "ActiveEnterTimestamp": ""}
                state = dict(state, ActiveEnterTimestamp=_utc_text(state["ActiveEnterTimestamp"]))
                blocks.append("".join("%s=%s\n" % (key, state[key]) for key in unit_state.SHOW_PROPERTIES))
            return 0, "\n".join(blocks), ""
        if verb == "daemon-reload":
            for state in self.units.values():
                state["NeedDaemonReload"] = "no"
            return 0, "", ""
        state = self.units[names[0]]
        if verb in ("enable", "disable"):
            state["UnitFileState"] = verb + "d"
        elif verb in ("start", "restart"):
            state["ActiveState"], state["ActiveEnterTimestamp"] = "active", "@%d" % (STARTED + 10_000)
        elif verb == "stop":
            state["ActiveState"], state["ActiveEnterTimestamp"] = "inactive", ""
        return 0, "", ""

    def verbs(self):
        """The calls after the one show, as "verb unit" strings."""
        return [" ".join(call[1:2] + call[3:]) for call in self.calls if call[1] != "show"]


def _utc_text(stamp):
    """The fake's "@SECONDS" as systemctl show prints it with TZ=UTC."""
    if not stamp:
        return ""
    moment = datetime.datetime.fromtimestamp(int(stamp[1:]), tz=datetime.timezone.utc)
    return moment.strftime("%a %Y-%m-%d %H:%M:%S UTC")


@pytest.fixture
def systemd(monkeypatch):
    fake = FakeSystemd()

    def run_command(module, argv, *args, **kwargs):
        return fake(module, argv, **kwargs)

    monkeypatch.setattr(commands, "run_to_the_end", run_command)
    return fake


def _run(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            host_units.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def _want(name, **extra):
    return dict({"name": name, "enabled": True, "state": "started"}, **extra)


# ---------------------------------------------------------------- the pure core

def test_show_argv_asks_every_unit_once_after_end_of_options():
    assert unit_state.show_argv(["a.service", "b.service"]) == [
        "systemctl", "show", "-p",
        "LoadState,ActiveState,UnitFileState,NeedDaemonReload,ActiveEnterTimestamp",
        "--", "a.service", "b.service"]
    # its timestamps in UTC (systemd 247 refuses --timestamp=unix)
    assert unit_state.SHOW_ENVIRON == {"TZ": "UTC", "LC_ALL": "C"}


def test_show_blocks_are_split_per_unit_in_order():
    text = "LoadState=loaded\nActiveState=active\nId=a\n\nLoadState=not-found\nActiveState=inactive\n"
    assert unit_state.parse_show_blocks(text, 2) == [{"LoadState": "loaded", "ActiveState": "active"},
                                                     {"LoadState": "not-found", "ActiveState": "inactive"}]


def test_show_with_a_block_missing_is_refused():
    with pytest.raises(GpuhostError) as err:
        unit_state.parse_show_blocks("LoadState=loaded\n", 2)
    assert err.value.field == "units"


def test_plan_of_a_unit_as_wanted_is_empty():
    plans, steps = units.plan_units([_want("a.service")], [FakeSystemd.unit()], [{"/etc/a": STARTED}])
    assert steps == [] and plans["a.service"]["actions"] == []


def test_plan_restarts_on_a_newer_input_and_reloads_once_for_two_units():
    wanted = [_want("a.service"), _want("b.service", enabled=None, state=None)]
    plans, steps = units.plan_units(
        wanted, [FakeSystemd.unit(reload="yes"), FakeSystemd.unit(reload="yes")],
        [{"/etc/a": STARTED + 1}, {}])
    assert steps == [("daemon-reload", None), ("restart", "a.service"), ("restart", "b.service")]
    assert plans["a.service"]["reasons"] == ["systemd has not loaded the unit file on disk",
                                             "changed since the unit started: /etc/a"]
    assert "restart: its unit file changed" in plans["b.service"]["reasons"]


def test_plan_without_restart_on_change_only_reports():
    plans, steps = units.plan_units([_want("a.service", restart_on_change=False)],
                                    [FakeSystemd.unit()], [{"/etc/a": STARTED + 1}])
    assert steps == [] and plans["a.service"]["reasons"] == ["changed since the unit started: /etc/a"]


def test_plan_of_an_unknown_unit_reloads_enables_and_starts():
    plans, steps = units.plan_units([_want("new.service")], [{"LoadState": "not-found"}], [{}])
    assert steps == [("daemon-reload", None), ("enable", "new.service"), ("start", "new.service")]


def test_plan_disables_and_stops():
    dummy, steps = units.plan_units([_want("a.service", enabled=False, state="stopped")],
                                    [FakeSystemd.unit()], [{"/etc/a": STARTED + 5}])
    assert steps == [("disable", "a.service"), ("stop", "a.service")]


def test_static_unit_is_not_enabled():
    dummy, steps = units.plan_units([_want("a.service")], [FakeSystemd.unit(enabled="static")], [{}])
    assert steps == []


def test_masked_unit_is_refused_naming_its_index():
    with pytest.raises(GpuhostError) as err:
        units.plan_units([_want("a.service"), _want("b.service")],
                         [FakeSystemd.unit(), FakeSystemd.unit(enabled="masked", active=False)], [{}, {}])
    assert err.value.field == "units[1].name" and "unmask" in err.value.fix


def test_diff_lines_before_and_after():
    wanted = [_want("a.service")]
    plans, dummy = units.plan_units(wanted, [FakeSystemd.unit(active=False, enabled="disabled")], [{}])
    assert units.state_lines(wanted, plans) == "a.service: disabled, inactive\n"
    assert units.state_lines(wanted, plans, after=True) == "a.service: enabled, active\n"


# ---------------------------------------------------------------- the module, systemctl faked

def test_fake_systemctl_nothing_to_do_is_unchanged_after_one_show(tmp_path, capsys, systemd):
    conf = _write(str(tmp_path / "etc/numa.conf"), STARTED - 100)
    systemd.units["gpuhost-numa.service"] = FakeSystemd.unit()
    code, result = _run(capsys, units=[_want("gpuhost-numa.service", inputs=[conf])])
    assert code == 0 and result["changed"] is False
    assert result["steps"] == [] and result["restarted"] == []
    assert len(systemd.calls) == 1 and systemd.calls[0][1] == "show"


def test_fake_systemctl_restarts_on_newer_input_then_a_rerun_is_idempotent(tmp_path, capsys, systemd):
    conf = _write(str(tmp_path / "etc/numa.conf"), STARTED + 1)
    systemd.units["gpuhost-numa.service"] = FakeSystemd.unit()
    wanted = [_want("gpuhost-numa.service", inputs=[conf])]
    code, result = _run(capsys, units=wanted)
    assert code == 0 and result["changed"] is True
    assert result["restarted"] == ["gpuhost-numa.service"]
    assert systemd.verbs() == ["restart gpuhost-numa.service"]
    code, result = _run(capsys, units=wanted)
    assert code == 0 and result["changed"] is False and result["steps"] == []


def test_fake_systemctl_daemon_reload_runs_once_before_the_unit_steps(tmp_path, capsys, systemd):
    systemd.units["a.service"] = FakeSystemd.unit(reload="yes")
    systemd.units["b.service"] = FakeSystemd.unit(reload="yes", active=False, enabled="disabled")
    code, result = _run(capsys, units=[_want("a.service"), _want("b.service")])
    assert code == 0 and result["changed"] is True
    assert systemd.verbs() == ["daemon-reload", "restart a.service", "enable b.service", "start b.service"]
    assert result["steps"] == ["systemctl daemon-reload", "systemctl restart -- a.service",
                               "systemctl enable -- b.service", "systemctl start -- b.service"]


def test_fake_systemctl_check_mode_reports_steps_and_diff_and_runs_only_show(tmp_path, capsys, systemd):
    profile = _write(str(tmp_path / "etc/tuned/active_profile"), STARTED + 3)
    systemd.units["tuned.service"] = FakeSystemd.unit()
    code, result = _run(capsys, _ansible_check_mode=True, _ansible_diff=True,
                        units=[_want("tuned.service", inputs=[profile]), _want("new.service")])
    assert code == 0 and result["changed"] is True
    assert result["steps"] == ["systemctl daemon-reload", "systemctl restart -- tuned.service",
                               "systemctl enable -- new.service", "systemctl start -- new.service"]
    assert result["restarted"] == ["tuned.service"]
    assert result["diff"] == {"before": "tuned.service: enabled, active\nnew.service: unknown, inactive\n",
                              "after": "tuned.service: enabled, active (restarted)\nnew.service: enabled, active\n"}
    assert systemd.verbs() == []


def test_fake_systemctl_failure_undoes_enable_and_start_but_not_the_restart(capsys, systemd):
    systemd.units["a.service"] = FakeSystemd.unit(active=False, enabled="disabled")
    systemd.units["b.service"] = FakeSystemd.unit(reload="yes")
    systemd.units["c.service"] = FakeSystemd.unit(active=False)
    systemd.fail.add("start c.service")
    code, result = _run(capsys, units=[_want("a.service"), _want("b.service"), _want("c.service")])
    assert code == 1 and result["failed"] is True and result["field"] == "units"
    assert systemd.verbs() == ["daemon-reload", "enable a.service", "start a.service", "restart b.service",
                               "start c.service", "stop a.service", "disable a.service"]
    details = result["details"]
    assert details["failed_step"] == "systemctl start -- c.service"
    assert details["undone"] == ["systemctl start -- a.service", "systemctl enable -- a.service"]
    assert details["not_undone"] == ["systemctl restart -- b.service", "systemctl daemon-reload"]
    assert details["rollback_failed"] is True and result["changed"] is True
    assert "not undone" in result["msg"] and "Fix:" in result["msg"]
    assert systemd.units["a.service"]["UnitFileState"] == "disabled"
    assert systemd.units["a.service"]["ActiveState"] == "inactive"


def test_fake_systemctl_failure_fully_undone_reports_unchanged(capsys, systemd):
    systemd.units["a.service"] = FakeSystemd.unit(active=False, enabled="disabled")
    systemd.fail.add("start a.service")
    code, result = _run(capsys, units=[_want("a.service")])
    assert code == 1 and result["changed"] is False
    assert result["details"]["undone"] == ["systemctl enable -- a.service"]
    assert result["details"]["not_undone"] == [] and result["details"]["rollback_failed"] is False


def test_fake_systemctl_failed_show_fails_naming_the_command(capsys, systemd):
    systemd.fail.add("show a.service")
    code, result = _run(capsys, units=[_want("a.service")])
    assert code == 1 and "systemctl show" in result["msg"] and result["steps"] == []


@pytest.mark.parametrize("name", ["--root=/tmp", "-a.service", "a.service;reboot", "a b.service",
                                  "*.service", "a.service\n", "tuned", "../x.service", "", "a.servicex"])
def test_fake_systemctl_hostile_unit_name_is_refused_before_any_command(capsys, systemd, name):
    code, result = _run(capsys, units=[_want("good.service"), _want(name)])
    assert code == 1 and result["field"] == "units[1].name"
    assert systemd.calls == []


@pytest.mark.parametrize("path", ["etc/relative.conf", "/etc/a\nb", "/etc/\x1b[0m", "  "])
def test_fake_systemctl_hostile_input_path_is_refused_before_any_command(capsys, systemd, path):
    code, result = _run(capsys, units=[_want("a.service", inputs=["/etc/ok", path])])
    assert code == 1 and result["field"] == "units[0].inputs[1]"
    assert systemd.calls == []


def test_fake_systemctl_input_path_with_dotdot_is_normalised(tmp_path, capsys, systemd):
    conf = _write(str(tmp_path / "etc/x.conf"), STARTED + 1)
    systemd.units["a.service"] = FakeSystemd.unit()
    hostile = str(tmp_path / "etc/../etc/./x.conf")
    code, result = _run(capsys, units=[_want("a.service", inputs=[hostile])])
    assert code == 0 and result["units"]["a.service"]["reasons"] == ["changed since the unit started: %s" % conf]


def test_fake_systemctl_unit_listed_twice_is_refused(capsys, systemd):
    code, result = _run(capsys, units=[_want("a.service"), _want("a.service")])
    assert code == 1 and result["field"] == "units[1].name" and systemd.calls == []


def test_fake_systemctl_recorded_tree_runs_no_command_and_lists_what_it_leaves(tmp_path, capsys, systemd):
    """Below a tree root (a recorded tree, an image being built) there is no running
    systemd: nothing is asked or changed, and each unit says what the live host would
    get. The options are still checked: a hostile name is refused there too."""
    code, result = _run(capsys, root=str(tmp_path), units=[
        _want("a.service", inputs=["/etc/a.conf"]), {"name": "b.service", "enabled": False}])
    assert code == 0 and result["changed"] is False and systemd.calls == []
    assert result["steps"] == []
    assert result["skipped_actions"] == [
        "a.service: enabled, started, restarted if running before its inputs changed (root is not /)",
        "b.service: disabled (root is not /)"]
    code, result = _run(capsys, root=str(tmp_path), units=[_want("a.service;reboot")])
    assert code == 1 and result["field"] == "units[0].name" and systemd.calls == []


def test_fake_systemctl_names_come_after_end_of_options(capsys, systemd):
    systemd.units["a.service"] = FakeSystemd.unit(active=False, enabled="disabled")
    _run(capsys, units=[_want("a.service")])
    for call in systemd.calls:
        assert call[call.index("--") + 1:] == ["a.service"]


def test_fake_systemctl_unit_without_undo_keeps_its_enable_after_a_failed_start(capsys, systemd):
    systemd.units["gpuhost-numa.service"] = FakeSystemd.unit(active=False, enabled="disabled")
    systemd.fail.add("start gpuhost-numa.service")
    code, result = _run(capsys, units=[_want("gpuhost-numa.service", undo=False)])
    assert code == 1 and result["changed"] is True
    assert result["details"]["undone"] == []
    assert result["details"]["not_undone"] == ["systemctl enable -- gpuhost-numa.service"]
    assert systemd.units["gpuhost-numa.service"]["UnitFileState"] == "enabled"


def test_fake_systemctl_check_mode_restarts_for_a_changed_path_whatever_its_mtime(tmp_path, capsys, systemd):
    conf = _write(str(tmp_path / "etc/numa.conf"), STARTED - 100)
    systemd.units["gpuhost-numa.service"] = FakeSystemd.unit()
    wanted = [_want("gpuhost-numa.service", inputs=[conf])]
    code, result = _run(capsys, _ansible_check_mode=True, units=wanted, changed_paths=[conf])
    assert code == 0 and result["changed"] is True and result["restarted"] == ["gpuhost-numa.service"]
    code, result = _run(capsys, units=wanted, changed_paths=[str(tmp_path / "etc/other.conf")])
    assert code == 0 and result["changed"] is False and systemd.verbs() == []


def test_fake_systemctl_hostile_changed_path_is_refused(capsys, systemd):
    code, result = _run(capsys, units=[_want("a.service")], changed_paths=["relative/x"])
    assert code == 1 and result["field"] == "changed_paths[0]" and systemd.calls == []


# ---------------------------------------------------------------- host slimming


def test_slimming_with_fake_systemctl_disables_stops_and_reports_each_unit(systemd, capsys):
    systemd.units.update({"tuned.service": FakeSystemd.unit(),
                          "cups.service": FakeSystemd.unit(),
                          "bluetooth.service": FakeSystemd.unit(active=False, enabled="disabled")})
    code, result = _run(capsys, units=[_want("tuned.service")],
                        disable=["cups", "bluetooth.service", "ModemManager.service"])
    assert code == 0 and result["changed"]
    # No daemon-reload for the unit that is not installed; the others in the given order.
    assert systemd.verbs() == ["disable cups.service", "stop cups.service"]
    assert result["slimmed"] == {"disabled": ["cups.service"], "stopped": ["cups.service"],
                                 "already": ["bluetooth.service"], "absent": ["ModemManager.service"]}
    again_code, again = _run(capsys, units=[_want("tuned.service")], disable=["cups.service"])
    assert again_code == 0 and not again["changed"] and again["slimmed"]["already"] == ["cups.service"]


def test_slimming_check_mode_with_fake_systemctl_reports_and_runs_only_show(systemd, capsys):
    systemd.units.update({"tuned.service": FakeSystemd.unit(), "cups.service": FakeSystemd.unit()})
    code, result = _run(capsys, units=[_want("tuned.service")], disable=["cups.service"],
                        _ansible_check_mode=True, _ansible_diff=True)
    assert code == 0 and result["changed"]
    assert systemd.verbs() == []
    assert result["slimmed"]["disabled"] == ["cups.service"]
    assert "cups.service: enabled, active" in result["diff"]["before"]
    assert "cups.service: disabled, inactive" in result["diff"]["after"]


@pytest.mark.parametrize("name, reason", [
    ("sshd", "Ansible and the operators reach the host"),
    ("ssh.socket", "Debian's name"),
    ("NetworkManager.service", "network"),
    ("systemd-networkd", "network"),
    ("libvirtd.service", "tenants"),
    ("virtqemud.socket", "tenants"),
    ("tuned", "tuned profile"),
])
def test_slimming_refuses_a_service_the_host_needs_by_name(systemd, capsys, name, reason):
    code, result = _run(capsys, units=[_want("gpuhost-numa.service")], disable=[name])
    assert code == 1 and "needs" in result["msg"] and reason in result["msg"]
    assert result["field"] == "disable[0]"
    assert systemd.calls == []


def test_slimming_refuses_what_the_caller_needs_with_its_reason(systemd, capsys):
    code, result = _run(capsys, units=[_want("tuned.service")], disable=["irqbalance"],
                        needed={"irqbalance": "the sriov_irq role bans the tenant CPUs through it"})
    assert code == 1 and "bans the tenant CPUs" in result["msg"]


@pytest.mark.parametrize("name", ["--now", "a b.service", "cups.service\nsshd.service", ""])
def test_slimming_refuses_what_is_not_a_unit_name(systemd, capsys, name):
    code, result = _run(capsys, units=[_want("tuned.service")], disable=[name])
    assert code == 1 and "not a systemd unit name" in result["msg"]
    assert systemd.calls == []


def test_slimming_refuses_a_unit_also_in_units(systemd, capsys):
    code, result = _run(capsys, units=[_want("cups.service")], disable=["cups"])
    assert code == 1 and result["field"] == "disable"
