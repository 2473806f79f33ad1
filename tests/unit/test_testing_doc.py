"""docs/testing.md names every GPUHOST_* environment variable that the tools, the lab,
the tests, the benchmarks or the collection read, so a switch documented only in a
comment cannot appear again."""

import os
import re
import subprocess

from helpers import REPO

# Names that are no environment variables: a Python constant, and a variable one unit
# test hands to the shell it runs.
NOT_SWITCHES = {"GPUHOST_IMPORT", "GPUHOST_TEST_CONSOLE"}
SWITCH = re.compile(r"\bGPUHOST_[A-Z0-9_]*[A-Z0-9]\b")


def test_every_gpuhost_switch_is_in_docs_testing():
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                            "tools", "lab", "tests", "bench", "molecule", "roles", "plugins",
                            "playbooks", "inventories", ".ci"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split("\0")
    used = {}
    for name in files:
        path = os.path.join(REPO, name)
        if not name or "fixtures" in name.split("/") or not os.path.isfile(path) or os.path.islink(path):
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except UnicodeDecodeError:
            continue
        for switch in SWITCH.findall(text):
            used.setdefault(switch, name)
    with open(os.path.join(REPO, "docs", "testing.md"), encoding="utf-8") as handle:
        documented = set(SWITCH.findall(handle.read()))
    missing = {s: where for s, where in used.items() if s not in documented and s not in NOT_SWITCHES}
    assert not missing, "undocumented in docs/testing.md: %s" % missing
