# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A tenant VF's network isolation (MAC, VLAN, spoofchk, trust) end to end: the request,
the plan's vf entry, the sriov_vfs option the sriov_irq role passes, the domain XML and
the validation check; old plan entries without the keys read as the defaults."""

import copy

import pytest

from support.hosts import fails, runbook_host
from support.hosts import tenant as runbook_tenant_request

from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_query, validation
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.ledger import validate_tenants
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
    plan_placement, tenant_request_from_dict)
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.vf_settings import (
    VfRequest,
    parse_nic_vf,
    parse_vfinfo,
    validate_mac,
    vf_settings,
)

MAC = "52:54:00:6c:00:01"
DEFAULTS = {"mac": None, "vlan": 0, "spoofchk": True, "trust": False}


def tenant(**changes):
    """The runbook's tenant-a100 with its GPU and VF, small enough to leave room."""
    changes.setdefault("vcpus", 4)
    changes.setdefault("memory_gib", 8)
    return runbook_tenant_request(**changes)


def small(name, **changes):
    """A GPU-less tenant that fits next to the runbook tenant."""
    return runbook_tenant_request(name=name, gpus=0, vcpus=2, memory_gib=2, iothreads=0,
                                  **changes)


def old_entry(entry):
    """A plan entry as a plan written before the VF settings existed holds it."""
    entry = copy.deepcopy(entry)
    for key in ("index", "mac", "vlan", "spoofchk", "trust"):
        entry["vf"].pop(key)
    return entry


# ---------------------------------------------------------------------------- request

@pytest.mark.parametrize("nic_vf, field, words", [
    ({"mac": MAC + "\n"}, "nic_vf.mac", "not a MAC address"),
    ({"mac": "52:54:00:6c:00"}, "nic_vf.mac", "not a MAC address"),
    ({"mac": "52-54-00-6c-00-01"}, "nic_vf.mac", "not a MAC address"),
    ({"mac": " 52:54:00:6c:00:01"}, "nic_vf.mac", "not a MAC address"),
    ({"mac": 525400}, "nic_vf.mac", "not a MAC address"),
    ({"mac": "01:00:5e:00:00:01"}, "nic_vf.mac", "multicast"),
    ({"mac": "ff:ff:ff:ff:ff:ff"}, "nic_vf.mac", "multicast"),
    ({"mac": "53:54:00:6c:00:01"}, "nic_vf.mac", "multicast"),
    ({"mac": "00:00:00:00:00:00"}, "nic_vf.mac", "all-zero"),
    ({"vlan": 4095}, "nic_vf.vlan", "outside 0..4094"),
    ({"vlan": -1}, "nic_vf.vlan", "outside 0..4094"),
    ({"vlan": True}, "nic_vf.vlan", "not a VLAN ID"),
    ({"vlan": "100"}, "nic_vf.vlan", "not a VLAN ID"),
    ({"vlan": 1.5}, "nic_vf.vlan", "not a VLAN ID"),
    ({"spoofchk": "yes"}, "nic_vf.spoofchk", "true or false"),
    ({"trust": 1}, "nic_vf.trust", "true or false"),
    ({"mac": MAC, "qos": 3}, "nic_vf", "unknown nic_vf keys qos"),
    ("yes", "nic_vf", "true or false"),
    (1, "nic_vf", "true or false"),
    ([MAC], "nic_vf", "true or false"),
])
def test_bad_vf_settings_are_refused_naming_the_field(nic_vf, field, words):
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(nic_vf=nic_vf)])
    fails("tenants[0].%s" % field, words)(excinfo.value)


def test_unknown_key_names_the_allowed_ones():
    with pytest.raises(GpuhostError) as excinfo:
        tenant_request_from_dict(tenant(nic_vf={"vlans": 100}))
    assert excinfo.value.fix == "use only mac, vlan, spoofchk, trust"


@pytest.mark.parametrize("nic_vf, wanted", [
    (True, VfRequest()),
    ({}, VfRequest()),
    ({"mac": "52:54:00:6C:00:0A"}, VfRequest(mac="52:54:00:6c:00:0a")),
    ({"mac": MAC, "vlan": 4094, "spoofchk": False, "trust": True},
     VfRequest(mac=MAC, vlan=4094, spoofchk=False, trust=True)),
    ({"mac": None, "vlan": None}, VfRequest()),
    (False, False),
    (None, False),
])
def test_nic_vf_true_false_or_a_mapping(nic_vf, wanted):
    request = tenant_request_from_dict(tenant(nic_vf=nic_vf))
    assert request.nic_vf == wanted
    assert bool(request.nic_vf) is bool(wanted)


