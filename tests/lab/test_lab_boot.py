"""The lab itself, read from the booted guest's kernel: it boots, its first boot has no
IOMMU or hugepage arguments, and it has the runbook host's shape in miniature (2 NUMA
nodes with sibling pairs, two VGA+HDA "GPUs" on different nodes, an SR-IOV PF, a dirty
IOMMU group, PCIe switches with and without ACS, a "GPU" with a 64 GiB BAR), and the iommu role's kernel arguments take effect after a real reboot
through the image's GRUB, a reboot the role never makes without gpuhost_reboot_ok.

These tests run in file order: the first-boot checks come before anything reboots. The
iommu role's test, a role test with a reboot of its own, is marker "acceptance"
(tools/acceptance only); without it (tools/test) the module tests after this file read
the lab at its first boot, where Debian's kernel has turned the emulated VT-d on by
itself (translated groups, interrupt remapping on).
"""

import json
import os
import re

import pytest

from support import REPO

pytestmark = pytest.mark.lab

GPU_SLOTS = {"0000:21:00": 0, "0000:41:00": 1}      # "GPU" slot -> NUMA node
NVME_PF = "0000:22:00.0"
NIC_PF = "0000:23:00.0"       # igb (82576): the SR-IOV NIC whose VFs the tenants get
CONSOLE_VGA = "0000:00:01.0"
DIRTY_GROUP = ("0000:00:04.0", "0000:01:01.0", "0000:01:02.0")   # bridge, display, xHCI
# The PCIe switches (lab/up): behind an ACS root port on node 1, the large-BAR "GPU"
# and a small pci-testdev, each with its downstream port; behind a root port without
# ACS on node 0, the whole path in one group.
LARGE_BAR_GPU, SWITCH_DEV = "0000:44:00.0", "0000:45:00.0"
ACS_SWITCH_GROUPS = (("0000:43:00.0", LARGE_BAR_GPU), ("0000:43:01.0", SWITCH_DEV))
ACS_ROOT_PORT, NO_ACS_ROOT_PORT = "0000:40:01.0", "0000:20:03.0"
NO_ACS_GROUP = (NO_ACS_ROOT_PORT, "0000:24:00.0", "0000:25:00.0", "0000:25:01.0",
                "0000:26:00.0", "0000:27:00.0")   # root, upstream, 2 downstream ports, testdev, xHCI
LARGE_BAR_SIZE = 64 << 30
# Linux's IORESOURCE_* flags in sysfs ``resource`` (include/linux/ioport.h)
IORESOURCE_MEM, IORESOURCE_PREFETCH, IORESOURCE_MEM_64 = 0x200, 0x2000, 0x100000
PCI = "/sys/bus/pci/devices/"


def _attr(lab, address, name):
    return lab.read(PCI + address + "/" + name).strip()


def _group(lab, address):
    return int(lab.ssh("basename $(readlink %s%s/iommu_group)" % (PCI, address)).stdout)


def test_lab_boots_and_answers_ssh(lab):
    assert lab.read("/etc/hostname").strip() == "hk-gpu-01"
    assert re.match(r"^6\.1\.", lab.ssh("uname -r").stdout.strip())
    assert "hypervisor" in lab.read("/proc/cpuinfo")
    # the disk holding / is the virtio disk on the root bus, as vfio_bind must know it
    assert lab.ssh("findmnt -n -o SOURCE /").stdout.strip() == "/dev/vda1"
    assert "/0000:00:02.0/" in lab.ssh("readlink -f /sys/block/vda").stdout


def test_module_payloads_are_compiled_once_by_the_images_bytecode_cache(lab):
    # lab/image/gpuhost_lab_pyc_cache.py: the first ping fills the cache, the second one
    # compiles nothing (the same payload sources, served from the cache).
    cache = "/var/cache/gpuhost-lab/pyc"
    lab.ssh("rm -rf %s" % cache)
    for run in ("first", "second"):
        rc, result = lab.module("ansible.builtin.ping")
        assert rc == 0 and result.get("ping") == "pong", (run, result)
        # name and modification time: an entry compiled again would be written anew
        entries = set(lab.ssh("find %s -type f -printf '%%f %%T@\\n'" % cache).stdout.splitlines())
        if run == "first":
            filled = entries
    assert len(filled) >= 20 and entries == filled, sorted(entries ^ filled)


