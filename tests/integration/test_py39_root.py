# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Python 3.9 the module tests run modules with (tools/py39-root) is Debian 11's,
whole: its standard library, its C library and the libraries lxml and libvirt-python
load all come from its root, none from this machine (whose glibc is newer)."""

import json
import os
import subprocess

from support import REPO
from support.py39 import python39

PROBE = r"""
import json, sys, lxml.etree, libvirt
maps = open("/proc/self/maps").read().split()
libs = sorted({p for p in maps if p.startswith("/") and ".so" in p})
print(json.dumps({"version": list(sys.version_info[:3]), "prefix": sys.prefix,
                  "stdlib": json.__file__, "libxml2": list(lxml.etree.LIBXML_VERSION),
                  "libvirt": libvirt.getVersion(), "libs": libs}))
"""


def test_python39_runs_on_its_own_root_and_libraries():
    wrapper = python39()
    root = os.path.join(os.path.dirname(wrapper), "root")
    proc = subprocess.run([wrapper, "-c", PROBE], capture_output=True, text=True, check=False,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["version"][:2] == [3, 9]
    assert found["prefix"] == os.path.join(root, "usr")
    assert found["stdlib"].startswith(root + "/")
    assert found["libvirt"] >= 7000000 and found["libxml2"][0] == 2
    libs = found["libs"]
    assert any(os.path.basename(p).startswith("libc-") or "/libc.so" in p for p in libs), libs
    assert [p for p in libs if not p.startswith(root + "/")] == []


WRITE = r"""
import sys
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import writer
writer.HostWriter(sys.argv[1]).write_file("/etc/libvirt/hooks/qemu.d/gpuhost-irq-affinity", "#!/bin/sh\n")
print(writer._libselinux)
"""


def test_the_writer_writes_without_ansible_and_labels_nothing(tmp_path):
    """The boot helpers run the writer on the host's Python without ansible-core: the
    SELinux bindings are then absent, and the write happens all the same."""
    proc = subprocess.run([python39(), "-c", WRITE, str(tmp_path)], capture_output=True,
                          text=True, check=False, timeout=60,
                          env=dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "None" and proc.stderr == ""
    assert (tmp_path / "etc/libvirt/hooks/qemu.d/gpuhost-irq-affinity").read_text() == "#!/bin/sh\n"
