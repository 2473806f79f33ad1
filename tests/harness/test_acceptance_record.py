# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/acceptance_record.py: the record of a tools/acceptance run, written after every
test's report, and its verdict line. Fake reports and clocks; two throw-away pytest runs
in their own processes, one of them killed halfway."""

import json
import os
import subprocess
import sys
import types

import acceptance_record
from acceptance_record import AcceptanceRecord, outcome_of, verdict

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plain_environ():
    """This process's environment without the pytest plugins ansible-test units asks for
    (PYTEST_PLUGINS), which the throw-away run has no use for."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


def report(nodeid, when, outcome, duration=1.0, wasxfail=None):
    fake = types.SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, duration=duration)
    if wasxfail is not None:
        fake.wasxfail = wasxfail
    return fake


def phases(*outcomes):
    """The outcome after each of the phases given as (when, outcome)."""
    current, seen = None, []
    for when, outcome in outcomes:
        current = outcome_of(current, report("t", when, outcome))
        seen.append(current)
    return seen


def test_outcome_per_phase():
    assert phases(("setup", "passed"), ("call", "passed"), ("teardown", "passed")) == [None, "passed", "passed"]
    assert phases(("setup", "passed"), ("call", "failed"), ("teardown", "passed"))[-1] == "failed"
    assert phases(("setup", "failed"), ("teardown", "passed")) == ["error", "error"]
    assert phases(("setup", "skipped"), ("teardown", "passed")) == ["skipped", "skipped"]
    assert phases(("setup", "passed"), ("call", "skipped"), ("teardown", "passed"))[-1] == "skipped"
    assert phases(("setup", "passed"), ("call", "passed"), ("teardown", "failed"))[-1] == "error"
    assert phases(("setup", "passed"), ("call", "failed"), ("teardown", "failed"))[-1] == "failed"
    # an expected failure proves nothing: pytest reports it as skipped with wasxfail
    assert outcome_of(None, report("t", "call", "skipped", wasxfail="")) == "skipped"


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def read(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def test_the_record_is_rewritten_after_every_report_and_finished_at_the_end(tmp_path):
    path = str(tmp_path / "results" / "acceptance-20261201T1320Z.json")
    clock = Clock(1764595200.0)            # 2025-12-01T13:20:00Z
    record = AcceptanceRecord(path, started=clock.now, command="tools/acceptance -x", clock=clock,
                              static={"commit": "abc", "dirty": False, "qemu_version": "QEMU emulator version 9.2.0"})
    record.pytest_sessionstart(session=None)
    assert read(path)["status"] == "running" and read(path)["tests"] == []

    record.pytest_runtest_logstart("tests/unit/test_a.py::test_ok", ("", 0, ""))
    assert read(path)["in_progress"] == "tests/unit/test_a.py::test_ok"
    for when, outcome, duration in (("setup", "passed", 0.25), ("call", "passed", 2.0), ("teardown", "passed", 0.25)):
        record.pytest_runtest_logreport(report("tests/unit/test_a.py::test_ok", when, outcome, duration))
    clock.now += 100
    record.pytest_runtest_logstart("tests/lab/test_b.py::test_fails", ("", 0, ""))
    record.pytest_runtest_logreport(report("tests/lab/test_b.py::test_fails", "setup", "passed", 0.5))
    record.pytest_runtest_logreport(report("tests/lab/test_b.py::test_fails", "call", "failed", 30.0))
    # what a run killed now leaves behind: the test it was in, the time so far
    halfway = read(path)
    assert halfway["status"] == "running" and halfway["ended"] is None and halfway["wall_s"] == 100.0
    assert halfway["in_progress"] == "tests/lab/test_b.py::test_fails"
    assert halfway["counts"] == {"passed": 1, "failed": 1, "skipped": 0, "error": 0}
    record.pytest_runtest_logreport(report("tests/lab/test_b.py::test_fails", "teardown", "passed", 0.5))
    record.pytest_runtest_logreport(report("tests/lab/test_b.py::test_skip", "setup", "skipped", 0.0))
    record.pytest_runtest_logreport(report("tests/lab/test_b.py::test_skip", "teardown", "passed", 0.0))
    clock.now += 7012 - 100
    record.pytest_sessionfinish(session=None, exitstatus=1)

    done = read(path)
    assert done["status"] == "finished" and done["pytest_exitstatus"] == 1
    assert (done["started"], done["ended"], done["wall_s"]) == ("2025-12-01T13:20:00Z", "2025-12-01T15:16:52Z", 7012.0)
    assert (done["command"], done["commit"], done["dirty"]) == ("tools/acceptance -x", "abc", False)
    assert done["qemu_version"] == "QEMU emulator version 9.2.0"
    assert done["in_progress"] is None
    assert done["tests"] == [
        {"nodeid": "tests/unit/test_a.py::test_ok", "outcome": "passed", "duration_s": 2.5},
        {"nodeid": "tests/lab/test_b.py::test_fails", "outcome": "failed", "duration_s": 31.0},
        {"nodeid": "tests/lab/test_b.py::test_skip", "outcome": "skipped", "duration_s": 0.0}]
    assert done["counts"] == {"passed": 1, "failed": 1, "skipped": 1, "error": 0}
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]      # no temporary file left


