# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runbook section 14 as checks: pure functions from what the validate role read off
the host (IOMMU facts, sysfs values, virsh output) to a pass/fail report.

Each check is ``{"id", "title", "status", "detail"}`` with status ``pass``, ``fail``
or ``not_run`` (the evidence is missing, e.g. the guest stage has not run); a report
passes when no check fails.
"""

from __future__ import annotations

import json

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.gpuhost.kvm.plugins.plugin_utils.plan_query import (
    passthrough_functions,
)
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.plan_entry import functions_by_node
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.markdown import markdown_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.realized import realized_items, realized_ratio
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.vf_settings import (
    setting_mismatches,
    vf_settings,
)

PASS, FAIL, NOT_RUN = "pass", "fail", "not_run"


def _check(check_id, title, status, detail):
    return {"id": check_id, "title": title, "status": status, "detail": detail}


def _vcpu_pins(pins):
    """host_facts' {vcpu: cpulist} for one domain -> {vcpu: (cpus...)}."""
    return {int(vcpu): parse_cpulist(cpus) for vcpu, cpus in (pins or {}).items()}


def check_iommu(iommu):
    cmdline = (iommu or {}).get("cmdline") or {}
    on = cmdline.get("intel_iommu") == "on" or cmdline.get("amd_iommu") == "on" or \
        (iommu or {}).get("vendor") == "amd"
    if (iommu or {}).get("enabled") and on:
        return _check("iommu", "IOMMU on", PASS, "%s IOMMU, mode %s, %d groups"
                      % (iommu.get("vendor"), iommu.get("mode"), len(iommu.get("groups") or ())))
    return _check("iommu", "IOMMU on", FAIL,
                  "IOMMU enabled: %s, command line: %s; run the iommu stage and reboot"
                  % ((iommu or {}).get("enabled"), cmdline or "no IOMMU flag"))


def check_vfio(plan, iommu):
    drivers = {}
    for group in (iommu or {}).get("groups") or ():
        for device in group.get("devices") or ():
            drivers[device["address"]] = device.get("driver")
    wanted = passthrough_functions(plan)
    wanted += [t["vf"]["address"] for t in plan.get("tenants") or () if t.get("vf")]
    wrong = ["%s on %s" % (a, drivers.get(a) or "no driver") for a in wanted
             if drivers.get(a) != "vfio-pci"]
    # The IOMMU facts' GPUs are those of the host's GPU selection (gpu_devices): a planned
    # GPU they do not count was planned with another selection than the facts were read.
    counted = (iommu or {}).get("gpus")
    not_counted = [] if counted is None else [
        g.get("address") for t in plan.get("tenants") or () for g in t.get("gpus") or ()
        if g.get("address") not in {c.get("address") for c in counted}]
    if not wanted:
        return _check("vfio", "Devices on vfio-pci", NOT_RUN, "no device to pass through")
    if wrong or not_counted:
        faults = ["not on vfio-pci: " + ", ".join(wrong)] if wrong else []
        if not_counted:
            faults.append("planned GPUs the IOMMU facts do not count as GPUs: %s (read the "
                          "facts with the plan's gpu_devices, gpuhost_gpu_devices)"
                          % ", ".join(not_counted))
        return _check("vfio", "Devices on vfio-pci", FAIL, "; ".join(faults))
    return _check("vfio", "Devices on vfio-pci", PASS, "%d functions on vfio-pci" % len(wanted))


