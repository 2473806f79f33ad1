# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tenant_scrub against the sysfs simulator (tests/support/sysfs_sim.py): the resets of a
released tenant's GPU functions, its VF's settings through a stand-in for iproute2 (an
SR-IOV NIC cannot run here), the refusals that write nothing, a failure mid-scrub, and
the reset-method gate of libvirt_pinned_domain."""

import errno
import json
import os

import pytest
import yaml
from support.module_args import patch_module_args

from support.sysfs_sim import SimulatedKernel, TreeBuilder, run_module, snapshot
from support import REPO
from support.fakes import FakeIproute

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger as ledger_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import tenant_scrub

GPU, HDA = "0000:41:00.0", "0000:41:00.1"
PF, VF0 = "0000:03:00.0", "0000:03:00.2"
OTHER_GPU = "0000:42:00.0"
STRANGER = "0000:41:01.0"
TENANT = "tenant-b"
# What the tenant's VF carries when it leaves: its MAC, VLAN 100, trusted, no spoof check
TENANT_VF = [{"vf": 0, "address": "52:54:00:6c:00:01", "vlan_list": [{"vlan": 100}],
              "spoofchk": False, "trust": True, "link_state": "auto"},
             {"vf": 1, "address": "00:00:00:00:00:00", "spoofchk": True, "trust": False,
              "link_state": "auto"}]


def build_host(root, hda_reset="flr bus", stranger_on_the_gpus_bus=False):
    """Two GPUs (each with its HDA) on vfio-pci behind root ports, and a NIC PF eno1
    with two VFs; a released tenant held GPU 41:00.0 and VF 0. ``stranger_on_the_gpus_bus``
    puts a USB controller the host uses (41:01.0, xhci_hcd) on the GPU's bus, so that
    vfio-pci can no longer reset that bus."""
    tree = TreeBuilder(root)
    tree.cpus(online="0-3")
    tree.iommu()
    for port, group in (("0000:00:02.0", 10), ("0000:00:03.0", 11), ("0000:00:05.0", 12)):
        tree.pci(port, 0x060400, vendor=0x8086, driver="pcieport", iommu_group=group)
    tree.pci(GPU, 0x030200, driver="vfio-pci", iommu_group=2, parent="0000:00:02.0")
    tree.pci(HDA, 0x040300, driver="vfio-pci", iommu_group=2, parent="0000:00:02.0",
             reset_method=hda_reset)
    if stranger_on_the_gpus_bus:
        tree.pci(STRANGER, 0x0c0330, driver="xhci_hcd", iommu_group=9, parent="0000:00:02.0",
                 reset_method=None)
    tree.pci(OTHER_GPU, 0x030200, driver="vfio-pci", iommu_group=3, parent="0000:00:03.0")
    tree.pci(PF, 0x020000, vendor=0x15b3, device=0x101d, driver="mlx5_core",
             iommu_group=5, parent="0000:00:05.0", netdev="eno1", sriov_totalvfs=8,
             sriov_offset=2, sriov_stride=1)
    sim = SimulatedKernel(root, vf_drivers={PF: "mlx5_core"})
    sim.write("/sys/bus/pci/devices/%s/sriov_numvfs" % PF, "2")
    sim.writes.clear()
    return sim


def write_ledger(path, tenants):
    ledger_core.write_ledger(path, ledger_core.LedgerData(tenants=tenants))


def tenant(name=TENANT, gpus=((GPU, HDA),), vf=True):
    return {"name": name,
            "gpus": [{"address": g[0], "functions": list(g)} for g in gpus],
            "vf": {"pf": PF, "address": VF0, "index": 0, "mac": "52:54:00:6c:00:01",
                   "vlan": 100, "spoofchk": False, "trust": True} if vf else None}


@pytest.fixture
def env(tmp_path):
    sim = build_host(str(tmp_path / "host"))
    path = str(tmp_path / "state" / "ledger.json")
    write_ledger(path, [tenant(), tenant("tenant-c", gpus=((OTHER_GPU,),), vf=False)])
    return sim, path


def scrub(sim, path, check_mode=False, runner=None, **args):
    args = dict({"name": TENANT, "root": sim.root, "ledger_path": path}, **args)
    return run_module(tenant_scrub, "TenantScrub", args, sim, check_mode=check_mode,
                      runner=runner).result


def refused(sim, path, **args):
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        scrub(sim, path, **args)
    assert snapshot(sim.root) == before and sim.writes == []
    return info.value


def test_check_mode_reports_the_resets_and_writes_nothing(env):
    sim, path = env
    before = snapshot(sim.root)
    ip = FakeIproute(TENANT_VF)
    result = scrub(sim, path, check_mode=True, runner=ip)
    assert result["changed"] is True and result["reset"] == []
    assert result["steps"] == [
        "write 1 to /sys/bus/pci/devices/%s/reset" % GPU,
        "write 1 to /sys/bus/pci/devices/%s/reset" % HDA,
        "ip link set dev eno1 vf 0 mac 00:00:00:00:00:00 vlan 0 trust off spoofchk on"]
    kernel = result["diff"][0]
    assert "/sys/bus/pci/devices/%s/reset = 1 (reset)" % GPU in kernel["after"]
    assert snapshot(sim.root) == before and sim.writes == [] and sim.resets == []
    assert all(call[:3] != ["ip", "link", "set"] for call in ip.calls)


def test_scrub_resets_every_function_and_clears_the_vf(env):
    sim, path = env
    ip = FakeIproute(TENANT_VF)
    result = scrub(sim, path, runner=ip)
    assert sim.resets == [GPU, HDA] and result["reset"] == [GPU, HDA]
    assert [w for w in sim.writes if w[0].endswith("/reset")] == [
        ("/sys/bus/pci/devices/%s/reset" % GPU, "1"),
        ("/sys/bus/pci/devices/%s/reset" % HDA, "1")]
    assert ip.calls[-1] == ["ip", "link", "set", "dev", "eno1", "vf", "0", "mac",
                            "00:00:00:00:00:00", "vlan", "0", "trust", "off", "spoofchk",
                            "on"]
    assert result["vf"]["settings"] == {"mac": "00:00:00:00:00:00", "vlan": 0,
                                        "spoofchk": True, "trust": False}
    assert [d["action"] for d in result["devices"]] == ["reset", "reset"]
    assert result["changed"] is True
    # the scrub leaves the ledger alone: releasing is tenant_ledger's step
    assert TENANT in ledger_core.read_ledger(path).names()


def test_a_test_root_skips_the_vf_settings_and_says_so(env):
    sim, path = env
    result = scrub(sim, path)
    assert sim.resets == [GPU, HDA]
    assert any("VF(s) 0 on eno1" in s for s in result["skipped_actions"])


def test_tenant_not_in_the_ledger_has_nothing_to_scrub(env):
    sim, path = env
    result = scrub(sim, path, name="tenant-z")
    assert result["changed"] is False and result["in_ledger"] is False
    assert sim.writes == []


def test_a_function_off_vfio_pci_is_refused(env):
    sim, path = env
    os.unlink(os.path.join(sim.device_dir(HDA), "driver"))
    err = refused(sim, path)
    assert "%s is on no driver, not vfio-pci" % HDA in err.message
    assert "stays held" in err.message and err.field == "name"


def test_a_group_still_open_is_refused_naming_the_process(env):
    sim, path = env
    tree = TreeBuilder(sim.root)
    tree.write("/dev/vfio/2", "")
    tree.open_fd(4242, 31, "/dev/vfio/2", comm="qemu-system-x86")
    err = refused(sim, path)
    assert "PID 4242 (qemu-system-x86) holds /dev/vfio/2 open" in err.message
    assert err.details["refusals"][0]["address"] == GPU


def test_no_reset_method_is_refused_then_allowed_by_the_override(tmp_path):
    """An HDA function without a reset file, on a bus vfio-pci cannot reset (a USB
    controller of the host's shares it): nothing wipes it, so the scrub refuses."""
    sim = build_host(str(tmp_path / "host"), hda_reset=None, stranger_on_the_gpus_bus=True)
    path = str(tmp_path / "ledger.json")
    write_ledger(path, [tenant()])
    err = refused(sim, path)
    assert err.field == "allow_no_reset"
    assert "%s has no reset file" % HDA in err.message and "next tenant" in err.message
    result = scrub(sim, path, allow_no_reset=True)
    assert sim.resets == [GPU]
    assert [d["action"] for d in result["devices"]] == ["reset",
                                                        "not reset (allow_no_reset)"]
    assert "allowed by allow_no_reset" in result["warnings_scrub"][0]


def test_a_function_without_reset_alone_with_its_gpu_is_reset_by_vfio_on_release(tmp_path):
    """The lab's GPU and most GeForce boards: the HDA function has no reset file (the
    kernel offers a bus reset only to the one device on a bus), but its bus behind the
    root port holds only the tenant's functions, all on vfio-pci, so vfio-pci resets the
    bus when the domain lets them go. The scrub resets the GPU and says who resets the
    HDA; nothing is refused."""
    sim = build_host(str(tmp_path / "host"), hda_reset=None)
    path = str(tmp_path / "ledger.json")
    write_ledger(path, [tenant()])
    result = scrub(sim, path)
    assert sim.resets == [GPU]
    assert [d["action"] for d in result["devices"]] == [
        "reset", "reset by vfio-pci (its bus, when the domain let it go)"]
    assert not result["warnings_scrub"]


@pytest.mark.parametrize("text", ["\n", "bogus\n", "flr " * 5000])
def test_hostile_reset_method_is_no_usable_reset(env, text):
    sim, path = env
    with open(os.path.join(sim.device_dir(GPU), "reset_method"), "w") as handle:
        handle.write(text)
    err = refused(sim, path)
    assert err.field == "allow_no_reset" and GPU in err.message
    assert len(err.message) < 2000


def test_a_reset_file_that_is_a_link_is_refused(env, tmp_path):
    sim, path = env
    target = str(tmp_path / "elsewhere")
    open(target, "w").close()
    reset = os.path.join(sim.device_dir(GPU), "reset")
    os.unlink(reset)
    os.symlink(target, reset)
    err = refused(sim, path)
    assert "reset is a symbolic link" in err.message


def test_bus_only_reset_shared_with_another_device_is_refused(tmp_path):
    root = str(tmp_path / "host")
    tree = TreeBuilder(root)
    tree.cpus(online="0-3")
    tree.iommu()
    tree.pci("0000:00:02.0", 0x060400, driver="pcieport", iommu_group=1)
    tree.pci("0000:05:00.0", 0x030200, driver="vfio-pci", iommu_group=2,
             parent="0000:00:02.0", reset_method="bus")
    tree.pci("0000:05:01.0", 0x010802, driver="nvme", iommu_group=3,
             parent="0000:00:02.0", reset_method="flr")
    sim = SimulatedKernel(root)
    path = str(tmp_path / "ledger.json")
    write_ledger(path, [tenant(gpus=(("0000:05:00.0",),), vf=False)])
    err = refused(sim, path)
    assert "only be reset by a bus reset, which would reset 0000:05:01.0 too" in err.message


def test_a_bus_only_gpu_beside_its_own_hda_is_left_to_vfio_not_written(tmp_path):
    """The lab's GPU 21:00.0: its reset_method says "bus" (probed before its HDA
    appeared), but the kernel refuses that reset with ENOTTY while the HDA shares the
    bus. Both functions are the tenant's, so vfio-pci's bus reset on release wipes them;
    the scrub writes no reset for either."""
    sim = build_host(str(tmp_path / "host"), hda_reset=None)
    with open(os.path.join(os.path.realpath(os.path.join(sim.root, "sys/bus/pci/devices", GPU)),
                           "reset_method"), "w") as handle:
        handle.write("bus\n")
    path = str(tmp_path / "ledger.json")
    write_ledger(path, [tenant()])
    result = scrub(sim, path)
    assert sim.resets == []
    assert [d["action"] for d in result["devices"]] == [
        "reset by vfio-pci (its bus, when the domain let it go)"] * 2


def test_failure_mid_scrub_names_what_was_reset_and_keeps_the_ledger(env):
    sim, path = env
    sim.fail_on["/sys/bus/pci/devices/%s/reset" % HDA] = errno.EIO
    ledger_before = open(path).read()
    args = {"name": TENANT, "root": sim.root, "ledger_path": path,
            "_ansible_check_mode": False, "_ansible_diff": False}
    with patch_module_args(args):
        module = tenant_scrub.build_module()
    worker = tenant_scrub.TenantScrub(module, writer=sim, runner=FakeIproute(TENANT_VF))
    with pytest.raises(GpuhostError) as info:
        worker.run()
    assert sim.resets == [GPU]
    assert info.value.details["reset"] == [GPU]
    assert info.value.details["failed_step"] == "write 1 to /sys/bus/pci/devices/%s/reset" % HDA
    assert "stays in the ledger (not released)" in info.value.message
    assert worker.result["reset"] == [GPU] and worker.result["changed"] is True
    # The tenant stays held; its GPU is quarantined as not wiped, nothing else changed.
    before, after = json.loads(ledger_before)["body"], json.loads(open(path).read())["body"]
    held = after.pop("quarantine")
    assert after == before and list(held) == [GPU] and held[GPU]["wiped"] is False
    assert held[GPU]["functions"] == [GPU, HDA] and held[GPU]["tenant"] == TENANT
    assert "the reset of %s failed" % HDA in held[GPU]["reasons"][0]
    assert info.value.details["quarantined"] == GPU and "recover_action reset" in info.value.fix


def test_kernel_refuses_a_reset_when_resets_are_disabled(env):
    # the simulator's reset_store: an emptied reset_method leaves no method (ENOTTY)
    sim, _path = env
    with open(os.path.join(sim.device_dir(GPU), "reset_method"), "w") as handle:
        handle.write("\n")
    with pytest.raises(OSError) as info:
        sim.write("/sys/bus/pci/devices/%s/reset" % GPU, "1")
    assert info.value.errno == errno.ENOTTY
    with pytest.raises(OSError) as info:
        sim.write("/sys/bus/pci/devices/%s/reset" % HDA, "2")
    assert info.value.errno == errno.EINVAL and sim.resets == []


@pytest.mark.parametrize("name", ["../x", "tenant\nb", "a" * 300])
def test_hostile_tenant_names_are_refused(env, name):
    sim, path = env
    err = refused(sim, path, name=name)
    assert err.field == "name"


def test_offboard_playbook_scrubs_after_the_domain_and_before_the_ledger():
    with open(os.path.join(REPO, "playbooks", "tenant_offboard.yml")) as handle:
        play = yaml.safe_load(handle)[0]
    modules = [next((k for k in task if k.startswith("gpuhost.kvm.")), None)
               for task in play["tasks"]]
    domain = modules.index("gpuhost.kvm.libvirt_pinned_domain")
    scrub_at = modules.index("gpuhost.kvm.tenant_scrub")
    release = next(index for index, task in enumerate(play["tasks"])
                   if (task.get("gpuhost.kvm.tenant_ledger") or {}).get("state") == "absent")
    # the shared-NVSwitch model's partition goes after the domain, before the scrub
    deactivate = modules.index("gpuhost.kvm.fabric_partition")
    assert domain < deactivate < scrub_at < release


# -- the gate: libvirt_pinned_domain refuses a GPU that cannot be wiped ----------------

def gate_env(tmp_path, remove_reset_of=(), stranger_on_the_gpus_bus=False):
    """libvirt_pinned_domain's Env (libvirt's test driver) on the simulated host, with
    the reset and reset_method files of ``remove_reset_of`` removed, and with
    ``stranger_on_the_gpus_bus`` a USB controller of the host's on the GPU's bus."""
    pytest.importorskip("libvirt", reason="libvirt-python is in requirements.txt")
    from support.sysfs_sim import build_sim_host
    from support.domain_xml import Env
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
        read_host_topology)
    root = build_sim_host(str(tmp_path / "host"))
    if stranger_on_the_gpus_bus:
        TreeBuilder(root).pci(STRANGER, 0x0c0330, driver="xhci_hcd", iommu_group=9,
                              parent="0000:00:02.0", reset_method=None)
    for address in remove_reset_of:
        folder = os.path.realpath(os.path.join(root, "sys/bus/pci/devices", address))
        for name in ("reset", "reset_method"):
            os.unlink(os.path.join(folder, name))
    env = Env(tmp_path, topology=read_host_topology(root, with_irqs=False))
    env.root = root
    return env


