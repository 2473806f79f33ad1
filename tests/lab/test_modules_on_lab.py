"""The host modules against the lab's real kernel: real ``ansible -m`` runs on
hk-gpu-01, checked by reading the kernel's own state over SSH rather than trusting the
task results.

The tests run in file order and share one lab: facts first, then the changes (vfio_bind,
sriov_vfs, irq_affinity, libvirt_pinned_domain), then ONE reboot that checks every
persistent change together (GPU+HDA still on vfio-pci, the VFs re-created on vfio-pci),
then the clean-up back to the drivers the kernel had. Every failure message names the
lab's serial console log.
"""

import importlib.util
import json
import os
import re
import shlex
import time
import xml.etree.ElementTree as ET

import pytest
import yaml
from support.helpers import REPO

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist, parse_cpulist)
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity import pinning as irq_pinning
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import realized
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import validation

pytestmark = pytest.mark.lab

_BENCH_SPEC = importlib.util.spec_from_file_location(
    "bench_realized", os.path.join(REPO, "bench", "bench_realized.py"))
bench_realized = importlib.util.module_from_spec(_BENCH_SPEC)
_BENCH_SPEC.loader.exec_module(bench_realized)

GPU0, GPU0_HDA = "0000:21:00.0", "0000:21:00.1"
GPU1, GPU1_HDA = "0000:41:00.0", "0000:41:00.1"
NVME_PF = "0000:22:00.0"       # storage: its I/O queue IRQs are kernel-managed
NIC_PF = "0000:23:00.0"        # igb (82576): the SR-IOV NIC, VFs on igbvf or vfio-pci
NIC_VF_SETTINGS = [
    {"index": 0, "mac": "52:54:00:6c:00:01", "vlan": 100, "spoofchk": True, "trust": False},
    {"index": 1, "mac": "52:54:00:6c:00:02", "vlan": 0, "spoofchk": False, "trust": True},
]
ROOT_DISK = "0000:00:02.0"      # virtio-blk, holds /
ROUTE_NIC = "0000:00:03.0"      # virtio-net, default route and SSH
DIRTY_BRIDGE, DIRTY_DISPLAY, DIRTY_USB = "0000:00:04.0", "0000:01:01.0", "0000:01:02.0"
CONSOLE_VGA = "0000:00:01.0"      # boot_vga=1, fb0 and the framebuffer console on it
# The PCIe switches (lab/up): the large-BAR "GPU" (pci-testdev, one 64 GiB 64-bit BAR)
# behind the switch with ACS on node 1; a pci-testdev and an xHCI behind the switch
# without ACS on node 0, in one group. The two testdevs are GPUs by the inventory's list.
LARGE_BAR_GPU = "0000:44:00.0"
LARGE_BAR_SIZE = 64 << 30
NO_ACS_DEV, NO_ACS_USB = "0000:26:00.0", "0000:27:00.0"
SWITCH_GPUS = [LARGE_BAR_GPU, NO_ACS_DEV]
HUGEPAGES_NODE1 = "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"
PCI = "/sys/bus/pci/devices/"
TENANT = "tenant-modlab"
# The stored IRQ pin of that tenant's functions, as the sriov_irq stage names its own.
VFIO_PIN = "lab tenant vfio"
HOUSEKEEPING_NODE0 = "0-1"      # numa_cpuset's default: the node's first core + sibling
HUGEPAGES_NODE0 = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"

# What the earlier tests found, for the later ones (one lab, tests in file order).
SEEN = {}


def _why(lab, what, result=None):
    text = "%s; console log: %s" % (what, lab.console_log)
    if result is not None:
        text += "\nresult: %s" % json.dumps(result, indent=1, sort_keys=True)[:6000]
    return text


def _ok(lab, name, args, **kwargs):
    rc, result = lab.module(name, args or None, **kwargs)
    assert rc == 0, _why(lab, "%s failed" % name, result)
    return result


def _driver(lab, address):
    out = lab.ssh("readlink %s%s/driver || true" % (PCI, address)).stdout.strip()
    return out.rsplit("/", 1)[-1] if out else None


def _group(lab, address):
    return int(lab.ssh("basename $(readlink %s%s/iommu_group)" % (PCI, address)).stdout)


def _vfs(lab):
    out = lab.ssh("cd %s%s && for l in virtfn*; do "
                  "[ -L $l ] && echo $l $(basename $(readlink $l)); "
                  "done; true" % (PCI, NVME_PF)).stdout
    return {int(name[len("virtfn"):]): address for name, address in
            (line.split() for line in out.splitlines() if line.strip())}


# -- the state of a device between tenants ---------------------------------------------

def test_host_facts_reads_power_link_and_aer_state_as_the_real_kernel_prints_it(lab):
    """host_facts' devices subset on the lab's real kernel: for every function that has
    AER counters (QEMU's PCIe root ports and the igb NIC have an AER capability, and the
    kernel owns AER on q35) and for the GPU, the power state, the link and the AER totals
    equal what the kernel's own files say, and the GPU is not unfit on a fresh lab. A
    root port's link may be narrower than the port can go (the device behind it decides
    the width): the judgement is for the GPU, whose planned functions validate reads.

    First run, 2026-12-05: six functions with AER counters (00:04.0, 20:00.0, 20:01.0,
    20:02.0, 23:00.0, 40:00.0), every total 0; root port 20:01.0 at 2.5 GT/s x1 of its
    16 GT/s x32."""
    with_aer = lab.ssh("cd %s && for d in *; do [ -e $d/aer_dev_fatal ] && echo $d; done; true"
                       % PCI).stdout.split()
    addresses = sorted(set(with_aer) | {GPU0})
    script = ("cd %s && for d in %s; do p=$(cat $d/power_state 2>/dev/null); "
              "w=$(cat $d/current_link_width 2>/dev/null); m=$(cat $d/max_link_width 2>/dev/null); "
              "f=$(grep -h TOTAL_ERR_FATAL $d/aer_dev_fatal 2>/dev/null | cut -d' ' -f2); "
              "echo \"$d ${p:--} ${w:--} ${m:--} ${f:--}\"; done" % (PCI, " ".join(addresses)))
    kernel = {fields[0]: fields[1:] for fields in
              (line.split() for line in lab.ssh(script).stdout.splitlines()) if len(fields) == 5}
    devices = _ok(lab, "gpuhost.kvm.host_facts", {"gather": ["devices"], "devices": addresses})[
        "ansible_facts"]["gpuhost_host"]["devices"]
    print("functions with AER counters: %s\nkernel: %s\nread: %s" % (
        with_aer, kernel, {a: devices[a].get("state") for a in addresses}))
    assert with_aer, _why(lab, "no function of the lab shows aer_dev_fatal (is AER native on q35?)")
    assert sorted(kernel) == addresses, kernel
    for address in addresses:
        state = devices[address]["state"]
        power, width, max_width, fatal = kernel[address]
        assert state["power_state"] == (None if power == "-" else power), (address, state)
        assert state["link"]["current_width"] == (None if width in ("-", "0") else int(width)), (address, state)
        assert state["link"]["max_width"] == (None if max_width in ("-", "0") else int(max_width)), (address, state)
        assert state["aer_totals"]["fatal"] == (None if fatal == "-" else int(fatal)), (address, state)
        assert state["answers"] is True, (address, state)
    assert devices[GPU0]["unfit"] == [], _why(lab, "the GPU is unfit on a fresh lab", devices[GPU0])


# -- iommu_groups_facts ----------------------------------------------------------------

def _libvirt_pci_view(lab):
    """address -> (iommu group, numa node or None, class) from libvirt's node devices."""
    names = lab.ssh("virsh -q nodedev-list --cap pci").stdout.split()
    assert names, _why(lab, "virsh nodedev-list --cap pci listed nothing")
    # one virsh process for all of them: each virsh start costs seconds under TCG
    out = lab.ssh("virsh %s" % shlex.quote(" ; ".join("nodedev-dumpxml %s" % n for n in names)),
                  timeout=300).stdout
    view = {}
    for chunk in out.split("<device>")[1:]:
        cap = ET.fromstring("<device>" + chunk).find("capability[@type='pci']")
        address = "%04x:%02x:%02x.%x" % tuple(
            int(cap.findtext(k), 0) for k in ("domain", "bus", "slot", "function"))
        group = cap.find("iommuGroup")
        numa = cap.find("numa")
        view[address] = (int(group.get("number")) if group is not None else None,
                         int(numa.get("node")) if numa is not None else None,
                         cap.findtext("class"))
    return view


