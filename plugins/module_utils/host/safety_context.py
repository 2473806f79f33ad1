# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the host-safety policy (policy/host_safety.py) decides from, read once before
any decision: the PCI functions, the IOMMU state, the host-critical devices, the devices
of running domains and who holds a device open. Readers only: nothing here writes,
and nothing here refuses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.libvirt_conn import DEFAULT_URI
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.roots import is_live_root
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.critical import (
    device_nodes, open_users, read_host_critical, running_domain_devices)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.iommu import group_members_verdict
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import read_pci_functions
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    CpuState, HostTopology, read_iommu_state)


@dataclass
class HostContext:
    """What the safety checks read from the host, gathered once before deciding."""

    functions: dict
    iommu_enabled: bool
    group_verdict: object = None          # callable(addresses) -> GroupVerdict
    critical: object = None               # host_safety.HostCriticalDevices
    domain_devices: Optional[dict] = None  # address -> running domains; None: not checked
    open_users: object = None             # callable(address, driver) -> {pid: (comm, nodes)}
    acs_override: Optional[str] = None    # pcie_acs_override=<value> of the running kernel


def read_context(root="/", functions=None, ssh_connection=None, ip_addr_json=None,
                 domain_devices=None):
    """Everything vfio_bind's safety checks need, read once from ``root``."""
    functions = functions if functions is not None else read_pci_functions(root)
    iommu = read_iommu_state(root)
    topo = HostTopology(cpus=CpuState(), nodes={}, pci=functions, iommu=iommu)
    return HostContext(
        functions=functions, iommu_enabled=iommu.enabled,
        group_verdict=lambda addresses: group_members_verdict(topo, addresses),
        critical=read_host_critical(root, functions, ssh_connection, ip_addr_json),
        domain_devices=domain_devices, acs_override=iommu.acs_override,
        open_users=lambda address, driver: open_users(root, device_nodes(root, address,
                                                                         driver)))


def read_module_context(module, root, functions=None, domain_devices=None):
    """``read_context`` as a module on the host sees it.

    On the live host (root /) the SSH connection comes from SSH_CONNECTION and the
    addresses from ``ip -j addr``; on a test root neither exists, so neither is read.
    """
    live = is_live_root(root)
    ip_addr_json = None
    ip = module.get_bin_path("ip") if live else None
    if ip:
        rc, out, _err = module.run_command([ip, "-j", "addr", "show"])
        ip_addr_json = out if rc == 0 else None
    return read_context(root or "/", functions,
                        ssh_connection=os.environ.get("SSH_CONNECTION") if live else None,
                        ip_addr_json=ip_addr_json, domain_devices=domain_devices)


def running_domain_devices_or_skip(module, libvirt_uri, live, skipped):
    """The PCI devices of running domains, for the modules that must not pull one away.

    With a test root and no URI the check is skipped and listed in ``skipped``. The
    default URI failing (a host without libvirtd yet) is a warning; a URI the user gave
    failing is an error.
    """
    uri = libvirt_uri or (DEFAULT_URI if live else None)
    if uri is None:
        skipped.append("running-domain check (no libvirt_uri with a test root)")
        return None
    try:
        return running_domain_devices(uri)
    except GpuhostError as err:
        if libvirt_uri:     # the option the user gave, by its own name
            raise GpuhostError(err.msg, field="libvirt_uri" if err.field == "uri" else err.field,
                               fix=err.fix, details=err.details) from err
        module.warn("could not check running libvirt domains: %s" % err.message)
        return None


def vfio_group_holders(root, groups):
    """Who holds the vfio nodes of IOMMU ``groups`` open, in words, one entry per process
    ("PID 4242 (qemu-system-x86) holds /dev/vfio/12 open"); empty when none does. A
    reset, a release or a fabric change of a held group would pull a device from under
    a running QEMU."""
    nodes = sorted({"/dev/vfio/%d" % group for group in groups if group is not None})
    return ["PID %d (%s) holds %s open" % (pid, comm, ", ".join(sorted(held)))
            for pid, (comm, held) in sorted(open_users(root, nodes).items())]
