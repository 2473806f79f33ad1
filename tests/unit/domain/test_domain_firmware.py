# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The firmware option of libvirt_pinned_domain (UEFI guests): the XML passes
libvirt's schema (virt-xml-validate) and round-trips through libvirt's test driver;
the loader and NVRAM that libvirt's auto-selection fills in are no difference; a
change of firmware is a definition change that restarts a running tenant; and the
preflight reads the firmware descriptors below a root and refuses a UEFI tenant on a
host without OVMF.

The Debian tree is Debian 12's ovmf package itself: its three descriptors as the
package installs them and its file list (tests/fixtures/firmware/debian-12-ovmf), with
stand-ins for the .fd images and the package's links as links (OVMF_CODE_4M.ms.fd ->
OVMF_CODE_4M.secboot.fd). The RHEL tree (edk2-ovmf) is written in the same JSON shape
(QEMU's docs/interop/firmware.json) with the file names Red Hat's tp-libvirt firmware
tests use, /usr/share/edk2/ovmf/OVMF_CODE.secboot.fd with OVMF_VARS.secboot.fd; its
descriptor file names are illustrative."""

import json
import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import compare
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import preflight as pf
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import xml as dx
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

from support.domain_xml import (private_connection, runbook_tenant, runbook_topology,
                                validate_domain_xml)
from support import TESTS

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is in requirements.txt")

DEBIAN_OVMF = os.path.join(TESTS, "fixtures", "firmware",
                           "debian-12-ovmf")
DEBIAN_DESCRIPTORS = ("40-edk2-x86_64-secure-enrolled.json", "50-edk2-x86_64-secure.json",
                      "60-edk2-x86_64.json")
X86_Q35 = [{"architecture": "x86_64", "machines": ["pc-q35-*"]}]
RHEL_DESCRIPTORS = {
    "30-edk2-ovmf-x64-sb-enrolled.json": (
        "/usr/share/edk2/ovmf/OVMF_CODE.secboot.fd", "/usr/share/edk2/ovmf/OVMF_VARS.secboot.fd",
        ["acpi-s3", "enrolled-keys", "requires-smm", "secure-boot", "verbose-dynamic"]),
    "50-edk2-ovmf-x64-nosb.json": (
        "/usr/share/edk2/ovmf/OVMF_CODE.fd", "/usr/share/edk2/ovmf/OVMF_VARS.fd",
        ["acpi-s3", "verbose-dynamic"]),
}


def descriptor_json(code, variables, features, targets=None):
    return json.dumps({
        "description": "OVMF for x86_64",
        "interface-types": ["uefi"],
        "mapping": {"device": "flash",
                    "executable": {"filename": code, "format": "raw"},
                    "nvram-template": {"filename": variables, "format": "raw"}},
        "targets": targets or X86_Q35, "features": features, "tags": []}, indent=4)


def _stand_in(root, path):
    target = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as out:
        out.write(b"\0" * 64)


def install_debian_ovmf(root, descriptors=DEBIAN_DESCRIPTORS, images=True):
    """Debian 12's ovmf below ``root``: the package's ``descriptors`` and (``images``)
    every other file of its list, the .fd images as stand-ins, links as links."""
    folder = os.path.join(str(root), "usr/share/qemu/firmware")
    os.makedirs(folder, exist_ok=True)
    for name in descriptors:
        with open(os.path.join(DEBIAN_OVMF, name), "rb") as source, \
                open(os.path.join(folder, name), "wb") as out:
            out.write(source.read())
    with open(os.path.join(DEBIAN_OVMF, "FILES"), encoding="utf-8") as listing:
        entries = [line.strip().split(" -> ") for line in listing if line.strip()]
    for entry in entries:
        if not images or entry[0].startswith("usr/share/qemu/firmware/"):
            continue
        if len(entry) == 2:
            link = os.path.join(str(root), entry[0])
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(entry[1], link)
        else:
            _stand_in(root, entry[0])
    return str(root)


def install_rhel_ovmf(root, images=True):
    folder = os.path.join(str(root), "usr/share/qemu/firmware")
    os.makedirs(folder, exist_ok=True)
    for name, (code, variables, features) in RHEL_DESCRIPTORS.items():
        with open(os.path.join(folder, name), "w") as out:
            out.write(descriptor_json(code, variables, features))
        if images:
            _stand_in(root, code)
            _stand_in(root, variables)
    return str(root)


def spec(firmware="bios", **overrides):
    overrides.setdefault("disk", domain_model.DiskSpec(path="/var/lib/libvirt/images/tenant-a100.qcow2"))
    overrides.setdefault("seed_path", None)
    return domain_model.spec_from_plan(runbook_tenant(), firmware=firmware, **overrides)


def defined_by_libvirt(tmp_path, xml_text, active=True):
    dom = private_connection(tmp_path).defineXML(xml_text)
    return compare.ExistingDomain(
        inactive_xml=dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), active=active,
        autostart=True, uuid=dom.UUIDString())


NVRAM = "/var/lib/libvirt/qemu/nvram/tenant-a100_VARS.fd"


def autoselected(wanted, code=None, variables=None, secure=False):
    """``wanted`` as libvirt's QEMU driver writes it back: with ``code``, as libvirt 9.2
    and later store the auto-selection's choice at define (a <loader> and an <nvram>
    from the template after <firmware>, libvirt's order; they also add format='raw' to
    both, which the 9.0 schema here does not know, and the comparison drops the whole
    elements either way); without, as libvirt 9.0 (Debian 12) does, which selects at
    start and stores only the guest's NVRAM path."""
    os_element = wanted.find("os")
    index = list(os_element).index(os_element.find("firmware")) + 1
    nvram = dx.etree.Element("nvram")
    nvram.text = NVRAM
    if code:
        loader = dx.etree.Element("loader", readonly="yes", type="pflash")
        if secure:
            loader.set("secure", "yes")
        loader.text = code
        os_element.insert(index, loader)
        index += 1
        nvram.set("template", variables)
    os_element.insert(index, nvram)
    return wanted


