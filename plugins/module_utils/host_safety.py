# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which PCI devices the host itself depends on, so that nothing takes them away.

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
/dev/nvidiaN, /dev/snd/*) and the PCI devices of running libvirt domains.

The decision, which of these refuse and under which override, is ``vfio.refusals_for``;
``host_refusals`` applies it for every module that hands a device away or destroys one
(vfio_bind, sriov_vfs, libvirt_pinned_domain). Each module names its action
(``HostAction``: BIND, UNBIND, PASS_THROUGH, CHANGE_VF_COUNT), and every refusal is
worded from it with the same structure (what the device is to the host, what this
action does to it and what the host loses, the override THIS module has or "no
override"), so no module borrows another's words or names another's option.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.validators import unit_name
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
    from ansible_collections.gpuhost.kvm.plugins.module_utils.libvirt_conn import (
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


def read_context(root="/", functions=None, ssh_connection=None, ip_addr_json=None,
                 domain_devices=None):
    """Everything vfio_bind's safety checks need, read once from ``root``."""
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.iommu import (
        group_members_verdict)
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import read_pci_functions
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
        CpuState, HostTopology, read_iommu_state)
    from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.vfio import HostContext
    functions = functions if functions is not None else read_pci_functions(root)
    iommu = read_iommu_state(root)
    topo = HostTopology(cpus=CpuState(), nodes={}, pci=functions, iommu=iommu)
    return HostContext(
        functions=functions, iommu_enabled=iommu.enabled,
        group_verdict=lambda addresses: group_members_verdict(topo, addresses),
        critical=read_host_critical(root, functions, ssh_connection, ip_addr_json),
        domain_devices=domain_devices, acs_override=iommu.acs_override,
        open_users=lambda address, driver: open_users(root, device_nodes(root, address,
                                                                         driver)))


def running_domain_devices_or_skip(module, libvirt_uri, live, skipped):
    """The PCI devices of running domains, for the modules that must not pull one away.

    With a test root and no URI the check is skipped and listed in ``skipped``. The
    default URI failing (a host without libvirtd yet) is a warning; a URI the user gave
    failing is an error.
    """
    from ansible_collections.gpuhost.kvm.plugins.module_utils.libvirt_conn import DEFAULT_URI
    uri = libvirt_uri or (DEFAULT_URI if live else None)
    if uri is None:
        skipped.append("running-domain check (no libvirt_uri with a test root)")
        return None
    try:
        return running_domain_devices(uri)
    except GpuhostError as err:
        if libvirt_uri:     # the option the user gave, by its own name
            raise GpuhostError(err.msg, field="libvirt_uri" if err.field == "uri" else err.field,
                               fix=err.fix, details=err.details) from err
        module.warn("could not check running libvirt domains: %s" % err.message)
        return None


# -- the policy, for every module ------------------------------------------------------

# What losing a host-critical device costs the host, by kind of refusal: the second half
# of every refusal's "why", after the calling module's own action (HostAction.takes).
_COSTS = {
    "root_fs": "the host stops at once (and this module with it)",
    "storage": "the host loses those filesystems",
    "network": "the host loses that connection",
    "console": "the host loses that console",
    "bridge": "every device behind it goes with it",
    "domain": "the running domain loses it",
    "in_use": "those processes lose it",
}


@dataclass(frozen=True)
class HostAction:
    """What the calling module does to a device, in the words of its refusals.

    Every refusal has one structure: ``<address> <what it is to the host>: <takes>, and
    <what the host loses> (set <override>: true to override | no override)``, after
    ``refusing to <verb>:``. ``takes`` says what THIS module's action does to the device;
    ``overrides`` are the override options the module has: a refusal whose override is
    not among them has none in that module (it is reported as ``no override``), so no
    message ever names an option the module does not take.
    """

    module: str
    verb: str
    takes: str
    overrides: tuple

    def why(self, kind):
        """The "why" of a refusal of ``kind`` (a key of _COSTS)."""
        return "%s, and %s" % (self.takes, _COSTS[kind])

    def override(self, option):
        """``option`` when this module has it, else None (no override here)."""
        return option if option in self.overrides else None


VFIO_OVERRIDES = ("allow_dirty_group", "allow_boot_vga", "allow_host_critical", "allow_in_use",
                  "allow_attached_to_running_domain", "allow_acs_override")
BIND = HostAction("vfio_bind", "bind", "binding it to vfio-pci unbinds it from the host",
                  VFIO_OVERRIDES)
UNBIND = HostAction("vfio_bind", "give back",
                    "giving it back to the host unbinds it from vfio-pci", VFIO_OVERRIDES)
PASS_THROUGH = HostAction("libvirt_pinned_domain", "pass through",
                          "passing it through to a domain detaches it from the host",
                          ("allow_host_critical", "allow_boot_vga"))
CHANGE_VF_COUNT = HostAction("sriov_vfs", "change the VF count",
                             "changing the VF count destroys it", ("allow_host_critical",))
ACTIONS = (BIND, UNBIND, PASS_THROUGH, CHANGE_VF_COUNT)


def read_module_context(module, root, functions=None, domain_devices=None):
    """``read_context`` as a module on the host sees it.

    On the live host (root /) the SSH connection comes from SSH_CONNECTION and the
    addresses from ``ip -j addr``; on a test root neither exists, so neither is read.
    """
    live = root in ("/", None)
    ip_addr_json = None
    ip = module.get_bin_path("ip") if live else None
    if ip:
        rc, out, _err = module.run_command([ip, "-j", "addr", "show"])
        ip_addr_json = out if rc == 0 else None
    return read_context(root or "/", functions,
                        ssh_connection=os.environ.get("SSH_CONNECTION") if live else None,
                        ip_addr_json=ip_addr_json, domain_devices=domain_devices)


def host_refusals(context, addresses, options, action):
    """The host-safety refusals for ``action`` (a HostAction: what the calling module
    does) on ``addresses``, worded for that action and naming only its overrides.

    Returns (blocking, allowed): the refusals that stand, and those an override in
    ``options`` (allow_host_critical, allow_boot_vga, ...) lets through. The driver is
    not changed by these callers now, so open users are left to vfio_bind, and running
    domains to the caller's own check. Addresses the host does not have are skipped:
    each caller reports those in its own words.
    """
    from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.vfio import refusals_for
    blocking, allowed = [], []
    for address in addresses:
        if address not in context.functions:
            continue
        for refusal in refusals_for(context, address, options, changing_driver=False,
                                    action=action):
            if refusal.option is not None and options.get(refusal.option):
                allowed.append(refusal)
            else:
                blocking.append(refusal)
    return blocking, allowed


def refusal_fix(refusals, devices_option):
    """The way out of ``refusals``, the same in every module, naming the option the
    devices came from (``devices_option``) and the overrides the refusals carry (only
    the calling module's: see HostAction)."""
    fixes = sorted(set(r.option for r in refusals if r.option))
    if any(r.option is None for r in refusals):
        fix = "remove the device(s) marked 'no override' from %s" % devices_option
        if fixes:
            fix += "; for the others set %s only if you accept the risk" % ", ".join(fixes)
        return fix
    return "set %s only if you accept the risk, or leave the device(s) out of %s" % (
        ", ".join(fixes), devices_option)


def check_vf_count_change(context, pf, vfs, num_vfs, options, action=CHANGE_VF_COUNT):
    """Refuse a VF count change of ``pf`` that destroys a VF the host depends on.

    The kernel changes a count only through 0, so every VF in ``vfs`` (the PF's VFs
    now) goes away, and with it the route, the SSH session or the filesystem it carries.
    """
    blocking, _allowed = host_refusals(context, vfs, options, action)
    if not blocking:
        return
    fixes = sorted(set(r.option for r in blocking if r.option))
    fix = "keep num_vfs at %d, and move what the VF(s) carry to another device first" % len(vfs)
    if fixes and all(r.option for r in blocking):
        fix += "; set %s only if you accept the risk" % ", ".join(fixes)
    first = blocking[0]
    raise GpuhostError(
        "refusing to %s of %s from %d to %d (the kernel removes every VF first): %s"
        % (action.verb, pf, len(vfs), num_vfs, "; ".join(r.text() for r in blocking)),
        field=first.option if fixes and all(r.option for r in blocking) else "num_vfs",
        fix=fix, details={"refusals": [{"address": r.address, "reason": r.reason,
                                        "override": r.option} for r in blocking]})


# -- host slimming ------------------------------------------------------------------------

# The services a GPU host needs, which host slimming (gpuhost_slim_services, runbook
# section 13: "关掉多余服务", switch off the services the host does not need) never
# disables, by name, with the reason. A socket or path unit of the same name counts too.
HOST_NEEDED_SERVICES = {
    "sshd": "the SSH daemon: Ansible and the operators reach the host through it",
    "ssh": "the SSH daemon (Debian's name): Ansible and the operators reach the host through it",
    "systemd-networkd": "it brings the host's network up (SSH, the tenants' bridges)",
    "NetworkManager": "it brings the host's network up (SSH, the tenants' bridges)",
    "networking": "ifupdown (Debian's /etc/network/interfaces) brings the host's network up "
                  "(SSH, the tenants' bridges)",
    "libvirtd": "the monolithic libvirt daemon runs the tenants",
    "virtqemud": "the modular libvirt daemon runs the tenants",
    "virtlogd": "libvirt cannot start a QEMU domain without its log daemon",
    "tuned": "the numa role applies the host's tuned profile through it (runbook section 13)",
    "gpuhost-numa": "the numa role's boot-time unit reserves the tenants' hugepages",
    "systemd-journald": "the host's log, which the bios role reads the kernel log from",
    "systemd-udevd": "udev applies vfio_bind's rules that keep the GPUs on vfio-pci",
    "dbus": "systemctl and the other services talk through it",
    "dbus-broker": "systemctl and the other services talk through it",
}
MAX_SLIM_SERVICES = 64


def check_slim_services(names, needed=None, option="gpuhost_slim_services"):
    """The units host slimming may disable and stop, as systemd names (``.service``
    added to a bare name), or a GpuhostError: a unit the host needs (HOST_NEEDED_SERVICES,
    plus ``needed``, a {name: reason} of the caller's own, such as irqbalance while the
    sriov_irq role bans the tenant CPUs through it) is refused by name with the reason."""
    if not isinstance(names, list) or len(names) > MAX_SLIM_SERVICES:
        raise GpuhostError("the services to disable must be a list of at most %d names"
                           % MAX_SLIM_SERVICES, field=option,
                           fix="list the unit names, such as [cups.service, bluetooth.service]")
    refused = dict(HOST_NEEDED_SERVICES, **(needed or {}))
    result = []
    for index, name in enumerate(names):
        text = name if isinstance(name, str) else ""
        unit = text if "." in text else text + ".service"
        unit_name(unit, "%s[%d]" % (option, index))
        base = unit.rsplit(".", 1)[0]
        if base in refused:
            raise GpuhostError("%s is a service this host needs: %s" % (unit, refused[base]),
                               field="%s[%d]" % (option, index),
                               fix="take %s out of the list; disable it by hand only if the "
                                   "host really does without it" % base)
        if unit not in result:
            result.append(unit)
    return result


# -- every verb that takes a service away --------------------------------------------------

# The services without which nobody reaches the host: stopping, disabling, masking or
# restarting them can cut the SSH session the run itself goes over, whichever way the
# request comes (a unit entry, host slimming, a restart on changed inputs).
LOCKOUT_SERVICES = ("ssh", "sshd", "networking", "NetworkManager", "systemd-networkd")
# The services the running tenants depend on: libvirt loses its hold on their QEMUs,
# and virtlogd their console logs.
TENANT_SERVICES = ("libvirtd", "virtqemud", "virtlogd")
TAKING_VERBS = ("stop", "disable", "mask", "restart")
ALLOW_HOST_CRITICAL = "allow_host_critical"


def running_tenants(root="/"):
    """The names of the running libvirt QEMU domains: libvirt keeps a status file
    /run/libvirt/qemu/<name>.xml for exactly as long as a domain runs (the monolithic
    libvirtd and the modular virtqemud alike)."""
    return sorted(name[:-4] for name in _listdir(root, "/run/libvirt/qemu")
                  if name.endswith(".xml"))


def check_unit_verbs(requests, tenants=(), allowed=False, option="units"):
    """Refuse, before any systemctl call, a verb of TAKING_VERBS on a LOCKOUT_SERVICES
    unit, and on a TENANT_SERVICES unit while ``tenants`` run, unless ``allowed`` (the
    module's allow_host_critical). ``requests``: (index, unit name, verbs) for each unit
    entry; a socket of the same name counts as the service."""
    for index, unit, verbs in requests:
        base = unit.rsplit(".", 1)[0] if "." in unit else unit
        taking = [verb for verb in verbs if verb in TAKING_VERBS]
        if not taking or allowed:
            continue
        if base in LOCKOUT_SERVICES:
            why = "the host's operators and this run reach the host through it"
        elif base in TENANT_SERVICES and tenants:
            why = "tenants run under it (%s)" % ", ".join(tenants)
        else:
            continue
        raise GpuhostError(
            "refusing to %s %s: %s" % (" and ".join(taking), unit, why),
            field="%s[%d]" % (option, index),
            fix="leave %s as it is; to %s it all the same (from a console that does not "
                "depend on it), set %s: true" % (unit, " and ".join(taking), ALLOW_HOST_CRITICAL))


def vfio_group_holders(root, groups):
    """Who holds the vfio nodes of IOMMU ``groups`` open, in words, one entry per process
    ("PID 4242 (qemu-system-x86) holds /dev/vfio/12 open"); empty when none does. A
    reset, a release or a fabric change of a held group would pull a device from under
    a running QEMU."""
    nodes = sorted({"/dev/vfio/%d" % group for group in groups if group is not None})
    return ["PID %d (%s) holds %s open" % (pid, comm, ", ".join(sorted(held)))
            for pid, (comm, held) in sorted(open_users(root, nodes).items())]


def check_devices_free(root, tenant, functions, groups):
    """Refuse to release ``tenant`` in the ledger while a process (the QEMU of its
    domain) holds one of its vfio groups open: the next tenant would be given devices
    that are still in use. ``groups``: address -> IOMMU group of ``functions``."""
    holders = vfio_group_holders(root, [groups.get(a) for a in functions])
    if holders:
        raise GpuhostError(
            "refusing to release tenant %s: %s" % (tenant, "; ".join(holders)),
            field="names",
            fix="stop and remove the tenant's domain first (libvirt_pinned_domain "
                "state=absent), scrub it (tenant_scrub), then release it")


# -- kernel arguments that replace what the host boots ------------------------------------

# key -> why the next boot would lock the operator out or drop the tenants' isolation;
# a key with values only refuses those values. A kernel argument is written for every
# later boot, so one of these is found only after a reboot, from a console.
BOOT_REPLACING_ARGS = {
    "root": (None, "it chooses another root file system: the host would boot something else"),
    "init": (None, "it replaces the host's init (systemd)"),
    "rdinit": (None, "it replaces the initramfs's init"),
    "systemd.unit": (None, "it boots another target than the host's default (rescue and "
                           "emergency have no network)"),
    "rd.systemd.unit": (None, "it stops the boot in the initramfs at another target"),
    "single": (None, "it boots into rescue mode, without the network"),
    "rescue": (None, "it boots into rescue mode, without the network"),
    "emergency": (None, "it boots into emergency mode, without the network"),
    "s": (None, "it boots into rescue mode, without the network"),
    "S": (None, "it boots into rescue mode, without the network"),
    "1": (None, "it boots into rescue mode, without the network"),
    "console": (None, "it moves the kernel console and the emergency shell, so the serial "
                      "line (or the screen) the operators reach the host through stays silent"),
    "net.ifnames": (None, "it renames the NICs, so the host's network configuration no "
                          "longer matches them"),
    "biosdevname": (None, "it renames the NICs, so the host's network configuration no "
                          "longer matches them"),
    "ip": (None, "the initramfs's network configuration replaces the host's"),
    "modprobe.blacklist": (None, "it can keep the NIC or the disk controller's driver from "
                                 "loading"),
    "module_blacklist": (None, "it can keep the NIC or the disk controller's driver from "
                               "loading"),
    "iommu": (("off",), "it turns the IOMMU off, on which every tenant's isolation rests"),
    "intel_iommu": (("off",), "it turns the IOMMU off, on which every tenant's isolation rests"),
    "amd_iommu": (("off",), "it turns the IOMMU off, on which every tenant's isolation rests"),
}
ALLOW_BOOT_REPLACING = "allow_boot_replacing_args"


def check_boot_args(args, allowed=False, field="args"):
    """Refuse kernel arguments of BOOT_REPLACING_ARGS unless ``allowed`` (the module's
    allow_boot_replacing_args): syntax alone does not make an argument safe to keep for
    every later boot."""
    if allowed:
        return
    for index, arg in enumerate(args):
        key, sep, value = arg.partition("=")
        rule = BOOT_REPLACING_ARGS.get(key)
        if rule is None or (rule[0] is not None and (not sep or value not in rule[0])):
            continue
        raise GpuhostError(
            "refusing the kernel argument %s: %s" % (arg, rule[1]), field="%s[%d]" % (field, index),
            fix="leave %s out; if the host really must boot with it, set %s: true and keep a "
                "console at hand for the reboot" % (arg, ALLOW_BOOT_REPLACING))
