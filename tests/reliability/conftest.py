# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reliability suite's bookkeeping: every test here is marked ``reliability``, and
the tests count what they tried in a session-wide tally that is written as JSON at the
end of the run (``tools/reliability`` renders it as a table).

The summary goes to $GPUHOST_RELIABILITY_SUMMARY, or tests/output/reliability-summary.json.
"""

import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_SUMMARY = os.path.join(REPO, "tests", "output", "reliability-summary.json")


class Tally:
    """Counts filled in by the tests; each count is bumped where the fact is proven."""

    def __init__(self):
        self.data = {
            "bad_inputs": {"tried": 0, "failed_safely": 0, "changed_host": 0,
                           "by_target": {}},
            "lockout": {"tried": 0, "refused": 0},
            "faults": {"injected": 0, "recovered": 0, "kinds": {}},
            "conflicts": {"tried": 0, "resolved": 0},
            "isolation": {"checks": 0, "held": 0},
        }
        self.used = False

    def bump(self, section, key, amount=1):
        self.used = True
        self.data[section][key] += amount

    def bad_input(self, target, outcome):
        """``outcome``: "tried", "failed_safely" or "changed_host"."""
        self.bump("bad_inputs", outcome)
        kind = target.split(":", 1)[0] if ":" in target else "module"
        per = self.data["bad_inputs"]["by_target"].setdefault(
            kind, {"tried": 0, "failed_safely": 0, "changed_host": 0})
        per[outcome] += 1

    def fault(self, kind, recovered):
        self.bump("faults", "injected")
        per = self.data["faults"]["kinds"].setdefault(kind, {"injected": 0, "recovered": 0})
        per["injected"] += 1
        if recovered:
            self.bump("faults", "recovered")
            per["recovered"] += 1


_TALLY = Tally()


@pytest.fixture(scope="session")
def tally():
    return _TALLY


def pytest_configure(config):
    config.addinivalue_line("markers", "reliability: the reliability suite (tests/reliability)")
    config.addinivalue_line("markers", "lab: needs the QEMU lab of tests/lab (lab/up)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if str(item.fspath).startswith(HERE + os.sep):
            item.add_marker(pytest.mark.reliability)


def pytest_sessionfinish(session, exitstatus):
    if not _TALLY.used:
        return
    path = os.environ.get("GPUHOST_RELIABILITY_SUMMARY") or DEFAULT_SUMMARY
    os.makedirs(os.path.dirname(path), exist_ok=True)
    summary = dict(_TALLY.data, pytest_exit_status=int(exitstatus))
    with open(path, "w") as handle:
        json.dump(summary, handle, indent=2, sort_keys=True)
        handle.write("\n")