# -- the XML ---------------------------------------------------------------------------

@pytest.mark.parametrize("firmware", domain_model.FIRMWARE_CHOICES)
def test_every_firmware_validates_and_round_trips_on_the_test_driver(firmware, tmp_path):
    wanted = dx.build_domain_xml(spec(firmware))
    validate_domain_xml(dx.to_string(wanted), tmp_path)
    test_spec = spec(firmware, domain_type="test")
    wanted = dx.build_domain_xml(test_spec)
    existing = defined_by_libvirt(tmp_path, dx.to_string(wanted))
    validate_domain_xml(existing.inactive_xml, tmp_path)
    change = compare.plan_domain_change(existing, test_spec, "running")
    assert change.changed_elements == [] and change.actions == []
    assert change.diff["before"] == change.diff["after"]


def test_bios_writes_no_firmware_as_before_the_option():
    wanted = dx.build_domain_xml(spec("bios"))
    os_element = wanted.find("os")
    assert os_element.attrib == {} and [c.tag for c in os_element] == ["type", "boot"]
    assert wanted.find("features/smm") is None


@pytest.mark.parametrize("firmware, enabled, smm", [("efi", "no", None),
                                                    ("efi-secure", "yes", "on")])
def test_efi_asks_libvirt_to_select_ovmf_by_its_features(firmware, enabled, smm):
    wanted = dx.build_domain_xml(spec(firmware))
    os_element = wanted.find("os")
    assert os_element.get("firmware") == "efi"
    assert [c.tag for c in os_element] == ["type", "firmware", "boot"]
    assert [(f.get("name"), f.get("enabled")) for f in os_element.find("firmware")] == [
        ("enrolled-keys", enabled), ("secure-boot", enabled)]
    assert os_element.find("loader") is None and os_element.find("nvram") is None
    found = wanted.find("features/smm")
    assert (found.get("state") if found is not None else None) == smm
    assert wanted.find("os/type").get("machine") == "q35"


