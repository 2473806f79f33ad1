# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's boot watchdog: resets a guest whose kernel stalls while booting, whoever
started the boot.

lab/up and lab/reboot watch the boots they start (lib.sh, lab_try_wait_boot_resetting),
but a reboot the guest starts itself, such as the iommu role's reboot task, was watched
by nobody: QEMU 7.2's TCG hung such a boot for good right after "sched_clock: Marking
stable", and Ansible's reboot task waited out its 30 minutes. lab/up starts this watchdog
next to QEMU; it exits with QEMU.

A boot is in progress when the console's last "Linux version" line comes after the last
sign that a boot finished: a login prompt, or systemd reaching multi-user.target (a boot
whose serial getty starts late or never prints no prompt, and a booted guest's console
stays quiet for hours, which must not read as a stall). When the console has not grown for ``--stall`` seconds during a boot, the
watchdog keeps the console as console-stall.log, sends ``system_reset`` to the QEMU
monitor and notes it in its log. It does the same when the kernel itself reports that the
boot will not finish (kernel_stall_report: a task hung twice, a CPU stuck for minutes,
RCU stalls for minutes),
which keeps the console busy. The default stall (300 s) is longer than lab_wait_boot's
(240 s), and a kernel report must stand for REPORT_GRACE seconds, so a boot lab/up or
lab/reboot is waiting on is reset by them, not twice.

    python3 lab/watchdog.py --console C --monitor SOCK --pid PID --log LOG [--stall S]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import sys
import time

BOOT_RE = re.compile(rb"Linux version \d")
# What a finished boot prints: the serial getty's prompt, or systemd's status line (or its
# kmsg twin) for multi-user.target, colour codes included. On 2026-12-02 a loaded host's
# reboot during the converge started getty@tty1 but no serial getty, so no prompt came;
# the watchdog took the quiet booted guest for a stalled boot and reset it mid-converge.
BOOT_DONE_RE = re.compile(rb"\S+ login: |Reached target \S*multi-user\.target")
TAIL_BYTES = 1 << 20


def boot_in_progress(console_tail):
    """The kernel started, and neither a login prompt nor multi-user.target followed yet."""
    boots = [m.start() for m in BOOT_RE.finditer(console_tail)]
    if not boots:
        return False
    done = [m.start() for m in BOOT_DONE_RE.finditer(console_tail)]
    return not done or done[-1] < boots[-1]


HUNG_TASK_RE = re.compile(rb"INFO: task (\S+) blocked for more than \d+ seconds")
SOFT_LOCKUP_RE = re.compile(rb"soft lockup - CPU#\d+ stuck for (\d+)s!")
RCU_STALL_RE = re.compile(rb"\[\s*(\d+)\.\d+\] rcu: INFO: rcu_\w+ (?:detected stalls|self-detected stall)")
# Healthy boots on a loaded build machine reported soft lockups of 21 to 53 s and went
# on; the boot that never came back (2026-11-30: every CPU's migration thread and
# cryptomgr_test on CPU 7, stop_machine waiting on a vCPU that made no progress) reported
# the same lockup every 26 s up to 782 s, which kept the console busy.
SOFT_LOCKUP_STALL_SECONDS = 180
# A CI reboot (2026-12-01, QEMU 10, the first boot with intel_iommu=on) kept a halted
# vCPU asleep for good: "rcu_preempt kthread timer wakeup didn't happen", "rcu_preempt
# detected stalls on CPUs/tasks" every 21 s from early boot to 559 s, so the console never
# went quiet. RCU stall reports that go on for this long (kernel time, first to last) mean
# grace periods no longer end; a starved vCPU in a healthy boot reports one and recovers.
RCU_STALL_SPAN_SECONDS = 180
REPORT_GRACE = 60


