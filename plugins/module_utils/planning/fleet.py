# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet view: what each host has left, and which host a new tenant should go to.

Pure functions over plain data. A host is described by its topology (a HostTopology or
the dict of ``topology.topology_to_dict``) and its ledger (``ledger.LedgerData`` or its
dict: ``tenants``, ``housekeeping``, ``smt_policy``). The capacity numbers come from the
planner's own view of the host (``placement.plan_placement`` and its host index), so a
GPU, core or VF counted free here is one the planner would hand out.

``host_capacity``   free GPUs per NUMA node (clean IOMMU group or not), free whole cores,
                    free hugepages per node and size, free VFs, the host's tenants.
``fleet_report``    every host's capacity plus fleet totals; hosts without data are
                    listed with the reason.
``evaluate_host``   would a tenant fit on this host, where, and how well (on the host).
``rank_candidates`` the best host of a group for one tenant request, with the reasons:
                    a clean GPU IOMMU group first, then a node that already has the
                    hugepages free, then the least fragmentation left behind.
``choose_host``     both together, from topologies or from hosts' evaluations.
The report for people: planning/fleet_render.
"""

from __future__ import annotations

import math
import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import MAX_CPUS, parse_cpulist
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    GpuSelection, gpu_selection)
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.ledger import (
    LedgerData,
    planner_request,
    reserve,
)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    domain_name, hugepage_size_name, is_count, positive_int)
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
    _as_topology as as_topology, _Host as PlannerHost, plan_placement, tenant_request_from_dict)

REPORT_FORMAT = "gpuhost.kvm/fleet-report"
REPORT_VERSION = 1


def as_ledger(ledger):
    """A LedgerData from a LedgerData, its dict form, or None (no ledger: no tenants)."""
    if ledger is None:
        return LedgerData()
    if isinstance(ledger, LedgerData):
        return ledger
    if not isinstance(ledger, dict):
        raise GpuhostError("a ledger must be a mapping, got %r" % (type(ledger).__name__,),
                           field="ledger", fix="pass the ledger's tenants, housekeeping "
                                               "and smt_policy as a mapping")
    tenants = ledger.get("tenants") or []
    housekeeping = ledger.get("housekeeping") or {}
    serial = ledger.get("serial") or 0
    if not isinstance(tenants, list) or not all(isinstance(t, dict) for t in tenants) or \
            not isinstance(housekeeping, dict) or isinstance(serial, bool) or \
            not isinstance(serial, int):
        raise GpuhostError("the ledger's tenants, housekeeping or serial have another shape "
                           "(a list of mappings, a mapping and a whole number)",
                           field="ledger", fix="pass the ledger as capacity_facts returns it "
                                               "with include_topology")
    return LedgerData(tenants=list(tenants), housekeeping=dict(housekeeping),
                      smt_policy=ledger.get("smt_policy"), serial=serial,
                      updated_at=ledger.get("updated_at"))


# ------------------------------------------------------------------ the request

# Bounds of one tenant request: past them a value is a typo or a hostile input, never a
# tenant. vCPUs: the kernel's CPU limit; memory: 64 TiB; GPUs and I/O threads: more
# than any PCIe host carries or a guest uses.
MAX_REQUEST = {"vcpus": MAX_CPUS, "memory_gib": 65536, "gpus": 64, "iothreads": 64}
_REQUEST_MINIMUM = {"vcpus": 1, "memory_gib": 1, "gpus": 0, "iothreads": 0}
_WHOLE_TEXT = re.compile(r"[+-]?[0-9]{1,20}")


def _request_int(value, field, key):
    """A whole number of the request, bounded; a templated "16" or a YAML 16.0 counts as
    16, NaN and infinities are refused by name (int() of them raises, or never ends up
    bounded)."""
    number = value
    if isinstance(value, str) and _WHOLE_TEXT.fullmatch(value.strip()):
        number = int(value.strip())
    elif isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise GpuhostError("%r is not a finite number" % (value,), field=field,
                               fix="give a whole number from %d to %d"
                                   % (_REQUEST_MINIMUM[key], MAX_REQUEST[key]))
        if value.is_integer():
            number = int(value)
    return positive_int(number, field, minimum=_REQUEST_MINIMUM[key], maximum=MAX_REQUEST[key])


def validate_request(request, field="tenant"):
    """One tenant request (a ``gpuhost_tenants`` entry) checked whole, before any host is
    looked at: the planner's keys only (the others are the entry's own), a valid name,
    whole numbers within MAX_REQUEST (finite, no bools), at most MAX_REQUEST["gpus"]
    GPU addresses, text where text is due, then every rule of the planner's own check
    (tenant_request_from_dict). Returns the planner's keys with whole numbers; a
    GpuhostError names the exact key (``tenant.vcpus``, ``tenant.gpus[0]``)."""
    if not isinstance(request, dict):
        raise GpuhostError("the tenant request %r is not a mapping" % (request,), field=field,
                           fix="give name, gpus, vcpus and memory_gib as a mapping")
    keys = planner_request(request, field)
    for key in ("name", "vcpus", "memory_gib"):
        if key not in keys:
            raise GpuhostError("%s is missing" % key, field="%s.%s" % (field, key),
                               fix="give name, gpus, vcpus and memory_gib")
    domain_name(keys["name"], field="%s.name" % field)
    gpus = keys.get("gpus")
    if isinstance(gpus, (list, tuple)) and len(gpus) > MAX_REQUEST["gpus"]:
        raise GpuhostError("%d GPU addresses are more than %d" % (len(gpus), MAX_REQUEST["gpus"]),
                           field="%s.gpus" % field, fix="list each GPU of the tenant once")
    numbers = ["vcpus", "memory_gib", "iothreads"]
    if gpus is not None and not isinstance(gpus, (list, tuple)) and not (
            isinstance(gpus, str) and not _WHOLE_TEXT.fullmatch(gpus.strip())):
        numbers.append("gpus")          # a count (a lone string is one address)
    for key in numbers:
        if key in keys:
            keys[key] = _request_int(keys[key], "%s.%s" % (field, key), key)
    for key, what in (("hugepage_size", "a hugepage size"),
                      ("emulator_policy", "an emulator policy")):
        if key in keys and not isinstance(keys[key], str):
            raise GpuhostError("%r is not %s" % (keys[key], what), field="%s.%s" % (field, key),
                               fix={"hugepage_size": "use 1G or 2M",
                                    "emulator_policy": "use housekeeping or dedicated"}[key])
    tenant_request_from_dict(keys, field)
    return keys


# What one host's data may fail with when it has an unexpected shape deep inside (a
# topology whose values are of the wrong type): the host is reported, never the fleet.
_SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError)
# What makes a host's data unusable: a refusal of ours or data of the wrong shape.
_UNUSABLE_ERRORS = (GpuhostError,) + _SHAPE_ERRORS


def _unusable(exc):
    if isinstance(exc, GpuhostError):
        return str(exc)
    return "its data is unusable (%s: %s); run capacity_facts on it again" % (
        type(exc).__name__, exc)


def _ledger_plan(host_topology, data, selection=None):
    return plan_placement(host_topology, [], housekeeping=data.housekeeping or None,
                          smt_policy=data.smt_policy or "require", existing=data.tenants,
                          hugepage_check="none", gpu_selection=selection)


def selection_of(data):
    """The GPU selection a host's data was read with (capacity_facts' ``gpu_devices``
    and ``gpu_devices_only``), so that the controller counts that host's GPUs as the
    host did; the default classes when the data names none."""
    return GpuSelection.from_options(data.get("gpu_devices"),
                                     bool(data.get("gpu_devices_only")))


def _capacity_from_plan(topo, host, plan):
    taken = set(parse_cpulist(plan["tenant_cpus"])) | set(parse_cpulist(plan["housekeeping_cpus"]))
    held_functions = {}
    for tenant in plan["tenants"]:
        for gpu in tenant.get("gpus") or []:
            for function in gpu.get("functions") or [gpu["address"]]:
                held_functions[function] = tenant["name"]
        if tenant.get("vf"):
            held_functions[tenant["vf"]["address"]] = tenant["name"]

    nodes = {}
    for node_id in sorted(set(host.cores_by_node) | set(topo.nodes)):
        cores = host.cores_by_node.get(node_id, ())
        free_cores = [c for c in cores if not any(t in taken for t in c)]
        partial = [c for c in cores if any(t in taken for t in c)
                   and not all(t in taken for t in c)]
        node = topo.nodes.get(node_id)
        pages = {}
        if node is not None:
            for size, pool in sorted(node.hugepages.items()):
                pages[hugepage_size_name(size)] = {"total": pool.nr, "free": pool.free}
        nodes[node_id] = {
            "cores_total": len(cores),
            "cores_free": len(free_cores),
            "cores_partly_used": len(partial),
            "cpus_free": sum(1 for c in cores for t in c if t not in taken),
            "mem_free_kib": node.mem_free_kib if node is not None else None,
            "hugepages": pages,
            "gpus": [],
            "gpus_free": 0,
            "gpus_free_clean": 0,
            "vfs_total": 0,
            "vfs_free": 0,
        }
    unknown_node_gpus = []
    for address in host.gpus:
        node_id = host.device_node(address)
        verdict = host.gpu_verdict((address,))
        entry = {"address": address, "iommu_group": host.pci[address].iommu_group,
                 "clean": verdict.clean, "tenant": held_functions.get(address)}
        if node_id is None or node_id not in nodes:
            unknown_node_gpus.append(entry)
            continue
        nodes[node_id]["gpus"].append(entry)
        if entry["tenant"] is None:
            nodes[node_id]["gpus_free"] += 1
            nodes[node_id]["gpus_free_clean"] += int(verdict.clean)
    for node_id, node in nodes.items():
        usable = {pair[1] for pair in host.vf_candidates(node_id)}
        node["vfs_total"] = len(usable)
        node["vfs_free"] = sum(1 for vf in usable if vf not in held_functions)

    tenants = [{
        "name": t["name"], "node": t.get("node"),
        "gpus": [g["address"] for g in t.get("gpus") or []],
        "vcpus": t.get("vcpus"), "memory_gib": t.get("memory_gib"),
        "hugepage_size": hugepage_size_name(t["hugepage_size_kib"]) if t.get("hugepage_size_kib") else None,
        "vf": (t.get("vf") or {}).get("address"),
    } for t in plan["tenants"]]
    totals = {key: sum(n[key] for n in nodes.values())
              for key in ("cores_total", "cores_free", "gpus_free", "gpus_free_clean",
                          "vfs_total", "vfs_free")}
    totals["gpus_total"] = len(host.gpus)
    totals["tenants"] = len(tenants)
    # A free GPU on a node without a free whole core cannot take a tenant: stranded.
    totals["gpus_stranded"] = sum(n["gpus_free_clean"] for n in nodes.values()
                                  if n["cores_free"] == 0)
    totals["cores_partly_used"] = sum(n["cores_partly_used"] for n in nodes.values())
    return {
        "smt_policy": plan["smt_policy"],
        "threads_per_core": plan["threads_per_core"],
        "nodes": {str(k): v for k, v in nodes.items()},
        "gpus_unknown_node": unknown_node_gpus,
        "tenants": tenants,
        "totals": totals,
        "warnings": list(plan.get("warnings") or []),
    }


def host_capacity(topology, ledger=None, selection=None):
    """What one host has left, per NUMA node, its GPUs those of ``selection``
    (pci.GpuSelection; None: the default classes). Raises GpuhostError on unusable
    input."""
    topo = as_topology(topology)
    data = as_ledger(ledger)
    selection = gpu_selection(selection)
    plan = _ledger_plan(topo, data, selection)
    return _capacity_from_plan(topo, PlannerHost(topo, selection=selection), plan)


def fleet_report(hosts):
    """Every host's capacity plus fleet totals.

    ``hosts``: {name: data}. ``data`` is a ``capacity_facts`` fact (its ``capacity``
    key, computed on the host), or {"topology": ..., "ledger": ...} to compute it here,
    or {"error": why} / None for a host that gave no data (unreachable, failed).
    """
    report_hosts = {}
    totals = {"hosts": 0, "hosts_without_data": 0, "tenants": 0, "gpus_total": 0,
              "gpus_free": 0, "gpus_free_clean": 0, "gpus_stranded": 0, "cores_total": 0,
              "cores_free": 0, "vfs_free": 0}
    for name in sorted(hosts, key=str):
        data = hosts[name] or {}
        totals["hosts"] += 1
        try:
            if not isinstance(data, dict):
                raise GpuhostError("its data is a %s, not a capacity fact"
                                   % type(data).__name__)
            if "capacity" in data:
                capacity = data["capacity"]
                problem = capacity_shape_problem(capacity)
                if problem:
                    raise GpuhostError("its capacity fact %s; run capacity_facts on it again"
                                       % problem)
            elif "topology" in data:
                capacity = host_capacity(data["topology"], data.get("ledger"),
                                         selection_of(data))
            else:
                raise GpuhostError(str(data.get("error") or "")
                                   or "no data (host unreachable or its facts task failed)")
        except _UNUSABLE_ERRORS as err:
            report_hosts[name] = {"error": _unusable(err)}
            totals["hosts_without_data"] += 1
            continue
        report_hosts[name] = capacity
        for key in totals:
            if key in capacity["totals"]:
                totals[key] += capacity["totals"][key]
    return {"format": REPORT_FORMAT, "version": REPORT_VERSION, "totals": totals,
            "hosts": report_hosts}


_NODE_NUMBERS = ("cores_total", "cores_free", "gpus_free", "gpus_free_clean", "vfs_total",
                 "vfs_free")


def _whole(value):
    return is_count(value)


def capacity_shape_problem(capacity):
    """What is wrong with a capacity fact's shape (what the report adds up and draws),
    or None. A host's fact is checked before it counts, so that one odd host is
    reported instead of failing the report of the whole fleet."""
    if not isinstance(capacity, dict):
        return "is a %s, not a mapping" % type(capacity).__name__
    totals = capacity.get("totals")
    if not isinstance(totals, dict) or not all(_whole(v) for v in totals.values()):
        return "has no totals of whole numbers"
    nodes = capacity.get("nodes")
    if not isinstance(nodes, dict):
        return "has no nodes"
    for node_id, node in nodes.items():
        if not isinstance(node, dict) or not all(_whole(node.get(k)) for k in _NODE_NUMBERS):
            return "has node %s without %s as whole numbers" % (node_id, ", ".join(_NODE_NUMBERS))
        pages = node.get("hugepages")
        if not isinstance(pages, dict) or not all(
                isinstance(p, dict) and _whole(p.get("free")) and _whole(p.get("total"))
                for p in pages.values()):
            return "has node %s without free and total hugepages" % node_id
        gpus = node.get("gpus")
        if not isinstance(gpus, list) or not all(
                isinstance(g, dict) and isinstance(g.get("address"), str)
                and "tenant" in g and "clean" in g for g in gpus):
            return "has node %s without a list of GPUs (address, clean, tenant)" % node_id
    tenants = capacity.get("tenants", [])
    if not isinstance(tenants, list) or not all(
            isinstance(t, dict) and isinstance(t.get("gpus"), list)
            and all(k in t for k in ("name", "node", "vcpus", "memory_gib", "vf"))
            for t in tenants):
        return "has tenants without name, node, gpus, vcpus, memory_gib and vf"
    if not isinstance(capacity.get("warnings", []), list):
        return "has warnings that are not a list"
    return None


# What fleet_place ranks a fitting candidate by, and the type each must have.
_CANDIDATE_KEYS = (("clean_iommu_group", bool), ("hugepages_ready", bool),
                   ("gpus_stranded", int), ("cores_partly_used", int),
                   ("cores_left_on_node", int), ("gpus", list), ("why", str))


def candidate_shape_problem(candidate):
    """What is wrong with a host's candidate (capacity_facts with a tenant), or None."""
    if not isinstance(candidate, dict):
        return "its candidate is a %s, not a mapping" % type(candidate).__name__
    if not isinstance(candidate.get("fits"), bool):
        return "its candidate does not say whether the tenant fits"
    if not candidate["fits"]:
        return None if isinstance(candidate.get("why"), str) else "its candidate gives no reason"
    # A count is whole and bounded: a negative one would rank first, 10**400 would not
    # survive the report's arithmetic.
    wrong = [key for key, kind in _CANDIDATE_KEYS
             if not isinstance(candidate.get(key), kind)
             or (kind is int and not is_count(candidate.get(key)))]
    if wrong or "node" not in candidate:
        return "its candidate lacks %s of the right type" % ", ".join(wrong or ["node"])
    return None


