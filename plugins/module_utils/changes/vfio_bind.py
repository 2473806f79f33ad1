# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Handing PCI functions to vfio-pci and back: the pure core of vfio_bind.

Binding follows Documentation/ABI/testing/sysfs-bus-pci: write ``vfio-pci`` to the
device's ``driver_override``, unbind it from its driver, then write its address to
``/sys/bus/pci/drivers_probe``; with the override set only vfio-pci can match it.
Giving a device back clears the override, unbinds vfio-pci and binds the driver the
device had before (remembered in /var/lib/gpuhost/vfio-bind.json), or lets the
kernel's own matching pick one.

Persistence, chosen per host:

* ``driverctl`` (when installed): its override file /etc/driverctl.d/pci-<address>
  holding ``vfio-pci``, exactly what ``driverctl set-override`` saves, so that
  ``driverctl list-persisted`` / ``unset-override`` keep working. A udev rule
  (61-gpuhost-vfio-driverctl.rules) applies those files while the device is being added,
  before 80-drivers.rules loads the native driver's module; driverctl's own rule then
  finds the device already on vfio-pci.
* ``udev``: one rule per address, /etc/udev/rules.d/61-gpuhost-vfio-<address>.rules,
  ``ACTION=="add", SUBSYSTEM=="pci", KERNEL=="<address>",
  ATTR{driver_override}="vfio-pci", RUN+=<write the address to drivers_probe>``. udev
  applies ATTR assignments while it processes the rules and runs the modalias module
  load only afterwards, so the override is in place before
  nouveau/nvidia/snd_hda_intel/mlx5 can probe.

Both rules also ask the kernel to probe the device once its override is set. A driver
matches devices only when it registers or when asked: where vfio-pci is already
registered at the add event (dracut loads it before udev starts, from the iommu role's
``force_drivers+=``), the override alone leaves the device on no driver. Measured on the
dracut lab: the GPU came up on vfio-pci only through driverctl's own unit, and its HDA
function, which got no such unit, on no driver. Where vfio-pci loads later, its
registration binds the device and the probe finds nothing to do.

Both write /etc/modules-load.d/gpuhost-vfio.conf. The initramfs is not this module's:
the initramfs module is its one owner (the early vfio modules, the blacklist, dracut's
install_items and the rebuild). The plan lists which of the binding's files the host's
generator builds into the image (``initramfs_files``), for the caller to hand to it.
``options vfio-pci ids=`` plus a softdep is deliberately not used: it takes every card
with those IDs, which is wrong on a host where only some of its identical GPUs pass
through.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import mechanisms
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy.host_safety import (
    BIND, UNBIND, VFIO_OVERRIDES, check_groups, check_iommu, raise_refusals, refusals_for)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    VFIO_PCI, PciAddress, gpu_selection, normalize_address)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.state_file import StateFile, read_state_nofollow

STATE_FILE = "/var/lib/gpuhost/vfio-bind.json"
DRIVERCTL_DIR = "/etc/driverctl.d"
DRIVERCTL_BINARIES = ("/usr/sbin/driverctl", "/usr/bin/driverctl", "/sbin/driverctl")
DRIVERCTL_RULE = "/etc/udev/rules.d/61-gpuhost-vfio-driverctl.rules"
UDEV_RULE = "/etc/udev/rules.d/61-gpuhost-vfio-%s.rules"
MODULES_LOAD = "/etc/modules-load.d/gpuhost-vfio.conf"
# driverctl's udev rule runs cat on the override files, so dracut needs cat as well.
DRIVERCTL_RULE_TOOLS = ("/bin/cat",)
EARLY_MODULES = ("vfio", "vfio_iommu_type1", "vfio_pci")

OVERRIDES = VFIO_OVERRIDES


def device_path(address, attr=""):
    return "/sys/bus/pci/devices/%s%s" % (address, "/" + attr if attr else "")


def current_driver(writer, address):
    link = writer.path(device_path(address, "driver"))
    return os.path.basename(os.readlink(link)) if os.path.islink(link) else None