def test_first_boot_has_no_iommu_or_hugepage_arguments(lab):
    if lab.boot_count() != 1:
        lab.reset_to_first_boot()
    cmdline = lab.read("/proc/cmdline").split()
    assert "console=ttyS0,115200n8" in cmdline and "mitigations=off" in cmdline
    for arg in cmdline:
        assert not arg.startswith(("intel_iommu=", "iommu=", "hugepages", "hugepagesz",
                                   "default_hugepagesz")), arg
    assert lab.read("/proc/sys/vm/nr_hugepages").strip() == "0"


def test_two_numa_nodes_with_adjacent_sibling_pairs(lab):
    assert lab.read("/sys/devices/system/node/online").strip() == "0-1"
    assert lab.read("/sys/devices/system/node/node0/cpulist").strip() == "0-3"
    assert lab.read("/sys/devices/system/node/node1/cpulist").strip() == "4-7"
    assert lab.read("/sys/devices/system/node/node0/distance").split() == ["10", "20"]
    siblings = lab.ssh("cat /sys/devices/system/cpu/cpu[0-7]/topology/thread_siblings_list"
                       ).stdout.split()
    assert siblings == ["0-1", "0-1", "2-3", "2-3", "4-5", "4-5", "6-7", "6-7"]
    packages = lab.ssh("cat /sys/devices/system/cpu/cpu[0-7]/topology/physical_package_id"
                       ).stdout.split()
    assert packages == ["0", "0", "0", "0", "1", "1", "1", "1"]
    assert " pdpe1gb " in " %s " % lab.read("/proc/cpuinfo")   # 1 GiB pages possible
    for node in (0, 1):
        meminfo = lab.read("/sys/devices/system/node/node%d/meminfo" % node)
        total_kib = int(re.search(r"MemTotal:\s+(\d+) kB", meminfo).group(1))
        assert total_kib > 2 * 1024 * 1024, meminfo    # room for 1 GiB and 2 MiB pages


def test_two_vga_hda_gpus_on_different_nodes(lab):
    for slot, node in GPU_SLOTS.items():
        assert _attr(lab, slot + ".0", "class") == "0x030000"
        assert _attr(lab, slot + ".1", "class") == "0x040300"
        assert _attr(lab, slot + ".0", "numa_node") == str(node)
        assert _attr(lab, slot + ".1", "numa_node") == str(node)
        assert _attr(lab, slot + ".0", "boot_vga") == "0"
    # the BMC-like console VGA on the root bus is the boot VGA, not a "GPU"
    assert _attr(lab, CONSOLE_VGA, "boot_vga") == "1"


def test_nvme_pf_offers_four_vfs_on_the_first_gpus_node(lab):
    assert _attr(lab, NVME_PF, "class") == "0x010802"
    assert _attr(lab, NVME_PF, "sriov_totalvfs") == "4"
    assert _attr(lab, NVME_PF, "sriov_numvfs") == "0"
    assert _attr(lab, NVME_PF, "numa_node") == "0"


def test_igb_nic_pf_offers_seven_vfs_on_the_first_gpus_node_and_carries_no_route(lab):
    assert _attr(lab, NIC_PF, "class") == "0x020000"
    assert (_attr(lab, NIC_PF, "vendor"), _attr(lab, NIC_PF, "device")) == ("0x8086", "0x10c9")
    assert _attr(lab, NIC_PF, "sriov_totalvfs") == "7"
    assert _attr(lab, NIC_PF, "numa_node") == "0"
    assert os.path.basename(lab.ssh("readlink %s%s/driver" % (PCI, NIC_PF)).stdout.strip()) == "igb"
    netdev, = lab.listdir(PCI + NIC_PF + "/net")
    # the default route and SSH stay on the virtio NIC: the PF is the tenants' alone
    assert netdev not in lab.ssh("ip route show default").stdout
    assert lab.ssh("ip -o -4 addr show dev %s" % netdev).stdout.strip() == ""


