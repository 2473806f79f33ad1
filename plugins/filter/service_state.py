# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters that tell whether a running systemd unit has applied the files the roles
write for it: thin wrappers of module_utils service_state."""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.module_utils import service_state


class FilterModule(object):

    def filters(self):
        return {
            "service_state_argv": service_state.service_state_argv,
            "service_refresh": service_state.service_refresh,
        }
