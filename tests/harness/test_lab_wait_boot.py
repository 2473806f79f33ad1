"""lab/lib.sh's boot waiting, with the guest replaced by shell stubs (no QEMU here):
a guest that stalls (no SSH, and no console output or a kernel hang report) is reset
once through the QEMU monitor, its console is kept, and a second stall is reported as
such; a guest that answers SSH with a new boot id ends the wait."""

import os
import subprocess
import textwrap

from support.helpers import REPO

LIB = os.path.join(REPO, "lab", "lib.sh")


def _wait(tmp_path, ssh_body, monitor_body='echo "MONITOR $1"', console="early boot"):
    script = textwrap.dedent("""\
        set -u
        . "%s"
        printf '%%s\\n' "$GPUHOST_TEST_CONSOLE" > "$lab_console_log"
        lab_ssh() { %s; }
        lab_ssh_close() { :; }
        lab_running() { return 0; }
        lab_monitor() { %s; }
        sleep() { command sleep 0.2; }
        rc=0; lab_try_wait_boot_resetting "" 30 || rc=$?; echo "rc=$rc"
        """) % (LIB, ssh_body, monitor_body)
    env = dict(os.environ, GPUHOST_LAB_RUN=str(tmp_path), GPUHOST_LAB_STALL_TIMEOUT="2",
               GPUHOST_TEST_CONSOLE=console)
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_stalled_guest_is_reset_once_then_reported(tmp_path):
    proc = _wait(tmp_path, "return 255")
    assert proc.stdout.count("MONITOR system_reset") == 1, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("rc=4")
    assert "the guest stalled" in proc.stderr
    assert (tmp_path / "console-stall.log").read_text() == "early boot\n"


def test_a_reset_that_boots_ends_the_wait(tmp_path):
    # After the reset the stub guest answers SSH with a boot id.
    proc = _wait(tmp_path, '[ -f "$lab_run_dir/reset" ] && echo new-boot-id || return 255',
                 'echo "MONITOR $1"; touch "$lab_run_dir/reset"')
    assert proc.stdout.count("MONITOR system_reset") == 1
    assert proc.stdout.strip().endswith("rc=0"), proc.stdout + proc.stderr


def test_a_guest_that_keeps_printing_is_not_reset(tmp_path):
    # Console output keeps coming (a slow but live boot) until SSH answers.
    proc = _wait(tmp_path, 'n=$(wc -l < "$lab_console_log"); echo line >> "$lab_console_log"; '
                           '[ "$n" -ge 20 ] && echo boot-id || return 255')
    assert "MONITOR" not in proc.stdout
    assert proc.stdout.strip().endswith("rc=0"), proc.stdout + proc.stderr


# What the CI boot printed, every two minutes, while modprobe hung in virtio_blk's probe.
def hung_task_report(seconds):
    return ("[  %d.113034] INFO: task modprobe:112 blocked for more than %d seconds.\r\n"
            "[  %d.113520]       Not tainted 6.1.0-28-amd64 #1 Debian 6.1.119-1\r\n"
            "[  %d.131956]  virtio_blk_init+0x4f/0x1000 [virtio_blk]\r\n"
            % (seconds + 120, seconds, seconds + 120, seconds + 120))


# What a healthy boot on a loaded host printed (it went on to answer SSH).
SOFT_LOCKUP = ("[   32.702182] watchdog: BUG: soft lockup - CPU#0 stuck for 21s! "
               "[kworker/u17:2:59]\r\n[   32.702182] RIP: 0010:clear_page_erms+0x7/0x10\r\n")


def _printing_guest(reports):
    """SSH never answers; each poll prints a line, then the next of ``reports``."""
    lines = "".join("'%s' " % r.replace("\r\n", "\\r\\n") for r in reports)
    return ('echo "[    5.0] still printing" >> "$lab_console_log"; '
            'set -- %s; n=$(cat "$lab_run_dir/polls" 2>/dev/null || echo 0); '
            'echo $((n + 1)) > "$lab_run_dir/polls"; shift "$n" 2>/dev/null && [ $# -gt 0 ] && '
            'printf "$1" >> "$lab_console_log"; return 255') % lines


