# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a running tenant really is: its QEMU process's threads and memory, read from
/proc below a root, and how that compares with the plan.

A domain's XML says what libvirt was asked; the kernel says what happened. Each QEMU
thread's ``Cpus_allowed_list`` (what the scheduler may use, cgroup cpusets included)
and the process's ``numa_maps`` (which node each mapping's pages are on, and whether
they are hugepages) are the evidence the runbook's checklist asks for. QEMU names its
vCPU threads ``CPU <n>/<accelerator>`` (``CPU 0/KVM``, ``CPU 0/TCG``) and libvirt's
iothreads ``IO iothread<n>``; every other thread is an emulator thread, which libvirt's emulatorpin covers.

The devices: the /dev/vfio/<group> nodes QEMU holds open (its /proc/PID/fd links,
read with readlink only, never followed), the drivers of each group's devices, and the
vfio IRQs of those devices (/proc/interrupts rows ``vfio-msix[N](ADDR)``,
``vfio-msi[N](ADDR)``, ``vfio-intx(ADDR)``, which exist once the guest enables them)
with their smp_affinity_list, which the libvirt hook pins to housekeeping CPUs.

``realized_items`` turns that into one item per thing the plan decides (each vCPU
thread, each emulator thread and iothread, each hugepage mapping, each planned
function, each vfio IRQ); ``realized_ratio`` is the share of items as planned. What
could not be read is an item that is not as planned (``as_planned`` None), never a
pass.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    read_irqs, vfio_actions)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import format_cpulist, parse_cpulist

_VCPU_THREAD_RE = re.compile(r"^CPU ([0-9]+)/[A-Za-z0-9_-]+\Z")
# libvirt names its iothreads iothread<N>; QEMU's own monitor thread ("IO mon_iothread")
# is an emulator thread, which emulatorpin covers.
_IOTHREAD_RE = re.compile(r"^IO (iothread[0-9]+)\Z")
_NODE_PAGES_RE = re.compile(r"^N([0-9]+)=([0-9]+)\Z")
_PAGE_SIZE_RE = re.compile(r"^kernelpagesize_kB=([0-9]+)\Z")
# A pid, and a thread id under /proc/PID/task: [0-9], not \d, and never 0.
_PROCESS_ID_RE = re.compile(r"^[1-9][0-9]{0,9}\Z")
# An fd link's target naming a VFIO group node (/dev/vfio/vfio is the container, and
# /dev/vfio/devices/vfioN an iommufd cdev: neither names a group).
_VFIO_GROUP_RE = re.compile(r"^/dev/vfio/([0-9]{1,9})\Z")
_PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
# A domain's pid file, written by libvirt's QEMU driver when it starts the domain.
LIBVIRT_PID_FILE = "run/libvirt/qemu/%s.pid"


def domain_pid(name, root="/"):
    """The QEMU pid libvirt recorded for a running domain, or None (not running, or the
    file holds no pid). ``name`` must already be a validated tenant name."""
    text = sysfs.read_text(sysfs.path(root, LIBVIRT_PID_FILE % name))
    return int(text) if text and _PROCESS_ID_RE.match(text) else None


def read_domains(names, root="/"):
    """Per domain of ``names`` (validated tenant names): {running, pid, placement}, where
    ``placement`` is read_realized's answer (None when the domain does not run)."""
    answer = {}
    for name in names:
        pid = domain_pid(name, root)
        answer[name] = {"running": pid is not None, "pid": pid,
                        "placement": read_realized(pid, root) if pid else None}
    return answer


def read_threads(pid, root="/"):
    """[{tid, name, cpus}] of every thread of ``pid``, sorted by tid; ``cpus`` is the
    sorted tuple of the thread's Cpus_allowed_list. Threads that end while they are
    read are left out."""
    task_dir = sysfs.path(root, "proc", str(int(pid)), "task")
    threads = []
    for entry in sorted(sysfs.list_dir(task_dir), key=lambda e: (len(e), e)):
        if not _PROCESS_ID_RE.match(entry):
            continue
        status = sysfs.read_text(os.path.join(task_dir, entry, "status"))
        if status is None:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        allowed = fields.get("Cpus_allowed_list", "").strip()
        name = sysfs.read_text(os.path.join(task_dir, entry, "comm"))
        if name is None:
            name = fields.get("Name", "").strip()
        threads.append({"tid": int(entry), "name": name,
                        "cpus": tuple(parse_cpulist(allowed)) if allowed else ()})
    return threads


