# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tenants and host reboots: the pure core of tenant_drain.

A reboot stops every running libvirt domain, whoever defined it. So before a reboot the
host's domains are read (name, state, autostart, and whether the allocation ledger holds
a tenant of that name, which is how gpuhost.kvm knows its own domains: the vm role names
each domain after its tenant) and one of two things happens:

* refuse (``checked``): the reboot waits while any domain runs, and the refusal lists
  them, tenants first;
* drain (``drained``): every running domain gets a graceful shutdown request (ACPI, as
  ``virsh shutdown``), in the order of ``DrainPlan.order``, and has ``timeout`` seconds
  from its own request to power off. Those that do not are dealt with as ``on_timeout``
  says: ``fail`` undoes the drain (the domains already off are started again, the stuck
  ones are left running, nothing is rebooted) and names them; ``destroy`` forces them
  off and names them in the result.

The names the drain stopped are recorded, before the first request, in a state file of
the collection (``record_spec``: the shared locked writer of engine/state_file.py), so that the
restore after the reboot (``restored``) starts exactly those domains again, even when
the run that drained is not the run that restores. Domains that libvirt's autostart
already started at boot are only taken off the record.

Nothing here talks to libvirt: the module reads the domains into ``Domain`` values and
carries out the plans; ``wait_until_off`` takes the clock and the probe as arguments.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Dict, List

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.state_file import StateFile
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    absolute_path, finite_number)

DEFAULT_RECORD_PATH = "/var/lib/gpuhost/drain.json"
ON_TIMEOUT = ("fail", "destroy")
MAX_TIMEOUT = 86400.0            # a day: longer is a typo, not a maintenance window
# libvirt keeps a <name>.pid per running QEMU domain of qemu:///system here; it is what
# tells "no domain runs" from "libvirt cannot say" on a host whose daemon is not up.
QEMU_STATUS_DIR = "/run/libvirt/qemu"

# virDomainState numbers, in virsh's words.
STATE_NAMES = {0: "no state", 1: "running", 2: "blocked", 3: "paused",
               4: "shutting down", 5: "shut off", 6: "crashed", 7: "pmsuspended"}
# An active domain in one of these states cannot act on a shutdown request, so waiting
# for it would only run out the timeout: the drain refuses it up front and says how to
# bring it to a state that can.
CANNOT_SHUT_DOWN = {
    "paused": "resume it (virsh resume %s) or shut it down yourself",
    "pmsuspended": "wake it (virsh dompmwakeup %s) or shut it down yourself",
}

REBOOT_FIX = ("set gpuhost_drain: true (tenant_drain state=drained) to shut them down "
              "gracefully, reboot and start them again, or stop them yourself and run again")


@dataclass(frozen=True)
class Domain:
    """One libvirt domain as the drain sees it."""

    name: str
    state: str                 # STATE_NAMES value
    active: bool               # libvirt's isActive(): a reboot would stop it
    autostart: bool = False
    tenant: bool = False       # a tenant of the allocation ledger

    def as_dict(self):
        return {"name": self.name, "state": self.state, "tenant": self.tenant,
                "autostart": self.autostart}


def state_name(code):
    return STATE_NAMES.get(code, "unknown (%s)" % code)


def running(domains):
    """The domains a reboot would stop: tenants first, then the others, each by name."""
    return sorted((d for d in domains if d.active), key=lambda d: (not d.tenant, d.name))


def _names(domains):
    return ", ".join(d.name for d in domains)


def describe_running(domains):
    """'tenants tenant-a (running), tenant-b (paused); not in the ledger: x (running)'."""
    parts = []
    tenants = [d for d in domains if d.tenant]
    others = [d for d in domains if not d.tenant]
    if tenants:
        parts.append("tenants " + ", ".join("%s (%s)" % (d.name, d.state) for d in tenants))
    if others:
        parts.append("not in the allocation ledger: "
                     + ", ".join("%s (%s)" % (d.name, d.state) for d in others))
    return "; ".join(parts)


def reboot_refusal(domains):
    """The refusal of a reboot while ``domains`` (from ``running``) run."""
    return GpuhostError(
        "a reboot of the host would stop %d running domain(s): %s"
        % (len(domains), describe_running(domains)), field="state", fix=REBOOT_FIX,
        details={"running": [d.name for d in domains]})


# -- options ---------------------------------------------------------------------------

def check_timeout(value):
    return finite_number(value, "timeout", maximum=MAX_TIMEOUT, unit="seconds")


def check_on_timeout(value):
    if value not in ON_TIMEOUT:
        raise GpuhostError("%r is not one of %s" % (value, ", ".join(ON_TIMEOUT)),
                           field="on_timeout",
                           fix="write fail (undo the drain, skip the reboot) or destroy "
                               "(force the late domains off)")
    return value


def check_path(value, field):
    return absolute_path(value, field)


def poll_interval(timeout):
    """How often the wait looks at the domains: every second, more often for a short
    timeout so that the decision at expiry is not a second late."""
    return min(1.0, max(0.05, timeout / 20.0))


# -- drain -------------------------------------------------------------------------------

@dataclass
class DrainPlan:
    order: List[str] = field(default_factory=list)   # shutdown requests, in this order
    timeout: float = 0.0
    on_timeout: str = "fail"
    tenants: Dict[str, bool] = field(default_factory=dict)

    def __bool__(self):
        return bool(self.order)