@pytest.mark.parametrize("firmware", ["efi", "efi-secure"])
def test_the_nvram_path_libvirt_9_0_stores_is_no_change(firmware, tmp_path):
    """libvirt 9.0's form, defined on the test driver (9.0 here) and read back as
    libvirt stores it, compares equal to the wanted XML: no define, no restart."""
    wanted_spec = spec(firmware, domain_type="test")
    expanded = autoselected(dx.build_domain_xml(wanted_spec))
    existing = defined_by_libvirt(tmp_path, dx.to_string(expanded))
    validate_domain_xml(existing.inactive_xml, tmp_path)
    assert NVRAM in existing.inactive_xml
    change = compare.plan_domain_change(existing, wanted_spec, "running")
    assert change.changed_elements == [] and change.actions == []
    assert change.restart_required is False


@pytest.mark.parametrize("firmware, code, variables", [
    ("efi", "/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"),
    ("efi-secure", "/usr/share/OVMF/OVMF_CODE_4M.ms.fd", "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"),
    ("efi-secure", "/usr/share/edk2/ovmf/OVMF_CODE.secboot.fd",
     "/usr/share/edk2/ovmf/OVMF_VARS.secboot.fd"),
])
def test_the_loader_and_nvram_newer_libvirt_fills_in_are_no_change(firmware, code,
                                                                   variables, tmp_path):
    """libvirt 9.2 and later's form (schema-checked; the 9.0 test driver here refuses a
    loader next to firmware='efi', so it is compared as text, like the qemu_like form
    of test_domain_xml.py) compares equal to the wanted XML on every run."""
    wanted_spec = spec(firmware, domain_type="test")
    expanded = dx.to_string(autoselected(dx.build_domain_xml(wanted_spec), code,
                                         variables, secure=firmware == "efi-secure"))
    validate_domain_xml(expanded, tmp_path)
    existing = compare.ExistingDomain(inactive_xml=expanded, active=True, autostart=True)
    change = compare.plan_domain_change(existing, wanted_spec, "running")
    assert change.changed_elements == [] and change.actions == []
    assert change.restart_required is False
    assert code not in change.diff["before"] and NVRAM not in change.diff["before"]
    # the redefinition of a changed tenant leaves the choice to libvirt again
    changed = compare.plan_domain_change(existing, spec(firmware, domain_type="test",
                                                        hide_kvm=True), "running")
    assert changed.changed_elements == ["features"] and code not in changed.xml_to_define


def test_a_loader_on_a_bios_tenant_is_a_difference(tmp_path):
    """Only auto-selection's own expansion is ignored: a BIOS tenant that somebody gave
    an explicit OVMF loader differs from the wanted XML."""
    wanted_spec = spec("bios", domain_type="test")
    actual = dx.build_domain_xml(wanted_spec)
    loader = dx.etree.Element("loader", readonly="yes", type="pflash")
    loader.text = "/usr/share/OVMF/OVMF_CODE_4M.fd"
    actual.find("os").insert(1, loader)
    existing = defined_by_libvirt(tmp_path, dx.to_string(actual))
    change = compare.plan_domain_change(existing, wanted_spec, "running")
    assert change.changed_elements == ["os"] and change.restart_required is True


# Between SeaBIOS and OVMF the GPU's guest address width changes too (each firmware
# trusts widths and places its 64-bit window by its own rule): <cpu>'s maxphysaddr.
@pytest.mark.parametrize("before, after, changed", [
    ("bios", "efi", ["cpu", "os"]),
    ("efi", "bios", ["cpu", "os"]),
    ("efi", "efi-secure", ["features", "os"]),
    ("efi-secure", "efi", ["features", "os"]),
])
def test_a_change_of_firmware_redefines_and_restarts_a_running_tenant(
        before, after, changed, tmp_path):
    old = spec(before, domain_type="test")
    existing = defined_by_libvirt(tmp_path, dx.to_string(dx.build_domain_xml(old)))
    change = compare.plan_domain_change(existing, spec(after, domain_type="test"), "running")
    assert change.changed_elements == changed
    assert change.actions == ["define"] and change.restart_required is True
    # stopped, the same change needs no restart
    existing.active = False
    stopped = compare.plan_domain_change(existing, spec(after, domain_type="test"), "present")
    assert stopped.actions == ["define"] and stopped.restart_required is False


