# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Questions the roles ask of a plan (docs/plan-format.md), answered in one place.

The roles would otherwise repeat the same Jinja loops (total 1G pages, the devices to
bind). These pure functions back the ``gpuhost.kvm.plan_*`` filters; the kernel
arguments a plan needs are the kernel_cmdline module's (its from_plan option).
"""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.plan_entry import functions_by_node, passed_through
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import hugepage_size_name
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import format_cpulist
from ansible_collections.gpuhost.kvm.plugins.plugin_utils.plan_render import iothread_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.vf_settings import vf_settings


def tenants_in_scope(plan, scope=None):
    """The plan's tenants, or only those named in ``scope`` (an empty scope means all)."""
    tenants = list(plan.get("tenants") or ())
    if not scope:
        return tenants
    wanted = {scope} if isinstance(scope, str) else set(scope)
    return [t for t in tenants if t["name"] in wanted]


def tenant_firmwares(tenants, definitions, gpu_firmware, firmware):
    """{name: firmware} for the plan's ``tenants``: the inventory's ``firmware`` key of
    the tenant's definition (``definitions``: gpuhost_tenants) when set, else
    ``gpu_firmware`` for a tenant with a GPU and ``firmware`` for one without. The vm
    role's install and define tasks both ask this, so they never disagree."""
    chosen = {}
    for definition in definitions or ():
        if isinstance(definition, dict) and definition.get("firmware"):
            chosen.setdefault(definition.get("name"), definition["firmware"])
    return {tenant["name"]: chosen.get(tenant["name"]) or (gpu_firmware if tenant.get("gpus") else firmware)
            for tenant in tenants or ()}


def hugepages_total(plan, size_kib):
    """Pages of ``size_kib`` the plan needs on all nodes together."""
    return sum(int(sizes.get(str(int(size_kib)), 0))
               for sizes in (plan.get("hugepages") or {}).values())


def hugepages_per_node(plan):
    """[{node, size_kib, pages}] sorted by node and size, for the boot-time unit."""
    rows = []
    for node, sizes in sorted((plan.get("hugepages") or {}).items(), key=lambda i: int(i[0])):
        for size, pages in sorted(sizes.items(), key=lambda i: int(i[0])):
            rows.append({"node": int(node), "size_kib": int(size), "pages": int(pages)})
    return rows


def passthrough_functions(plan, scope=None):
    """Every GPU function (with companions) the tenants in scope pass through, and the
    NVSwitches of a whole-board tenant."""
    result = []
    for tenant in tenants_in_scope(plan, scope):
        for function in passed_through(tenant):
            if function not in result:
                result.append(function)
    return result


def vf_pfs(plan, scope=None, settings=False):
    """The PFs whose VFs the tenants in scope use, sorted.

    With ``settings``: ``[{"pf", "vfs"}]`` instead, where ``vfs`` is the ``vfs`` option of
    gpuhost.kvm.sriov_vfs for that PF: one entry per tenant VF, ``{index, mac, vlan,
    spoofchk, trust}`` sorted by index (``mac`` left out when the plan gives none, so the
    driver keeps its own). A plan entry written before VFs had an ``index`` gives its
    ``address`` instead, which sriov_vfs resolves; missing settings are the defaults.
    """
    pfs = {}
    for tenant in tenants_in_scope(plan, scope):
        vf = tenant.get("vf") or {}
        if not vf.get("pf"):
            continue
        entries = pfs.setdefault(vf["pf"], [])
        values = vf_settings(vf)
        entry = {"index": vf["index"]} if vf.get("index") is not None else \
            {"address": vf["address"]}
        if values["mac"] is not None:
            entry["mac"] = values["mac"]
        entry.update(vlan=values["vlan"], spoofchk=values["spoofchk"], trust=values["trust"])
        entries.append(entry)
    if not settings:
        return sorted(pfs)
    return [{"pf": pf, "vfs": sorted(pfs[pf], key=lambda e: (e.get("index") is None,
                                                             e.get("index") or 0,
                                                             e.get("address") or ""))}
            for pf in sorted(pfs)]


