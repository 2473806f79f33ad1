# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vfio_bind, sriov_vfs and irq_affinity through the real ansible tools.

A separate ansible process writes plain files, not through the Python simulator, so
these runs keep to what a prepared tree can answer honestly: ansible-doc, check mode,
refusals and idempotent no-op runs. The kernel's reactions are tested in-process
(tests/unit/changes/test_vfio_bind.py, test_sriov_vfs.py, test_irq_affinity.py).
"""

import json

import pytest

from support.helpers import ansible_env, run_tool
from support.sysfs_sim import SimulatedKernel, build_sim_host, run_module, snapshot

from ansible_collections.gpuhost.kvm.plugins.modules import irq_affinity, vfio_bind

MODULES = ("vfio_bind", "sriov_vfs", "irq_affinity")


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders(module):
    proc = run_tool("ansible-doc", "--json", "gpuhost.kvm.%s" % module)
    doc = json.loads(proc.stdout)["gpuhost.kvm.%s" % module]
    assert doc["doc"]["options"]["root"]["default"] == "/"
    assert doc["doc"]["attributes"]["check_mode"]["support"] == "full"
    assert doc["examples"].strip() and doc["return"]


def adhoc(module, args, *flags):
    """Run the module ad hoc; returns (rc, the task result parsed from the output)."""
    env = ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = run_tool("ansible", "localhost", "-c", "local", "-m", "gpuhost.kvm.%s" % module,
                    "-a", json.dumps(args), *flags, env=env, check=False)
    # ad-hoc output: "localhost | CHANGED => {json}" after any diff text
    marker = proc.stdout.index("localhost | ")
    body = proc.stdout[proc.stdout.index(" => ", marker) + 4:]
    return proc.returncode, json.JSONDecoder().raw_decode(body)[0]


@pytest.fixture
def root(tmp_path):
    return build_sim_host(str(tmp_path / "host"))


def test_vfio_bind_check_mode_plans_without_touching_the_tree(root, module_python):
    before = snapshot(root)
    rc, task = adhoc("vfio_bind", {"root": root, "devices": ["0000:41:00.0"],
                                   "persistent": True}, "--check", "--diff")
    assert rc == 0, task
    assert task["changed"] is True
    assert [d["address"] for d in task["devices"]] == ["0000:41:00.0", "0000:41:00.1"]
    assert task["devices"][0]["vfio_dev"] == "/dev/vfio/2"
    assert snapshot(root) == before


def test_vfio_bind_refuses_root_disk_through_the_cli(root):
    before = snapshot(root)
    rc, task = adhoc("vfio_bind", {"root": root, "devices": ["0000:01:00.0"],
                                   "allow_host_critical": True})
    assert rc == 2   # ansible: a host failed
    assert "root filesystem" in task["msg"]
    assert task["details"]["refusals"][0]["override"] is None
    assert snapshot(root) == before


def test_vfio_bind_already_bound_is_a_no_op(root):
    run_module(vfio_bind, "VfioBinder", {"root": root, "devices": ["0000:41:00.0"]},
               SimulatedKernel(root))
    before = snapshot(root)
    rc, task = adhoc("vfio_bind", {"root": root, "devices": ["0000:41:00.0"]})
    assert rc == 0 and task["changed"] is False, task
    assert {d["driver_after"] for d in task["devices"]} == {"vfio-pci"}
    assert snapshot(root) == before


def test_sriov_vfs_check_mode_and_too_many_vfs(root, module_python):
    before = snapshot(root)
    rc, task = adhoc("sriov_vfs", {"root": root, "pf": "eno1", "num_vfs": 4,
                                   "vf_driver": "vfio-pci"}, "--check")
    assert rc == 0 and task["changed"] is True, task
    assert [v["address"] for v in task["vfs"]] == ["0000:03:00.%d" % i for i in range(2, 6)]
    rc, task = adhoc("sriov_vfs", {"root": root, "pf": "eno1", "num_vfs": 9})
    assert rc != 0 and "above sriov_totalvfs 8" in task["msg"]
    assert task["field"] == "num_vfs"
    assert snapshot(root) == before


def test_sriov_vfs_zero_vfs_is_a_no_op(root):
    rc, task = adhoc("sriov_vfs", {"root": root, "pf": "0000:01:00.0", "num_vfs": 0})
    assert rc == 0 and task["changed"] is False, task


def test_irq_affinity_check_mode_bad_cpus_and_no_op(root, module_python):
    before = snapshot(root)
    rc, task = adhoc("irq_affinity", {"root": root, "name_regex": "mlx5_comp", "cpus": "0-1"},
                     "--check", "--diff")
    assert rc == 0 and task["changed_irqs"] == [50, 51, 52, 53], task
    rc, task = adhoc("irq_affinity", {"root": root, "irqs": [60], "cpus": "0-99"})
    assert rc != 0 and task["field"] == "cpus"
    assert snapshot(root) == before
    run_module(irq_affinity, "IrqPinner", {"root": root, "name_regex": "mlx5_comp",
                                           "cpus": "0-1"}, SimulatedKernel(root))
    rc, task = adhoc("irq_affinity", {"root": root, "name_regex": "mlx5_comp", "cpus": "0-1"})
    assert rc == 0 and task["changed"] is False, task


@pytest.mark.parametrize("module, args, field", [
    ("gpu_health", {"max_temperature_c": 10 ** 400}, "max_temperature_c"),
    ("vfio_bind", {"match": [1]}, "match"),
])
def test_a_value_ansible_core_crashes_on_is_refused_naming_the_option(module, args, field):
    """float(10**400) and a list where a dict with suboptions is due make ansible-core's
    own checks raise before the module's code runs; runner.new_module turns that into a
    refusal naming the option, on every ansible-core of the matrix (this file runs in
    each lane of tests/ansible-matrix.txt)."""
    rc, task = adhoc(module, args)
    assert rc != 0 and task["changed"] is False
    assert task["field"] == field
    assert task["msg"].startswith(field + ": ansible-core could not check the value given")
    assert "exception" not in task and "module_stderr" not in task


def test_fabric_partition_with_stubbed_fmpm_activates_once_through_ansible(tmp_path, module_python):
    """fabric_partition through the ansible tool, Fabric Manager's partition tool STUBBED
    (tests/support/fakes.py: no Fabric Manager or NVSwitch here) on the fake HGX host:
    check mode names the command and runs none, a run activates, a second changes nothing."""
    from support.fakes import active_partitions, stub_fmpm
    from support.fixturegen import build_hgx_h100_host
    root = str(tmp_path / "hgx")
    build_hgx_h100_host(root)
    fmpm, state = stub_fmpm(tmp_path)
    args = {"root": root, "fmpm": fmpm, "state": "active", "gpus": ["0000:18:00.0", "0000:2a:00.0"]}
    rc, task = adhoc("fabric_partition", args, "--check", "--diff")
    assert rc == 0 and task["changed"] and task["steps"] == ["fmpm -a 3"], task
    assert active_partitions(state) == []
    rc, task = adhoc("fabric_partition", args)
    assert rc == 0 and task["changed"] and task["partition"]["active"], task
    rc, task = adhoc("fabric_partition", args)
    assert rc == 0 and not task["changed"] and active_partitions(state) == [3], task
