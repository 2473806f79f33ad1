# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""SR-IOV virtual functions: the pure core of sriov_vfs and of its boot-time helper.

The kernel's rules (Documentation/ABI/testing/sysfs-bus-pci, Documentation/PCI/
pci-iov-howto.rst): ``sriov_numvfs`` only goes from 0 to N or from N to 0, so a change
of count writes 0 first; ``sriov_drivers_autoprobe`` decides whether new VFs are probed
by their native driver, so it is written before the VFs are created. A VF's address is
the PF's routing ID plus ``sriov_offset`` plus index times ``sriov_stride``.

Per-VF settings of a netdev PF (MAC, VLAN, trust, spoofchk, link state) go through
iproute2 argument lists (``ip link set dev <pf> vf <n> ...``), never a shell string.

Persistence: /etc/gpuhost/sriov.json holds the wanted state of each PF and
gpuhost-sriov.service re-creates it at boot through the same Python (a thin wrapper
around ``boot_apply``). The unit is ordered After= the PF's netdev device unit (or
systemd-udev-settle for a PF without a netdev) and systemd-modules-load, and Before=
libvirtd, virtqemud and libvirt-guests, so the VFs exist, on the right driver, before
libvirt starts any domain that uses them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    normalize_address, vf_address)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.shipping import (
    python_library_files, wrapper_script)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.state_file import StateFile, read_state_nofollow
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    ZERO_MAC, interface_name, validate_flag, validate_mac, validate_vlan)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.vf_settings import FRESH_VF, parse_vfinfo
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.vfio_bind import (
    current_driver, current_override, device_path, driver_loaded)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import VFIO_PCI

CONFIG_FILE = "/etc/gpuhost/sriov.json"
UNIT_FILE = "/etc/systemd/system/gpuhost-sriov.service"
HELPER = "/usr/local/libexec/gpuhost/gpuhost-sriov-apply"
LIBRARY = ("changes.sriov_vfs",)
VF_DRIVERS = ("vfio-pci", "default", "none")
_ADDRESS_LIKE = re.compile(r"^([0-9a-fA-F]{1,5}:)?[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}\.[0-7]\Z")
LINK_STATES = ("auto", "enable", "disable")


def resolve_pf(writer, pf):
    """A PF given as a PCI address or a netdev name -> (address, netdev or None)."""
    text = str(pf).strip()
    if _ADDRESS_LIKE.match(text):
        address = normalize_address(text, field="pf")
        if not writer.exists(device_path(address)):
            raise GpuhostError("no PCI function %s on this host" % address, field="pf",
                               fix="list the host's devices with lspci -D")
        nets = _listdir(writer.path(device_path(address, "net")))
        return address, (nets[0] if nets else None)
    # A name goes into a sysfs path: "../.." or "eth0/../.." must not walk out of net/.
    interface_name(text, field="pf")
    link = writer.path("/sys/class/net/%s/device" % text)
    if not os.path.exists(link):
        raise GpuhostError("no network interface %s with a PCI device" % text, field="pf",
                           fix="give the PF's PCI address or an interface name from ip link")
    return normalize_address(os.path.basename(os.path.realpath(link)), field="pf"), text


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


# What to do about an SR-IOV attribute the PF's driver printed wrong (a NUL inside, a
# negative count, more VFs than the device has).
BROKEN_ATTR_FIX = ("the PF's driver or firmware reports a broken SR-IOV state: check dmesg, "
                   "reload the PF driver (or reboot the host), then run again")


def _int_attr(writer, address, name, minimum=0, maximum=None, maximum_name=None):
    """An SR-IOV attribute of the PF through sysfs.read_checked_int: None when absent, a
    GpuhostError naming the file (field pf) when it holds what the kernel cannot print."""
    host_path = device_path(address, name)
    return sysfs.read_checked_int(writer.path(host_path), shown=host_path, field="pf",
                                  fix=BROKEN_ATTR_FIX, minimum=minimum, maximum=maximum,
                                  maximum_name=maximum_name)