def kernel_stall_report(console_text):
    """Why the kernel's own reports in ``console_text`` say the boot will not finish, or
    None: a task reported hung twice (stuck in D state for about four minutes; the
    detector checks every 120 s), a CPU reported stuck for SOFT_LOCKUP_STALL_SECONDS
    or more, or RCU stall reports spanning RCU_STALL_SPAN_SECONDS of kernel time. A single
    hung-task report, a short soft lockup or one RCU stall is a starved TCG vCPU."""
    seen = set()
    first_rcu_stall = None
    for line in console_text.splitlines():
        rcu = RCU_STALL_RE.search(line)
        if rcu:
            at = int(rcu.group(1))
            first_rcu_stall = at if first_rcu_stall is None else first_rcu_stall
            if at - first_rcu_stall >= RCU_STALL_SPAN_SECONDS:
                return "the kernel reported RCU stalls for %d s: %s" % (
                    at - first_rcu_stall, _printable(line))
        hung = HUNG_TASK_RE.search(line)
        if hung:
            if hung.group(1) in seen:
                return "the kernel reported a hung task: %s" % _printable(line)
            seen.add(hung.group(1))
        lockup = SOFT_LOCKUP_RE.search(line)
        if lockup and int(lockup.group(1)) >= SOFT_LOCKUP_STALL_SECONDS:
            return "the kernel reported a CPU stuck for %s s: %s" % (
                lockup.group(1).decode(), _printable(line))
    return None


def _printable(line):
    return line.decode("utf-8", "replace").strip()


def read_tail(path, size=TAIL_BYTES):
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - size))
            return handle.read()
    except OSError:
        return b""


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def send_monitor(sock_path, command):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(sock_path)
        sock.sendall(command.encode() + b"\n")


def log(path, message):
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), message))


class Watchdog:
    """One console, one QEMU. ``step(now)`` is a single look; ``run()`` loops on it."""

    def __init__(self, console, monitor, pid, log_path, stall=300.0, max_resets=3,
                 send=send_monitor):
        self.console, self.monitor, self.pid = console, monitor, pid
        self.log_path, self.stall, self.max_resets = log_path, stall, max_resets
        self.send = send
        self.last_size = -1
        self.last_change = None
        self.resets = 0
        self.reset_size = 0
        self.report_seen = None

    def step(self, now):
        """Returns "reset" when it reset the guest, "idle" otherwise."""
        try:
            size = os.path.getsize(self.console)
        except OSError:
            size = 0
        if size != self.last_size or self.last_change is None:
            self.last_size, self.last_change = size, now
            reason = self._kernel_stall(size, now)
            return self._reset(now, reason) if reason else "idle"
        if now - self.last_change < self.stall or self.resets >= self.max_resets:
            return "idle"
        if not boot_in_progress(read_tail(self.console)):
            return "idle"
        return self._reset(now, "no console output for %ds after the kernel started" % self.stall)

    def _kernel_stall(self, size, now):
        """The kernel's own stall report in the boot in progress, printed since the last
        reset (the stalled boot's reports stay in the log until the new boot prints), once
        it has stood for REPORT_GRACE seconds: lab_wait_boot reads the same reports and
        resets the boots it waits on itself, which must not be reset twice."""
        reason = None
        tail = read_tail(self.console)
        if self.resets < self.max_resets and boot_in_progress(tail):
            boot_start = [m.start() for m in BOOT_RE.finditer(tail)][-1]
            since = max(boot_start, self.reset_size - (size - len(tail)))
            reason = kernel_stall_report(tail[since:])
        if reason is None:
            self.report_seen = None
            return None
        if self.report_seen is None:
            self.report_seen = now
        return reason if now - self.report_seen >= REPORT_GRACE else None

    def _reset(self, now, reason):
        stall_copy = os.path.join(os.path.dirname(self.console), "console-stall.log")
        shutil.copyfile(self.console, stall_copy)
        try:
            self.send(self.monitor, "system_reset")
        except OSError as error:
            log(self.log_path, "boot stalled (%s) but the monitor did not answer: %s"
                % (reason, error))
            self.last_change = now
            return "idle"
        self.resets += 1
        self.last_change = now
        self.reset_size = self.last_size
        self.report_seen = None
        log(self.log_path, "boot stalled: %s; console kept as %s; guest reset (%d of at most %d)"
            % (reason, stall_copy, self.resets, self.max_resets))
        return "reset"

    def run(self, interval=5.0):
        while alive(self.pid):
            self.step(time.monotonic())
            time.sleep(interval)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--console", required=True)
    parser.add_argument("--monitor", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--stall", type=float,
                        default=float(os.environ.get("GPUHOST_LAB_WATCHDOG_STALL", "300")))
    args = parser.parse_args(argv)
    Watchdog(args.console, args.monitor, args.pid, args.log, args.stall).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
