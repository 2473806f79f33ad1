# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sriov_vfs against the sysfs simulator: counts through 0, drivers, persistence,
per-VF settings and the errors that must leave the tree alone."""

import json
import os
import subprocess

import pytest

from support.sysfs_sim import SimulatedKernel, build_sim_host, run_module, snapshot
from support.domain_xml import write_libvirt_test_node

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import sriov_vfs as sriov
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import sriov_vfs
from support.fakes import FakeIproute

PF = "0000:03:00.0"       # eno1, mlx5_core, sriov_offset 2, stride 1


@pytest.fixture
def sim(tmp_path):
    return SimulatedKernel(build_sim_host(str(tmp_path / "host")),
                           vf_drivers={PF: "mlx5_core", "0000:44:00.0": "mlx5_core"})


def configure(sim, check_mode=False, runner=None, **args):
    args.setdefault("root", sim.root)
    return run_module(sriov_vfs, "SriovConfigurator", args, sim, check_mode=check_mode,
                      runner=runner)


def failed(sim, **args):
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        configure(sim, **args)
    assert snapshot(sim.root) == before
    return info.value


def test_create_vfs_on_vfio_pci_by_netdev_name(sim):
    result = configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci").result
    assert result["changed"] is True
    assert result["pf"] == PF and result["netdev"] == "eno1"
    assert [v["address"] for v in result["vfs"]] == ["0000:03:00.2", "0000:03:00.3"]
    assert all(v["driver"] == "vfio-pci" and v["numa_node"] == 0 for v in result["vfs"])
    assert len({v["iommu_group"] for v in result["vfs"]}) == 2
    assert sim.read("/sys/bus/pci/devices/%s/sriov_drivers_autoprobe" % PF) == "0"
    assert configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci").result["changed"] is False


def test_default_driver_sets_autoprobe(sim):
    configure(sim, pf=PF, num_vfs=1)
    assert sim.read("/sys/bus/pci/devices/%s/sriov_drivers_autoprobe" % PF) == "1"
    assert sim.driver_of("0000:03:00.2") == "mlx5_core"


def test_none_leaves_vfs_unbound(sim):
    result = configure(sim, pf=PF, num_vfs=1, vf_driver="none").result
    assert result["vfs"][0]["driver"] is None


def test_count_change_goes_through_zero(sim):
    configure(sim, pf=PF, num_vfs=2)
    sim.writes.clear()
    configure(sim, pf=PF, num_vfs=3)
    numvfs = [v for p, v in sim.writes if p.endswith("/sriov_numvfs")]
    assert numvfs == ["0", "3"]
    assert len(sriov.current_vfs(sim, PF)) == 3


def test_check_mode_predicts_addresses_and_changes_nothing(sim):
    before = snapshot(sim.root)
    result = configure(sim, check_mode=True, pf=PF, num_vfs=2, vf_driver="vfio-pci",
                       persistent=True).result
    assert snapshot(sim.root) == before
    assert result["changed"] is True
    assert [v["address"] for v in result["vfs"]] == ["0000:03:00.2", "0000:03:00.3"]
    kernel = result["diff"][0]
    assert "/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs = 2\n" in kernel["after"]
    assert "/sys/bus/pci/devices/0000:03:00.0/sriov_drivers_autoprobe = 1\n" in kernel["before"]
    headers = [d["after_header"] for d in result["diff"][1:]]
    assert sriov.CONFIG_FILE in headers and sriov.UNIT_FILE in headers


def test_persistence_writes_config_unit_and_helper(sim):
    result = configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci", persistent=True).result
    assert "systemctl enable gpuhost-sriov.service (root is not /)" in result["skipped_actions"]
    config = json.loads(sim.read_file(sriov.CONFIG_FILE))
    assert config["pfs"][PF] == {"num_vfs": 2, "vf_driver": "vfio-pci", "netdev": "eno1",
                                 "vfs": []}
    unit = sim.read_file(sriov.UNIT_FILE)
    assert "Before=libvirtd.service virtqemud.service libvirt-guests.service" in unit
    assert "After=systemd-modules-load.service sys-subsystem-net-devices-eno1.device" in unit
    assert "ExecStart=%s %s" % (sriov.HELPER, sriov.CONFIG_FILE) in unit
    assert os.access(sim.path(sriov.HELPER), os.X_OK)
    assert configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci",
                     persistent=True).result["changed"] is False


def test_the_shipped_helper_runs_from_the_shipped_library_alone(sim):
    from support.shipped import import_failures
    configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci", persistent=True)
    assert import_failures(sim, [sriov.HELPER]) == []


def test_boot_apply_recreates_vfs_after_reboot(sim):
    configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci", persistent=True)
    sim.write("/sys/bus/pci/devices/%s/sriov_numvfs" % PF, "0")      # the reboot
    assert sriov.current_vfs(sim, PF) == {}
    assert sriov.boot_apply([sriov.CONFIG_FILE], writer=sim) == 0
    vfs = sriov.describe_vfs(sim, PF)
    assert [(v["address"], v["driver"]) for v in vfs] == [("0000:03:00.2", "vfio-pci"),
                                                          ("0000:03:00.3", "vfio-pci")]


def test_unit_waits_for_udev_settle_without_netdev():
    text = sriov.unit_text({"pfs": {"0000:01:00.0": {"num_vfs": 2, "netdev": None}}})
    assert "After=systemd-modules-load.service systemd-udev-settle.service" in text


def test_num_vfs_above_total_fails_and_changes_nothing(sim):
    err = failed(sim, pf=PF, num_vfs=9)
    assert err.field == "num_vfs" and "above sriov_totalvfs 8" in err.message


def test_pf_without_sriov_fails(sim):
    err = failed(sim, pf="0000:41:00.0", num_vfs=1)
    assert err.field == "pf" and "no SR-IOV capability" in err.message


def test_nonexistent_pf_fails(sim):
    assert failed(sim, pf="0000:77:00.0", num_vfs=1).field == "pf"
    assert failed(sim, pf="nosuch0", num_vfs=1).field == "pf"


def test_refuses_count_change_with_vf_in_running_domain_unless_forced(sim, tmp_path):
    configure(sim, pf=PF, num_vfs=2, vf_driver="vfio-pci")
    uri = write_libvirt_test_node(tmp_path, "0000:03:00.2")
    err = failed(sim, pf=PF, num_vfs=3, libvirt_uri=uri)
    assert err.field == "force" and "tenant-a" in err.message
    configure(sim, pf=PF, num_vfs=3, libvirt_uri=uri, force=True)
    assert len(sriov.current_vfs(sim, PF)) == 3


def test_failed_vf_bind_rolls_back_the_count(sim):
    # Inject a refused driver_override write on the second VF: the VFs go away again and
    # autoprobe returns to 1.
    sim.fail_on["/sys/bus/pci/devices/0000:03:00.3/driver_override"] = 5   # EIO
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        configure(sim, pf=PF, num_vfs=2, vf_driver="vfio-pci")
    assert snapshot(sim.root) == before
    assert "write 2 to /sys/bus/pci/devices/0000:03:00.0/sriov_numvfs" in \
        info.value.details["rolled_back"]


def test_per_vf_settings_with_fake_iproute(sim):
    configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci")
    ip = FakeIproute([{"vf": 0, "address": "00:00:00:00:00:00", "spoofchk": True,
                       "link_state": "auto", "trust": False},
                      {"vf": 1, "address": "52:54:00:00:00:02", "vlan_list": [{"vlan": 7}],
                       "spoofchk": True, "link_state": "auto", "trust": False}])
    result = configure(sim, runner=ip, pf="eno1", num_vfs=2, vf_driver="vfio-pci",
                       vfs=[{"index": 0, "mac": "52:54:00:00:00:01", "vlan": 100,
                             "trust": True, "link_state": "enable"},
                            {"index": 1, "mac": "52:54:00:00:00:02", "vlan": 7}]).result
    assert result["changed"] is True
    assert ip.calls[-1] == ["ip", "link", "set", "dev", "eno1", "vf", "0", "mac",
                            "52:54:00:00:00:01", "vlan", "100", "trust", "on", "state", "enable"]
    assert not any(call[6:7] == ["1"] for call in ip.calls if call[:3] == ["ip", "link", "set"])


@pytest.mark.parametrize("item, field, words", [
    ({"index": 2}, "vfs[0].index", "outside 0..1"),
    ({}, "vfs[0].index", "no VF index"),
    ({"index": 0, "mac": "zz"}, "vfs[0].mac", "not a MAC"),
    ({"index": 0, "mac": "52:54:00:00:00:01\n"}, "vfs[0].mac", "not a MAC"),
    ({"index": 0, "mac": "01:00:5e:00:00:01"}, "vfs[0].mac", "multicast"),
    ({"index": 0, "vlan": 4095}, "vfs[0].vlan", "outside 0..4094"),
    ({"index": 0, "vlan": -1}, "vfs[0].vlan", "outside 0..4094"),
    ({"index": 0, "spoofchk": "yes"}, "vfs[0].spoofchk", "true or false"),
    ({"address": "0000:03:00.7"}, "vfs[0].address", "not a VF of this PF"),
    ({"index": 1, "address": "0000:03:00.2"}, "vfs[0]", "name different VFs"),
])
def test_per_vf_bad_input(item, field, words):
    with pytest.raises(GpuhostError) as info:
        sriov.normalize_vf_settings([item], 2, {0: "0000:03:00.2", 1: "0000:03:00.3"})
    assert info.value.field == field
    assert words in info.value.message and info.value.fix


def test_per_vf_settings_by_address_and_twice():
    addresses = {0: "0000:03:00.2", 1: "0000:03:00.3"}
    assert sriov.normalize_vf_settings(
        [{"address": "03:00.3", "mac": "52:54:00:AA:00:01", "vlan": 0, "spoofchk": True}],
        2, addresses) == {1: {"mac": "52:54:00:aa:00:01", "vlan": 0, "spoofchk": True}}
    # The all-zero MAC is passed on (some PF drivers clear the VF's MAC with it).
    assert sriov.normalize_vf_settings([{"index": 0, "mac": "00:00:00:00:00:00"}], 2) == \
        {0: {"mac": "00:00:00:00:00:00"}}
    with pytest.raises(GpuhostError) as info:
        sriov.normalize_vf_settings([{"index": 1}, {"address": "0000:03:00.3"}], 2, addresses)
    assert info.value.field == "vfs[1].index" and "twice" in info.value.message


def ip_state(vfs):
    """A FakeIproute whose answers follow the ip link set calls, as a NIC's would."""
    ip = FakeIproute([dict(v) for v in vfs])

    def call(argv, _call=ip.__call__):
        rc, out, err = _call(argv)
        if argv[:3] == ["ip", "link", "set"]:
            entry = next(v for v in ip.vfinfo if v["vf"] == int(argv[6]))
            pairs = dict(zip(argv[7::2], argv[8::2]))
            for key, value in pairs.items():
                if key == "mac":
                    entry["address"] = value
                elif key == "vlan":
                    entry["vlan_list"] = [{"vlan": int(value)}] if int(value) else [{}]
                elif key in ("spoofchk", "trust"):
                    entry[key] = value == "on"
                elif key == "state":
                    entry["link_state"] = value
        return rc, out, err
    ip.call = call
    return ip


