"""Test set-up shared by every test: make the checkout importable as
ansible_collections.gpuhost.kvm, exactly as ansible.cfg makes it visible to Ansible."""

import os
import sys
import time

import pytest

# The tests import what they share from the package ``support`` (tests/support/: one
# REPO, the simulator, the fixture generators, the literal hosts, the helpers), never
# from another test file. ansible-test units imports test files as
# ansible_collections.gpuhost.kvm.tests.unit.* packages, so tests/ is put on the path
# here, for plain pytest and ansible-test alike.
_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from support import REPO  # noqa: E402

COLLECTIONS = os.path.join(REPO, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)


# tools/test's deadline (tests/deadline.py): a test that would start after it fails, and
# the SIGTERM that timeout sends at the deadline ends the run with its summary.
# tools/acceptance's record (tests/acceptance_record.py), when GPUHOST_ACCEPTANCE_RECORD
# names its file.
import acceptance_record  # noqa: E402
import deadline  # noqa: E402

_DEADLINE = deadline.Deadline.from_environ(os.environ)


def pytest_configure(config):
    if _DEADLINE is not None:
        deadline.install_sigterm_handler(_DEADLINE, time.time)
    record = acceptance_record.from_environ(os.environ, REPO)
    if record is not None:
        config.pluginmanager.register(record, acceptance_record.PLUGIN_NAME)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # First, before the fixtures: a test that fails for the deadline boots no lab.
    deadline.runtest_setup(_DEADLINE, item.nodeid, time.time())


@pytest.fixture(params=["venv", "python3.9"])
def module_python(request, monkeypatch, tmp_path):
    """The interpreter the test's modules run with: "venv" leaves the test as it is,
    "python3.9" sets RHEL 9's platform Python (support/py39.py) as
    ansible_python_interpreter for every ansible run the test makes and, at the end,
    checks that the modules support.py39.RUNS names for the test ran on it
    (support.helpers.run_tool passes it on). Returns the interpreter, None for "venv"."""
    if request.param == "venv":
        yield None
        return
    from support import py39
    python = py39.python39()
    log = tmp_path / "py39-starts.log"
    monkeypatch.setenv("GPUHOST_TEST_MODULE_PYTHON", python)
    # Without pipelining the AnsiballZ file is an argument the wrapper logs.
    monkeypatch.setenv("ANSIBLE_PIPELINING", "False")
    monkeypatch.setenv("GPUHOST_PY39_LOG", str(log))
    yield python
    missing = py39.expected_modules(request.node.nodeid) - py39.modules_started(str(log))
    assert not missing, "not run by Python 3.9: %s" % ", ".join(sorted(missing))
