# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/watchdog.py, the boot watchdog that lab/up starts next to QEMU: a boot that stalls
(the kernel started, no login prompt or multi-user.target yet, no console output for the
stall time) is reset through the QEMU monitor, whoever started the boot; a guest that
booted and is quiet is left alone. The monitor is a real Unix socket here; QEMU itself is not run."""

import importlib.util
import os
import socket
import subprocess
import threading

import pytest

from support.helpers import REPO

_SPEC = importlib.util.spec_from_file_location("lab_watchdog", os.path.join(REPO, "lab", "watchdog.py"))
watchdog = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(watchdog)

FIRST_BOOT = (b"[    0.000000] Linux version 6.1.0-57-amd64 (debian-kernel@lists.debian.org)\n"
              b"[    7.1] sched_clock: Marking stable\n"
              b"Debian GNU/Linux 12 hk-gpu-01 ttyS0\n\nhk-gpu-01 login: [  163.1] bochs-drm\n")
# What the iommu role's reboot hung on: the second boot stopped here for good.
STALLED_REBOOT = (b"[    0.000000] Linux version 6.1.0-57-amd64 (debian-kernel@lists.debian.org)\n"
                  b"[    9.503727] sched_clock: Marking stable (9440691575, 62607740)\n")
# The first boot that never came back (2026-11-30, lab/up with the machine loaded): every
# CPU reported stuck, CPU 7 in cryptomgr_test, every 26 s, up to 782 s; the console never
# went quiet, so only lab/up's timeout ended the wait.
STUCK_CPU_BOOT = (b"[    0.000000] Linux version 6.1.0-57-amd64 (debian-kernel@lists.debian.org)\n"
                  + b"".join(b"[  %d.953941] watchdog: BUG: soft lockup - CPU#7 stuck for %ds! "
                             b"[cryptomgr_test:96]\r\n[  %d.953941] RIP: 0010:alg_test+0x4f/0x540\r\n"
                             % (s + 2, s, s + 2) for s in (26, 53, 79, 105, 131, 157, 183)))
# The same boot up to the 157 s report: still within what a starved vCPU reports.
STUCK_CPU_BOOT_157S = STUCK_CPU_BOOT[:STUCK_CPU_BOOT.index(b"[  185.")]


# The CI reboot of 2026-12-01 (QEMU 10, first boot with intel_iommu=on): a halted vCPU's
# timer never fired, and the kernel reported RCU stalls every 21 s or so up to 559 s.
def _rcu_stall(at):
    return (b"[  %d.617175] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\r\n"
            b"[  %d.617483] rcu: \t5-...!: (0 ticks this GP) idle=2b50/0/0x0 softirq=24/24 "
            b"fqs=0 (false positive?)\r\n"
            b"[  %d.619208] rcu: rcu_preempt kthread timer wakeup didn't happen for 5251 jiffies! "
            b"g-347 f0x0 RCU_GP_WAIT_FQS(5) ->state=0x402\r\n" % (at, at, at))


RCU_STALLED_BOOT = (STALLED_REBOOT
                    + b"".join(_rcu_stall(at) for at in range(33, 600, 21)))
# A healthy boot on a loaded host: one short lockup, then on to the login prompt.
SHORT_LOCKUP = (b"[   32.702182] watchdog: BUG: soft lockup - CPU#0 stuck for 21s! "
                b"[kworker/u17:2:59]\r\n")


def test_kernel_reports_that_mean_the_boot_will_not_finish():
    assert watchdog.kernel_stall_report(STUCK_CPU_BOOT) == (
        "the kernel reported a CPU stuck for 183 s: [  185.953941] watchdog: BUG: soft lockup - "
        "CPU#7 stuck for 183s! [cryptomgr_test:96]")
    assert watchdog.kernel_stall_report(STUCK_CPU_BOOT_157S) is None   # up to 157 s
    assert watchdog.kernel_stall_report(SHORT_LOCKUP * 3) is None
    hung = b"[  241.1] INFO: task modprobe:112 blocked for more than %d seconds.\r\n"
    assert watchdog.kernel_stall_report(hung % 120) is None
    assert watchdog.kernel_stall_report(hung % 120 + hung % 241) == (
        "the kernel reported a hung task: [  241.1] INFO: task modprobe:112 blocked for more "
        "than 241 seconds.")
    other = b"[  300.1] INFO: task systemd-udevd:90 blocked for more than 120 seconds.\n"
    assert watchdog.kernel_stall_report(hung % 120 + other) is None      # two tasks, once each


def test_rcu_stalls_that_go_on_for_minutes_mean_the_boot_will_not_finish():
    assert watchdog.kernel_stall_report(RCU_STALLED_BOOT) == (
        "the kernel reported RCU stalls for 189 s: [  222.617175] rcu: INFO: rcu_preempt "
        "detected stalls on CPUs/tasks:")
    # A starved vCPU in a healthy boot: a few reports within three minutes, then on.
    assert watchdog.kernel_stall_report(_rcu_stall(40) + _rcu_stall(61) + _rcu_stall(210)) is None
    assert watchdog.kernel_stall_report(_rcu_stall(40) * 50) is None
    self_detected = b"[  %d.1] rcu: INFO: rcu_sched self-detected stall on CPU\r\n"
    assert watchdog.kernel_stall_report(self_detected % 30 + self_detected % 215) == (
        "the kernel reported RCU stalls for 185 s: [  215.1] rcu: INFO: rcu_sched "
        "self-detected stall on CPU")


def test_a_boot_is_in_progress_from_the_kernel_banner_until_the_login_prompt():
    assert not watchdog.boot_in_progress(b"")
    assert watchdog.boot_in_progress(STALLED_REBOOT)
    assert not watchdog.boot_in_progress(FIRST_BOOT)
    assert watchdog.boot_in_progress(FIRST_BOOT + STALLED_REBOOT)
    assert not watchdog.boot_in_progress(FIRST_BOOT + STALLED_REBOOT + b"hk-gpu-01 login: ")


# The reboot of the converge on 2026-12-02 (a loaded host): systemd reached its targets and
# started getty@tty1, but no serial getty, so the console never showed a prompt; SSH
# answered and the converge went on, and the console then stayed quiet but for the kernel.
REBOOT_WITHOUT_SERIAL_PROMPT = (
    b"[    0.000000] Linux version 6.1.0-57-amd64 (debian-kernel@lists.debian.org)\n"
    b"[\x1b[0;32m  OK  \x1b[0m] Started \x1b[0;1;39mgetty@tty1.service\x1b[0m - Getty on tty1.\n"
    b"[\x1b[0;32m  OK  \x1b[0m] Reached target \x1b[0;1;39mgetty.target\x1b[0m - Login Prompts.\n"
    b"[\x1b[0;32m  OK  \x1b[0m] Reached target \x1b[0;1;39mmulti-user.target\x1b[0m - "
    b"Multi-User System.\n"
    b"[ 1172.697104] igb 0000:23:00.0: Setting VLAN 100, QOS 0x0 on VF 0\n")


def test_a_boot_that_reached_multi_user_is_over_without_a_serial_prompt():
    assert not watchdog.boot_in_progress(FIRST_BOOT + REBOOT_WITHOUT_SERIAL_PROMPT)
    # The kernel's own copy of the line, where systemd logs to kmsg, counts the same.
    assert not watchdog.boot_in_progress(
        STALLED_REBOOT + b"[  202.9] systemd[1]: Reached target multi-user.target - Multi-User System.\n")
    # The previous boot's multi-user line or a shutdown's "Stopped target" does not end
    # the next boot.
    assert watchdog.boot_in_progress(REBOOT_WITHOUT_SERIAL_PROMPT + STALLED_REBOOT)
    assert watchdog.boot_in_progress(
        STALLED_REBOOT + b"[\x1b[0;32m  OK  \x1b[0m] Stopped target \x1b[0;1;39mmulti-user.target\x1b[0m\n"
        + STALLED_REBOOT)


class _Monitor:
    """A Unix socket that records the commands sent to it, as QEMU's monitor would get them."""

    def __init__(self, path):
        self.path = path
        self.commands = []
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(path)
        self.server.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, dummy = self.server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(256)
                    if not chunk:
                        break
                    data += chunk
                self.commands.append(data.decode().strip())

    def wait_for(self, count, timeout=5.0):
        import time
        deadline = time.monotonic() + timeout
        while len(self.commands) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.commands

    def close(self):
        self.server.close()


