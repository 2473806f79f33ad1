# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The guest address width rule against OVMF's and SeaBIOS's own window rules, for the
datacentre boards of the runbook (sizes as the boards' BAR1 + BAR3)."""

import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import address_width as aw
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from support import TESTS

GIB = 1 << 30
TIB = 1 << 40
MIB = 1 << 20
A100_40GB = (64 * GIB, 32 * MIB)
A100_80GB = (128 * GIB, 32 * MIB)
H100 = (128 * GIB, 32 * MIB)
H200 = (256 * GIB, 32 * MIB)
INTEL, AMD = aw.INTEL, aw.AMD
FIXTURES = os.path.join(TESTS,
                        "fixtures", "topologies")


def width(boards, memory=64 * GIB, firmware="efi", vendor=INTEL, **kwargs):
    return aw.choose_address_width("tenant-x", memory, boards, firmware=firmware,
                                   vendor=vendor, **kwargs)


def assert_window_holds(result, boards, memory):
    """The window lies above RAM, below the width, and every root port's naturally
    aligned window fits in it, packed largest first."""
    windows = [aw.gpu_window(b) for b in boards]
    assert result.window_base >= aw.ram_end(memory)
    assert result.window_end <= 1 << result.bits
    end = result.window_base
    for size in sorted(windows, reverse=True):
        start = -(-end // size) * size
        assert start % size == 0
        end = start + size
    assert end <= result.window_end


# --------------------------------------------------------------------- firmware rules

@pytest.mark.parametrize("bits, vendor, trusted", [
    (40, INTEL, False), (39, INTEL, True), (36, INTEL, True), (38, INTEL, False),
    (40, AMD, True), (39, AMD, False), (41, INTEL, True), (41, AMD, True),
    (40, None, False), (39, None, False), (36, None, False), (41, None, True),
    (40, "HygonGenuine", False), (46, "HygonGenuine", True),
])
def test_firmware_trusts_a_width_by_cpu_vendor(bits, vendor, trusted):
    assert aw.firmware_trusts(bits, vendor) is trusted


def test_ovmf_keeps_its_classic_32g_window_at_40_bits_on_intel():
    base, size = aw.firmware_window(40, "efi", 64 * GIB, vendor=INTEL)
    assert (base, size) == (96 * GIB, 32 * GIB)     # 68 GiB of RAM end, 32 GiB aligned


def test_ovmf_window_is_the_top_eighth_of_a_trusted_width():
    assert aw.firmware_window(39, "efi", 16 * GIB, vendor=INTEL) == (448 * GIB, 64 * GIB)
    assert aw.firmware_window(40, "efi", 16 * GIB, vendor=AMD) == (896 * GIB, 128 * GIB)
    assert aw.firmware_window(41, "efi-secure", 16 * GIB, vendor=INTEL) == \
        (1792 * GIB, 256 * GIB)


def test_ovmf_caps_the_width_at_46_bits():
    expected = ((1 << 46) - (1 << 43), 1 << 43)
    for bits in (46, 48, 52):
        assert aw.firmware_window(bits, "efi", 64 * GIB, vendor=INTEL) == expected


def test_ovmf_without_1g_pages_uses_40_bits():
    assert aw.firmware_window(44, "efi", 64 * GIB, vendor=INTEL, gib_pages=False) == \
        (896 * GIB, 128 * GIB)
    # an A100 40GB needs a 128 GiB window: 41 bits (40 is not trusted on Intel)
    assert width([A100_40GB], gib_pages=False).bits == 41
    # an H100 needs 256 GiB: no width gives it without 1 GiB pages
    with pytest.raises(GpuhostError) as err:
        width([H100], gib_pages=False)
    assert "1 GiB pages" in str(err.value) and "tenant-x" in str(err.value)


def test_ovmf_keeps_the_classic_window_when_ram_reaches_the_top_eighth():
    # 39 bits, 448 GiB of RAM: the classic base (480 GiB) + 64 GiB passes 512 GiB
    assert aw.firmware_window(39, "efi", 448 * GIB, vendor=INTEL) == (480 * GIB, 32 * GIB)


def test_seabios_untrusted_width_places_the_bars_after_ram():
    base, size = aw.firmware_window(40, "bios", 64 * GIB, [128 * GIB], vendor=INTEL)
    assert (base, size) == (128 * GIB, 128 * GIB)


def test_seabios_trusted_width_pads_the_window_to_an_eighth_at_the_top():
    base, size = aw.firmware_window(41, "bios", 64 * GIB, [128 * GIB], vendor=INTEL)
    assert (base, size) == (1792 * GIB, 256 * GIB)
    # more than an eighth: the window grows in eighths
    base, size = aw.firmware_window(41, "bios", 64 * GIB, [512 * GIB], vendor=INTEL)
    assert (base, size) == (1536 * GIB, 512 * GIB)
    # capped at 46 bits like OVMF
    base, size = aw.firmware_window(48, "bios", 64 * GIB, [128 * GIB], vendor=INTEL)
    assert base + size == 1 << 46


def test_gpu_window_packs_bars_and_rounds_to_a_power_of_two():
    assert aw.gpu_window(H100) == 256 * GIB          # 128 GiB + 32 MiB
    assert aw.gpu_window(A100_40GB) == 128 * GIB
    assert aw.gpu_window((128 * GIB,)) == 128 * GIB
    assert aw.gpu_window(()) == 0


# --------------------------------------------------------------------- boards, UEFI

@pytest.mark.parametrize("boards, vendor, bits", [
    ([A100_40GB], INTEL, 41),     # 40 would fit, but Intel's 40 is not trusted
    ([A100_40GB], AMD, 40),
    ([A100_80GB], INTEL, 41),
    ([A100_80GB], AMD, 41),
    ([H100], INTEL, 41),
    ([H200], INTEL, 42),
    ([H200], AMD, 42),
    ([H100] * 2, INTEL, 42),
    ([H100] * 2, AMD, 42),
    ([H200] * 2, INTEL, 43),
    ([H100] * 8, INTEL, 44),
    ([H200] * 8, AMD, 45),
])
def test_efi_width_for_datacentre_boards(boards, vendor, bits):
    result = width(boards, vendor=vendor)
    assert result.bits == bits
    assert_window_holds(result, boards, 64 * GIB)
    # one bit less does not hold them
    smaller, holds = aw.evaluate(bits - 1, "efi", 64 * GIB, boards, vendor)
    assert not holds


def test_runbook_tenant_a100_80gb_64g_uefi_intel():
    result = width([A100_80GB], memory=64 * GIB, firmware="efi", vendor=INTEL)
    assert result.bits == 41
    assert result.report() == {"bits": 41, "window": "0x1c000000000-0x1ffffffffff",
                               "size_gib": 256, "firmware": "efi",
                               "vendor": "GenuineIntel"}
    assert_window_holds(result, [A100_80GB], 64 * GIB)


def test_a_bios_tenant_without_64bit_bars_reports_no_window_not_an_inverted_range():
    # SeaBIOS opens no 64-bit window for a tenant whose GPUs have none (the lab's
    # emulated VGA GPUs): the report says so instead of "0x140000000-0x13fffffff".
    result = width([], memory=1 * GIB, firmware="bios", vendor=None)
    assert result.window_size == 0
    assert result.report()["window"] == "none"
    assert "window none (0 GiB" in aw.report_text(result.report())


def test_eight_h200_with_2t_ram_on_intel_uefi():
    result = width([H200] * 8, memory=2 * TIB, firmware="efi", vendor=INTEL)
    assert result.bits == 45 and result.window_size == 4 * TIB
    assert result.needed == 8 * 512 * GIB
    assert_window_holds(result, [H200] * 8, 2 * TIB)


def test_unknown_vendor_takes_only_widths_every_vendor_trusts():
    # Intel trusts 39 and AMD 40; neither is safe when the vendor is not known
    a100_32g = [(32 * GIB, 32 * MIB)]
    assert width(a100_32g, vendor=INTEL).bits == 39
    assert width(a100_32g, vendor=None).bits == 41
    assert width([A100_40GB], vendor=None).bits == 41
    assert width([A100_40GB], vendor=None).vendor == "unknown"


def test_efi_refuses_more_than_the_46_bit_window():
    with pytest.raises(GpuhostError) as err:
        width([H200] * 17)                           # 8.5 TiB of windows
    assert "tenant-x" in str(err.value) and "fewer GPUs" in str(err.value)


# --------------------------------------------------------------------- SeaBIOS

@pytest.mark.parametrize("boards, vendor, memory", [
    ([A100_40GB], INTEL, 64 * GIB), ([H100], AMD, 64 * GIB), ([H200], INTEL, 512 * GIB),
])
def test_bios_width_holds_every_window(boards, vendor, memory):
    result = width(boards, memory=memory, firmware="bios", vendor=vendor)
    assert_window_holds(result, boards, memory)
    assert not aw.evaluate(result.bits - 1, "bios", memory, boards, vendor)[1]


def test_bios_at_intel_40_bits_places_after_ram():
    # one A100 40GB (128 GiB window) and 64 GiB of RAM: [128 GiB, 256 GiB) needs 38 bits
    result = width([A100_40GB], firmware="bios")
    assert result.bits == 38 and result.window_base == 128 * GIB


# --------------------------------------------------------------------- host and refusals

def test_refused_when_the_host_is_too_narrow():
    with pytest.raises(GpuhostError) as err:
        aw.choose_address_width("tenant-h200", 64 * GIB, [H200], firmware="efi",
                                vendor=INTEL, host_bits=39, field="plan.gpus")
    text = str(err.value)
    assert err.value.field == "plan.gpus"
    assert "tenant-h200" in text and "42 bits" in text and "has 39" in text
    assert "fewer GPUs" in text and "wider physical address space" in text


def test_host_with_enough_bits_is_not_exceeded():
    assert width([H200], host_bits=42).bits == 42
    assert width([H200], host_bits=46).bits == 42


def test_tenant_without_bars_keeps_qemu_default_or_the_host_width():
    assert width([]).bits == 40
    assert width([()]).bits == 40
    assert width([], host_bits=39).bits == 39
    assert width([], memory=2 * TIB).bits == 42          # RAM alone needs 42


# --------------------------------------------------------------------- where the values come from

def test_cpuinfo_summary_reads_vendor_flags_and_address_sizes():
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
        read_cpuinfo_summary)
    vendor, flags, bits = read_cpuinfo_summary(
        os.path.join(FIXTURES, "util-linux_x86_64-epyc_7451"))
    assert (vendor, bits) == (AMD, 48) and "pdpe1gb" in flags
    vendor, flags, bits = read_cpuinfo_summary(
        os.path.join(FIXTURES, "ghw_intel-i7-1270P-derived-iommu"))
    assert (vendor, bits) == (INTEL, 46)


def test_cpuinfo_without_address_sizes_gives_none(tmp_path):
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
        read_cpuinfo_summary)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text("vendor_id\t: GenuineIntel\nflags\t: fpu\n")
    assert read_cpuinfo_summary(str(tmp_path)) == (INTEL, ("fpu",), None)


