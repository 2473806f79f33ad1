# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdict of the real-firmware BAR test (tests/support/guest_firmware.py) on guest
output captured from its boots, and what it reads from the builder's XML; the boots
themselves are tests/integration/test_guest_firmware_bars.py."""

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.xml import (
    build_domain_xml, to_string)

from support.guest_firmware import (
    GIB, MIB, machine_from_xml, missing_bars, parse_guest_report, tenant_spec)

H100 = (128 * GIB, 32 * MIB)
UNSET = "RES 0x0000000000000000 0x0000000000000000 0x0000000000000000"

# Two H100 stand-ins under SeaBIOS (QEMU 10, AMD, 46 bits): the guest kernel could not
# claim 01:00.0's 128 GiB BAR and left it unset (lines trimmed to the ones read).
TWO_H100_ONE_LOST = """\
[    0.000000] Linux version 6.1.0-57-amd64
GPUHOST-PCI-BEGIN
PCIDEV 0000:00:02.0 0x1b36:0x000c
RES 0x00000000fea00000 0x00000000fea00fff 0x0000000000040200
PCIDEV 0000:01:00.0 0x1b36:0x0005
RES 0x00000000fe800000 0x00000000fe800fff 0x0000000000040200
RES 0x000000000000d000 0x000000000000d0ff 0x0000000000040101
%(unset)s
PCIDEV 0000:01:00.1 0x1b36:0x0005
RES 0x00000000fe801000 0x00000000fe801fff 0x0000000000040200
RES 0x000000000000d100 0x000000000000d1ff 0x0000000000040101
RES 0x0000384800000000 0x0000384801ffffff 0x000000000014220c
PCIDEV 0000:02:00.0 0x1b36:0x0005
RES 0x00000000fe600000 0x00000000fe600fff 0x0000000000040200
RES 0x000000000000c000 0x000000000000c0ff 0x0000000000040101
RES 0x0000380000000000 0x0000381fffffffff 0x000000000014220c
PCIDEV 0000:02:00.1 0x1b36:0x0005
RES 0x00000000fe601000 0x00000000fe601fff 0x0000000000040200
RES 0x000000000000c100 0x000000000000c1ff 0x0000000000040101
RES 0x0000382000000000 0x0000382001ffffff 0x000000000014220c
KMSG [    1.281793] pci_bus 0000:00: root bus resource [mem 0xc0000000-0xfebfffff window]
KMSG [    1.281802] pci_bus 0000:00: root bus resource [mem 0x380000000000-0x384fffffffff window]
KMSG [    2.239767] pci 0000:01:00.0: BAR 2 [mem size 0x2000000000 64bit pref]: can't assign; no space
GPUHOST-PCI-END
[    2.900000] reboot: Power down
""" % {"unset": UNSET}


def test_an_unset_bar_is_named_with_its_board_and_size():
    report = parse_guest_report(TWO_H100_ONE_LOST)
    assert report.windows == [(0xC0000000, 0xFEBFFFFF), (0x380000000000, 0x384FFFFFFFFF)]
    assert missing_bars(report, [H100, H100]) == [
        "GPU 0 (0000:01:00.0) BAR of 128 GiB: no address"]
    assert "320 GiB" in report.windows_text()


def test_every_bar_inside_a_root_window_is_a_pass():
    # the same boot as if the root window had reached 512 GiB and held the lost BAR
    assigned = TWO_H100_ONE_LOST.replace(
        UNSET, "RES 0x0000386000000000 0x0000387fffffffff 0x000000000014220c").replace(
        "0x380000000000-0x384fffffffff window", "0x380000000000-0x387fffffffff window")
    assert missing_bars(parse_guest_report(assigned), [H100, H100]) == []


def test_an_address_outside_every_root_window_is_not_a_pass():
    outside = TWO_H100_ONE_LOST.replace(
        UNSET, "RES 0x0000390000000000 0x0000391fffffffff 0x000000000014220c")
    assert missing_bars(parse_guest_report(outside), [H100, H100]) == [
        "GPU 0 (0000:01:00.0) BAR of 128 GiB: no address"]


def test_a_boot_that_never_printed_the_report_gives_none():
    cut = TWO_H100_ONE_LOST.split("PCIDEV 0000:02:00.0", maxsplit=1)[0]
    assert parse_guest_report(cut) is None


def test_the_boot_takes_ram_firmware_width_and_ports_from_the_builders_xml():
    spec = tenant_spec("gpu-two-h100", (H100, H100), 256, "GenuineIntel", "efi")
    machine = machine_from_xml(to_string(build_domain_xml(spec)))
    assert machine.memory_bytes == 256 * GIB
    assert machine.firmware == "efi"
    assert machine.width_mode == "emulate" and machine.width_bits > 0
    assert machine.phys_bits(52) == machine.width_bits
    assert machine.root_ports == 2
