# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CPU, NUMA, IRQ and IOMMU readers on real recorded trees, checked against the
upstream projects' own expected answers (lstopo and lscpu output in _meta/)."""

import bz2
import json
import os
import re

import pytest

from support import realtrees
from support.realtrees import tree

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import parse_cpulist
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

from support import fixturegen


@pytest.mark.parametrize("name, console", [
    (realtrees.XEON_SILVER, "32intel64-2p8co2t+8ve.console"),
    (realtrees.OFFLINE_CPU0, "offline-cpu0-node0.console"),
    (realtrees.POWER9, "nvidiagpunumanodes.console"),
])
def test_cpus_match_lstopo(name, console):
    expected = realtrees.lstopo_pus(realtrees.meta(name, console))
    state = topology.read_cpu_state(tree(name))
    assert sorted(expected) == sorted(state.online)
    for pu, (package, core, node, siblings) in expected.items():
        cpu = state.cpus[pu]
        assert cpu.online
        assert cpu.package == package, pu
        assert cpu.core == core, pu
        assert cpu.node == node, pu
        assert cpu.thread_siblings == siblings, pu


def test_xeon_silver_siblings_are_n_and_n_plus_16():
    state = topology.read_cpu_state(tree(realtrees.XEON_SILVER))
    for cpu in range(16):
        assert state.cpus[cpu].thread_siblings == (cpu, cpu + 16)
    assert state.cpus[3].die == 0


@pytest.mark.parametrize("physical", [False, True])
def test_epyc_cpumap_only_matches_lscpu(physical):
    table = realtrees.lscpu_parse_table(
        realtrees.meta(realtrees.EPYC_7451, "lscpu-x86_64-epyc_7451"), physical=physical)
    state = topology.read_cpu_state(tree(realtrees.EPYC_7451))
    assert len(table) == 96 == len(state.online)
    cores = {}
    for cpu, (core, socket, node) in table.items():
        assert state.cpus[cpu].package == socket
        assert state.cpus[cpu].node == node
        if physical:
            assert state.cpus[cpu].core == core
        cores.setdefault((socket, core), []).append(cpu)
    for members in cores.values():
        for cpu in members:
            assert state.cpus[cpu].thread_siblings == tuple(sorted(members))


def test_epyc_nodes_come_from_cpumap_and_match_lscpu_summary():
    text = open(realtrees.meta(realtrees.EPYC_7451, "lscpu-x86_64-epyc_7451")).read()
    expected = {int(n): c for n, c in re.findall(r"NUMA node(\d+) CPU\(s\):\s+(\S+)", text)}
    nodes = topology.read_numa_nodes(tree(realtrees.EPYC_7451))
    assert sorted(nodes) == list(range(8))
    for node_id, cpulist in expected.items():
        assert nodes[node_id].cpus == parse_cpulist(cpulist)
        assert nodes[node_id].mem_total_kib is None and nodes[node_id].distances == {}


def test_epyc_nohz_full_null_means_empty():
    state = topology.read_cpu_state(tree(realtrees.EPYC_7451))
    assert state.nohz_full == () and state.isolated == ()
    assert state.vendor == "AuthenticAMD" and "pdpe1gb" in state.flags


def test_offline_cpu0_has_no_topology_and_no_invented_node():
    state = topology.read_cpu_state(tree(realtrees.OFFLINE_CPU0))
    assert state.online == tuple(range(4, 21))
    assert state.present == tuple(range(24))
    assert state.possible == tuple(range(192))
    cpu0 = state.cpus[0]
    assert not cpu0.online
    assert (cpu0.package, cpu0.core, cpu0.thread_siblings) == (None, None, ())
    assert state.cpus[5].node == 1 and state.cpus[4].node is None
    nodes = topology.read_numa_nodes(tree(realtrees.OFFLINE_CPU0))
    assert list(nodes) == [1]
    assert nodes[1].cpus == tuple(range(1, 24, 2))
    assert nodes[1].distances == {0: 21, 1: 10}


