# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What cannot run on this machine, faked and named as such: ``FakeIproute`` answers
``ip -json link show`` and records ``ip link set ... vf`` for a NIC with SR-IOV VFs (this
machine has none; the lab's igb NIC is the real one, in tests/lab); ``fake_nvidia_smi``, an
executable standing in for nvidia-smi (no NVIDIA GPU or driver here); ``stub_fmpm``, Fabric
Manager's partition tool (no Fabric Manager or NVSwitch here)."""

import json
import stat
import sys


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


# The GPUs of fixturegen.build_hgx_h100_host, node 0's four then node 1's, and a
# partition table derived from the Fabric Manager user guide's for HGX H100 (one
# partition of 8 GPUs, two of 4, four of 2, eight of 1), laid on those addresses.
HGX_GPUS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
            "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
HGX_PARTITION_SETS = [HGX_GPUS, HGX_GPUS[:4], HGX_GPUS[4:]] + \
    [HGX_GPUS[n:n + 2] for n in range(0, 8, 2)] + [[g] for g in HGX_GPUS]


def fmpm_json(active=()):
    """``fmpm -l``'s output for HGX_PARTITION_SETS, in the JSON shape of
    NVIDIA/Fabric-Manager-Client's fmpm.cpp (listPartitions), bus ids in NVML's form."""
    return json.dumps({"version": 16777217, "numPartitions": len(HGX_PARTITION_SETS), "maxNumPartitions": 64,
                       "partitionInfo": [
                           {"partitionId": pid, "isActive": int(pid in active), "numGpus": len(gpus),
                            "gpuInfo": [{"physicalId": HGX_GPUS.index(g) + 1,
                                         "uuid": "GPU-%08d" % HGX_GPUS.index(g),
                                         "pciBusId": "0000" + g.upper(), "numNvLinksAvailable": 18,
                                         "maxNumNvLinks": 18, "nvlinkLineRateMBps": 26562}
                                        for g in gpus]}
                           for pid, gpus in enumerate(HGX_PARTITION_SETS)]}, indent=3)


def stub_fmpm(tmp_path, active=()):
    """A STUBBED fmpm (no Fabric Manager here): ``-l`` prints fmpm_json's list with the
    partitions activated so far, ``-a ID``/``-d ID`` flip one, every call is recorded.
    (path, state file)."""
    state = tmp_path / "fmpm-state.json"
    state.write_text(json.dumps({"list": json.loads(fmpm_json(active)), "calls": []}))
    script = tmp_path / "fmpm"
    script.write_text("""#!%s
import json, sys
state = json.load(open(%r))
args = sys.argv[1:]
state["calls"].append(args)
if args and args[0] == "--unix-domain-socket":
    args = args[2:]
if args == ["-l"]:
    print(json.dumps(state["list"], indent=3))
elif args[0] in ("-a", "-d"):
    for info in state["list"]["partitionInfo"]:
        if info["partitionId"] == int(args[1]):
            info["isActive"] = int(args[0] == "-a")
json.dump(state, open(%r, "w"))
""" % (sys.executable, str(state), str(state)))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), state


def active_partitions(state):
    """The ids stub_fmpm's state file holds as active."""
    return [i["partitionId"] for i in json.loads(state.read_text())["list"]["partitionInfo"] if i["isActive"]]