def check_vf_settings(plan, iommu):
    """Each tenant VF's MAC (when the plan gives one), VLAN, spoof checking and trust as
    the PF reports them (``iommu``: the gpuhost_iommu fact, whose ``sriov_pfs`` carry
    each VF's ``settings`` on the live host) against the plan's ``vf`` entry."""
    title = "Tenant VFs isolated as planned (MAC, VLAN, spoofchk, trust)"
    pfs = {pf["address"]: pf for pf in (iommu or {}).get("sriov_pfs") or ()}
    problems, unread, checked = [], [], 0
    for tenant in plan.get("tenants") or ():
        vf = tenant.get("vf")
        if not vf:
            continue
        pf = pfs.get(vf.get("pf"))
        found = [v for v in (pf or {}).get("vfs") or () if v.get("address") == vf["address"]]
        if not found:
            # A VF that does not exist yet is the vfio check's finding.
            unread.append("%s: VF %s does not exist" % (tenant["name"], vf["address"]))
            continue
        have = found[0].get("settings")
        if not have:
            unread.append("%s: %s" % (tenant["name"], pf.get("vf_settings_error")
                                      or "VF %s settings not read (not the live host)"
                                      % vf["address"]))
            continue
        mismatches = setting_mismatches(vf_settings(vf), have)
        if mismatches:
            problems.append("%s VF %s (VF %s of %s): %s; run the sriov_irq stage, and "
                            "restart the tenant if its domain set them"
                            % (tenant["name"], vf["address"], found[0].get("index"),
                               vf.get("pf"), ", ".join(mismatches)))
        checked += 1
    if problems:
        return _check("vf_settings", title, FAIL, "; ".join(problems + unread))
    if not checked:
        return _check("vf_settings", title, NOT_RUN,
                      "; ".join(unread) if unread else "no tenant has a VF")
    detail = "%d tenant VF(s) as planned" % checked
    if unread:
        detail += "; not read: " + "; ".join(unread)
    return _check("vf_settings", title, PASS, detail)


def check_numa(plan, devices, domain_pins, pins_error=None):
    """``devices``: address -> {"numa_node": node or None, ...} (host_facts' ``devices``
    subset; None or -1 is a node the kernel does not know); ``domain_pins``: tenant ->
    {vcpu: cpulist} as libvirt reports it (host_facts' ``libvirt.vcpu_pins``; None or
    absent when the domain is not defined); ``pins_error``: why libvirt could not be
    read (host_facts' ``libvirt.error``), shown instead of "not defined"."""
    problems = []
    checked = 0
    for tenant in plan.get("tenants") or ():
        for node, addresses in functions_by_node(tenant):
            for address in addresses:
                have = ((devices or {}).get(address) or {}).get("numa_node")
                if have is not None and int(have) >= 0 and int(have) != node:
                    problems.append("%s of %s is on node %s, the tenant%s on node %d"
                                    % (address, tenant["name"], have,
                                       "'s guest cell for it" if tenant.get("guest_cells") else "", node))
        read = (domain_pins or {}).get(tenant["name"])
        if read is None:
            problems.append("%s: %s" % (tenant["name"], "vCPU pins not read: %s" % pins_error if pins_error
                                        else "domain not defined (no vCPU pins to compare)"))
            continue
        pins = _vcpu_pins(read)
        for vcpu, cpu in enumerate(tenant.get("vcpu_pins") or ()):
            if pins.get(vcpu) != (int(cpu),):
                problems.append("%s vCPU %d runs on %s, the plan pins it to %s"
                                % (tenant["name"], vcpu, format_cpulist(pins.get(vcpu, ())) or "?",
                                   cpu))
        checked += 1
    title = "GPU/VF, vCPUs and memory on one NUMA node"
    if problems:
        return _check("numa", title, FAIL, "; ".join(problems))
    if not plan.get("tenants"):
        return _check("numa", title, NOT_RUN, "no tenant")
    return _check("numa", title, PASS, "%d tenants pinned as planned" % checked)