def current_vfs(writer, pf):
    """index -> VF address, from the PF's virtfnN links."""
    found = {}
    base = writer.path(device_path(pf))
    for name in _listdir(base):
        match = re.match(r"^virtfn(\d+)\Z", name)
        if match:
            found[int(match.group(1))] = os.path.basename(os.readlink(os.path.join(base, name)))
    return found


def vf_info(writer, address):
    """What a VF reports, for the result: a value the kernel cannot have printed (a NUL
    inside, a group link to a non-number, a negative node) is unknown, None."""
    group = sysfs.link_name(writer.root, writer.path(device_path(address, "iommu_group")))
    node = sysfs.read_int(writer.path(device_path(address, "numa_node")))
    return {"address": address,
            "iommu_group": int(group) if group and group.isdigit() else None,
            "numa_node": node if node is not None and node >= 0 else None,
            "driver": current_driver(writer, address)}


# -- per-VF settings (iproute2) --------------------------------------------------------

def normalize_vf_settings(settings, num_vfs, addresses=None):
    """Validate the ``vfs`` option: a list of {index or address, mac, vlan, trust,
    spoofchk, link_state} -> {index: {setting: value}} with the settings given.

    ``addresses`` (VF number -> PCI address, existing or predicted) resolves entries
    given by ``address`` instead of ``index``. A key left out or null is not touched.
    """
    result = {}
    by_address = {a: i for i, a in (addresses or {}).items() if a}
    for position, item in enumerate(settings or []):
        field = "vfs[%d]" % position
        if not isinstance(item, dict):
            raise GpuhostError("%r is not a mapping" % (item,), field=field,
                               fix="give {index: N, mac: ..., vlan: ...} per VF")
        index = item.get("index")
        if item.get("address") is not None:
            address = normalize_address(item["address"], field="%s.address" % field)
            if address not in by_address:
                raise GpuhostError(
                    "%s is not a VF of this PF (its VFs: %s)"
                    % (address, ", ".join(sorted(by_address)) or "none"),
                    field="%s.address" % field,
                    fix="give the VF's number as index, or the address of one of its VFs")
            if index is not None and int(index) != by_address[address]:
                raise GpuhostError("index %s and address %s name different VFs (%s is VF %d)"
                                   % (index, address, address, by_address[address]),
                                   field=field, fix="give index or address, not both")
            index = by_address[address]
        if index is None or isinstance(index, bool):
            raise GpuhostError("no VF index", field="%s.index" % field,
                               fix="number VFs from 0 to num_vfs - 1 (or give address)")
        index = int(index)
        if not 0 <= index < num_vfs:
            raise GpuhostError("VF index %d is outside 0..%d" % (index, num_vfs - 1),
                               field="%s.index" % field,
                               fix="number VFs from 0 to num_vfs - 1")
        if index in result:
            raise GpuhostError("VF %d is listed twice" % index, field="%s.index" % field,
                               fix="give each VF's settings once")
        wanted = {}
        if item.get("mac") is not None:
            wanted["mac"] = validate_mac(item["mac"], field="%s.mac" % field, allow_zero=True)
        if item.get("vlan") is not None:
            wanted["vlan"] = validate_vlan(item["vlan"], field="%s.vlan" % field)
        for flag in ("trust", "spoofchk"):
            if item.get(flag) is not None:
                wanted[flag] = validate_flag(item[flag], "%s.%s" % (field, flag))
        if item.get("link_state") is not None:
            if item["link_state"] not in LINK_STATES:
                raise GpuhostError("link_state %r is not one of %s" % (
                    item["link_state"], ", ".join(LINK_STATES)), field="%s.link_state" % field,
                    fix="use auto, enable or disable")
            wanted["link_state"] = item["link_state"]
        result[index] = wanted
    return result


def ip_vf_argv(netdev, index, settings):
    argv = ["ip", "link", "set", "dev", netdev, "vf", str(index)]
    for key in ("mac", "vlan", "trust", "spoofchk", "link_state"):
        if key not in settings:
            continue
        value = settings[key]
        name = "state" if key == "link_state" else key
        if isinstance(value, bool):
            value = "on" if value else "off"
        argv += [name, str(value)]
    return argv


