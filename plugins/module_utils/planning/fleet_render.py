# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report (planning.fleet's ``fleet_report``) for people: ``render_markdown`` and
``render_svg``. fleet_report writes them wherever it runs (usually the controller, by
delegate_to), so they stay with the modules' code."""

from __future__ import annotations

from xml.sax.saxutils import escape

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.markdown import markdown_text


def render_markdown(report):
    totals = report["totals"]
    lines = ["# Fleet capacity", "",
             "%d hosts (%d without data), %d tenants; GPUs: %d free of %d (%d with a clean "
             "IOMMU group, %d stranded on nodes without a free core); whole cores: %d free "
             "of %d; VFs free: %d."
             % (totals["hosts"], totals["hosts_without_data"], totals["tenants"],
                totals["gpus_free"], totals["gpus_total"], totals["gpus_free_clean"],
                totals["gpus_stranded"], totals["cores_free"], totals["cores_total"],
                totals["vfs_free"]), "",
             "| host | node | free GPUs (clean) | free whole cores | free hugepages | free VFs |",
             "|---|---|---|---|---|---|"]
    for name, host in report["hosts"].items():
        if "error" in host:
            lines.append("| %s | - | no data: %s | | | |"
                         % (markdown_text(name), markdown_text(host["error"])))
            continue
        for node_id, node in host["nodes"].items():
            pages = ", ".join("%s %d/%d" % (size, p["free"], p["total"])
                              for size, p in node["hugepages"].items()) or "-"
            lines.append("| %s | %s | %d (%d) | %d/%d | %s | %d/%d |"
                         % (markdown_text(name), markdown_text(node_id), node["gpus_free"],
                            node["gpus_free_clean"],
                            node["cores_free"], node["cores_total"], markdown_text(pages),
                            node["vfs_free"], node["vfs_total"]))
    lines += ["", "## Tenants", "", "| host | tenant | node | GPUs | vCPUs | memory GiB | VF |",
              "|---|---|---|---|---|---|---|"]
    for name, host in report["hosts"].items():
        for tenant in host.get("tenants", ()):
            lines.append("| %s |" % " | ".join(markdown_text(cell) for cell in (
                name, tenant["name"], tenant["node"], ", ".join(map(str, tenant["gpus"])) or "-",
                tenant["vcpus"], tenant["memory_gib"], tenant["vf"] or "-")))
    warnings = [(name, w) for name, host in report["hosts"].items()
                for w in host.get("warnings", ())]
    if warnings:
        lines += ["", "## Warnings", ""] + ["- %s: %s" % (markdown_text(name), markdown_text(w))
                                            for name, w in warnings]
    return "\n".join(lines) + "\n"


def render_svg(report):
    """One row per host, one block per NUMA node: a square per GPU (green free with a
    clean group, amber free but not clean, grey taken) and a bar of free whole cores."""
    row_h, label_w, node_w, square = 28, 160, 230, 12
    rows = list(report["hosts"].items())
    max_nodes = max([len(host.get("nodes", {})) for name, host in rows] + [1])
    width = label_w + max_nodes * node_w + 10
    height = 40 + row_h * len(rows) + 10
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="monospace" font-size="11">' % (width, height),
           '<text x="5" y="16" font-size="13">Fleet capacity: %d free GPUs, %d free whole '
           'cores, %d tenants</text>' % (report["totals"]["gpus_free"],
                                         report["totals"]["cores_free"],
                                         report["totals"]["tenants"]),
           '<text x="5" y="32" fill="#555">green: free GPU, clean IOMMU group; amber: free, '
           'group not clean; grey: taken; bar: free whole cores</text>']
    for index, (name, host) in enumerate(rows):
        y = 40 + index * row_h
        out.append('<text x="5" y="%d">%s</text>' % (y + 16, escape(str(name))))
        if "error" in host:
            out.append('<text x="%d" y="%d" fill="#b00">no data</text>' % (label_w, y + 16))
            continue
        for position, (node_id, node) in enumerate(host["nodes"].items()):
            x = label_w + position * node_w
            out.append('<text x="%d" y="%d" fill="#555">n%s</text>'
                       % (x, y + 16, escape(str(node_id))))
            gx = x + 22
            for gpu in node["gpus"]:
                color = "#999" if gpu["tenant"] else ("#2a2" if gpu["clean"] else "#e90")
                out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s'
                           '</title></rect>' % (gx, y + 6, square, square, color,
                                                escape(str(gpu["address"]) + (
                                                    " %s" % gpu["tenant"] if gpu["tenant"] else ""))))
                gx += square + 2
            bar_x = x + 22 + 8 * (square + 2)
            bar_w = node_w - (bar_x - x) - 10
            share = node["cores_free"] / node["cores_total"] if node["cores_total"] else 0
            out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#eee"/>'
                       % (bar_x, y + 6, bar_w, square))
            out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#36c"><title>%d/%d '
                       'whole cores free</title></rect>'
                       % (bar_x, y + 6, int(bar_w * share), square, node["cores_free"],
                          node["cores_total"]))
    out.append("</svg>")
    return "\n".join(out) + "\n"