def test_iommu_groups_facts_dirty_group_gpus_and_libvirt_agree(lab):
    t0 = time.monotonic()
    facts = _ok(lab, "gpuhost.kvm.iommu_groups_facts", {})["ansible_facts"]["gpuhost_iommu"]
    assert facts["enabled"] is True and facts["vendor"] == "intel", facts
    assert facts["interrupt_remapping"] is True

    groups = {g["group"]: g for g in facts["groups"]}
    member = {d["address"]: (g["group"], d) for g in facts["groups"] for d in g["devices"]}

    # the dirty group, by name: the display shares it with the USB controller
    assert len(facts["dirty_groups"]) == 1, facts["dirty_groups"]
    dirty = facts["dirty_groups"][0]
    assert dirty["gpus"] == [DIRTY_DISPLAY]
    assert [(f["address"], f["class_name"], f["class_code"]) for f in dirty["foreign"]] == [
        (DIRTY_USB, "USB controller", "0x0c0330")]
    assert sorted(d["address"] for d in groups[dirty["group"]]["devices"]) == [
        DIRTY_BRIDGE, DIRTY_DISPLAY, DIRTY_USB]
    assert dirty["group"] == _group(lab, DIRTY_DISPLAY)

    # both "GPUs" isolated with their HDA companion, on their own nodes
    gpus = {g["address"]: g for g in facts["gpus"]}
    for gpu, hda, node in ((GPU0, GPU0_HDA, 0), (GPU1, GPU1_HDA, 1)):
        verdict = gpus[gpu]
        assert verdict["isolated"] is True and verdict["reasons"] == [], verdict
        assert verdict["companions"] == [hda]
        assert verdict["numa_node"] == node and verdict["numa_node_source"] == "numa_node"
        assert verdict["iommu_group"] == _group(lab, gpu) == _group(lab, hda)
        assert sorted(d["address"] for d in groups[verdict["iommu_group"]]["devices"]) == [
            gpu, hda]
    assert gpus[DIRTY_DISPLAY]["isolated"] is False

    # libvirt's own view of the same kernel, device by device
    libvirt = _libvirt_pci_view(lab)
    sysfs = set(lab.listdir(PCI))
    assert set(libvirt) == sysfs == set(member), (sorted(libvirt), sorted(sysfs),
                                                  sorted(member))
    mismatches = []
    for address, (group, numa, class_code) in sorted(libvirt.items()):
        ours_group, device = member[address]
        ours = (ours_group, device["numa_node"], device["class_code"])
        if ours != (group, numa, class_code):
            mismatches.append((address, "ours", ours, "libvirt", (group, numa, class_code)))
    assert not mismatches, _why(lab, "iommu_groups_facts and libvirt disagree: %s" % mismatches)
    SEEN["facts"] = facts
    SEEN["timing_facts_s"] = round(time.monotonic() - t0, 1)


# -- vfio_bind -------------------------------------------------------------------------

def test_vfio_bind_refuses_the_dirty_group_display(lab):
    group = _group(lab, DIRTY_DISPLAY)
    driver = _driver(lab, DIRTY_DISPLAY)
    rc, result = lab.module("gpuhost.kvm.vfio_bind", {"devices": [DIRTY_DISPLAY]})
    assert rc != 0, _why(lab, "dirty display was bound", result)
    assert result["msg"] == (
        "allow_dirty_group: refusing to bind: %s shares IOMMU group %d with %s (USB "
        "controller, driver xhci_hcd): every device in a group goes to the guest together "
        "(set allow_dirty_group: true to override). Fix: set allow_dirty_group only if you "
        "accept the risk, or leave the device(s) out" % (DIRTY_DISPLAY, group, DIRTY_USB)
    ), result
    assert result["field"] == "allow_dirty_group"
    assert result["changed"] is False
    assert _driver(lab, DIRTY_DISPLAY) == driver
    assert lab.read(PCI + DIRTY_DISPLAY + "/driver_override").strip() == "(null)"


def test_iommu_groups_facts_reads_the_switch_gpus_listed_by_the_inventory(lab):
    facts = _ok(lab, "gpuhost.kvm.iommu_groups_facts",
                {"gpu_devices": SWITCH_GPUS})["ansible_facts"]["gpuhost_iommu"]
    gpus = {g["address"]: g for g in facts["gpus"]}
    large = gpus[LARGE_BAR_GPU]
    # alone behind its downstream port: the port is a bridge, which vfio accepts
    assert large["isolated"] is True and large["reasons"] == [] and large["companions"] == [], large
    assert large["numa_node"] == 1 and large["selected_by"] == "listed as %s" % LARGE_BAR_GPU, large
    dirty = [d for d in facts["dirty_groups"] if NO_ACS_DEV in d["gpus"]]
    assert len(dirty) == 1, facts["dirty_groups"]
    assert [(f["address"], f["class_name"], f["driver"]) for f in dirty[0]["foreign"]] == [
        (NO_ACS_USB, "USB controller", "xhci_hcd")], dirty
    assert gpus[NO_ACS_DEV]["isolated"] is False and dirty[0]["group"] == _group(lab, NO_ACS_DEV)
    # without the list, neither testdev is a GPU (class 0x00ff)
    plain = _ok(lab, "gpuhost.kvm.iommu_groups_facts", {})["ansible_facts"]["gpuhost_iommu"]
    assert not {g["address"] for g in plain["gpus"]} & set(SWITCH_GPUS)


def test_vfio_bind_refuses_the_device_behind_the_switch_without_acs(lab):
    group = _group(lab, NO_ACS_DEV)
    rc, result = lab.module("gpuhost.kvm.vfio_bind", {"devices": [NO_ACS_DEV], "gpu_devices": SWITCH_GPUS})
    assert rc != 0, _why(lab, "the device behind the switch without ACS was bound", result)
    assert result["field"] == "allow_dirty_group" and result["changed"] is False, result
    assert result["msg"].startswith(
        "allow_dirty_group: refusing to bind: %s shares IOMMU group %d with %s (USB controller, "
        "driver xhci_hcd)" % (NO_ACS_DEV, group, NO_ACS_USB)), result
    assert _driver(lab, NO_ACS_DEV) is None and _driver(lab, NO_ACS_USB) == "xhci_hcd"
    assert lab.read(PCI + NO_ACS_DEV + "/driver_override").strip() == "(null)"


def test_vfio_bind_refuses_the_root_disk_and_the_default_route_nic(lab):
    rc, result = lab.module("gpuhost.kvm.vfio_bind", {"devices": [ROOT_DISK],
                                                      "allow_host_critical": True})
    assert rc != 0, _why(lab, "root disk was bound", result)
    assert result["msg"] == (
        "devices: refusing to bind: %s holds the root filesystem: binding it to vfio-pci "
        "unbinds it from the host, and the host stops at once (and this module with it) "
        "(no override). Fix: remove the device(s) marked 'no override' from devices/match"
        % ROOT_DISK), result
    assert result["details"]["refusals"][0]["override"] is None

    rc, result = lab.module("gpuhost.kvm.vfio_bind", {"devices": [ROUTE_NIC]})
    assert rc != 0, _why(lab, "route NIC was bound", result)
    assert result["msg"].startswith(
        "allow_host_critical: refusing to bind: %s is the NIC of the default route (enp0s3)"
        % ROUTE_NIC), result
    assert "the current SSH connection (enp0s3)" in result["msg"], result
    assert result["field"] == "allow_host_critical"
    assert _driver(lab, ROOT_DISK) == "virtio-pci"
    assert _driver(lab, ROUTE_NIC) == "virtio-pci"


def test_vfio_bind_refuses_the_boot_vga_that_holds_the_console(lab):
    # The lab's console VGA (00:01.0, boot_vga=1) carries fb0 and the bound framebuffer
    # console (vtcon0), like a BMC VGA at the rack: taking it blanks the local console.
    rc, result = lab.module("gpuhost.kvm.vfio_bind", {"devices": [CONSOLE_VGA],
                                                      "with_companions": False})
    assert rc != 0, _why(lab, "console VGA was bound", result)
    assert result["field"] == "allow_boot_vga", result
    assert result["msg"] == (
        "allow_boot_vga: refusing to bind: %s boot VGA with an active console (framebuffer "
        "fb0 (bochs-drmdrmfb); vtconsole (M) frame buffer device): binding it to vfio-pci "
        "unbinds it from the host, and the host loses that console (set allow_boot_vga: "
        "true to override). Fix: set allow_boot_vga only if you accept the risk, or leave "
        "the device(s) out" % CONSOLE_VGA), result
    assert result["changed"] is False
    assert _driver(lab, CONSOLE_VGA) == "bochs-drm"
    assert lab.read(PCI + CONSOLE_VGA + "/driver_override").strip() == "(null)"