# ------------------------------------------------------------------ host choice

def evaluate_host(topology, ledger, request, hugepage_check="memory", selection=None):
    """Would ``request`` fit on this host, where, and how well? Pure; runs on the host
    (capacity_facts with a tenant) or on the controller (choose_host).

    Plans the tenant exactly as ``tenant_ledger`` would (the ledger's own SMT policy and
    housekeeping) and returns a candidate: {fits, why} and, when it fits, the node, the
    GPUs and the ranking numbers (clean_iommu_group, hugepages_ready, gpus_stranded,
    cores_partly_used, cores_left_on_node) of the host as it would be afterwards.
    """
    try:
        topo = as_topology(topology)
        data = as_ledger(ledger)
        if request.get("name") in data.names():
            return {"fits": False, "why": "tenant %s is already on this host" % request["name"]}
        selection = gpu_selection(selection)
        plan, added = reserve(data, topo, [request], smt_policy=data.smt_policy or "require",
                              housekeeping=data.housekeeping or None,
                              hugepage_check=hugepage_check, gpu_selection=selection)[1:]
        return _fitting_candidate(topo, plan, added, selection)
    except _UNUSABLE_ERRORS as err:
        return {"fits": False, "why": _unusable(err)}


def _fitting_candidate(topo, plan, added, selection):
    host = PlannerHost(topo, selection=selection)
    tenant = next(t for t in plan["tenants"] if t["name"] == added[0])
    gpus = [g["address"] for g in tenant.get("gpus") or []]
    functions = tuple(f for g in tenant.get("gpus") or [] for f in g.get("functions") or [])
    clean = host.gpu_verdict(functions).clean if functions else True
    node = tenant["node"]
    # The pages come from the plan's memory_node: the nearest node with memory when
    # the tenant's CPU node has none (plans from before it existed hold them on node).
    memory_node = tenant.get("memory_node", node)
    size = int(tenant["hugepage_size_kib"])
    pages_needed = int((tenant.get("hugepages") or {}).get(str(memory_node), 0) or 0)
    pool = (topo.nodes[memory_node].hugepages.get(size) if memory_node in topo.nodes
            else None)
    after = _capacity_from_plan(topo, host, plan)
    candidate = {
        "fits": True, "node": node, "gpus": gpus, "clean_iommu_group": clean,
        "hugepages_ready": pool is not None and pool.free >= pages_needed,
        "gpus_stranded": after["totals"]["gpus_stranded"],
        "cores_partly_used": after["totals"]["cores_partly_used"],
        "cores_left_on_node": after["nodes"][str(node)]["cores_free"],
    }
    candidate["why"] = (
        "node %s, GPU %s: IOMMU group %s; %d %s hugepages%s %s; leaves %d stranded "
        "GPU(s), %d partly used core(s), %d whole core(s) free on node %s"
        % (node, ", ".join(gpus) or "none", "clean" if clean else "NOT clean",
           pages_needed, hugepage_size_name(size),
           "" if memory_node == node else " of node %s" % memory_node,
           "already free" if candidate["hugepages_ready"] else "to reserve",
           candidate["gpus_stranded"], candidate["cores_partly_used"],
           candidate["cores_left_on_node"], node))
    return candidate


