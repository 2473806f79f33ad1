# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``patch_module_args``: the module args an ``AnsibleModule`` built inside it reads, on
every ansible-core of the matrix (tests/ansible-matrix.txt).

ansible-core 2.19 has ``ansible.module_utils.testing.patch_module_args``, which it needs
(it also sets the serialization profile its modules read). 2.14 to 2.18 have no such
module; there an ``AnsibleModule`` reads ``basic._ANSIBLE_ARGS``, the JSON text
``{"ANSIBLE_MODULE_ARGS": ...}``, as ansible-core's own unit tests of those releases set it."""

import contextlib
import json
from unittest import mock

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core 2.14 to 2.18
    from ansible.module_utils import basic as _basic

    @contextlib.contextmanager
    def patch_module_args(args=None):
        """Expose ``args`` to ``AnsibleModule`` instances created within this context."""
        if not isinstance(args, (dict, type(None))):
            raise TypeError("The `args` arg must be a dict or None.")
        text = json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}).encode()
        with mock.patch.object(_basic, "_ANSIBLE_ARGS", text):
            yield

__all__ = ["patch_module_args"]
