# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of playbooks/fleet_capacity.yml against the fleet size.

Each run is the real ansible-playbook on a simulated fleet (tests/support/fleetsim.py: N hosts
on the local connection, four synthetic host models, one ledger per host) with a
placement request, so the time includes every host's capacity_facts module, the
controller's fleet_report and fleet_place modules, and Ansible's own overhead. Host
counts and (forks, strategy) pairs are crossed; the results, with the machine's CPU
count and load, go to bench/results/fleet-<UTC time>.json and .md.

    .venv/bin/python bench/bench_fleet.py [--hosts 25,50,100,200]
        [--configs 10:linear,50:linear,50:free]

On a machine with few cores the module runs are CPU bound: more forks than cores buys
little, and the free strategy mostly saves the wait for the slowest host of each task.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for path in (os.path.join(REPO, ".collections"), os.path.join(REPO, "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)

from support import fleetsim  # noqa: E402

PLAYBOOK = os.path.join(REPO, "playbooks", "fleet_capacity.yml")
TENANT = {"name": "bench-tenant", "gpus": 1, "vcpus": 8, "memory_gib": 16}


def run_once(hosts, forks, strategy):
    """Wall seconds of one fleet_capacity.yml run on a fresh fleet of ``hosts`` hosts."""
    base = tempfile.mkdtemp(prefix="gpuhost-bench-fleet-")
    inventory = fleetsim.build_fleet(base, hosts)[0]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_STRATEGY=strategy, ANSIBLE_NOCOLOR="1")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
            "-f", str(forks), PLAYBOOK, "-e", "fleet_report_dir=%s/report" % base,
            "-e", json.dumps({"fleet_place_tenant": TENANT})]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit("fleet_capacity.yml failed on %d hosts:\n%s\n%s"
                         % (hosts, proc.stdout[-2000:], proc.stderr[-2000:]))
    return wall


def render_markdown(result):
    lines = ["# fleet_capacity.yml wall time", "",
             "%s, %d CPUs, load average at start %.2f" % (
                 result["when"], result["cpus"], result["load_at_start"]), "",
             "| hosts | " + " | ".join("forks %d, %s" % (c["forks"], c["strategy"])
                                       for c in result["configs"]) + " |",
             "|---|" + "---|" * len(result["configs"])]
    for hosts in result["hosts"]:
        cells = []
        for config in result["configs"]:
            wall = result["wall_s"]["%d/%d/%s" % (hosts, config["forks"], config["strategy"])]
            cells.append("%.1f s (%.0f ms/host)" % (wall, 1000 * wall / hosts))
        lines.append("| %d | %s |" % (hosts, " | ".join(cells)))
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--hosts", default="25,50,100,200")
    parser.add_argument("--configs", default="10:linear,50:linear,50:free",
                        help="forks:strategy pairs")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    host_counts = [int(h) for h in args.hosts.split(",")]
    configs = [{"forks": int(c.split(":")[0]), "strategy": c.split(":")[1]}
               for c in args.configs.split(",")]
    result = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "cpus": os.cpu_count(), "load_at_start": os.getloadavg()[0],
              "hosts": host_counts, "configs": configs, "wall_s": {}}
    for hosts in host_counts:
        for config in configs:
            wall = run_once(hosts, config["forks"], config["strategy"])
            key = "%d/%d/%s" % (hosts, config["forks"], config["strategy"])
            result["wall_s"][key] = round(wall, 2)
            print("%4d hosts, forks %3d, %-6s: %7.1f s"
                  % (hosts, config["forks"], config["strategy"], wall), flush=True)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "fleet-%s" % result["when"].replace(":", ""))
    with open(stem + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2, sort_keys=True)
    with open(stem + ".md", "w", encoding="utf-8") as handle:
        handle.write(render_markdown(result))
    print(render_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
