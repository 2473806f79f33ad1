# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Questions the roles ask of a plan (docs/plan-format.md), answered in one place.

The roles would otherwise repeat the same Jinja loops (total 1G pages, kernel
arguments, the devices to bind). These pure functions back the ``gpuhost.kvm.plan_*``
filters.
"""

from __future__ import annotations

import re

# The one comparison of kernel command lines lives with the other boot decisions.
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.plan_entry import functions_by_node, passed_through
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.kernel_cmdline import (  # noqa: F401 pylint: disable=unused-import
    cmdline_missing, cstate_limit_args)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    hugepage_size_name, positive_int)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    MAX_NODE,
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.gpuhost.kvm.plugins.plugin_utils.plan_render import iothread_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.vf_settings import vf_settings

GIGANTIC_KIB = 1048576
# The kernel's per-node form of hugepages= (Documentation/admin-guide/kernel-parameters.txt:
# "Format: <integer> or (node format) <node>:<integer>[,<node>:<integer>]", e.g.
# hugepagesz=1G hugepages=0:1,1:3) came with commit b5389086ad7b ("hugetlbfs: extend the
# definition of hugepages parameter to support node allocation"), merged for Linux 5.16.
# An older kernel reads "0:4" with sscanf("%lu") as 0 pages, silently: so the node form is
# given only to a kernel known to be 5.16 or newer.
NODE_FORMAT_KERNEL = (5, 16)
# 1G pages per node: 64 TiB, past any host this collection plans.
MAX_GIGANTIC_PAGES = 65536
_RELEASE_RE = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})(?:[.\-+~_].*)?\Z")
RUNTIME_GIGANTIC_WARNING = (
    "the 1G pages are reserved at boot as one host-wide count (hugepages=%d, which the "
    "kernel spreads evenly over the nodes) and the numa role's boot unit moves them per "
    "node at run time: a fallback, because %s. Allocating 1G pages at run time fails when "
    "memory is fragmented (runbook section 13, \"HugePages not allocated\": 1G pages must "
    "be reserved at boot); boot a kernel of 5.16 or newer for the per-node form")


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


def kernel_takes_node_hugepages(kernel_release):
    """Whether a kernel of ``kernel_release`` (/proc/sys/kernel/osrelease, such as
    "6.8.0-45-generic") reads ``hugepages=<node>:<count>``; False when unknown."""
    match = _RELEASE_RE.match(str(kernel_release or "").strip())
    if not match:
        return False
    return (int(match.group(1)), int(match.group(2))) >= NODE_FORMAT_KERNEL


def gigantic_pages_by_node(plan):
    """[(node, pages)] of 1G pages the plan needs, sorted by node, nodes without a need
    left out. Node numbers and counts must be whole numbers in range (a plan is a file
    the SRE can edit): anything else is a GpuhostError naming the entry."""
    rows = []
    for node, sizes in (plan.get("hugepages") or {}).items():
        field = "plan.hugepages[%r]" % (node,)
        text = str(node)
        if not re.fullmatch(r"[0-9]{1,4}", text):
            raise GpuhostError("%r is not a NUMA node number" % (node,), field=field,
                               fix="re-plan the host: the plan's hugepages are keyed by node number")
        number = positive_int(int(text), field, minimum=0, maximum=MAX_NODE)
        pages = (sizes or {}).get(str(GIGANTIC_KIB), 0)
        if isinstance(pages, str) and re.fullmatch(r"[0-9]{1,6}", pages):
            pages = int(pages)      # the same count after a round trip through templating
        pages = positive_int(pages, "%s[%d]" % (field, GIGANTIC_KIB), minimum=0,
                             maximum=MAX_GIGANTIC_PAGES,
                             fix="re-plan the host: a node's 1G pages are a whole number "
                                 "of at most %d" % MAX_GIGANTIC_PAGES)
        if pages:
            rows.append((number, pages))
    return sorted(rows)


def _only_gigantic(plan):
    """The plan's pages are all 1G (the runbook's plan A sets default_hugepagesz=1G)."""
    sizes = {str(size) for per_node in (plan.get("hugepages") or {}).values()
             for size, pages in (per_node or {}).items() if pages}
    return sizes == {str(GIGANTIC_KIB)}


def gigantic_boot_args(plan, kernel_release=None):
    """The 1G hugepage kernel arguments: ``default_hugepagesz=1G`` when the plan uses no
    other size, then ``hugepagesz=1G hugepages=0:N,1:M`` (only the nodes with a need)
    on a kernel that reads the node form, else the host-wide ``hugepages=<sum>``."""
    rows = gigantic_pages_by_node(plan)
    if not rows:
        return []
    args = ["default_hugepagesz=1G"] if _only_gigantic(plan) else []
    if kernel_takes_node_hugepages(kernel_release):
        return args + ["hugepagesz=1G",
                       "hugepages=%s" % ",".join("%d:%d" % row for row in rows)]
    return args + ["hugepagesz=1G", "hugepages=%d" % sum(pages for dummy, pages in rows)]


def gigantic_boot_warning(plan, kernel_release=None):
    """"" when the plan's 1G pages are reserved per node at boot (or it has none), else
    why they are not and what that risks, for the iommu role to report."""
    rows = gigantic_pages_by_node(plan)
    if not rows or kernel_takes_node_hugepages(kernel_release):
        return ""
    why = ("the host kernel %s predates the per-node form hugepages=<node>:<count> (Linux "
           "5.16)" % kernel_release if kernel_release else
           "the host kernel's release is unknown (the host facts' memory subset gives it)")
    return RUNTIME_GIGANTIC_WARNING % (sum(pages for dummy, pages in rows), why)


def gigantic_pool_shortfalls(plan, memory, kernel_release=None):
    """After the reboot: one line per node whose 1G pool holds fewer pages than the plan
    wants (``memory``: host_facts' memory subset), naming node, wanted and got. Per node
    when the kernel took the node form; host-wide otherwise, since then the numa role's
    boot unit still has to move the pages (and checks each node after)."""
    rows = gigantic_pages_by_node(plan)
    pools = (memory or {}).get("hugepages") or {}

    def got(node):
        return int((((pools.get(str(node)) or {}).get(str(GIGANTIC_KIB))) or {}).get("nr", 0))

    if kernel_takes_node_hugepages(kernel_release):
        return ["node %d: wanted %d pages of 1G reserved at boot, got %d" % (node, pages, got(node))
                for node, pages in rows if got(node) < pages]
    wanted = sum(pages for dummy, pages in rows)
    have = sum(got(node) for node in pools)
    if have < wanted:
        return ["all nodes: wanted %d pages of 1G reserved at boot, got %d" % (wanted, have)]
    return []


def isolated_cpus(plan):
    """Every online CPU that is not housekeeping: stable when tenants come and go, so
    that onboarding never needs a new kernel command line."""
    online = set(parse_cpulist(plan.get("online_cpus") or ""))
    housekeeping = set(parse_cpulist(plan.get("housekeeping_cpus") or ""))
    return format_cpulist(sorted(online - housekeeping))


def kernel_args(plan, cpu_vendor=None, iommu_pt=True, ignore_msrs=True, isolate=False,
                extra=(), max_cstate=None, kernel_release=None):
    """The kernel arguments the host needs, as ``name=value`` strings, in a fixed order.

    1G pages can only be reserved at boot, per node where the kernel (``kernel_release``)
    reads the node form (gigantic_boot_args). The default hugepage size becomes 1G only
    when the plan uses no 2M pages, so that ``vm.nr_hugepages`` keeps meaning the
    tenants' 2M pages where there are some (libvirt names the size per domain).
    ``max_cstate`` (None: no limit) adds the C-state limit of
    kernel_cmdline.cstate_limit_args.
    """
    args = []
    vendor = (cpu_vendor or "").lower()
    if "amd" in vendor:
        args.append("amd_iommu=on")
    else:
        args.append("intel_iommu=on")
    if iommu_pt:
        args.append("iommu=pt")
    if ignore_msrs:
        args.append("kvm.ignore_msrs=1")
    args += gigantic_boot_args(plan, kernel_release)
    if isolate:
        cpus = isolated_cpus(plan)
        if cpus:
            args += ["isolcpus=managed_irq,domain,%s" % cpus, "nohz_full=%s" % cpus,
                     "rcu_nocbs=%s" % cpus]
    args += cstate_limit_args(max_cstate)
    args += [str(a) for a in extra or ()]
    return args


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
