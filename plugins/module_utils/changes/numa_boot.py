# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The numa role's boot helper (gpuhost-numa-setup, run by gpuhost-numa.service).

It puts each node's hugepages where the plan wants them, before libvirt starts the
tenants: the kernel spreads boot-time pages evenly over the nodes, but a tenant's pages
must be on its GPU's node. For every page size the plan names, it first releases pages
on the nodes that hold more than planned, then reserves them on the nodes that need
more, so that the boot-time 1G pages move rather than run short. Then it sets the CPU
frequency governor the plan asks for, on every CPU that has a cpufreq driver.

The same Python as the modules, shipped with :func:`shipping.python_library_files`
like the SR-IOV and IRQ helpers; the role writes the configuration
(``/etc/gpuhost/numa.conf``) that it reads::

    # comment
    HUGEPAGES <node> <page size in kB> <pages>
    GOVERNOR <name>          (or GOVERNOR alone: leave the governor as it is)
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import describe_os_error
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter

CONF_FILE = "/etc/gpuhost/numa.conf"
NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"
_NUMBER = r"(0|[1-9][0-9]{0,9})"   # [0-9], not \d: int() would take other digits
_HUGEPAGES_RE = re.compile(r"^HUGEPAGES\s+%s\s+%s\s+%s\s*\Z" % (_NUMBER, _NUMBER, _NUMBER))
_GOVERNOR_RE = re.compile(r"^GOVERNOR(?:\s+([a-z][a-z0-9_]{0,31}))?\s*\Z")
_NODE_RE = re.compile(r"^node([0-9]+)\Z")
GIGANTIC_KIB = 1048576
# Runbook section 13 ("HugePages not allocated"): 1G pages must be reserved at boot. The
# iommu role gives them per node on the kernel command line; raising a 1G pool here is
# the fallback for a kernel without the per-node form (or a plan changed since the boot).
RUNTIME_GIGANTIC_WARNING = ("warning: raising node %d's 1G pages from %d to %d at run time, a "
                            "fallback: run-time 1G allocation fails when the node's memory is "
                            "fragmented (runbook section 13); they belong on the kernel "
                            "command line (hugepagesz=1G hugepages=<node>:<count>, Linux 5.16 "
                            "or newer), which the iommu role writes")
_CPU_RE = re.compile(r"^cpu([0-9]+)\Z")


@dataclass(frozen=True)
class NodePages:
    node: int
    size_kib: int
    pages: int


def parse_numa_conf(text, path=CONF_FILE):
    """([NodePages], governor or None) from the configuration's text. A line that is
    neither a comment nor one of the two forms is refused, naming its number: a half-read
    plan would move pages off a tenant's node."""
    rows, governor, seen = [], None, set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pages = _HUGEPAGES_RE.match(line)
        if pages:
            row = NodePages(*(int(value) for value in pages.groups()))
            if (row.node, row.size_kib) in seen:
                raise GpuhostError("%s line %d: node %d's %d kB pages are given twice"
                                   % (path, number, row.node, row.size_kib),
                                   fix="rewrite the file with the numa role")
            seen.add((row.node, row.size_kib))
            rows.append(row)
            continue
        chosen = _GOVERNOR_RE.match(line)
        if chosen:
            governor = chosen.group(1)
            continue
        raise GpuhostError("%s line %d is not 'HUGEPAGES <node> <kB> <pages>' or 'GOVERNOR [name]': %r"
                           % (path, number, raw[:80]), fix="rewrite the file with the numa role")
    return rows, governor


def _pool(node, size_kib):
    return "%s/node%d/hugepages/hugepages-%dkB/nr_hugepages" % (NODE_DIR, node, size_kib)


def _numbered(writer, folder, pattern):
    """The numbers of the entries of ``folder`` (below the writer's root) that match
    ``pattern``, sorted as numbers; none when the folder is missing."""
    try:
        names = os.listdir(writer.path(folder))
    except OSError:
        return []
    return sorted(int(match.group(1)) for match in map(pattern.match, names) if match)


def _read_count(writer, path):
    text = writer.read(path)
    return int(text) if text is not None and text.strip().isdigit() else None