@pytest.fixture
def lab_run(tmp_path):
    # A short directory: a Unix socket path must fit in 108 bytes.
    monitor = _Monitor(str(tmp_path / "m.sock"))
    yield tmp_path, monitor
    monitor.close()


def _dog(tmp_path, monitor, console, stall=300):
    path = tmp_path / "console.log"
    path.write_bytes(console)
    return path, watchdog.Watchdog(str(path), monitor.path, os.getpid(), str(tmp_path / "watchdog.log"),
                                   stall=stall)


def test_a_stalled_boot_is_reset_through_the_monitor_and_its_console_kept(lab_run):
    tmp_path, monitor = lab_run
    dummy, dog = _dog(tmp_path, monitor, FIRST_BOOT + STALLED_REBOOT)
    assert dog.step(1000.0) == "idle"            # first look: the console's size is noted
    assert dog.step(1299.0) == "idle"            # quiet for 299 s: not yet
    assert dog.step(1300.0) == "reset"
    assert monitor.wait_for(1) == ["system_reset"]
    assert (tmp_path / "console-stall.log").read_bytes() == FIRST_BOOT + STALLED_REBOOT
    assert "boot stalled: no console output for 300s" in (tmp_path / "watchdog.log").read_text()
    # The reset starts the stall clock again: no second reset right away.
    assert dog.step(1301.0) == "idle"


@pytest.mark.parametrize("console", [FIRST_BOOT, FIRST_BOOT + REBOOT_WITHOUT_SERIAL_PROMPT],
                         ids=["login prompt", "multi-user without a serial prompt"])
