# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of irqbalance's policy script (irq_affinity with persistent=true).

irqbalance runs ``POLICYSCRIPT DEVPATH IRQ`` once for every IRQ it finds when it starts
(and for new ones on a rescan), so its start costs one Python process per IRQ. The host
is tests/support/fixturegen.py's large host (2 sockets, 256 CPUs, 16 GPUs with HDA, 4 PFs x 64
VFs, ``--irqs`` rows in /proc/interrupts), with the stored pins the sriov_irq role writes
there: one named rule per NUMA node holding that node's PFs and passed-through GPU
functions, and a name_regex rule.

Timed, each over ``--runs`` calls, the median printed:

- ``call``: ``irqbalance_policy_main`` in this process (what one answer costs);
- ``process``: the installed wrapper script as irqbalance starts it, a new Python each
  time (interpreter start, imports, the answer);
- ``scan``: ``process`` times the IRQs irqbalance asks about, the cost of its start.

    .venv/bin/python bench/bench_irq_policy.py [--runs N] [--irqs N]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
COLLECTIONS = os.path.join(REPO, ".collections")
for path in (COLLECTIONS, os.path.join(REPO, "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)

from support import fixturegen  # noqa: E402

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity import pinning as irq_pinning, policy as irq_policy
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (  # noqa: E402
    parse_proc_interrupts,
)

MODULE = "ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity.policy"


def build_host(irqs):
    root = tempfile.mkdtemp(prefix="gpuhost-bench-irq-policy-")
    fixturegen.build_large_host(root, irqs=irqs)
    devices = sorted(os.listdir(os.path.join(root, "sys/bus/pci/devices")))
    with_msi = [d for d in devices
                if os.path.isdir(os.path.join(root, "sys/bus/pci/devices", d, "msi_irqs"))]
    half = len(with_msi) // 2
    rules = [{"name": "sriov_irq node 0", "pci_devices": with_msi[:half], "irqs": [],
              "name_regex": None, "cpus": "0-1"},
             {"name": "sriov_irq node 1", "pci_devices": with_msi[half:], "irqs": [],
              "name_regex": None, "cpus": "64-65"},
             {"pci_devices": [], "irqs": [], "name_regex": "^mlx5_comp", "cpus": "0-1"}]
    config = os.path.join(root, irq_pinning.CONFIG_FILE.lstrip("/"))
    os.makedirs(os.path.dirname(config), exist_ok=True)
    with open(config, "w", encoding="utf-8") as handle:
        json.dump({"rules": rules}, handle)
    with open(os.path.join(root, "proc/interrupts"), encoding="utf-8") as handle:
        numbers = sorted(irq.number for irq in parse_proc_interrupts(handle.read()).values()
                         if irq.number is not None)
    pinned = irq_pinning.pinned_irqs(root, {"rules": rules})
    return root, numbers, pinned, len(with_msi)


def median_ms(func, runs):
    samples = []
    for dummy in range(runs):
        start = time.perf_counter()
        func()
        samples.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(samples)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--irqs", type=int, default=1500)
    args = parser.parse_args(argv)
    root, numbers, pinned, devices = build_host(args.irqs)
    asked = [numbers[len(numbers) // 2], sorted(pinned)[0]]   # one balanced, one pinned

    def call():
        for irq in asked:
            irq_policy.irqbalance_policy_main(["/sys/devices/x", str(irq)], root=root,
                                              out=io.StringIO())

    script = os.path.join(root, "policy")
    with open(script, "w", encoding="utf-8") as handle:
        # The installed wrapper, pointed at the checkout's module_utils and the bench root.
        handle.write("#!%s\nimport sys\nsys.path.insert(0, %r)\nfrom %s import "
                     "irqbalance_policy_main\nsys.exit(irqbalance_policy_main(sys.argv[1:], "
                     "root=%r))\n" % (sys.executable, COLLECTIONS, MODULE, root))
    os.chmod(script, 0o755)

    answers = {}

    def process():
        for irq in asked:
            answers[irq] = subprocess.run([script, "/sys/devices/x", str(irq)], check=True,
                                          capture_output=True, text=True).stdout

    call_ms = median_ms(call, args.runs) / len(asked)
    process_ms = median_ms(process, args.runs) / len(asked)
    assert answers[asked[1]] == "ban=true\n" and answers[asked[0]] == "", answers
    startup_ms = median_ms(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
                           args.runs)
    print("irqbalance policy script: %d IRQs in /proc/interrupts (%d pinned by %d devices), "
          "%d CPUs" % (len(numbers), len(pinned), devices, 256))
    print("  call    median %.2f ms (in process)" % call_ms)
    print("  process median %.1f ms (new Python per IRQ; a bare interpreter starts in %.1f ms)"
          % (process_ms, startup_ms))
    print("  scan    %.1f s for irqbalance to ask about all %d IRQs at its start"
          % (process_ms * len(numbers) / 1000.0, len(numbers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
