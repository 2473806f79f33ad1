# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The domain XML builder and normalizer: every XML it can generate passes libvirt's
schema (virt-xml-validate) and round-trips through libvirt's test driver."""

import copy

import pytest
from lxml import etree

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import address_width
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import canonical as domain_canonical
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import xml as dx
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

from support.domain_xml import (RUNBOOK_GPU, RUNBOOK_HDA, RUNBOOK_VF, private_connection,
                                runbook_tenant, validate_domain_xml)

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is in requirements.txt")


def runbook_spec(**overrides):
    overrides.setdefault("disk", domain_model.DiskSpec(path="/var/lib/libvirt/images/tenant-a100.qcow2"))
    overrides.setdefault("seed_path", "/var/lib/libvirt/images/tenant-a100-seed.iso")
    return domain_model.spec_from_plan(runbook_tenant(), **overrides)


# Every shape the module can produce; each one is schema-checked and defined.
VARIANTS = {
    "runbook-vf-interface": {},
    "vf-as-plain-hostdev": {"network": domain_model.NetworkSpec(kind="vf", vf_mode="hostdev")},
    "vf-interface-mac-vlan": {"network": domain_model.NetworkSpec(kind="vf", mac="52:54:00:6C:00:01",
                                                                  vlan=100)},
    "bridge-with-mac": {"network": domain_model.NetworkSpec(kind="bridge", bridge="br0",
                                                            mac="52:54:00:AA:BB:CC")},
    "no-network": {"network": domain_model.NetworkSpec(kind="none")},
    "vcpusched-fifo": {"vcpusched": {"scheduler": "fifo", "priority": 1}},
    "vcpusched-rr-some": {"vcpusched": {"scheduler": "rr", "priority": 10, "vcpus": "0-3"}},
    "kvm-hidden": {"hide_kvm": True},
    "shared-memory": {"memory_access": "shared"},
    "maxphysaddr-passthrough": {"maxphysaddr_mode": "passthrough"},
    "maxphysaddr-emulate-46": {"maxphysaddr_mode": "emulate", "maxphysaddr_bits": 46},
    "maxphysaddr-none": {"maxphysaddr_mode": "none"},
    "tcg-maximum": {"domain_type": "qemu", "cpu_mode": "maximum"},
    # Debian 11's libvirt 7.0 (the el9like lab): no <maxphysaddr>, host-model for maximum
    "libvirt-7.0-auto-width": {"libvirt_version": (7, 0, 0)},
    "libvirt-7.0-tcg-maximum": {"domain_type": "qemu", "cpu_mode": "maximum",
                                "libvirt_version": (7, 0, 0)},
    "no-disk-no-seed": {"disk": None, "seed_path": None},
    "sata-disk-no-iothread": {"disk": domain_model.DiskSpec(path="/srv/a.qcow2", bus="sata",
                                                            target="sdb", iothread=None)},
    "extra-hostdev": {"extra_hostdevs": ("0000:41:00.3",)},
    "explicit-uuid": {"uuid": "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"},
    "rom-bar-gpu-off-vf-interface-on": {"rom_bar": {RUNBOOK_GPU: "off", RUNBOOK_HDA: "off",
                                                    RUNBOOK_VF: "on"}},
    "rom-bar-vf-plain-hostdev": {"network": domain_model.NetworkSpec(kind="vf", vf_mode="hostdev"),
                                 "rom_bar": {RUNBOOK_VF: "off"}},
    "rom-bar-extra-hostdev": {"extra_hostdevs": ("0000:41:00.3",),
                              "rom_bar": {"0000:41:00.3": "off"}},
}


def variant_spec(name):
    overrides = dict(VARIANTS[name])
    if "network" in overrides:
        overrides["network"] = copy.deepcopy(overrides["network"])
    return runbook_spec(**overrides)


def two_gpu_spec():
    spec = runbook_spec()
    spec.gpus.append(domain_model.GpuSpec(address="0000:ca:00.0", bar64_total=64 << 30))
    return spec


def small_spec(**overrides):
    vcpu_pins = overrides.pop("vcpu_pins", [1, 33, 2, 34])
    values = dict(guest_topology={"sockets": 1, "dies": 1, "cores": 2, "threads": 2},
                  memory_nodeset="0", emulator_cpus="0,32", iothreads=1,
                  iothread_cpus="0,32", hugepage_size_kib=2048)
    values.update(overrides)
    return domain_model.spec_from_options("small", 4, vcpu_pins, 2, **values)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("domain_type", ["kvm", "test"])
