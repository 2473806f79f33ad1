# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the lab image's bytecode cache (lab/image/gpuhost_lab_pyc_cache.py) saves per task.

On the running lab (GPUHOST_LAB_RUN, default lab/.run; lab/up first), runs each module
``--rounds`` times with the cache and as often without it (GPUHOST_LAB_PYC_CACHE=0 in the
lab's Python, through the task's environment), alternating, and times each real
one-task ansible-playbook run from the controller. The cache is filled once before the first round,
as the first task of a converge fills it. Medians and the ratio go to stdout, everything
to bench/results/pyc-cache-<date>T<HHMM>Z.json.

    .venv/bin/python bench/bench_pyc_cache.py [--rounds N]

The modules, in check mode: ansible.builtin.ping (ansible's module_utils only) and this
collection's iommu_groups_facts (its readers, the IOMMU analysis and the VF settings).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(REPO, "tests", "lab"), os.path.join(REPO, "tests")]

from conftest import HOST, INVENTORY, VENV_BIN, Lab  # noqa: E402  (tests/lab/conftest.py)

MODULES = (
    ("ansible.builtin.ping", None),
    ("gpuhost.kvm.iommu_groups_facts", None),
)
PLAY = """- hosts: %(host)s
  gather_facts: false
  tasks:
    - name: The module under measure
      %(module)s: %(args)s
      check_mode: true
      environment: %(environment)s
"""


def timed_run(lab, workdir, module, args, cache):
    """One ansible-playbook run of one task; the environment keyword sets the variable in
    the lab's Python (an interpreter string with a prefix is not run as one)."""
    playbook = os.path.join(workdir, "bench-%s.yml" % ("with" if cache else "without"))
    with open(playbook, "w", encoding="utf-8") as handle:
        handle.write(PLAY % {"host": HOST, "module": module, "args": json.dumps(args or {}),
                             "environment": json.dumps({} if cache else {"GPUHOST_LAB_PYC_CACHE": "0"})})
    argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", INVENTORY, playbook]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=lab.ansible_env(), capture_output=True, text=True,
                          timeout=900, check=False, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit("%s in a play failed (rc=%d):\n%s\n%s"
                         % (module, proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    return wall


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    lab = Lab()
    entries_before = lab.ssh("find /var/cache/gpuhost-lab/pyc -type f 2>/dev/null | wc -l").stdout.strip()
    results = {}
    workdir = tempfile.mkdtemp(prefix="bench-pyc-")
    for module, module_args in MODULES:
        timed_run(lab, workdir, module, module_args, True)          # fills the cache for this module
        runs = {"with": [], "without": []}
        for dummy in range(args.rounds):
            runs["without"].append(round(timed_run(lab, workdir, module, module_args, False), 2))
            runs["with"].append(round(timed_run(lab, workdir, module, module_args, True), 2))
        medians = {k: statistics.median(v) for k, v in runs.items()}
        results[module] = {"runs_s": runs, "median_s": medians,
                           "ratio_with_to_without": round(medians["with"] / medians["without"], 3)}
        print("%-34s with %.2f s  without %.2f s  ratio %.3f"
              % (module, medians["with"], medians["without"], results[module]["ratio_with_to_without"]))
    now = datetime.datetime.now(datetime.timezone.utc)
    record = {"date": now.isoformat(), "rounds": args.rounds, "load_average": os.getloadavg(),
              "cache_entries_before": int(entries_before or 0),
              "cache_entries_after": int(lab.ssh("find /var/cache/gpuhost-lab/pyc -type f | wc -l").stdout),
              "lab_kernel": lab.ssh("uname -r").stdout.strip(), "modules": results}
    path = os.path.join(REPO, "bench", "results", "pyc-cache-%s.json" % now.strftime("%Y-%m-%dT%H%MZ"))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
        handle.write("\n")
    print("record: %s" % os.path.relpath(path, REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
