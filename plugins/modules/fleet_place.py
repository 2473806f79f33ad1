#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: fleet_place
short_description: Choose the best host of a group for a new tenant, and say why
version_added: 0.1.0
description:
  - Ranks the hosts of a group for one tenant from their C(gpuhost_capacity) facts
    (M(gpuhost.kvm.capacity_facts) run with the same O(tenant)), in which each host
    has planned the tenant exactly as M(gpuhost.kvm.tenant_ledger) would (its own ledger, SMT policy
    and housekeeping CPUs). Facts gathered with C(include_topology=true) are planned
    here instead.
  - Among the hosts where the tenant fits, the best is the one whose GPUs have a clean
    IOMMU group, then whose node already has the tenant's hugepages free, then which is
    left least fragmented (fewest free GPUs stranded on a node without a free whole
    core, fewest partly used cores, then the fewest whole cores left on the node, a best
    fit that keeps bigger holes for bigger tenants); the host name breaks ties.
  - Returns the choice with a sentence saying why, and every candidate with its
    numbers or the reason it does not fit. Fails, listing every host's reason, when the
    tenant fits nowhere.
  - The module only computes; it reserves nothing. The reservation is made on the
    chosen host by M(gpuhost.kvm.tenant_ledger), under the ledger's lock, which refuses
    the tenant cleanly if another onboarding took the resources in between.
author:
  - gpuhost.kvm contributors (@gpuhost)
options:
  hosts:
    description:
      - Host name to that host's C(gpuhost_capacity) fact, or to null or C({error})
        for a host that gave no data (it is listed as not fitting). A fact evaluated for
        another tenant counts as not fitting.
      - A host whose fact is of another shape or unusable (a candidate without its
        ranking numbers, a topology that does not parse) is listed as not fitting, with
        the reason; the choice among the other hosts is made as usual.
    type: dict
    required: true
  tenant:
    description:
      - The tenant definition (a C(gpuhost_tenants) entry). Only the planner's request
        keys are used (C(name), C(gpus), C(vcpus), C(memory_gib), C(hugepage_size),
        C(nic_vf), C(iothreads), C(emulator_policy)).
      - The request is checked whole before any host is looked at, and a bad one fails
        naming the key (C(tenant.vcpus), C(tenant.gpus[0])). It wants a valid tenant name, whole
        finite numbers (C(vcpus) 1 to 8192, C(memory_gib) 1 to 65536, C(gpus) and
        C(iothreads) 0 to 64), at most 64 GPU addresses, and the planner's own rules.
    type: dict
    required: true
  hugepage_check:
    description:
      - How the tenant's hugepages are checked, as in the planner, for facts gathered
        with C(include_topology=true) (the others were checked on the host).
        V(memory) lets pages be reserved after planning when the node's free memory
        holds them; V(free) needs them reserved and free already; V(none) skips it.
    type: str
    choices: [memory, free, none]
    default: memory
attributes:
  check_mode:
    support: full
    description: The module only computes.
  diff_mode:
    support: none
    description: Nothing changes.
seealso:
  - module: gpuhost.kvm.capacity_facts
  - module: gpuhost.kvm.tenant_ledger
"""

EXAMPLES = r"""
- name: Evaluate tenant-c on every GPU host
  gpuhost.kvm.capacity_facts:
    tenant: {name: tenant-c, gpus: 1, vcpus: 16, memory_gib: 64, hugepage_size: 1G}

- name: Choose the host for tenant-c among the GPU hosts
  gpuhost.kvm.fleet_place:
    hosts: >-
      {{ dict(groups['gpu_hosts'] | zip(groups['gpu_hosts'] | map('extract', hostvars)
         | map(attribute='ansible_facts.gpuhost_capacity', default=None))) }}
    tenant: {name: tenant-c, gpus: 1, vcpus: 16, memory_gib: 64, hugepage_size: 1G}
  register: fleet_choice
  delegate_to: localhost
  run_once: true

- name: Say where it goes and why
  ansible.builtin.debug:
    msg: "{{ fleet_choice.why }}"
"""

RETURN = r"""
host:
  description: The chosen host.
  type: str
  returned: success
  sample: hk-gpu-03
node:
  description: The NUMA node of the chosen host the tenant would be placed on.
  type: int
  returned: success
  sample: 1
gpus:
  description: The GPU addresses the tenant would get there.
  type: list
  elements: str
  returned: success
  sample: ["0000:9a:00.0"]
why:
  description: Why this host, with the runner-up for comparison.
  type: str
  returned: success
  sample: >-
    hk-gpu-03 chosen for tenant-c: node 1, GPU 0000:9a:00.0: IOMMU group clean; 64 1G
    hugepages already free; leaves 0 stranded GPU(s), 0 partly used core(s), 23 whole
    core(s) free on node 1; next best hk-gpu-01: ...
candidates:
  description:
    - Every host, fitting ones best first, each with C(host), C(fits), C(why), C(node),
      C(gpus), C(clean_iommu_group), C(hugepages_ready), C(gpus_stranded),
      C(cores_partly_used) and C(cores_left_on_node).
  type: list
  elements: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.fleet import choose_host
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import new_module, run_module


class FleetPlace(object):
    """Holds the choice (or the candidates when nothing fits)."""

    def __init__(self, module):
        self.module = module
        self.choice = None

    def run(self):
        params = self.module.params
        # choose_host checks the whole request (validate_request) before any host.
        self.choice = choose_host(params["hosts"], params["tenant"],
                                  hugepage_check=params["hugepage_check"], field="tenant")

    @property
    def result(self):
        result = {"changed": False, "candidates": []}
        if self.choice is not None:
            result.update(self.choice)
        return result


def build_module():
    return new_module(
        AnsibleModule, argument_spec={
            "hosts": {"type": "dict", "required": True},
            "tenant": {"type": "dict", "required": True},
            "hugepage_check": {"type": "str", "choices": ["memory", "free", "none"],
                               "default": "memory"},
        },
        supports_check_mode=True,
    )


def main():
    module = build_module()
    run_module(module, FleetPlace(module))


if __name__ == "__main__":
    main()
