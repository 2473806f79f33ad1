# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lanes of tools/test and tools/acceptance: three pytest runs side by side.

One pytest session ran everything in turn: the tests without the lab, then every lab
test on one lab. On this 2-core machine that left a core idle for most of an hour, since
a TCG lab keeps one core busy (``thread=single``) and waits on SSH and Ansible
in between. So a tier is split into lanes that share nothing and run at the same time:

* ``host``: every test without the lab (marker ``not lab``) but the two ansible-test gates;
* ``gates``: the ansible-test units and sanity gates (``GATE_TESTS``); the unit tests run
  once, inside the units gate, which puts each of them in the record. The host lane is
  the longest of tools/test and runs on one core, so its most costly tests run in the
  matrix queue, whose one lane in tools/test ends long before it;
* ``lab-modules``: the lab tests of tests/lab/ but test_site_on_lab.py, on a lab of their
  own (``GPUHOST_LAB_RUN=lab/.run-modules``): the first boot read, the iommu role's
  reboot, the modules on the real kernel with their reboot, the host_modules scenario,
  the simulator checks, tenant_guest;
* ``lab-site``: test_site_on_lab.py, on the default lab directory (``lab/.run``): site.yml's
  check mode, converge, idempotence, reboot, verify, onboardings, interrupted converge,
  molecule's create and destroy. Its lab starts as a first boot, so the converge needs no
  reset of a lab the module tests used;
* ``lab-el9like`` (tools/acceptance only): test_el9like_on_lab.py, the el9like variant
  of the lab (``lab/.run-el9like``) converged with the oldest ansible-core, after the
  lab-site lane (the same queue);
* ``ansible-<minor>``: the ansible-core matrix (tests/ansible-matrix.txt): the same tests
  of the playbooks, the module command lines and ansible-test sanity (``MATRIX_TESTS``),
  run by the pytest of that version's virtual environment (.venv-ansible-<minor>, built by
  tools/setup), so the tools they run are that version's. tools/test runs the versions
  marked ``test`` (the oldest), tools/acceptance every one; the newest runs in the host
  lane, on the main .venv. The matrix lanes run one after another (their own queue),
  beside the other lanes.

The two labs are two QEMU processes (6 GiB each) from the one cached image (lab/build
takes a lock, so a cold run builds it once), each searching its own range of SSH ports
(GPUHOST_LAB_PORTS), so that two boots never race for one port. Each lane is a separate pytest process, so each lab
fixture, deadline and record plugin works as in a single run. The tier's marker
expression (``not acceptance`` for tools/test) is added to every lane's.

Output: every line of a lane is printed as it comes, prefixed with ``[lane]``, and its
whole output is kept in tests/output/lanes/<lane>.log. The exit status is 0 only when
every lane passed (pytest's "no tests collected", 5, counts as passed: a ``-k`` that
selects nothing in one lane). ``GPUHOST_TEST_LANES=serial`` runs the lanes one after
another in the order above, for a machine without a spare core or memory for two labs.

The deadline (``GPUHOST_TEST_STARTED``, ``GPUHOST_TEST_DEADLINE_S``; tests/deadline.py) holds
for all lanes together: at the deadline every lane still running gets SIGTERM (its test in
progress fails, its lab is stopped, pytest prints its summary), SIGKILL ``GRACE_S`` later.