def gpu_domain(**extra):
    args = dict(name="tenant-x", vcpus=2, vcpu_pins=[5, 6], memory_gib=1,
                hugepage_size="none", memory_nodes="1", gpus=[GPU])
    args.update(extra)
    return args


def test_gate_refuses_a_gpu_without_reset_then_the_override_allows_it(tmp_path):
    env = gate_env(tmp_path, remove_reset_of=(HDA,), stranger_on_the_gpus_bus=True)
    err = env.fail(**gpu_domain())
    assert err.field == "allow_no_reset"
    assert ("refusing to give %s to a tenant: %s has no reset file" % (HDA, HDA)
            in err.message)
    assert "cannot be wiped when the tenant leaves" in err.message
    assert err.details["refusals"][0]["kind"] == "no_reset"
    assert env.names() == []
    result = env.run(**gpu_domain(allow_no_reset=True))
    assert env.names() == ["tenant-x"]
    assert any("allowed by allow_no_reset" in w for w in result["warnings_preflight"])


def test_gate_lets_an_hda_without_reset_through_when_vfio_resets_its_bus(tmp_path):
    # What the lab showed: QEMU's emulated HDA function has no reset file, but it shares
    # its bus with its GPU only, so vfio-pci's bus reset on release wipes both.
    env = gate_env(tmp_path, remove_reset_of=(HDA,))
    result = env.run(**gpu_domain())
    assert env.names() == ["tenant-x"]
    assert not any("reset" in w for w in result["warnings_preflight"])


