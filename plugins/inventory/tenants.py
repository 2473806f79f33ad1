# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
name: tenants
short_description: Tenant guests of the GPU hosts as inventory hosts
version_added: 0.1.0
author:
  - gpuhost.kvm contributors (@gpuhost)
description:
  - Adds one inventory host per tenant guest of the GPU hosts already in the inventory,
    so that the guest stage (and anything else aimed at the guests) needs no
    hand-maintained inventory.
  - With O(source=definitions) every tenant in a GPU host's C(gpuhost_tenants) (from
    its host_vars or group_vars) that has a C(guest_address) becomes a host.
  - With O(source=ledger) only the tenants in the GPU host's allocation ledger (the
    ones actually onboarded) become hosts, each with its plan entry. The ledgers are
    read on the controller from O(ledger_dir), one C(<gpu host>.json) per host (for
    example fetched with C(ansible.builtin.fetch) and C(flat=true)); a ledger that fails
    its checksum stops the inventory with the recovery steps.
  - Each guest gets C(ansible_host) (the address without its prefix length),
    C(ansible_user) (C(guest_user), default C(gpuhost)), C(gpuhost_tenant_host) (its GPU
    host), C(gpuhost_tenant) (its definition) and, from a ledger,
    C(gpuhost_tenant_plan). It joins O(group) and C(<group>_<gpu host>).
  - Put the configuration file after the file that defines the GPU hosts (inventory
    sources in a directory are read in name order), and name it C(*tenants.yml).
options:
  plugin:
    description: The name of this plugin; the file is only read when it says so.
    required: true
    choices: [gpuhost.kvm.tenants]
    type: str
  gpu_group:
    description: The inventory group of the GPU hosts whose tenants are added.
    type: str
    default: gpu_hosts
  group:
    description: The group the guests join.
    type: str
    default: gpuhost_guests
  source:
    description: Where the guests come from, see the description.
    type: str
    choices: [definitions, ledger]
    default: definitions
  ledger_dir:
    description:
      - Directory on the controller with one ledger file per GPU host,
        C(<inventory_hostname>.json). A GPU host without a file has no tenant yet.
      - Required with O(source=ledger); a relative path is taken from the configuration
        file's directory.
    type: str
  use_vars_plugins:
    description:
      - Read C(gpuhost_tenants) through the vars plugins too (host_vars and group_vars
        directories next to the inventory), not only from variables set inside
        inventory files.
    type: bool
    default: true
notes:
  - Tenant names become inventory host names, so they must be unique across the GPU
    hosts; a duplicate stops the inventory with both host names.
  - Tenants that cannot be reached (no C(guest_address)), or that are only in the
    definitions or only in the ledger with O(source=ledger), are left out with a warning
    saying why.
seealso:
  - module: gpuhost.kvm.tenant_ledger
"""

EXAMPLES = r"""
# inventories/prod/zz-guests.tenants.yml: every defined tenant with an address.
plugin: gpuhost.kvm.tenants

# inventories/prod/zz-placed.tenants.yml: only onboarded tenants, from fetched ledgers,
# each with its plan entry in gpuhost_tenant_plan.
# plugin: gpuhost.kvm.tenants
# source: ledger
# ledger_dir: ../../reports/ledgers
"""

import os

from ansible.errors import AnsibleParserError
from ansible.inventory.helpers import get_group_vars
from ansible.plugins.inventory import BaseInventoryPlugin
from ansible.utils.vars import combine_vars
from ansible.vars.plugins import get_vars_from_inventory_sources

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.ledger import read_ledger
from ansible_collections.gpuhost.kvm.plugins.plugin_utils.tenant_inventory import guest_hosts


def _plain(value):
    """Inventory variables as plain Python data (no template or trust wrappers)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


class InventoryModule(BaseInventoryPlugin):
    """Adds the tenant guests of the inventory's GPU hosts."""

    NAME = "gpuhost.kvm.tenants"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(("tenants.yml", "tenants.yaml"))

    def _host_vars(self, host, loader, sources):
        host_vars = combine_vars(get_group_vars(host.get_groups()), host.get_vars())
        if self.get_option("use_vars_plugins"):
            host_vars = combine_vars(
                host_vars, get_vars_from_inventory_sources(loader, sources, host.get_groups(), "all"))
            host_vars = combine_vars(
                host_vars, get_vars_from_inventory_sources(loader, sources, [host], "all"))
        return host_vars

    def parse(self, inventory, loader, path, cache=False):
        super().parse(inventory, loader, path, cache=cache)
        self._read_config_data(path)
        gpu_group = self.get_option("gpu_group")
        if gpu_group not in inventory.groups:
            raise AnsibleParserError(
                "%s: no group %s in the inventory read so far; list the GPU hosts first "
                "(sources in a directory are read in name order)" % (path, gpu_group))
        sources = getattr(inventory, "processed_sources", [])
        definitions = {}
        for host in inventory.groups[gpu_group].get_hosts():
            host_vars = self._host_vars(host, loader, sources)
            definitions[host.name] = _plain(host_vars.get("gpuhost_tenants") or [])
        ledgers = None
        try:
            if self.get_option("source") == "ledger":
                ledgers = self._read_ledgers(path, definitions)
            guests, skipped = guest_hosts(definitions, ledgers)
        except GpuhostError as err:
            raise AnsibleParserError("%s: %s" % (path, err))
        group = self.inventory.add_group(self.get_option("group"))
        for name, host_vars in sorted(guests.items()):
            self.inventory.add_host(name, group=group)
            per_host_group = self.inventory.add_group(
                "%s_%s" % (group, self._sanitize_group(host_vars["gpuhost_tenant_host"])))
            self.inventory.add_child(per_host_group, name)
            for key, value in host_vars.items():
                self.inventory.set_variable(name, key, value)
        for name, gpu_host, why in skipped:
            self.display.warning("gpuhost.kvm.tenants: tenant %s of %s is not added: %s"
                                 % (name, gpu_host, why))

    @staticmethod
    def _sanitize_group(name):
        return "".join(c if c.isalnum() else "_" for c in name)

    def _read_ledgers(self, path, definitions):
        ledger_dir = self.get_option("ledger_dir")
        if not ledger_dir:
            raise GpuhostError("source ledger needs ledger_dir", field="ledger_dir",
                               fix="give the directory holding <gpu host>.json ledgers")
        if not os.path.isabs(ledger_dir):
            ledger_dir = os.path.join(os.path.dirname(os.path.abspath(path)), ledger_dir)
        return {gpu_host: read_ledger(os.path.join(ledger_dir, gpu_host + ".json")).tenants
                for gpu_host in definitions}
