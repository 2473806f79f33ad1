# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the placement planner (target: 16 tenants in under 50 ms).

The host is tests/support/fixturegen.py's large host (2 sockets, 256 CPUs, 16 GPUs with HDA,
4 PFs x 64 VFs, 4,000 IRQ lines), read once through the real readers; only
``plan_placement`` is timed. bench/bench_core.py calls ``time_planner()``; this file
also runs alone:

    .venv/bin/python bench/bench_planner.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for path in (os.path.join(REPO, ".collections"), os.path.join(REPO, "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)

from support import fixturegen  # noqa: E402
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement  # noqa: E402
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (  # noqa: E402
    DEFAULT_GPU_SELECTION,
)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (  # noqa: E402
    read_host_topology,
)

TARGET_MS = 50.0
TENANTS = 16


def large_host_topology(root=None):
    """The benchmark host, written under ``root`` (a temporary folder by default)."""
    root = root or tempfile.mkdtemp(prefix="gpuhost-bench-planner-")
    fixturegen.build_large_host(root)
    return read_host_topology(root, with_irqs=False)


def sixteen_tenants():
    """One GPU, a VF, 14 vCPUs and 8 GiB of 1G pages each: 8 per node, 112 of the 126
    CPUs a node has left after its housekeeping core."""
    return [{"name": "bench-%02d" % index, "gpus": 1, "vcpus": 14, "memory_gib": 8,
             "hugepage_size": "1G", "nic_vf": True, "iothreads": 1}
            for index in range(TENANTS)]


def time_planner(runs=31, topology=None, out=sys.stdout):
    """Plan 16 tenants ``runs`` times; print and return the median in milliseconds."""
    topology = topology or large_host_topology()
    tenants = sixteen_tenants()
    plan = plan_placement(topology, tenants)          # warm-up, and proof that it fits
    assert len(plan["tenants"]) == TENANTS
    samples = []
    for dummy in range(runs):
        start = time.perf_counter()
        plan_placement(topology, tenants)
        samples.append((time.perf_counter() - start) * 1000.0)
    median = statistics.median(samples)
    out.write("planner: %d tenants on %d CPUs / %d GPUs / %d VFs: median %.2f ms over %d "
              "runs (min %.2f, max %.2f; target < %.0f ms) %s\n"
              % (TENANTS, len(topology.cpus.online),
                 len(DEFAULT_GPU_SELECTION.gpus(topology.pci)),
                 sum(1 for f in topology.pci.values() if f.is_vf), median, runs,
                 min(samples), max(samples), TARGET_MS,
                 "OK" if median < TARGET_MS else "SLOW"))
    return median


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=31)
    args = parser.parse_args(argv)
    median = time_planner(runs=args.runs)
    return 0 if median < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
