# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters that read many small host files in one command: thin wrappers of
module_utils file_batch, so the roles build the command and split its output with the
functions the Python tests check."""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.module_utils import file_batch


class FilterModule(object):

    def filters(self):
        return {
            "batch_read_argv": file_batch.batch_read_argv,
            "batch_read_parse": file_batch.parse_batch_output,
            "pci_attribute_paths": file_batch.pci_attribute_paths,
        }