def test_vfio_bind_binds_gpu_and_hda_and_dev_vfio_appears(lab):
    before = {a: _driver(lab, a) for a in (GPU0, GPU0_HDA)}
    assert before[GPU0] and before[GPU0_HDA], before
    SEEN["drivers_before"] = before
    group = _group(lab, GPU0)
    args = {"devices": [GPU0], "persistent": True}

    result = _ok(lab, "gpuhost.kvm.vfio_bind", args, check_mode=True)
    assert result["changed"] is True
    assert {d["address"]: d["driver_after"] for d in result["devices"]} == {
        GPU0: "vfio-pci", GPU0_HDA: "vfio-pci"}
    assert {a: _driver(lab, a) for a in before} == before      # check mode changed nothing

    result = _ok(lab, "gpuhost.kvm.vfio_bind", args)
    assert result["changed"] is True
    devices = {d["address"]: d for d in result["devices"]}
    assert set(devices) == {GPU0, GPU0_HDA}
    for address in (GPU0, GPU0_HDA):
        assert devices[address]["driver_before"] == before[address]
        assert devices[address]["driver_after"] == "vfio-pci"
        assert devices[address]["vfio_dev"] == "/dev/vfio/%d" % group
        assert _driver(lab, address) == "vfio-pci"         # the kernel's own link
        assert lab.read(PCI + address + "/driver_override").strip() == "vfio-pci"
    assert devices[GPU0]["companions"] == [GPU0_HDA]
    assert lab.ssh("test -c /dev/vfio/%d" % group, check=False).returncode == 0, _why(
        lab, "/dev/vfio/%d is not a character device" % group)
    assert result["persistence"] == "driverctl"               # driverctl is in the image
    for address in (GPU0, GPU0_HDA):
        assert lab.read("/etc/driverctl.d/pci-%s" % address).strip() == "vfio-pci"

    again = _ok(lab, "gpuhost.kvm.vfio_bind", args)
    assert again["changed"] is False, _why(lab, "second bind changed", again)
    SEEN["gpu_group"] = group


# -- sriov_vfs -------------------------------------------------------------------------

def _check_vfs_on_vfio(lab, count, result=None):
    vfs = _vfs(lab)
    assert sorted(vfs) == list(range(count)), _why(lab, "VFs %s" % vfs, result)
    assert lab.read(PCI + NVME_PF + "/sriov_numvfs").strip() == str(count)
    for index, address in vfs.items():
        assert _driver(lab, address) == "vfio-pci", _why(lab, "VF %s driver" % address, result)
        physfn = lab.ssh("basename $(readlink %s%s/physfn)" % (PCI, address)).stdout
        assert physfn.strip() == NVME_PF
        group = _group(lab, address)
        assert lab.listdir("/sys/kernel/iommu_groups/%d/devices" % group) == [address]
        assert lab.ssh("test -c /dev/vfio/%d" % group, check=False).returncode == 0
    return vfs


def test_sriov_vfs_creates_two_vfs_on_vfio_and_changes_the_count_through_zero(lab):
    assert _driver(lab, NVME_PF) == "nvme"
    args = {"pf": NVME_PF, "num_vfs": 2, "vf_driver": "vfio-pci", "persistent": True}
    result = _ok(lab, "gpuhost.kvm.sriov_vfs", args)
    assert result["changed"] is True
    vfs = _check_vfs_on_vfio(lab, 2, result)
    assert [(v["index"], v["address"], v["driver"], v["numa_node"]) for v in result["vfs"]] == [
        (i, vfs[i], "vfio-pci", 0) for i in range(2)]
    assert [v["iommu_group"] for v in result["vfs"]] == [_group(lab, vfs[i]) for i in range(2)]
    assert lab.read(PCI + NVME_PF + "/sriov_drivers_autoprobe").strip() == "0"

    again = _ok(lab, "gpuhost.kvm.sriov_vfs", args)
    assert again["changed"] is False, _why(lab, "second run changed", again)

    args["num_vfs"] = 3
    result = _ok(lab, "gpuhost.kvm.sriov_vfs", args)
    numvfs = "/sys/bus/pci/devices/%s/sriov_numvfs" % NVME_PF
    steps = result["steps"]
    assert steps.index("write 0 to %s" % numvfs) < steps.index("write 3 to %s" % numvfs), steps
    _check_vfs_on_vfio(lab, 3, result)
    assert [v["driver"] for v in result["vfs"]] == ["vfio-pci"] * 3
    config = json.loads(lab.read("/etc/gpuhost/sriov.json"))
    assert config["pfs"][NVME_PF]["num_vfs"] == 3
    assert lab.ssh("systemctl is-enabled gpuhost-sriov.service").stdout.strip() == "enabled"


def _vf_link_settings(lab, pf):
    """index -> (mac, vlan, spoofchk, trust) as the PF's driver reports them
    (``ip -d -j link show``: the kernel's IFLA_VFINFO_LIST)."""
    netdev, = lab.listdir(PCI + pf + "/net")
    link, = json.loads(lab.ssh("ip -d -j link show dev %s" % shlex.quote(netdev)).stdout)
    return {vf["vf"]: (vf["address"], (vf.get("vlan_list") or [{}])[0].get("vlan", 0),
                       vf["spoofchk"], vf["trust"]) for vf in link.get("vfinfo_list", [])}


def _check_nic_vf_settings(lab, result=None):
    got = _vf_link_settings(lab, NIC_PF)
    wanted = {vf["index"]: (vf["mac"], vf["vlan"], vf["spoofchk"], vf["trust"])
              for vf in NIC_VF_SETTINGS}
    assert got == wanted, _why(lab, "VF settings on %s: %s" % (NIC_PF, got), result)


def test_sriov_vfs_gives_the_nic_vfs_mac_vlan_spoofchk_and_trust(lab):
    """The real SR-IOV NIC (igb): two VFs on vfio-pci, each with its MAC, VLAN, spoof
    checking and trust set through the PF and read back from the PF's driver; a second
    run changes nothing; the settings are kept for the boot (checked after the reboot)."""
    assert _driver(lab, NIC_PF) == "igb"
    args = {"pf": NIC_PF, "num_vfs": 2, "vf_driver": "vfio-pci", "persistent": True,
            "vfs": NIC_VF_SETTINGS}
    check = _ok(lab, "gpuhost.kvm.sriov_vfs", args, check_mode=True)
    assert check["changed"] is True and lab.read(PCI + NIC_PF + "/sriov_numvfs").strip() == "0"
    result = _ok(lab, "gpuhost.kvm.sriov_vfs", args)
    assert result["changed"] is True
    vfs = [vf["address"] for vf in result["vfs"]]
    assert vfs == ["0000:23:10.0", "0000:23:10.2"], _why(lab, "VF addresses", result)
    for address in vfs:
        assert _driver(lab, address) == "vfio-pci", _why(lab, address, result)
        assert lab.listdir("/sys/kernel/iommu_groups/%d/devices" % _group(lab, address)) == [address]
    _check_nic_vf_settings(lab, result)
    again = _ok(lab, "gpuhost.kvm.sriov_vfs", args)
    assert again["changed"] is False, _why(lab, "second run changed", again)
    config = json.loads(lab.read("/etc/gpuhost/sriov.json"))
    assert config["pfs"][NIC_PF]["num_vfs"] == 2, config


# -- irq_affinity ----------------------------------------------------------------------

def _nvme_irqs(lab):
    names = {}
    for line in lab.read("/proc/interrupts").splitlines():
        match = re.match(r"^\s*(\d+):.*\s(nvme\S*)\s*$", line)
        if match:
            names[int(match.group(1))] = match.group(2)
    msi = [int(n) for n in lab.listdir(PCI + NVME_PF + "/msi_irqs")]
    return names, msi


