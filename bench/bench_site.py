# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the site playbook on the lab (targets: a converge of at
most 5 minutes on a fast day, with at most one reboot and one initramfs rebuild, and an
idempotent re-run of at most 25 % of the converge's wall time).

Each round starts from the lab's first boot (lab/reset, lab/up), then times:

- ``converge``: ``site.yml -l hk-gpu-01`` (includes the iommu role's reboot);
- ``rerun``: the same command again (nothing to change);
- ``plan``: ``playbooks/plan.yml`` (read-only).

For every run it counts, per host, the tasks that ran (PLAY RECAP ok + failed; ok
already counts the changed ones), the tasks skipped, the reboots (boots the host's journal gained), the initramfs
rebuilds (changed tasks that rebuild it), and the module invocations on the host: the entries
AnsibleModule logs to the host's journal (SYSLOG_IDENTIFIER ``ansible-<module>``), so
action plugins that run on the controller (set_fact, debug, assert) are not counted.
Each run also keeps its slowest tasks (time from a task's header to the next one).
Medians over the rounds go to stdout and everything to
bench/results/site-<date>T<HHMM>Z.json.

    .venv/bin/python bench/bench_site.py [--rounds N] [--keep]

A round costs two lab boots and a reboot (about 15 to 25 minutes on 2 cores under
TCG); one round is the default.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LAB = os.path.join(REPO, "lab")
RUN_DIR = os.environ.get("GPUHOST_LAB_RUN", os.path.join(LAB, ".run"))
INVENTORY = os.path.join(REPO, "inventories", "lab", "hosts.yml")
HOST = "hk-gpu-01"
VENV_BIN = os.path.join(REPO, ".venv", "bin")
TARGET_RATIO = 0.25
TARGET_CONVERGE_S = 300      # on a fast day
sys.path.insert(0, os.path.join(REPO, "tests"))

from timed_output import run_timed, slowest_tasks  # noqa: E402

# A task that rebuilds the initramfs, and its result line.
REBUILD_RE = re.compile(r"^TASK \[[^\]]*[Rr]ebuild the initramfs[^\]]*\][^\n]*\n(?:[^\n]*\n)*?(?P<status>changed|ok|skipping|fatal):",
                        re.M)
RECAP_RE = re.compile(r"^(?P<host>[\w.-]+)\s*:\s*(?P<counts>(?:\w+=\d+\s*)+)$", re.M)


def lab_command(name, timeout=1800):
    subprocess.run([os.path.join(LAB, name)], cwd=REPO, check=True, timeout=timeout)


def lab_state():
    state = {}
    with open(os.path.join(RUN_DIR, "state"), encoding="utf-8") as handle:
        for line in handle:
            key, dummy, value = line.rstrip("\n").partition("=")
            state[key] = value
    return state


def lab_ssh(state, command):
    argv = ["ssh", "-i", state["key"], "-p", state["port"], "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o",
            "BatchMode=yes", "root@127.0.0.1", command]
    return subprocess.run(argv, capture_output=True, text=True, check=True,
                          timeout=300).stdout


def boot_count(state):
    """Boots recorded in the host's journal (the lab keeps it across reboots)."""
    return len(lab_ssh(state, "journalctl --list-boots --no-pager -q").splitlines())


def module_invocations(state, since):
    """Modules AnsibleModule ran on the host since ``since`` (host epoch), by name."""
    out = lab_ssh(state, "journalctl --since=@%d -o json --output-fields=SYSLOG_IDENTIFIER"
                  " --no-pager -q" % since)
    counts = {}
    for line in out.splitlines():
        try:
            ident = json.loads(line).get("SYSLOG_IDENTIFIER", "")
        except ValueError:
            continue
        if isinstance(ident, str) and ident.startswith("ansible-"):
            name = ident[len("ansible-"):]
            counts[name] = counts.get(name, 0) + 1
    return counts


def playbook(state, name, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", GPUHOST_LAB_PORT=state["port"],
               GPUHOST_LAB_SSH_KEY=state["key"], PYTHONUNBUFFERED="1",
               PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    since = int(lab_ssh(state, "date +%s").strip())
    boots_before = boot_count(state)
    run = run_timed([os.path.join(VENV_BIN, "ansible-playbook"), "-i", INVENTORY, "-l", HOST,
                     os.path.join(REPO, name)] + list(args), timeout=3600, cwd=REPO, env=env)
    stdout = run.output
    if run.returncode != 0:
        sys.exit("%s failed (rc=%d%s):\n%s\nconsole log: %s"
                 % (name, run.returncode, ", killed at its timeout" if run.timed_out else "",
                    stdout[-8000:], os.path.join(RUN_DIR, "console.log")))
    state = lab_state()                     # a reboot keeps the port; read it again
    modules = module_invocations(state, since)
    return dict(task_counts(stdout, HOST), wall_s=run.wall_s,
                reboots=boot_count(state) - boots_before,
                initramfs_rebuilds=sum(1 for m in REBUILD_RE.finditer(stdout)
                                       if m.group("status") == "changed"),
                module_invocations=sum(modules.values()), modules=modules,
                slowest_tasks=slowest_tasks(run.lines))


def task_counts(stdout, host_name):
    """The host's tasks run, skipped and changed from the PLAY RECAP. Ansible's ok already
    counts the changed tasks, so the tasks that ran are ok + failed."""
    recap = {}
    for match in RECAP_RE.finditer(stdout):
        recap[match.group("host")] = {k: int(v) for k, v in
                                      (p.split("=") for p in match.group("counts").split())}
    host = recap.get(host_name, {})
    return {"tasks_run": host.get("ok", 0) + host.get("failed", 0),
            "tasks_skipped": host.get("skipped", 0), "changed": host.get("changed", 0)}


def one_round():
    lab_command("reset", timeout=300)
    lab_command("up", timeout=900)
    state = lab_state()
    result = {"converge": playbook(state, "site.yml")}
    state = lab_state()
    result["rerun"] = playbook(state, "site.yml")
    result["plan"] = playbook(state, "playbooks/plan.yml")
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="leave the lab running")
    args = parser.parse_args(argv)
    lab_command("build")
    rounds = []
    try:
        for dummy in range(args.rounds):
            rounds.append(one_round())
    finally:
        if not args.keep:
            lab_command("down", timeout=300)
    medians = {run: {key: statistics.median(r[run][key] for r in rounds)
                     for key in ("wall_s", "tasks_run", "tasks_skipped", "reboots",
                                 "initramfs_rebuilds", "module_invocations", "changed")}
               for run in ("converge", "rerun", "plan")}
    ratio = medians["rerun"]["wall_s"] / medians["converge"]["wall_s"]
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "host": HOST, "rounds": rounds, "medians": medians,
              "rerun_ratio": round(ratio, 3), "target_ratio": TARGET_RATIO,
              "target_converge_s": TARGET_CONVERGE_S,
              "met": ratio <= TARGET_RATIO,
              "converge_met": medians["converge"]["wall_s"] <= TARGET_CONVERGE_S,
              "qemu": subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True,
                                     text=True, check=False).stdout.split("\n")[0],
              "load_average": os.getloadavg()}
    out_dir = os.path.join(HERE, "results")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "site-%s.json"
                        % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ"))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2, sort_keys=True)
    for run, values in medians.items():
        print("%-9s median %7.1f s  tasks %3d run / %3d skipped  modules %3d  changed %d  "
              "reboots %d  initramfs rebuilds %d"
              % (run, values["wall_s"], values["tasks_run"], values["tasks_skipped"],
                 values["module_invocations"], values["changed"], values["reboots"],
                 values["initramfs_rebuilds"]))
    print("converge %.0f s (target <= %d s on a fast day): %s"
          % (medians["converge"]["wall_s"], TARGET_CONVERGE_S,
             "met" if report["converge_met"] else "NOT met"))
    print("re-run / converge = %.0f %% (target <= %.0f %%): %s; %s"
          % (ratio * 100, TARGET_RATIO * 100, "met" if report["met"] else "NOT met", path))
    return 0 if report["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
