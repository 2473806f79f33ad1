"""ansible-test units on Python 3.11 with --venv (tools/quality units): the unit tests in
tests/unit/ run the way collection maintainers run them, from a copy laid out as
ansible_collections/gpuhost/kvm with ansible-test's own pytest configuration."""

import os
import re

import gates
from gates import output_of, run_gate
from helpers import REPO

pytestmark = gates.ENABLED


def test_ansible_test_units_passes_and_runs_the_unit_tests():
    proc = run_gate([os.path.join(REPO, "tools", "quality"), "units"])
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, output_of(proc)
    passed = re.findall(r"(\d+) passed", text)
    unit_files = [n for n in os.listdir(os.path.join(REPO, "tests", "unit"))
                  if n.startswith("test_") and n.endswith(".py")]
    # Not a silent no-op: at least one test per unit test file ran.
    assert passed and int(passed[-1]) >= len(unit_files), text[-3000:]