def check_gpu_state(plan, devices):
    """``devices``: host_facts' ``devices`` subset. Each planned GPU answers on its bus,
    reports no fatal AER error and has its link at full width (an x8 link for an x16 GPU
    halves its bandwidth); a lower link speed and non-fatal errors are named, not failed
    (a GPU lowers its link speed when idle)."""
    problems, said, checked = [], [], 0
    for tenant in plan.get("tenants") or ():
        for gpu in tenant.get("gpus") or ():
            entry = (devices or {}).get(gpu["address"]) or {}
            if "unfit" not in entry:
                continue            # absent, or read by a host_facts that reads no state
            checked += 1
            problems.extend("%s: %s" % (tenant["name"], reason) for reason in entry["unfit"])
            said.extend("%s: %s" % (tenant["name"], note) for note in entry.get("notes") or ())
    title = "GPUs answer, links at full width, no fatal AER error"
    if problems:
        return _check("gpu_state", title, FAIL, "; ".join(problems + said))
    if not checked:
        return _check("gpu_state", title, NOT_RUN, "no planned GPU read on the host")
    return _check("gpu_state", title, PASS, "%d GPU(s) sound%s" % (checked, "; " + "; ".join(said) if said else ""))


def tenant_functions(tenant):
    """The PCI functions a tenant passes through: its GPUs' (with companions), the
    NVSwitches of a whole board, and its VF."""
    return [f for _node, functions in functions_by_node(tenant) for f in functions]


def tenants_allowed_without_evidence(allow):
    """``validate_allow_tenants_without_evidence``: true (every tenant), false, or a
    list of tenant names -> a predicate on a tenant name."""
    if isinstance(allow, bool):
        return lambda name: allow
    if allow is None:
        return lambda name: False
    if not isinstance(allow, (list, tuple)) or not all(isinstance(name, str) for name in allow):
        raise ValueError("validate_allow_tenants_without_evidence must be true, false or a list of "
                         "tenant names, got %r" % (allow,))
    names = set(allow)
    return lambda name: name in names


def realized_tenant(plan, tenant, seen, free_before=None, free_after=None):
    """One running tenant's realized items (realized.realized_items), with the tenant's
    planned functions and its node's housekeeping CPUs from the plan."""
    housekeeping = plan.get("housekeeping") or {}
    if tenant.get("guest_cells"):
        # each function's IRQs on the housekeeping CPUs of its own node
        housekeeping = {f: housekeeping.get(str(node)) for node, functions in functions_by_node(tenant)
                        for f in functions}
    else:
        housekeeping = housekeeping.get(str(tenant.get("node")))
    return realized_items(seen["placement"], tenant, tenant_functions(tenant), housekeeping,
                          free_before, free_after)


def check_realized(plan, realized_domains, allow_without_evidence=False):
    """``realized_domains``: host_facts' ``realized`` subset (tenant -> {"running", "pid",
    "placement"}). Every running tenant's QEMU threads, hugepage mappings, held VFIO
    groups (their devices on vfio-pci) and vfio IRQs (on its node's housekeeping CPUs)
    must be as planned (realized.realized_items, each difference named). A tenant that
    does not run has no guest evidence: it fails the check, named, unless
    ``allow_without_evidence`` (true, or a list of tenant names) accepts it."""
    allowed = tenants_allowed_without_evidence(allow_without_evidence)
    problems, observed, idle, accepted = [], [], [], []
    ratios = []
    for tenant in plan.get("tenants") or ():
        seen = (realized_domains or {}).get(tenant["name"]) or {}
        if not seen.get("running") or not seen.get("placement"):
            (accepted if allowed(tenant["name"]) else idle).append(tenant["name"])
            continue
        observed.append(tenant["name"])
        items = realized_tenant(plan, tenant, seen)
        if items:
            ratios.append(realized_ratio(items))
        problems += ["%s: %s" % (tenant["name"], item["finding"]) for item in items if item["as_planned"] is not True]
    title = "Running tenants' threads, hugepages, vfio groups and IRQs where the plan put them"
    notes = ""
    if idle:
        problems.append("no guest evidence (not running or not read), and the inventory does not accept "
                        "that (validate_allow_tenants_without_evidence): %s" % ", ".join(idle))
    if accepted:
        notes = "; not running, accepted without evidence: %s" % ", ".join(accepted)
    if problems:
        return _check("realized", title, FAIL, "; ".join(problems) + notes)
    if not observed:
        return _check("realized", title, NOT_RUN, "no tenant runs" + (": %s" % ", ".join(accepted) if accepted else ""))
    detail = ("%d running tenant(s) placed as planned, realized ratio %s (every vCPU, emulator and iothread, "
              "every hugepage mapping, every vfio device and IRQ)%s")
    return _check("realized", title, PASS, detail % (len(observed), "%g" % min(ratios) if ratios else "-", notes))