def read_vfio_groups(pid, root="/"):
    """(groups, read): the VFIO group numbers whose /dev/vfio/<group> node ``pid`` holds
    open, sorted, from readlink of /proc/PID/fd/* below root (a link is read, never
    followed: its target is the process's view, not a path below root); ``read`` is
    False when the fd folder could not be listed (another user's process, no /proc)."""
    fd_dir = sysfs.path(root, "proc", str(int(pid)), "fd")
    try:
        entries = os.listdir(fd_dir)
    except OSError:
        return [], False
    groups = set()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            target = os.readlink(os.path.join(fd_dir, entry))
        except OSError:
            continue    # closed while read, or not a link
        match = _VFIO_GROUP_RE.match(target)
        if match:
            groups.add(int(match.group(1)))
    return sorted(groups), True


def read_group_devices(group, root="/"):
    """{address: driver or None} of the PCI functions in IOMMU group ``group``."""
    devices = {}
    folder = sysfs.path(root, "sys/kernel/iommu_groups", str(int(group)), "devices")
    for address in sorted(sysfs.list_dir(folder)):
        if _PCI_ADDRESS_RE.match(address):
            devices[address] = sysfs.link_name(root, sysfs.path(root, "sys/bus/pci/devices", address, "driver"))
    return devices


def read_vfio_irqs(addresses, root="/"):
    """[{irq, name, device, cpus, effective}] of the vfio-pci IRQs of ``addresses``, by
    IRQ number; ``cpus`` is the smp_affinity_list (None: unreadable), ``effective``
    the effective_affinity_list."""
    wanted = set(addresses)
    found = []
    if not wanted:
        return found
    for irq in read_irqs(root).values():
        if irq.number is None or not irq.name:
            continue
        for action, _kind, device in vfio_actions(irq.name):
            if device in wanted:
                found.append({"irq": irq.number, "name": action, "device": device,
                              "cpus": list(irq.smp_affinity_list) if irq.smp_affinity_list is not None else None,
                              "effective": list(irq.effective_affinity_list or ())})
    return sorted(found, key=lambda entry: (entry["irq"], entry["name"]))


def _numa_maps_entries(text):
    """(address, page size in kB, hugepages?, [(node, pages)]) of each mapping of a
    numa_maps text: ``kernelpagesize_kB``, ``N<node>=<pages>``, and ``huge`` (or pages
    larger than 4 kB) for a hugepage mapping."""
    for line in (text or "").splitlines():
        tokens = line.split()
        if len(tokens) < 2:
            continue
        page_kib, huge, counts = 4, False, []
        for token in tokens[2:]:
            size = _PAGE_SIZE_RE.match(token)
            nodes = _NODE_PAGES_RE.match(token)
            if size:
                page_kib = int(size.group(1))
            elif nodes:
                counts.append((int(nodes.group(1)), int(nodes.group(2))))
            elif token == "huge":
                huge = True
        yield tokens[0], page_kib, huge or page_kib > 4, counts


def parse_huge_mappings(text):
    """[{address, page_kib, pages: {node: pages}}] of each hugepage mapping of a
    numa_maps text (marked ``huge``, or pages larger than 4 kB)."""
    mappings = []
    for address, page_kib, huge, counts in _numa_maps_entries(text):
        if huge:
            pages = {}
            for node, count in counts:
                pages[node] = pages.get(node, 0) + count
            mappings.append({"address": address, "page_kib": page_kib, "pages": pages})
    return mappings


def hugepages_by_node(mappings):
    """{node: {page_kib: pages}} summed over hugepage mappings."""
    used = {}
    for mapping in mappings:
        for node, pages in mapping["pages"].items():
            sizes = used.setdefault(int(node), {})
            sizes[int(mapping["page_kib"])] = sizes.get(int(mapping["page_kib"]), 0) + int(pages)
    return used