def test_a_booted_guest_that_is_quiet_is_left_alone(lab_run, console):
    tmp_path, monitor = lab_run
    dummy, dog = _dog(tmp_path, monitor, console)
    for now in (0.0, 1000.0, 100000.0):
        assert dog.step(now) == "idle"
    assert monitor.commands == [] and not (tmp_path / "console-stall.log").exists()


def test_console_output_restarts_the_stall_clock(lab_run):
    tmp_path, monitor = lab_run
    path, dog = _dog(tmp_path, monitor, STALLED_REBOOT)
    assert dog.step(0.0) == "idle"
    with open(path, "ab") as handle:
        handle.write(b"[   10.1] registered taskstats version 1\n")
    assert dog.step(299.0) == "idle"             # it grew: the clock restarts here
    assert dog.step(500.0) == "idle"
    assert dog.step(599.0) == "reset"


def test_a_cpu_stuck_for_minutes_resets_the_boot_although_the_console_is_busy(lab_run):
    tmp_path, monitor = lab_run
    path, dog = _dog(tmp_path, monitor, FIRST_BOOT + STUCK_CPU_BOOT_157S)
    assert dog.step(0.0) == "idle"               # stuck for 157 s: a starved vCPU, perhaps
    with open(path, "ab") as handle:
        handle.write(b"[  185.953941] watchdog: BUG: soft lockup - CPU#7 stuck for 183s! "
                     b"[cryptomgr_test:96]\r\n")
    assert dog.step(26.0) == "idle"              # first seen: lab_wait_boot may act on it
    with open(path, "ab") as handle:
        handle.write(b"[  211.953941] watchdog: BUG: soft lockup - CPU#7 stuck for 209s! "
                     b"[cryptomgr_test:96]\r\n")
    assert dog.step(86.0) == "reset"             # still there after the grace
    assert monitor.wait_for(1) == ["system_reset"]
    assert "boot stalled: the kernel reported a CPU stuck for 183 s" in \
        (tmp_path / "watchdog.log").read_text()
    # The stalled boot's reports stay in the log until the new boot prints: no second reset.
    with open(path, "ab") as handle:
        handle.write(b"[  237.953941] watchdog: BUG: soft lockup - CPU#7 stuck for 235s! "
                     b"[cryptomgr_test:96]\r\n")
    assert [dog.step(t) for t in (90.0, 160.0)] == ["idle", "idle"]
    with open(path, "ab") as handle:
        handle.write(FIRST_BOOT)                 # the reset boots normally
    assert dog.step(200.0) == "idle" and monitor.commands == ["system_reset"]


def test_rcu_stalls_for_minutes_reset_the_boot_although_the_console_is_busy(lab_run):
    tmp_path, monitor = lab_run
    cut = RCU_STALLED_BOOT.index(b"[  222.")
    path, dog = _dog(tmp_path, monitor, FIRST_BOOT + RCU_STALLED_BOOT[:cut])
    assert dog.step(0.0) == "idle"               # 168 s of stalls: not yet
    with open(path, "ab") as handle:
        handle.write(RCU_STALLED_BOOT[cut:])
    assert dog.step(21.0) == "idle"              # first seen: lab_wait_boot may act on it
    with open(path, "ab") as handle:
        handle.write(_rcu_stall(621))
    assert dog.step(81.0) == "reset"
    assert monitor.wait_for(1) == ["system_reset"]
    assert "boot stalled: the kernel reported RCU stalls for 189 s" in \
        (tmp_path / "watchdog.log").read_text()


def test_short_lockups_in_a_boot_that_goes_on_are_left_alone(lab_run):
    tmp_path, monitor = lab_run
    path, dog = _dog(tmp_path, monitor, STALLED_REBOOT)
    for now in range(0, 600, 30):
        with open(path, "ab") as handle:
            handle.write(SHORT_LOCKUP)
        assert dog.step(float(now)) == "idle"
    assert monitor.commands == []


def test_resets_stop_after_the_limit_and_a_dead_monitor_is_logged(lab_run):
    tmp_path, monitor = lab_run
    dummy, dog = _dog(tmp_path, monitor, STALLED_REBOOT, stall=10)
    dog.max_resets = 2
    results = [dog.step(t) for t in (0, 10, 20, 30, 40)]
    assert results == ["idle", "reset", "reset", "idle", "idle"]
    assert monitor.wait_for(2) == ["system_reset", "system_reset"]
    dog2 = watchdog.Watchdog(dog.console, str(tmp_path / "gone.sock"), os.getpid(),
                             str(tmp_path / "watchdog2.log"), stall=10)
    assert [dog2.step(t) for t in (0, 10)] == ["idle", "idle"]
    assert "the monitor did not answer" in (tmp_path / "watchdog2.log").read_text()


def test_the_watchdog_exits_with_qemu(lab_run):
    tmp_path, monitor = lab_run
    gone = subprocess.Popen(["true"])
    gone.wait()
    proc = subprocess.run(["python3", os.path.join(REPO, "lab", "watchdog.py"), "--console",
                           str(tmp_path / "console.log"), "--monitor", monitor.path, "--pid",
                           str(gone.pid), "--log", str(tmp_path / "watchdog.log")],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