def _page_size_text(size_kib):
    return {"1048576": "1G", "2048": "2M"}.get(str(size_kib), "%s kB" % size_kib)


def check_hugepages(plan, pools, meminfo, running):
    """``pools``: node -> size_kib -> {"nr", "free"} and ``meminfo``: /proc/meminfo as
    {key: int}, both as host_facts' ``memory`` subset gives them; ``running``: tenant
    names whose domains run (their pages must be in use)."""
    problems = []
    # Per node, never the host-wide total: pages the kernel spread evenly over the nodes
    # (hugepages=N without the node form) add up right and sit on the wrong node.
    for node, sizes in sorted((plan.get("hugepages") or {}).items(), key=lambda i: int(i[0])):
        for size, pages in sorted(sizes.items(), key=lambda i: int(i[0])):
            pool = ((pools or {}).get(str(node)) or {}).get(str(size)) or {}
            nr, free = int(pool.get("nr", 0)), int(pool.get("free", 0))
            if nr < int(pages):
                problems.append("node %s has %d pages of %s, the plan needs %s"
                                % (node, nr, _page_size_text(size), pages))
            in_use = sum(int(t["hugepages"].get(node, 0)) for t in plan.get("tenants") or ()
                         if t["name"] in running and str(t.get("hugepage_size_kib")) == size
                         and t.get("hugepages"))
            if nr - free < in_use:
                problems.append("node %s: running tenants should hold %d pages of %s kB, "
                                "only %d are in use" % (node, in_use, size, nr - free))
    info = meminfo or {}
    summary = "meminfo HugePages_Total %s Free %s" % (info.get("HugePages_Total"),
                                                      info.get("HugePages_Free"))
    title = "Hugepages reserved per node and used by the VMs"
    if problems:
        return _check("hugepages", title, FAIL, "; ".join(problems) + "; " + summary)
    return _check("hugepages", title, PASS, summary)


def check_irqs(would_change, managed=(), absent=()):
    """``would_change``: IRQs irq_affinity would move (check mode); ``managed``: those the
    kernel manages itself; ``absent``: planned functions that do not exist on the host,
    so their IRQs could not be read (a VF the SR-IOV stage has not created yet)."""
    changing = sorted(set(int(i) for i in would_change or ()) - set(int(i) for i in managed or ()))
    title = "IRQs off tenant CPUs"
    problems = []
    if changing:
        problems.append("IRQs not on their housekeeping CPUs: %s"
                        % ", ".join(str(i) for i in changing))
    if absent:
        problems.append("not checked, the functions do not exist: %s (run the sriov_irq stage)"
                        % ", ".join(sorted(absent)))
    if problems:
        return _check("irq", title, FAIL, "; ".join(problems))
    return _check("irq", title, PASS, "every selected IRQ is pinned; irqbalance ban list in place")