MLX5_FRESH = [{"vf": i, "address": "00:00:00:00:00:00", "spoofchk": False, "trust": False,
               "link_state": "auto"} for i in range(2)]
TENANT_VFS = [{"index": 0, "mac": "52:54:00:6c:00:01", "vlan": 100, "spoofchk": True,
               "trust": False},
              {"index": 1, "vlan": 0, "spoofchk": True, "trust": False}]


def test_per_vf_settings_are_idempotent_and_read_back(sim):
    configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci")
    ip = ip_state(MLX5_FRESH)
    first = configure(sim, runner=ip.call, pf="eno1", num_vfs=2, vf_driver="vfio-pci",
                      vfs=TENANT_VFS).result
    assert first["changed"] is True
    sets = [c for c in ip.calls if c[:3] == ["ip", "link", "set"]]
    # mlx5 starts with spoof checking off: it is set on; vlan 0 and trust off are there.
    assert sets == [["ip", "link", "set", "dev", "eno1", "vf", "0", "mac", "52:54:00:6c:00:01",
                     "vlan", "100", "spoofchk", "on"],
                    ["ip", "link", "set", "dev", "eno1", "vf", "1", "spoofchk", "on"]]
    again = configure(sim, runner=ip.call, pf="eno1", num_vfs=2, vf_driver="vfio-pci",
                      vfs=TENANT_VFS).result
    assert again["changed"] is False and again["steps"] == []
    assert len([c for c in ip.calls if c[:3] == ["ip", "link", "set"]]) == 2