def test_dirty_group_holds_display_usb_and_bridge(lab):
    groups = {_group(lab, address) for address in DIRTY_GROUP}
    assert len(groups) == 1
    members = lab.listdir("/sys/kernel/iommu_groups/%d/devices" % groups.pop())
    assert members == sorted(DIRTY_GROUP)
    # each "GPU" slot is alone in its group
    for slot in GPU_SLOTS:
        group = _group(lab, slot + ".0")
        assert lab.listdir("/sys/kernel/iommu_groups/%d/devices" % group) == [
            slot + ".0", slot + ".1"]


def test_switch_behind_acs_isolates_each_port_and_the_one_without_acs_groups_its_path(lab):
    # GPU servers put their GPUs behind PCIe switches: behind a root port with ACS, each
    # device shares its group only with its own downstream port (a bridge, which vfio
    # accepts); behind the root port without ACS, the kernel cannot keep the testdev's
    # DMA from the xHCI beside it and groups the whole path.
    for members in ACS_SWITCH_GROUPS:
        group = _group(lab, members[-1])
        assert lab.listdir("/sys/kernel/iommu_groups/%d/devices" % group) == list(members)
    group = _group(lab, NO_ACS_ROOT_PORT)
    assert lab.listdir("/sys/kernel/iommu_groups/%d/devices" % group) == list(NO_ACS_GROUP)
    acs = {port: "Access Control Services" in lab.ssh("lspci -vvv -s %s" % port).stdout
           for port in (ACS_ROOT_PORT, NO_ACS_ROOT_PORT)}
    assert acs == {ACS_ROOT_PORT: True, NO_ACS_ROOT_PORT: False}, acs
    for address, kind in ((LARGE_BAR_GPU, "0x1b36 0x0005"), ("0000:27:00.0", "0x1b36 0x000d")):
        assert "%s %s" % (_attr(lab, address, "vendor"), _attr(lab, address, "device")) == kind


def test_large_bar_gpu_gets_its_64_gib_bar_from_the_labs_own_firmware_and_kernel(lab):
    # The lab's SeaBIOS at the lab's 40-bit width places the 64-bit window; the lab's
    # kernel keeps the 64 GiB BAR there (lab/up says why the width is 40).
    assert "address sizes\t: 40 bits physical" in lab.read("/proc/cpuinfo")
    start, end, flags = (int(field, 16) for field in
                         lab.read(PCI + LARGE_BAR_GPU + "/resource").splitlines()[2].split())
    wanted = IORESOURCE_MEM | IORESOURCE_PREFETCH | IORESOURCE_MEM_64
    assert start and end - start + 1 == LARGE_BAR_SIZE and flags & wanted == wanted, \
        (hex(start), hex(end), hex(flags))
    assert start % LARGE_BAR_SIZE == 0, hex(start)
    log = lab.ssh("journalctl -k -b -q --no-pager -o cat | grep -F %s || true" % LARGE_BAR_GPU).stdout
    assert not re.search(r"BAR 2 .*(can't assign|failed to assign|can't claim)", log), log
    assert _attr(lab, LARGE_BAR_GPU, "numa_node") == "1"


def test_writing_sriov_numvfs_creates_vfs_in_their_own_groups(lab):
    lab.ssh("echo 2 > %s%s/sriov_numvfs && udevadm settle" % (PCI, NVME_PF))
    try:
        vfs = [lab.ssh("basename $(readlink %s%s/virtfn%d)" % (PCI, NVME_PF, n)).stdout.strip()
               for n in (0, 1)]
        assert vfs == ["0000:22:00.1", "0000:22:00.2"]
        for vf in vfs:
            assert lab.ssh("basename $(readlink %s%s/physfn)" % (PCI, vf)).stdout.strip() == NVME_PF
            group = _group(lab, vf)
            assert lab.listdir("/sys/kernel/iommu_groups/%d/devices" % group) == [vf]
    finally:
        lab.ssh("echo 0 > %s%s/sriov_numvfs" % (PCI, NVME_PF))
    assert not lab.ssh("test -e %s0000:22:00.1" % PCI, check=False).returncode == 0


