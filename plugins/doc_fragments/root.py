# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``root`` option shared by every gpuhost.kvm module that reads sysfs/procfs."""

from __future__ import annotations


class ModuleDocFragment(object):

    DOCUMENTATION = r"""
options:
  root:
    description:
      - Directory that holds the C(sys/) and C(proc/) trees to read.
      - The default V(/) reads the running host. Point it at a recorded or generated
        tree (for example a copy of C(/sys) and C(/proc) taken from another machine) to
        inspect that machine instead; every read of the module goes below this path.
      - Nothing is ever written below O(root).
    type: path
    default: /
"""