def test_power9_sparse_nodes_and_cpu_less_gpu_memory():
    nodes = topology.read_numa_nodes(tree(realtrees.POWER9))
    assert sorted(nodes) == [0, 8, 250, 251, 252, 253, 254, 255]
    # node cpulists name possible-but-absent CPUs; only present ones are kept
    assert nodes[0].cpus == tuple(range(16))
    assert nodes[8].cpus == tuple(range(88, 104))
    for gpu_node in range(250, 256):
        assert nodes[gpu_node].cpus == ()
        assert nodes[gpu_node].mem_total_kib == 15728640
    assert nodes[0].distances[8] == 40 and nodes[250].distances[250] == 10
    assert nodes[250].distances[0] == 80
    assert set(nodes[0].hugepages) == {2048, 1048576}
    state = topology.read_cpu_state(tree(realtrees.POWER9))
    assert state.present == tuple(range(16)) + tuple(range(88, 104))
    assert state.cpus[0].thread_siblings == (0, 1, 2, 3)


def test_snc2_server_isolated_interleaved_and_pmem_nodes():
    state = topology.read_cpu_state(tree(realtrees.SNC2_SERVER))
    assert state.isolated == (4, 5, 6, 7, 60, 61, 62, 63)
    nodes = topology.read_numa_nodes(tree(realtrees.SNC2_SERVER))
    assert sorted(nodes) == list(range(6))
    assert nodes[0].cpus == tuple(range(0, 112, 4))
    assert nodes[4].cpus == () and nodes[5].cpus == ()
    assert nodes[4].mem_total_kib == 130023424
    assert nodes[0].distances == {0: 10, 1: 21, 2: 11, 3: 21, 4: 17, 5: 28}
    assert state.cpus[1].node == 1 and state.cpus[4].node == 0


def test_node_meminfo_and_hugepages():
    nodes = topology.read_numa_nodes(tree(realtrees.XEON_SILVER))
    meminfo = open(os.path.join(tree(realtrees.XEON_SILVER),
                                "sys/devices/system/node/node1/meminfo")).read()
    total = int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1))
    free = int(re.search(r"MemFree:\s+(\d+)", meminfo).group(1))
    assert (nodes[1].mem_total_kib, nodes[1].mem_free_kib) == (total, free)
    pool = nodes[1].hugepages[2048]
    base = os.path.join(tree(realtrees.XEON_SILVER),
                        "sys/devices/system/node/node1/hugepages/hugepages-2048kB/")
    assert (pool.nr, pool.free, pool.surplus) == tuple(
        int(open(base + f).read()) for f in ("nr_hugepages", "free_hugepages",
                                             "surplus_hugepages"))


def _interrupts_1152():
    path = os.path.join(tree(realtrees.INTERRUPTS_1152), "proc", "interrupts.bz2")
    with bz2.open(path, "rt") as handle:
        return handle.read()


def test_1152_cpu_interrupts_match_pcp_qa_output():
    text = _interrupts_1152()
    assert max(len(line) for line in text.splitlines()) > 12000
    irqs = topology.parse_proc_interrupts(text)
    expected = open(realtrees.meta(realtrees.INTERRUPTS_1152, "886.out")).read()
    section = expected.split("== Checking interrupts helptext")[0]
    per_irq = re.findall(r"iname=<(\w+)::cpu(\d+)> reverse lookup: inst=\[\d+\] value:\s+(\d+)",
                         section)
    per_cpu = re.findall(r"iname=<cpu(\d+)> reverse lookup: inst=\[\d+\] value:\s+(\d+)",
                         section)
    assert len(per_irq) == 11 and len(per_cpu) == 11
    for label, cpu, value in per_irq:
        assert irqs[label].counts[int(cpu)] == int(value), (label, cpu)
    for cpu, value in per_cpu:
        cpu = int(cpu)
        assert sum(i.counts[cpu] for i in irqs.values() if len(i.counts) > cpu) == int(value)


def test_1152_cpu_interrupts_rows_are_split_into_chip_hwirq_and_name():
    irqs = topology.parse_proc_interrupts(_interrupts_1152())
    timer = irqs["0"]
    assert (timer.number, timer.chip, timer.hwirq, timer.trigger, timer.name) == (
        0, "IR-IO-APIC", "2", "edge", "timer")
    assert len(timer.counts) == 1152 and timer.cpus[-1] == 1151
    assert irqs["24"].name == "PCIe PME" and irqs["24"].hwirq == "475136"
    assert [i.name for i in irqs.values() if i.chip == "DMAR-MSI"] == [
        "dmar2", "dmar1", "dmar0", "dmar3"]
    assert sum(1 for i in irqs.values() if i.name == "smartpqi") > 20
    assert irqs["ERR"].counts == () and irqs["ERR"].number is None
    assert irqs["LOC"].name == "Local timer interrupts"


