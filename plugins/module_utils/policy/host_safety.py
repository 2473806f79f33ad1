# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host-safety policy: one set of refusals for every module that gives a device
away, destroys one, changes the boot or stops a service. It decides from what
host/safety_context.py and the other host readers report; it writes nothing.

``refusals_for`` decides which of a device's roles on the host refuse, and under which
override; ``host_refusals`` applies it for every module that hands a device away or
destroys one (vfio_bind, sriov_vfs, libvirt_pinned_domain). Each module names its action
(``HostAction``: BIND, UNBIND, PASS_THROUGH, CHANGE_VF_COUNT), and every refusal is
worded from it with the same structure (what the device is to the host, what this
action does to it and what the host loses, the override THIS module has or "no
override"), so no module borrows another's words or names another's option. The
IOMMU checks (``check_iommu``, ``check_groups``), the service verbs, host slimming, the
vfio groups a release waits for and the kernel arguments that replace the boot follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import unit_name
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import VFIO_PCI
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.safety_context import vfio_group_holders


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


# -- refusals of a device ---------------------------------------------------------------

@dataclass
class Refusal:
    """One reason not to go ahead, for every module: what it is about (a device's
    ``address``, or the option a check names, ``field``), what is wrong (``reason``), the
    override that lets it through in the calling module (``override``; None: none), what
    the action costs the host (``why``), the way out (``fix``), and a stable ``kind`` that
    callers match instead of the wording (the vm role's check mode lets "hugepages_short"
    and "vf_missing" pass: the earlier stages have not run yet)."""

    address: Optional[str] = None
    reason: str = ""
    override: Optional[str] = None
    why: Optional[str] = None
    field: Optional[str] = None
    fix: Optional[str] = None
    kind: Optional[str] = None

    def text(self):
        """A device refusal in one line: what it is to the host, the cost, the override."""
        tail = ("set %s: true to override" % self.override) if self.override else "no override"
        return "%s %s%s (%s)" % (self.address, self.reason,
                                 ": %s" % self.why if self.why else "", tail)

    def detail(self):
        """A check's refusal as the modules report it in ``details.refusals``."""
        return {"field": self.field, "msg": self.reason, "fix": self.fix,
                "override": self.override, "kind": self.kind}


def refusals_for(context, address, options, changing_driver=True, action=BIND):
    """Every reason not to let ``action`` (a host_safety.HostAction) take ``address``
    from the host, worded for that action, with the override the action's module has
    (None where it has none)."""
    refusals = []

    def refuse(reason, kind, option):
        refusals.append(Refusal(address, reason, action.override(option), action.why(kind)))

    function = context.functions[address]
    if function.is_bridge:
        refuse("is a PCI bridge", "bridge", None)
        return refusals
    critical = context.critical
    if critical is not None:
        if address in critical.root_fs:
            refuse("holds the root filesystem", "root_fs", None)
        else:
            for kind, why in critical.kinds_of(address):
                refuse(why, kind, "allow_host_critical")
        if address in critical.console:
            refuse(critical.console[address], "console", "allow_boot_vga")
    if context.domain_devices and address in context.domain_devices:
        refuse("is attached to running libvirt domain(s) %s"
               % ", ".join(context.domain_devices[address]), "domain",
               "allow_attached_to_running_domain")
    if changing_driver and context.open_users is not None and function.driver not in (
            None, VFIO_PCI):
        users = context.open_users(address, function.driver)
        if users:
            held = "; ".join("pid %d (%s) holds %s" % (pid, comm, ", ".join(nodes))
                             for pid, (comm, nodes) in sorted(users.items()))
            refuse("is in use through its %s driver: %s" % (function.driver, held), "in_use",
                   "allow_in_use")
    return refusals


def raise_refusals(refusals, options, action=BIND):
    blocking = [r for r in refusals if r.override is None or not options.get(r.override)]
    if not blocking:
        return
    first = blocking[0]
    fixes = sorted(set(r.override for r in blocking if r.override))
    if any(r.override is None for r in blocking):
        fix = "remove the device(s) marked 'no override' from devices/match"
        if fixes:
            fix += "; for the others set %s only if you accept the risk" % ", ".join(fixes)
    else:
        fix = "set %s only if you accept the risk, or leave the device(s) out" % ", ".join(fixes)
    raise GpuhostError("refusing to %s: " % action.verb + "; ".join(r.text() for r in blocking),
                       field=first.override or "devices", fix=fix,
                       details={"refusals": [{"address": r.address, "reason": r.reason,
                                              "override": r.override} for r in blocking]})


def check_iommu(context):
    if not context.iommu_enabled:
        raise GpuhostError(
            "the IOMMU is off (no IOMMU groups under /sys/kernel/iommu_groups), so vfio-pci "
            "cannot isolate any device", field="state",
            fix="add intel_iommu=on iommu=pt (Intel) or amd_iommu=on iommu=pt (AMD) to the "
                "kernel command line (gpuhost.kvm.kernel_args), enable VT-d/AMD-Vi in the "
                "firmware, and reboot")


def check_groups(context, selected, options):
    """Each IOMMU group touched must hold nothing but the selection and bridges."""
    if context.group_verdict is None:
        return []
    by_group: Dict[int, List[str]] = {}
    for address in selected:
        group = context.functions[address].iommu_group
        if group is None:
            raise GpuhostError(
                "%s has no IOMMU group although the IOMMU is on" % address, field="devices",
                fix="check dmesg for DMAR/AMD-Vi errors; the device cannot be passed through")
        by_group.setdefault(group, []).append(address)
    refusals = []
    for group, members in sorted(by_group.items()):
        if context.acs_override:
            # The group looks clean only because the kernel was told to pretend.
            refusals.append(Refusal(
                members[0], "is in IOMMU group %d, whose boundary pcie_acs_override=%s forces "
                            "in software: the hardware does not isolate it, so the guest may "
                            "reach other devices by peer-to-peer DMA (remove pcie_acs_override "
                            "from the kernel command line)" % (group, context.acs_override),
                "allow_acs_override"))
        verdict = context.group_verdict(members)
        if not verdict.clean:
            foreign = ", ".join("%s (%s, driver %s)" % (f["address"], f.get("class_name"),
                                                        f.get("driver"))
                                for f in verdict.foreign)
            refusals.append(Refusal(
                members[0], "shares IOMMU group %d with %s: every device in a group goes to "
                            "the guest together" % (group, foreign or "; ".join(verdict.reasons)),
                "allow_dirty_group"))
    return refusals


def host_refusals(context, addresses, options, action):
    """The host-safety refusals for ``action`` (a HostAction: what the calling module
    does) on ``addresses``, worded for that action and naming only its overrides.

    Returns (blocking, allowed): the refusals that stand, and those an override in
    ``options`` (allow_host_critical, allow_boot_vga, ...) lets through. The driver is
    not changed by these callers now, so open users are left to vfio_bind, and running
    domains to the caller's own check. Addresses the host does not have are skipped:
    each caller reports those in its own words.
    """
    blocking, allowed = [], []
    for address in addresses:
        if address not in context.functions:
            continue
        for refusal in refusals_for(context, address, options, changing_driver=False,
                                    action=action):
            if refusal.override is not None and options.get(refusal.override):
                allowed.append(refusal)
            else:
                blocking.append(refusal)
    return blocking, allowed


def refusal_fix(refusals, devices_option):
    """The way out of ``refusals``, the same in every module, naming the option the
    devices came from (``devices_option``) and the overrides the refusals carry (only
    the calling module's: see HostAction)."""
    fixes = sorted(set(r.override for r in refusals if r.override))
    if any(r.override is None for r in refusals):
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
    fixes = sorted(set(r.override for r in blocking if r.override))
    fix = "keep num_vfs at %d, and move what the VF(s) carry to another device first" % len(vfs)
    if fixes and all(r.override for r in blocking):
        fix += "; set %s only if you accept the risk" % ", ".join(fixes)
    first = blocking[0]
    raise GpuhostError(
        "refusing to %s of %s from %d to %d (the kernel removes every VF first): %s"
        % (action.verb, pf, len(vfs), num_vfs, "; ".join(r.text() for r in blocking)),
        field=first.override if fixes and all(r.override for r in blocking) else "num_vfs",
        fix=fix, details={"refusals": [{"address": r.address, "reason": r.reason,
                                        "override": r.override} for r in blocking]})


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
