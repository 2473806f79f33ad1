# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The placement planner: tenants onto GPUs, whole cores, hugepages and VFs of one node.

``plan_placement()`` is pure and deterministic: it reads nothing but the HostTopology
it is given, iterates in sorted order everywhere, and returns the plain-data plan that
docs/plan-format.md describes. Every later step (VFIO binding, hugepages, the tenant
domains, SR-IOV, IRQ pinning) reads that plan.

The SMT policies follow OpenStack Nova's ``hw:cpu_thread_policy``
(nova/virt/hardware.py ``_pack_instance_onto_cores``):

``require``
    vCPUs are placed on whole free cores only, sibling threads together, so the guest
    sees real SMT pairs (cores x threads). Nova refuses ``require`` on a host without
    SMT; here a host with one thread per core has nothing to share, so every core is
    whole and the policy simply holds.
``prefer``
    whole free cores first; the rest (an odd count, or a node short of whole cores) is
    taken thread by thread, from cores that are already partly used first, so that
    whole cores stay whole for later tenants.
``isolate``
    one thread per core; the other threads of each core are reserved for the tenant and
    given to nobody, so the guest never shares a core with anyone.

Existing tenants (a previous plan's ``tenants``) are copied into the new plan unchanged;
new tenants get only what is still free, so onboarding never moves a running tenant.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Tuple, Union

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    MAX_CPUS,
    MAX_NODE,
    format_cpulist,
    format_cpumask,
    parse_cpulist,
)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.address_width import (
    choose_address_width)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.model import MAX_IOTHREADS
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import fabric
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.iommu import group_members_verdict
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    NVIDIA_VENDOR,
    PciAddress,
    gpu_selection as as_gpu_selection,
    normalize_address,
    slot_bar64_sizes,
    vf_address,
)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    HostTopology,
    topology_from_dict,
)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    domain_name, hugepage_size_name, mapping, mapping_list, whole_number)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.vf_settings import (
    VfRequest,
    parse_nic_vf,
    settings_differences,
    vf_settings,
)

SMT_POLICIES = ("require", "prefer", "isolate")
EMULATOR_POLICIES = ("housekeeping", "dedicated")
HUGEPAGE_CHECKS = ("memory", "free", "none")
HUGEPAGE_SIZES_KIB = {"1G": 1048576, "2M": 2048}
GIB_KIB = 1048576
# VF drivers that need no rebinding before passthrough: already vfio-pci, or unbound.
_READY_VF_DRIVERS = (None, "", "vfio-pci")
# libvirt domain names become file names (/etc/libvirt/qemu/<name>.xml): no path
# characters, no leading dot or dash.
_TENANT_KEYS = ("name", "gpus", "vcpus", "memory_gib", "hugepage_size", "nic_vf",
                "iothreads", "emulator_policy")


@dataclass(frozen=True)
class TenantRequest:
    """One tenant as asked for; see docs/plan-format.md, "Tenant request"."""

    name: str
    gpus: Union[int, Tuple[str, ...]]      # a count, or canonical PCI addresses
    vcpus: int
    memory_gib: int
    hugepage_size: str = "1G"
    nic_vf: Union[bool, VfRequest] = False   # False, or the VF's settings (true: defaults)
    iothreads: int = 0
    emulator_policy: str = "housekeeping"

    @property
    def hugepage_size_kib(self):
        return HUGEPAGE_SIZES_KIB[self.hugepage_size]

    @property
    def hugepages_needed(self):
        return self.memory_gib * GIB_KIB // self.hugepage_size_kib

    @property
    def gpu_count(self):
        return self.gpus if isinstance(self.gpus, int) else len(self.gpus)

    @property
    def vf_request(self):
        """The VF's settings (a VfRequest), or None without a VF."""
        return parse_nic_vf(self.nic_vf) or None


# Bounds of the numbers of a request or a plan entry: past them a value is a typo or a
# hostile input, never a tenant. vCPUs: the kernel's CPU limit; memory: 64 TiB; GPUs and
# I/O threads: more than any PCIe host carries or a guest uses; NUMA nodes: the kernel's
# MAX_NUMNODES (1024); VFs: SR-IOV's 16-bit TotalVFs; anything else: a million.
# The guest firmware a plan's address width is computed for: the vm role's default for
# GPU tenants (vm_gpu_firmware); libvirt_pinned_domain recomputes it for the firmware
# it is given.
PLAN_FIRMWARE = "efi"
MAX_VCPUS = MAX_CPUS
MAX_MEMORY_GIB = 65536
MAX_GPUS = 64
MAX_VFS = 65535
MAX_HUGEPAGES = MAX_MEMORY_GIB * GIB_KIB // 4   # 4 KiB pages of 64 TiB


def tenant_request_from_dict(data, field="tenants[0]"):
    """Validate one tenant request (a dict as in docs/plan-format.md)."""
    if isinstance(data, TenantRequest):
        data = dataclasses.asdict(data)     # built elsewhere: validate it all the same
    if not isinstance(data, dict):
        raise GpuhostError("a tenant must be a mapping, got %r" % (data,), field=field,
                           fix="give name, gpus, vcpus and memory_gib for every tenant")
    unknown = sorted(set(data) - set(_TENANT_KEYS))
    if unknown:
        raise GpuhostError("unknown tenant keys %s" % ", ".join(unknown), field=field,
                           fix="use only %s" % ", ".join(_TENANT_KEYS))
    for key in ("name", "vcpus", "memory_gib"):
        if data.get(key) is None:
            raise GpuhostError("%s is missing" % key, field="%s.%s" % (field, key),
                               fix="give name, gpus, vcpus and memory_gib for every tenant")
    name = domain_name(data["name"], field="%s.name" % field)
    gpus = 1 if data.get("gpus") is None else data["gpus"]
    if isinstance(gpus, str) and not gpus.strip().isdigit():
        gpus = [gpus]                       # one address given without a list
    if isinstance(gpus, (list, tuple)):
        if not gpus:
            raise GpuhostError("the GPU address list is empty", field="%s.gpus" % field,
                               fix="give PCI addresses, or a count such as 1 (0 for none)")
        addresses = []
        for index, text in enumerate(gpus):
            address = normalize_address(text, field="%s.gpus[%d]" % (field, index))
            if address in addresses:
                raise GpuhostError("GPU %s is listed twice" % address,
                                   field="%s.gpus[%d]" % (field, index),
                                   fix="list every GPU once")
            addresses.append(address)
        gpus = tuple(sorted(addresses, key=PciAddress.parse))
    else:
        gpus = whole_number(gpus, "%s.gpus" % field, 0, MAX_GPUS)
    vcpus = whole_number(data["vcpus"], "%s.vcpus" % field, 1, MAX_VCPUS)
    memory_gib = whole_number(data["memory_gib"], "%s.memory_gib" % field, 1, MAX_MEMORY_GIB)
    size = str(data.get("hugepage_size") or "1G").strip().upper()
    if size not in HUGEPAGE_SIZES_KIB:
        raise GpuhostError("hugepage size %r is not supported" % (data.get("hugepage_size"),),
                           field="%s.hugepage_size" % field, fix="use 1G or 2M")
    nic_vf = parse_nic_vf(data.get("nic_vf"), field="%s.nic_vf" % field)
    iothreads = whole_number(data.get("iothreads") or 0, "%s.iothreads" % field, 0, MAX_IOTHREADS)
    emulator_policy = data.get("emulator_policy") or "housekeeping"
    if emulator_policy not in EMULATOR_POLICIES:
        raise GpuhostError("unknown emulator policy %r" % (emulator_policy,),
                           field="%s.emulator_policy" % field,
                           fix="use one of %s" % ", ".join(EMULATOR_POLICIES))
    return TenantRequest(name=name, gpus=gpus, vcpus=vcpus, memory_gib=memory_gib,
                         hugepage_size=size, nic_vf=nic_vf, iothreads=iothreads,
                         emulator_policy=emulator_policy)


# --------------------------------------------------------------------------- host index