def test_interrupts_of_old_kernels_and_offline_cpus():
    text = ("           CPU0       CPU2       \n"
            "  0:        120          0   IO-APIC-edge      timer\n"
            " 45:          7          3   IR-PCI-MSI-edge      eth0-TxRx-0, eth0\n"
            " 16:         0          0  XIVE-IRQ 4094 Level     ipi\n"
            "NMI:          1          2   Non-maskable interrupts\n")
    irqs = topology.parse_proc_interrupts(text)
    assert irqs["0"].cpus == (0, 2)
    assert (irqs["0"].chip, irqs["0"].trigger, irqs["0"].hwirq) == ("IO-APIC", "edge", None)
    assert irqs["45"].name == "eth0-TxRx-0, eth0" and irqs["45"].counts == (7, 3)
    assert (irqs["16"].chip, irqs["16"].hwirq, irqs["16"].trigger, irqs["16"].name) == (
        "XIVE-IRQ", "4094", "level", "ipi")
    with pytest.raises(GpuhostError) as err:
        topology.parse_proc_interrupts("garbage\n 0: 1 2\n")
    assert err.value.field == "interrupts"


def test_read_irqs_with_affinity(tmp_path):
    root = fixturegen.build_runbook_host(str(tmp_path))
    irqs = topology.read_irqs(root)
    mlx5 = [i for i in irqs.values() if i.name == "mlx5_comp0@pci:0000:41:00.0"]
    assert len(mlx5) == 1
    assert mlx5[0].smp_affinity_list == tuple(range(16)) + tuple(range(32, 48))
    assert mlx5[0].effective_affinity_list == (0,)
    assert irqs["NMI"].smp_affinity_list is None
    nvme = [i for i in irqs.values() if i.name and i.name.startswith("nvme0q")]
    assert len(nvme) == 4 and all(i.chip == "IR-PCI-MSI" for i in nvme)
    no_affinity = topology.read_irqs(root, with_affinity=False)
    assert all(i.smp_affinity_list is None for i in no_affinity.values())


def test_cmdline_flags():
    flags = topology.parse_cmdline(
        "BOOT_IMAGE=/vmlinuz ro intel_iommu=on,sm_on iommu=pt pcie_acs_override=downstream "
        "vfio_pci.ids=10de:20b5,10de:1aef intremap=off quiet")
    assert flags == {"intel_iommu": "on,sm_on", "iommu": "pt",
                     "pcie_acs_override": "downstream",
                     "vfio-pci.ids": "10de:20b5,10de:1aef", "intremap": "off"}


def test_iommu_state_of_real_laptop_groups():
    state = topology.read_iommu_state(tree(realtrees.LAPTOP_IOMMU))
    assert state.enabled and len(state.groups) == 15
    assert state.groups[13] == ("0000:00:1f.0", "0000:00:1f.3", "0000:00:1f.4",
                                "0000:00:1f.5")
    assert state.interrupt_remapping is None


def test_iommu_state_without_iommu():
    state = topology.read_iommu_state(tree(realtrees.XEON_SILVER))
    assert not state.enabled and state.groups == {} and state.vendor is None
    assert state.cmdline == {}


@pytest.mark.parametrize("builder, vendor, units, tables", [
    (fixturegen.build_runbook_host, "intel", ("dmar0", "dmar1"), ("DMAR",)),
    (fixturegen.build_amd_nps4_host, "amd", tuple("ivhd%d" % i for i in range(8)), ("IVRS",)),
])
def test_iommu_state_of_synthetic_hosts(tmp_path, builder, vendor, units, tables):
    state = topology.read_iommu_state(builder(str(tmp_path)))
    assert state.enabled and state.vendor == vendor
    assert state.units == units and state.acpi_tables == tables
    assert state.mode == "identity" and state.passthrough
    assert state.interrupt_remapping is True
    assert state.interrupt_remapping_source == "proc_interrupts"