def check_irqbalance(plan, irqbalance, managed=()):
    """irqbalance's ban list, its content and its effect. ``irqbalance``: host_facts'
    ``irqbalance`` subset (the file's ban list, the IRQ names irq_affinity found
    kernel-managed before, every IRQ's effective affinity); ``managed``: IRQ numbers this
    run found kernel-managed (irq_affinity's skipped_managed). The file must ban every
    tenant CPU of the plan (``irqbalance.banned_cpulist``), and no IRQ but a
    kernel-managed one (a per-CPU queue the kernel places itself) may fire on one.

    An IRQ allowed only on tenant CPUs (its smp_affinity_list) is one irqbalance cannot
    move off them: a kernel-managed queue that no irq_affinity run has met (a virtio or
    NVMe queue of that CPU), or an IRQ pinned there on purpose. The ban list is not at
    fault for it, so it is listed in the detail, not failed; a tenant's own vfio IRQs
    are the realized check's."""
    title = "irqbalance bans the tenant CPUs, and no IRQ it balances fires on one"
    tenant_cpus = set(parse_cpulist(str(((plan or {}).get("irqbalance") or {}).get("banned_cpulist") or "")))
    if not irqbalance:
        return _check("irqbalance", title, NOT_RUN, "irqbalance's config and the IRQs were not read")
    if not tenant_cpus:
        return _check("irqbalance", title, NOT_RUN, "the plan has no tenant CPU to keep IRQs off")
    problems = []
    config, key = irqbalance.get("config"), irqbalance.get("key")
    banned = irqbalance.get("banned_cpus")
    if not irqbalance.get("exists"):
        problems.append("%s does not exist: run the sriov_irq stage (irqbalance bans no CPU)" % config)
    elif key is None:
        problems.append("%s sets no ban list (IRQBALANCE_BANNED_CPULIST or IRQBALANCE_BANNED_CPUS): "
                        "run the sriov_irq stage" % config)
    elif banned is None:
        problems.append("%s in %s is no CPU list: run the sriov_irq stage" % (key, config))
    else:
        left = tenant_cpus - set(parse_cpulist(banned))
        if left:
            problems.append("%s=%s leaves tenant CPU(s) %s to irqbalance: run the sriov_irq stage"
                            % (key, banned, format_cpulist(left)))
    managed_names = set(irqbalance.get("kernel_managed_names") or ())
    managed_numbers = set(int(n) for n in managed or ())
    skipped, unread, tenant_only, legacy = 0, [], [], []
    for irq in irqbalance.get("irqs") or ():
        if int(irq["irq"]) in managed_numbers or irq.get("name") in managed_names:
            skipped += 1
            continue
        if irq.get("cpus") and set(irq["cpus"]) <= tenant_cpus:
            tenant_only.append(str(irq["irq"]))
            continue
        if irq.get("effective") is None:
            unread.append(str(irq["irq"]))
            continue
        on = tenant_cpus & set(irq["effective"])
        if on and "IO-APIC" in str(irq.get("chip") or ""):   # IR-IO-APIC with remapping
            # A legacy GSI (the lab's i8042 keyboard and mouse, IRQ 1 and 12): the lab's
            # first converge found irqbalance had not moved them off the banned CPUs yet
            # (its second had), and irq_affinity does not pin them: not failed, named
            # in a failure's detail.
            legacy.append("%s (%s) on %s" % (irq["irq"], irq.get("name") or "no action",
                                             format_cpulist(on)))
            continue
        if on:
            problems.append("IRQ %s (%s) fires on tenant CPU(s) %s, which irqbalance's ban list should keep it off"
                            % (irq["irq"], irq.get("name") or "no action", format_cpulist(on)))
    notes = ("; %d kernel-managed IRQ(s) not counted" % skipped if skipped else "") + \
        ("; allowed only on tenant CPUs, so not irqbalance's to move: IRQ %s" % ", ".join(tenant_only)
         if tenant_only else "") + \
        ("; effective affinity not read: IRQ %s" % ", ".join(unread) if unread else "") + \
        ("; legacy IO-APIC IRQ(s) irqbalance leaves on tenant CPUs: %s" % ", ".join(legacy)
         if legacy else "")
    if problems:
        return _check("irqbalance", title, FAIL, "; ".join(problems) + notes)
    # A pass says only what is stable: how many IRQs sit where, and which legacy or
    # tenant-only ones irqbalance has not moved yet, change from one run to the next
    # (the lab's second converge found them moved), and the report is written only when
    # it changes, so that a re-run of validate on a host that is right changes nothing.
    return _check("irqbalance", title, PASS, "%s=%s bans the tenant CPUs %s; no IRQ irqbalance "
                  "balances fires on one" % (key, banned, format_cpulist(tenant_cpus)))


