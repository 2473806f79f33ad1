# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Realized placement of a host's running tenants against their plan.

Reads each planned tenant's QEMU below ``--root`` (``/``: the live host; or a recorded
tree) with host_facts' own core (module_utils/host/realized.py: /proc/PID/task/*/status,
/proc/PID/numa_maps, /proc/PID/fd links, /sys/kernel/iommu_groups, /proc/interrupts and
/proc/irq/N/smp_affinity_list) and the node hugepage pools (host_facts' memory subset),
and writes bench/results/realized-<UTC>.json with, per tenant:

- ``threads``: the planned and observed CPU set of each vCPU, emulator and iothread;
- ``memory_node_histogram``: kB per node of its hugepage and other mappings;
- ``hugepages_consumed``: pages per node and page size (numa_maps ``huge`` mappings),
  and each node's free pages now (and before, with ``--hugepages-before``);
- ``vfio``: the groups QEMU holds, their devices' drivers; ``vfio_irqs``: each vfio
  IRQ with its planned (housekeeping) and observed CPUs;
- ``items`` and ``realized_ratio``: items as planned / items checked; evidence that
  could not be read is an item not as planned, never a pass.

    .venv/bin/python bench/bench_realized.py --plan plan.json [--root /] [--tenant NAME ...]
        [--hugepages-before before.json] [--out bench/results]

``--plan``: the placement plan as JSON (``gpuhost_plan``, e.g. from the plan role's
state file); ``--hugepages-before``: host_facts' memory subset ``hugepages``
({node: {size_kib: {nr, free}}}) read before the tenants started. The exit status is 0
when every planned tenant runs with ratio 1.0, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
COLLECTIONS = os.path.join(REPO, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import format_cpulist  # noqa: E402
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import host_facts, realized  # noqa: E402
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import domain_name  # noqa: E402
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.sysfs import validate_root  # noqa: E402
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import validation  # noqa: E402


def _cpus(value):
    return None if value is None else format_cpulist(tuple(value))


def _free(pools, node):
    """{size_kib: free} of one node from {node: {size_kib: {free} or free}}."""
    return {str(size): pool.get("free") if isinstance(pool, dict) else pool
            for size, pool in ((pools or {}).get(str(node)) or {}).items()}


def tenant_record(plan, tenant, seen, free_before=None, free_after=None):
    """The record of one planned tenant from host_facts' realized answer for it (``seen``:
    {running, pid, placement}, before or after JSON). ``free_before``/``free_after``:
    {node: {size_kib: {free}}}, the memory subset's pools."""
    record = {"name": tenant["name"], "node": tenant.get("node"), "running": bool(seen.get("running")),
              "pid": seen.get("pid")}
    placement = seen.get("placement")
    if not record["running"] or not placement:
        record.update(items=[], realized_ratio=None,
                      findings=["%s does not run: no guest evidence" % tenant["name"]])
        return record
    items = validation.realized_tenant(plan, tenant, seen, free_before, free_after)
    housekeeping = (plan.get("housekeeping") or {}).get(str(tenant.get("node")))
    threads = [{"kind": item["kind"], "thread": item["item"], "planned": item["planned"],
                "observed": item["observed"], "as_planned": item["as_planned"]}
               for item in items if item["kind"] in ("vcpu", "emulator", "iothread")]
    nodes = sorted({str(node) for node in placement["hugepages"]} | {str(node) for node in (free_after or {})})
    record.update(
        threads=threads,
        memory_node_histogram={kind: {str(node): kib for node, kib in sorted(by_node.items(), key=lambda i: int(i[0]))}
                               for kind, by_node in placement["memory_kib"].items()},
        hugepages_consumed={str(node): {str(size): pages for size, pages in sizes.items()}
                            for node, sizes in sorted(placement["hugepages"].items(), key=lambda i: int(i[0]))},
        hugepages_free={node: {"before": _free(free_before, node) if free_before is not None else None,
                               "after": _free(free_after, node)} for node in nodes},
        vfio=placement["vfio"],
        vfio_irqs=[{"irq": irq["irq"], "name": irq["name"], "device": irq["device"], "planned": housekeeping,
                    "cpus": _cpus(irq["cpus"]), "effective": _cpus(irq.get("effective"))}
                   for irq in placement.get("vfio_irqs") or ()],
        items=items,
        realized_ratio=realized.realized_ratio(items),
        findings=[item["finding"] for item in items if item["as_planned"] is not True])
    return record


def build_record(plan, answer, free_before=None, free_after=None, source="/"):
    """The whole file: every planned tenant's record (tenant_record), and the host's ratio
    over all their items (a tenant that does not run counts as one item not as planned)."""
    tenants = {}
    done = total = 0
    for tenant in plan.get("tenants") or ():
        record = tenant_record(plan, tenant, (answer or {}).get(tenant["name"]) or {}, free_before, free_after)
        tenants[tenant["name"]] = record
        if record["items"]:
            total += len(record["items"])
            done += sum(1 for item in record["items"] if item["as_planned"] is True)
        else:
            total += 1
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "source": source,
            "tenants": tenants, "realized_ratio": round(done / total, 6) if total else None,
            "items": total, "items_as_planned": done}


def read_host(plan, root="/", names=None):
    """(answer, pools): host_facts' realized answer for the planned tenants (or ``names``)
    and the node hugepage pools now, read below ``root``."""
    validate_root(root)
    names = list(names or [tenant["name"] for tenant in plan.get("tenants") or ()])
    for index, name in enumerate(names):
        domain_name(name, "tenant[%d]" % index)
    return realized.read_domains(names, root), host_facts.read_memory(root)["hugepages"]


def write_record(record, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "realized-%s.json"
                        % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ"))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return path


def _load_json(path, what):
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:
        raise SystemExit("%s %s cannot be read as JSON: %s" % (what, path, error))
    if not isinstance(data, dict):
        raise SystemExit("%s %s holds no mapping" % (what, path))
    return data


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="the placement plan (gpuhost_plan) as JSON")
    parser.add_argument("--root", default="/", help="the host's root (/ on the live host, or a recorded tree)")
    parser.add_argument("--tenant", action="append", default=None, help="only this tenant (repeatable)")
    parser.add_argument("--hugepages-before", default=None,
                        help="host_facts' memory hugepages ({node: {size_kib: {free}}}) read before the start")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    plan = _load_json(args.plan, "the plan")
    before = _load_json(args.hugepages_before, "the hugepages before") if args.hugepages_before else None
    if args.tenant:
        plan = dict(plan, tenants=[t for t in plan.get("tenants") or () if t["name"] in args.tenant])
    answer, pools = read_host(plan, args.root)
    record = build_record(plan, answer, before, pools, source=args.root)
    path = write_record(record, args.out)
    for name, tenant in record["tenants"].items():
        if not tenant["running"]:
            print("%-20s not running (no guest evidence)" % name)
            continue
        print("%-20s pid %-8s ratio %s  %d items, %d vfio IRQ(s), hugepages %s"
              % (name, tenant["pid"], tenant["realized_ratio"], len(tenant["items"]), len(tenant["vfio_irqs"]),
                 json.dumps(tenant["hugepages_consumed"], sort_keys=True)))
        for finding in tenant["findings"]:
            print("    %s" % finding)
    print("realized ratio %s (%d of %d items as planned); %s"
          % (record["realized_ratio"], record["items_as_planned"], record["items"], path))
    return 0 if record["realized_ratio"] == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
