# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GPU a tenant left broken is quarantined when the tenant is released, no onboarding
gets it, and tenant_ledger's recover lifts the quarantine only once the host reads it
sound again. On the simulator: the eight-GPU host with the GPU's sysfs attributes
written as the kernel shows a GPU that fell off its bus (configuration space all ones) or
retrained its link narrower."""

from __future__ import annotations

import json
import os

import pytest
from support.fixturegen import build_eight_gpu_host
from support.ledger_runs import ONE_GPU_TENANT, run_ledger

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger

TENANT = ONE_GPU_TENANT


def gpu_attrs(root, address, config=b"\xde\x10\x30\x23", width=("16", "16")):
    dev = os.path.join(root, "sys/bus/pci/devices", address)
    with open(os.path.join(dev, "config"), "wb") as handle:
        handle.write(config + b"\x00" * 60)
    for name, value in (("current_link_width", width[0]), ("max_link_width", width[1])):
        with open(os.path.join(dev, name), "w") as handle:
            handle.write(value + "\n")


@pytest.fixture()
def host(tmp_path):
    root = str(tmp_path / "host")
    build_eight_gpu_host(root)
    return root, str(tmp_path / "ledger.json")


def test_a_gpu_left_off_the_bus_is_quarantined_refused_then_recovered(host):
    root, path = host
    placed = run_ledger(root, path, tenants=[TENANT])
    gpu = placed["plan"]["tenants"][0]["gpus"][0]["address"]
    gpu_attrs(root, gpu, config=b"\xff\xff\xff\xff", width=("8", "16"))

    released = run_ledger(root, path, state="absent", names=["a"])
    assert released["released"] == ["a"] and list(released["quarantined"]) == [gpu]
    reasons = released["quarantine"][gpu]["reasons"]
    assert any("fell off the bus" in reason for reason in reasons)
    assert any("x8, below its x16" in reason for reason in reasons)
    on_disk = json.load(open(path))["body"]["quarantine"][gpu]
    assert on_disk["tenant"] == "a" and on_disk["reasons"] == reasons

    # named: refused with the reason; by count: another GPU
    with pytest.raises(GpuhostError) as refused:
        run_ledger(root, path, tenants=[dict(TENANT, name="b", gpus=[gpu])])
    assert "GPU %s is quarantined" % gpu in refused.value.msg and "recover" in refused.value.fix
    other = run_ledger(root, path, tenants=[dict(TENANT, name="c")])
    assert other["plan"]["tenants"][0]["gpus"][0]["address"] != gpu

    # still broken: kept, with what the host shows now
    kept = run_ledger(root, path, recover=[gpu])
    assert kept["lifted"] == [] and gpu in kept["still_unfit"] and gpu in kept["quarantine"]
    # brought back (a remove and rescan): lifted, and the next tenant may have it
    gpu_attrs(root, gpu)
    read_only = run_ledger(root, path, recover=[gpu], _ansible_check_mode=True)
    assert read_only["lifted"] == [gpu] and read_only["changed"] and gpu in json.load(open(path))["body"]["quarantine"]
    lifted = run_ledger(root, path, recover=[gpu], tenants=[dict(TENANT, name="b", gpus=[gpu])])
    assert lifted["lifted"] == [gpu] and lifted["quarantine"] == {} and lifted["allocated"] == ["b"]
    assert "quarantine" not in json.load(open(path))["body"]


def test_a_sound_gpu_is_released_as_before(host):
    root, path = host
    gpu = run_ledger(root, path, tenants=[TENANT])["plan"]["tenants"][0]["gpus"][0]["address"]
    gpu_attrs(root, gpu)
    released = run_ledger(root, path, state="absent", names=["a"])
    assert released["quarantined"] == {} and released["quarantine"] == {}
    assert set(json.load(open(path))["body"]) == {"tenants", "housekeeping", "smt_policy"}


def test_the_fatal_aer_errors_of_a_lifted_quarantine_do_not_put_it_back():
    data = ledger.quarantine(ledger.LedgerData(), {"0000:41:00.0": ["2 fatal AER error(s)"]}, "a",
                             "2026-12-05T08:00:00Z", {"0000:41:00.0": 2})
    assert data.quarantine["0000:41:00.0"]["fatal_aer"] == 2
    data, lifted, kept = ledger.lift_quarantine(data, {"0000:41:00.0": []}, {"0000:41:00.0": 2})
    assert lifted == ["0000:41:00.0"] and kept == {} and data.aer_baseline == {"0000:41:00.0": 2}


@pytest.mark.parametrize("quarantine", [[], {"0000:41:00.0": "broken"}, {"not an address": {"reasons": []}},
                                        {"0000:41:00.0": {"reasons": [1]}}])
def test_a_quarantine_of_another_shape_is_a_corrupt_ledger(quarantine):
    body = {"tenants": [], "housekeeping": {}, "smt_policy": None, "quarantine": quarantine}
    text = json.dumps({"format": ledger.LEDGER_FORMAT, "version": 1, "serial": 1,
                       "checksum": ledger.checksum(body), "body": body})
    with pytest.raises(ledger.LedgerCorruptError) as refused:
        ledger.parse_ledger(text, "/var/lib/gpuhost/ledger.json")
    assert "quarantine" in refused.value.msg


def test_the_quarantine_keeps_the_gpus_functions_for_a_recovery_reset(host):
    root, path = host
    placed = run_ledger(root, path, tenants=[TENANT])["plan"]["tenants"][0]["gpus"][0]
    gpu_attrs(root, placed["address"], width=("4", "16"))
    held = run_ledger(root, path, state="absent", names=["a"])["quarantine"][placed["address"]]
    assert held["functions"] == list(placed.get("functions") or [placed["address"]])
    assert held["wiped"] is True
