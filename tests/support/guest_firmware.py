# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Boot a tenant's domain XML on the distribution's real guest firmware, under QEMU TCG,
with stand-in GPU BARs, and read back from the guest kernel which BARs got an address
(tests/integration/test_guest_firmware_bars.py; no tests here).

* ``boot_files``: a Debian kernel and a busybox initramfs whose /init prints every PCI
  function's ``resource`` file and the kernel's PCI messages to the serial console and
  powers off. Both come from the machine's own apt sources (``apt-get download``, no
  mirror named here; a .deb the lab build already downloaded is reused) and are cached
  under ``$GPUHOST_LAB_CACHE/guest-boot/<key>`` (default ~/.cache/gpuhost-lab), keyed by
  the two package file names and the /init script.
* ``machine_from_xml``: what QEMU needs from the domain XML: RAM, firmware, address
  width (``<cpu><maxphysaddr>``), the GPUs' root ports, fw_cfg entries.
* ``qemu_argv``: q35 under TCG; the firmware the XML names (for ``efi``, the code and
  variable template that libvirt's auto-selection would pick from the firmware
  descriptors; SeaBIOS, QEMU's default, for ``bios``); the RAM top on a memory backend
  that is never committed; per GPU a ``pcie-root-port`` with one ``pci-testdev`` function
  per 64-bit BAR (``membar=``, one 64-bit prefetchable BAR with nothing behind it).
* ``parse_guest_report`` and ``missing_bars``: the verdict, from the guest kernel's own
  ``/sys/bus/pci/devices/*/resource`` and its root bus windows.
"""

import gzip
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import List, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.preflight import (
    descriptor_offers, read_firmware_descriptors)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.model import DomainSpec, GpuSpec

GIB = 1 << 30
# QEMU's address width under TCG when nothing sets phys-bits
QEMU_TCG_PHYS_BITS = 40
MIB = 1 << 20
KERNEL_META_PACKAGE = "linux-image-amd64"
BUSYBOX_PACKAGE = "busybox-static"
PCI_TESTDEV = "0x1b36:0x0005"
# Linux's IORESOURCE_* flags in sysfs ``resource`` (include/linux/ioport.h)
IORESOURCE_MEM = 0x200
IORESOURCE_PREFETCH = 0x2000
IORESOURCE_MEM_64 = 0x100000
BEGIN, END = "GPUHOST-PCI-BEGIN", "GPUHOST-PCI-END"
# The guest's /init. ``quiet`` keeps the serial console (slow under TCG) short; what the
# verdict needs is printed once, between the markers.
INIT_SCRIPT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
echo %(begin)s
for d in /sys/bus/pci/devices/*; do
  echo "PCIDEV ${d##*/} $(cat $d/vendor):$(cat $d/device)"
  sed 's/^/RES /' $d/resource
done
dmesg | grep -E 'root bus resource|BAR|no space|bridge window|assign' | sed 's/^/KMSG /'
echo %(end)s
poweroff -f
""" % {"begin": BEGIN, "end": END}
# Linux sees only the first GiB of the tenant's RAM: the firmware still learns the whole
# RAM top from QEMU (fw_cfg, e820) and places the 64-bit window above it, but the guest
# kernel neither touches nor builds page structures for 64 GiB to 2 TiB it never uses.
KERNEL_CMDLINE = "console=ttyS0 mem=1G quiet panic=-1"


def lab_cache_root():
    """The lab's cache (lab/lib.sh's ``lab_cache_root``)."""
    return os.environ.get("GPUHOST_LAB_CACHE") or os.path.join(
        os.environ.get("HOME") or "/root", ".cache", "gpuhost-lab")


def _run(argv, cwd=None):
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s%s" % (" ".join(argv), proc.returncode,
                                                     proc.stdout, proc.stderr))
    return proc.stdout


def kernel_package():
    """The versioned kernel package the distribution's meta package depends on now."""
    out = _run(["apt-cache", "depends", KERNEL_META_PACKAGE])
    match = re.search(r"Depends: (linux-image-\S+)", out)
    if not match:
        raise RuntimeError("apt-cache depends %s names no kernel:\n%s"
                           % (KERNEL_META_PACKAGE, out))
    return match.group(1)