def test_every_variant_validates_and_round_trips(variant, domain_type, tmp_path):
    spec = variant_spec(variant)
    if spec.domain_type == "kvm":
        spec.domain_type = domain_type
    wanted = dx.build_domain_xml(spec)
    validate_domain_xml(dx.to_string(wanted), tmp_path)
    if spec.domain_type != "test":
        return          # only the test driver defines in-process; the integration
        #                 test defines qemu domains on a real libvirtd
    conn = private_connection(tmp_path)
    domain = conn.defineXML(dx.to_string(wanted))
    actual = domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    validate_domain_xml(actual, tmp_path)
    assert domain_canonical.changed_elements(actual, wanted) == []
    before, after = domain_canonical.canonical_form(actual, wanted)
    assert before == after


def test_two_gpus_get_two_root_ports_and_validate(tmp_path):
    spec = two_gpu_spec()
    spec.domain_type = "test"
    wanted = dx.build_domain_xml(spec)
    validate_domain_xml(dx.to_string(wanted), tmp_path)
    ports = wanted.findall("devices/controller[@model='pcie-root-port']")
    assert [p.get("index") for p in ports] == ["1", "2"]
    buses = {h.find("source/address").get("bus"): h.find("address").get("bus")
             for h in wanted.findall("devices/hostdev")}
    assert buses == {"0x65": "0x01", "0xca": "0x02"}
    domain = private_connection(tmp_path).defineXML(dx.to_string(wanted))
    assert domain_canonical.changed_elements(domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), wanted) == []


def test_small_structured_spec_validates(tmp_path):
    spec = small_spec()
    wanted = dx.build_domain_xml(spec)
    validate_domain_xml(dx.to_string(wanted), tmp_path)
    assert wanted.find("memoryBacking/hugepages/page").attrib == {"size": "2048",
                                                                  "unit": "KiB"}


def test_no_hugepages_spec_validates(tmp_path):
    spec = small_spec(hugepage_size_kib=None)
    wanted = dx.build_domain_xml(spec)
    validate_domain_xml(dx.to_string(wanted), tmp_path)
    assert wanted.find("memoryBacking/hugepages") is None
    assert wanted.find("memoryBacking/locked") is not None


def test_runbook_tenant_has_section_8_shape():
    xml = dx.build_domain_xml(runbook_spec())
    assert xml.get("type") == "kvm"
    assert xml.find("os/type").get("machine") == "q35"
    cpu = xml.find("cpu")
    assert (cpu.get("mode"), cpu.get("check")) == ("host-passthrough", "none")
    assert cpu.find("topology").attrib == {"sockets": "1", "dies": "1", "cores": "15",
                                           "threads": "2"}
    assert cpu.find("numa/cell").attrib == {"id": "0", "cpus": "0-29",
                                            "memory": str(32 * 1024 * 1024), "unit": "KiB"}
    pins = [(p.get("vcpu"), p.get("cpuset")) for p in xml.findall("cputune/vcpupin")]
    assert pins[:4] == [("0", "1"), ("1", "33"), ("2", "2"), ("3", "34")]
    assert len(pins) == 30
    assert xml.find("cputune/emulatorpin").get("cpuset") == "0,32"
    assert [(p.get("iothread"), p.get("cpuset")) for p in xml.findall("cputune/iothreadpin")] \
        == [("1", "0,32"), ("2", "0,32")]
    assert xml.findtext("iothreads") == "2"
    assert xml.find("numatune/memory").attrib == {"mode": "strict", "nodeset": "0"}
    assert xml.find("numatune/memnode").attrib == {"cellid": "0", "mode": "strict",
                                                   "nodeset": "0"}
    assert xml.find("memoryBacking/hugepages/page").attrib == {"size": "1048576",
                                                               "unit": "KiB"}
    assert xml.find("memoryBacking/locked") is not None
    # KVM stays visible by default: hiding it costs a Linux guest kvmclock and the
    # paravirtual features, and only Windows consumer-GPU drivers looked for it
    assert xml.find("features/kvm") is None
    assert xml.find("seclabel") is None
    assert xml.find("devices/disk[@device='disk']/driver").get("iothread") == "1"
    assert xml.find("devices/disk[@device='cdrom']/readonly") is not None
    assert xml.find("devices/serial[@type='pty']") is not None
    assert xml.find("devices/console/target").attrib == {"type": "serial", "port": "0"}
    vf = xml.find("devices/interface[@type='hostdev']")
    assert domain_canonical.pci_source_key(vf) == RUNBOOK_VF