def test_a_parsed_request_validates_again_unchanged():
    request = tenant_request_from_dict(tenant(nic_vf={"mac": MAC, "vlan": 7}))
    assert tenant_request_from_dict(request) == request
    assert parse_nic_vf(request.nic_vf) == request.nic_vf


def test_validate_mac_uses_a_full_match():
    assert validate_mac("52:54:00:AB:CD:EF") == "52:54:00:ab:cd:ef"
    assert validate_mac("00:00:00:00:00:00", allow_zero=True) == "00:00:00:00:00:00"
    with pytest.raises(GpuhostError):
        validate_mac("52:54:00:ab:cd:ef\n")


# ------------------------------------------------------------------------------- plan

def test_the_plan_vf_has_its_index_and_settings():
    plan = plan_placement(runbook_host(), [
        tenant(nic_vf={"mac": MAC.upper(), "vlan": 100}),
        small("b", nic_vf={"spoofchk": False, "trust": True}),
        small("c", nic_vf=True)])
    vfs = [t["vf"] for t in plan["tenants"]]
    assert vfs[0] == {"pf": "0000:41:00.0", "address": "0000:41:00.2", "iommu_group": 40,
                      "index": 0, "mac": MAC, "vlan": 100, "spoofchk": True, "trust": False}
    assert vfs[1] == {"pf": "0000:41:00.0", "address": "0000:41:00.3", "iommu_group": 41,
                      "index": 1, "mac": None, "vlan": 0, "spoofchk": False, "trust": True}
    assert (vfs[2]["address"], vfs[2]["index"]) == ("0000:41:00.4", 2)
    assert {k: vfs[2][k] for k in DEFAULTS} == DEFAULTS


def test_the_index_of_a_vf_behind_a_stride_is_its_virtfn_number():
    plan = plan_placement(runbook_host(), [small("t%d" % i) for i in range(7)])
    assert [(t["vf"]["address"], t["vf"]["index"]) for t in plan["tenants"]][-1] == \
        ("0000:41:01.0", 6)


def test_two_new_tenants_may_not_share_a_mac():
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(nic_vf={"mac": MAC}),
                                        small("b", nic_vf={"mac": MAC.upper()})])
    fails("tenants[1].nic_vf.mac", MAC, "tenant-a100", " b", "shared")(excinfo.value)


def test_a_new_tenant_may_not_take_the_mac_of_an_existing_one():
    first = plan_placement(runbook_host(), [tenant(nic_vf={"mac": MAC})])
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [small("b", nic_vf={"mac": MAC})], existing=first)
    fails("tenants[0].nic_vf.mac", MAC, "tenant-a100", "existing[0].vf.mac", " b")(
        excinfo.value)
    # The existing tenant asked for again is itself, not a second holder.
    again = plan_placement(runbook_host(), [tenant(nic_vf={"mac": MAC}),
                                            small("b", nic_vf={"mac": "52:54:00:6c:00:02"})],
                           existing=first)
    assert [t["vf"]["mac"] for t in again["tenants"]] == [MAC, "52:54:00:6c:00:02"]
    assert again["tenants"][0] == first["tenants"][0]


def test_existing_tenants_sharing_a_mac_only_warn_so_one_can_be_offboarded():
    first = plan_placement(runbook_host(), [tenant(nic_vf={"mac": MAC}), small("b")])
    existing = copy.deepcopy(first["tenants"])
    existing[1]["vf"]["mac"] = MAC
    plan = plan_placement(runbook_host(), [], existing=existing)
    assert any("same VF MAC" in w for w in plan["warnings"])


def test_the_ledger_check_refuses_a_mac_given_twice_before_any_lock():
    with pytest.raises(GpuhostError) as excinfo:
        validate_tenants([tenant(nic_vf={"mac": MAC}), small("b", nic_vf={"mac": MAC})])
    assert excinfo.value.field == "tenants[1].nic_vf.mac"


@pytest.mark.parametrize("nic_vf, words", [
    ({"mac": MAC, "vlan": 200}, ["nic_vf.vlan 200, placed with 100"]),
    ({"mac": "52:54:00:6c:00:02", "vlan": 100},
     ["nic_vf.mac 52:54:00:6c:00:02, placed with %s" % MAC]),
    ({"vlan": 100}, ["nic_vf.mac none (the driver's own), placed with %s" % MAC]),
    ({"mac": MAC, "vlan": 100, "trust": True}, ["nic_vf.trust true, placed with false"]),
    (True, ["nic_vf.mac none", "nic_vf.vlan 0 (none), placed with 100"]),
    (False, ["nic_vf false, placed with a VF"]),
])
def test_changed_settings_of_a_placed_tenant_are_refused(nic_vf, words):
    first = plan_placement(runbook_host(), [tenant(nic_vf={"mac": MAC, "vlan": 100})])
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(nic_vf=nic_vf)], existing=first)
    fails("tenants[0]", "already placed and the request differs", *words)(excinfo.value)
    assert "offboard tenant-a100 first" in excinfo.value.fix