def check_evidence(check_id, title, evidence):
    """Guest/benchmark results reported by later stages: {tenant: {"passed", "detail"}}."""
    if not evidence:
        # Both stages read the GPU through nvidia-smi inside a tenant guest they reach.
        return _check(check_id, title, NOT_RUN, "no result reported: the %s stage did not run "
                      "(it needs a tenant guest it can reach, with an NVIDIA GPU)" % check_id)
    failed = ["%s: %s" % (name, r.get("detail")) for name, r in sorted(evidence.items())
              if not r.get("passed")]
    if failed:
        return _check(check_id, title, FAIL, "; ".join(failed))
    return _check(check_id, title, PASS, ", ".join(sorted(evidence)))


def _figure(value):
    return "?" if value is None else "%g" % value


def _health_line(tenant, source, health):
    gpus = health.get("gpus") or []
    figures = ", ".join("%s %s C, %s W" % (gpu.get("pci_bus_id") or gpu.get("index"),
                                           _figure(gpu.get("temperature_c")), _figure(gpu.get("power_draw_w")))
                        for gpu in gpus)
    return "%s (%s): %d GPU(s)%s" % (tenant, source, len(gpus), ", " + figures if figures else "")


def check_gpu_health(guest_results, benchmark_results=None):
    """Each tenant's GPU health (runbook section 14: nvidia-smi healthy, temperature and
    power within bounds; item 3: MIG off on a whole-GPU tenant), from the guest stage's
    read (``gpuhost_guest_results[tenant].health``: the gpu_health module's findings)
    and, newer, the benchmark stage's read after the load
    (``gpuhost_benchmark_results[tenant].gpu_health``). The latest read of each tenant
    decides; a failing finding fails the check with its detail."""
    title = "Guest GPU health (temperature, ECC, MIG off, persistence)"
    reads = {}
    for name, result in sorted((guest_results or {}).items()):
        if (result or {}).get("health"):
            reads[name] = ("guest stage", result["health"])
    for name, result in sorted((benchmark_results or {}).items()):
        section = (result or {}).get("gpu_health")
        if section and section.get("read"):
            reads[name] = ("after the benchmark", section)
    if not reads:
        return _check("gpu_health", title, NOT_RUN,
                      "no GPU health read (no NVIDIA GPU in a guest, or the guest stage has not run)")
    problems, passed = [], []
    for name, (source, health) in sorted(reads.items()):
        failing = [f["detail"] for f in health.get("findings") or () if not f.get("passed")]
        if failing:
            problems.append("%s (%s): %s" % (name, source, "; ".join(failing)))
        else:
            passed.append(_health_line(name, source, health))
    if problems:
        return _check("gpu_health", title, FAIL, "; ".join(problems + passed))
    return _check("gpu_health", title, PASS, "; ".join(passed))


def _domains_waiting(results):
    """libvirt_pinned_domain's loop results (the vm role's): each running tenant whose
    persistent definition this run changed (or would, in check mode)."""
    entries = []
    for result in results or ():
        if not (result or {}).get("restart_required"):
            continue
        # A rebuilt cloud-init seed the guest has open changes no element: its step says it.
        changed = list(result.get("changed_elements") or ()) or \
            [a for a in result.get("actions") or () if a not in ("define", "start")]
        entries.append({"tenant": (result.get("item") or {}).get("name") or result.get("name"),
                        "stage": "vm", "changed": changed,
                        "why": "runs with its old definition; the new one applies at its next "
                               "start (the vm role never restarts a tenant: shut it down and start "
                               "it in a maintenance window)"})
    return entries


