"""The lab harness: a session-scoped ``lab`` fixture that builds and boots hk-gpu-01 in a
box (lab/README.md), or reuses the lab that is already running, plus runners for commands
over SSH and for real ansible / ansible-playbook runs against inventories/lab.

Nothing here skips: if the lab cannot be built or booted, every lab test fails with the
path of the serial console log. GPUHOST_LAB_KEEP=1 leaves a lab this session booted
running at the end (the next session reuses it).
"""

import json
import os
import shlex
import subprocess
import sys
import time

import pytest
from support import REPO

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from timed_output import format_slowest, run_timed, slowest_tasks  # noqa: E402

LAB_DIR = os.path.join(REPO, "lab")
RUN_DIR = os.environ.get("GPUHOST_LAB_RUN", os.path.join(LAB_DIR, ".run"))
INVENTORY = os.path.join(REPO, "inventories", "lab", "hosts.yml")
HOST = "hk-gpu-01"
VENV_BIN = os.path.dirname(sys.executable)

BUILD_TIMEOUT = 1800
BOOT_TIMEOUT = int(os.environ.get("GPUHOST_LAB_BOOT_TIMEOUT", "600"))
# lab/up and lab/reboot reset a stalled guest once (lab/lib.sh), so a boot may take two
# boot timeouts before they give up themselves.
WAIT_BOOT_TIMEOUT = 2 * BOOT_TIMEOUT + 120
# Pauses before Lab.ssh's retries of ssh's own failures (exit 255).
SSH_RETRY_PAUSES_S = (5, 15)


# The lab tests that throw the lab's state away: the interrupted converge (it resets
# the lab) and molecule's destroy and create from a stopped lab. Both are marker
# "acceptance" (tools/acceptance only).
FIRST_BOOT_AGAIN = ("test_interrupted_converge_then_rerun_reaches_the_uninterrupted_state",
                    "test_default_scenario_destroys_the_lab_and_creates_it_from_a_stopped_lab")
# The lab test files that boot a lab of their own (the dracut variant;
# marker "acceptance"): after every test of the lane, whose lab they stop first.
# test_el9like_on_lab.py (the Debian 11 variant converged with the oldest ansible-core)
# comes after the dracut one, in file order.
OWN_LAB_FILES = ("test_dracut_on_lab.py", "test_el9like_on_lab.py")


def pytest_collection_modifyitems(items):
    # Every test that uses the lab carries the marker, whether or not its module says so,
    # so that -m "not lab" never boots it.
    # Only tests below tests/lab/ see this fixture, so only they are marked.
    for item in items:
        if "lab" in getattr(item, "fixturenames", ()) and \
                str(item.path).startswith(os.path.dirname(os.path.abspath(__file__)) + os.sep):
            item.add_marker(pytest.mark.lab)
    # The order, in a single pytest session as in each of tests/lanes.py's lanes
    # (tools/test leaves the "acceptance" ones out, tools/acceptance runs them all):
    # 1. every test without the lab (the host lane, or first in a single session);
    # 2. the lab tests in file order: the lab's first boot read (test_lab_boot.py, then
    #    the iommu role's own reboot), the modules on the real kernel with their reboot
    #    (test_modules_on_lab.py, test_molecule_on_lab.py, test_simulator_vs_kernel.py),
    #    then site.yml (test_site_on_lab.py, its own lane): check mode on a first boot
    #    and the converge straight from that boot, so that one boot serves both;
    #    idempotence, the reboot without re-running and verify, the concurrent
    #    onboardings, all on that converged host; then tenant_guest, which needs no
    #    particular host state and leaves Docker running;
    # 3. last, FIRST_BOOT_AGAIN: each throws the lab's state away, so they come after
    #    every test that uses the converged host instead of costing another converge;
    # 4. after them, OWN_LAB_FILES: each stops the lane's lab and boots one of its own, so
    #    that two TCG guests of one lane never share the 2 cores.
    # The session fixture stops the lab right after the last lab test instead of leaving
    # QEMU running through the rest of the run.

    def rank(item):
        if item.get_closest_marker("lab") is None:
            return 0
        if os.path.basename(str(item.path)) in OWN_LAB_FILES:
            return 3
        return 2 if getattr(item, "originalname", item.name) in FIRST_BOOT_AGAIN else 1
    items.sort(key=rank)      # stable: file order within each rank


