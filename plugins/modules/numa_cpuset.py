#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: numa_cpuset
short_description: Plan NUMA-aligned GPUs, whole cores, hugepages and VFs for GPU tenants
version_added: "0.1.0"
description:
  - Computes the placement plan of a multi-tenant GPU host, the one plan that every later
    step reads (VFIO binding, hugepages, tenant domains, SR-IOV, IRQ pinning). See
    C(docs/plan-format.md) in the collection for every key.
  - Each tenant lands on the NUMA node of its GPU. Its vCPUs are pinned to whole physical
    cores of that node with sibling threads kept together, its memory is bound there with
    a strict C(numatune), its hugepages are counted on that node, and its SR-IOV VF comes
    from a PF of the same node.
  - GPUs chosen by count must sit in a clean IOMMU group (nothing but the card's own
    functions and PCI bridges). The node with the most free CPUs wins; ties go to the
    lowest GPU address.
  - Tenants of a previous plan (O(existing)) keep their GPUs, pins, VF and pages exactly;
    new tenants get only what is still free.
  - The module is pure and deterministic; the same input gives the same plan. It never
    changes the host.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.gpu_selection
options:
  topology:
    description:
      - The host topology as data, the dict form of C(topology_to_dict) (for example the
        C(topology) returned by another host's read, or a recorded fixture).
      - When given, nothing is read from the host and O(root) is ignored.
    type: dict
  tenants:
    description:
      - The tenants to place, in order. A tenant whose name is in O(existing) stands for
        that placed tenant; its request must match what was placed.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description:
          - The libvirt domain name, 1-63 characters from C(A-Z a-z 0-9 _ . -), starting
            with a letter or digit.
        type: str
        required: true
      gpus:
        description:
          - How many GPUs (C(0) for a tenant without one), or a list of PCI addresses
            such as C(0000:65:00.0) (a single address may be given as a string). All of
            a tenant's GPUs must be on one NUMA node.
        type: raw
        default: 1
      vcpus:
        description:
          - Guest vCPUs. Under O(smt_policy=require) a positive multiple of the host's
            threads per core.
        type: int
        required: true
      memory_gib:
        description:
          - Guest memory in GiB, all of it hugepage-backed on the tenant's node.
        type: int
        required: true
      hugepage_size:
        description:
          - The hugepage size backing the guest. C(1G) needs the C(pdpe1gb) CPU flag.
        type: str
        choices: [1G, 2M]
        default: 1G
      nic_vf:
        description:
          - Give the tenant one SR-IOV VF of a PF on its node. Free VFs already on
            C(vfio-pci) or unbound are taken first.
          - >-
            V(true) or V(false), or a mapping meaning V(true) with the VF's network
            isolation settings, every key optional - C(mac) (a unicast address, default
            the driver's own), C(vlan) (1-4094, default 0 for none), C(spoofchk)
            (default V(true)) and C(trust) (default V(false)); for example
            C({mac: "52:54:00:6c:00:01", vlan: 100}). They become the plan's C(vf)
            keys of the same names.
          - Two tenants of one host may not share a MAC.
        type: raw
        default: false
      iothreads:
        description:
          - QEMU I/O threads; they run where the emulator threads run.
        type: int
        default: 0
      emulator_policy:
        description:
          - V(housekeeping) pins the QEMU emulator and I/O threads to the node's
            housekeeping CPUs. V(dedicated) reserves one more whole core of the node
            for them.
        type: str
        choices: [housekeeping, dedicated]
        default: housekeeping
  housekeeping:
    description:
      - Housekeeping CPUs per NUMA node, kept for the host, IRQs and emulator threads, as
        a mapping of node id to cpulist; see EXAMPLES.
      - Nodes not listed keep the default, the first physical core of the node with its
        sibling threads. Every CPU must be online and on that node.
    type: dict
  smt_policy:
    description:
      - How vCPUs use SMT sibling threads, with OpenStack Nova's C(hw:cpu_thread_policy)
        meanings.
      - V(require) places vCPUs on whole free cores only, sibling threads paired, and
        shows the guest C(cores x threads).
      - V(prefer) fills whole cores first and takes single threads for the rest, so odd
        counts are allowed; the guest then sees one thread per core.
      - V(isolate) uses one thread per core and reserves the siblings so that no other
        tenant gets them.
    type: str
    choices: [require, prefer, isolate]
    default: require
  existing:
    description:
      - The C(tenants) of a previous plan. They are copied into the
        new plan unchanged, and their CPUs, GPUs and VFs are not given to anyone else.
    type: list
    elements: dict
    default: []
  hugepage_check:
    description:
      - How hugepages are checked against the tenants' node. Tenants of O(existing) are
        taken to hold their pages already.
      - V(memory) plans pages that may not be reserved yet (the C(numa) role reserves the
        plan's C(hugepages) afterwards); the node's free pages of that size plus its free
        memory must hold the new tenants' pages.
      - V(free) requires the pages to be reserved and free already.
      - V(none) checks nothing.
    type: str
    choices: [memory, free, none]
    default: memory
  allow_acs_override:
    description:
      - Place GPUs and VFs although C(pcie_acs_override) is on the kernel command line.
        Its IOMMU groups are split by the kernel, not isolated by the hardware, so one
        tenant's device may reach another's by peer-to-peer DMA; without this option
        the plan is refused.
    type: bool
    default: false
attributes:
  check_mode:
    description: The module only reads; check mode returns the same plan.
    support: full
  diff_mode:
    description: Nothing changes, so there is nothing to diff.
    support: none
notes:
  - Placement stops at the first tenant that does not fit. The error names the NUMA node,
    the resource, what the tenant needs and what is free, and nothing is changed.
seealso:
  - module: gpuhost.kvm.iommu_groups_facts
  - module: gpuhost.kvm.libvirt_pinned_domain
"""

EXAMPLES = r"""
- name: Plan the runbook's tenant on this host
  gpuhost.kvm.numa_cpuset:
    tenants:
      - name: tenant-a100
        gpus: 1
        vcpus: 30
        memory_gib: 64
        hugepage_size: 1G
        nic_vf: true
        iothreads: 2
  register: gpuhost_plan

- name: Onboard one more tenant without moving the placed ones
  gpuhost.kvm.numa_cpuset:
    existing: "{{ gpuhost_plan.plan.tenants }}"
    tenants:
      - name: tenant-l40s
        gpus: ["0000:ca:00.0"]
        vcpus: 16
        memory_gib: 48
        hugepage_size: 2M
        emulator_policy: dedicated
        nic_vf:
          mac: "52:54:00:6c:00:02"
          vlan: 200
  register: gpuhost_plan_next

- name: Plan with two housekeeping cores on node 0 and one thread per core
  gpuhost.kvm.numa_cpuset:
    housekeeping:
      "0": "0-1,32-33"
    smt_policy: isolate
    tenants:
      - name: latency-critical
        vcpus: 8
        memory_gib: 32

- name: Plan from a recorded topology instead of this host
  gpuhost.kvm.numa_cpuset:
    topology: "{{ lookup('ansible.builtin.file', 'hk-gpu-01-topology.json') | from_json }}"
    hugepage_check: none
    tenants:
      - name: tenant-a100
        vcpus: 30
        memory_gib: 64

- name: Write the irqbalance ban list from the plan
  ansible.builtin.lineinfile:
    path: /etc/sysconfig/irqbalance
    regexp: '^IRQBALANCE_BANNED_CPULIST='
    line: "IRQBALANCE_BANNED_CPULIST={{ gpuhost_plan.plan.irqbalance.banned_cpulist }}"
"""

RETURN = r"""
plan:
  description:
    - The placement plan; C(docs/plan-format.md) describes every key. Node ids are
      strings in every mapping so that the plan survives JSON and YAML unchanged.
  returned: success
  type: dict
  contains:
    smt_policy:
      description: The SMT policy new tenants were placed with.
      type: str
      sample: require
    threads_per_core:
      description: The host's SMT threads per core.
      type: int
      sample: 2
    online_cpus:
      description: The host's online CPUs.
      type: str
      sample: "0-63"
    housekeeping:
      description: Housekeeping CPUs per node.
      type: dict
      sample: {"0": "0,32", "1": "16,48"}
    housekeeping_cpus:
      description: All housekeeping CPUs.
      type: str
      sample: "0,16,32,48"
    tenant_cpus:
      description:
        - Every CPU a tenant holds, placed and new - vCPU pins, siblings reserved under
          C(isolate) and dedicated emulator cores.
      type: str
      sample: "1-15,33-47"
    irqbalance:
      description: The CPUs irqbalance must not use, in both notations.
      type: dict
      contains:
        banned_cpulist:
          description: The value for C(IRQBALANCE_BANNED_CPULIST) (irqbalance 1.8 and later).
          type: str
          sample: "1-15,33-47"
        banned_cpus_mask:
          description:
            - The value for C(IRQBALANCE_BANNED_CPUS) (before irqbalance 1.8), as the
              kernel prints masks - 32-bit hex words joined by commas, one word per 32
              possible CPUs.
          type: str
          sample: "0000fffe,0000fffe"
    hugepages:
      description: Pages needed per node and page size in kB, over all tenants.
      type: dict
      sample: {"0": {"1048576": 64}}
    tenants:
      description:
        - One entry per tenant, placed tenants first.
        - Each GPU carries C(bar64_sizes), the size of each 64-bit prefetchable BAR of
          the GPU and its companion functions, and C(bar64_total), their sum.
        - C(address_width) is the guest address width the tenant gets with the vm
          role's firmware for GPU tenants (efi) on this host's CPU, and the 64-bit PCI
          window it yields (null without GPUs); libvirt_pinned_domain recomputes it for
          the firmware it is given. A tenant whose width the host's address sizes
          cannot give is refused.
      type: list
      elements: dict
      sample:
        - name: tenant-a100
          node: 0
          gpus:
            - address: "0000:65:00.0"
              functions: ["0000:65:00.0", "0000:65:00.1"]
              iommu_group: 27
              bar64_total: 34393292800
              bar64_sizes: [34359738368, 33554432]
          address_width: {bits: 39, window: "0x7000000000-0x7fffffffff", size_gib: 64,
                          firmware: efi, vendor: GenuineIntel}
          vcpus: 30
          vcpu_pins: [1, 33, 2, 34, 3, 35]
          guest_topology: {sockets: 1, dies: 1, cores: 15, threads: 2}
          smt_policy: require
          reserved_cpus: ""
          emulator_policy: housekeeping
          emulator_cpus: "0,32"
          iothreads: 2
          iothread_cpus: "0,32"
          dedicated_cpus: "1-15,33-47"
          memory_gib: 64
          hugepage_size_kib: 1048576
          hugepages: {"0": 64}
          numatune: {mode: strict, nodeset: "0"}
          vf: {pf: "0000:41:00.0", address: "0000:41:00.2", iommu_group: 40, index: 0,
               mac: null, vlan: 0, spoofchk: true, trust: false}
    warnings:
      description: Things the planner could not check or that look stale.
      type: list
      elements: str
      sample: []
field:
  description: On failure, the option at fault, such as C(tenants[0].vcpus).
  returned: failure
  type: str
  sample: tenants[0].vcpus
details:
  description: On failure, what each NUMA node lacked (node, resource, needed, free).
  returned: failure, when a resource does not fit
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    GPU_SELECTION_ARGUMENT_SPEC,
    ROOT_ARGUMENT_SPEC,
    argument_spec,
)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import GpuSelection
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
    EMULATOR_POLICIES, HUGEPAGE_CHECKS, HUGEPAGE_SIZES_KIB, plan_placement, SMT_POLICIES)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import new_module, run_module
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology


def build_module():
    tenant_spec = dict(
        name=dict(type="str", required=True),
        gpus=dict(type="raw", default=1),
        vcpus=dict(type="int", required=True),
        memory_gib=dict(type="int", required=True),
        hugepage_size=dict(type="str", choices=sorted(HUGEPAGE_SIZES_KIB), default="1G"),
        # true/false, or a mapping of the VF's settings (validated by the planner)
        nic_vf=dict(type="raw", default=False),
        iothreads=dict(type="int", default=0),
        emulator_policy=dict(type="str", choices=list(EMULATOR_POLICIES),
                             default="housekeeping"),
    )
    spec = argument_spec(
        ROOT_ARGUMENT_SPEC,
        GPU_SELECTION_ARGUMENT_SPEC,
        topology=dict(type="dict"),
        tenants=dict(type="list", elements="dict", options=tenant_spec, default=[]),
        housekeeping=dict(type="dict"),
        smt_policy=dict(type="str", choices=list(SMT_POLICIES), default="require"),
        existing=dict(type="list", elements="dict", default=[]),
        hugepage_check=dict(type="str", choices=list(HUGEPAGE_CHECKS), default="memory"),
        allow_acs_override=dict(type="bool", default=False),
    )
    return new_module(AnsibleModule, argument_spec=spec, supports_check_mode=True)


class NumaCpusetPlanner(object):
    """Reads the topology (or takes it as data) and plans; never touches the host."""

    def __init__(self, module):
        self.module = module
        self.plan = None

    def run(self):
        params = self.module.params
        selection = GpuSelection.from_options(params["gpu_devices"], params["gpu_devices_only"])
        topology = params["topology"]
        if topology is None:
            # The planner needs no IRQs; skipping them keeps a 4,000-IRQ host fast.
            topology = read_host_topology(params["root"], with_irqs=False)
        self.plan = plan_placement(
            topology, params["tenants"], housekeeping=params["housekeeping"],
            smt_policy=params["smt_policy"], existing=params["existing"],
            hugepage_check=params["hugepage_check"],
            allow_acs_override=params["allow_acs_override"], gpu_selection=selection)
        for warning in self.plan["warnings"]:
            self.module.warn(warning)

    @property
    def result(self):
        return {"changed": False, "plan": self.plan}


def main():
    module = build_module()
    run_module(module, NumaCpusetPlanner(module))


if __name__ == "__main__":
    main()
