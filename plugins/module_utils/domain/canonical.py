# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What libvirt holds compared with what the tenant needs, through canonical forms:
``canonical_form(actual, wanted)`` drops from libvirt's inactive XML what libvirt
assigns by itself (uuid, MACs, device addresses, aliases, implicit controllers and input
devices, the memballoon, the expanded machine type...) unless the wanted XML states it,
then both sides are serialized with sorted attributes and children. Nothing is defined
to find out what libvirt would write, so check mode can use the same comparison.
"""

from __future__ import annotations

import copy

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist, parse_cpulist)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PciAddress
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.model import AUTOSELECTED_OS_CHILDREN, MACHINE_ALIASES
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.xml import (
    etree, parse_xml, to_string)


# --------------------------------------------------------------------------------------
# normalizing

# What libvirt writes by itself; dropped from the actual side when the wanted side does
# not state it. Keys are parent tags, values the child tags.
ASSIGNED_CHILDREN = {
    "domain": {"uuid", "resource", "seclabel", "metadata", "description", "title",
               "genid", "keywrap", "pm"},
    "devices": {"emulator", "controller", "input", "memballoon", "audio", "watchdog",
                "panic", "video", "graphics", "rng"},
    "interface": {"mac", "target", "alias", "address", "rom"},
    "controller": {"model", "target", "alias", "address", "driver"},
    "serial": {"alias", "log"},
    "target": {"model"},
    "*device": {"address", "alias"},
}
ASSIGNED_ATTRIBUTES = {
    "cpu": {"migratable"},
    "type": {"arch"},
    "target": {"type"},          # isa-serial on <serial><target>
    "vcpu": {"placement"},
}
DEVICE_TAGS = {"disk", "controller", "interface", "hostdev", "serial", "console",
               "input", "memballoon", "video", "graphics", "sound", "rng", "watchdog",
               "channel", "filesystem", "tpm", "redirdev", "smartcard", "hub", "panic",
               "shmem", "memory", "iommu", "vsock", "audio", "lease", "emulator"}
CPUSET_ATTRIBUTES = {"cpuset", "nodeset", "cpus", "vcpus"}
HEX_ATTRIBUTES = {"domain", "bus", "slot", "function", "controller", "unit"}


def pci_source_key(element):
    address = element.find("source/address")
    if address is None:
        return None
    try:
        return str(PciAddress(int(address.get("domain", "0"), 16),
                              int(address.get("bus", "0"), 16),
                              int(address.get("slot", "0"), 16),
                              int(address.get("function", "0"), 16)))
    except (TypeError, ValueError):
        return None


def element_key(element):
    """What identifies a child among its siblings (for pairing, sorting and reports)."""
    tag = element.tag
    if tag == "hostdev":
        return "hostdev %s" % pci_source_key(element)
    if tag == "interface":
        source = element.find("source")
        ident = pci_source_key(element) or (
            source.get("bridge") or source.get("network") if source is not None else None)
        return "interface %s %s" % (element.get("type"), ident)
    if tag == "disk":
        target = element.find("target")
        return "disk %s" % (target.get("dev") if target is not None else element.get("device"))
    if tag == "controller":
        return "controller %s %s" % (element.get("type"), element.get("index"))
    if tag in ("serial", "console", "channel"):
        target = element.find("target")
        return "%s %s" % (tag, target.get("port") if target is not None else "")
    for attribute in ("vcpu", "iothread", "cellid", "id", "vcpus"):
        if element.get(attribute) is not None and tag in (
                "vcpupin", "iothreadpin", "memnode", "cell", "vcpusched"):
            return "%s %s" % (tag, element.get(attribute))
    if tag == "page":
        return "page %s" % element.get("size")
    return tag


def _pair(actual_children, wanted_children):
    """Pair children by key; same-key children pair in order."""
    pools = {}
    for child in wanted_children:
        pools.setdefault(element_key(child), []).append(child)
    pairs = []
    for child in actual_children:
        pool = pools.get(element_key(child))
        pairs.append((child, pool.pop(0) if pool else None))
    return pairs


def _project(actual, wanted):
    """Remove from ``actual`` (in place) what libvirt assigned and ``wanted`` lacks."""
    assigned_attrs = ASSIGNED_ATTRIBUTES.get(actual.tag, set())
    for attribute in list(actual.attrib):
        if attribute not in wanted.attrib and attribute in assigned_attrs:
            del actual.attrib[attribute]
    if actual.tag == "type" and wanted.tag == "type":
        alias = wanted.get("machine")
        pattern = MACHINE_ALIASES.get(alias or "")
        if pattern and pattern.match(actual.get("machine") or ""):
            actual.set("machine", alias)
    assigned = set(ASSIGNED_CHILDREN.get(actual.tag, set()))
    if actual.tag == "os" and wanted.get("firmware"):
        assigned |= AUTOSELECTED_OS_CHILDREN
    if actual.tag in DEVICE_TAGS:
        assigned |= ASSIGNED_CHILDREN["*device"]
    for child, partner in _pair(list(actual), list(wanted)):
        if not isinstance(child.tag, str):
            actual.remove(child)
        elif partner is None:
            if child.tag in assigned or child.tag == "alias":
                actual.remove(child)
        else:
            _project(child, partner)


def _normal_value(name, value):
    if name in CPUSET_ATTRIBUTES:
        try:
            return format_cpulist(parse_cpulist(value))
        except GpuhostError:
            return value
    if name in HEX_ATTRIBUTES and value.lower().startswith("0x"):
        try:
            return "0x%x" % int(value, 16)
        except ValueError:
            return value
    return value


def _canonical(element, sort_children=True):
    copy_ = etree.Element(element.tag)
    for name in sorted(element.attrib):
        copy_.set(name, _normal_value(name, element.get(name)))
    text = (element.text or "").strip()
    if text:
        copy_.text = text
    children = [_canonical(c, sort_children and element.tag != "os")
                for c in element if isinstance(c.tag, str)]
    if sort_children and element.tag != "os":
        children.sort(key=lambda c: (c.tag, element_key(c),
                                     etree.tostring(c, encoding="unicode")))
    for child in children:
        copy_.append(child)
    return copy_


def canonical_form(actual, wanted):
    """Both sides as canonical strings: (actual_canonical, wanted_canonical)."""
    actual = parse_xml(actual) if isinstance(actual, (str, bytes)) else copy.deepcopy(actual)
    wanted = parse_xml(wanted) if isinstance(wanted, (str, bytes)) else wanted
    _project(actual, wanted)
    return (to_string(_canonical(actual)), to_string(_canonical(wanted)))


def changed_elements(actual, wanted):
    """Sorted keys of the parts that differ, e.g. ``cputune``, ``devices/hostdev ...``."""
    if actual is None:
        return ["domain"]
    actual = parse_xml(actual) if isinstance(actual, (str, bytes)) else copy.deepcopy(actual)
    wanted = parse_xml(wanted) if isinstance(wanted, (str, bytes)) else wanted
    _project(actual, wanted)
    actual_c, wanted_c = _canonical(actual), _canonical(wanted)
    changes = []
    if actual_c.attrib != wanted_c.attrib:
        changes.append("domain@")

    def index(element, prefix):
        found = {}
        for child in element:
            key = prefix + element_key(child)
            while key in found:
                key += "+"
            found[key] = child
        return found

    def walk(a_elem, w_elem, prefix, depth):
        a_children, w_children = index(a_elem, prefix), index(w_elem, prefix)
        for key in sorted(set(a_children) | set(w_children)):
            a_child, w_child = a_children.get(key), w_children.get(key)
            if a_child is None or w_child is None:
                changes.append(key)
            elif etree.tostring(a_child) != etree.tostring(w_child):
                if depth == 0 and a_child.tag in ("devices", "cputune", "numatune"):
                    walk(a_child, w_child, key + "/", depth + 1)
                else:
                    changes.append(key)

    walk(actual_c, wanted_c, "", 0)
    return changes


def merge_assigned(wanted, existing):
    """The XML to define: ``wanted`` plus what libvirt assigned to the existing domain
    and the wanted XML leaves open (uuid, MAC addresses, guest PCI addresses of kept
    devices, implicit controllers), so a redefinition keeps the guest's view of its
    hardware (NIC names, MACs cloud-init keyed on) stable."""
    merged = copy.deepcopy(wanted)
    if existing is None:
        return merged
    existing = parse_xml(existing) if isinstance(existing, (str, bytes)) else existing
    if merged.find("uuid") is None and existing.find("uuid") is not None:
        uuid = etree.Element("uuid")
        uuid.text = existing.findtext("uuid")
        merged.insert(list(merged).index(merged.find("name")) + 1, uuid)
    devices, old_devices = merged.find("devices"), existing.find("devices")
    if devices is None or old_devices is None:
        return merged
    our_buses = set(int(c.get("index")) for c in devices.findall("controller")
                    if c.get("type") == "pci")
    for old, new in _pair(list(old_devices), list(devices)):
        if not isinstance(old.tag, str):
            continue
        if new is None:
            if old.tag == "controller":
                devices.append(copy.deepcopy(old))
            continue
        if old.tag == "interface" and new.find("mac") is None and old.find("mac") is not None:
            new.insert(0, copy.deepcopy(old.find("mac")))
        old_address = old.find("address")
        if new.find("address") is None and old_address is not None and old.tag != "controller":
            bus = old_address.get("bus")
            if old_address.get("type") == "pci" and bus and int(bus, 16) in our_buses:
                continue
            new.append(copy.deepcopy(old_address))
    return merged
