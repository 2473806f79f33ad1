# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PCI addresses and PCI functions as read from /sys/bus/pci/devices."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import FrozenSet, Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    bounded_list, pci_id_or_address, validate_flag)

# The host driver that holds a device for a guest.
VFIO_PCI = "vfio-pci"

# domain:bus:slot.function; the domain may be omitted (0000) and may have 5 hex digits
# on hosts with Intel VMD, which puts its root ports in domains 10000 and up.
_ADDRESS_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,5}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<slot>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])\Z")

CLASS_VGA = 0x0300
CLASS_3D = 0x0302
CLASS_DISPLAY_OTHER = 0x0380
CLASS_PROCESSING_ACCELERATOR = 0x1200
# The classes that count as a GPU by default (GpuSelection): display controllers and
# processing accelerators (inference cards that show no display class).
GPU_CLASSES = (CLASS_VGA, CLASS_3D, CLASS_DISPLAY_OTHER, CLASS_PROCESSING_ACCELERATOR)
CLASS_AUDIO_HDA = 0x0403
CLASS_BRIDGE_PREFIX = 0x06
CLASS_NETWORK_PREFIX = 0x02     # Ethernet, InfiniBand and other network controllers
CLASS_PCI_BRIDGE = 0x0604
# An NVSwitch on an HGX board shows as an NVIDIA "other bridge" (lspci: Bridge [0680],
# 10de:1af1 on A100 boards, 10de:22a3 on H100/H200 boards), driven by nvidia-nvswitch.
NVIDIA_VENDOR = 0x10DE
CLASS_BRIDGE_OTHER = 0x0680


@dataclass(frozen=True, order=True)
class PciAddress:
    domain: int
    bus: int
    slot: int
    function: int

    @classmethod
    def parse(cls, text, field="address"):
        """Parse ``0000:65:00.0``, ``65:00.0`` or ``10000:01:00.0``."""
        if isinstance(text, PciAddress):
            return text
        match = _ADDRESS_RE.match(str(text).strip())
        if not match:
            raise GpuhostError(
                "%r is not a PCI address" % (text,), field=field,
                fix="write it as domain:bus:slot.function, e.g. 0000:65:00.0 (see lspci -D)")
        slot = int(match.group("slot"), 16)
        if slot > 0x1F:
            raise GpuhostError("slot %02x of %r is above 1f" % (slot, text), field=field,
                               fix="check the address with lspci -D")
        return cls(int(match.group("domain") or "0", 16), int(match.group("bus"), 16),
                   slot, int(match.group("function")))

    def __str__(self):
        return "%04x:%02x:%02x.%d" % (self.domain, self.bus, self.slot, self.function)

    @property
    def slot_key(self):
        """Functions sharing this key are one physical device (GPU + its HDA)."""
        return (self.domain, self.bus, self.slot)


def vf_address(pf, offset, stride, index, field="num_vfs"):
    """The address of VF ``index`` (0-based) of PF ``pf``: the PF's routing ID (bus,
    device, function) plus ``offset`` plus ``index * stride`` (PCIe SR-IOV capability,
    the sriov_offset and sriov_stride sysfs attributes). A routing ID past bus ff names
    no function of the PF's domain: a GpuhostError naming ``field``, never bus 100."""
    pf_addr = PciAddress.parse(pf)
    rid = (pf_addr.bus << 8 | pf_addr.slot << 3 | pf_addr.function) + offset + index * stride
    if not 0 <= rid <= 0xFFFF:
        raise GpuhostError(
            "VF %d of %s would be at routing ID %#x, past bus ff of its PCI domain "
            "(sriov_offset %d, sriov_stride %d)" % (index, pf, rid, offset, stride),
            field=field, fix="ask for fewer VFs: the PF's VFs must fit below bus ff")
    return str(PciAddress(pf_addr.domain, rid >> 8, (rid >> 3) & 0x1F, rid & 7))


def normalize_address(text, field="address"):
    """The canonical string form of a PCI address."""
    return str(PciAddress.parse(text, field=field))


