# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Refusals checked before a tenant domain is defined.

Pure functions over a HostTopology, the XML of the other defined domains and the
host-safety context (safety_context.read_context), so tests feed them literal topologies
and XML. Every refusal gives the numbers and the way out; those that are sometimes
deliberate have named overrides (``allow_cpu_overlap``, ``allow_cross_node``,
``allow_vcpu_emulator_overlap``, ``allow_unsafe_interrupts``, and the host-safety
policy's ``allow_host_critical`` and ``allow_boot_vga``). A dirty IOMMU group, or one shared with another domain, has
none: the runbook's answer is another slot, never the ACS override. Nor has a device
the host cannot live without (the root filesystem's chain, a bridge).
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist, parse_cpulist)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.canonical import pci_source_key
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.model import (
    FIRMWARE_FEATURES, hostdev_origins)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.xml import parse_xml
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy.host_safety import (
    PASS_THROUGH, Refusal, host_refusals, refusal_fix)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.iommu import group_members_verdict
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import normalize_address
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import (
    decode_text, read_bytes)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.sysfs import resolve_dir
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    hugepage_size_name)


@dataclass
class DefinedDomain:
    """What preflight needs to know about a domain libvirt already has."""

    name: str
    active: bool = False
    hostdevs: Tuple[str, ...] = ()
    vcpu_cpus: Tuple[int, ...] = ()
    memory_kib: int = 0
    hugepage_size_kib: Optional[int] = None
    memory_nodeset: Tuple[int, ...] = ()


@dataclass
class PreflightReport:
    refusals: List[Refusal] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)

    def raise_if_refused(self):
        if not self.refusals:
            return
        first = self.refusals[0]
        if len(self.refusals) == 1:
            raise GpuhostError(first.reason, field=first.field, fix=first.fix,
                               details={"refusals": [r.detail() for r in self.refusals]})
        lines = ["%d preflight refusals:" % len(self.refusals)]
        for number, refusal in enumerate(self.refusals, 1):
            lines.append("(%d) %s: %s. Fix: %s" % (number, refusal.field,
                                                   refusal.reason.rstrip("."), refusal.fix))
        raise GpuhostError(" ".join(lines), field=first.field,
                           details={"refusals": [r.detail() for r in self.refusals]})


def defined_domain_from_xml(xml, active=False):
    """A DefinedDomain from a domain's XML (any libvirt driver)."""
    root = parse_xml(xml)
    hostdevs = []
    for element in root.findall("devices/hostdev") + root.findall("devices/interface"):
        if element.tag == "interface" and element.get("type") != "hostdev":
            continue
        if element.tag == "hostdev" and element.get("type") != "pci":
            continue
        key = pci_source_key(element)
        if key:
            hostdevs.append(key)
    cpus = set()
    for pin in root.findall("cputune/vcpupin"):
        cpus.update(parse_cpulist(pin.get("cpuset"), field="vcpupin"))
    memory = root.find("memory")
    memory_kib = _to_kib(memory.text, memory.get("unit", "KiB")) if memory is not None else 0
    page = root.find("memoryBacking/hugepages/page")
    size = None
    if page is not None:
        size = _to_kib(page.get("size"), page.get("unit", "KiB"))
    elif root.find("memoryBacking/hugepages") is not None:
        size = 0                          # the host's default hugepage size
    nodes = root.find("numatune/memory")
    return DefinedDomain(
        name=root.findtext("name"), active=active, hostdevs=tuple(hostdevs),
        vcpu_cpus=tuple(sorted(cpus)), memory_kib=memory_kib, hugepage_size_kib=size,
        memory_nodeset=parse_cpulist(nodes.get("nodeset")) if nodes is not None
        and nodes.get("nodeset") else ())


_UNITS = {"b": 1.0 / 1024, "bytes": 1.0 / 1024, "k": 1, "kib": 1, "kb": 1000.0 / 1024,
          "m": 1024, "mib": 1024, "mb": 1000.0 ** 2 / 1024, "g": 1024 ** 2,
          "gib": 1024 ** 2, "gb": 1000.0 ** 3 / 1024, "t": 1024 ** 3, "tib": 1024 ** 3}


def _to_kib(value, unit):
    return int(int(value) * _UNITS.get((unit or "KiB").lower(), 1))


