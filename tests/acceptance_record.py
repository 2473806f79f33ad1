# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The record of a tools/acceptance run: a pytest plugin that writes a JSON summary.

tests/conftest.py registers ``AcceptanceRecord`` when GPUHOST_ACCEPTANCE_RECORD names the
JSON file (tools/acceptance: bench/results/acceptance-<UTC time>.json, beside pytest's
JUnit XML of the same stem). The record holds the commit (and whether the tree was
dirty), the start and end time (UTC), the wall time, the command line, every test's
node id, outcome (passed, failed, skipped, error) and duration, the counts per outcome,
the QEMU version of this machine, the ansible-core and Python versions the
run's tests used, and the lab's kernel (``uname -r`` in the running lab,
read after the first lab test that has the lab). It is rewritten atomically after every
test's report, so a run that is interrupted or killed still leaves what ran, with the
test it was in (``in_progress``).

A test that runs other tests in a process of its own (the ansible-test units gate,
tests/quality/test_units.py, which is where the unit tests run in the lanes) hands their
JUnit XML to ``add_nested``: each of those tests becomes an entry of the record like any
other (with ``within``, the test that ran them), counted in the counts, and the XML is
kept beside this run's JUnit XML (``nested_junitxml``) for tests/lanes.py to merge.

``python tests/acceptance_record.py verdict RECORD PYTEST_RC`` prints tools/acceptance's
one verdict line and exits non-zero on any failure."""

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

OUTCOMES = ("passed", "failed", "skipped", "error")
NO_LAB_TEST_YET = "no lab test has run yet"
# The name tests/conftest.py registers the plugin under (tests find it by this name).
PLUGIN_NAME = "gpuhost-acceptance-record"


def utc_iso(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _first_line(argv, cwd=None):
    """(first line of the output, None) or (None, why not)."""
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as err:
        return None, "%s: %s" % (" ".join(argv), err)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return None, "%s: rc=%d %s" % (" ".join(argv), proc.returncode, proc.stderr.strip()[:500])
    return lines[0].strip(), None


def git_commit(repo):
    """{"commit": sha or None, "dirty": bool or None, ...} of the checkout."""
    sha, why = _first_line(["git", "rev-parse", "HEAD"], cwd=repo)
    if sha is None:
        return {"commit": None, "dirty": None, "commit_unavailable": why}
    try:
        # The run's own records (bench/results/acceptance-*, written from its first
        # moment) do not make the checkout dirty.
        status = subprocess.run(["git", "status", "--porcelain", "--", ".",
                                 ":(exclude,glob)bench/results/acceptance-*"], cwd=repo,
                                capture_output=True, text=True, timeout=60, check=True,
                                stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return {"commit": sha, "dirty": None, "dirty_unavailable": str(err)}
    return {"commit": sha, "dirty": bool(status.strip())}


def toolchain():
    """The ansible-core and Python of this pytest process: a lane runs in its own virtual
    environment (tests/lanes.py), whose ansible-playbook and ansible-test its tests run,
    so this names the version each lane of the matrix proved."""
    try:
        from ansible.release import __version__ as ansible_core
    except ImportError as err:
        return {"ansible_core_version": None, "ansible_core_version_unavailable": str(err),
                "python_version": "%d.%d.%d" % sys.version_info[:3]}
    return {"ansible_core_version": ansible_core, "python_version": "%d.%d.%d" % sys.version_info[:3]}


def qemu_version():
    version, why = _first_line(["qemu-system-x86_64", "--version"])
    return {"qemu_version": version} if version else {"qemu_version": None, "qemu_version_unavailable": why}


def outcome_of(previous, report):
    """A test's outcome after the report of one of its phases (setup, call, teardown):
    None while only its setup has passed (the call decides), a failed setup or teardown
    is an error, a failed call a failure; an expected failure (xfail) counts as skipped,
    since it proves nothing."""
    when, outcome = report.when, report.outcome
    if when == "setup":
        if outcome == "passed":
            return None
        return "skipped" if outcome == "skipped" else "error"
    if when == "call":
        if outcome == "failed":
            return "failed"
        return "skipped" if outcome == "skipped" else "passed"
    if outcome == "failed" and previous not in ("failed", "error"):
        return "error"
    return previous if previous is not None else "error"


def junit_cases(path):
    """The tests of a pytest JUnit XML file, each as the record holds one: its node id
    (rebuilt from the file, the classname's part after that file's module, and the name),
    its outcome and duration."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name, classname, filename = case.get("name", ""), case.get("classname", ""), case.get("file")
        module = filename[:-3].replace("/", ".") if filename and filename.endswith(".py") else None
        if module and (classname == module or classname.startswith(module + ".")):
            nodeid = "::".join([filename] + classname[len(module):].split(".")[1:] + [name])
        else:
            nodeid = "%s::%s" % (classname, name)
        if case.find("failure") is not None:
            outcome = "failed"
        elif case.find("error") is not None:
            outcome = "error"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        cases.append({"nodeid": nodeid, "outcome": outcome, "duration_s": round(float(case.get("time") or 0.0), 3)})
    return cases


