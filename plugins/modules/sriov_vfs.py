#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: sriov_vfs
short_description: Create SR-IOV virtual functions on a PF, on the driver you choose, at boot too
version_added: "0.1.0"
description:
  - Sets the number of VFs of an SR-IOV physical function. A different count goes
    through 0 first, as the kernel requires.
  - Sets C(sriov_drivers_autoprobe) to match O(vf_driver) before the VFs are created,
    and binds the VFs to vfio-pci through C(driver_override) when asked.
  - Applies per-VF MAC, VLAN, trust, spoofchk and link state on a netdev PF through
    iproute2 (C(ip link set dev <pf> vf <n> ...)), as argument lists.
  - Refuses to change the count while a VF is attached to a running libvirt domain,
    unless O(force=true).
  - Refuses to change the count when a VF that the change destroys carries the default
    route or the SSH connection (its netdev, or a bond, bridge or VLAN over it), unless
    O(allow_host_critical=true), or holds the root filesystem (no override). This is
    the host-safety policy of M(gpuhost.kvm.vfio_bind), with the same messages.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.host_change
  - gpuhost.kvm.change_attributes
options:
  pf:
    description: The PF, as a PCI address (C(0000:41:00.0)) or a network interface name.
    type: str
    required: true
  num_vfs:
    description: How many VFs the PF should have; at most its C(sriov_totalvfs).
    type: int
    required: true
  vf_driver:
    description:
      - C(default) lets the VFs' native driver probe them (C(sriov_drivers_autoprobe=1)).
      - C(vfio-pci) creates them unprobed (autoprobe 0) and binds each to vfio-pci.
      - C(none) creates them unprobed and leaves them without a driver.
    type: str
    choices: [vfio-pci, default, none]
    default: default
  force:
    description: Change the count although a VF is attached to a running domain.
    type: bool
    default: false
  allow_host_critical:
    description:
      - Change the count although a VF it destroys carries the default route or the SSH
        connection, or holds a mounted filesystem other than the root filesystem (the
        same override as M(gpuhost.kvm.vfio_bind)'s).
    type: bool
    default: false
  vfs:
    description:
      - Per-VF settings, for a netdev PF only. A setting left out (or null) is not
        touched. Existing VFs are read back (C(ip -j link show dev <pf>)) and only what
        differs is set; a VF this run creates is read once it exists, since what a new
        VF starts with is the driver's choice (mlx5 starts with spoof checking off).
      - Kept with the VF count in C(/etc/gpuhost/sriov.json) when O(persistent=true), and
        re-applied at boot.
    type: list
    elements: dict
    suboptions:
      index:
        description: VF number, from 0. Required unless O(vfs[].address) is given.
        type: int
      address:
        description:
          - The VF's PCI address instead of its number (the address it has, or the one
            the kernel will give it from the PF's C(sriov_offset) and C(sriov_stride)).
        type: str
      mac:
        description:
          - A unicast MAC address (C(00:00:00:00:00:00) is passed on, which some PF
            drivers take to clear the VF's MAC).
        type: str
      vlan:
        description: VLAN ID, 1 to 4094; 0 for none.
        type: int
      trust:
        description: Let the VF change its MAC and enter promiscuous mode.
        type: bool
      spoofchk:
        description: MAC/VLAN anti-spoofing.
        type: bool
      link_state:
        description: Link state of the VF.
        type: str
        choices: [auto, enable, disable]
  libvirt_uri:
    description:
      - libvirt connection used to find VFs attached to running domains. Default
        C(qemu:///system) with O(root=/); with another root only when given.
    type: str
notes:
  - "Persistence: the wanted state of every PF is kept in C(/etc/gpuhost/sriov.json) and
    C(gpuhost-sriov.service) re-creates it at boot by running the same Python through
    C(/usr/local/libexec/gpuhost/gpuhost-sriov-apply). Boot ordering: the unit has
    C(DefaultDependencies=no), C(After=systemd-modules-load.service) and the PF's
    device unit (C(sys-subsystem-net-devices-<netdev>.device), or
    C(systemd-udev-settle.service) for a PF without a netdev), and
    C(Before=libvirtd.service virtqemud.service libvirt-guests.service network-pre.target),
    so the VFs exist on the right driver before libvirt autostarts domains that use them."
  - With O(root=/) the unit is enabled with systemctl; with another root that step is skipped.
  - Per-VF settings need the live host (iproute2); with another O(root) they are
    listed in RV(skipped_actions) and only the VFs are created.
seealso:
  - module: gpuhost.kvm.vfio_bind
"""

EXAMPLES = r"""
- name: Eight VFs on the ConnectX PF, handed to vfio-pci, at boot too
  gpuhost.kvm.sriov_vfs:
    pf: ens2f0np0
    num_vfs: 8
    vf_driver: vfio-pci
    persistent: true

- name: Give VF 0 a MAC and a VLAN
  gpuhost.kvm.sriov_vfs:
    pf: "0000:41:00.0"
    num_vfs: 8
    vf_driver: vfio-pci
    vfs:
      - index: 0
        mac: "52:54:00:aa:00:01"
        vlan: 100
        spoofchk: true
        trust: false

- name: Remove all VFs
  gpuhost.kvm.sriov_vfs:
    pf: ens2f0np0
    num_vfs: 0
    persistent: true
"""

RETURN = r"""
pf:
  description: The PF's PCI address.
  returned: always
  type: str
  sample: "0000:41:00.0"
netdev:
  description: The PF's network interface, null when it has none.
  returned: always
  type: str
  sample: ens2f0np0
vfs:
  description: The VFs after the run (predicted addresses in check mode).
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: VF number.
      type: int
    address:
      description: PCI address.
      type: str
      sample: "0000:41:00.2"
    iommu_group:
      description: IOMMU group.
      type: int
    numa_node:
      description: NUMA node, null when unknown.
      type: int
    driver:
      description: Bound driver, null when none.
      type: str
created:
  description:
    - The VFs this run creates (or would create, in check mode), by address; empty when
      the count is unchanged. The addresses are predicted from C(sriov_offset) and
      C(sriov_stride); empty when the PF does not show them.
  returned: always
  type: list
  elements: str
  sample: ["0000:41:00.2", "0000:41:00.3"]
running_domain_vfs:
  description:
    - The VFs running libvirt domains hold whose settings this run changes (or would, in
      check mode), each with the domains and the settings. The PF applies a VLAN, spoof
      checking, trust or link state to the VF's traffic at once; a MAC reaches the guest
      only when its VF driver probes the VF again, so a changed MAC sets
      C(restart_required) (the tenant's next start). Empty when no running domain holds a
      changed VF, or when the running domains were not read (see RV(skipped_actions)).
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: VF number.
      type: int
    address:
      description: PCI address.
      type: str
    domains:
      description: The running domains that hold the VF.
      type: list
      elements: str
    changed:
      description: The settings this run changes, of C(mac), C(vlan), C(spoofchk), C(trust), C(link_state).
      type: list
      elements: str
    restart_required:
      description: Whether the guest sees the change only at its next start (a changed MAC).
      type: bool
  sample: [{"index": 0, "address": "0000:41:00.2", "domains": ["tenant-a100"],
            "changed": ["mac"], "restart_required": true}]
steps:
  description: The planned (check mode) or applied steps, in order.
  returned: always
  type: list
  elements: str
skipped_actions:
  description: Actions left out because O(root) is not C(/).
  returned: always
  type: list
  elements: str
field:
  description: On failure, the option at fault.
  returned: failure
  type: str
"""

import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy.host_safety import CHANGE_VF_COUNT, check_vf_count_change
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.safety_context import (
    read_module_context, running_domain_devices_or_skip)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.sriov_vfs import (
    UNIT_FILE, VF_DRIVERS, current_vfs, describe_vfs, held_vf_changes, plan_persistence,
    plan_sriov)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.systemd import systemctl
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.vfio_bind import prepend_modprobe
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import VFIO_PCI


def build_module():
    vf_spec = dict(index=dict(type="int"), address=dict(type="str"), mac=dict(type="str"),
                   vlan=dict(type="int"), trust=dict(type="bool"), spoofchk=dict(type="bool"),
                   link_state=dict(type="str", choices=["auto", "enable", "disable"]))
    spec = argument_spec(
        ROOT_ARGUMENT_SPEC,
        pf=dict(type="str", required=True),
        num_vfs=dict(type="int", required=True),
        vf_driver=dict(type="str", choices=list(VF_DRIVERS), default="default"),
        force=dict(type="bool", default=False),
        allow_host_critical=dict(type="bool", default=False),
        vfs=dict(type="list", elements="dict", options=vf_spec),
        persistent=dict(type="bool", default=False),
        libvirt_uri=dict(type="str"),
    )
    return new_module(AnsibleModule, argument_spec=spec, supports_check_mode=True)


class SriovConfigurator(PlannedChange):
    """Plans and applies one sriov_vfs task."""

    def __init__(self, module, writer=None, runner=None):
        super(SriovConfigurator, self).__init__(module)
        self.params = module.params
        self.writer = writer or HostWriter(self.params["root"])
        self.runner = runner or (self._run_command if self.live else None)
        self.vfs = []
        self.skipped = []
        self.domain_devices = None

    def _run_command(self, argv):
        return self.module.run_command(argv)

    def _domain_devices(self):
        return running_domain_devices_or_skip(self.module, self.params["libvirt_uri"],
                                              self.live, self.skipped)

    def _modprobe(self):
        rc, out, err = self.module.run_command(["modprobe", "--", VFIO_PCI])
        if rc != 0:
            raise GpuhostError("modprobe vfio-pci failed: %s" % (err or out).strip(),
                               field="vf_driver", fix="install the kernel's vfio-pci module")

    def _systemctl(self, *args):
        systemctl(self.module, *args)

    def _check_destroyed_vfs(self, plan):
        """A different count destroys every VF there is; none may carry the host."""
        existing = current_vfs(self.writer, plan.pf)
        if not existing or len(existing) == self.params["num_vfs"]:
            return
        check_vf_count_change(
            read_module_context(self.module, self.params["root"]), plan.pf,
            [existing[i] for i in sorted(existing)], self.params["num_vfs"],
            {o: self.params[o] for o in CHANGE_VF_COUNT.overrides}, CHANGE_VF_COUNT)

    def decide(self):
        params = self.params
        self.domain_devices = self._domain_devices()
        plan = plan_sriov(self.writer, params["pf"], params["num_vfs"],
                          params["vf_driver"], params["force"], params["vfs"],
                          self.runner, self.domain_devices)
        self._check_destroyed_vfs(plan)
        changes = plan.changes
        self.skipped.extend(plan.skipped)
        if plan.needs_modprobe and changes:
            if self.live:
                prepend_modprobe(plan, self._modprobe)
            else:
                self.skipped.append("modprobe vfio-pci (root is not /)")
        if params["persistent"]:
            files_before = len(changes.files)
            plan_persistence(changes, self.writer, plan, params["num_vfs"],
                             params["vf_driver"], params["vfs"], sys.executable)
            unit_changed = any(f.path == UNIT_FILE for f in changes.files[files_before:])
            if unit_changed and self.live:
                changes.add("systemctl daemon-reload",
                            lambda: self._systemctl("daemon-reload"))
                changes.add("systemctl enable gpuhost-sriov.service",
                            lambda: self._systemctl("enable", "gpuhost-sriov.service"),
                            lambda: self._systemctl("disable", "gpuhost-sriov.service"))
            elif unit_changed:
                self.skipped.append("systemctl enable gpuhost-sriov.service (root is not /)")
        return plan

    def run(self):
        super(SriovConfigurator, self).run()
        if self.plan.changes and not self.applied:
            # check mode: the VFs to be, of which the kernel knows nothing yet
            self.vfs = [dict(vf, iommu_group=None, numa_node=None, driver=None)
                        for vf in self.plan.vfs]
        else:
            self.vfs = describe_vfs(self.writer, self.plan.pf)

    @property
    def result(self):
        plan = self.plan
        return self.change_result(
            pf=plan.pf if plan else None,
            netdev=plan.netdev if plan else None,
            vfs=self.vfs,
            created=list(plan.created) if plan else [],
            running_domain_vfs=held_vf_changes(plan, self.domain_devices) if plan else [],
            skipped_actions=self.skipped)


def main():
    module = build_module()
    run_module(module, SriovConfigurator(module), changes_host=True)


if __name__ == "__main__":
    main()
