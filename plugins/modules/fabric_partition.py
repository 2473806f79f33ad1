#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: fabric_partition
short_description: Read, activate or deactivate an NVLink partition of Fabric Manager's shared-NVSwitch model
version_added: 0.1.0
description:
  - On an NVSwitch board (HGX) in NVIDIA's shared-NVSwitch model, the host keeps the
    NVSwitches on the nvidia driver with Fabric Manager, the GPUs go to vfio-pci, and a
    tenant's guest can use NVLink (CUDA works at all, rather than failing with error
    802) only once Fabric Manager has activated the partition of exactly its GPUs.
  - Reads the partitions with Fabric Manager's partition tool (C(fmpm -l),
    NVIDIA/Fabric-Manager-Client) and, for O(state=active) or O(state=inactive), runs
    C(fmpm -a ID) or C(fmpm -d ID) when the partition is not so already. Check mode and
    C(--diff) report the change without running it.
  - Fabric Manager resets the partition's GPUs when it activates or deactivates it, so
    both are refused while a process (a tenant's QEMU) holds one of its GPUs' vfio
    groups open; activate before the domain starts, deactivate after it is gone.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.change_attributes
options:
  state:
    description:
      - V(read) only lists the partitions; V(active) and V(inactive) bring one to that state.
    type: str
    choices: [read, active, inactive]
    default: read
  partition:
    description: The partition's id (0 to 63), as RV(partitions) or a plan entry's C(fabric_partition) gives it.
    type: int
  gpus:
    description: The partition by its GPUs (PCI addresses); it must hold exactly these.
    type: list
    elements: str
  fmpm:
    description: Fabric Manager's partition tool, a name on the PATH or an absolute path.
    type: str
    default: fmpm
  socket:
    description:
      - Fabric Manager's UNIX domain socket (C(FM_CMD_UNIX_SOCKET_PATH) in its
        configuration); by default the tool reaches Fabric Manager at 127.0.0.1.
      - It must be a UNIX socket on the host, reached without a link and without C(..);
        anything else is refused before the tool runs.
    type: path
"""

EXAMPLES = r"""
- name: Read Fabric Manager's partitions
  gpuhost.kvm.fabric_partition:
  register: fabric

- name: Activate the tenant's partition before its domain starts
  gpuhost.kvm.fabric_partition:
    state: active
    partition: "{{ tenant.fabric_partition }}"
"""

RETURN = r"""
partitions:
  description: Fabric Manager's partitions before the change, sorted by id.
  returned: always
  type: list
  elements: dict
  sample: [{"id": 1, "gpus": ["0000:18:00.0", "0000:2a:00.0"], "active": false}]
partition:
  description: The partition O(partition) or O(gpus) named, as it is after the run.
  returned: with O(state=active) or O(state=inactive)
  type: dict
steps:
  description: The commands run, or to run in check mode.
  returned: always
  type: list
  elements: str
