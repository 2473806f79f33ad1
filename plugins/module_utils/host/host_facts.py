# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the roles read off a host, as plain data, in one module run (host_facts).

Each reader takes the root of a sysfs/procfs tree (``/`` on a live host, a recorded
tree in tests) and returns JSON-ready data; none runs a command. What only a running
host can answer (the journal, systemd, libvirt) is asked by the module, which hands the
answers to the pure functions here (:func:`kernel_log_matches`, :func:`vcpu_pins`, and
:func:`units.unit_refresh`, which host_units shares).

Why a module and not ``slurp``/``grep`` tasks: every task on a host starts a Python
interpreter there, seconds each on the lab under TCG, and a ``grep`` whose output a
filter parses breaks on the colons of PCI addresses and exits 2 on a missing file.
"""

from __future__ import annotations

import os
import posixpath
import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import reader
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import device_state, kernel_log, sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import format_cpulist
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    format_class_code, normalize_address, read_pci_functions)

# What the module can gather; each names one reader (or one question to the host).
GATHER_SUBSETS = ("firmware", "cpu_power", "memory", "devices", "kernel_log", "tuned",
                  "units", "initramfs", "libvirt", "packages", "iommu", "platform", "pci", "realized",
                  "irqbalance", "mechanisms")
# The facts the platform subset publishes: those of setup's distribution and pkg_mgr
# subsets that the roles choose their vars files and package tasks by.
PLATFORM_FACTS = ("distribution", "distribution_version", "distribution_major_version",
                  "distribution_release", "os_family", "pkg_mgr")

# The ACPI tables the firmware publishes when VT-d (DMAR) or AMD-Vi (IVRS) is enabled.
IOMMU_ACPI_TABLES = ("DMAR", "IVRS")
# The cpuidle states a report lists: the runbook keeps C1/C1E, so the first few tell.
CSTATE_COUNT = 5
# The attributes read per PCI function: absent ones are None.
_DEVICE_INT_ATTRIBUTES = ("numa_node", "sriov_totalvfs", "sriov_numvfs")
# [0-9], not \d: no kernel prints other digits, and int() would take them.
_MEMINFO_RE = re.compile(r"^([A-Za-z0-9_()]+):\s+([0-9]+)(?:\s+kB)?\s*\Z")
_HUGEPAGE_DIR_RE = re.compile(r"^hugepages-([0-9]+)kB\Z")
_NODE_DIR_RE = re.compile(r"^node([0-9]+)\Z")
_POOL_COUNTERS = (("nr", "nr_hugepages"), ("free", "free_hugepages"),
                  ("surplus", "surplus_hugepages"))


def read_firmware(root="/"):
    """The IOMMU ACPI tables present, the kernel command line (None when unreadable) and
    the ``pcie_acs_override`` arguments on it."""
    tables = [name for name in IOMMU_ACPI_TABLES
              if os.path.exists(sysfs.path(root, "sys/firmware/acpi/tables", name))]
    cmdline = sysfs.read_text(sysfs.path(root, "proc/cmdline"))
    return {"acpi_tables": tables, "cmdline": cmdline,
            "acs_override": [arg for arg in (cmdline or "").split()
                             if arg.startswith("pcie_acs_override=")]}


def read_cpu_power(root="/"):
    """cpu0's frequency governor (None without a cpufreq driver), its cpuidle state
    names in order, and intel_idle's max_cstate (None without intel_idle)."""
    cpu0 = sysfs.path(root, sysfs.SYS_CPU_DIR, "cpu0")
    cstates = []
    for index in range(CSTATE_COUNT):
        name = sysfs.read_text(os.path.join(cpu0, "cpuidle", "state%d" % index, "name"))
        if name:
            cstates.append(name)
    return {"governor": sysfs.read_text(os.path.join(cpu0, "cpufreq", "scaling_governor")),
            "cstates": cstates,
            "intel_idle_max_cstate": sysfs.read_text(
                sysfs.path(root, "sys/module/intel_idle/parameters/max_cstate"))}