@pytest.mark.parametrize("machine", ["pc", "pc-i440fx-7.2", "virt", "q35\n"])
def test_efi_off_q35_is_refused(machine):
    for firmware in ("efi", "efi-secure"):
        with pytest.raises(GpuhostError) as err:
            spec(firmware, machine=machine)
        assert err.value.field == "firmware" and "q35" in err.value.msg
        assert "firmware bios" in err.value.fix
    assert spec("bios", machine="pc").machine == "pc"
    assert spec("efi", machine="pc-q35-7.2").firmware == "efi"


@pytest.mark.parametrize("firmware", ["uefi", "EFI", "", None, "efi\n", 1])
def test_an_unknown_firmware_is_refused(firmware):
    with pytest.raises(GpuhostError) as err:
        spec(firmware)
    assert err.value.field == "firmware" and "efi-secure" in err.value.fix


# -- the preflight's firmware check ----------------------------------------------------

def firmware_refusals(firmware, root):
    report = pf.run_preflight(spec(firmware), runbook_topology(), [],
                              firmware_descriptors=pf.read_firmware_descriptors(root))
    return [r for r in report.refusals if r.field == "firmware"]


@pytest.mark.parametrize("install", [install_debian_ovmf, install_rhel_ovmf],
                         ids=["debian-ovmf", "rhel-edk2-ovmf"])
@pytest.mark.parametrize("firmware", ["efi", "efi-secure"])
def test_a_host_with_ovmf_passes(install, firmware, tmp_path):
    root = install(tmp_path)
    assert firmware_refusals(firmware, root) == []


def test_the_descriptors_are_read_with_what_they_offer(tmp_path):
    found = pf.read_firmware_descriptors(install_debian_ovmf(tmp_path))
    assert found.unreadable == []
    by_name = {os.path.basename(d.path): d for d in found.descriptors}
    assert sorted(by_name) == sorted(DEBIAN_DESCRIPTORS)
    enrolled = by_name["40-edk2-x86_64-secure-enrolled.json"]
    assert enrolled.path == "/usr/share/qemu/firmware/40-edk2-x86_64-secure-enrolled.json"
    assert enrolled.executable == "/usr/share/OVMF/OVMF_CODE_4M.ms.fd"
    assert enrolled.executable_present      # through the package's link, inside the root
    assert pf.descriptor_offers(enrolled, "efi-secure")
    assert not pf.descriptor_offers(enrolled, "efi")
    plain = by_name["60-edk2-x86_64.json"]
    assert pf.descriptor_offers(plain, "efi") and not pf.descriptor_offers(plain, "efi-secure")
    # Secure Boot capable, keys not enrolled: neither choice
    secure = by_name["50-edk2-x86_64-secure.json"]
    assert not pf.descriptor_offers(secure, "efi") and \
        not pf.descriptor_offers(secure, "efi-secure")


def test_bios_needs_no_firmware_package(tmp_path):
    assert firmware_refusals("bios", str(tmp_path)) == []


@pytest.mark.parametrize("firmware", ["efi", "efi-secure"])
def test_a_host_without_ovmf_is_refused_with_the_package_to_install(firmware, tmp_path):
    refusals = firmware_refusals(firmware, str(tmp_path))
    assert len(refusals) == 1
    refusal = refusals[0]
    assert refusal.kind == "firmware_missing"
    assert "no firmware descriptor in /etc/qemu/firmware or /usr/share/qemu/firmware" \
        in refusal.reason
    assert "ovmf on Debian" in refusal.fix and "edk2-ovmf on RHEL" in refusal.fix
    assert "firmware: bios" in refusal.fix
    with pytest.raises(GpuhostError) as err:
        pf.run_preflight(spec(firmware), runbook_topology(), [],
                         firmware_descriptors=pf.read_firmware_descriptors(str(tmp_path))
                         ).raise_if_refused()
    assert err.value.field == "firmware"


def test_descriptors_whose_code_files_are_missing_are_refused_by_name(tmp_path):
    root = install_debian_ovmf(tmp_path, images=False)
    refusal, = firmware_refusals("efi", root)
    assert "/usr/share/OVMF/OVMF_CODE_4M.fd in /usr/share/qemu/firmware/60-edk2-x86_64.json" \
        in refusal.reason


