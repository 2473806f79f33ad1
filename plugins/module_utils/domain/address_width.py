# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The guest physical address width a GPU tenant gets, and the 64-bit PCI window the
guest firmware then opens: the one rule, computed with the firmware's own rules.

The width is written as ``<maxphysaddr mode='emulate' bits='N'/>`` (QEMU's
``phys-bits=N``). The guest firmware, not the width itself, decides where the GPUs'
64-bit BARs go, and it trusts a width only on its own terms:

* OVMF (``firmware: efi`` / ``efi-secure``; edk2 ``OvmfPkg/Library/PlatformInitLib/
  MemDetect.c``, ``PlatformAddressWidthFromCpuid`` and ``PlatformDynamicMmioWindow``,
  already in Debian 12's edk2 2022.11, whose measured windows match it): a width of 41
  or more is trusted; below that only 36 or 39 on an Intel CPU and 40 on an AMD one
  (QEMU's historic default of 40 is often not the host's). A trusted width is capped at
  46 bits, and at 40 without 1 GiB pages (``pdpe1gb``); the 64-bit window is then the
  top 1/8 of that space, if RAM ends below it and 1/8 exceeds the classic 32 GiB.
  Otherwise OVMF keeps its classic window: 32 GiB after RAM, aligned to 32 GiB.
  (The first edk2 versions of this code capped at 47 bits, later ones at 46: the lower
  cap is taken. Newer edk2 also trusts any width when QEMU reports guest-phys-bits in
  CPUID; a width trusted by the quirk is trusted there too.)
* SeaBIOS 1.16.3 (``firmware: bios``; ``src/fw/pciinit.c``): the same trust rule on
  the CPUID width, capped at 46 bits. Trusted, and with RAM above 4 GiB, the window
  sits at the top of the space and is sized in steps of 1/8 of it; untrusted, the
  64-bit BARs go right after RAM, 1 GiB aligned, and must end below the width.

Each GPU sits behind its own pcie-root-port: its bridge window holds every 64-bit BAR
of the GPU and its companions, packed largest first, and is naturally aligned (its size
rounded up to a power of two). The root bus packs those windows largest first. The
width chosen is the smallest the firmware trusts whose window holds them all, and
never more than the host's own width (``address sizes`` in /proc/cpuinfo): a guest
address above the host's cannot be mapped, so such a tenant is refused.

Why an emulated width, and not the alternatives:

* ``mode='passthrough'`` (``host-phys-bits=on``) gives the guest whatever the host has:
  the window then differs from host to host (39-bit client parts, 46-bit Xeons, 48 or
  52 on EPYC), so the plan and check mode could not say which window a tenant gets,
  and a host too narrow for the tenant would boot it with an unassigned BAR instead of
  being refused before the domain is defined.
* OVMF's ``opt/ovmf/X-PciMmio64Mb`` sizes the classic window directly, but it is an
  experimental fw_cfg knob that libvirt can pass only through ``<qemu:commandline>``
  (the domain is then marked tainted), SeaBIOS ignores it, and the guest still needs a
  width that covers the window.

An emulated width computed here works for both firmwares, is the same on every host
wide enough, and is shown with its window before anything is defined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

GIB = 1 << 30
INTEL = "GenuineIntel"
AMD = "AuthenticAMD"
UNKNOWN_VENDOR = "unknown"
# x86-64's architectural minimum and maximum physical address widths.
MIN_PHYS_BITS = 36
MAX_PHYS_BITS = 52
# QEMU's default guest width: what a tenant without 64-bit BARs keeps.
QEMU_DEFAULT_PHYS_BITS = 40
# Both firmwares cap the width they use at 46 bits (old Linux kernels mishandle more).
FIRMWARE_MAX_BITS = 46
# OVMF without 1 GiB pages identity-maps no more than 40 bits.
OVMF_NO_1G_PAGES_BITS = 40
# OVMF's classic 64-bit window (PcdPciMmio64Size) and SeaBIOS's window granule.
OVMF_CLASSIC_WINDOW = 32 * GIB
SEABIOS_GRANULE = GIB
# q35 keeps at most 2 GiB of RAM below 4 GiB once RAM reaches 2.75 GiB; with less,
# nothing lies above 4 GiB and SeaBIOS leaves its window unpadded.
Q35_LOWMEM_SPLIT = 0xB0000000
BIOS = "bios"
# SeaBIOS 1.16.3 misplaces a second large BAR behind its own root port: two H100s (128
# GiB BAR1) or two H200s (256 GiB) lost a BAR1 at every width tried, 42 to 48 bits
# (tests/integration/test_guest_firmware_bars.py's harness). From this BAR size on, a
# tenant with more than one GPU is refused on SeaBIOS.
SEABIOS_MULTI_GPU_BAR_LIMIT = 64 * GIB
EFI_FIRMWARES = ("efi", "efi-secure")


def _pow2_at_least(value):
    return 1 << max(0, int(value) - 1).bit_length() if value > 0 else 0


def _align_up(value, alignment):
    return -(-int(value) // alignment) * alignment if alignment > 1 else int(value)


def gpu_window(bar_sizes):
    """The prefetchable window of the root port in front of one GPU: its 64-bit BARs
    (each naturally aligned, a BAR's size being a power of two) packed largest first,
    the total rounded up to a power of two so the window is naturally aligned."""
    end = 0
    for size in sorted((_pow2_at_least(s) for s in bar_sizes if s), reverse=True):
        end = _align_up(end, size) + size
    return _pow2_at_least(end)


def pack_windows(base, windows):
    """The end of ``windows`` placed from ``base`` largest first, each aligned on its
    own size, as the firmware packs the root bus."""
    end = int(base)
    for size in sorted((w for w in windows if w), reverse=True):
        end = _align_up(end, size) + size
    return end


def ram_end(memory_bytes):
    """The first address above guest RAM, counted as if all of it sat above 4 GiB
    (q35 moves all but 2 GiB there): conservative by at most 2 GiB."""
    return 4 * GIB + int(memory_bytes)


def firmware_trusts(bits, vendor):
    """Whether the firmware believes a CPUID width (the quirk both OVMF and SeaBIOS
    apply, since QEMU long reported 40 bits whatever the host had). With the vendor
    unknown (None) only what every vendor's rule trusts: Intel's 40 is not trusted,
    and neither are AMD's 36 and 39, so no rule is stricter than the other."""
    if bits >= 41:
        return True
    if vendor == INTEL:
        return bits in (36, 39)
    return vendor == AMD and bits == 40


def firmware_window(bits, firmware, memory_bytes, windows=(), vendor=None, gib_pages=True):
    """(base, size) of the 64-bit PCI window ``firmware`` opens for a guest of ``bits``
    width and ``memory_bytes`` of RAM. ``windows`` (the root ports' windows) size and
    align SeaBIOS's window; OVMF's does not depend on them."""
    top_of_ram = ram_end(memory_bytes)
    trusted = firmware_trusts(bits, vendor)
    if firmware == BIOS:
        largest = max([w for w in windows if w] or [SEABIOS_GRANULE])
        size = _align_up(pack_windows(0, windows), SEABIOS_GRANULE)
        if not trusted:
            return _align_up(top_of_ram, max(largest, SEABIOS_GRANULE)), size
        top = 1 << min(bits, FIRMWARE_MAX_BITS)
        if memory_bytes >= Q35_LOWMEM_SPLIT:
            size = _align_up(max(size, 1), top >> 3)
        base = max(_align_up(top_of_ram, SEABIOS_GRANULE), top - size)
        return _align_up(base, max(largest, SEABIOS_GRANULE)), size
    classic = (_align_up(top_of_ram, OVMF_CLASSIC_WINDOW), OVMF_CLASSIC_WINDOW)
    if not trusted:
        return classic
    used = min(bits, FIRMWARE_MAX_BITS)
    if not gib_pages:
        used = min(used, OVMF_NO_1G_PAGES_BITS)
    space, mmio = 1 << used, 1 << (used - 3)
    if OVMF_CLASSIC_WINDOW < mmio and classic[0] + mmio < space:
        return space - mmio, mmio
    return classic


@dataclass(frozen=True)
class AddressWidth:
    """The width to emulate and the 64-bit PCI window it yields."""

    bits: int
    window_base: int
    window_size: int
    firmware: str
    vendor: str
    needed: int = 0                   # bytes of the packed root-port windows

    @property
    def window_end(self):
        return self.window_base + self.window_size

    def report(self):
        """The result and plan form: ``{bits, window, size_gib, firmware, vendor}``;
        ``window`` is ``none`` when the firmware opens no 64-bit window (SeaBIOS for a
        tenant without 64-bit BARs), not an inverted range."""
        return {
            "bits": self.bits,
            "window": ("0x%x-0x%x" % (self.window_base, self.window_end - 1)
                       if self.window_size else "none"),
            "size_gib": self.window_size // GIB,
            "firmware": self.firmware,
            "vendor": self.vendor,
        }


def report_text(report):
    """One line for a report() dict, as the plan and the module's --diff show it."""
    keys = ("bits", "window", "size_gib", "firmware", "vendor")
    return ("guest address width %s bits, 64-bit PCI window %s (%s GiB, %s, %s)"
            % tuple(report.get(key) for key in keys))


def evaluate(bits, firmware, memory_bytes, gpu_bar_sizes, vendor=None, gib_pages=True):
    """(AddressWidth, holds): the window ``bits`` yields and whether it holds every
    GPU's naturally aligned window above RAM and below the width."""
    windows = [gpu_window(sizes) for sizes in gpu_bar_sizes]
    needed = pack_windows(0, windows)
    base, size = firmware_window(bits, firmware, memory_bytes, windows, vendor, gib_pages)
    limit = min(base + size, 1 << bits)
    holds = base >= ram_end(memory_bytes) and pack_windows(base, windows) <= limit
    width = AddressWidth(bits=bits, window_base=base, window_size=size,
                         firmware=firmware, vendor=vendor or UNKNOWN_VENDOR,
                         needed=needed)
    return width, holds


def choose_address_width(tenant, memory_bytes, gpu_bar_sizes: Sequence[Tuple[int, ...]],
                         firmware="bios", vendor: Optional[str] = None, gib_pages=True,
                         host_bits: Optional[int] = None, field="gpus"):
    """The smallest width the firmware trusts whose window holds every GPU's window.

    ``gpu_bar_sizes``: per GPU, the size of each 64-bit BAR of it and its companions.
    ``vendor``: the guest CPU's vendor_id (host-passthrough: the host's); None: unknown,
    only widths every vendor's rule trusts. ``gib_pages``: the guest CPU has pdpe1gb.
    ``host_bits``: the host's own width; None when unknown (then not checked).
    A tenant without 64-bit BARs keeps QEMU's default (or the host's, if narrower).
    """
    large = [sizes for sizes in gpu_bar_sizes
             if any(size >= SEABIOS_MULTI_GPU_BAR_LIMIT for size in sizes)]
    if firmware == BIOS and len(large) > 1:
        raise GpuhostError(
            "tenant %s has %d GPUs with 64-bit BARs of %d GiB or more on firmware bios: "
            "SeaBIOS leaves a second large BAR unassigned at any address width"
            % (tenant, len(large), SEABIOS_MULTI_GPU_BAR_LIMIT // GIB), field=field,
            fix="use firmware efi (OVMF, the vm role's default for GPU tenants), or give "
                "the tenant one GPU")
    ceiling = min(MAX_PHYS_BITS, host_bits or MAX_PHYS_BITS)
    if not any(s for sizes in gpu_bar_sizes for s in sizes):
        bits = max(min(QEMU_DEFAULT_PHYS_BITS, ceiling),
                   (ram_end(memory_bytes) - 1).bit_length())
        return evaluate(bits, firmware, memory_bytes, (), vendor, gib_pages)[0]
    floor = max(MIN_PHYS_BITS, (ram_end(memory_bytes) - 1).bit_length())
    for bits in range(floor, MAX_PHYS_BITS + 1):
        width, holds = evaluate(bits, firmware, memory_bytes, gpu_bar_sizes, vendor,
                                gib_pages)
        if not holds:
            continue
        if bits > ceiling:
            raise GpuhostError(
                "tenant %s needs a guest address width of %d bits for its GPUs' 64-bit "
                "BARs (%d GiB of root-port windows) under %s, but the host CPU has %d "
                "bits" % (tenant, bits, width.needed // GIB, firmware, host_bits),
                field=field,
                fix="give this tenant fewer GPUs (or GPUs with smaller BARs), or place "
                    "it on a host with a wider physical address space (address sizes "
                    "in /proc/cpuinfo)")
        return width
    width, dummy = evaluate(MAX_PHYS_BITS, firmware, memory_bytes, gpu_bar_sizes, vendor,
                            gib_pages)
    reason = ("without 1 GiB pages (pdpe1gb) OVMF opens at most %d GiB"
              % ((1 << (OVMF_NO_1G_PAGES_BITS - 3)) // GIB)
              if firmware in EFI_FIRMWARES and not gib_pages else
              "no width up to %d bits gives %s a window that large" % (MAX_PHYS_BITS,
                                                                       firmware))
    raise GpuhostError(
        "tenant %s needs %d GiB of 64-bit PCI window for its GPUs' BARs: %s"
        % (tenant, width.needed // GIB, reason), field=field,
        fix="give this tenant fewer GPUs, or use a guest CPU with 1 GiB pages")
