"""The quality gates (ansible-test sanity and units, ansible-lint, the docs site, the
changelog, the execution environment) as tests, so that tools/test runs them with the
rest and pytest's closing line counts them. Each runs the project's own script in tools/
and shows that script's output when it fails.

GPUHOST_SKIP_QUALITY=1 leaves them out (for a quick local run of the other tests): every
module here sets ``pytestmark = gates.ENABLED``."""

import os
import subprocess

import pytest

from support.helpers import REPO, ansible_env


def left_out(environ=None):
    """GPUHOST_SKIP_QUALITY=1: the gates are left out (tests/lanes.py then runs the unit
    tests in the host lane itself, since the units gate is what runs them otherwise)."""
    return (os.environ if environ is None else environ).get("GPUHOST_SKIP_QUALITY") == "1"


ENABLED = pytest.mark.skipif(left_out(), reason="GPUHOST_SKIP_QUALITY=1")


def run_gate(argv, timeout=1800, env=None, cwd=REPO):
    """Run one gate script and return its CompletedProcess (see output_of)."""
    return subprocess.run(argv, cwd=cwd, env=env or ansible_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)


def output_of(proc, keep=12000):
    text = proc.stdout + proc.stderr
    return text[-keep:]
