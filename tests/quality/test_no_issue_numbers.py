# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""No tracker number stands in for a reason: a comment, docstring or doc that says "see
issue 20" tells a reader nothing once the tracker is gone, so the code and docs state the
reason itself. Every tracked file is read, except the history (changelogs/, bench/results/),
the recorded host data (tests/fixtures/) and this file, whose examples are the pattern.
Another project's bug (owner/repo#N) and any URL stay allowed: they name where a fact comes
from, outside this project."""

import os
import re
import subprocess

import pytest
from support import REPO

LEFT_OUT_DIRECTORIES = ("changelogs/", "bench/results/", "tests/fixtures/")
THIS_FILE = os.path.relpath(os.path.abspath(__file__), REPO).replace(os.sep, "/")

# "issue 20", "Issues 20", "issue #20", "issue-20", "issue20"
ISSUE_NUMBER = re.compile(r"\bissues?[ \t-]*#?[ \t]*\d", re.IGNORECASE)
# Removed from a line before it is matched: URLs and another project's owner/repo#N.
ALLOWED = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+|[\w.-]+/[\w.-]+#\d+")


def issue_number_lines(text):
    """The 1-based numbers of the lines of ``text`` that cite this project's tracker."""
    return [number for number, line in enumerate(text.splitlines(), 1)
            if ISSUE_NUMBER.search(ALLOWED.sub(" ", line))]


def tracked_files():
    """The repository's tracked files that the rule covers, relative to REPO."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                                 check=True).stdout.decode("utf-8")
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip("not a git checkout, no tracked files to read: %s" % error)
    return sorted(path for path in listing.split("\0") if path
                  and not path.startswith(LEFT_OUT_DIRECTORIES) and path != THIS_FILE)


def test_no_tracked_file_cites_an_issue_number():
    found = []
    for path in tracked_files():
        full = os.path.join(REPO, path)
        if os.path.islink(full) or not os.path.isfile(full):
            continue
        with open(full, "rb") as handle:
            data = handle.read()
        if b"\0" in data:
            continue  # binary
        text = data.decode("utf-8", errors="replace")
        found.extend("%s:%d" % (path, number) for number in issue_number_lines(text))
    assert found == [], (
        "these lines cite an issue number; state the reason itself instead "
        "(or drop the reference if it only says where the change came from):\n"
        + "\n".join(found))


@pytest.mark.parametrize("line", [
    "# -- issue 20: one set of validators",
    "Targets (Issue 2): facts core < 100 ms",
    "see issues 20 and 23",
    "fixed in issue #7",
    "the issue-8 converge",
    "issue20",
])
def test_the_check_finds_an_issue_number(line):
    assert issue_number_lines("first line\n" + line + "\n") == [2]


@pytest.mark.parametrize("line", [
    "ansible/ansible#87550 keeps the old loader",
    "https://gitlab.com/libvirt/libvirt/-/issues/123",
    "see https://example.invalid/tracker?issue=42 for the kernel side",
    "an issue with 1G pages",
    "the issue's targets",
    "tissue 5",
])
def test_the_check_allows_other_projects_urls_and_plain_words(line):
    assert issue_number_lines(line) == []
