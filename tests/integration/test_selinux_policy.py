# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The default SELinux types docs/selinux.md gives the paths the collection writes, looked
up for real: Debian 11's reference policy and its matchpathcon, from the Python 3.9 root
(tools/py39-root), run on that root's own loader and libraries. This machine runs no
SELinux; the lookup needs none."""

import os
import re

from support import REPO
from support.py39 import root_dir, run_in_root

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity import pinning as irq_pinning

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import sriov_vfs as sriov

ROW = re.compile(r"^\| `(/[^`]+)`[^|]*\| `(\w+)` \|$", re.M)


def documented_types():
    with open(os.path.join(REPO, "docs", "selinux.md"), encoding="utf-8") as handle:
        return dict(ROW.findall(handle.read()))


def test_documented_types_are_the_policys_defaults():
    table = documented_types()
    # what irq_affinity and sriov_vfs install for boot and for libvirt is in the table
    assert {irq_pinning.LIBVIRT_HOOK, irq_pinning.HELPER, irq_pinning.UDEV_RULE_FILE,
            irq_pinning.NM_DISPATCHER, sriov.HELPER, sriov.UNIT_FILE, sriov.CONFIG_FILE} <= set(table)
    file_contexts = os.path.join(root_dir(), "etc/selinux/default/contexts/files/file_contexts")
    found = {}
    for path in table:
        kind = "dir" if path.endswith("/") else "file"
        proc = run_in_root("usr/sbin/matchpathcon", "-f", file_contexts, "-m", kind,
                           path.rstrip("/"))
        assert proc.returncode == 0, proc.stderr
        found[path] = proc.stdout.split()[-1].split(":")[2]
    assert found == table
