# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight refusals of libvirt_pinned_domain on literal topologies and domain XML."""

import bz2
import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import xml as dx
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.preflight import (
    DefinedDomain, defined_domain_from_xml, run_preflight)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_iommu_state

from support import fixturegen
from support import realtrees
from support.domain_xml import (RUNBOOK_GPU, RUNBOOK_HDA, RUNBOOK_VF, dirty_topology,
                                runbook_tenant, runbook_topology)


def spec(**tenant_changes):
    tenant = runbook_tenant()
    tenant.update(tenant_changes)
    return domain_model.spec_from_plan(tenant)


def refusal_fields(report):
    return [r.field for r in report.refusals]


def test_runbook_tenant_passes_on_runbook_host():
    report = run_preflight(spec(), runbook_topology(), [])
    assert report.refusals == [] and report.warnings == []
    report.raise_if_refused()


def test_dirty_iommu_group_is_refused_naming_the_usb_controller():
    tenant = runbook_tenant(vf=False)
    tenant["gpus"] = [{"address": "0000:01:00.0",
                       "functions": ["0000:01:00.0", "0000:01:00.1"], "bar64_total": 0}]
    report = run_preflight(domain_model.spec_from_plan(tenant), dirty_topology(), [])
    assert refusal_fields(report) == ["plan"]
    text = report.refusals[0].reason
    assert "IOMMU group 5" in text and "0000:02:00.0" in text and "xhci_hcd" in text
    assert "pcie_acs_override" in report.refusals[0].fix
    with pytest.raises(GpuhostError) as err:
        report.raise_if_refused()
    assert err.value.field == "plan"


def test_unknown_hostdev_is_refused():
    report = run_preflight(spec(), runbook_topology(), [])
    topo = runbook_topology()
    del topo.pci[RUNBOOK_VF]
    report = run_preflight(spec(), topo, [])
    assert refusal_fields(report) == ["plan"]
    assert "does not exist" in report.refusals[0].reason


def test_hostdev_of_another_defined_domain_is_refused():
    other = DefinedDomain(name="tenant-b", hostdevs=(RUNBOOK_HDA,), active=False)
    report = run_preflight(spec(), runbook_topology(), [other])
    assert refusal_fields(report) == ["plan"]
    assert "0000:65:00.1 already used by domain tenant-b (defined)" in report.refusals[0].reason


def test_own_previous_definition_does_not_count_as_another_domain():
    mine = DefinedDomain(name="tenant-a100", hostdevs=(RUNBOOK_GPU, RUNBOOK_HDA),
                         vcpu_cpus=(1, 33))
    assert run_preflight(spec(), runbook_topology(), [mine]).refusals == []


def test_offline_pins_are_refused_with_the_online_list():
    report = run_preflight(spec(), runbook_topology(offline=(33, 34)), [])
    assert refusal_fields(report) == ["plan.vcpu_pins"]
    assert "CPUs 33-34 are not online (online: 0-32,35-63)" in report.refusals[0].reason


def test_overlapping_pins_refused_unless_allowed():
    other = DefinedDomain(name="tenant-b", vcpu_cpus=(15, 47, 16, 48))
    report = run_preflight(spec(), runbook_topology(), [other])
    assert refusal_fields(report) == ["plan.vcpu_pins"]
    assert report.refusals[0].override == "allow_cpu_overlap"
    assert "vCPU pins 15,47 overlap the vCPUs of domain tenant-b" in report.refusals[0].reason
    allowed = run_preflight(spec(), runbook_topology(), [other], allow_cpu_overlap=True)
    assert allowed.refusals == []
    assert "allowed by allow_cpu_overlap" in allowed.warnings[0]


def test_emulator_on_another_tenants_vcpus_is_an_overlap():
    other = DefinedDomain(name="tenant-b", vcpu_cpus=(0,))
    report = run_preflight(spec(), runbook_topology(), [other])
    assert refusal_fields(report) == ["plan.emulator_cpus", "plan.iothread_cpus"]
    assert "emulator_cpus 0 overlap the vCPUs of domain tenant-b" in report.refusals[0].reason
    assert "iothread_cpus 0 overlap the vCPUs of domain tenant-b" in report.refusals[1].reason


