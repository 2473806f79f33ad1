#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: capacity_facts
short_description: Report what a GPU host has left for new tenants, from its ledger and live topology
version_added: 0.1.0
description:
  - Reads the host's topology (CPUs, NUMA nodes, hugepages, PCI devices and IOMMU
    groups) and its allocation ledger, and returns one fact, C(gpuhost_capacity).
  - The fact holds the free GPUs per NUMA node (with whether their IOMMU group is clean),
    the free whole cores, the free hugepages per node and size, the free SR-IOV VFs and
    the tenants in the ledger, counted the way the placement planner counts them.
  - With O(tenant), it also plans that tenant on the host, exactly as
    M(gpuhost.kvm.tenant_ledger) would but reserving nothing, and returns whether and
    where it would fit, with the numbers M(gpuhost.kvm.fleet_place) ranks hosts by. The
    planning runs on each host, so the controller only compares small results.
  - The fact is what M(gpuhost.kvm.fleet_report) and M(gpuhost.kvm.fleet_place) take.
  - The module only reads; it never changes the host and takes no ledger lock (a ledger
    being rewritten is read whole, before or after the rename).
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.gpu_selection
options:
  ledger_path:
    description:
      - The allocation ledger on the host (see M(gpuhost.kvm.tenant_ledger)). A missing
        file is a host without tenants.
      - An absolute path; a relative one is refused.
    type: path
    default: /var/lib/gpuhost/ledger.json
  tenant:
    description:
      - A tenant definition (a C(gpuhost_tenants) entry) to evaluate on this host; only
        the planner's request keys are used.
      - Checked whole before the host is read, as in M(gpuhost.kvm.fleet_place), for whole
        finite numbers (C(vcpus) 1 to 8192, C(memory_gib) 1 to 65536, C(gpus) and
        C(iothreads) 0 to 64), a valid name; a bad one fails naming the key
        (C(tenant.memory_gib)) instead of being reported as not fitting.
    type: dict
  hugepage_check:
    description:
      - How O(tenant)'s hugepages are checked, as in the planner. V(memory) lets pages be
        reserved after planning when the node's free memory holds them; V(free) needs
        them reserved and free already; V(none) skips it.
    type: str
    choices: [memory, free, none]
    default: memory
  include_topology:
    description:
      - Also return the topology and the whole ledger (tens of kilobytes per host), for
        a controller that plans on them itself.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: The module only reads.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
  facts:
    support: full
    description: Returns the C(gpuhost_capacity) fact and nothing else.
seealso:
  - module: gpuhost.kvm.fleet_report
  - module: gpuhost.kvm.fleet_place
  - module: gpuhost.kvm.tenant_ledger
"""

EXAMPLES = r"""
- name: Read what the host has left
  gpuhost.kvm.capacity_facts:

- name: Read a recorded host tree and its ledger
  gpuhost.kvm.capacity_facts:
    root: /srv/recordings/hk-gpu-01
    ledger_path: var/lib/gpuhost/ledger.json

- name: Would tenant-c fit here, and where?
  gpuhost.kvm.capacity_facts:
    tenant: {name: tenant-c, gpus: 1, vcpus: 16, memory_gib: 64}

