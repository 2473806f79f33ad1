"""Every error of libvirt_pinned_domain names an option the user can set: a
module option, a documented sub-option (disk.size, network.vf_address, gpus[0].functions)
or a documented key of the plan entry (plan.numatune.nodeset), never an internal name
such as memory_nodeset, numatune or hostdev. Emulator and iothread pins are checked
against other tenants' vCPU cores, SMT siblings included, like the vCPU pins, and a
refusal about them names emulator_cpus or iothread_cpus, not vcpu_pins."""

import os
import re

import pytest

from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.preflight import (
    DefinedDomain, run_preflight)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import libvirt_pinned_domain as mod

from support.domain_xml import RUNBOOK_GPU, runbook_tenant, runbook_topology
from support import REPO

GPU_ITEM_KEYS = ("address", "functions", "bar64_total")
# Not about an option: lxml missing on the managed host, and a cpuset in the XML of
# another domain that libvirt itself holds. (The hugepage reservation falling short names
# memory_gib, the option that asks for the pages; the vm role tells it by its kind.)
NOT_OPTIONS = ("lxml", "vcpupin")


def argument_spec():
    with patch_module_args(dict(name="x", state="absent")):
        return mod.build_module().argument_spec


def plan_keys():
    """Every key docs/plan-format.md shows in its plan example, nested ones included."""
    with open(os.path.join(REPO, "docs", "plan-format.md")) as handle:
        text = handle.read()
    section = text.split("## Plan (output)", 1)[1].split("```", 2)[1]
    lines = [line.split("#", 1)[0] for line in section.splitlines()]
    return set(re.findall(r"([a-z_][a-z0-9_]*):", "\n".join(lines)))


SPEC = argument_spec()
PLAN_KEYS = plan_keys()


def is_option(field):
    parts = re.sub(r"\[\d+\]", "", field).split(".")
    if parts[0] not in SPEC:
        return False
    if len(parts) == 1:
        return True
    if parts[0] == "plan":
        return all(part in PLAN_KEYS for part in parts[1:])
    if parts[0] == "gpus":
        return len(parts) == 2 and parts[1] in GPU_ITEM_KEYS
    suboptions = SPEC[parts[0]].get("options") or {}
    return len(parts) == 2 and parts[1] in suboptions


def test_the_checker_knows_options_from_names():
    assert is_option("memory_nodes") and is_option("disk.size") and is_option("gpus[0].functions")
    assert is_option("plan.numatune.nodeset") and is_option("plan.gpus[0].bar64_total")
    assert not is_option("memory_nodeset") and not is_option("numatune")
    assert not is_option("hostdev") and not is_option("hugepages") and not is_option("disk.nope")


@pytest.mark.parametrize("source", ["plugins/modules/libvirt_pinned_domain.py",
                                    "plugins/module_utils/domain/xml.py",
                                    "plugins/module_utils/domain/preflight.py",
                                    "plugins/module_utils/domain/argument_spec.py",
                                    "plugins/module_utils/domain/storage.py",
                                    "plugins/module_utils/domain/lifecycle.py"])
def test_every_literal_field_is_an_option(source):
    with open(os.path.join(REPO, source)) as handle:
        text = handle.read()
    literals = set(re.findall(r"field(?:_name)?=\"([^\"%]+)\"", text))
    wrong = sorted(f for f in literals if f not in NOT_OPTIONS and not is_option(f))
    assert wrong == []


def test_every_name_the_specs_map_to_is_an_option():
    for options in (domain_model.OPTION_NAMES, domain_model.PLAN_OPTION_NAMES):
        wrong = sorted(v for v in options.values() if not is_option(v))
        assert wrong == []


def fields_of(err):
    fields = [err.field]
    fields += [r["field"] for r in (err.details or {}).get("refusals", [])]
    return fields


# -- through the module (libvirt's test driver) ------------------------------------------

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is in requirements.txt")
from support.domain_xml import Env  # noqa: E402


def small(**extra):
    args = dict(name="t1", vcpus=2, vcpu_pins=[1, 33], memory_gib=2, hugepage_size="2M",
                memory_nodes="0", emulator_cpus="0,32")
    args.update(extra)
    return args


