# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shipping module_utils Python to the host, for the boot-time helpers (SR-IOV
re-creation, IRQ re-pinning, the NUMA setup) that run the same code as the modules."""

from __future__ import annotations

import ast
import importlib
import importlib.util

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

_PACKAGE = "ansible_collections.gpuhost.kvm.plugins.module_utils"


def gpuhost_imports(source, module_name):
    """The gpuhost.kvm module_utils ``source`` imports, as names below the package
    (``topology``, ``domain.xml``; a package's own name too, for its ``__init__``).

    Read from the syntax tree, so that an import inside a function, a parenthesized name
    list, an ``as`` alias or a relative import is found, and a name in a comment or a
    string is not. ``module_name`` (the full name of the module whose source it is)
    resolves the relative imports."""
    found = set()

    def add(full_name):
        if full_name == _PACKAGE or not full_name.startswith(_PACKAGE + "."):
            return
        parts = full_name[len(_PACKAGE) + 1:].split(".")
        for depth in range(1, len(parts) + 1):   # every package on the way, then the module
            found.add(".".join(parts[:depth]))

    for node in ast.walk(ast.parse(source, module_name)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module_name.rsplit(".", node.level)[0]
                origin = "%s.%s" % (base, node.module) if node.module else base
            else:
                origin = node.module or ""
            add(origin)
            # "from package import name": the name is a submodule or an attribute.
            if origin == _PACKAGE or origin.startswith(_PACKAGE + "."):
                for alias in node.names:
                    candidate = "%s.%s" % (origin, alias.name)
                    if _is_module(candidate):
                        add(candidate)
    return sorted(found)


def _is_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, AttributeError, ValueError):
        return False


# Where a boot helper's Python library lives on the host.
LIBRARY_DIR = "/usr/local/lib/gpuhost/python"


def python_library_files(module_names, dest=LIBRARY_DIR):
    """The sources of gpuhost.kvm module_utils, as {host path: text}, for a boot helper.

    Boot-time helpers (SR-IOV re-creation, IRQ re-pinning) run the same Python as the
    modules: ``module_names`` (names below module_utils such as ``irq_pinning``) and
    every gpuhost.kvm module_utils they import (:func:`gpuhost_imports`), so the set does
    not depend on what else the process has loaded. The sources come from the importer
    that loaded them, which also works inside Ansible's zipped module payload.
    """
    files = {}
    # Each module with every package on its way: the packages of an asked module are
    # shipped even when nothing else in the set imports a module beside it.
    pending = [".".join(parts[:depth]) for parts in (name.split(".") for name in module_names)
               for depth in range(1, len(parts) + 1)]
    seen = set()
    while pending:
        short = pending.pop()
        if short in seen:
            continue
        seen.add(short)
        name = "%s.%s" % (_PACKAGE, short)
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            # Inside a module's payload only what the module imports is there: a helper
            # asked by name alone would fail at boot, so refuse while the module runs.
            raise GpuhostError("cannot ship %s: %s" % (name, err),
                               fix="import %s from the module that ships it, so that its "
                                   "payload carries it" % name) from err
        loader = getattr(module, "__loader__", None)
        source = loader.get_source(name) if loader is not None else None
        if isinstance(source, bytes):
            # Ansible's collection loader (ansible-test, controller-side imports) returns
            # the source as bytes; importlib's file loaders return text.
            source = source.decode("utf-8")
        if source is None:
            raise GpuhostError("cannot read the source of %s" % name,
                               fix="run the module from an installed gpuhost.kvm collection")
        is_package = hasattr(module, "__path__")
        path = name.replace(".", "/") + ("/__init__.py" if is_package else ".py")
        files["%s/%s" % (dest.rstrip("/"), path)] = source
        pending += gpuhost_imports(source, name)
    return dict(sorted(files.items()))


def wrapper_script(module_name, function, dest=LIBRARY_DIR,
                   interpreter="/usr/bin/python3"):
    """A thin executable that runs ``module_name.function(sys.argv[1:])``."""
    return ("#!%s\n"
            "# Installed by gpuhost.kvm; the logic lives in %s.\n"
            "import sys\n"
            "sys.path.insert(0, %r)\n"
            "from %s import %s\n"
            "sys.exit(%s(sys.argv[1:]))\n"
            % (interpreter, module_name, dest, module_name, function, function))