def deb_file_name(package):
    """The file name ``apt-get download`` gives the package's candidate version."""
    out = _run(["apt-get", "download", "--print-uris", package], cwd=tempfile.gettempdir())
    match = re.search(r"^'[^']+' (\S+\.deb) ", out, re.M)
    if not match:
        raise RuntimeError("apt-get download --print-uris %s gave no .deb:\n%s"
                           % (package, out))
    return match.group(1)


def fetch_deb(package, directory):
    """The package's .deb in ``directory``: already there, copied from the lab build's
    download cache, or downloaded from the machine's apt sources."""
    name = deb_file_name(package)
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        downloaded = os.path.join(lab_cache_root(), "apt-archives", name)
        if os.path.exists(downloaded):
            shutil.copyfile(downloaded, path + ".part")
            os.rename(path + ".part", path)
        else:
            _run(["apt-get", "download", package], cwd=directory)
    return path


def _extract(deb, member_glob, directory):
    """Members of a .deb (``dpkg-deb --fsys-tarfile``) matching the glob, below
    ``directory``."""
    tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", directory, "--wildcards", member_glob],
                   stdin=tar.stdout, check=True)
    tar.stdout.close()
    if tar.wait() != 0:
        raise RuntimeError("dpkg-deb --fsys-tarfile %s failed" % deb)


