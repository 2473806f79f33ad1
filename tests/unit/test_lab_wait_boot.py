"""lab/lib.sh's boot waiting, with the guest replaced by shell stubs (no QEMU here):
a guest that stalls (no SSH, and no console output or a kernel hang report) is reset
once through the QEMU monitor, its console is kept, and a second stall is reported as
such; a guest that answers SSH with a new boot id ends the wait."""

import os
import subprocess
import textwrap

from helpers import REPO

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
HUNG_TASK = ("[  242.113034] INFO: task modprobe:112 blocked for more than 120 seconds.\r\n"
             "[  242.113520]       Not tainted 6.1.0-28-amd64 #1 Debian 6.1.119-1\r\n"
             "[  242.131956]  virtio_blk_init+0x4f/0x1000 [virtio_blk]\r\n")


def test_a_kernel_hang_report_resets_the_guest_although_the_console_is_busy(tmp_path):
    # The stub guest never answers SSH and keeps printing; one poll in, it reports a hung
    # task. The stall timeout alone would never fire.
    ssh = ('echo "[    5.0] still printing" >> "$lab_console_log"; '
           '[ -f "$lab_run_dir/polled" ] && printf %%s "%s" >> "$lab_console_log"; '
           'touch "$lab_run_dir/polled"; return 255') % HUNG_TASK.replace('"', '\\"')
    proc = _wait(tmp_path, ssh)
    assert proc.stdout.count("MONITOR system_reset") == 1, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("rc=4")
    assert "the kernel reported a hang: [  242.113034] INFO: task modprobe:112 blocked for " \
           "more than 120 seconds." in proc.stderr
    assert "blocked for more than" in (tmp_path / "console-stall.log").read_text()


def test_a_hang_report_from_before_the_wait_does_not_count(tmp_path):
    # lab/reboot waits on a console log that still holds the previous boot's lines.
    proc = _wait(tmp_path, 'n=$(wc -l < "$lab_console_log"); echo line >> "$lab_console_log"; '
                           '[ "$n" -ge 20 ] && echo boot-id || return 255',
                 console=HUNG_TASK)
    assert "MONITOR" not in proc.stdout, proc.stderr
    assert proc.stdout.strip().endswith("rc=0"), proc.stdout + proc.stderr