@dataclass(frozen=True)
class Bar:
    index: int
    start: int
    end: int
    flags: int

    @property
    def size(self):
        return self.end - self.start + 1 if self.end > self.start else 0

    @property
    def is_64bit(self):
        # IORESOURCE_MEM_64 in include/linux/ioport.h
        return bool(self.flags & 0x00100000)

    @property
    def is_prefetchable(self):
        # IORESOURCE_PREFETCH
        return bool(self.flags & 0x00002000)

    @property
    def is_memory(self):
        # IORESOURCE_MEM
        return bool(self.flags & 0x00000200)


@dataclass
class PciFunction:
    """One PCI function. ``numa_node`` is None when the kernel does not know it."""

    address: str
    class_code: int                      # 24-bit class, e.g. 0x030000
    vendor_id: Optional[int] = None
    device_id: Optional[int] = None
    subsystem_vendor_id: Optional[int] = None
    subsystem_device_id: Optional[int] = None
    driver: Optional[str] = None
    driver_override: Optional[str] = None
    numa_node: Optional[int] = None
    numa_node_source: str = "unknown"    # "numa_node", "local_cpulist" or "unknown"
    local_cpus: Tuple[int, ...] = ()
    iommu_group: Optional[int] = None
    boot_vga: Optional[bool] = None
    physfn: Optional[str] = None
    virtfns: Tuple[str, ...] = ()
    sriov_totalvfs: Optional[int] = None
    sriov_numvfs: Optional[int] = None
    sriov_drivers_autoprobe: Optional[bool] = None
    # Routing-ID arithmetic of the SR-IOV capability (PCIe base spec 9.3.3.10): VF n
    # (0-based) sits at the PF's routing ID + sriov_offset + n * sriov_stride, so the
    # addresses of VFs not created yet can be known.
    sriov_offset: Optional[int] = None
    sriov_stride: Optional[int] = None
    bars: Tuple[Bar, ...] = ()
    reset_method: Tuple[str, ...] = ()   # the kernel's reset methods, in order (known words)
    # The ``reset`` file: present only when the kernel has a reset method for the
    # function; None when the function was not read from sysfs (a topology from a dict).
    reset_file: Optional[bool] = None
    reset_method_listed: Optional[bool] = None   # the reset_method file exists (5.15+)
    reset_method_unknown: Tuple[str, ...] = ()   # words of reset_method no kernel prints
    parents: Tuple[str, ...] = ()        # bridge chain, root port first, direct parent last
    netdevs: Tuple[str, ...] = ()
    msi_irqs: Tuple[int, ...] = ()
    extra: dict = field(default_factory=dict)

    @property
    def pci_address(self):
        return PciAddress.parse(self.address)

    @property
    def base_class(self):
        """The two-byte class (0x0300 for VGA) without the programming interface."""
        return self.class_code >> 8

    @property
    def is_bridge(self):
        """A bridge (class 0x06) other than an NVSwitch: an NVSwitch carries NVLink and has
        no PCI bus behind it, so it is passed through like any device."""
        return (self.class_code >> 16) == CLASS_BRIDGE_PREFIX and not self.is_nvswitch

    @property
    def is_nvswitch(self):
        return self.vendor_id == NVIDIA_VENDOR and self.base_class == CLASS_BRIDGE_OTHER

    @property
    def is_network(self):
        return (self.class_code >> 16) == CLASS_NETWORK_PREFIX

    @property
    def is_sriov_pf(self):
        return bool(self.sriov_totalvfs)

    @property
    def is_vf(self):
        return self.physfn is not None

    @property
    def bar64_prefetchable_total(self):
        return sum(self.bar64_sizes)

    @property
    def bar64_sizes(self):
        """The size of each 64-bit prefetchable memory BAR, largest first: what a root
        port's 64-bit window holds (a bridge's non-prefetchable window is 32-bit)."""
        return tuple(sorted((b.size for b in self.bars
                             if b.is_memory and b.is_64bit and b.is_prefetchable and b.size),
                            reverse=True))


# The longest gpu_devices list: more entries than PCI functions a host has on its GPUs
# is a typo or a hostile input, and each entry is compared with every function.
MAX_GPU_DEVICES = 256
GPU_DEVICES_FIX = ("list at most %d entries, each a vendor:device ID as lspci -nn prints "
                   "it (10de:2335) or a full PCI address as lspci -D prints it "
                   "(0000:41:00.0)" % MAX_GPU_DEVICES)


