"""A rolling run with running tenants restarts none, with the real ansible-playbook:
site.yml's vm and validate stages on the synthetic runbook host (sysfs tree below
gpuhost_sysfs_root) against a libvirt test-driver node file whose tenant-a100 runs.

``test:///<file>`` starts every connection from the file, so the file plays libvirt's
state between runs: the first run (check mode, an empty node) gives the XML the vm role
defines; the second finds tenant-a100 running with that XML but vCPU 0 pinned elsewhere
(an older plan) and must list it, with its changed elements, in the one report; the
third finds it running as the role defines it and must list none."""

import json
import os
import re

import pytest

from support.helpers import INVENTORY, ansible_env, point_hk_gpu_01_at, run_tool

TENANT = "tenant-a100"
DEFINE_TASK = "TASK [gpuhost.kvm.vm : Define the tenant domains from the plan, pinned and hugepage-backed]"
EVALUATE_TASK = "TASK [gpuhost.kvm.validate : Evaluate the runbook section 14 checklist]"
SHOW_TASK = "TASK [gpuhost.kvm.validate : Show the validation report]"


def _result_after(stdout, task, item=None):
    """The JSON result the default callback prints (-v, result format json) for ``task``
    (and loop ``item``) on hk-gpu-01."""
    section = stdout[stdout.index(task):]
    label = r" => \(item=%s\)" % re.escape(item) if item else ""
    match = re.search(r"^(?:ok|changed): \[hk-gpu-01\]%s => " % label, section, re.M)
    assert match and section.find("\nTASK [", 1) > match.start(), section[:3000]
    return json.JSONDecoder().raw_decode(section, match.end())[0]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    base = tmp_path_factory.mktemp("restart")
    # Free 1G pages for the tenant, so that check mode's domain preflight passes too
    # (the numa stage, which reserves them, is not run here).
    host = point_hk_gpu_01_at(base, hugepages={2048: (1024, 1024, 0), 1048576: (128, 128, 0)})
    os.makedirs(host["vars"]["vm_image_dir"])
    return host


def _site(host, node_xml, *extra, check=False):
    node = host["base"] / "libvirt-node.xml"
    node.write_text(node_xml)
    argv = ["site.yml", "-v", "-i", INVENTORY, "-l", "hk-gpu-01", "--tags", "vm,validate",
            "-e", host["extra"], "-e", "gpuhost_libvirt_uri=test://%s" % node,
            # The checks that need a real host (IOMMU, a QEMU to read) fail on the
            # synthetic one: the report is what this test reads.
            "-e", "validate_fail=false"] + list(extra)
    proc = run_tool("ansible-playbook", *(argv + (["--check"] if check else [])),
                    env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"), check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    return proc.stdout


def _running(domain_xml):
    return "<node>\n%s\n</node>\n" % domain_xml


def test_a_running_tenant_whose_pins_changed_is_reported_once_and_not_again(host):
    wanted = _result_after(_site(host, "<node/>\n", check=True), DEFINE_TASK, TENANT)["xml"]
    assert '<vcpupin vcpu="0" cpuset="1"/>' in wanted, wanted

    # tenant-a100 runs with vCPU 0 on CPU 15, the plan pins it to CPU 1.
    older = wanted.replace('<vcpupin vcpu="0" cpuset="1"/>', '<vcpupin vcpu="0" cpuset="15"/>')
    changed = _site(host, _running(older))
    domain = _result_after(changed, DEFINE_TASK, TENANT)
    assert domain["restart_required"] is True and "cputune/vcpupin 0" in domain["changed_elements"]
    report = _result_after(changed, EVALUATE_TASK)["ansible_facts"]["gpuhost_validation"]
    assert [(e["tenant"], e["stage"], e["changed"]) for e in report["restart_required"]] == \
        [(TENANT, "vm", domain["changed_elements"])]
    # The last summary of site.yml: the report's heading and its own section.
    markdown = _result_after(changed, SHOW_TASK)["msg"]
    assert markdown.splitlines()[0].startswith(
        "# Validation of hk-gpu-01: FAIL; 1 tenant(s) wait for a restart: %s (" % TENANT)
    assert "cputune/vcpupin 0" in markdown.splitlines()[0]
    section = markdown.split("## Tenants waiting for a restart\n", 1)[1]
    assert "| %s | vm | " % TENANT in section and "next start" in section
    # The written reports carry it as well.
    written = json.loads((host["base"] / "reports" / "hk-gpu-01" / "validate.json").read_text())
    assert written["restart_required"] == report["restart_required"]
    assert "restart_required" not in written["failed"]
    assert "## Tenants waiting for a restart" in \
        (host["base"] / "reports" / "hk-gpu-01" / "validate.md").read_text()

    # The next run finds it running as the role defines it: nothing waits.
    same = _site(host, _running(wanted))
    assert _result_after(same, DEFINE_TASK, TENANT)["restart_required"] is False
    assert _result_after(same, EVALUATE_TASK)["ansible_facts"]["gpuhost_validation"]["restart_required"] == []
    markdown = _result_after(same, SHOW_TASK)["msg"]
    assert markdown.splitlines()[0].endswith("; no running tenant waits for a restart")
    assert json.loads((host["base"] / "reports" / "hk-gpu-01" / "validate.json").read_text())[
        "restart_required"] == []
