# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""boot_helper_files: a boot helper written in module_utils Python, as host_files entries.

The SR-IOV and IRQ helpers are shipped by their modules from the module's own payload;
a role that writes its files with host_files (the numa role) ships its helper the same
way from the controller: the same library files (shipping.python_library_files) and
the same thin wrapper (shipping.wrapper_script)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.shipping import (
    LIBRARY_DIR, python_library_files, wrapper_script)

_PACKAGE = "ansible_collections.gpuhost.kvm.plugins.module_utils"


def boot_helper_files(helper_path, module, function="main",
                      library=LIBRARY_DIR, interpreter="/usr/bin/python3"):
    """[{path, content, mode}]: the wrapper at ``helper_path`` (0755) that runs
    ``module.function(sys.argv[1:])``, then every library file it needs (0644)."""
    try:
        files = python_library_files([module], dest=library)
    except (GpuhostError, ImportError) as err:
        raise AnsibleFilterError("boot_helper_files: %s" % err) from err
    entries = [{"path": helper_path, "mode": "0755",
                "content": wrapper_script("%s.%s" % (_PACKAGE, module), function, dest=library,
                                          interpreter=interpreter)}]
    entries += [{"path": path, "content": text, "mode": "0644"} for path, text in files.items()]
    return entries


class FilterModule(object):

    def filters(self):
        return {"boot_helper_files": boot_helper_files}
