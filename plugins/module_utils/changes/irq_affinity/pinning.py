# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pinning IRQs to host CPUs: the pure core of irq_affinity and of its re-apply helper.

An IRQ is selected by a regex on its action name in /proc/interrupts (``mlx5``,
``nvme``, ``vfio-msix``), by the ``msi_irqs`` of a PCI function, or by number. Writing
/proc/irq/N/smp_affinity_list sets where it may fire (Documentation/core-api/irq/
irq-affinity.rst); effective_affinity_list says where it fires now (x86 delivers to
one CPU of the mask). An IRQ is in place when smp_affinity_list equals the wanted CPUs
and its effective affinity lies inside them. Kernel-managed IRQs (NVMe queues and the
like) refuse the write with EIO (kernel/irq/proc.c): they are reported, not failed.

Pins do not survive on their own: a NIC's IRQs are requested again each time it comes
up, and a passed-through device's vfio-msix IRQs exist only once the guest enables
MSI-X. So the wanted pins are stored in /etc/gpuhost/irq-affinity.json and
``reapply`` (this file, run by the thin gpuhost-irq-reapply helper) puts them back from:

* a udev rule on net "add"/"move" events;
* a NetworkManager dispatcher script on "up", where NetworkManager is installed;
* a libvirt qemu hook (/etc/libvirt/hooks/qemu.d/) on "started", whose child becomes
  the host's one watcher (or leaves the domain to the one that runs), because a guest
  enables MSI-X only after it boots; the watcher ends when no domain runs;
* gpuhost-irq-reapply.service at boot, which watches for a while as the drivers request
  their IRQs: a block device's queues have no udev net event (seen on the lab: after a
  reboot the NVMe admin queue's IRQ was back on all CPUs).

irqbalance rewrites the affinity of every IRQ it balances, every ten seconds, among the
CPUs it may use, so a running irqbalance undoes the pins (seen on the lab: the NIC's and
the NVMe admin queue's IRQs moved off node 0's housekeeping CPUs within a minute). Its
policy script (``--policyscript``, gpuhost-irqbalance-policy, policy.py) answers
``ban=true`` for the IRQs the stored pins cover, so irqbalance leaves them alone and
balances the rest away from the banned tenant CPUs.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist, parse_cpulist)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import normalize_address
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.sysfs import read_cpus_attr
# Imported so that the module's payload carries it: the boot library ships its source.
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity import policy as policy_script
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.irq_pins import (
    CONFIG_FILE, parse_stored_rule, read_stored_pins, stored_pins_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    read_cpu_state, read_irqs, vfio_actions)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import (
    ChangeSet, revert_state_file, update_state_file)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.shipping import (
    python_library_files, wrapper_script)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import describe_os_error
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import FileLock, HostWriter

HELPER = "/usr/local/libexec/gpuhost/gpuhost-irq-reapply"
POLICY_SCRIPT = "/usr/local/libexec/gpuhost/gpuhost-irqbalance-policy"
UDEV_RULE_FILE = "/etc/udev/rules.d/90-gpuhost-irq-affinity.rules"
LIBVIRT_HOOK = "/etc/libvirt/hooks/qemu.d/gpuhost-irq-affinity"
NM_DISPATCHER_DIR = "/etc/NetworkManager/dispatcher.d"
NM_DISPATCHER = NM_DISPATCHER_DIR + "/90-gpuhost-irq-affinity"
UNIT_NAME = "gpuhost-irq-reapply.service"
UNIT_FILE = "/etc/systemd/system/" + UNIT_NAME
# Every module a wrapper script runs (the policy script has its own light module); the
# shipped library is these with what they import.
LIBRARY = ("changes.irq_affinity.pinning", "changes.irq_affinity.policy")
WATCH_SECONDS = 180
# After WATCH_SECONDS (a look every 2 s), the libvirt hook's watcher goes on looking every
# DOMAIN_WATCH_INTERVAL_S for as long as the domain's QEMU lives: a guest enables MSI or
# MSI-X when its driver loads, which can be minutes after the start (on the lab, an L2
# kernel's igbvf and snd_hda_intel came 456 s after it), and again on every reload.
DOMAIN_WATCH_INTERVAL_S = 10
LIBVIRT_QEMU_RUN_DIR = "/run/libvirt/qemu"
# Held by the host's one domain watcher: every tenant's start runs the hook, and one
# process re-applying every stored pin serves them all (bench/bench_irq_watcher.py
# measured one watcher per tenant against one per host).
WATCH_LOCK = "/run/gpuhost/irq-watch.lock"