For tools/acceptance (``--record STEM``), each lane writes its own record and JUnit XML
under tests/output/lanes/, and this runner merges them into ``STEM.json`` and ``STEM.xml``
(rewritten every few seconds while the lanes run, so an interrupted run leaves what ran),
then prints the verdict line.

    python tests/lanes.py --tier test|acceptance [--no-lab] [--record STEM] [pytest args...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
sys.path[:0] = [TESTS, os.path.join(TESTS, "quality")]

import acceptance_record  # noqa: E402  (tests/ is not a package)
import gates  # noqa: E402  (tests/quality/gates.py: whether the quality gates run)

GRACE_S = 120
LANE_OUTPUT = os.path.join(REPO, "tests", "output", "lanes")
SITE_TESTS = "tests/lab/test_site_on_lab.py"
EL9LIKE_TESTS = "tests/lab/test_el9like_on_lab.py"
TIER_MARKERS = {"test": "not acceptance", "acceptance": None}
# pytest's exit status for "no tests ran": a lane that a -k or -m selects nothing from.
NO_TESTS_COLLECTED = 5
MERGE_EVERY_S = 10


@dataclasses.dataclass(frozen=True)
class Lane:
    name: str
    marker: str                      # the lane's own marker expression
    paths: tuple                     # what pytest collects, relative to the repository
    ignore: tuple = ()
    lab_run: str | None = None       # GPUHOST_LAB_RUN of the lane's lab, if it has one
    lab_ports: str | None = None     # GPUHOST_LAB_PORTS: its SSH port range, apart from the other's
    venv: str | None = None          # the virtual environment whose pytest runs it (default: ours)
    queue: str | None = None         # lanes of one queue run one after another

    def pytest_argv(self, python, tier, extra=(), environ=None):
        markers = [m for m in (self.marker, TIER_MARKERS[tier]) if m]
        argv = [python, "-m", "pytest", "-ra", "--durations=25",
                "-m", " and ".join("(%s)" % m for m in markers)]
        gates_left_out = gates.left_out(environ)
        argv += ["--ignore=%s" % path for path in self.ignore
                 if not (gates_left_out and path in UNITS_RUN_BY_THE_GATE)]
        return argv + list(extra) + list(self.paths)


# The unit tests run once, inside the ansible-test units gate (tests/quality/test_units.py),
# which hands their results to the record; the host lane runs them itself only when the
# gates are left out (GPUHOST_SKIP_QUALITY=1). Running them twice cost the host lane, the
# longest of the three, 233 s of the 2779 s measured in acceptance-20261202T0414Z.
UNITS_RUN_BY_THE_GATE = ("tests/unit",)

# The lab-site lane and, in tools/acceptance, the el9like lab after it: the lab-site lane
# ends first (acceptance-20261203T1718Z: lab-site 2156 s, lab-modules 3398 s), so the
# el9like converge adds the least wall time there, and one queue keeps the machine at two
# labs at a time.
LAB_SITE_QUEUE = "lab-site"

# The two ansible-test gates: 458 s (units 352 s, sanity 106 s) of the host lane's 2510 s
# in CI's tools/test run of 7783980, whose 2580 s were the host lane's.
GATE_TESTS = ("tests/quality/test_units.py", "tests/quality/test_sanity.py")

LANES = (
    Lane("host", "not lab", ("tests",), ignore=UNITS_RUN_BY_THE_GATE + GATE_TESTS),
    Lane("lab-modules", "lab", ("tests/lab",), ignore=(SITE_TESTS, EL9LIKE_TESTS),
         lab_run="lab/.run-modules", lab_ports="2261-2299"),
    Lane("lab-site", "lab", (SITE_TESTS,), lab_run="lab/.run", lab_ports="2222-2260",
         queue=LAB_SITE_QUEUE),
)
# tools/acceptance only (every test of them is marker acceptance; tools/test would start a
# pytest that selects nothing): the el9like lab (Debian 11, Python 3.9, kernel 5.10,
# dracut) converged with the oldest ansible-core of the matrix.
ACCEPTANCE_LANES = (
    Lane("lab-el9like", "lab", (EL9LIKE_TESTS,), lab_run="lab/.run-el9like",
         lab_ports="2340-2370", queue=LAB_SITE_QUEUE),
)


def lanes_for(with_lab, tier="test"):
    lanes = LANES + (ACCEPTANCE_LANES if tier == "acceptance" else ()) + (GATES_LANE,)
    return [lane for lane in lanes if with_lab or lane.lab_run is None]


# -- the ansible-core matrix --------------------------------------------------------------
MATRIX_FILE = os.path.join(REPO, "tests", "ansible-matrix.txt")
# The tests each matrix version runs: check mode on the runbook host, the onboarding and
# offboarding playbooks, the fleet, every module command-line test, ansible-test sanity.
MATRIX_TESTS = (
    "tests/integration/test_playbooks.py",
    "tests/integration/test_offboard_playbook.py",
    "tests/integration/test_fleet_onboard_and_rolling.py",
    "tests/integration/test_fleet_capacity.py",
    "tests/integration/test_host_modules_cli.py",
    "tests/integration/test_facts_module_cli.py",
    "tests/integration/test_guest_modules_cli.py",
    "tests/integration/test_libvirt_pinned_domain_cli.py",
    "tests/integration/test_numa_cpuset_cli.py",
    "tests/quality/test_sanity.py",
)
MATRIX_QUEUE = "ansible-matrix"
# In the matrix queue, so that two ansible-test runs never share the machine; the queue
# ends long before the host lane (tools/test: one matrix lane of 1142 s in that CI run).
GATES_LANE = Lane("gates", "not lab", GATE_TESTS, queue=MATRIX_QUEUE)


def read_matrix(path=MATRIX_FILE):
    """[(version, tier)] of tests/ansible-matrix.txt, in its order."""
    matrix = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) != 2 or fields[1] not in TIER_MARKERS or len(fields[0].split(".")) != 3:
                raise ValueError("%s:%d: expected 'VERSION TIER' (tier: %s), got %r"
                                 % (path, number, " or ".join(sorted(TIER_MARKERS)), line.rstrip()))
            matrix.append((fields[0], fields[1]))
    return matrix


