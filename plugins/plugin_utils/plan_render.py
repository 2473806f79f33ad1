# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan as SREs read it: a Markdown table per NUMA node, and a picture (SVG/HTML).

Pure functions: ``render_markdown(plan, layout)``, ``render_svg(plan, layout)`` and
``render_html(plan, layout)`` take the plan (docs/plan-format.md) and the host layout
(planning.plan_layout's ``layout_from_topology()``: nodes with their cores, GPUs and
SR-IOV PFs) and return text. Only the controller draws them (the plan filters), so they
live in plugin_utils. The same input always gives the same bytes, so a rendered plan can be diffed.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.plan_entry import functions_by_node
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.address_width import report_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    MAX_CPUS,
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
    MAX_HUGEPAGES, MAX_MEMORY_GIB)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.markdown import markdown_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    hugepage_size_name, whole_number)

HOUSEKEEPING = "housekeeping"
FREE = "free"
# Colour-blind-safe qualitative palette (Okabe-Ito), then a second round of lighter tones.
TENANT_COLOURS = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00",
                  "#CC79A7", "#8FBC8F", "#B0A0D0", "#F4A582", "#92C5DE", "#C2A5CF")
HOUSEKEEPING_COLOUR = "#9E9E9E"
FREE_COLOUR = "#FFFFFF"
# A BAR is a power of two below the 64-bit address space.
_MAX_BAR = 1 << 64


def _cpu(value, field):
    """A CPU number of the plan: whole and below the kernel's limit (NaN, infinities and
    absurd numbers are a GpuhostError naming ``field``, not a traceback)."""
    return whole_number(value, field, 0, MAX_CPUS - 1)


def _page_size(value, field="hugepage_size_kib"):
    return whole_number(value, field, 1, MAX_MEMORY_GIB * 1048576)


# ---------------------------------------------------------------------- shared analysis

def _size_name(size_kib):
    return hugepage_size_name(_page_size(size_kib))


def _owners(plan):
    """CPU -> (owner, what): housekeeping, a tenant's vCPU, or a tenant's reserved CPU."""
    owners = {}
    for node, cpus in sorted((plan.get("housekeeping") or {}).items()):
        for cpu in parse_cpulist(cpus):
            owners[cpu] = (HOUSEKEEPING, "host, IRQs, emulator threads")
    for tenant in plan.get("tenants") or ():
        name = tenant["name"]
        for vcpu, cpu in enumerate(tenant.get("vcpu_pins") or ()):
            owners[_cpu(cpu, "tenants[%s].vcpu_pins" % name)] = (name, "vCPU %d" % vcpu)
        for cpu in parse_cpulist(tenant.get("reserved_cpus") or ""):
            owners.setdefault(cpu, (name, "reserved (sibling kept idle)"))
        if tenant.get("emulator_policy") == "dedicated":
            for cpu in parse_cpulist(tenant.get("emulator_cpus") or ""):
                owners.setdefault(cpu, (name, "emulator threads"))
        if tenant.get("iothread_placement") == "dedicated":
            for cpu in parse_cpulist(tenant.get("iothread_cpus") or ""):
                owners.setdefault(cpu, (name, "iothreads"))
    return owners


def iothread_text(tenant):
    """Where a tenant's iothreads run, in words: their CPUs, and whether the core is
    theirs (``dedicated``) or the emulator's (``shared_with_emulator``)."""
    if not tenant.get("iothreads"):
        return "none"
    where = {"dedicated": "a core of their own",
             "shared_with_emulator": "shared with the emulator"}.get(
        tenant.get("iothread_placement"), "shared with the emulator")
    return "%s on %s (%s)" % (tenant["iothreads"], tenant.get("iothread_cpus"), where)


def tenant_colours(plan):
    names = [t["name"] for t in plan.get("tenants") or ()]
    return {name: TENANT_COLOURS[i % len(TENANT_COLOURS)] for i, name in enumerate(names)}


def _node_keys(plan, layout):
    keys = set((layout or {}).get("nodes", {})) | set(plan.get("housekeeping") or {})
    keys |= {str(n) for t in plan.get("tenants") or () for n in t.get("nodes") or [t["node"]]}
    return sorted(keys, key=int)