@dataclass
class IrqRule:
    """One wanted pin: which IRQs (any selector) go to which CPUs."""

    cpus: Tuple[int, ...]
    name_regex: Optional[str] = None
    pci_devices: Tuple[str, ...] = ()
    irqs: Tuple[int, ...] = ()
    name: Optional[str] = None      # stored under this name: a later rule of the same
    #                                 name replaces it whatever its selectors

    @property
    def key(self):
        if self.name:
            return json.dumps({"name": self.name})
        return self.selectors

    @property
    def selectors(self):
        return json.dumps({"name_regex": self.name_regex, "pci_devices": list(self.pci_devices),
                           "irqs": list(self.irqs)}, sort_keys=True)

    def replaces(self, other):
        """Whether this rule takes ``other``'s place in the stored pins: the same name, or
        the same selectors where ``other`` has no name (stored before names existed)."""
        if other.key == self.key:
            return True
        return not other.name and other.selectors == self.selectors

    def to_dict(self):
        data = {"name_regex": self.name_regex, "pci_devices": list(self.pci_devices),
                "irqs": list(self.irqs), "cpus": format_cpulist(self.cpus)}
        if self.name:
            data["name"] = self.name
        return data

    @classmethod
    def from_dict(cls, data):
        cpus, name_regex, pci_devices, irqs, name = parse_stored_rule(data)
        return cls(cpus=cpus, name_regex=name_regex, pci_devices=pci_devices, irqs=irqs,
                   name=name)


def build_rule(cpus, name_regex=None, pci_devices=None, irqs=None, name=None):
    if name_regex is not None:
        try:
            re.compile(name_regex)
        except re.error as err:
            raise GpuhostError("bad regex %r: %s" % (name_regex, err), field="name_regex",
                               fix="give a Python regular expression such as ^mlx5_comp")
    return IrqRule(cpus=parse_cpulist(cpus, field="cpus"), name_regex=name_regex,
                   # Sorted: the order selects nothing, and a caller's order can change
                   # between runs (Jinja's difference filter goes through a set), which
                   # rewrote the stored pins and restarted irqbalance on the lab's re-run.
                   pci_devices=tuple(sorted(set(normalize_address(a, field="pci_devices")
                                                for a in pci_devices or ()))),
                   irqs=tuple(sorted(set(int(i) for i in irqs or ()))), name=name or None)


def validate_cpus(rule, online):
    if not rule.cpus:
        raise GpuhostError("cpus is empty", field="cpus",
                           fix="give the host CPUs the IRQs should run on, e.g. 0-1")
    outside = sorted(set(rule.cpus) - set(online))
    if outside:
        raise GpuhostError(
            "CPU(s) %s are not online (online: %s)" % (format_cpulist(outside),
                                                       format_cpulist(online)),
            field="cpus", fix="choose CPUs from the online set, see "
                              "/sys/devices/system/cpu/online")


def _msi_irqs(root, address):
    folder = os.path.join(root, "sys/bus/pci/devices", address)
    if not os.path.isdir(folder):
        return None
    try:
        return sorted(int(n) for n in os.listdir(os.path.join(folder, "msi_irqs"))
                      if n.isdigit())
    except OSError:
        return []


def select_irqs(root, irqs, rule, strict=True):
    """IRQ numbers the rule covers now; strict: an unknown IRQ or device is an error."""
    numbers = set()
    for number in rule.irqs:
        if str(number) not in irqs and not os.path.isdir(os.path.join(root, "proc/irq",
                                                                      str(number))):
            if strict:
                raise GpuhostError("IRQ %d does not exist" % number, field="irqs",
                                   fix="pick IRQ numbers from /proc/interrupts")
            continue
        numbers.add(number)
    for address in rule.pci_devices:
        found = _msi_irqs(root, address)
        if found is None:
            if strict:
                raise GpuhostError("no PCI function %s on this host" % address,
                                   field="pci_devices", fix="list devices with lspci -D")
            continue
        # A vector the driver allocated but never requested has no /proc/irq entry (igb
        # lists its MSI-X vectors in msi_irqs while its interface is down, and reallocates
        # them when VFs are created): nothing to pin now, and the re-apply pins it when it
        # appears. Writing its affinity failed with ENOENT and rolled the whole run back.
        numbers.update(n for n in found if str(n) in irqs
                       or os.path.isdir(os.path.join(root, "proc/irq", str(n))))
        # A passed-through function's INTx line is not in its msi_irqs: vfio-pci names
        # its handler vfio-intx(ADDRESS) on a legacy IRQ the line may share with others.
        numbers.update(irq.number for irq in irqs.values()
                       if irq.number is not None and irq.name
                       and any(device == address for _a, _k, device in vfio_actions(irq.name)))
    if rule.name_regex is not None:
        pattern = re.compile(rule.name_regex)
        numbers.update(irq.number for irq in irqs.values()
                       if irq.number is not None and irq.name and pattern.search(irq.name))
    return sorted(numbers)