def matrix_venv(version):
    """The virtual environment tools/setup builds for an ansible-core version."""
    return ".venv-ansible-%s" % ".".join(version.split(".")[:2])


def matrix_lanes(tier, matrix=None):
    """A lane per matrix version the tier runs: tools/test the ``test`` ones, tools/acceptance all."""
    return [Lane("ansible-%s" % ".".join(version.split(".")[:2]), "not lab", MATRIX_TESTS,
                 venv=matrix_venv(version), queue=MATRIX_QUEUE)
            for version, version_tier in (read_matrix() if matrix is None else matrix)
            if tier == "acceptance" or version_tier == tier]


def lane_environ(lane, base, record_stem=None):
    """The environment of one lane's pytest."""
    env = dict(base)
    if lane.lab_run is not None:
        env["GPUHOST_LAB_RUN"] = os.path.join(REPO, lane.lab_run)
        env["GPUHOST_LAB_PORTS"] = lane.lab_ports
        # Two labs cannot share one pinned port, whatever the caller set: each searches
        # its own range (lab/up), also when it boots again after a reset.
        env.pop("GPUHOST_LAB_PORT", None)
    if lane.venv is not None:
        # Its ansible tools first on the PATH, and the gates' scripts (tools/quality) on
        # its ansible-test.
        venv = os.path.join(REPO, lane.venv)
        env["GPUHOST_VENV"] = venv
        env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    if record_stem is not None:
        env["GPUHOST_ACCEPTANCE_RECORD"] = part_path(record_stem, lane, "json")
        env["GPUHOST_ACCEPTANCE_JUNITXML"] = part_path(record_stem, lane, "xml")
    return env


def part_path(record_stem, lane, ext):
    return os.path.join(LANE_OUTPUT, "%s.%s.%s" % (os.path.basename(record_stem), lane.name, ext))