def current_override(writer, address):
    """The device's driver_override, read through sysfs.read_text: a value with a NUL
    inside is not one the kernel printed, so it is unknown (None), as when unreadable."""
    value = sysfs.read_text(writer.path(device_path(address, "driver_override")))
    return None if value in (None, "", "(null)") else value


def driver_loaded(writer, driver):
    return os.path.isdir(writer.path("/sys/bus/pci/drivers/%s" % driver))


# -- selection -------------------------------------------------------------------------

def _hex(value, field_name):
    try:
        return int(str(value), 16)
    except ValueError:
        raise GpuhostError("%r is not a hex number" % (value,), field=field_name,
                           fix="write IDs as lspci -nn prints them, e.g. 10de or 0x0302")


def _matches(function, match):
    if match.get("vendor") and function.vendor_id != _hex(match["vendor"], "match.vendor"):
        return False
    if match.get("device") and function.device_id != _hex(match["device"], "match.device"):
        return False
    if match.get("class"):
        wanted = str(match["class"]).lower().replace("0x", "")
        code = function.class_code
        full = "%06x" % code
        if not (full == wanted or full[:4] == wanted or full[:2] == wanted):
            return False
    return True


def select_devices(functions, devices=None, match=None, with_companions=True,
                   selection=None):
    """Requested addresses plus their slot companions; returns (ordered list, companions).
    ``match.gpu`` takes only the GPUs of ``selection`` (pci.GpuSelection; None: the
    default classes), the GPUs the planner and the IOMMU analysis count."""
    requested = []
    if devices:
        for text in devices:
            address = normalize_address(text, field="devices")
            if address not in functions:
                raise GpuhostError(
                    "no PCI function %s on this host" % address, field="devices",
                    fix="list the host's devices with lspci -D and use one of their addresses")
            if address not in requested:
                requested.append(address)
    if match:
        gpus = set(gpu_selection(selection).gpus(functions)) if match.get("gpu") else None
        found = [address for address, fn in functions.items()
                 if not fn.is_vf and _matches(fn, match)
                 and (gpus is None or address in gpus)]
        if not found:
            raise GpuhostError("no PCI function matches %s" % json.dumps(match, sort_keys=True),
                               field="match", fix="check the IDs with lspci -nn")
        requested += [a for a in found if a not in requested]
    selected = list(requested)
    companions: Dict[str, List[str]] = {}
    for address in requested:
        slot = PciAddress.parse(address).slot_key
        mates = [other for other in functions
                 if other != address and PciAddress.parse(other).slot_key == slot
                 and not functions[other].is_vf]
        companions[address] = mates if with_companions else []
        if with_companions:
            selected += [m for m in mates if m not in selected]
    selected.sort(key=PciAddress.parse)
    return selected, companions


# -- state file ------------------------------------------------------------------------

# {"version": 1, "devices": {address: {"driver": previous driver}}}, merged per address
# under the file's lock: two runs at once (two onboardings) each keep their devices.
STATE = StateFile(STATE_FILE, "devices", dict, field="state",
                  fix="remove the file; gpuhost.kvm then lets the kernel pick the driver "
                      "when a device is given back")


def read_state(writer):
    # never through a link: a planted one is refused before it is read
    return read_state_nofollow(writer, STATE)


# -- persistence -----------------------------------------------------------------------

def detect_persistence(writer, wanted="auto"):
    if wanted != "auto":
        return wanted
    return "driverctl" if any(writer.exists(b) for b in DRIVERCTL_BINARIES) else "udev"


def detect_initramfs(writer, wanted="auto"):
    if wanted != "auto":
        return wanted
    # The collection's one decision (host/mechanisms.py); undecided is "none" here:
    # vfio_bind then lists no initramfs file, and the initramfs module owns the rest.
    return mechanisms.detect_mechanisms(writer.root)["initramfs"]["choice"] or "none"


# Binds the device when vfio-pci registered before the override was set; a harmless
# no-op when the device already has a driver or vfio-pci is not loaded yet. /bin/sh is
# in every initramfs, so dracut's install_items need not name it.
PROBE_RUN = 'RUN+="/bin/sh -c \'echo $kernel > /sys/bus/pci/drivers_probe\'"'


