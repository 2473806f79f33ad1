# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Changing the host: the one writer, state files, the change set that applies or rolls
back, the shipping of boot helpers, systemd, and the cores of the modules that write
(boot configuration, vfio binding, SR-IOV, IRQ pins, drains, offboarding scrubs)."""