def test_gpu_and_hda_share_one_guest_slot_with_host_function_numbers():
    xml = dx.build_domain_xml(runbook_spec())
    hostdevs = {domain_canonical.pci_source_key(h): h for h in xml.findall("devices/hostdev")}
    assert set(hostdevs) == {RUNBOOK_GPU, RUNBOOK_HDA}
    for hostdev in hostdevs.values():
        assert hostdev.get("managed") == "yes"
        assert hostdev.find("driver").get("name") == "vfio"
    gpu, hda = hostdevs[RUNBOOK_GPU].find("address"), hostdevs[RUNBOOK_HDA].find("address")
    assert (gpu.get("bus"), gpu.get("slot"), gpu.get("function")) == ("0x01", "0x00", "0x0")
    assert (hda.get("bus"), hda.get("slot"), hda.get("function")) == ("0x01", "0x00", "0x1")
    assert gpu.get("multifunction") == "on"
    assert hda.get("multifunction") is None
    port = xml.find("devices/controller[@index='1']")
    assert port.attrib == {"type": "pci", "index": "1", "model": "pcie-root-port"}


def test_single_function_gpu_has_no_multifunction():
    spec = runbook_spec()
    spec.gpus = [domain_model.GpuSpec(address=RUNBOOK_GPU)]
    address = dx.build_domain_xml(spec).find("devices/hostdev/address")
    assert address.get("multifunction") is None


# ----------------------------------------------------------------------- maxphysaddr

def _width(memory, boards, firmware="efi", vendor="GenuineIntel"):
    return address_width.choose_address_width("tenant-x", memory, boards,
                                              firmware=firmware, vendor=vendor)


def test_phys_bits_a100_with_64g_ram_takes_the_width_intel_ovmf_trusts():
    # 32 GiB BAR1 + 32 MiB BAR3 -> a 64 GiB root-port window: 39 bits (trusted on
    # Intel) opens the top eighth, [448 GiB, 512 GiB); 40 would not be trusted.
    result = _width(64 << 30, [((32 << 30), (32 << 20))])
    assert result.bits == 39
    assert (result.window_base, result.window_size) == (448 << 30, 64 << 30)


def test_phys_bits_eight_h100_with_1t_ram():
    # 8 x (128 GiB + 32 MiB) -> 8 windows of 256 GiB = 2 TiB: the top eighth of 44
    # bits. 43 bits (what the rule before gave) opens only 1 TiB.
    boards = [((128 << 30), (32 << 20))] * 8
    result = _width(1 << 40, boards)
    assert result.bits == 44
    assert result.window_base >= address_width.ram_end(1 << 40)
    assert address_width.pack_windows(result.window_base, [256 << 30] * 8) <= \
        result.window_end
    assert not address_width.evaluate(43, "efi", 1 << 40, boards, "GenuineIntel")[1]


def test_phys_bits_grow_with_bars_and_refuse_past_the_firmware_window():
    small = _width(16 << 30, [(16 << 30,)])
    large = _width(16 << 30, [(4 << 40,)])
    # OVMF's classic window [32 GiB, 64 GiB) holds 16 GiB at 36 bits (trusted on Intel)
    assert small.bits == 36 and small.window_base == 32 << 30
    assert large.bits == 45            # a 4 TiB window is the top eighth of 45 bits
    with pytest.raises(GpuhostError) as err:
        _width(16 << 30, [(16 << 40,)])  # more than OVMF's 8 TiB window at 46 bits
    assert "tenant-x" in str(err.value)


def test_auto_maxphysaddr_is_written_as_emulate_bits():
    spec = runbook_spec()
    spec.gpus[0].bar64_total = 4 << 40          # forces more than 40 bits
    element = dx.build_domain_xml(spec).find("cpu/maxphysaddr")
    # SeaBIOS (the spec's firmware) grows its window in eighths: 4 TiB at 43 bits
    assert element.attrib == {"mode": "emulate", "bits": "43"}
    assert domain_model.address_width_for(spec).bits == 43