def _cpu_nodes(topo):
    nodes = {}
    for node in topo.nodes.values():
        for cpu in node.cpus:
            nodes[cpu] = node.id
    for cpu in topo.cpus.cpus.values():
        if cpu.node is not None:
            nodes.setdefault(cpu.id, cpu.node)
    return nodes


def check_hostdevs(spec, topo, report, origins=None):
    """Every hostdev exists and sits in a clean IOMMU group."""
    origins = origins or hostdev_origins(spec)
    units = [list(gpu.functions) for gpu in spec.gpus]
    units.extend([address] for address in spec.extra_hostdevs)
    if spec.network.kind == "vf" and spec.network.vf_address:
        units.append([spec.network.vf_address])
    vf_unit = [spec.network.vf_address] if spec.network.kind == "vf" else None
    for unit in units:
        missing = [a for a in unit if normalize_address(a) not in topo.pci]
        if missing:
            report.refusals.append(Refusal(
                field=origins.get(missing[0], "hostdevs"), reason="PCI function %s does not exist on this host"
                % ", ".join(missing),
                fix="check the address with lspci -D; regenerate the plan if the hardware "
                "changed", kind="vf_missing" if unit == vf_unit else "hostdev_missing"))
            continue
        verdict = group_members_verdict(topo, unit)
        if not verdict.clean:
            foreign = ", ".join(
                "%s (%s, driver %s)" % (f.get("address"),
                                        f.get("class_name") or hex(f.get("class_code") or 0),
                                        f.get("driver") or "none")
                for f in verdict.foreign)
            report.refusals.append(Refusal(
                field=origins.get(unit[0], "hostdevs"),
                reason="%s is in IOMMU group %s, which also holds %s%s"
                % (", ".join(unit), verdict.group, foreign or "other devices",
                   ("; " + "; ".join(verdict.reasons)) if verdict.reasons else ""),
                fix="move the card to a slot whose IOMMU group holds only it (check "
                "/sys/kernel/iommu_groups/%s/devices), or change the BIOS PCIe "
                "bifurcation; do not use pcie_acs_override" % verdict.group))


# How topology._interrupt_remapping came to its answer, for the refusal's first words.
_REMAPPING_EVIDENCE = {
    "cmdline": "intremap=off is on the kernel command line",
    "proc_interrupts": "/proc/interrupts shows MSI and IO-APIC chips without IR-",
    "ecap": "a DMAR unit does not advertise interrupt remapping (ecap bit 3)",
}


def check_interrupt_remapping(spec, topo, report, allow_unsafe_interrupts=False):
    """A domain with host devices needs interrupt remapping (runbook section 13).

    Without it a passed-through device's MSI writes reach the host's interrupt
    controller untranslated: a guest that programs its device can inject interrupts
    into the host and into other tenants (MSI spoofing). Known off (the topology's
    ``iommu.interrupt_remapping`` is False) is refused unless ``allow_unsafe_interrupts``;
    unknown (None: no /proc/interrupts chip names, no DMAR ecap, as in most recorded
    trees) is a warning, since refusing what cannot be read would refuse every such
    host."""
    if not spec.hostdev_addresses():
        return
    remapping = topo.iommu.interrupt_remapping
    if remapping is True:
        return
    if remapping is None:
        report.warnings.append(
            "interrupt remapping could not be read on this host (no IR- chips or plain "
            "MSI chips in /proc/interrupts, no Intel DMAR ecap): without it a "
            "passed-through device can inject interrupts into the host and other "
            "tenants; check dmesg for 'Enabled IRQ remapping'")
        return
    text = ("interrupt remapping is off (%s): a passed-through device's MSI writes then "
            "reach the host's interrupt controller untranslated, so the guest can inject "
            "interrupts into the host and into other tenants (MSI spoofing)"
            % _REMAPPING_EVIDENCE.get(topo.iommu.interrupt_remapping_source,
                                      "read as off"))
    if allow_unsafe_interrupts:
        report.warnings.append(text + "; allowed by allow_unsafe_interrupts")
        return
    report.refusals.append(Refusal(
        field="allow_unsafe_interrupts", reason=text,
        fix="enable interrupt remapping (VT-d/AMD-Vi with x2APIC in the BIOS) and remove "
        "intremap=off from the kernel command line, then reboot; or set "
        "allow_unsafe_interrupts: true to accept the risk (vfio then also needs "
        "vfio_iommu_type1.allow_unsafe_interrupts=1)",
        override="allow_unsafe_interrupts", kind="no_interrupt_remapping"))


