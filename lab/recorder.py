# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Copies the parts of a live host's /sys and /proc that gpuhost.kvm reads into a plain
directory tree, for lab/record-fixtures (which runs it inside the lab over SSH).

Not tar of /sys directly: sysfs attributes report a size of 4096 whatever they hold, so
tar pads them with zeros. Each attribute is read like the readers read it instead.
Symlinks are written relative to the link's own directory; a link whose target lies
outside what was recorded is left out (and counted), so the tree never points outside.

Usage: python3 recorder.py DEST   (DEST must not exist)
"""

import json
import os
import re
import sys

MAX_BYTES = 256 * 1024
# Reading these has side effects, blocks, or gives binary blobs no reader wants.
SKIP_FILES = re.compile(
    r"^(config|rom|vpd|resource\d+(_wc)?|remove|rescan|reset|new_id|remove_id|bind|unbind|"
    r"drivers_probe|edid|descriptors|firmware_node|uevent_seqnum|compact|"
    r"reclaim|trigger|blk_trace.*)$")
# Whole subtrees that are large and irrelevant to CPU/NUMA/PCI/IOMMU/IRQ placement.
SKIP_DIRS = re.compile(r"^(power|statistics|queue|trace|integrity|mq|hwmon\d*|cpuidle|"
                       r"microcode|hotplug|cpufreq|memory\d+|wakeup\d*|holders|"
                       r"mdev_supported_types|ptp|firmware_node|consumer:.*|supplier:.*)$")

# (path, recurse) pairs; recurse=False copies the directory's own entries only.
SYS_TREES = [
    ("sys/devices/system/cpu", True),
    ("sys/devices/system/node", True),
    ("sys/kernel/mm/hugepages", True),
    ("sys/kernel/iommu_groups", True),
    ("sys/class/iommu", True),
    ("sys/devices/virtual/iommu", True),
    ("sys/bus/pci/devices", False),
    ("sys/bus/pci/drivers", True),
    ("sys/bus/pci/drivers_autoprobe", False),
    ("sys/class/net", False),
    ("sys/class/block", False),
    ("sys/block", False),
    ("sys/dev/block", False),
    ("sys/module/vfio_pci/parameters", True),
    ("sys/module/vfio_iommu_type1/parameters", True),
    ("sys/module/kvm/parameters", True),
]
PROC_FILES = [
    "proc/cmdline", "proc/cpuinfo", "proc/interrupts", "proc/meminfo", "proc/mounts",
    "proc/self/mountinfo", "proc/swaps", "proc/net/route", "proc/net/ipv6_route",
    "proc/net/if_inet6", "proc/version", "proc/irq/default_smp_affinity",
]
IRQ_FILES = ("smp_affinity", "smp_affinity_list", "effective_affinity",
             "effective_affinity_list", "node")
ACPI_TABLES = ("DMAR", "SRAT", "SLIT", "IVRS")


class Recorder:
    def __init__(self, dest):
        self.dest = dest
        self.prefixes = []
        self.links = []          # (tree path, target) written after all content exists
        self.counts = {"files": 0, "dirs": 0, "links": 0, "links_dropped": 0,
                       "unreadable": 0}

    def out(self, rel):
        return os.path.join(self.dest, rel)

    def mkdir(self, rel):
        path = self.out(rel)
        if not os.path.isdir(path):
            os.makedirs(path)
            self.counts["dirs"] += 1

    def copy_file(self, rel, binary=False):
        try:
            # procfs seq files (interrupts, cpuinfo, mountinfo) hand out one page per
            # read(): read until EOF, or they are cut at 4 KiB.
            chunks, size = [], 0
            with open("/" + rel, "rb", buffering=0) as handle:
                while size < MAX_BYTES:
                    chunk = handle.read(MAX_BYTES - size)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
            data = b"".join(chunks)
        except OSError:
            self.counts["unreadable"] += 1
            return
        if not binary and b"\0" in data:
            return
        self.mkdir(os.path.dirname(rel))
        with open(self.out(rel), "wb") as handle:
            handle.write(data)
        self.counts["files"] += 1

    def note_link(self, rel):
        target = os.readlink("/" + rel)
        if target.startswith("/"):
            target = os.path.relpath(target, os.path.dirname("/" + rel))
        self.links.append((rel, target))

    def walk(self, rel, recurse=True, depth=0):
        """Copy rel (a directory, a file or a link) below /; follows no links."""
        full = "/" + rel
        if os.path.islink(full):
            self.note_link(rel)
            return
        if os.path.isfile(full):
            if not SKIP_FILES.match(os.path.basename(rel)):
                self.copy_file(rel)
            return
        if not os.path.isdir(full) or depth > 12:
            return
        self.mkdir(rel)
        try:
            entries = sorted(os.listdir(full))
        except OSError:
            return
        for name in entries:
            child = rel + "/" + name
            child_full = "/" + child
            if os.path.islink(child_full):
                self.note_link(child)
            elif os.path.isdir(child_full):
                if recurse and not SKIP_DIRS.match(name):
                    self.walk(child, recurse, depth + 1)
            elif not SKIP_FILES.match(name):
                self.copy_file(child)

    def record(self):
        for rel, recurse in SYS_TREES:
            self.prefixes.append(rel)
            self.walk(rel, recurse)
        # The PCI hierarchy itself: every host bridge and device below it, with attributes,
        # driver/iommu_group/physfn/virtfn links, block/net children and msi_irqs.
        for name in sorted(os.listdir("/sys/devices")):
            if name.startswith("pci"):
                rel = "sys/devices/" + name
                self.prefixes.append(rel)
                self.walk(rel)
        for table in ACPI_TABLES:
            rel = "sys/firmware/acpi/tables/" + table
            if os.path.exists("/" + rel):
                self.copy_file(rel, binary=True)
        for rel in PROC_FILES:
            if os.path.exists("/" + rel):
                self.copy_file(rel)
        for name in sorted(os.listdir("/proc/irq")):
            if not name.isdigit():
                continue
            base = "proc/irq/" + name
            self.mkdir(base)
            for entry in sorted(os.listdir("/" + base)):
                path = "/" + base + "/" + entry
                if entry in IRQ_FILES:
                    self.copy_file(base + "/" + entry)
                elif os.path.isdir(path):     # one directory per handler (e.g. nvme0q1)
                    self.mkdir(base + "/" + entry)
        self.write_links()
        return self.counts

    def write_links(self):
        recorded = tuple(p.rstrip("/") for p in self.prefixes) + (
            "sys/bus/pci/drivers", "sys/kernel/iommu_groups")
        for rel, target in self.links:
            resolved = os.path.normpath(os.path.join(os.path.dirname(rel), target))
            inside = resolved.startswith(recorded) or os.path.lexists(self.out(resolved))
            if resolved.startswith("..") or not inside:
                self.counts["links_dropped"] += 1
                continue
            self.mkdir(os.path.dirname(rel))
            path = self.out(rel)
            if os.path.lexists(path):
                continue
            os.symlink(target, path)
            self.counts["links"] += 1


def main():
    dest = sys.argv[1]
    os.makedirs(dest)
    counts = Recorder(dest).record()
    json.dump(counts, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
