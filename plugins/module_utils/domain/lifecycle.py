# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt calls of libvirt_pinned_domain: read the domain and the other defined
domains, move it between states, undefine it. Each failure is a GpuhostError with the
option it concerns and where to look."""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.compare import ExistingDomain
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.preflight import (
    defined_domain_from_xml)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.libvirt_conn import (
    libvirt, libvirt_error_text)

# libvirt's virDomainState numbers
STATE_NAMES = {0: "no state", 1: "running", 2: "blocked", 3: "paused", 4: "shutting down",
               5: "shut off", 6: "crashed", 7: "suspended"}
UNDEFINE_FLAGS = ("VIR_DOMAIN_UNDEFINE_MANAGED_SAVE", "VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA",
                  "VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA", "VIR_DOMAIN_UNDEFINE_NVRAM")


def lookup_domain(conn, name):
    """The libvirt domain called ``name``, None when there is none."""
    try:
        return conn.lookupByName(name)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return None
        raise GpuhostError("cannot look up domain %s: %s" % (name, libvirt_error_text(exc)),
                           field="name", fix="check the libvirt daemon's log")


def inactive_xml(domain):
    return domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)


def existing_domain(domain):
    """What compare.plan_domain_change reads of ``domain`` (None stays None)."""
    if domain is None:
        return None
    return ExistingDomain(inactive_xml(domain), bool(domain.isActive()),
                          bool(domain.autostart()), domain.UUIDString())


def defined_domains(conn):
    """Every defined domain as preflight reads it (pins, hostdevs, activity)."""
    found = []
    for domain in conn.listAllDomains(0):
        try:
            xml = inactive_xml(domain)
        except libvirt.libvirtError:
            continue              # undefined while we looked
        found.append(defined_domain_from_xml(xml, active=bool(domain.isActive())))
    return found


def state_name(domain):
    if domain is None:
        return "absent"
    return STATE_NAMES.get(domain.state()[0], "unknown")


def set_run_state(domain, action, state, name):
    """Carry out compare's run-state action (start, shutdown, destroy or None) that
    brings the defined domain ``name`` to ``state``."""
    try:
        if action is not None:
            {"start": domain.create, "shutdown": domain.shutdown,
             "destroy": domain.destroy}[action]()
    except libvirt.libvirtError as exc:
        raise GpuhostError(
            "the domain is defined but could not reach state %s: %s"
            % (state, libvirt_error_text(exc)), field="state",
            fix="see /var/log/libvirt/qemu/%s.log; run again with state=present to "
                "only define it" % name)


def set_autostart(domain, autostart):
    """Switch autostart to ``autostart`` when it differs (read again: a domain defined
    just now starts with it off)."""
    if bool(domain.autostart()) != autostart:
        domain.setAutostart(1 if autostart else 0)


def undefine_domain(domain, name):
    """Destroy ``domain`` when it runs, then undefine it with its managed save,
    snapshot and checkpoint metadata and NVRAM (the flags this libvirt knows)."""
    try:
        if domain.isActive():
            domain.destroy()
        flags = 0
        for flag in UNDEFINE_FLAGS:
            flags |= getattr(libvirt, flag, 0)
        try:
            domain.undefineFlags(flags)
        except libvirt.libvirtError:
            domain.undefine()   # drivers without those flags (the test driver)
    except libvirt.libvirtError as exc:
        raise GpuhostError("cannot remove domain %s: %s" % (name, libvirt_error_text(exc)),
                           field="name", fix="check virsh list --all and the daemon's log")