def test_a_function_without_reset_on_a_root_bus_is_refused(tmp_path):
    # A root bus has no bridge above it, so no secondary bus reset: nothing wipes it.
    from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.tenant_scrub import (
        no_reset_functions)
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import read_pci_functions
    root = str(tmp_path / "host")
    tree = TreeBuilder(root)
    tree.cpus(online="0-3")
    tree.iommu()
    tree.pci("0000:00:05.0", 0x030200, driver="vfio-pci", iommu_group=2, reset_method=None)
    functions = read_pci_functions(root)
    assert [c.address for c in no_reset_functions(functions, ["0000:00:05.0"])] == [
        "0000:00:05.0"]


def test_gate_lets_a_resettable_gpu_through(tmp_path):
    env = gate_env(tmp_path)
    result = env.run(**gpu_domain())
    assert env.names() == ["tenant-x"]
    assert not any("reset" in w for w in result["warnings_preflight"])


def test_a_topology_not_read_from_sysfs_is_not_refused_for_an_unknown_reset():
    # the topology option's dict form (topology_to_dict of a literal topology) does not
    # say whether the reset file exists: unknown is not "no reset", and is not refused
    from support.domain_xml import RUNBOOK_GPU, runbook_topology
    from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.tenant_scrub import (
        no_reset_functions)
    topo = runbook_topology()
    assert topo.pci[RUNBOOK_GPU].reset_file is None
    assert no_reset_functions(topo.pci, [RUNBOOK_GPU]) == []


