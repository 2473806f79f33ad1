# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Times the cores of iommu_groups_facts and numa_cpuset on a large synthetic host.

    .venv/bin/python bench/bench_core.py [--runs N]

The host (tests/support/fixturegen.py build_large_host): 2 sockets, 256 CPUs, 16 GPUs, 4 PFs x
64 VFs and 4,000 /proc/interrupts rows, written once into a temporary directory.
Targets: facts core < 100 ms, planning 16 tenants < 50 ms. Medians only;
results never feed a unit test.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, ".collections"))
sys.path.insert(0, os.path.join(REPO, "tests"))

from support import fixturegen  # noqa: E402
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.iommu import analyse_iommu  # noqa: E402
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (  # noqa: E402
    read_host_topology)


def median_ms(func, runs):
    """(median wall ms, median CPU ms): CPU time shows the cost on a busy machine."""
    walls, cpus = [], []
    for dummy in range(runs):
        start, cpu_start = time.perf_counter(), time.process_time()
        func()
        walls.append((time.perf_counter() - start) * 1000.0)
        cpus.append((time.process_time() - cpu_start) * 1000.0)
    return statistics.median(walls), statistics.median(cpus)


def time_facts_core(root, runs):
    """What iommu_groups_facts does: read the host (no IRQ rows) and analyse it."""
    return median_ms(lambda: analyse_iommu(read_host_topology(root, with_irqs=False)), runs)


def time_full_topology(root, runs):
    """read_host_topology with all 4,000 IRQ rows and their affinity files."""
    return median_ms(lambda: read_host_topology(root), runs)


def time_planner(root, runs):
    """Plan 16 one-GPU tenants with placement.plan_placement, when that module exists.

    Returns None when the planner is not there yet. The topology is read once, outside
    the timing: the target is for planning.
    """
    try:
        placement = importlib.import_module(
            "ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement")
    except ImportError:
        return None
    topo = read_host_topology(root)
    tenants = [{"name": "tenant-%02d" % index, "gpus": 1, "vcpus": 8, "memory_gib": 16,
                "hugepage_size": "1G", "nic_vf": True} for index in range(16)]
    return median_ms(lambda: placement.plan_placement(topo, tenants), runs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpuhost-bench-") as tmp:
        root = fixturegen.build_large_host(os.path.join(tmp, "host"))
        read_host_topology(root)          # warm the page cache, as on a live /sys
        facts = time_facts_core(root, args.runs)
        full = time_full_topology(root, args.runs)
        planner = time_planner(root, args.runs)
    print("load average %.1f on %d CPUs, %d runs each" % (
        os.getloadavg()[0], os.cpu_count() or 1, args.runs))
    print("facts core (read_host_topology without IRQs + analyse_iommu): median %.1f ms "
          "wall, %.1f ms CPU (target < 100 ms)" % facts)
    print("full read_host_topology (4,000 IRQs with affinity): median %.1f ms wall, "
          "%.1f ms CPU" % full)
    if planner is None:
        print("planner: placement.plan_placement not present, not timed")
    else:
        print("planner (16 tenants): median %.1f ms wall, %.1f ms CPU (target < 50 ms)"
              % planner)
    return 0


if __name__ == "__main__":
    sys.exit(main())
