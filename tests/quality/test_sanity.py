"""ansible-test sanity on Python 3.11 with --venv (tools/quality sanity): no Docker here.
The ignore file of this ansible-core (tests/sanity/ignore-2.19.txt) must give a reason
for every line it has."""

import os
import re

import gates
from gates import output_of, run_gate
from support.helpers import REPO

pytestmark = gates.ENABLED


def test_ansible_test_sanity_passes():
    proc = run_gate([os.path.join(REPO, "tools", "quality"), "sanity"])
    errors = [line for line in (proc.stdout + proc.stderr).splitlines()
              if line.startswith(("ERROR:", "FATAL:"))]
    assert proc.returncode == 0, "\n".join(errors) or output_of(proc)


def test_every_sanity_ignore_line_gives_its_reason():
    directory = os.path.join(REPO, "tests", "sanity")
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
        if not re.match(r"ignore-\d+\.\d+\.txt$", name):
            continue
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    # ansible-test's format: "path test # reason"
                    assert re.match(r"^\S+ \S+ # \S", line), \
                        "%s:%d has no reason: %s" % (name, number, line.rstrip())