def _run(runner, argv):
    rc, out, err = runner(argv)
    if rc != 0:
        raise GpuhostError("%s failed (rc=%d): %s" % (" ".join(argv), rc, (err or out).strip()),
                           field="vfs", fix="check that the PF driver supports this VF setting")
    return out


# -- the plan --------------------------------------------------------------------------

@dataclass
class SriovPlan:
    pf: str
    netdev: Optional[str]
    changes: ChangeSet
    vfs: List[dict] = field(default_factory=list)
    settings_changed: List[int] = field(default_factory=list)
    # index -> the settings this run changes on a VF that exists (not one it creates)
    settings_delta: Dict[int, List[str]] = field(default_factory=dict)
    created: List[str] = field(default_factory=list)    # VFs this run (re)creates
    skipped: List[str] = field(default_factory=list)    # what a test root cannot do
    # VFs handed to vfio-pci need the driver loaded: the native PF driver does not pull it
    # in, and drivers_probe of an unknown driver_override leaves the VF unbound.
    needs_modprobe: bool = False


def plan_sriov(writer, pf, num_vfs, vf_driver="default", force=False, vf_settings=None,
               runner=None, domain_devices=None):
    """Decide the writes that give ``pf`` ``num_vfs`` VFs on ``vf_driver``."""
    if vf_driver not in VF_DRIVERS:
        raise GpuhostError("vf_driver %r is not one of %s" % (vf_driver, ", ".join(VF_DRIVERS)),
                           field="vf_driver", fix="use vfio-pci, default or none")
    address, netdev = resolve_pf(writer, pf)
    total = _int_attr(writer, address, "sriov_totalvfs")
    if total is None:
        raise GpuhostError("%s has no SR-IOV capability (no sriov_totalvfs)" % address,
                           field="pf", fix="enable SR-IOV in the firmware/NIC settings, or "
                                           "pick the PF itself rather than a VF or non-SR-IOV "
                                           "device")
    if num_vfs < 0:
        raise GpuhostError("num_vfs %d is negative" % num_vfs, field="num_vfs",
                           fix="ask for 0 (no VFs) up to %d VFs" % total)
    if num_vfs > total:
        raise GpuhostError("num_vfs %d is above sriov_totalvfs %d of %s" % (num_vfs, total,
                                                                            address),
                           field="num_vfs", fix="ask for at most %d VFs, or raise the "
                                                "firmware's VF limit (e.g. mlxconfig "
                                                "SRIOV_NUM_OF_VFS) and reboot" % total)
    total_name = device_path(address, "sriov_totalvfs")
    current = _int_attr(writer, address, "sriov_numvfs", maximum=total,
                        maximum_name=total_name) or 0
    autoprobe_now = _int_attr(writer, address, "sriov_drivers_autoprobe", maximum=1,
                              maximum_name="1 (the attribute is a flag)")
    autoprobe_now = None if autoprobe_now is None else str(autoprobe_now)
    autoprobe = "1" if vf_driver == "default" else "0"
    offset = _int_attr(writer, address, "sriov_offset")
    stride = _int_attr(writer, address, "sriov_stride")
    existing = current_vfs(writer, address)
    changes = ChangeSet()

    recreate = current != num_vfs
    if recreate:
        predicted = {i: vf_address(address, offset, stride, i) for i in range(num_vfs)} \
            if offset is not None and stride is not None else {}
    else:
        predicted = existing
    settings = normalize_vf_settings(vf_settings, num_vfs, predicted)
    if settings and not netdev:
        raise GpuhostError("%s is not a network PF; per-VF settings need a netdev" % address,
                           field="vfs", fix="drop vfs, or give a NIC PF")
    if recreate and existing and domain_devices:
        busy = {a: domain_devices[a] for a in existing.values() if a in domain_devices}
        if busy and not force:
            raise GpuhostError(
                "refusing to change the VF count of %s: VF(s) %s are attached to running "
                "domain(s) %s" % (address, ", ".join(sorted(busy)),
                                  ", ".join(sorted(set(sum(busy.values(), []))))),
                field="force", fix="shut those domains down first, or set force: true to "
                                   "pull the VFs from under them")
    if autoprobe_now is not None and autoprobe_now != autoprobe:
        changes.set_value(writer, device_path(address, "sriov_drivers_autoprobe"), autoprobe,
                          autoprobe_now)
    numvfs_path = device_path(address, "sriov_numvfs")
    if recreate and current:
        changes.value_changes.append((numvfs_path, current, 0))
        changes.add("write 0 to %s" % numvfs_path, lambda: writer.write(numvfs_path, "0"),
                    _restore_vfs(writer, address, current, autoprobe_now, existing))
    if recreate and num_vfs:
        changes.value_changes.append((numvfs_path, 0, num_vfs))
        changes.add("write %d to %s" % (num_vfs, numvfs_path),
                    lambda: writer.write(numvfs_path, str(num_vfs)),
                    lambda: writer.write(numvfs_path, "0"))

    if vf_driver == VFIO_PCI:
        for index in range(num_vfs):
            vf = predicted.get(index)
            if not recreate and vf and current_driver(writer, vf) == VFIO_PCI and \
                    current_override(writer, vf) == VFIO_PCI:
                continue
            _vf_bind_step(changes, writer, address, index, vf)

    plan = SriovPlan(address, netdev, changes,
                     needs_modprobe=vf_driver == VFIO_PCI and num_vfs > 0
                     and not driver_loaded(writer, VFIO_PCI))
    if settings:
        _plan_vf_settings(plan, runner, settings, recreate)
    plan.vfs = [{"index": i, "address": predicted.get(i)} for i in range(num_vfs)]
    plan.created = [predicted[i] for i in sorted(predicted)] if recreate else []
    return plan