def parse_numa_maps(text):
    """{"huge": {node: kB}, "other": {node: kB}} from a numa_maps text: each mapping's
    ``N<node>=<pages>`` times its ``kernelpagesize_kB``; a mapping marked ``huge`` (or with
    pages larger than 4 kB) counts as hugepages."""
    memory = {"huge": {}, "other": {}}
    for _address, page_kib, huge, counts in _numa_maps_entries(text):
        kind = "huge" if huge else "other"
        for node, pages in counts:
            memory[kind][node] = memory[kind].get(node, 0) + pages * page_kib
    return memory


def read_realized(pid, root="/"):
    """What the kernel shows of a running QEMU: vCPU threads by index, iothreads by id,
    emulator threads, each with its allowed CPUs, and the memory by node."""
    vcpus, iothreads, emulator = {}, {}, []
    for thread in read_threads(pid, root):
        vcpu = _VCPU_THREAD_RE.match(thread["name"])
        iothread = _IOTHREAD_RE.match(thread["name"])
        if vcpu:
            vcpus[int(vcpu.group(1))] = thread["cpus"]
        elif iothread:
            iothreads[iothread.group(1)] = thread["cpus"]
        else:
            emulator.append(thread)
    maps = sysfs.read_text(sysfs.path(root, "proc", str(int(pid)), "numa_maps"))
    groups, fds_read = read_vfio_groups(pid, root)
    group_devices = {group: read_group_devices(group, root) for group in groups}
    # A bridge in a held group stays on its own driver (pcieport): vfio accepts any
    # driver on a device whose header is not a normal one, so it is no finding.
    bridges = sorted(address for devices in group_devices.values() for address in devices
                     if (sysfs.read_text(sysfs.path(root, "sys/bus/pci/devices", address, "class")) or "")
                     .lower().startswith("0x0604"))
    addresses = sorted(address for devices in group_devices.values() for address in devices)
    mappings = parse_huge_mappings(maps)
    return {"pid": int(pid), "vcpus": vcpus, "iothreads": iothreads, "emulator": emulator,
            "memory_kib": parse_numa_maps(maps), "numa_maps_read": maps is not None,
            "huge_mappings": mappings, "hugepages": hugepages_by_node(mappings),
            "vfio": {"fds_read": fds_read, "groups": group_devices, "bridges": bridges},
            "vfio_irqs": read_vfio_irqs(addresses, root)}


def _item(kind, name, planned, observed, as_planned, finding=None):
    """One thing the plan decides. ``as_planned`` True, False, or None when the evidence
    could not be read (a finding too: unknown is not a pass)."""
    return {"kind": kind, "item": name, "planned": planned, "observed": observed,
            "as_planned": as_planned, "finding": None if as_planned is True else finding}


def _cpus(value):
    return None if value is None else format_cpulist(tuple(value))


def _thread_items(realized, tenant):
    vcpus = {int(index): tuple(cpus) for index, cpus in realized["vcpus"].items()}
    items = []
    pins = tenant.get("vcpu_pins") or []
    for index, pin in enumerate(pins):
        want = tuple(parse_cpulist(str(pin)))
        got = vcpus.get(index)
        name = "vCPU %d" % index
        if got is None:
            items.append(_item("vcpu", name, format_cpulist(want), None, False,
                               "vCPU %d: no QEMU thread 'CPU %d/...'" % (index, index)))
        else:
            items.append(_item("vcpu", name, format_cpulist(want), format_cpulist(got), got == want,
                               "vCPU %d runs on CPUs %s, planned %s" % (index, format_cpulist(got), format_cpulist(want))))
    extra = sorted(set(vcpus) - set(range(len(pins))))
    if extra:
        items.append(_item("vcpu", "vCPU %s" % ",".join(map(str, extra)), None,
                           ", ".join(format_cpulist(vcpus[index]) for index in extra), False,
                           "vCPU thread(s) %s not in the plan" % ", ".join(map(str, extra))))
    iothreads = {name: tuple(cpus) for name, cpus in realized["iothreads"].items()}
    for kind, threads, planned in (
            ("emulator", [(t["name"], tuple(t["cpus"])) for t in realized["emulator"]], tenant.get("emulator_cpus")),
            ("iothread", sorted(iothreads.items()), tenant.get("iothread_cpus"))):
        if not planned:
            continue    # the plan leaves these threads where libvirt puts them
        want = tuple(parse_cpulist(str(planned)))
        for name, cpus in threads:
            items.append(_item(kind, "%s thread %s" % (kind, name), format_cpulist(want), format_cpulist(cpus),
                               cpus == want, "%s thread %r runs on CPUs %s, planned %s"
                               % (kind, name, format_cpulist(cpus), format_cpulist(want))))
    return items


