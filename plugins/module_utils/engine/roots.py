# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``root`` option every reader and writer takes. No import of ansible here: the boot
helpers ship this code and run it at boot, where only Python is."""

from __future__ import annotations


def is_live_root(root):
    """Whether ``root`` (a module's root option) is the running host itself: only there
    do commands run, the SSH connection count and libvirt's default URI apply; any other
    root is a recorded or simulated tree. "//" is the host too; "" is no root at all."""
    return root is None or (root != "" and root.strip("/") == "")