class _Host:
    """What the planner needs from a HostTopology, indexed once (no rescans per tenant)."""

    def __init__(self, topology, vf_count=None, selection=None):
        self.topology = topology
        self.vf_count = vf_count
        self.selection = as_gpu_selection(selection)
        cpus = topology.cpus
        self.online = frozenset(cpus.online)
        self.possible_count = (max(cpus.possible) + 1 if cpus.possible
                               else (max(self.online) + 1 if self.online else 0))
        cpu_node = {}
        for node_id in sorted(topology.nodes):
            for cpu in topology.nodes[node_id].cpus:
                cpu_node.setdefault(cpu, node_id)
        cpu_nodes = sorted(n for n in topology.nodes if topology.nodes[n].cpus)
        self.cpu_nodes = tuple(cpu_nodes)
        for cpu_id, cpu in cpus.cpus.items():
            # A CPU whose node is offline or unknown has no memory to pair with: the
            # planner leaves it to the host.
            if cpu_id not in cpu_node and cpu.node in topology.nodes:
                cpu_node[cpu_id] = cpu.node
        self.cpu_node = cpu_node
        # A core is the set of its online threads; a thread whose siblings are unknown
        # is a core of its own.
        cores_by_node: Dict[int, List[Tuple[int, ...]]] = {}
        core_of = {}
        for cpu_id in sorted(self.online):
            if cpu_id in core_of:
                continue
            cpu = cpus.cpus.get(cpu_id)
            siblings = tuple(sorted(s for s in (cpu.thread_siblings if cpu else ())
                                    if s in self.online))
            if cpu_id not in siblings:
                siblings = (cpu_id,)
            siblings = tuple(s for s in siblings if s not in core_of)
            for thread in siblings:
                core_of[thread] = siblings
            node = cpu_node.get(cpu_id)
            if node is not None:
                cores_by_node.setdefault(node, []).append(siblings)
        self.core_of = core_of
        self.cores_by_node = {n: tuple(c) for n, c in sorted(cores_by_node.items())}
        self.threads_per_core = max((len(c) for c in core_of.values()), default=1)

        self.pci = topology.pci
        # Parsed once: sorting and slot lookups by address are the planner's hot path.
        self.address_key = {a: PciAddress.parse(a) for a in topology.pci}
        ordered = sorted(topology.pci, key=self.address_key.__getitem__)
        self.slots: Dict[tuple, List[str]] = {}
        self.groups: Dict[int, List[str]] = {}
        for address in ordered:
            function = topology.pci[address]
            self.slots.setdefault(self.address_key[address].slot_key, []).append(address)
            if function.iommu_group is not None:
                self.groups.setdefault(function.iommu_group, []).append(address)
        self.gpus = self.selection.gpus(topology.pci)
        # An HGX board's NVSwitches, and the NVIDIA GPUs they join: sysfs shows no NVLink,
        # and a host has one such board, so every NVIDIA GPU of a host with NVSwitches is
        # taken as joined (docs/plan-format.md, "fabric").
        self.nvswitches = tuple(a for a in ordered if topology.pci[a].is_nvswitch)
        self.partitions = None      # Fabric Manager's, in the shared-NVSwitch model
        self.model = "none"         # the board's NVSwitch model (fabric.NVSWITCH_MODELS)
        self.fabric_gpus = tuple(g for g in self.gpus if topology.pci[g].vendor_id == NVIDIA_VENDOR) \
            if self.nvswitches else ()
        # A tenant's nic_vf is a network VF: an SR-IOV PF of another class (an NVMe
        # controller with secondary controllers, an accelerator) is no NIC.
        self.pfs = tuple(a for a in ordered
                         if topology.pci[a].is_sriov_pf and topology.pci[a].is_network)
        self._gpu_verdicts = {}
        self._vf_candidates = {}
        self._vf_index: Dict[str, int] = {}   # VF address -> its number on its PF
        flags = set(cpus.flags or ())
        self.gigantic_pages = "pdpe1gb" in flags or any(
            HUGEPAGE_SIZES_KIB["1G"] in node.hugepages for node in topology.nodes.values())

    def address_width(self, request, gpu_entries, field):
        """The report of the tenant's guest address width (domain.address_width), with
        the firmware the vm role gives GPU tenants and this host's CPU; None without
        GPUs. Refuses a tenant this host's address width cannot serve."""
        if not gpu_entries:
            return None
        cpus = self.topology.cpus
        flags = set(cpus.flags or ())
        width = choose_address_width(
            request.name, request.memory_gib * GIB_KIB * 1024,
            [tuple(g["bar64_sizes"]) for g in gpu_entries], firmware=PLAN_FIRMWARE,
            vendor=cpus.vendor, gib_pages="pdpe1gb" in flags if flags else True,
            host_bits=cpus.phys_bits, field="%s.gpus" % field)
        return width.report()

    def memory_node(self, node):
        """(the node whose memory backs tenants on ``node``'s CPUs, its distance).

        That is ``node`` itself unless its meminfo shows MemTotal 0: a node with CPUs
        and no memory (a DIMM-less socket, some sub-NUMA layouts), whose CPUs the
        kernel serves from elsewhere. Then it is the nearest node with memory by the
        firmware's distance table, the lowest id on a tie. (None, None) when the
        table names no node with memory: "nearest" cannot be told.
        """
        numa = self.topology.nodes[node]
        if numa.mem_total_kib != 0:
            return node, numa.distances.get(node)
        nearest = sorted((distance, other) for other, distance in numa.distances.items()
                         if other != node and other in self.topology.nodes
                         and self.topology.nodes[other].mem_total_kib)
        if not nearest:
            return None, None
        distance, other = nearest[0]
        return other, distance

    def device_node(self, address):
        """A device's NUMA node; on a one-node host an unknown node can only be that one."""
        node = self.pci[address].numa_node
        if node is None or node < 0:
            return self.cpu_nodes[0] if len(self.cpu_nodes) == 1 else None
        return node

    def slot_functions(self, address):
        return tuple(self.slots[self.address_key[address].slot_key])

    def gpu_verdict(self, addresses):
        key = tuple(addresses)
        if key not in self._gpu_verdicts:
            self._gpu_verdicts[key] = group_members_verdict(self.topology, list(addresses))
        return self._gpu_verdicts[key]

    def vf_target(self, pf):
        """How many VFs the PF will have when the tenants start: the count the SR-IOV
        stage creates (``vf_count``), else every VF it can have (sriov_totalvfs)."""
        function = self.pci[pf]
        total = function.sriov_totalvfs or 0
        wanted = self.vf_count.get(pf) if isinstance(self.vf_count, dict) else self.vf_count
        if wanted is None:
            return max(total, len(function.virtfns))
        return min(wanted, total) if total else wanted

    def vf_candidates(self, node):
        """Usable VFs of the node's PFs, best first: existing VFs with ready drivers,
        other existing VFs, then VFs the SR-IOV stage will create, each by address.

        A VF that does not exist yet is planned at the address the kernel will give it
        (the PF's routing ID + sriov_offset + index * sriov_stride), and only when the
        PF's own IOMMU group is clean: such VFs get groups of their own exactly when the
        PF has one (ACS on the PF's path). Existing VFs beyond the count the SR-IOV stage
        keeps are left out, since that stage removes them.
        """
        if node not in self._vf_candidates:
            ranked = []
            for pf in self.pfs:
                if self.device_node(pf) != node:
                    continue
                function = self.pci[pf]
                target = self.vf_target(pf)
                for index, vf in enumerate(function.virtfns[:target]):
                    self._vf_index[vf] = index      # virtfns: sorted by virtfnN
                    if vf in self.pci and self.vf_group_clean(vf):
                        rank = 0 if self.pci[vf].driver in _READY_VF_DRIVERS else 1
                        ranked.append((rank, self.address_key[pf], PciAddress.parse(vf),
                                       pf, vf))
                if (len(function.virtfns) < target and function.sriov_offset is not None
                        and function.sriov_stride is not None and self.vf_group_clean(pf)):
                    for index in range(len(function.virtfns), target):
                        try:
                            vf = vf_address(pf, function.sriov_offset,
                                            function.sriov_stride, index)
                        except GpuhostError:
                            break           # past bus ff: no such VF can be made
                        if vf in self.pci:
                            continue        # the address is taken by another function
                        self._vf_index[vf] = index
                        ranked.append((2, self.address_key[pf], PciAddress.parse(vf),
                                       pf, vf))
            ranked.sort()
            self._vf_candidates[node] = tuple(entry[-2:] for entry in ranked)
        return self._vf_candidates[node]

    def vf_index(self, vf):
        """The VF's number on its PF (virtfnN, or the index its predicted address was
        computed from); only for VFs vf_candidates() returned."""
        return self._vf_index[vf]

    def vf_group_clean(self, address):
        """A VF goes to a guest alone: its group must hold nothing but it and bridges
        (for a PF: nothing but the PF and bridges, so its future VFs are alone too)."""
        group = self.pci[address].iommu_group
        if group is None:
            return False
        return all(member == address or self.pci[member].is_bridge
                   for member in self.groups.get(group, ()))


# ----------------------------------------------------------------------- housekeeping

def default_housekeeping(topology):
    """The first physical core of every node that has online CPUs, with its siblings."""
    host = topology if isinstance(topology, _Host) else _Host(_as_topology(topology))
    result = {}
    for node, cores in host.cores_by_node.items():
        if cores:
            result[node] = tuple(sorted(cores[0]))
    return result


def resolve_housekeeping(topology, housekeeping=None):
    """Housekeeping CPUs per node: the explicit ones where given, the default elsewhere.

    ``housekeeping`` maps node ids (int or str) to cpulists. Every CPU must be online
    and on that node.
    """
    host = topology if isinstance(topology, _Host) else _Host(_as_topology(topology))
    result = default_housekeeping(host)
    if housekeeping is None:
        return result
    if not isinstance(housekeeping, dict):
        raise GpuhostError("housekeeping must map NUMA nodes to cpulists, got %r"
                           % (housekeeping,), field="housekeeping",
                           fix='write it as {"0": "0,32", "1": "16,48"}')
    nodes = host.topology.nodes
    for key in sorted(housekeeping, key=str):
        field = "housekeeping.%s" % key
        try:
            node = int(str(key).strip())
        except ValueError:
            raise GpuhostError("%r is not a NUMA node id" % (key,), field=field,
                               fix="use node ids as keys, e.g. \"0\"")
        if node not in nodes:
            raise GpuhostError("node %d does not exist (nodes: %s)"
                               % (node, format_cpulist(nodes)), field=field,
                               fix="use one of the host's NUMA nodes")
        cpus = parse_cpulist(housekeeping[key], field=field)
        offline = [c for c in cpus if c not in host.online]
        if offline:
            raise GpuhostError(
                "housekeeping CPUs %s of node %d are offline or do not exist (online: %s)"
                % (format_cpulist(offline), node, format_cpulist(host.online)), field=field,
                fix="bring them online (echo 1 > /sys/devices/system/cpu/cpuN/online) or "
                    "pick online CPUs of node %d: %s"
                    % (node, format_cpulist(c for c in nodes[node].cpus if c in host.online)))
        foreign = [c for c in cpus if host.cpu_node.get(c, node) != node]
        if foreign:
            raise GpuhostError(
                "CPUs %s are not on node %d" % (format_cpulist(foreign), node), field=field,
                fix="pick CPUs of node %d: %s" % (node, format_cpulist(nodes[node].cpus)))
        result[node] = tuple(cpus)
    if not any(result.values()):
        raise GpuhostError("no housekeeping CPU is left for the host", field="housekeeping",
                           fix="keep at least one core per node for the host, IRQs and "
                               "the QEMU emulator threads")
    return dict(sorted(result.items()))


