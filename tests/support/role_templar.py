# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role's own Jinja expressions rendered with the collection's filters, as a play renders
them: in a fresh Python process whose ``ansible_collections`` imports go through
ansible's collection loader. A test process has already imported ``ansible_collections``
from the path, and then ansible-core finds no ``gpuhost.kvm.*`` filter."""

import json
import os
import subprocess
import sys

from support import REPO

_SCRIPT = r"""
import json, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]], scan_sys_paths=False)._install()
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
job = json.load(sys.stdin)
variables = dict(job["variables"])
for name in job["templated"]:
    variables[name] = trust_as_template(variables[name])
templar = Templar(loader=DataLoader(), variables=variables)
print(json.dumps([templar.template(trust_as_template(text)) for text in job["expressions"]]))
"""


def collections_path():
    """The folder holding ansible_collections/gpuhost/kvm: the checkout's .collections,
    or the tree ansible-test lays the collection out in."""
    parts = os.path.normpath(REPO).split(os.sep)
    if parts[-3:-1] == ["ansible_collections", "gpuhost"]:
        return os.sep.join(parts[:-3]) or os.sep
    return os.path.join(REPO, ".collections")


def render(expressions, variables, templated=()):
    """Each of ``expressions`` rendered with ``variables``; the names in ``templated``
    are themselves expressions (a task's vars), rendered where they are used."""
    job = {"expressions": list(expressions), "variables": variables, "templated": list(templated)}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, collections_path()], input=json.dumps(job),
                          capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise AssertionError("rendering failed:\n%s" % proc.stderr[-4000:])
    return json.loads(proc.stdout)


OMITTED = "(omitted: the module's default)"


def render_in_process(value, variables):
    """``value`` (a task's argument) rendered with ``variables`` by ansible-core's Templar in
    this process (no collection filter is found here: for expressions of core filters);
    OMITTED where it renders to ``omit``."""
    from ansible.errors import AnsibleValueOmittedError
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    templar = Templar(loader=DataLoader(), variables=variables)
    try:
        return templar.template(trust_as_template(value) if isinstance(value, str) else value)
    except AnsibleValueOmittedError:
        return OMITTED