def udev_rule(address):
    return ("# Managed by gpuhost.kvm vfio_bind: hand %s to vfio-pci before its native\n"
            "# driver is loaded (ATTR is applied while the rules run; module loading\n"
            "# happens after them), then probe it, for a vfio-pci loaded before udev ran.\n"
            'ACTION=="add", SUBSYSTEM=="pci", KERNEL=="%s", ATTR{driver_override}="vfio-pci", %s\n'
            % (address, address, PROBE_RUN))


DRIVERCTL_RULE_TEXT = (
    "# Managed by gpuhost.kvm vfio_bind: apply driverctl's vfio-pci overrides while the\n"
    "# device is being added, before 80-drivers.rules loads the native driver's module,\n"
    "# then probe it, for a vfio-pci loaded before udev ran (dracut loads it first).\n"
    "# driverctl stays the source of truth: unset-override removes the file, and this\n"
    "# rule then no longer matches.\n"
    'ACTION=="add", SUBSYSTEM=="pci", TEST=="/etc/driverctl.d/pci-$kernel", '
    'PROGRAM=="/bin/cat /etc/driverctl.d/pci-$kernel", RESULT=="vfio-pci", '
    'ATTR{driver_override}="vfio-pci", ' + PROBE_RUN + '\n')


def _persisted_rule_files(writer):
    folder = writer.path("/etc/udev/rules.d")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted("/etc/udev/rules.d/" + n for n in names
                  if re.match(r"^61-gpuhost-vfio-.*\.rules\Z", n))


def plan_persistence(changes, writer, addresses, bind, mechanism):
    """Add the boot-time files for ``addresses`` (bind) or remove them (not bind)."""
    for address in addresses:
        driverctl_file = "%s/pci-%s" % (DRIVERCTL_DIR, address)
        rule_file = UDEV_RULE % address
        if bind and mechanism == "driverctl":
            changes.put_file(writer, driverctl_file, VFIO_PCI + "\n")
            changes.put_file(writer, rule_file, None)
        elif bind:
            changes.put_file(writer, rule_file, udev_rule(address))
        else:
            if (writer.read_file(driverctl_file) or "").strip() == VFIO_PCI:
                changes.put_file(writer, driverctl_file, None)
            changes.put_file(writer, rule_file, None)
    if not bind:
        return
    if mechanism == "driverctl":
        changes.put_file(writer, DRIVERCTL_RULE, DRIVERCTL_RULE_TEXT)
    changes.put_file(writer, MODULES_LOAD,
                     "# Managed by gpuhost.kvm vfio_bind: load vfio-pci at boot.\n"
                     + "".join(m + "\n" for m in EARLY_MODULES))


def _vfio_driverctl_files(writer):
    folder = writer.path(DRIVERCTL_DIR)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    for name in names:
        path = "%s/%s" % (DRIVERCTL_DIR, name)
        if re.match(r"^pci-[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z", name) and \
                (writer.read_file(path) or "").strip() == VFIO_PCI:
            found.append(path)
    return found


def initramfs_files(writer, changes, generator):
    """The binding's files that ``generator`` builds into the image once ``changes``
    are applied: every persisted rule and vfio-pci override on the host (earlier runs'
    included), so that what the initramfs module lists is the whole set, never this
    run's devices alone. initramfs-tools copies none of them (they act after the switch
    to the real root), so it gets none."""
    if generator != "dracut":
        return []
    files = set(_persisted_rule_files(writer)) | set(_vfio_driverctl_files(writer))
    for change in changes.files:
        if change.path.startswith("/etc/udev/rules.d/") or change.path.startswith(DRIVERCTL_DIR):
            if change.after is None:
                files.discard(change.path)
            else:
                files.add(change.path)
    if any(path.startswith(DRIVERCTL_DIR) for path in files) or DRIVERCTL_RULE in files:
        files.update(DRIVERCTL_RULE_TOOLS)
    return sorted(files)


# -- the plan --------------------------------------------------------------------------

