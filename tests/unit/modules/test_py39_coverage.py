# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RHEL 9's platform Python is 3.9: every file under plugins/ must parse as 3.9 (ansible-test
sanity here runs its compile test for 3.11 only, tools/quality), and every module must
have a test whose Python 3.9 run (the module_python fixture) executes it."""

import ast
import glob
import os
import re

import pytest

from support import REPO
from support.py39 import RUNS

MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "plugins", "modules", "*.py"))
                 if not p.endswith("__init__.py"))
PLUGIN_FILES = sorted(glob.glob(os.path.join(REPO, "plugins", "**", "*.py"), recursive=True))


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda p: os.path.relpath(p, REPO))
def test_plugin_file_parses_as_python_3_9(path):
    with open(path, encoding="utf-8") as handle:
        ast.parse(handle.read(), path, feature_version=(3, 9))


def test_a_3_9_grammar_feature_is_caught():
    with pytest.raises(SyntaxError):
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=(3, 9))


def test_every_module_has_a_python_3_9_run():
    assert sorted(RUNS) == MODULES


def test_every_python_3_9_run_names_a_test_that_takes_module_python():
    tests = {test for runs in RUNS.values() for test in runs}
    for test in tests:
        path, name = test.split("::")
        with open(os.path.join(REPO, path), encoding="utf-8") as handle:
            source = handle.read()
        match = re.search(r"^def %s\(([^)]*)\)" % re.escape(name), source, re.M)
        assert match, test
        assert "module_python" in match.group(1), test
