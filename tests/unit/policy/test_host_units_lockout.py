# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host_units and the services nobody reaches the host without: a unit entry, host
slimming and a restart on changed inputs are refused alike for SSH and the network,
and for libvirt while tenants run, before any systemctl call, unless
allow_host_critical says so. systemctl is a recording stand-in (the test machine's
systemd is not the host's)."""

import os

import pytest
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy import host_safety
from ansible_collections.gpuhost.kvm.plugins.modules import host_units


def _run(root, calls, **args):
    args = dict(args, root=root, _ansible_check_mode=False, _ansible_diff=False)
    with patch_module_args(args):
        module = host_units.build_module()

    def run_command(argv, **_kwargs):
        calls.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            count = sum(1 for a in argv if a.endswith((".service", ".socket")))
            return 0, "\n\n".join(["LoadState=loaded\nActiveState=active\nUnitFileState=enabled\n"
                                   "ActiveEnterTimestamp=@1700000000"] * count), ""
        return 0, "", ""
    module.run_command = run_command
    worker = host_units.HostUnits(module)
    worker.run()
    return worker.result


@pytest.mark.parametrize("unit, entry, verbs", [
    ("sshd.service", {"state": "stopped"}, "stop"),
    ("ssh.service", {"enabled": False}, "disable"),
    ("ssh.socket", {"enabled": False, "state": "stopped"}, "disable and stop"),
    ("networking.service", {"state": "stopped"}, "stop"),
    ("NetworkManager.service", {"enabled": False}, "disable"),
    ("systemd-networkd.service", {"state": "stopped"}, "stop"),
])
@pytest.mark.parametrize("root_is_live", [True, False])
def test_a_unit_entry_that_takes_ssh_or_the_network_away_is_refused(
        tmp_path, unit, entry, verbs, root_is_live):
    calls = []
    root = "/" if root_is_live else str(tmp_path)
    with pytest.raises(GpuhostError) as info:
        _run(root, calls, units=[dict(entry, name=unit)])
    err = info.value
    assert err.field == "units[0]" and "refusing to %s %s" % (verbs, unit) in err.message
    assert "allow_host_critical: true" in err.fix
    assert calls == []


def test_slimming_refuses_debians_networking_with_the_reason():
    with pytest.raises(GpuhostError) as info:
        host_safety.check_slim_services(["networking"], option="disable")
    assert "ifupdown" in info.value.message and info.value.field == "disable[0]"


def test_libvirt_is_not_stopped_while_tenants_run(tmp_path):
    run = tmp_path / "run" / "libvirt" / "qemu"
    run.mkdir(parents=True)
    (run / "tenant-a100.xml").write_text("<domstatus/>")
    calls = []
    with pytest.raises(GpuhostError) as info:
        _run(str(tmp_path), calls, units=[{"name": "libvirtd.service", "state": "stopped"}])
    assert "tenants run under it (tenant-a100)" in info.value.message and calls == []
    # without a running tenant it is the caller's business
    os.unlink(str(run / "tenant-a100.xml"))
    result = _run(str(tmp_path), calls, units=[{"name": "libvirtd.service", "state": "stopped"}])
    assert result["skipped_actions"] and calls == []


def test_a_restart_on_changed_inputs_of_sshd_is_refused_before_any_step():
    calls = []
    with pytest.raises(GpuhostError) as info:
        _run("/", calls, units=[{"name": "sshd.service", "inputs": ["/etc/ssh/sshd_config"]}],
             changed_paths=["/etc/ssh/sshd_config"])
    assert "refusing to restart sshd.service" in info.value.message
    assert [c[:2] for c in calls] == [["systemctl", "show"]]


def test_allow_host_critical_lets_the_operator_stop_sshd():
    calls = []
    result = _run("/", calls, units=[{"name": "sshd.service", "state": "stopped"}],
                  allow_host_critical=True)
    assert result["changed"] and len(result["steps"]) == 1 and "sshd.service" in result["steps"][0]
    assert [c for c in calls if c[:2] == ["systemctl", "stop"]], calls


def test_starting_and_enabling_sshd_is_fine():
    calls = []
    _run("/", calls, units=[{"name": "sshd.service", "state": "started", "enabled": True}])