def in_place(irq, cpus):
    wanted = set(cpus)
    if irq.smp_affinity_list is None:
        return False
    if set(irq.smp_affinity_list) != wanted:
        return False
    effective = irq.effective_affinity_list
    return not effective or set(effective) <= wanted


@dataclass
class PinPlan:
    changes: ChangeSet
    selected: List[int]
    to_change: List[int]
    skipped_managed: List[int] = field(default_factory=list)
    changed_irqs: List[int] = field(default_factory=list)
    previous: dict = field(default_factory=dict)


@dataclass
class AffinityPlan:
    """One irq_affinity task: every group's pins and the files, restarts and reloads
    they need, in one change set; the first ``setup_steps`` steps are not pins."""
    changes: ChangeSet
    setup_steps: int = 0


def plan_pins(writer, irqs, numbers, cpus, known_managed=()):
    """One step per IRQ not in place; EIO (kernel-managed) is recorded, not raised.

    An IRQ whose action name is in ``known_managed`` (names an earlier run saw refuse
    the write) is reported as managed without a step: check mode's prediction, since
    nothing but the write tells a managed IRQ apart.
    """
    changes = ChangeSet()
    plan = PinPlan(changes, list(numbers), [])
    wanted = format_cpulist(cpus)
    for number in numbers:
        irq = irqs.get(str(number))
        if irq is None:
            irq = _read_one(writer, number)
        if in_place(irq, cpus):
            continue
        if irq.name and irq.name in known_managed:
            plan.skipped_managed.append(number)
            continue
        plan.to_change.append(number)
        before = format_cpulist(irq.smp_affinity_list or ())
        plan.previous[number] = before
        path = "/proc/irq/%d/smp_affinity_list" % number
        changes.value_changes.append((path, before, wanted))

        def apply(number=number, path=path):
            try:
                writer.write(path, wanted)
            except OSError as err:
                if err.errno == errno.EIO:
                    plan.skipped_managed.append(number)
                    return
                raise
            plan.changed_irqs.append(number)

        def undo(number=number, path=path, before=before):
            if number in plan.changed_irqs and before:
                writer.write(path, before)
        changes.add("pin IRQ %d to %s" % (number, wanted), apply, undo)
    return plan


def _read_one(writer, number):
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import Irq
    # Through sysfs, as read_irqs reads them: a list the kernel cannot have printed (a NUL
    # inside, garbage) is unknown, so the IRQ is pinned, never an error about "cpulist".
    smp = read_cpus_attr(writer.path("/proc/irq/%d/smp_affinity_list" % number))
    eff = read_cpus_attr(writer.path("/proc/irq/%d/effective_affinity_list" % number))
    return Irq(irq=str(number), number=number, smp_affinity_list=smp,
               effective_affinity_list=eff or None)


# -- persistence -----------------------------------------------------------------------

# {"version": 1, "rules": [rule, ...], "kernel_managed": [action name, ...]}: rules merged
# by name (or selectors), the names as a set, under the file's lock, so that two runs at
# once (one per NUMA node, or two onboardings) each keep their pins.
CONFIG = stored_pins_spec()


def add_managed_record(changes, writer, plans, irqs):
    """A last step: store the action names of the IRQs that refused their pin (EIO), so
    that check mode, validate.yml on its own included, can tell a kernel-managed IRQ from
    one out of place (IRQ numbers move between boots, names do not). ``plans``: one
    PinPlan or several (one per group of a run), recorded in one write. Returns a list
    that holds True once the step changed the file."""
    plans = [plans] if isinstance(plans, PinPlan) else list(plans)
    wrote = []
    record = {"undo": {}}

    def apply():
        names = {irqs[str(n)].name for plan in plans for n in plan.skipped_managed
                 if str(n) in irqs and irqs[str(n)].name}
        if not names:
            return
        record.update(update_state_file(writer, CONFIG, {("kernel_managed", name): True
                                                         for name in sorted(names)}))
        if record["undo"]:
            wrote.append(True)

    def undo():
        revert_state_file(writer, CONFIG, record)
    changes.add("record the IRQs that refuse a pin (kernel-managed) in %s" % CONFIG_FILE,
                apply, undo)
    return wrote