NESTED_JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest">
<testcase classname="tests.unit.test_cpuset" name="test_plain[0-3]" file="tests/unit/test_cpuset.py" line="12" time="0.005" />
<testcase classname="tests.unit.test_cpuset.TestStride" name="test_stride" file="tests/unit/test_cpuset.py" time="0.25" />
<testcase classname="tests.unit.test_ledger" name="test_fails" file="tests/unit/test_ledger.py" time="1.5"><failure message="x">x</failure></testcase>
<testcase classname="tests.unit.test_ledger" name="test_errs" file="tests/unit/test_ledger.py" time="0"><error message="y">y</error></testcase>
<testcase classname="tests.unit.test_ledger" name="test_skips" file="tests/unit/test_ledger.py" time="0"><skipped message="z"/></testcase>
<testcase classname="elsewhere.mod" name="test_no_file" time="0.1" />
</testsuite></testsuites>"""


def test_a_nested_runs_junit_becomes_entries_of_the_record_with_node_ids(tmp_path):
    # ansible-test units' JUnit XML (tests/quality/test_units.py): the unit tests run there.
    junit = tmp_path / "python3.11-controller-units.xml"
    junit.write_text(NESTED_JUNIT)
    assert acceptance_record.junit_cases(str(junit)) == [
        {"nodeid": "tests/unit/test_cpuset.py::test_plain[0-3]", "outcome": "passed", "duration_s": 0.005},
        {"nodeid": "tests/unit/test_cpuset.py::TestStride::test_stride", "outcome": "passed", "duration_s": 0.25},
        {"nodeid": "tests/unit/test_ledger.py::test_fails", "outcome": "failed", "duration_s": 1.5},
        {"nodeid": "tests/unit/test_ledger.py::test_errs", "outcome": "error", "duration_s": 0.0},
        {"nodeid": "tests/unit/test_ledger.py::test_skips", "outcome": "skipped", "duration_s": 0.0},
        {"nodeid": "elsewhere.mod::test_no_file", "outcome": "passed", "duration_s": 0.1}]

    path = str(tmp_path / "host.json")
    record = AcceptanceRecord(path, started=0.0, command="x", clock=Clock(1.0),
                              static={"junitxml": str(tmp_path / "host.xml")})
    gate = "tests/quality/test_units.py::test_ansible_test_units_passes_and_runs_the_unit_tests"
    assert record.add_nested(gate, str(junit)) == 6
    written = read(path)
    assert written["counts"] == {"passed": 3, "failed": 1, "skipped": 1, "error": 1}
    assert {test["within"] for test in written["tests"]} == {gate}
    assert written["nested_junitxml"] == [str(tmp_path / "host.nested-1.xml")]
    assert (tmp_path / "host.nested-1.xml").read_text() == NESTED_JUNIT


def test_a_module_that_fails_to_import_is_an_error_in_the_record(tmp_path):
    path = str(tmp_path / "r.json")
    record = AcceptanceRecord(path, started=0.0, command="x", clock=Clock(1.0))
    record.pytest_collectreport(types.SimpleNamespace(nodeid="tests/unit/test_broken.py", outcome="failed"))
    record.pytest_collectreport(types.SimpleNamespace(nodeid="tests/unit/test_fine.py", outcome="passed"))
    assert read(path)["tests"] == [{"nodeid": "tests/unit/test_broken.py", "outcome": "error", "duration_s": 0.0}]


class FakeLab:
    def __init__(self, answers):
        self.answers = list(answers)
        self.commands = []

    def ssh(self, command, check=True, timeout=300):
        self.commands.append(command)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return types.SimpleNamespace(returncode=answer[0], stdout=answer[1], stderr=answer[2])


def lab_item(lab):
    return types.SimpleNamespace(fixturenames=["lab", "tmp_path"], funcargs={"lab": lab})


def test_the_lab_kernel_is_read_once_through_the_first_lab_test_that_can(tmp_path):
    record = AcceptanceRecord(str(tmp_path / "r.json"), started=0.0, command="x", clock=Clock(1.0))
    assert record.data["lab_kernel"] is None and "no lab test has run yet" in record.data["lab_kernel_unavailable"]
    call = types.SimpleNamespace(when="call")
    lab = FakeLab([(255, "", "Connection refused"), (0, "6.1.0-28-amd64\n", "")])
    # not a lab test, not the call phase: nothing read
    record.pytest_runtest_makereport(types.SimpleNamespace(fixturenames=["tmp_path"], funcargs={}), call)
    record.pytest_runtest_makereport(lab_item(lab), types.SimpleNamespace(when="setup"))
    assert lab.commands == []
    record.pytest_runtest_makereport(lab_item(lab), call)
    assert record.data["lab_kernel"] is None
    assert record.data["lab_kernel_unavailable"] == "uname -r in the lab: rc=255 Connection refused"
    record.pytest_runtest_makereport(lab_item(lab), call)
    assert record.data["lab_kernel"] == "6.1.0-28-amd64" and "lab_kernel_unavailable" not in record.data
    record.pytest_runtest_makereport(lab_item(lab), call)
    assert lab.commands == ["uname -r", "uname -r"]


def test_a_lab_that_cannot_be_read_leaves_a_reason_not_a_failure():
    kernel, why = acceptance_record.lab_kernel_of(lab_item(FakeLab([OSError("ssh: not found")])))
    assert kernel is None and why == "uname -r in the lab failed: ssh: not found"
    kernel, why = acceptance_record.lab_kernel_of(types.SimpleNamespace(fixturenames=["lab"], funcargs={}))
    assert kernel is None and why == "the lab fixture was not set up"


def test_the_commit_and_qemu_are_recorded_or_say_why_not(tmp_path):
    assert acceptance_record.git_commit(str(tmp_path))["commit"] is None
    assert "git rev-parse HEAD" in acceptance_record.git_commit(str(tmp_path))["commit_unavailable"]
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "f").write_text("1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "f"], ["commit", "-q", "-m", "x"]):
        subprocess.run(git + args, check=True, capture_output=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert acceptance_record.git_commit(str(repo)) == {"commit": head, "dirty": False}
    (repo / "bench" / "results").mkdir(parents=True)
    (repo / "bench" / "results" / "acceptance-20261201T2131Z.json").write_text("{}\n")
    assert acceptance_record.git_commit(str(repo)) == {"commit": head, "dirty": False}
    (repo / "new").write_text("untracked\n")
    assert acceptance_record.git_commit(str(repo)) == {"commit": head, "dirty": True}
    qemu = acceptance_record.qemu_version()
    assert (qemu["qemu_version"] or "").startswith("QEMU emulator version") or qemu["qemu_version_unavailable"]


def test_verdict_line():
    finished = {"status": "finished", "wall_s": 7012.4,
                "counts": {"passed": 912, "failed": 0, "skipped": 0, "error": 0}}
    assert verdict(finished, 0, "bench/results/acceptance-20261201T1320Z.json") == (
        "[acceptance] PASSED: 912 passed, 0 failed, 0 skipped, 0 errors in 7012 s; "
        "record bench/results/acceptance-20261201T1320Z.json", 0)
    failed = dict(finished, counts={"passed": 910, "failed": 1, "skipped": 0, "error": 1})
    line, status = verdict(failed, 1, "r.json")
    assert status == 1 and line.startswith("[acceptance] FAILED: 910 passed, 1 failed, 0 skipped, 1 errors")
    assert "pytest exit status 1" in line
    interrupted = dict(finished, status="running", in_progress="tests/lab/t.py::test_converge")
    line, status = verdict(interrupted, 0, "r.json")
    assert status == 1 and "the run did not finish (in progress: tests/lab/t.py::test_converge)" in line
    # pytest failed without a failed test (no tests collected, an internal error)
    assert verdict(finished, 5, "r.json")[1] == 1


def test_verdict_without_a_record(tmp_path, capsys):
    assert acceptance_record.main(["verdict", str(tmp_path / "missing.json"), "2"]) == 1
    assert capsys.readouterr().out.startswith("[acceptance] FAILED: no record (")
    assert acceptance_record.main(["nonsense"]) == 2


def _throwaway_run(tmp_path, test_source):
    """A pytest run in its own process with the plugin registered as tests/conftest.py
    registers it; returns (process, record path)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        "import os, sys\nsys.path.insert(0, %r)\nimport acceptance_record\n\n"
        "def pytest_configure(config):\n"
        "    record = acceptance_record.from_environ(os.environ, os.getcwd())\n"
        "    if record is not None:\n"
        "        config.pluginmanager.register(record, 'gpuhost-acceptance-record')\n" % TESTS_DIR)
    (tmp_path / "test_some.py").write_text(test_source)
    path = tmp_path / "out" / "acceptance-x.json"
    env = dict(_plain_environ(), GPUHOST_ACCEPTANCE_RECORD=str(path), GPUHOST_ACCEPTANCE_COMMAND="tools/acceptance -k some",
               GPUHOST_TEST_STARTED="1764595200")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_some.py"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc, path


