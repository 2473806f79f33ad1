# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module that changes the live host (vfio_bind, sriov_vfs, irq_affinity)
shares: the persistent option and the decide-then-act contract."""

from __future__ import annotations


class ModuleDocFragment(object):

    DOCUMENTATION = r"""
options:
  persistent:
    description:
      - Also make the change survive a reboot. The files this writes are part of the
        change set, so C(--diff) shows them, check mode predicts them and a failed run
        removes them again. The mechanism of each module is described in its notes.
      - C(false) changes only the running kernel.
    type: bool
    default: false
notes:
  - The module first computes every change (kernel attributes and files), then, outside
    check mode, applies them in order. If one fails, the changes already applied are
    undone in reverse order and the failure lists what was rolled back.
  - Unlike the read-only modules, these modules also write below O(root) (sysfs
    attributes, /proc/irq, configuration files), which is how the unit tests drive them
    against a simulated tree.
  - With O(root) other than C(/), nothing runs outside the tree (no modprobe, iproute2
    or systemctl); the result says what was skipped. This is how the unit tests run.
attributes:
  diff_mode:
    details: Shows kernel attributes as C(path = value) lines and every file written.
"""