def test_per_vf_settings_in_check_mode_change_nothing(sim):
    configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci")
    ip = ip_state(MLX5_FRESH)
    result = configure(sim, check_mode=True, runner=ip.call, pf="eno1", num_vfs=2,
                       vf_driver="vfio-pci", vfs=TENANT_VFS).result
    assert result["changed"] is True and result["created"] == []
    assert "ip link set dev eno1 vf 1 spoofchk on" in result["steps"]
    assert all(c[:3] != ["ip", "link", "set"] for c in ip.calls)


def test_a_changed_mac_on_a_vf_a_running_domain_holds_waits_for_its_restart(sim, tmp_path):
    # iproute2 is faked (no SR-IOV NIC here); the running domain is the real libvirt test
    # driver's, holding VF 0 (0000:03:00.2) of the PF.
    configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci")
    ip = ip_state(MLX5_FRESH)
    uri = write_libvirt_test_node(tmp_path, "0000:03:00.2")
    first = configure(sim, runner=ip.call, pf="eno1", num_vfs=2, vf_driver="vfio-pci",
                      vfs=TENANT_VFS, libvirt_uri=uri).result
    # VF 1 changes too (spoof checking), but no running domain holds it.
    assert first["running_domain_vfs"] == [
        {"index": 0, "address": "0000:03:00.2", "domains": ["tenant-a"],
         "changed": ["mac", "spoofchk", "vlan"], "restart_required": True}]
    # A VLAN alone is the PF's filter, applied at once: listed, no restart.
    vlan_only = [dict(TENANT_VFS[0], vlan=200), TENANT_VFS[1]]
    preview = configure(sim, check_mode=True, runner=ip.call, pf="eno1", num_vfs=2,
                        vf_driver="vfio-pci", vfs=vlan_only, libvirt_uri=uri).result
    assert preview["running_domain_vfs"] == [
        {"index": 0, "address": "0000:03:00.2", "domains": ["tenant-a"],
         "changed": ["vlan"], "restart_required": False}]
    again = configure(sim, runner=ip.call, pf="eno1", num_vfs=2, vf_driver="vfio-pci",
                      vfs=TENANT_VFS, libvirt_uri=uri).result
    assert again["changed"] is False and again["running_domain_vfs"] == []


