# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small simulator of the kernel's reactions to sysfs/procfs writes, for unit tests.

``SimulatedKernel`` is a ``HostWriter`` (plugins/module_utils/engine/writer.py): the
modules' cores write through it exactly as they write through the real one, and it
changes the fake tree the way the kernel would. Each behaviour cites where it comes
from: the lab notes (../shared/LAB.md, a Debian 6.1 kernel under QEMU with intel-iommu)
and the kernel's documentation:

* Documentation/ABI/testing/sysfs-bus-pci: sriov_numvfs, sriov_totalvfs,
  sriov_drivers_autoprobe, sriov_offset, sriov_stride, sriov_vf_device, driver_override,
  drivers_probe, the drivers' bind/unbind files;
* Documentation/ABI/testing/sysfs-bus-pci, ``reset`` and ``reset_method``: the reset
  file is present only when the device has a reset method and "writing 1 to this file
  will perform reset" (drivers/pci/pci-sysfs.c reset_store: anything else is EINVAL); a
  reset_method emptied by writing "" disables resets, and reset_store then fails with
  ENOTTY (pci_reset_function finds no method). ``resets`` lists the resets done;
* Documentation/PCI/pci-iov-howto.rst: "the number of VFs can only be changed by first
  writing 0";
* Documentation/core-api/irq/irq-affinity.rst and Documentation/filesystems/proc.rst:
  /proc/irq/N/smp_affinity(_list) and effective_affinity(_list);
* kernel/irq/proc.c write_irq_affinity(): -EIO when irq_can_set_affinity_usr() is false
  (kernel-managed IRQs), -EINVAL when the mask holds no online CPU, the cpulist parser's
  -ERANGE for a CPU number beyond nr_cpu_ids.

The ``TreeBuilder`` below writes the minimal standard sysfs layout these behaviours need
(device folders under /sys/devices, links from /sys/bus/pci, iommu_groups, /proc/irq).
A behaviour that has not been checked against the lab kernel says so.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import shutil

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist, format_cpumask, parse_cpulist)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PciAddress
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter

_DEVICE_ATTR = re.compile(r"^/sys/bus/pci/devices/(?P<addr>[^/]+)/(?P<attr>[^/]+)$")
_DEVICE_DRIVER_UNBIND = re.compile(r"^/sys/bus/pci/devices/(?P<addr>[^/]+)/driver/unbind$")
_DRIVER_FILE = re.compile(r"^/sys/bus/pci/drivers/(?P<drv>[^/]+)/(?P<op>bind|unbind)$")
_IRQ_FILE = re.compile(r"^/proc/irq/(?P<irq>\d+)/(?P<attr>smp_affinity|smp_affinity_list)$")


def _oserror(code, path):
    return OSError(code, os.strerror(code), path)


def _relink(link, target):
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(os.path.relpath(target, os.path.dirname(link)), link)