# -- the release: the same policy as the scrub ----------------------------------------------

def _release(sim, path):
    from ansible_collections.gpuhost.kvm.plugins.modules import tenant_ledger
    args = {"state": "absent", "names": [TENANT], "path": path, "root": sim.root,
            "_ansible_check_mode": False, "_ansible_diff": False}
    with patch_module_args(args):
        module = tenant_ledger.build_module()
    worker = tenant_ledger.TenantLedger(module)
    worker.run()
    return worker.result


def test_a_tenant_whose_qemu_holds_its_vfio_group_is_not_released(env):
    """The ledger refuses what the scrub refuses: a domain's QEMU still holding the
    tenant's /dev/vfio/<group> means its GPU is in use, and a release would hand it to
    the next onboarding."""
    sim, path = env
    tree = TreeBuilder(sim.root)
    tree.write("/dev/vfio/2", "")
    tree.open_fd(4242, 31, "/dev/vfio/2", comm="qemu-system-x86")
    before = open(path).read()
    with pytest.raises(GpuhostError) as info:
        _release(sim, path)
    err = info.value
    assert err.field == "names" and "refusing to release tenant %s" % TENANT in err.message
    assert "PID 4242 (qemu-system-x86) holds /dev/vfio/2" in err.message
    assert "libvirt_pinned_domain state=absent" in err.fix
    assert open(path).read() == before


