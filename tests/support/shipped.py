# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The boot helpers a module ships (wrapper scripts and the Python library they run),
tried as the host would run them: from the shipped files alone."""

import re
import subprocess
import sys

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.shipping import LIBRARY_DIR


def wrapper_targets(host, paths):
    """(path, module, function) of each wrapper script at ``paths`` below ``host``'s root,
    as the script names what it runs."""
    found = []
    for path in paths:
        match = re.search(r"^from (\S+) import (\S+)$", host.read_file(path), re.M)
        assert match, "%s names no module to run" % path
        found.append((path, match.group(1), match.group(2)))
    return found


def import_failures(host, paths):
    """[(path, stderr)] of the wrappers whose module does not import from the shipped
    library alone (python -I: no PYTHONPATH, no user site, so nothing else of gpuhost.kvm
    is on the path)."""
    library = host.path(LIBRARY_DIR)
    failures = []
    for path, module, function in wrapper_targets(host, paths):
        proc = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, %r); "
                               "from %s import %s" % (library, module, function)],
                              capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode:
            failures.append((path, proc.stderr[-2000:]))
    return failures