def test_hugepages_are_counted_per_node_not_host_wide():
    # 16 free 1G pages on node 0 and 64 on node 1: 80 host-wide, but node 0 is short.
    report = run_preflight(spec(), runbook_topology(free_1g=(16, 64)), [])
    # the option that asks for the pages, never "hugepages" (no option of the module)
    assert refusal_fields(report) == ["plan.memory_gib"]
    refusal = report.refusals[0]
    assert refusal.kind == "hugepages_short"
    assert "needs 32 pages of 1G on node 0, but only 16 are free (node 0: 16 free)" \
        in refusal.reason
    assert "reserve 16 more 1G pages on node 0" in refusal.fix
    assert "node0/hugepages/hugepages-1048576kB/nr_hugepages" in refusal.fix


def test_pages_held_by_this_running_domain_count_as_free():
    mine = DefinedDomain(name="tenant-a100", active=True, memory_kib=32 * 1048576,
                         hugepage_size_kib=1048576, memory_nodeset=(0,))
    topo = runbook_topology(free_1g=(0, 64))
    assert run_preflight(spec(), topo, [mine]).refusals == []
    stopped = DefinedDomain(name="tenant-a100", active=False, memory_kib=32 * 1048576,
                            hugepage_size_kib=1048576)
    assert refusal_fields(run_preflight(spec(), topo, [stopped])) == ["plan.memory_gib"]


def test_missing_hugepage_pool_is_refused():
    topo = runbook_topology()
    for node in topo.nodes.values():
        del node.hugepages[1048576]
    report = run_preflight(spec(), topo, [])
    assert refusal_fields(report) == ["plan.hugepage_size_kib"]
    assert "hugepagesz=1G" in report.refusals[0].fix


def test_memory_on_another_node_refused_unless_allowed():
    changed = spec(numatune={"mode": "strict", "nodeset": "1"})
    report = run_preflight(changed, runbook_topology(), [])
    assert "plan.numatune.nodeset" in refusal_fields(report)
    refusal = [r for r in report.refusals if r.field == "plan.numatune.nodeset"][0]
    assert refusal.reason == "the GPU is on node 0 but memory nodeset is 1"
    assert refusal.override == "allow_cross_node"
    allowed = run_preflight(changed, runbook_topology(), [], allow_cross_node=True)
    assert "plan.numatune.nodeset" not in refusal_fields(allowed)


def test_vcpus_on_another_node_are_named():
    tenant = runbook_tenant()
    tenant["vcpu_pins"] = [16, 48] + tenant["vcpu_pins"][2:]
    report = run_preflight(domain_model.spec_from_plan(tenant), runbook_topology(), [])
    assert refusal_fields(report) == ["plan.vcpu_pins"]
    assert "vCPU pins 16,48 are on node 1" in report.refusals[0].reason


def test_several_refusals_are_reported_together():
    other = DefinedDomain(name="tenant-b", hostdevs=(RUNBOOK_GPU,), vcpu_cpus=(1,))
    report = run_preflight(spec(), runbook_topology(free_1g=(0, 0)), [other])
    with pytest.raises(GpuhostError) as err:
        report.raise_if_refused()
    assert err.value.message.startswith("plan: 3 preflight refusals:")
    assert len(err.value.details["refusals"]) == 3


def test_defined_domain_from_libvirt_xml():
    xml = dx.to_string(dx.build_domain_xml(spec()))
    domain = defined_domain_from_xml(xml, active=True)
    assert domain.name == "tenant-a100"
    assert set(domain.hostdevs) == {RUNBOOK_GPU, RUNBOOK_HDA, RUNBOOK_VF}
    assert domain.vcpu_cpus == tuple(sorted(list(range(1, 16)) + list(range(33, 48))))
    assert (domain.memory_kib, domain.hugepage_size_kib, domain.memory_nodeset) == (
        32 * 1048576, 1048576, (0,))


def test_defined_domain_units_and_default_pages():
    xml = """<domain type='kvm'><name>x</name><memory unit='GiB'>4</memory>
      <memoryBacking><hugepages/></memoryBacking></domain>"""
    domain = defined_domain_from_xml(xml)
    assert (domain.memory_kib, domain.hugepage_size_kib, domain.hostdevs) == (
        4 * 1048576, 0, ())


# -- host safety, shared IOMMU groups, SMT siblings, own helper CPUs --------------------

def gpu_only_spec():
    """The runbook tenant given the A100 without its HDA function (same IOMMU group)."""
    tenant = runbook_tenant(vf=False)
    tenant["gpus"] = [dict(tenant["gpus"][0], functions=[RUNBOOK_GPU])]
    return domain_model.spec_from_plan(tenant)


