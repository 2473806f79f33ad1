# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared pieces of the libvirt_pinned_domain tests (no tests here).

Literal host topologies (the runbook's host, a dirty-group desktop), the schema check
through the real ``virt-xml-validate``, and private libvirt test-driver connections:
``test:///<file>`` gives each connection its own state, while ``test:///default`` is
shared by every connection of the process; ``write_libvirt_test_node`` writes one whose
running domain holds a device. ``Env`` runs the module on such a connection, with a
topology and a state_dir of the test's own.
"""

import os
import shutil
import subprocess

import pytest
from .module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import Bar, PciFunction
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    Cpu, CpuState, HostTopology, HugepagePool, IommuState, NumaNode)
from ansible_collections.gpuhost.kvm.plugins.modules import libvirt_pinned_domain as mod

GIB_KIB = 1024 * 1024
RUNBOOK_GPU = "0000:65:00.0"
RUNBOOK_HDA = "0000:65:00.1"
RUNBOOK_PF = "0000:41:00.0"
RUNBOOK_VF = "0000:41:00.2"
A100_BARS = (Bar(0, 0xD0000000, 0xD0FFFFFF, 0x40200),
             Bar(1, 0x38000000000, 0x387FFFFFFFF, 0x14220C),     # 32 GiB, 64-bit pref
             Bar(3, 0x38800000000, 0x38801FFFFFF, 0x14220C))     # 32 MiB, 64-bit pref
EMPTY_NODE_XML = "<node/>\n"


def _function(address, class_code, group, node, driver="vfio-pci", bars=(), **extra):
    return PciFunction(address=address, class_code=class_code, vendor_id=0x10DE,
                       driver=driver, numa_node=node, numa_node_source="numa_node",
                       iommu_group=group, bars=bars, **extra)


def runbook_topology(free_1g=(64, 64), free_2m=(1024, 1024), offline=()):
    """The runbook's host: 2 nodes x 16 cores x 2 threads, siblings N and N+32; the A100
    65:00.0 with its HDA in group 27 and the mlx5 PF 41:00.0 with VF 41:00.2, node 0."""
    cpus = {}
    nodes = {}
    for node in (0, 1):
        ids = []
        for core in range(16):
            first = node * 16 + core
            for cpu in (first, first + 32):
                cpus[cpu] = Cpu(id=cpu, online=cpu not in offline, package=node, die=0,
                                core=core, thread_siblings=(first, first + 32), node=node)
                ids.append(cpu)
        nodes[node] = NumaNode(
            id=node, cpus=tuple(sorted(ids)), mem_total_kib=256 * GIB_KIB,
            mem_free_kib=200 * GIB_KIB,
            hugepages={1048576: HugepagePool(1048576, nr=free_1g[node], free=free_1g[node]),
                       2048: HugepagePool(2048, nr=free_2m[node], free=free_2m[node])},
            distances={0: 10 if node == 0 else 21, 1: 21 if node == 0 else 10})
    online = tuple(sorted(c for c in cpus if c not in offline))
    pci = {
        RUNBOOK_GPU: _function(RUNBOOK_GPU, 0x030200, 27, 0, bars=A100_BARS),
        RUNBOOK_HDA: _function(RUNBOOK_HDA, 0x040300, 27, 0),
        RUNBOOK_PF: _function(RUNBOOK_PF, 0x020000, 39, 0, driver="mlx5_core",
                              sriov_totalvfs=8, sriov_numvfs=2,
                              virtfns=("0000:41:00.2", "0000:41:00.3")),
        "0000:41:00.2": _function("0000:41:00.2", 0x020000, 40, 0, physfn=RUNBOOK_PF),
        "0000:41:00.3": _function("0000:41:00.3", 0x020000, 41, 0, physfn=RUNBOOK_PF),
        "0000:b1:00.0": _function("0000:b1:00.0", 0x010802, 60, 1, driver="nvme"),
        "0000:ca:00.0": _function("0000:ca:00.0", 0x030200, 70, 1, bars=A100_BARS),
    }
    groups = {}
    for address, function in pci.items():
        groups.setdefault(function.iommu_group, []).append(address)
    return HostTopology(
        cpus=CpuState(possible=tuple(sorted(cpus)), present=tuple(sorted(cpus)),
                      online=online, cpus=cpus, flags=("pdpe1gb",), vendor="GenuineIntel"),
        nodes=nodes, pci=pci,
        iommu=IommuState(enabled=True, vendor="intel", passthrough=True,
                         groups={g: tuple(sorted(a)) for g, a in groups.items()},
                         # the runbook's Xeon remaps interrupts (IR-PCI-MSI chips)
                         interrupt_remapping=True,
                         interrupt_remapping_source="proc_interrupts"))


def dirty_topology():
    """The runbook's section 13 pitfall: the GPU 01:00.0 (+ HDA) shares IOMMU group 5
    with a USB controller on the host's xhci driver."""
    topo = runbook_topology()
    topo.pci = {
        "0000:01:00.0": _function("0000:01:00.0", 0x030000, 5, 0, bars=A100_BARS),
        "0000:01:00.1": _function("0000:01:00.1", 0x040300, 5, 0),
        "0000:02:00.0": _function("0000:02:00.0", 0x0C0330, 5, 0, driver="xhci_hcd"),
    }
    topo.iommu.groups = {5: ("0000:01:00.0", "0000:01:00.1", "0000:02:00.0")}
    return topo


def runbook_tenant(name="tenant-a100", vcpus=30, memory_gib=32, vf=True, **vf_keys):
    """A plan entry for the runbook's tenant-a100 as numa_cpuset writes it
    (docs/plan-format.md): whole cores 1-15 of node 0 with their siblings 33-47,
    housekeeping 0,32 for the emulator and iothreads, 1 GiB pages on node 0.
    ``vf_keys`` replace keys of the vf entry (mac, vlan, ...); a key given as ``...``
    is left out, as in a plan written before that key existed."""
    cores = vcpus // 2
    pins = []
    for core in range(1, cores + 1):
        pins += [core, core + 32]
    return {
        "name": name, "node": 0,
        "gpus": [{"address": RUNBOOK_GPU, "functions": [RUNBOOK_GPU, RUNBOOK_HDA],
                  "iommu_group": 27, "bar64_total": (32 << 30) + (32 << 20)}],
        "vcpus": vcpus, "vcpu_pins": pins,
        "guest_topology": {"sockets": 1, "dies": 1, "cores": cores, "threads": 2},
        "emulator_cpus": "0,32", "iothreads": 2, "iothread_cpus": "0,32",
        "memory_gib": memory_gib, "hugepage_size_kib": 1048576,
        "hugepages": {"0": memory_gib}, "numatune": {"mode": "strict", "nodeset": "0"},
        "vf": _runbook_vf(vf_keys) if vf else None,
    }


def _runbook_vf(changes):
    entry = {"pf": RUNBOOK_PF, "address": RUNBOOK_VF, "iommu_group": 40, "index": 0,
             "mac": None, "vlan": 0, "spoofchk": True, "trust": False}
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not Ellipsis}


