# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module that only reads the host (iommu_groups_facts, host_facts) says about
check mode and diff mode."""

from __future__ import annotations


class ModuleDocFragment(object):

    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: The module never changes anything, so check mode runs it unchanged.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
"""