@pytest.mark.acceptance
def test_iommu_role_never_reboots_without_reboot_ok_and_its_arguments_apply_after_reboot(lab):
    """Never reboots unless gpuhost_reboot_ok, on the real kernel: site.yml's
    iommu stage with gpuhost_reboot_ok=false writes the arguments (GRUB, initramfs) and
    says the host must reboot, and the kernel keeps running the same boot. The reboot
    that follows (by hand, as the SRE would) makes /proc/cmdline carry them, which is
    what every role relies on. Leaves the lab with the IOMMU on in passthrough mode."""
    boot_id = lab.read("/proc/sys/kernel/random/boot_id").strip()
    cmdline_before = lab.read("/proc/cmdline")
    proc = lab.playbook(os.path.join(REPO, "site.yml"), "--tags", "iommu",
                        "-e", "gpuhost_reboot_ok=false", timeout=1800)
    printed = " ".join(proc.stdout.split())
    assert "gpuhost_reboot_required: True" in printed, proc.stdout[-4000:]
    assert "Reboot the host (or set gpuhost_reboot_ok: true)" in printed
    assert lab.read("/proc/sys/kernel/random/boot_id").strip() == boot_id, \
        "the iommu role rebooted the lab although gpuhost_reboot_ok is false"
    assert lab.read("/proc/cmdline") == cmdline_before
    grub = lab.ssh("cat /etc/default/grub /etc/default/grub.d/*.cfg 2>/dev/null", check=False).stdout
    assert "intel_iommu=on" in grub and "iommu=pt" in grub, grub
    lab.reboot()
    cmdline = lab.read("/proc/cmdline").split()
    assert "intel_iommu=on" in cmdline and "iommu=pt" in cmdline
    assert "kvm.ignore_msrs=1" in cmdline
    # The image's own arguments are the operator's: the role's drop-in keeps them.
    assert "console=ttyS0,115200n8" in cmdline and "mitigations=off" in cmdline
    # passthrough default domains: every group's type is identity
    types = set(lab.ssh("cat /sys/kernel/iommu_groups/*/type").stdout.split())
    assert types == {"identity"}
    _assert_1g_pages_reserved_per_node_at_boot(lab, cmdline)


# A domain with no passthrough device and no disk: TCG, 64 MiB, SeaBIOS finds nothing
# to boot, so no OS acts on an ACPI shutdown request, and a drain meets its timeout.
DRAIN_DOMAIN = "gpuhost-drain-proof"
DRAIN_DOMAIN_XML = """<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64'>hvm</type></os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <devices><serial type='pty'/><console type='pty'/></devices>
</domain>
""" % DRAIN_DOMAIN
# The argument that makes a reboot necessary: one the kernel does not know, which it
# hands to init as an environment variable (harmless), named after the boot it was
# added in, so that it is new on a lab this test ran on before (GPUHOST_LAB_KEEP=1).
DRAIN_EXTRA_ARG = "gpuhost_drain_proof=%s"


def _domstate(lab):
    return lab.ssh("virsh -c qemu:///system domstate %s" % DRAIN_DOMAIN, check=False).stdout.strip()