def _vfs_waiting(results):
    """sriov_vfs's loop results (the sriov_irq role's): each running tenant holding a VF
    whose MAC this run changed (its ``running_domain_vfs``)."""
    entries = []
    for result in results or ():
        for vf in (result or {}).get("running_domain_vfs") or ():
            if not vf.get("restart_required"):
                continue
            for domain in vf.get("domains") or ():
                entries.append({
                    "tenant": domain, "stage": "sriov_irq",
                    "changed": ["VF %s (VF %s of %s): %s" % (
                        vf.get("address"), vf.get("index"), result.get("pf"),
                        ", ".join(vf.get("changed") or ()))],
                    "why": "the PF set the VF's MAC under the running guest, whose VF driver reads "
                           "it only when it probes the VF: restart the tenant (the VLAN, spoof "
                           "checking and trust apply at once)"})
    return entries


# The stages whose module results can leave a running tenant waiting for its restart.
# Not listed, since they change nothing a running tenant waits for: the numa stage
# (hugepage pools and the host's CPUs; a tenant's own CPUs, memory and node are in its
# domain definition, so the vm stage's), the IRQ pins and irqbalance's ban list (applied
# at once) and the kernel arguments (a host reboot: gpuhost_reboot_required).
RESTART_READERS = {"vm": _domains_waiting, "sriov_irq": _vfs_waiting}


def restart_required_add(current, stage, results):
    """The run's list of tenants waiting for a restart (``gpuhost_restart_required``:
    ``[{tenant, stage, changed, why}]``), with ``stage``'s entries replaced by those of
    its module's registered loop ``results``, so that a stage run twice counts once."""
    if stage not in RESTART_READERS:
        raise ValueError("restart_required_add: stage %r is not one of %s"
                         % (stage, ", ".join(sorted(RESTART_READERS))))
    kept = [entry for entry in current or () if entry.get("stage") != stage]
    return sorted(kept + RESTART_READERS[stage](results),
                  key=lambda e: (str(e.get("tenant")), str(e.get("stage"))))


def restart_summary(entries):
    """One line naming every tenant waiting for a restart, with what changed."""
    if not entries:
        return "no running tenant waits for a restart"
    tenants = {}
    for entry in entries:
        tenants.setdefault(entry["tenant"], []).extend(entry.get("changed") or ())
    return "%d tenant(s) wait for a restart: %s; each change applies at the tenant's next start " \
        "(no tenant is restarted)" % (len(tenants), "; ".join(
            "%s (%s)" % (name, ", ".join(changed)) for name, changed in sorted(tenants.items())))


def report(host, checks, restart_required=None):
    """``restart_required``: the run's tenants waiting for a restart (see
    restart_required_add), a section of its own: a report, never a failed check."""
    failed = [c["id"] for c in checks if c["status"] == FAIL]
    return {"host": host, "passed": not failed, "failed": failed, "checks": checks,
            "restart_required": list(restart_required or ())}


def checklist(plan, host, iommu, facts, irqs=None, managed_irqs=(), absent_functions=(),
              allow_without_evidence=False, guest_results=None, benchmark_results=None,
              restart_required=None):
    """The runbook's section 14 checklist for one host, as the validate role asks it:
    every check above on what the role read (``facts``: host_facts' fact, with its
    ``libvirt`` subset; ``irqs``: irq_affinity's check-mode result), in the report's
    order, then ``report``."""
    libvirt = facts["libvirt"]
    irqs = irqs or {}
    managed = list(managed_irqs or ())
    guest_results = guest_results or {}
    benchmark_results = benchmark_results or {}
    checks = [
        check_iommu(iommu),
        check_vfio(plan, iommu),
        check_vf_settings(plan, iommu),
        check_numa(plan, facts["devices"], libvirt["vcpu_pins"], libvirt.get("error")),
        check_gpu_state(plan, facts["devices"]),
        check_hugepages(plan, facts["memory"]["hugepages"], facts["memory"]["meminfo"], libvirt["running"]),
        check_realized(plan, facts["realized"], allow_without_evidence),
        check_irqs(irqs.get("changed_irqs") or [], managed, absent_functions),
        check_irqbalance(plan, facts["irqbalance"], managed + list(irqs.get("skipped_managed") or [])),
        check_evidence("guest", "Guest sees its GPU (nvidia-smi)", guest_results),
        check_evidence("benchmark", "Benchmark met its targets (P95/P99)", benchmark_results),
        check_gpu_health(guest_results, benchmark_results),
    ]
    return report(host, checks, restart_required)