def test_libvirt_before_8_7_gets_no_maxphysaddr_and_reports_qemus_default_width():
    # libvirt 7.0 drops <maxphysaddr> without a word (seen on the el9like lab): written,
    # it would make every run define the domain again.
    spec = runbook_spec(libvirt_version=(8, 6, 0))
    assert dx.build_domain_xml(spec).find("cpu/maxphysaddr") is None
    width = domain_model.address_width_for(spec)
    assert width.bits == address_width.QEMU_DEFAULT_PHYS_BITS
    newer = runbook_spec(libvirt_version=(8, 7, 0))
    assert dx.build_domain_xml(newer).find("cpu/maxphysaddr") is not None


def test_libvirt_before_8_7_refuses_bars_beyond_qemus_default_width():
    spec = runbook_spec(libvirt_version=(7, 0, 0))
    spec.gpus[0].bar64_total = 4 << 40          # needs 43 bits (see above)
    with pytest.raises(GpuhostError) as err:
        dx.build_domain_xml(spec)
    assert err.value.field == spec.option("gpus")
    assert "libvirt 7.0.0" in str(err.value) and "8.7.0" in err.value.fix


@pytest.mark.parametrize("mode, bits", [("emulate", 42), ("passthrough", None)])
def test_libvirt_before_8_7_refuses_an_explicit_width(mode, bits):
    spec = runbook_spec(libvirt_version=(7, 0, 0), maxphysaddr_mode=mode,
                        maxphysaddr_bits=bits)
    with pytest.raises(GpuhostError) as err:
        domain_model.address_width_for(spec)
    assert err.value.field == "maxphysaddr.mode" and "7.0.0" in str(err.value)
    assert domain_model.address_width_for(runbook_spec(libvirt_version=(7, 0, 0),
                                                       maxphysaddr_mode="none")) is None


def test_cpu_mode_maximum_before_libvirt_7_1_is_host_model_under_tcg_and_refused_under_kvm():
    tcg = runbook_spec(domain_type="qemu", cpu_mode="maximum", libvirt_version=(7, 0, 0))
    assert dx.build_domain_xml(tcg).find("cpu").get("mode") == "host-model"
    current = runbook_spec(domain_type="qemu", cpu_mode="maximum", libvirt_version=(7, 1, 0))
    assert dx.build_domain_xml(current).find("cpu").get("mode") == "maximum"
    kvm = runbook_spec(cpu_mode="maximum", libvirt_version=(7, 0, 0))
    with pytest.raises(GpuhostError) as err:
        dx.build_domain_xml(kvm)
    assert err.value.field == "cpu_mode" and "7.1.0" in str(err.value)


@pytest.mark.parametrize("firmware", ["efi", "efi-secure"])
def test_uefi_before_libvirt_7_2_is_refused_naming_the_firmware(firmware):
    # libvirt 7.0 drops <firmware><feature> and boots Debian 11's Secure Boot build
    with pytest.raises(GpuhostError) as err:
        dx.build_domain_xml(runbook_spec(firmware=firmware, libvirt_version=(7, 1, 0)))
    assert err.value.field == "firmware" and "7.2.0" in str(err.value) and "bios" in err.value.fix
    # (the runbook GPU's BARs need more than QEMU's default width: left to QEMU here)
    assert dx.build_domain_xml(runbook_spec(firmware=firmware, libvirt_version=(7, 2, 0),
                                            maxphysaddr_mode="none")) \
        .find("os/firmware/feature") is not None
    assert dx.build_domain_xml(runbook_spec(firmware="bios", libvirt_version=(7, 0, 0))) \
        .find("os").get("firmware") is None


def test_large_bars_on_the_test_driver_before_libvirt_8_7_leave_maxphysaddr_out():
    # BARs beyond QEMU's 40 bits: refused where a guest boots, left to libvirt's test
    # driver (which boots nothing) without the element.
    for domain_type in ("kvm", "test"):
        spec = runbook_spec(domain_type=domain_type, libvirt_version=(7, 0, 0))
        spec.gpus[0].bar64_total = 4 << 40          # needs 43 bits
        if domain_type == "kvm":
            with pytest.raises(GpuhostError):
                dx.build_domain_xml(spec)
        else:
            assert dx.build_domain_xml(spec).find("cpu/maxphysaddr") is None