def _rank_key(item):
    # Lower sorts first: clean group, hugepages already free, least fragmentation
    # (stranded GPUs, then partly used cores, then best fit: the fewest whole cores
    # left on the node, which keeps bigger holes elsewhere for bigger tenants), name.
    name, candidate = item
    return (not candidate["clean_iommu_group"], not candidate["hugepages_ready"],
            candidate["gpus_stranded"], candidate["cores_partly_used"],
            candidate["cores_left_on_node"], name)


def rank_candidates(candidates, tenant_name):
    """Choose among hosts already evaluated (``evaluate_host``), ``{name: candidate}``;
    a None or {"error": why} candidate is a host that gave no data.

    Returns {"host", "node", "gpus", "why", "candidates"}, the candidates best first
    (each with its ``host``), those that do not fit last. Raises GpuhostError listing
    every host's reason when the tenant fits nowhere.
    """
    if not candidates:
        raise GpuhostError("no host to choose from", field="hosts",
                           fix="name an inventory group with at least one GPU host")
    normalised = {}
    for name, candidate in candidates.items():
        if not candidate or (isinstance(candidate, dict) and "fits" not in candidate):
            candidate = {"fits": False, "why": str((candidate or {}).get("error") or "")
                         or "no data for this host"}
        problem = candidate_shape_problem(candidate)
        if problem:
            candidate = {"fits": False, "why": problem + "; run capacity_facts on it again"}
        normalised[str(name)] = candidate
    fitting = sorted(((n, c) for n, c in normalised.items() if c["fits"]), key=_rank_key)
    if not fitting:
        raise GpuhostError(
            "tenant %s fits on no host: %s" % (tenant_name, "; ".join(
                "%s: %s" % (n, normalised[n]["why"]) for n in sorted(normalised))),
            field="request",
            fix="free resources (offboard a tenant), add hosts to the group, or make the "
                "request smaller")
    best_name, best = fitting[0]
    why = "%s chosen for %s: %s" % (best_name, tenant_name, best["why"])
    if len(fitting) > 1:
        why += "; next best %s: %s" % (fitting[1][0], fitting[1][1]["why"])
    ranked = fitting + sorted((n, c) for n, c in normalised.items() if not c["fits"])
    return {"host": best_name, "node": best["node"], "gpus": list(best["gpus"]), "why": why,
            "candidates": [dict(c, host=n) for n, c in ranked]}