def check_hostdevs_free(spec, others, report, origins=None):
    origins = {normalize_address(a): o for a, o in
               (origins or hostdev_origins(spec)).items()}
    mine = set(normalize_address(a) for a in spec.hostdev_addresses())
    for other in others:
        clash = sorted(mine & set(other.hostdevs))
        if clash:
            report.refusals.append(Refusal(
                field=origins.get(clash[0], "hostdevs"), reason="%s already used by domain %s (%s)"
                % (", ".join(clash), other.name, "running" if other.active else "defined"),
                fix="give this tenant another device, or remove the hostdev from %s first "
                "(virsh edit %s, or state=absent for that tenant)" % (other.name, other.name)))


def check_host_safety(spec, report, context, overrides, origins=None):
    """The host-safety policy (host_safety.host_refusals) for every hostdev.

    libvirt detaches a managed hostdev from its host driver when the domain starts, so
    a domain must not be given what vfio_bind would refuse: the root filesystem's
    device chain, a bridge, the NIC of the default route or SSH session, the boot VGA
    with a console. Accepted overrides become warnings.
    """
    if context is None:
        return
    origins = origins or hostdev_origins(spec)
    addresses = [normalize_address(a) for a in spec.hostdev_addresses()]
    blocking, allowed = host_refusals(context, addresses, overrides, PASS_THROUGH)
    for refusal in blocking:
        report.refusals.append(Refusal(
            field=refusal.override or origins.get(refusal.address, "hostdevs"),
            reason="refusing to %s: %s" % (PASS_THROUGH.verb, refusal.text()),
            fix=refusal_fix([refusal], origins.get(refusal.address, "the domain's devices")),
            override=refusal.override))
    for refusal in allowed:
        report.warnings.append("%s %s; allowed by %s" % (refusal.address, refusal.reason,
                                                         refusal.override))


def check_groups_unshared(spec, topo, others, report, origins=None):
    """No IOMMU group is split between this domain and another.

    The group is the unit of isolation: two guests holding functions of one group can
    reach each other's device by peer-to-peer DMA, and vfio hands a group to one guest
    only. Exact address clashes are check_hostdevs_free's.
    """
    origins = {normalize_address(a): o for a, o in
               (origins or hostdev_origins(spec)).items()}
    mine = {}
    for address in spec.hostdev_addresses():
        function = topo.pci.get(normalize_address(address))
        if function is not None and function.iommu_group is not None:
            mine.setdefault(function.iommu_group, []).append(normalize_address(address))
    for other in others:
        shared = {}
        for address in other.hostdevs:
            function = topo.pci.get(address)
            if function is None or function.iommu_group not in mine \
                    or address in mine[function.iommu_group]:
                continue
            shared.setdefault(function.iommu_group, []).append(address)
        for group, theirs in sorted(shared.items()):
            report.refusals.append(Refusal(
                field=origins.get(sorted(mine[group])[0], "hostdevs"),
                reason="%s is in IOMMU group %s, which also holds %s of domain %s (%s): "
                "one IOMMU group goes to one guest"
                % (", ".join(sorted(mine[group])), group, ", ".join(sorted(theirs)),
                   other.name, "running" if other.active else "defined"),
                fix="give this tenant a device from another IOMMU group, or remove %s from %s "
                "first (virsh edit %s, or state=absent for that tenant)"
                % (", ".join(sorted(theirs)), other.name, other.name)))


def check_cpus_online(spec, topo, report):
    online = set(topo.cpus.online)
    for label, cpus in (("vcpu_pins", spec.pinned_cpus()),
                        ("emulator_cpus", spec.emulator_cpus),
                        ("iothread_cpus", spec.iothread_cpus)):
        outside = sorted(set(cpus) - online)
        if outside:
            report.refusals.append(Refusal(
                field=spec.option(label), reason="CPUs %s are not online (online: %s)"
                % (format_cpulist(outside), format_cpulist(online)),
                fix="pin only online CPUs: regenerate the plan with numa_cpuset on this host, "
                "or bring the CPUs online"))


