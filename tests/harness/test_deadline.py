# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/deadline.py: tools/test's deadline fails a test that starts after it, loudly,
and turns timeout's SIGTERM into a failure of the test in progress that names it. Clock values are passed
in: nothing sleeps, nothing is timed."""

import os
import signal
import subprocess
import sys
import time

import pytest

from deadline import DEFAULT_DEADLINE_S, Deadline, OverTheDeadline, install_sigterm_handler, runtest_setup

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plain_environ():
    """This process's environment without the pytest plugins ansible-test units asks for
    (PYTEST_PLUGINS), which the throw-away run has no use for."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


def test_a_test_that_starts_within_the_deadline_runs():
    deadline = Deadline(started=1000.0, deadline_s=5100)
    assert deadline.check("tests/unit/test_x.py::test_a", now=1000.0) is None
    assert deadline.check("tests/unit/test_x.py::test_a", now=1000.0 + 5100) is None
    assert deadline.remaining(now=1000.0 + 5000) == 100


def test_a_test_that_starts_after_the_deadline_fails_saying_the_deadline_and_the_time_gone():
    deadline = Deadline(started=1000.0, deadline_s=5100)
    message = deadline.check("tests/lab/test_site_on_lab.py::test_second_run_changes_nothing",
                             now=1000.0 + 5160.7)
    assert message.startswith("over the deadline: tests/lab/test_site_on_lab.py::"
                              "test_second_run_changes_nothing started after it")
    assert "5160 s have gone since tools/test started, past its deadline of 5100 s" in message
    assert "the run is over time" in message
    assert "GPUHOST_TEST_DEADLINE_S" in message
    # every later test as well: nothing is skipped
    assert deadline.check("tests/lab/test_x.py::test_b", now=1000.0 + 6000).startswith("over the deadline")


def test_the_deadline_comes_from_tools_test_or_there_is_none():
    assert DEFAULT_DEADLINE_S == 5100
    assert Deadline.from_environ({}) is None
    assert Deadline.from_environ({"GPUHOST_TEST_STARTED": "1700000000"}) is None
    assert Deadline.from_environ({"GPUHOST_TEST_DEADLINE_S": "5100"}) is None
    assert Deadline.from_environ({"GPUHOST_TEST_STARTED": "1700000000", "GPUHOST_TEST_DEADLINE_S": "0"}) is None
    deadline = Deadline.from_environ({"GPUHOST_TEST_STARTED": "1700000000", "GPUHOST_TEST_DEADLINE_S": "5100"})
    assert (deadline.started, deadline.deadline_s) == (1700000000.0, 5100)


def test_a_malformed_deadline_is_an_error_that_names_the_variable():
    with pytest.raises(ValueError, match="GPUHOST_TEST_DEADLINE_S='85m'"):
        Deadline.from_environ({"GPUHOST_TEST_STARTED": "1700000000", "GPUHOST_TEST_DEADLINE_S": "85m"})
    with pytest.raises(ValueError, match="GPUHOST_TEST_STARTED='yesterday'"):
        Deadline.from_environ({"GPUHOST_TEST_STARTED": "yesterday", "GPUHOST_TEST_DEADLINE_S": "5100"})


def test_sigterm_at_the_deadline_fails_the_test_in_progress_naming_it():
    installed = {}
    deadline = Deadline(started=1000.0, deadline_s=5100)
    handler = install_sigterm_handler(deadline, clock=lambda: 1000.0 + 5101,
                                      install=installed.__setitem__)
    assert installed == {signal.SIGTERM: handler}
    with pytest.raises(OverTheDeadline) as caught:
        handler(signal.SIGTERM, None)
    # pytest's own failure outcome: the test in progress fails, and no "except Exception" in
    # the code under test swallows it
    assert isinstance(caught.value, pytest.fail.Exception) and not isinstance(caught.value, Exception)
    assert caught.value.pytrace is False
    assert "over the deadline (SIGTERM from timeout)" in str(caught.value)
    assert "5101 s have gone since tools/test started, past its deadline of 5100 s" in str(caught.value)


def test_the_setup_hook_fails_a_late_test_and_lets_a_timely_one_run():
    deadline = Deadline(started=1000.0, deadline_s=5100)
    runtest_setup(None, "t.py::test_a", now=1e12)                 # no deadline
    runtest_setup(deadline, "t.py::test_a", now=1000.0 + 10)
    with pytest.raises(pytest.fail.Exception, match="over the deadline: t.py::test_a started after it"):
        runtest_setup(deadline, "t.py::test_a", now=1000.0 + 5101)


def test_a_pytest_run_past_the_deadline_fails_its_tests_before_their_fixtures(tmp_path):
    """The hook in a throw-away pytest run (its own process) whose clock started two hours
    ago: the test fails at its setup, before its fixture, and nothing is skipped."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        "import os, sys, time\nimport pytest\nsys.path.insert(0, %r)\nimport deadline\n"
        "_D = deadline.Deadline.from_environ(os.environ)\n\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_runtest_setup(item):\n"
        "    deadline.runtest_setup(_D, item.nodeid, time.time())\n" % TESTS_DIR)
    (tmp_path / "test_late.py").write_text(
        "import pytest\n\n\n@pytest.fixture\ndef booted():\n"
        "    raise AssertionError('a fixture ran past the deadline')\n\n\n"
        "def test_late(booted):\n    pass\n\n\ndef test_later():\n    pass\n")
    env = dict(_plain_environ(), GPUHOST_TEST_STARTED=str(int(time.time()) - 7200), GPUHOST_TEST_DEADLINE_S="5100")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", "test_late.py"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "2 errors" in out and "passed" not in out and "skipped" not in out, out
    assert "over the deadline: test_late.py::test_late started after it" in out, out
    assert "over the deadline: test_late.py::test_later started after it" in out, out
    assert "past its deadline of 5100 s" in out
    assert "a fixture ran past the deadline" not in out