def choose_host(hosts, request, hugepage_check="memory", field="tenant"):
    """Choose the host for one tenant ``request`` (a gpuhost_tenants entry).

    ``hosts``: {name: data} with data {"topology": ..., "ledger": ...} (evaluated here),
    a ``capacity_facts`` fact that already holds the host's ``candidate`` for this
    request, or None / {"error": why}. Among the hosts where the tenant fits, the order
    is: the GPUs' IOMMU group is clean, the node already has the hugepages free, fewer
    GPUs stranded without a free core, fewer partly used cores, fewer whole cores left
    on the node (best fit), then the name. See ``rank_candidates`` for the result.
    ``request`` is checked whole first (``validate_request``, errors naming ``field``).
    """
    # The whole request first: a bad one is the request's fault, never "fits on no host"
    # with the same reason once per host.
    request = validate_request(request, field)
    candidates = {}
    for name, data in (hosts or {}).items():
        data = data or {}
        if not isinstance(data, dict):
            candidates[name] = {"fits": False, "why": "its data is a %s, not a capacity fact"
                                                      % type(data).__name__}
        elif "topology" in data:
            try:
                selection = selection_of(data)
            except GpuhostError as err:
                candidates[name] = {"fits": False, "why": _unusable(err)}
                continue
            candidates[name] = evaluate_host(data["topology"], data.get("ledger"), request,
                                             hugepage_check, selection)
        elif "candidate" in data:
            candidate = data["candidate"]
            if isinstance(candidate, dict) and \
                    candidate.get("tenant") not in (None, request["name"]):
                candidate = {"fits": False,
                             "why": "evaluated for tenant %s, not %s"
                                    % (candidate["tenant"], request["name"])}
            candidates[name] = candidate
        else:
            candidates[name] = data or None
    return rank_candidates(candidates, request["name"])