def test_settings_of_new_vfs_are_read_once_the_vfs_exist(sim):
    # A fresh VF's values are the driver's choice (mlx5: spoofchk off), so nothing is
    # assumed: the step reads the VF after creating it and sets what differs.
    ip = ip_state(MLX5_FRESH)
    result = configure(sim, runner=ip.call, pf="eno1", num_vfs=2, vf_driver="vfio-pci",
                       vfs=TENANT_VFS).result
    assert result["created"] == ["0000:03:00.2", "0000:03:00.3"]
    assert [v["spoofchk"] for v in ip.vfinfo] == [True, True]
    assert ip.vfinfo[0]["address"] == "52:54:00:6c:00:01"
    assert ip.vfinfo[0]["vlan_list"] == [{"vlan": 100}]
    assert configure(sim, runner=ip.call, pf="eno1", num_vfs=2, vf_driver="vfio-pci",
                     vfs=TENANT_VFS).result["changed"] is False


def test_boot_apply_reapplies_persisted_vf_settings(sim):
    ip = ip_state(MLX5_FRESH)
    configure(sim, runner=ip.call, pf="eno1", num_vfs=2, vf_driver="vfio-pci",
              vfs=TENANT_VFS, persistent=True)
    config = json.loads(open(sim.path(sriov.CONFIG_FILE)).read())
    assert [(v["index"], v["mac"], v["vlan"], v["spoofchk"]) for v in config["pfs"][PF]["vfs"]] \
        == [(0, "52:54:00:6c:00:01", 100, True), (1, None, 0, True)]
    sim.write("/sys/bus/pci/devices/%s/sriov_numvfs" % PF, "0")      # the reboot
    ip.vfinfo[:] = [dict(v) for v in MLX5_FRESH]                      # fresh VFs again
    assert sriov.boot_apply([sriov.CONFIG_FILE], writer=sim, runner=ip.call) == 0
    assert [(v["address"], v.get("vlan_list"), v["spoofchk"]) for v in ip.vfinfo] == [
        ("52:54:00:6c:00:01", [{"vlan": 100}], True), ("00:00:00:00:00:00", None, True)]


