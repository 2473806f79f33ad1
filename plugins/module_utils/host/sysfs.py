# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small, careful access to a sysfs/procfs tree mounted at ``root``.

Every reader of gpuhost.kvm goes through these helpers so that ``root`` means the same
everywhere: ``/`` on a live host, a recorded tree in tests. Symlinks are resolved
inside ``root`` (an absolute link target is taken relative to ``root``), because
sysfs is made of links (driver, iommu_group, physfn, bus/pci/devices/...).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist, parse_cpulist, parse_cpumask)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import read_file_text

SYS_NODE_DIR = "sys/devices/system/node"
SYS_CPU_DIR = "sys/devices/system/cpu"
_NODE_DIR_RE = re.compile(r"^node(\d+)\Z")
_CPU_ENTRY_RE = re.compile(r"^cpu(\d+)\Z")


def validate_root(root, field="root"):
    """Refuse a root that cannot hold a sysfs tree, before anything reads from it."""
    if not isinstance(root, str) or not root.strip():
        raise GpuhostError("an empty path is not a root directory", field=field,
                           fix="leave root at its default / or give the directory that "
                               "holds sys/ and proc/")
    if not os.path.isdir(root):
        raise GpuhostError("%s does not exist or is not a directory" % root, field=field,
                           fix="give an existing directory that holds sys/ and proc/ "
                               "(the default / reads the running host)")
    if not os.path.isdir(os.path.join(root, "sys")) and \
            not os.path.isdir(os.path.join(root, "proc")):
        raise GpuhostError("%s holds neither sys/ nor proc/" % root, field=field,
                           fix="point root at the top of a sysfs/procfs tree, the "
                               "directory that contains sys/ and proc/")
    return root


def path(root, *parts):
    return os.path.join(root or "/", *parts)


def read_text(file_path, default=None, inner_nul_unknown=True):
    """The stripped content of a sysfs attribute, or ``default`` when unreadable.

    Trailing NULs are padding (some firmware attributes carry them) and are stripped
    like blanks; a NUL inside the value means the attribute is not text the kernel
    printed, so its value is unknown: ``default``, as for an unreadable file. A reader
    whose parser names the file in its own error (/proc/interrupts) passes
    ``inner_nul_unknown=False`` and gets the text as it is.
    """
    try:
        text = read_file_text(file_path).strip("\x00 \t\n\r\x0b\x0c")
    except (OSError, ValueError, GpuhostError):
        return default
    return default if inner_nul_unknown and "\x00" in text else text


_INT_TEXT = {10: re.compile(r"^[+-]?[0-9]+\Z"), 16: re.compile(r"^(0[xX])?[0-9a-fA-F]+\Z")}


def parse_int_text(text, default=None, base=10):
    """An attribute's text as the kernel prints an integer (ASCII digits, a sign; hex
    digits for base 16), else ``default``: int() alone takes "1_0" and Arabic-Indic
    digits, which no kernel prints."""
    pattern = _INT_TEXT.get(base)
    if text is None or (pattern is not None and not pattern.match(text)):
        return default
    try:
        return int(text, base)
    except ValueError:
        return default


def read_int(file_path, default=None, base=10):
    """An integer attribute, ``default`` when absent, unreadable, with a NUL inside or
    not an integer the kernel prints (sysfs.read_checked_int refuses those instead)."""
    return parse_int_text(read_text(file_path), default, base)


