# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The IRQ pins irq_affinity stores (/etc/gpuhost/irq-affinity.json), as readers see
them: the file's format, one stored rule's fields, and the action names of the IRQs that
refused a pin. irq_affinity (changes/irq_affinity/) writes the file; host_facts and
irqbalance's policy script only read it.

The policy script imports this module once per IRQ while irqbalance starts, so the
module imports next to nothing: the StateFile that describes the file is built on first
use.
"""

from __future__ import annotations

import functools
import json

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import parse_cpulist
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

CONFIG_FILE = "/etc/gpuhost/irq-affinity.json"


def parse_stored_rule(data):
    """A stored pin's fields, checked: (cpus, name_regex, pci_devices, irqs, name).
    Raises GpuhostError (bad cpus), TypeError or ValueError for a rule that no longer
    parses."""
    return (parse_cpulist(data.get("cpus"), field="cpus"), data.get("name_regex"),
            tuple(data.get("pci_devices") or ()), tuple(int(i) for i in data.get("irqs") or ()),
            data.get("name") or None)


def stored_rule_identity(data):
    """What a stored rule is merged by: its name, or for a rule stored without one (before
    names existed) its selectors, as ``IrqRule.key`` has them."""
    if data.get("name"):
        return json.dumps({"name": data["name"]})
    return json.dumps({"name_regex": data.get("name_regex"),
                       "pci_devices": list(data.get("pci_devices") or ()),
                       "irqs": list(data.get("irqs") or ())}, sort_keys=True)


@functools.lru_cache(maxsize=None)
def stored_pins_spec():
    """The StateFile of the stored pins: rules merged by ``stored_rule_identity``, the
    names of kernel-managed IRQs as a set."""
    from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.state_file import StateFile
    return StateFile(CONFIG_FILE, "rules", list, field="persistent",
                     fix="fix or remove the file, then run the module again",
                     identity=stored_rule_identity, sets=("kernel_managed",))


def read_stored_pins(host):
    """The stored pins through ``host`` (a HostReader), never through a link: a planted
    one is refused before it is read."""
    from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.state_file import read_state_nofollow
    return read_state_nofollow(host, stored_pins_spec())


def known_managed_names(host):
    """Action names of the IRQs that refused a pin before (stored by a real run); none
    when the file cannot be read as the stored pins."""
    try:
        return frozenset(read_stored_pins(host).get("kernel_managed", ()))
    except GpuhostError:
        return frozenset()