def test_irq_affinity_pins_nvme_irqs_and_reports_managed_ones(lab):
    names, msi = _nvme_irqs(lab)
    assert names and msi, _why(lab, "no NVMe IRQs: %s %s" % (names, msi))
    args = {"name_regex": "^nvme", "pci_devices": [NVME_PF], "cpus": HOUSEKEEPING_NODE0}
    result = _ok(lab, "gpuhost.kvm.irq_affinity", args)
    assert result["selected"] == sorted(set(names) | set(msi)), result
    managed = result["skipped_managed"]
    pinned = result["changed_irqs"]
    assert pinned and not set(pinned) & set(managed), result
    # every selected IRQ the kernel lets us set is on the housekeeping CPUs now
    for irq in (n for n in result["selected"] if n not in managed):
        assert lab.read("/proc/irq/%d/smp_affinity_list" % irq).strip() == HOUSEKEEPING_NODE0
        effective = lab.read("/proc/irq/%d/effective_affinity_list" % irq).strip()
        assert effective in ("0", "1"), (irq, effective)
    # what the kernel says about the skipped ones: a write by hand gets EIO too
    for irq in managed:
        proc = lab.ssh("echo %s > /proc/irq/%d/smp_affinity_list" % (HOUSEKEEPING_NODE0, irq),
                       check=False)
        assert proc.returncode != 0 and "Input/output error" in proc.stderr, (irq, proc)
    # the NVMe queue IRQs: admin queue (nvme0q0) settable, I/O queues kernel-managed
    by_name = {names[n]: n for n in names}
    SEEN["irq_truth"] = {"pinned": {n: names.get(n) for n in pinned},
                         "managed": {n: names.get(n) for n in managed}}
    assert by_name["nvme0q0"] not in managed, SEEN["irq_truth"]
    assert managed and all(re.match(r"^nvme0q[1-9]", names[n]) for n in managed), SEEN["irq_truth"]

    again = _ok(lab, "gpuhost.kvm.irq_affinity", args)
    assert again["changed"] is False and again["changed_irqs"] == [], _why(
        lab, "second irq_affinity run changed", again)
    assert again["skipped_managed"] == managed


# -- libvirt_pinned_domain -------------------------------------------------------------

def _virsh(lab, *args):
    return lab.ssh("virsh " + " ".join(args)).stdout


def test_libvirt_pinned_domain_defines_the_planned_tenant(lab):
    lab.ssh("echo 512 > %s" % HUGEPAGES_NODE0)
    got = int(lab.read(HUGEPAGES_NODE0))
    assert got >= 512, _why(lab, "only %d 2M pages could be reserved on node 0" % got)
    plan = _ok(lab, "gpuhost.kvm.numa_cpuset", {
        "tenants": [{"name": TENANT, "gpus": [GPU0], "vcpus": 2, "memory_gib": 1,
                     "hugepage_size": "2M", "nic_vf": True}],
        "hugepage_check": "free"})["plan"]
    tenant = plan["tenants"][0]
    assert tenant["node"] == 0 and plan["housekeeping"]["0"] == HOUSEKEEPING_NODE0, plan
    # a NIC VF comes from the NIC (igb), never from the NVMe PF on the same node
    assert tenant["vf"]["pf"] == NIC_PF, tenant
    args = {"name": TENANT, "plan": tenant, "domain_type": "qemu", "cpu_mode": "maximum",
            "network": {"type": "vf", "vf_mode": "hostdev"}, "autostart": False,
            "hide_kvm": False, "state": "present"}
    try:
        result = _ok(lab, "gpuhost.kvm.libvirt_pinned_domain", args)
        assert result["changed"] is True
        again = _ok(lab, "gpuhost.kvm.libvirt_pinned_domain", args)
        assert again["changed"] is False, _why(lab, "second define changed", again)

        # libvirt's read-back equals the plan
        vcpupin = _virsh(lab, "vcpupin", TENANT)     # " VCPU   CPU Affinity" table
        pins = re.findall(r"^\s*(\d+)\s+(\S+)\s*$", vcpupin, re.M)
        assert pins == [(str(i), str(cpu)) for i, cpu in enumerate(tenant["vcpu_pins"])], \
            vcpupin
        emulator = _virsh(lab, "emulatorpin", TENANT)
        wanted = re.escape(tenant["emulator_cpus"])
        assert re.search(r"\*:\s*%s\s*$" % wanted, emulator, re.M), emulator
        numatune = dict(re.findall(r"^(\w+)\s*:\s*(\S*)\s*$",
                                   _virsh(lab, "numatune", TENANT), re.M))
        assert numatune == {"numa_mode": "strict", "numa_nodeset": "0"}, numatune
        xml = ET.fromstring(_virsh(lab, "dumpxml", "--inactive", TENANT))
        assert xml.get("type") == "qemu"
        page = xml.find("memoryBacking/hugepages/page")
        assert (page.get("size"), page.get("unit")) == ("2048", "KiB")
        hostdevs = sorted("%04x:%02x:%02x.%x" % tuple(int(a.get(k), 16) for k in (
            "domain", "bus", "slot", "function"))
            for a in xml.findall("devices/hostdev/source/address"))
        assert hostdevs == sorted([GPU0, GPU0_HDA, tenant["vf"]["address"]]), hostdevs
        SEEN["tenant_plan"] = tenant
        SEEN["plan_housekeeping"] = plan["housekeeping"]
    finally:
        # the reboot comes next: leave no tenant behind for libvirtd to find
        lab.module("gpuhost.kvm.libvirt_pinned_domain", {"name": TENANT, "state": "absent"})
        lab.ssh("echo 0 > %s" % HUGEPAGES_NODE0, check=False)
    assert lab.ssh("virsh dominfo %s" % TENANT, check=False).returncode != 0


def _planned_tenant(lab):
    """The tenant the define test planned, with node 0's 2M pool filled for its memory."""
    lab.ssh("echo 512 > %s" % HUGEPAGES_NODE0)
    tenant = SEEN.get("tenant_plan")
    assert tenant, "test_libvirt_pinned_domain_defines_the_planned_tenant (before this) failed"
    return tenant


def _tenant_args(tenant, state, **extra):
    """libvirt_pinned_domain's arguments for the planned tenant under TCG, VF as hostdev."""
    args = {"name": TENANT, "plan": tenant, "domain_type": "qemu", "cpu_mode": "maximum",
            "network": {"type": "vf", "vf_mode": "hostdev"}, "autostart": False,
            "hide_kvm": False, "state": state}
    args.update(extra)
    return args