# -- the merged record ------------------------------------------------------------------
def merge_records(parts, command, started_epoch, now):
    """One acceptance record from the lanes' records ({lane name: record or None}).

    Finished when every lane finished; the tests of all lanes, each with its lane; the
    counts summed; the lab kernel from the first lane that read one."""
    merged = {"command": command, "started": acceptance_record.utc_iso(started_epoch),
              "started_epoch": started_epoch, "lanes": {}, "tests": [],
              "lab_kernel": None, "in_progress": []}
    counts = dict.fromkeys(acceptance_record.OUTCOMES, 0)
    finished = True
    exit_statuses = []
    for name, part in parts.items():
        if part is None:
            merged["lanes"][name] = {"status": "not started"}
            finished = False
            continue
        for key in ("commit", "dirty", "qemu_version", "commit_unavailable", "qemu_version_unavailable"):
            if key in part and key not in merged:
                merged[key] = part[key]
        if merged["lab_kernel"] is None and part.get("lab_kernel"):
            merged["lab_kernel"] = part["lab_kernel"]
        for outcome, number in (part.get("counts") or {}).items():
            counts[outcome] = counts.get(outcome, 0) + number
        for test in part.get("tests") or ():
            merged["tests"].append(dict(test, lane=name))
        if part.get("in_progress"):
            merged["in_progress"].append(part["in_progress"])
        finished = finished and part.get("status") == "finished"
        exit_statuses.append(part.get("pytest_exitstatus"))
        merged["lanes"][name] = {key: part.get(key) for key in
                                 ("status", "wall_s", "pytest_args", "pytest_exitstatus", "in_progress",
                                  "ansible_core_version", "python_version")}
        merged["lanes"][name]["counts"] = part.get("counts")
    if merged["lab_kernel"] is None:
        merged["lab_kernel_unavailable"] = "no lane read the lab's kernel"
    merged["counts"] = counts
    merged["in_progress"] = merged["in_progress"] or None
    merged["status"] = "finished" if finished else "running"
    merged["ended"] = acceptance_record.utc_iso(now) if finished else None
    merged["wall_s"] = round(now - started_epoch, 1)
    merged["pytest_exitstatus"] = (max((s for s in exit_statuses if s not in (0, NO_TESTS_COLLECTED)),
                                       default=0) if finished else None)
    return merged


def merge_junit(paths, lane_names):
    """One <testsuites> of the lanes' JUnit XML files (missing ones left out); each suite
    is named after its lane."""
    root = ET.Element("testsuites")
    for path, name in zip(paths, lane_names):
        try:
            tree = ET.parse(path)
        except (OSError, ET.ParseError):
            continue
        top = tree.getroot()
        for suite in ([top] if top.tag == "testsuite" else top.findall("testsuite")):
            suite.set("name", name)
            root.append(suite)
    return ET.ElementTree(root)


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _write_atomic(path, text):
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


class Recorder:
    """Merges the lanes' records into STEM.json (and STEM.xml at the end)."""

    def __init__(self, stem, lanes, command, started_epoch):
        self.stem, self.lanes, self.command, self.started = stem, lanes, command, started_epoch
        self.cpu_s = {}             # lane name -> CPU seconds of a lane that ended
        for lane in lanes:          # a part left by an earlier run of the same stem
            for ext in ("json", "xml"):
                if os.path.exists(part_path(stem, lane, ext)):
                    os.remove(part_path(stem, lane, ext))

    def write(self, now=None):
        parts = {lane.name: _read_json(part_path(self.stem, lane, "json")) for lane in self.lanes}
        record = merge_records(parts, self.command, self.started, now or time.time())
        for name, cpu_s in self.cpu_s.items():
            if name in record["lanes"] and cpu_s is not None:
                record["lanes"][name]["cpu_s"] = round(cpu_s, 1)
        record["junitxml"] = os.path.relpath(self.stem + ".xml", REPO)
        _write_atomic(self.stem + ".json", json.dumps(record, indent=1, sort_keys=True) + "\n")
        return record

    def finish(self):
        paths, names = [], []
        for lane in self.lanes:
            paths.append(part_path(self.stem, lane, "xml"))
            names.append(lane.name)
            # The tests a test of the lane ran in a process of its own (the unit tests in
            # the ansible-test units gate): a suite each, named after the lane.
            for nested in (_read_json(part_path(self.stem, lane, "json")) or {}).get("nested_junitxml") or ():
                paths.append(nested)
                names.append("%s (%s)" % (lane.name, os.path.basename(nested)))
        tree = merge_junit(paths, names)
        tree.write(self.stem + ".xml", encoding="utf-8", xml_declaration=True)
        return self.write()


