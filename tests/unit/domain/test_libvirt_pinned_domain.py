# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt_pinned_domain against libvirt's real test driver, in process.

Each test gets its own ``test:///<file>`` connection (test:///default is shared by the
whole process). Files are created with the real qemu-img and genisoimage. Every XML the
module defines is checked with virt-xml-validate.
"""

import json
import os
import shutil
import subprocess

import pytest

from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import topology_to_dict
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.libvirt_conn import daemon_version
from ansible_collections.gpuhost.kvm.plugins.modules import libvirt_pinned_domain as mod

from support.domain_xml import (Env, RUNBOOK_GPU, RUNBOOK_HDA, plan_args, runbook_tenant,
                                runbook_topology)

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is in requirements.txt")


def test_check_apply_check_reports_changed_changed_unchanged(tmp_path):
    env = Env(tmp_path)
    first = env.run(check=True, **plan_args())
    assert first["changed"] and first["changed_elements"] == ["domain"]
    assert first["actions"] == ["define", "autostart on"]
    assert env.names() == []                      # check mode defined nothing
    second = env.run(**plan_args())
    assert second["changed"] and env.names() == ["tenant-a100"]
    assert env.domain("tenant-a100").autostart() == 1
    third = env.run(check=True, **plan_args())
    assert not third["changed"], third["changed_elements"]
    assert third["changed_elements"] == [] and third["actions"] == []
    assert third["diff"]["before"] == third["diff"]["after"]


def test_runbook_tenant_round_trips_and_second_run_is_unchanged(tmp_path):
    env = Env(tmp_path)
    first = env.run(state="running", **plan_args())
    assert first["changed"] and first["state"] == "running"
    held = env.domain("tenant-a100").XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert "<vcpupin vcpu='29' cpuset='47'/>" in held
    assert "<emulatorpin cpuset='0,32'/>" in held
    assert "<page size='1048576' unit='KiB'/>" in held
    # SeaBIOS, an Intel guest (vendor unknown), 32 GiB RAM and a 64 GiB window: 37
    # bits leave the BARs right after RAM, [64 GiB, 128 GiB)
    assert "<maxphysaddr mode='emulate' bits='37'/>" in held
    assert "<hidden" not in held and "<kvm>" not in held     # hide_kvm defaults off
    assert first["address_width"] == {"bits": 37, "window": "0x1000000000-0x1fffffffff",
                                      "size_gib": 64, "firmware": "bios",
                                      "vendor": "GenuineIntel"}
    second = env.run(state="running", **plan_args())
    assert second["changed"] is False
    assert second["restart_required"] is False
    assert second["uuid"] == first["uuid"]


def test_running_domain_change_requires_restart_and_is_not_restarted(tmp_path):
    env = Env(tmp_path)
    env.run(state="running", **plan_args())
    domain = env.domain("tenant-a100")
    domain_id = domain.ID()
    changed = plan_args(vcpusched={"scheduler": "fifo", "priority": 1})
    preview = env.run(check=True, state="running", **changed)
    assert preview["changed"] and preview["restart_required"]
    assert "cputune" in preview["changed_elements"][0]
    result = env.run(state="running", **changed)
    assert result["restart_required"] is True and result["actions"] == ["define"]
    domain = env.domain("tenant-a100")
    assert domain.isActive() and domain.ID() == domain_id          # never restarted
    persistent = domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert "scheduler='fifo'" in persistent
    again = env.run(state="running", **changed)
    assert not again["changed"] and not again["restart_required"]


def test_state_transitions_and_absent(tmp_path):
    env = Env(tmp_path)
    env.run(state="running", **plan_args())
    destroyed = env.run(state="destroyed", **plan_args())
    assert destroyed["changed"] and destroyed["actions"] == ["destroy"]
    assert not env.domain("tenant-a100").isActive()
    assert destroyed["restart_required"] is False
    assert not env.run(state="destroyed", **plan_args())["changed"]
    env.run(state="running", **plan_args())
    shutdown = env.run(state="shutdown", **plan_args())
    assert shutdown["actions"] == ["shutdown"]
    preview = env.run(check=True, name="tenant-a100", state="absent")
    assert preview["changed"] and env.names() == ["tenant-a100"]
    gone = env.run(name="tenant-a100", state="absent")
    assert gone["changed"] and gone["state"] == "absent" and env.names() == []
    assert not env.run(name="tenant-a100", state="absent")["changed"]


def test_absent_destroys_a_running_domain_first(tmp_path):
    env = Env(tmp_path)
    env.run(state="running", **plan_args())
    gone = env.run(name="tenant-a100", state="absent")
    assert gone["actions"] == ["destroy", "undefine"] and env.names() == []


def test_uuid_mismatch_is_refused(tmp_path):
    env = Env(tmp_path)
    env.run(**plan_args())
    err = env.fail(uuid="4dea22b3-1d52-d8f3-2516-782e98ab3fa0", **plan_args())
    assert err.field == "uuid" and "exists with UUID" in err.msg


def test_plan_for_another_tenant_is_refused(tmp_path):
    env = Env(tmp_path)
    err = env.fail(name="tenant-b", plan=runbook_tenant())
    assert err.field == "plan" and "tenant-a100" in err.msg


def test_preflight_refusal_defines_nothing(tmp_path):
    env = Env(tmp_path, topology=runbook_topology(free_1g=(8, 64)))
    err = env.fail(**plan_args())
    assert err.field == "plan.memory_gib" and "only 8 are free" in err.msg
    assert err.details["refusals"][0]["kind"] == "hugepages_short"
    assert env.names() == []


def test_second_tenant_on_the_same_gpu_is_refused(tmp_path):
    env = Env(tmp_path)
    env.run(**plan_args())
    err = env.fail(**plan_args(name="tenant-b"))
    assert "already used by domain tenant-a100" in err.message


def test_structured_options_fill_companions_and_bars_from_topology(tmp_path):
    env = Env(tmp_path)
    args = dict(name="tenant-l4", vcpus=4, vcpu_pins=[17, 49, 18, 50],
                guest_topology={"cores": 2, "threads": 2}, memory_gib=2,
                hugepage_size="2M", memory_nodes="1", emulator_cpus="16,48", iothreads=1,
                iothread_cpus="16,48", gpus=["0000:ca:00.0"],
                network={"type": "bridge", "bridge": "br0"})
    result = env.run(**args)
    assert result["changed"]
    xml = result["xml"]
    assert "<page size='2048' unit='KiB'/>" in xml
    assert "<source bridge='br0'/>" in xml
    assert "<memory mode='strict' nodeset='1'/>" in xml
    assert "bus='0xca'" in xml
    assert not env.run(**args)["changed"]
    # 52:54:00 MAC assigned by libvirt is kept across a redefinition
    mac = env.domain("tenant-l4").XMLDesc(0).split("mac address='")[1][:17]
    args["iothread_cpus"] = "16"
    changed = env.run(**args)
    assert changed["changed_elements"] == ["cputune/iothreadpin 1"]
    assert "mac address='%s'" % mac in changed["xml"]


def test_plan_and_structured_options_are_mutually_exclusive(tmp_path, capsys):
    env = Env(tmp_path)
    with pytest.raises(SystemExit):
        env.run(vcpus=4, **plan_args())
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and "mutually exclusive" in out["msg"]


def test_overlay_and_seed_are_created_recorded_and_removed(tmp_path):
    qemu_img = shutil.which("qemu-img")
    assert qemu_img, "qemu-utils is in bindep.txt"
    base = tmp_path / "base.qcow2"
    subprocess.run([qemu_img, "create", "-q", "-f", "qcow2", str(base), "64M"], check=True)
    prebuilt = tmp_path / "keep-me.iso"
    prebuilt.write_bytes(b"not ours")
    env = Env(tmp_path)
    overlay, seed = tmp_path / "tenant.qcow2", tmp_path / "seed.iso"
    args = plan_args(disk={"path": str(overlay), "base_image": str(base), "size": "1G"},
                     cloud_init={"seed_path": str(seed),
                                 "user_data": "#cloud-config\nhostname: tenant-a100\n"})
    preview = env.run(check=True, **args)
    assert preview["actions"][:2] == ["create overlay %s" % overlay, "build seed %s" % seed]
    assert not overlay.exists() and not seed.exists()
    result = env.run(**args)
    assert overlay.exists() and seed.exists()
    assert result["created_files"] == [str(overlay), str(seed)]
    info = json.loads(subprocess.run([qemu_img, "info", "--output=json", str(overlay)],
                                     capture_output=True, check=True, text=True).stdout)
    assert info["backing-filename"] == str(base) and info["virtual-size"] == 1 << 30
    assert "<source file='%s'/>" % overlay in result["xml"]
    assert not env.run(**args)["changed"]
    args["cloud_init"]["user_data"] += "packages: [numactl]\n"
    rebuilt = env.run(**args)
    assert rebuilt["actions"] == ["build seed %s" % seed]
    # a prebuilt seed the module did not create is used, and never removed
    args["cloud_init"] = {"seed_path": str(prebuilt)}
    env.run(**args)
    gone = env.run(name="tenant-a100", state="absent", remove_storage=True)
    assert sorted(gone["removed_files"]) == sorted([str(overlay), str(seed)])
    assert base.exists() and prebuilt.exists()
    assert not overlay.exists() and not seed.exists()
    assert not os.path.exists(os.path.join(env.state_dir, "tenant-a100.json"))


def test_failed_definition_removes_the_overlay_it_created(tmp_path):
    env = Env(tmp_path)
    uuid = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"
    # libvirt refuses a new domain whose UUID another domain already has
    env.conn.defineXML("<domain type='test'><name>other</name><uuid>%s</uuid>"
                       "<memory>1048576</memory><os><type>hvm</type></os></domain>" % uuid)
    overlay = tmp_path / "empty.qcow2"
    err = env.fail(uuid=uuid, **plan_args(disk={"path": str(overlay), "size": "1G"}))
    assert "libvirt refused the definition" in err.msg and "other" in err.msg
    assert not overlay.exists()
    assert env.names() == ["other"]
    assert not os.path.exists(os.path.join(env.state_dir, "tenant-a100.json"))


def test_missing_base_image_is_refused_before_anything_happens(tmp_path):
    env = Env(tmp_path)
    err = env.fail(**plan_args(disk={"path": str(tmp_path / "o.qcow2"),
                                     "base_image": str(tmp_path / "nope.qcow2")}))
    assert err.field == "disk.base_image"
    assert env.names() == []


def test_topology_option_takes_the_dict_form(tmp_path):
    env = Env(tmp_path)
    args = plan_args(topology=topology_to_dict(runbook_topology()), domain_type="test",
                     state_dir=env.state_dir, _ansible_check_mode=True)
    with patch_module_args(args):
        module = mod.build_module()
    runner = mod.PinnedDomain(module, conn=env.conn)
    runner.run()
    assert runner.result["changed"] and env.names() == []
    assert 'bus="0x65"' in runner.result["xml"]      # lxml's quoting: check mode


def test_runbook_tenant_from_the_real_planner_round_trips(tmp_path):
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
        plan_placement)
    topo = runbook_topology()
    plan = plan_placement(topo, [{"name": "tenant-a100", "gpus": 1, "vcpus": 30,
                                  "memory_gib": 32, "hugepage_size": "1G", "nic_vf": True,
                                  "iothreads": 2}], hugepage_check="free")
    tenant = plan["tenants"][0]
    assert tenant == dict(tenant, **{k: v for k, v in runbook_tenant().items()
                                     if k != "gpus"})     # the planner agrees with section 8
    env = Env(tmp_path, topology=topo)
    first = env.run(name="tenant-a100", plan=tenant, state="running")
    assert first["changed"] and first["state"] == "running"
    second = env.run(name="tenant-a100", plan=tenant, state="running")
    assert second["changed"] is False


def test_plan_vf_mac_and_vlan_reach_the_domain_and_a_change_is_reported(tmp_path):
    env = Env(tmp_path)
    plan = runbook_tenant(mac="52:54:00:6c:00:01", vlan=100)
    first = env.run(name="tenant-a100", plan=plan, network={"type": "vf"})
    assert "<mac address='52:54:00:6c:00:01'/>" in first["xml"]
    assert "<tag id='100'/>" in first["xml"]
    assert not env.run(name="tenant-a100", plan=plan, network={"type": "vf"})["changed"]
    moved = env.run(name="tenant-a100", plan=dict(plan, vf=dict(plan["vf"], vlan=200)),
                    network={"type": "vf"})
    assert moved["changed_elements"] == ["devices/interface hostdev 0000:41:00.2"]
    assert "<tag id='200'/>" in moved["xml"]
    # The module's own option wins over the plan.
    override = env.run(name="tenant-a100", plan=plan, network={"type": "vf", "vlan": 0})
    assert override["changed"] and "<vlan>" not in override["xml"]


def test_a_seed_rebuild_keeps_its_backup_under_a_fresh_name_never_through_a_planted_link(tmp_path):
    env = Env(tmp_path)
    seed = tmp_path / "seed.iso"
    args = plan_args(cloud_init={"seed_path": str(seed),
                                 "user_data": "#cloud-config\nhostname: tenant-a100\n"})
    env.run(**args)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "seed.iso.gpuhost-previous").symlink_to(victim)    # the old fixed name
    args["cloud_init"]["user_data"] += "packages: [numactl]\n"
    assert env.run(**args)["actions"] == ["build seed %s" % seed]
    assert victim.read_text() == "keep\n"
    # the backup is gone after the define succeeded; only the planted link stays
    assert sorted(p.name for p in tmp_path.iterdir() if "gpuhost-previous" in p.name) == [
        "seed.iso.gpuhost-previous"]


def test_a_refused_define_puts_a_rebuilt_seed_and_its_record_back_refusal_injected(tmp_path, monkeypatch):
    """Storage and the define are one change set: when libvirt refuses the define (the
    refusal is injected into the test driver's connection), the rebuilt seed gets its old
    bytes back, the record its old digest, and no kept copy stays behind."""
    env = Env(tmp_path)
    seed = tmp_path / "seed.iso"
    args = plan_args(cloud_init={"seed_path": str(seed),
                                 "user_data": "#cloud-config\nhostname: tenant-a100\n"})
    env.run(**args)
    record = os.path.join(env.state_dir, "tenant-a100.json")
    seed_before, record_before = seed.read_bytes(), open(record).read()

    def refuse(xml):
        raise libvirt.libvirtError("injected refusal")
    monkeypatch.setattr(env.conn, "defineXML", refuse)
    args["cloud_init"]["user_data"] += "packages: [numactl]\n"
    err = env.fail(**dict(args, hide_kvm=True))    # a definition change too: the define runs
    assert "libvirt refused the definition" in err.msg and "rolled back" in err.msg
    assert err.details["failed_step"].startswith("define") and "<domain" in err.details["xml"]
    assert seed.read_bytes() == seed_before
    assert open(record).read() == record_before
    assert not [p for p in tmp_path.iterdir() if "gpuhost-previous" in p.name]


# -- host safety and tenant isolation, through the module ------------------------------

def sim_env(tmp_path):
    """An Env on the simulated host (tests/support/sysfs_sim.py), read through ``root``: / on
    the NVMe 0000:01:00.0 behind root port 0000:00:01.0, the default route on eno1
    (0000:03:00.0), a console on the boot VGA 0000:42:00.0."""
    from support.sysfs_sim import build_sim_host
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
        read_host_topology)
    root = build_sim_host(str(tmp_path / "host"))
    env = Env(tmp_path, topology=read_host_topology(root, with_irqs=False))
    env.root = root
    return env


def small_domain(**extra):
    args = dict(name="tenant-x", vcpus=2, vcpu_pins=[1, 2], memory_gib=1,
                hugepage_size="none", memory_nodes="0")
    args.update(extra)
    return args


@pytest.mark.parametrize("hostdev, words", [
    ("0000:01:00.0", "0000:01:00.0 holds the root filesystem"),
    ("0000:00:01.0", "0000:00:01.0 is a PCI bridge"),
    ("0000:00:04.0", "0000:00:04.0 is a PCI bridge"),
])
def test_devices_the_host_cannot_live_without_are_refused_with_no_override(tmp_path, hostdev,
                                                                           words):
    env = sim_env(tmp_path)
    err = env.fail(**small_domain(hostdevs=[hostdev], allow_host_critical=True,
                                  allow_boot_vga=True))
    assert words in err.message and "(no override)" in err.message
    assert err.field == "hostdevs"
    assert "remove the device(s) marked 'no override' from hostdevs" in err.message
    assert env.names() == []


def test_default_route_nic_is_refused_then_allowed_by_the_vfio_bind_override(tmp_path):
    env = sim_env(tmp_path)
    err = env.fail(**small_domain(hostdevs=["0000:03:00.0"]))
    assert err.field == "allow_host_critical"
    assert ("refusing to pass through: 0000:03:00.0 is the NIC of the default route (eno1): "
            "passing it through to a domain detaches it from the host, and the host loses "
            "that connection (set allow_host_critical: true to override)") in err.message
    assert env.names() == []
    result = env.run(**small_domain(hostdevs=["0000:03:00.0"], allow_host_critical=True))
    assert env.names() == ["tenant-x"]
    assert result["warnings_preflight"] == [
        "0000:03:00.0 is the NIC of the default route (eno1); allowed by allow_host_critical"]


def test_boot_vga_with_a_console_is_refused_as_a_gpu(tmp_path):
    env = sim_env(tmp_path)
    err = env.fail(**small_domain(vcpu_pins=[5, 6], memory_nodes="1",
                                  gpus=["0000:42:00.0"]))
    assert err.field == "allow_boot_vga"
    assert "0000:42:00.0 boot VGA with an active console" in err.message
    assert "leave the device(s) out of gpus" in err.message
    assert env.names() == []


def test_vf_carrying_the_default_route_is_refused_as_the_network_vf(tmp_path):
    from support.sysfs_sim import SimulatedKernel, TreeBuilder
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
        read_host_topology)
    env = sim_env(tmp_path)
    SimulatedKernel(env.root).write("/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs", "1")
    tree = TreeBuilder(env.root)
    tree.netdev("0000:03:00.2", "eno1v0")
    os.unlink(os.path.join(env.root, "proc/net/route"))
    tree.route("eno1v0")
    env.topology = read_host_topology(env.root, with_irqs=False)
    err = env.fail(**small_domain(network={"type": "vf", "vf_address": "0000:03:00.2"}))
    assert err.field == "allow_host_critical"
    assert "0000:03:00.2 is the NIC of the default route (eno1v0)" in err.message
    assert "leave the device(s) out of network.vf_address" in err.message
    # Its PF is the host's NIC too: the VF dies with the PF's driver.
    err = env.fail(**small_domain(hostdevs=["0000:03:00.0"]))
    assert "0000:03:00.0 is the NIC of the default route (eno1v0) through its VF " \
        "0000:03:00.2" in err.message


def test_second_domain_with_a_function_of_the_same_iommu_group_is_refused(tmp_path):
    env = Env(tmp_path)
    env.run(name="tenant-a", vcpus=2, vcpu_pins=[1, 33], memory_gib=1, memory_nodes="0",
            hugepage_size="2M", emulator_cpus="0,32",
            gpus=[{"address": RUNBOOK_GPU, "functions": [RUNBOOK_GPU]}])
    err = env.fail(name="tenant-b", vcpus=2, vcpu_pins=[2, 34], memory_gib=1,
                   memory_nodes="0", hugepage_size="2M", emulator_cpus="0,32",
                   hostdevs=[RUNBOOK_HDA])
    assert err.field == "hostdevs"
    assert ("0000:65:00.1 is in IOMMU group 27, which also holds 0000:65:00.0 of domain "
            "tenant-a (defined): one IOMMU group goes to one guest") in err.message
    assert env.names() == ["tenant-a"]


def test_vcpus_on_smt_siblings_of_another_domain_are_refused(tmp_path):
    env = Env(tmp_path)
    env.run(name="tenant-a", vcpus=2, vcpu_pins=[1, 2], memory_gib=1, memory_nodes="0",
            hugepage_size="2M", emulator_cpus="0,32")
    err = env.fail(name="tenant-b", vcpus=2, vcpu_pins=[33, 34], memory_gib=1,
                   memory_nodes="0", hugepage_size="2M", emulator_cpus="0,32")
    assert err.field == "vcpu_pins"
    assert ("vCPU pins 33-34 share cores with the vCPUs of domain tenant-a (CPU 33 is the "
            "SMT sibling of 1, CPU 34 is the SMT sibling of 2)") in err.message
    assert "set allow_cpu_overlap: true if sharing is deliberate" in err.message
    assert env.names() == ["tenant-a"]


def test_vcpus_on_the_domains_own_emulator_cpus_are_refused(tmp_path):
    env = Env(tmp_path)
    args = dict(name="tenant-a", vcpus=2, vcpu_pins=[1, 33], memory_gib=1,
                memory_nodes="0", hugepage_size="2M", emulator_cpus="1,33")
    err = env.fail(**args)
    assert err.field == "vcpu_pins"
    assert "vCPU pins 1,33 are also this domain's emulator_cpus (1,33)" in err.message
    assert "set allow_vcpu_emulator_overlap: true" in err.message
    assert env.names() == []
    env.run(allow_vcpu_emulator_overlap=True, **args)
    assert env.names() == ["tenant-a"]


# -- hostile numbers end in a clean refusal naming the option ---------------------------

FLOAT_HOSTILE = [float("nan"), float("inf"), float("-inf"), "nan", "inf", "-Infinity"]


@pytest.mark.parametrize("value", FLOAT_HOSTILE)
def test_memory_gib_that_is_not_finite_is_refused_by_the_shared_validator(tmp_path, value):
    env = Env(tmp_path)
    err = env.fail(**small_domain(memory_gib=value))
    assert err.field == "memory_gib"
    assert "is not a finite number" in err.msg
    assert env.names() == []


def test_every_float_option_goes_through_the_shared_validator(tmp_path, monkeypatch):
    """Not only memory_gib: any option (or sub-option) typed float reaches
    validators.finite_number before it is used."""
    floats = []

    def walk(spec, prefix=""):
        for name, option in spec.items():
            if option.get("type") == "float":
                floats.append(prefix + name)
            walk(option.get("options") or {}, prefix + name + ".")
    with patch_module_args(dict(name="x", state="absent")):
        walk(mod.build_module().argument_spec)
    assert floats, "the module has float options"
    from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import argument_spec as domain_spec
    seen = []
    real = domain_spec.finite_number

    def spy(value, field, *args, **kwargs):
        seen.append(field)
        return real(value, field, *args, **kwargs)
    monkeypatch.setattr(domain_spec, "finite_number", spy)
    Env(tmp_path).run(check=True, **small_domain())
    assert set(floats) <= set(seen)


@pytest.mark.parametrize("key, value, field", [
    ("memory_gib", float("nan"), "plan.memory_gib"),
    ("memory_gib", "inf", "plan.memory_gib"),
    ("vcpus", float("inf"), "plan.vcpus"),
    ("vcpus", "many", "plan.vcpus"),
    ("iothreads", float("nan"), "plan.iothreads"),
    ("hugepage_size_kib", float("inf"), "plan.hugepage_size_kib"),
])
def test_plan_numbers_that_are_not_numbers_are_refused(tmp_path, key, value, field):
    env = Env(tmp_path)
    plan = runbook_tenant()
    plan[key] = value
    err = env.fail(name="tenant-a100", plan=plan)
    assert err.field == field
    assert env.names() == []


@pytest.mark.parametrize("value", [float("inf"), float("nan"), "lots", -1])
def test_gpu_bar_total_that_is_not_a_number_is_refused(tmp_path, value):
    env = Env(tmp_path)
    err = env.fail(**small_domain(vcpu_pins=[1, 33], hugepage_size="2M", gpus=[
        {"address": RUNBOOK_GPU, "bar64_total": value}]))
    assert err.field == "gpus[0].bar64_total"
    assert env.names() == []


# -- the record and the seed files go through the shared host-file writer --------------

def test_the_storage_record_and_the_seed_go_through_the_shared_writer(tmp_path, monkeypatch):
    from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
    written = []
    real = HostWriter.write_file

    def spy(self, host_path, content, mode=None, owner=None, field=None):
        written.append(os.path.basename(host_path))
        return real(self, host_path, content, mode, owner, field=field)
    monkeypatch.setattr(HostWriter, "write_file", spy)
    env = Env(tmp_path)
    seed = tmp_path / "seed.iso"
    args = plan_args(cloud_init={"seed_path": str(seed),
                                 "user_data": "#cloud-config\nhostname: tenant-a100\n"})
    env.run(**args)
    assert written == ["seed.iso", "tenant-a100.json"]
    assert os.stat(os.path.join(env.state_dir, "tenant-a100.json")).st_mode & 0o777 == 0o600
    del written[:]
    args["cloud_init"]["user_data"] += "packages: [numactl]\n"
    env.run(**args)
    assert written[0].startswith(".seed.iso.gpuhost-previous.")
    assert written[1:] == ["seed.iso", "tenant-a100.json"]
    assert not [p for p in tmp_path.iterdir() if "gpuhost-previous" in p.name]


def test_a_link_planted_at_the_storage_record_is_refused_and_its_target_untouched(tmp_path):
    env = Env(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text('{"created": [], "seed_digest": null}')
    os.makedirs(env.state_dir)
    os.symlink(str(victim), os.path.join(env.state_dir, "tenant-a100.json"))
    err = env.fail(**plan_args(cloud_init={
        "seed_path": str(tmp_path / "seed.iso"),
        "user_data": "#cloud-config\nhostname: tenant-a100\n"}))
    assert err.field == "state_dir" and "is a symbolic link" in err.msg
    assert victim.read_text() == '{"created": [], "seed_digest": null}'
    assert not (tmp_path / "seed.iso").exists()
    assert env.names() == []


def _sim_env_with(tmp_path, cmdline=None, without_interrupts=False):
    """sim_env whose tree is changed before the module reads it: another kernel command
    line, or no /proc/interrupts (and so no evidence of interrupt remapping either way:
    the simulator writes no DMAR ecap)."""
    from support.sysfs_sim import build_sim_host
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
        read_host_topology)
    root = build_sim_host(str(tmp_path / "host"))
    if cmdline is not None:
        with open(os.path.join(root, "proc", "cmdline"), "w") as handle:
            handle.write(cmdline + "\n")
    if without_interrupts:
        os.unlink(os.path.join(root, "proc", "interrupts"))
    env = Env(tmp_path, topology=read_host_topology(root, with_irqs=False))
    env.root = root
    return env


def gpu_domain(**extra):
    return small_domain(vcpu_pins=[5, 6], memory_nodes="1", gpus=["0000:41:00.0"], **extra)


def test_intremap_off_refuses_a_gpu_domain_until_allow_unsafe_interrupts(tmp_path):
    env = _sim_env_with(tmp_path, cmdline="BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 "
                                          "intel_iommu=on iommu=pt intremap=off")
    err = env.fail(**gpu_domain())
    assert err.field == "allow_unsafe_interrupts"
    assert "interrupt remapping is off (intremap=off is on the kernel command line)" in \
        err.message
    assert "inject interrupts into the host and into other tenants" in err.message
    assert err.details["refusals"][0]["kind"] == "no_interrupt_remapping"
    assert env.names() == []
    result = env.run(**gpu_domain(allow_unsafe_interrupts=True))
    assert result["changed"] and env.names() == ["tenant-x"]
    assert [w for w in result["warnings_preflight"] if "interrupt remapping" in w] == [
        w for w in result["warnings_preflight"] if w.endswith(
            "; allowed by allow_unsafe_interrupts")]
    assert len(result["warnings_preflight"]) == 1


def test_remapping_read_on_or_unknown_defines_the_gpu_domain(tmp_path):
    remapped = _sim_env_with(tmp_path / "ir")
    result = remapped.run(**gpu_domain())
    assert remapped.names() == ["tenant-x"] and result["warnings_preflight"] == []
    unknown = _sim_env_with(tmp_path / "unknown", without_interrupts=True)
    assert unknown.topology.iommu.interrupt_remapping is None
    result = unknown.run(**gpu_domain())
    assert unknown.names() == ["tenant-x"]
    assert len(result["warnings_preflight"]) == 1
    assert "interrupt remapping could not be read" in result["warnings_preflight"][0]


def test_hostdev_rom_round_trips_through_libvirt_and_a_change_needs_a_restart(tmp_path):
    env = Env(tmp_path)
    rom = [{"device": "gpus", "bar": False}, {"device": RUNBOOK_HDA, "bar": "on"},
           {"device": "vf", "bar": "off"}]
    first = env.run(state="running", **plan_args(hostdev_rom=rom))
    assert first["changed"]
    held = env.domain("tenant-a100").XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert held.count("<rom bar='off'/>") == 2 and held.count("<rom bar='on'/>") == 1
    again = env.run(state="running", **plan_args(hostdev_rom=rom))
    assert again["changed"] is False and again["changed_elements"] == []
    rom[0]["bar"] = "on"
    changed = env.run(state="running", **plan_args(hostdev_rom=rom))
    assert changed["changed_elements"] == ["devices/hostdev %s" % RUNBOOK_GPU]
    assert changed["restart_required"] is True and changed["actions"] == ["define"]


@pytest.mark.parametrize("rom, field, words", [
    ([{"device": "0000:99:00.0", "bar": "off"}], "hostdev_rom[0].device",
     "0000:99:00.0 is not one of this domain's host devices"),
    ([{"device": "0000:65:00.0\nx", "bar": "off"}], "hostdev_rom[0].device",
     "'0000:65:00.0\\nx' is not a PCI address"),
    ([{"device": "gpus", "bar": "maybe"}], "hostdev_rom[0].bar",
     "ROM BAR 'maybe' is neither on nor off"),
    ([{"device": "gpus", "bar": 0}], "hostdev_rom[0].bar", "is neither on nor off"),
    ([{"device": RUNBOOK_GPU, "bar": "off"}, {"device": RUNBOOK_GPU, "bar": "on"}],
     "hostdev_rom[1]", "0000:65:00.0 is given ROM BAR off by hostdev_rom[0] and on by "
                       "hostdev_rom[1]"),
])
def test_hostile_hostdev_rom_is_refused_naming_the_item(tmp_path, rom, field, words):
    env = Env(tmp_path)
    err = env.fail(**plan_args(hostdev_rom=rom))
    assert err.field == field and words in err.message
    assert env.names() == []


def test_hostdev_rom_for_a_vf_the_domain_lacks_is_refused(tmp_path):
    env = Env(tmp_path)
    err = env.fail(**plan_args(network={"type": "none"},
                               hostdev_rom=[{"device": "vf", "bar": "off"}]))
    assert err.field == "hostdev_rom[0].device" and "has no VF" in err.message


def test_daemon_version_reads_the_connections_libvirt_version(tmp_path):
    # The test driver runs in this process: its daemon version is the library's.
    env = Env(tmp_path)
    number = libvirt.getVersion()
    assert daemon_version(env.conn) == (number // 1000000, number // 1000 % 1000, number % 1000)
    assert daemon_version(env.conn) >= (8, 7, 0)    # this machine's libvirt writes <maxphysaddr>


def test_a_whole_board_tenant_gets_a_guest_cell_per_node_and_the_nvswitches(tmp_path):
    """The full-passthrough model on the HGX fake (published lspci's NVSwitch IDs; no
    Fabric Manager runs here): libvirt's test driver takes two guest NUMA cells, each
    bound to its node's memory, and the board's GPUs and NVSwitches as hostdevs."""
    from support.fixturegen import build_hgx_h100_host
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement
    # 32 GiB of free 2M pages on each node: each guest cell takes its own node's
    build_hgx_h100_host(str(tmp_path / "hgx"), hugepages={2048: (16384, 16384, 0)})
    topo = read_host_topology(str(tmp_path / "hgx"), with_irqs=False)
    tenant = plan_placement(topo, [{"name": "board", "gpus": 8, "vcpus": 32, "memory_gib": 64,
                                    "hugepage_size": "2M"}],
                            hugepage_check="free", nvswitch_model="full")["tenants"][0]
    env = Env(tmp_path, topology=topo)
    first = env.run(name="board", plan=tenant, firmware="efi")
    assert first["changed"]
    defined = env.domain("board").XMLDesc(0)
    from lxml import etree
    root = etree.fromstring(defined.encode())
    assert [(c.get("id"), c.get("cpus"), c.get("memory")) for c in root.iterfind("cpu/numa/cell")] == [
        ("0", "0-15", str(32 * 1024 * 1024)), ("1", "16-31", str(32 * 1024 * 1024))]
    assert [(m.get("cellid"), m.get("nodeset")) for m in root.iterfind("numatune/memnode")] == [
        ("0", "0"), ("1", "1")]
    sources = ["%s:%s" % (a.get("bus")[2:], a.get("slot")[2:])
               for a in root.iterfind("devices/hostdev/source/address")]
    assert sorted(sources) == sorted(["18:00", "2a:00", "3a:00", "5d:00", "9a:00", "ab:00", "ba:00",
                                      "db:00", "0b:00", "0c:00", "8b:00", "8c:00"])
    assert env.run(name="board", plan=tenant, firmware="efi")["changed"] is False


def test_a_guest_cell_pinned_off_its_gpus_node_is_refused(tmp_path):
    from support.fixturegen import build_hgx_h100_host
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement
    build_hgx_h100_host(str(tmp_path / "hgx"), hugepages={2048: (16384, 16384, 0)})
    topo = read_host_topology(str(tmp_path / "hgx"), with_irqs=False)
    tenant = plan_placement(topo, [{"name": "board", "gpus": 8, "vcpus": 32, "memory_gib": 64,
                                    "hugepage_size": "2M"}],
                            hugepage_check="free", nvswitch_model="full")["tenants"][0]
    # the cells' GPUs swapped: each cell's vCPUs and memory are now on the other node
    cells = tenant["guest_cells"]
    tenant = dict(tenant, guest_cells=[dict(cells[0], gpus=cells[1]["gpus"]),
                                       dict(cells[1], gpus=cells[0]["gpus"])])
    err = Env(tmp_path, topology=topo).fail(name="board", plan=tenant, firmware="efi")
    assert "guest cell 0's vCPU pins" in err.msg and "its GPUs on node 1" in err.msg
    assert err.field == "plan.vcpu_pins"


def test_each_guest_cell_needs_its_pages_on_its_own_node(tmp_path):
    """Node 0 holds more free pages than the whole tenant needs, node 1 none: the cell
    backed by node 1 is refused, naming that node (the total would have passed)."""
    from support.fixturegen import build_hgx_h100_host
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import HugepagePool, read_host_topology
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement
    build_hgx_h100_host(str(tmp_path / "hgx"))
    topo = read_host_topology(str(tmp_path / "hgx"), with_irqs=False)
    tenant = plan_placement(topo, [{"name": "board", "gpus": 8, "vcpus": 32, "memory_gib": 64,
                                    "hugepage_size": "2M"}],
                            hugepage_check="none", nvswitch_model="full")["tenants"][0]
    topo.nodes[0].hugepages[2048] = HugepagePool(2048, nr=40000, free=40000)
    topo.nodes[1].hugepages[2048] = HugepagePool(2048, nr=0, free=0)
    err = Env(tmp_path, topology=topo).fail(name="board", plan=tenant, firmware="efi")
    assert "needs 16384 pages of 2M on node 1, but only 0 are free" in err.msg
    assert "on node 0," not in err.msg