class SimulatedKernel(HostWriter):
    """Writes to a fake root and plays the kernel's part for the attributes it knows."""

    def __init__(self, root, native_drivers=None, managed_irqs=(), vf_drivers=None):
        super().__init__(root)
        # The driver the kernel's own matching would pick (modalias): what each device
        # was bound to when the tree was built, unless the test says otherwise.
        self.native_drivers = dict(native_drivers or {})
        for addr in self._devices():
            drv = self.driver_of(addr)
            if drv and addr not in self.native_drivers:
                self.native_drivers[addr] = drv
        self.vf_drivers = dict(vf_drivers or {})   # PF address -> its VFs' native driver
        self.managed_irqs = set(int(i) for i in managed_irqs)
        self.writes = []                            # (host path, value) in order
        self.fail_on = {}                           # host path -> errno, to inject faults
        self.resets = []                            # addresses reset through their reset file
        self.removed = []                           # addresses removed through their remove file
        self.rescans = []                           # rescan files written (a bridge's, or the bus's)
        self.on_rescan = None                       # what a rescan finds: a test's callable

    # -- reading helpers ---------------------------------------------------------------
    def _devices(self):
        folder = self.path("/sys/bus/pci/devices")
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []

    def device_dir(self, addr):
        return os.path.realpath(self.path("/sys/bus/pci/devices/%s" % addr))

    def driver_of(self, addr):
        link = os.path.join(self.device_dir(addr), "driver")
        return os.path.basename(os.readlink(link)) if os.path.islink(link) else None

    def _attr(self, addr, name, default=None):
        try:
            with open(os.path.join(self.device_dir(addr), name)) as handle:
                return handle.read().strip()
        except (IOError, OSError):
            return default

    def _set_attr(self, addr, name, value):
        with open(os.path.join(self.device_dir(addr), name), "w") as handle:
            handle.write("%s\n" % value)

    # -- the kernel's part -------------------------------------------------------------
    def write(self, host_path, value):
        host_path = "/" + str(host_path).lstrip("/")
        self.writes.append((host_path, str(value)))
        if host_path in self.fail_on:
            raise _oserror(self.fail_on[host_path], host_path)
        text = str(value)
        match = _DEVICE_DRIVER_UNBIND.match(host_path)
        if match:
            return self._unbind(self.driver_of(match.group("addr")), text.strip(), host_path)
        match = _DRIVER_FILE.match(host_path)
        if match:
            if match.group("op") == "bind":
                return self._bind(match.group("drv"), text.strip(), host_path)
            return self._unbind(match.group("drv"), text.strip(), host_path)
        if host_path == "/sys/bus/pci/drivers_probe":
            return self._probe(text.strip(), host_path)
        if host_path == "/sys/bus/pci/rescan":
            return self._remove_or_rescan(None, "rescan", text, host_path)
        match = _IRQ_FILE.match(host_path)
        if match:
            return self._irq_affinity(int(match.group("irq")), match.group("attr"), text,
                                      host_path)
        match = _DEVICE_ATTR.match(host_path)
        if match:
            addr, attr = match.group("addr"), match.group("attr")
            if not os.path.isdir(self.device_dir(addr)):
                raise _oserror(errno.ENOENT, host_path)
            if attr == "sriov_numvfs":
                return self._sriov_numvfs(addr, text, host_path)
            if attr == "reset":
                return self._reset(addr, text, host_path)
            if attr in ("remove", "rescan"):
                return self._remove_or_rescan(addr, attr, text, host_path)
            if attr == "sriov_drivers_autoprobe":
                if text.strip() not in ("0", "1"):
                    raise _oserror(errno.EINVAL, host_path)
                return self._set_attr(addr, attr, text.strip())
            if attr == "driver_override":
                # "echo > driver_override" clears it; reading an unset one gives
                # "(null)" (drivers/pci/pci-sysfs.c driver_override_show).
                name = text.split("\n", maxsplit=1)[0]
                return self._set_attr(addr, attr, name if name else "(null)")
        return super().write(host_path, value)

    # drivers/pci/pci-sysfs.c reset_store(): kstrtoul, "if (val != 1) return -EINVAL",
    # then pci_reset_function(), -ENOTTY when no reset method is enabled.
    def _reset(self, addr, text, host_path):
        reset_file = os.path.join(self.device_dir(addr), "reset")
        if not os.path.exists(reset_file):
            raise _oserror(errno.ENOENT, host_path)
        if text.strip() != "1":
            raise _oserror(errno.EINVAL, host_path)
        methods = self._attr(addr, "reset_method")
        if methods is not None and not methods.split():
            raise _oserror(errno.ENOTTY, host_path)
        self.resets.append(addr)

    # drivers/pci/pci-sysfs.c remove_store() and dev_rescan_store()/rescan_store(): kstrtoul,
    # any value but 0 acts. The simulator keeps the tree as it is (the device comes back
    # as it was) unless a test's on_rescan changes what the rescan finds.
    def _remove_or_rescan(self, addr, attr, text, host_path):
        if addr is not None and not os.path.exists(os.path.join(self.device_dir(addr), attr)):
            raise _oserror(errno.ENOENT, host_path)
        if not text.strip().isdigit():
            raise _oserror(errno.EINVAL, host_path)
        if int(text) == 0:
            return
        if attr == "remove":
            self.removed.append(addr)
            return
        self.rescans.append(host_path)
        if self.on_rescan:
            self.on_rescan()

    # drivers/base/bus.c: bind_store / unbind_store / drivers_probe
    def _bind(self, drv, addr, host_path):
        if not os.path.isdir(self.path("/sys/bus/pci/drivers/%s" % drv)):
            raise _oserror(errno.ENOENT, host_path)
        if not os.path.isdir(self.device_dir(addr)):
            raise _oserror(errno.ENODEV, host_path)
        override = self._attr(addr, "driver_override", "(null)")
        if override not in ("(null)", "", drv):
            # pci_match_device(): with driver_override set, only that driver matches;
            # bind_store() asks for the match first, so this is ENODEV even when the
            # device is bound (checked on the lab kernel, test_simulator_vs_kernel.py).
            raise _oserror(errno.ENODEV, host_path)
        if self.driver_of(addr):
            # __driver_probe_device(): "if (dev->driver) return -EBUSY" (lab: same).
            raise _oserror(errno.EBUSY, host_path)
        self._attach(addr, drv)

    def _unbind(self, drv, addr, host_path):
        if drv is None or self.driver_of(addr) != drv:
            raise _oserror(errno.ENODEV, host_path)
        os.unlink(os.path.join(self.device_dir(addr), "driver"))
        link = self.path("/sys/bus/pci/drivers/%s/%s" % (drv, addr))
        if os.path.lexists(link):
            os.unlink(link)
        group = self._group(addr)
        if drv == "vfio-pci" and group is not None and not any(
                self.driver_of(a) == "vfio-pci" for a in self._group_members(group)):
            node = self.path("/dev/vfio/%s" % group)
            if os.path.exists(node):
                os.unlink(node)

    def _probe(self, addr, host_path):
        if not os.path.isdir(self.device_dir(addr)):
            # drivers_probe_store(): bus_find_device_by_name() fails -> -ENODEV (lab: same)
            raise _oserror(errno.ENODEV, host_path)
        if self.driver_of(addr):
            return   # device_attach() leaves a bound device alone
        override = self._attr(addr, "driver_override", "(null)")
        wanted = override if override not in ("(null)", "") else self.native_drivers.get(addr)
        if wanted and os.path.isdir(self.path("/sys/bus/pci/drivers/%s" % wanted)):
            self._attach(addr, wanted)
        # No matching driver loaded: the write still succeeds and the device stays
        # unbound, as on the lab kernel before vfio-pci was loaded.

    def _attach(self, addr, drv):
        driver_dir = self.path("/sys/bus/pci/drivers/%s" % drv)
        _relink(os.path.join(self.device_dir(addr), "driver"), driver_dir)
        _relink(os.path.join(driver_dir, addr), self.device_dir(addr))
        group = self._group(addr)
        if drv == "vfio-pci" and group is not None:
            # LAB.md: after binding 41:00.0 and 41:00.1, /dev/vfio/<group> appeared.
            os.makedirs(self.path("/dev/vfio"), exist_ok=True)
            with open(self.path("/dev/vfio/%s" % group), "w"):
                pass

    def _group(self, addr):
        link = os.path.join(self.device_dir(addr), "iommu_group")
        return int(os.path.basename(os.readlink(link))) if os.path.islink(link) else None

    def _group_members(self, group):
        folder = self.path("/sys/kernel/iommu_groups/%d/devices" % group)
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []

    # Documentation/PCI/pci-iov-howto.rst and drivers/pci/iov.c sriov_numvfs_store()
    def _sriov_numvfs(self, addr, text, host_path):
        try:
            wanted = int(text.strip())
        except ValueError:
            raise _oserror(errno.EINVAL, host_path)
        total = int(self._attr(addr, "sriov_totalvfs", "0"))
        current = int(self._attr(addr, "sriov_numvfs", "0"))
        if wanted < 0 or wanted > total:
            raise _oserror(errno.ERANGE, host_path)
        if wanted == current:
            return
        if wanted and current:
            # "if (pdev->sriov->num_VFs) { pci_warn(... "%d VFs already enabled. Disable
            # before enabling %d VFs"); ret = -EBUSY; }"
            raise _oserror(errno.EBUSY, host_path)
        if self.driver_of(addr) is None:
            # sriov_numvfs_store(): no PF driver, or one without sriov_configure -> ENOENT
            raise _oserror(errno.ENOENT, host_path)
        if wanted == 0:
            for index in range(current):
                self._remove_vf(addr, index)
        else:
            for index in range(wanted):
                self._create_vf(addr, index)
        self._set_attr(addr, "sriov_numvfs", wanted)

    def vf_address(self, pf, index):
        pf_addr = PciAddress.parse(pf)
        offset = int(self._attr(pf, "sriov_offset", "1"))
        stride = int(self._attr(pf, "sriov_stride", "1"))
        # The routing ID arithmetic of the SR-IOV capability: RID = PF RID + offset
        # + index * stride, where RID = bus << 8 | devfn.
        rid = (pf_addr.bus << 8 | pf_addr.slot << 3 | pf_addr.function) + offset + index * stride
        return str(PciAddress(pf_addr.domain, rid >> 8, (rid >> 3) & 0x1F, rid & 7))

    def _create_vf(self, pf, index):
        addr = self.vf_address(pf, index)
        pf_dir = self.device_dir(pf)
        parent = os.path.dirname(pf_dir)
        vf_dir = os.path.join(parent, addr)
        os.makedirs(vf_dir, exist_ok=True)
        numa = self._attr(pf, "numa_node", "-1")
        vf_device = self._attr(pf, "sriov_vf_device")
        # sriov_vf_device reads "10" (%x), a device's "device" file "0x0010" (the lab's
        # recordings show both)
        files = {"vendor": self._attr(pf, "vendor"),
                 "device": "0x%04x" % int(vf_device, 16) if vf_device else None,
                 "class": self._attr(pf, "class"), "numa_node": numa,
                 "local_cpulist": self._attr(pf, "local_cpulist", ""),
                 "driver_override": "(null)", "enable": "1"}
        for name, value in files.items():
            with open(os.path.join(vf_dir, name), "w") as handle:
                handle.write("%s\n" % (value if value is not None else ""))
        os.makedirs(os.path.join(vf_dir, "msi_irqs"), exist_ok=True)
        _relink(os.path.join(vf_dir, "physfn"), pf_dir)
        _relink(os.path.join(pf_dir, "virtfn%d" % index), vf_dir)
        _relink(self.path("/sys/bus/pci/devices/%s" % addr), vf_dir)
        # LAB.md: each VF of the NVMe PF came in its own IOMMU group.
        group = self._next_group()
        group_dir = self.path("/sys/kernel/iommu_groups/%d/devices" % group)
        os.makedirs(group_dir, exist_ok=True)
        _relink(os.path.join(group_dir, addr), vf_dir)
        _relink(os.path.join(vf_dir, "iommu_group"),
                self.path("/sys/kernel/iommu_groups/%d" % group))
        # sriov_drivers_autoprobe=0 leaves new VFs unbound (sysfs-bus-pci).
        # vf_drivers[pf] = None: no driver keeps the VFs (the lab's NVMe VFs: nvme probes
        # them and gives up, QEMU's secondary controllers being offline).
        drv = self.vf_drivers[pf] if pf in self.vf_drivers else self.driver_of(pf)
        self.native_drivers.setdefault(addr, drv)
        if self._attr(pf, "sriov_drivers_autoprobe", "1") == "1":
            self._probe(addr, "/sys/bus/pci/drivers_probe")

    def _remove_vf(self, pf, index):
        pf_dir = self.device_dir(pf)
        link = os.path.join(pf_dir, "virtfn%d" % index)
        if not os.path.islink(link):
            return
        addr = os.path.basename(os.readlink(link))
        drv = self.driver_of(addr)
        if drv:
            self._unbind(drv, addr, "/sys/bus/pci/drivers/%s/unbind" % drv)
        group = self._group(addr)
        vf_dir = self.device_dir(addr)
        shutil.rmtree(vf_dir)   # rmtree unlinks symlinks without following them
        os.unlink(link)
        os.unlink(self.path("/sys/bus/pci/devices/%s" % addr))
        if group is not None:
            group_dir = self.path("/sys/kernel/iommu_groups/%s" % group)
            os.unlink(os.path.join(group_dir, "devices", addr))
            if not os.listdir(os.path.join(group_dir, "devices")):
                shutil.rmtree(group_dir)

    def _next_group(self):
        folder = self.path("/sys/kernel/iommu_groups")
        used = [int(n) for n in os.listdir(folder)] if os.path.isdir(folder) else []
        return max(used + [-1]) + 1

    # kernel/irq/proc.c write_irq_affinity()
    def _irq_affinity(self, irq, attr, text, host_path):
        folder = self.path("/proc/irq/%d" % irq)
        if not os.path.isdir(folder):
            raise _oserror(errno.ENOENT, host_path)
        if irq in self.managed_irqs:
            raise _oserror(errno.EIO, host_path)
        try:
            if attr == "smp_affinity_list":
                cpus = parse_cpulist(text)
            else:
                from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
                    parse_cpumask)
                cpus = parse_cpumask(text)
        except Exception:
            raise _oserror(errno.EINVAL, host_path)
        possible = parse_cpulist(self.read("/sys/devices/system/cpu/possible", "0"))
        online = parse_cpulist(self.read("/sys/devices/system/cpu/online", "0"))
        if any(cpu not in possible for cpu in cpus):
            raise _oserror(errno.ERANGE, host_path)
        usable = [cpu for cpu in cpus if cpu in online]
        if not usable:
            # "At least one online CPU still has to be targeted."
            raise _oserror(errno.EINVAL, host_path)
        self.set_irq_affinity(irq, cpus, usable[:1])

    def set_irq_affinity(self, irq, cpus, effective):
        """Store an affinity; x86's vector allocator delivers to one CPU of the mask."""
        folder = self.path("/proc/irq/%d" % irq)
        nr_cpus = len(parse_cpulist(self.read("/sys/devices/system/cpu/possible", "0")))
        values = {"smp_affinity_list": format_cpulist(cpus),
                  "smp_affinity": format_cpumask(cpus, nr_cpus),
                  "effective_affinity_list": format_cpulist(effective),
                  "effective_affinity": format_cpumask(effective, nr_cpus)}
        for name, value in values.items():
            with open(os.path.join(folder, name), "w") as handle:
                handle.write(value + "\n")

    # -- events the tests trigger --------------------------------------------------
    def add_irq(self, irq, name, chip="IR-PCI-MSI", device=None, cpus=None, managed=False,
                hwirq=None):
        """An IRQ appears (a NIC comes up, a guest enables MSI-X on a vfio device)."""
        TreeBuilder(self.root).irq(irq, name, chip=chip, device=device, cpus=cpus,
                                   hwirq=hwirq)
        if managed:
            self.managed_irqs.add(int(irq))