def test_planned_tenant_starts_with_its_devices_on_vfio_under_tcg(lab):
    """Starts the tenant (TCG inside TCG) with the GPU, its HDA and the NIC's VF on
    vfio-pci behind the emulated intel-iommu: QEMU holds the groups' /dev/vfio nodes,
    and the libvirt hook irq_affinity installed (libvirtd reloaded to find it) pins the
    tenant's vfio IRQs to the node's housekeeping CPUs by itself. The guest boots no
    operating system; starting it took 12.6 s on 2026-12-01."""
    tenant = _planned_tenant(lab)
    args = _tenant_args(tenant, state="running")
    # The pools before the start: bench_realized's "free hugepages drop by the domain's
    # size" item (test_bench_realized_on_the_started_tenant_records_ratio_1, next).
    pools_before = _ok(lab, "gpuhost.kvm.host_facts", {"gather": ["memory"]})[
        "ansible_facts"]["gpuhost_host"]["memory"]["hugepages"]
    functions = validation.tenant_functions(tenant)
    housekeeping = SEEN["plan_housekeeping"][str(tenant["node"])]
    # irqbalance runs on the lab without the sriov_irq stage's ban list and policy
    # script, so it may move the hook's pin back (the first run of this test found the
    # vfio-intx line allowed on 0-3 again): it is stopped for the test, started after.
    lab.ssh("systemctl stop irqbalance.service", check=False)
    # The tenant's functions' pin stored as the sriov_irq stage stores it (by device,
    # onto the node's housekeeping CPUs), before the start: the libvirt hook, not this
    # test, must pin the vfio IRQs. libvirtd runs by now (the tests before defined
    # domains), and libvirt finds a new hook only at its start or on a reload.
    stored = _ok(lab, "gpuhost.kvm.irq_affinity", {"pci_devices": functions, "cpus": housekeeping,
                                                   "persistent": True, "persist_as": VFIO_PIN})
    print("stored pin of the tenant's functions: %s" % stored["steps"])
    if any(step.endswith(irq_pinning.LIBVIRT_HOOK) for step in stored["steps"]):
        assert "systemctl reload libvirtd.service" in stored["steps"], _why(
            lab, "libvirtd was not reloaded for its new hook", stored)
    try:
        t0 = time.monotonic()
        rc, result = lab.module("gpuhost.kvm.libvirt_pinned_domain", args, timeout=600)
        started_s = round(time.monotonic() - t0, 1)
        state = _domstate(lab, TENANT)
        pid = lab.ssh("cat /run/libvirt/qemu/%s.pid" % TENANT, check=False).stdout.strip()
        fds = lab.ssh("ls -l /proc/%s/fd | grep -c /dev/vfio/" % pid, check=False).stdout.strip() \
            if pid else ""
        log = lab.ssh("tail -n 20 /var/log/libvirt/qemu/%s.log; dmesg | grep -iE "
                      "'vfio|dmar' | tail -n 20" % TENANT, check=False).stdout
        print("tenant start: rc=%s start=%ss state=%s vfio_fds=%s\n%s\n%s" % (
            rc, started_s, state, fds, json.dumps(result)[:3000], log))
        assert rc == 0 and state == "running", _why(lab, "tenant did not start:\n%s" % log,
                                                    result)
        assert fds and int(fds) >= 1, _why(lab, "QEMU holds no /dev/vfio node:\n%s" % log)
        # The libvirt hook on "started" forks and re-applies the stored pins for a while:
        # the tenant's vfio IRQs (vfio-intx of a function with an INTx pin, once QEMU
        # enables it; no guest OS runs to enable MSI-X) go to the housekeeping CPUs.
        hooked = _wait_for_vfio_pins(lab, functions, housekeeping, timeout_s=180)
        print("tenant vfio IRQs pinned to %s by the hook, %.1f s after the start returned: %s"
              % (housekeeping, hooked["waited_s"], hooked["irqs"]))
        assert hooked["irqs"] and hooked["pinned"], _why(
            lab, "the libvirt hook did not pin the tenant's vfio IRQs to %s within 180 s: %s\n%s"
            % (housekeeping, hooked["irqs"], lab.ssh("journalctl -b -u libvirtd --no-pager | tail -n 20",
                                                     check=False).stdout))
        # Realized placement, read by host_facts from /proc as validate would: every vCPU
        # thread on its pinned CPU, every emulator thread on the emulator set, the
        # hugepage memory on the planned node only and all of it there, the
        # groups QEMU holds on vfio-pci, the vfio IRQs on housekeeping CPUs.
        facts = _ok(lab, "gpuhost.kvm.host_facts", {"gather": ["realized", "memory"], "domains": [TENANT]})
        seen = facts["ansible_facts"]["gpuhost_host"]["realized"][TENANT]
        node = str(tenant.get("memory_node", tenant["node"]))
        free_after = facts["ansible_facts"]["gpuhost_host"]["memory"]["hugepages"][node]["2048"]["free"]
        print("realized placement: %s; free 2M pages on node %s after the start: %s"
              % (json.dumps(seen)[:3000], node, free_after))
        assert seen["running"] and seen["pid"] == int(pid), _why(lab, "host_facts did not find QEMU", seen)
        findings = realized.placement_findings(seen["placement"], tenant, functions, housekeeping)
        assert findings == [], _why(lab, "realized placement differs from the plan:\n" + "\n".join(findings), seen)
        assert free_after == 512 - int(tenant["memory_gib"] * 512), _why(
            lab, "free 2M pages on node %s: %s of 512 after a %s GiB tenant started" % (node, free_after, tenant["memory_gib"]))
        SEEN["started_tenant"] = {"realized": seen, "pools_before": pools_before,
                                  "pools_after": facts["ansible_facts"]["gpuhost_host"]["memory"]["hugepages"]}
    finally:
        lab.module("gpuhost.kvm.libvirt_pinned_domain", {"name": TENANT, "state": "absent"})
        lab.module("gpuhost.kvm.irq_affinity", {"state": "absent", "persist_as": VFIO_PIN})
        lab.ssh("echo 0 > %s" % HUGEPAGES_NODE0, check=False)
        lab.ssh("systemctl start irqbalance.service", check=False)


def _wait_for_vfio_pins(lab, functions, cpus, timeout_s):
    """Polls /proc/interrupts (one ssh call per round, no module run) until every vfio
    IRQ of ``functions`` is allowed on ``cpus`` exactly: {irqs: {irq: affinity},
    pinned, waited_s}."""
    wanted = format_cpulist(parse_cpulist(cpus))
    script = ("for n in $(grep -E 'vfio-(intx|msix?\\[[0-9]+\\])\\((%s)\\)' /proc/interrupts"
              " | cut -d: -f1); do echo $n $(cat /proc/irq/$n/smp_affinity_list); done"
              % "|".join(re.escape(f) for f in functions))
    t0 = time.monotonic()
    while True:
        rows = [line.split() for line in lab.ssh(script, check=False).stdout.splitlines()]
        irqs = {row[0]: row[1] for row in rows if len(row) == 2}
        pinned = bool(irqs) and all(value == wanted for value in irqs.values())
        waited = time.monotonic() - t0
        if pinned or waited > timeout_s:
            return {"irqs": irqs, "pinned": pinned, "waited_s": waited}
        time.sleep(3)


# The tenant's L2 guest for its MSI/MSI-X IRQs: the lab inventory's own tenant guest,
# the lab's Debian kernel (an EFI-stub bzImage, booted directly by QEMU: no disk, no boot
# loader) and the initramfs lab/image/customize built with MODULES=list of the two
# drivers that enable MSI(-X) on the tenant's functions (the lab's /boot/initrd.img has
# neither). Its break=premount stops it in the initramfs's shell after the modules are
# loaded, so no root file system is needed.
def _lab_tenant_boot():
    with open(os.path.join(REPO, "inventories", "lab", "host_vars", "hk-gpu-01.yml"),
              encoding="utf-8") as handle:
        tenant = yaml.safe_load(handle)["gpuhost_tenants"][0]
    return {key: tenant[key] for key in ("kernel", "initrd", "cmdline")}


L2_BOOT = _lab_tenant_boot()
L2_SERIAL_LOG = "/var/log/libvirt/qemu/%s-serial.log" % TENANT
# How long the L2 may take to enable MSI(-X): on an idle machine 323 s and 344 s from
# the start (2026-12-06), 886 s under an acceptance run's load (2026-12-05); two later
# runs under load found no line in 900 s and 1800 s, with no view of the L2. The wait
# therefore ends on the first of: every line there, the tenant gone, MSI_WAIT_S, or an
# L2 that has made no progress (no serial output and no CPU time of its QEMU) for
# MSI_STALL_S; and a failure prints the timeline of that progress.
MSI_WAIT_S = 2700
MSI_STALL_S = 600
MSI_TIMELINE_EVERY_S = 60
# Every look is an ssh login into the lab, whose TCG CPU the L2 shares: a look every 5 s
# with three logins took a visible part of it under an acceptance run's load.
MSI_LOOK_EVERY_S = 20


def _domstate(lab, name):
    """What virsh says of the domain: running, shut off, crashed, or "" when it is gone."""
    return lab.ssh("virsh domstate %s" % name, check=False).stdout.strip()


def _l2_look(lab, functions, domain):
    """One look at the L2 in one ssh call (each login costs the TCG lab CPU time its L2
    needs): the vfio-msi/vfio-msix lines of ``functions`` as {function: [(irq,
    affinity, name)]}, the domain's state, its serial log's size, its QEMU's CPU
    seconds and the lab's 1-minute load."""
    script = ("virsh domstate %s 2>/dev/null | head -n 1 | tr ' ' _ | sed 's/^/state /';"
              " echo serial $(stat -c %%s %s 2>/dev/null || echo 0);"
              " pid=$(cat /run/libvirt/qemu/%s.pid 2>/dev/null);"
              " echo cpu $([ -n \"$pid\" ] && awk '{print ($14+$15)/100}' /proc/$pid/stat 2>/dev/null || echo 0);"
              " echo load $(cut -d' ' -f1 /proc/loadavg);"
              " grep -E 'vfio-msix?\\[[0-9]+\\]\\((%s)\\)' /proc/interrupts | while read n rest; do"
              " n=${n%%:}; echo line $n $(cat /proc/irq/$n/smp_affinity_list) "
              "$(echo \"$rest\" | grep -oE 'vfio-msix?\\[[0-9]+\\]\\([^)]+\\)'); done"
              % (domain, L2_SERIAL_LOG, domain, "|".join(re.escape(f) for f in functions)))
    look = {"lines": {}, "state": "", "serial": 0, "cpu": 0.0, "load": 0.0}
    for row in lab.ssh(script, check=False).stdout.splitlines():
        fields = row.split()
        if fields[:1] == ["line"] and len(fields) == 4:     # not an IRQ freed meanwhile
            irq, affinity, name = fields[1:]
            look["lines"].setdefault(name.split("(")[1].rstrip(")"), []).append((irq, affinity, name))
        elif len(fields) == 2 and fields[0] in ("state", "serial", "cpu", "load"):
            kind = {"state": str, "serial": int, "cpu": float, "load": float}[fields[0]]
            try:
                look[fields[0]] = kind(fields[1].replace("_", " "))
            except ValueError:
                pass
    return look


