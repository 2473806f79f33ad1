# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which PCI devices the host itself depends on, read from ``root``; reads only.

A device is host-critical when losing its driver would lock the operator out:

* it holds a mounted filesystem or active swap: the disk controller behind
  /proc/self/mountinfo's major:minor (through partitions and dm/md slaves), every PCI
  function above it on its sysfs path (root ports, switch ports), and the function that
  owns the controller's whole PCI domain (an Intel VMD endpoint owns domain 10000 and
  every NVMe drive in it), with that owner's own ancestors;
* it carries the default route (/proc/net/route, /proc/net/ipv6_route) or the local
  address of the SSH connection the module runs over (SSH_CONNECTION); when that NIC is
  an SR-IOV VF, its PF counts too, since the VF dies with it;
* it is the boot VGA (boot_vga=1) and a console is active on it: a bound vtconsole
  plus a framebuffer on that device or a firmware framebuffer (efifb, simpledrm, vesafb)
  that the boot VGA backs.

It also finds the open users of a GPU's device nodes (/proc/*/fd -> /dev/dri/*,
/dev/nvidiaN, /dev/snd/*), the PCI devices of running libvirt domains and the running
QEMU domains. What refuses, and under which override, is policy/host_safety.py.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    PciAddress, normalize_address)

_PCI_COMPONENT = re.compile(r"^[0-9a-f]{4,5}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
_PCI_ROOT_BUS = re.compile(r"^pci(?P<domain>[0-9a-f]{4,5}):[0-9a-f]{2}\Z")   # pci10000:00
_FIRMWARE_FB = ("efi vga", "efifb", "simple", "vesa", "vga16", "bochs")   # /proc/fb names


def _p(root, host_path):
    return os.path.join(root or "/", host_path.lstrip("/"))


def _read(root, host_path, default=None):
    try:
        return sysfs.read_file_text(_p(root, host_path))
    except (OSError, GpuhostError):
        return default


def _listdir(root, host_path):
    try:
        return sorted(os.listdir(_p(root, host_path)))
    except OSError:
        return []


def _realpath(root, host_path):
    """A host path's real location, as a host path (links resolved inside root)."""
    root_abs = os.path.realpath(root or "/")
    real = os.path.realpath(_p(root, host_path))
    if root_abs == "/":
        return real
    if real == root_abs or real.startswith(root_abs + os.sep):
        return "/" + os.path.relpath(real, root_abs)
    return real


def pci_address_of_path(real_host_path):
    """The innermost PCI function on a /sys/devices path, or None (virtual devices)."""
    chain = pci_chain_of_path(real_host_path)
    return chain[-1] if chain else None


def pci_chain_of_path(real_host_path):
    """Every PCI function on a /sys/devices path, outermost first: the root port and
    switch ports above a device, then the device."""
    return [normalize_address(part) for part in real_host_path.split("/")
            if _PCI_COMPONENT.match(part)]


def pci_domain_owners(root="/"):
    """PCI domain number -> the function that owns the domain.

    A storage controller such as Intel VMD hides its NVMe drives in a PCI domain of its
    own (10000 and up); the kernel puts that domain's root bus (``pci10000:00``) in the
    owner's sysfs directory. Domains the platform's host bridges own have no entry.
    """
    owners = {}
    for address in _listdir(root, "/sys/bus/pci/devices"):
        for entry in _listdir(root, "/sys/bus/pci/devices/%s" % address):
            match = _PCI_ROOT_BUS.match(entry)
            if match:
                owners[int(match.group("domain"), 16)] = normalize_address(address)
    return owners


def pci_dependency_chain(root, address, owners, _depth=0):
    """``address`` and every PCI function it cannot work without, outermost first.

    That is each function above it on its sysfs path and, for a function in a domain
    that another function owns (``pci_domain_owners``), the owner and its own chain.
    The owner is looked up even when the path already passes through it, so a tree
    whose domain hangs under /sys/devices directly is covered too.
    """
    chain = pci_chain_of_path(_realpath(root, "/sys/bus/pci/devices/%s" % address)) or [address]
    for member in list(chain):
        owner = owners.get(PciAddress.parse(member).domain)
        if owner and owner not in chain and _depth < 4:
            chain[:0] = [a for a in pci_dependency_chain(root, owner, owners, _depth + 1)
                         if a not in chain]
    return chain


# -- storage ---------------------------------------------------------------------------

def read_mounts(root="/"):
    """(mountpoint, major:minor, source) for each mount, from mountinfo or /proc/mounts."""
    mounts = []
    text = _read(root, "/proc/self/mountinfo")
    if text is not None:
        for line in text.splitlines():
            left, _sep, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) >= 5:
                mounts.append((_unescape(fields[4]), fields[2], rest[1] if len(rest) > 1 else ""))
        return mounts
    for line in (_read(root, "/proc/mounts", "") or "").splitlines():
        fields = line.split()
        if len(fields) >= 2:
            mounts.append((_unescape(fields[1]), None, fields[0]))
    return mounts


def _unescape(text):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _block_dir(root, major_minor, source):
    """The /sys path of a mount's block device, from major:minor or the /dev source."""
    if major_minor and not major_minor.startswith("0:"):
        link = "/sys/dev/block/%s" % major_minor
        if os.path.exists(_p(root, link)):
            return _realpath(root, link)
    if source.startswith("/dev/"):
        name = os.path.basename(source)
        if source.startswith("/dev/mapper/"):
            for dm in _listdir(root, "/sys/class/block"):
                if (_read(root, "/sys/class/block/%s/dm/name" % dm, "") or "").strip() == name:
                    name = dm
                    break
        link = "/sys/class/block/%s" % name
        if os.path.exists(_p(root, link)):
            return _realpath(root, link)
    return None


def block_device_pci(root, block_dir, _depth=0):
    """PCI functions behind a block device: partition -> disk, dm/md -> slaves."""
    if block_dir is None or _depth > 8:
        return set()
    if os.path.exists(_p(root, block_dir + "/partition")):
        block_dir = os.path.dirname(block_dir)
    slaves = _listdir(root, block_dir + "/slaves")
    if slaves:
        found = set()
        for slave in slaves:
            found |= block_device_pci(root, _realpath(root, "%s/slaves/%s" % (block_dir, slave)),
                                      _depth + 1)
        return found
    address = pci_address_of_path(block_dir)
    return {address} if address else set()


def read_swaps(root="/"):
    devices = []
    for line in (_read(root, "/proc/swaps", "") or "").splitlines()[1:]:
        fields = line.split()
        if fields and fields[0].startswith("/dev/"):
            devices.append(fields[0])
    return devices


def storage_devices(root="/"):
    """PCI address -> the mountpoints (and swap devices) it holds.

    A mount counts for its disk controller and for every function that controller
    depends on (``pci_dependency_chain``): passing a root port or a VMD endpoint
    through takes the disk with it.
    """
    owners = pci_domain_owners(root)
    holders: Dict[str, List[str]] = {}

    def hold(block_dir, what):
        for controller in sorted(block_device_pci(root, block_dir)):
            for address in pci_dependency_chain(root, controller, owners):
                held = holders.setdefault(address, [])
                if what not in held:
                    held.append(what)

    for mountpoint, major_minor, source in read_mounts(root):
        hold(_block_dir(root, major_minor, source), mountpoint)
    for swap in read_swaps(root):
        hold(_block_dir(root, None, swap), "swap %s" % swap)
    return holders


# -- network ---------------------------------------------------------------------------

def netdev_pci(root, ifname, _depth=0):
    """PCI functions under a netdev, through bond/bridge/vlan lower devices."""
    if _depth > 8:
        return set()
    base = "/sys/class/net/%s" % ifname
    if os.path.exists(_p(root, base + "/device")):
        address = pci_address_of_path(_realpath(root, base + "/device"))
        return {address} if address else set()
    found = set()
    lowers = [name[len("lower_"):] for name in _listdir(root, base) if name.startswith("lower_")]
    lowers += _listdir(root, base + "/brif")
    for lower in lowers:
        found |= netdev_pci(root, lower, _depth + 1)
    return found


def default_route_interfaces(root="/"):
    """Interfaces of IPv4 and IPv6 default routes."""
    names = set()
    for line in (_read(root, "/proc/net/route", "") or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[1] == "00000000" and fields[7] == "00000000":
            names.add(fields[0])
    for line in (_read(root, "/proc/net/ipv6_route", "") or "").splitlines():
        fields = line.split()
        # dest, dest_len, src, src_len, next hop, metric, refcnt, use, flags, iface
        if len(fields) >= 10 and set(fields[0]) == {"0"} and fields[1] == "00":
            flags = int(fields[8], 16)
            if not flags & 0x0200 and fields[9] != "lo":   # RTF_REJECT: unreachable
                names.add(fields[9])
    return names


def ssh_interfaces(root="/", ssh_connection=None, ip_addr_json=None):
    """Interfaces holding the local address of the SSH connection.

    ``ip_addr_json`` is the output of ``ip -j addr`` when the module could run it; else
    IPv6 addresses come from /proc/net/if_inet6 and IPv4 from the connected route that
    the kernel installs for each address's subnet in /proc/net/route.
    """
    if not ssh_connection:
        return set()
    parts = ssh_connection.split()
    if len(parts) < 3:
        return set()
    try:
        local = ipaddress.ip_address(parts[2].split("%")[0])
    except ValueError:
        return set()
    if ip_addr_json:
        names = set()
        for link in json.loads(ip_addr_json):
            for info in link.get("addr_info", []):
                if info.get("local") and ipaddress.ip_address(info["local"]) == local:
                    names.add(link.get("ifname"))
        return names - {"lo", None}
    if local.version == 6:
        names = set()
        for line in (_read(root, "/proc/net/if_inet6", "") or "").splitlines():
            fields = line.split()
            if len(fields) >= 6 and ipaddress.ip_address(
                    ":".join(fields[0][i:i + 4] for i in range(0, 32, 4))) == local:
                names.add(fields[5])
        return names - {"lo"}
    best, best_len = set(), -1
    for line in (_read(root, "/proc/net/route", "") or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or fields[2] != "00000000":
            continue
        dest = ipaddress.IPv4Address(bytes.fromhex(fields[1])[::-1])
        mask = ipaddress.IPv4Address(bytes.fromhex(fields[7])[::-1])
        net = ipaddress.IPv4Network("%s/%s" % (dest, mask), strict=False)
        if local in net and net.prefixlen >= best_len:
            if net.prefixlen > best_len:
                best = set()
            best.add(fields[0])
            best_len = net.prefixlen
    return best - {"lo"}


# -- console ---------------------------------------------------------------------------

def console_vga(root="/", functions=None):
    """The boot VGA address -> why its console is active; empty when none is."""
    bound = []
    for vtcon in _listdir(root, "/sys/class/vtconsole"):
        base = "/sys/class/vtconsole/%s" % vtcon
        name = (_read(root, base + "/name", "") or "").strip()
        if (_read(root, base + "/bind", "0") or "0").strip() == "1" and "dummy" not in name:
            bound.append(name)
    if not bound:
        return {}
    boot = [address for address, fn in (functions or {}).items() if fn.boot_vga]
    if not boot:
        return {}
    reasons = {}
    fb_on_device = {}
    firmware_fb = []
    for fb in _listdir(root, "/sys/class/graphics"):
        if not fb.startswith("fb"):
            continue
        base = "/sys/class/graphics/%s" % fb
        name = (_read(root, base + "/name", "") or "").strip()
        if os.path.exists(_p(root, base + "/device")):
            address = pci_address_of_path(_realpath(root, base + "/device"))
            if address:
                fb_on_device.setdefault(address, []).append("%s (%s)" % (fb, name))
                continue
        if any(word in name.lower() for word in _FIRMWARE_FB):
            firmware_fb.append("%s (%s)" % (fb, name))
    text_console = any("vga" in name.lower() and "frame buffer" not in name.lower()
                       for name in bound)
    for address in boot:
        why = []
        if address in fb_on_device:
            why.append("framebuffer %s" % ", ".join(fb_on_device[address]))
        if firmware_fb:
            why.append("firmware framebuffer %s set up on the boot VGA" % ", ".join(firmware_fb))
        if text_console:
            why.append("VGA text console")
        if why:
            reasons[address] = "boot VGA with an active console (%s; vtconsole %s)" % (
                "; ".join(why), ", ".join(bound))
    return reasons


# -- open users ------------------------------------------------------------------------

def device_nodes(root, address, driver=None):
    """The /dev nodes through which processes use a PCI function."""
    base = "/sys/bus/pci/devices/%s" % address
    nodes = ["/dev/dri/%s" % name for name in _listdir(root, base + "/drm")
             if name.startswith(("card", "renderD"))]
    for card in _listdir(root, base + "/sound"):
        nodes += ["/dev/snd/%s" % name for name in _listdir(root, "%s/sound/%s" % (base, card))
                  if name.startswith(("controlC", "pcmC", "hwC"))]
    info = _read(root, "/proc/driver/nvidia/gpus/%s/information" % address, "") or ""
    match = re.search(r"^Device Minor:\s*(\d+)", info, re.M)
    if match:
        nodes.append("/dev/nvidia%s" % match.group(1))
    return nodes


def open_users(root, nodes):
    """pid -> (comm, nodes it holds open), by reading /proc/*/fd links."""
    wanted = set(nodes)
    users = {}
    if not wanted:
        return users
    for pid in _listdir(root, "/proc"):
        if not pid.isdigit():
            continue
        fd_dir = _p(root, "/proc/%s/fd" % pid)
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue   # gone, or not ours to read
        held = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in wanted:
                held.add(target)
        if held:
            comm = (_read(root, "/proc/%s/comm" % pid, "?") or "?").strip()
            users[int(pid)] = (comm, sorted(held))
    return users


# -- libvirt ---------------------------------------------------------------------------

def running_domain_devices(uri):
    """PCI address -> names of running libvirt domains that hold it as a hostdev."""
    from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.libvirt_conn import (
        open_connection)
    import xml.etree.ElementTree as ET
    conn = open_connection(uri)
    held: Dict[str, List[str]] = {}
    try:
        for dom in conn.listAllDomains(1):   # VIR_CONNECT_LIST_DOMAINS_ACTIVE
            tree = ET.fromstring(dom.XMLDesc(0))
            for addr in tree.findall("./devices/hostdev[@type='pci']/source/address"):
                address = "%04x:%02x:%02x.%d" % tuple(
                    int(addr.get(key, "0"), 16) for key in ("domain", "bus", "slot", "function"))
                held.setdefault(address, []).append(dom.name())
    finally:
        conn.close()
    return held


@dataclass
class HostCriticalDevices:
    """What the host depends on, by PCI address, each with the reason."""

    root_fs: Dict[str, List[str]] = field(default_factory=dict)
    storage: Dict[str, List[str]] = field(default_factory=dict)
    network: Dict[str, List[str]] = field(default_factory=dict)
    console: Dict[str, str] = field(default_factory=dict)

    def reasons(self, address):
        return [why for _kind, why in self.kinds_of(address)]

    def kinds_of(self, address):
        """(kind, reason) for each way the host depends on ``address`` (the root
        filesystem and the console aside): kind "storage" or "network"."""
        why = []
        if address in self.storage:
            why.append(("storage", "holds mounted filesystem(s) %s"
                        % ", ".join(self.storage[address])))
        if address in self.network:
            why.append(("network", "is the NIC of %s" % ", ".join(self.network[address])))
        return why


def read_host_critical(root="/", functions=None, ssh_connection=None, ip_addr_json=None):
    """Collect every host-critical device of the host under ``root``."""
    critical = HostCriticalDevices()
    critical.storage = storage_devices(root)
    critical.root_fs = {address: points for address, points in critical.storage.items()
                        if "/" in points}
    carried = [("the default route (%s)" % ifname, ifname)
               for ifname in sorted(default_route_interfaces(root))]
    carried += [("the current SSH connection (%s)" % ifname, ifname)
                for ifname in sorted(ssh_interfaces(root, ssh_connection, ip_addr_json))]
    for what, ifname in carried:
        for address in sorted(netdev_pci(root, ifname)):
            critical.network.setdefault(address, []).append(what)
            # A VF disappears with its PF's driver or VF count: the PF carries it too.
            pf = _physfn(root, address)
            if pf:
                critical.network.setdefault(pf, []).append(
                    "%s through its VF %s" % (what, address))
    critical.console = console_vga(root, functions)
    return critical


def _physfn(root, address):
    link = "/sys/bus/pci/devices/%s/physfn" % address
    if not os.path.islink(_p(root, link)):
        return None
    return pci_address_of_path(_realpath(root, link))


def running_tenants(root="/"):
    """The names of the running libvirt QEMU domains: libvirt keeps a status file
    /run/libvirt/qemu/<name>.xml for exactly as long as a domain runs (the monolithic
    libvirtd and the modular virtqemud alike)."""
    return sorted(name[:-4] for name in _listdir(root, "/run/libvirt/qemu")
                  if name.endswith(".xml"))