def plan_page_writes(rows, held):
    """The writes, in order, that take every node's pools to ``rows``: for each page size,
    first the nodes holding more than planned (a node the plan does not name for that
    size is planned at 0), then the planned counts. ``held`` maps (node, size) to the
    pages a pool holds now (pools the host lacks are absent). Pure: [(node, size, pages)]."""
    writes = []
    for size in sorted({row.size_kib for row in rows}):
        planned = {row.node: row.pages for row in rows if row.size_kib == size}
        for (node, pool_size), pages in sorted(held.items()):
            if pool_size == size and pages > planned.get(node, 0):
                writes.append((node, size, planned.get(node, 0)))
    writes += [(row.node, row.size_kib, row.pages) for row in rows]
    return writes


def apply_node_pages(writer, rows, warnings=None):
    """Writes each pool, then reads back the planned ones; the problems, one line each.
    ``warnings`` (a list) gets a line for each 1G pool raised at run time: the boot should
    have reserved those pages."""
    held = {}
    for node in _numbered(writer, NODE_DIR, _NODE_RE):
        for size in {row.size_kib for row in rows}:
            count = _read_count(writer, _pool(node, size))
            if count is not None:
                held[(node, size)] = count
    problems = []
    for node, size, pages in plan_page_writes(rows, held):
        if (node, size) not in held:
            problems.append("no %d kB pages on node %d: %s is missing" % (size, node, _pool(node, size)))
            continue
        if size == GIGANTIC_KIB and pages > held[(node, size)] and warnings is not None:
            warnings.append(RUNTIME_GIGANTIC_WARNING % (node, held[(node, size)], pages))
        try:
            writer.write(_pool(node, size), "%d" % pages)
        except OSError as err:
            # A count the kernel cannot give shows in the read-back below; a release that
            # fails would leave pages on a node the plan moved them from.
            if pages < held[(node, size)]:
                problems.append("node %d: releasing %d kB pages down to %d failed: %s"
                                % (node, size, pages, describe_os_error(err)))
    for row in rows:
        if (row.node, row.size_kib) not in held:
            continue
        got = _read_count(writer, _pool(row.node, row.size_kib)) or 0
        if got < row.pages:
            problems.append("node %d has %d of %d pages of %d kB; free memory on node %d or reboot to "
                            "reserve them at boot" % (row.node, got, row.pages, row.size_kib, row.node))
    return problems


def apply_governor(writer, governor):
    """Sets ``governor`` on every CPU with a cpufreq driver (what ``cpupower
    frequency-set -g`` writes); the problems. No cpufreq driver at all is no problem: a VM,
    or scaling off in the BIOS, has nothing to set."""
    if not governor:
        return []
    problems = []
    for cpu in _numbered(writer, CPU_DIR, _CPU_RE):
        path = "%s/cpu%d/cpufreq/scaling_governor" % (CPU_DIR, cpu)
        if writer.read(path) is None:
            continue
        try:
            writer.write(path, governor)
        except OSError as err:
            problems.append("cpu%d: governor %s refused: %s" % (cpu, governor, describe_os_error(err)))
    return problems


def main(argv, writer=None, stderr=None):
    """gpuhost-numa-setup [CONF] [--root DIR]: 0 when every pool holds its pages and the
    governor took, 1 otherwise, 2 when the configuration is missing or malformed."""
    stderr = stderr or sys.stderr
    args, conf, root = list(argv), CONF_FILE, "/"
    while args:
        arg = args.pop(0)
        if arg == "--root" and args:
            root = args.pop(0)
        elif arg.startswith("-"):
            stderr.write("gpuhost-numa: unknown option %s (usage: gpuhost-numa-setup [CONF] [--root DIR])\n" % arg)
            return 2
        else:
            conf = arg
    writer = writer or HostWriter(root)
    try:
        text = writer.read_file(conf)
        if text is None:
            raise GpuhostError("%s missing" % conf, fix="run the numa role, which writes it")
        rows, governor = parse_numa_conf(text, conf)
    except GpuhostError as err:
        stderr.write("gpuhost-numa: %s\n" % err.message)
        return 2
    except (OSError, UnicodeDecodeError) as err:
        stderr.write("gpuhost-numa: %s unreadable: %s\n" % (conf, describe_os_error(err)))
        return 2
    warnings = []
    problems = apply_node_pages(writer, rows, warnings) + apply_governor(writer, governor)
    for warning in warnings:
        stderr.write("gpuhost-numa: %s\n" % warning)
    for problem in problems:
        stderr.write("gpuhost-numa: %s\n" % problem)
    return 1 if problems else 0