def _cores_of(plan, layout, node):
    """The node's cores as lists of CPUs; without a layout, the CPUs the plan names."""
    known = ((layout or {}).get("nodes") or {}).get(node, {}).get("cores")
    if known:
        return [list(core) for core in known]
    cpus = set(parse_cpulist((plan.get("housekeeping") or {}).get(node, "")))
    for tenant in plan.get("tenants") or ():
        if str(node) in {str(n) for n in tenant.get("nodes") or [tenant["node"]]}:
            cpus.update(_cpu(c, "tenants[%s].vcpu_pins" % tenant["name"])
                        for c in tenant.get("vcpu_pins") or ())
            cpus.update(parse_cpulist(tenant.get("reserved_cpus") or ""))
    return [[c] for c in sorted(cpus)]


def _devices(plan, layout, node):
    """(kind, address, owner, note) for the node's GPUs, their functions and VFs."""
    rows = []
    taken = {}
    for tenant in plan.get("tenants") or ():
        for gpu in tenant.get("gpus") or ():
            for function in gpu.get("functions") or [gpu["address"]]:
                taken[function] = (tenant["name"], gpu)
        if tenant.get("vf"):
            taken[tenant["vf"]["address"]] = (tenant["name"], tenant["vf"])
    listed = set()
    for tenant in plan.get("tenants") or ():
        here = {f for n, functions in functions_by_node(tenant) if str(n) == node for f in functions}
        if not here:
            continue
        for gpu in tenant.get("gpus") or ():
            if gpu["address"] not in here:
                continue        # a GPU of another guest cell of a whole-board tenant
            functions = gpu.get("functions") or [gpu["address"]]
            for function in functions:
                kind = "GPU" if function == gpu["address"] else "GPU companion"
                note = "IOMMU group %s" % gpu.get("iommu_group")
                if function == gpu["address"] and gpu.get("bar64_total"):
                    note += ", 64-bit BARs %d GiB" % (whole_number(
                        gpu["bar64_total"], "tenants[%s].gpus.bar64_total" % tenant["name"], 0,
                        _MAX_BAR) >> 30)
                rows.append((kind, function, tenant["name"], note))
                listed.add(function)
        for switch in tenant.get("nvswitches") or ():
            if switch["address"] in here:
                rows.append(("NVSwitch", switch["address"], tenant["name"],
                             "IOMMU group %s" % switch.get("iommu_group")))
                listed.add(switch["address"])
        vf = tenant.get("vf")
        if vf and vf["address"] in here:
            rows.append(("VF", vf["address"], tenant["name"],
                         "of PF %s, IOMMU group %s" % (vf.get("pf"), vf.get("iommu_group"))))
            listed.add(vf["address"])
    for gpu in (layout or {}).get("gpus") or ():
        if str(gpu.get("node")) == node and gpu["address"] not in listed \
                and gpu["address"] not in taken:
            rows.append(("GPU", gpu["address"], FREE, "driver %s, IOMMU group %s"
                         % (gpu.get("driver") or "none", gpu.get("iommu_group"))))
    for pf in (layout or {}).get("pfs") or ():
        if str(pf.get("node")) == node:
            rows.append(("SR-IOV PF", pf["address"], HOUSEKEEPING,
                         "%s/%s VFs%s" % (pf.get("sriov_numvfs") or 0, pf.get("sriov_totalvfs"),
                                          (", " + ", ".join(pf["netdevs"]))
                                          if pf.get("netdevs") else "")))
    return rows


def _hugepage_lines(plan, layout, node):
    lines = []
    wanted = (plan.get("hugepages") or {}).get(node) or {}
    pools = (((layout or {}).get("nodes") or {}).get(node) or {}).get("hugepages") or {}
    for size in sorted(set(wanted) | set(pools),
                       key=lambda size: _page_size(size, "hugepages.%s" % node)):
        need = whole_number(wanted.get(size, 0), "hugepages.%s.%s" % (node, size), 0,
                            MAX_HUGEPAGES)
        pool = pools.get(size) or {}
        text = "%d x %s for tenants" % (need, _size_name(size))
        if pool:
            text += " (reserved now: %s, free %s)" % (pool.get("nr"), pool.get("free"))
        lines.append(text)
    return lines


def _core_rows(plan, layout, node):
    owners = _owners(plan)
    rows = []
    for index, core in enumerate(_cores_of(plan, layout, node)):
        roles = [owners.get(cpu, (FREE, "")) for cpu in core]
        owner_names = sorted({r[0] for r in roles})
        role = owner_names[0] if len(owner_names) == 1 else " + ".join(owner_names)
        detail = ", ".join("%d: %s" % (cpu, r[1]) for cpu, r in zip(core, roles) if r[1])
        rows.append((index, format_cpulist(core), role, detail))
    return rows


# ---------------------------------------------------------------------------- markdown

