# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tenant guests as inventory hosts, for the gpuhost.kvm.tenants inventory plugin.

Pure: takes each GPU host's tenant definitions (``gpuhost_tenants`` from its host_vars)
and, optionally, the tenants of its allocation ledger, and returns the guests to add to
the inventory with their variables. With ledger data only tenants the ledger holds (the
ones actually placed) become guests, and each gets its plan entry; the definitions still
give the address and user to reach the guest.
"""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

DEFAULT_GUEST_USER = "gpuhost"


def guest_address(tenant):
    """The guest's address without its prefix length ("192.0.2.51/24" -> "192.0.2.51")."""
    address = tenant.get("guest_address")
    if not address:
        return None
    return str(address).split("/", 1)[0]


def guest_hosts(gpu_hosts, ledgers=None):
    """Build the guests of every GPU host.

    ``gpu_hosts``: {gpu host name: list of tenant definitions}. ``ledgers``: None to use
    the definitions alone, or {gpu host name: list of ledger tenant entries} (a GPU host
    missing from it has no ledger yet, hence no placed tenant).

    Returns (guests, skipped): ``guests`` is {tenant name: vars}, ``skipped`` a list of
    (tenant name, gpu host, reason) for tenants that cannot become inventory hosts.
    Raises GpuhostError when two GPU hosts define a tenant of the same name.
    """
    guests, skipped, owner = {}, [], {}
    for gpu_host in sorted(gpu_hosts):
        definitions = gpu_hosts[gpu_host] or []
        if not isinstance(definitions, list):
            raise GpuhostError("gpuhost_tenants of %s must be a list" % gpu_host,
                               field="%s.gpuhost_tenants" % gpu_host,
                               fix="define one list entry per tenant (docs/plan-format.md)")
        by_name = {}
        for index, tenant in enumerate(definitions):
            if not isinstance(tenant, dict) or not tenant.get("name"):
                raise GpuhostError("gpuhost_tenants[%d] of %s has no name" % (index, gpu_host),
                                   field="%s.gpuhost_tenants[%d]" % (gpu_host, index),
                                   fix="give every tenant a name")
            by_name[str(tenant["name"])] = tenant
        if ledgers is None:
            placed = {name: None for name in by_name}
        else:
            placed = {str(entry["name"]): entry for entry in ledgers.get(gpu_host) or []}
            for name in sorted(set(by_name) - set(placed)):
                skipped.append((name, gpu_host, "defined but not in the ledger (not onboarded)"))
        for name in sorted(placed):
            tenant = by_name.get(name)
            if tenant is None:
                skipped.append((name, gpu_host, "in the ledger but not defined in "
                                "gpuhost_tenants, so its address is unknown"))
                continue
            address = guest_address(tenant)
            if address is None:
                skipped.append((name, gpu_host, "no guest_address"))
                continue
            if name in owner:
                raise GpuhostError(
                    "tenant %s is defined on both %s and %s" % (name, owner[name], gpu_host),
                    field="%s.gpuhost_tenants" % gpu_host,
                    fix="give tenants names that are unique across the fleet (they become "
                        "inventory hosts and libvirt domain names)")
            owner[name] = gpu_host
            host_vars = {
                "ansible_host": address,
                "ansible_user": str(tenant.get("guest_user") or DEFAULT_GUEST_USER),
                "gpuhost_tenant_host": gpu_host,
                "gpuhost_tenant": dict(tenant),
            }
            if placed[name] is not None:
                host_vars["gpuhost_tenant_plan"] = dict(placed[name])
            guests[name] = host_vars
    return guests, skipped