def _wait_for_vfio_msi_lines(lab, functions, timeout_s, domain, stall_s=MSI_STALL_S):
    """Looks (``_l2_look``) every MSI_LOOK_EVERY_S until each of ``functions`` that has
    an MSI or MSI-X capability shows a vfio-msi/vfio-msix line, or ``domain`` stops
    running, or its L2 made no progress for ``stall_s``, or ``timeout_s`` passes.
    Returns {function: [(irq, affinity, name)]}, the capable functions, seconds waited,
    why it ended, and the progress timeline [(waited_s, serial_bytes, qemu_cpu_s,
    lab_load)]."""
    capable = [f for f in functions
               if lab.ssh("lspci -s %s -vv | grep -qE 'MSI(-X)?:'" % f, check=False).returncode == 0]
    t0 = time.monotonic()
    timeline, last_progress, last_seen, last_row = [], 0.0, None, -MSI_TIMELINE_EVERY_S
    while True:
        look = _l2_look(lab, functions, domain)
        lines, waited = look["lines"], time.monotonic() - t0
        if all(f in lines for f in capable):
            return lines, capable, waited, "every line appeared", timeline
        if waited > timeout_s:
            return lines, capable, waited, "the wait of %d s ran out" % timeout_s, timeline
        # A tenant that died (crashed, or killed for memory) enables nothing more.
        if look["state"] != "running":
            return lines, capable, waited, "the tenant is %s" % (look["state"] or "gone"), timeline
        if (look["serial"], round(look["cpu"])) != last_seen:
            last_seen, last_progress = (look["serial"], round(look["cpu"])), waited
        if waited - last_row >= MSI_TIMELINE_EVERY_S:
            timeline.append((round(waited), look["serial"], look["cpu"], look["load"]))
            last_row = waited
        if waited - last_progress > stall_s:
            return lines, capable, waited, "the L2 made no progress for %d s" % stall_s, timeline
        time.sleep(MSI_LOOK_EVERY_S)


@pytest.mark.acceptance
def test_planned_tenant_l2_kernel_enables_msi_and_the_hook_pins_it(lab):
    """The tenant's functions enable MSI/MSI-X only once a guest kernel drives
    them, so the tenant here boots a tiny L2 guest (TCG inside the TCG lab): the lab's
    own kernel and a small initramfs loading igbvf (the VF: MSI-X) and snd_hda_intel
    (the GPU's HDA function: MSI), by direct kernel boot: libvirt_pinned_domain's
    kernel, initrd and cmdline options, with the serial console logged through its
    serial_log option. Every
    vfio-msi/vfio-msix line of the tenant's functions must appear in the lab's
    /proc/interrupts and be allowed exactly on the node's housekeeping CPUs, pinned by
    the libvirt hook (which watches for as long as the domain's QEMU runs). Prints what
    the boot cost.

    First run, 2026-12-03 (2-core machine): initramfs 32.5 s, virsh start 206.3 s, start
    to both lines (vfio-msix[0] of the VF, vfio-msi[0] of the HDA; the HDA's vfio-intx
    went away) 455.8 s, the test 565 s. The lines came after the hook's watch of then
    (180 s) had ended and stayed allowed on 0-3, not 0-1: this test found that the hook
    must watch while the domain runs; its child now also leaves libvirt's pipes, which
    libvirt reads to their end, so that the watch cannot hold the start."""
    tenant = _planned_tenant(lab)
    args = _tenant_args(tenant, state="present", serial_log=L2_SERIAL_LOG, **L2_BOOT)
    functions = validation.tenant_functions(tenant)
    housekeeping = SEEN["plan_housekeeping"][str(tenant["node"])]
    wanted = format_cpulist(parse_cpulist(housekeeping))
    costs = {}
    # as in the start test: irqbalance would move the hook's pins back
    lab.ssh("systemctl stop irqbalance.service", check=False)
    _ok(lab, "gpuhost.kvm.irq_affinity", {"pci_devices": functions, "cpus": housekeeping,
                                          "persistent": True, "persist_as": VFIO_PIN})
    try:
        present = lab.ssh("ls -l %s %s" % (L2_BOOT["kernel"], L2_BOOT["initrd"]), check=False)
        assert present.returncode == 0, _why(lab, "the lab image has no tenant boot files (%s): "
                                                  "rebuild it (lab/build)" % present.stderr)
        _ok(lab, "gpuhost.kvm.libvirt_pinned_domain", args)
        t0 = time.monotonic()
        lab.ssh("virsh start %s" % TENANT, timeout=600)
        costs["start_s"] = round(time.monotonic() - t0, 1)
        # TCG inside the TCG lab: the wait's bounds are at MSI_WAIT_S.
        lines, capable, waited, ended, timeline = _wait_for_vfio_msi_lines(
            lab, functions, timeout_s=MSI_WAIT_S, domain=TENANT)
        costs["start_to_msi_lines_s"] = round(costs["start_s"] + waited, 1)
        # The hook re-applies every 2 s: give its next round the chance to pin lines
        # that appeared a moment ago.
        time.sleep(5)
        pinned = _wait_for_vfio_pins(lab, functions, housekeeping, timeout_s=30)
        serial = lab.ssh("tail -c 3000 %s" % L2_SERIAL_LOG, check=False).stdout
        progress = "\n".join("  %5d s: serial %d bytes, L2 QEMU %.0f s of CPU, lab load %.2f" % row
                             for row in timeline)
        print("L2 direct kernel boot costs %s; MSI(-X)-capable functions %s; vfio MSI lines %s;"
              " all vfio IRQs %s; the wait ended as %s\nL2 progress:\n%s\nL2 serial tail:\n%s"
              % (costs, capable, lines, pinned["irqs"], ended, progress, serial))
        missing = [f for f in capable if f not in lines]
        assert capable and not missing, _why(
            lab, "no vfio-msi/vfio-msix line within %.0f s for %s (found %s): %s.\nL2 progress:\n%s\n"
            "L2 serial:\n%s" % (waited, missing, lines, ended, progress, serial))
        unpinned = [row for rows in lines.values() for row in rows if pinned["irqs"].get(row[0]) != wanted]
        assert not unpinned, _why(lab, "vfio MSI lines not allowed on exactly %s: %s (now %s)"
                                  % (wanted, unpinned, pinned["irqs"]))
    finally:
        lab.ssh("virsh destroy %s" % TENANT, check=False)
        lab.module("gpuhost.kvm.libvirt_pinned_domain", {"name": TENANT, "state": "absent"})
        lab.module("gpuhost.kvm.irq_affinity", {"state": "absent", "persist_as": VFIO_PIN})
        lab.ssh("rm -f %s" % L2_SERIAL_LOG, check=False)
        lab.ssh("echo 0 > %s" % HUGEPAGES_NODE0, check=False)
        lab.ssh("systemctl start irqbalance.service", check=False)


def test_bench_realized_on_the_started_tenant_records_ratio_1(lab):
    """bench/bench_realized.py's core on what host_facts read of the tenant the test
    before started: each thread's planned and observed CPUs, the memory-node
    histogram, the hugepages consumed and the pool's drop, the vfio groups and IRQs; the
    realized ratio is 1.0, and the record goes to bench/results/realized-<UTC>.json. It
    reuses that start (no lab call of its own), so it stays in the tools/test tier.
    Written without a lab run (the lab could not be booted where it was written): its
    first run is its proof."""
    started = SEEN.get("started_tenant")
    assert started, "test_planned_tenant_starts_with_its_devices_on_vfio_under_tcg (before this) failed"
    tenant = SEEN["tenant_plan"]
    plan = {"housekeeping": SEEN["plan_housekeeping"], "tenants": [tenant]}
    record = bench_realized.build_record(plan, {TENANT: started["realized"]}, started["pools_before"],
                                         started["pools_after"], source="lab %s" % TENANT)
    path = bench_realized.write_record(record, os.path.join(REPO, "bench", "results"))
    seen = record["tenants"][TENANT]
    print("realized record %s: ratio %s, %d items, vfio IRQs %s, hugepages %s"
          % (path, record["realized_ratio"], record["items"], seen["vfio_irqs"], seen["hugepages_consumed"]))
    assert record["realized_ratio"] == 1.0, _why(lab, "realized ratio %s:\n%s" % (
        record["realized_ratio"], "\n".join(seen["findings"])), seen)
    node = str(tenant.get("memory_node", tenant["node"]))
    assert seen["hugepages_consumed"] == {node: {"2048": int(tenant["memory_gib"] * 512)}}, seen["hugepages_consumed"]
    assert sorted(seen["vfio"]["groups"]) and all(
        driver == "vfio-pci" for devices in seen["vfio"]["groups"].values() for driver in devices.values()), seen["vfio"]
    kinds = {item["kind"] for item in seen["items"]}
    assert {"vcpu", "emulator", "memory", "vfio"} <= kinds, kinds