def test_per_vf_settings_on_a_test_root_are_skipped_not_failed(sim):
    result = configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci", vfs=TENANT_VFS).result
    assert len(sriov.current_vfs(sim, PF)) == 2
    assert any("per-VF settings of VF(s) 0, 1 on eno1" in s for s in result["skipped_actions"])
    again = configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci", vfs=TENANT_VFS).result
    assert again["changed"] is False


def test_parse_vfinfo_reads_iproute_json():
    info = sriov.parse_vfinfo(json.dumps([{"vfinfo_list": [
        {"vf": 3, "address": "AA:BB:CC:DD:EE:FF", "vlan_list": [{"vlan": 12, "qos": 0}],
         "spoofchk": False, "trust": True, "link_state": "disable"}]}]))
    assert info == {3: {"mac": "aa:bb:cc:dd:ee:ff", "vlan": 12, "trust": True,
                        "spoofchk": False, "link_state": "disable"}}


def test_boot_apply_loads_vfio_pci_before_binding_vfs(sim):
    # At boot nothing has loaded vfio-pci yet (on the lab it only worked because vfio_bind
    # had loaded it); the unit must load it before the VFs are handed to it.
    configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci", persistent=True)
    sim.write("/sys/bus/pci/devices/%s/sriov_numvfs" % PF, "0")      # the reboot
    driver_dir = sim.path("/sys/bus/pci/drivers/vfio-pci")
    moved = driver_dir + ".unloaded"
    os.rename(driver_dir, moved)
    calls = []

    def runner(argv):
        calls.append(list(argv))
        if argv == ["modprobe", "--", "vfio-pci"]:
            os.rename(moved, driver_dir)                               # the driver appears
        return 0, "", ""

    plan = sriov.plan_sriov(sim, PF, 2, "vfio-pci", force=True, runner=runner)
    assert plan.needs_modprobe is True
    assert sriov.boot_apply([sriov.CONFIG_FILE], writer=sim, runner=runner) == 0
    assert calls[0] == ["modprobe", "--", "vfio-pci"]
    assert [v["driver"] for v in sriov.describe_vfs(sim, PF)] == ["vfio-pci", "vfio-pci"]


def test_module_reports_modprobe_it_cannot_run_on_a_test_root(sim):
    driver_dir = sim.path("/sys/bus/pci/drivers/vfio-pci")
    os.rename(driver_dir, driver_dir + ".unloaded")
    result = configure(sim, pf="eno1", num_vfs=2, vf_driver="vfio-pci", check_mode=True).result
    assert "modprobe vfio-pci (root is not /)" in result["skipped_actions"]


