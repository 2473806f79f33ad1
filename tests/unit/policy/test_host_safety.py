# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which devices the host depends on: storage, network, console, open users."""

import json

import pytest

from support.sysfs_sim import TreeBuilder, build_sim_host

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import critical as host_critical
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import safety_context
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy import host_safety
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import read_pci_functions
from support.domain_xml import write_libvirt_test_node


@pytest.fixture
def root(tmp_path):
    return build_sim_host(str(tmp_path))


def test_root_filesystem_found_through_partition(root):
    critical = host_critical.read_host_critical(root, read_pci_functions(root))
    # The NVMe controller and the root port above it (build_sim_host).
    assert critical.root_fs == {"0000:00:01.0": ["/", "/boot/efi"],
                                "0000:01:00.0": ["/", "/boot/efi"]}


def test_dm_slaves_lead_to_the_controller(root):
    tree = TreeBuilder(root)
    tree.write("/sys/devices/virtual/block/dm-0/dev", "253:0\n")
    tree.link("/sys/devices/virtual/block/dm-0/slaves/nvme0n1p2",
              "/sys/class/block/nvme0n1p2")
    tree.link("/sys/dev/block/253:0", "/sys/devices/virtual/block/dm-0")
    assert host_critical.block_device_pci(root, host_critical._realpath(
        root, "/sys/dev/block/253:0")) == {"0000:01:00.0"}


def test_proc_mounts_fallback_uses_dev_name(root, tmp_path):
    import os
    os.unlink(os.path.join(root, "proc/self/mountinfo"))
    TreeBuilder(root).write("/proc/mounts", "/dev/nvme0n1p2 / ext4 rw 0 0\n")
    assert host_critical.storage_devices(root) == {"0000:00:01.0": ["/"], "0000:01:00.0": ["/"]}


def test_default_route_nic(root):
    assert host_critical.default_route_interfaces(root) == {"eno1"}
    critical = host_critical.read_host_critical(root)
    assert "0000:03:00.0" in critical.network
    assert "0000:44:00.0" not in critical.network


def test_ipv6_default_route(root):
    TreeBuilder(root).write(
        "/proc/net/ipv6_route",
        "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
        "fe800000000000000000000000000001 00000400 00000001 00000000 00000003 ens2\n")
    assert host_critical.default_route_interfaces(root) == {"eno1", "ens2"}


def test_ssh_nic_from_connected_route(root):
    # 172.16.0.0/16 is on ens2 (build_sim_host), the SSH server address is 172.16.3.4
    names = host_critical.ssh_interfaces(root, "10.9.9.9 50000 172.16.3.4 22")
    assert names == {"ens2"}
    critical = host_critical.read_host_critical(root, ssh_connection="10.9.9.9 50000 172.16.3.4 22")
    assert any("SSH" in why for why in critical.network["0000:44:00.0"])


def test_ssh_nic_from_ip_json(root):
    ip_json = json.dumps([{"ifname": "lo", "addr_info": [{"local": "127.0.0.1"}]},
                          {"ifname": "ens2", "addr_info": [{"local": "fd00::5"}]}])
    assert host_critical.ssh_interfaces(root, "fd00::1 5 fd00::5 22", ip_json) == {"ens2"}


def test_boot_vga_console_needs_both_bound_console_and_boot_vga(root):
    functions = read_pci_functions(root)
    assert list(host_critical.console_vga(root, functions)) == ["0000:42:00.0"]
    TreeBuilder(root).write("/sys/class/vtconsole/vtcon1/bind", "0\n")
    assert host_critical.console_vga(root, functions) == {}


def test_firmware_framebuffer_counts_for_boot_vga(tmp_path):
    root = str(tmp_path)
    tree = TreeBuilder(root).cpus()
    tree.pci("0000:00:02.0", 0x030000, vendor=0x8086, driver="i915", boot_vga=True,
             iommu_group=0)
    tree.console(fb_name="EFI VGA")
    reasons = host_critical.console_vga(root, read_pci_functions(root))
    assert "firmware framebuffer" in reasons["0000:00:02.0"]


def test_open_users_of_drm_nodes(root):
    tree = TreeBuilder(root)
    tree.write("/sys/bus/pci/devices/0000:41:00.0/drm/card1/dev", "226:1\n")
    tree.write("/sys/bus/pci/devices/0000:41:00.0/drm/renderD129/dev", "226:129\n")
    tree.open_fd(4242, 7, "/dev/dri/renderD129", comm="Xorg")
    tree.open_fd(4243, 3, "/dev/null")
    nodes = host_critical.device_nodes(root, "0000:41:00.0")
    assert nodes == ["/dev/dri/card1", "/dev/dri/renderD129"]
    assert host_critical.open_users(root, nodes) == {4242: ("Xorg", ["/dev/dri/renderD129"])}


def test_nvidia_minor_node(root):
    TreeBuilder(root).write("/proc/driver/nvidia/gpus/0000:41:00.0/information",
                            "Model: A100\nDevice Minor: 3\n")
    assert "/dev/nvidia3" in host_critical.device_nodes(root, "0000:41:00.0")


def test_running_domain_devices_from_libvirt_test_driver(tmp_path):
    uri = write_libvirt_test_node(tmp_path, "0000:41:00.0")
    assert host_critical.running_domain_devices(uri) == {"0000:41:00.0": ["tenant-a"]}


# -- the root filesystem's whole chain, and VFs carrying the host -----------------------