def newc_archive(entries):
    """A cpio archive in the kernel's initramfs format (newc) of (name, mode, data)."""
    out = bytearray()
    for inode, (name, mode, data) in enumerate(list(entries) + [("TRAILER!!!", 0, b"")], 1):
        encoded = name.encode() + b"\0"
        fields = (inode, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
        out += b"070701" + "".join("%08x" % value for value in fields).encode() + encoded
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def boot_files():
    """(kernel, initramfs) paths, built once per key and reused."""
    kernel_pkg = kernel_package()
    debs_dir = os.path.join(lab_cache_root(), "guest-boot", "debs")
    os.makedirs(debs_dir, exist_ok=True)
    kernel_deb = fetch_deb(kernel_pkg, debs_dir)
    busybox_deb = fetch_deb(BUSYBOX_PACKAGE, debs_dir)
    key = hashlib.sha256("\n".join((os.path.basename(kernel_deb), os.path.basename(busybox_deb),
                                    INIT_SCRIPT)).encode()).hexdigest()[:16]
    cache = os.path.join(lab_cache_root(), "guest-boot", key)
    kernel, initramfs = os.path.join(cache, "vmlinuz"), os.path.join(cache, "initramfs.gz")
    if os.path.exists(kernel) and os.path.exists(initramfs):
        return kernel, initramfs
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        _extract(kernel_deb, "./boot/vmlinuz-*", work)
        _extract(busybox_deb, "./bin/busybox", work)
        (vmlinuz,) = [os.path.join(work, "boot", n) for n in os.listdir(os.path.join(work, "boot"))]
        with open(os.path.join(work, "bin", "busybox"), "rb") as handle:
            busybox = handle.read()
        archive = newc_archive([
            ("bin", stat.S_IFDIR | 0o755, b""), ("proc", stat.S_IFDIR | 0o755, b""),
            ("sys", stat.S_IFDIR | 0o755, b""), ("dev", stat.S_IFDIR | 0o755, b""),
            ("bin/busybox", stat.S_IFREG | 0o755, busybox),
            ("init", stat.S_IFREG | 0o755, INIT_SCRIPT.encode())])
        with open(os.path.join(work, "initramfs.gz"), "wb") as out:
            out.write(gzip.compress(archive, 1))
        os.replace(vmlinuz, kernel)
        os.replace(os.path.join(work, "initramfs.gz"), initramfs)
    return kernel, initramfs


# --------------------------------------------------------------------------------------
# the tenant, from the collection's own spec and XML

def tenant_spec(name, boards, memory_gib, cpu_vendor, firmware, host_phys_bits=52):
    """The collection's DomainSpec for a tenant with one GPU per board, each board given
    as the sizes of its 64-bit BARs (BAR1, BAR3 of an NVIDIA board); the host has room
    (``host_phys_bits``), so the width is the rule's own choice."""
    gpus = [GpuSpec(address="0000:%02x:00.0" % (0x17 + number), bar64_sizes=tuple(sizes))
            for number, sizes in enumerate(boards)]
    extra = dict(cpu_vendor=cpu_vendor, host_phys_bits=host_phys_bits)
    return DomainSpec(name=name, vcpus=2, vcpu_pins=((2,), (3,)),
                      memory_kib=memory_gib * GIB // 1024, hugepage_size_kib=1048576,
                      gpus=gpus, firmware=firmware, domain_type="test",
                      cpu_mode="host-passthrough", **extra)


@dataclass
class GuestMachine:
    """What the boot takes from the domain XML."""

    memory_bytes: int
    firmware: str                        # efi or bios
    width_mode: str                      # emulate, passthrough or none
    width_bits: int                      # 0: not given
    root_ports: int
    fw_cfg: List[Tuple[str, str]] = field(default_factory=list)

    def phys_bits(self, host_phys_bits):
        """The guest's address width: the emulated one; for passthrough the tenant's
        host's (``host_phys_bits``, capped by bits/limit as host-phys-bits-limit), given to
        TCG as phys-bits since this machine's own width is not the tenant host's; QEMU's
        TCG default without <maxphysaddr>."""
        if self.width_mode == "emulate":
            return self.width_bits
        if self.width_mode == "passthrough":
            return min(self.width_bits or host_phys_bits, host_phys_bits)
        return QEMU_TCG_PHYS_BITS


UNITS = {"b": 1, "bytes": 1, "k": 1024, "kib": 1024, "m": MIB, "mib": MIB, "g": GIB,
         "gib": GIB, "t": GIB << 10, "tib": GIB << 10}


def machine_from_xml(xml_text):
    from lxml import etree
    root = etree.fromstring(xml_text.encode())
    memory = root.find("memory")
    os_element = root.find("os")
    firmware = "efi" if (os_element.get("firmware") == "efi"
                         or os_element.find("loader") is not None) else "bios"
    width = root.find("cpu/maxphysaddr")
    ports = [c for c in root.findall("devices/controller")
             if c.get("type") == "pci" and c.get("model") == "pcie-root-port"]
    fw_cfg = [(e.get("name"), e.text or "")
              for e in root.findall("sysinfo[@type='fwcfg']/entry")]
    return GuestMachine(
        memory_bytes=int(memory.text) * UNITS[(memory.get("unit") or "KiB").lower()],
        firmware=firmware,
        width_mode=width.get("mode") if width is not None else "none",
        # bits (emulate) or limit (passthrough's cap, libvirt 9.3 and later)
        width_bits=int(width.get("bits") or width.get("limit") or 0) if width is not None else 0,
        root_ports=len(ports), fw_cfg=fw_cfg)


def efi_firmware_files(firmware="efi"):
    """(code, variable template) of the first descriptor libvirt's auto-selection would
    take for ``firmware`` (the collection's own matching, preflight.descriptor_offers)."""
    for descriptor in read_firmware_descriptors("/").descriptors:
        if descriptor.executable_present and descriptor_offers(descriptor, firmware):
            with open(descriptor.path) as handle:
                mapping = json.load(handle)["mapping"]
            return mapping["executable"]["filename"], mapping["nvram-template"]["filename"]
    raise RuntimeError("no firmware descriptor in /usr/share/qemu/firmware offers %s: "
                       "install ovmf (bindep.txt)" % firmware)


def qemu_argv(machine, boards, cpu_vendor, host_phys_bits, kernel, initramfs, workdir):
    """QEMU under TCG for ``machine``; ``boards`` as in tenant_spec, one per root port."""
    if machine.root_ports != len(boards):
        raise AssertionError("the XML has %d root ports for %d GPUs"
                             % (machine.root_ports, len(boards)))
    bits = machine.phys_bits(host_phys_bits)
    model = "Skylake-Server" if cpu_vendor == "GenuineIntel" else "EPYC"
    megs = machine.memory_bytes // MIB
    argv = ["qemu-system-x86_64", "-machine", "q35,memory-backend=ram0", "-accel", "tcg",
            "-cpu", "%s,phys-bits=%d,host-phys-bits=off" % (model, bits),
            # reserve=off: MAP_NORESERVE, so a 2 TiB backend is not committed; the
            # firmware reads the RAM size and the guest kernel uses only mem=1G of it
            "-object", "memory-backend-ram,id=ram0,size=%dM,reserve=off,prealloc=off" % megs,
            "-m", "%dM" % megs, "-smp", "1", "-nodefaults", "-display", "none",
            "-no-reboot", "-serial", "file:%s" % os.path.join(workdir, "serial.log"),
            "-kernel", kernel, "-initrd", initramfs, "-append", KERNEL_CMDLINE]
    if machine.firmware == "efi":
        code, template = efi_firmware_files()
        variables = os.path.join(workdir, "VARS.fd")
        shutil.copyfile(template, variables)
        argv += ["-drive", "if=pflash,format=raw,unit=0,readonly=on,file=%s" % code,
                 "-drive", "if=pflash,format=raw,unit=1,file=%s" % variables]
    for name, value in machine.fw_cfg:
        argv += ["-fw_cfg", "name=%s,string=%s" % (name, value)]
    for number, sizes in enumerate(boards):
        port = "rp%d" % number
        argv += ["-device", "pcie-root-port,id=%s,chassis=%d,bus=pcie.0,addr=0x%x"
                 % (port, number + 1, number + 2)]
        for function, size in enumerate(sizes):
            argv += ["-device", "pci-testdev,bus=%s,addr=0.%d,membar=%d%s"
                     % (port, function, size,
                        ",multifunction=on" if function == 0 and len(sizes) > 1 else "")]
    return argv


# --------------------------------------------------------------------------------------
# the verdict

@dataclass
class GuestReport:
    devices: dict                       # address -> (vendor:device, [(start, end, flags)])
    windows: List[Tuple[int, int]]      # the root bus's memory windows
    messages: List[str]                 # the kernel's PCI lines

    def windows_text(self):
        return ", ".join("[%#x-%#x] (%s)" % (s, e, size_text(e - s + 1))
                         for s, e in self.windows) or "none printed"


def size_text(size):
    for unit, scale in (("TiB", GIB << 10), ("GiB", GIB), ("MiB", MIB)):
        if size >= scale:
            return "%g %s" % (size / scale, unit)
    return "%d bytes" % size


def parse_guest_report(serial):
    """The /init's output; None when the guest never printed it whole."""
    if BEGIN not in serial or END not in serial:
        return None
    body = serial.split(BEGIN, 1)[1].split(END, 1)[0]
    devices, windows, messages, current = {}, [], [], None
    for line in body.splitlines():
        line = line.strip()
        if line.startswith("PCIDEV "):
            _tag, address, ids = line.split()
            current = devices.setdefault(address, (ids, []))
        elif line.startswith("RES ") and current is not None:
            start, end, flags = (int(v, 16) for v in line.split()[1:4])
            current[1].append((start, end, flags))
        elif line.startswith("KMSG "):
            messages.append(line[5:])
            match = re.search(r"root bus resource \[mem (0x[0-9a-f]+)-(0x[0-9a-f]+)", line)
            if match:
                windows.append((int(match.group(1), 16), int(match.group(2), 16)))
    return GuestReport(devices, windows, messages)


def missing_bars(report, boards):
    """Every stand-in BAR the guest kernel left without an address inside a root bus
    window, as text; empty when every board has all of its BARs."""
    testdevs = sorted(a for a, (ids, _res) in report.devices.items() if ids == PCI_TESTDEV)
    buses = sorted(set(a.rsplit(":", 1)[0] for a in testdevs))
    missing = []
    if len(buses) != len(boards):
        return ["the guest lists pci-testdev functions on %d buses for %d GPUs"
                % (len(buses), len(boards))]
    for number, (bus, sizes) in enumerate(zip(buses, boards)):
        for function, size in enumerate(sizes):
            address = "%s:00.%d" % (bus, function)
            resources = report.devices.get(address, ("", []))[1]
            assigned = [
                (start, end) for start, end, flags in resources
                if flags & IORESOURCE_MEM and flags & IORESOURCE_MEM_64 and start
                and end - start + 1 == size
                and any(low <= start and end <= high for low, high in report.windows)]
            if not assigned:
                missing.append("GPU %d (%s) BAR of %s: no address" % (
                    number, address, size_text(size)))
    return missing