@pytest.mark.parametrize("netdev", ["ens1f0np0", "br-lan", "enp0s3.100", "eth_0:1", "wlp\u00e9"])
def test_device_unit_names_are_escaped_as_systemd_escape_does(netdev):
    """The boot unit waits for the PF's device unit: an interface name with "-" (or any
    byte systemd escapes) must give the unit systemd itself names, checked against the
    real systemd-escape."""
    path = "/sys/subsystem/net/devices/%s" % netdev
    real = subprocess.run(["systemd-escape", "--path", "--suffix=device", path],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert sriov.systemd_device_unit(path) == real


# -- a count change must not destroy the VF the host runs on -----------------------------

def host_traffic_on_first_vf(sim, route=True):
    """Two VFs on eno1's PF; the first, 0000:03:00.2, has the netdev eno1v0 and, with
    ``route``, the default route (the PF's own route is gone)."""
    from support.sysfs_sim import TreeBuilder
    configure(sim, pf=PF, num_vfs=2)
    tree = TreeBuilder(sim.root)
    tree.netdev("0000:03:00.2", "eno1v0")
    if route:
        os.unlink(os.path.join(sim.root, "proc/net/route"))
        tree.route("eno1v0")
    return tree


@pytest.mark.parametrize("num_vfs", [0, 1, 4])
def test_count_change_destroying_the_default_route_vf_is_refused(sim, num_vfs):
    host_traffic_on_first_vf(sim)
    err = failed(sim, pf=PF, num_vfs=num_vfs)
    assert err.field == "allow_host_critical"
    assert ("refusing to change the VF count of 0000:03:00.0 from 2 to %d (the kernel "
            "removes every VF first): 0000:03:00.2 is the NIC of the default route "
            "(eno1v0): changing the VF count destroys it, and the host loses that "
            "connection (set allow_host_critical: true to override)" % num_vfs) == err.msg
    assert err.fix.startswith("keep num_vfs at 2")
    assert len(sriov.current_vfs(sim, PF)) == 2


def test_check_mode_refuses_the_same_count_change(sim):
    host_traffic_on_first_vf(sim)
    with pytest.raises(GpuhostError) as err:
        configure(sim, check_mode=True, pf=PF, num_vfs=0)
    assert err.value.field == "allow_host_critical"


def test_vf_under_a_bridge_carrying_the_default_route_is_refused(sim):
    tree = host_traffic_on_first_vf(sim, route=False)
    tree.write("/sys/devices/virtual/net/br0/brif/eno1v0/port_no", "0x1\n")
    tree.link("/sys/class/net/br0", "/sys/devices/virtual/net/br0")
    os.unlink(os.path.join(sim.root, "proc/net/route"))
    tree.route("br0")
    err = failed(sim, pf=PF, num_vfs=0)
    assert "0000:03:00.2 is the NIC of the default route (br0)" in err.msg


def test_override_and_unchanged_count_let_the_run_through(sim):
    host_traffic_on_first_vf(sim)
    assert not configure(sim, pf=PF, num_vfs=2).result["changed"]   # nothing destroyed
    configure(sim, pf=PF, num_vfs=3, allow_host_critical=True)
    assert len(sriov.current_vfs(sim, PF)) == 3


def test_vfs_without_host_traffic_change_count_freely(sim):
    host_traffic_on_first_vf(sim, route=False)
    configure(sim, pf=PF, num_vfs=1)
    assert len(sriov.current_vfs(sim, PF)) == 1


# -- the boot helper reads its configuration like the module -----------------------------

def _boot_config(sim, text):
    full = sim.path(sriov.CONFIG_FILE)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)


@pytest.mark.parametrize("value", ["Infinity", "NaN", "1e999", "-3", "70000", "true",
                                   "null", "2.5", '"x"', "[2]"])
def test_boot_apply_refuses_an_odd_num_vfs_naming_the_file(sim, capsys, value):
    _boot_config(sim, '{"pfs": {"%s": {"num_vfs": %s, "vf_driver": "vfio-pci"}, '
                      '"0000:99:00.0": {"num_vfs": 1}}}' % (PF, value))
    before = snapshot(sim.root)
    assert sriov.boot_apply([sriov.CONFIG_FILE], writer=sim) == 1
    err = capsys.readouterr().err
    assert "persistent: %s holds num_vfs " % sriov.CONFIG_FILE in err
    assert "not a whole number from 0 to 65535" in err
    assert err.count("Fix:") == 2 and "with persistent: true again" in err
    assert snapshot(sim.root) == before and sim.writes == []


def test_boot_apply_takes_a_num_vfs_written_as_text(sim):
    _boot_config(sim, '{"pfs": {"%s": {"num_vfs": " 2 ", "vf_driver": "vfio-pci"}}}' % PF)
    assert sriov.boot_apply([sriov.CONFIG_FILE], writer=sim) == 0
    assert sorted(sriov.current_vfs(sim, PF)) == [0, 1]


@pytest.mark.parametrize("text", ["[]", '{"pfs": [1]}', '{"pfs": {"x": 3}}', "{trunc"])
def test_boot_apply_refuses_a_config_of_another_shape(sim, capsys, text):
    _boot_config(sim, text)
    assert sriov.boot_apply([sriov.CONFIG_FILE], writer=sim) == 2
    err = capsys.readouterr().err
    assert sriov.CONFIG_FILE in err and err.count("Fix:") == 1
    assert sim.writes == []


def test_boot_apply_refuses_a_planted_link_unread(sim, capsys, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text('{"pfs": {"%s": {"num_vfs": 2}}}' % PF)
    full = sim.path(sriov.CONFIG_FILE)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    os.symlink(str(outside), full)
    assert sriov.boot_apply([sriov.CONFIG_FILE], writer=sim) == 2
    err = capsys.readouterr().err
    assert "%s is a symbolic link (to " % sriov.CONFIG_FILE in err
    assert sim.writes == [] and sriov.current_vfs(sim, PF) == {}