# -- running ----------------------------------------------------------------------------
class RunningLane:
    def __init__(self, lane, argv, env, log, out=None, lock=None):
        self.lane = lane
        self.started = time.monotonic()
        self.ended = None
        self.cpu_s = None
        self.log = open(log, "w", encoding="utf-8", errors="replace")   # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True, errors="replace", bufsize=1)
        self.reader = threading.Thread(target=self._copy, args=(out or sys.stdout, lock or threading.Lock()),
                                       daemon=True)
        self.reader.start()

    def _copy(self, out, lock):
        prefix = "[%s] " % self.lane.name
        for line in self.proc.stdout:
            self.log.write(line)
            with lock:
                out.write(prefix + line)
                out.flush()
        self.log.close()

    def poll(self):
        # Reaped here with wait4, for the CPU time of the lane's pytest and every process
        # it waited for (the labs' QEMUs run daemonized: tests/lab/conftest.py counts theirs).
        if self.proc.returncode is None:
            try:
                pid, wait_status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(wait_status)
                self.cpu_s = usage.ru_utime + usage.ru_stime
        status = self.proc.poll()
        if status is not None and self.ended is None:
            self.reader.join()
            self.ended = time.monotonic()
        return status

    def passed(self):
        return self.proc.returncode in (0, NO_TESTS_COLLECTED)


def _cpu_text(cpu_s):
    return "CPU unknown" if cpu_s is None else "%.0f s of CPU" % cpu_s


def _say(tag, text):
    print("[%s] %s" % (tag, text), flush=True)


