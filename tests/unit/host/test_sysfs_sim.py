# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulator plays the kernel behaviours of LAB.md and the kernel ABI docs."""

import errno
import os

import pytest

from support import fixturegen
from support.sysfs_sim import SimulatedKernel, build_sim_host, kernel_managed_irqs

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import parse_cpumask
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import read_pci_functions
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_irqs


@pytest.fixture
def sim(tmp_path):
    root = build_sim_host(str(tmp_path))
    return SimulatedKernel(root, managed_irqs=kernel_managed_irqs(root))


def test_numvfs_creates_vfs_like_the_lab_nvme(sim):
    # LAB.md: writing 2 to sriov_numvfs of NVMe 01:00.0 created 01:00.1 and 01:00.2, each
    # in its own IOMMU group, with virtfn links.
    sim.write("/sys/bus/pci/devices/0000:01:00.0/sriov_numvfs", "2")
    functions = read_pci_functions(sim.root)
    assert functions["0000:01:00.0"].virtfns == ("0000:01:00.1", "0000:01:00.2")
    vf = functions["0000:01:00.1"]
    assert vf.physfn == "0000:01:00.0"
    assert vf.numa_node == 0
    assert vf.iommu_group not in (None, functions["0000:01:00.0"].iommu_group)
    assert vf.iommu_group != functions["0000:01:00.2"].iommu_group
    assert vf.driver == "nvme"          # autoprobe 1: the PF driver's VF driver probes it


def test_numvfs_change_must_go_through_zero(sim):
    path = "/sys/bus/pci/devices/0000:01:00.0/sriov_numvfs"
    sim.write(path, "2")
    with pytest.raises(OSError) as info:
        sim.write(path, "3")
    assert info.value.errno == errno.EBUSY
    sim.write(path, "0")
    assert not os.path.exists(sim.path("/sys/bus/pci/devices/0000:01:00.1"))
    sim.write(path, "3")
    assert len(read_pci_functions(sim.root)["0000:01:00.0"].virtfns) == 3


def test_numvfs_above_total_is_erange(sim):
    with pytest.raises(OSError) as info:
        sim.write("/sys/bus/pci/devices/0000:01:00.0/sriov_numvfs", "5")
    assert info.value.errno == errno.ERANGE


def test_autoprobe_zero_leaves_vfs_unbound(sim):
    sim.write("/sys/bus/pci/devices/0000:03:00.0/sriov_drivers_autoprobe", "0")
    sim.write("/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs", "2")
    # sriov_offset 2 on this PF: VFs at 03:00.2 and 03:00.3
    assert sim.driver_of("0000:03:00.2") is None
    assert sim.driver_of("0000:03:00.3") is None


def test_override_unbind_probe_moves_driver_link(sim):
    # LAB.md: driver_override=vfio-pci, unbind, drivers_probe bound 41:00.0 to vfio-pci
    # and /dev/vfio/<group> appeared.
    dev = "/sys/bus/pci/devices/0000:41:00.0"
    sim.write(dev + "/driver_override", "vfio-pci")
    sim.write(dev + "/driver/unbind", "0000:41:00.0")
    assert sim.driver_of("0000:41:00.0") is None
    sim.write("/sys/bus/pci/drivers_probe", "0000:41:00.0")
    assert sim.driver_of("0000:41:00.0") == "vfio-pci"
    assert os.path.exists(sim.path("/dev/vfio/2"))
    assert os.path.islink(sim.path("/sys/bus/pci/drivers/vfio-pci/0000:41:00.0"))


def test_bind_is_refused_while_override_names_another_driver(sim):
    dev = "/sys/bus/pci/devices/0000:41:00.0"
    sim.write(dev + "/driver_override", "vfio-pci")
    sim.write(dev + "/driver/unbind", "0000:41:00.0")
    with pytest.raises(OSError) as info:
        sim.write("/sys/bus/pci/drivers/nvidia/bind", "0000:41:00.0")
    assert info.value.errno == errno.ENODEV
    sim.write(dev + "/driver_override", "\n")
    assert sim.read(dev + "/driver_override") == "(null)"
    sim.write("/sys/bus/pci/drivers/nvidia/bind", "0000:41:00.0")
    assert sim.driver_of("0000:41:00.0") == "nvidia"


def test_managed_irq_write_is_eio(sim):
    # nvme0q1 is an I/O queue (kernel-managed); nvme0q0, the admin queue, is not.
    assert kernel_managed_irqs(sim.root) == [41, 42, 43]
    with pytest.raises(OSError) as info:
        sim.write("/proc/irq/41/smp_affinity_list", "0-1")
    assert info.value.errno == errno.EIO
    sim.write("/proc/irq/40/smp_affinity_list", "0-1")
    assert read_irqs(sim.root)["40"].smp_affinity_list == (0, 1)


def test_irq_write_updates_affinity_and_effective(sim):
    sim.write("/proc/irq/50/smp_affinity_list", "2-3")
    irq = read_irqs(sim.root)["50"]
    assert irq.smp_affinity_list == (2, 3)
    assert irq.effective_affinity_list == (2,)
    assert parse_cpumask(sim.read("/proc/irq/50/smp_affinity")) == (2, 3)


def test_irq_write_without_online_cpu_is_einval_and_beyond_possible_erange(tmp_path):
    from support.sysfs_sim import TreeBuilder
    root = str(tmp_path)
    TreeBuilder(root).cpus(online="0-3", possible="0-7").irq(30, "eth0")
    sim = SimulatedKernel(root)
    with pytest.raises(OSError) as info:
        sim.write("/proc/irq/30/smp_affinity_list", "4-5")
    assert info.value.errno == errno.EINVAL
    with pytest.raises(OSError) as info:
        sim.write("/proc/irq/30/smp_affinity_list", "9")
    assert info.value.errno == errno.ERANGE


def test_added_irq_shows_in_proc_interrupts(sim):
    sim.add_irq(70, "vfio-msix[0](0000:41:00.0)", device="0000:41:00.0", chip="IR-PCI-MSIX")
    irqs = read_irqs(sim.root)
    assert irqs["70"].name == "vfio-msix[0](0000:41:00.0)"
    assert 70 in read_pci_functions(sim.root)["0000:41:00.0"].msi_irqs


def test_simulator_runs_on_fixturegen_runbook_host(tmp_path):
    root = fixturegen.build_runbook_host(str(tmp_path))
    sim = SimulatedKernel(root)
    functions = read_pci_functions(root)
    pf = next(a for a, f in functions.items() if f.sriov_totalvfs and f.driver)
    path = "/sys/bus/pci/devices/%s/sriov_numvfs" % pf
    if functions[pf].sriov_numvfs:
        with pytest.raises(OSError):
            sim.write(path, str(functions[pf].sriov_numvfs + 1))
        sim.write(path, "0")
        assert not read_pci_functions(root)[pf].virtfns
    sim.write(path, "1")
    after = read_pci_functions(root)
    assert len(after[pf].virtfns) == 1
    assert after[after[pf].virtfns[0]].physfn == pf