def udev_rule_text():
    return ("# Managed by gpuhost.kvm irq_affinity: the kernel requests a NIC's IRQs again\n"
            "# when it appears, so re-apply the pins from %s.\n"
            'ACTION=="add|move", SUBSYSTEM=="net", RUN+="%s"\n' % (CONFIG_FILE, HELPER))


def nm_dispatcher_text(interpreter):
    return ("#!%s\n"
            "# Managed by gpuhost.kvm irq_affinity: many NIC drivers request their IRQs on\n"
            "# link up; re-apply the pins then.\n"
            "import subprocess, sys\n"
            "if len(sys.argv) > 2 and sys.argv[2] == 'up':\n"
            "    subprocess.call([%r])\n" % (interpreter, HELPER))


def unit_text():
    return ("# Managed by gpuhost.kvm irq_affinity: re-apply the pins from %s at boot and\n"
            "# for a while after, as the drivers request their IRQs.\n"
            "[Unit]\n"
            "Description=gpuhost.kvm IRQ pins\n"
            "After=systemd-modules-load.service local-fs.target irqbalance.service\n"
            "ConditionPathExists=%s\n\n"
            "[Service]\n"
            "Type=exec\n"
            "ExecStart=%s --watch %d\n\n"
            "[Install]\n"
            "WantedBy=multi-user.target\n") % (CONFIG_FILE, CONFIG_FILE, HELPER, WATCH_SECONDS)


def _merge_rule(stored_rules, rule):
    """The stored rules with ``rule`` in place of the one it replaces (else at the end)."""
    # In place: one task per NUMA node each stored its rule, and moving a rule to the end
    # rewrote the file (and restarted irqbalance) on every run of every node's task.
    rules = []
    for data in stored_rules:
        if rule.replaces(IrqRule.from_dict(data)):
            if rule.to_dict() not in rules:
                rules.append(rule.to_dict())
        else:
            rules.append(data)
    if rule.to_dict() not in rules:
        rules.append(rule.to_dict())
    return rules


def plan_persistence(changes, writer, rules, interpreter="/usr/bin/python3", forget=()):
    """Store ``rules`` (one IrqRule or several), drop the stored pins named in ``forget``,
    and, when there is a rule to store, put the re-apply paths in place; one read and at
    most one write of the stored pins whatever the number of rules. Returns whether the
    stored pins changed (irqbalance's policy script answers from them)."""
    rules = [rules] if isinstance(rules, IrqRule) else list(rules)
    # Only names: an empty or missing one must never match the rules stored unnamed.
    forget = [name for name in ([forget] if isinstance(forget, str) else forget) if name]
    stored = read_stored_pins(writer)
    kept = [data for data in stored["rules"] if not (forget and data.get("name") in forget)]
    for rule in rules:
        kept = _merge_rule(kept, rule)
    config_changed = changes.put_state(writer, CONFIG, stored, dict(stored, rules=kept))
    if not rules:
        return config_changed
    module = __name__
    policy_module = policy_script.__name__
    changes.put_file(writer, HELPER, wrapper_script(module, "reapply_main",
                                                    interpreter=interpreter), mode=0o755)
    # The policy script runs once per IRQ at irqbalance's start: its own light module.
    changes.put_file(writer, POLICY_SCRIPT,
                     wrapper_script(policy_module, "irqbalance_policy_main",
                                    interpreter=interpreter), mode=0o755)
    changes.put_file(writer, LIBVIRT_HOOK, wrapper_script(module, "libvirt_hook_main",
                                                          interpreter=interpreter), mode=0o755)
    changes.put_file(writer, UDEV_RULE_FILE, udev_rule_text())
    changes.put_file(writer, UNIT_FILE, unit_text())
    if writer.exists(NM_DISPATCHER_DIR):
        changes.put_file(writer, NM_DISPATCHER, nm_dispatcher_text(interpreter), mode=0o755)
    for path, source in python_library_files(LIBRARY).items():
        changes.put_file(writer, path, source, summarize=True)
    return config_changed


