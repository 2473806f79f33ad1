# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``gpuhost_iommu`` fact, read once for the two modules that return it
(iommu_groups_facts, and host_facts' ``iommu`` subset): the IOMMU analysis of the
topology below a root, plus each VF's MAC, VLAN, spoof checking and trust as its PF's
driver reports them, which only the live host can be asked (a recorded tree has no
netlink)."""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.roots import is_live_root
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.iommu import (
    analyse_iommu, parse_gpu_vendor)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import GpuSelection
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.sysfs import validate_root
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    read_host_topology)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import interface_name
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.vf_settings import parse_vfinfo


def check_iommu_options(root, gpu_vendor, gpu_devices=None, gpu_devices_only=False):
    """Refuse a bad root, GPU vendor or GPU selection before anything is read; return
    the selection (pci.GpuSelection)."""
    validate_root(root)
    parse_gpu_vendor(gpu_vendor)
    return GpuSelection.from_options(gpu_devices, gpu_devices_only)


def read_iommu_facts(module, root, gpu_vendor=None, gpu_devices=None, gpu_devices_only=False):
    """The ``gpuhost_iommu`` fact of the host below ``root``; ``module`` (an
    AnsibleModule) runs ``ip`` on the live host for the VF settings."""
    selection = check_iommu_options(root, gpu_vendor, gpu_devices, gpu_devices_only)
    topology = read_host_topology(root, with_irqs=False)
    facts = analyse_iommu(topology, gpu_vendor=gpu_vendor, selection=selection).to_dict()
    for pf in facts["sriov_pfs"]:
        add_vf_settings(module, pf, root)
    return facts


def add_vf_settings(module, pf, root):
    """Each VF's settings under ``settings`` (None when unknown), and why they are
    unknown under the PF's ``vf_settings_error``."""
    pf["vf_settings_error"] = None
    for vf in pf["vfs"]:
        vf["settings"] = None
    if not pf["vfs"] or not is_live_root(root):
        return
    if not pf["netdevs"]:
        pf["vf_settings_error"] = "the PF has no network interface"
        return
    try:
        # The name comes from sysfs, not from the user, but it reaches ip's command
        # line: a planted or odd one is reported, never passed on.
        interface_name(pf["netdevs"][0], field="netdevs")
    except GpuhostError as err:
        pf["vf_settings_error"] = err.msg
        return
    ip = module.get_bin_path("ip")
    if not ip:
        pf["vf_settings_error"] = "iproute2 (ip) is not installed"
        return
    argv = [ip, "-j", "-d", "link", "show", "dev", pf["netdevs"][0]]
    rc, out, err = module.run_command(argv)
    try:
        if rc != 0:
            raise ValueError((err or out).strip() or "rc=%d" % rc)
        found = parse_vfinfo(out)
    except GpuhostError as exc:
        pf["vf_settings_error"] = "ip %s: %s" % (" ".join(argv[1:]), exc.msg)
        return
    except (ValueError, KeyError, TypeError) as exc:
        pf["vf_settings_error"] = "ip %s: %s" % (" ".join(argv[1:]), exc)
        return
    for vf in pf["vfs"]:
        vf["settings"] = found.get(vf["index"])
