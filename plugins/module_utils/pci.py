# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PCI addresses and PCI functions as read from /sys/bus/pci/devices."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError

# domain:bus:slot.function; the domain may be omitted (0000) and may have 5 hex digits
# on hosts with Intel VMD, which puts its root ports in domains 10000 and up.
_ADDRESS_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,5}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<slot>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$")

CLASS_VGA = 0x0300
CLASS_3D = 0x0302
GPU_CLASSES = (CLASS_VGA, CLASS_3D, 0x0380)
CLASS_AUDIO_HDA = 0x0403
CLASS_BRIDGE_PREFIX = 0x06
CLASS_PCI_BRIDGE = 0x0604


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
    bars: Tuple[Bar, ...] = ()
    reset_method: Tuple[str, ...] = ()
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
    def is_gpu(self):
        return self.base_class in GPU_CLASSES

    @property
    def is_bridge(self):
        return (self.class_code >> 16) == CLASS_BRIDGE_PREFIX

    @property
    def is_sriov_pf(self):
        return bool(self.sriov_totalvfs)

    @property
    def is_vf(self):
        return self.physfn is not None

    @property
    def bar64_prefetchable_total(self):
        return sum(b.size for b in self.bars
                   if b.is_memory and b.is_64bit and b.is_prefetchable)