def plan_forget(changes, writer, names):
    """Drop the stored pins called ``names`` (one name or several); returns whether the
    stored pins changed. The IRQs they covered keep their affinity until irqbalance or a
    later pin moves them."""
    return plan_persistence(changes, writer, (), forget=names)


# -- re-apply --------------------------------------------------------------------------

def reapply(writer, config):
    """Put every stored pin back on the IRQs that exist now; never raises for one IRQ."""
    irqs = read_irqs(writer.root)
    online = read_cpu_state(writer.root).online
    report = {"pinned": [], "in_place": [], "skipped_managed": [], "errors": []}
    for data in config.get("rules", []):
        try:
            rule = IrqRule.from_dict(data)
            validate_cpus(rule, online)
        except GpuhostError as err:
            report["errors"].append(err.message)
            continue
        numbers = select_irqs(writer.root, irqs, rule, strict=False)
        plan = plan_pins(writer, irqs, numbers, rule.cpus)
        report["in_place"] += [n for n in numbers if n not in plan.to_change]
        for step, number in zip(plan.changes.steps, plan.to_change):
            try:
                step.apply()
            except OSError as err:
                report["errors"].append("IRQ %d: %s" % (number, describe_os_error(err)))
        report["pinned"] += plan.changed_irqs
        report["skipped_managed"] += plan.skipped_managed
    return report


def _read_config(writer, config_path):
    return json.loads(writer.read_file(config_path) or '{"rules": []}')


def reapply_main(argv, writer=None, sleep=time.sleep, clock=time.monotonic,
                 log=sys.stderr.write):
    """gpuhost-irq-reapply [--config FILE] [--watch SECONDS].

    The stored pins are read again on every round, so a pin forgotten or changed
    meanwhile (offboarding, a re-plan) is never put back stale."""
    config_path, watch = CONFIG_FILE, 0
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--config" and args:
            config_path = args.pop(0)
        elif arg == "--watch" and args:
            watch = float(args.pop(0))
    writer = writer or HostWriter("/")
    try:
        config = _read_config(writer, config_path)
    except ValueError as err:
        log("gpuhost-irq-reapply: %s: %s\n" % (config_path, err))
        return 2
    deadline = clock() + watch
    while True:
        report = _reapply_round(writer, config, log)
        if clock() < deadline:
            sleep(2)
        else:
            return 1 if report["errors"] else 0
        config = _read_config_again(writer, config_path, config, log)


def _reapply_round(writer, config, log):
    report = reapply(writer, config)
    for line in report["errors"]:
        log("gpuhost-irq-reapply: %s\n" % line)
    if report["pinned"]:
        log("gpuhost-irq-reapply: pinned IRQ(s) %s\n" % format_cpulist(report["pinned"]))
    return report


def _read_config_again(writer, config_path, config, log):
    try:
        return _read_config(writer, config_path)
    except (OSError, ValueError) as err:
        # Half-written by hand, or unreadable for a moment: keep the last pins.
        log("gpuhost-irq-reapply: %s: %s (keeping the pins read before)\n" % (config_path, err))
        return config


def pinned_irqs(root, config):
    """The IRQ numbers the stored pins cover now (rules that no longer parse are left out)."""
    irqs = read_irqs(root)
    numbers = set()
    for data in config.get("rules", []):
        try:
            numbers.update(select_irqs(root, irqs, IrqRule.from_dict(data), strict=False))
        except GpuhostError:
            continue
    return numbers


def _process_start_time(writer, pid):
    """Field 22 of /proc/<pid>/stat (start time), or None when the process is gone."""
    try:
        stat = writer.read_file("/proc/%d/stat" % pid)
    except (OSError, UnicodeDecodeError, GpuhostError):
        return None
    try:
        return stat.rsplit(")", 1)[1].split()[19] if stat else None
    except IndexError:
        return None


def domain_process(writer, name, run_dir=LIBVIRT_QEMU_RUN_DIR):
    """(pid, start time) of domain ``name``'s QEMU, from libvirt's pid file, or None.

    The start time tells the same process from a later one that got its pid."""
    if not name or "/" in name or name.startswith(".") or "\0" in name:
        return None
    try:
        text = writer.read_file("%s/%s.pid" % (run_dir, name))
        pid = int((text or "").strip())
    except (OSError, ValueError, UnicodeDecodeError, GpuhostError):
        return None
    if pid <= 0:
        return None
    start = _process_start_time(writer, pid)
    return None if start is None else (pid, start)


