# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Links planted where a module keeps its state file: ``plant`` puts one there,
``refused`` runs the module and checks that it refuses and writes nothing, ``_options``
reads a module's argument spec."""

import os

import pytest

from support.sysfs_sim import run_module, snapshot

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError


def _options(module_file, args):
    from .module_args import patch_module_args
    with patch_module_args(args):
        return set(module_file.build_module().argument_spec)


def refused(sim, module_file, cls, args):
    args = dict(args, root=sim.root)
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        run_module(module_file, cls, args, sim)
    assert snapshot(sim.root) == before and sim.writes == []
    err = info.value
    assert err.field in _options(module_file, args), err.message
    assert err.message.count("Fix:") == 1, err.message
    return err


def plant(sim, host_path, text="{not json"):
    """A link at ``host_path`` to a file beside the root whose content, if it were read,
    would give another error than the link's."""
    outside = os.path.join(os.path.dirname(sim.root), "outside-%d" % len(os.listdir(
        os.path.dirname(sim.root))))
    with open(outside, "w") as handle:
        handle.write(text)
    full = sim.path(host_path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    if os.path.lexists(full):
        os.unlink(full)
    os.symlink(outside, full)
    return outside