def test_uefi_on_the_test_driver_before_libvirt_7_2_leaves_the_build_choice_out():
    # The test driver boots nothing (a RHEL 9 module run through Debian 11's libvirt 7.0
    # Python binding): no refusal, and no <feature> that libvirt would drop on define.
    xml = dx.build_domain_xml(runbook_spec(firmware="efi", domain_type="test", libvirt_version=(7, 0, 0),
                                           maxphysaddr_mode="none"))
    assert xml.find("os").get("firmware") == "efi" and xml.find("os/firmware") is None
    with pytest.raises(GpuhostError):
        dx.build_domain_xml(runbook_spec(firmware="efi", domain_type="qemu", libvirt_version=(7, 0, 0),
                                         maxphysaddr_mode="none"))


# ----------------------------------------------------------------------- normalizer

QEMU_ASSIGNED = """
<domain type='kvm'>
  <name>tenant-a100</name>
  <uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid>
  <metadata><libosinfo:libosinfo xmlns:libosinfo='http://libosinfo.org/xmlns/libvirt/domain/1.0'/></metadata>
  <resource><partition>/machine</partition></resource>
  <seclabel type='dynamic' model='apparmor' relabel='yes'/>
"""


def qemu_like(wanted):
    """The wanted XML dressed the way qemu:///system writes it back: uuid, machine
    pc-q35-7.2, migratable, MACs, aliases, device addresses, implicit controllers,
    input devices, memballoon, isa-serial model, seclabel, resource."""
    actual = copy.deepcopy(wanted)
    extra = etree.fromstring(QEMU_ASSIGNED + "</domain>")
    for child in reversed(list(extra)[1:]):
        if actual.find(child.tag) is None:
            actual.insert(1, child)
    actual.find("os/type").set("machine", "pc-q35-7.2")
    actual.find("cpu").set("migratable", "on")
    devices = actual.find("devices")
    etree.SubElement(devices, "emulator").text = "/usr/bin/qemu-system-x86_64"
    for index, model in ((0, "pcie-root"), (2, "pcie-root-port"), (3, "pcie-root-port")):
        controller = etree.SubElement(devices, "controller", type="pci", index=str(index),
                                      model=model)
        if index:
            etree.SubElement(controller, "model", name="pcie-root-port")
            etree.SubElement(controller, "target", chassis=str(index), port="0x1%d" % index)
    etree.SubElement(devices, "controller", type="sata", index="0")
    etree.SubElement(devices, "input", type="mouse", bus="ps2")
    etree.SubElement(devices, "memballoon", model="virtio")
    for device in devices:
        if device.tag in ("disk", "interface") and device.find("address") is None:
            etree.SubElement(device, "address", type="pci", domain="0x0000", bus="0x02",
                             slot="0x00", function="0x0")
        if device.tag == "interface":
            device.insert(0, etree.Element("mac", address="52:54:00:12:34:56"))
    port1 = devices.find("controller[@index='1']")
    etree.SubElement(port1, "model", name="pcie-root-port")
    etree.SubElement(port1, "target", chassis="1", port="0x10")
    serial_target = devices.find("serial/target")
    serial_target.set("type", "isa-serial")
    etree.SubElement(serial_target, "model", name="isa-serial")
    return actual


def test_normalizer_ignores_what_libvirt_assigns():
    wanted = dx.build_domain_xml(runbook_spec())
    actual = qemu_like(wanted)
    assert domain_canonical.changed_elements(actual, wanted) == []
    before, after = domain_canonical.canonical_form(etree.tostring(actual), wanted)
    assert before == after


def test_normalizer_keeps_a_uuid_the_user_gave():
    wanted = dx.build_domain_xml(runbook_spec(uuid="4dea22b3-1d52-d8f3-2516-782e98ab3fa1"))
    assert domain_canonical.changed_elements(qemu_like(wanted), wanted) == []   # same uuid: no change
    other = qemu_like(wanted)
    other.find("uuid").text = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
    assert "uuid" in domain_canonical.changed_elements(other, wanted)


