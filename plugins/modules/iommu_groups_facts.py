#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: iommu_groups_facts
short_description: Report IOMMU state, IOMMU groups and a passthrough verdict per GPU
version_added: 0.1.0
description:
  - Reads sysfs and procfs and returns one fact, C(gpuhost_iommu), describing whether the
    IOMMU is on and how (vendor, default domain type, passthrough, interrupt remapping),
    every IOMMU group with its devices, and for every GPU (PCI class 0x0300 VGA, 0x0302
    3D, 0x0380 display controller or 0x1200 processing accelerator, plus the functions
    O(gpu_devices) lists) whether it can be handed to a tenant on its own.
  - A GPU is isolated when its IOMMU group holds nothing but the GPU's own slot
    functions (such as the HDA audio function) and PCI bridges, the IOMMU is enabled,
    and no C(pcie_acs_override) is active. Any other device in the group (a USB
    controller, an NVMe drive, a NIC) makes the group dirty; it is listed by address,
    class code and class name in RV(ansible_facts.gpuhost_iommu.dirty_groups).
  - An active C(pcie_acs_override) on the kernel command line is reported as a security
    finding, because it makes groups look isolated when the hardware does not isolate
    them.
  - Also lists SR-IOV physical functions with their virtual functions; on the live
    host (O(root=/)) with each VF's MAC, VLAN, spoof checking, trust and link state as
    the PF's driver reports them (C(ip -j -d link show dev <pf>)).
  - The module only reads; it never changes the host.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.read_only
  - gpuhost.kvm.gpu_selection
options:
  gpu_vendor:
    description:
      - Only report GPUs of this PCI vendor, as four hex digits (V(10de) NVIDIA,
        V(1002) AMD, V(8086) Intel), with or without a C(0x) prefix.
      - Groups, SR-IOV PFs and findings are reported in full whatever the filter.
    type: str
attributes:
  facts:
    support: full
    description: Returns the C(gpuhost_iommu) fact and nothing else.
notes:
  - Interrupt remapping is taken from, in order, C(intremap=off) on the command line,
    C(IR-) interrupt chips in C(/proc/interrupts), then the IR bit of every Intel DMAR
    unit's C(ecap) register.
  - Devices whose C(numa_node) is -1 are placed on the one NUMA node that holds all of
    their C(local_cpulist) CPUs; when those CPUs span nodes the node is reported as
    unknown (null).
seealso:
  - name: Kernel documentation on VFIO and IOMMU groups
    description: Why a group is the unit of assignment.
    link: https://docs.kernel.org/driver-api/vfio.html
"""

EXAMPLES = r"""
- name: Read the IOMMU facts of the host
  gpuhost.kvm.iommu_groups_facts:

- name: Only consider NVIDIA GPUs
  gpuhost.kvm.iommu_groups_facts:
    gpu_vendor: 10de

- name: Count the lab's large-BAR stand-in (pci-testdev) as a GPU too
  gpuhost.kvm.iommu_groups_facts:
    gpu_devices: ["1b36:0005"]

- name: Refuse to continue when a GPU shares its IOMMU group with other devices
  ansible.builtin.assert:
    that: ansible_facts['gpuhost_iommu']['dirty_groups'] | length == 0
    fail_msg: >-
      {{ ansible_facts['gpuhost_iommu']['dirty_groups'] }}: move the GPU to another slot
      or change PCIe bifurcation in the BIOS; do not use pcie_acs_override.