def validate_domain_xml(xml_text, directory):
    """Run libvirt's own schema check (virt-xml-validate, Debian libvirt-clients); the
    assertion carries the validator's output."""
    validator = shutil.which("virt-xml-validate")
    assert validator, "virt-xml-validate is missing: install libvirt-clients (bindep.txt)"
    path = os.path.join(str(directory), "domain-%d.xml" % len(os.listdir(str(directory))))
    with open(path, "w") as out:
        out.write(xml_text)
    proc = subprocess.run([validator, path, "domain"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, "virt-xml-validate rejected %s:\n%s%s\n%s" % (
        path, proc.stdout, proc.stderr, xml_text)
    return path


def private_connection(directory):
    """A libvirt test-driver connection with state of its own (not test:///default)."""
    import libvirt
    path = os.path.join(str(directory), "test-node.xml")
    if not os.path.exists(path):
        with open(path, "w") as out:
            out.write(EMPTY_NODE_XML)
    return libvirt.open("test://" + os.path.abspath(path))


def write_libvirt_test_node(tmp_path, address):
    """A libvirt test-driver node file with one running domain holding ``address``."""
    domain, rest = address.split(":", 1)
    bus, rest = rest.split(":")
    slot, function = rest.split(".")
    node = tmp_path / "libvirt-node.xml"
    node.write_text("""<node>
  <domain type='test'>
    <name>tenant-a</name>
    <memory>1048576</memory>
    <vcpu>1</vcpu>
    <os><type>hvm</type></os>
    <devices>
      <hostdev mode='subsystem' type='pci' managed='yes'>
        <source><address domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'/></source>
      </hostdev>
    </devices>
  </domain>
</node>
""" % (domain, bus, slot, function))
    return "test://%s" % node


class Env:
    """A private test-driver connection, a topology and a state_dir for one test."""

    def __init__(self, tmp_path, topology=None):
        self.tmp = tmp_path
        self.conn = private_connection(tmp_path)
        self.topology = topology or runbook_topology()
        self.state_dir = str(tmp_path / "state")
        # The host-safety check reads mounts and routes below root even when the
        # topology is given: an empty tree keeps it off this machine's own devices.
        self.root = str(tmp_path / "empty-root")
        os.makedirs(self.root, exist_ok=True)

    def run(self, check=False, **args):
        args.setdefault("root", self.root)
        args.setdefault("domain_type", "test")
        args.setdefault("uri", "test:///unused-the-connection-is-given")
        args.setdefault("state_dir", self.state_dir)
        args.update(_ansible_check_mode=check, _ansible_diff=True)
        with patch_module_args(args):
            module = mod.build_module()
        runner = mod.PinnedDomain(module, conn=self.conn, topology=self.topology)
        runner.run()
        result = runner.result
        if result.get("xml"):
            validate_domain_xml(result["xml"], self.tmp)
        return result

    def fail(self, **args):
        with pytest.raises(GpuhostError) as err:
            self.run(**args)
        return err.value

    def domain(self, name):
        return self.conn.lookupByName(name)

    def names(self):
        return sorted(d.name() for d in self.conn.listAllDomains(0))


def plan_args(name="tenant-a100", **extra):
    args = dict(name=name, plan=runbook_tenant(name=name))
    args.update(extra)
    return args