def vmd_host(root, nested=True):
    """/ on an NVMe drive in PCI domain 10000, which the VMD endpoint 0000:00:0e.0 owns.

    ``nested``: the kernel's layout, the domain's root bus inside the endpoint's
    directory. Otherwise the domain hangs under /sys/devices and only the endpoint's
    pci10000:00 entry tells who owns it.
    """
    tree = TreeBuilder(root).cpus()
    tree.iommu()
    tree.pci("0000:00:0e.0", 0x010400, vendor=0x8086, device=0x9a0b, driver="vmd",
             iommu_group=3)
    bus_dir = tree.pci_domain("0000:00:0e.0")
    if not nested:
        bus_dir = "/sys/devices/pci10000:00"
    tree.pci("10000:00:02.0", 0x060400, vendor=0x8086, device=0x9a09, driver="pcieport",
             iommu_group=3, bus_dir=bus_dir)
    tree.pci("10000:01:00.0", 0x010802, vendor=0x144d, device=0xa80a, driver="nvme",
             iommu_group=3, parent="10000:00:02.0")
    tree.block("nvme0n1", "10000:01:00.0", "259:0", partitions=(("nvme0n1p2", "259:2"),))
    tree.mount("/", "/dev/nvme0n1p2", "259:2")
    return root


@pytest.mark.parametrize("nested", [True, False], ids=["kernel-layout", "flat-domain"])
def test_vmd_endpoint_owning_the_root_disk_domain_holds_the_root_filesystem(tmp_path, nested):
    root = vmd_host(str(tmp_path), nested)
    critical = host_critical.read_host_critical(root, read_pci_functions(root))
    assert critical.root_fs == {"0000:00:0e.0": ["/"], "10000:00:02.0": ["/"],
                                "10000:01:00.0": ["/"]}


def test_domain_owners_are_read_from_the_root_bus_entry(tmp_path):
    root = vmd_host(str(tmp_path))
    assert host_critical.pci_domain_owners(root) == {0x10000: "0000:00:0e.0"}


def vf_with_netdev(root, vf="0000:03:00.2", netdev="eno1v0"):
    """Two VFs on eno1's PF (build_sim_host), the first with a netdev of its own."""
    from support.sysfs_sim import SimulatedKernel
    kernel = SimulatedKernel(root, vf_drivers={"0000:03:00.0": "mlx5_core"})
    kernel.write("/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs", "2")
    TreeBuilder(root).netdev(vf, netdev)
    return kernel


def only_default_route(root, ifname):
    import os
    os.unlink(os.path.join(root, "proc/net/route"))
    TreeBuilder(root).route(ifname)


def test_pf_of_the_vf_carrying_the_default_route_is_critical_too(root):
    vf_with_netdev(root)
    only_default_route(root, "eno1v0")
    critical = host_critical.read_host_critical(root)
    assert critical.network["0000:03:00.2"] == ["the default route (eno1v0)"]
    assert critical.network["0000:03:00.0"] == [
        "the default route (eno1v0) through its VF 0000:03:00.2"]


def test_vf_under_a_bond_that_carries_the_ssh_session_is_critical(root):
    vf_with_netdev(root)
    tree = TreeBuilder(root)
    tree.write("/sys/devices/virtual/net/bond0/lower_eno1v0/ifindex", "2\n")
    tree.link("/sys/class/net/bond0", "/sys/devices/virtual/net/bond0")
    ip_json = json.dumps([{"ifname": "bond0", "addr_info": [{"local": "10.0.0.5"}]}])
    critical = host_critical.read_host_critical(root, ssh_connection="10.0.0.9 5 10.0.0.5 22",
                                                ip_addr_json=ip_json)
    assert critical.network["0000:03:00.2"] == ["the current SSH connection (bond0)"]


def test_vf_count_change_refused_when_it_destroys_the_default_route_vf(root):
    vf_with_netdev(root)
    only_default_route(root, "eno1v0")
    context = safety_context.read_context(root)
    with pytest.raises(GpuhostError) as err:
        host_safety.check_vf_count_change(context, "0000:03:00.0",
                                          ["0000:03:00.2", "0000:03:00.3"], 0, {})
    assert err.value.field == "allow_host_critical"
    assert ("refusing to change the VF count of 0000:03:00.0 from 2 to 0 (the kernel "
            "removes every VF first): 0000:03:00.2 is the NIC of the default route "
            "(eno1v0): changing the VF count destroys it, and the host loses that "
            "connection (set allow_host_critical: true to override)") == err.value.msg
    assert "keep num_vfs at 2" in err.value.fix
    host_safety.check_vf_count_change(context, "0000:03:00.0",
                                      ["0000:03:00.2", "0000:03:00.3"], 0,
                                      {"allow_host_critical": True})


def test_host_refusals_are_vfio_binds_policy_with_its_overrides(root):
    context = safety_context.read_context(root)
    blocking, allowed = host_safety.host_refusals(
        context, ["0000:01:00.0", "0000:03:00.0", "0000:42:00.0", "0000:00:04.0",
                  "0000:41:00.0", "0000:99:00.0"], {"allow_boot_vga": True},
        host_safety.PASS_THROUGH)
    assert [(r.address, r.override) for r in blocking] == [
        ("0000:01:00.0", None), ("0000:03:00.0", "allow_host_critical"),
        ("0000:00:04.0", None)]
    assert [(r.address, r.override) for r in allowed] == [("0000:42:00.0", "allow_boot_vga")]
    assert host_safety.refusal_fix(blocking, "hostdevs") == (
        "remove the device(s) marked 'no override' from hostdevs; for the others set "
        "allow_host_critical only if you accept the risk")