def _plan_vf_settings(plan, runner, settings, recreate):
    """The ``ip link set dev <pf> vf <n> ...`` steps that give each VF its settings.

    Existing VFs: read back with ``ip -j link show`` and only what differs is set, so a
    second run changes nothing. VFs this run creates: what a new VF starts with is the
    driver's choice (mlx5 starts with spoof checking off, igb/ixgbe with it on), so the
    step reads the VF once it exists and sets what differs then. Without a runner (a
    test root, no iproute2 to ask) the settings are reported as skipped.
    """
    netdev, changes = plan.netdev, plan.changes
    if runner is None:
        plan.skipped.append("per-VF settings of VF(s) %s on %s (root is not /: iproute2 "
                            "reads and sets them on the live host only)"
                            % (", ".join(str(i) for i in sorted(settings)), netdev))
        return
    if recreate:
        for index, wanted in sorted(settings.items()):
            plan.settings_changed.append(index)
            step = _NewVfSettings(runner, netdev, index, wanted)
            changes.value_changes.append(("ip link %s vf %d" % (netdev, index),
                                          "(the driver's defaults)",
                                          json.dumps(wanted, sort_keys=True)))
            changes.add("%s (what differs once the VF exists)"
                        % " ".join(ip_vf_argv(netdev, index, wanted)), step.apply, step.undo)
        return
    now = read_vf_settings(runner, netdev)
    for index, wanted in sorted(settings.items()):
        have = now.get(index, dict(FRESH_VF))
        delta = {k: v for k, v in wanted.items() if have.get(k) != v}
        if not delta:
            continue
        plan.settings_changed.append(index)
        plan.settings_delta[index] = sorted(delta)
        undo_values = {k: have.get(k, FRESH_VF[k]) for k in delta}
        argv = ip_vf_argv(netdev, index, delta)
        changes.value_changes.append(("ip link %s vf %d" % (netdev, index),
                                      json.dumps(undo_values, sort_keys=True),
                                      json.dumps(delta, sort_keys=True)))
        changes.add(" ".join(argv), lambda argv=argv: _run(runner, argv),
                    lambda u=ip_vf_argv(netdev, index, undo_values): _run(runner, u))


# The VF settings a running guest sees only once its VF driver probes the VF again (a
# restart of the tenant): the MAC. The PF driver hands the VF its MAC at the VF's reset,
# and igb, ixgbe and i40e log "Reload the VF driver to make this change effective" when
# the PF sets it under a VF in use. VLAN, spoof checking, trust and link state are the
# PF's (or the switchdev's) filters, applied to the VF's traffic at once.
READ_BY_THE_GUEST_AT_PROBE = ("mac",)