def test_an_old_entry_without_the_keys_reads_as_the_defaults():
    placed = plan_placement(runbook_host(), [tenant()])
    existing = [old_entry(placed["tenants"][0])]
    for same in (True, {}, {"vlan": 0, "spoofchk": True, "trust": False}):
        plan = plan_placement(runbook_host(), [tenant(nic_vf=same)], existing=existing)
        assert plan["tenants"] == existing            # copied byte for byte
    with pytest.raises(GpuhostError) as excinfo:
        plan_placement(runbook_host(), [tenant(nic_vf={"vlan": 100})], existing=existing)
    fails("tenants[0]", "nic_vf.vlan 100, placed with 0 (none)")(excinfo.value)
    assert vf_settings(existing[0]["vf"]) == DEFAULTS
    assert vf_settings(None) is None


# ------------------------------------------------------------- the sriov_irq role's vfs

def test_vf_pfs_with_settings_gives_the_sriov_vfs_option_per_pf():
    plan = plan_placement(runbook_host(), [
        tenant(nic_vf={"mac": MAC, "vlan": 100}), small("b"),
        small("c", nic_vf={"trust": True, "spoofchk": False}), small("d", nic_vf=False)])
    assert plan_query.vf_pfs(plan) == ["0000:41:00.0"]
    assert plan_query.vf_pfs(plan, settings=True) == [{"pf": "0000:41:00.0", "vfs": [
        {"index": 0, "mac": MAC, "vlan": 100, "spoofchk": True, "trust": False},
        {"index": 1, "vlan": 0, "spoofchk": True, "trust": False},
        {"index": 2, "vlan": 0, "spoofchk": False, "trust": True}]}]
    assert plan_query.vf_pfs(plan, ["b"], settings=True)[0]["vfs"] == [
        {"index": 1, "vlan": 0, "spoofchk": True, "trust": False}]
    assert plan_query.vf_pfs({"tenants": []}, settings=True) == []


def test_vf_pfs_gives_an_old_entry_by_address_with_the_defaults():
    plan = plan_placement(runbook_host(), [tenant(), small("b", nic_vf={"vlan": 5})])
    plan["tenants"][0] = old_entry(plan["tenants"][0])
    assert plan_query.vf_pfs(plan, settings=True)[0]["vfs"] == [
        {"index": 1, "vlan": 5, "spoofchk": True, "trust": False},
        {"address": "0000:41:00.2", "vlan": 0, "spoofchk": True, "trust": False}]


def test_the_onboarding_summary_shows_the_vf_settings():
    plan = plan_placement(runbook_host(), [tenant(nic_vf={"mac": MAC, "vlan": 100}),
                                           small("b", nic_vf=False)])
    assert plan_query.tenant_summary(plan, "tenant-a100")[-1] == (
        "VF: 0000:41:00.2 (VF 0 of 0000:41:00.0), MAC %s, VLAN 100, spoofchk on, trust off"
        % MAC)
    assert plan_query.tenant_summary(plan, "b")[-1] == "VF: none"
    plan["tenants"][0] = old_entry(plan["tenants"][0])
    assert plan_query.tenant_summary(plan, "tenant-a100")[-1] == (
        "VF: 0000:41:00.2 (VF ? of 0000:41:00.0), MAC the driver's own, VLAN none, "
        "spoofchk on, trust off")


# ------------------------------------------------------------------------- validation

def _iommu(settings_by_address, error=None):
    vfs = [{"address": "0000:41:00.%d" % (2 + i), "index": i,
            "settings": settings_by_address.get("0000:41:00.%d" % (2 + i))} for i in range(3)]
    return {"sriov_pfs": [{"address": "0000:41:00.0", "vfs": vfs,
                           "vf_settings_error": error}]}


def _read(mac="52:54:00:11:22:33", vlan=0, spoofchk=True, trust=False):
    return {"mac": mac, "vlan": vlan, "spoofchk": spoofchk, "trust": trust,
            "link_state": "auto"}


def test_validation_passes_when_the_pf_reports_the_plan():
    plan = plan_placement(runbook_host(), [tenant(nic_vf={"mac": MAC, "vlan": 100}),
                                           small("b")])
    check = validation.check_vf_settings(plan, _iommu({
        "0000:41:00.2": _read(MAC, 100),
        "0000:41:00.3": _read("52:54:00:99:99:99")}))     # no planned MAC: not compared
    assert check["status"] == "pass" and check["id"] == "vf_settings"
    assert "2 tenant VF(s)" in check["detail"]