def test_function_of_a_group_another_domain_holds_is_refused():
    other = DefinedDomain(name="tenant-b", hostdevs=(RUNBOOK_HDA,), active=True)
    report = run_preflight(gpu_only_spec(), runbook_topology(), [other])
    assert refusal_fields(report) == ["plan"]
    refusal = report.refusals[0]
    assert refusal.reason == ("0000:65:00.0 is in IOMMU group 27, which also holds "
                              "0000:65:00.1 of domain tenant-b (running): one IOMMU group "
                              "goes to one guest")
    assert refusal.override is None
    assert "give this tenant a device from another IOMMU group" in refusal.fix
    # Nothing overrides it: the CPU override does not touch it.
    assert refusal_fields(run_preflight(gpu_only_spec(), runbook_topology(), [other],
                                        allow_cpu_overlap=True)) == ["plan"]


def test_groups_of_this_domains_own_previous_definition_are_not_shared():
    mine = DefinedDomain(name="tenant-a100", hostdevs=(RUNBOOK_GPU, RUNBOOK_HDA))
    assert run_preflight(gpu_only_spec(), runbook_topology(), [mine]).refusals == []


def one_thread_per_core_spec():
    """Two vCPUs on CPUs 1 and 2: one thread each of cores 1 and 2 (siblings 33, 34)."""
    tenant = runbook_tenant(vcpus=2, vf=False)
    tenant["vcpu_pins"] = [1, 2]
    return domain_model.spec_from_plan(tenant)


def test_vcpu_on_the_smt_sibling_of_another_domains_vcpu_is_refused_unless_allowed():
    other = DefinedDomain(name="tenant-b", vcpu_cpus=(34, 40))
    report = run_preflight(one_thread_per_core_spec(), runbook_topology(), [other])
    assert refusal_fields(report) == ["plan.vcpu_pins"]
    refusal = report.refusals[0]
    assert refusal.reason == ("vCPU pins 2 share cores with the vCPUs of domain tenant-b "
                              "(CPU 2 is the SMT sibling of 34): threads of one core share "
                              "its caches, so one tenant can observe the other")
    assert refusal.override == "allow_cpu_overlap"
    allowed = run_preflight(one_thread_per_core_spec(), runbook_topology(), [other],
                            allow_cpu_overlap=True)
    assert allowed.refusals == []
    assert allowed.warnings[0].endswith("; allowed by allow_cpu_overlap")


def test_vcpu_on_own_emulator_or_iothread_cpu_is_refused_unless_allowed():
    tenant = runbook_tenant(vcpus=2, vf=False)
    tenant.update(emulator_cpus="1", iothread_cpus="0,33")
    report = run_preflight(domain_model.spec_from_plan(tenant), runbook_topology(), [])
    assert refusal_fields(report) == ["plan.vcpu_pins"]
    refusal = report.refusals[0]
    assert refusal.reason.startswith("vCPU pins 1,33 are also this domain's emulator_cpus (1) "
                                     "and iothread_cpus (33)")
    assert refusal.override == "allow_vcpu_emulator_overlap"
    assert "numa_cpuset plans them on the node's housekeeping CPUs" in refusal.fix
    allowed = run_preflight(domain_model.spec_from_plan(tenant), runbook_topology(), [],
                            allow_vcpu_emulator_overlap=True)
    assert allowed.refusals == [] and "allow_vcpu_emulator_overlap" in allowed.warnings[0]


def literal_context(topo, **critical):
    """The host-safety context of a literal topology: what safety_context.read_context
    would find, given as HostCriticalDevices fields."""
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.critical import (
        HostCriticalDevices)
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.safety_context import HostContext
    return HostContext(functions=topo.pci, iommu_enabled=True,
                       critical=HostCriticalDevices(**critical))


