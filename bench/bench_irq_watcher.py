# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the IRQ watchers of running tenants cost: one watcher per tenant against one
for the whole host.

A guest enables MSI-X only once its driver loads, so while tenants run something must
re-apply the stored IRQ pins (module_utils/changes/irq_affinity/pinning.py). Two designs:

- ``per_tenant``: each tenant's libvirt hook keeps its own watcher process, which
  re-applies every stored pin each DOMAIN_WATCH_INTERVAL_S while its domain runs;
- ``per_host``: one watcher process re-applies them while any domain runs.

Both run the collection's own loop (``watch_domains``): a per-tenant watcher is that
loop over one domain's pid file, the host's over all of them. Each configuration (1
and 4 running tenants, both designs) runs at once, as real processes below a root of
their own: libvirt's pid files of stand-in QEMU processes, /proc/interrupts copied from
this machine and stored pins of the shape irq_affinity writes (one named vfio rule per
tenant). After a warm-up, for ``--seconds`` (past the quick looks after a start, which
both designs make alike), it reads from /proc of each watcher process: resident memory
(VmRSS), wake-ups (voluntary and involuntary context switches) and CPU time (utime +
stime), summed over the processes of each configuration, and writes
bench/results/irq-watcher-<UTC>.json with the ratios per_tenant / per_host.

    .venv/bin/python bench/bench_irq_watcher.py [--seconds 60] [--out bench/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
COLLECTIONS = os.path.join(REPO, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity import pinning as irq_pinning  # noqa: E402

TENANT_COUNTS = (1, 4)
DESIGNS = ("per_tenant", "per_host")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def build_root(root, tenants, stand_in_pid):
    """A host tree for ``tenants`` running domains: their pid files (each with a
    /proc/<pid>/stat of a stand-in process), this machine's /proc/interrupts and the
    stored pins. Returns the run directory of each tenant's own pid file."""
    with open("/proc/interrupts", encoding="utf-8") as handle:
        _write(os.path.join(root, "proc", "interrupts"), handle.read())
    with open("/proc/%d/stat" % stand_in_pid, encoding="utf-8") as handle:
        _write(os.path.join(root, "proc", str(stand_in_pid), "stat"), handle.read())
    rules = [{"name": "%s vfio" % name, "pci_devices": ["0000:%02x:00.0" % (0x41 + index)],
              "cpus": [0, 1]} for index, name in enumerate(tenants)]
    _write(os.path.join(root, irq_pinning.CONFIG_FILE.lstrip("/")), json.dumps({"rules": rules}))
    run_dirs = {}
    for name in tenants:
        run_dir = "/run/libvirt/qemu-%s" % name
        _write(os.path.join(root, run_dir.lstrip("/"), name + ".pid"), "%d\n" % stand_in_pid)
        _write(os.path.join(root, irq_pinning.LIBVIRT_QEMU_RUN_DIR.lstrip("/"), name + ".pid"),
               "%d\n" % stand_in_pid)
        run_dirs[name] = run_dir
    return run_dirs


# One watcher process: the collection's loop over the pid files of a run directory,
# importing no more than the installed hook does (its resident memory is the figure).
CHILD = """import sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity.pinning import watch_domains
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
sys.exit(watch_domains(HostWriter(sys.argv[2]), run_dir=sys.argv[3], quick_seconds=0,
                       log=lambda line: None))
"""


def _read_process(pid):
    status = {}
    with open("/proc/%d/status" % pid, encoding="utf-8") as handle:
        for line in handle:
            key, value = line.split(":", 1) if ":" in line else (line, "")
            status[key] = value.split()
    with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return {"rss_kib": int(status["VmRSS"][0]),
            "wakeups": int(status["voluntary_ctxt_switches"][0])
            + int(status["nonvoluntary_ctxt_switches"][0]),
            "cpu_s": (int(fields[11]) + int(fields[12])) / CLOCK_TICKS}


def _sum(samples):
    return {key: sum(sample[key] for sample in samples) for key in ("rss_kib", "wakeups", "cpu_s")}


def run(seconds, warmup=5.0):
    stand_in = subprocess.Popen(["sleep", str(int(seconds + warmup + 60))])
    work = tempfile.mkdtemp(prefix="bench-irq-watcher-")
    processes = {}
    try:
        for count in TENANT_COUNTS:
            tenants = ["tenant-%d" % index for index in range(count)]
            for design in DESIGNS:
                root = os.path.join(work, "%s-%d" % (design, count))
                run_dirs = build_root(root, tenants, stand_in.pid)
                watched = ([run_dirs[name] for name in tenants] if design == "per_tenant"
                           else [irq_pinning.LIBVIRT_QEMU_RUN_DIR])
                processes[(design, count)] = [
                    subprocess.Popen([sys.executable, "-c", CHILD, COLLECTIONS, root, run_dir])
                    for run_dir in watched]
        time.sleep(warmup)
        before = {key: [_read_process(p.pid) for p in procs] for key, procs in processes.items()}
        time.sleep(seconds)
        after = {key: [_read_process(p.pid) for p in procs] for key, procs in processes.items()}
    finally:
        for procs in processes.values():
            for proc in procs:
                proc.kill()
                proc.wait()
        stand_in.kill()
        stand_in.wait()
        shutil.rmtree(work, ignore_errors=True)
    configurations = {}
    for (design, count), procs in sorted(processes.items()):
        start, end = _sum(before[(design, count)]), _sum(after[(design, count)])
        configurations["%s/%d" % (design, count)] = {
            "design": design, "tenants": count, "processes": len(procs),
            "rss_kib": end["rss_kib"],
            "wakeups_per_min": round((end["wakeups"] - start["wakeups"]) * 60.0 / seconds, 1),
            "cpu_ms_per_min": round((end["cpu_s"] - start["cpu_s"]) * 60000.0 / seconds, 1)}
    ratios = {}
    for count in TENANT_COUNTS:
        tenant, host = configurations["per_tenant/%d" % count], configurations["per_host/%d" % count]
        ratios[str(count)] = {key: (round(tenant[key] / host[key], 2) if host[key] else None)
                              for key in ("rss_kib", "wakeups_per_min", "cpu_ms_per_min")}
    return {"seconds": seconds, "watch_interval_s": irq_pinning.DOMAIN_WATCH_INTERVAL_S,
            "configurations": configurations, "ratio_per_tenant_to_per_host": ratios}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    record = run(args.seconds)
    record["measured_at"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    record["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "irq-watcher-%s.json" % record["measured_at"].replace(":", "").replace("-", ""))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(json.dumps(record, indent=1, sort_keys=True))
    print("written: %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
