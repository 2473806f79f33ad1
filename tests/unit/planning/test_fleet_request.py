# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One tenant request (fleet_place's and capacity_facts' ``tenant``) is checked
whole, types, finite bounded numbers, names and counts, before any host is looked at,
and the error names the exact request key."""

import math

import pytest
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import fleet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import capacity_facts, fleet_place

GOOD = {"name": "t1", "gpus": 1, "vcpus": 4, "memory_gib": 16, "hugepage_size": "1G"}

BAD_REQUESTS = [
    # (changes to GOOD, field, message fragment)
    ({"vcpus": float("nan")}, "tenant.vcpus", "nan is not a finite number"),
    ({"vcpus": float("inf")}, "tenant.vcpus", "inf is not a finite number"),
    ({"memory_gib": float("-inf")}, "tenant.memory_gib", "-inf is not a finite number"),
    ({"memory_gib": 1e11}, "tenant.memory_gib", "must be at most 65536, got 100000000000"),
    ({"vcpus": 10 ** 11}, "tenant.vcpus", "must be at most 8192"),
    ({"vcpus": 0}, "tenant.vcpus", "must be at least 1, got 0"),
    ({"vcpus": 2.5}, "tenant.vcpus", "2.5 is not a whole number"),
    ({"vcpus": True}, "tenant.vcpus", "True is not a whole number"),
    ({"vcpus": [4]}, "tenant.vcpus", "[4] is not a whole number"),
    ({"vcpus": "four"}, "tenant.vcpus", "'four' is not a whole number"),
    ({"gpus": 10 ** 6}, "tenant.gpus", "must be at most 64"),
    ({"gpus": -1}, "tenant.gpus", "must be at least 0, got -1"),
    ({"gpus": float("nan")}, "tenant.gpus", "nan is not a finite number"),
    ({"gpus": ["0000:65:00.0"] * 65}, "tenant.gpus", "65 GPU addresses are more than 64"),
    ({"gpus": ["65:00"]}, "tenant.gpus[0]", "'65:00' is not a PCI address"),
    ({"gpus": {"a": 1}}, "tenant.gpus", "is not a whole number"),
    ({"iothreads": 10 ** 9}, "tenant.iothreads", "must be at most 64"),
    ({"name": "t1\n"}, "tenant.name", "'t1\\n' is not a valid tenant (libvirt domain) name"),
    ({"name": "../etc"}, "tenant.name", "is not a valid tenant (libvirt domain) name"),
    ({"name": 7}, "tenant.name", "7 is not a valid tenant (libvirt domain) name"),
    ({"name": None}, "tenant.name", "name is missing"),
    ({"hugepage_size": ["1G"]}, "tenant.hugepage_size", "['1G'] is not a hugepage size"),
    ({"hugepage_size": "3M"}, "tenant.hugepage_size", "hugepage size '3M' is not supported"),
    ({"emulator_policy": {"x": 1}}, "tenant.emulator_policy", "is not an emulator policy"),
    ({"nic_vf": {"vlan": 5000}}, "tenant.nic_vf.vlan", "VLAN 5000 is outside 0..4094"),
]


def _request(changes):
    request = dict(GOOD)
    request.update(changes)
    return request


@pytest.mark.parametrize("changes, field, message", BAD_REQUESTS,
                         ids=[str(i) for i in range(len(BAD_REQUESTS))])
def test_a_bad_request_is_refused_naming_the_exact_key(changes, field, message):
    with pytest.raises(GpuhostError) as err:
        fleet.validate_request(_request(changes))
    assert err.value.field == field, err.value.message
    assert message in err.value.message and err.value.fix


def test_a_request_that_is_not_a_mapping_is_refused():
    for value in (None, "t1", ["t1"], 4):
        with pytest.raises(GpuhostError) as err:
            fleet.validate_request(value)
        assert err.value.field == "tenant" and "is not a mapping" in err.value.message


def test_a_good_request_keeps_only_the_planner_keys_and_whole_numbers():
    request = fleet.validate_request(dict(GOOD, vcpus=4.0, memory_gib="16", iothreads=None,
                                          guest_address="192.0.2.5/24"))
    assert request == {"name": "t1", "gpus": 1, "vcpus": 4, "memory_gib": 16,
                       "hugepage_size": "1G"}
    assert all(not isinstance(v, float) for v in request.values())


def test_choose_host_refuses_a_bad_request_before_looking_at_any_host(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("a host was evaluated for a bad request")
    monkeypatch.setattr(fleet, "evaluate_host", boom)
    with pytest.raises(GpuhostError) as err:
        fleet.choose_host({"a": {"topology": {}}, "b": {"candidate": {"fits": False}}},
                          dict(GOOD, vcpus=math.nan))
    assert err.value.field == "tenant.vcpus"


def _run(module_file, worker_class, args):
    with patch_module_args(dict(args, _ansible_check_mode=False)):
        module = module_file.build_module()
    worker = worker_class(module)
    with pytest.raises(GpuhostError) as err:
        worker.run()
    return worker, err.value


def test_fleet_place_refuses_a_bad_request_not_fits_on_no_host():
    # Before: every host's evaluation failed on the bad value, and the module answered
    # "tenant t1 fits on no host" (field request) with the same reason once per host;
    # with an infinite number it raised OverflowError from int().
    worker, err = _run(fleet_place, fleet_place.FleetPlace, {
        "hosts": {"a": {"candidate": {"tenant": "t1", "fits": False, "why": "full"}}},
        "tenant": dict(GOOD, memory_gib=float("inf"))})
    assert err.field == "tenant.memory_gib" and "fits on no host" not in err.message
    assert worker.result == {"changed": False, "candidates": []}


def test_capacity_facts_refuses_a_bad_request_before_reading_the_host(tmp_path):
    # root does not exist: reading the host would fail with field root first.
    worker, err = _run(capacity_facts, capacity_facts.CapacityFacts, {
        "root": str(tmp_path / "nowhere"), "ledger_path": str(tmp_path / "ledger.json"),
        "tenant": dict(GOOD, vcpus=1e11)})
    assert err.field == "tenant.vcpus" and "must be at most 8192" in err.message
    assert worker.result == {"changed": False, "ansible_facts": {}}
