# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What counts as a GPU: the options shared by every module that tells GPUs apart
(pci.GpuSelection), fed from the inventory's gpuhost_gpu_devices."""

from __future__ import annotations


class ModuleDocFragment(object):

    DOCUMENTATION = r"""
options:
  gpu_devices:
    description:
      - PCI functions that count as GPUs besides the display controllers (classes
        C(0x0300), C(0x0302), C(0x0380)) and processing accelerators (C(0x1200)) that
        always do, unless O(gpu_devices_only) is set.
      - Each entry is a vendor:device ID as C(lspci -nn) prints it (C(10de:2335)) or a
        full PCI address as C(lspci -D) prints it (C(0000:41:00.0)); at most 256
        entries. A bad entry is refused, naming it, before anything is read or changed.
      - Of several selected functions in one slot the lowest is the GPU and the others
        are its companion functions.
      - The roles and playbooks give every module they call with this option the
        inventory's C(gpuhost_gpu_devices), so that they all count the same GPUs.
    type: list
    elements: str
    default: []
  gpu_devices_only:
    description:
      - Count only the functions O(gpu_devices) lists as GPUs, not the display and
        accelerator classes. Needs a non-empty O(gpu_devices).
    type: bool
    default: false
"""