@dataclass(frozen=True)
class GpuSelection:
    """What counts as a GPU on a host: every function of one of ``classes``, plus the
    functions the inventory lists (``gpu_devices``) by vendor:device ID or by address.
    With ``listed_only`` the list alone counts. The planner, the IOMMU analysis,
    vfio_bind and validation all ask this one object."""

    ids: FrozenSet[Tuple[int, int]] = frozenset()
    addresses: FrozenSet[str] = frozenset()
    listed_only: bool = False
    classes: Tuple[int, ...] = GPU_CLASSES

    @classmethod
    def from_options(cls, devices=None, listed_only=False, field="gpu_devices",
                     only_field="gpu_devices_only"):
        """The selection of the options ``gpu_devices`` and ``gpu_devices_only``;
        a GpuhostError naming the option for a bad entry, before anything is read."""
        if isinstance(devices, cls):
            return devices
        entries = bounded_list(devices, field, MAX_GPU_DEVICES, GPU_DEVICES_FIX)
        ids, addresses = set(), set()
        for index, entry in enumerate(entries):
            parsed = pci_id_or_address(entry, "%s[%d]" % (field, index))
            if parsed[0] == "id":
                ids.add(parsed[1:])
            else:
                addresses.add(parsed[1])
        listed_only = validate_flag(bool(listed_only) if listed_only is None
                                    else listed_only, only_field)
        if listed_only and not entries:
            raise GpuhostError(
                "%s is true and %s is empty: no function would count as a GPU"
                % (only_field, field), field=only_field,
                fix="list the GPUs in %s, or set %s: false to count the display and "
                    "accelerator classes" % (field, only_field))
        return cls(frozenset(ids), frozenset(addresses), listed_only)

    def reason(self, function):
        """Why ``function`` (a PciFunction) is a GPU ("listed as 0000:41:00.0",
        "listed as 1b36:0005", "class 0x1200"), or None when it is not one."""
        if function.address in self.addresses:
            return "listed as %s" % function.address
        if (function.vendor_id, function.device_id) in self.ids:
            return "listed as %s" % format_vendor_device(function)
        if not self.listed_only and function.base_class in self.classes:
            return "class 0x%04x" % function.base_class
        return None

    def selects(self, function):
        return self.reason(function) is not None

    def gpus(self, functions):
        """The GPUs among ``functions`` (address -> PciFunction), by address: one per
        slot, its lowest selected function; the slot's other functions (an HDA, more
        BARs of one board) are that GPU's companions, never GPUs of their own."""
        found = {}
        for address in sorted(functions, key=PciAddress.parse):
            if self.selects(functions[address]):
                found.setdefault(PciAddress.parse(address).slot_key, address)
        return tuple(sorted(found.values(), key=PciAddress.parse))

    def unmatched(self, functions):
        """The listed entries no function of ``functions`` matches (a typo, or a card
        not seen by this host), sorted."""
        seen_ids = {(f.vendor_id, f.device_id) for f in functions.values()}
        return sorted(["%04x:%04x" % pair for pair in self.ids if pair not in seen_ids]
                      + [a for a in self.addresses if a not in functions])

    def describe(self):
        """The selection in words, for messages."""
        parts = [] if self.listed_only else [
            "PCI classes %s" % ", ".join("0x%04x" % c for c in self.classes)]
        listed = sorted("%04x:%04x" % pair for pair in self.ids) + sorted(self.addresses)
        if listed:
            parts.append("gpu_devices %s" % ", ".join(listed))
        return " and ".join(parts)

    def as_dict(self):
        return {"classes": [] if self.listed_only else ["0x%04x" % c for c in self.classes],
                "ids": sorted("%04x:%04x" % pair for pair in self.ids),
                "addresses": sorted(self.addresses), "listed_only": self.listed_only}


DEFAULT_GPU_SELECTION = GpuSelection()


def gpu_selection(value=None):
    """``value`` (a GpuSelection, or None for the default classes) as a GpuSelection."""
    if value is None:
        return DEFAULT_GPU_SELECTION
    if isinstance(value, GpuSelection):
        return value
    return GpuSelection.from_options(value)


