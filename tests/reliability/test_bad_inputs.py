# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bad-input matrix (bad_inputs.yml), one parametrized test.

Module cases run the module's own class in process, not in check mode: a refusal must
come before the first write. Role and playbook cases run ansible-playbook in check mode
against the example inventory's hk-gpu-01, pointed at the case's fake host. Every case
asserts the exact message fragments and compares the host snapshot (harness.host_state)
taken before and after.

A refusal changes nothing, and says so: a module case's result (what main() hands to
fail_json) has changed false, and the module started no external command (every way
of starting one is refused and recorded while it runs, harness.no_commands); the
failed task of a role or playbook case reports changed false.
"""

import json
import os
import re

import pytest

import harness

CASES = harness.load_cases()
# The classes of hostile input a case may name (its ``class``): the refusal closes the
# class, and the matrix shows which class each case stands for.
CASE_CLASSES = {
    "file-kind": "a path that names a FIFO, a device, a directory or a file with a second "
                 "hard link where a regular file is read or written",
    "path-escape": "a path that leaves root ('..', a link) or names a file that is not there",
    "lost-update": "two runs editing the same shared host file",
    "side-effect": "a refused run that leaves a directory, lock file or ledger behind",
    "number-bound": "a number or a list out of its bounds, from an option or another host",
    "name-syntax": "a name (interface, owner, tenant) that is not one the host accepts",
    "foreign-parser": "what another program or host says, truncated, doubled or odd",
    "output-escaping": "a value written into SVG, HTML, XML or Markdown",
    "value-shape": "a value of the wrong type or outside its choices, or a required one "
                   "left out",
    "missing-resource": "a device, IRQ, CPU, interface, tenant or host feature (SR-IOV, "
                        "1G pages, OVMF, VT-d) that the host does not have",
    "host-critical": "a device, CPU or route the host itself needs (its root disk, the NIC "
                     "of its default route, its console, a bridge, its housekeeping CPUs)",
    "tenant-isolation": "what another tenant holds or shares with it (an IOMMU group, a "
                        "CPU, a GPU), or isolation the host cannot give (ACS override, no "
                        "IOMMU)",
    "unreachable-service": "a libvirt connection that does not answer",
}
FAILED_PREFIX = "FAILED! => "


def _ids(cases):
    ids = [case["id"] for case in cases]
    duplicates = sorted(set(i for i in ids if ids.count(i) > 1))
    assert not duplicates, "duplicate case ids in bad_inputs.yml: %s" % duplicates
    return ids


def failed_results(output):
    """The result of every failed task in an ansible-playbook run (JSON result format);
    a line that is not JSON counts as {"msg": line}."""
    results = []
    for line in output.splitlines():
        if FAILED_PREFIX not in line:
            continue
        try:
            result = json.loads(line.split(FAILED_PREFIX, 1)[1])
        except ValueError:
            result = {"msg": line}
        results.append(result if isinstance(result, dict) else {"msg": line})
    return results


def failure_messages(output):
    """The msg of every failed task in an ansible-playbook run (JSON result format)."""
    return [str(result.get("msg", "")) for result in failed_results(output)]


def plant_links(host, links):
    """The tweak ``symlink {host path: target}``: a link planted where a module reads or
    writes its files; the target may name the case's paths ({base}, {root}, ...)."""
    for host_path, target in (links or {}).items():
        full = host.p(host_path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        os.symlink(harness._expand(target, host), full)


def _run(case, host):
    """Run the case; return the failure message, or None when the target succeeded."""
    target = case["target"]
    if ":" not in target:
        outcome = harness.run_module_refusal(host, target, case.get("args") or {})
        if outcome.error is None:
            return None, outcome
        return outcome.error.message, outcome
    kind, name = target.split(":", 1)
    runner = harness.run_role_case if kind == "role" else harness.run_playbook_case
    env = harness.ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = runner(host, name, case.get("vars") or {}, env=env)
    messages = failure_messages(proc.output)
    if proc.returncode == 0 or not messages:
        return None, proc
    return "\n".join(messages), proc


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_bad_input_fails_safely(case, tmp_path, tally):
    assert case.get("expect"), "case %s gives no expected message" % case["id"]
    assert case.get("class") in CASE_CLASSES, "case %s: unknown class %r" % (
        case["id"], case.get("class"))
    base = tmp_path / "host"
    base.mkdir()
    host = harness.Host(base, case.get("host", "sim"), case.get("host_args"))
    tweak = dict(case.get("tweak") or {})
    links = tweak.pop("symlink", None)
    host.apply_tweaks(tweak)
    plant_links(host, links)
    before = harness.host_state(host)
    tally.bad_input(case["target"], "tried")

    message, detail = _run(case, host)

    changes = harness.state_difference(before, harness.host_state(host))
    if changes:
        tally.bad_input(case["target"], "changed_host")
    assert message is not None, "%s was accepted: %s" % (
        case["id"], getattr(detail, "output", "")[-3000:])
    missing = [f for f in case["expect"] if f not in message]
    assert not missing, "message lacks %s:\n%s" % (missing, message)
    if ":" not in case["target"]:
        # A module's error names the option at fault and says what to do next.
        assert detail.error.field == case["field"], (detail.error.field, message)
        assert "Fix: " in message, message
        # Nothing was run and nothing is said to have changed.
        assert not detail.commands, "the refusal started commands: %s" % detail.commands
        assert not changes, "the host changed:\n" + "\n".join(changes)
        assert detail.result.get("changed") is False, (
            "the refusal's result does not say changed=false: %r" % (detail.result,))
    else:
        said_changed = [r.get("msg") for r in failed_results(detail.output) if r.get("changed")]
        assert not said_changed, "a failed task says changed=true: %s" % said_changed
    assert not changes, "the host changed:\n" + "\n".join(changes)
    tally.bad_input(case["target"], "failed_safely")


def test_matrix_is_broad_enough():
    """At least 40 cases, over modules, role specs and playbooks alike."""
    kinds = {}
    for case in CASES:
        kind = case["target"].split(":", 1)[0] if ":" in case["target"] else case["target"]
        kinds[kind] = kinds.get(kind, 0) + 1
    assert len(CASES) >= 40
    for kind in ("vfio_bind", "sriov_vfs", "irq_affinity", "numa_cpuset", "tenant_ledger",
                 "libvirt_pinned_domain", "iommu_groups_facts", "role", "playbook"):
        assert kinds.get(kind), "no bad-input case for %s" % kind
    assert all(re.match(r"^[a-z0-9-]+$", case["id"]) for case in CASES)
    for kind in ("kserve_loadgen", "capacity_facts", "fleet_place", "fleet_report"):
        assert kinds.get(kind, 0) >= 2, "too few bad-input cases for %s" % kind


def test_every_case_names_its_class():
    """The matrix shows which class of hostile input each case stands for."""
    unlabelled = [case["id"] for case in CASES if case.get("class") not in CASE_CLASSES]
    assert not unlabelled, "cases without a known class: %s" % unlabelled


def test_a_refusal_that_starts_a_command_is_caught(tmp_path):
    """The runner's own check: a command started while a module runs is refused and
    recorded, whichever way it is started."""
    import os
    import subprocess
    with harness.no_commands() as started:
        for start in (lambda: subprocess.run(["true"], check=False), lambda: os.system("true"),
                      lambda: subprocess.Popen("true", shell=True)):
            with pytest.raises(harness.CommandStarted):
                start()
    assert len(started) == 3
    assert subprocess.run(["true"], check=False).returncode == 0     # restored afterwards
