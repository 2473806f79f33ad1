# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CPU list and CPU mask helpers, in the kernel's own notations.

A cpulist is ``0-3,8,10-11`` and may use the kernel's stride form ``0-31:1/2`` (use 1
CPU of each group of 2: every other CPU); see the "cpu lists" part of
Documentation/admin-guide/kernel-parameters.rst.
A CPU mask is the kernel's hex bitmap, printed as comma-separated 32-bit words, most
significant first (``ffffffff,00000000``): that is what /proc/irq/N/smp_affinity and
irqbalance's IRQBALANCE_BANNED_CPUS expect on hosts with more than 32 CPUs.
"""

from __future__ import annotations

import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

# The kernel's bitmap_parselist() takes "a", "a-b" and "a-b:used/group"; a stride without
# its "/group" part is rejected there, so it is rejected here too.
_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?\Z")
# The kernel's largest NR_CPUS (CONFIG_NR_CPUS allows up to 8192): no host has a CPU
# number at or above it, and a bound keeps one hostile value ("0-99999999999") from
# making a set of billions of CPUs on the controller or the host.
MAX_CPUS = 8192
# The kernel's highest NUMA node number: MAX_NUMNODES is 1 << CONFIG_NODES_SHIFT, at most
# 1 << 10 on x86-64.
MAX_NODE = 1023


def parse_cpulist(text, field="cpulist"):
    """Parse a cpulist into a sorted tuple of CPU numbers.

    An empty string (or only whitespace) is the empty set. Raises GpuhostError naming
    ``field`` on anything the kernel would not accept.
    """
    if text is None:
        return ()
    if isinstance(text, int):
        if text < 0:
            raise GpuhostError("CPU number %d is negative" % text, field=field,
                               fix="give CPU numbers as 0 or more")
        _check_bound(text, text, field)
        return (text,)
    if isinstance(text, (list, tuple, set, frozenset)):
        cpus = set()
        for item in text:
            cpus.update(parse_cpulist(item, field=field))
        return tuple(sorted(cpus))
    text = str(text).strip()
    if not text:
        return ()
    cpus = set()
    for part in text.split(","):
        part = part.strip()
        match = _RANGE_RE.match(part)
        if not match:
            raise GpuhostError(
                "cannot parse %r in cpulist %r" % (part, text), field=field,
                fix="write CPUs like 0-3,8,10-11 (ranges, single CPUs, or a stride 0-31:1/2)")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        used = int(match.group(3)) if match.group(3) is not None else 1
        group = int(match.group(4)) if match.group(4) is not None else used
        if last < first:
            raise GpuhostError("range %r runs backwards in cpulist %r" % (part, text),
                               field=field, fix="write the lower CPU first, as in 4-7")
        _check_bound(last, part, field)
        if used < 1 or group < used:
            raise GpuhostError("bad stride in %r of cpulist %r" % (part, text), field=field,
                               fix="use first-last:used/group with 1 <= used <= group")
        if used == group:
            cpus.update(range(first, last + 1))
            continue
        for base in range(first, last + 1, group):
            cpus.update(range(base, min(base + used, last + 1)))
    return tuple(sorted(cpus))


def _check_bound(cpu, shown, field):
    if cpu >= MAX_CPUS:
        raise GpuhostError("CPU %d in %r is beyond the kernel's limit of %d CPUs"
                           % (cpu, shown, MAX_CPUS), field=field,
                           fix="give CPU numbers below %d, as the host's online list shows "
                               "them (/sys/devices/system/cpu/online)" % MAX_CPUS)


def format_cpulist(cpus):
    """Format CPU numbers as the shortest plain cpulist, e.g. ``0-3,8,10-11``."""
    ordered = sorted(set(int(c) for c in cpus))
    parts = []
    start = prev = None
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            parts.append(_span(start, prev))
            start = prev = cpu
    if start is not None:
        parts.append(_span(start, prev))
    return ",".join(parts)


def _span(first, last):
    if first == last:
        return str(first)
    return "%d-%d" % (first, last)


def parse_cpumask(text, field="cpumask"):
    """Parse a kernel hex mask (``ff``, ``00000000,0000000f``, ``0x0f``) into CPUs."""
    raw = str(text).strip().lower()
    if raw.startswith("0x"):
        raw = raw[2:]
    digits = raw.replace(",", "")
    if not digits or not re.match(r"^[0-9a-f]+\Z", digits):
        raise GpuhostError("cannot parse CPU mask %r" % (text,), field=field,
                           fix="give a hex mask such as ff or 00000000,0000000f")
    significant = digits.lstrip("0")
    if len(significant) * 4 > MAX_CPUS:
        raise GpuhostError("CPU mask %r reaches beyond the kernel's limit of %d CPUs"
                           % (text if len(str(text)) <= 80 else str(text)[:80] + "...", MAX_CPUS),
                           field=field, fix="give a mask of at most %d bits" % MAX_CPUS)
    value = int(digits, 16)
    cpus = []
    bit = 0
    while value:
        if value & 1:
            cpus.append(bit)
        value >>= 1
        bit += 1
    return tuple(cpus)


def format_cpumask(cpus, nr_cpus=None):
    """Format CPUs as the kernel prints a mask: 32-bit hex words joined by commas.

    ``nr_cpus`` (the host's possible CPU count) sets how many words are printed, as
    the kernel does; by default just enough words to hold the highest CPU.
    """
    cpus = sorted(set(int(c) for c in cpus))
    highest = cpus[-1] if cpus else 0
    bits = max(nr_cpus or 0, highest + 1, 1)
    words = (bits + 31) // 32
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    chunks = []
    for index in reversed(range(words)):
        chunks.append("%08x" % ((value >> (32 * index)) & 0xFFFFFFFF))
    return ",".join(chunks)