def test_validation_fails_naming_each_difference():
    plan = plan_placement(runbook_host(), [tenant(nic_vf={"mac": MAC, "vlan": 100}),
                                           small("b")])
    plan["tenants"][1] = old_entry(plan["tenants"][1])          # read as the defaults
    check = validation.check_vf_settings(plan, _iommu({
        "0000:41:00.2": _read("52:54:00:11:22:33", 0, spoofchk=False),
        "0000:41:00.3": _read(trust=True)}))
    assert check["status"] == "fail"
    assert ("tenant-a100 VF 0000:41:00.2 (VF 0 of 0000:41:00.0): mac 52:54:00:11:22:33, "
            "plan %s, vlan 0 (none), plan 100, spoofchk false, plan true" % MAC) in check["detail"]
    assert "b VF 0000:41:00.3 (VF 1 of 0000:41:00.0): trust true, plan false" in check["detail"]


def test_validation_is_not_run_without_evidence():
    plan = plan_placement(runbook_host(), [tenant()])
    check = validation.check_vf_settings(plan, _iommu({}))
    assert check["status"] == "not_run" and "not the live host" in check["detail"]
    check = validation.check_vf_settings(
        plan, _iommu({}, error="iproute2 (ip) is not installed"))
    assert check["status"] == "not_run" and "iproute2" in check["detail"]
    check = validation.check_vf_settings(plan, {"sriov_pfs": []})
    assert check["status"] == "not_run" and "does not exist" in check["detail"]
    no_vf = plan_placement(runbook_host(), [tenant(nic_vf=False)])
    assert validation.check_vf_settings(no_vf, _iommu({}))["detail"] == "no tenant has a VF"


# ------------------------------------------------------- reading the VFs off the host

def test_parse_vfinfo_reads_old_and_new_iproute_and_vlan_zero():
    text = ('[{"ifname": "ens1f0np0", "vfinfo_list": ['
            '{"vf": 0, "link_type": "ether", "address": "52:54:00:6C:00:01", '
            '"vlan_list": [{"vlan": 100}], "spoofchk": true, "link_state": "auto", '
            '"trust": false},'
            '{"vf": 1, "mac": "00:00:00:00:00:00", "vlan_list": [{}], "spoofchk": false},'
            '{"vf": 2, "address": "52:54:00:00:00:02", "vlan": 7, "qos": 1}]}]')
    assert parse_vfinfo(text) == {
        0: {"mac": MAC, "vlan": 100, "spoofchk": True, "trust": False, "link_state": "auto"},
        1: {"mac": "00:00:00:00:00:00", "vlan": 0, "spoofchk": False, "trust": False,
            "link_state": "auto"},
        2: {"mac": "52:54:00:00:00:02", "vlan": 7, "spoofchk": True, "trust": False,
            "link_state": "auto"}}


class _FakeModule(object):
    def __init__(self, answer, ip="/usr/sbin/ip"):
        self.answer, self.ip, self.calls = answer, ip, []

    def get_bin_path(self, name):
        return self.ip

    def run_command(self, argv):
        self.calls.append(argv)
        return self.answer


def _facts(module, root="/"):
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host import iommu_facts
    pf = {"address": "0000:41:00.0", "netdevs": ["ens1f0np0"],
          "vfs": [{"address": "0000:41:00.2", "index": 0},
                  {"address": "0000:41:00.3", "index": 1}]}
    iommu_facts.add_vf_settings(module, pf, root)
    return pf


def test_iommu_facts_add_each_vfs_settings_on_the_live_host():
    module = _FakeModule((0, '[{"vfinfo_list": [{"vf": 1, "address": "52:54:00:6c:00:01", '
                             '"vlan_list": [{"vlan": 100}], "spoofchk": true, '
                             '"trust": false}]}]', ""))
    pf = _facts(module)
    assert module.calls == [["/usr/sbin/ip", "-j", "-d", "link", "show", "dev", "ens1f0np0"]]
    assert pf["vf_settings_error"] is None
    assert pf["vfs"][0]["settings"] is None
    assert pf["vfs"][1]["settings"]["vlan"] == 100


def test_iommu_facts_say_why_vf_settings_were_not_read():
    module = _FakeModule((1, "", "Cannot find device"))
    assert "Cannot find device" in _facts(module)["vf_settings_error"]
    assert _facts(_FakeModule((0, "", ""), ip=None))["vf_settings_error"] == \
        "iproute2 (ip) is not installed"
    recorded = _FakeModule((0, "", ""))
    pf = _facts(recorded, root="/srv/recorded")
    assert recorded.calls == [] and pf["vf_settings_error"] is None
    assert [v["settings"] for v in pf["vfs"]] == [None, None]