def test_planned_tenant_boots_ovmf_with_firmware_efi_under_tcg(lab):
    """The same tenant with firmware efi (a UEFI tenant defined and
    started): libvirt's auto-selection picks Debian's plain OVMF from the ovmf
    package's descriptors (lab/packages.txt), the live XML and QEMU's command line name
    OVMF_CODE_4M.fd as the pflash code, the guest got its own NVRAM copy of
    OVMF_VARS_4M.fd, a second run changes nothing (the loader and NVRAM libvirt filled
    in are no difference) and state=absent removes the NVRAM with the domain.
    Written without a lab run (the lab could not be booted where it was written): its
    first run is its proof. What it expects of libvirt 9.0 (Debian 12's, as on the lab)
    was seen there with a private libvirtd and Debian 12's ovmf files on 2026-12-03:
    the live <os> loses firmware='efi' and gains <loader readonly='yes'
    type='pflash'>.../OVMF_CODE_4M.fd</loader> and <nvram template=...OVMF_VARS_4M.fd>,
    QEMU gets them as pflash0/pflash1 blockdevs, the stored definition is unchanged."""
    tenant = _planned_tenant(lab)
    descriptors = lab.ssh("ls /usr/share/qemu/firmware/", check=False).stdout.split()
    assert "60-edk2-x86_64.json" in descriptors, _why(
        lab, "the lab image has no ovmf descriptors (%s): is ovmf in lab/packages.txt and "
             "the image rebuilt?" % descriptors)
    args = {"name": TENANT, "plan": tenant, "domain_type": "qemu", "cpu_mode": "maximum",
            "network": {"type": "vf", "vf_mode": "hostdev"}, "autostart": False,
            "hide_kvm": False, "firmware": "efi", "state": "running"}
    nvram = None
    try:
        rc, result = lab.module("gpuhost.kvm.libvirt_pinned_domain", args, timeout=600)
        state = _domstate(lab, TENANT)
        log = lab.ssh("tail -n 20 /var/log/libvirt/qemu/%s.log" % TENANT, check=False).stdout
        assert rc == 0 and state == "running", _why(
            lab, "UEFI tenant did not start (%s):\n%s" % (state, log), result)
        live = ET.fromstring(_virsh(lab, "dumpxml", TENANT))
        loader, nvram_element = live.find("os/loader"), live.find("os/nvram")
        print("UEFI tenant: os=%s loader=%s nvram=%s" % (
            live.find("os").attrib, None if loader is None else (loader.attrib, loader.text),
            None if nvram_element is None else (nvram_element.attrib, nvram_element.text)))
        # libvirt 9.0 keeps firmware='efi' in the stored definition and, once it chose
        # the firmware at start, writes the choice (and no firmware attribute) live
        stored = ET.fromstring(_virsh(lab, "dumpxml", "--inactive", TENANT))
        assert stored.find("os").get("firmware") == "efi", _why(lab, "stored os has no firmware=efi")
        assert loader is not None and loader.text == "/usr/share/OVMF/OVMF_CODE_4M.fd", \
            _why(lab, "libvirt chose %r, not Debian's plain OVMF" % (
                None if loader is None else loader.text))
        assert (loader.get("type"), loader.get("readonly")) == ("pflash", "yes")
        assert loader.get("secure") in (None, "no"), loader.attrib
        assert nvram_element is not None and nvram_element.text, _why(lab, "no NVRAM in live XML")
        nvram = nvram_element.text.strip()
        assert lab.ssh("test -s %s" % shlex.quote(nvram), check=False).returncode == 0, \
            _why(lab, "the guest's NVRAM %s was not created" % nvram)
        pid = lab.ssh("cat /run/libvirt/qemu/%s.pid" % TENANT).stdout.strip()
        cmdline = lab.ssh("tr '\\0' ' ' < /proc/%s/cmdline" % pid).stdout
        print("QEMU command line: %s" % cmdline[:4000])
        assert "/usr/share/OVMF/OVMF_CODE_4M.fd" in cmdline and nvram in cmdline, \
            _why(lab, "QEMU was not given OVMF and the NVRAM as pflash:\n%s" % cmdline[:4000])
        assert "pflash" in cmdline, cmdline[:4000]

        again = _ok(lab, "gpuhost.kvm.libvirt_pinned_domain", args)
        assert again["changed"] is False and again["restart_required"] is False, _why(
            lab, "the expanded firmware XML reads as a change", again)
        bios = _ok(lab, "gpuhost.kvm.libvirt_pinned_domain", dict(args, firmware="bios"),
                   check_mode=True)
        assert bios["changed_elements"] == ["os"] and bios["restart_required"] is True, \
            _why(lab, "a firmware change is not one restart-requiring change", bios)
    finally:
        lab.module("gpuhost.kvm.libvirt_pinned_domain", {"name": TENANT, "state": "absent"})
        lab.ssh("echo 0 > %s" % HUGEPAGES_NODE0, check=False)
    if nvram:
        assert lab.ssh("test -e %s" % shlex.quote(nvram), check=False).returncode != 0, \
            _why(lab, "state=absent left the NVRAM %s behind" % nvram)


LARGE_BAR_TENANT = "tenant-largebar"
LARGE_BAR_SERIAL_LOG = "/var/log/libvirt/qemu/%s-serial.log" % LARGE_BAR_TENANT
# The guest kernel's PCI lines (6.1 as Debian builds it now: "BAR 2 [mem ...]"; older
# 6.1 builds: "reg 0x18: [mem ...]") for the passed-through testdev, whatever address
# the guest gives it.
GUEST_TESTDEV = re.compile(r"pci (\S+): \[1b36:0005\] type 00")
GUEST_BAR = r"pci %s: (?:BAR 2|reg 0x18):? \[mem (0x[0-9a-f]+)-(0x[0-9a-f]+) 64bit pref\]"
GUEST_BAR_FAILED = r"pci %s: BAR 2 .*(can't assign|failed to assign|can't claim)"
GUEST_BOOTED = "Run /init as init process"     # the kernel is done with PCI by then


def _guest_bar(serial):
    """(guest address, (start, end) of BAR 2 or None, failure line or None) of the
    testdev in the L2 guest's serial log; (None, None, None) before the PCI scan."""
    found = GUEST_TESTDEV.search(serial)
    if not found:
        return None, None, None
    address = re.escape(found.group(1))
    bars = re.findall(GUEST_BAR % address, serial)
    failed = re.search(GUEST_BAR_FAILED % address, serial)
    bar2 = (int(bars[-1][0], 16), int(bars[-1][1], 16)) if bars else None
    return found.group(1), bar2, failed.group(0) if failed else None


