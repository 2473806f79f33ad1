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