def check_cpu_overlap(spec, others, report, allow_cpu_overlap=False, topo=None):
    """No CPU, and no core, shared with another domain's vCPUs: neither by this domain's
    vCPU pins nor by its emulator or iothread pins.

    Besides the same CPU, a pin on an SMT sibling of another domain's vCPU counts (with
    ``topo``): threads of one core share its caches and execution units, the ground of
    MDS and L1TF style leaks, so a tenant's core is reserved whole even where it pins
    only one thread, and QEMU's own threads are no exception. Each refusal names the
    option whose pins clash.
    """
    for other in others:
        theirs = set(other.vcpu_cpus)
        for key, label, cpus in (("vcpu_pins", "vCPU pins", spec.pinned_cpus()),
                                 ("emulator_cpus", "emulator_cpus", spec.emulator_cpus),
                                 ("iothread_cpus", "iothread_cpus", spec.iothread_cpus)):
            mine = set(cpus)
            clash = sorted(mine & theirs)
            siblings = sorted((cpu, sibling) for cpu in mine - theirs
                              for sibling in _thread_siblings(topo, cpu) & theirs)
            texts = []
            if clash:
                texts.append("%s %s overlap the vCPUs of domain %s (pinned to %s)" % (
                    label, format_cpulist(clash), other.name, format_cpulist(theirs)))
            if siblings:
                texts.append(
                    "%s %s share cores with the vCPUs of domain %s (%s): threads of one "
                    "core share its caches, so one tenant can observe the other"
                    % (label, format_cpulist(set(c for c, _s in siblings)), other.name,
                       ", ".join("CPU %d is the SMT sibling of %d" % p for p in siblings)))
            if not texts:
                continue
            text = "; ".join(texts)
            if allow_cpu_overlap:
                report.warnings.append(text + "; allowed by allow_cpu_overlap")
            else:
                report.refusals.append(Refusal(
                    field=spec.option(key), reason=text,
                    fix="plan all tenants together with numa_cpuset so their cores are "
                    "disjoint, or set allow_cpu_overlap: true if sharing is deliberate",
                    override="allow_cpu_overlap"))


def _thread_siblings(topo, cpu):
    """The other hardware threads of ``cpu``'s core (none without a topology)."""
    record = topo.cpus.cpus.get(cpu) if topo is not None else None
    return set(record.thread_siblings) - {cpu} if record is not None else set()


def check_vcpu_helper_overlap(spec, report, allow_vcpu_emulator_overlap=False):
    """No vCPU on this domain's own emulator or iothread CPUs: a vCPU that spins there
    starves QEMU's I/O and the emulator steals the vCPU's time."""
    pinned = set(spec.pinned_cpus())
    clashes = [(label, sorted(pinned & set(cpus)))
               for label, cpus in (("emulator_cpus", spec.emulator_cpus),
                                   ("iothread_cpus", spec.iothread_cpus))]
    clashes = [(label, cpus) for label, cpus in clashes if cpus]
    if not clashes:
        return
    text = "vCPU pins %s are also this domain's %s" % (
        format_cpulist(set(c for _label, cpus in clashes for c in cpus)),
        " and ".join("%s (%s)" % (label, format_cpulist(cpus)) for label, cpus in clashes))
    if allow_vcpu_emulator_overlap:
        report.warnings.append(text + "; allowed by allow_vcpu_emulator_overlap")
        return
    report.refusals.append(Refusal(
        field=spec.option("vcpu_pins"),
        reason=text + ": the vCPUs and QEMU's own threads would take turns on them",
        fix="pin the emulator and iothreads to other cores (numa_cpuset plans them on the "
        "node's housekeeping CPUs), or set allow_vcpu_emulator_overlap: true on a host "
        "too small to keep them apart", override="allow_vcpu_emulator_overlap"))