def held_vf_changes(plan, domain_devices):
    """The VFs of ``plan`` that running domains hold and whose settings this run changes:
    ``[{index, address, domains, changed, restart_required}]``, ``restart_required``
    when a changed setting is one the guest reads only at its VF's next probe.

    ``domain_devices``: PCI address -> running domain names (host_safety's
    running_domain_devices), None when it was not read."""
    held = []
    addresses = {vf["index"]: vf["address"] for vf in plan.vfs}
    for index, changed in sorted(plan.settings_delta.items()):
        address = addresses.get(index)
        domains = sorted((domain_devices or {}).get(address) or ())
        if domains:
            held.append({"index": index, "address": address, "domains": domains,
                         "changed": list(changed),
                         "restart_required": any(key in READ_BY_THE_GUEST_AT_PROBE
                                                 for key in changed)})
    return held


# What a released tenant's VF is given back with (tenant_scrub): no MAC, no VLAN, spoof
# checking on and not trusted, so nothing of the old tenant's network identity stays on
# it; the next tenant's own settings are set when sriov_vfs places it.
SCRUBBED_VF = {"mac": ZERO_MAC, "vlan": 0, "spoofchk": True, "trust": False}


def plan_vf_scrub(writer, changes, pf, index, runner):
    """Add to ``changes`` the ``ip link set dev <pf> vf <index> ...`` step that gives
    the VF the SCRUBBED_VF settings: the same read-back and steps as sriov_vfs's per-VF
    settings (only what differs is set; the undo sets the old values back). Returns the
    SriovPlan, whose ``skipped`` says what a test root (no runner) could not do."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= MAX_VFS:
        raise GpuhostError("VF index %r is not a whole number from 0 to %d" % (index, MAX_VFS),
                           field="vf", fix="check the tenant's vf entry in the ledger")
    address, netdev = resolve_pf(writer, pf)
    if not netdev:
        raise GpuhostError("%s has no network interface: its VF settings cannot be cleared"
                           % address, field="vf",
                           fix="load the PF's network driver (ip link must list it), then "
                               "run again")
    plan = SriovPlan(address, netdev, changes)
    _plan_vf_settings(plan, runner, {index: dict(SCRUBBED_VF)}, recreate=False)
    return plan


def read_vf_settings(runner, netdev):
    """VF index -> current settings of a PF's VFs, read with iproute2."""
    return parse_vfinfo(_run(runner, ["ip", "-j", "link", "show", "dev", netdev]))


class _NewVfSettings(object):
    """Settings for a VF that does not exist when the run is planned."""

    def __init__(self, runner, netdev, index, wanted):
        self.runner, self.netdev, self.index, self.wanted = runner, netdev, index, wanted
        self.before = {}

    def apply(self):
        have = read_vf_settings(self.runner, self.netdev).get(self.index, dict(FRESH_VF))
        delta = {k: v for k, v in self.wanted.items() if have.get(k) != v}
        self.before = {k: have.get(k, FRESH_VF[k]) for k in delta}
        if delta:
            _run(self.runner, ip_vf_argv(self.netdev, self.index, delta))

    def undo(self):
        if self.before:
            _run(self.runner, ip_vf_argv(self.netdev, self.index, self.before))


def _restore_vfs(writer, pf, count, autoprobe_before, vfs_before):
    """The undo of removing a PF's VFs: bring them back as they were, with the autoprobe
    setting they were created under and each VF's driver and override."""
    before = {index: (current_driver(writer, vf), current_override(writer, vf))
              for index, vf in vfs_before.items()}

    def undo():
        if autoprobe_before is not None:
            writer.write(device_path(pf, "sriov_drivers_autoprobe"), autoprobe_before)
        writer.write(device_path(pf, "sriov_numvfs"), str(count))
        for index, vf in sorted(current_vfs(writer, pf).items()):
            driver, override = before.get(index, (None, None))
            if current_override(writer, vf) != override:
                writer.write(device_path(vf, "driver_override"), (override or "") + "\n")
            now = current_driver(writer, vf)
            if now == driver:
                continue
            if now:
                writer.write(device_path(vf, "driver/unbind"), vf)
            if driver:
                writer.write("/sys/bus/pci/drivers/%s/bind" % driver, vf)
    return undo