def test_interrupt_remapping_rules(tmp_path):
    off = fixturegen.build_runbook_host(
        str(tmp_path / "off"), cmdline="ro intel_iommu=on intremap=off")
    assert topology.read_iommu_state(off).interrupt_remapping_source == "cmdline"
    assert topology.read_iommu_state(off).interrupt_remapping is False
    no_ir = fixturegen.build_runbook_host(str(tmp_path / "noir"), interrupt_remapping=False)
    state = topology.read_iommu_state(no_ir)
    assert (state.interrupt_remapping, state.interrupt_remapping_source) == (
        False, "proc_interrupts")
    os.unlink(os.path.join(no_ir, "proc", "interrupts"))
    state = topology.read_iommu_state(no_ir)
    assert (state.interrupt_remapping, state.interrupt_remapping_source) == (False, "ecap")
    with_ir = fixturegen.build_runbook_host(str(tmp_path / "ir"))
    os.unlink(os.path.join(with_ir, "proc", "interrupts"))
    state = topology.read_iommu_state(with_ir)
    assert (state.interrupt_remapping, state.interrupt_remapping_source) == (True, "ecap")


def test_translated_mode_without_pt(tmp_path):
    root = fixturegen.build_runbook_host(str(tmp_path), cmdline="ro intel_iommu=on")
    state = topology.read_iommu_state(root)
    assert state.mode == "DMA-FQ" and not state.passthrough


def test_runbook_host_cpus_and_nodes(tmp_path):
    root = fixturegen.build_runbook_host(str(tmp_path))
    topo = topology.read_host_topology(root)
    assert len(topo.cpus.online) == 64
    assert topo.cpus.cpus[5].thread_siblings == (5, 37)
    assert topo.cpus.cpus[37].node == 0 and topo.cpus.cpus[16].node == 1
    assert topo.nodes[0].cpus == tuple(range(16)) + tuple(range(32, 48))
    assert topo.nodes[0].hugepages[1048576].nr == 64
    assert topo.nodes[0].hugepages[1048576].free == 32
    assert topo.nodes[0].distances == {0: 10, 1: 21}
    assert "pdpe1gb" in topo.cpus.flags and topo.cpus.vendor == "GenuineIntel"


def test_amd_nps4_host_has_eight_nodes(tmp_path):
    topo = topology.read_host_topology(fixturegen.build_amd_nps4_host(str(tmp_path)))
    assert sorted(topo.nodes) == list(range(8))
    assert all(len(n.cpus) == 16 for n in topo.nodes.values())
    assert topo.nodes[0].distances[1] == 12 and topo.nodes[0].distances[4] == 32
    assert topo.cpus.cpus[0].thread_siblings == (0, 64)
    assert topo.pci["0000:c1:00.0"].numa_node == 5


@pytest.mark.parametrize("name", [realtrees.SANDY_BRIDGE, realtrees.XEON_SILVER,
                                  realtrees.POWER9, realtrees.OFFLINE_CPU0,
                                  realtrees.LAPTOP_IOMMU, realtrees.EPYC_7451,
                                  realtrees.SNC2_SERVER])
def test_topology_dict_round_trip_through_json(name):
    topo = topology.read_host_topology(tree(name))
    data = json.loads(json.dumps(topology.topology_to_dict(topo)))
    assert data["format"] == topology.TOPOLOGY_FORMAT
    assert topology.topology_from_dict(data) == topo


def test_topology_dict_round_trip_of_synthetic_host(tmp_path):
    topo = topology.read_host_topology(fixturegen.build_runbook_host(str(tmp_path)))
    data = json.loads(json.dumps(topology.topology_to_dict(topo)))
    back = topology.topology_from_dict(data)
    assert back == topo
    assert back.pci["0000:65:00.0"].bars[1].is_prefetchable
    assert back.irqs["NMI"].counts == topo.irqs["NMI"].counts


@pytest.mark.parametrize("data", [None, [], {"nodes": {}}, {"cpus": {"cpus": {"x": {}}}}])
def test_topology_from_dict_refuses_malformed_data(data):
    with pytest.raises(GpuhostError) as err:
        topology.topology_from_dict(data)
    assert err.value.field == "topology"
