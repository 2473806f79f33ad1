# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one tenant's plan entry (docs/plan-format.md) passes through and where each
function sits, asked the same way by the stages, the plan's rendering and validate.
A tenant on one node has everything there; a whole-board tenant (``guest_cells``) has
each cell's GPUs on the cell's node and each NVSwitch on its own."""

from __future__ import annotations


def passed_through(tenant):
    """The functions a tenant's domain takes from the host besides its VF: its GPUs'
    (with their companions) and the NVSwitches of a whole board."""
    return [f for gpu in tenant.get("gpus") or () for f in gpu.get("functions") or [gpu["address"]]] \
        + [switch["address"] for switch in tenant.get("nvswitches") or ()]


def functions_by_node(tenant):
    """[(node, functions)] of one tenant, sorted by node: every function it passes
    through, its VF included, on the NUMA node its IRQs and checks belong to."""
    found = {}
    cells = tenant.get("guest_cells") or ()
    if cells:
        gpus = {gpu["address"]: gpu for gpu in tenant.get("gpus") or ()}
        for cell in cells:
            for address in cell.get("gpus") or ():
                functions = (gpus.get(address) or {}).get("functions") or [address]
                found.setdefault(int(cell["node"]), []).extend(functions)
        for switch in tenant.get("nvswitches") or ():
            node = tenant["node"] if switch.get("node") is None else switch["node"]
            found.setdefault(int(node), []).append(switch["address"])
    else:
        found[int(tenant["node"])] = passed_through(tenant)
    if tenant.get("vf"):
        found.setdefault(int(tenant["node"]), []).append(tenant["vf"]["address"])
    return sorted(found.items())