def parse_meminfo(text):
    """/proc/meminfo (or a node's meminfo without its ``Node N`` prefix) as {key: int}:
    kB for sizes, a count for the HugePages_ lines. Lines of another shape are skipped."""
    values = {}
    for line in (text or "").splitlines():
        match = _MEMINFO_RE.match(line.strip())
        if match:
            values[match.group(1)] = int(match.group(2))
    return values


def _read_pools(hugepages_dir):
    pools = {}
    for entry in sysfs.list_dir(hugepages_dir):
        match = _HUGEPAGE_DIR_RE.match(entry)
        if match:
            pool_dir = os.path.join(hugepages_dir, entry)
            pools[match.group(1)] = {key: sysfs.read_int(os.path.join(pool_dir, name), 0)
                                     for key, name in _POOL_COUNTERS}
    return dict(sorted(pools.items(), key=lambda item: int(item[0])))


def read_memory(root="/"):
    """/proc/meminfo and every node's hugepage pools: ``{"meminfo": {key: int},
    "hugepages": {node: {size_kib: {"nr", "free", "surplus"}}}, "kernel_release"}`` with
    string keys (as JSON keeps them). A kernel without NUMA keeps its pools in
    /sys/kernel/mm/hugepages: they are node 0's. ``kernel_release`` is
    /proc/sys/kernel/osrelease (None when unreadable): whether the kernel reads the
    per-node ``hugepages=`` form depends on it (kernel_cmdline.kernel_takes_node_hugepages)."""
    memory = {"meminfo": parse_meminfo(sysfs.read_text(sysfs.path(root, "proc/meminfo"))),
              "hugepages": {},
              "kernel_release": sysfs.read_text(sysfs.path(root, "proc/sys/kernel/osrelease"))}
    node_base = sysfs.path(root, sysfs.SYS_NODE_DIR)
    if not os.path.isdir(node_base):
        memory["hugepages"]["0"] = _read_pools(sysfs.path(root, "sys/kernel/mm/hugepages"))
        return memory
    nodes = sorted(int(match.group(1)) for match in map(_NODE_DIR_RE.match, sysfs.list_dir(node_base))
                   if match)
    for node in nodes:
        memory["hugepages"][str(node)] = _read_pools(
            os.path.join(node_base, "node%d" % node, "hugepages"))
    return memory


def pool_pages(memory, node, size_kib, counter="nr"):
    """One counter of one pool from read_memory()'s answer; 0 for a pool the kernel lacks."""
    pool = ((memory or {}).get("hugepages") or {}).get(str(node), {}).get(str(size_kib)) or {}
    return int(pool.get(counter, 0))


def read_devices(addresses, root="/"):
    """Per PCI function (canonical address): whether it exists, its NUMA node (None when
    the kernel knows none), SR-IOV counts and bound driver; None for what it lacks; and
    for a present one its ``state`` (device_state: whether it answers on its bus, power
    state, link, AER counters, the kernel log's reset messages of this boot), the
    ``unfit`` reasons that state gives and its ``notes``.
    Addresses are checked first, so a hostile one never becomes a path."""
    devices = {}
    log = kernel_log.read_kernel_log(root) if addresses else None
    for index, address in enumerate(addresses or ()):
        canonical = normalize_address(address, field="devices[%d]" % index)
        dev_dir = sysfs.path(root, "sys/bus/pci/devices", canonical)
        entry = {"present": os.path.isdir(dev_dir)}
        for attribute in _DEVICE_INT_ATTRIBUTES:
            entry[attribute] = sysfs.read_int(os.path.join(dev_dir, attribute))
        if entry["numa_node"] is not None and entry["numa_node"] < 0:
            entry["numa_node"] = None   # the kernel's -1: no node known, as pci.py says it
        entry["driver"] = sysfs.link_name(root, os.path.join(dev_dir, "driver")) if entry["present"] else None
        if entry["present"]:
            state = device_state.read_device_state(canonical, root, kernel_log=log)
            # No mark of when each GPU was last sound here (the ledger keeps it): the
            # kernel log's reset failures of this boot are named, not judged.
            entry.update(state=state.as_dict(),
                         unfit=device_state.unfit_reasons(state, judge_kernel_log=False),
                         notes=device_state.notes(state))
        devices[canonical] = entry
    return devices