def test_host_critical_hostdevs_are_refused_with_vfio_binds_words():
    topo = runbook_topology()
    tenant = runbook_tenant()
    spec_ = domain_model.spec_from_plan(tenant, extra_hostdevs=("0000:b1:00.0",))
    context = literal_context(
        topo, root_fs={"0000:b1:00.0": ["/"]}, storage={"0000:b1:00.0": ["/"]},
        network={RUNBOOK_VF: ["the default route (ens1f0v0)"]})
    origins = {RUNBOOK_VF: "plan", "0000:b1:00.0": "hostdevs"}
    report = run_preflight(spec_, topo, [], host_context=context, hostdev_origins=origins)
    assert [(r.field, r.override) for r in report.refusals] == [
        ("hostdevs", None), ("allow_host_critical", "allow_host_critical")]
    root_disk, nic = report.refusals
    assert root_disk.reason == ("refusing to pass through: 0000:b1:00.0 holds the root "
                                "filesystem: passing it through to a domain detaches it from "
                                "the host, and the host stops at once (and this module with "
                                "it) (no override)")
    assert root_disk.fix == "remove the device(s) marked 'no override' from hostdevs"
    assert nic.reason == ("refusing to pass through: 0000:41:00.2 is the NIC of the default "
                          "route (ens1f0v0): passing it through to a domain detaches it from "
                          "the host, and the host loses that connection (set "
                          "allow_host_critical: true to override)")
    assert nic.fix == ("set allow_host_critical only if you accept the risk, or leave the "
                       "device(s) out of plan")
    allowed = run_preflight(spec_, topo, [], host_context=context, hostdev_origins=origins,
                            host_overrides={"allow_host_critical": True})
    assert [r.field for r in allowed.refusals] == ["hostdevs"]
    assert allowed.warnings == ["0000:41:00.2 is the NIC of the default route (ens1f0v0); "
                                "allowed by allow_host_critical"]


def test_bridge_and_boot_vga_hostdevs_are_refused():
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PciFunction
    topo = runbook_topology()
    topo.pci["0000:64:01.0"] = PciFunction(address="0000:64:01.0", class_code=0x060400,
                                           vendor_id=0x8086, iommu_group=90, numa_node=0)
    spec_ = domain_model.spec_from_plan(runbook_tenant(vf=False), extra_hostdevs=("0000:64:01.0",))
    context = literal_context(topo, console={RUNBOOK_GPU: "boot VGA with an active console "
                                                          "(VGA text console; vtconsole x)"})
    report = run_preflight(spec_, topo, [], host_context=context,
                           hostdev_origins={RUNBOOK_GPU: "gpus", "0000:64:01.0": "hostdevs"})
    assert [(r.field, r.override) for r in report.refusals] == [
        ("allow_boot_vga", "allow_boot_vga"), ("hostdevs", None)]
    assert "0000:64:01.0 is a PCI bridge" in report.refusals[1].reason


def test_hostdev_origins_name_the_option_each_device_came_from():
    from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.preflight import (
        hostdev_origins)
    spec_ = domain_model.spec_from_plan(runbook_tenant(), extra_hostdevs=("0000:b1:00.0",))
    assert hostdev_origins(spec_, from_plan=True, vf_option_given=False) == {
        RUNBOOK_GPU: "plan", RUNBOOK_HDA: "plan", RUNBOOK_VF: "plan",
        "0000:b1:00.0": "hostdevs"}
    assert hostdev_origins(spec_, from_plan=False, vf_option_given=True)[RUNBOOK_VF] == \
        "network.vf_address"


def test_a_missing_vf_and_a_missing_gpu_are_refusals_of_different_kinds():
    # The vm role's check mode lets the planned VF be missing (the sriov_irq stage creates
    # it later) but never a missing GPU: it tells them apart by kind, not by wording.
    topo = runbook_topology()
    no_vf = domain_model.spec_from_plan(runbook_tenant(address="0000:65:10.7", index=7))
    refusals = run_preflight(no_vf, topo, []).refusals
    assert [r.kind for r in refusals if "0000:65:10.7" in r.reason] == ["vf_missing"], refusals
    no_gpu = runbook_tenant()
    no_gpu["gpus"][0].update(address="0000:99:00.0", functions=["0000:99:00.0"])
    kinds = [r.kind for r in run_preflight(domain_model.spec_from_plan(no_gpu), topo, []).refusals]
    assert "hostdev_missing" in kinds and "vf_missing" not in kinds, kinds


# -- interrupt remapping (runbook section 13): read from fixture trees, real dumps ----

def _iommu_of_tree(root, interrupts_text=None):
    return read_iommu_state(root, interrupts_text=interrupts_text)


def _remapping_topology(iommu):
    topo = runbook_topology()
    topo.iommu = iommu
    return topo


def test_interrupt_remapping_read_on_from_the_tree_lets_the_tenant_pass(tmp_path):
    iommu = _iommu_of_tree(fixturegen.build_runbook_host(str(tmp_path)))
    assert iommu.interrupt_remapping is True
    report = run_preflight(spec(), _remapping_topology(iommu), [])
    assert report.refusals == [] and report.warnings == []