class LabError(AssertionError):
    pass


def _tail(path, lines=40):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError as err:
        return "(cannot read %s: %s)" % (path, err)


class Lab:
    """The running lab: SSH commands, file reads and Ansible runs against hk-gpu-01."""

    def __init__(self, run_dir=RUN_DIR, lab_env=None, bin_dir=VENV_BIN):
        self.run_dir = run_dir
        # The lab/* commands' environment for a lab other than this session's own (another
        # state directory, image variant or port range: tests/lab/test_dracut_on_lab.py).
        self.lab_env = lab_env
        # Where ansible and ansible-playbook come from: this Python's virtual environment,
        # or one of the ansible-core matrix (tests/lab/test_el9like_on_lab.py).
        self.bin_dir = bin_dir
        self.console_log = os.path.join(run_dir, "console.log")
        state = {}
        with open(os.path.join(run_dir, "state"), encoding="utf-8") as handle:
            for line in handle:
                key, dummy, value = line.rstrip("\n").partition("=")
                state[key] = value
        self.port = int(state["port"])
        self.key = state["key"]
        self.image_dir = state["image"]

    # -- SSH -------------------------------------------------------------------------
    def ssh_argv(self, *extra):
        return ["ssh", "-i", self.key, "-p", str(self.port),
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30",
                "-o", "IdentitiesOnly=yes", "-o", "ServerAliveInterval=10",
                "-o", "ServerAliveCountMax=6", "-o", "ControlMaster=auto",
                "-o", "ControlPath=%s/ssh-%%p.sock" % self.run_dir,
                "-o", "ControlPersist=120"] + list(extra) + ["root@127.0.0.1"]

    def ssh(self, command, check=True, timeout=300, input_text=None):
        """Run a shell command in the lab; returns the CompletedProcess (text).

        ssh's own failure (exit 255: the keepalive gave up on a TCG guest stalled by a
        busy machine, or the master connection died) is retried twice, as the lab
        inventory's ansible_ssh_retries does for Ansible; a command's own exit status
        never is, and a lab that stays unreachable still fails."""
        for pause in SSH_RETRY_PAUSES_S + (None,):
            proc = subprocess.run(self.ssh_argv() + [command], capture_output=True, text=True,
                                  timeout=timeout, input=input_text, check=False)
            if proc.returncode != 255 or pause is None:
                break
            time.sleep(pause)
        if check and proc.returncode != 0:
            raise LabError("lab command failed (rc=%d): %s\nstdout:\n%s\nstderr:\n%s\n"
                           "console log: %s" % (proc.returncode, command, proc.stdout,
                                                proc.stderr, self.console_log))
        return proc

    def read(self, path):
        """A file of the lab's /sys, /proc or /etc, as text."""
        return self.ssh("cat %s" % shlex.quote(path)).stdout

    def listdir(self, path):
        out = self.ssh("ls -1A %s" % shlex.quote(path)).stdout
        return sorted(line for line in out.splitlines() if line)

    def boot_count(self):
        """Boots recorded in the journal of this overlay (1: the image's first boot)."""
        out = self.ssh("journalctl --list-boots --no-pager -q | wc -l").stdout
        return int(out.strip())

    def reboot(self):
        """Reboot through GRUB and wait for SSH from the new boot (lab/reboot)."""
        run_lab_command("reboot", timeout=WAIT_BOOT_TIMEOUT, env=self.lab_env)

    def reset_to_first_boot(self):
        """Throw the overlay away and boot the image's first boot again (lab/reset,
        lab/up), for checks that need it when a reused lab has been rebooted."""
        run_lab_command("reset", timeout=300, env=self.lab_env)
        run_lab_command("up", timeout=WAIT_BOOT_TIMEOUT, env=self.lab_env)
        self.__init__(self.run_dir, self.lab_env, self.bin_dir)

    # -- Ansible -----------------------------------------------------------------------
    def ansible_env(self, **extra):
        env = dict(os.environ)
        env.update(ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                   ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_HOST_KEY_CHECKING="False",
                   GPUHOST_LAB_PORT=str(self.port),
                   GPUHOST_LAB_SSH_KEY=self.key,
                   PATH=self.bin_dir + os.pathsep + os.environ.get("PATH", ""))
        env.update(extra)
        return env

    def module(self, name, args=None, check_mode=False, diff=False, timeout=600):
        """One real ``ansible -m`` run on hk-gpu-01; returns (rc, result dict).

        Every runner here reads stdin from /dev/null: the SSH master that lab/reboot
        starts can leave an inherited stdin non-blocking, and ansible then refuses to
        run ("requires blocking IO on stdin")."""
        argv = [os.path.join(self.bin_dir, "ansible"), HOST, "-i", INVENTORY, "-m", name]
        if args is not None:
            argv += ["-a", json.dumps(args) if isinstance(args, dict) else args]
        if check_mode:
            argv.append("--check")
        if diff:
            argv.append("--diff")
        proc = subprocess.run(argv, cwd=REPO, env=self.ansible_env(), capture_output=True,
                              text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
        # ad-hoc output is "hk-gpu-01 | SUCCESS => {json}" (FAILED!/CHANGED/UNREACHABLE!)
        head, sep, payload = proc.stdout.partition(" => ")
        if not sep:
            raise LabError("no result from ansible -m %s (rc=%d)\nstdout:\n%s\nstderr:\n%s\n"
                           "console log: %s" % (name, proc.returncode, proc.stdout,
                                                proc.stderr, self.console_log))
        return proc.returncode, json.loads(payload)

    def playbook(self, playbook, *args, check=True, timeout=1800):
        """A real ansible-playbook run against inventories/lab, limited to hk-gpu-01."""
        argv = [os.path.join(self.bin_dir, "ansible-playbook"), "-i", INVENTORY, "-l", HOST,
                playbook] + list(args)
        proc = subprocess.run(argv, cwd=REPO, env=self.ansible_env(), capture_output=True,
                              text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise LabError("ansible-playbook %s failed (rc=%d)\n--- failed tasks\n%s\nstdout:\n%s\nstderr:\n%s\n"
                           "console log: %s" % (playbook, proc.returncode, failed_tasks(proc.stdout),
                                                proc.stdout[-15000:], proc.stderr[-5000:], self.console_log))
        return proc


# The CPU time of the labs this session stopped (lab/down, lab/reset): QEMU runs
# daemonized, so a lane's own CPU time (tests/lanes.py) does not hold it. Printed at the
# end of the session, to see where a tier's CPU goes.
QEMU_USAGE = {"cpu_s": 0.0, "wall_s": 0.0, "labs": 0}


def qemu_usage(run_dir=RUN_DIR):
    """(CPU seconds, seconds since it started) of the running lab's QEMU, or None."""
    try:
        with open(os.path.join(run_dir, "qemu.pid"), encoding="utf-8") as handle:
            pid = int(handle.read().strip())
        with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="utf-8") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    # fields[0] is field 3 of proc(5): utime and stime are 14 and 15, starttime 22.
    return (int(fields[11]) + int(fields[12])) / ticks, uptime - int(fields[19]) / ticks


def run_lab_command(name, *args, timeout=BOOT_TIMEOUT, env=None):
    """Run lab/<name>; a failure names the console log and shows its tail. ``env`` is
    the whole environment for a lab other than this session's (its GPUHOST_LAB_RUN)."""
    run_dir = (env or {}).get("GPUHOST_LAB_RUN", RUN_DIR)
    console_log = os.path.join(run_dir, "console.log")
    if name in ("down", "reset"):
        usage = qemu_usage(run_dir)
        if usage is not None:
            QEMU_USAGE["cpu_s"] += usage[0]
            QEMU_USAGE["wall_s"] += usage[1]
            QEMU_USAGE["labs"] += 1
    try:
        proc = subprocess.run([os.path.join(LAB_DIR, name)] + list(args), cwd=REPO,
                              capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired as err:
        raise LabError("lab/%s did not finish in %ss; console log: %s\n--- console tail\n%s"
                       % (name, timeout, console_log, _tail(console_log))) from err
    if proc.returncode != 0:
        raise LabError("lab/%s failed (rc=%d); console log: %s\nstderr:\n%s\n--- console tail\n%s"
                       % (name, proc.returncode, console_log, proc.stderr[-5000:],
                          _tail(console_log)))
    return proc


FAILURE_STARTS = ("fatal:", "failed:", "ERROR!", "An exception occurred")


def failed_tasks(output, limit=6000):
    """The failures in an ansible-playbook or molecule output, each with the molecule step
    and the task it happened in: the tail of a long output is the clean-up after the
    failure, not the failure."""
    excerpts = []
    step = task = ""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if "] Executing" in line and line.lstrip().startswith("INFO"):
            step = line.strip()
        elif line.startswith("TASK ["):
            task = line.rstrip("* ")
        elif line.startswith(FAILURE_STARTS):
            body = [line]
            for following in lines[index + 1:index + 40]:
                if not following.strip() or following.startswith(("TASK [", "PLAY ", "RUNNING HANDLER")):
                    break
                body.append(following)
            excerpts.append("\n".join(part for part in (step, task) if part) + "\n" + "\n".join(body))
    text = "\n---\n".join(excerpts) or "(no failed task in the output)"
    return text[:limit]


def reset_molecule(scenario, env):
    """molecule reset: forget the scenario's state. A run killed before its destroy leaves
    the state saying "created", and the next sequence then skips its create (keeping a
    stale SSH port, and failing a check that every step ran)."""
    subprocess.run([os.path.join(VENV_BIN, "molecule"), "reset", "-s", scenario], cwd=REPO, env=env,
                   capture_output=True, timeout=300, check=True, stdin=subprocess.DEVNULL)


def run_molecule(scenario, action, env, timeout=3600):
    """molecule ACTION -s SCENARIO, its output written as it comes to
    molecule-SCENARIO-ACTION.log beside the console log and its slowest tasks to
    molecule-SCENARIO-ACTION.slowest (where a slow run's minutes went). Returns the
    output; a failure (or the timeout) fails the test with the failed tasks first."""
    log_path = os.path.join(RUN_DIR, "molecule-%s-%s.log" % (scenario, action))
    run = run_timed([os.path.join(VENV_BIN, "molecule"), action, "-s", scenario], log_path=log_path,
                    timeout=timeout, cwd=REPO, env=env)
    with open(log_path[:-len(".log")] + ".slowest", "w", encoding="utf-8") as handle:
        handle.write("molecule %s -s %s: %.1f s, rc=%d\n" % (action, scenario, run.wall_s, run.returncode))
        handle.write(format_slowest(slowest_tasks(run.lines, 25)))
    output = run.output
    if run.returncode != 0:
        pytest.fail("molecule %s -s %s failed (rc=%d%s); output: %s; console log: %s\n"
                    "--- failed tasks\n%s\n--- tail\n%s"
                    % (action, scenario, run.returncode, ", killed at its %d s timeout" % timeout
                       if run.timed_out else "", log_path, os.path.join(RUN_DIR, "console.log"),
                       failed_tasks(output), output[-8000:]), pytrace=False)
    return output


def molecule_steps_in_order(output, scenario, steps):
    """Where each step of a molecule sequence reported success in molecule's output;
    fails unless every step did, in the order given."""
    positions = [output.find("[%s > %s] Executed: Successful" % (scenario, step)) for step in steps]
    missing = [s for s, p in zip(steps, positions) if p < 0]
    assert not missing and positions == sorted(positions), (missing, output[-5000:])
    return positions


def lab_is_running(run_dir=RUN_DIR):
    pid_file = os.path.join(run_dir, "qemu.pid")
    try:
        with open(pid_file, encoding="utf-8") as handle:
            pid = int(handle.read().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return os.path.exists(os.path.join(run_dir, "state"))


# The session lab fixture's own lab once it has booted it: a test that boots a lab of its
# own (test_dracut_on_lab.py) stops this one first, so that two TCG guests of one lane
# never share the 2 cores.
SESSION_LAB = {}


def variant_lab_env(variant, run_dir, ports):
    """The lab/* commands' environment for a lab of image ``variant`` of its own."""
    env = dict(os.environ)
    env.update(GPUHOST_LAB_VARIANT=variant, GPUHOST_LAB_RUN=run_dir, GPUHOST_LAB_PORTS=ports)
    # The range decides: a port pinned for the lane's own lab is not this lab's.
    env.pop("GPUHOST_LAB_PORT", None)
    return env


def stop_the_lanes_own_lab(run_dir):
    """The lane's lab is down before a lab of its own in ``run_dir`` boots (2 cores,
    TCG): the session fixture's lab is stopped if this session booted it; one it did not
    boot is a refusal."""
    if os.path.realpath(RUN_DIR) == os.path.realpath(run_dir) or not lab_is_running(RUN_DIR):
        return
    session_lab = SESSION_LAB.get("lab")
    if session_lab is None or not session_lab.started_here:
        raise LabError("another lab runs in %s and this session did not boot it: stop it (GPUHOST_LAB_RUN=%s "
                       "lab/down) before the %s lab boots, so that two TCG guests do not share the "
                       "cores" % (RUN_DIR, RUN_DIR, os.path.basename(run_dir)))
    run_lab_command("down", timeout=300)


def variant_lab(variant, run_dir, ports, timings, bin_dir=VENV_BIN):
    """The body of a module fixture for a lab of its own (lab/variants/<variant>): the
    lane's lab stopped, the variant built (cached by its recipe) and booted from a first
    boot, or reused when it already runs; yields its Lab (``started_here`` set) and takes
    it down at the end unless GPUHOST_LAB_KEEP=1. ``timings`` gets build_s and
    first_boot_to_ssh_s."""
    env = variant_lab_env(variant, run_dir, ports)
    started_here = False
    try:
        stop_the_lanes_own_lab(run_dir)
        if not lab_is_running(run_dir):
            t0 = time.monotonic()
            run_lab_command("build", timeout=BUILD_TIMEOUT, env=env)
            timings["build_s"] = round(time.monotonic() - t0, 1)
            run_lab_command("reset", timeout=300, env=env)
            t0 = time.monotonic()
            run_lab_command("up", timeout=WAIT_BOOT_TIMEOUT, env=env)
            timings["first_boot_to_ssh_s"] = round(time.monotonic() - t0, 1)
            started_here = True
        else:
            run_lab_command("up", timeout=WAIT_BOOT_TIMEOUT, env=env)
        instance = Lab(run_dir, env, bin_dir)
    except LabError as err:
        try:
            run_lab_command("down", timeout=300, env=env)
        except LabError as down_err:
            err = LabError("%s\n(lab/down failed as well: %s)" % (err, down_err))
        pytest.fail(str(err), pytrace=False)
    instance.started_here = started_here
    try:
        yield instance
    finally:
        if os.environ.get("GPUHOST_LAB_KEEP") != "1":
            run_lab_command("down", timeout=300, env=env)


@pytest.fixture(scope="session")
def lab():
    """hk-gpu-01 in a box: reused when running, else built (cached) and booted from a
    fresh overlay (a first boot). Stopped at the end if this session booted it, unless
    GPUHOST_LAB_KEEP=1."""
    started_here = False
    timings = {}
    try:
        if not lab_is_running():
            t0 = time.monotonic()
            run_lab_command("build", timeout=BUILD_TIMEOUT)
            timings["build_s"] = round(time.monotonic() - t0, 1)
            run_lab_command("reset", timeout=300)
            t0 = time.monotonic()
            run_lab_command("up", timeout=WAIT_BOOT_TIMEOUT)
            timings["boot_to_ssh_s"] = round(time.monotonic() - t0, 1)
            started_here = True
        else:
            run_lab_command("up", timeout=WAIT_BOOT_TIMEOUT)   # waits for SSH if booting
        instance = Lab()
    except LabError as err:
        # A boot lab/up gave up on leaves QEMU running (its console is the evidence), and
        # a stuck guest spins on the CPUs every later test needs: stop it, keep the log.
        try:
            run_lab_command("down", timeout=300)
        except LabError as down_err:
            err = LabError("%s\n(lab/down failed as well: %s)" % (err, down_err))
        pytest.fail(str(err), pytrace=False)
    instance.timings = timings
    instance.started_here = started_here
    SESSION_LAB["lab"] = instance
    yield instance
    if started_here and os.environ.get("GPUHOST_LAB_KEEP") != "1":
        run_lab_command("down", timeout=300)
    if QEMU_USAGE["labs"]:
        print("\n[lab] QEMU of the %d lab(s) this session stopped (%s): %.0f s of CPU in %.0f s"
              % (QEMU_USAGE["labs"], RUN_DIR, QEMU_USAGE["cpu_s"], QEMU_USAGE["wall_s"]))
