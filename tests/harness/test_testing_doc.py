"""docs/testing.md names every GPUHOST_* environment variable that the tools, the lab,
the tests, the benchmarks or the collection read, so a switch documented only in a
comment cannot appear again."""

import os
import re

from support.helpers import REPO

# Names that are no environment variables: a Python constant, and a variable one unit
# test hands to the shell it runs.
NOT_SWITCHES = {"GPUHOST_IMPORT", "GPUHOST_TEST_CONSOLE"}
SWITCH = re.compile(r"\bGPUHOST_[A-Z0-9_]*[A-Z0-9]\b")


def _source_files():
    """The project's files below the folders that read switches (walked, not asked of
    git: ansible-test runs the unit tests on a copy without .git). Not bench/results:
    its records quote what the tests printed, and read nothing."""
    for top in ("tools", "lab", "tests", "bench", "molecule", "roles", "plugins", "playbooks",
                "inventories", ".ci"):
        for folder, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if d not in ("fixtures", "__pycache__", ".run", "output")
                       and os.path.join(folder, d) != os.path.join(REPO, "bench", "results")]
            for name in files:
                path = os.path.join(folder, name)
                if not os.path.islink(path):
                    yield path


def test_every_gpuhost_switch_is_in_docs_testing():
    used = {}
    for path in _source_files():
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (UnicodeDecodeError, OSError):
            continue
        for switch in SWITCH.findall(text):
            used.setdefault(switch, os.path.relpath(path, REPO))
    with open(os.path.join(REPO, "docs", "testing.md"), encoding="utf-8") as handle:
        documented = set(SWITCH.findall(handle.read()))
    missing = {s: where for s, where in used.items() if s not in documented and s not in NOT_SWITCHES}
    assert not missing, "undocumented in docs/testing.md: %s" % missing