# Names as lspci prints them (pci.ids), by class and subclass, then by class alone.
_SUBCLASS_NAMES = {
    0x0000: "Non-VGA unclassified device", 0x0001: "VGA compatible unclassified device",
    0x0100: "SCSI storage controller", 0x0101: "IDE interface",
    0x0104: "RAID bus controller", 0x0106: "SATA controller",
    0x0107: "Serial Attached SCSI controller", 0x0108: "Non-Volatile memory controller",
    0x0180: "Mass storage controller",
    0x0200: "Ethernet controller", 0x0207: "Infiniband controller",
    0x0280: "Network controller",
    0x0300: "VGA compatible controller", 0x0302: "3D controller",
    0x0380: "Display controller",
    0x0400: "Multimedia video controller", 0x0401: "Multimedia audio controller",
    0x0403: "Audio device", 0x0480: "Multimedia controller",
    0x0500: "RAM memory", 0x0580: "Memory controller",
    0x0600: "Host bridge", 0x0601: "ISA bridge", 0x0604: "PCI bridge",
    0x0609: "Semi-transparent PCI-to-PCI bridge", 0x0680: "Bridge",
    0x0700: "Serial controller", 0x0780: "Communication controller",
    0x0800: "PIC", 0x0805: "SD Host controller", 0x0806: "IOMMU",
    0x0880: "System peripheral",
    0x0b40: "Co-processor",
    0x0c03: "USB controller", 0x0c04: "Fibre Channel", 0x0c05: "SMBus",
    0x0c80: "Serial bus controller",
    0x0d80: "Wireless controller",
    0x1101: "Performance counters", 0x1180: "Signal processing controller",
    0x1200: "Processing accelerators",
}
_BASE_CLASS_NAMES = {
    0x00: "Unclassified device", 0x01: "Mass storage controller",
    0x02: "Network controller", 0x03: "Display controller",
    0x04: "Multimedia controller", 0x05: "Memory controller", 0x06: "Bridge",
    0x07: "Communication controller", 0x08: "Generic system peripheral",
    0x09: "Input device controller", 0x0a: "Docking station", 0x0b: "Processor",
    0x0c: "Serial bus controller", 0x0d: "Wireless controller",
    0x0e: "Intelligent controller", 0x0f: "Satellite communications controller",
    0x10: "Encryption controller", 0x11: "Signal processing controller",
    0x12: "Processing accelerators", 0x13: "Non-Essential Instrumentation",
    0x40: "Coprocessor", 0xff: "Unassigned class",
}


def slot_bar64_sizes(functions):
    """Every 64-bit prefetchable BAR of a GPU and its companions (PciFunctions),
    largest first: the BARs its root port's window holds in the guest."""
    return tuple(sorted((size for function in functions for size in function.bar64_sizes),
                        reverse=True))


def class_name(class_code):
    """The human name of a 24-bit class code, as lspci prints it ("USB controller")."""
    if class_code is None:
        return "Unknown class"
    subclass = (class_code >> 8) & 0xFFFF
    if subclass in _SUBCLASS_NAMES:
        return _SUBCLASS_NAMES[subclass]
    return _BASE_CLASS_NAMES.get(subclass >> 8, "Unknown class %04x" % subclass)


def format_class_code(class_code):
    return "0x%06x" % class_code if class_code is not None else None


def format_vendor_device(function):
    """``10de:20b5`` for a function, the form lspci -n and vfio-pci.ids use."""
    if function.vendor_id is None or function.device_id is None:
        return None
    return "%04x:%04x" % (function.vendor_id, function.device_id)


# Function reset (Documentation/ABI/testing/sysfs-bus-pci):
# - /sys/bus/pci/devices/<bdf>/reset: "writing 1 to this file will perform reset"; the
#   file is present only for devices that have a reset method, so a function without it
#   cannot be reset by the host at all (what a tenant left in it stays there).
# - /sys/bus/pci/devices/<bdf>/reset_method (since 5.15): the device's supported reset
#   methods, space separated, in the order the kernel tries them; writing a subset
#   restricts them and writing an empty string "will disable ability to reset the
#   device", after which the file reads empty although ``reset`` is still there.
# The names are the kernel's pci_reset_fn_methods[] (drivers/pci/pci.c).
RESET_METHODS = ("device_specific", "acpi", "flr", "af_flr", "pm", "bus", "cxl_bus")
# Methods that reset more than the function: a secondary bus reset of the parent bridge
# resets every device behind that bridge (drivers/pci/pci.c pci_parent_bus_reset).
BUS_RESET_METHODS = ("bus", "cxl_bus")
# The kernel prints at most every method name once (about 50 characters); more is not
# its output, and is neither parsed nor shown in full.
RESET_METHOD_MAX_CHARS = 256