OTHER = dict(name="other", vcpus=2, vcpu_pins=[2, 34], memory_gib=2, hugepage_size="2M",
             memory_nodes="0", emulator_cpus="0,32")


@pytest.mark.parametrize("args, field, words", [
    (small(memory_nodes="0-x"), "memory_nodes", "is not a NUMA node list"),
    (small(memory_nodes="5"), "memory_nodes", "NUMA node 5 does not exist"),
    (small(emulator_cpus="200"), "emulator_cpus", "are not online"),
    (small(iothreads=1, iothread_cpus="x"), "iothread_cpus", "cannot parse"),
    (small(memory_gib=200, hugepage_size="1G"), "memory_gib", "are free"),
    (small(hostdevs=["0000:99:00.0"]), "hostdevs", "does not exist on this host"),
    (small(gpus=["0000:99:00.0"]), "gpus", "does not exist on this host"),
    (small(hostdevs=[RUNBOOK_GPU, RUNBOOK_GPU]), "hostdevs", "passed through twice"),
    (small(gpus=[{"address": RUNBOOK_GPU, "functions": ["0000:66:00.0"]}]),
     "gpus[0].functions", "is not in the slot of GPU"),
    (small(gpus=[RUNBOOK_GPU], memory_nodes="1"), "memory_nodes", "memory nodeset is 1"),
    (small(gpus=[RUNBOOK_GPU], vcpu_pins=[17, 49]), "vcpu_pins", "vCPU pins 17,49 are on node 1"),
    (small(gpus=[RUNBOOK_GPU], emulator_cpus="16"), "emulator_cpus", "emulator pins 16"),
    (small(guest_topology={"cores": 3}), "guest_topology", "gives 3 vCPUs"),
])
def test_a_refusal_names_the_option_that_was_set(tmp_path, args, field, words):
    env = Env(tmp_path)
    err = env.fail(**args)
    assert err.field == field, err.message
    assert words in err.message
    assert all(is_option(f) or f in NOT_OPTIONS for f in fields_of(err)), fields_of(err)
    assert env.names() == []


@pytest.mark.parametrize("option, value, text", [
    ("emulator_cpus", "2", "emulator_cpus 2 overlap the vCPUs of domain other (pinned to 2-3)"),
    ("emulator_cpus", "4,36", None),
    ("emulator_cpus", "35", "emulator_cpus 35 share cores with the vCPUs of domain other "
                            "(CPU 35 is the SMT sibling of 3)"),
    ("iothread_cpus", "35", "iothread_cpus 35 share cores with the vCPUs of domain other "
                            "(CPU 35 is the SMT sibling of 3)"),
    ("iothread_cpus", "3", "iothread_cpus 3 overlap the vCPUs of domain other"),
])
def test_emulator_and_iothread_pins_keep_off_other_cores(tmp_path, option, value, text):
    env = Env(tmp_path)
    other = dict(OTHER)
    other["vcpu_pins"] = [2, 3]
    env.run(**other)
    args = small(vcpu_pins=[5, 37], iothreads=1, iothread_cpus="0,32")
    args[option] = value
    if text is None:
        env.run(**args)                       # a core no tenant holds
        return
    err = env.fail(**args)
    assert err.field == option
    assert text in err.message
    assert "set allow_cpu_overlap: true if sharing is deliberate" in err.message
    result = env.run(allow_cpu_overlap=True, **args)
    assert any(text in w for w in result["warnings_preflight"])


def test_plan_refusals_name_the_plan_keys():
    topo = runbook_topology()
    other = DefinedDomain(name="other", vcpu_cpus=(3,))
    tenant = runbook_tenant(vf=False)
    tenant["emulator_cpus"] = "35"
    report = run_preflight(domain_model.spec_from_plan(tenant), topo, [other])
    fields = [r.field for r in report.refusals]
    assert "plan.emulator_cpus" in fields and "plan.vcpu_pins" in fields
    assert all(is_option(f) for f in fields)
    with pytest.raises(GpuhostError) as info:
        domain_model.spec_from_plan(dict(runbook_tenant(), numatune={"mode": "strict", "nodeset": "x"}))
    assert info.value.field == "plan.numatune.nodeset"
    assert "cpulist" not in info.value.message