@dataclass
class DevicePlan:
    address: str
    driver_before: Optional[str]
    driver_after: Optional[str]
    iommu_group: Optional[int]
    companions: List[str] = field(default_factory=list)
    changed: bool = False
    gpu_selected_by: Optional[str] = None    # GpuSelection.reason(); None: not a GPU

    @property
    def vfio_dev(self):
        if self.driver_after == VFIO_PCI and self.iommu_group is not None:
            return "/dev/vfio/%d" % self.iommu_group
        return None

    def as_dict(self):
        return {"address": self.address, "driver_before": self.driver_before,
                "driver_after": self.driver_after, "iommu_group": self.iommu_group,
                "vfio_dev": self.vfio_dev, "companions": self.companions,
                "changed": self.changed, "gpu_selected_by": self.gpu_selected_by}


@dataclass
class VfioPlan:
    changes: ChangeSet
    devices: List[DevicePlan]
    needs_modprobe: bool = False
    initramfs_changed: bool = False
    initramfs_files: List[str] = field(default_factory=list)
    persistence: Optional[str] = None


def _bind_steps(changes, writer, address, driver_before, override_before):
    dev = device_path(address)
    override_path = dev + "/driver_override"
    if override_before != VFIO_PCI:
        def undo_override():
            writer.write(override_path, (override_before or "") + "\n")
            if current_driver(writer, address) is None and driver_before:
                writer.write("/sys/bus/pci/drivers/%s/bind" % driver_before, address)
        changes.value_changes.append((override_path, override_before or "(null)", VFIO_PCI))
        changes.add("set %s driver_override to vfio-pci" % address,
                    lambda: writer.write(override_path, VFIO_PCI), undo_override)
    if driver_before == VFIO_PCI:
        return
    if driver_before:
        changes.value_changes.append((dev + "/driver", driver_before, "(unbound)"))
        changes.add("unbind %s from %s" % (address, driver_before),
                    lambda: writer.write(dev + "/driver/unbind", address))

    def probe():
        writer.write("/sys/bus/pci/drivers_probe", address)
        got = current_driver(writer, address)
        if got != VFIO_PCI:
            raise GpuhostError(
                "vfio-pci did not claim %s (driver now: %s)" % (address, got or "none"),
                field="devices", fix="check that the vfio-pci module loads (modprobe vfio-pci) "
                                     "and read dmesg for vfio-pci errors")

    def undo_probe():
        if current_driver(writer, address) == VFIO_PCI:
            writer.write("/sys/bus/pci/drivers/%s/unbind" % VFIO_PCI, address)
    changes.value_changes.append(("/sys/bus/pci/drivers_probe", None, address))
    changes.value_changes.append((dev + "/driver", None, VFIO_PCI))
    changes.add("probe %s (binds vfio-pci)" % address, probe, undo_probe)


def _unbind_steps(changes, writer, address, driver_before, previous):
    dev = device_path(address)
    override_path = dev + "/driver_override"

    def undo_unbind():
        writer.write(override_path, VFIO_PCI)
        if current_driver(writer, address) is None:
            writer.write("/sys/bus/pci/drivers_probe", address)
    if driver_before == VFIO_PCI:
        changes.value_changes.append((dev + "/driver", VFIO_PCI, "(unbound)"))
        changes.add("unbind %s from vfio-pci" % address,
                    lambda: writer.write("/sys/bus/pci/drivers/%s/unbind" % VFIO_PCI, address),
                    undo_unbind)
    changes.value_changes.append((override_path, VFIO_PCI, "(null)"))
    changes.add("clear %s driver_override" % address,
                lambda: writer.write(override_path, "\n"),
                None if driver_before == VFIO_PCI else lambda: writer.write(override_path,
                                                                            VFIO_PCI))

    def give_back():
        if current_driver(writer, address):
            return
        if previous and driver_loaded(writer, previous):
            writer.write("/sys/bus/pci/drivers/%s/bind" % previous, address)
        else:
            writer.write("/sys/bus/pci/drivers_probe", address)

    def undo_give_back():
        got = current_driver(writer, address)
        if got and got != VFIO_PCI:
            writer.write("/sys/bus/pci/drivers/%s/unbind" % got, address)
    changes.value_changes.append((dev + "/driver", None, previous or "(kernel's choice)"))
    changes.add("bind %s to %s" % (address, previous or "the driver the kernel picks"),
                give_back, undo_give_back)