def parse_reset_methods(text):
    """(known methods in order, unknown words) from a ``reset_method`` file's text.

    Unknown words (a newer kernel's method, or garbage) are returned apart, each cut to
    32 characters, at most 8 of them; a text longer than RESET_METHOD_MAX_CHARS is not
    the kernel's and yields no method at all. None or "" (no file, or resets disabled)
    is ((), ())."""
    if not text:
        return (), ()
    if len(text) > RESET_METHOD_MAX_CHARS:
        return (), ("(%d characters, not a list the kernel prints)" % len(text),)
    known, unknown = [], []
    for word in text.split():
        if word in RESET_METHODS:
            if word not in known:
                known.append(word)
        elif len(unknown) < 8:
            unknown.append(word[:32] if word.isprintable() else ascii(word)[:32])
    return tuple(known), tuple(unknown)


def bus_of(address):
    """(domain, bus) of an address: the functions a bus reset of its bridge reaches."""
    parsed = PciAddress.parse(address)
    return parsed.domain, parsed.bus


@dataclass(frozen=True)
class ResetCapability:
    """What the host can do to wipe one PCI function between tenants."""

    address: str
    reset_file: Optional[bool]           # None: unknown (not read from sysfs)
    methods: Tuple[str, ...]
    unknown_methods: Tuple[str, ...]
    usable: Optional[bool]               # None: unknown
    reason: Optional[str]                # why it is not usable (None when it is)
    bus_only: bool                       # every method resets the whole bus
    bus_siblings: Tuple[str, ...]        # other functions a bus reset resets too

    def as_dict(self):
        return {"address": self.address, "reset_file": self.reset_file,
                "reset_methods": list(self.methods),
                "unknown_reset_methods": list(self.unknown_methods),
                "usable": self.usable, "reason": self.reason, "bus_only": self.bus_only,
                "bus_siblings": list(self.bus_siblings)}


def reset_capability(function, functions):
    """The ResetCapability of ``function`` among the host's ``functions`` (address ->
    PciFunction). Usable: the ``reset`` file exists and, where the kernel lists its
    methods (5.15+), at least one known method is enabled."""
    methods = tuple(function.reset_method)
    unknown = tuple(function.reset_method_unknown or ())
    reason = None
    if function.reset_file is None:
        usable = None
    elif not function.reset_file:
        usable = False
        reason = ("%s has no reset file: the kernel knows no way to reset it (no FLR, "
                  "PM or bus reset)" % function.address)
    elif function.reset_method_listed and not methods:
        usable = False
        reason = ("%s has a reset file but reset_method lists %s" % (
            function.address, "no method the kernel knows (%s)" % ", ".join(unknown)
            if unknown else "no method: resets were disabled by writing an empty string"))
    else:
        usable = True
    siblings = ()
    if any(m in BUS_RESET_METHODS for m in methods):
        # Everything on the function's bus, and below any bridge on it: the secondary
        # bus reset of the parent bridge reaches all of it.
        home = bus_of(function.address)
        same_bus = {a for a in functions if a != function.address and bus_of(a) == home}
        siblings = tuple(a for a in functions if a in same_bus or any(
            p in same_bus for p in functions[a].parents))
    bus_only = bool(methods) and all(m in BUS_RESET_METHODS for m in methods)
    return ResetCapability(function.address, function.reset_file, methods, unknown, usable,
                           reason, bus_only, siblings)


