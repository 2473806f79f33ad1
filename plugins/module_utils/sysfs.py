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

from ansible_collections.gpuhost.kvm.plugins.module_utils.cpuset import (
    parse_cpulist, parse_cpumask)
from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError

SYS_NODE_DIR = "sys/devices/system/node"
_NODE_DIR_RE = re.compile(r"^node(\d+)\Z")


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
        # unbuffered binary reads: a host has thousands of these small attributes
        with open(file_path, "rb", buffering=0) as handle:
            text = handle.read().decode("utf-8", "replace").strip("\x00 \t\n\r\x0b\x0c")
    except (OSError, ValueError):
        return default
    return default if inner_nul_unknown and "\x00" in text else text


def read_int(file_path, default=None, base=10):
    text = read_text(file_path)
    if text is None or text == "":
        return default
    try:
        return int(text, base)
    except ValueError:
        return default


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


def read_node_cpus(root="/"):
    """CPUs of each NUMA node from node*/cpulist, or node*/cpumap where only that exists.

    Shared by the NUMA reader and the PCI reader (which needs it to place devices whose
    numa_node is -1), so that both agree on one answer.
    """
    base = path(root, SYS_NODE_DIR)
    nodes = {}
    for entry in list_dir(base):
        match = _NODE_DIR_RE.match(entry)
        if not match:
            continue
        node_dir = os.path.join(base, entry)
        cpus = read_cpus_attr(os.path.join(node_dir, "cpulist"))
        if cpus is None:
            cpus = read_cpus_attr(os.path.join(node_dir, "cpumap"), is_mask=True, default=())
        nodes[int(match.group(1))] = cpus
    return dict(sorted(nodes.items()))