def plan_vfio(writer, context, selected, companions, state="bound", options=None,
              persistent=False, persistence="auto", initramfs="auto", selection=None):
    """Decide every step for ``selected`` (addresses), after the safety checks; each
    device says whether ``selection`` (pci.GpuSelection) counts it as a GPU."""
    options = options or {}
    selection = gpu_selection(selection)
    gpus = set(selection.gpus(context.functions))
    check_iommu(context)
    changes = ChangeSet()
    plans = []
    refusals = []
    saved = read_state(writer)
    new_state = json.loads(json.dumps(saved))
    to_change = []
    for address in selected:
        function = context.functions[address]
        driver = current_driver(writer, address)
        override = current_override(writer, address)
        plan = DevicePlan(address, driver, driver, function.iommu_group,
                          companions.get(address, []),
                          gpu_selected_by=selection.reason(function) if address in gpus
                          else None)
        plans.append(plan)
        if state == "bound":
            if driver == VFIO_PCI and override == VFIO_PCI:
                continue
            plan.driver_after = VFIO_PCI
            plan.changed = True
            to_change.append(address)
            refusals += refusals_for(context, address, options,
                                     changing_driver=driver != VFIO_PCI)
        else:
            if driver != VFIO_PCI and override != VFIO_PCI:
                continue
            previous = saved["devices"].get(address, {}).get("driver")
            plan.driver_after = previous if driver == VFIO_PCI else driver
            plan.changed = True
            to_change.append(address)
            refusals += [r for r in refusals_for(context, address, options, False,
                                                 action=UNBIND)
                         if r.override == "allow_attached_to_running_domain"]
    if state == "bound" and to_change:
        refusals += check_groups(context, selected, options)
    raise_refusals(refusals, options, BIND if state == "bound" else UNBIND)

    needs_modprobe = state == "bound" and any(
        p.driver_before != VFIO_PCI for p in plans if p.changed) and not driver_loaded(
        writer, VFIO_PCI)
    for plan in plans:
        if not plan.changed:
            continue
        override = current_override(writer, plan.address)
        if state == "bound":
            if plan.driver_before and plan.driver_before != VFIO_PCI:
                new_state["devices"][plan.address] = {"driver": plan.driver_before}
            _bind_steps(changes, writer, plan.address, plan.driver_before, override)
        else:
            _unbind_steps(changes, writer, plan.address, plan.driver_before,
                          saved["devices"].get(plan.address, {}).get("driver"))
            new_state["devices"].pop(plan.address, None)
    changes.put_state(writer, STATE, saved, new_state)

    result = VfioPlan(changes, plans, needs_modprobe=needs_modprobe)
    if persistent:
        mechanism = detect_persistence(writer, persistence)
        result.persistence = mechanism
        generator = detect_initramfs(writer, initramfs)
        before = len(changes.files)
        plan_persistence(changes, writer, selected, state == "bound", mechanism)
        result.initramfs_changed = any(in_initramfs_image(f.path, generator)
                                       for f in changes.files[before:] if f.changed)
        result.initramfs_files = initramfs_files(writer, changes, generator)
    return result


def in_initramfs_image(path, generator):
    """Whether ``path``, written by the persistent binding, is built into the initramfs
    by ``generator``, so that changing it needs a rebuild. dracut installs
    modules-load.d and the udev rules and driverctl files the initramfs module lists
    (install_items). initramfs-tools copies only its own modules file and modprobe.d,
    which vfio_bind does not write: driverctl, the udev rules and modules-load.d act
    after the switch to the real root, so a rebuild for them would cost minutes and
    change nothing in the image."""
    if generator == "dracut":
        return (path == MODULES_LOAD or path.startswith("/etc/udev/rules.d/")
                or path.startswith(DRIVERCTL_DIR))
    return False


def prepend_modprobe(plan, run_modprobe):
    """Load vfio-pci first when a device must move to it and the driver is missing."""
    if plan.needs_modprobe:
        from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import Step
        plan.changes.steps.insert(0, Step("modprobe vfio-pci", run_modprobe))
