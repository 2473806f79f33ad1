"""tools/check, the fast gates outside the tiers: it lists what each gate runs, refuses
an unknown gate, and its shellcheck gate finds the shell scripts of lab/ and tools/ and
the roles' shell templates, renders the templates' Jinja, and fails on a warning.

The shellcheck gate runs here on a throw-away tree holding a copy of tools/check (it
works on the tree it sits in), so the proof does not depend on the state of the real
scripts; tools/check itself runs every gate on the real tree."""

import os
import shutil
import subprocess

import pytest

import gates
from support.helpers import REPO

pytestmark = gates.ENABLED

CHECK = os.path.join(REPO, "tools", "check")
VENV = os.environ.get("GPUHOST_VENV", os.path.join(REPO, ".venv"))


def run(argv, cwd=REPO):
    env = dict(os.environ, GPUHOST_VENV=VENV)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_list_names_every_gate_and_the_lint_command_of_the_lint_test():
    proc = run([CHECK, "--list"])
    assert proc.returncode == 0, proc.stderr
    gates_listed = [line.split()[0] for line in proc.stdout.splitlines()]
    assert gates_listed == ["lint", "shellcheck", "sanity", "changelog"]
    assert ("ansible-lint --offline --nocolor -f pep8 --profile production "
            "roles playbooks site.yml molecule") in proc.stdout
    assert "tools/quality sanity --test pep8 --test pylint" in proc.stdout
    assert "tools/changelog-check" in proc.stdout


def test_an_unknown_gate_is_a_usage_error():
    proc = run([CHECK, "pep9"])
    assert proc.returncode == 2
    assert "unknown gate 'pep9'" in proc.stderr


def _tree(tmp_path, lab_script, template):
    """A repository-shaped tree: tools/check, a tools/setup that does nothing, one lab
    script, one sourced file, a Python file (not shell) and one role template."""
    (tmp_path / "tools").mkdir()
    shutil.copy(CHECK, tmp_path / "tools" / "check")
    setup = tmp_path / "tools" / "setup"
    setup.write_text("#!/bin/sh\nexit 0\n")
    setup.chmod(0o755)
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "up").write_text(lab_script)
    (tmp_path / "lab" / "lib.sh").write_text("# shellcheck shell=bash\nlab_x=1\nexport lab_x\n")
    (tmp_path / "lab" / "watchdog.py").write_text("#!/usr/bin/env python3\nx = $1\n")
    templates = tmp_path / "roles" / "numa" / "templates"
    templates.mkdir(parents=True)
    (templates / "helper.sh.j2").write_text(template)
    (templates / "unit.service.j2").write_text("[Service]\nExecStart={{ x }}\n")
    return tmp_path


CLEAN_SCRIPT = "#!/usr/bin/env bash\nset -eu\ncd \"$(dirname \"$0\")\" || exit 1\necho ok\n"
CLEAN_TEMPLATE = ("#!/bin/sh\n# {# a Jinja comment #}\nconf=${1:-{{ __numa_conf }}}\n"
                  "{% for node in nodes %}\necho \"{{ node }}\" \"$conf\"\n{% endfor %}\n")


def test_the_shellcheck_gate_passes_on_clean_scripts_and_rendered_templates(tmp_path):
    tree = _tree(tmp_path, CLEAN_SCRIPT, CLEAN_TEMPLATE)
    proc = run([str(tree / "tools" / "check"), "shellcheck"], cwd=tree)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "4 scripts, 1 templates" in out     # tools/check, tools/setup, lab/up, lab/lib.sh
    assert "lab/watchdog.py" not in out
    assert "roles/numa/templates/helper.sh.j2" in out
    assert "unit.service.j2" not in out
    assert out.rstrip().splitlines()[-1].startswith("[check] PASSED: all 1 gates")


@pytest.mark.parametrize("where", ["script", "template"])
def test_the_shellcheck_gate_fails_on_a_warning_and_names_the_file(tmp_path, where):
    broken = "#!/bin/sh\nlocal x=1\necho \"$x\"\n"      # SC3043/SC2168: local outside a function
    tree = _tree(tmp_path, broken if where == "script" else CLEAN_SCRIPT,
                 broken if where == "template" else CLEAN_TEMPLATE)
    proc = run([str(tree / "tools" / "check"), "shellcheck"], cwd=tree)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    name = "lab/up" if where == "script" else "roles/numa/templates/helper.sh.j2"
    assert "In %s line 2" % name in out
    assert out.rstrip().splitlines()[-1].startswith(
        "[check] FAILED: 1 of 1 gates (shellcheck)")