def tenant_summary(plan, name):
    """One tenant's placement in a few lines, for the onboarding summary."""
    for tenant in plan.get("tenants") or ():
        if tenant["name"] == name:
            gpus = ", ".join(f for g in tenant.get("gpus") or ()
                             for f in (g.get("functions") or [g["address"]])) or "none"
            size = hugepage_size_name(tenant.get("hugepage_size_kib") or 2048)
            nodes = tenant.get("nodes") or [tenant["node"]]
            return [
                "tenant %s on NUMA node %s" % (name, tenant["node"]) if len(nodes) == 1 else
                "tenant %s on NUMA nodes %s, one guest cell per node" % (name, format_cpulist(nodes)),
                "GPU functions: %s" % gpus,
                "vCPUs %d pinned to CPUs %s (guest topology %s)"
                % (len(tenant.get("vcpu_pins") or ()),
                   format_cpulist(tenant.get("vcpu_pins") or ()),
                   "{sockets}s/{cores}c/{threads}t".format(**tenant["guest_topology"])
                   if tenant.get("guest_topology") else "n/a"),
                "emulator on CPUs %s; iothreads: %s" % (tenant.get("emulator_cpus"),
                                                        iothread_text(tenant)),
                "memory %s GiB in %s pages on %s" % (tenant.get("memory_gib"), size,
                                                     _memory_where(tenant)),
                "VF: %s" % _vf_summary(tenant.get("vf")),
            ]
    return ["tenant %s is not in the plan" % name]


def _memory_where(tenant):
    """Where the tenant's memory is: the plan's ``memory_node``, which differs from
    ``node`` only when the GPU's node has no memory (plans from before it existed hold
    memory on ``node``)."""
    if tenant.get("guest_cells"):
        return ", ".join("node %s (%s GiB, guest cell %s)" % (c["memory_node"], c["memory_gib"], c["id"])
                         for c in tenant["guest_cells"])
    node = tenant["node"]
    memory_node = tenant.get("memory_node")
    if memory_node is None or str(memory_node) == str(node):
        return "node %s" % node
    return "node %s (the nearest node with memory to node %s, which has none)" % (
        memory_node, node)


def _vf_summary(vf):
    if not vf:
        return "none"
    values = vf_settings(vf)
    return "%s (VF %s of %s), MAC %s, VLAN %s, spoofchk %s, trust %s" % (
        vf["address"], vf.get("index", "?"), vf.get("pf"), values["mac"] or "the driver's own",
        values["vlan"] or "none", "on" if values["spoofchk"] else "off",
        "on" if values["trust"] else "off")


def irq_groups(plan, layout, host_devices=None, with_passthrough=True):
    """Per NUMA node: the IRQ sources whose IRQs belong on that node's housekeeping CPUs.

    ``host``: the host's NIC/NVMe functions on the node (``layout["irq_devices"]``, or
    only those in ``host_devices``); ``guest``: the functions the node's tenants pass
    through, whose vfio-msix IRQs appear when the domain starts. A device whose node is
    unknown goes with the first node.
    """
    housekeeping = plan.get("housekeeping") or {}
    nodes = sorted(housekeeping, key=int)
    wanted = set(host_devices or ())
    rows = []
    for node in nodes:
        host = [d["address"] for d in (layout or {}).get("irq_devices") or ()
                if (not wanted or d["address"] in wanted)
                and (str(d.get("node")) == node
                     or (d.get("node") is None and node == nodes[0]))]
        guest = []
        if with_passthrough:
            for tenant in plan.get("tenants") or ():
                guest += [f for n, functions in functions_by_node(tenant) if str(n) == node
                          for f in functions]
        rows.append({"node": node, "cpus": housekeeping[node], "devices": host + guest,
                     "host": host, "guest": guest})
    return rows


def irq_affinity_groups(rows, exclude=None, persist_as_prefix=None, drop_empty=False):
    """The ``groups`` option of irq_affinity from ``irq_groups`` rows: every node in one
    module run instead of one run per node.

    ``exclude``: functions to leave out of each group's devices (check mode's VFs not
    created yet, planned functions the host lacks). ``persist_as_prefix``: name each
    group's stored pin prefix + node; a node with no devices at all (before ``exclude``)
    then forgets its stored pin (state absent). ``drop_empty``: leave out the nodes with
    no devices left after ``exclude``.
    """
    left_out = set(exclude or ())
    groups = []
    for row in rows or ():
        devices = [address for address in row["devices"] if address not in left_out]
        if drop_empty and not devices:
            continue
        group = {"pci_devices": devices, "cpus": row["cpus"], "state": "present"}
        if persist_as_prefix is not None:
            group["persist_as"] = "%s%s" % (persist_as_prefix, row["node"])
            if not row["devices"]:
                group["state"] = "absent"
        groups.append(group)
    return groups