def test_a_gpu_whose_reset_failed_is_skipped_then_wiped_only_by_a_recovery_reset(env):
    """After the failed reset above: a second offboarding scrubs the tenant without
    resetting the quarantined GPU again (so it can be released); reading the GPU again
    does not lift the quarantine, since what the tenant left may still be in it; a
    recovery reset of both functions does, once the reset succeeds."""
    from ansible_collections.gpuhost.kvm.plugins.modules import tenant_ledger
    sim, path = env
    sim.fail_on["/sys/bus/pci/devices/%s/reset" % HDA] = errno.EIO
    with pytest.raises(GpuhostError):
        scrub(sim, path, runner=FakeIproute(TENANT_VF))
    sim.resets.clear()
    again = scrub(sim, path, runner=FakeIproute(TENANT_VF))
    assert again["reset"] == [] and sim.resets == []
    assert [d["action"].split(" (")[0] for d in again["devices"]] == ["not reset", "not reset"]

    data = ledger_core.read_ledger(path)
    read_only, lifted, kept = ledger_core.lift_quarantine(data, {GPU: []})
    assert lifted == [] and "recover_action reset" in kept[GPU][-1]

    args = {"path": path, "root": sim.root, "recover": [GPU], "recover_action": "reset",
            "_ansible_check_mode": False, "_ansible_diff": False}
    with patch_module_args(args):
        worker = tenant_ledger.TenantLedger(tenant_ledger.build_module(), writer=sim)
    assert worker.reset_quarantined(data, [GPU]) == ()           # the HDA's reset fails again
    del sim.fail_on["/sys/bus/pci/devices/%s/reset" % HDA]
    sim.resets.clear()
    assert worker.reset_quarantined(data, [GPU]) == (GPU,) and sim.resets == [GPU, HDA]
    assert worker.recovery_steps == ["write 1 to /sys/bus/pci/devices/%s/reset" % GPU,
                                     "write 1 to /sys/bus/pci/devices/%s/reset" % HDA]
    wiped, lifted, kept = ledger_core.lift_quarantine(data, {GPU: []}, reset_done=(GPU,))
    assert lifted == [GPU] and kept == {} and wiped.quarantine == {}
    with pytest.raises(GpuhostError) as refused_recovery:
        worker.reset_quarantined(wiped, [GPU])
    assert refused_recovery.value.field == "recover[0]"


