# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVLink partitions of an NVSwitch board in NVIDIA's shared-NVSwitch model, and the
models themselves.

On an HGX board the GPUs reach each other through NVSwitches, and a guest's CUDA works
only once Fabric Manager has activated an NVLink partition for exactly its GPUs (CUDA
error 802 otherwise). In the shared-NVSwitch model (Fabric Manager user guide, chapter
"Shared NVSwitch Virtualization Model") the host keeps the NVSwitches on the nvidia
driver with Fabric Manager in that mode, the GPUs go to vfio-pci, and the hypervisor
activates a partition before a tenant's domain starts and deactivates it when the
tenant leaves. The partitions are fixed by the board: Fabric Manager lists them, and a
tenant can only be given the GPUs of one of them.

Fabric Manager's partition tool ``fmpm -l`` (NVIDIA/Fabric-Manager-Client) prints
{"version", "numPartitions", "maxNumPartitions", "partitionInfo": [{"partitionId",
"isActive", "numGpus", "gpuInfo": [{"physicalId", "uuid", "pciBusId", ...}]}]}, the
PCI bus IDs in NVML's form (00000000:18:00.0). Pure: the module runs the tool.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field as dataclass_field
from typing import Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import normalize_address

# nv_fm_types.h: FM_MAX_FABRIC_PARTITIONS
MAX_PARTITIONS = 64
# The most GPUs one partition holds (two HGX boards joined: 16).
MAX_PARTITION_GPUS = 16
SHARED = "shared"
# NVIDIA's full-passthrough model: the whole board, NVSwitches included, goes to one
# tenant, whose guest runs Fabric Manager.
FULL = "full"
NVSWITCH_MODELS = ("none", SHARED, FULL)


@dataclass(frozen=True)
class FabricPartition:
    id: int
    gpus: Tuple[str, ...]       # canonical PCI addresses, sorted
    active: bool = False

    def as_dict(self):
        return {"id": self.id, "gpus": list(self.gpus), "active": self.active}


@dataclass
class PartitionPlan:
    """What one fabric_partition task does: the partitions Fabric Manager lists, the one
    the task names (None for state read) and the fmpm command that changes it, if any."""

    partitions: Tuple[FabricPartition, ...] = ()
    chosen: Optional[FabricPartition] = None
    changes: ChangeSet = dataclass_field(default_factory=ChangeSet)


def _refuse(what, field):
    return GpuhostError("Fabric Manager's partition list %s" % what, field=field,
                        fix="give the list fabric_partition read (fmpm -l) returned, unchanged")


def _partition_id(value, field):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_PARTITIONS:
        raise _refuse("has partition id %r, not 0 to %d" % (value, MAX_PARTITIONS - 1), field)
    return value


def _bus_id(value, field):
    """NVML's 00000000:18:00.0 (or a plain PCI address) as the canonical address."""
    if not isinstance(value, str) or len(value) > 32:
        raise _refuse("has PCI bus id %r" % (value,), field)
    domain, colon, rest = value.strip().lower().partition(":")
    if colon and len(domain) == 8 and all(c in "0123456789abcdef" for c in domain):
        value = "%04x:%s" % (int(domain, 16), rest)
    return normalize_address(value, field=field)


def parse_fmpm_list(text):
    """The FabricPartitions of ``fmpm -l``'s output, sorted by id; refused, naming the
    entry, when it is not the tool's JSON."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as err:
        raise _refuse("is not JSON (%s)" % err, "fmpm") from None
    if not isinstance(data, dict) or not isinstance(data.get("partitionInfo"), list):
        raise _refuse("has no partitionInfo list", "fmpm")
    partitions = []
    for index, info in enumerate(data["partitionInfo"]):
        field = "partitionInfo[%d]" % index
        if not isinstance(info, dict) or not isinstance(info.get("gpuInfo"), list):
            raise _refuse("entry %d has no gpuInfo list" % index, field)
        gpus = [_bus_id(gpu.get("pciBusId") if isinstance(gpu, dict) else None,
                        "%s.gpuInfo[%d].pciBusId" % (field, n))
                for n, gpu in enumerate(info["gpuInfo"])]
        partitions.append({"id": info.get("partitionId"), "gpus": gpus,
                           "active": info.get("isActive") in (1, True)})
    return partitions_from_list(partitions, field="fmpm")


def partitions_from_list(items, field="fabric_partitions"):
    """FabricPartitions from [{"id", "gpus", "active"}] (this module's own form, as an
    Ansible run passes it on); every id once, every GPU list 1 to MAX_PARTITION_GPUS
    distinct addresses."""
    if not isinstance(items, (list, tuple)) or len(items) > MAX_PARTITIONS:
        raise _refuse("is not a list of at most %d partitions" % MAX_PARTITIONS, field)
    partitions, seen = [], set()
    for index, item in enumerate(items):
        where = "%s[%d]" % (field, index)
        if not isinstance(item, dict):
            raise _refuse("entry %d is not a mapping" % index, where)
        pid = _partition_id(item.get("id"), where + ".id")
        if pid in seen:
            raise _refuse("names partition %d twice" % pid, where + ".id")
        seen.add(pid)
        gpus = item.get("gpus")
        if not isinstance(gpus, (list, tuple)) or not 1 <= len(gpus) <= MAX_PARTITION_GPUS:
            raise _refuse("gives partition %d no list of 1 to %d GPUs" % (pid, MAX_PARTITION_GPUS),
                          where + ".gpus")
        canonical = tuple(sorted(_bus_id(g, "%s.gpus[%d]" % (where, n)) for n, g in enumerate(gpus)))
        if len(set(canonical)) != len(canonical):
            raise _refuse("names a GPU twice in partition %d" % pid, where + ".gpus")
        partitions.append(FabricPartition(pid, canonical, bool(item.get("active"))))
    return tuple(sorted(partitions, key=lambda p: p.id))


def partition_of(gpus, partitions):
    """The partition whose GPUs are exactly ``gpus``, or None."""
    wanted = tuple(sorted(gpus))
    for partition in partitions:
        if partition.gpus == wanted:
            return partition
    return None


def partition_sets(size, partitions):
    """The GPU sets of the partitions of ``size`` GPUs, as text for a refusal."""
    return "; ".join("%d: %s" % (p.id, ", ".join(p.gpus)) for p in partitions
                     if len(p.gpus) == size) or "none"