@pytest.mark.acceptance
def test_iommu_reboot_is_refused_while_a_domain_runs_and_drains_it_with_gpuhost_drain(lab):
    """On the lab: a reboot needed while a domain runs is refused, the
    refusal naming the domain, unless a drain is asked for; the drain shuts it down with
    a timeout and an explicit decision when it expires (on_timeout destroy: the domain
    boots no OS, so it never acts on the ACPI request), reboots, and starts it again.

    site.yml's iommu stage with gpuhost_reboot_ok=true and one more kernel argument, so
    that a reboot is required. Without gpuhost_drain the play fails before the reboot:
    same boot, the domain still running. With gpuhost_drain=true (15 s, destroy) the lab
    reboots, the argument is active, the domain runs again and the drain record is empty.
    The domain is removed at the end; the argument stays on the command line (harmless;
    the later tests of the lane only look for the iommu role's own arguments). Passed on
    2026-12-03 on a TCG lab alone on the 2-core machine: 220 s right after the iommu
    role's reboot test (133.6 s) from a first boot, as the lane runs them; 157 s on a
    lab whose IOMMU arguments were already active."""
    boot_id = lab.read("/proc/sys/kernel/random/boot_id").strip()
    extra_arg = DRAIN_EXTRA_ARG % boot_id[:8]
    lab.ssh("virsh -c qemu:///system destroy %s; virsh -c qemu:///system undefine %s"
            % (DRAIN_DOMAIN, DRAIN_DOMAIN), check=False)
    lab.ssh("cat > /tmp/%s.xml && virsh -c qemu:///system define /tmp/%s.xml && "
            "virsh -c qemu:///system start %s" % (DRAIN_DOMAIN, DRAIN_DOMAIN, DRAIN_DOMAIN),
            input_text=DRAIN_DOMAIN_XML)
    try:
        assert _domstate(lab) == "running"
        reboot = {"gpuhost_reboot_ok": True, "iommu_extra_kernel_args": [extra_arg]}
        refused = lab.playbook(os.path.join(REPO, "site.yml"), "--tags", "iommu",
                               "-e", json.dumps(reboot), check=False, timeout=1800)
        printed = " ".join(refused.stdout.split())
        assert refused.returncode != 0, printed[-4000:]
        assert "a reboot of the host would stop 1 running domain(s)" in printed, printed[-4000:]
        assert "%s (running)" % DRAIN_DOMAIN in printed and "gpuhost_drain: true" in printed
        assert "TASK [gpuhost.kvm.iommu : Reboot to apply the kernel arguments]" not in refused.stdout
        assert lab.read("/proc/sys/kernel/random/boot_id").strip() == boot_id, \
            "the iommu role rebooted the lab although a domain ran and no drain was asked for"
        assert _domstate(lab) == "running"

        # -v: the drain's result (what it stopped, what it forced off) is in the output.
        drained = lab.playbook(os.path.join(REPO, "site.yml"), "--tags", "iommu", "-v", "-e", json.dumps(
            dict(reboot, gpuhost_drain=True, gpuhost_drain_timeout=15,
                 gpuhost_drain_on_timeout="destroy")), timeout=1800)
        printed = " ".join((drained.stdout + drained.stderr).split())
        assert "forced off after 15 s without powering off (on_timeout=destroy): %s" \
            % DRAIN_DOMAIN in printed, printed[-6000:]
        assert '"destroyed": ["%s"]' % DRAIN_DOMAIN in printed, printed[-6000:]
        assert '"started": ["%s"]' % DRAIN_DOMAIN in printed, printed[-6000:]
        assert lab.read("/proc/sys/kernel/random/boot_id").strip() != boot_id, \
            "the drain did not lead to a reboot"
        assert extra_arg in lab.read("/proc/cmdline").split()
        assert _domstate(lab) == "running", "the restore did not start the drained domain again"
        record = json.loads(lab.read("/var/lib/gpuhost/drain.json"))
        assert record["domains"] == {}, record
    finally:
        lab.ssh("virsh -c qemu:///system destroy %s; virsh -c qemu:///system undefine %s; rm -f /tmp/%s.xml"
                % (DRAIN_DOMAIN, DRAIN_DOMAIN, DRAIN_DOMAIN), check=False)


def _assert_1g_pages_reserved_per_node_at_boot(lab, cmdline):
    """1G pages are reserved per node by the kernel at boot. The lab's kernel
    (6.1) reads hugepages=<node>:<count>, so no host-wide 1G count may appear, and each
    node named holds exactly its count right after the boot (the numa role has not
    moved anything yet). The lab's site tenant uses 2M pages (inventories/lab), so on
    the lab this finds no 1G argument and checks that no 1G pool was reserved."""
    size, gigantic = None, []
    for arg in cmdline:
        name, dummy, value = arg.partition("=")
        if name == "hugepagesz":
            size = value.upper()
        elif name == "hugepages" and size == "1G":
            assert ":" in value, "host-wide 1G count %s on a kernel that reads the node form" % arg
            gigantic += [tuple(int(part) for part in pair.split(":")) for pair in value.split(",")]
    planned = dict(gigantic)
    for node in (0, 1):
        pool = "/sys/devices/system/node/node%d/hugepages/hugepages-1048576kB/nr_hugepages" % node
        assert int(lab.read(pool).strip()) == planned.get(node, 0), (node, planned)