def report_markdown(data):
    waiting = data.get("restart_required") or []
    lines = ["# Validation of %s: %s; %s" % (markdown_text(data["host"]), "PASS" if data["passed"] else "FAIL",
                                             restart_summary(waiting)),
             "", "| Check | Status | Detail |", "|---|---|---|"]
    for check in data["checks"]:
        lines.append("| %s | %s | %s |" % (check["title"], check["status"].upper(), markdown_text(check["detail"])))
    lines += ["", "## Tenants waiting for a restart", ""]
    if waiting:
        lines += ["| Tenant | Stage | Changed | Why |", "|---|---|---|---|"]
        lines += ["| %s | %s | %s | %s |" % (
            markdown_text(e["tenant"]), markdown_text(e["stage"]), markdown_text(", ".join(e.get("changed") or ())),
            markdown_text(e.get("why", ""))) for e in waiting]
    else:
        lines.append("None: no stage of this run changed what a running tenant sees at its next start.")
    return "\n".join(lines) + "\n"


def report_json(data):
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def bios_findings(report, require_iommu_table=True, fail_on_bar_errors=True, gpu_bar64_min_bytes=1):
    """What stops the BIOS preflight, each with its fix (an empty list: nothing does).

    ``report``: the bios role's ``gpuhost_bios_report`` (the tables, the ACS override
    arguments, ``sriov_pfs`` PF -> sriov_totalvfs or None, the BAR error lines and each
    planned GPU's 64-bit BAR bytes). All findings at once, so that one run shows an SRE
    everything the firmware needs rather than one fix per run."""
    findings = []
    if require_iommu_table and not report.get("iommu_tables"):
        findings.append("Neither the DMAR nor the IVRS ACPI table is present, so the firmware has the IOMMU "
                        "off. Enable Intel VT-d (or AMD-Vi/IOMMU) in the BIOS (runbook section 1), or set "
                        "bios_redfish_enabled with the vendor's attribute, then reboot.")
    if report.get("acs_override"):
        findings.append("%s is active. It tears down the isolation between devices of one IOMMU group "
                        "(runbook section 13, \"the last resort\"). Remove it from the kernel command line "
                        "and move the GPU to a slot with a clean group." % " ".join(report["acs_override"]))
    for pf, total in sorted((report.get("sriov_pfs") or {}).items()):
        if not total or int(total) <= 0:
            findings.append("PF %s reports no SR-IOV VFs (sriov_totalvfs %s). Enable SR-IOV in the BIOS and in "
                            "the NIC firmware (mlxconfig SRIOV_EN=1 NUM_OF_VFS=8 on mlx5), then reboot."
                            % (pf, total if total is not None else "missing"))
    bar_errors = report.get("bar_errors") or []
    if fail_on_bar_errors and bar_errors:
        findings.append("The kernel log shows BAR assignment failures: %s. Enable Above 4G Decoding (and "
                        "Resizable BAR if offered) in the BIOS and keep the IOMMU on (runbook section 13). "
                        "Set bios_fail_on_bar_errors=false to only report this." % " / ".join(bar_errors[:5]))
    for gpu, assigned in sorted((report.get("gpu_bar64_bytes") or {}).items()):
        if int(assigned or 0) < int(gpu_bar64_min_bytes):
            findings.append("GPU %s has %s bytes of 64-bit prefetchable BARs assigned, less than %s. Enable "
                            "Above 4G Decoding in the BIOS." % (gpu, assigned or 0, gpu_bar64_min_bytes))
    return findings