@pytest.mark.parametrize("mutate, expected", [
    (lambda x: x.find("cputune/vcpupin[@vcpu='3']").set("cpuset", "35"), "cputune/vcpupin 3"),
    (lambda x: x.find("cputune/emulatorpin").set("cpuset", "0"), "cputune/emulatorpin"),
    (lambda x: x.find("numatune/memory").set("nodeset", "1"), "numatune/memory"),
    (lambda x: x.find("memoryBacking").remove(x.find("memoryBacking/locked")), "memoryBacking"),
    (lambda x: x.find("devices").remove(x.find("devices/hostdev")),
     "devices/hostdev 0000:65:00.0"),
    (lambda x: etree.SubElement(etree.SubElement(x.find("features"), "kvm"), "hidden",
                                state="on"), "features"),
    (lambda x: x.find("cpu/maxphysaddr").set("bits", "46"), "cpu"),
    (lambda x: x.find("devices/controller[@index='1']").set("model", "pci-bridge"),
     "devices/controller pci 1"),
])
def test_normalizer_reports_what_differs(mutate, expected):
    wanted = dx.build_domain_xml(runbook_spec())
    actual = qemu_like(wanted)
    mutate(actual)
    assert expected in domain_canonical.changed_elements(actual, wanted)


def test_normalizer_reports_unwanted_extra_device_and_missing_memory_backing():
    spec = runbook_spec()
    wanted = dx.build_domain_xml(spec)
    actual = qemu_like(wanted)
    extra = etree.SubElement(actual.find("devices"), "hostdev", mode="subsystem", type="pci",
                             managed="yes")
    source = etree.SubElement(extra, "source")
    etree.SubElement(source, "address", domain="0x0000", bus="0x02", slot="0x00",
                     function="0x0")
    assert "devices/hostdev 0000:02:00.0" in domain_canonical.changed_elements(actual, wanted)
    spec.hugepage_size_kib = None
    spec.locked = False
    no_backing = dx.build_domain_xml(spec)
    assert "memoryBacking" in domain_canonical.changed_elements(qemu_like(wanted), no_backing)


def test_new_domain_is_one_change():
    assert domain_canonical.changed_elements(None, dx.build_domain_xml(runbook_spec())) == ["domain"]


def test_merge_keeps_uuid_mac_and_addresses_of_the_existing_domain():
    wanted = dx.build_domain_xml(runbook_spec())
    existing = qemu_like(wanted)
    merged = domain_canonical.merge_assigned(wanted, etree.tostring(existing))
    assert merged.findtext("uuid") == "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
    assert merged.find("devices/interface/mac").get("address") == "52:54:00:12:34:56"
    assert merged.find("devices/disk[@device='disk']/address").get("bus") == "0x02"
    # libvirt's implicit controllers come along, ours are not duplicated
    indexes = [c.get("index") for c in merged.findall("devices/controller[@type='pci']")]
    assert sorted(indexes) == ["0", "1", "2", "3"]
    assert wanted.find("uuid") is None          # the wanted tree is not modified


def test_merge_drops_an_old_address_on_a_gpu_root_port():
    wanted = dx.build_domain_xml(runbook_spec())
    existing = qemu_like(wanted)
    existing.find("devices/disk[@device='disk']/address").set("bus", "0x01")
    merged = domain_canonical.merge_assigned(wanted, existing)
    assert merged.find("devices/disk[@device='disk']/address") is None


# ----------------------------------------------------------------------- refusals

@pytest.mark.parametrize("change, field", [
    (lambda t: t.update(vcpu_pins=t["vcpu_pins"][:-1]), "plan.vcpu_pins"),
    (lambda t: t.update(guest_topology={"sockets": 1, "dies": 1, "cores": 16, "threads": 2}),
     "plan.guest_topology"),
    (lambda t: t.update(memory_gib=32.5), "plan.memory_gib"),
    (lambda t: t.update(name="bad name"), "name"),
    (lambda t: t["gpus"][0].update(functions=[RUNBOOK_GPU, "0000:66:00.1"]),
     "plan.gpus[0].functions"),
    (lambda t: t.update(vcpu_pins=["1-"] + t["vcpu_pins"][1:]), "plan.vcpu_pins[0]"),
])
def test_bad_plan_entries_are_refused_with_field(change, field):
    tenant = runbook_tenant()
    change(tenant)
    with pytest.raises(GpuhostError) as err:
        domain_model.spec_from_plan(tenant)
    assert err.value.field == field
    assert err.value.fix


