# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What tests share lives in tests/support/: no test file imports another test file, and
no test computes the repository's path itself (support.REPO is the one)."""

import ast
import os

from support import REPO, TESTS


def _python_files():
    # os.walk without following links, and never into fixtures/ or output/: the recorded
    # sysfs trees there are full of links.
    for folder, subfolders, files in os.walk(TESTS):
        subfolders[:] = [s for s in subfolders if s not in ("fixtures", "output", "__pycache__")]
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(folder, name)


TEST_FILES = sorted(_python_files())


def _imported_modules(path):
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield node.lineno, node.module or ""


def test_the_tree_has_test_files_to_check():
    assert len(TEST_FILES) > 100 and os.path.join(TESTS, "conftest.py") in TEST_FILES


def test_no_test_file_imports_another_test_file():
    found = ["%s:%d imports %s" % (os.path.relpath(path, REPO), line, name)
             for path in TEST_FILES for line, name in _imported_modules(path)
             if name.split(".")[-1].startswith("test_")]
    assert not found, "move what they share into tests/support/:\n" + "\n".join(found)


def test_no_test_computes_the_repository_path_itself():
    triple = "os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))"
    found = []
    for path in TEST_FILES:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.startswith("REPO = ") and triple in line:
                    found.append("%s:%d" % (os.path.relpath(path, REPO), number))
    assert not found, "import REPO from support instead:\n" + "\n".join(found)