def plan_drain(domains, timeout, on_timeout):
    """What a drain does: every running domain, tenants first, gets a graceful shutdown
    request; each has ``timeout`` seconds from its request. A domain that cannot act on
    the request (paused, suspended) is refused before anything is done."""
    timeout = check_timeout(timeout)
    on_timeout = check_on_timeout(on_timeout)
    targets = running(domains)
    stuck = [d for d in targets if d.state in CANNOT_SHUT_DOWN]
    if stuck:
        raise GpuhostError(
            "cannot drain %s: a %s guest cannot act on a shutdown request"
            % (_names(stuck), " or ".join(sorted({d.state for d in stuck}))),
            field="state",
            fix="; ".join("%s: %s" % (d.name, CANNOT_SHUT_DOWN[d.state] % d.name)
                          for d in stuck) + "; then run again (nothing was shut down)",
            details={"cannot_shut_down": [d.name for d in stuck]})
    return DrainPlan(order=[d.name for d in targets], timeout=timeout,
                     on_timeout=on_timeout, tenants={d.name: d.tenant for d in targets})


def wait_until_off(requested_at, is_active, timeout, clock, sleep, poll=None):
    """Wait until every domain of ``requested_at`` ({name: clock time of its shutdown
    request}) is off, each for at most ``timeout`` seconds from its own request. Returns
    the names still active when their time ran out, in the order given."""
    poll = poll_interval(timeout) if poll is None else poll
    pending = list(requested_at)
    late = []
    while pending:
        now = clock()
        still = []
        for name in pending:
            if not is_active(name):
                continue
            if now - requested_at[name] >= timeout:
                late.append(name)
            else:
                still.append(name)
        pending = still
        if pending:
            sleep(poll)
    return [name for name in requested_at if name in late]


def timeout_error(late, timeout, restarted):
    """The failure of a drain whose ``on_timeout`` is fail, after it was undone."""
    return GpuhostError(
        "%s did not power off within %s s of the shutdown request, and on_timeout is fail: "
        "the drain was undone (%s), the host was not rebooted, and %s got the request and "
        "may still act on it"
        % (", ".join(late), seconds_text(timeout),
           "started again: %s" % ", ".join(restarted) if restarted else "no domain was off",
           "it" if len(late) == 1 else "they"),
        field="timeout",
        fix="find out why the guest ignores ACPI shutdown (no acpid, a hung service), shut "
            "it down from inside and run again; or raise timeout (gpuhost_drain_timeout); "
            "or set on_timeout: destroy (gpuhost_drain_expired: destroy) to force late "
            "domains off",
        details={"late": list(late), "restarted": list(restarted)})


def seconds_text(number):
    return ("%d" % number) if float(number).is_integer() else ("%s" % number)


# -- record ------------------------------------------------------------------------------

def record_spec(path):
    """The state file listing the domains a drain stopped and no restore started yet:
    {"version": 1, "domains": {name: {"uri": ..., "tenant": bool}}}, merged per name
    under its lock."""
    return StateFile(path, "domains", dict, field="record_path",
                     fix="start the domains it names yourself (virsh start NAME) if they "
                         "are off, then remove the file")


def recorded(record, uri):
    """The names the record holds for ``uri``, by name."""
    return sorted(name for name, entry in record["domains"].items()
                  if entry.get("uri") == uri)


def record_with(record, plan, uri):
    """``record`` plus the domains ``plan`` stops."""
    domains = dict(record["domains"])
    for name in plan.order:
        domains[name] = {"uri": uri, "tenant": plan.tenants.get(name, False)}
    return dict(record, domains=domains)


def record_without(record, names):
    """``record`` without ``names``."""
    return dict(record, domains={n: e for n, e in record["domains"].items()
                                 if n not in set(names)})


# -- restore -----------------------------------------------------------------------------

@dataclass
class RestorePlan:
    start: List[str] = field(default_factory=list)            # off: start them
    already_running: List[str] = field(default_factory=list)  # autostart did it
    missing: List[str] = field(default_factory=list)          # no longer defined

    @property
    def settled(self):
        """The names the record can drop once the starts succeeded."""
        return self.start + self.already_running


def plan_restore(record, domains, uri):
    """Which recorded domains of ``uri`` to start, which already run, which are gone."""
    by_name = {d.name: d for d in domains}
    plan = RestorePlan()
    for name in recorded(record, uri):
        domain = by_name.get(name)
        if domain is None:
            plan.missing.append(name)
        elif domain.active:
            plan.already_running.append(name)
        else:
            plan.start.append(name)
    return plan


def missing_error(missing, path):
    return GpuhostError(
        "%s %s in the drain record %s but not defined in libvirt any more, so %s not "
        "started" % (", ".join(missing), "is" if len(missing) == 1 else "are", path,
                     "it was" if len(missing) == 1 else "they were"),
        field="record_path",
        fix="define the domain again (the vm role, tenant_onboard.yml) and run the restore "
            "again, or, if it was offboarded on purpose, remove its entry from %s" % path,
        details={"missing": list(missing)})


def qemu_status_names(filenames):
    """The domains whose ``<name>.pid`` libvirt's QEMU driver keeps in its status
    directory (QEMU_STATUS_DIR): the running ones, read without libvirt."""
    return sorted(name[:-len(".pid")] for name in filenames if fnmatch.fnmatch(name, "?*.pid"))