def _vf_bind_step(changes, writer, pf, index, predicted):
    def address():
        vfs = current_vfs(writer, pf)
        if index not in vfs:
            raise GpuhostError("VF %d of %s did not appear" % (index, pf), field="num_vfs",
                               fix="read dmesg for the PF driver's SR-IOV errors")
        return vfs[index]

    def bind():
        vf = address()
        writer.write(device_path(vf, "driver_override"), VFIO_PCI)
        drv = current_driver(writer, vf)
        if drv and drv != VFIO_PCI:
            writer.write(device_path(vf, "driver/unbind"), vf)
        if current_driver(writer, vf) is None:
            writer.write("/sys/bus/pci/drivers_probe", vf)
        if current_driver(writer, vf) != VFIO_PCI:
            raise GpuhostError("vfio-pci did not claim VF %s" % vf, field="vf_driver",
                               fix="check that vfio-pci loads (modprobe vfio-pci)")

    def undo():
        vfs = current_vfs(writer, pf)
        vf = vfs.get(index)
        if vf is None:
            return
        if current_driver(writer, vf) == VFIO_PCI:
            writer.write("/sys/bus/pci/drivers/%s/unbind" % VFIO_PCI, vf)
        writer.write(device_path(vf, "driver_override"), "\n")
    label = predicted or "VF %d of %s" % (index, pf)
    changes.value_changes.append((device_path(label, "driver"), None, VFIO_PCI))
    changes.add("bind %s to vfio-pci" % label, bind, undo)


def describe_vfs(writer, pf):
    return [dict(vf_info(writer, vf), index=i) for i, vf in sorted(current_vfs(writer, pf).items())]


# -- persistence -----------------------------------------------------------------------

# {"version": 1, "pfs": {pf: {num_vfs, vf_driver, netdev, vfs}}}, merged per PF under the
# file's lock: two runs at once (two onboardings on different PFs) each keep their PF.
CONFIG = StateFile(CONFIG_FILE, "pfs", dict, field="persistent",
                   fix="fix or remove the file, then run the module again")


def read_config(writer):
    # never through a link: a planted one is refused before it is read
    return read_state_nofollow(writer, CONFIG)


def systemd_device_unit(path):
    """The .device unit of a sysfs path, escaped as ``systemd-escape --path --suffix=device``
    does: "/" becomes "-", and every byte but ASCII letters, digits, ":", "_" and a "."
    that does not lead becomes \\xNN. An interface named "br-lan" is
    sys-subsystem-net-devices-br\\x2dlan.device; unescaped, systemd would wait on the
    device of a path that does not exist (".../br/lan")."""
    parts = []
    for index, byte in enumerate(path.strip("/").encode("utf-8")):
        char = chr(byte)
        if char == "/":
            parts.append("-")
        elif (char.isascii() and char.isalnum()) or char in ":_" or (char == "." and index):
            parts.append(char)
        else:
            parts.append("\\x%02x" % byte)
    return "".join(parts) + ".device"


def unit_text(config):
    """gpuhost-sriov.service, ordered after the PFs' devices and before libvirt."""
    after = ["systemd-modules-load.service"]
    wants = []
    for entry in config["pfs"].values():
        if entry.get("netdev"):
            unit = systemd_device_unit("/sys/subsystem/net/devices/%s" % entry["netdev"])
            after.append(unit)
            wants.append(unit)
        elif "systemd-udev-settle.service" not in after:
            after.append("systemd-udev-settle.service")
            wants.append("systemd-udev-settle.service")
    return (
        "# Managed by gpuhost.kvm sriov_vfs: re-create SR-IOV VFs from %s at boot,\n"
        "# after their PFs exist and before libvirt starts domains that use them.\n"
        "[Unit]\n"
        "Description=gpuhost.kvm SR-IOV virtual functions\n"
        "DefaultDependencies=no\n"
        "After=%s\n"
        "%s"
        "Before=libvirtd.service virtqemud.service libvirt-guests.service network-pre.target\n"
        "Wants=network-pre.target\n"
        "ConditionPathExists=%s\n\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        "ExecStart=%s %s\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    ) % (CONFIG_FILE, " ".join(after), ("Wants=%s\n" % " ".join(wants)) if wants else "",
         CONFIG_FILE, HELPER, CONFIG_FILE)


