"""The fleet playbooks on a small simulated fleet (tests/support/fleetsim.py: four host models
with their own ledgers, local connection) with the real ansible-playbook:

- tenant_onboard.yml without a host: every host plans the request, fleet_place chooses
  one, the choice is recorded, and the onboarding roles run on that host alone;
- site.yml rolling: gpuhost_serial / gpuhost_max_fail_percentage stop a roll at the
  first failed batch, and without them a failed host does not stop the others.

Check mode, so the recorded trees and ledgers stay as they are (the roles' real effects
are tested on the lab)."""

import json
import os
import re
import subprocess
import sys

import pytest

from support import fleetsim
from support.helpers import REPO, folded, run_tool

PLAYBOOK = os.path.join(REPO, "playbooks", "tenant_onboard.yml")
REQUEST = {"name": "tenant-new", "gpus": 1, "vcpus": 8, "memory_gib": 16,
           "hugepage_size": "1G", "ssh_authorized_keys": ["ssh-ed25519 AAAA sre@example"]}


def _recaps(stdout):
    return {m.group(1): dict(zip(("ok", "changed", "unreachable", "failed"),
                                 map(int, m.groups()[1:])))
            for m in re.finditer(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)"
                                 r"\s+failed=(\d+)", stdout, re.M)}


def _files_state(base):
    state = {}
    for directory, dirs, files in os.walk(os.path.join(base, "ledgers")):
        for name in files:
            path = os.path.join(directory, name)
            state[path] = os.stat(path).st_mtime_ns
    return state


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("onboard")
    inventory, expected = fleetsim.build_fleet(str(base), 4)
    image = str(base / "base.qcow2")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", image, "1G"], check=True)
    extra = {"gpuhost_state_dir": str(base / "state"),
             "gpuhost_libvirt_uri": "test:///default",
             "plan_output_dir": str(base / "reports"),
             "vm_base_image": image, "vm_image_dir": str(base / "images"),
             "vm_domain_type": "test",
             "onboard_report_dir": str(base / "onboard"),
             "ansible_python_interpreter": sys.executable}
    path = base / "extra.json"
    path.write_text(json.dumps(extra))
    return {"base": base, "inventory": inventory, "extra": "@%s" % path, "expected": expected}


def test_the_fleet_chooses_a_host_records_why_and_onboards_only_there(fleet, module_python):
    ledgers_before = _files_state(str(fleet["base"]))
    proc = run_tool("ansible-playbook", "-i", fleet["inventory"], PLAYBOOK, "--check",
                    "-e", fleet["extra"], "-e", json.dumps({"tenant_request": REQUEST}),
                    check=False, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]

    record = json.loads((fleet["base"] / "onboard" / "tenant-new-placement.json").read_text())
    chosen = record["host"]
    candidates = {c["host"]: c for c in record["candidates"]}
    assert sorted(candidates) == sorted(fleet["expected"])
    best = candidates[chosen]
    assert best["fits"] and best["clean_iommu_group"]
    assert record["why"].startswith("%s chosen for tenant-new" % chosen)
    # The YAML callback wraps long lines: compare with the whitespace folded.
    printed = folded(proc.stdout)
    assert folded(record["why"]) in printed
    # The dirty-group model never wins while a clean one fits.
    assert fleetsim.model_of(int(chosen.split("-")[1])) != "dirty_usb"

    # The onboarding roles ran on the chosen host and nowhere else.
    stages = re.findall(r"^TASK \[gpuhost\.kvm\.(\w+) :", proc.stdout, re.M)
    assert {"plan", "vfio", "numa", "sriov_irq", "vm"} <= set(stages)
    recaps = _recaps(proc.stdout)
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in recaps.values()), recaps
    assert recaps[chosen]["changed"] > 0
    planned_on = re.findall(r"ok: \[(\S+)\] => msg: - tenant tenant-new on NUMA node", printed)
    assert planned_on == [chosen], planned_on
    assert "Add to gpuhost_tenants in host_vars/%s" % chosen in printed
    for other in set(fleet["expected"]) - {chosen}:
        assert recaps[other]["changed"] == 0
    # Check mode reserved nothing: every ledger is as it was.
    assert _files_state(str(fleet["base"])) == ledgers_before


def test_a_request_that_fits_nowhere_fails_with_every_hosts_reason(fleet):
    too_big = dict(REQUEST, name="tenant-huge", gpus=9)
    # As an AWX survey textarea gives it: JSON text, not a dict.
    proc = run_tool("ansible-playbook", "-i", fleet["inventory"], PLAYBOOK, "--check",
                    "-e", fleet["extra"],
                    "-e", json.dumps({"tenant_request": json.dumps(too_big)}),
                    check=False, timeout=600)
    assert proc.returncode != 0
    printed = folded(proc.stdout)
    assert "tenant tenant-huge fits on no host:" in printed
    reasons = printed.split("fits on no host:", 1)[1]
    for host in fleet["expected"]:
        assert "%s: " % host in reasons
    assert "TASK [gpuhost.kvm.plan" not in proc.stdout
    assert not (fleet["base"] / "onboard" / "tenant-huge-placement.json").exists()


def test_naming_a_tenant_and_a_request_together_is_refused(fleet):
    proc = run_tool("ansible-playbook", "-i", fleet["inventory"], PLAYBOOK, "--check",
                    "-e", fleet["extra"], "-e", json.dumps({"tenant_request": REQUEST}),
                    "-e", "tenant=tenant-new", check=False, timeout=600)
    assert proc.returncode != 0
    assert "not both" in proc.stdout
    assert "TASK [gpuhost.kvm.plan" not in proc.stdout


def _site_plan_stage(tmp_path, *extra):
    """site.yml's plan stage (tag plan: the always-tagged plan role) on a 3-host fleet
    whose first host has a corrupt ledger; returns the recap per host."""
    inventory = fleetsim.build_fleet(str(tmp_path / "fleet"), 3,
                                     broken=(fleetsim.host_name(0),))[0]
    proc = run_tool("ansible-playbook", "-i", inventory, os.path.join(REPO, "site.yml"),
                    "--check", "--tags", "plan", "-e", "gpuhost_libvirt_uri=test:///default",
                    *extra, check=False, timeout=600)
    return proc, _recaps(proc.stdout)


def test_site_rolling_stops_at_the_first_failed_batch(tmp_path):
    proc, recaps = _site_plan_stage(tmp_path, "-e", "gpuhost_serial=1",
                                    "-e", "gpuhost_max_fail_percentage=0")
    assert proc.returncode != 0
    assert "corrupt" in proc.stdout
    assert recaps[fleetsim.host_name(0)]["failed"] == 1
    # The later batches never started.
    assert fleetsim.host_name(1) not in recaps and fleetsim.host_name(2) not in recaps
    assert "ok: [%s]" % fleetsim.host_name(1) not in proc.stdout


def test_site_without_rolling_lets_the_other_hosts_finish(tmp_path):
    proc, recaps = _site_plan_stage(tmp_path)
    assert proc.returncode != 0
    assert recaps[fleetsim.host_name(0)]["failed"] == 1
    for index in (1, 2):
        assert recaps[fleetsim.host_name(index)]["failed"] == 0
        assert recaps[fleetsim.host_name(index)]["ok"] > 0