def test_only_plain_uefi_on_the_host_refuses_secure_boot(tmp_path):
    root = install_debian_ovmf(tmp_path, ["60-edk2-x86_64.json"])
    assert firmware_refusals("efi", root) == []
    refusal, = firmware_refusals("efi-secure", root)
    assert "with Secure Boot and enrolled keys" in refusal.reason
    assert "none of the 1 firmware descriptors offers it" in refusal.reason


def test_an_empty_file_in_etc_hides_the_descriptor_as_for_libvirt(tmp_path):
    root = install_debian_ovmf(tmp_path)
    masks = os.path.join(root, "etc/qemu/firmware")
    os.makedirs(masks)
    open(os.path.join(masks, "60-edk2-x86_64.json"), "w").close()
    assert firmware_refusals("efi-secure", root) == []
    refusal, = firmware_refusals("efi", root)
    assert "60-edk2-x86_64.json" not in refusal.reason


def test_a_code_link_is_followed_inside_the_root_only(tmp_path):
    """An absolute link in the tree points into the root, not the running host's /usr."""
    root = install_debian_ovmf(tmp_path, ["60-edk2-x86_64.json"], images=False)
    code = os.path.join(root, "usr/share/OVMF/OVMF_CODE_4M.fd")
    os.makedirs(os.path.dirname(code))
    os.symlink("/usr/share/OVMF/real-code.fd", code)
    refusal, = firmware_refusals("efi", root)
    assert "missing" in refusal.reason
    with open(os.path.join(root, "usr/share/OVMF/real-code.fd"), "wb") as out:
        out.write(b"\0")
    assert firmware_refusals("efi", root) == []


@pytest.mark.parametrize("content", [
    "{not json", "[]", '"text"', "null",
    json.dumps({"interface-types": ["uefi"], "mapping": {}}),
    json.dumps({"interface-types": ["uefi"],
                "mapping": {"executable": {"filename": "relative/OVMF_CODE_4M.fd"}}}),
    json.dumps({"interface-types": ["uefi"],
                "mapping": {"executable": {"filename": "/usr/share/OVMF/\u0000x.fd"}}}),
    json.dumps({"interface-types": "uefi", "targets": {"architecture": 1},
                "mapping": {"executable": {"filename": 7}}}),
    "{" + " " * (pf.MAX_DESCRIPTOR_BYTES + 10) + "}",
    "\udcff",
], ids=["broken", "list", "string", "null", "no-filename", "relative", "nul", "wrong-types",
        "huge", "undecodable"])
def test_a_file_that_is_no_descriptor_is_named_never_a_traceback(content, tmp_path):
    root = install_debian_ovmf(tmp_path, ["60-edk2-x86_64.json"])
    folder = os.path.join(root, "usr/share/qemu/firmware")
    with open(os.path.join(folder, "10-odd.json"), "w", errors="surrogateescape") as out:
        out.write(content)
    found = pf.read_firmware_descriptors(root)
    assert found.unreadable == ["/usr/share/qemu/firmware/10-odd.json"]
    # the good descriptor still counts; a refusal would name the odd file
    assert firmware_refusals("efi", root) == []
    refusal, = firmware_refusals("efi-secure", root)
    assert "not firmware descriptors: /usr/share/qemu/firmware/10-odd.json" in refusal.reason


def test_a_descriptor_link_is_read_inside_the_root_and_odd_files_never_block(tmp_path):
    """An absolute descriptor link (as /etc/qemu/firmware overrides often are) points
    into the root, never at the running host's file of that name; a FIFO, a directory
    or a dangling link named *.json is named as no descriptor, and reading never
    blocks."""
    root = install_debian_ovmf(tmp_path, ["60-edk2-x86_64.json"])
    etc = os.path.join(root, "etc/qemu/firmware")
    os.makedirs(etc)
    os.symlink("/usr/share/qemu/firmware/60-edk2-x86_64.json",
               os.path.join(etc, "60-edk2-x86_64.json"))
    os.mkfifo(os.path.join(etc, "20-fifo.json"))
    os.mkdir(os.path.join(etc, "21-directory.json"))
    os.symlink("/nowhere/at/all.json", os.path.join(etc, "22-dangling.json"))
    found = pf.read_firmware_descriptors(root)
    assert [d.path for d in found.descriptors] == ["/etc/qemu/firmware/60-edk2-x86_64.json"]
    assert found.descriptors[0].executable == "/usr/share/OVMF/OVMF_CODE_4M.fd"
    assert found.unreadable == ["/etc/qemu/firmware/20-fifo.json",
                                "/etc/qemu/firmware/21-directory.json",
                                "/etc/qemu/firmware/22-dangling.json"]
    assert firmware_refusals("efi", root) == []


