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
      - Directory that holds the C(sys/), C(proc/) and C(etc/) trees the module works on.
      - The default V(/) is the running host. Point it at a recorded or generated tree
        (for example a copy of C(/sys) and C(/proc) taken from another machine) to work
        on that tree instead; every read of the module goes below this path.
      - Read-only modules never write anything. Modules that change the host write
        below O(root) too, and skip what only the running host can do (loading kernel
        modules, restarting services) when O(root) is not V(/).
    type: path
    default: /
"""