def test_slot_bar64_sizes_takes_every_64bit_prefetchable_bar_of_gpu_and_companions():
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
        Bar, PciFunction, slot_bar64_sizes)
    gpu = PciFunction(address="0000:65:00.0", class_code=0x030200, bars=(
        Bar(0, 0xD0000000, 0xD0FFFFFF, 0x40200),                 # 32-bit, not counted
        Bar(1, 0x20000000000, 0x21FFFFFFFFF, 0x14220C),          # 128 GiB
        Bar(3, 0x22000000000, 0x22001FFFFFF, 0x14220C)))         # 32 MiB
    companion = PciFunction(address="0000:65:00.1", class_code=0x120000, bars=(
        Bar(0, 0x23000000000, 0x230FFFFFFFF, 0x14220C),          # 4 GiB
        Bar(2, 0xE0000000, 0xE0003FFF, 0x140204)))               # 64-bit non-pref
    assert slot_bar64_sizes([gpu, companion]) == (128 * GIB, 4 * GIB, 32 * MIB)


def test_plan_carries_bar_sizes_and_the_tenant_address_width():
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
        plan_placement)
    from support.domain_xml import RUNBOOK_GPU, runbook_topology
    plan = plan_placement(runbook_topology(), [{"name": "tenant-a", "gpus": [RUNBOOK_GPU],
                                                "vcpus": 4, "memory_gib": 64}])
    entry = plan["tenants"][0]
    assert entry["gpus"][0]["bar64_sizes"] == [32 * GIB, 32 * MIB]
    # the runbook's Intel host, the vm role's efi: a 64 GiB window is the top eighth of 39
    assert entry["address_width"] == {"bits": 39, "window": "0x7000000000-0x7fffffffff",
                                      "size_gib": 64, "firmware": "efi",
                                      "vendor": INTEL}


