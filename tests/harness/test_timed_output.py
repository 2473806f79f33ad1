# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/timed_output.py: the lab tests' and bench_site.py's timed runner, on real
subprocesses printing playbook-shaped output."""

import sys

from timed_output import format_slowest, run_timed, slowest_tasks

PLAYBOOK_LIKE = r"""
import sys, time
def say(line):
    print(line, flush=True)
say("PLAY [hk-gpu-01] ***")
say("TASK [gpuhost.kvm.iommu : Rebuild the initramfs] ***")
time.sleep(float(sys.argv[1]))
say("changed: [hk-gpu-01]")
say("TASK [gpuhost.kvm.vfio : Read the groups] ***")
say("ok: [hk-gpu-01]")
say("RUNNING HANDLER [gpuhost.kvm.numa : Reload tuned] ***")
time.sleep(float(sys.argv[2]))
say("PLAY RECAP ***")
say("hk-gpu-01 : ok=3 changed=1")
"""


def test_run_timed_logs_as_it_comes_and_times_each_task(tmp_path):
    log = tmp_path / "run.log"
    run = run_timed([sys.executable, "-c", PLAYBOOK_LIKE, "0.6", "0.3"], log_path=str(log), timeout=60)
    assert run.returncode == 0 and not run.timed_out
    assert log.read_text() == run.output
    assert run.output.endswith("hk-gpu-01 : ok=3 changed=1\n")
    spans = slowest_tasks(run.lines)
    # Slowest first; the span ends at the next header, and the recap ends the handler's.
    assert [span["task"] for span in spans] == ["gpuhost.kvm.iommu : Rebuild the initramfs",
                                                "gpuhost.kvm.numa : Reload tuned",
                                                "gpuhost.kvm.vfio : Read the groups"]
    assert spans[0]["seconds"] >= 0.6 and spans[1]["seconds"] >= 0.3
    assert "gpuhost.kvm.iommu : Rebuild the initramfs\n" in format_slowest(spans).splitlines(True)[0]


def test_run_timed_kills_at_the_timeout_and_keeps_the_output_so_far(tmp_path):
    log = tmp_path / "run.log"
    run = run_timed([sys.executable, "-c", PLAYBOOK_LIKE, "120", "0"], log_path=str(log), timeout=2)
    assert run.timed_out and run.returncode != 0
    assert run.output.splitlines()[-1] == "TASK [gpuhost.kvm.iommu : Rebuild the initramfs] ***"
    assert log.read_text() == run.output
    assert run.wall_s < 60


def test_slowest_tasks_ends_a_span_at_a_molecule_step_and_keeps_only_the_count():
    lines = [(0.0, "TASK [converge : a] ***\n"), (5.0, "TASK [converge : b] ***\n"),
             (6.0, "INFO     [default > converge] Executed: Successful\n"),
             (100.0, "TASK [verify : c] ***\n"), (101.5, "PLAY RECAP ***\n")]
    assert slowest_tasks(lines, count=2) == [{"task": "converge : a", "seconds": 5.0},
                                             {"task": "verify : c", "seconds": 1.5}]