def planned_memory_kib(tenant):
    """{host node: KiB} of a tenant's memory as planned: per guest cell for a tenant over
    several nodes, else all of it on its memory_node (its node in plans before that)."""
    if tenant.get("guest_cells"):
        planned = {}
        for cell in tenant["guest_cells"]:
            node = int(cell["memory_node"])
            planned[node] = planned.get(node, 0) + int(float(cell.get("memory_gib") or 0) * 1024 * 1024)
        return planned
    node = tenant.get("memory_node")
    node = int(tenant.get("node") if node is None else node)
    return {node: int(float(tenant.get("memory_gib", 0) or 0) * 1024 * 1024)}


def _memory_items(realized, tenant, free_before=None, free_after=None):
    planned = planned_memory_kib(tenant)
    where = "node %s" % format_cpulist(planned)
    if not realized["numa_maps_read"]:
        return [_item("memory", "numa_maps", where, None, None,
                      "numa_maps of pid %d could not be read" % realized["pid"])]
    items = []
    for mapping in realized.get("huge_mappings") or ():
        pages = {int(n): int(p) for n, p in mapping["pages"].items() if int(p)}
        # one mapping per guest cell: all of it on one planned node
        home = max(pages, key=pages.get) if pages and len(planned) > 1 else None
        elsewhere = {n: p for n, p in pages.items()
                     if n not in planned or (home is not None and n != home)}
        misplaced = ", ".join("%d page(s) of %d kB on node %d" % (count, int(mapping["page_kib"]), other)
                              for other, count in sorted(elsewhere.items()))
        items.append(_item("memory", "hugepages at %s" % mapping["address"], where,
                           ", ".join("node %d: %d" % item for item in sorted(pages.items())) or "no pages",
                           not elsewhere, "hugepage mapping %s has %s, planned only on %s"
                           % (mapping["address"], misplaced,
                              "node %d" % home if home is not None else where)))
    huge = {int(n): int(kib) for n, kib in realized["memory_kib"]["huge"].items()}
    for node, want_kib in sorted(planned.items()):
        items += _node_memory_items(node, want_kib, huge, tenant, free_before, free_after)
    return items


def _node_memory_items(node, want_kib, huge, tenant, free_before, free_after):
    """The hugepage memory one node backs for the tenant, and the drop of its free pool."""
    items = []
    if want_kib:
        items.append(_item("memory", "hugepage memory on node %d" % node, "%d kB" % want_kib,
                           "%d kB" % huge.get(node, 0), huge.get(node, 0) >= want_kib,
                           "node %d backs %d kB of hugepage memory, the tenant has %d kB"
                           % (node, huge.get(node, 0), want_kib)))
    if free_before is not None and free_after is not None and want_kib:
        # free_hugepages of the tenant's node and page size, before and after the start:
        # the pool drops by the domain's size.
        size = int(tenant.get("hugepage_size_kib") or 2048)
        before = (free_before.get(str(node)) or {}).get(str(size), {})
        after = (free_after.get(str(node)) or {}).get(str(size), {})
        before = before.get("free") if isinstance(before, dict) else before
        after = after.get("free") if isinstance(after, dict) else after
        want = want_kib // size
        if before is None or after is None:
            items.append(_item("memory", "free hugepages on node %d" % node, "drop of %d" % want, None, None,
                               "free %d kB hugepages of node %d not read before and after" % (size, node)))
        else:
            drop = int(before) - int(after)
            items.append(_item("memory", "free hugepages on node %d" % node, "drop of %d" % want,
                               "drop of %d (%s -> %s)" % (drop, before, after), drop == want,
                               "free %d kB hugepages of node %d dropped by %d, the domain has %d"
                               % (size, node, drop, want)))
    return items


def _irq_housekeeping(name, housekeeping_cpus):
    """The CPUs a vfio IRQ belongs on: ``housekeeping_cpus`` (a cpulist), or for a tenant
    over several nodes ({function: cpulist}) those of the function the IRQ's name holds."""
    if isinstance(housekeeping_cpus, dict):
        devices = [device for _action, _kind, device in vfio_actions(name)]
        housekeeping_cpus = housekeeping_cpus.get(devices[0]) if devices else None
    return tuple(parse_cpulist(str(housekeeping_cpus))) if housekeeping_cpus else None