def running_domains(writer, run_dir=LIBVIRT_QEMU_RUN_DIR):
    """{name: (pid, start time)} of every domain whose QEMU runs, from libvirt's run
    folder (the same for libvirtd and the modular virtqemud): a running domain has its
    status XML and its QEMU's pid file there. The daemon's own driver.pid, which has no
    status XML, is no domain."""
    try:
        entries = set(os.listdir(writer.path(run_dir)))
    except OSError:
        return {}
    running = {}
    for entry in sorted(entries):
        if entry.endswith(".pid") and entry[:-len(".pid")] + ".xml" in entries:
            process = domain_process(writer, entry[:-len(".pid")], run_dir)
            if process:
                running[entry[:-len(".pid")]] = process
    return running


def watch_domains(writer, config_path=CONFIG_FILE, sleep=time.sleep, clock=time.monotonic,
                  log=sys.stderr.write, run_dir=LIBVIRT_QEMU_RUN_DIR, quick_seconds=WATCH_SECONDS):
    """Re-apply the stored pins while any domain's QEMU runs, for every domain at once:
    every 2 s for ``quick_seconds`` after a QEMU it has not seen before (a domain just
    started, whose guest driver is about to enable MSI-X), every DOMAIN_WATCH_INTERVAL_S
    after that (a driver loaded later, or reloaded). Returns when no domain runs: 0, or
    1 when the last round had errors."""
    seen, quick_until, config, errors = {}, 0.0, None, False
    while True:
        running = running_domains(writer, run_dir)
        if not running:
            return 1 if errors else 0
        if any(seen.get(name) != process for name, process in running.items()):
            quick_until = clock() + quick_seconds
        seen = running
        if config is None:
            try:
                config = _read_config(writer, config_path)
            except (OSError, ValueError) as err:
                log("gpuhost-irq-reapply: %s: %s\n" % (config_path, err))
                return 2
        else:
            config = _read_config_again(writer, config_path, config, log)
        errors = bool(_reapply_round(writer, config, log)["errors"])
        sleep(2 if clock() < quick_until else DOMAIN_WATCH_INTERVAL_S)


def host_watcher(writer, log, watch=watch_domains):
    """Be the host's one domain watcher, or leave the domain to the one that runs.

    The lock is tried, never waited for: a watcher that holds it sees the new domain at
    its next look. A watcher that found no domain left releases the lock and looks once
    more: a domain whose hook tried the lock just before that is running by then (libvirt
    writes the pid file before the "started" hook), so it takes the lock again (or
    another hook's child did), and no started domain is left unwatched."""
    rc = 0
    while True:
        lock = FileLock(writer.confined_target(WATCH_LOCK), timeout=0, shown_as=WATCH_LOCK)
        try:
            lock.__enter__()
        except GpuhostError:
            return 0        # held: the host's watcher runs
        try:
            rc = watch(writer, log=log)
        finally:
            lock.__exit__(None, None, None)
        if not running_domains(writer):
            return rc


def libvirt_hook_main(argv, fork=os.fork, detach=None, writer=None, watch=watch_domains):
    """libvirt qemu hook (argv: domain, operation, ...): on "started", make sure the
    host's one watcher re-applies the pins while the domains run (host_watcher).

    libvirt waits for its hooks, and the guest enables MSI or MSI-X only when its driver
    loads, so the hook forks and watches instead of blocking the domain's start. The
    child leaves libvirt's pipes (stdin, stdout and stderr on /dev/null, messages to
    syslog): libvirt captures a hook's output and reads it to its end, so a child that
    kept them could hold the domain's start for as long as it watches.
    """
    if len(argv) < 2 or argv[1] != "started":
        return 0
    if fork() != 0:
        return 0
    log = (detach or _detach)()
    return host_watcher(writer or HostWriter("/"), log, watch=watch)


def _detach():
    """A new session, stdio on /dev/null; returns a logger to syslog."""
    import syslog       # only the hook's child needs it
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)
    syslog.openlog("gpuhost-irq-reapply", syslog.LOG_PID, syslog.LOG_DAEMON)
    return lambda line: syslog.syslog(syslog.LOG_INFO, line.rstrip("\n"))
