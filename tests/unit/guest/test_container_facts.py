# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container_facts module end to end. Docker has no engine on this machine, so the
runtime is a fake: a real executable script that checks its arguments (the options, then
"--", then the names) and answers as docker does; the module runs it through run_command
like the real one, and reads /proc/<pid>/status below a tree root. The real docker run is
the lab's tenant guest scenario (tests/lab/test_tenant_guest_on_lab.py)."""

from __future__ import annotations

import json
import stat

import pytest
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.guest import container as core
from ansible_collections.gpuhost.kvm.plugins.modules import container_facts as module

PID = 4242
# numactl --show inside a container whose cpuset is CPUs 0-3 and memory node 0 (numactl
# 2.0.16's layout: the CPU and node lists as space-separated numbers, a trailing space).
NUMACTL_SHOW = ("policy: default\npreferred node: current\nphyscpubind: 0 1 2 3 \ncpubind: 0 \n"
                "nodebind: 0 \nmembind: 0 \n")
STATUS = "Name:\ttritonserver\nState:\tS (sleeping)\nCpus_allowed:\tf\nCpus_allowed_list:\t%s\nMems_allowed_list:\t%s\n"


def fake_runtime(tmp_path, pids=("%d" % PID,), image_id="sha256:4f1c", numactl=NUMACTL_SHOW):
    """A docker stand-in. ``pids``: its successive answers to the PID inspect (the last one
    repeats), "0" for a container that does not run yet, None for no such container."""
    answers = tmp_path / "answers"
    answers.mkdir()
    for number, pid in enumerate(pids):
        (answers / ("pid.%d" % number)).write_text("" if pid is None else pid + "\n")
    (answers / "numactl").write_text(numactl or "")
    (answers / "count").write_text("0")
    script = tmp_path / "docker"
    script.write_text("""#!/bin/sh
answers=%(answers)s
echo "$*" >> $answers/calls
case "$*" in
  "image inspect --format {{.Id}} -- "*)
    [ -n "%(image_id)s" ] && { echo "%(image_id)s"; exit 0; }
    echo "Error: No such image: $6" >&2; exit 1 ;;
  "inspect --format {{.State.Pid}} -- "*)
    n=$(cat $answers/count); echo $((n + 1)) > $answers/count
    [ -f $answers/pid.$n ] || n=%(last)d
    [ -s $answers/pid.$n ] || { echo "Error: No such object: $5" >&2; exit 1; }
    cat $answers/pid.$n; exit 0 ;;
  "exec -- "*" numactl --show")
    [ -s $answers/numactl ] || { echo 'OCI runtime exec failed: exec: "numactl": executable file not found in $PATH' >&2; exit 126; }
    cat $answers/numactl; exit 0 ;;
esac
echo "bad args: $*" >&2; exit 2
""" % {"answers": answers, "image_id": image_id or "", "last": len(pids) - 1})
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def process_tree(tmp_path, cpus="0-3", mems="0"):
    root = tmp_path / "root"
    (root / "proc" / str(PID)).mkdir(parents=True)
    (root / "proc" / str(PID) / "status").write_text(STATUS % (cpus, mems))
    return str(root)


def run(capsys, monkeypatch=None, **args):
    if monkeypatch is not None:   # no real 3 s waits between the polls
        monkeypatch.setattr(module, "POLL_S", 0.01)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            module.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_fake_runtime_server_bound_to_its_cell_passes(tmp_path, capsys):
    code, result = run(capsys, runtime=fake_runtime(tmp_path), root=process_tree(tmp_path),
                       container="gpuhost-triton", cpus="0,1,2,3", node=0, unit="gpuhost-triton.service")
    assert code == 0 and result["passed"] is True and result["findings"] == [] and not result["changed"]
    seen = result["container"]
    assert seen["pid"] == PID and seen["cpus_allowed"] == "0-3" and seen["mems_allowed"] == "0"
    assert seen["numactl"] == {"ran": True, "membind": "0", "physcpubind": "0-3", "error": None}
    assert "gpuhost-triton is bound to CPUs 0,1,2,3 and node 0" in result["msg"]
    calls = (tmp_path / "answers" / "calls").read_text().splitlines()
    assert calls == ["inspect --format {{.State.Pid}} -- gpuhost-triton",
                     "exec -- gpuhost-triton numactl --show"]


def test_fake_runtime_server_taking_memory_from_both_nodes_fails_naming_it(tmp_path, capsys):
    code, result = run(capsys, runtime=fake_runtime(tmp_path), root=process_tree(tmp_path, mems="0-1"),
                       container="gpuhost-triton", cpus="0-3", node=0, unit="gpuhost-triton.service")
    assert code == 1 and result["passed"] is False
    assert result["findings"] == ["the server may take memory from nodes 0-1, not only from node 0"]
    assert result["msg"].endswith("Fix: check the --cpuset-cpus/--cpuset-mems of gpuhost-triton.service")