def test_a_task_reported_hung_twice_resets_the_guest_although_the_console_is_busy(tmp_path):
    # The stall timeout alone would never fire: the console keeps growing.
    proc = _wait(tmp_path, _printing_guest([hung_task_report(120), hung_task_report(241)]))
    assert proc.stdout.count("MONITOR system_reset") == 1, proc.stdout + proc.stderr
    assert "the kernel reported a hung task: [  361.113034] INFO: task modprobe:112 blocked " \
           "for more than 241 seconds." in proc.stderr
    assert "blocked for more than 241" in (tmp_path / "console-stall.log").read_text()


def stuck_cpu_report(seconds):
    return ("[  %d.953941] watchdog: BUG: soft lockup - CPU#7 stuck for %ds! [cryptomgr_test:96]\r\n"
            % (seconds + 2, seconds))


def test_a_cpu_reported_stuck_for_minutes_resets_the_guest_although_the_console_is_busy(tmp_path):
    # The first boot that never came back (2026-11-30): reports every 26 s up to 782 s.
    proc = _wait(tmp_path, _printing_guest([stuck_cpu_report(s) for s in (26, 53, 157, 183)]))
    assert proc.stdout.count("MONITOR system_reset") == 1, proc.stdout + proc.stderr
    assert "the kernel reported a CPU stuck for 183 s: [  185.953941] watchdog: BUG: soft " \
           "lockup - CPU#7 stuck for 183s!" in proc.stderr


def test_one_hung_task_report_or_a_soft_lockup_does_not_reset(tmp_path):
    # A starved TCG vCPU: reports once, then the boot goes on and answers SSH.
    ssh = _printing_guest([SOFT_LOCKUP, hung_task_report(120)]).replace(
        "return 255", '[ "$(cat "$lab_run_dir/polls")" -ge 8 ] && echo boot-id || return 255')
    proc = _wait(tmp_path, ssh)
    assert "MONITOR" not in proc.stdout, proc.stderr
    assert proc.stdout.strip().endswith("rc=0"), proc.stdout + proc.stderr
    console = (tmp_path / "console.log").read_text()
    assert "soft lockup" in console and "blocked for more than 120 seconds" in console


def test_a_hang_report_from_before_the_wait_does_not_count(tmp_path):
    # lab/reboot waits on a console log that still holds the previous boot's lines.
    proc = _wait(tmp_path, 'n=$(wc -l < "$lab_console_log"); echo line >> "$lab_console_log"; '
                           '[ "$n" -ge 20 ] && echo boot-id || return 255',
                 console=hung_task_report(120) + hung_task_report(241))
    assert "MONITOR" not in proc.stdout, proc.stderr
    assert proc.stdout.strip().endswith("rc=0"), proc.stdout + proc.stderr


def test_down_stops_a_qemu_whose_boot_lab_up_gave_up_on(tmp_path):
    # lab/up removes its state file when it gives up, and QEMU keeps running the stuck
    # guest: lab/down must still stop it (SIGTERM after the monitor's quit, here with no
    # monitor socket), not refuse for want of the state. The stand-in is a process
    # whose command line names qemu, which is what lab/down checks.
    # Not this test's child, so that it is reaped, not left a zombie, when it exits.
    pid = int(subprocess.run(
        ["bash", "-c", "(exec -a qemu-system-x86_64-standin sleep 600) >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True).stdout)
    try:
        (tmp_path / "qemu.pid").write_text("%d\n" % pid)
        proc = subprocess.run([os.path.join(REPO, "lab", "down")], capture_output=True, text=True,
                              env=dict(os.environ, GPUHOST_LAB_RUN=str(tmp_path)),
                              timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "runs a boot lab/up gave up on" in proc.stderr
        assert not os.path.exists("/proc/%d" % pid)
        assert not (tmp_path / "qemu.pid").exists()
    finally:
        if os.path.exists("/proc/%d" % pid):
            os.kill(pid, 9)