def check_nodes(spec, topo, report, allow_cross_node=False):
    """vCPUs, emulator, memory and VF on the GPU's node."""
    gpu_nodes = set()
    for gpu in spec.gpus:
        function = topo.pci.get(normalize_address(gpu.address))
        if function is None:
            continue
        if function.numa_node is None or function.numa_node < 0:
            report.warnings.append("GPU %s reports no NUMA node; node alignment not "
                                   "checked for it" % gpu.address)
        else:
            gpu_nodes.add(function.numa_node)
    if not gpu_nodes:
        return
    cpu_nodes = _cpu_nodes(topo)
    wrong = []        # (the option, what is off the GPU's node)
    for key, label, cpus in (("vcpu_pins", "vCPU pins", spec.pinned_cpus()),
                             ("emulator_cpus", "emulator pins", spec.emulator_cpus),
                             ("iothread_cpus", "iothread pins", spec.iothread_cpus)):
        off = sorted(c for c in cpus if c in cpu_nodes and cpu_nodes[c] not in gpu_nodes)
        if off:
            wrong.append((spec.option(key), "%s %s are on node %s" % (
                label, format_cpulist(off),
                format_cpulist(set(cpu_nodes[c] for c in off)))))
    borrowed, why_not = _memory_node_verdict(spec, topo, gpu_nodes)
    if spec.memory_nodeset and not set(spec.memory_nodeset) <= gpu_nodes | borrowed:
        wrong.append((spec.option("memory_nodeset"),
                      "memory nodeset is %s%s" % (format_cpulist(spec.memory_nodeset),
                                                  " (%s)" % why_not if why_not else "")))
    if not spec.memory_nodeset:
        wrong.append((spec.option("memory_nodeset"),
                      "memory is not bound to a node (no numatune nodeset)"))
    wrong += _cells_off_their_node(spec, topo, cpu_nodes)
    if spec.network.kind == "vf" and spec.network.vf_address:
        vf = topo.pci.get(normalize_address(spec.network.vf_address))
        if vf is not None and vf.numa_node is not None and vf.numa_node >= 0 \
                and vf.numa_node not in gpu_nodes:
            wrong.append((hostdev_origins(spec).get(spec.network.vf_address,
                                                    "network.vf_address"),
                          "VF %s is on node %d" % (spec.network.vf_address, vf.numa_node)))
    if not wrong:
        return
    text = "the GPU is on node %s but %s" % (format_cpulist(gpu_nodes),
                                             "; ".join(t for _option, t in wrong))
    if allow_cross_node:
        report.warnings.append(text + "; allowed by allow_cross_node")
    else:
        report.refusals.append(Refusal(
            field=wrong[0][0], reason=text,
            fix="take CPUs, memory and the VF from node %s (numa_cpuset plans it that way), "
            "or set allow_cross_node: true to accept the cross-node traffic"
            % format_cpulist(gpu_nodes), override="allow_cross_node"))


def _cells_off_their_node(spec, topo, cpu_nodes):
    """For a tenant over several nodes: each guest cell's vCPUs on the host node of its
    GPUs, and its memory from that node (or the node the plan borrowed for it), so that
    the guest's view of which GPU is near which CPUs is the host's."""
    wrong = []
    for number, cell in enumerate(spec.guest_cells):
        nodes = {topo.pci[g].numa_node for g in cell.gpus
                 if g in topo.pci and topo.pci[g].numa_node is not None
                 and topo.pci[g].numa_node >= 0}
        if not nodes:
            continue
        pins = sorted(c for v in cell.vcpus if v < len(spec.vcpu_pins)
                      for c in spec.vcpu_pins[v] if c in cpu_nodes and cpu_nodes[c] not in nodes)
        if pins:
            wrong.append((spec.option("vcpu_pins"), "guest cell %d's vCPU pins %s are on node %s, "
                          "its GPUs on node %s" % (number, format_cpulist(pins),
                                                   format_cpulist({cpu_nodes[c] for c in pins}),
                                                   format_cpulist(nodes))))
        if cell.host_node not in nodes and _has_memory(topo, min(nodes)):
            wrong.append((spec.option("guest_cells"), "guest cell %d's memory is on node %d, "
                          "its GPUs on node %s" % (number, cell.host_node, format_cpulist(nodes))))
    return wrong


def _has_memory(topo, node):
    numa = topo.nodes.get(node)
    return numa is not None and numa.mem_total_kib != 0