def test_hostdev_twice_is_refused():
    with pytest.raises(GpuhostError, match="passed through twice"):
        runbook_spec(extra_hostdevs=(RUNBOOK_HDA,))


def test_vf_network_without_plan_vf_is_refused():
    with pytest.raises(GpuhostError) as err:
        domain_model.spec_from_plan(runbook_tenant(vf=False), network=domain_model.NetworkSpec(kind="vf"))
    assert err.value.field == "network.type"


def test_vcpusched_priority_range_is_checked():
    with pytest.raises(GpuhostError) as err:
        runbook_spec(vcpusched={"scheduler": "fifo", "priority": 0})
    assert err.value.field == "vcpusched.priority"


@pytest.mark.parametrize("text, kib", [("1G", 1048576), ("2M", 2048), ("2MiB", 2048),
                                       ("1048576", 1048576), ("none", None)])
def test_hugepage_sizes(text, kib):
    assert domain_model.hugepage_size_to_kib(text) == kib


# -------------------------------------------------------- the plan's VF MAC and VLAN

VF_MAC = "52:54:00:6c:00:01"


def plan_vf_spec(**vf_keys):
    overrides = {k: vf_keys.pop(k) for k in list(vf_keys) if k in ("network", "domain_type")}
    return domain_model.spec_from_plan(runbook_tenant(**vf_keys), disk=None, seed_path=None, **overrides)


def test_plan_vf_mac_and_vlan_go_into_the_interface_and_validate(tmp_path):
    spec = plan_vf_spec(mac=VF_MAC, vlan=100, domain_type="test")
    wanted = dx.build_domain_xml(spec)
    interface = wanted.find("devices/interface[@type='hostdev']")
    assert interface.find("mac").get("address") == VF_MAC
    assert [t.get("id") for t in interface.findall("vlan/tag")] == ["100"]
    validate_domain_xml(dx.to_string(wanted), tmp_path)
    domain = private_connection(tmp_path).defineXML(dx.to_string(wanted))
    actual = domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    validate_domain_xml(actual, tmp_path)
    assert "<tag id='100'/>" in actual and VF_MAC in actual
    assert domain_canonical.changed_elements(actual, wanted) == []


@pytest.mark.parametrize("vf_keys", [
    {},                                                              # nic_vf: true
    {"mac": ..., "vlan": ..., "index": ..., "spoofchk": ..., "trust": ...},   # an old plan
    {"vlan": 0, "spoofchk": False, "trust": True},                   # no XML for these
])
def test_a_plan_vf_without_mac_or_vlan_writes_neither(vf_keys, tmp_path):
    wanted = dx.build_domain_xml(plan_vf_spec(**vf_keys))
    interface = wanted.find("devices/interface")
    assert interface.find("mac") is None and interface.find("vlan") is None
    validate_domain_xml(dx.to_string(wanted), tmp_path)


