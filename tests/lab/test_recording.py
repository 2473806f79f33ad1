"""The lab recordings (tests/fixtures/lab-recording/, made by lab/record-fixtures) read
through the collection's own readers: no lab needed, so these run in every test run.
They pin down what the real kernel showed, so a reader change that misreads a real
tree fails here."""

import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import iommu, pci, topology

RECORDINGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "fixtures", "lab-recording")
ALL = ("first-boot", "iommu-pt", "iommu-pt-vfs")
GPUS = {"0000:21:00.0": ("0000:21:00.1", 0), "0000:41:00.0": ("0000:41:00.1", 1)}
DIRTY = ["0000:00:04.0", "0000:01:01.0", "0000:01:02.0"]
PF = "0000:22:00.0"


def _root(name):
    root = os.path.join(RECORDINGS, name)
    assert os.path.isdir(root), "missing recording %s: run lab/record-fixtures --all" % root
    return root


@pytest.mark.parametrize("name", ALL)
def test_links_stay_inside_the_recording(name):
    top = os.path.realpath(_root(name))
    links = 0
    for dirpath, dirnames, filenames in os.walk(top):
        for entry in dirnames + filenames:
            path = os.path.join(dirpath, entry)
            if os.path.islink(path):
                links += 1
                target = os.readlink(path)
                assert not os.path.isabs(target), path
                resolved = os.path.normpath(os.path.join(dirpath, target))
                assert (resolved + os.sep).startswith(top + os.sep), path
    assert links > 100     # bus/pci/devices, driver, iommu_group, node/cpu links


@pytest.mark.parametrize("name", ALL)
def test_cpus_and_nodes(name):
    root = _root(name)
    cpus = topology.read_cpu_state(root)
    assert cpus.vendor == "GenuineIntel"
    assert "pdpe1gb" in cpus.flags
    nodes = topology.read_numa_nodes(root)
    assert {n: node.cpus for n, node in nodes.items()} == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}
    assert nodes[0].distances == {0: 10, 1: 20}
    assert set(nodes[0].hugepages) == {2048, 1048576}
    assert {cpu.thread_siblings for cpu in cpus.cpus.values()} == {
        (0, 1), (2, 3), (4, 5), (6, 7)}
    assert [cpus.cpus[n].package for n in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize("name", ALL)
def test_gpus_are_isolated_on_their_nodes_and_the_dirty_group_is_found(name):
    root = _root(name)
    report = iommu.analyse_iommu(topology.read_host_topology(root))
    verdicts = {v.address: v for v in report.gpus}
    for gpu, (hda, node) in GPUS.items():
        assert verdicts[gpu].isolated, verdicts[gpu].reasons
        assert verdicts[gpu].companions == (hda,)
        assert verdicts[gpu].numa_node == node
        assert verdicts[gpu].boot_vga is False
    assert verdicts["0000:00:01.0"].boot_vga is True
    dirty = [g for g in report.dirty_groups if "0000:01:01.0" in g["gpus"]]
    assert len(dirty) == 1
    assert [f["address"] for f in dirty[0]["foreign"]] == ["0000:01:02.0"]
    functions = pci.read_pci_functions(root)
    groups = {functions[a].iommu_group for a in DIRTY}
    assert len(groups) == 1 and None not in groups


def test_first_boot_cmdline_and_translated_groups():
    root = _root("first-boot")
    state = topology.read_iommu_state(root)
    assert "intel_iommu" not in state.cmdline and "iommu" not in state.cmdline
    # Debian's kernel turns the emulated VT-d on by itself (lab/README.md)
    assert state.enabled and state.units == ("dmar0",)
    assert set(state.group_types.values()) == {"DMA"}


def test_iommu_pt_cmdline_and_identity_groups():
    root = _root("iommu-pt")
    state = topology.read_iommu_state(root)
    assert state.cmdline.get("intel_iommu") == "on" and state.cmdline.get("iommu") == "pt"
    assert set(state.group_types.values()) == {"identity"}


def test_pf_before_and_after_creating_two_vfs():
    before = pci.read_pci_function(PF, root=_root("iommu-pt"))
    assert (before.sriov_totalvfs, before.sriov_numvfs, before.virtfns) == (4, 0, ())
    root = _root("iommu-pt-vfs")
    after = pci.read_pci_function(PF, root=root)
    assert after.sriov_numvfs == 2
    assert after.virtfns == ("0000:22:00.1", "0000:22:00.2")
    functions = pci.read_pci_functions(root)
    vf_groups = set()
    for vf in after.virtfns:
        assert functions[vf].physfn == PF
        assert functions[vf].numa_node == 0
        vf_groups.add(functions[vf].iommu_group)
    assert len(vf_groups) == 2 and functions[PF].iommu_group not in vf_groups