def test_plan_refuses_a_tenant_the_host_width_cannot_serve():
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
        plan_placement)
    from support.domain_xml import RUNBOOK_GPU, runbook_topology
    topology = runbook_topology()
    topology.cpus.phys_bits = 38
    with pytest.raises(GpuhostError) as err:
        plan_placement(topology, [{"name": "tenant-a", "gpus": [RUNBOOK_GPU], "vcpus": 4,
                                   "memory_gib": 64}])
    assert err.value.field == "tenants[0].gpus"
    assert "tenant-a" in str(err.value) and "39 bits" in str(err.value)
    assert "has 38" in str(err.value)


def test_plan_entry_without_bar_sizes_counts_the_total_as_one_bar():
    from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
    from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import xml as dx
    from support.domain_xml import runbook_tenant
    tenant = runbook_tenant(memory_gib=64)
    legacy = domain_model.spec_from_plan(tenant, firmware="efi", cpu_vendor=INTEL)
    tenant["gpus"][0]["bar64_sizes"] = [128 * GIB, 32 * MIB]
    sized = domain_model.spec_from_plan(tenant, firmware="efi", cpu_vendor=INTEL)
    assert legacy.gpus[0].bar_sizes() == ((32 * GIB) + (32 * MIB),)
    assert domain_model.address_width_for(legacy).bits == 39
    assert sized.gpus[0].bar_sizes() == (128 * GIB, 32 * MIB)
    assert dx.build_domain_xml(sized).find("cpu/maxphysaddr").attrib == \
        {"mode": "emulate", "bits": "41"}