def _vfio_items(realized, functions, housekeeping_cpus):
    vfio = realized.get("vfio") or {}
    groups = {int(group): devices for group, devices in (vfio.get("groups") or {}).items()}
    held = {address: group for group, devices in groups.items() for address in devices}
    items = []
    for address in functions or ():
        if not vfio.get("fds_read"):
            items.append(_item("vfio", "device %s" % address, "held, vfio-pci", None, None,
                               "the fds of pid %d could not be read: is %s's group held?" % (realized["pid"], address)))
            continue
        group = held.get(address)
        driver = groups[group][address] if group is not None else None
        observed = "group %s, %s" % (group, driver or "no driver") if group is not None else "not held"
        items.append(_item("vfio", "device %s" % address, "held, vfio-pci", observed,
                           group is not None and driver == "vfio-pci",
                           "%s: QEMU does not hold its /dev/vfio group" % address if group is None else
                           "%s (group %d) is on %s, not vfio-pci" % (address, group, driver or "no driver")))
    # The group's other devices (an HDA function the plan does not name) must be on
    # vfio-pci too; a bridge keeps its own driver.
    bridges = set(vfio.get("bridges") or ())
    for group, devices in sorted(groups.items()):
        for address, driver in sorted(devices.items()):
            if address in (functions or ()) or address in bridges:
                continue
            items.append(_item("vfio", "device %s" % address, "vfio-pci (group %d)" % group, driver or "no driver",
                               driver == "vfio-pci", "%s, in group %d that QEMU holds, is on %s, not vfio-pci"
                               % (address, group, driver or "no driver")))
    for irq in realized.get("vfio_irqs") or ():
        name = "IRQ %d %s" % (int(irq["irq"]), irq["name"])
        want = _irq_housekeeping(irq["name"], housekeeping_cpus)
        got = tuple(irq["cpus"]) if irq["cpus"] is not None else None
        if want is None or got is None:
            items.append(_item("irq", name, _cpus(want), _cpus(got), None,
                               "%s: %s" % (name, "its smp_affinity_list could not be read" if got is None
                                           else "no housekeeping CPUs to compare with")))
            continue
        effective = tuple(irq.get("effective") or ())
        items.append(_item("irq", name, format_cpulist(want), format_cpulist(got),
                           got == want and set(effective) <= set(want),
                           "%s may fire on CPUs %s (effective %s), planned housekeeping %s"
                           % (name, format_cpulist(got), format_cpulist(effective) or "-", format_cpulist(want))))
    return items


def realized_items(realized, tenant, functions=(), housekeeping_cpus=None, free_before=None, free_after=None):
    """Every thing of the running tenant the plan decides, one item each: each vCPU
    thread, each emulator thread and iothread (when the plan pins them), each hugepage
    mapping and the hugepage size on the planned node (the drop of the node's free pages
    when ``free_before``/``free_after`` are given, {node: {size_kib: free}} or the memory
    subset's {node: {size_kib: {free}}}), each of ``functions`` (the tenant's planned
    PCI functions) held through its /dev/vfio group and on vfio-pci with its group's
    other devices, each vfio IRQ on exactly ``housekeeping_cpus``.

    ``realized``: read_realized's answer or the same after JSON (host_facts' result:
    keys become strings, tuples lists)."""
    return (_thread_items(realized, tenant) + _memory_items(realized, tenant, free_before, free_after)
            + _vfio_items(realized, functions, housekeeping_cpus))


def realized_ratio(items):
    """Items as planned / items checked (None without items); unknown counts against."""
    return round(sum(1 for item in items if item["as_planned"] is True) / len(items), 6) if items else None


def placement_findings(realized, tenant, functions=(), housekeeping_cpus=None, free_before=None, free_after=None):
    """Every way the running tenant differs from its plan entry, one line each (none: the
    placement is realized in full), in realized_items' order."""
    return [item["finding"] for item in realized_items(realized, tenant, functions, housekeeping_cpus,
                                                       free_before, free_after)
            if item["as_planned"] is not True]