def _memory_node_verdict(spec, topo, gpu_nodes):
    """({the plan's memory_node}, None) when it may back the tenant instead of the GPU's
    node, else (empty set, why not, or None without a memory_node).

    Only a GPU node without memory (MemTotal 0: a DIMM-less socket, some sub-NUMA
    layouts) lends its tenants' memory to another node, and then only to the nearest
    node with memory by the firmware's distance table, as the planner chose it
    (placement.Host.memory_node); the numatune nodeset must be that node."""
    node = spec.memory_node
    if node is None or node in gpu_nodes:
        return set(), None
    if any(_has_memory(topo, gpu) for gpu in gpu_nodes):
        return set(), "the plan's memory_node %d stands in only for a GPU node without " \
                      "memory, and node %s has memory" % (node, format_cpulist(gpu_nodes))
    if not _has_memory(topo, node):
        return set(), "the plan's memory_node %d has no memory either" % node
    if tuple(spec.memory_nodeset) != (node,):
        return set(), "the plan's memory_node is %d" % node
    for gpu in gpu_nodes:
        distances = topo.nodes[gpu].distances if gpu in topo.nodes else {}
        nearest = sorted(d for other, d in distances.items()
                         if other not in gpu_nodes and _has_memory(topo, other))
        if nearest and distances.get(node) != nearest[0]:
            return set(), "node %d is not the nearest node with memory to node %d" % (
                node, gpu)
    return {node}, None