def test_module_check_mode_and_diff_show_the_width_and_window(tmp_path):
    from support.domain_xml import Env, plan_args
    env = Env(tmp_path)
    result = env.run(check=True, firmware="efi", **plan_args())
    assert result["address_width"] == {"bits": 39, "window": "0x7000000000-0x7fffffffff",
                                       "size_gib": 64, "firmware": "efi",
                                       "vendor": INTEL}
    assert result["diff"]["after_header"] == (
        "tenant-a100: guest address width 39 bits, 64-bit PCI window "
        "0x7000000000-0x7fffffffff (64 GiB, efi, GenuineIntel)")
    assert env.names() == []


def test_module_refuses_a_tenant_wider_than_the_host(tmp_path):
    from support.domain_xml import Env, plan_args, runbook_topology
    topology = runbook_topology()
    topology.cpus.phys_bits = 38
    env = Env(tmp_path, topology=topology)
    err = env.fail(check=True, firmware="efi", **plan_args())
    assert err.field == "plan.gpus"
    assert "tenant-a100" in err.msg and "39 bits" in err.msg and "has 38" in err.msg
    assert "fewer GPUs" in err.fix


def test_plan_report_lists_each_gpu_tenant_width_and_window():
    from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_render
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
        plan_placement)
    from support.domain_xml import RUNBOOK_GPU, runbook_topology
    plan = plan_placement(runbook_topology(), [
        {"name": "tenant-a", "gpus": [RUNBOOK_GPU], "vcpus": 4, "memory_gib": 64},
        {"name": "tenant-cpu", "gpus": 0, "vcpus": 2, "memory_gib": 4}])
    text = plan_render.render_markdown(plan)
    assert ("- tenant-a: guest address width 39 bits, 64-bit PCI window "
            "0x7000000000-0x7fffffffff (64 GiB, efi, GenuineIntel)") in text
    assert "- tenant-cpu:" not in text
    assert plan["tenants"][1]["address_width"] is None


