# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters that tell whether grub.cfg and the initramfs images reflect the inputs
the iommu role writes: thin wrappers of module_utils boot_config."""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.module_utils import boot_config


class FilterModule(object):

    def filters(self):
        return {
            "grub_generated_args": boot_config.generated_kernel_args,
        }
