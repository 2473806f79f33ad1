# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run's one list of tenants waiting for a restart: read from the
results libvirt_pinned_domain (the real libvirt test driver) and sriov_vfs (the sysfs
simulator, iproute2 faked: no SR-IOV NIC here) return, and carried by the validate
report as its own section, never as a failed check."""

import json

import pytest

from support.domain_xml import Env, plan_args, runbook_tenant, write_libvirt_test_node
from support.fakes import FakeIproute
from support.sysfs_sim import SimulatedKernel, build_sim_host, run_module

from ansible_collections.gpuhost.kvm.plugins.modules import sriov_vfs
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import validation

PF = "0000:03:00.0"       # eno1 of the simulated host, VF 0 at 0000:03:00.2


def _loop_result(name, result):
    """A module result as a looped task registers it: with the loop item."""
    return dict(result, item={"name": name})


def _moved_pin(tenant):
    """The tenant with vCPU 0 on core 15's first thread instead of core 1's."""
    pins = list(tenant["vcpu_pins"])
    pins[0] = 15
    return dict(tenant, vcpu_pins=pins)


def test_a_running_tenant_whose_pins_change_is_listed_with_its_changed_elements(tmp_path):
    env = Env(tmp_path)
    unchanged = env.run(state="running", **plan_args())
    moved = env.run(state="running", name="tenant-a100", plan=_moved_pin(runbook_tenant()))
    assert moved["restart_required"] and moved["actions"] == ["define"]

    # The first run defined and started it: nothing waits; the second changed its pins.
    assert validation.restart_required_add([], "vm", [_loop_result("tenant-a100", unchanged)]) == []
    waiting = validation.restart_required_add([], "vm", [_loop_result("tenant-a100", moved)])
    assert [(e["tenant"], e["stage"], e["changed"]) for e in waiting] == \
        [("tenant-a100", "vm", moved["changed_elements"])]
    assert any(key.startswith("cputune/vcpupin") for key in waiting[0]["changed"])
    assert "next start" in waiting[0]["why"]

    # The next run of the stage with nothing changed replaces the stage's entries: none.
    again = env.run(state="running", name="tenant-a100", plan=_moved_pin(runbook_tenant()))
    assert validation.restart_required_add(waiting, "vm", [_loop_result("tenant-a100", again)]) == []


def test_a_mac_changed_under_a_running_guest_is_listed_and_a_vlan_is_not(tmp_path):
    sim = SimulatedKernel(build_sim_host(str(tmp_path / "host")), vf_drivers={PF: "mlx5_core"})
    run_module(sriov_vfs, "SriovConfigurator", {"root": sim.root, "pf": "eno1", "num_vfs": 2,
                                                "vf_driver": "vfio-pci"}, sim)
    ip = FakeIproute([{"vf": i, "address": "00:00:00:00:00:00", "spoofchk": True, "trust": False,
                       "link_state": "auto"} for i in range(2)])
    uri = write_libvirt_test_node(tmp_path, "0000:03:00.2")     # tenant-a runs holding VF 0

    def preview(vfs):
        args = {"root": sim.root, "pf": "eno1", "num_vfs": 2, "vf_driver": "vfio-pci",
                "vfs": vfs, "libvirt_uri": uri}
        result = run_module(sriov_vfs, "SriovConfigurator", args, sim, check_mode=True,
                            runner=ip).result
        return [dict(result, item={"pf": PF, "vfs": vfs})]

    mac = validation.restart_required_add([], "sriov_irq", preview([{"index": 0, "mac": "52:54:00:6c:00:01"}]))
    assert [(e["tenant"], e["stage"], e["changed"]) for e in mac] == \
        [("tenant-a", "sriov_irq", ["VF 0000:03:00.2 (VF 0 of %s): mac" % PF])]
    assert "probes the VF" in mac[0]["why"]
    assert validation.restart_required_add([], "sriov_irq", preview([{"index": 0, "vlan": 7}])) == []


def test_each_stage_replaces_only_its_own_entries_and_an_unknown_stage_is_refused():
    vf_entry = {"tenant": "tenant-a", "stage": "sriov_irq", "changed": ["VF x: mac"], "why": "w"}
    domain = {"restart_required": True, "changed_elements": ["memoryBacking"], "actions": ["define"],
              "item": {"name": "tenant-b"}}
    both = validation.restart_required_add([vf_entry], "vm", [domain])
    assert [(e["tenant"], e["stage"]) for e in both] == [("tenant-a", "sriov_irq"), ("tenant-b", "vm")]
    assert validation.restart_required_add(both, "vm", []) == [vf_entry]
    # A seed rebuilt under the running guest changes no element: its step is what changed.
    seed = dict(domain, changed_elements=[], actions=["rebuild seed /images/tenant-b-seed.iso", "define"])
    assert validation.restart_required_add([], "vm", [seed])[0]["changed"] == \
        ["rebuild seed /images/tenant-b-seed.iso"]
    with pytest.raises(ValueError, match="numa"):
        validation.restart_required_add([], "numa", [])


def test_the_report_carries_them_as_a_section_of_its_own_and_still_passes():
    check = validation.check_irqs([])
    waiting = validation.restart_required_add([], "vm", [
        {"restart_required": True, "changed_elements": ["cputune/vcpupin 0", "devices/interface|x"],
         "item": {"name": "tenant-a100"}}])
    report = validation.report("hk-gpu-01", [check], waiting)
    assert report["passed"] is True and report["failed"] == []
    assert json.loads(validation.report_json(report))["restart_required"] == waiting
    markdown = validation.report_markdown(report)
    heading = markdown.splitlines()[0]
    assert heading == ("# Validation of hk-gpu-01: PASS; 1 tenant(s) wait for a restart: tenant-a100 "
                       "(cputune/vcpupin 0, devices/interface|x); each change applies at the "
                       "tenant's next start (no tenant is restarted)")
    section = markdown.split("## Tenants waiting for a restart\n", 1)[1]
    assert "| tenant-a100 | vm | cputune/vcpupin 0, devices/interface\\|x | runs with its old" in section

    calm = validation.report_markdown(validation.report("hk-gpu-01", [check]))
    assert calm.splitlines()[0] == "# Validation of hk-gpu-01: PASS; no running tenant waits for a restart"
    assert calm.rstrip().endswith("None: no stage of this run changed what a running tenant sees at "
                                  "its next start.")