- name: Show the free whole cores per node
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpuhost_capacity']['capacity']['nodes'] | dict2items
             | map(attribute='value.cores_free') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpuhost_capacity:
      description: The host's capacity, and the evaluation of O(tenant) when given.
      returned: success
      type: dict
      contains:
        capacity:
          description:
            - What the host has left. C(nodes) maps each NUMA node to C(cores_total),
              C(cores_free) (whole cores with no thread taken by a tenant or the
              housekeeping), C(cores_partly_used), C(cpus_free), C(mem_free_kib),
              C(hugepages) (per size, C(total) and C(free)), C(gpus) (address,
              iommu_group, clean, tenant), C(gpus_free), C(gpus_free_clean),
              C(vfs_total) and C(vfs_free).
            - C(tenants) lists the ledger's tenants (name, node, gpus, vcpus,
              memory_gib, hugepage_size, vf); C(totals) sums the nodes and adds
              C(gpus_stranded), free clean GPUs on nodes without a free whole core.
          type: dict
          returned: success
          sample:
            smt_policy: require
            threads_per_core: 2
            nodes:
              "0":
                cores_total: 16
                cores_free: 15
                cores_partly_used: 0
                cpus_free: 30
                mem_free_kib: 100663296
                hugepages: {"1G": {"total": 64, "free": 32}}
                gpus: [{address: "0000:65:00.0", iommu_group: 27, clean: true, tenant: null}]
                gpus_free: 1
                gpus_free_clean: 1
                vfs_total: 8
                vfs_free: 8
            tenants: []
            totals: {cores_total: 32, cores_free: 30, gpus_total: 1, gpus_free: 1}
        ledger_serial:
          description: The serial number of the ledger read (0 without a ledger).
          type: int
          returned: success
          sample: 3
        candidate:
          description:
            - Whether O(tenant) fits (C(fits)) and why (C(why)); when it fits, the
              C(node), the C(gpus), C(clean_iommu_group), C(hugepages_ready) (the pages
              are already reserved and free on the node), and what the host would have
              left, C(gpus_stranded), C(cores_partly_used) and C(cores_left_on_node).
              C(tenant) names the tenant evaluated.
          type: dict
          returned: when O(tenant) is given
          sample: {tenant: tenant-c, fits: true, node: 0, gpus: ["0000:65:00.0"],
                   clean_iommu_group: true, hugepages_ready: true, gpus_stranded: 0,
                   cores_partly_used: 0, cores_left_on_node: 13, why: "node 0, ..."}
        topology:
          description: The host topology as data (C(topology_to_dict)), without IRQs.
          type: dict
          returned: when O(include_topology=true)
        ledger:
          description: The ledger's C(tenants), C(housekeeping), C(smt_policy) and C(serial).
          type: dict
          returned: when O(include_topology=true)
        gpu_devices:
          description:
            - O(gpu_devices) as the module took it, so that M(gpuhost.kvm.fleet_report)
              and M(gpuhost.kvm.fleet_place) count the host's GPUs from C(topology) as
              the host did.
          type: list
          elements: str
          returned: success
          sample: ["1b36:0005"]
        gpu_devices_only:
          description: O(gpu_devices_only) as the module took it.
          type: bool
          returned: success
          sample: false
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    GPU_SELECTION_ARGUMENT_SPEC, ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.fleet import (
    evaluate_host, host_capacity, selection_of, validate_request)
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.ledger import read_ledger
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import new_module, run_module
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.sysfs import validate_root
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    read_host_topology, topology_to_dict)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import absolute_path


class CapacityFacts(object):
    """Reads the host and its ledger once and keeps the fact it builds."""

    def __init__(self, module):
        self.module = module
        self.root = module.params["root"]
        self.ledger_path = module.params["ledger_path"]
        self.fact = None

    def run(self):
        # The options first, the host after: a NaN or 1e11 in the request is the
        # request's fault, not a host on which the tenant does not fit. Every number
        # the module takes is in the request.
        tenant = self.module.params["tenant"]
        if tenant is not None:
            tenant = validate_request(tenant, "tenant")
        params = self.module.params
        options = {"gpu_devices": params["gpu_devices"],
                   "gpu_devices_only": params["gpu_devices_only"]}
        selection = selection_of(options)
        validate_root(self.root)
        # Absolute only: a relative path was taken below root, a rule no other module
        # shares, so the same value named two different files.
        self.ledger_path = absolute_path(self.ledger_path, "ledger_path", kind="ledger file")
        topology = read_host_topology(self.root, with_irqs=False)
        ledger = read_ledger(self.ledger_path, "ledger_path")
        fact = dict(options, capacity=host_capacity(topology, ledger, selection),
                    ledger_serial=ledger.serial)
        if tenant is not None:
            fact["candidate"] = dict(
                evaluate_host(topology, ledger, tenant, params["hugepage_check"], selection),
                tenant=tenant.get("name"))
        if params["include_topology"]:
            fact["topology"] = topology_to_dict(topology)
            fact["ledger"] = {"tenants": ledger.tenants, "housekeeping": ledger.housekeeping,
                              "smt_policy": ledger.smt_policy, "serial": ledger.serial}
        self.fact = fact

    @property
    def result(self):
        result = {"changed": False, "ansible_facts": {}}
        if self.fact is not None:
            result["ansible_facts"]["gpuhost_capacity"] = self.fact
        return result


def build_module():
    return new_module(
        AnsibleModule, argument_spec=argument_spec(
            ROOT_ARGUMENT_SPEC,
            GPU_SELECTION_ARGUMENT_SPEC,
            ledger_path={"type": "path", "default": "/var/lib/gpuhost/ledger.json"},
            tenant={"type": "dict"},
            hugepage_check={"type": "str", "choices": ["memory", "free", "none"],
                            "default": "memory"},
            include_topology={"type": "bool", "default": False}),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    run_module(module, CapacityFacts(module))


if __name__ == "__main__":
    main()