def test_guest_cpu_comes_from_the_host_under_kvm_and_not_under_tcg():
    from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.argument_spec import guest_cpu_of
    from support.domain_xml import runbook_topology
    topology = runbook_topology()
    topology.cpus.phys_bits = 46
    assert guest_cpu_of(topology, "kvm") == {"cpu_vendor": INTEL, "host_phys_bits": 46,
                                             "cpu_1g_pages": True}
    topology.cpus.flags = ("fpu", "lm")
    assert guest_cpu_of(topology, "kvm")["cpu_1g_pages"] is False
    # TCG's CPU is QEMU's own: neither the host's vendor nor its width applies
    assert guest_cpu_of(topology, "qemu") == {}


def test_module_options_take_cpu_and_bars_from_the_host_tree_below_root(tmp_path):
    """What libvirt_pinned_domain reads below root (read_host_topology, as its run()
    does): vendor_id, pdpe1gb and address sizes from proc/cpuinfo, each 64-bit BAR of
    the GPU and its HDA from their sysfs resource files."""
    from support.module_args import patch_module_args
    from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
    from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.argument_spec import (
        domain_spec_from_params)
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
        read_host_topology)
    from ansible_collections.gpuhost.kvm.plugins.modules import libvirt_pinned_domain as mod
    from support import fixturegen
    root = fixturegen.build_runbook_host(str(tmp_path), phys_bits=40)
    with patch_module_args({"name": "tenant-h100", "vcpus": 2, "vcpu_pins": ["1", "33"],
                            "memory_gib": 64, "gpus": [fixturegen.RUNBOOK_GPU],
                            "firmware": "efi", "root": root}):
        params = mod.build_module().params
    topo = read_host_topology(root, with_irqs=False)
    assert (topo.cpus.vendor, topo.cpus.phys_bits) == (INTEL, 40)
    spec = domain_spec_from_params(params, topo)
    assert spec.gpus[0].bar64_sizes == (128 * GIB, 32 * MIB)
    assert (spec.cpu_vendor, spec.host_phys_bits, spec.cpu_1g_pages) == (INTEL, 40, True)
    # a 256 GiB window needs 41 bits; this host has 40
    with pytest.raises(GpuhostError) as err:
        domain_model.address_width_for(spec)
    assert "tenant-h100" in str(err.value) and "41 bits" in str(err.value)
    assert "has 40" in str(err.value)


@pytest.mark.parametrize("boards, memory", [
    ([H100] * 2, 256 * GIB), ([H200] * 2, 64 * GIB), ([H100] * 8, TIB),
    ([H200] * 8, 2 * TIB),
])
def test_bios_refuses_more_than_one_large_bar_gpu_and_names_efi(boards, memory):
    """SeaBIOS 1.16.3 lost a BAR1 of two H100s or H200s at every width tried (the
    real-firmware harness), so no width is offered: the tenant is refused."""
    with pytest.raises(GpuhostError) as err:
        width(boards, memory=memory, firmware="bios")
    assert "tenant-x" in str(err.value) and "SeaBIOS" in str(err.value)
    assert "firmware efi" in err.value.fix
    assert_window_holds(width(boards, memory=memory, firmware="efi"), boards, memory)