@pytest.mark.acceptance
def test_uefi_tenant_maps_the_64_gib_bar_of_the_gpu_behind_the_switch(lab):
    """The runbook's default GPU tenant on a datacentre-shaped host: the large-BAR GPU
    (one 64 GiB 64-bit BAR, behind the PCIe switch with ACS on node 1, a GPU by the
    inventory's list) planned, bound to vfio-pci and passed to a UEFI tenant defined
    with the collection's defaults (firmware efi as vm_gpu_firmware, no <kvm><hidden>,
    the address width of the one rule), booted (TCG inside the TCG lab) from the lab's
    kernel and tenant initramfs through Debian's OVMF. The guest kernel's own PCI lines
    on the serial console must show BAR 2 of the device with its 64 GiB at an address,
    and no failure to assign it."""
    lab.ssh("echo 512 > %s" % HUGEPAGES_NODE1)
    tenant_args = None
    try:
        plan = _ok(lab, "gpuhost.kvm.numa_cpuset", {
            "tenants": [{"name": LARGE_BAR_TENANT, "gpus": [LARGE_BAR_GPU], "vcpus": 2,
                         "memory_gib": 1, "hugepage_size": "2M"}],
            "gpu_devices": [LARGE_BAR_GPU], "hugepage_check": "free"})["plan"]
        tenant = plan["tenants"][0]
        assert tenant["node"] == 1 and [(g["address"], g["bar64_sizes"]) for g in tenant["gpus"]] == [
            (LARGE_BAR_GPU, [LARGE_BAR_SIZE])], tenant
        _ok(lab, "gpuhost.kvm.vfio_bind", {"devices": [LARGE_BAR_GPU], "gpu_devices": [LARGE_BAR_GPU]})
        assert _driver(lab, LARGE_BAR_GPU) == "vfio-pci"
        tenant_args = {"name": LARGE_BAR_TENANT, "plan": tenant, "domain_type": "qemu",
                       "cpu_mode": "maximum", "autostart": False, "firmware": "efi",
                       "state": "present", "serial_log": LARGE_BAR_SERIAL_LOG}
        tenant_args.update(L2_BOOT)
        planned = _ok(lab, "gpuhost.kvm.libvirt_pinned_domain", tenant_args, check_mode=True)
        width = planned["address_width"]
        print("planned address width: %s" % width)
        window_first, window_last = (int(part, 16) for part in width["window"].split("-"))
        assert window_last - window_first + 1 >= LARGE_BAR_SIZE, width
        _ok(lab, "gpuhost.kvm.libvirt_pinned_domain", tenant_args)
        xml = ET.fromstring(_virsh(lab, "dumpxml", "--inactive", LARGE_BAR_TENANT))
        assert xml.find("os").get("firmware") == "efi"
        assert xml.find("features/kvm/hidden") is None, "a default GPU tenant hides KVM"
        maxphysaddr = xml.find("cpu/maxphysaddr")
        assert (maxphysaddr.get("mode"), int(maxphysaddr.get("bits"))) == ("emulate", width["bits"])

        # The L2 QEMU's memory is bound to node 1 with the tenant's hugepages: its TCG
        # code buffer and the page tables of the 64 GiB BAR mapping need what is left.
        # In an acceptance run on 2026-12-05 the kernel's OOM killer took it 4 minutes
        # in (node 1 short after the lane's earlier tests); the page cache goes first.
        lab.ssh("sync; echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory", check=False)
        node1 = lab.ssh("grep -E 'MemFree|FilePages' /sys/devices/system/node/node1/meminfo", check=False).stdout
        print("node 1 before the start:\n%s" % node1)
        t0 = time.monotonic()
        lab.ssh("virsh start %s" % LARGE_BAR_TENANT, timeout=900)
        started_s = time.monotonic() - t0
        serial, state = "", "running"
        while time.monotonic() - t0 < 1800:
            serial = lab.ssh("cat %s 2>/dev/null || true" % LARGE_BAR_SERIAL_LOG, check=False).stdout
            guest, bar2, failed = _guest_bar(serial)
            if failed or GUEST_BOOTED in serial:
                break
            # A tenant that died (crashed, or killed for memory) boots no further.
            state = _domstate(lab, LARGE_BAR_TENANT)
            if state != "running":
                break
            time.sleep(10)
        waited_s = time.monotonic() - t0
        assert state == "running" or GUEST_BOOTED in serial, _why(
            lab, "the UEFI tenant stopped (%s) %.0f s after its start; its log and the kernel's:\n%s" % (
                state, waited_s, lab.ssh("tail -n 5 /var/log/libvirt/qemu/%s.log; dmesg | grep -iE 'oom|killed process'"
                                         " | tail -n 5" % LARGE_BAR_TENANT, check=False).stdout))
        guest, bar2, failed = _guest_bar(serial)
        lines = [line for line in serial.splitlines() if guest and guest in line or "root bus resource" in line]
        print("UEFI tenant with the 64 GiB BAR: virsh start %.0f s, start to the guest's shell %.0f s;"
              " guest address %s, BAR 2 %s\n%s" % (started_s, waited_s, guest,
                                                   bar2 and "%#x-%#x" % bar2, "\n".join(lines)))
        assert guest, _why(lab, "the guest kernel never listed the testdev in %.0f s; serial tail:\n%s"
                           % (waited_s, serial[-3000:]))
        assert not failed, _why(lab, "the guest kernel could not map the 64 GiB BAR: %s\n%s"
                                % (failed, "\n".join(lines)))
        assert bar2 and bar2[0] and bar2[1] - bar2[0] + 1 == LARGE_BAR_SIZE, _why(
            lab, "no 64 GiB BAR 2 at an address in the guest:\n%s" % "\n".join(lines))
        assert window_first <= bar2[0] and bar2[1] <= window_last, (width, "%#x-%#x" % bar2)
        assert GUEST_BOOTED in serial, _why(lab, "the guest did not reach its shell:\n%s" % serial[-3000:])
    finally:
        lab.ssh("virsh destroy %s" % LARGE_BAR_TENANT, check=False)
        lab.module("gpuhost.kvm.libvirt_pinned_domain", {"name": LARGE_BAR_TENANT, "state": "absent"})
        lab.module("gpuhost.kvm.vfio_bind", {"devices": [LARGE_BAR_GPU], "state": "unbound",
                                             "gpu_devices": [LARGE_BAR_GPU]})
        lab.ssh("rm -f %s" % LARGE_BAR_SERIAL_LOG, check=False)
        lab.ssh("echo 0 > %s" % HUGEPAGES_NODE1, check=False)
    assert _driver(lab, LARGE_BAR_GPU) is None


# -- persistence: the one reboot ---------------------------------------------------------

def test_vfio_binding_and_vfs_survive_a_reboot(lab):
    t0 = time.monotonic()
    lab.reboot()
    SEEN["reboot_s"] = round(time.monotonic() - t0, 1)
    group = _group(lab, GPU0)
    for address in (GPU0, GPU0_HDA):
        assert _driver(lab, address) == "vfio-pci", _why(lab, "%s after reboot" % address)
    assert lab.ssh("test -c /dev/vfio/%d" % group, check=False).returncode == 0
    # vfio-pci had them before the native driver could: the kernel log of this boot
    # never shows bochs-drm or snd_hda_intel on them
    log = lab.ssh("journalctl -k -b -q --no-pager -o cat | grep -E '(%s|%s)' || true"
                  % (GPU0, GPU0_HDA)).stdout
    claimed = [line for line in log.splitlines()
               if re.search(r"^(bochs-drm|snd_hda_intel) ", line)]
    assert not claimed, _why(lab, "a native driver claimed the GPU first:\n%s" % log)
    assert lab.ssh("systemctl is-active gpuhost-sriov.service", check=False).stdout.strip() == \
        "active", _why(lab, lab.ssh("systemctl status gpuhost-sriov.service --no-pager",
                                    check=False).stdout)
    _check_vfs_on_vfio(lab, 3)
    # the NIC's VFs came back on vfio-pci with their MAC, VLAN, spoof checking and trust
    for address in ("0000:23:10.0", "0000:23:10.2"):
        assert _driver(lab, address) == "vfio-pci", _why(lab, "%s after reboot" % address)
    _check_nic_vf_settings(lab)


def test_cleanup_gives_devices_back_to_their_drivers(lab):
    before = SEEN.get("drivers_before") or {GPU0: "bochs-drm", GPU0_HDA: "snd_hda_intel"}
    args = {"devices": [GPU0], "state": "unbound", "persistent": True}
    result = _ok(lab, "gpuhost.kvm.vfio_bind", args)
    assert result["changed"] is True
    for address in (GPU0, GPU0_HDA):
        assert _driver(lab, address) == before[address], _why(lab, address, result)
        assert lab.read(PCI + address + "/driver_override").strip() == "(null)"
        assert lab.ssh("test -e /etc/driverctl.d/pci-%s" % address, check=False).returncode != 0
    assert _ok(lab, "gpuhost.kvm.vfio_bind", args)["changed"] is False

    result = _ok(lab, "gpuhost.kvm.sriov_vfs",
                 {"pf": NVME_PF, "num_vfs": 0, "persistent": True})
    assert result["changed"] is True and result["vfs"] == []
    assert _vfs(lab) == {}
    assert lab.read(PCI + NVME_PF + "/sriov_numvfs").strip() == "0"
    assert NVME_PF not in json.loads(lab.read("/etc/gpuhost/sriov.json"))["pfs"]
    result = _ok(lab, "gpuhost.kvm.sriov_vfs", {"pf": NIC_PF, "num_vfs": 0, "persistent": True})
    assert result["changed"] is True and result["vfs"] == []
    assert lab.read(PCI + NIC_PF + "/sriov_numvfs").strip() == "0"
    assert NIC_PF not in json.loads(lab.read("/etc/gpuhost/sriov.json"))["pfs"]