class AcceptanceRecord:
    """The plugin. ``clock`` gives seconds since the epoch; ``read_lab_kernel(item)``
    returns (kernel, None) or (None, why not) for an item that uses the lab."""

    def __init__(self, path, started, command, static=None, clock=time.time, read_lab_kernel=None):
        self.path = path
        self.clock = clock
        self.read_lab_kernel = read_lab_kernel or lab_kernel_of
        self.tests = {}
        self.data = {
            "status": "running",
            "started": utc_iso(started),
            "started_epoch": started,
            "ended": None,
            "wall_s": None,
            "command": command,
            "lab_kernel": None,
            "lab_kernel_unavailable": NO_LAB_TEST_YET,
            "in_progress": None,
            "pytest_exitstatus": None,
        }
        self.data.update(static or {})

    # -- the record --------------------------------------------------------------------
    def counts(self):
        counts = dict.fromkeys(OUTCOMES, 0)
        for test in self.tests.values():
            if test["outcome"] is not None:       # None: in progress
                counts[test["outcome"]] += 1
        return counts

    def snapshot(self):
        data = dict(self.data)
        now = self.clock()
        if data["ended"] is None:
            data["wall_s"] = round(now - data["started_epoch"], 1)
        data["counts"] = self.counts()
        data["tests"] = list(self.tests.values())
        return data

    def write(self):
        """Rewrite the record atomically (a reader never sees half a file)."""
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        tmp = "%s.tmp-%d" % (self.path, os.getpid())
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(self.snapshot(), handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, self.path)

    def add_nested(self, within, junitxml):
        """The tests of a run inside the test ``within`` (its JUnit XML file): entries of
        the record, and the file kept beside this run's JUnit XML. Returns their count."""
        cases = junit_cases(junitxml)
        for case in cases:
            case["within"] = within
            self.tests.setdefault("%s (in %s)" % (case["nodeid"], within), case)
        own_junit = self.data.get("junitxml")
        if own_junit:
            kept = "%s.nested-%d.xml" % (own_junit[:-4] if own_junit.endswith(".xml") else own_junit,
                                         len(self.data.setdefault("nested_junitxml", [])) + 1)
            shutil.copyfile(junitxml, kept)
            self.data["nested_junitxml"].append(kept)
        self.write()
        return len(cases)

    # -- pytest hooks ------------------------------------------------------------------
    def pytest_sessionstart(self, session):
        if session is not None:
            self.data["pytest_args"] = [str(arg) for arg in session.config.invocation_params.args]
        self.write()

    def pytest_runtest_logstart(self, nodeid, location):
        self.data["in_progress"] = nodeid
        self.write()

    def pytest_runtest_logreport(self, report):
        test = self.tests.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": None,
                                                     "duration_s": 0.0})
        test["outcome"] = outcome_of(test["outcome"], report)
        test["duration_s"] = round(test["duration_s"] + (report.duration or 0.0), 3)
        if report.when == "teardown":
            self.data["in_progress"] = None
        self.write()

    def pytest_collectreport(self, report):
        # A module that fails to import is an error of the run, with its node id.
        if report.outcome == "failed":
            self.tests[report.nodeid] = {"nodeid": report.nodeid, "outcome": "error", "duration_s": 0.0}
            self.write()

    def pytest_runtest_makereport(self, item, call):
        if call.when != "call" or self.data["lab_kernel"] is not None:
            return
        if "lab" not in getattr(item, "fixturenames", ()):
            return
        kernel, why = self.read_lab_kernel(item)
        self.data["lab_kernel"] = kernel
        if kernel is not None:
            self.data.pop("lab_kernel_unavailable", None)
        else:
            self.data["lab_kernel_unavailable"] = why

    def pytest_sessionfinish(self, session, exitstatus):
        now = self.clock()
        self.data["ended"] = utc_iso(now)
        self.data["wall_s"] = round(now - self.data["started_epoch"], 1)
        self.data["pytest_exitstatus"] = int(exitstatus)
        self.data["status"] = "finished"
        if self.data["lab_kernel"] is None and self.data["lab_kernel_unavailable"] == NO_LAB_TEST_YET:
            self.data["lab_kernel_unavailable"] = "no test of this run used the lab"
        self.write()