_md_cell = markdown_text


def render_markdown(plan, layout=None, title="Placement plan"):
    out = ["# %s" % title, ""]
    out.append("SMT policy: %s; threads per core: %s; online CPUs: %s."
               % (plan.get("smt_policy"), plan.get("threads_per_core"),
                  plan.get("online_cpus")))
    out.append("Housekeeping CPUs: %s. Tenant CPUs: %s. irqbalance ban list: %s."
               % (plan.get("housekeeping_cpus") or "none", plan.get("tenant_cpus") or "none",
                  (plan.get("irqbalance") or {}).get("banned_cpulist") or "none"))
    out.append("")
    if plan.get("tenants"):
        out += ["## Tenants", "",
                "| Tenant | Node | vCPUs | Memory | GPUs | VF | IO threads |",
                "|---|---|---|---|---|---|---|"]
        for tenant in plan["tenants"]:
            pins = [_cpu(c, "tenants[%s].vcpu_pins" % tenant["name"])
                    for c in tenant.get("vcpu_pins") or ()]
            out.append("| %s | %s | %s on %s | %s GiB in %s pages | %s | %s | %s |" % (
                _md_cell(tenant["name"]), _md_cell(tenant["node"]), _md_cell(tenant.get("vcpus")),
                format_cpulist(pins), tenant.get("memory_gib"),
                _size_name(tenant.get("hugepage_size_kib") or 1048576),
                ", ".join(g["address"] for g in tenant.get("gpus") or ()) or "none",
                (tenant.get("vf") or {}).get("address") or "none",
                _md_cell(iothread_text(tenant))))
        out.append("")
        widths = [(t["name"], t["address_width"]) for t in plan["tenants"]
                  if isinstance(t.get("address_width"), dict)]
        for name, width in widths:
            out.append("- %s: %s" % (_md_cell(name), _md_cell(report_text(width))))
        if widths:
            out.append("")
    for node in _node_keys(plan, layout):
        out += ["## NUMA node %s" % markdown_text(node), "",
                "| Core | CPUs | Role | Detail |", "|---|---|---|---|"]
        for index, cpus, role, detail in _core_rows(plan, layout, node):
            out.append("| %d | %s | %s | %s |" % (index, cpus, _md_cell(role),
                                                  _md_cell(detail)))
        out.append("")
        devices = _devices(plan, layout, node)
        if devices:
            out += ["| Device | Address | Tenant | Detail |", "|---|---|---|---|"]
            for kind, address, owner, note in devices:
                out.append("| %s | %s | %s | %s |" % (_md_cell(kind), _md_cell(address),
                                                      _md_cell(owner), _md_cell(note)))
            out.append("")
        pages = _hugepage_lines(plan, layout, node)
        if pages:
            out.append("Hugepages: %s." % markdown_text("; ".join(pages)))
            out.append("")
    for warning in plan.get("warnings") or ():
        out.append("> Warning: %s" % markdown_text(warning))
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------------- SVG

_CELL = 26          # one CPU thread
_GAP = 6
_PAD = 14
_CORES_PER_ROW = 8
_DEVICE_H = 22


def _colour(owner, colours):
    if owner == HOUSEKEEPING:
        return HOUSEKEEPING_COLOUR
    if owner == FREE:
        return FREE_COLOUR
    return colours.get(owner, "#DDDDDD")