PCI_DEVICES_DIR = "sys/bus/pci/devices"
_FULL_ADDRESS_RE = re.compile(r"^[0-9a-f]{4,5}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
_VIRTFN_RE = re.compile(r"^virtfn(\d+)\Z")


_CANONICAL = {}


def is_kernel_address(text):
    """Whether a sysfs name is a PCI address as the kernel writes them (0000:65:00.0),
    with a slot of at most 1f: only such a name can be canonicalised without an error."""
    return bool(_FULL_ADDRESS_RE.match(text.lower())) and int(text[-4:-2], 16) <= 0x1F


def _canonical(text):
    """normalize_address, memoised: sysfs repeats each address in many links."""
    value = _CANONICAL.get(text)
    if value is None:
        value = normalize_address(text)
        if len(_CANONICAL) < 65536:
            _CANONICAL[text] = value
    return value


def parse_resource(text):
    """BARs from a device's ``resource`` file: one ``start end flags`` line per region.

    Lines 0-5 are the BARs, 6 the expansion ROM, 7-12 the SR-IOV VF BARs; unused
    regions (all zeros) are left out.
    """
    bars = []
    for index, line in enumerate((text or "").splitlines()):
        parts = line.split()
        if len(parts) != 3:
            continue
        try:
            start, end, flags = int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)
        except ValueError:
            continue
        if start == 0 and end == 0 and flags == 0:
            continue
        bars.append(Bar(index=index, start=start, end=end, flags=flags))
    return tuple(bars)


def _hex(text):
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def _derive_node(local_cpus, node_cpus):
    """The one node whose CPUs hold every local CPU of a device, else None.

    A device whose local CPUs span several nodes (uncore devices list every CPU) or no
    node at all has no single home node: reporting one would be a guess.
    """
    if not local_cpus:
        return None
    local = set(local_cpus)
    homes = [node for node, cpus in node_cpus.items() if local & set(cpus)]
    if len(homes) == 1 and local <= set(node_cpus[homes[0]]):
        return homes[0]
    return None


def _device_dirs(root):
    """Canonical address -> real device directory, from sys/bus/pci/devices.

    Falls back to walking sys/devices/pci* when the bus directory is missing, as in
    trees cut down to the device hierarchy.
    """
    base = sysfs.path(root, PCI_DEVICES_DIR)
    found = {}
    for entry in sysfs.list_dir(base):
        if not is_kernel_address(entry):
            continue
        found[_canonical(entry)] = sysfs.resolve_dir(root, os.path.join(base, entry))
    if found:
        return found
    devices = sysfs.path(root, "sys/devices")
    for top in sysfs.list_dir(devices):
        if not top.startswith("pci"):
            continue
        for dirpath, dirnames, _files in os.walk(os.path.join(devices, top)):
            keep = []
            for name in dirnames:
                if is_kernel_address(name):
                    keep.append(name)
                    dev_dir = os.path.join(dirpath, name)
                    if os.path.exists(os.path.join(dev_dir, "class")):
                        found[normalize_address(name)] = dev_dir
            dirnames[:] = keep
    return found


def _parents(dev_dir, address):
    """Bridge chain from the device's real path: root port first, direct parent last."""
    chain = []
    for part in dev_dir.split(os.sep):
        if is_kernel_address(part):
            chain.append(_canonical(part))
    return tuple(a for a in chain if a != address)