def shown_value(text, limit=40):
    """A hostile value as an error shows it: repr (NULs and control bytes escaped), cut."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit - 4] + "...'"


def read_checked_int(file_path, shown=None, field=None, fix=None, minimum=0, maximum=None,
                     maximum_name=None, base=10, default=None):
    """An integer attribute the caller acts on, checked, or a GpuhostError.

    ``default`` when the file is absent (the kernel has no such attribute there). A file
    that is there but cannot be read, is empty, holds a NUL inside its value or anything
    but an integer, or whose value is below ``minimum`` (a count is never negative) or
    above ``maximum`` (named ``maximum_name``, e.g. the sriov_totalvfs file it must not
    exceed) is refused: a GpuhostError that names the file (``shown``, its host path),
    ``field`` (the module option that selected it) and ``fix``. Never a guess, never a
    traceback from ``int()``.
    """
    shown = shown or file_path
    if not os.path.lexists(file_path):
        return default
    fix = fix or ("check the device's driver and firmware (dmesg), reload the driver or "
                  "reboot, then run again")
    text = read_text(file_path, inner_nul_unknown=False)
    if text is None:
        raise GpuhostError("%s is there but cannot be read" % shown, field=field, fix=fix)
    value = None if "\x00" in text else parse_int_text(text, None, base)
    if value is None:
        raise GpuhostError("%s holds %s, not an integer the kernel prints"
                           % (shown, shown_value(text)), field=field, fix=fix)
    if minimum is not None and value < minimum:
        raise GpuhostError("%s holds %d, below %d (%s)"
                           % (shown, value, minimum,
                              "a count is never negative" if minimum == 0 else
                              "the lowest value the kernel prints there"),
                           field=field, fix=fix)
    if maximum is not None and value > maximum:
        raise GpuhostError("%s holds %d, above %s (%d)"
                           % (shown, value, maximum_name or "its limit", maximum),
                           field=field, fix=fix)
    return value


_CPUS_CACHE = {}


def parse_cpus_text(text, is_mask=False):
    """A cpulist or mask attribute's text as a tuple; memoised, since thousands of
    devices and IRQs repeat the same few lists. None when it cannot be parsed."""
    key = (text, is_mask)
    cached = _CPUS_CACHE.get(key)
    if cached is not None:
        return cached
    text = text.strip("\x00 \n")
    if not text or text == "(null)":
        value = ()
    else:
        try:
            value = parse_cpumask(text, field="cpumask") if is_mask else parse_cpulist(text)
        except GpuhostError:
            return None
    if len(_CPUS_CACHE) < 4096:
        _CPUS_CACHE[key] = value
    return value


def read_cpus_attr(file_path, is_mask=False, default=None):
    """A cpulist (or hex mask) attribute as a tuple, ``default`` when absent.

    Some kernels print ``(null)`` padded with blanks for an unset list (nohz_full on
    4.x); that means the empty set.
    """
    text = read_text(file_path)
    if text is None:
        return default
    value = parse_cpus_text(text, is_mask)
    return default if value is None else value


def list_dir(dir_path):
    try:
        return os.listdir(dir_path)
    except OSError:
        return []


def link_target(root, link_path):
    """Where a sysfs link points, resolved inside ``root``; None if not a link."""
    try:
        target = os.readlink(link_path)
    except OSError:
        return None
    if os.path.isabs(target):
        return os.path.normpath(os.path.join(root or "/", target.lstrip("/")))
    return os.path.normpath(os.path.join(os.path.dirname(link_path), target))


def link_name(root, link_path):
    """The last component of a link's target (a driver name, a group number)."""
    target = link_target(root, link_path)
    return os.path.basename(target) if target else None


def resolve_dir(root, dir_path):
    """Follow ``dir_path`` while it is a link, inside ``root`` (bus/pci/devices/X leads
    to the device's place under sys/devices, whose path shows its bridges)."""
    current = dir_path
    for dummy in range(40):
        target = link_target(root, current)
        if target is None:
            break
        current = target
    return os.path.normpath(current)


def read_cpu_ids(root="/"):
    """Every CPU the tree knows of: the present ones and each cpuN directory."""
    ids = set(read_cpus_attr(path(root, SYS_CPU_DIR, "present"), default=()))
    for entry in list_dir(path(root, SYS_CPU_DIR)):
        match = _CPU_ENTRY_RE.match(entry)
        if match:
            ids.add(int(match.group(1)))
    return tuple(sorted(ids))


def read_online_cpu_ids(root="/", ids=None):
    """The online CPUs: cpu/online, else each CPU of ``ids`` (read_cpu_ids) whose
    cpuN/online is 1 or absent. Trees without cpu/online (ghw's snapshots, some
    container-filtered ones) still say per CPU, and a CPU without an online attribute
    (cpu0 on x86) cannot be offlined. Shared by the CPU and NUMA readers so that a
    kernel without NUMA puts exactly the CPUs read_cpu_state calls online in node 0."""
    online = read_cpus_attr(path(root, SYS_CPU_DIR, "online"))
    if online is not None:
        return online
    if ids is None:
        ids = read_cpu_ids(root)
    return tuple(cpu for cpu in sorted(ids)
                 if read_int(path(root, SYS_CPU_DIR, "cpu%d" % cpu, "online"), 1) == 1)


