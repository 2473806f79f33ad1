# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tenant domain XML, built with lxml from a DomainSpec (model.py); to_string and
parse_xml are the one serializer and parser of it."""

from __future__ import annotations


from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist, parse_cpulist)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PciAddress
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.model import (
    check_firmware_on_libvirt, FIRMWARE_FEATURES, firmware_features_expressible, FIRST_GPU_ROOT_PORT, maxphysaddr_for, validate_spec, version_text)

try:
    from lxml import etree
    HAS_LXML = True
    LXML_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - reported through missing_required_lib
    etree = None
    HAS_LXML = False
    LXML_IMPORT_ERROR = exc


# --------------------------------------------------------------------------------------
# building

def _sub(parent, tag, text=None, **attrs):
    element = etree.SubElement(parent, tag, {k: str(v) for k, v in attrs.items()
                                             if v is not None})
    if text is not None:
        element.text = str(text)
    return element


def _pci_address(parent, address, **extra):
    addr = PciAddress.parse(address)
    attrs = dict(domain="0x%04x" % addr.domain, bus="0x%02x" % addr.bus,
                 slot="0x%02x" % addr.slot, function="0x%x" % addr.function)
    attrs.update(extra)
    return _sub(parent, "address", **attrs)


def gpu_root_port_index(gpu_number):
    return FIRST_GPU_ROOT_PORT + gpu_number


def build_domain_xml(spec):
    """The wanted domain as an lxml element (see ``to_string``)."""
    if not HAS_LXML:
        raise GpuhostError("lxml is not installed", field="lxml",
                           fix="install python3-lxml on the managed host")
    validate_spec(spec)
    domain = etree.Element("domain", type=spec.domain_type)
    _sub(domain, "name", spec.name)
    if spec.uuid:
        _sub(domain, "uuid", spec.uuid)
    _sub(domain, "memory", spec.memory_kib, unit="KiB")
    _sub(domain, "currentMemory", spec.memory_kib, unit="KiB")
    if spec.hugepage_size_kib or spec.locked or spec.memory_access:
        backing = _sub(domain, "memoryBacking")
        if spec.hugepage_size_kib:
            pages = _sub(backing, "hugepages")
            _sub(pages, "page", size=spec.hugepage_size_kib, unit="KiB")
        if spec.locked:
            _sub(backing, "locked")
        if spec.memory_access:
            _sub(backing, "access", mode=spec.memory_access)
    _sub(domain, "vcpu", spec.vcpus, placement="static")
    if spec.iothreads:
        _sub(domain, "iothreads", spec.iothreads)
    _build_cputune(domain, spec)
    if spec.memory_nodeset:
        numatune = _sub(domain, "numatune")
        nodeset = format_cpulist(spec.memory_nodeset)
        _sub(numatune, "memory", mode=spec.numa_mode, nodeset=nodeset)
        if spec.guest_cells:
            # each guest cell's memory from the host node of its GPUs
            for number, cell in enumerate(spec.guest_cells):
                _sub(numatune, "memnode", cellid=number, mode=spec.numa_mode,
                     nodeset=str(cell.host_node))
        else:
            _sub(numatune, "memnode", cellid=0, mode=spec.numa_mode, nodeset=nodeset)
    _build_os(domain, spec)
    features = _sub(domain, "features")
    _sub(features, "acpi")
    _sub(features, "apic")
    if spec.hide_kvm:
        _sub(_sub(features, "kvm"), "hidden", state="on")
    if spec.firmware == "efi-secure":
        # Secure Boot firmware (requires-smm in its descriptor) stops without SMM
        _sub(features, "smm", state="on")
    _build_cpu(domain, spec)
    _sub(domain, "clock", offset="utc")
    _sub(domain, "on_poweroff", "destroy")
    _sub(domain, "on_reboot", "restart")
    _sub(domain, "on_crash", "destroy")
    _build_devices(domain, spec)
    return domain


def _build_os(domain, spec):
    """<os>: BIOS (nothing named, SeaBIOS) or the auto-selected UEFI of FIRMWARE_FEATURES,
    and a direct kernel boot when the spec has one; children in libvirt's order (type,
    firmware, kernel, initrd, cmdline, boot)."""
    check_firmware_on_libvirt(spec)
    efi = spec.firmware in FIRMWARE_FEATURES
    os_element = _sub(domain, "os", firmware="efi" if efi else None)
    _sub(os_element, "type", "hvm", arch=spec.arch, machine=spec.machine)
    if efi and firmware_features_expressible(spec):
        firmware = _sub(os_element, "firmware")
        for name, enabled in FIRMWARE_FEATURES[spec.firmware]:
            _sub(firmware, "feature", enabled=enabled, name=name)
    boot = spec.direct_boot
    if boot is not None:
        # libvirt's order: after the firmware (and the loader it selects), before <boot>
        _sub(os_element, "kernel", boot.kernel)
        if boot.initrd:
            _sub(os_element, "initrd", boot.initrd)
        if boot.cmdline:
            _sub(os_element, "cmdline", boot.cmdline)
    _sub(os_element, "boot", dev="hd")
    return os_element


def _build_cputune(domain, spec):
    cputune = _sub(domain, "cputune")
    for vcpu, pins in enumerate(spec.vcpu_pins):
        _sub(cputune, "vcpupin", vcpu=vcpu, cpuset=format_cpulist(pins))
    if spec.emulator_cpus:
        _sub(cputune, "emulatorpin", cpuset=format_cpulist(spec.emulator_cpus))
    if spec.iothread_cpus:
        for iothread in range(1, spec.iothreads + 1):
            _sub(cputune, "iothreadpin", iothread=iothread,
                 cpuset=format_cpulist(spec.iothread_cpus))
    if spec.vcpusched:
        wanted = parse_cpulist(spec.vcpusched.get("vcpus") or "0-%d" % (spec.vcpus - 1),
                               field="vcpusched.vcpus")
        # libvirt stores one vcpusched per vCPU; writing it the same way keeps the
        # comparison exact.
        for vcpu in wanted:
            if vcpu >= spec.vcpus:
                raise GpuhostError("vcpusched names vCPU %d of %d" % (vcpu, spec.vcpus),
                                   field="vcpusched.vcpus",
                                   fix="name vCPUs 0-%d" % (spec.vcpus - 1))
            attrs = dict(vcpus=vcpu, scheduler=spec.vcpusched["scheduler"],
                         priority=int(spec.vcpusched["priority"]))
            _sub(cputune, "vcpusched", **attrs)


# libvirt knows <cpu mode='maximum'> since 7.1.0; 7.0 (Debian 11) refuses it ("Invalid
# mode attribute"). Under TCG its host-model is the same CPU: libvirt expands QEMU's own
# "max" model for TCG domains into a named model and its features.
CPU_MODE_MAXIMUM_SINCE = (7, 1, 0)


def libvirt_cpu_mode(spec):
    """The <cpu mode> written for the spec's cpu_mode on the spec's libvirt."""
    if (spec.cpu_mode != "maximum" or spec.libvirt_version is None
            or tuple(spec.libvirt_version) >= CPU_MODE_MAXIMUM_SINCE):
        return spec.cpu_mode
    if spec.domain_type == "qemu":
        return "host-model"
    raise GpuhostError(
        "cpu mode maximum needs libvirt %s or newer; this host's libvirt is %s"
        % (version_text(CPU_MODE_MAXIMUM_SINCE), version_text(spec.libvirt_version)),
        field="cpu_mode",
        fix="use cpu_mode host-passthrough (the runbook's, under KVM), or upgrade libvirt")


def _build_cpu(domain, spec):
    # check='none': libvirt writes it back for host-passthrough and maximum anyway
    cpu = _sub(domain, "cpu", mode=libvirt_cpu_mode(spec), check="none")
    topo = spec.guest_topology or {"sockets": 1, "dies": 1, "cores": spec.vcpus,
                                   "threads": 1}
    _sub(cpu, "topology", sockets=int(topo.get("sockets", 1)), dies=int(topo.get("dies", 1)),
         cores=int(topo.get("cores", 1)), threads=int(topo.get("threads", 1)))
    phys = maxphysaddr_for(spec)
    if phys:
        _sub(cpu, "maxphysaddr", mode=phys[0], bits=phys[1])
    numa = _sub(cpu, "numa")
    if spec.guest_cells:
        for number, cell in enumerate(spec.guest_cells):
            _sub(numa, "cell", id=number, cpus=format_cpulist(cell.vcpus),
                 memory=cell.memory_kib, unit="KiB", memAccess=spec.memory_access)
        return
    _sub(numa, "cell", id=0, cpus="0-%d" % (spec.vcpus - 1) if spec.vcpus > 1 else "0",
         memory=spec.memory_kib, unit="KiB", memAccess=spec.memory_access)


def _hostdev(devices, address, guest_address=None, multifunction=False, rom_bar=None):
    hostdev = _sub(devices, "hostdev", mode="subsystem", type="pci", managed="yes")
    _sub(hostdev, "driver", name="vfio")
    _pci_address(_sub(hostdev, "source"), address)
    if rom_bar is not None:
        # libvirt writes <rom> after <source> and before the guest <address>
        _sub(hostdev, "rom", bar=rom_bar)
    if guest_address is not None:
        extra = {"type": "pci"}
        address_element = _pci_address(hostdev, guest_address, **extra)
        # libvirt writes type first; lxml keeps insertion order, so rebuild it
        attrs = dict(address_element.attrib)
        address_element.attrib.clear()
        address_element.set("type", "pci")
        for key in ("domain", "bus", "slot", "function"):
            address_element.set(key, attrs[key])
        if multifunction:
            address_element.set("multifunction", "on")
    return hostdev


def _build_devices(domain, spec):
    devices = _sub(domain, "devices")
    if spec.disk:
        disk = _sub(devices, "disk", type="file", device="disk")
        _sub(disk, "driver", name="qemu", type=spec.disk.format,
             iothread=spec.disk.iothread if spec.disk.iothread else None)
        _sub(disk, "source", file=spec.disk.path)
        _sub(disk, "target", dev=spec.disk.target, bus=spec.disk.bus)
    if spec.seed_path:
        seed = _sub(devices, "disk", type="file", device="cdrom")
        _sub(seed, "driver", name="qemu", type="raw")
        _sub(seed, "source", file=spec.seed_path)
        _sub(seed, "target", dev="sda", bus="sata")
        _sub(seed, "readonly")
    for number, _gpu in enumerate(spec.gpus):
        _sub(devices, "controller", type="pci", index=gpu_root_port_index(number),
             model="pcie-root-port")
    net = spec.network
    if net.kind == "bridge":
        interface = _sub(devices, "interface", type="bridge")
        if net.mac:
            _sub(interface, "mac", address=net.mac.lower())
        _sub(interface, "source", bridge=net.bridge)
        _sub(interface, "model", type=net.model)
    elif net.kind == "vf" and net.vf_mode == "interface":
        interface = _sub(devices, "interface", type="hostdev", managed="yes")
        if net.mac:
            _sub(interface, "mac", address=net.mac.lower())
        _sub(interface, "driver", name="vfio")
        source = _sub(interface, "source")
        _pci_address(source, net.vf_address).set("type", "pci")
        _reorder_address(source.find("address"))
        if net.vlan:
            _sub(_sub(interface, "vlan"), "tag", id=int(net.vlan))
        if net.vf_address in spec.rom_bar:
            _sub(interface, "rom", bar=spec.rom_bar[net.vf_address])
    serial = _sub(devices, "serial", type="pty")
    if spec.serial_log:
        _sub(serial, "log", file=spec.serial_log, append="off")
    _sub(serial, "target", port=0)
    console = _sub(devices, "console", type="pty")
    if spec.serial_log:
        # libvirt gives the console (the serial port's alias) the same log
        _sub(console, "log", file=spec.serial_log, append="off")
    _sub(console, "target", type="serial", port=0)
    for number, gpu in enumerate(spec.gpus):
        bus = gpu_root_port_index(number)
        multifunction = len(gpu.functions) > 1
        for function in gpu.functions:
            host = PciAddress.parse(function)
            # Same function numbers as on the host, so drivers that look for the
            # GPU's HDA (or USB-C) sibling at function N find it.
            guest = PciAddress(0, bus, 0, host.function)
            _hostdev(devices, function, guest,
                     multifunction=multifunction and host.function == 0,
                     rom_bar=spec.rom_bar.get(function))
    for address in spec.extra_hostdevs:
        _hostdev(devices, address, rom_bar=spec.rom_bar.get(address))
    if net.kind == "vf" and net.vf_mode == "hostdev":
        _hostdev(devices, net.vf_address, rom_bar=spec.rom_bar.get(net.vf_address))


def _reorder_address(element):
    attrs = dict(element.attrib)
    element.attrib.clear()
    for key in ("type", "domain", "bus", "slot", "function"):
        if key in attrs:
            element.set(key, attrs[key])


def to_string(element):
    return etree.tostring(element, pretty_print=True, encoding="unicode")


def parse_xml(text):
    if not HAS_LXML:
        raise GpuhostError("lxml is not installed", field="lxml",
                           fix="install python3-lxml on the managed host")
    parser = etree.XMLParser(remove_blank_text=True)
    if isinstance(text, str):
        text = text.encode("utf-8")
    return etree.fromstring(text, parser)
