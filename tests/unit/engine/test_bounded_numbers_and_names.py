# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Numbers bounded where they enter and names the host accepts, through the one
validator set (validators.py). Each test says what happened before the fix."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import validators
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.host_files import validate_entries
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import fleet


@pytest.mark.parametrize("value, kib", [("1G", 1048576), ("2M", 2048), ("2048K", 2048),
                                        (1048576, 1048576), ("none", None), (None, None)])
def test_hugepage_sizes_a_kernel_offers(value, kib):
    assert validators.hugepage_size_kib(value) == kib


@pytest.mark.parametrize("value", ["0M", "0", "3M", "4K", "32G", "1" + "0" * 400 + "G",
                                   True, "1G x", "١G"])
def test_hugepage_sizes_no_kernel_offers_are_refused(value):
    # Before: "0M" read as 0, which the domain builder took for "no hugepages".
    with pytest.raises(GpuhostError) as info:
        validators.hugepage_size_kib(value, "hugepage_size")
    assert info.value.field == "hugepage_size"


def test_the_domain_builder_refuses_a_zero_hugepage_size():
    with pytest.raises(GpuhostError):
        domain_model.hugepage_size_to_kib("0M")
    assert domain_model.hugepage_size_to_kib(0) is None


@pytest.mark.parametrize("value, result", [("root", "root"), ("0", 0), ("65534", 65534),
                                           ("svc.gpu-1", "svc.gpu-1")])
def test_account_names(value, result):
    assert validators.account_name(value, "owner") == result


@pytest.mark.parametrize("value", ["²", "١٢", "-root", "a b", "a\n", "x" * 40, "4294967295", ""])
def test_account_names_the_host_does_not_take_are_refused(value):
    with pytest.raises(GpuhostError) as info:
        validators.account_name(value, "files[0].owner")
    assert info.value.field == "files[0].owner"


def test_host_files_refuses_a_lookalike_digit_owner_before_reading_the_host():
    # Before: int('²') raised ValueError, a traceback.
    with pytest.raises(GpuhostError) as info:
        validate_entries([{"path": "/etc/x.conf", "content": "a\n", "mode": "0644",
                           "group": "²"}])
    assert info.value.field == "files[0].group"


def _candidate(**numbers):
    candidate = {"fits": True, "node": 0, "gpus": ["0000:65:00.0"], "clean_iommu_group": True,
                 "hugepages_ready": True, "gpus_stranded": 0, "cores_partly_used": 0,
                 "cores_left_on_node": 10, "why": "ok"}
    candidate.update(numbers)
    return candidate


@pytest.mark.parametrize("numbers", [{"gpus_stranded": -5}, {"cores_left_on_node": -1},
                                     {"cores_partly_used": 10 ** 400}])
def test_another_hosts_numbers_out_of_bounds_do_not_win(numbers):
    # Before: a negative count ranked its host first; 10**400 was taken as it is.
    chosen = fleet.rank_candidates({"good": _candidate(), "odd": _candidate(**numbers)}, "t1")
    assert chosen["host"] == "good"
    odd = [c for c in chosen["candidates"] if c["host"] == "odd"][0]
    assert odd["fits"] is False and "of the right type" in odd["why"]


def test_a_capacity_fact_with_an_absurd_total_is_unusable():
    assert fleet.capacity_shape_problem({"totals": {"gpus": 10 ** 400}, "nodes": {}}) == \
        "has no totals of whole numbers"
    assert fleet.capacity_shape_problem({"totals": {"gpus": -1}, "nodes": {}}) == \
        "has no totals of whole numbers"


@pytest.mark.parametrize("entry, field", [
    ({"gpus": ["0000:65:00.0"]}, "existing[0].gpus[0]"),
    ({"gpus": "0000:65:00.0"}, "existing[0].gpus"),
    ({"vf": "0000:65:00.2"}, "existing[0].vf")])
def test_existing_allocations_of_the_wrong_shape_name_the_option(entry, field):
    # Before: AttributeError ('str' object has no attribute 'get'), a traceback.
    from support import fixturegen
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
        plan_placement)
    import tempfile
    root = fixturegen.build_runbook_host(tempfile.mkdtemp())
    existing = [dict({"name": "t0", "node": 0, "vcpu_pins": [2]}, **entry)]
    with pytest.raises(GpuhostError) as info:
        plan_placement(read_host_topology(root, with_irqs=False),
                       [{"name": "t1", "vcpus": 4, "memory_gib": 4}], existing=existing)
    assert info.value.field == field


@pytest.mark.parametrize("uri", ["qemu:///sys\x00tem", "qemu:///system\n", "", None])
def test_a_libvirt_uri_with_a_nul_or_blank_is_refused_before_libvirt(uri):
    # Before: libvirt-python raised ValueError (embedded null character), a traceback.
    from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.libvirt_conn import open_connection
    with pytest.raises(GpuhostError) as info:
        open_connection(uri)
    assert info.value.field == "uri"


def test_an_existing_tenant_on_node_1024_is_refused_as_every_other_reader_refuses_it(tmp_path):
    """Placement bounded an existing tenant's node at 1024 where the rest of the
    collection stops at the kernel's highest node number, 1023 (cpuset.MAX_NODE)."""
    from support.fixturegen import build_eight_gpu_host
    from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
        plan_placement)
    build_eight_gpu_host(str(tmp_path))
    topology = read_host_topology(str(tmp_path), with_irqs=False)
    tenant = plan_placement(topology, [{"name": "a", "gpus": 0, "vcpus": 2, "memory_gib": 1,
                                        "hugepage_size": "2M"}], hugepage_check="none")["tenants"][0]
    with pytest.raises(GpuhostError) as refused:
        plan_placement(topology, [], existing=[dict(tenant, node=1024)], hugepage_check="none")
    assert refused.value.field == "existing[0].node"