def _quarantined(sim, path):
    """The ledger with GPU 41:00.0 (and its HDA) in quarantine, off the bus, and each
    function's remove file and its root port's rescan file, as sysfs has them."""
    data = ledger_core.quarantine(ledger_core.read_ledger(path), {GPU: ["%s fell off the bus" % GPU]},
                                  TENANT, "2026-12-05T12:00:00Z", functions={GPU: [GPU, HDA]})
    ledger_core.write_ledger(path, data)
    for address in (GPU, HDA):
        TreeBuilder(sim.root).write("/sys/bus/pci/devices/%s/remove" % address, "")
    TreeBuilder(sim.root).write("/sys/bus/pci/devices/0000:00:02.0/rescan", "")
    return data


def ledger_worker(sim, path, check_mode=False):
    """tenant_ledger's worker for a recovery with remove and rescan (this file's ledger
    holds tenants in a short form, so its recovery steps are driven one by one, as the
    reset recovery above is)."""
    from ansible_collections.gpuhost.kvm.plugins.modules import tenant_ledger
    args = {"path": path, "root": sim.root, "recover": [GPU], "recover_action": "rescan",
            "_ansible_check_mode": check_mode, "_ansible_diff": False}
    with patch_module_args(args):
        return tenant_ledger.TenantLedger(tenant_ledger.build_module(), writer=sim)


