# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Paths of the real sysfs trees in tests/fixtures/topologies and parsers of the
upstream expected answers kept in their _meta/ (hwloc lstopo output, lscpu output)."""

import os
import re

from . import FIXTURES

TOPOLOGIES = os.path.join(FIXTURES, "topologies")

SANDY_BRIDGE = "hwloc_32em64t-2n8c+dax+nvme+mic+dimms"
XEON_SILVER = "hwloc_32intel64-2p8co2t+8ve"
POWER9 = "hwloc_nvidiagpunumanodes"
OFFLINE_CPU0 = "hwloc_offline-cpu0-node0"
LAPTOP_IOMMU = "ghw_intel-i7-1270P-derived-iommu"
EPYC_7451 = "util-linux_x86_64-epyc_7451"
SNC2_SERVER = "cri-resource-manager_server"
INTERRUPTS_1152 = "pcp_interrupts-1152cpu-x86_64"


def tree(name):
    return os.path.join(TOPOLOGIES, name)


def meta(name, filename):
    return os.path.join(TOPOLOGIES, name, "_meta", filename)


def lstopo_pus(console_path):
    """PU os index -> (package os index, core os index, node os index or None,
    sibling PUs) from lstopo "-v -" console output."""
    pus = {}
    package = node = None
    core_members = []
    for line in open(console_path):
        match = re.match(r"^\s*Package L#\d+ \(P#(\d+)", line)
        if match:
            package, node = int(match.group(1)), None
            continue
        match = re.match(r"^\s*NUMANode L#\d+ \(P#(\d+)", line)
        if match:
            node = int(match.group(1))
            continue
        match = re.match(r"^\s*Core L#\d+ \(P#(\d+)\)", line)
        if match:
            core = int(match.group(1))
            core_members = []
            continue
        match = re.match(r"^\s*PU L#\d+ \(P#(\d+)\)", line)
        if match:
            pu = int(match.group(1))
            core_members.append(pu)
            pus[pu] = (package, core, node, core_members)
    return {pu: (p, c, n, tuple(sorted(m))) for pu, (p, c, n, m) in pus.items()}


def lscpu_parse_table(path, physical=False):
    """CPU -> (core, socket, node) from an lscpu dump's --parse (or --physical) table."""
    tables = []
    current = None
    for line in open(path):
        if line.startswith("# CPU,Core,Socket,Node"):
            current = {}
            tables.append(current)
            continue
        if current is not None and re.match(r"^\d+,", line):
            cpu, core, socket, node = (int(v) for v in line.split(",")[:4])
            current[cpu] = (core, socket, node)
    return tables[1 if physical else 0]
