# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a playbook or molecule command with its output timed line by line.

The default callback prints no times, and a lab run's minutes go to a handful of tasks
(a reboot, an initramfs rebuild, an apt update under TCG). Reading the output as it comes
times each task from its header to the next one. Used by the lab tests (each molecule
step keeps its log and its slowest tasks beside the console log) and by
bench/bench_site.py."""

import subprocess
import threading
import time

TASK_HEADERS = ("TASK [", "RUNNING HANDLER [")
SPAN_ENDS = TASK_HEADERS + ("PLAY [", "PLAY RECAP", "INFO ")


class TimedRun:
    """The outcome of ``run_timed``: ``lines`` holds (seconds since the start, line)."""

    def __init__(self, returncode, lines, wall_s, timed_out):
        self.returncode = returncode
        self.lines = lines
        self.wall_s = wall_s
        self.timed_out = timed_out

    @property
    def output(self):
        return "".join(line for dummy, line in self.lines)


def run_timed(argv, log_path=None, timeout=3600, **popen_kwargs):
    """Run ``argv`` with stdout and stderr as one stream, written to ``log_path`` as it
    comes (a step in progress can be followed, and a killed run leaves its output). Past
    ``timeout`` seconds the command is killed and ``timed_out`` is set: the caller
    decides how to fail, with the output so far."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, **popen_kwargs)
    killed = threading.Event()

    def kill():
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.daemon = True
    timer.start()
    lines = []
    log = open(log_path, "w", encoding="utf-8") if log_path else None
    try:
        for line in proc.stdout:
            lines.append((time.monotonic() - start, line))
            if log:
                log.write(line)
                log.flush()
        returncode = proc.wait()
    finally:
        timer.cancel()
        if log:
            log.close()
        if proc.poll() is None:     # an exception (tools/test's deadline): no orphan run
            proc.kill()
            proc.wait()
    return TimedRun(returncode, lines, round(time.monotonic() - start, 1), killed.is_set())


def slowest_tasks(lines, count=15):
    """The ``count`` tasks that took longest: from each task or handler header to the next
    header (task, handler, play, recap, or a molecule step's INFO line)."""
    spans = []
    current = None
    for at, line in lines:
        if line.startswith(SPAN_ENDS):
            if current is not None:
                spans.append({"task": current[1], "seconds": round(at - current[0], 1)})
            current = (at, line.split("[", 1)[1].rsplit("]", 1)[0]) if line.startswith(TASK_HEADERS) else None
    return sorted(spans, key=lambda span: -span["seconds"])[:count]


def format_slowest(spans):
    return "".join("%7.1f s  %s\n" % (span["seconds"], span["task"]) for span in spans)