# The NVMe driver allocates its I/O queue vectors with PCI_IRQ_AFFINITY and keeps the
# admin queue's out of the spreading (irq_affinity.pre_vectors = 1), so the kernel manages
# nvmeXq1.. and refuses their affinity writes with EIO, while nvmeXq0 takes a pin (checked
# on the lab kernel, tests/lab/test_simulator_vs_kernel.py).
_KERNEL_MANAGED = re.compile(r"^nvme\d+q[1-9]\d*$")


def kernel_managed_irqs(root):
    """The IRQs of ``root``'s /proc/interrupts the real kernel would manage: the NVMe I/O
    queues. Pass the result as ``SimulatedKernel(managed_irqs=...)``."""
    managed = []
    try:
        with open(os.path.join(str(root), "proc/interrupts")) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return managed
    for line in lines[1:]:
        number, sep, rest = line.partition(":")
        fields = rest.split()
        if sep and number.strip().isdigit() and fields and _KERNEL_MANAGED.match(fields[-1]):
            managed.append(int(number))
    return sorted(managed)


class TreeBuilder:
    """Writes the minimal standard sysfs/procfs layout of a host under ``root``."""

    def __init__(self, root):
        self.root = str(root)

    def p(self, host_path):
        return os.path.join(self.root, host_path.lstrip("/"))

    def write(self, host_path, value):
        full = self.p(host_path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as handle:
            handle.write(value)

    def link(self, host_link, host_target):
        full = self.p(host_link)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        _relink(full, self.p(host_target))

    def cpus(self, online="0-7", possible=None, isolated="", nohz_full=None, nodes=None):
        possible = possible or online
        base = "/sys/devices/system/cpu"
        self.write(base + "/online", online + "\n")
        self.write(base + "/possible", possible + "\n")
        self.write(base + "/present", possible + "\n")
        self.write(base + "/isolated", isolated + "\n")
        if nohz_full is not None:
            self.write(base + "/nohz_full", nohz_full + "\n")
        online_set = parse_cpulist(online)
        for cpu in parse_cpulist(possible):
            if cpu:
                self.write(base + "/cpu%d/online" % cpu, "1\n" if cpu in online_set else "0\n")
            self.write(base + "/cpu%d/topology/core_id" % cpu, "%d\n" % cpu)
            self.write(base + "/cpu%d/topology/physical_package_id" % cpu, "0\n")
            self.write(base + "/cpu%d/topology/thread_siblings_list" % cpu, "%d\n" % cpu)
        for node, cpulist in (nodes or {0: online}).items():
            self.write("/sys/devices/system/node/node%d/cpulist" % node, cpulist + "\n")
        self.write("/sys/devices/system/node/online",
                   format_cpulist((nodes or {0: None}).keys()) + "\n")
        self.write("/sys/devices/system/node/possible",
                   format_cpulist((nodes or {0: None}).keys()) + "\n")
        if not os.path.exists(self.p("/proc/interrupts")):
            self.write("/proc/interrupts", self._interrupts_header())
        return self

    def _online(self):
        try:
            with open(self.p("/sys/devices/system/cpu/online")) as handle:
                return parse_cpulist(handle.read())
        except IOError:
            return (0,)

    def _interrupts_header(self):
        return " " * 11 + "".join("CPU%-8d" % c for c in self._online()).rstrip() + "\n"

    def iommu(self, vendor="intel", cmdline="BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 "
                                            "intel_iommu=on iommu=pt"):
        unit = "dmar0" if vendor == "intel" else "ivhd0"
        self.write("/sys/devices/virtual/iommu/%s/uevent" % unit, "")
        self.link("/sys/class/iommu/%s" % unit, "/sys/devices/virtual/iommu/%s" % unit)
        os.makedirs(self.p("/sys/kernel/iommu_groups"), exist_ok=True)
        self.write("/proc/cmdline", cmdline + "\n")
        return self

    def driver(self, name):
        if name == "vfio-pci" and not os.path.exists(self.p("/dev/vfio/vfio")):
            self.write("/dev/vfio/vfio", "")   # the container node, there once vfio loads
        for op in ("bind", "unbind", "new_id", "remove_id"):
            if not os.path.exists(self.p("/sys/bus/pci/drivers/%s/%s" % (name, op))):
                self.write("/sys/bus/pci/drivers/%s/%s" % (name, op), "")
        if not os.path.exists(self.p("/sys/bus/pci/drivers_probe")):
            self.write("/sys/bus/pci/drivers_probe", "")
            self.write("/sys/bus/pci/drivers_autoprobe", "1\n")
        return self

    def pci(self, address, class_code, vendor=0x10de, device=0x1234, driver=None,
            numa_node=-1, iommu_group=None, parent=None, boot_vga=None, netdev=None,
            sriov_totalvfs=None, sriov_offset=1, sriov_stride=1, sriov_vf_device=None,
            local_cpulist="", bus_dir=None, reset_method="flr bus"):
        """One PCI function; ``parent`` is the bridge it sits behind (a PCI address), or
        ``bus_dir`` the root bus it sits on when that is not a host bridge's (see
        pci_domain). ``reset_method`` None: a device without reset (neither the reset
        nor the reset_method file, as the kernel shows it)."""
        address = str(PciAddress.parse(address))
        if parent:
            base = os.path.relpath(os.path.realpath(self.p("/sys/bus/pci/devices/" + parent)),
                                   self.root)
        elif bus_dir:
            base = bus_dir.lstrip("/")
        else:
            base = "sys/devices/pci%s:%02x" % (address[:4], PciAddress.parse(address).bus)
        dev = "/%s/%s" % (base, address)
        attrs = {"vendor": "0x%04x" % vendor, "device": "0x%04x" % device,
                 "class": "0x%06x" % class_code, "numa_node": "%d" % numa_node,
                 "local_cpulist": local_cpulist, "driver_override": "(null)", "enable": "1",
                 "subsystem_vendor": "0x%04x" % vendor, "subsystem_device": "0x0000"}
        if reset_method is not None:
            # reset is write-only (0200) on a real kernel; here an empty file
            attrs.update({"reset_method": reset_method, "reset": ""})
        if boot_vga is not None:
            attrs["boot_vga"] = "1" if boot_vga else "0"
        if sriov_totalvfs is not None:
            attrs.update({"sriov_totalvfs": str(sriov_totalvfs), "sriov_numvfs": "0",
                          "sriov_drivers_autoprobe": "1", "sriov_offset": str(sriov_offset),
                          "sriov_stride": str(sriov_stride),
                          "sriov_vf_device": "%04x" % (sriov_vf_device or device + 1)})
        for name, value in attrs.items():
            self.write("%s/%s" % (dev, name), value + "\n")
        os.makedirs(self.p(dev + "/msi_irqs"), exist_ok=True)
        self.link("/sys/bus/pci/devices/%s" % address, dev)
        if driver:
            self.driver(driver)
            self.link(dev + "/driver", "/sys/bus/pci/drivers/%s" % driver)
            self.link("/sys/bus/pci/drivers/%s/%s" % (driver, address), dev)
        if iommu_group is not None:
            self.link("/sys/kernel/iommu_groups/%d/devices/%s" % (iommu_group, address), dev)
            self.link(dev + "/iommu_group", "/sys/kernel/iommu_groups/%d" % iommu_group)
        if netdev:
            self.netdev(address, netdev)
        return dev

    def netdev(self, address, name):
        """A network interface on a PCI function (a VF's netdev, say)."""
        dev = "/" + os.path.relpath(os.path.realpath(self.p("/sys/bus/pci/devices/" + address)),
                                    self.root)
        self.write("%s/net/%s/ifindex" % (dev, name), "2\n")
        self.link("%s/net/%s/device" % (dev, name), dev)
        self.link("/sys/class/net/%s" % name, "%s/net/%s" % (dev, name))
        return self

    def pci_domain(self, owner, domain=0x10000, bus=0):
        """The root bus of a PCI domain that the function ``owner`` provides, as Intel VMD
        does (drivers/pci/controller/vmd.c: the bus's parent is the VMD endpoint, so it
        shows as <owner>/pci10000:00). Returns the bus directory, for pci(bus_dir=...)."""
        owner_dir = os.path.relpath(os.path.realpath(self.p("/sys/bus/pci/devices/" + owner)),
                                    self.root)
        bus_dir = "/%s/pci%04x:%02x" % (owner_dir, domain, bus)
        os.makedirs(self.p(bus_dir), exist_ok=True)
        return bus_dir

    def irq(self, irq, name, chip="IR-PCI-MSI", device=None, cpus=None, hwirq=None):
        online = self._online()
        cpus = parse_cpulist(cpus) if cpus is not None else online
        nr = len(parse_cpulist(self._read("/sys/devices/system/cpu/possible") or "0"))
        folder = "/proc/irq/%d" % irq
        self.write(folder + "/smp_affinity_list", format_cpulist(cpus) + "\n")
        self.write(folder + "/smp_affinity", format_cpumask(cpus, nr) + "\n")
        self.write(folder + "/effective_affinity_list", format_cpulist(cpus[:1]) + "\n")
        self.write(folder + "/effective_affinity", format_cpumask(cpus[:1], nr) + "\n")
        self.write(folder + "/node", "0\n")
        if device:
            self.write("/sys/bus/pci/devices/%s/msi_irqs/%d" % (device, irq), "msix\n")
        # kernel/irq/irqdesc.c actions_show(): the action names joined with ",".
        self.write("/sys/kernel/irq/%d/actions" % irq, name.replace(", ", ",") + "\n")
        if not os.path.exists(self.p("/proc/interrupts")):
            self.write("/proc/interrupts", self._interrupts_header())
        counts = "%11d" % 0 * len(online)
        line = "%4d:%s  %s %s-edge      %s\n" % (irq, counts, chip, hwirq or "%d" % irq, name)
        with open(self.p("/proc/interrupts"), "a") as handle:
            handle.write(line)
        return self

    def _read(self, host_path):
        try:
            with open(self.p(host_path)) as handle:
                return handle.read().strip()
        except IOError:
            return None

    def block(self, name, device_address, major_minor, partitions=()):
        """A disk behind a PCI controller, with partitions as (name, major:minor)."""
        dev = os.path.relpath(os.path.realpath(self.p("/sys/bus/pci/devices/" + device_address)),
                              self.root)
        disk = "/%s/nvme/nvme0/%s" % (dev, name) if name.startswith("nvme") else \
            "/%s/ata1/host0/target0:0:0/0:0:0:0/block/%s" % (dev, name)
        self.write(disk + "/dev", major_minor + "\n")
        if name.startswith("nvme"):
            self.link("/%s/nvme/nvme0/device" % dev, "/" + dev)
            self.link(disk + "/device", "/%s/nvme/nvme0" % dev)
        else:
            self.link(disk + "/device", "/%s/ata1/host0/target0:0:0/0:0:0:0" % dev)
        self.link("/sys/class/block/%s" % name, disk)
        self.link("/sys/dev/block/%s" % major_minor, disk)
        for part, part_mm in partitions:
            self.write("%s/%s/dev" % (disk, part), part_mm + "\n")
            self.write("%s/%s/partition" % (disk, part), part[-1] + "\n")
            self.link("/sys/class/block/%s" % part, "%s/%s" % (disk, part))
            self.link("/sys/dev/block/%s" % part_mm, "%s/%s" % (disk, part))
        return self

    def mount(self, mountpoint, source, major_minor, fstype="ext4", mount_id=None):
        line = "%d 1 %s / %s rw,relatime shared:1 - %s %s rw\n" % (
            mount_id or 20 + len((self._read("/proc/self/mountinfo") or "").splitlines()),
            major_minor, mountpoint, fstype, source)
        os.makedirs(os.path.dirname(self.p("/proc/self/mountinfo")), exist_ok=True)
        with open(self.p("/proc/self/mountinfo"), "a") as handle:
            handle.write(line)
        return self

    def route(self, iface, destination="00000000", gateway="0102A8C0", mask="00000000"):
        path = self.p("/proc/net/route")
        if not os.path.exists(path):
            self.write("/proc/net/route", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\t"
                       "Metric\tMask\t\tMTU\tWindow\tIRTT\n")
        with open(path, "a") as handle:
            handle.write("%s\t%s\t%s\t0003\t0\t0\t100\t%s\t0\t0\t0\n"
                         % (iface, destination, gateway, mask))
        return self

    def console(self, framebuffer_device=None, fb_name="EFI VGA", vtcon="(M) frame buffer device"):
        """An active console: a bound vtconsole plus fb0 (on a PCI device, or none)."""
        self.write("/sys/class/vtconsole/vtcon0/name", "(S) dummy device\n")
        self.write("/sys/class/vtconsole/vtcon0/bind", "0\n")
        self.write("/sys/class/vtconsole/vtcon1/name", vtcon + "\n")
        self.write("/sys/class/vtconsole/vtcon1/bind", "1\n")
        self.write("/proc/fb", "0 %s\n" % fb_name)
        self.write("/sys/devices/platform/fb0/graphics/fb0/name", fb_name + "\n")
        self.link("/sys/class/graphics/fb0", "/sys/devices/platform/fb0/graphics/fb0")
        if framebuffer_device:
            self.link("/sys/devices/platform/fb0/graphics/fb0/device",
                      "/sys/bus/pci/devices/%s" % framebuffer_device)
        return self

    def open_fd(self, pid, fd, target, comm="python3"):
        self.write("/proc/%d/comm" % pid, comm + "\n")
        link = self.p("/proc/%d/fd/%d" % (pid, fd))
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(target, link)   # absolute /dev path, as the kernel shows it
        return self


def build_sim_host(root):
    """The runbook's host in miniature (LAB.md): two nodes, GPU+HDA, NVMe PF, dirty group.

    0000:00:01.0 root port -> 0000:01:00.0 NVMe PF (SR-IOV, 4 VFs, holds /), group 1
    0000:00:02.0 root port -> 0000:41:00.0 GPU (nvidia) + 0000:41:00.1 HDA, group 2, node 1
    0000:00:03.0 root port -> 0000:42:00.0 GPU (nvidia, boot VGA), group 3, node 1
    0000:00:04.0 PCIe-PCI bridge + 0000:02:01.0 display + 0000:02:02.0 xHCI, group 4
    0000:00:05.0 root port -> 0000:03:00.0 NIC eno1 (mlx5_core, SR-IOV 8 VFs), group 5
    0000:00:06.0 root port -> 0000:44:00.0 NIC ens2 (mlx5_core, SR-IOV 8), group 6, node 1
    """
    tree = TreeBuilder(root)
    tree.cpus(online="0-7", nodes={0: "0-3", 1: "4-7"})
    tree.iommu()
    for port, group in (("0000:00:01.0", 10), ("0000:00:02.0", 11), ("0000:00:03.0", 12),
                        ("0000:00:05.0", 14), ("0000:00:06.0", 15)):
        tree.pci(port, 0x060400, vendor=0x8086, device=0x7c00, driver="pcieport",
                 iommu_group=group)
    tree.pci("0000:01:00.0", 0x010802, vendor=0x1b36, device=0x0010, driver="nvme",
             numa_node=0, iommu_group=1, parent="0000:00:01.0", sriov_totalvfs=4)
    tree.pci("0000:41:00.0", 0x030200, vendor=0x10de, device=0x20b5, driver="nvidia",
             numa_node=1, iommu_group=2, parent="0000:00:02.0", boot_vga=False)
    tree.pci("0000:41:00.1", 0x040300, vendor=0x10de, device=0x1aef, driver="snd_hda_intel",
             numa_node=1, iommu_group=2, parent="0000:00:02.0")
    tree.pci("0000:42:00.0", 0x030000, vendor=0x10de, device=0x20b5, driver="nvidia",
             numa_node=1, iommu_group=3, parent="0000:00:03.0", boot_vga=True)
    tree.pci("0000:00:04.0", 0x060400, vendor=0x1b36, device=0x000e, iommu_group=4)
    tree.pci("0000:02:01.0", 0x038000, vendor=0x1234, device=0x1111, driver="bochs-drm",
             iommu_group=4, parent="0000:00:04.0")
    tree.pci("0000:02:02.0", 0x0c0330, vendor=0x1b36, device=0x000d, driver="xhci_hcd",
             iommu_group=4, parent="0000:00:04.0")
    tree.pci("0000:03:00.0", 0x020000, vendor=0x15b3, device=0x101d, driver="mlx5_core",
             numa_node=0, iommu_group=5, parent="0000:00:05.0", netdev="eno1",
             sriov_totalvfs=8, sriov_offset=2, sriov_stride=1, sriov_vf_device=0x101e)
    tree.pci("0000:44:00.0", 0x020000, vendor=0x15b3, device=0x101d, driver="mlx5_core",
             numa_node=1, iommu_group=6, parent="0000:00:06.0", netdev="ens2",
             sriov_totalvfs=8, sriov_offset=2, sriov_stride=1, sriov_vf_device=0x101e)
    tree.driver("vfio-pci")
    tree.block("nvme0n1", "0000:01:00.0", "259:0",
               partitions=(("nvme0n1p1", "259:1"), ("nvme0n1p2", "259:2")))
    tree.mount("/", "/dev/nvme0n1p2", "259:2", mount_id=21)
    tree.mount("/boot/efi", "/dev/nvme0n1p1", "259:1", fstype="vfat", mount_id=22)
    tree.route("eno1")
    tree.route("eno1", destination="0002A8C0", gateway="00000000", mask="00FFFFFF")
    tree.route("ens2", destination="000010AC", gateway="00000000", mask="0000FFFF")
    tree.console(fb_name="nvidia-drmdrmfb", framebuffer_device="0000:42:00.0")
    for index, irq in enumerate(range(40, 44)):
        tree.irq(irq, "nvme0q%d" % index, device="0000:01:00.0")
    for index, irq in enumerate(range(50, 54)):
        tree.irq(irq, "mlx5_comp%d@pci:0000:03:00.0" % index, device="0000:03:00.0")
    tree.irq(60, "nvidia", device="0000:41:00.0")
    tree.irq(61, "snd_hda_intel:card0", device="0000:41:00.1")
    return root


# -- running the modules against the simulator ----------------------------------------

class BuildRefusal(GpuhostError):
    """A refusal of the options while the module was built (runner.new_module's checks
    fail the module before its worker exists), raised as the GpuhostError the worker
    would raise: ``field`` and ``message`` as the module printed them."""

    def __init__(self, printed):
        text = printed.strip()
        self.result = json.loads(text[text.index("{"):]) if "{" in text else {"msg": text}
        field = self.result.get("field")
        # GpuhostError.message's form, "<field>: <msg>. Fix: <fix>", read back
        msg, dummy, fix = self.result.get("msg", "").partition(". Fix: ")
        if field and msg.startswith(field + ": "):
            msg = msg[len(field) + 2:]
        super().__init__(msg, field=field, fix=fix or None,
                         details=self.result.get("details"))


def build_module(module_file, args):
    """``module_file.build_module()`` with ``args`` (``_ansible_*`` keys included); the
    collection's refusal of an option while it is built (one with a ``field``) is
    raised as a BuildRefusal; ansible-core's own (no field) exits as the module would."""
    from .module_args import patch_module_args
    printed = io.StringIO()
    with patch_module_args(args):
        try:
            with contextlib.redirect_stdout(printed):
                return module_file.build_module()
        except SystemExit:
            refusal = BuildRefusal(printed.getvalue())
            if refusal.field:
                raise refusal from None
            print(printed.getvalue())
            raise


def run_module(module_file, cls_name, args, writer, check_mode=False, diff=True, **kwargs):
    """Build a module from real arguments (check mode and diff included) with its own
    build_module(), run its class with ``writer`` playing the kernel, return the class.

    The class's ``result`` is the dict main() hands to exit_json/fail_json.
    """
    args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
    module = build_module(module_file, args)
    worker = getattr(module_file, cls_name)(module, writer=writer, **kwargs)
    worker.run()
    return worker


def snapshot(root):
    """Every path under ``root`` with its link target or a digest of its content."""
    import hashlib
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                state[rel] = "-> " + os.readlink(full)
            elif os.path.isfile(full):
                with open(full, "rb") as handle:
                    state[rel] = hashlib.sha256(handle.read()).hexdigest()
            else:
                state[rel] = "dir"
    return state