@pytest.mark.parametrize("old, new, expected", [
    ({"vlan": 100}, {"vlan": 200}, ["devices/interface hostdev 0000:41:00.2"]),
    ({"vlan": 100}, {"vlan": 0}, ["devices/interface hostdev 0000:41:00.2"]),
    ({}, {"vlan": 100}, ["devices/interface hostdev 0000:41:00.2"]),
    ({"mac": VF_MAC}, {"mac": "52:54:00:6c:00:02"}, ["devices/interface hostdev 0000:41:00.2"]),
    ({"mac": VF_MAC, "vlan": 7}, {"mac": VF_MAC.upper(), "vlan": 7}, []),
    ({"vlan": 7}, {"vlan": 7, "spoofchk": False}, []),          # sriov_vfs's business
])
def test_the_comparison_treats_mac_and_vlan_as_significant(old, new, expected, tmp_path):
    before = dx.build_domain_xml(plan_vf_spec(domain_type="test", **old))
    actual = private_connection(tmp_path).defineXML(dx.to_string(before)).XMLDesc(
        libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert domain_canonical.changed_elements(actual, dx.build_domain_xml(
        plan_vf_spec(domain_type="test", **new))) == expected


def test_network_options_override_the_plan_vf_settings():
    spec = plan_vf_spec(mac=VF_MAC, vlan=100,
                        network=domain_model.NetworkSpec(kind="vf", mac="52:54:00:00:00:0a", vlan=0))
    assert (spec.network.mac, spec.network.vlan) == ("52:54:00:00:00:0a", None)
    spec = plan_vf_spec(mac=VF_MAC, vlan=100, network=domain_model.NetworkSpec(kind="vf", vlan=5))
    assert (spec.network.mac, spec.network.vlan) == (VF_MAC, 5)
    # Another VF than the plan's: the plan's settings are not its own.
    spec = plan_vf_spec(mac=VF_MAC, vlan=100, network=domain_model.NetworkSpec(
        kind="vf", vf_address="0000:41:00.5"))
    assert (spec.network.mac, spec.network.vlan) == (None, None)
    # A plain hostdev carries neither; sriov_vfs sets them on the VF.
    spec = plan_vf_spec(mac=VF_MAC, vlan=100, network=domain_model.NetworkSpec(kind="vf",
                                                                               vf_mode="hostdev"))
    xml = dx.build_domain_xml(spec)
    assert xml.find("devices/interface") is None and b"vlan" not in etree.tostring(xml)


@pytest.mark.parametrize("network, field, words", [
    (domain_model.NetworkSpec(kind="bridge", bridge="br0", vlan=10), "network.vlan", "vf_mode interface"),
    (domain_model.NetworkSpec(kind="vf", vf_mode="hostdev", vlan=10), "network.vlan", "vf_mode hostdev"),
    (domain_model.NetworkSpec(kind="vf", vlan=4095), "network.vlan", "outside 0..4094"),
    (domain_model.NetworkSpec(kind="vf", mac="01:00:5e:00:00:01"), "network.mac", "multicast"),
    (domain_model.NetworkSpec(kind="vf", mac=VF_MAC + "\n"), "network.mac", "not a MAC"),
])
def test_bad_network_mac_or_vlan_is_refused(network, field, words):
    with pytest.raises(GpuhostError) as excinfo:
        plan_vf_spec(network=network)
    assert excinfo.value.field == field and words in excinfo.value.message


def test_rom_bar_is_written_in_each_named_hostdev_only(tmp_path):
    spec = runbook_spec(rom_bar={RUNBOOK_GPU: "off", RUNBOOK_VF: "on"})
    wanted = dx.build_domain_xml(spec)
    roms = {domain_canonical.pci_source_key(h): [r.get("bar") for r in h.findall("rom")]
            for h in wanted.findall("devices/hostdev") + wanted.findall("devices/interface")}
    assert roms == {RUNBOOK_GPU: ["off"], RUNBOOK_HDA: [], RUNBOOK_VF: ["on"]}
    gpu = [h for h in wanted.findall("devices/hostdev")
           if domain_canonical.pci_source_key(h) == RUNBOOK_GPU][0]
    # libvirt's order: driver, source, rom, then the guest address
    assert [c.tag for c in gpu] == ["driver", "source", "rom", "address"]
    assert "<rom" not in dx.to_string(dx.build_domain_xml(runbook_spec()))
    validate_domain_xml(dx.to_string(wanted), tmp_path)


@pytest.mark.parametrize("call, field", [
    # Before: vcpus 10**400 passed, and the refusal blamed vcpu_pins.
    (lambda: domain_model.spec_from_options("small", 10 ** 400, [1, 2], 2), "vcpus"),
    (lambda: domain_model.spec_from_options("small", "8193", [0] * 8193, 2), "vcpus"),
    (lambda: small_spec(iothreads=10 ** 400), "iothreads"),
    (lambda: small_spec(guest_topology={"sockets": 10 ** 400, "cores": 1}),
     "guest_topology.sockets"),
    (lambda: domain_model.spec_from_plan(dict(name="t", vcpus=2, vcpu_pins=[1, 2], memory_gib=2,
                                              iothreads=65)), "plan.iothreads"),
    (lambda: domain_model.spec_from_plan(dict(name="t", vcpus=2, vcpu_pins=[1, 2], memory_gib=2,
                                              gpus=[{"address": "0000:41:00.0",
                                                     "bar64_total": 1 << 60}])),
     "plan.gpus[0].bar64_total"),
])
def test_every_count_of_a_domain_is_bounded_naming_its_option(call, field):
    with pytest.raises(GpuhostError) as info:
        call()
    assert info.value.field == field and "must be at most" in info.value.msg
