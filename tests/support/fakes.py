# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What cannot run on this machine, faked and named as such: ``FakeIproute`` answers
``ip -json link show`` and records ``ip link set ... vf`` for a NIC with SR-IOV VFs (this
machine has none; the lab's igb NIC is the real one, in tests/lab); ``fake_nvidia_smi``, an
executable standing in for nvidia-smi (no NVIDIA GPU or driver here)."""

import json
import stat


class FakeIproute:
    """Stands in for iproute2 on an SR-IOV NIC, which this machine does not have."""

    def __init__(self, vfinfo):
        self.vfinfo = vfinfo
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[:3] == ["ip", "-j", "link"]:
            return 0, json.dumps([{"ifname": "eno1", "vfinfo_list": self.vfinfo}]), ""
        return 0, "", ""


def fake_nvidia_smi(tmp_path, report=None, rc=0, message=""):
    """An executable that checks its arguments are -q -x and prints ``report``."""
    script = tmp_path / "nvidia-smi"
    body = ['#!/bin/sh', '[ "$1" = -q ] && [ "$2" = -x ] && [ $# -eq 2 ] || { echo "bad args: $*" >&2; exit 2; }']
    if report:
        body.append('cat "%s"' % report)
    if message:
        (tmp_path / "message").write_text(message + "\n")
        body.append('cat "%s"' % (tmp_path / "message"))
    body.append("exit %d" % rc)
    script.write_text("\n".join(body) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def fake_dmesg(tmp_path, lines=(), rc=0, message=""):
    """An executable that takes no arguments and prints ``lines`` as the kernel log (or
    ``message`` on stderr with ``rc``, as dmesg does under kernel.dmesg_restrict)."""
    script = tmp_path / "dmesg"
    log = tmp_path / "kernel.log"
    log.write_text("".join(line + "\n" for line in lines))
    body = ['#!/bin/sh', '[ $# -eq 0 ] || { echo "bad args: $*" >&2; exit 2; }', 'cat "%s"' % log]
    if message:
        body.append('echo "%s" >&2' % message)
    body.append("exit %d" % rc)
    script.write_text("\n".join(body) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)
