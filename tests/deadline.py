# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/test's deadline, which fails loudly instead of skipping.

CI stops a run at 90 minutes and then keeps no result at all. tools/test exports the
time it started (GPUHOST_TEST_STARTED, seconds since the epoch) and a deadline in
seconds from then (GPUHOST_TEST_DEADLINE_S, default 5100; 0 means none), and runs
pytest under ``timeout`` so that the run stops at the deadline. In pytest
(tests/conftest.py):

* a test that would start after the deadline fails in its setup (before any fixture, so
  no lab boots for it), saying the deadline, the time gone and that the run is over
  time: nothing is skipped;
* the SIGTERM that ``timeout`` sends at the deadline fails the test in progress
  (``OverTheDeadline``, pytest's own failure outcome, which no ``except Exception``
  swallows; a subprocess.run in progress kills its command), every test after it then
  fails at its setup in no time, the session's fixtures are torn down (the lab
  stopped), and pytest prints its summary and writes its reports before ``timeout``'s
  SIGKILL. A SIGTERM that lands in pytest's own code between two tests ends the run
  with an internal error instead: the run still fails.

Without GPUHOST_TEST_STARTED, or with a deadline of 0, there is no deadline (tools/acceptance
runs that way)."""

import signal

import pytest

DEFAULT_DEADLINE_S = 5100


class OverTheDeadline(pytest.fail.Exception):
    """The run went past its deadline while a test ran: that test fails."""

    def __init__(self, msg):
        super().__init__(msg, pytrace=False)


class Deadline:
    """``check(test, now)`` says why ``test`` fails for being over time, or None."""

    def __init__(self, started, deadline_s):
        self.started = float(started)
        self.deadline_s = int(deadline_s)

    @classmethod
    def from_environ(cls, environ):
        """The deadline tools/test set, or None when there is none."""
        started = environ.get("GPUHOST_TEST_STARTED", "").strip()
        deadline = environ.get("GPUHOST_TEST_DEADLINE_S", "").strip() or "0"
        try:
            deadline_s = int(deadline)
        except ValueError:
            raise ValueError("GPUHOST_TEST_DEADLINE_S=%r: expected whole seconds (0: no deadline)"
                             % deadline) from None
        if not started or deadline_s <= 0:
            return None
        try:
            return cls(float(started), deadline_s)
        except ValueError:
            raise ValueError("GPUHOST_TEST_STARTED=%r: expected seconds since the epoch (date +%%s)"
                             % started) from None

    def elapsed(self, now):
        return now - self.started

    def remaining(self, now):
        return self.deadline_s - self.elapsed(now)

    def is_over(self, now):
        return self.elapsed(now) > self.deadline_s

    def describe(self, now):
        return ("the run is over time: %d s have gone since tools/test started, past its deadline of "
                "%d s (GPUHOST_TEST_DEADLINE_S; 0 means none)" % (self.elapsed(now), self.deadline_s))

    def check(self, test, now):
        if not self.is_over(now):
            return None
        return "over the deadline: %s started after it; %s. It fails instead of running." % (
            test, self.describe(now))


def install_sigterm_handler(deadline, clock, install=signal.signal):
    """On SIGTERM (``timeout`` at the deadline) raise OverTheDeadline, naming the time
    gone. ``clock`` gives the time when the signal comes."""
    def on_sigterm(signum, frame):
        raise OverTheDeadline("over the deadline (SIGTERM from timeout): " + deadline.describe(clock())
                              + "; this test was stopped where it was, and every test after it fails")
    install(signal.SIGTERM, on_sigterm)
    return on_sigterm


def runtest_setup(deadline, nodeid, now):
    """tests/conftest.py's pytest_runtest_setup, first before the fixtures (a test that
    fails for the deadline boots no lab): fail, never skip, a test that starts past the
    deadline. pytest reports the failure as an error at the test's setup."""
    if deadline is None:
        return
    message = deadline.check(nodeid, now)
    if message:
        pytest.fail(message, pytrace=False)