def read_pci(root="/"):
    """Every PCI function below root: its vendor and device IDs (four hex digits, as
    lspci -n prints them; None when unreadable), its class code and its bound driver.
    What a tenant guest's role asks ("is an NVIDIA GPU visible?") without a command."""
    def hex4(number):
        return "%04x" % number if number is not None else None
    return {address: {"vendor": hex4(function.vendor_id), "device": hex4(function.device_id),
                      "class": format_class_code(function.class_code), "driver": function.driver}
            for address, function in read_pci_functions(root).items()}


def read_tuned(root="/"):
    """The profile tuned applies (what ``tuned-adm profile`` last selected, which tuned
    keeps in /etc/tuned/active_profile and loads when it starts); None when unset."""
    text = sysfs.read_text(sysfs.path(root, "etc/tuned/active_profile"))
    return {"active_profile": text or None}


# dpkg's database of what is installed; a status file past this size is not one a host
# of this kind has (a full desktop's is a few MiB), so it is not read at all.
DPKG_STATUS = "var/lib/dpkg/status"
DPKG_STATUS_MAX_BYTES = 64 * 1024 * 1024
# The package states that count as installed. Stricter than python-apt's is_installed,
# which also counts half-installed and unpacked packages: a role that finds such a
# package "missing" runs the package manager, which is what repairs it.
_DPKG_INSTALLED_STATES = ("installed", "triggers-pending", "triggers-awaited")
_DPKG_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]*\Z")
_DPKG_FIELD_RE = re.compile(r"^([A-Za-z0-9-]+):(.*)\Z")
_DPKG_WORD_RE = re.compile(r"^[A-Za-z0-9.+:~_-]+\Z")


def _dpkg_stanzas(text):
    """The status file's stanzas as dicts of the single-line fields they hold (the long
    ones, Description and Conffiles, continue on indented lines and are not needed)."""
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields = {}
            continue
        match = _DPKG_FIELD_RE.match(line)
        if match and match.group(1) not in fields:
            fields[match.group(1)] = match.group(2).strip()
    if fields:
        yield fields


def parse_dpkg_status(text):
    """Installed packages in package_facts' shape for its apt manager (name -> list of
    {name, version, arch, category, source}; a package of a foreign architecture is
    named ``name:arch``, as python-apt names it). ``origin`` is not given: the status
    file does not record where a package came from. Garbled stanzas are left out."""
    stanzas = [fields for fields in _dpkg_stanzas(text)
               if _DPKG_NAME_RE.match(fields.get("Package", ""))
               and _DPKG_WORD_RE.match(fields.get("Version", ""))]
    native = next((fields.get("Architecture") for fields in stanzas if fields["Package"] == "dpkg"), None)
    packages = {}
    for fields in stanzas:
        status = fields.get("Status", "").split()
        if len(status) != 3 or status[1] != "ok" or status[2] not in _DPKG_INSTALLED_STATES:
            continue
        arch = fields.get("Architecture", "")
        if not _DPKG_WORD_RE.match(arch):
            continue
        name = fields["Package"] if arch in ("all", native) or native is None else "%s:%s" % (fields["Package"], arch)
        packages.setdefault(name, []).append({
            "name": name, "version": fields["Version"], "arch": arch,
            "category": fields.get("Section") or None, "source": "apt"})
    return packages


def read_dpkg_packages(root="/"):
    """The installed packages below ``root`` from dpkg's status file, or None when the
    host has no readable one (not a dpkg host, or a file too large to be one)."""
    try:
        data = reader.read_bytes(sysfs.path(root, DPKG_STATUS), max_bytes=DPKG_STATUS_MAX_BYTES)
    except (OSError, GpuhostError):
        return None
    if b"\x00" in data:
        return None
    return parse_dpkg_status(reader.decode_text(data))


