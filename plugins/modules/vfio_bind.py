#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: vfio_bind
short_description: Hand PCI functions to vfio-pci or give them back, safely
version_added: "0.1.0"
description:
  - Binds PCI functions (a GPU and, by default, every other function of its slot such
    as its HDA audio) to vfio-pci through C(driver_override), unbind and
    C(drivers_probe), or gives them back to the driver they had before.
  - Refuses, with the reason and the option that overrides it, a device in a dirty
    IOMMU group (O(allow_dirty_group)), the boot VGA with an active console
    (O(allow_boot_vga)), a disk controller holding a mounted filesystem or a NIC
    carrying the default route or the SSH connection (O(allow_host_critical)), a device
    whose driver has open users (O(allow_in_use)), a device attached to a running
    libvirt domain (O(allow_attached_to_running_domain)), and any binding while
    C(pcie_acs_override) is active (O(allow_acs_override)).
  - Never binds a PCI bridge or the controller of the root filesystem, whatever the
    options; the module itself and the shell it reports to run from that disk.
  - Refuses everything when the IOMMU is off, naming the kernel arguments to add.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.host_change
  - gpuhost.kvm.change_attributes
  - gpuhost.kvm.gpu_selection
options:
  devices:
    description:
      - PCI addresses to bind, as C(lspci -D) prints them (C(0000:65:00.0)).
    type: list
    elements: str
  match:
    description:
      - Select every function (not VFs) whose IDs match all the given keys.
    type: dict
    suboptions:
      vendor:
        description: Vendor ID in hex, e.g. C(10de).
        type: str
      device:
        description: Device ID in hex, e.g. C(20b5).
        type: str
      class:
        description: Class in hex, 2, 4 or 6 digits (C(03), C(0302), C(030200)).
        type: str
      gpu:
        description:
          - Only the GPUs, as O(gpu_devices) and O(gpu_devices_only) define them - the
            same GPUs the planner and M(gpuhost.kvm.iommu_groups_facts) count. An
            accelerator without companion functions is bound alone.
        type: bool
        default: false
  with_companions:
    description:
      - Also take every other function of the same slot (bus:device). A GPU's HDA
        function sits in its IOMMU group, and the group is only usable by a guest when
        all of it is on vfio-pci (see the runbook, section 13).
    type: bool
    default: true
  state:
    description:
      - C(bound) puts the devices on vfio-pci.
      - C(unbound) clears the override and binds the driver each device had before
        gpuhost.kvm took it (remembered in C(/var/lib/gpuhost/vfio-bind.json)), or lets
        the kernel pick one.
    type: str
    choices: [bound, unbound]
    default: bound
  persistence:
    description:
      - How O(persistent=true) keeps the binding over a reboot.
      - C(driverctl) writes driverctl's own override file C(/etc/driverctl.d/pci-<address>)
        (content C(vfio-pci)), so C(driverctl list-persisted) and C(unset-override)
        keep working, plus a udev rule that applies those files while the device is
        added, before the native driver's module is loaded.
      - C(udev) writes C(/etc/udev/rules.d/61-gpuhost-vfio-<address>.rules) setting
        C(ATTR{driver_override}="vfio-pci") on the device's add event.
      - Both rules then write the address to C(/sys/bus/pci/drivers_probe), so that
        the device binds even where vfio-pci was loaded before udev ran (dracut loads
        it first); without that probe a registered driver never looks at the device.
      - C(auto) picks C(driverctl) when the driverctl program is installed.
    type: str
    choices: [auto, driverctl, udev]
    default: auto
  initramfs:
    description:
      - The initramfs generator of the host, which tells which of the persistent
        binding's files go into the image (RV(initramfs_files),
        RV(initramfs_rebuild_required)).
      - This module writes no generator configuration. The M(gpuhost.kvm.initramfs)
        module is the initramfs's one owner - the early vfio modules, dracut's
        C(install_items) (hand it RV(initramfs_files)) and the rebuild.
      - C(auto) picks by what the host has; C(none) reports no files.
    type: str
    choices: [auto, dracut, initramfs-tools, none]
    default: auto
  libvirt_uri:
    description:
      - libvirt connection used to find devices attached to running domains.
      - Default C(qemu:///system) when O(root=/); with another root the check only runs
        when a URI is given (the unit tests use C(test:///...)).
      - When the default URI cannot be reached the check is skipped with a warning (a
        host without libvirtd yet); a given URI that fails is an error.
    type: str
  allow_dirty_group:
    description: Bind although the IOMMU group holds other devices.
    type: bool
    default: false
  allow_boot_vga:
    description: Bind the boot VGA although a console is active on it.
    type: bool
    default: false
  allow_host_critical:
    description:
      - Bind a disk controller with mounted filesystems (not the root filesystem) or a
        NIC of the default route or the SSH connection.
    type: bool
    default: false
  allow_in_use:
    description: Bind a device whose current driver has open users (/dev/dri, /dev/nvidiaN).
    type: bool
    default: false
  allow_attached_to_running_domain:
    description: Change a device that a running libvirt domain holds.
    type: bool
    default: false
  allow_acs_override:
    description:
      - Bind although C(pcie_acs_override) is on the kernel command line. Its IOMMU
        groups are split by the kernel, not isolated by the hardware, so a guest may
        reach other devices by peer-to-peer DMA; accept that only on a host with one
        tenant.
    type: bool
    default: false
notes:
  - Persistence does not use C(options vfio-pci ids=), because that would take every
    card with those IDs, wrong on a host where only some identical GPUs pass through.
  - A native driver built into the kernel (not a module) probes before udev runs; such
    devices need C(vfio-pci.ids) or a kernel without that driver.
  - The C(modprobe vfio-pci) step runs only with O(root=/).
  - Two runs at once (two onboardings) each keep their devices' previous drivers in
    C(/var/lib/gpuhost/vfio-bind.json). Each run takes the flock of
    C(/var/lib/gpuhost/vfio-bind.json.lock), reads the file again under it and changes
    only its own devices' entries. A file of an unknown C(version) or shape is refused,
    naming the file.
seealso:
  - module: gpuhost.kvm.sriov_vfs
  - module: gpuhost.kvm.irq_affinity
"""

EXAMPLES = r"""
- name: Pass the GPU at 65:00.0 (and its HDA function) through, for good
  gpuhost.kvm.vfio_bind:
    devices:
      - "0000:65:00.0"
    persistent: true

- name: Bind every NVIDIA 3D controller except the boot VGA's console
  gpuhost.kvm.vfio_bind:
    match:
      vendor: "10de"
      class: "0302"

- name: Bind every GPU, the lab's large-BAR stand-in (pci-testdev) included
  gpuhost.kvm.vfio_bind:
    match:
      gpu: true
    gpu_devices: ["1b36:0005"]

- name: Give the GPU back to its previous driver
  gpuhost.kvm.vfio_bind:
    devices:
      - "0000:65:00.0"
    state: unbound
    persistent: true
"""

RETURN = r"""
devices:
  description: One entry per function handled (companions included).
  returned: always
  type: list
  elements: dict
  contains:
    address:
      description: PCI address.
      type: str
      sample: "0000:65:00.0"
    driver_before:
      description: Driver bound before the run, null when none.
      type: str
      sample: nvidia
    driver_after:
      description: Driver bound after the run (predicted in check mode).
      type: str
      sample: vfio-pci
    iommu_group:
      description: IOMMU group number.
      type: int
      sample: 42
    vfio_dev:
      description: The VFIO group node the guest will open, when on vfio-pci.
      type: str
      sample: /dev/vfio/42
    companions:
      description: Other functions of the same slot, taken with a requested device.
      type: list
      elements: str
      sample: ["0000:65:00.1"]
    changed:
      description: Whether this device changes.
      type: bool
    gpu_selected_by:
      description:
        - Why the function counts as a GPU (its class, or its O(gpu_devices) entry);
          null for a function that is not one (a companion, a VF).
      type: str
      sample: class 0x0302
steps:
  description: The planned (check mode) or applied steps, in order.
  returned: always
  type: list
  elements: str
persistence:
  description: The persistence mechanism used, null without O(persistent).
  returned: always
  type: str
  sample: driverctl
initramfs_rebuild_required:
  description:
    - A file of the binding that the initramfs generator builds into the image changed;
      rebuild the initramfs with M(gpuhost.kvm.initramfs).
    - With C(dracut) these are modules-load.d and the udev rules and driverctl files of
      RV(initramfs_files). C(initramfs-tools) builds none of them in, since driverctl,
      the udev rules and modules-load.d act after the switch to the real root.
  returned: always
  type: bool
initramfs_files:
  description:
    - Every udev rule and vfio-pci override file of the persistent binding on the host
      (earlier runs' too) that dracut must install into the image, plus the tools
      driverctl's rule runs. Give them to M(gpuhost.kvm.initramfs) as its
      O(gpuhost.kvm.initramfs#module:install_items).
    - Empty with C(initramfs-tools), with O(initramfs=none) and without O(persistent).
  returned: always
  type: list
  elements: str
  sample: [/bin/cat, /etc/driverctl.d/pci-0000:65:00.0, /etc/udev/rules.d/61-gpuhost-vfio-driverctl.rules]
skipped_actions:
  description: Actions left out because O(root) is not C(/).
  returned: always
  type: list
  elements: str
field:
  description: On failure, the option at fault (for a refusal, the option that overrides it).
  returned: failure
  type: str
details:
  description: On failure, the refusals (address, reason, override) or the rollback record.
  returned: failure
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    GPU_SELECTION_ARGUMENT_SPEC, ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.safety_context import (
    read_context, running_domain_devices_or_skip)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    GpuSelection, read_pci_functions)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.vfio_bind import (
    current_driver, OVERRIDES, plan_vfio, prepend_modprobe, select_devices)


def build_module():
    spec = argument_spec(
        ROOT_ARGUMENT_SPEC,
        GPU_SELECTION_ARGUMENT_SPEC,
        devices=dict(type="list", elements="str"),
        match=dict(type="dict", options={"vendor": dict(type="str"),
                                         "device": dict(type="str"),
                                         "class": dict(type="str"),
                                         "gpu": dict(type="bool", default=False)}),
        with_companions=dict(type="bool", default=True),
        state=dict(type="str", choices=["bound", "unbound"], default="bound"),
        persistent=dict(type="bool", default=False),
        persistence=dict(type="str", choices=["auto", "driverctl", "udev"], default="auto"),
        initramfs=dict(type="str", choices=["auto", "dracut", "initramfs-tools", "none"],
                       default="auto"),
        libvirt_uri=dict(type="str"),
    )
    for option in OVERRIDES:
        spec[option] = dict(type="bool", default=False)
    return new_module(AnsibleModule, argument_spec=spec, supports_check_mode=True,
                      required_one_of=[("devices", "match")])


class VfioBinder(PlannedChange):
    """Plans and applies one vfio_bind task; ``result`` is the same on success and failure."""

    def __init__(self, module, writer=None):
        super(VfioBinder, self).__init__(module)
        self.params = module.params
        self.writer = writer or HostWriter(self.params["root"])
        self.skipped = []

    def _domain_devices(self):
        return running_domain_devices_or_skip(self.module, self.params["libvirt_uri"],
                                              self.live, self.skipped)

    def _ip_addr_json(self):
        ip = self.module.get_bin_path("ip") if self.live else None
        if not ip:
            return None
        rc, out, _err = self.module.run_command([ip, "-j", "addr", "show"])
        return out if rc == 0 else None

    def _modprobe(self):
        rc, out, err = self.module.run_command(["modprobe", "--", "vfio-pci"])
        if rc != 0:
            raise GpuhostError("modprobe vfio-pci failed: %s" % (err or out).strip(),
                               field="devices", fix="install the kernel's vfio modules")

    def decide(self):
        params = self.params
        selection = GpuSelection.from_options(params["gpu_devices"], params["gpu_devices_only"])
        functions = read_pci_functions(params["root"])
        selected, companions = select_devices(functions, params["devices"], params["match"],
                                              params["with_companions"], selection)
        context = read_context(
            params["root"], functions,
            ssh_connection=os.environ.get("SSH_CONNECTION") if self.live else None,
            ip_addr_json=self._ip_addr_json(), domain_devices=self._domain_devices())
        plan = plan_vfio(self.writer, context, selected, companions, params["state"],
                         {o: params[o] for o in OVERRIDES}, params["persistent"],
                         params["persistence"], params["initramfs"], selection)
        if plan.needs_modprobe:
            if self.live:
                prepend_modprobe(plan, self._modprobe)
            else:
                self.skipped.append("modprobe vfio-pci (root is not /)")
        return plan

    def apply(self):
        super(VfioBinder, self).apply()
        for device in self.plan.devices:
            device.driver_after = current_driver(self.writer, device.address)

    @property
    def result(self):
        plan = self.plan
        return self.change_result(
            devices=[d.as_dict() for d in plan.devices] if plan else [],
            persistence=plan.persistence if plan else None,
            initramfs_rebuild_required=bool(plan and plan.initramfs_changed),
            initramfs_files=list(plan.initramfs_files) if plan else [],
            skipped_actions=self.skipped)


def main():
    module = build_module()
    run_module(module, VfioBinder(module), changes_host=True)


if __name__ == "__main__":
    main()