def plan_persistence(changes, writer, plan, num_vfs, vf_driver, vf_settings, interpreter):
    stored = read_config(writer)
    config = dict(stored, pfs=dict(stored["pfs"]))
    entry = {"num_vfs": num_vfs, "vf_driver": vf_driver, "netdev": plan.netdev,
             "vfs": vf_settings or []}
    if num_vfs == 0:
        config["pfs"].pop(plan.pf, None)
    else:
        config["pfs"][plan.pf] = entry
    changes.put_state(writer, CONFIG, stored, config)
    if not config["pfs"]:
        return
    # The unit's ordering comes from this plan's view of the PFs: a PF another run adds at
    # the same moment joins the unit on the next run that reads the merged file.
    changes.put_file(writer, UNIT_FILE, unit_text(config))
    changes.put_file(writer, HELPER, wrapper_script(
        "ansible_collections.gpuhost.kvm.plugins.module_utils.changes.sriov_vfs", "boot_apply",
        interpreter=interpreter), mode=0o755)
    for path, source in python_library_files(LIBRARY).items():
        changes.put_file(writer, path, source, summarize=True)


def _subprocess_runner(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


# SR-IOV's TotalVFs is a 16-bit field: no PF has more VFs.
MAX_VFS = 65535


def boot_num_vfs(path, pf, entry):
    """The num_vfs of ``pf`` in the boot configuration ``path``: a whole number from 0 to
    MAX_VFS (a JSON 4, or "4" as a hand edit writes it), checked like the sysfs reads; a
    GpuhostError naming the file and what to do otherwise (never int() of whatever a
    hand edit left there: .inf, 1e999, -3, true)."""
    value = entry.get("num_vfs") if isinstance(entry, dict) else None
    number = value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}", value.strip()):
        number = int(value.strip())
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= MAX_VFS:
        raise GpuhostError(
            "%s holds num_vfs %s for %s, not a whole number from 0 to %d"
            % (path, json.dumps(value)[:40], pf, MAX_VFS), field=CONFIG.field,
            fix="run gpuhost.kvm.sriov_vfs for %s with persistent: true again to rewrite "
                "the file (or fix its num_vfs by hand)" % pf)
    return number


def boot_apply(argv, writer=None, runner=None):
    """Entry point of gpuhost-sriov-apply: re-create every PF's VFs from the config,
    read never through a link and checked (shape, each num_vfs) like the module's."""
    path = argv[0] if argv else CONFIG_FILE
    writer = writer or HostWriter("/")
    runner = runner or _subprocess_runner
    try:
        config = read_state_nofollow(writer, dataclasses.replace(CONFIG, path=path))
    except GpuhostError as err:
        sys.stderr.write("gpuhost-sriov: %s: %s\n" % (path, err.message))
        return 2
    failed = 0
    for pf, entry in sorted(config["pfs"].items()):
        try:
            num_vfs = boot_num_vfs(path, pf, entry)
            plan = plan_sriov(writer, pf, num_vfs,
                              entry.get("vf_driver", "default"), force=True,
                              vf_settings=entry.get("vfs"), runner=runner)
            if plan.needs_modprobe and plan.changes:
                _run(runner, ["modprobe", "--", VFIO_PCI])
            plan.changes.apply()
            sys.stderr.write("gpuhost-sriov: %s: %d VF(s) ready\n" % (pf, num_vfs))
        except GpuhostError as err:
            failed += 1
            sys.stderr.write("gpuhost-sriov: %s: %s\n" % (pf, err.message))
    return 1 if failed else 0
