"""Fleet scale: playbooks/fleet_capacity.yml on a generated inventory of 200 hosts
(tests/support/fleetsim.py: four synthetic host models, one ledger per host, local connection),
with a placement request. The real ansible-playbook runs every host's capacity_facts
module and the controller's fleet_report and fleet_place modules.

Its wall time against the host count, forks and strategy is measured by
bench/bench_fleet.py, not here."""

import json
import os

import pytest

from support import fleetsim
from support.helpers import REPO, ansible_env, run_tool

HOSTS = int(os.environ.get("GPUHOST_FLEET_SIM_HOSTS", "200"))
BROKEN = (fleetsim.host_name(1),)   # its ledger is corrupt
NEW_TENANT = {"name": "tenant-new", "gpus": 1, "vcpus": 8, "memory_gib": 16,
              "hugepage_size": "1G"}


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet")
    inventory, expected = fleetsim.build_fleet(str(base), HOSTS, broken=BROKEN)
    report_dir = base / "report"
    proc = run_tool(
        "ansible-playbook", "-i", inventory, "-f", "50",
        os.path.join(REPO, "playbooks", "fleet_capacity.yml"),
        "-e", "fleet_report_dir=%s" % report_dir,
        "-e", json.dumps({"fleet_place_tenant": NEW_TENANT}),
        env=ansible_env(ANSIBLE_STRATEGY="free"), check=False, timeout=1200)
    return proc, report_dir, expected


def test_playbook_completes_and_tolerates_the_broken_host(fleet_run):
    proc = fleet_run[0]
    # The broken ledger fails its facts task (ignored); nothing else fails.
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "failed=0" in proc.stdout


def test_report_lists_every_host_and_its_tenants(fleet_run):
    report_dir, expected = fleet_run[1:]
    report = json.loads((report_dir / "fleet-capacity.json").read_text())
    assert sorted(report["hosts"]) == sorted(expected)
    assert report["totals"]["hosts"] == HOSTS
    assert report["totals"]["hosts_without_data"] == len(BROKEN)
    for name, tenants in expected.items():
        entry = report["hosts"][name]
        if tenants == "error":
            assert "corrupt" in entry["error"]
            continue
        assert [t["name"] for t in entry["tenants"]] == tenants
    assert report["totals"]["tenants"] == sum(len(t) for t in expected.values()
                                              if t != "error")


def test_per_model_capacity_is_what_the_tenants_leave(fleet_run):
    report_dir, expected = fleet_run[1:]
    report = json.loads((report_dir / "fleet-capacity.json").read_text())
    gpus_per_model = {"runbook": 1, "eight_gpu": 8, "amd_nps4": 5, "dirty_usb": 2}
    for index in range(HOSTS):
        name = fleetsim.host_name(index)
        if name in BROKEN:
            continue
        totals = report["hosts"][name]["totals"]
        model = fleetsim.model_of(index)
        # Every simulated tenant holds one GPU; nothing else holds GPUs.
        assert totals["gpus_total"] == gpus_per_model[model]
        assert totals["gpus_free"] == gpus_per_model[model] - len(expected[name])


def test_markdown_and_svg_are_written(fleet_run):
    report_dir = fleet_run[1]
    markdown = (report_dir / "fleet-capacity.md").read_text()
    assert markdown.startswith("# Fleet capacity")
    assert "| %s | - | no data:" % BROKEN[0] in markdown
    svg = (report_dir / "fleet-capacity.svg").read_text()
    assert svg.count("<text x=\"5\"") == HOSTS + 2    # a label per host, title, legend


def test_placement_chooses_a_fitting_host_and_says_why(fleet_run):
    report_dir, expected = fleet_run[1:]
    choice = json.loads((report_dir / "fleet-placement.json").read_text())
    candidates = {c["host"]: c for c in choice["candidates"]}
    assert len(candidates) == HOSTS
    best = candidates[choice["host"]]
    assert best["fits"] and best["clean_iommu_group"] and best["hugepages_ready"]
    assert choice["why"].startswith("%s chosen for tenant-new" % choice["host"])
    assert not candidates[BROKEN[0]]["fits"]
    # Nothing fitting is ranked above the choice: same or worse on every criterion.
    fitting = [c for c in choice["candidates"] if c["fits"]]
    assert fitting[0]["host"] == choice["host"]
    assert all(c["cores_left_on_node"] >= best["cores_left_on_node"] for c in fitting
               if c["hugepages_ready"] and c["gpus_stranded"] == best["gpus_stranded"]
               and c["cores_partly_used"] == best["cores_partly_used"])


def localhost_changed(stdout):
    recap = stdout[stdout.index("PLAY RECAP"):]
    line = next(row for row in recap.splitlines() if row.startswith("localhost"))
    return int(line.split("changed=")[1].split()[0])


def test_report_check_mode_then_apply_then_nothing_to_change(tmp_path, module_python):
    inventory = fleetsim.build_fleet(str(tmp_path / "fleet"), 3)[0]
    report_dir = tmp_path / "report"

    def run(*extra):
        return run_tool("ansible-playbook", "-i", inventory,
                        os.path.join(REPO, "playbooks", "fleet_capacity.yml"),
                        "-e", "fleet_report_dir=%s" % report_dir, *extra).stdout

    assert localhost_changed(run("--check", "--diff")) == 1
    assert not report_dir.exists()                      # check mode wrote nothing
    assert localhost_changed(run()) == 1
    assert sorted(p.name for p in report_dir.iterdir()) == [
        "fleet-capacity.json", "fleet-capacity.md", "fleet-capacity.svg"]
    assert localhost_changed(run()) == 0                # no timestamp: nothing to rewrite
    assert localhost_changed(run("--check")) == 0