def render_svg(plan, layout=None, title="Placement plan"):
    owners = _owners(plan)
    colours = tenant_colours(plan)
    nodes = _node_keys(plan, layout)
    threads = max([len(c) for n in nodes for c in _cores_of(plan, layout, n)] or [1])
    core_w = threads * _CELL + 4
    node_w = _PAD * 2 + _CORES_PER_ROW * (core_w + _GAP) - _GAP
    boxes = []
    y = 70
    for node in nodes:
        cores = _cores_of(plan, layout, node)
        rows = max(1, (len(cores) + _CORES_PER_ROW - 1) // _CORES_PER_ROW)
        devices = _devices(plan, layout, node)
        pages = _hugepage_lines(plan, layout, node)
        height = (_PAD + 20 + rows * (_CELL + _GAP) + _PAD + len(devices) * (_DEVICE_H + 4)
                  + len(pages) * 18 + _PAD)
        boxes.append((node, cores, devices, pages, y, height))
        y += height + 20
    legend = [(HOUSEKEEPING, HOUSEKEEPING_COLOUR), (FREE, FREE_COLOUR)] + list(colours.items())
    width = max(node_w + 2 * _PAD, 140 * len(legend) + 2 * _PAD)
    height = y + 10
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">'
           % (width, height, width, height),
           '<title>%s</title>' % escape(title),
           '<rect x="0" y="0" width="%d" height="%d" fill="#FAFAFA"/>' % (width, height),
           '<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>'
           % (_PAD, escape(title))]
    for index, (name, colour) in enumerate(legend):
        x = _PAD + index * 140
        out.append('<rect x="%d" y="38" width="14" height="14" fill="%s" stroke="#333"/>'
                   % (x, colour))
        out.append('<text x="%d" y="50">%s</text>' % (x + 20, escape(name)))
    for node, cores, devices, pages, top, box_h in boxes:
        out.append('<g class="numa-node" id="node%s">' % escape(node))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" rx="8" fill="none" '
                   'stroke="#333" stroke-width="2"/>' % (_PAD, top, node_w, box_h))
        out.append('<text x="%d" y="%d" font-size="13" font-weight="bold">NUMA node %s'
                   '</text>' % (_PAD * 2, top + _PAD + 8, escape(node)))
        cy = top + _PAD + 20
        for index, core in enumerate(cores):
            cx = _PAD * 2 + (index % _CORES_PER_ROW) * (core_w + _GAP)
            ry = cy + (index // _CORES_PER_ROW) * (_CELL + _GAP)
            out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" '
                       'stroke="#666"/>' % (cx, ry, core_w - 2, _CELL))
            for t, cpu in enumerate(core):
                owner, what = owners.get(cpu, (FREE, ""))
                tx = cx + 2 + t * _CELL
                out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="%s" '
                           'stroke="#333"><title>CPU %d: %s%s</title></rect>'
                           % (tx, ry + 2, _CELL - 2, _CELL - 4, _colour(owner, colours), cpu,
                              escape(owner), (" (%s)" % escape(what)) if what else ""))
                out.append('<text x="%d" y="%d" text-anchor="middle" font-size="9">%d</text>'
                           % (tx + (_CELL - 2) // 2, ry + _CELL // 2 + 4, cpu))
        rows = max(1, (len(cores) + _CORES_PER_ROW - 1) // _CORES_PER_ROW)
        dy = cy + rows * (_CELL + _GAP) + _PAD
        for kind, address, owner, note in devices:
            out.append('<rect x="%d" y="%d" width="%d" height="%d" rx="4" fill="%s" '
                       'stroke="#333"/>' % (_PAD * 2, dy, node_w - 2 * _PAD, _DEVICE_H,
                                            _colour(owner, colours)))
            out.append('<text x="%d" y="%d">%s %s: %s (%s)</text>'
                       % (_PAD * 2 + 6, dy + 15, escape(kind), escape(address), escape(owner),
                          escape(note)))
            dy += _DEVICE_H + 4
        for line in pages:
            out.append('<text x="%d" y="%d">Hugepages: %s</text>'
                       % (_PAD * 2, dy + 13, escape(line)))
            dy += 18
        out.append('</g>')
    out.append('</svg>')
    return "\n".join(out) + "\n"


# -------------------------------------------------------------------------------- HTML

def render_html(plan, layout=None, title="Placement plan"):
    """One self-contained page: the picture, then the tables."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>%s</title>" % escape(title),
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
             "margin-bottom:1em}td,th{border:1px solid #999;padding:2px 8px;text-align:left}"
             "</style></head><body>", render_svg(plan, layout, title)]
    colours = tenant_colours(plan)
    for node in _node_keys(plan, layout):
        parts.append("<h2>NUMA node %s</h2>" % escape(node))
        parts.append("<table><tr><th>Core</th><th>CPUs</th><th>Role</th><th>Detail</th></tr>")
        for index, cpus, role, detail in _core_rows(plan, layout, node):
            parts.append('<tr><td>%d</td><td>%s</td><td style="background:%s">%s</td>'
                         '<td>%s</td></tr>' % (index, escape(cpus),
                                               _colour(role, colours), escape(role),
                                               escape(detail)))
        parts.append("</table>")
        devices = _devices(plan, layout, node)
        if devices:
            parts.append("<table><tr><th>Device</th><th>Address</th><th>Tenant</th>"
                         "<th>Detail</th></tr>")
            for kind, address, owner, note in devices:
                parts.append("<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>"
                             % tuple(escape(x) for x in (kind, address, owner, note)))
            parts.append("</table>")
        for line in _hugepage_lines(plan, layout, node):
            parts.append("<p>Hugepages: %s</p>" % escape(line))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
