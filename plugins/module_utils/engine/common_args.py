# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument-spec pieces shared by gpuhost.kvm modules, documented once in
plugins/doc_fragments (``extends_documentation_fragment: gpuhost.kvm.root``)."""

from __future__ import annotations

import copy

ROOT_ARGUMENT_SPEC = {
    "root": {"type": "path", "default": "/"},
}

# What counts as a GPU (pci.GpuSelection.from_options), documented in
# plugins/doc_fragments/gpu_selection.py.
GPU_SELECTION_ARGUMENT_SPEC = {
    "gpu_devices": {"type": "list", "elements": "str", "default": []},
    "gpu_devices_only": {"type": "bool", "default": False},
}


def argument_spec(*parts, **extra):
    """A fresh argument spec made of shared parts plus the module's own options."""
    spec = {}
    for part in parts:
        spec.update(copy.deepcopy(part))
    spec.update(extra)
    return spec
