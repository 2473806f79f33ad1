# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What cannot run on this machine, faked and named as such: ``FakeIproute`` answers
``ip -json link show`` and records ``ip link set ... vf`` for a NIC with SR-IOV VFs (this
machine has none; the lab's igb NIC is the real one, in tests/lab)."""

import json


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