def _as_topology(topology):
    if isinstance(topology, HostTopology):
        return topology
    if isinstance(topology, dict):
        return topology_from_dict(topology)
    raise GpuhostError("the topology must be a HostTopology or its dict form",
                       field="topology", fix="pass the output of read_host_topology() or "
                                             "topology_to_dict()")


# ------------------------------------------------------------------------- the ledger

class _Ledger:
    """What is taken: CPUs, PCI functions and hugepages, and by whom."""

    def __init__(self):
        self.cpu_owner: Dict[int, str] = {}
        self.function_owner: Dict[str, str] = {}
        self.memory_kib: Dict[int, int] = {}
        self.new_pages: Dict[Tuple[int, int], int] = {}     # (node, size) -> pages
        self.quarantined: Dict[str, str] = {}                # GPU -> why nobody gets it

    def take_cpus(self, cpus, owner, field):
        for cpu in sorted(cpus):
            holder = self.cpu_owner.get(cpu)
            if holder is not None and holder != owner:
                raise GpuhostError("CPU %d is held by both %s and %s" % (cpu, holder, owner),
                                   field=field,
                                   fix="give each tenant its own CPUs (re-plan one of them)")
            self.cpu_owner[cpu] = owner

    def take_function(self, address, owner, field, what="device"):
        holder = self.function_owner.get(address)
        if holder is not None and holder != owner:
            raise GpuhostError("%s %s is given to both %s and %s"
                               % (what, address, holder, owner), field=field,
                               fix="give each %s to one tenant only" % what)
        self.function_owner[address] = owner


# ---------------------------------------------------------------- existing allocation

def _existing_cpus(entry, field):
    """The CPUs an existing tenant holds exclusively."""
    if entry.get("dedicated_cpus") is not None:
        return parse_cpulist(entry["dedicated_cpus"], field="%s.dedicated_cpus" % field)
    cpus = set(parse_cpulist(entry.get("vcpu_pins") or [], field="%s.vcpu_pins" % field))
    cpus.update(parse_cpulist(entry.get("reserved_cpus") or "",
                              field="%s.reserved_cpus" % field))
    if entry.get("emulator_policy") == "dedicated":
        cpus.update(parse_cpulist(entry.get("emulator_cpus") or "",
                                  field="%s.emulator_cpus" % field))
    if entry.get("iothread_placement") == IOTHREADS_DEDICATED:
        cpus.update(parse_cpulist(entry.get("iothread_cpus") or "",
                                  field="%s.iothread_cpus" % field))
    return tuple(sorted(cpus))


def _load_existing(existing, host, ledger, warnings):
    entries = []
    names = {}
    for index, entry in enumerate(existing or ()):
        field = "existing[%d]" % index
        if not isinstance(entry, dict):
            raise GpuhostError("an existing tenant must be a plan entry (a mapping)",
                               field=field, fix="pass the tenants list of a previous plan")
        for key in ("name", "node", "vcpu_pins"):
            if key not in entry:
                raise GpuhostError("%s is missing" % key, field="%s.%s" % (field, key),
                                   fix="pass the tenants list of a previous plan unchanged")
        name = domain_name(entry["name"], field="%s.name" % field)
        if name in names:
            raise GpuhostError("tenant %s appears twice in the existing allocation" % name,
                               field=field, fix="keep one entry per tenant")
        names[name] = entry
        cpus = _existing_cpus(entry, field)
        ledger.take_cpus(cpus, name, field)
        offline = [c for c in cpus if c not in host.online]
        if offline:
            warnings.append("existing tenant %s is pinned to CPUs %s, which are not online"
                            % (name, format_cpulist(offline)))
        unchanged = "pass the tenants list of a previous plan unchanged"
        for gpu_index, gpu in enumerate(mapping_list(entry.get("gpus"), "%s.gpus" % field,
                                                     unchanged)):
            for address in gpu.get("functions") or [gpu.get("address")]:
                address = normalize_address(address, field="%s.gpus[%d]" % (field, gpu_index))
                ledger.take_function(address, name, "%s.gpus[%d]" % (field, gpu_index), "GPU")
                if address not in host.pci:
                    warnings.append("existing tenant %s holds %s, which the host does not "
                                    "show" % (name, address))
        for switch_index, switch in enumerate(mapping_list(entry.get("nvswitches"),
                                                           "%s.nvswitches" % field, unchanged)):
            where = "%s.nvswitches[%d]" % (field, switch_index)
            ledger.take_function(normalize_address(switch.get("address"), field=where), name,
                                 where, "NVSwitch")
        vf = entry.get("vf")
        if vf:
            vf = mapping(vf, "%s.vf" % field, unchanged)
            address = normalize_address(vf.get("address"), field="%s.vf.address" % field)
            ledger.take_function(address, name, "%s.vf" % field, "VF")
        _check_pages(entry, field)
        for memory_node, memory_kib in _existing_memory(entry, field, unchanged):
            ledger.memory_kib[memory_node] = ledger.memory_kib.get(memory_node, 0) + memory_kib
        entries.append(entry)
    return entries, names


def _existing_memory(entry, field, unchanged):
    """[(memory node, KiB)] an existing tenant holds: per guest cell for a tenant over
    several nodes, else all of it on its memory_node (on its node for plans made before
    memory_node existed)."""
    cells = mapping_list(entry.get("guest_cells"), "%s.guest_cells" % field, unchanged)
    if cells:
        return [(whole_number(cell.get("memory_node"), "%s.guest_cells[%d].memory_node"
                              % (field, number), 0, MAX_NODE),
                 whole_number(cell.get("memory_gib"), "%s.guest_cells[%d].memory_gib"
                              % (field, number), 0, MAX_MEMORY_GIB) * GIB_KIB)
                for number, cell in enumerate(cells)]
    node = whole_number(entry["node"], "%s.node" % field, 0, MAX_NODE)
    memory_node = entry.get("memory_node")
    memory_node = whole_number(node if memory_node is None else memory_node,
                               "%s.memory_node" % field, 0, MAX_NODE)
    return [(memory_node, whole_number(entry.get("memory_gib", 0), "%s.memory_gib" % field, 0,
                                       MAX_MEMORY_GIB) * GIB_KIB)]


def _check_pages(entry, field):
    """The hugepages of an existing entry ({node: count} of hugepage_size_kib pages) are
    whole, bounded numbers: the plan's summary adds them up."""
    size = entry.get("hugepage_size_kib")
    if size is not None:
        whole_number(size, "%s.hugepage_size_kib" % field, 1, MAX_MEMORY_GIB * GIB_KIB)
    pages = entry.get("hugepages")
    if pages is None:
        return
    if not isinstance(pages, dict):
        raise GpuhostError("hugepages must map NUMA nodes to page counts, got %r" % (pages,),
                           field="%s.hugepages" % field,
                           fix="pass the tenants list of a previous plan unchanged")
    for node, count in pages.items():
        whole_number(node, "%s.hugepages" % field, 0, MAX_NODE)
        whole_number(count, "%s.hugepages.%s" % (field, node), 0, MAX_HUGEPAGES)


def _matches_existing(request, entry):
    """Why a request differs from the tenant already placed under its name, or None."""
    differences = []
    if request.vcpus != len(entry.get("vcpu_pins") or ()):
        differences.append("vcpus %d, placed with %d"
                           % (request.vcpus, len(entry.get("vcpu_pins") or ())))
    if request.memory_gib != entry.get("memory_gib"):
        differences.append("memory_gib %d, placed with %s"
                           % (request.memory_gib, entry.get("memory_gib")))
    if request.hugepage_size_kib != entry.get("hugepage_size_kib"):
        differences.append("hugepage_size %s, placed with %s kB pages"
                           % (request.hugepage_size, entry.get("hugepage_size_kib")))
    placed_gpus = [g.get("address") for g in entry.get("gpus") or ()]
    if isinstance(request.gpus, int):
        if request.gpus != len(placed_gpus):
            differences.append("gpus %d, placed with %d" % (request.gpus, len(placed_gpus)))
    elif sorted(request.gpus) != sorted(normalize_address(a) for a in placed_gpus):
        differences.append("gpus %s, placed with %s" % (", ".join(request.gpus),
                                                        ", ".join(placed_gpus) or "none"))
    if bool(request.nic_vf) != bool(entry.get("vf")):
        differences.append("nic_vf %s, placed %s a VF" % (str(bool(request.nic_vf)).lower(),
                                                          "with" if entry.get("vf") else
                                                          "without"))
    elif request.nic_vf:
        # An entry placed before the VF settings existed reads as the defaults.
        differences += settings_differences(request.vf_request.as_dict(),
                                            vf_settings(entry["vf"]))
    if request.iothreads != entry.get("iothreads", 0):
        differences.append("iothreads %d, placed with %s" % (request.iothreads,
                                                             entry.get("iothreads")))
    if request.emulator_policy != entry.get("emulator_policy", "housekeeping"):
        differences.append("emulator_policy %s, placed with %s"
                           % (request.emulator_policy, entry.get("emulator_policy")))
    return "; ".join(differences) or None


