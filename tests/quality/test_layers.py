# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/ in layers that import only downwards, read from the source with
ast (imports inside functions count):

    engine  <-  host  <-  policy  <-  domain, guest  <-  changes, planning

engine is what every module shares; host reads the host and never writes it; policy
decides what may be taken from the host. A package imports its own layer and those
below it, never one beside it unless listed, never one above. No file sits loose at the
top of module_utils/, and nothing imports in a cycle."""

import ast
import os

import pytest
from support import REPO

BASE = os.path.join(REPO, "plugins", "module_utils")
PACKAGE = "ansible_collections.gpuhost.kvm.plugins.module_utils"
# package -> the packages it may import (itself included)
ALLOWED = {
    "engine": {"engine"},
    "host": {"engine", "host"},
    "policy": {"engine", "host", "policy"},
    "domain": {"engine", "host", "policy", "domain"},
    "guest": {"engine", "host", "guest"},
    "changes": {"engine", "host", "policy", "domain", "changes"},
    "planning": {"engine", "host", "policy", "domain", "planning"},
}
# What writes the host: no reader (host/, engine/reader.py) imports these.
WRITERS = {"engine.writer", "engine.changeset", "engine.systemd",
           "engine.shipping"}


def _modules():
    """dotted name below module_utils -> file path, for every Python file there."""
    found = {}
    for folder, subfolders, files in os.walk(BASE):
        subfolders[:] = [s for s in subfolders if s != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, BASE)[:-3].replace(os.sep, ".")
                found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return found


MODULES = _modules()


def _imports(path):
    """The module_utils modules ``path`` imports (a package's member by name counts as
    that member)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    out = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            target = node.module[len(PACKAGE) + 1:]
            names = [target + "." + alias.name if target + "." + alias.name in MODULES or not target
                     else target for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name[len(PACKAGE) + 1:] for alias in node.names
                     if alias.name.startswith(PACKAGE + ".")]
        out.update(name.lstrip(".") for name in names if name)
    return out


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _layer(name):
    return name.split(".")[0]


def test_the_layers_are_the_packages_and_nothing_sits_loose_at_the_top():
    assert set(MODULES) >= set(ALLOWED)
    loose = sorted(name for name in MODULES if "." not in name and name not in ALLOWED and name != "")
    assert loose == [], "put these in a layer's package: %s" % loose


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_itself_and_the_layers_below(layer):
    upward = sorted("%s imports %s" % (name, target)
                    for name, targets in GRAPH.items() if _layer(name) == layer
                    for target in targets if _layer(target) not in ALLOWED[layer])
    assert upward == []


def test_no_reader_imports_a_writer():
    readers = [name for name in MODULES if _layer(name) == "host" or name == "engine.reader"]
    found = sorted("%s imports %s" % (name, target) for name in readers
                   for target in GRAPH[name] if target in WRITERS)
    assert found == []


FACTS_MODULES = sorted(os.path.join(REPO, "plugins", "modules", name)
                       for name in os.listdir(os.path.join(REPO, "plugins", "modules"))
                       if name.endswith("_facts.py"))


@pytest.mark.parametrize("path", FACTS_MODULES, ids=os.path.basename)
def test_a_facts_module_imports_no_module_core_and_no_writer(path):
    """A *_facts module only reads: it builds on host/ and the engine's reader, never on
    a changing module's core (changes/) or on what writes the host."""
    found = sorted(target for target in _imports(path)
                   if _layer(target) == "changes" or target in WRITERS)
    assert found == []


def test_no_module_imports_in_a_cycle():
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(name):      # Tarjan's strongly connected components
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in GRAPH.get(name, ()):
            if target not in MODULES:
                continue
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))
    for name in sorted(MODULES):
        if name not in index:
            visit(name)
    assert cycles == []


def test_the_guard_sees_an_upward_import_and_a_cycle(tmp_path):
    """The reader of imports finds both forms, so the guards above can fail."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from %s.changes import vfio_bind\n"
                       "from %s.host.sysfs import read_text\n" % (PACKAGE, PACKAGE))
    assert _imports(str(planted)) == {"changes.vfio_bind", "host.sysfs"}