def test_fake_runtime_numactl_disagreeing_fails_and_missing_numactl_is_reported(tmp_path, capsys):
    runtime = fake_runtime(tmp_path, numactl=NUMACTL_SHOW.replace("membind: 0 ", "membind: 0 1 "))
    code, result = run(capsys, runtime=runtime, root=process_tree(tmp_path), container="gpuhost-triton",
                       cpus="0-3", node=0)
    assert code == 1 and result["findings"] == ["numactl --show in the container says membind 0-1, not 0"]
    other = tmp_path / "other"
    other.mkdir()
    code, result = run(capsys, runtime=fake_runtime(other, numactl=None), root=process_tree(other),
                       container="gpuhost-triton", cpus="0-3", node=0)
    assert code == 0 and result["passed"] is True
    assert result["container"]["numactl"]["ran"] is False
    assert "executable file not found" in result["container"]["numactl"]["error"]
    assert "numactl --show in its container: not run" in result["msg"]


def test_fake_runtime_waits_for_the_container_to_run(tmp_path, capsys, monkeypatch):
    runtime = fake_runtime(tmp_path, pids=(None, "0", "%d" % PID))
    code, result = run(capsys, monkeypatch, runtime=runtime, root=process_tree(tmp_path),
                       container="gpuhost-triton", wait_s=30, cpus="0-3", node=0)
    assert code == 0 and result["passed"] is True
    assert (tmp_path / "answers" / "count").read_text().strip() == "3"


def test_fake_runtime_container_that_never_runs_fails_with_the_units_journal(tmp_path, capsys, monkeypatch):
    runtime = fake_runtime(tmp_path, pids=("0",))
    code, result = run(capsys, monkeypatch, runtime=runtime, root=process_tree(tmp_path),
                       container="gpuhost-triton", wait_s=0.05, cpus="0-3", node=0, unit="gpuhost-triton.service")
    assert code == 1 and result["passed"] is False and result["container"]["running"] is False
    assert result["findings"][0].startswith("the container gpuhost-triton was not running after")
    assert "Fix: see journalctl -u gpuhost-triton.service" in result["msg"]
    # Without a verdict asked for, a container that does not run is a fact, not a failure.
    code, result = run(capsys, runtime=runtime, root=process_tree(tmp_path / "again"), container="gpuhost-triton")
    assert code == 0 and result["passed"] is None and result["container"]["running"] is False


def test_fake_runtime_image_present_absent_and_required(tmp_path, capsys):
    image = "nvcr.io/nvidia/tritonserver:24.07-py3"
    code, result = run(capsys, runtime=fake_runtime(tmp_path), image=image)
    assert code == 0 and result["image"] == {"name": image, "present": True, "id": "sha256:4f1c", "error": None}
    absent = tmp_path / "absent"
    absent.mkdir()
    runtime = fake_runtime(absent, image_id=None)
    code, result = run(capsys, runtime=runtime, image=image)
    assert code == 0 and result["image"]["present"] is False and "No such image" in result["image"]["error"]
    code, result = run(capsys, runtime=runtime, image=image, image_must_exist=True)
    assert code == 1 and result["field"] == "image" and "Fix: load it (docker load" in result["msg"]


@pytest.mark.parametrize("args, field", [
    ({"container": "-v"}, "container"),
    ({"container": "a b"}, "container"),
    ({"image": "--output=/etc/passwd"}, "image"),
    ({"container": "c", "cpus": "0-3"}, "node"),
    ({"container": "c", "node": 0}, "cpus"),
    ({"cpus": "0-3", "node": 0}, "container"),
    ({"container": "c", "cpus": "3-0", "node": 0}, "cpus"),
    ({"container": "c", "cpus": "0-99999", "node": 0}, "cpus"),
    ({"container": "c", "cpus": "0", "node": -1}, "node"),
    ({"container": "c", "wait_s": float("inf")}, "wait_s"),
    ({"container": "c", "wait_s": 86400}, "wait_s"),
    ({"container": "c", "unit": "x;reboot"}, "unit"),
    ({}, "container"),
])
def test_hostile_options_are_refused_before_the_runtime_runs(tmp_path, capsys, args, field):
    runtime = fake_runtime(tmp_path)
    code, result = run(capsys, runtime=runtime, **args)
    assert code == 1 and result["field"] == field, result
    assert not (tmp_path / "answers" / "calls").exists()


def test_missing_runtime_says_what_to_install(capsys):
    code, result = run(capsys, runtime="no-such-runtime-here", container="c")
    assert code == 1 and result["field"] == "runtime" and "install the container runtime" in result["msg"]


def test_numactl_show_and_status_parsers():
    assert core.parse_numactl_show(NUMACTL_SHOW) == {"membind": "0", "physcpubind": "0-3"}
    assert core.parse_numactl_show("") == {"membind": None, "physcpubind": None}
    assert core.parse_pid("0\n") is None and core.parse_pid("x") is None and core.parse_pid(" 17 ") == 17
    assert core.binding_findings({"cpus_allowed": "0-3", "mems_allowed": "0", "numactl": {"ran": False}},
                                 "0-3", 0) == []