RESCAN_STEPS = ["write 1 to /sys/bus/pci/devices/%s/remove" % HDA,
                "write 1 to /sys/bus/pci/devices/%s/remove" % GPU,
                "write 1 to /sys/bus/pci/devices/0000:00:02.0/rescan"]
RESET_STEPS = ["write 1 to /sys/bus/pci/devices/%s/reset" % GPU,
               "write 1 to /sys/bus/pci/devices/%s/reset" % HDA]


def test_a_rescan_removes_each_function_rescans_the_root_port_then_resets(env):
    sim, path = env
    data = _quarantined(sim, path)
    planned = ledger_worker(sim, path, check_mode=True)
    assert planned.rescan_quarantined(data, [GPU]) == {} and planned.reset_quarantined(data, [GPU]) == ()
    assert planned.recovery_steps == RESCAN_STEPS + RESET_STEPS
    assert sim.removed == [] and sim.rescans == [] and sim.resets == []
    worker = ledger_worker(sim, path)
    assert worker.rescan_quarantined(data, [GPU]) == {}
    assert worker.reset_quarantined(data, [GPU]) == (GPU,)
    assert sim.removed == [HDA, GPU] and sim.rescans == ["/sys/bus/pci/devices/0000:00:02.0/rescan"]
    assert sim.resets == [GPU, HDA] and worker.recovery_steps == RESCAN_STEPS + RESET_STEPS
    lifted = ledger_core.lift_quarantine(data, {GPU: []}, reset_done=(GPU,))[1]
    assert lifted == [GPU]


def test_a_gpu_found_again_on_a_host_driver_is_named_and_not_reset(env):
    sim, path = env
    data = _quarantined(sim, path)

    def found_on_snd_hda_intel():
        sim.write("/sys/bus/pci/devices/%s/driver/unbind" % HDA, HDA)
        os.makedirs(sim.path("/sys/bus/pci/drivers/snd_hda_intel"), exist_ok=True)
        sim.write("/sys/bus/pci/drivers/snd_hda_intel/bind", HDA)
    sim.on_rescan = found_on_snd_hda_intel
    off = ledger_worker(sim, path).rescan_quarantined(data, [GPU])
    assert list(off) == [GPU]
    assert "after the rescan, %s is not on vfio-pci (%s: snd_hda_intel)" % (HDA, HDA) in off[GPU][0]


def test_a_rescan_of_a_gpu_a_process_holds_is_refused_before_any_write(env, monkeypatch):
    sim, path = env
    data = _quarantined(sim, path)
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host import safety_context
    monkeypatch.setattr(safety_context, "open_users", lambda root, nodes: {4242: ("qemu-system-x86", nodes)})
    sim.writes.clear()
    with pytest.raises(GpuhostError) as info:
        ledger_worker(sim, path).rescan_quarantined(data, [GPU])
    assert "refusing to remove and rescan %s" % GPU in info.value.msg and "PID 4242" in info.value.msg
    assert sim.writes == [] and sim.removed == []