@pytest.mark.parametrize("tree_args, evidence", [
    ({"cmdline": "ro intel_iommu=on intremap=off"},
     "intremap=off is on the kernel command line"),
    ({"interrupt_remapping": False},
     "/proc/interrupts shows MSI and IO-APIC chips without IR-"),
])
def test_interrupt_remapping_read_off_is_refused_with_the_risk_then_allowed(
        tmp_path, tree_args, evidence):
    iommu = _iommu_of_tree(fixturegen.build_runbook_host(str(tmp_path), **tree_args))
    assert iommu.interrupt_remapping is False
    topo = _remapping_topology(iommu)
    report = run_preflight(spec(), topo, [])
    assert refusal_fields(report) == ["allow_unsafe_interrupts"]
    refusal = report.refusals[0]
    assert refusal.override == "allow_unsafe_interrupts"
    assert refusal.kind == "no_interrupt_remapping"
    assert ("interrupt remapping is off (%s)" % evidence) in refusal.reason
    assert "inject interrupts into the host and into other tenants" in refusal.reason
    assert "remove intremap=off" in refusal.fix and "allow_unsafe_interrupts: true" in \
        refusal.fix
    with pytest.raises(GpuhostError) as err:
        report.raise_if_refused()
    assert err.value.field == "allow_unsafe_interrupts"
    allowed = run_preflight(spec(), topo, [], allow_unsafe_interrupts=True)
    assert allowed.refusals == []
    assert len(allowed.warnings) == 1
    assert allowed.warnings[0].endswith("; allowed by allow_unsafe_interrupts")
    assert "MSI spoofing" in allowed.warnings[0]


def test_interrupt_remapping_off_by_ecap_names_the_dmar_unit(tmp_path):
    root = fixturegen.build_runbook_host(str(tmp_path), interrupt_remapping=False)
    os.unlink(os.path.join(root, "proc", "interrupts"))       # only the ecap is left
    report = run_preflight(spec(), _remapping_topology(_iommu_of_tree(root)), [])
    assert refusal_fields(report) == ["allow_unsafe_interrupts"]
    assert "a DMAR unit does not advertise interrupt remapping (ecap bit 3)" in \
        report.refusals[0].reason


def test_interrupt_remapping_unknown_is_a_warning_not_a_refusal(tmp_path):
    root = fixturegen.build_runbook_host(str(tmp_path))
    os.unlink(os.path.join(root, "proc", "interrupts"))
    for unit in os.listdir(os.path.join(root, "sys", "class", "iommu")):
        os.unlink(os.path.join(root, "sys", "class", "iommu", unit, "intel-iommu", "ecap"))
    iommu = _iommu_of_tree(root)
    assert iommu.interrupt_remapping is None
    report = run_preflight(spec(), _remapping_topology(iommu), [])
    assert report.refusals == []
    assert [w for w in report.warnings if "interrupt remapping could not be read" in w] \
        == report.warnings and len(report.warnings) == 1


def test_a_domain_without_host_devices_needs_no_interrupt_remapping(tmp_path):
    iommu = _iommu_of_tree(fixturegen.build_runbook_host(
        str(tmp_path), cmdline="ro intel_iommu=on intremap=off"))
    tenant = runbook_tenant(vf=False)
    tenant["gpus"] = []
    report = run_preflight(domain_model.spec_from_plan(tenant), _remapping_topology(iommu), [])
    assert report.refusals == [] and report.warnings == []


def test_real_dumps_read_unknown_but_one_and_none_is_refused():
    """The recorded trees of real machines: 7 of 8 give no evidence either way (no
    /proc/interrupts, no DMAR ecap) and get the warning; the 1152-CPU machine's
    /proc/interrupts shows IR- chips and passes silently. None is refused."""
    verdicts = {}
    for name in sorted(os.listdir(realtrees.TOPOLOGIES)):
        root = realtrees.tree(name)
        if not os.path.isdir(root):
            continue
        text = None
        packed = os.path.join(root, "proc", "interrupts.bz2")
        if os.path.exists(packed):
            with bz2.open(packed, "rt") as handle:
                text = handle.read()
        iommu = _iommu_of_tree(root, interrupts_text=text)
        report = run_preflight(spec(), _remapping_topology(iommu), [])
        assert report.refusals == [], name
        verdicts[name] = (iommu.interrupt_remapping, len(report.warnings))
    assert len(verdicts) == 8
    assert verdicts.pop(realtrees.INTERRUPTS_1152) == (True, 0)
    assert set(verdicts.values()) == {(None, 1)}, verdicts
