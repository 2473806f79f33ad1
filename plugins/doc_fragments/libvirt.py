# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt connection option shared by every module that talks to libvirt."""

from __future__ import annotations


class ModuleDocFragment(object):

    DOCUMENTATION = r"""
options:
  uri:
    description:
      - The libvirt connection URI.
      - C(qemu:///system) is the host's system instance, the one that runs tenant
        domains. C(test:///default) is libvirt's in-process test driver, used by the
        collection's unit tests.
    type: str
    default: qemu:///system
requirements:
  - libvirt-python (C(python3-libvirt)) on the managed host
"""
