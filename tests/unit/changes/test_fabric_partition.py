# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's shared-NVSwitch model on the fake HGX H100 host (test_nvswitch_fabric.py):
the planner gives each tenant with the board's GPUs exactly one Fabric Manager
partition, and fabric_partition activates and deactivates it through Fabric Manager's
partition tool, here a STUBBED fmpm (tests/support/fakes.py: stub_fmpm). No Fabric
Manager, NVSwitch or NVIDIA driver runs here."""

from __future__ import annotations

import json
import os
import socket

import pytest
from support.fakes import HGX_GPUS as GPUS, HGX_PARTITION_SETS as SETS, active_partitions as active_ids, fmpm_json, \
    stub_fmpm
from support.fixturegen import build_hgx_h100_host
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import safety_context
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import fabric
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement
from ansible_collections.gpuhost.kvm.plugins.modules import fabric_partition

TENANT = {"vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"}


@pytest.fixture(scope="module")
def hgx(tmp_path_factory):
    root = tmp_path_factory.mktemp("hgx")
    build_hgx_h100_host(str(root))
    return str(root), read_host_topology(str(root), with_irqs=False)


def partitions():
    return [p.as_dict() for p in fabric.parse_fmpm_list(fmpm_json())]


def test_fmpm_list_is_read_with_nvml_bus_ids_as_pci_addresses():
    parsed = fabric.parse_fmpm_list(fmpm_json(active=(3,)))
    assert [len(p.gpus) for p in parsed] == [8, 4, 4, 2, 2, 2, 2] + [1] * 8
    assert parsed[3].gpus == ("0000:18:00.0", "0000:2a:00.0") and parsed[3].active
    assert fabric.partition_of(["0000:2a:00.0", "0000:18:00.0"], parsed).id == 3


@pytest.mark.parametrize("text, words", [
    ("not json", "is not JSON"), ('{"partitionInfo": 1}', "no partitionInfo list"),
    ('{"partitionInfo": [{"partitionId": 64, "gpuInfo": [{"pciBusId": "00000000:18:00.0"}]}]}', "not 0 to 63"),
    ('{"partitionInfo": [{"partitionId": 1, "gpuInfo": [{"pciBusId": "../../x"}]}]}', "pciBusId"),
    ('{"partitionInfo": [{"partitionId": 1, "gpuInfo": []}]}', "no list of 1 to 16 GPUs"),
])
def test_a_partition_list_of_another_shape_is_refused(text, words):
    with pytest.raises(GpuhostError) as refused:
        fabric.parse_fmpm_list(text)
    assert words in refused.value.msg or words in (refused.value.field or "")


def test_shared_model_gives_a_two_gpu_tenant_one_partition_on_one_node(hgx):
    _root, topology = hgx
    plan = plan_placement(topology, [dict(TENANT, name="pair", gpus=2)], hugepage_check="none",
                          fabric_partitions=partitions())
    tenant = plan["tenants"][0]
    assert [g["address"] for g in tenant["gpus"]] in (GPUS[0:2], GPUS[2:4], GPUS[4:6], GPUS[6:8])
    assert SETS[tenant["fabric_partition"]] == [g["address"] for g in tenant["gpus"]]
    assert plan["fabric"]["model"] == "shared" and len(plan["fabric"]["partitions"]) == 15
    # a one-GPU tenant gets its one-GPU partition too: every GPU of the board needs one
    one = plan_placement(topology, [dict(TENANT, name="one", gpus=1)], hugepage_check="none",
                         fabric_partitions=partitions())["tenants"][0]
    assert SETS[one["fabric_partition"]] == [one["gpus"][0]["address"]]


def test_shared_model_refuses_gpus_no_partition_holds_naming_those_that_exist(hgx):
    _root, topology = hgx
    with pytest.raises(GpuhostError) as refused:
        plan_placement(topology, [dict(TENANT, name="odd", gpus=[GPUS[1], GPUS[2]])],
                       hugepage_check="none", fabric_partitions=partitions())
    assert "no Fabric Manager partition holds exactly" in refused.value.msg
    assert "3: 0000:18:00.0, 0000:2a:00.0" in refused.value.fix
    # three GPUs: no partition of that size
    with pytest.raises(GpuhostError) as three:
        plan_placement(topology, [dict(TENANT, name="three", gpus=3)], hugepage_check="none",
                       fabric_partitions=partitions())
    assert "partitions of 3 GPU(s): none" in three.value.fix


def test_without_a_model_the_refusal_names_the_shared_model(hgx):
    _root, topology = hgx
    with pytest.raises(GpuhostError) as refused:
        plan_placement(topology, [dict(TENANT, name="pair", gpus=2)], hugepage_check="none")
    assert "error 802" in refused.value.msg and "gpuhost_nvswitch_model: shared" in refused.value.fix


def run(root, fmpm, check_mode=False, **args):
    args = dict(args, root=root, fmpm=fmpm, _ansible_check_mode=check_mode, _ansible_diff=True)
    with patch_module_args(args):
        module = fabric_partition.build_module()
    worker = fabric_partition.FabricPartitionWorker(module)
    worker.run()
    return worker.result


def test_activate_with_stubbed_fmpm_runs_once_then_changes_nothing(hgx, tmp_path):
    root, _topology = hgx
    fmpm, state = stub_fmpm(tmp_path)
    planned = run(root, fmpm, check_mode=True, state="active", gpus=GPUS[:2])
    assert planned["changed"] and planned["steps"] == ["fmpm -a 3"]
    assert [c for c in json.loads(state.read_text())["calls"] if c != ["-l"]] == []
    done = run(root, fmpm, state="active", partition=3)
    assert done["changed"] and done["partition"] == {"id": 3, "gpus": GPUS[:2], "active": True}
    assert active_ids(state) == [3]
    again = run(root, fmpm, state="active", partition=3)
    assert not again["changed"] and again["steps"] == []
    listening = fm_socket(root)
    off = run(root, fmpm, state="inactive", partition=3, socket="/run/nvidia-fabricmanager/fm.sock")
    listening.close()
    assert off["changed"] and active_ids(state) == []
    assert ["--unix-domain-socket", "/run/nvidia-fabricmanager/fm.sock", "-d", "3"] in \
        json.loads(state.read_text())["calls"]
    listed = run(root, fmpm)
    assert not listed["changed"] and len(listed["partitions"]) == 15


def fm_socket(root, where="run/nvidia-fabricmanager/fm.sock"):
    """A listening UNIX socket where Fabric Manager's would be under ``root``."""
    path = os.path.join(root, where)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(path)
    listening.listen(1)
    return listening


