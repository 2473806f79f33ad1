# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""YAML's .inf and .nan, and absurd numbers, in a tenant request, an existing
plan entry or a plan to render are refused with a GpuhostError naming the key (int() of
an infinity raised an uncaught OverflowError, of NaN a ValueError)."""

import math

import pytest

from support.hosts import runbook_host, tenant

from ansible_collections.gpuhost.kvm.plugins.plugin_utils import plan_render
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
    plan_placement, tenant_request_from_dict)

INF, NAN = float("inf"), float("nan")


def refused(call, field, *words):
    with pytest.raises(GpuhostError) as info:
        call()
    err = info.value
    assert err.field == field, err.message
    assert err.message.count("Fix:") == 1, err.message
    for word in words:
        assert word in err.message, (word, err.message)
    return err


@pytest.mark.parametrize("key,value,words", [
    ("vcpus", INF, ["inf is not a finite number"]),
    ("vcpus", -INF, ["-inf is not a finite number"]),
    ("vcpus", NAN, ["nan is not a finite number"]),
    ("memory_gib", INF, ["inf is not a finite number"]),
    ("gpus", NAN, ["nan is not a finite number"]),
    ("iothreads", INF, ["inf is not a finite number"]),
    ("vcpus", 10 ** 30, ["must be at most 8192"]),
    ("vcpus", 1e300, ["must be at most 8192"]),
    ("memory_gib", "99999999999999999999", ["must be at most 65536"]),
    ("gpus", 1000, ["must be at most 64"]),
    ("vcpus", 2.5, ["2.5 is not a whole number"]),
    ("vcpus", True, ["True is not a whole number"]),
    ("vcpus", 0, ["0 is below 1"]),
])
def test_a_request_with_a_non_finite_or_absurd_number_is_refused_by_key(key, value, words):
    refused(lambda: tenant_request_from_dict(tenant(**{key: value})), "tenants[0].%s" % key,
            *words)


def test_whole_numbers_in_other_spellings_still_count():
    request = tenant_request_from_dict(tenant(vcpus=" 30 ", memory_gib=64.0))
    assert (request.vcpus, request.memory_gib) == (30, 64)


def _existing(**changes):
    entry = plan_placement(runbook_host(), [tenant()])["tenants"][0]
    entry.update(changes)
    return entry


@pytest.mark.parametrize("key,value,field", [
    ("node", INF, "existing[0].node"),
    ("node", NAN, "existing[0].node"),
    ("memory_node", INF, "existing[0].memory_node"),
    ("memory_gib", NAN, "existing[0].memory_gib"),
    ("node", 10 ** 12, "existing[0].node"),
    ("hugepages", {"0": INF}, "existing[0].hugepages.0"),
    ("hugepages", {"inf": 1}, "existing[0].hugepages"),
    ("hugepages", [1], "existing[0].hugepages"),
    ("hugepage_size_kib", NAN, "existing[0].hugepage_size_kib"),
])
def test_an_existing_entry_with_a_non_finite_number_is_refused_by_key(key, value, field):
    entry = _existing(**{key: value})
    refused(lambda: plan_placement(runbook_host(), [tenant(name="t2", vcpus=2, gpus=0,
                                                           nic_vf=False)],
                                   existing=[entry]), field)


@pytest.mark.parametrize("vf_count", [INF, NAN, {"0000:17:00.0": INF}, 10 ** 9])
def test_a_non_finite_vf_count_is_refused(vf_count):
    with pytest.raises(GpuhostError) as info:
        plan_placement(runbook_host(), [tenant()], vf_count=vf_count)
    assert info.value.field.startswith("vf_count"), info.value.message


@pytest.mark.parametrize("change,field", [
    (lambda plan: plan["tenants"][0].update(vcpu_pins=[INF]), "tenants[tenant-a100].vcpu_pins"),
    (lambda plan: plan["tenants"][0].update(vcpu_pins=[NAN]), "tenants[tenant-a100].vcpu_pins"),
    (lambda plan: plan["tenants"][0]["gpus"][0].update(bar64_total=INF),
     "tenants[tenant-a100].gpus.bar64_total"),
    (lambda plan: plan["hugepages"]["0"].update({"1048576": NAN}), "hugepages.0.1048576"),
    (lambda plan: plan["hugepages"]["0"].update({"inf": 1}), "hugepages.0"),
])
def test_a_plan_to_render_with_a_non_finite_number_is_refused_by_key(change, field):
    plan = plan_placement(runbook_host(), [tenant()])
    change(plan)
    for render in (plan_render.render_markdown, plan_render.render_svg):
        err = refused(lambda: render(plan), field)
        assert not math.isnan(len(err.message))