- name: Inspect a sysfs/procfs tree recorded from another machine
  gpuhost.kvm.iommu_groups_facts:
    root: /srv/recorded/hk-gpu-01
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpuhost_iommu:
      description: The IOMMU state and the passthrough verdicts.
      returned: always
      type: dict
      contains:
        enabled:
          description: The kernel created IOMMU groups (true in passthrough mode too).
          type: bool
          returned: always
          sample: true
        vendor:
          description: V(intel), V(amd), another unit prefix, or null when unknown.
          type: str
          returned: always
          sample: intel
        mode:
          description: >-
            The default domain type most groups carry: V(identity) (passthrough),
            V(DMA) or V(DMA-FQ) (translated); null when unknown.
          type: str
          returned: always
          sample: identity
        passthrough:
          description: Host devices bypass translation (C(iommu=pt) or identity domains).
          type: bool
          returned: always
          sample: true
        units:
          description: The IOMMU units under /sys/class/iommu.
          type: list
          elements: str
          returned: always
          sample: [dmar0, dmar1]
        acpi_tables:
          description: Which of the ACPI DMAR (Intel) and IVRS (AMD) tables exist.
          type: list
          elements: str
          returned: always
          sample: [DMAR]
        cmdline:
          description: >-
            IOMMU-related kernel command line flags found (intel_iommu, amd_iommu,
            iommu, pcie_acs_override, vfio-pci.ids, intremap, ...) with their values.
          type: dict
          returned: always
          sample: {intel_iommu: "on", iommu: pt}
        interrupt_remapping:
          description: Interrupt remapping is active; null when it cannot be told.
          type: bool
          returned: always
          sample: true
        interrupt_remapping_source:
          description: Where the answer came from (cmdline, proc_interrupts, ecap, unknown).
          type: str
          returned: always
          sample: proc_interrupts
        groups:
          description: >-
            Every IOMMU group with its devices; each device has address, class_code,
            class_name, vendor_device, driver and numa_node (null when unknown).
          type: list
          elements: dict
          returned: always
          sample:
            - group: 27
              type: identity
              devices:
                - address: "0000:65:00.0"
                  class_code: "0x030200"
                  class_name: 3D controller
                  vendor_device: "10de:20b5"
                  driver: nvidia
                  numa_node: 0
        gpus:
          description: One verdict per GPU.
          type: list
          elements: dict
          returned: always
          contains:
            address:
              description: PCI address, domain included.
              type: str
              sample: "0000:65:00.0"
            isolated:
              description: The GPU may be passed through on its own.
              type: bool
              sample: true
            reasons:
              description: Why it is not isolated; empty when it is.
              type: list
              elements: str
              sample: []
            companions:
              description: The other functions on the same slot (the HDA function).
              type: list
              elements: str
              sample: ["0000:65:00.1"]
            numa_node:
              description: NUMA node of the GPU, null when unknown.
              type: int
              sample: 0
            numa_node_source:
              description: V(numa_node), V(local_cpulist) (derived) or V(unknown).
              type: str
              sample: numa_node
            bar64_total:
              description: Bytes of 64-bit prefetchable BARs (what needs Above 4G Decoding).
              type: int
              sample: 137472507904
            bar64_sizes:
              description:
                - The size in bytes of each 64-bit prefetchable BAR of the GPU and its
                  companion functions, largest first; the guest address width rule
                  places them (M(gpuhost.kvm.libvirt_pinned_domain)'s C(address_width) result).
              type: list
              elements: int
              sample: [137438953472, 33554432]
            reset_method:
              description: The kernel's reset methods for the device, in order.
              type: list
              elements: str
              sample: [flr, bus]
            reset_methods:
              description:
                - How each function of the GPU (the GPU first, then its companions) can
                  be reset between tenants, from its C(reset) file (present only when the
                  kernel can reset it) and C(reset_method) (kernel 5.15 and later).
                - C(usable) is false without a C(reset) file, or when C(reset_method)
                  lists no method the kernel knows (resets disabled by writing an empty
                  string); null when unknown. C(reason) says why it is not usable.
                - C(bus_siblings) are the other functions a bus reset (C(bus),
                  C(cxl_bus)) resets too; C(bus_only) is true when no other method is
                  listed. C(unknown_reset_methods) are words of C(reset_method) no kernel
                  prints.
              type: list
              elements: dict
              sample:
                - address: "0000:65:00.0"
                  reset_file: true
                  reset_methods: [flr, bus]
                  unknown_reset_methods: []
                  usable: true
                  reason: null
                  bus_only: false
                  bus_siblings: ["0000:65:00.1"]
            driver:
              description: The driver bound now, null when none.
              type: str
              sample: nvidia
            iommu_group:
              description: The IOMMU group number, null when the IOMMU is off.
              type: int
              sample: 27
            vendor_device:
              description: Vendor and device ids as lspci -n prints them.
              type: str
              sample: "10de:20b5"
            class_code:
              description: The 24-bit PCI class code.
              type: str
              sample: "0x030200"
            class_name:
              description: The class as lspci names it.
              type: str
              sample: 3D controller
            boot_vga:
              description: The firmware console runs on this GPU (VGA class only).
              type: bool
              sample: false
            selected_by:
              description:
                - Why it counts as a GPU - its class, or its entry in O(gpu_devices).
              type: str
              sample: "listed as 1b36:0005"
        dirty_groups:
          description: >-
            Groups that hold a GPU plus devices other than the GPU's slot functions and
            PCI bridges; each foreign device has address, class_code, class_name, driver.
          type: list
          elements: dict
          returned: always
          sample:
            - group: 1
              gpus: ["0000:01:00.0"]
              foreign:
                - address: "0000:02:00.0"
                  class_code: "0x0c0330"
                  class_name: USB controller
                  driver: xhci_hcd
        sriov_pfs:
          description:
            - SR-IOV physical functions with their virtual functions (C(index) is the
              VF number on the PF).
            - "On the live host, each VF of a PF with a network interface has C(settings):
              C(mac), C(vlan) (0 for none), C(spoofchk), C(trust) and C(link_state) read
              with iproute2; null elsewhere. C(vf_settings_error) says why they could not
              be read (null when they were, or when nothing was to read)."
          type: list
          elements: dict
          returned: always
          sample:
            - address: "0000:41:00.0"
              vendor_device: "15b3:101d"
              driver: mlx5_core
              numa_node: 0
              totalvfs: 8
              numvfs: 8
              drivers_autoprobe: true
              netdevs: [ens1f0np0]
              iommu_group: 40
              vf_settings_error: null
              vfs:
                - address: "0000:41:00.2"
                  index: 0
                  driver: mlx5_core
                  iommu_group: 41
                  netdevs: [ens1f0v0]
                  settings: {mac: "52:54:00:6c:00:01", vlan: 100, spoofchk: true,
                             trust: false, link_state: auto}
        reset_findings:
          description:
            - Per GPU function, C(gpu_no_reset) (severity high) when it has no usable
              reset method, so a tenant's data in it would reach the next tenant
              (gpuhost.kvm.tenant_scrub and gpuhost.kvm.libvirt_pinned_domain refuse it
              unless C(allow_no_reset)), and C(gpu_bus_reset_only) (medium) when only a
              bus reset can reset it and other devices share its bus (C(siblings)).
            - Each has id, severity, gpu, address, msg and fix.
          type: list
          elements: dict
          returned: always
          sample:
            - id: gpu_no_reset
              severity: high
              gpu: "0000:65:00.0"
              address: "0000:65:00.1"
              msg: 0000:65:00.1 has no reset file ...
              fix: put the GPU in a slot or on firmware where it supports FLR ...
        gpu_selection:
          description:
            - What counted as a GPU - C(classes) (empty with O(gpu_devices_only)), the
              listed vendor:device C(ids) and C(addresses), and C(listed_only).
          type: dict
          returned: always
          sample: {classes: ["0x0300", "0x0302", "0x0380", "0x1200"], ids: ["1b36:0005"],
                   addresses: [], listed_only: false}
        security_findings:
          description: >-
            Settings that weaken isolation, each with id, severity, msg and fix
            (pcie_acs_override, allow_unsafe_interrupts, no interrupt remapping).
          type: list
          elements: dict
          returned: always
          sample:
            - id: pcie_acs_override
              severity: high
              msg: pcie_acs_override=downstream is active ...
              fix: remove pcie_acs_override from the kernel command line ...
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    GPU_SELECTION_ARGUMENT_SPEC, ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.iommu_facts import read_iommu_facts
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import new_module, run_module


class IommuGroupsFacts(object):
    """Reads the host once and keeps the fact it builds."""

    def __init__(self, module):
        self.module = module
        self.root = module.params["root"]
        self.gpu_vendor = module.params["gpu_vendor"]
        self.facts = None

    def run(self):
        params = self.module.params
        self.facts = read_iommu_facts(self.module, self.root, self.gpu_vendor,
                                      params["gpu_devices"], params["gpu_devices_only"])

    @property
    def result(self):
        result = {"changed": False, "ansible_facts": {}}
        if self.facts is not None:
            result["ansible_facts"]["gpuhost_iommu"] = self.facts
        return result


def build_module():
    return new_module(
        AnsibleModule, argument_spec=argument_spec(ROOT_ARGUMENT_SPEC, GPU_SELECTION_ARGUMENT_SPEC,
                                                   gpu_vendor={"type": "str"}),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    run_module(module, IommuGroupsFacts(module))


if __name__ == "__main__":
    main()
