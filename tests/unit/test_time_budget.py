# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/time_budget.py: which lab tests a tools/test run skips for CI's time budget."""

import glob
import os
import re

from time_budget import OTHER_LAB_TEST_SECONDS, SLOW_DAY_SECONDS, TimeBudget

DURATIONS = {"test_converge": 1000, "test_rerun": 300}


def test_a_test_that_ends_within_the_budget_runs():
    budget = TimeBudget(started=1000.0, budget_s=4800, slow_day_seconds=DURATIONS)
    assert budget.check("test_converge", now=1000.0 + 3800) is None      # ends at 4800
    assert budget.check("test_rerun", now=1000.0 + 4400) is None
    assert budget.check("test_small", now=1000.0 + 4800 - OTHER_LAB_TEST_SECONDS) is None


def test_the_first_test_past_the_budget_and_every_one_after_it_are_skipped_and_say_why():
    budget = TimeBudget(started=1000.0, budget_s=4800, slow_day_seconds=DURATIONS)
    reason = budget.check("test_converge", now=1000.0 + 3801)
    assert reason.startswith("time budget: 3801 s of tools/test's 4800 s")
    assert "test_converge, about 1000 s on a slow day" in reason
    assert "GPUHOST_TEST_BUDGET_S=0 runs them all" in reason
    # test_rerun would fit in the time left, but it needs the converge: skipped as well.
    assert budget.check("test_rerun", now=1000.0 + 3802) == reason


def test_the_budget_comes_from_tools_test_or_there_is_none():
    assert TimeBudget.from_environ({}) is None
    assert TimeBudget.from_environ({"GPUHOST_TEST_STARTED": "1700000000"}) is None
    assert TimeBudget.from_environ({"GPUHOST_TEST_STARTED": "1700000000", "GPUHOST_TEST_BUDGET_S": "0"}) is None
    budget = TimeBudget.from_environ({"GPUHOST_TEST_STARTED": "1700000000", "GPUHOST_TEST_BUDGET_S": "4800"})
    assert (budget.started, budget.budget_s, budget.slow_day_seconds) == (1700000000.0, 4800, SLOW_DAY_SECONDS)


def test_every_slow_day_duration_names_a_lab_test():
    lab_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lab")
    names = set()
    for path in glob.glob(os.path.join(lab_dir, "test_*.py")):
        with open(path, encoding="utf-8") as handle:
            names.update(re.findall(r"^def (test_\w+)\(", handle.read(), re.M))
    assert set(SLOW_DAY_SECONDS) <= names, set(SLOW_DAY_SECONDS) - names
