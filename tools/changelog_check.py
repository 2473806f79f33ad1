# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fail when a change to plugins/ or roles/ comes without a changelog fragment.

The rule, per commit: a commit that adds, changes or removes anything below plugins/ or
roles/ must also add or change a fragment in changelogs/fragments/ (*.yml or *.yaml), or
change changelogs/changelog.yaml (a release commit, which consumes the fragments).
A change users do not see still gets a fragment, in the ``trivial`` section.

Which commits: those in BASE..HEAD, merges left out (their parents are checked).
BASE is --base, else $GPUHOST_CHANGELOG_BASE, else HEAD~1. CI runs on a fresh clone of
main, where no merge base with a target branch exists, so by default the last commit is
what is checked: commit each change with its fragment. A CI that builds pull requests
sets GPUHOST_CHANGELOG_BASE to the target branch to check every commit of the request.
A commit without a parent (the root) is checked against the empty tree; in a shallow
clone whose HEAD has no parent there is nothing to compare with, which is reported.

--worktree checks the uncommitted changes (staged, unstaged and untracked) the same way,
for use before committing.

Exit status: 0 when every checked change has its fragment, 1 otherwise, 2 on usage or
git errors.
"""

import argparse
import os
import subprocess
import sys

WATCHED = ("plugins/", "roles/")
FRAGMENTS = "changelogs/fragments/"
RELEASE_FILE = "changelogs/changelog.yaml"
FRAGMENT_SUFFIXES = (".yml", ".yaml")
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class GitError(Exception):
    pass


def git(repo, *args):
    proc = subprocess.run(["git", "-C", repo] + list(args), capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise GitError("git %s: %s" % (" ".join(args), proc.stderr.strip()))
    return proc.stdout


def is_fragment(path):
    return path.startswith(FRAGMENTS) and path.endswith(FRAGMENT_SUFFIXES)


def verdict(paths):
    """For one change (the paths it touches): (needs_fragment, has_fragment)."""
    needs = any(p.startswith(WATCHED) for p in paths)
    has = any(is_fragment(p) or p == RELEASE_FILE for p in paths)
    return needs, has


def commit_paths(repo, commit):
    """Paths a commit touched; fragments count only when added or modified."""
    parents = git(repo, "rev-list", "--parents", "-n", "1", commit).split()[1:]
    base = parents[0] if parents else EMPTY_TREE
    out = git(repo, "diff", "--name-status", "--no-renames", base, commit)
    paths = []
    for line in out.splitlines():
        status, path = line.split("\t", 1)
        if is_fragment(path) and status[0] not in "AM":
            continue   # deleting a fragment documents nothing
        paths.append(path)
    return paths


def worktree_paths(repo):
    out = git(repo, "status", "--porcelain=v1", "--untracked-files=all", "--no-renames")
    paths = []
    for line in out.splitlines():
        status, path = line[:2], line[3:]
        if is_fragment(path) and "D" in status:
            continue
        paths.append(path)
    return paths


def commits_to_check(repo, base):
    if base is None:
        try:
            git(repo, "rev-parse", "--verify", "--quiet", "HEAD~1^{commit}")
        except GitError:
            shallow = git(repo, "rev-parse", "--is-shallow-repository").strip() == "true"
            if shallow:
                return None   # nothing to compare with
            return [git(repo, "rev-parse", "HEAD").strip()]   # the root commit
        base = "HEAD~1"
    return git(repo, "rev-list", "--no-merges", "--reverse", "%s..HEAD" % base).split()


def check(repo, base=None, worktree=False, out=sys.stdout):
    """Return the list of offending changes (commit ids, or 'working tree')."""
    offending = []
    if worktree:
        needs, has = verdict(worktree_paths(repo))
        if needs and not has:
            offending.append("working tree")
        return offending
    commits = commits_to_check(repo, base)
    if commits is None:
        out.write("changelog-check: shallow clone without HEAD's parent; nothing to "
                  "compare with (fetch more history or set GPUHOST_CHANGELOG_BASE)\n")
        return offending
    for commit in commits:
        needs, has = verdict(commit_paths(repo, commit))
        if needs and not has:
            offending.append(commit)
    return offending


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--base", default=os.environ.get("GPUHOST_CHANGELOG_BASE") or None,
                        help="check the commits in BASE..HEAD (default HEAD~1)")
    parser.add_argument("--worktree", action="store_true",
                        help="check the uncommitted changes instead of commits")
    args = parser.parse_args(argv)
    try:
        offending = check(args.repo, args.base, args.worktree)
    except GitError as err:
        print("changelog-check: %s" % err, file=sys.stderr)
        return 2
    if not offending:
        print("changelog-check: every change to %s comes with a changelog fragment"
              % " or ".join(WATCHED))
        return 0
    for change in offending:
        what = change if change == "working tree" else git(
            args.repo, "log", "-1", "--format=%h %s", change).strip()
        print("changelog-check: %s changes %s but adds no fragment in %s"
              % (what, " or ".join(WATCHED), FRAGMENTS), file=sys.stderr)
    print("Fix: add changelogs/fragments/<topic>.yml (antsibull-changelog format; use the "
          "'trivial' section for changes users do not see) in the same commit.",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