# ------------------------------------------------------------------------ CPU packing

class _NoFit(Exception):
    """One node cannot hold one tenant; carries the details for the final message."""

    def __init__(self, node, resource, needed, free, field, fix):
        self.node = node
        self.resource = resource
        self.needed = needed
        self.free = free
        self.field = field
        self.fix = fix
        super().__init__("node %s: not enough %s: needs %s, free %s"
                         % (node, resource, needed, free))

    @property
    def text(self):
        return str(self)


def _pack_cpus(host, node, free, request, policy, field):
    """vCPU pins, reserved siblings, guest threads and the dedicated emulator core.

    ``free`` is the set of CPUs of ``node`` nobody holds. Cores are taken lowest first so
    that what is left stays contiguous.
    """
    tpc = host.threads_per_core
    cores = host.cores_by_node.get(node, ())
    whole = [c for c in cores if len(c) == tpc and all(t in free for t in c)]
    extra_core = 1 if request.emulator_policy == "dedicated" else 0
    emulator_field = "%s.emulator_policy" % field
    field = "%s.vcpus" % field
    free_list = "CPUs %s" % (format_cpulist(free) or "none")

    if policy in ("require", "isolate"):
        per_core = tpc if policy == "require" else 1
        needed = request.vcpus // per_core + extra_core
        if len(whole) < needed:
            if policy == "require":
                what = "%d vCPUs at %d threads per core" % (request.vcpus, tpc)
            else:
                what = "%d vCPUs at one thread per core" % request.vcpus
            if extra_core:
                what = "%d for %s + 1 for the dedicated emulator core" % (needed - 1, what)
            raise _NoFit(node, "whole cores", "%d (%s, smt_policy %s)" % (needed, what, policy),
                         "%d (%s)" % (len(whole), format_cpulist(t for c in whole for t in c)
                                      or "none"),
                         field, _cpu_fix(request, policy))
        chosen = whole[:request.vcpus // per_core]
        if policy == "require":
            pins = [t for c in chosen for t in c]
            reserved = []
            threads = tpc
        else:
            pins = [c[0] for c in chosen]
            reserved = [t for c in chosen for t in c[1:]]
            threads = 1
        emulator_core = whole[len(chosen)] if extra_core else None
        return pins, reserved, threads, emulator_core

    # prefer: whole cores first, then single threads, partly used cores first.
    if extra_core and not whole:
        raise _NoFit(node, "whole cores", "1 for the dedicated emulator core", "0 (%s)"
                     % free_list, emulator_field,
                     "use emulator_policy housekeeping, or free a whole core on node %s"
                     % node)
    usable_whole = whole[:len(whole) - extra_core]
    emulator_core = whole[len(whole) - 1] if extra_core else None
    available = len(free) - (len(emulator_core) if emulator_core else 0)
    if available < request.vcpus:
        need = "%d threads" % request.vcpus
        if extra_core:
            need += " + 1 whole core for the dedicated emulator"
        raise _NoFit(node, "CPUs", need, "%d (%s)" % (len(free), free_list), field,
                     _cpu_fix(request, policy))
    chosen = usable_whole[:request.vcpus // tpc]
    pins = [t for c in chosen for t in c]
    remainder = request.vcpus - len(pins)
    if remainder:
        taken = set(pins) | set(emulator_core or ())
        partial = [t for c in cores if not (len(c) == tpc and all(x in free for x in c))
                   for t in c if t in free and t not in taken]
        rest = [t for c in usable_whole[len(chosen):] for t in c]
        pins.extend((partial + rest)[:remainder])
    threads = tpc if not remainder else 1
    if emulator_core is not None:
        # The emulator core was set aside from the end so that vCPUs keep the low cores;
        # move it to the first whole core nobody took, for a tidy, contiguous layout.
        untouched = [c for c in whole if not set(c) & set(pins)]
        emulator_core = untouched[0]
    return pins, [], threads, emulator_core


def _cpu_fix(request, policy):
    if policy == "require":
        return ("ask for fewer vCPUs, give the node fewer housekeeping CPUs, or free "
                "cores held by other tenants")
    if policy == "isolate":
        return ("ask for fewer vCPUs or use smt_policy require (isolate uses a whole core "
                "per vCPU)")
    return "ask for fewer vCPUs, or free CPUs held by other tenants"


# ---------------------------------------------------------------------------- the plan

def plan_placement(topology, tenants, housekeeping=None, smt_policy="require",
                   existing=None, hugepage_check="memory", allow_acs_override=False,
                   vf_count=None, gpu_selection=None, quarantined=None, fabric_partitions=None,
                   nvswitch_model=None):
    """Place ``tenants`` on ``topology`` and return the plan (docs/plan-format.md).

    ``topology``: a HostTopology or its dict form. ``tenants``: request dicts or
    TenantRequest objects. ``housekeeping``: {node: cpulist}, the default elsewhere.
    ``existing``: a previous plan's ``tenants``; they are kept unchanged, and a request
    with the same name stands for that tenant. ``hugepage_check``: ``memory`` (the
    node's free hugepages plus free memory must hold the new tenants' pages, which the
    numa role reserves after planning), ``free`` (the pages must already be reserved
    and free) or ``none``. ``allow_acs_override``: place GPUs and VFs although
    pcie_acs_override is active (its groups are not isolated by the hardware).
    ``vf_count``: how many VFs the SR-IOV stage gives each PF (an int for every PF, or
    {pf address: count}); VFs that do not exist yet are planned at their predicted
    addresses up to that count (sriov_totalvfs when None), existing VFs first.
    ``gpu_selection``: what counts as a GPU (a pci.GpuSelection, or the gpu_devices list;
    None: the default classes). ``quarantined``: {GPU address: why} of GPUs no new
    tenant gets (the ledger's quarantine). ``fabric_partitions``: on an NVSwitch board
    in the shared-NVSwitch model, Fabric Manager's partitions (fabric.py: FabricPartitions
    or their list form); each tenant with the board's GPUs gets exactly the GPUs of one
    partition, and its entry names it (``fabric_partition``). ``nvswitch_model``: NVIDIA's
    model for such a board (fabric.NVSWITCH_MODELS); None means ``shared`` when
    partitions are given, else ``none``, where a tenant with several of the board's GPUs
    is refused. In ``full`` one tenant gets the whole board: all its GPUs and NVSwitches,
    over the NUMA nodes they sit on, one guest NUMA cell per node (``guest_cells``).
    Raises GpuhostError; changes nothing.
    """
    selection = as_gpu_selection(gpu_selection)
    if smt_policy not in SMT_POLICIES:
        raise GpuhostError("unknown SMT policy %r" % (smt_policy,), field="smt_policy",
                           fix="use one of %s (Nova's hw:cpu_thread_policy meanings)"
                               % ", ".join(SMT_POLICIES))
    if hugepage_check not in HUGEPAGE_CHECKS:
        raise GpuhostError("unknown hugepage check %r" % (hugepage_check,),
                           field="hugepage_check", fix="use one of %s"
                                                       % ", ".join(HUGEPAGE_CHECKS))
    if not isinstance(tenants, (list, tuple)):
        raise GpuhostError("tenants must be a list", field="tenants",
                           fix="give a list of tenant requests")
    if isinstance(existing, dict) and isinstance(existing.get("tenants"), list):
        existing = existing["tenants"]      # a whole previous plan
    if existing is not None and not isinstance(existing, (list, tuple)):
        raise GpuhostError("existing must be a list of plan tenants", field="existing",
                           fix="pass the tenants list of a previous plan")
    vf_count = _vf_count_arg(vf_count)
    host = _Host(_as_topology(topology), vf_count, selection)
    if not host.cores_by_node:
        raise GpuhostError("the topology shows no online CPU on any NUMA node",
                           field="topology", fix="check that /sys/devices/system/cpu and "
                                                 "/sys/devices/system/node are readable")
    requests = []
    seen = {}
    for index, data in enumerate(tenants):
        request = tenant_request_from_dict(data, field="tenants[%d]" % index)
        if request.name in seen:
            raise GpuhostError("tenant name %s is used twice (tenants[%d] and tenants[%d])"
                               % (request.name, seen[request.name], index),
                               field="tenants[%d].name" % index,
                               fix="give every tenant its own name")
        seen[request.name] = index
        _check_vcpus(request, host, smt_policy, "tenants[%d].vcpus" % index)
        requests.append((index, request))

    _check_acs_override(host, requests, allow_acs_override)
    # The reader's findings (overlapping node CPU lists) travel in the plan, which is
    # where the modules report warnings from.
    warnings: List[str] = list(host.topology.warnings)
    unmatched = selection.unmatched(host.pci)
    if unmatched:
        warnings.append("gpu_devices lists %s, which no PCI function of this host matches"
                        % ", ".join(unmatched))
    host.model = _nvswitch_model(nvswitch_model, fabric_partitions)
    host.partitions = _fabric_partitions(host, fabric_partitions)
    ledger = _Ledger()
    ledger.quarantined = dict(quarantined or {})
    kept, kept_by_name = _load_existing(existing, host, ledger, warnings)
    housekeeping_cpus = resolve_housekeeping(host, housekeeping)
    for node, cpus in housekeeping_cpus.items():
        for cpu in cpus:
            holder = ledger.cpu_owner.get(cpu)
            if holder is not None:
                raise GpuhostError(
                    "housekeeping CPU %d of node %d is pinned to existing tenant %s"
                    % (cpu, node, holder), field="housekeeping.%d" % node,
                    fix="keep the housekeeping CPUs of the plan that placed %s" % holder)
    for index, request in requests:
        if request.name in kept_by_name:
            why = _matches_existing(request, kept_by_name[request.name])
            if why:
                raise GpuhostError(
                    "tenant %s is already placed and the request differs: %s"
                    % (request.name, why), field="tenants[%d]" % index,
                    fix="keep the request as placed, or offboard %s first and plan it "
                        "again" % request.name)

    check_unique_macs(requests, kept, warnings)

    planned = []
    for index, request in requests:
        if request.name in kept_by_name:
            continue
        planned.append(_place_tenant(host, ledger, housekeeping_cpus, request, index,
                                     smt_policy, hugepage_check, warnings))
    _place_iothreads(host, ledger, housekeeping_cpus, planned)

    all_tenants = [copy.deepcopy(e) for e in kept] + planned
    return _assemble(host, housekeeping_cpus, smt_policy, all_tenants, ledger, warnings)


def check_unique_macs(requests, existing=(), warnings=None):
    """Refuse two tenants of one host with the same VF MAC, naming both.

    ``requests``: (index, TenantRequest) pairs; ``existing``: plan entries. A request
    with the name of an existing tenant stands for it (its settings are compared with the
    placed ones elsewhere). Two existing entries with one MAC (a hand-edited ledger) only
    warn, so that offboarding one of them still works.
    """
    owners = {}
    for position, entry in enumerate(existing or ()):
        settings = vf_settings(entry.get("vf"))
        mac = settings and settings["mac"]
        if not mac:
            continue
        if mac in owners and warnings is not None:
            warnings.append("existing tenants %s and %s have the same VF MAC %s"
                            % (owners[mac][0], entry.get("name"), mac))
        owners.setdefault(mac, (entry.get("name"), "existing[%d].vf.mac" % position))
    placed = set(entry.get("name") for entry in existing or ())
    for index, request in requests:
        vf = request.vf_request
        if request.name in placed or not vf or not vf.mac:
            continue
        holder = owners.get(vf.mac)
        if holder and holder[0] != request.name:
            raise GpuhostError(
                "MAC %s would be shared by tenants %s (%s) and %s"
                % (vf.mac, holder[0], holder[1], request.name),
                field="tenants[%d].nic_vf.mac" % index,
                fix="give every tenant of a host its own MAC, or leave mac out for the "
                    "driver's own")
        owners[vf.mac] = (request.name, "tenants[%d].nic_vf.mac" % index)


def _vf_count_arg(vf_count):
    if vf_count is None or vf_count == "":
        return None
    if isinstance(vf_count, dict):
        return {normalize_address(pf, field="vf_count"):
                whole_number(count, "vf_count.%s" % pf, 0, MAX_VFS)
                for pf, count in sorted(vf_count.items())}
    return whole_number(vf_count, "vf_count", 0, MAX_VFS)


def _check_acs_override(host, requests, allowed):
    """A group split by pcie_acs_override is no isolation: refuse to hand out devices."""
    override = host.topology.iommu.acs_override
    if not override or allowed:
        return
    for index, request in requests:
        if request.gpu_count or request.nic_vf:
            raise GpuhostError(
                "pcie_acs_override=%s is active on the kernel command line: its IOMMU groups "
                "are split by the kernel, not isolated by the hardware, so tenant %s's "
                "devices could reach another tenant's by peer-to-peer DMA"
                % (override, request.name), field="allow_acs_override",
                fix="remove pcie_acs_override from the kernel command line and reboot (move "
                    "the GPU to a slot whose root port has ACS); set allow_acs_override: true "
                    "only on a host with a single tenant")


def _check_vcpus(request, host, smt_policy, field):
    tpc = host.threads_per_core
    if smt_policy == "require" and request.vcpus % tpc:
        lower = request.vcpus - request.vcpus % tpc
        options = "%d or %d" % (lower, lower + tpc) if lower else "%d" % tpc
        raise GpuhostError(
            "%d vCPUs cannot fill whole cores: smt_policy require needs a positive "
            "multiple of the host's %d threads per core" % (request.vcpus, tpc), field=field,
            fix="ask for %s vCPUs, or use smt_policy prefer" % options)


def _gpu_candidates(host, ledger, request, index):
    """Free GPUs per node for a count request, plus why each other GPU was skipped."""
    by_node: Dict[int, List[str]] = {}
    skipped = []
    for address in host.gpus:
        holder = ledger.function_owner.get(address)
        if holder:
            skipped.append("%s (taken by %s)" % (address, holder))
            continue
        if address in ledger.quarantined:
            skipped.append("%s (quarantined: %s)" % (address, ledger.quarantined[address]))
            continue
        node = host.device_node(address)
        if node is None:
            skipped.append("%s (NUMA node unknown)" % address)
            continue
        verdict = host.gpu_verdict((address,))
        if not verdict.clean:
            skipped.append("%s (IOMMU group %s not clean: %s)"
                           % (address, verdict.group, "; ".join(verdict.reasons)
                              or "foreign devices"))
            continue
        if host.pci[address].boot_vga:
            # The console's VGA: handing it out by count would lock the operator out of
            # the local console. Naming it explicitly is still possible (vfio_bind then
            # refuses it unless allow_boot_vga is set).
            skipped.append("%s (boot VGA with the console; name it explicitly to use it)"
                           % address)
            continue
        by_node.setdefault(node, []).append(address)
    return by_node, skipped


def _explicit_gpus(host, ledger, request, index):
    field = "tenants[%d].gpus" % index
    nodes = set()
    for position, address in enumerate(request.gpus):
        item = "%s[%d]" % (field, position)
        if address not in host.pci:
            raise GpuhostError("GPU %s does not exist on this host" % address, field=item,
                               fix="pick one of the host's GPUs: %s"
                                   % (", ".join(host.gpus) or "none found"))
        if address not in host.gpus:
            # A selected function that is not a GPU is a companion of its slot's first.
            slot = host.address_key[address].slot_key
            owner = [g for g in host.gpus if host.address_key[g].slot_key == slot]
            raise GpuhostError("%s is not a GPU (class 0x%06x)%s"
                               % (address, host.pci[address].class_code,
                                  ": it is a function of GPU %s" % owner[0] if owner else ""),
                               field=item,
                               fix="pick one of the host's GPUs: %s; or list the card's "
                                   "vendor:device ID or address in gpu_devices"
                                   % (", ".join(host.gpus) or "none found"))
        holder = ledger.function_owner.get(address)
        if holder:
            raise GpuhostError("GPU %s is already given to tenant %s" % (address, holder),
                               field=item, fix="pick a free GPU or a count instead of an "
                                               "address")
        if address in ledger.quarantined:
            raise GpuhostError("GPU %s is quarantined: %s" % (address, ledger.quarantined[address]),
                               field=item,
                               fix="pick another GPU, or bring this one back (a reset or a remove "
                                   "and rescan) and lift its quarantine with tenant_ledger's "
                                   "recover option, which reads it again first")
        node = host.device_node(address)
        if node is None:
            raise GpuhostError("the NUMA node of GPU %s is unknown" % address, field=item,
                               fix="check /sys/bus/pci/devices/%s/numa_node and the BIOS "
                                   "NUMA (SRAT) settings" % address)
        nodes.add(node)
    if len(nodes) > 1:
        raise GpuhostError("GPUs %s are on different NUMA nodes (%s)"
                           % (", ".join(request.gpus), format_cpulist(nodes)), field=field,
                           fix="give a tenant GPUs of one node only, or split it")
    verdict = host.gpu_verdict(request.gpus)
    if not verdict.clean:
        foreign = ", ".join("%s (%s)" % (f.get("address"), f.get("class_name") or
                                         f.get("class_code")) for f in verdict.foreign)
        raise GpuhostError("IOMMU group %s of %s is not clean: %s"
                           % (verdict.group, ", ".join(request.gpus),
                              foreign or "; ".join(verdict.reasons)), field=field,
                           fix="move the card to a slot with its own IOMMU group (see "
                               "iommu_groups_facts); an ACS override would weaken isolation")
    return nodes.pop(), list(request.gpus)


def _node_room(host, ledger, housekeeping_cpus, node):
    held = housekeeping_cpus.get(node, ())
    return sum(1 for c in host.cores_by_node.get(node, ()) for t in c
               if t not in ledger.cpu_owner and t not in held)


def _nvswitch_model(given, partitions):
    """The NVSwitch model a plan is made under: ``given``, or the one the partitions
    imply. Partitions belong to the shared model only."""
    if given is None:
        return fabric.SHARED if partitions is not None else "none"
    if given not in fabric.NVSWITCH_MODELS:
        raise GpuhostError("unknown NVSwitch model %r" % (given,), field="nvswitch_model",
                           fix="use one of %s" % ", ".join(fabric.NVSWITCH_MODELS))
    if partitions is not None and given != fabric.SHARED:
        raise GpuhostError("fabric_partitions are given under the NVSwitch model %s; only "
                           "the shared model has partitions" % given, field="fabric_partitions",
                           fix="drop fabric_partitions, or use nvswitch_model shared")
    if given == fabric.SHARED and partitions is None:
        raise GpuhostError("the shared NVSwitch model needs Fabric Manager's partitions",
                           field="fabric_partitions",
                           fix="read them on the host (fabric_partition state=read) and pass "
                               "them as fabric_partitions")
    return given


def _fabric_partitions(host, given):
    """The board's FabricPartitions in the shared-NVSwitch model, or None (no model).
    Partitions of GPUs this host does not count as the board's are refused."""
    if given is None:
        return None
    partitions = given if all(isinstance(p, fabric.FabricPartition) for p in given or ()) \
        else fabric.partitions_from_list(given)
    if not host.nvswitches:
        raise GpuhostError("fabric_partitions are given but this host has no NVSwitch",
                           field="fabric_partitions",
                           fix="give Fabric Manager's partitions only for an NVSwitch board "
                               "(nvswitch_model shared)")
    for partition in partitions:
        foreign = [g for g in partition.gpus if g not in host.fabric_gpus]
        if foreign:
            raise GpuhostError("Fabric Manager's partition %d holds %s, which this host does not "
                               "show as GPUs of its NVSwitch board" % (partition.id, ", ".join(foreign)),
                               field="fabric_partitions",
                               fix="read the partitions on this host (fabric_partition state=read)")
    return tuple(partitions)


def _board_gpus(host, request):
    """How many of the board's GPUs a request takes (all of a count on a board host)."""
    if not host.fabric_gpus:
        return 0
    if isinstance(request.gpus, tuple):
        return sum(1 for g in request.gpus if g in host.fabric_gpus)
    return request.gpus


def _partition_options(host, request, index, options, by_node=None):
    """The options (node, gpus, partition id) of a tenant on the board in the
    shared-NVSwitch model: exactly one partition's GPUs, free and on one node."""
    field = "tenants[%d].gpus" % index
    if isinstance(request.gpus, tuple):
        node, gpus = options[0]
        partition = fabric.partition_of(gpus, host.partitions)
        if partition is None:
            raise GpuhostError(
                "tenant %s asks for %s, which no Fabric Manager partition holds exactly: in the "
                "shared-NVSwitch model a tenant gets the GPUs of one partition"
                % (request.name, ", ".join(gpus)), field=field,
                fix="ask for the GPUs of one partition of %d GPU(s): %s"
                    % (len(gpus), fabric.partition_sets(len(gpus), host.partitions)))
        return [(node, list(gpus), partition.id)]
    found = []
    for partition in host.partitions:
        if len(partition.gpus) != request.gpus:
            continue
        for node, free in sorted((by_node or {}).items()):
            if all(g in free for g in partition.gpus):
                found.append((node, list(partition.gpus), partition.id))
    if not found:
        raise GpuhostError(
            "tenant %s needs %d GPU(s) of the NVSwitch board, and no Fabric Manager partition of "
            "that size has all its GPUs free, clean and on one NUMA node"
            % (request.name, request.gpus), field=field,
            fix="ask for a size Fabric Manager partitions have, or free a partition's GPUs; "
                "partitions of %d GPU(s): %s; free GPUs by node: %s"
                % (request.gpus, fabric.partition_sets(request.gpus, host.partitions),
                   "; ".join("node %d: %s" % (n, ", ".join(g) or "none")
                             for n, g in sorted((by_node or {}).items())) or "none"))
    return found


def _check_fabric(host, request, index):
    """Refuse a tenant with several GPUs of an NVSwitch board: its guest's CUDA fails
    with error 802 ("system not yet initialized") until Fabric Manager activates an
    NVLink partition for exactly those GPUs. In the shared-NVSwitch model (partitions
    given) the placement takes a partition; without a model one GPU needs none."""
    if not host.fabric_gpus or host.model == fabric.SHARED:
        return
    if host.model == fabric.FULL:
        _check_whole_board(host, request, index)
        return
    if isinstance(request.gpus, tuple):
        joined = [g for g in request.gpus if g in host.fabric_gpus]
    else:
        joined = list(host.fabric_gpus[:request.gpus]) if request.gpus > 1 else []
    if len(joined) < 2:
        return
    raise GpuhostError(
        "tenant %s asks for %d GPUs of an NVSwitch board (NVSwitches %s): without an NVLink "
        "partition that Fabric Manager activated for them, CUDA fails in the guest with error "
        "802 (system not yet initialized)" % (request.name, len(joined), ", ".join(host.nvswitches)),
        field="tenants[%d].gpus" % index,
        fix="run Fabric Manager in NVIDIA's shared-NVSwitch model on the host "
            "(gpuhost_nvswitch_model: shared), give the tenant the whole board with its "
            "NVSwitches in the full-passthrough model (gpuhost_nvswitch_model: full; its "
            "guest runs Fabric Manager), or give the tenant one GPU (a one-GPU tenant "
            "needs no partition)")


def _asks_whole_board(host, request):
    """Whether a request takes GPUs of the board in the full-passthrough model."""
    if host.model != fabric.FULL or not host.fabric_gpus:
        return False
    if isinstance(request.gpus, tuple):
        return any(g in host.fabric_gpus for g in request.gpus)
    return request.gpus > 0


def _check_whole_board(host, request, index):
    """In the full-passthrough model the board goes to one tenant whole: its guest's
    Fabric Manager needs every GPU and NVSwitch of it."""
    if not _asks_whole_board(host, request):
        return
    board = len(host.fabric_gpus)
    whole = sorted(request.gpus) == sorted(host.fabric_gpus) if isinstance(request.gpus, tuple) \
        else request.gpus == board
    if not whole:
        raise GpuhostError(
            "tenant %s asks for %d of the %d GPUs of the NVSwitch board: in the "
            "full-passthrough model one tenant gets the whole board, its GPUs and NVSwitches "
            "(%s), and its guest runs Fabric Manager"
            % (request.name, request.gpu_count, board, ", ".join(host.nvswitches)),
            field="tenants[%d].gpus" % index,
            fix="ask for all %d GPUs (gpus: %d), or use the shared-NVSwitch model "
                "(gpuhost_nvswitch_model: shared) to give tenants parts of the board"
                % (board, board))


def _board_by_node(host, ledger, request, index):
    """{node: the board's GPUs there} for a whole-board tenant; every GPU and NVSwitch
    free, not quarantined, on a known node and in a clean IOMMU group, else refused."""
    field = "tenants[%d].gpus" % index
    by_node: Dict[int, List[str]] = {}
    for address in host.fabric_gpus + host.nvswitches:
        what = "NVSwitch" if address in host.nvswitches else "GPU"
        holder = ledger.function_owner.get(address)
        if holder:
            raise GpuhostError("%s %s of the board is given to tenant %s" % (what, address, holder),
                               field=field, fix="offboard %s first: the full-passthrough model "
                                                "gives the whole board to one tenant" % holder)
        if address in ledger.quarantined:
            raise GpuhostError("GPU %s of the board is quarantined: %s"
                               % (address, ledger.quarantined[address]), field=field,
                               fix="bring it back and lift its quarantine with tenant_ledger's "
                                   "recover option, which reads it again first")
        node = host.device_node(address)
        if node is None:
            raise GpuhostError("the NUMA node of %s %s is unknown" % (what, address), field=field,
                               fix="check /sys/bus/pci/devices/%s/numa_node and the BIOS "
                                   "NUMA (SRAT) settings" % address)
        verdict = host.gpu_verdict(host.slot_functions(address) if what == "GPU" else (address,))
        if not verdict.clean:
            raise GpuhostError("IOMMU group %s of %s %s is not clean: %s"
                               % (verdict.group, what, address,
                                  "; ".join(verdict.reasons) or "foreign devices"), field=field,
                               fix="check the board's IOMMU groups (iommu_groups_facts); an ACS "
                                   "override would weaken isolation")
        if what == "GPU":
            by_node.setdefault(node, []).append(address)
    return by_node


def _place_whole_board(host, ledger, housekeeping_cpus, request, index, policy, hugepage_check,
                       warnings):
    """A tenant that takes the whole NVSwitch board (the full-passthrough model). The
    board's GPUs sit on several NUMA nodes (four per socket on an HGX board), so the
    tenant gets one guest NUMA cell per node: that node's GPUs, an equal share of the
    vCPUs on its whole cores and of the memory from its hugepages. The emulator, the
    I/O threads and a VF stay with the first cell. All cells fit or none is taken."""
    field = "tenants[%d]" % index
    by_node = _board_by_node(host, ledger, request, index)
    nodes = sorted(by_node)
    count = len(nodes)
    vcpus, memory_gib = request.vcpus // count, request.memory_gib // count
    tpc = host.threads_per_core if policy == "require" else 1
    if request.vcpus % count or vcpus % tpc or request.memory_gib % count:
        raise GpuhostError(
            "tenant %s spans the board's %d NUMA nodes (%s): its %d vCPUs and %d GiB must "
            "split evenly over them%s" % (request.name, count, format_cpulist(nodes),
                                          request.vcpus, request.memory_gib,
                                          ", in whole cores of %d threads" % tpc if tpc > 1 else ""),
            field="%s.vcpus" % field if request.vcpus % count or vcpus % tpc else "%s.memory_gib" % field,
            fix="ask for a multiple of %d vCPUs and of %d GiB"
                % (count * tpc, count))
    trial = copy.deepcopy(ledger)
    cells = []
    for position, node in enumerate(nodes):
        first = position == 0
        share = dataclasses.replace(
            request, vcpus=vcpus, memory_gib=memory_gib, gpus=tuple(by_node[node]),
            nic_vf=request.nic_vf if first else False,
            iothreads=request.iothreads if first else 0,
            emulator_policy=request.emulator_policy if first else "housekeeping")
        try:
            cells.append(_fit_on_node(host, trial, housekeeping_cpus, share, index, node,
                                      by_node[node], policy, hugepage_check, warnings,
                                      emulator=first))
        except _NoFit as failure:
            raise GpuhostError("tenant %s spans the board's NUMA nodes %s, and its cell on "
                               "node %s does not fit: %s"
                               % (request.name, format_cpulist(nodes), node, failure.text),
                               field=failure.field, fix=failure.fix,
                               details={"nodes": [{"node": failure.node,
                                                   "resource": failure.resource,
                                                   "needed": failure.needed,
                                                   "free": failure.free}]}) from None
    switches = []
    for switch in host.nvswitches:
        trial.take_function(switch, request.name, field, "NVSwitch")
        switches.append({"address": switch, "iommu_group": host.pci[switch].iommu_group,
                         "node": host.device_node(switch)})
    ledger.__dict__.update(trial.__dict__)
    return _whole_board_entry(host, request, cells, switches, field)


def _whole_board_entry(host, request, cells, switches, field):
    """One plan entry from the per-node entries of a whole-board tenant."""
    entry = dict(cells[0])
    gpus = [gpu for cell in cells for gpu in cell["gpus"]]
    threads = {cell["guest_topology"]["threads"] for cell in cells}
    threads = threads.pop() if len(threads) == 1 else 1
    pins = [cpu for cell in cells for cpu in cell["vcpu_pins"]]
    hugepages: Dict[str, int] = {}
    for cell in cells:
        for node, pages in cell["hugepages"].items():
            hugepages[node] = hugepages.get(node, 0) + pages
    guest_cells, first_vcpu = [], 0
    for number, cell in enumerate(cells):
        guest_cells.append({"id": number, "node": cell["node"],
                            "memory_node": cell["memory_node"],
                            "vcpus": format_cpulist(range(first_vcpu, first_vcpu + cell["vcpus"])),
                            "memory_gib": cell["memory_gib"],
                            "gpus": [gpu["address"] for gpu in cell["gpus"]]})
        first_vcpu += cell["vcpus"]
    memory_nodes = sorted({cell["memory_node"] for cell in cells})
    entry.update(
        nodes=[cell["node"] for cell in cells],
        gpus=gpus,
        address_width=host.address_width(request, gpus, field),
        vcpus=request.vcpus,
        vcpu_pins=pins,
        guest_topology={"sockets": len(cells), "dies": 1,
                        "cores": request.vcpus // len(cells) // threads, "threads": threads},
        reserved_cpus=format_cpulist(c for cell in cells
                                     for c in parse_cpulist(cell["reserved_cpus"])),
        dedicated_cpus=format_cpulist(c for cell in cells
                                      for c in parse_cpulist(cell["dedicated_cpus"])),
        memory_gib=request.memory_gib,
        # one memory node per cell (guest_cells); none stands for the whole tenant
        memory_node=None,
        hugepages=hugepages,
        numatune={"mode": "strict", "nodeset": format_cpulist(memory_nodes)},
        guest_cells=guest_cells,
        nvswitches=switches,
        fabric_model=fabric.FULL,
    )
    return entry


def _place_tenant(host, ledger, housekeeping_cpus, request, index, policy, hugepage_check,
                  warnings):
    field = "tenants[%d]" % index
    if request.hugepage_size == "1G" and not host.gigantic_pages:
        raise GpuhostError("1G hugepages need the pdpe1gb CPU flag, which this host lacks",
                           field="%s.hugepage_size" % field,
                           fix="use hugepage_size 2M (or host-passthrough a CPU with pdpe1gb)")
    _check_fabric(host, request, index)
    if _asks_whole_board(host, request):
        return _place_whole_board(host, ledger, housekeeping_cpus, request, index, policy,
                                  hugepage_check, warnings)
    if isinstance(request.gpus, tuple):
        node, gpus = _explicit_gpus(host, ledger, request, index)
        options = [(node, gpus)]
    elif request.gpus == 0:
        options = [(node, []) for node in host.cpu_nodes]
    else:
        by_node, skipped = _gpu_candidates(host, ledger, request, index)
        options = [(node, gpus[:request.gpus]) for node, gpus in sorted(by_node.items())
                   if len(gpus) >= request.gpus]
        if not host.gpus:
            raise GpuhostError(
                "not enough GPUs: tenant %s needs %d GPU(s) and this host shows none (%s)"
                % (request.name, request.gpus, host.selection.describe()),
                field="%s.gpus" % field,
                fix="check lspci -nn for the cards and list other cards' vendor:device IDs "
                    "or addresses in gpu_devices, or set gpus: 0 for a tenant without one")
        if not options:
            free = "; ".join("node %d: %d (%s)" % (n, len(g), ", ".join(g))
                             for n, g in sorted(by_node.items())) or "none"
            raise GpuhostError(
                "not enough GPUs: tenant %s needs %d free GPU(s) with clean IOMMU groups on "
                "one NUMA node; free: %s; skipped: %s"
                % (request.name, request.gpus, free, "; ".join(skipped) or "none"),
                field="%s.gpus" % field,
                fix="ask for fewer GPUs, offboard a tenant, or clean the IOMMU groups",
                details={"nodes": [{"node": n, "resource": "GPUs", "needed": request.gpus,
                                    "free": "%d (%s)" % (len(by_node.get(n, ())),
                                                         ", ".join(by_node.get(n, ()))
                                                         or "none")}
                                   for n in host.cpu_nodes]})
    if host.partitions is not None and _board_gpus(host, request):
        options = _partition_options(host, request, index, options,
                                     None if isinstance(request.gpus, tuple) else by_node)
    else:
        options = [(node, gpus, None) for node, gpus in options]
    # Most room first, so tenants spread over the nodes; then the lowest GPU address.
    options.sort(key=lambda o: (-_node_room(host, ledger, housekeeping_cpus, o[0]),
                                host.address_key[o[1][0]] if o[1] else o[0], o[0]))
    failures = []
    for node, gpus, partition in options:
        try:
            entry = _fit_on_node(host, ledger, housekeeping_cpus, request, index, node, gpus,
                                 policy, hugepage_check, warnings)
        except _NoFit as failure:
            failures.append(failure)
            continue
        if partition is not None:
            entry["fabric_partition"] = partition
        return entry
    first = failures[0]
    if len(failures) == 1:
        msg = "tenant %s does not fit on node %s: not enough %s: needs %s, free %s" % (
            request.name, first.node, first.resource, first.needed, first.free)
    else:
        msg = "tenant %s fits on no NUMA node: %s" % (
            request.name, "; ".join(f.text for f in failures))
    raise GpuhostError(msg, field=first.field,
                       fix=first.fix,
                       details={"nodes": [{"node": f.node, "resource": f.resource,
                                           "needed": f.needed, "free": f.free}
                                          for f in failures]})


def _fit_on_node(host, ledger, housekeeping_cpus, request, index, node, gpus, policy,
                 hugepage_check, warnings, emulator=True):
    """Place one tenant on one node, or raise _NoFit; commits to the ledger on success.
    ``emulator``: False for a whole-board tenant's later cells, whose emulator threads
    run with the first cell's."""
    field = "tenants[%d]" % index
    held = set(housekeeping_cpus.get(node, ()))
    free = {t for c in host.cores_by_node.get(node, ()) for t in c
            if t not in ledger.cpu_owner and t not in held}
    pins, reserved, threads, emulator_core = _pack_cpus(host, node, free, request, policy,
                                                        field)

    if not emulator:
        emulator_cpus = None
    elif request.emulator_policy == "housekeeping":
        if not held:
            raise _NoFit(node, "housekeeping CPUs", "at least 1 for the emulator threads",
                         "0", "%s.emulator_policy" % field,
                         "give node %s housekeeping CPUs, or use emulator_policy dedicated"
                         % node)
        emulator_cpus = format_cpulist(held)
    else:
        emulator_cpus = format_cpulist(emulator_core)

    memory_node, distance = host.memory_node(node)
    if memory_node is None:
        raise _NoFit(node, "memory", "%d GiB" % request.memory_gib,
                     "0 GiB (the node has no memory and its distance table names no node "
                     "with memory)", "%s.memory_gib" % field,
                     "place the tenant on a node with memory, or check "
                     "/sys/devices/system/node/node%s/distance" % node)
    # The resource names say whose memory ran short when it is another node's.
    of_node = "" if memory_node == node else " of node %s" % memory_node
    numa = host.topology.nodes[memory_node]
    memory_kib = request.memory_gib * GIB_KIB
    if numa.mem_total_kib is not None:
        placed = ledger.memory_kib.get(memory_node, 0)
        if placed + memory_kib > numa.mem_total_kib:
            raise _NoFit(node, "memory" + of_node, "%d GiB" % request.memory_gib,
                         "%s GiB of %s GiB (tenants hold %s GiB)"
                         % (_gib(numa.mem_total_kib - placed), _gib(numa.mem_total_kib),
                            _gib(placed)), "%s.memory_gib" % field,
                         "ask for less memory or place the tenant's GPU on another node")
    size_kib = request.hugepage_size_kib
    pages = request.hugepages_needed
    if hugepage_check != "none":
        _check_hugepages(host, ledger, node, memory_node, size_kib, pages, request,
                         hugepage_check, field, warnings)

    vf = None
    if request.nic_vf:
        vf = _choose_vf(host, ledger, node, field)
        vf.update(request.vf_request.as_dict())

    # Nothing above may fail after this point: commit.
    owner = request.name
    dedicated = sorted(set(pins) | set(reserved) | set(emulator_core or ()))
    ledger.take_cpus(dedicated, owner, field)
    for gpu in gpus:
        for function in host.slot_functions(gpu):
            ledger.take_function(function, owner, field, "GPU")
    if vf:
        ledger.take_function(vf["address"], owner, field, "VF")
    ledger.memory_kib[memory_node] = ledger.memory_kib.get(memory_node, 0) + memory_kib
    key = (memory_node, size_kib)
    ledger.new_pages[key] = ledger.new_pages.get(key, 0) + pages
    if memory_node != node:
        warnings.append(
            "node %s has CPUs but no memory: tenant %s's %d GiB come from node %s, the "
            "nearest node with memory (distance %s); its memory accesses cross nodes"
            % (node, request.name, request.memory_gib, memory_node, distance))

    gpu_entries = []
    for gpu in gpus:
        functions = list(host.slot_functions(gpu))
        sizes = slot_bar64_sizes(host.pci[f] for f in functions if f in host.pci)
        gpu_entries.append({"address": gpu, "functions": functions,
                            "iommu_group": host.pci[gpu].iommu_group,
                            "bar64_total": sum(sizes), "bar64_sizes": list(sizes)})
    return {
        "name": request.name,
        "node": node,
        "gpus": gpu_entries,
        "address_width": host.address_width(request, gpu_entries, field),
        "vcpus": request.vcpus,
        "vcpu_pins": list(pins),
        "guest_topology": {"sockets": 1, "dies": 1, "cores": request.vcpus // threads,
                           "threads": threads},
        "smt_policy": policy,
        "reserved_cpus": format_cpulist(reserved),
        "emulator_policy": request.emulator_policy,
        "emulator_cpus": emulator_cpus,
        "iothreads": request.iothreads,
        "iothread_cpus": emulator_cpus if request.iothreads else None,
        # _place_iothreads moves them to a core of their own when the node has one spare
        "iothread_placement": IOTHREADS_SHARED if request.iothreads else None,
        "dedicated_cpus": format_cpulist(dedicated),
        "memory_gib": request.memory_gib,
        "memory_node": memory_node,
        "hugepage_size_kib": size_kib,
        "hugepages": {str(memory_node): pages},
        "numatune": {"mode": "strict", "nodeset": str(memory_node)},
        "vf": vf,
    }


# Where a tenant's iothreads run (its plan entry's iothread_placement).
IOTHREADS_DEDICATED = "dedicated"
IOTHREADS_SHARED = "shared_with_emulator"


def _place_iothreads(host, ledger, housekeeping_cpus, tenants):
    """The runbook's layout: iothreads on a whole core of their own (section 8 pins
    them apart from the emulator and the vCPUs), when the tenant's node still has a
    whole core that no tenant of this plan and no housekeeping CPU holds.

    Run after every tenant of the plan is placed, so that a spare core goes to
    iothreads only once the vCPUs and dedicated emulators have theirs; tenants are
    served in plan order, one core each. Without a spare core the iothreads stay
    on the emulator's CPUs (``shared_with_emulator``). A dedicated core joins the
    tenant's ``dedicated_cpus``, so the ledger, the fleet's free-core count and the
    irqbalance ban list hold it like the vCPUs' cores."""
    for tenant in tenants:
        if not tenant.get("iothreads"):
            continue
        node = tenant["node"]
        held = set(housekeeping_cpus.get(node, ()))
        spare = [core for core in host.cores_by_node.get(node, ())
                 if len(core) == host.threads_per_core
                 and not any(t in ledger.cpu_owner or t in held for t in core)]
        if not spare:
            continue
        core = spare[0]
        ledger.take_cpus(core, tenant["name"], "tenants.%s.iothreads" % tenant["name"])
        tenant["iothread_cpus"] = format_cpulist(core)
        tenant["iothread_placement"] = IOTHREADS_DEDICATED
        tenant["dedicated_cpus"] = format_cpulist(
            set(parse_cpulist(tenant["dedicated_cpus"])) | set(core))


def _gib(kib):
    value = kib / GIB_KIB
    return ("%.1f" % value).rstrip("0").rstrip(".")


def _check_hugepages(host, ledger, node, memory_node, size_kib, pages, request, mode, field,
                     warnings):
    """The tenant on ``node``'s CPUs gets its pages from ``memory_node`` (the same node
    unless that one has no memory); failures are the CPU node's, naming the other."""
    of_node = "" if memory_node == node else " of node %s" % memory_node
    numa = host.topology.nodes[memory_node]
    pool = numa.hugepages.get(size_kib)
    free_pages = pool.free if pool else 0
    taken = ledger.new_pages.get((memory_node, size_kib), 0)
    if mode == "free":
        if taken + pages > free_pages:
            raise _NoFit(node, "%s hugepages%s" % (hugepage_size_name(size_kib), of_node),
                         "%d pages" % pages,
                         "%d pages (%d on the node, %d taken by tenants planned before)"
                         % (max(free_pages - taken, 0), free_pages, taken),
                         "%s.memory_gib" % field,
                         "reserve more pages on node %s (/sys/devices/system/node/node%s/"
                         "hugepages/hugepages-%dkB/nr_hugepages), or use hugepage_check "
                         "memory to plan before reserving"
                         % (memory_node, memory_node, size_kib))
        return
    # mode "memory": what the free pools cannot cover must come from free memory.
    if numa.mem_free_kib is None:
        warnings.append("node %s does not report MemFree; the hugepages of %s were not "
                        "checked" % (memory_node, request.name))
        return
    shortfall = 0
    for size in sorted(set(s for (n, s) in ledger.new_pages if n == memory_node)
                       | {size_kib}):
        wanted = (ledger.new_pages.get((memory_node, size), 0)
                  + (pages if size == size_kib else 0))
        have = numa.hugepages[size].free if size in numa.hugepages else 0
        shortfall += max(0, wanted - have) * size
    if shortfall > numa.mem_free_kib:
        raise _NoFit(node, "memory for hugepages" + of_node,
                     "%d x %s pages (%s GiB still to reserve)"
                     % (pages, hugepage_size_name(size_kib), _gib(shortfall)),
                     "%s GiB of free memory and %d free %s pages"
                     % (_gib(numa.mem_free_kib), free_pages, hugepage_size_name(size_kib)),
                     "%s.memory_gib" % field,
                     "ask for less memory, free memory on node %s, or reserve the pages at "
                     "boot (1G pages: hugepagesz=1G hugepages=<node>:<count> on the kernel "
                     "command line, which the iommu role writes from the plan; allocating "
                     "1G pages at run time fails once memory is fragmented)"
                     % memory_node)


def _choose_vf(host, ledger, node, field):
    for pf, vf in host.vf_candidates(node):
        if vf not in ledger.function_owner:
            # A VF still to be created has no IOMMU group yet (null until it exists).
            group = host.pci[vf].iommu_group if vf in host.pci else None
            return {"pf": pf, "address": vf, "iommu_group": group,
                    "index": host.vf_index(vf)}
    summary = []
    for pf in host.pfs:
        if host.device_node(pf) == node:
            existing = host.pci[pf].virtfns
            candidates = [vf for p, vf in host.vf_candidates(node) if p == pf]
            free = sum(1 for vf in candidates if vf not in ledger.function_owner)
            text = "%s: %d VFs, %d free" % (pf, len(existing), free)
            later = host.vf_target(pf) - len(existing)
            if later > 0:
                created = sum(1 for vf in candidates if vf not in existing)
                text += (" (%d more to be created)" % created if created else
                         " (%d more possible, not plannable: the PF's IOMMU group is not "
                         "clean or unknown, or sysfs shows no sriov_offset/sriov_stride)"
                         % later)
            summary.append(text)
    raise _NoFit(node, "VFs", "1 SR-IOV VF on node %s" % node,
                 "0 (%s)" % ("; ".join(summary) or "no SR-IOV PF on node %s among its network controllers" % node),
                 "%s.nic_vf" % field,
                 "create more VFs on a PF of node %s (gpuhost.kvm.sriov_vfs), or set "
                 "nic_vf: false" % node)


def _assemble(host, housekeeping_cpus, policy, tenants, ledger, warnings):
    tenant_cpus = sorted(ledger.cpu_owner)
    housekeeping_all = sorted(c for cpus in housekeeping_cpus.values() for c in cpus)
    pages: Dict[int, Dict[int, int]] = {}
    for tenant in tenants:
        size = tenant.get("hugepage_size_kib")
        for node, count in sorted((tenant.get("hugepages") or {}).items()):
            if size is None:
                continue
            per_node = pages.setdefault(int(node), {})
            per_node[int(size)] = per_node.get(int(size), 0) + int(count)
    plan = {
        "smt_policy": policy,
        "threads_per_core": host.threads_per_core,
        "online_cpus": format_cpulist(host.online),
        "housekeeping": {str(n): format_cpulist(c) for n, c in housekeeping_cpus.items()},
        "housekeeping_cpus": format_cpulist(housekeeping_all),
        "tenant_cpus": format_cpulist(tenant_cpus),
        "irqbalance": {
            "banned_cpulist": format_cpulist(tenant_cpus),
            "banned_cpus_mask": format_cpumask(tenant_cpus, host.possible_count),
        },
        "hugepages": {str(n): {str(s): c for s, c in sorted(sizes.items())}
                      for n, sizes in sorted(pages.items())},
        "tenants": tenants,
        "warnings": warnings,
    }
    if host.nvswitches:
        plan["fabric"] = {"nvswitches": list(host.nvswitches), "gpus": list(host.fabric_gpus),
                          "model": host.model}
        if host.partitions is not None:
            plan["fabric"]["partitions"] = [p.as_dict() for p in host.partitions]
    return plan