@pytest.mark.parametrize("kind, words", [
    ("missing", "does not exist"), ("fifo", "is a FIFO, not a UNIX socket"),
    ("file", "is a regular file"), ("link", "is a symbolic link"),
    ("dotdot", "'..' component")])
def test_a_socket_that_is_no_unix_socket_is_refused_before_fmpm_runs(hgx, tmp_path, kind, words):
    root, _topology = hgx
    fmpm, state = stub_fmpm(tmp_path)
    folder = os.path.join(root, "run", "fm-" + kind)
    os.makedirs(folder, exist_ok=True)
    where = "/run/fm-%s/fm.sock" % kind
    listening = None
    if kind == "fifo":
        os.mkfifo(os.path.join(folder, "fm.sock"))
    elif kind == "file":
        open(os.path.join(folder, "fm.sock"), "w").close()
    elif kind == "link":
        listening = fm_socket(root, "run/fm-link/real.sock")
        os.symlink("real.sock", os.path.join(folder, "fm.sock"))
    elif kind == "dotdot":
        where = "/run/fm-dotdot/../nvidia-fabricmanager/fm.sock"
    with pytest.raises(GpuhostError) as refused:
        run(root, fmpm, socket=where)
    assert refused.value.field == "socket" and words in refused.value.msg, refused.value.msg
    assert json.loads(state.read_text())["calls"] == []
    if listening is not None:
        listening.close()


def test_a_partition_whose_gpu_a_process_holds_is_not_touched(hgx, tmp_path, monkeypatch):
    root, _topology = hgx
    fmpm, state = stub_fmpm(tmp_path)
    monkeypatch.setattr(safety_context, "open_users", lambda r, nodes: {4242: ("qemu-system-x86", set(nodes))})
    with pytest.raises(GpuhostError) as refused:
        run(root, fmpm, state="active", partition=3)
    assert "Fabric Manager resets its GPUs" in refused.value.msg and "PID 4242" in refused.value.msg
    assert active_ids(state) == []


@pytest.mark.parametrize("args, field", [
    ({"state": "active"}, "partition"),
    ({"state": "active", "partition": 64}, "partition"),
    ({"state": "active", "gpus": [GPUS[1], GPUS[2]]}, "gpus"),
    ({"state": "active", "partition": 40}, "partition")])
def test_a_partition_not_named_right_is_refused_before_any_change(hgx, tmp_path, args, field):
    root, _topology = hgx
    fmpm, state = stub_fmpm(tmp_path)
    with pytest.raises(GpuhostError) as refused:
        run(root, fmpm, **args)
    assert refused.value.field == field
    assert active_ids(state) == []
