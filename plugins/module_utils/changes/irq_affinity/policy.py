# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""irqbalance's policy script for the stored IRQ pins (their format: host/irq_pins.py).

irqbalance runs ``POLICYSCRIPT DEVPATH IRQ`` for every IRQ it finds when it starts (and
for new ones on a rescan) and waits for each answer: ``ban=true`` keeps it from
balancing that IRQ. One Python process per IRQ, thousands of IRQs on a large host: so
this file imports next to nothing, and an answer looks at the asked IRQ alone (its
number, the ``msi_irqs`` of the stored devices, its one-line /sys/kernel/irq/N/actions for
a device rule, its /proc/interrupts row only for a name rule). bench/bench_irq_policy.py measures it: reading every IRQ as the re-apply does,
with the re-apply's imports, cost 0.6 s per IRQ on a 256-CPU host with 1,500 IRQs, a
quarter of an hour of irqbalance's start (on this project's loaded 2-core machine).
"""

from __future__ import annotations

import json
import os
import re
import sys

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import read_file_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.irq_pins import CONFIG_FILE, parse_stored_rule


def _action_names(root, number):
    """IRQ ``number``'s action names from its /proc/interrupts row (None: no row)."""
    # The row parser, with its heavier imports, is loaded only for a name rule.
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
        parse_proc_interrupts)
    try:
        text = read_file_text(os.path.join(root, "proc/interrupts"))
    except (OSError, GpuhostError):
        return None
    header, dummy, body = text.partition("\n")
    row = re.search(r"^ *%d:.*$" % number, body, re.M)
    if row is None:
        return None
    irq = parse_proc_interrupts(header + "\n" + row.group(0)).get(str(number))
    return irq.name if irq else None


def _holds_vfio_handler(root, number, pci_devices, names):
    """Whether IRQ ``number`` carries a vfio-pci handler of one of ``pci_devices`` (an
    INTx line is in no msi_irqs). The kernel's one-line /sys/kernel/irq/N/actions is read
    first; the row parser is loaded only for an IRQ that names vfio at all."""
    try:
        text = read_file_text(os.path.join(root, "sys/kernel/irq", str(number), "actions")).strip()
    except (OSError, GpuhostError):
        text = names()
    if not text or "vfio-" not in text:
        return False
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
        vfio_actions)
    return any(device in pci_devices for dummy, dummy, device in vfio_actions(text))


def covers(root, name_regex, pci_devices, irqs, number, names):
    """Whether a stored pin with these selectors selects IRQ ``number`` now, as
    irq_pinning.select_irqs does for all IRQs at once. ``names()`` gives the IRQ's action
    names, read only when a rule needs them."""
    if number in irqs:
        return True
    if any(os.path.exists(os.path.join(root, "sys/bus/pci/devices", address, "msi_irqs",
                                       str(number)))
           for address in pci_devices):
        return True
    if pci_devices and _holds_vfio_handler(root, number, pci_devices, names):
        return True
    if name_regex is not None:
        found = names()
        return bool(found and re.search(name_regex, found))
    return False


def irqbalance_policy_main(argv, root="/", out=None):
    """irqbalance's --policyscript, called as ``SCRIPT DEVPATH IRQ``: ``ban=true`` for the
    IRQs gpuhost.kvm pins, nothing for the others (irqbalance then balances them as
    usual). Never fails: a broken config or rule bans nothing."""
    out = out or sys.stdout
    try:
        number = int(argv[1])
        rules = json.loads(read_file_text(os.path.join(root, CONFIG_FILE.lstrip("/")))).get("rules", [])
    except (IndexError, ValueError, OSError, AttributeError, GpuhostError):
        return 0
    cached = []

    def names():
        if not cached:
            cached.append(_action_names(root, number))
        return cached[0]
    for data in rules:
        try:
            dummy, name_regex, pci_devices, irqs, dummy = parse_stored_rule(data)
            if covers(root, name_regex, pci_devices, irqs, number, names):
                out.write("ban=true\n")
                break
        except (GpuhostError, TypeError, ValueError, AttributeError, re.error):
            continue
    return 0
