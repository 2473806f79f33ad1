# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vfio_bind against the sysfs simulator: binding, giving back, persistence, rollback
and every refusal (each proving that the tree did not change)."""

import json
import os
import shutil

import pytest

from support.sysfs_sim import SimulatedKernel, TreeBuilder, build_sim_host, run_module, snapshot
from support.domain_xml import write_libvirt_test_node

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.safety_context import read_context
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.vfio_bind import (
    plan_vfio, select_devices)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import read_pci_functions
from ansible_collections.gpuhost.kvm.plugins.modules import vfio_bind

GPU, HDA = "0000:41:00.0", "0000:41:00.1"


@pytest.fixture
def sim(tmp_path):
    return SimulatedKernel(build_sim_host(str(tmp_path / "host")))


def _binary(sim, host_path):
    os.makedirs(os.path.dirname(sim.path(host_path)), exist_ok=True)
    with open(sim.path(host_path), "w", encoding="utf-8") as handle:
        handle.write("")


def _dracut_binary(sim):
    _binary(sim, "/usr/bin/dracut")


def bind(sim, check_mode=False, **args):
    args.setdefault("root", sim.root)
    return run_module(vfio_bind, "VfioBinder", args, sim, check_mode=check_mode)


def refused(sim, **args):
    """Run a bind that must be refused; assert the tree is untouched; return the error."""
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        bind(sim, **args)
    assert snapshot(sim.root) == before
    return info.value


def test_bind_gpu_with_hda_then_idempotent(sim):
    result = bind(sim, devices=[GPU]).result
    assert result["changed"] is True
    by_addr = {d["address"]: d for d in result["devices"]}
    assert by_addr[GPU] == {"address": GPU, "driver_before": "nvidia", "driver_after": "vfio-pci",
                            "iommu_group": 2, "vfio_dev": "/dev/vfio/2", "companions": [HDA],
                            "changed": True, "gpu_selected_by": "class 0x0302"}
    assert by_addr[HDA]["driver_before"] == "snd_hda_intel"
    assert by_addr[HDA]["gpu_selected_by"] is None
    assert sim.driver_of(GPU) == sim.driver_of(HDA) == "vfio-pci"
    assert sim.read("/sys/bus/pci/devices/%s/driver_override" % GPU) == "vfio-pci"
    state = json.loads(sim.read_file("/var/lib/gpuhost/vfio-bind.json"))
    assert state["devices"] == {GPU: {"driver": "nvidia"}, HDA: {"driver": "snd_hda_intel"}}
    again = bind(sim, devices=[GPU]).result
    assert again["changed"] is False
    assert again["steps"] == []


def test_without_companions_only_the_gpu_moves(sim):
    bind(sim, devices=[GPU], with_companions=False)
    assert sim.driver_of(GPU) == "vfio-pci"
    assert sim.driver_of(HDA) == "snd_hda_intel"


def test_check_mode_reports_and_changes_nothing(sim):
    before = snapshot(sim.root)
    worker = bind(sim, check_mode=True, devices=[GPU], persistent=True)
    result = worker.result
    assert snapshot(sim.root) == before
    assert result["changed"] is True
    assert result["devices"][0]["driver_after"] == "vfio-pci"
    kernel = result["diff"][0]
    assert "/sys/bus/pci/devices/0000:41:00.0/driver_override = (null)\n" in kernel["before"]
    assert "/sys/bus/pci/devices/0000:41:00.0/driver = nvidia\n" in kernel["before"]
    assert "/sys/bus/pci/devices/0000:41:00.0/driver_override = vfio-pci" in kernel["after"]
    files = {d["after_header"]: d for d in result["diff"][1:]}
    assert 'KERNEL=="0000:41:00.0"' in files[
        "/etc/udev/rules.d/61-gpuhost-vfio-0000:41:00.0.rules"]["after"]
    assert sim.writes == []


def test_unbound_gives_back_the_remembered_driver(sim):
    bind(sim, devices=[GPU])
    result = bind(sim, devices=[GPU], state="unbound").result
    assert result["changed"] is True
    assert sim.driver_of(GPU) == "nvidia"
    assert sim.driver_of(HDA) == "snd_hda_intel"
    assert sim.read("/sys/bus/pci/devices/%s/driver_override" % GPU) == "(null)"
    assert json.loads(sim.read_file("/var/lib/gpuhost/vfio-bind.json"))["devices"] == {}
    assert not os.path.exists(sim.path("/dev/vfio/2"))
    assert bind(sim, devices=[GPU], state="unbound").result["changed"] is False


def test_unbound_without_memory_lets_the_kernel_probe(sim):
    bind(sim, devices=[GPU])
    os.unlink(sim.path("/var/lib/gpuhost/vfio-bind.json"))
    bind(sim, devices=[GPU], state="unbound")
    assert ("/sys/bus/pci/drivers_probe", GPU) in sim.writes
    assert sim.driver_of(GPU) == "nvidia"      # the simulator's modalias match


def test_match_selects_by_vendor_and_class(sim):
    result = bind(sim, check_mode=True, match={"vendor": "10de", "class": "0302"}).result
    assert [d["address"] for d in result["devices"]] == [GPU, HDA]


def test_persistent_udev_rule_and_modules_load_and_the_files_for_dracut(sim):
    os.makedirs(sim.path("/etc/dracut.conf.d"))
    _dracut_binary(sim)   # auto asks the mechanism detector: binary and dracut.conf.d
    result = bind(sim, devices=[GPU], persistent=True).result
    assert result["persistence"] == "udev"
    assert result["initramfs_rebuild_required"] is True
    rule = sim.read_file("/etc/udev/rules.d/61-gpuhost-vfio-0000:41:00.0.rules")
    # The override, then a probe: vfio-pci loaded before udev ran (dracut's rd.driver.pre)
    # looks at the device only when asked.
    assert ('ACTION=="add", SUBSYSTEM=="pci", KERNEL=="0000:41:00.0", '
            'ATTR{driver_override}="vfio-pci", '
            'RUN+="/bin/sh -c \'echo $kernel > /sys/bus/pci/drivers_probe\'"\n') in rule
    assert sim.read_file("/etc/modules-load.d/gpuhost-vfio.conf").endswith(
        "vfio\nvfio_iommu_type1\nvfio_pci\n")
    # The initramfs module owns dracut's configuration: vfio_bind only names the files.
    assert os.listdir(sim.path("/etc/dracut.conf.d")) == []
    assert result["initramfs_files"] == ["/etc/udev/rules.d/61-gpuhost-vfio-0000:41:00.0.rules",
                                         "/etc/udev/rules.d/61-gpuhost-vfio-0000:41:00.1.rules"]
    again = bind(sim, devices=[GPU], persistent=True).result
    assert again["changed"] is False and again["initramfs_files"] == result["initramfs_files"]
    unbound = bind(sim, devices=[GPU], persistent=True, state="unbound").result
    assert not os.path.exists(sim.path("/etc/udev/rules.d/61-gpuhost-vfio-0000:41:00.0.rules"))
    # Giving the devices back takes their rules out of the image's list as well.
    assert unbound["initramfs_files"] == [] and unbound["initramfs_rebuild_required"] is True


def test_persistent_driverctl_files_when_driverctl_is_installed(sim):
    TreeBuilder(sim.root).write("/usr/sbin/driverctl", "#!/bin/bash\n")
    os.makedirs(sim.path("/etc/initramfs-tools"))
    _binary(sim, "/usr/sbin/update-initramfs")   # the detector wants the tool too
    TreeBuilder(sim.root).write("/etc/initramfs-tools/modules", "# keep me\nbtrfs\n")
    result = bind(sim, devices=[GPU], persistent=True).result
    assert result["persistence"] == "driverctl"
    # driverctl's own format: /etc/driverctl.d/<bus>-<device> holding the driver name
    assert sim.read_file("/etc/driverctl.d/pci-0000:41:00.0") == "vfio-pci\n"
    assert sim.read_file("/etc/driverctl.d/pci-0000:41:00.1") == "vfio-pci\n"
    driverctl_rule = sim.read_file("/etc/udev/rules.d/61-gpuhost-vfio-driverctl.rules")
    assert "TEST==\"/etc/driverctl.d/pci-$kernel\"" in driverctl_rule
    assert driverctl_rule.endswith(
        'ATTR{driver_override}="vfio-pci", RUN+="/bin/sh -c \'echo $kernel > /sys/bus/pci/drivers_probe\'"\n')
    # initramfs-tools' modules file is the initramfs module's (the iommu role's block).
    assert sim.read_file("/etc/initramfs-tools/modules") == "# keep me\nbtrfs\n"
    assert result["initramfs_rebuild_required"] is False and result["initramfs_files"] == []
    bind(sim, devices=[GPU], persistent=True, state="unbound")
    assert not os.path.exists(sim.path("/etc/driverctl.d/pci-0000:41:00.0"))


def test_dracut_files_cover_every_bound_device_not_only_this_runs(sim):
    # Two runs bind one function each: the second run's list still holds the first's,
    # so the initramfs module never drops a device bound earlier from the image.
    TreeBuilder(sim.root).write("/usr/sbin/driverctl", "#!/bin/bash\n")
    os.makedirs(sim.path("/etc/dracut.conf.d"))
    _dracut_binary(sim)   # auto asks the mechanism detector: binary and dracut.conf.d
    first = bind(sim, devices=[GPU], with_companions=False, persistent=True).result
    assert first["initramfs_files"] == ["/bin/cat", "/etc/driverctl.d/pci-0000:41:00.0",
                                        "/etc/udev/rules.d/61-gpuhost-vfio-driverctl.rules"]
    second = bind(sim, devices=[HDA], with_companions=False, persistent=True).result
    assert second["initramfs_files"] == ["/bin/cat", "/etc/driverctl.d/pci-0000:41:00.0",
                                         "/etc/driverctl.d/pci-0000:41:00.1",
                                         "/etc/udev/rules.d/61-gpuhost-vfio-driverctl.rules"]
    assert second["initramfs_rebuild_required"] is True
    # A driverctl override to another driver is not vfio_bind's and stays out.
    TreeBuilder(sim.root).write("/etc/driverctl.d/pci-0000:41:00.3", "igb\n")
    assert "/etc/driverctl.d/pci-0000:41:00.3" not in bind(
        sim, devices=[GPU], persistent=True, check_mode=True).result["initramfs_files"]


def test_initramfs_tools_needs_no_rebuild_for_the_binding(sim):
    # The iommu role's block put the vfio modules into initramfs-tools' modules file and
    # rebuilt before its reboot: driverctl files, udev rules and modules-load.d are not in
    # an initramfs-tools image, so the binding written after the reboot needs no second
    # rebuild (one rebuild per converge).
    TreeBuilder(sim.root).write("/usr/sbin/driverctl", "#!/bin/bash\n")
    TreeBuilder(sim.root).write("/etc/initramfs-tools/modules",
                                "# BEGIN gpuhost\nvfio\nvfio_iommu_type1\nvfio_pci\n# END gpuhost\n")
    result = bind(sim, devices=[GPU], persistent=True).result
    assert result["changed"] is True
    assert sim.read_file("/etc/driverctl.d/pci-0000:41:00.0") == "vfio-pci\n"
    assert result["initramfs_rebuild_required"] is False
    # dracut builds the driverctl files and rules into the image: there they need one
    unbound = bind(sim, devices=[GPU], persistent=True, state="unbound").result
    assert unbound["initramfs_rebuild_required"] is False
    os.makedirs(sim.path("/etc/dracut.conf.d"))
    _dracut_binary(sim)   # auto asks the mechanism detector: binary and dracut.conf.d
    assert bind(sim, devices=[GPU], persistent=True, initramfs="dracut").result[
        "initramfs_rebuild_required"] is True


def test_failed_bind_rolls_back_everything(sim):
    # vfio-pci not loaded and modprobe skipped (test root): the probe leaves the GPU
    # unbound, the module notices, and every applied step is undone.
    shutil.rmtree(sim.path("/sys/bus/pci/drivers/vfio-pci"))
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        bind(sim, devices=[GPU], persistent=True)
    assert snapshot(sim.root) == before
    assert sim.driver_of(GPU) == "nvidia"
    assert "vfio-pci did not claim 0000:41:00.0" in info.value.message
    assert info.value.details["failed_step"] == "probe 0000:41:00.0 (binds vfio-pci)"
    assert info.value.details["rolled_back"] == ["set 0000:41:00.0 driver_override to vfio-pci"]
    assert info.value.details["rollback_failed"] == []


def test_skipped_modprobe_is_reported(sim):
    shutil.rmtree(sim.path("/sys/bus/pci/drivers/vfio-pci"))
    worker = bind(sim, check_mode=True, devices=[GPU])
    assert worker.result["skipped_actions"][-1] == "modprobe vfio-pci (root is not /)"


# -- refusals, each leaving the tree as it was ----------------------------------------

def test_refuses_dirty_group_unless_allowed(sim):
    err = refused(sim, devices=["0000:02:01.0"])
    assert err.field == "allow_dirty_group"
    assert "0000:02:02.0" in err.message and "USB controller" in err.message
    bind(sim, devices=["0000:02:01.0"], allow_dirty_group=True)
    assert sim.driver_of("0000:02:01.0") == "vfio-pci"


def test_refuses_boot_vga_with_console_unless_allowed(sim):
    err = refused(sim, devices=["0000:42:00.0"])
    assert err.field == "allow_boot_vga"
    assert "active console" in err.message
    bind(sim, devices=["0000:42:00.0"], allow_boot_vga=True)
    assert sim.driver_of("0000:42:00.0") == "vfio-pci"


def test_refuses_root_filesystem_device_always(sim):
    err = refused(sim, devices=["0000:01:00.0"], allow_host_critical=True, allow_dirty_group=True,
                  allow_boot_vga=True, allow_in_use=True)
    assert "root filesystem" in err.message
    assert err.details["refusals"][0]["override"] is None


def test_refuses_data_disk_unless_host_critical_allowed(sim):
    tree = TreeBuilder(sim.root)
    tree.pci("0000:00:07.0", 0x060400, vendor=0x8086, driver="pcieport", iommu_group=20)
    tree.pci("0000:05:00.0", 0x010802, vendor=0x144d, device=0xa808, driver="nvme",
             iommu_group=21, parent="0000:00:07.0")
    tree.block("nvme1n1", "0000:05:00.0", "259:5")
    tree.mount("/data", "/dev/nvme1n1", "259:5")
    sim.native_drivers["0000:05:00.0"] = "nvme"
    err = refused(sim, devices=["0000:05:00.0"])
    assert err.field == "allow_host_critical" and "/data" in err.message
    bind(sim, devices=["0000:05:00.0"], allow_host_critical=True)
    assert sim.driver_of("0000:05:00.0") == "vfio-pci"


def test_refuses_default_route_nic(sim):
    err = refused(sim, devices=["0000:03:00.0"])
    assert err.field == "allow_host_critical" and "default route" in err.message


def test_refuses_ssh_nic_core(sim):
    functions = read_pci_functions(sim.root)
    context = read_context(sim.root, functions, ssh_connection="10.1.1.1 40000 172.16.0.9 22")
    selected, companions = select_devices(functions, ["0000:44:00.0"])
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        plan_vfio(sim, context, selected, companions)
    assert snapshot(sim.root) == before
    assert "SSH connection (ens2)" in info.value.message
    assert info.value.field == "allow_host_critical"


def test_refuses_gpu_with_open_users_unless_allowed(sim):
    tree = TreeBuilder(sim.root)
    tree.write("/sys/bus/pci/devices/%s/drm/renderD128/dev" % GPU, "226:128\n")
    tree.open_fd(777, 12, "/dev/dri/renderD128", comm="tritonserver")
    err = refused(sim, devices=[GPU])
    assert err.field == "allow_in_use"
    assert "pid 777 (tritonserver)" in err.message
    bind(sim, devices=[GPU], allow_in_use=True)
    assert sim.driver_of(GPU) == "vfio-pci"


def test_refuses_bridge_always(sim):
    err = refused(sim, devices=["0000:00:02.0"], allow_dirty_group=True)
    assert "PCI bridge" in err.message and err.details["refusals"][0]["override"] is None


def test_refuses_device_of_running_domain(sim, tmp_path):
    uri = write_libvirt_test_node(tmp_path, GPU)
    err = refused(sim, devices=[GPU], libvirt_uri=uri)
    assert err.field == "allow_attached_to_running_domain" and "tenant-a" in err.message
    bind(sim, devices=[GPU], libvirt_uri=uri, allow_attached_to_running_domain=True)


def test_refuses_unbinding_a_device_a_running_domain_holds(sim, tmp_path):
    bind(sim, devices=[GPU])
    uri = write_libvirt_test_node(tmp_path, GPU)
    err = refused(sim, devices=[GPU], state="unbound", libvirt_uri=uri)
    assert err.field == "allow_attached_to_running_domain"


def test_refuses_when_iommu_is_off(sim):
    shutil.rmtree(sim.path("/sys/kernel/iommu_groups"))
    os.makedirs(sim.path("/sys/kernel/iommu_groups"))
    err = refused(sim, devices=[GPU])
    assert "intel_iommu=on iommu=pt" in err.message and "amd_iommu=on" in err.message


def test_nonexistent_device_fails_and_changes_nothing(sim):
    err = refused(sim, devices=["0000:99:00.0"])
    assert err.field == "devices" and "no PCI function 0000:99:00.0" in err.message


def test_match_without_hits_fails(sim):
    err = refused(sim, match={"vendor": "1002"})
    assert err.field == "match"


def test_an_nvswitch_of_a_whole_board_goes_to_vfio_pci_like_a_gpu(tmp_path):
    """The full-passthrough model binds the board's NVSwitches (class 0x0680, NVIDIA): an
    NVSwitch has no bus behind it, so the bridge refusal (above) does not stand in its way.
    On the HGX fake from published lspci IDs; no NVSwitch or nvidia-nvswitch runs here."""
    from support.fixturegen import build_hgx_h100_host
    root = str(tmp_path / "hgx")
    build_hgx_h100_host(root)
    TreeBuilder(root).driver("vfio-pci")
    result = bind(SimulatedKernel(root), root=root, devices=["0000:0b:00.0", "0000:18:00.0"]).result
    assert [(d["address"], d["driver_before"], d["driver_after"]) for d in result["devices"]] == [
        ("0000:0b:00.0", "nvidia-nvswitch", "vfio-pci"), ("0000:18:00.0", "nvidia", "vfio-pci")]