# rpm's answer, a line a package: the tab-separated fields package_facts' rpm manager gives.
RPM_QUERY_ARGV = ["rpm", "--query", "--all", "--queryformat",
                  "%{NAME}\\t%{EPOCH}\\t%{VERSION}\\t%{RELEASE}\\t%{ARCH}\\n"]


def parse_rpm_query(text):
    """``rpm -qa`` lines (RPM_QUERY_ARGV) in package_facts' shape for rpm (name -> list of
    {name, version, release, epoch, arch, source}); rpm's ``(none)`` epoch is None."""
    packages = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 5 or not all(_DPKG_WORD_RE.match(part) or part == "(none)" for part in parts):
            continue
        name, epoch, version, release, arch = parts
        packages.setdefault(name, []).append({
            "name": name, "version": version, "release": release,
            "epoch": None if epoch == "(none)" else epoch,
            "arch": None if arch == "(none)" else arch, "source": "rpm"})
    return packages


def kernel_log_matches(lines, pattern):
    """The kernel log lines ``pattern`` (a regular expression) finds, in order."""
    try:
        compiled = re.compile(pattern)
    except (re.error, TypeError) as err:
        raise GpuhostError("%r is not a regular expression: %s" % (pattern, err),
                           field="kernel_log_pattern",
                           fix="give a Python regular expression, such as 'BAR \\\\d+: (no space|failed)'") from None
    return [line for line in lines if compiled.search(line)]


def _rooted(root, path):
    """``path`` (a host path) below ``root``: normalised first, so that ``/../x`` is /x of
    the tree and never a file outside it."""
    return posixpath.join(root or "/", posixpath.normpath("/" + path).lstrip("/"))


def _mtime(path):
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return None


def input_mtimes(paths, root="/"):
    """{path: whole-second mtime} of the inputs that exist (paths as the host names them)."""
    found = {}
    for path in paths:
        mtime = _mtime(_rooted(root, path))
        if mtime is not None:
            found[path] = mtime
    return found


def check_image_pattern(pattern, field="initramfs_image_pattern"):
    """An absolute path with one %s for the kernel version and no other % directive."""
    if (not isinstance(pattern, str) or not pattern.startswith("/")
            or pattern.count("%s") != 1 or pattern.replace("%s", "").count("%")):
        raise GpuhostError("%r is not an image path pattern" % (pattern,), field=field,
                           fix="give the absolute path with %s for the kernel version, "
                               "such as /boot/initrd.img-%s")
    return pattern


def read_initramfs(inputs, image_pattern, root="/"):
    """Whether every installed kernel's initramfs image holds the newest of ``inputs``
    (files that end up in it). Both update-initramfs and dracut write the image under
    another name and rename it, so a rebuild that was killed leaves the older image:
    ``stale`` lists the images older than the newest input. A kernel is installed when
    it has a /lib/modules directory; one without an image is skipped."""
    check_image_pattern(image_pattern)
    state = {"inputs": input_mtimes(inputs, root), "images": {}, "stale": []}
    for version in sorted(sysfs.list_dir(_rooted(root, "lib/modules"))):
        if not os.path.isdir(_rooted(root, "lib/modules/" + version)):
            continue
        image = image_pattern % version
        mtime = _mtime(_rooted(root, image))
        if mtime is not None:
            state["images"][image] = mtime
    if state["inputs"]:
        newest = max(state["inputs"].values())
        state["stale"] = sorted(path for path, mtime in state["images"].items() if mtime < newest)
    return state


def vcpu_pins(pin_info):
    """libvirt's ``vcpuPinInfo()`` (one tuple of booleans per vCPU, one boolean per host
    CPU) as {vcpu: cpulist}, both strings as JSON keeps them."""
    return {str(vcpu): format_cpulist([cpu for cpu, pinned in enumerate(cpus) if pinned])
            for vcpu, cpus in enumerate(pin_info or ())}