def check_hugepages(spec, topo, report, current=None):
    """Enough free pages of the wanted size on the wanted node(s), counted per node.

    ``current`` is this domain as libvirt holds it now; if it is running with the same
    page size, the pages it holds count as available, since a redefinition reuses them.
    """
    size = spec.hugepage_size_kib
    if not size:
        return
    held = 0
    if current is not None and current.active and current.hugepage_size_kib == size:
        held = current.memory_kib // size
    if spec.guest_cells:
        # each cell from its own node's pool; the running domain's pages in the same shares
        for cell in spec.guest_cells:
            _check_pool(spec, topo, report, [cell.host_node], cell.memory_kib // size,
                        held * cell.memory_kib // spec.memory_kib)
        return
    _check_pool(spec, topo, report, list(spec.memory_nodeset) or sorted(topo.nodes),
                spec.memory_kib // size, held)


def _check_pool(spec, topo, report, nodes, needed, held):
    """``needed`` free pages of the spec's size on ``nodes`` together, ``held`` of them
    already the domain's."""
    size = spec.hugepage_size_kib
    free_per_node = {}
    for node_id in nodes:
        node = topo.nodes.get(node_id)
        if node is None:
            report.refusals.append(Refusal(
                field=spec.option("memory_nodeset"), reason="NUMA node %d does not exist (nodes: %s)"
                % (node_id, format_cpulist(topo.nodes)),
                fix="regenerate the plan with numa_cpuset on this host"))
            return
        pool = node.hugepages.get(size)
        free_per_node[node_id] = pool.free if pool is not None else None
    if all(v is None for v in free_per_node.values()):
        report.refusals.append(Refusal(
            field=spec.option("hugepage_size"), reason="node %s has no %s hugepage pool" % (
                format_cpulist(nodes), hugepage_size_name(size)),
            fix="reserve the pages first (the numa role; 1G pages need hugepagesz=1G "
            "hugepages=<node>:<count> on the kernel command line, which the iommu role "
            "writes from the plan, and a reboot)"))
        return
    free = sum(v or 0 for v in free_per_node.values())
    if free + held < needed:
        per_node = ", ".join("node %d: %d free" % (n, v or 0)
                             for n, v in sorted(free_per_node.items()))
        # The memory option asks for the pages; the vm role (roles/vm/tasks/main.yml)
        # lets this kind of refusal pass in check mode, where the numa stage has
        # reserved nothing yet.
        report.refusals.append(Refusal(
            field=spec.option("memory_gib"),
            reason="%s needs %d pages of %s on node %s, but only %d are free (%s)%s"
            % (spec.name, needed, hugepage_size_name(size), format_cpulist(nodes), free, per_node,
               ", counting the %d this domain holds" % held if held else ""),
            fix="reserve %d more %s pages on node %s (/sys/devices/system/node/node%d/"
            "hugepages/hugepages-%dkB/nr_hugepages, or the hugepages role), or give the "
            "tenant less memory" % (needed - free - held, hugepage_size_name(size),
                                    format_cpulist(nodes), nodes[0], size),
            kind="hugepages_short"))


# --------------------------------------------------------------------------------------
# firmware

# Where QEMU's firmware descriptors are (QEMU's docs/interop/firmware.json), in
# libvirt's order: a file in /etc overrides the one of the same name in /usr/share, and
# an empty one there hides it.
FIRMWARE_DESCRIPTOR_DIRS = ("etc/qemu/firmware", "usr/share/qemu/firmware")
FIRMWARE_PACKAGES = "ovmf on Debian, edk2-ovmf on RHEL"
# A descriptor is a few hundred bytes; anything far larger is not one.
MAX_DESCRIPTOR_BYTES = 1 << 16
# A machine name each q35 descriptor glob (pc-q35-*) matches: libvirt expands q35 to
# pc-q35-<QEMU version>.
Q35_MACHINE_SAMPLE = "pc-q35-9.0"


@dataclass
class FirmwareDescriptor:
    """One QEMU firmware descriptor as the preflight needs it."""

    path: str                              # below the root
    interfaces: Tuple[str, ...] = ()       # interface-types: uefi, bios
    targets: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()   # (architecture, machine globs)
    features: Tuple[str, ...] = ()         # secure-boot, enrolled-keys, requires-smm...
    executable: str = ""                   # the code file, as the host names it
    executable_present: bool = False       # found below the root


@dataclass
class FirmwareDescriptors:
    """What read_firmware_descriptors found: the descriptors, and the files it could
    not read as one (named in a refusal, so a broken file is not a silent miss)."""

    descriptors: List[FirmwareDescriptor] = field(default_factory=list)
    unreadable: List[str] = field(default_factory=list)


def _descriptor_files(root):
    """(name, path) of every descriptor libvirt would read, /etc first."""
    chosen = {}
    for directory in FIRMWARE_DESCRIPTOR_DIRS:
        base = os.path.join(root or "/", directory)
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if name.endswith(".json") and name not in chosen:
                chosen[name] = os.path.join(base, name)
    return sorted(chosen.items())


def _text_list(value):
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def parse_firmware_descriptor(text, path, root="/"):
    """A FirmwareDescriptor from a descriptor's JSON text; None when it is not one."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    mapping = data.get("mapping") if isinstance(data.get("mapping"), dict) else {}
    executable = mapping.get("executable")
    filename = executable.get("filename") if isinstance(executable, dict) \
        else mapping.get("filename")
    if not isinstance(filename, str) or not filename.startswith("/") or "\x00" in filename:
        return None
    targets = []
    for target in data.get("targets") if isinstance(data.get("targets"), list) else ():
        if isinstance(target, dict) and isinstance(target.get("architecture"), str):
            targets.append((target["architecture"], _text_list(target.get("machines"))))
    below_root = resolve_dir(root, os.path.join(root or "/", filename.lstrip("/")))
    return FirmwareDescriptor(
        path=path, interfaces=_text_list(data.get("interface-types")),
        targets=tuple(targets), features=_text_list(data.get("features")),
        executable=filename, executable_present=os.path.isfile(below_root))


def read_firmware_descriptors(root="/"):
    """The firmware descriptors below ``root`` (FIRMWARE_DESCRIPTOR_DIRS)."""
    found = FirmwareDescriptors()
    for _name, path in _descriptor_files(root):
        shown = "/" + os.path.relpath(path, root or "/")
        # The one reader: a FIFO must not block the run, nor a directory, a device or a
        # file past the limit pass for a descriptor (links are resolved inside root).
        try:
            data = read_bytes(resolve_dir(root, path), max_bytes=MAX_DESCRIPTOR_BYTES,
                              no_follow=True)
        except (OSError, GpuhostError):
            found.unreadable.append(shown)
            continue
        if not data.strip():
            continue                      # an empty file hides the descriptor
        descriptor = parse_firmware_descriptor(decode_text(data), shown, root)
        if descriptor is None:
            found.unreadable.append(shown)
        else:
            found.descriptors.append(descriptor)
    return found


def descriptor_offers(descriptor, firmware, arch="x86_64", machine=Q35_MACHINE_SAMPLE):
    """Whether libvirt's auto-selection could pick ``descriptor`` for ``firmware``
    (FIRMWARE_FEATURES): UEFI, for this architecture and machine, with every feature
    enabled 'yes' and none enabled 'no'."""
    if "uefi" not in descriptor.interfaces:
        return False
    if not any(target_arch == arch and any(fnmatch.fnmatchcase(machine, glob)
                                           for glob in globs)
               for target_arch, globs in descriptor.targets):
        return False
    for name, enabled in FIRMWARE_FEATURES[firmware]:
        if (name in descriptor.features) != (enabled == "yes"):
            return False
    return True


def check_firmware(spec, descriptors, report):
    """A UEFI tenant needs a descriptor that offers its firmware and whose code file is
    on the host: without one, libvirt refuses the start ("Unable to find any firmware to
    satisfy 'efi'") after the define succeeded. ``descriptors``: None skips the check
    (BIOS, or libvirt's test driver, which runs no firmware)."""
    if descriptors is None or spec.firmware not in FIRMWARE_FEATURES:
        return
    offering = [d for d in descriptors.descriptors if descriptor_offers(d, spec.firmware)]
    if any(d.executable_present for d in offering):
        return
    if offering:
        why = "the descriptors that offer it name code files that are missing (%s)" % (
            ", ".join("%s in %s" % (d.executable, d.path) for d in offering))
    elif descriptors.descriptors:
        why = "none of the %d firmware descriptors offers it (%s)" % (
            len(descriptors.descriptors), ", ".join(d.path for d in descriptors.descriptors))
    else:
        why = "there is no firmware descriptor in /%s" % " or /".join(
            FIRMWARE_DESCRIPTOR_DIRS)
    if descriptors.unreadable:
        why += "; not firmware descriptors: %s" % ", ".join(descriptors.unreadable)
    report.refusals.append(Refusal(
        field="firmware", reason="firmware %s needs OVMF for x86_64 q35%s, but %s" % (
            spec.firmware, " with Secure Boot and enrolled keys"
            if spec.firmware == "efi-secure" else " without Secure Boot", why),
        fix="install the firmware package (%s; the vm role does when a tenant uses efi), "
        "or set firmware: bios" % FIRMWARE_PACKAGES, kind="firmware_missing"))


def run_preflight(spec, topo, defined, allow_cpu_overlap=False, allow_cross_node=False,
                  allow_vcpu_emulator_overlap=False, host_context=None, host_overrides=None,
                  hostdev_origins=None, allow_unsafe_interrupts=False, firmware_descriptors=None):
    """All checks; ``defined`` lists every domain libvirt has (this one included, if
    defined). ``host_context`` (safety_context.read_context) turns on the host-safety
    policy, with ``host_overrides`` ({allow_host_critical: bool, ...}) and
    ``hostdev_origins`` (address -> option, for the refusals). ``allow_unsafe_interrupts``
    accepts host devices on a host whose interrupt remapping is off.
    ``firmware_descriptors`` (read_firmware_descriptors) turns on the firmware check.
    Returns a PreflightReport; call raise_if_refused() on it."""
    report = PreflightReport()
    current = None
    others = []
    for domain in defined:
        if domain.name == spec.name:
            current = domain
        else:
            others.append(domain)
    check_host_safety(spec, report, host_context, host_overrides or {}, hostdev_origins)
    check_interrupt_remapping(spec, topo, report, allow_unsafe_interrupts)
    check_cpus_online(spec, topo, report)
    check_hostdevs(spec, topo, report, hostdev_origins)
    check_hostdevs_free(spec, others, report, hostdev_origins)
    check_groups_unshared(spec, topo, others, report, hostdev_origins)
    check_cpu_overlap(spec, others, report, allow_cpu_overlap=allow_cpu_overlap, topo=topo)
    check_vcpu_helper_overlap(spec, report, allow_vcpu_emulator_overlap)
    check_nodes(spec, topo, report, allow_cross_node=allow_cross_node)
    check_hugepages(spec, topo, report, current=current)
    check_firmware(spec, firmware_descriptors, report)
    return report


def preflight_from_params(spec, topo, defined, params, host_context):
    """``run_preflight`` with libvirt_pinned_domain's options (``params``): its allow_*
    overrides, and where each host device came from, so that a refusal names the
    option that brought the device in."""
    return run_preflight(
        spec, topo, defined,
        allow_cpu_overlap=params["allow_cpu_overlap"],
        allow_cross_node=params["allow_cross_node"],
        allow_vcpu_emulator_overlap=params["allow_vcpu_emulator_overlap"],
        allow_unsafe_interrupts=params["allow_unsafe_interrupts"],
        host_context=host_context,
        host_overrides={o: params[o] for o in PASS_THROUGH.overrides},
        firmware_descriptors=read_firmware_descriptors(params["root"])
        if spec.firmware in FIRMWARE_FEATURES and spec.domain_type != "test" else None,
        hostdev_origins=hostdev_origins(
            spec, from_plan=params["plan"] is not None,
            vf_option_given=bool((params["network"] or {}).get("vf_address"))))
