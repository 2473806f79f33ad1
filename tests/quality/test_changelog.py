"""Changelog: the fragments lint with antsibull-changelog, a release can be built from
them, and tools/changelog-check enforces one fragment per change to plugins/ or roles/.
The rule is tested on throw-away git repositories, then applied to this one."""

import os
import subprocess

import pytest

import gates
from gates import output_of, run_gate
from support.helpers import BIN, REPO

pytestmark = gates.ENABLED

CHECK = os.path.join(REPO, "tools", "changelog-check")


def test_fragments_lint():
    proc = run_gate([os.path.join(BIN, "antsibull-changelog"), "lint"])
    assert proc.returncode == 0, output_of(proc)


def test_release_notes_build_from_the_fragments(tmp_path):
    farm = subprocess.run([os.path.join(REPO, "tools", "quality"), "farm", str(tmp_path),
                           "tests/", "lab/", "bench/"], capture_output=True, text=True,
                          check=True).stdout.strip()
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"],
               ANSIBLE_COLLECTIONS_PATH=str(tmp_path))
    proc = subprocess.run([os.path.join(BIN, "antsibull-changelog"), "release",
                           "--version", "0.1.0", "--date", "2026-01-01"],
                          cwd=farm, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = open(os.path.join(farm, "CHANGELOG.rst"), encoding="utf-8").read()
    assert "v0.1.0" in notes
    assert "gpuhost.kvm.vfio_bind" in notes            # modules found by the tool itself
    assert "New Roles" in notes and "New Playbooks" in notes


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo)] + list(args), check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                            GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com"))


def commit(repo, message, files):
    for path, text in files.items():
        full = repo / path
        full.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            full.unlink()
        else:
            full.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def check(repo, *args):
    return subprocess.run(["python3", os.path.join(REPO, "tools", "changelog_check.py"),
                           "--repo", str(repo)] + list(args),
                          capture_output=True, text=True, check=False)


@pytest.fixture()
def repo(tmp_path):
    git(tmp_path, "init", "-q")
    commit(tmp_path, "root", {"plugins/modules/a.py": "a\n",
                              "changelogs/fragments/first.yml": "minor_changes: [a]\n"})
    return tmp_path


def test_plugin_change_without_fragment_fails_and_names_the_commit(repo):
    commit(repo, "change a quietly", {"plugins/modules/a.py": "b\n"})
    proc = check(repo)
    assert proc.returncode == 1
    assert "change a quietly changes plugins/ or roles/ but adds no fragment" in proc.stderr


def test_role_change_with_its_fragment_passes(repo):
    commit(repo, "tune a role", {"roles/numa/tasks/main.yml": "---\n",
                                 "changelogs/fragments/numa.yml": "trivial: [numa]\n"})
    assert check(repo).returncode == 0


def test_changes_elsewhere_need_no_fragment(repo):
    commit(repo, "docs", {"README.md": "x\n", "tests/unit/test_x.py": "x\n"})
    assert check(repo).returncode == 0


def test_deleting_a_fragment_is_not_a_fragment(repo):
    commit(repo, "sneaky", {"plugins/modules/a.py": "c\n",
                            "changelogs/fragments/first.yml": None})
    assert check(repo).returncode == 1


def test_release_commit_counts(repo):
    commit(repo, "release", {"plugins/modules/a.py": "d\n",
                             "changelogs/changelog.yaml": "releases: {}\n",
                             "changelogs/fragments/first.yml": None})
    assert check(repo).returncode == 0


def test_base_checks_every_commit_of_the_range(repo):
    commit(repo, "good", {"plugins/x.py": "1\n", "changelogs/fragments/x.yml": "trivial: [x]\n"})
    commit(repo, "bad", {"plugins/x.py": "2\n"})
    commit(repo, "good again", {"plugins/x.py": "3\n",
                                "changelogs/fragments/y.yml": "trivial: [y]\n"})
    assert check(repo).returncode == 0              # default: the last commit only
    proc = check(repo, "--base", "HEAD~3")
    assert proc.returncode == 1 and " bad changes " in proc.stderr


def test_worktree_mode_checks_uncommitted_changes(repo):
    (repo / "plugins" / "modules" / "a.py").write_text("dirty\n")
    assert check(repo, "--worktree").returncode == 1
    (repo / "changelogs" / "fragments" / "dirty.yml").write_text("trivial: [dirty]\n")
    assert check(repo, "--worktree").returncode == 0


def test_this_repository_last_commit_has_its_fragment():
    # A worktree's .git is a file, a clone's a folder: either has the history.
    if not os.path.exists(os.path.join(REPO, ".git")):
        pytest.skip("not a git checkout (an installed collection): no history to check")
    proc = subprocess.run([CHECK], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