def _read_function(root, address, dev_dir, node_cpus):
    # One listdir tells which attributes exist, so absent ones cost no failed open().
    entries = set(sysfs.list_dir(dev_dir))

    prefix = dev_dir + os.sep

    def text(name):
        return sysfs.read_text(prefix + name) if name in entries else None

    def link(name):
        if name not in entries:
            return None
        try:
            return os.path.basename(os.readlink(prefix + name))
        except OSError:
            return None

    def number(name):
        return sysfs.parse_int_text(text(name))

    class_code = _hex(text("class"))
    function = PciFunction(address=address, class_code=class_code if class_code is not None
                           else 0xFF0000)
    function.vendor_id = _hex(text("vendor"))
    function.device_id = _hex(text("device"))
    function.subsystem_vendor_id = _hex(text("subsystem_vendor"))
    function.subsystem_device_id = _hex(text("subsystem_device"))
    function.driver = link("driver")
    override = text("driver_override")
    function.driver_override = override if override and override != "(null)" else None

    local = ()
    if "local_cpulist" in entries:
        local = sysfs.parse_cpus_text(text("local_cpulist") or "") or ()
    elif "local_cpus" in entries:
        local = sysfs.parse_cpus_text(text("local_cpus") or "", is_mask=True) or ()
    function.local_cpus = local
    node = number("numa_node")
    if node is not None and node >= 0:
        function.numa_node, function.numa_node_source = node, "numa_node"
    else:
        derived = _derive_node(local, node_cpus)
        if derived is not None:
            function.numa_node, function.numa_node_source = derived, "local_cpulist"

    group = link("iommu_group")
    function.iommu_group = int(group) if group and group.isdigit() else None
    boot_vga = number("boot_vga")
    function.boot_vga = None if boot_vga is None else bool(boot_vga)

    # physfn and virtfnN lead to PCI functions; a link that leads anywhere else is not
    # the kernel's, and what it would say is unknown (before: an error about an
    # "address" option that no module has).
    physfn = link("physfn")
    function.physfn = _canonical(physfn) if physfn and is_kernel_address(physfn) else None
    virtfns = []
    for entry in entries:
        match = _VIRTFN_RE.match(entry)
        if match:
            target = link(entry)
            if target and is_kernel_address(target):
                virtfns.append((int(match.group(1)), _canonical(target)))
    function.virtfns = tuple(address for index, address in sorted(virtfns))
    if "sriov_totalvfs" in entries:
        function.sriov_totalvfs = number("sriov_totalvfs")
        function.sriov_numvfs = number("sriov_numvfs")
        autoprobe = number("sriov_drivers_autoprobe")
        function.sriov_drivers_autoprobe = None if autoprobe is None else bool(autoprobe)
        function.sriov_offset = number("sriov_offset")
        function.sriov_stride = number("sriov_stride")

    function.bars = parse_resource(text("resource"))
    function.reset_file = "reset" in entries
    function.reset_method_listed = "reset_method" in entries
    function.reset_method, function.reset_method_unknown = parse_reset_methods(
        text("reset_method"))
    function.parents = _parents(dev_dir, address)
    if "net" in entries:
        function.netdevs = tuple(sorted(sysfs.list_dir(os.path.join(dev_dir, "net"))))
    if "msi_irqs" in entries:
        function.msi_irqs = tuple(sorted(
            int(n) for n in sysfs.list_dir(os.path.join(dev_dir, "msi_irqs")) if n.isdigit()))
    return function


def read_pci_functions(root="/", node_cpus=None):
    """Every PCI function of the host, keyed by canonical address (sorted).

    ``node_cpus`` (node -> CPUs) places devices whose numa_node is -1; it is read from
    ``root`` when not given.
    """
    if node_cpus is None:
        node_cpus = sysfs.read_node_cpus(root)
    dirs = _device_dirs(root)
    return {address: _read_function(root, address, dirs[address], node_cpus)
            for address in sorted(dirs, key=lambda a: (len(a), a))}


def read_pci_function(address, root="/", node_cpus=None):
    """One PCI function; GpuhostError naming ``address`` when the host has none there."""
    canonical = normalize_address(address)
    base = sysfs.path(root, PCI_DEVICES_DIR, canonical)
    if os.path.isdir(base):
        dev_dir = sysfs.resolve_dir(root, base)
    else:
        dev_dir = _device_dirs(root).get(canonical)
    if not dev_dir:
        raise GpuhostError(
            "no PCI function %s on this host" % canonical, field="address",
            fix="list the host's devices with lspci -D and use one of their addresses")
    if node_cpus is None:
        node_cpus = sysfs.read_node_cpus(root)
    return _read_function(root, canonical, dev_dir, node_cpus)


def vfio_resets_on_release(function, functions, own):
    """Whether vfio-pci resets ``function`` when the tenant's domain lets its devices go.

    drivers/vfio/pci (vfio_pci_try_bus_reset, later vfio_pci_dev_set_try_reset) tries a
    slot or bus reset when the last user of a device closes it, provided every device on
    that slot or bus is bound to vfio-pci and none is still open. So a function without a
    reset file of its own is wiped when it sits behind a bridge (a root bus has no
    secondary bus reset) on a bus whose every function is in ``own``, the tenant's
    devices (bound to vfio-pci for the domain)."""
    if not function.parents:
        return False
    home = bus_of(function.address)
    return all(address in own for address in functions if bus_of(address) == home)
