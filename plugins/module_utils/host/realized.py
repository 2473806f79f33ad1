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
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.cpuset import format_cpulist, parse_cpulist

_VCPU_THREAD_RE = re.compile(r"^CPU ([0-9]+)/[A-Za-z0-9_-]+\Z")
# libvirt names its iothreads iothread<N>; QEMU's own monitor thread ("IO mon_iothread")
# is an emulator thread, which emulatorpin covers.
_IOTHREAD_RE = re.compile(r"^IO (iothread[0-9]+)\Z")
_NODE_PAGES_RE = re.compile(r"^N([0-9]+)=([0-9]+)\Z")
_PAGE_SIZE_RE = re.compile(r"^kernelpagesize_kB=([0-9]+)\Z")
# A pid, and a thread id under /proc/PID/task: [0-9], not \d, and never 0.
_PROCESS_ID_RE = re.compile(r"^[1-9][0-9]{0,9}\Z")
# A domain's pid file, written by libvirt's QEMU driver when it starts the domain.
LIBVIRT_PID_FILE = "run/libvirt/qemu/%s.pid"


def domain_pid(name, root="/"):
    """The QEMU pid libvirt recorded for a running domain, or None (not running, or the
    file holds no pid). ``name`` must already be a validated tenant name."""
    text = sysfs.read_text(sysfs.path(root, LIBVIRT_PID_FILE % name))
    return int(text) if text and _PROCESS_ID_RE.match(text) else None


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


def parse_numa_maps(text):
    """{"huge": {node: kB}, "other": {node: kB}} from a numa_maps text: each mapping's
    ``N<node>=<pages>`` times its ``kernelpagesize_kB``; a mapping marked ``huge`` (or with
    pages larger than 4 kB) counts as hugepages."""
    memory = {"huge": {}, "other": {}}
    for line in (text or "").splitlines():
        tokens = line.split()
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
        kind = "huge" if huge or page_kib > 4 else "other"
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
    return {"pid": int(pid), "vcpus": vcpus, "iothreads": iothreads, "emulator": emulator,
            "memory_kib": parse_numa_maps(maps), "numa_maps_read": maps is not None}


def placement_findings(realized, tenant):
    """Every way the running tenant differs from its plan entry, one line each (none: the
    placement is realized in full). Checked: each planned vCPU has a thread allowed on
    exactly its pinned CPU; every emulator thread exactly on ``emulator_cpus``; every
    iothread exactly on ``iothread_cpus``; hugepage memory only on ``memory_node`` and
    no less than the tenant's memory."""
    # Either read_realized's own answer or the same data after JSON (host_facts' result):
    # keys become strings and tuples lists there.
    vcpus = {int(index): tuple(cpus) for index, cpus in realized["vcpus"].items()}
    iothreads = {name: tuple(cpus) for name, cpus in realized["iothreads"].items()}
    huge = {int(node): kib for node, kib in realized["memory_kib"]["huge"].items()}
    findings = []
    pins = tenant.get("vcpu_pins") or []
    for index, pin in enumerate(pins):
        want = tuple(parse_cpulist(str(pin)))
        got = vcpus.get(index)
        if got is None:
            findings.append("vCPU %d: no QEMU thread 'CPU %d/...'" % (index, index))
        elif got != want:
            findings.append("vCPU %d runs on CPUs %s, planned %s" % (index, format_cpulist(got), format_cpulist(want)))
    extra = sorted(set(vcpus) - set(range(len(pins))))
    if extra:
        findings.append("vCPU thread(s) %s not in the plan" % ", ".join(map(str, extra)))
    for kind, threads, planned in (
            ("emulator", [(t["name"], tuple(t["cpus"])) for t in realized["emulator"]], tenant.get("emulator_cpus")),
            ("iothread", sorted(iothreads.items()), tenant.get("iothread_cpus"))):
        if not planned:
            continue
        want = tuple(parse_cpulist(str(planned)))
        for name, cpus in threads:
            if cpus != want:
                findings.append("%s thread %r runs on CPUs %s, planned %s"
                                % (kind, name, format_cpulist(cpus), format_cpulist(want)))
    node = int(tenant.get("memory_node", tenant.get("node")))
    if not realized["numa_maps_read"]:
        findings.append("numa_maps of pid %d could not be read" % realized["pid"])
    else:
        elsewhere = {n: kib for n, kib in huge.items() if n != node and kib}
        if elsewhere:
            findings.append("hugepage memory on node(s) %s, planned only on node %s"
                            % (", ".join("%d (%d kB)" % item for item in sorted(elsewhere.items())), node))
        want_kib = int(float(tenant.get("memory_gib", 0) or 0) * 1024 * 1024)
        if want_kib and huge.get(node, 0) < want_kib:
            findings.append("node %s backs %d kB of hugepage memory, the tenant has %d kB"
                            % (node, huge.get(node, 0), want_kib))
    return findings