def test_descriptors_for_other_machines_or_architectures_do_not_count(tmp_path):
    folder = os.path.join(str(tmp_path), "usr/share/qemu/firmware")
    os.makedirs(folder)
    code = os.path.join(str(tmp_path), "usr/share/OVMF/OVMF_CODE_4M.fd")
    os.makedirs(os.path.dirname(code))
    open(code, "wb").close()
    others = (("60-i440fx.json", [{"architecture": "x86_64", "machines": ["pc-i440fx-*"]}]),
              ("60-aarch64.json", [{"architecture": "aarch64", "machines": ["virt-*"]}]))
    for name, targets in others:
        with open(os.path.join(folder, name), "w") as out:
            out.write(descriptor_json("/usr/share/OVMF/OVMF_CODE_4M.fd",
                                      "/usr/share/OVMF/OVMF_VARS_4M.fd", [], targets))
    refusal, = firmware_refusals("efi", str(tmp_path))
    assert "none of the 2 firmware descriptors offers it" in refusal.reason


def test_the_module_reads_descriptors_only_for_uefi_on_a_real_driver(tmp_path):
    """preflight_from_params: efi on kvm reads the root (and refuses a bare one); BIOS,
    and libvirt's test driver, which runs no firmware, do not."""
    params = {"allow_cpu_overlap": False, "allow_cross_node": False,
              "allow_vcpu_emulator_overlap": False, "plan": runbook_tenant(),
              "network": None, "root": str(tmp_path), "allow_host_critical": False,
              "allow_boot_vga": False, "allow_unsafe_interrupts": False}
    topo = runbook_topology()
    kinds = [r.kind for r in pf.preflight_from_params(spec("efi"), topo, [], params,
                                                      None).refusals]
    assert kinds == ["firmware_missing"]
    assert pf.preflight_from_params(spec("bios"), topo, [], params, None).refusals == []
    assert pf.preflight_from_params(spec("efi", domain_type="test"), topo, [], params,
                                    None).refusals == []
    install_debian_ovmf(tmp_path)
    assert pf.preflight_from_params(spec("efi-secure"), topo, [], params,
                                    None).refusals == []


# -- the module ------------------------------------------------------------------------

def test_the_module_switches_a_running_tenant_to_uefi_and_then_changes_nothing(tmp_path):
    """libvirt_pinned_domain on the test driver: BIOS by default; firmware efi is one
    define that waits for a restart; the next run changes nothing; an unknown choice
    is refused by the option's choices."""
    from support.domain_xml import Env, plan_args
    env = Env(tmp_path)
    first = env.run(state="running", **plan_args())
    assert first["changed"] and "firmware" not in first["xml"]
    efi = env.run(state="running", firmware="efi", **plan_args())
    # the GPU's address width follows the firmware's rule: <cpu> changes with <os>
    assert efi["changed_elements"] == ["cpu", "os"] and efi["actions"] == ["define"]
    assert efi["address_width"]["firmware"] == "efi"
    assert first["address_width"]["firmware"] == "bios"
    assert efi["restart_required"] is True
    stored = env.domain("tenant-a100").XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert "<os firmware='efi'>" in stored and "name='secure-boot'" in stored
    again = env.run(state="running", firmware="efi", **plan_args())
    assert again["changed"] is False and again["changed_elements"] == []
    secure = env.run(check=True, state="running", firmware="efi-secure", **plan_args())
    assert secure["changed_elements"] == ["features", "os"]
    assert "smm" in secure["diff"]["after"] and "smm" not in secure["diff"]["before"]
