"""ansible-test units on Python 3.11 with --venv (tools/quality units): the unit tests in
tests/unit/ run the way collection maintainers run them, from a copy laid out as
ansible_collections/gpuhost/kvm with ansible-test's own pytest configuration and a virtual
environment built from tests/unit/requirements.txt alone.

This is where the lanes run the unit tests (tests/lanes.py leaves tests/unit out of the
host lane while the gates run): each of them is read back from ansible-test's JUnit XML
and becomes an entry of the acceptance record, with its own outcome and duration."""

import os
import re

import gates
from gates import output_of, run_gate
from support.helpers import REPO, ansible_env

import acceptance_record

pytestmark = gates.ENABLED


def _unit_test_files():
    """tests/unit/<layer>/test_*.py that define tests, relative to the repository."""
    found = set()
    for folder, subfolders, names in os.walk(os.path.join(REPO, "tests", "unit")):
        subfolders[:] = [name for name in subfolders if name != "__pycache__"]
        for name in names:
            if name.startswith("test_") and name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as handle:
                    if re.search(r"^\s*def test_", handle.read(), re.MULTILINE):
                        found.add(os.path.relpath(path, REPO))
    return found


def test_ansible_test_units_passes_and_runs_the_unit_tests(request, tmp_path):
    junit_dir = tmp_path / "junit"
    env = ansible_env(GPUHOST_QUALITY_JUNIT_DIR=str(junit_dir))
    # The record and deadline of this lane are not the nested run's.
    for name in ("GPUHOST_ACCEPTANCE_RECORD", "GPUHOST_ACCEPTANCE_JUNITXML"):
        env.pop(name, None)
    proc = run_gate([os.path.join(REPO, "tools", "quality"), "units"], env=env)
    assert proc.returncode == 0, output_of(proc)

    reports = sorted(junit_dir.glob("python*-units.xml")) if junit_dir.is_dir() else []
    assert reports, "ansible-test units left no JUnit XML in tests/output/junit/\n" + output_of(proc)
    cases = [case for path in reports for case in acceptance_record.junit_cases(str(path))]
    not_passed = [case for case in cases if case["outcome"] in ("failed", "error")]
    assert not not_passed, not_passed[:20]
    # Not a silent no-op: every unit test file that defines tests ran, with at least one
    # passing test.
    unit_files = _unit_test_files()
    ran = {case["nodeid"].split("::", 1)[0] for case in cases if case["outcome"] == "passed"}
    assert unit_files <= ran, "unit test files with no passing test under ansible-test: %s" % sorted(unit_files - ran)

    record = request.config.pluginmanager.get_plugin(acceptance_record.PLUGIN_NAME)
    if record is not None:
        within = request.node.nodeid
        for path in reports:
            record.add_nested(within, str(path))