@dataclass
class NodeMembership:
    """Which CPUs belong to which NUMA node, and what was odd on the way there.

    ``cpus``: node id -> its CPUs, each CPU in one node only. ``warnings``: firmware
    faults the reader worked around, for the modules to report.
    """

    cpus: Dict[int, Tuple[int, ...]] = field(default_factory=dict)
    warnings: Tuple[str, ...] = ()


def _node_link_cpus(node_dir):
    """The nodeN/cpuM entries: the kernel links every CPU of the node there, also when
    cpulist and cpumap are missing (some recorded or container-filtered trees)."""
    cpus = []
    for entry in list_dir(node_dir):
        match = _CPU_ENTRY_RE.match(entry)
        if match:
            cpus.append(int(match.group(1)))
    return tuple(sorted(cpus))


def _cpu_link_node(root, cpu):
    """The node named by /sys/devices/system/cpu/cpuN/nodeM (the kernel makes one such
    link per CPU, from the CPU's own firmware affinity), or None without one."""
    nodes = [int(match.group(1)) for match in map(
        _NODE_DIR_RE.match, list_dir(path(root, SYS_CPU_DIR, "cpu%d" % cpu))) if match]
    return nodes[0] if len(nodes) == 1 else None


def read_node_membership(root="/"):
    """CPUs of each NUMA node: node*/cpulist, else node*/cpumap, else the node*/cpuM links.

    Shared by the CPU, NUMA and PCI readers (the PCI reader places devices whose
    numa_node is -1 with it), so that all of them agree on one answer.

    A CPU listed by two nodes is a firmware fault: it is kept in the node its own
    cpuN/nodeM link names, or in the lowest listing node without such a link, and a
    warning names the CPUs and nodes.

    A kernel built without NUMA has no node directory at all: its one node 0 holds
    every online CPU (the readers of memory take the host's then).
    """
    base = path(root, SYS_NODE_DIR)
    if not os.path.isdir(base) and os.path.isdir(path(root, SYS_CPU_DIR)):
        return NodeMembership(cpus={0: read_online_cpu_ids(root)})
    listed = {}
    for entry in list_dir(base):
        match = _NODE_DIR_RE.match(entry)
        if not match:
            continue
        node_dir = os.path.join(base, entry)
        cpus = read_cpus_attr(os.path.join(node_dir, "cpulist"))
        if cpus is None:
            cpus = read_cpus_attr(os.path.join(node_dir, "cpumap"), is_mask=True)
        if cpus is None:
            cpus = _node_link_cpus(node_dir)
        listed[int(match.group(1))] = cpus
    listed = dict(sorted(listed.items()))
    listing = {}
    for node, cpus in listed.items():
        for cpu in cpus:
            listing.setdefault(cpu, []).append(node)
    owner = {}
    moved = {}                              # (listing nodes, kept in, why) -> CPUs
    for cpu, nodes in sorted(listing.items()):
        if len(nodes) == 1:
            continue
        linked = _cpu_link_node(root, cpu)
        if linked in nodes:
            owner[cpu], how = linked, "as each one's own cpuN/nodeM link says"
        else:
            owner[cpu], how = nodes[0], "the lowest, as no cpuN/nodeM link names one of them"
        moved.setdefault((tuple(nodes), owner[cpu], how), []).append(cpu)
    warnings = []
    for (nodes, chosen, how), cpus in sorted(moved.items()):
        warnings.append(
            "NUMA nodes %s all list CPU(s) %s, a firmware fault (overlapping node CPU "
            "lists); they are counted in node %d only, %s"
            % (", ".join(str(n) for n in nodes), format_cpulist(cpus), chosen, how))
    cpus_by_node = {node: tuple(c for c in cpus if owner.get(c, node) == node)
                    for node, cpus in listed.items()}
    return NodeMembership(cpus=cpus_by_node, warnings=tuple(warnings))


def read_node_cpus(root="/"):
    """Node id -> CPUs; read_node_membership() without its warnings."""
    return read_node_membership(root).cpus