def run_lanes(lanes, tier, extra, tag, deadline_at=None, serial=False, record=None, python=sys.executable,
              base_env=None, clock=time.time, out=None, grace_s=GRACE_S):
    """Runs the lanes; returns the exit status (0: all passed; 124: over the deadline)."""
    base_env = dict(os.environ if base_env is None else base_env)
    os.makedirs(LANE_OUTPUT, exist_ok=True)
    lock = threading.Lock()
    pending = list(lanes)
    running = []
    finished = []
    over_deadline = False
    term_sent_at = None
    last_merge = 0.0

    def start(lane):
        env = lane_environ(lane, base_env, record.stem if record else None)
        junit = ["--junitxml=%s" % env["GPUHOST_ACCEPTANCE_JUNITXML"]] if record else []
        lane_python = os.path.join(REPO, lane.venv, "bin", "python") if lane.venv else python
        argv = lane.pytest_argv(lane_python, tier, list(extra) + junit, environ=env)
        where = (" (lab: %s, ssh ports %s)" % (env["GPUHOST_LAB_RUN"], lane.lab_ports)
                 if lane.lab_run else "")
        _say(tag, "lane %s: %s%s" % (lane.name, " ".join(argv[1:]), where))
        running.append(RunningLane(lane, argv, env, os.path.join(LANE_OUTPUT, lane.name + ".log"),
                                   out=out, lock=lock))

    while pending or running:
        while not over_deadline:
            # The first pending lane that may start: any, unless serial; none of a queue
            # while another lane of that queue runs.
            busy = {lane.lane.queue for lane in running if lane.lane.queue}
            ready = [lane for lane in pending if lane.queue is None or lane.queue not in busy]
            if not ready or (serial and running):
                break
            pending.remove(ready[0])
            start(ready[0])
        for lane in list(running):
            if lane.poll() is not None:
                running.remove(lane)
                finished.append(lane)
                if record is not None:
                    record.cpu_s[lane.lane.name] = lane.cpu_s
                _say(tag, "lane %s ended: exit status %d after %.0f s, %s (its output: %s)"
                     % (lane.lane.name, lane.proc.returncode, lane.ended - lane.started,
                        _cpu_text(lane.cpu_s), os.path.relpath(lane.log.name, REPO)))
        now = clock()
        if deadline_at is not None and now >= deadline_at and running:
            if not over_deadline:
                over_deadline = True
                term_sent_at = now
                _say(tag, "the deadline has come: SIGTERM to the lanes still running (%s), SIGKILL %d s later"
                     % (", ".join(lane.lane.name for lane in running), grace_s))
                for lane in running:
                    lane.proc.send_signal(signal.SIGTERM)
            elif now - term_sent_at >= grace_s:
                for lane in running:
                    lane.proc.kill()
        if over_deadline and pending:
            _say(tag, "the deadline has come: lanes NOT started: %s" % ", ".join(lane.name for lane in pending))
            pending.clear()
        if record is not None and now - last_merge >= MERGE_EVERY_S:
            record.write()
            last_merge = now
        time.sleep(0.5)

    _say(tag, "lanes: %s" % "; ".join(
        "%s exit %d in %.0f s, %s" % (lane.lane.name, lane.proc.returncode, lane.ended - lane.started,
                                      _cpu_text(lane.cpu_s))
        for lane in finished))
    status = 0 if all(lane.passed() for lane in finished) and len(finished) == len(lanes) else 1
    if over_deadline:
        return 124
    return status


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--tier", choices=sorted(TIER_MARKERS), required=True)
    parser.add_argument("--no-lab", action="store_true", help="the lanes without a lab only (host, gates)")
    parser.add_argument("--record", metavar="STEM", help="merge the lanes' acceptance records into STEM.json/.xml")
    parser.add_argument("--command", default=None, help="the command line the record names")
    args, extra = parser.parse_known_args(argv)
    tag = "test" if args.tier == "test" else "acceptance"
    lanes = lanes_for(not args.no_lab, args.tier) + matrix_lanes(args.tier)
    missing = [lane.venv for lane in lanes if lane.venv and not os.path.exists(os.path.join(REPO, lane.venv, "bin", "python"))]
    if missing:
        parser.error("the ansible-core matrix's virtual environments %s are missing (tests/ansible-matrix.txt): "
                     "run tools/setup --tier %s, which builds them" % (", ".join(missing), args.tier))
    serial_mode = os.environ.get("GPUHOST_TEST_LANES", "parallel")
    if serial_mode not in ("parallel", "serial"):
        parser.error("GPUHOST_TEST_LANES=%r: expected parallel or serial" % serial_mode)
    started = float(os.environ.get("GPUHOST_TEST_STARTED") or time.time())
    deadline_s = int(os.environ.get("GPUHOST_TEST_DEADLINE_S") or 0)
    deadline_at = started + deadline_s if deadline_s else None
    record = None
    if args.record:
        stem = os.path.join(REPO, args.record)
        os.makedirs(os.path.dirname(stem), exist_ok=True)
        record = Recorder(stem, lanes, args.command or "tools/acceptance", started)
    _say(tag, "%d lanes, %s: %s" % (len(lanes), serial_mode, ", ".join(lane.name for lane in lanes)))
    status = run_lanes(lanes, args.tier, extra, tag, deadline_at=deadline_at, serial=serial_mode == "serial",
                       record=record)
    if status == 124:
        _say(tag, "FAILED: over the deadline: the lanes were stopped %d s after the start of tools/%s "
             "(GPUHOST_TEST_DEADLINE_S); the tests they had not finished are not proven" % (deadline_s, tag))
    if record is not None:
        merged = record.finish()
        line, verdict_status = acceptance_record.verdict(merged, status, os.path.relpath(record.stem + ".json", REPO))
        print(line, flush=True)
        return verdict_status if status != 124 else status
    return status


if __name__ == "__main__":
    sys.exit(main())