"""

import shlex

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import ROOT_ARGUMENT_SPEC, argument_spec
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import normalize_address, read_pci_functions
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.safety_context import vfio_group_holders
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import fabric
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import unix_socket_path


class FabricPartitionWorker(PlannedChange):
    """Reads the partitions, decides the one command, runs it outside check mode."""

    def __init__(self, module):
        super(FabricPartitionWorker, self).__init__(module)
        self.params = module.params
        self.tool = None

    def fmpm(self, *args):
        argv = [self.tool] + (["--unix-domain-socket", self.params["socket"]] if self.params["socket"] else []) \
            + list(args)
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            raise GpuhostError("%s failed (rc %d): %s" % (" ".join(shlex.quote(a) for a in argv), rc,
                                                          (err or out).strip()[:400] or "no output"),
                               field="fmpm", fix="check that Fabric Manager runs in shared-NVSwitch mode "
                                                 "(FABRIC_MODE=1) and that the tool reaches it")
        return out

    def decide(self):
        params = self.params
        if params["socket"]:
            params["socket"] = unix_socket_path(params["socket"], "socket", params["root"])
        if params["state"] != "read" and (params["partition"] is None) == (params["gpus"] is None):
            raise GpuhostError("state %s needs the partition or its gpus, one of the two" % params["state"],
                               field="partition", fix="give partition (an id) or gpus (its PCI addresses)")
        wanted_gpus = None
        if params["gpus"] is not None:
            wanted_gpus = [normalize_address(g, field="gpus[%d]" % n) for n, g in enumerate(params["gpus"])]
        if params["partition"] is not None and not 0 <= params["partition"] < fabric.MAX_PARTITIONS:
            raise GpuhostError("partition %d is not 0 to %d" % (params["partition"], fabric.MAX_PARTITIONS - 1),
                               field="partition", fix="give an id fabric_partition read lists")
        self.tool = self.module.get_bin_path(params["fmpm"], required=False) if "/" not in params["fmpm"] \
            else params["fmpm"]
        if not self.tool:
            raise GpuhostError("Fabric Manager's partition tool %s is not on this host" % params["fmpm"],
                               field="fmpm", fix="install it (NVIDIA/Fabric-Manager-Client builds fmpm) "
                                                 "or give its path")
        plan = fabric.PartitionPlan(partitions=fabric.parse_fmpm_list(self.fmpm("-l")))
        if params["state"] == "read":
            return plan
        if wanted_gpus is not None:
            plan.chosen = fabric.partition_of(wanted_gpus, plan.partitions)
            if plan.chosen is None:
                raise GpuhostError("no partition holds exactly %s" % ", ".join(sorted(wanted_gpus)),
                                   field="gpus", fix="give the GPUs of one partition: %s" % fabric.partition_sets(
                                       len(wanted_gpus), plan.partitions))
        else:
            plan.chosen = next((p for p in plan.partitions if p.id == params["partition"]), None)
            if plan.chosen is None:
                raise GpuhostError("Fabric Manager lists no partition %d" % params["partition"],
                                   field="partition", fix="give an id of: %s" % ", ".join(
                                       str(p.id) for p in plan.partitions))
        want_active = params["state"] == "active"
        if plan.chosen.active == want_active:
            return plan
        self.refuse_held(plan.chosen)
        flag, undo = ("-a", "-d") if want_active else ("-d", "-a")
        pid = str(plan.chosen.id)
        plan.changes.value_changes.append(("fabric partition %s" % pid, "active" if plan.chosen.active
                                           else "inactive", params["state"]))
        plan.changes.add("fmpm %s %s" % (flag, pid), lambda: self.fmpm(flag, pid), lambda: self.fmpm(undo, pid))
        return plan

    def refuse_held(self, chosen):
        """Fabric Manager resets the partition's GPUs: refuse while one is held open."""
        functions = read_pci_functions(self.params["root"])
        holders = vfio_group_holders(self.params["root"], [
            functions[gpu].iommu_group for gpu in chosen.gpus if gpu in functions])
        if holders:
            raise GpuhostError(
                "refusing to %s partition %d: Fabric Manager resets its GPUs, and %s" % (
                    "activate" if self.params["state"] == "active" else "deactivate", chosen.id,
                    "; ".join(holders)),
                field="state", fix="stop the tenant's domain first (activate before it starts, "
                                   "deactivate after it is gone)")

    @property
    def result(self):
        plan = self.plan
        fields = {"partitions": [p.as_dict() for p in plan.partitions] if plan else []}
        if plan and plan.chosen is not None:
            fields["partition"] = dict(plan.chosen.as_dict(), active=self.params["state"] == "active")
        return self.change_result(**fields)


def build_module():
    return new_module(
        AnsibleModule, argument_spec=argument_spec(
            ROOT_ARGUMENT_SPEC,
            state={"type": "str", "choices": ["read", "active", "inactive"], "default": "read"},
            partition={"type": "int"},
            gpus={"type": "list", "elements": "str"},
            fmpm={"type": "str", "default": "fmpm"},
            socket={"type": "path"},
        ),
        mutually_exclusive=[("partition", "gpus")],
        supports_check_mode=True,
    )


def main():
    module = build_module()
    run_module(module, FabricPartitionWorker(module), changes_host=True)


if __name__ == "__main__":
    main()