def test_a_pytest_run_writes_the_record(tmp_path):
    proc, path = _throwaway_run(tmp_path, (
        "import pytest\n\n\n@pytest.fixture\ndef broken():\n    raise RuntimeError('no')\n\n\n"
        "def test_ok():\n    pass\n\n\ndef test_bad():\n    assert False\n\n\n"
        "def test_error(broken):\n    pass\n\n\ndef test_skip():\n    pytest.skip('why')\n"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    record = read(path)
    assert record["status"] == "finished" and record["pytest_exitstatus"] == 1
    assert record["command"] == "tools/acceptance -k some" and record["started"] == "2025-12-01T13:20:00Z"
    assert record["pytest_args"] == ["-p", "no:cacheprovider", "test_some.py"]
    assert record["commit"] is None and record["commit_unavailable"]     # tmp_path is no git checkout
    assert {t["nodeid"]: t["outcome"] for t in record["tests"]} == {
        "test_some.py::test_ok": "passed", "test_some.py::test_bad": "failed",
        "test_some.py::test_error": "error", "test_some.py::test_skip": "skipped"}
    assert record["counts"] == {"passed": 1, "failed": 1, "skipped": 1, "error": 1}
    assert record["lab_kernel"] is None and record["lab_kernel_unavailable"] == "no test of this run used the lab"


def test_a_killed_run_leaves_what_ran_and_the_test_it_was_in(tmp_path):
    proc, path = _throwaway_run(tmp_path, (
        "import os, signal\n\n\ndef test_first():\n    pass\n\n\n"
        "def test_killed():\n    os.kill(os.getpid(), signal.SIGKILL)\n\n\ndef test_never():\n    pass\n"))
    assert proc.returncode == -9, proc.stdout + proc.stderr
    record = read(path)
    assert record["status"] == "running" and record["ended"] is None
    assert record["in_progress"] == "test_some.py::test_killed"
    assert [(t["nodeid"], t["outcome"]) for t in record["tests"]] == [
        ("test_some.py::test_first", "passed"), ("test_some.py::test_killed", None)]
    line, status = verdict(record, 137, str(path))
    assert status == 1 and "in progress: test_some.py::test_killed" in line


def test_the_toolchain_is_the_ansible_core_this_process_imports():
    from ansible.release import __version__
    toolchain = acceptance_record.toolchain()
    assert toolchain["ansible_core_version"] == __version__
    assert toolchain["python_version"] == "%d.%d.%d" % sys.version_info[:3]
