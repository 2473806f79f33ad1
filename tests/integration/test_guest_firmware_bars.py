# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The address width the domain builder gives a GPU tenant, tried on the distribution's
real guest firmware: every 64-bit BAR of every GPU must get an address in the guest.

For each tenant the collection's own builder (``build_domain_xml``) writes the domain
XML; libvirt checks it (``virt-xml-validate``) and parses it (defined on a private test
driver connection and read back with ``XMLDesc``). The width and the firmware are taken
from libvirt's copy: ``<cpu><maxphysaddr>`` and ``<os firmware=...>``, since the test
driver does not implement ``domxml-to-native``, and a real libvirtd here spent 65 s
probing capabilities before it answered (then refused the tenant's 1 GiB hugepages
without a hugetlbfs mount); LAB.md records that libvirt turns ``mode='emulate'
bits='N'`` into ``-cpu ...,phys-bits=N``, which is what the boot gets.

Then QEMU 10 boots under TCG, q35, with that firmware (Debian's OVMF as libvirt's
firmware descriptors pick it, with a fresh copy of its variable template, for ``efi``;
SeaBIOS, QEMU's default, for ``bios``), ``Skylake-Server`` (Intel) or ``EPYC`` (AMD)
with the width the XML gives, and the tenant's whole RAM size: a memory backend with
``reserve=off`` (MAP_NORESERVE), so 2 TiB are never committed on this 24 GiB machine.
The firmware reads the RAM top from QEMU and places the 64-bit PCI window above it as
it would for the real tenant; the guest kernel gets ``mem=1G`` and touches no more.
Measured: a 2 TiB OVMF boot peaks at about 750 MiB resident; a 46-bit width costs OVMF
about 250 MiB of page tables and a minute of TCG time under load, a 40-bit one 15 s.

Each GPU is a ``pcie-root-port`` (as the builder gives it) with one ``pci-testdev``
function per 64-bit BAR of the board (``membar=``: one 64-bit prefetchable BAR with
nothing behind it): BAR1 as function 0, the 32 MiB BAR3 as function 1. The guest is a
Debian kernel with a busybox initramfs (tests/support/guest_firmware.py) that prints
each function's ``resource`` file and the root bus windows, and powers off. The verdict
is the guest kernel's own: each stand-in BAR has a start address inside a root bus
window. The guest runs one vCPU: the tenant's vCPU count does not move the window.

The ``bios`` tenants have one GPU each: with two GPUs of 128 or 256 GiB BAR1, SeaBIOS
(QEMU 10's) lost the first GPU's BAR1 at every width tried (44, 46, 48 bits; it caps its
window at 46), a placement no address width repairs.

The boots run two at a time, all of them when the first test asks (a module fixture).
"""

import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Tuple

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.xml import (
    build_domain_xml, to_string)

from support.domain_xml import private_connection, validate_domain_xml
from support.guest_firmware import (
    GIB, MIB, boot_files, machine_from_xml, missing_bars, parse_guest_report, qemu_argv,
    size_text, tenant_spec)

INTEL, AMD = "GenuineIntel", "AuthenticAMD"
HOST_PHYS_BITS = 52                      # a host with room: the width is the rule's own
A100_40GB = (64 * GIB, 32 * MIB)         # BAR1, BAR3
A100_80GB = (128 * GIB, 32 * MIB)
H100 = (128 * GIB, 32 * MIB)
H200 = (256 * GIB, 32 * MIB)
BOOT_TIMEOUT_S = 150
PARALLEL_BOOTS = 2


@dataclass(frozen=True)
class Tenant:
    name: str
    boards: Tuple[Tuple[int, ...], ...]
    memory_gib: int
    vendor: str
    firmware: str


TENANTS = [
    # the runbook's tenant: one A100 80GB, 64 GiB of RAM, UEFI (the vm role's default
    # for GPU tenants), an Intel host
    Tenant("runbook-a100-80gb", (A100_80GB,), 64, INTEL, "efi"),
    Tenant("eight-h200-2tib", (H200,) * 8, 2048, INTEL, "efi"),
    Tenant("h100-amd", (H100,), 128, AMD, "efi"),
    Tenant("two-h100", (H100,) * 2, 256, INTEL, "efi"),
    Tenant("a100-40gb-bios", (A100_40GB,), 32, INTEL, "bios"),
    Tenant("h200-amd-bios", (H200,), 512, AMD, "bios"),
]


def _why_not():
    for binary in ("qemu-system-x86_64", "apt-get", "dpkg-deb", "virt-xml-validate"):
        if not shutil.which(binary):
            return "%s is missing (bindep.txt, tag test; apt-get: a Debian machine)" % binary
    return None


@dataclass
class Boot:
    tenant: Tenant
    xml: str
    bits: int
    firmware: str
    serial: str
    returncode: int
    seconds: float


def _domain_xml_through_libvirt(tenant, directory):
    """The builder's XML for the tenant, checked by libvirt's schema and as libvirt's
    test driver stores it."""
    spec = tenant_spec("gpu-" + tenant.name, tenant.boards, tenant.memory_gib,
                       tenant.vendor, tenant.firmware, host_phys_bits=HOST_PHYS_BITS)
    xml = to_string(build_domain_xml(spec))
    validate_domain_xml(xml, directory)
    conn = private_connection(directory)
    try:
        return conn.defineXML(xml).XMLDesc(0)
    finally:
        conn.close()


def _boot(tenant, kernel, initramfs, directory):
    xml = _domain_xml_through_libvirt(tenant, directory)
    machine = machine_from_xml(xml)
    argv = qemu_argv(machine, tenant.boards, tenant.vendor, HOST_PHYS_BITS, kernel,
                     initramfs, str(directory))
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                              timeout=BOOT_TIMEOUT_S)
        returncode, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        returncode, output = "timeout after %d s" % BOOT_TIMEOUT_S, ""
    seconds = time.monotonic() - started
    serial_path = os.path.join(str(directory), "serial.log")
    serial = ""
    if os.path.exists(serial_path):
        with open(serial_path, errors="replace") as handle:
            serial = handle.read()
    return Boot(tenant, xml, machine.phys_bits(HOST_PHYS_BITS), machine.firmware,
                serial + output, returncode, seconds)


@pytest.fixture(scope="module")
def boots(request, tmp_path_factory):
    """Every selected tenant booted, two at a time: tenant name -> Boot."""
    why = _why_not()
    if why:
        # a proof that cannot run fails: QEMU, OVMF and the boot files come from
        # bindep.txt through tools/setup
        pytest.fail(why)
    kernel, initramfs = boot_files()
    wanted = [item.callspec.params["tenant"] for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec")]
    with ThreadPoolExecutor(PARALLEL_BOOTS) as pool:
        futures = {t.name: pool.submit(_boot, t, kernel, initramfs,
                                       tmp_path_factory.mktemp(t.name))
                   for t in wanted}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("tenant", TENANTS, ids=[t.name for t in TENANTS])
def test_every_64bit_bar_of_every_gpu_gets_an_address(tenant, boots):
    boot = boots[tenant.name]
    described = "%s: %d x (%s) with %d GiB of RAM, %s, firmware %s, %d address bits" % (
        tenant.name, len(tenant.boards),
        " + ".join(size_text(s) for s in tenant.boards[0]), tenant.memory_gib,
        tenant.vendor, boot.firmware, boot.bits)
    report = parse_guest_report(boot.serial)
    assert report is not None, "%s: the guest printed no PCI report (QEMU %s, %.0f s):\n%s" % (
        described, boot.returncode, boot.seconds, boot.serial[-3000:])
    missing = missing_bars(report, tenant.boards)
    assert not missing, (
        "%s: the guest kernel left BARs without an address:\n  %s\nroot bus windows: %s\n"
        "kernel:\n  %s" % (described, "\n  ".join(missing), report.windows_text(),
                           "\n  ".join(m for m in report.messages
                                       if "can't" in m or "no space" in m
                                       or "root bus" in m)))
    print("%s: every BAR assigned; windows %s; boot %.0f s"
          % (described, report.windows_text(), boot.seconds))