def lab_kernel_of(item):
    """uname -r in the running lab, through the item's ``lab`` fixture."""
    lab = getattr(item, "funcargs", {}).get("lab")
    if lab is None:
        return None, "the lab fixture was not set up"
    try:
        proc = lab.ssh("uname -r", check=False, timeout=120)
    except Exception as err:  # pylint: disable=broad-except  # a record must not fail the test
        return None, "uname -r in the lab failed: %s" % err
    kernel = proc.stdout.strip()
    if proc.returncode != 0 or not kernel:
        return None, "uname -r in the lab: rc=%d %s" % (proc.returncode, proc.stderr.strip()[:500])
    return kernel, None


def from_environ(environ, repo, clock=time.time):
    """The plugin as tools/acceptance asks for it, or None without GPUHOST_ACCEPTANCE_RECORD."""
    path = environ.get("GPUHOST_ACCEPTANCE_RECORD")
    if not path:
        return None
    started = environ.get("GPUHOST_TEST_STARTED")
    static = {}
    static.update(git_commit(repo))
    static.update(qemu_version())
    static.update(toolchain())
    static["junitxml"] = environ.get("GPUHOST_ACCEPTANCE_JUNITXML")
    return AcceptanceRecord(path, float(started) if started else clock(),
                            environ.get("GPUHOST_ACCEPTANCE_COMMAND") or " ".join(sys.argv),
                            static=static, clock=clock)


def verdict(record, pytest_rc, path):
    """(line, exit status) for tools/acceptance: PASSED only when pytest passed and no
    test failed or errored."""
    counts = record.get("counts") or {}
    failed, errors = counts.get("failed", 0), counts.get("error", 0)
    ok = pytest_rc == 0 and failed == 0 and errors == 0 and record.get("status") == "finished"
    detail = "%d passed, %d failed, %d skipped, %d errors in %s s" % (
        counts.get("passed", 0), failed, counts.get("skipped", 0), errors,
        "%d" % record["wall_s"] if record.get("wall_s") is not None else "?")
    if not ok:
        why = []
        if record.get("status") != "finished":
            why.append("the run did not finish (in progress: %s)" % record.get("in_progress"))
        if pytest_rc != 0:
            why.append("pytest exit status %d" % pytest_rc)
        if why:
            detail += " (%s)" % "; ".join(why)
    return "[acceptance] %s: %s; record %s" % ("PASSED" if ok else "FAILED", detail, path), 0 if ok else 1


def main(argv):
    if len(argv) != 3 or argv[0] != "verdict":
        sys.stderr.write("usage: acceptance_record.py verdict RECORD PYTEST_RC\n")
        return 2
    path, pytest_rc = argv[1], int(argv[2])
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError) as err:
        print("[acceptance] FAILED: no record (%s); pytest exit status %d" % (err, pytest_rc))
        return 1
    line, status = verdict(record, pytest_rc, path)
    print(line)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
