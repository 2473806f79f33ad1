"""The playbooks for real: syntax of every playbook, plan.yml against the synthetic
runbook host (ansible_connection=local, gpuhost_sysfs_root at the fixture tree), and a
check-mode run of site.yml against the example inventory's hk-gpu-01 on that tree.
Nothing here needs the host's real /sys: every read goes below the fixture root, the
ledger lives in the test's directory, and libvirt is its in-process test driver."""

import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from support import fixturegen
from support.helpers import INVENTORY, REPO, point_hk_gpu_01_at, run_tool

PLAYBOOKS = ["site.yml"] + sorted(os.path.relpath(p, REPO) for p in
                                  glob.glob(os.path.join(REPO, "playbooks", "*.yml")))


@pytest.fixture(scope="module")
def runbook_host(tmp_path_factory):
    """The synthetic runbook host and the extra vars that point hk-gpu-01 at it."""
    return point_hk_gpu_01_at(tmp_path_factory.mktemp("runbook"))


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_syntax_check(playbook):
    proc = run_tool("ansible-playbook", "--syntax-check", "-i", INVENTORY, playbook)
    assert "playbook: %s" % playbook in proc.stdout


# A ceiling on the lab host's task list: each task costs seconds under TCG, so a
# new one has to replace another (or be a dynamic include, listed once).
SITE_TASKS_AT_MOST = 75


def test_site_lists_at_most_75_tasks_for_the_lab_host():
    listed = run_tool("ansible-playbook", "site.yml", "--list-tasks", "-i",
                      os.path.join(REPO, "inventories", "lab", "hosts.yml"), "-l", "hk-gpu-01").stdout
    tasks = [line.strip() for line in listed.splitlines()
             if "TAGS: [" in line and not line.lstrip().startswith("play #")]
    assert "gpuhost.kvm.vm : Define the tenant domains from the plan, pinned and hugepage-backed" in \
        "\n".join(tasks), listed
    assert len(tasks) <= SITE_TASKS_AT_MOST, "\n".join(tasks)


def _recap(stdout, host="hk-gpu-01"):
    match = re.search(r"^%s\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)"
                      % re.escape(host), stdout, re.M)
    assert match, stdout[-3000:]
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, match.groups())))


def test_plan_playbook_writes_tables_and_picture_without_touching_the_ledger(runbook_host):
    proc = run_tool("ansible-playbook", "playbooks/plan.yml", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", runbook_host["extra"])
    assert _recap(proc.stdout)["failed"] == 0
    out = runbook_host["base"] / "reports" / "hk-gpu-01"
    markdown = (out / "plan.md").read_text()
    assert "# Placement plan of hk-gpu-01" in markdown
    assert "| GPU | 0000:65:00.0 | tenant-a100 |" in markdown
    assert "| 0 | 0,32 | housekeeping |" in markdown
    tree = ET.fromstring((out / "plan.svg").read_text())
    assert [g.get("id") for g in tree.iter("{http://www.w3.org/2000/svg}g")] == ["node0", "node1"]
    assert (out / "plan.html").read_text().startswith("<!DOCTYPE html>")
    # plan.yml is read-only: no ledger, no lock file.
    assert not os.path.exists(os.path.dirname(runbook_host["vars"]["gpuhost_ledger_path"]))


def _tree_state(root):
    """Every path below root with its mtime, without following sysfs's symlink loops."""
    state = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            state[path] = os.lstat(path).st_mtime_ns
    return state


def test_site_check_mode_on_the_runbook_host_completes_without_failures(runbook_host, module_python):
    before = _tree_state(runbook_host["root"])
    proc = run_tool("ansible-playbook", "site.yml", "--check", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", runbook_host["extra"], timeout=900)
    recap = _recap(proc.stdout)
    assert recap["failed"] == 0 and recap["unreachable"] == 0
    assert recap["changed"] > 0            # a fresh host has work to do
    # Every stage ran, in the runbook's order.
    # The plan role's stage include starts every stage role; its tasks belong to that role.
    with open(os.path.join(REPO, "roles", "plan", "tasks", "stage.yml"), encoding="utf-8") as handle:
        stage_tasks = set(re.findall(r"^- name: (.+)$", handle.read(), re.M))
    stages = [role for role, task in re.findall(r"^TASK \[gpuhost\.kvm\.(\w+) : (.+?)\] \**$", proc.stdout, re.M)
              if not (role == "plan" and task in stage_tasks)]
    order = [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s]
    assert order == ["plan", "bios", "iommu", "vfio", "numa", "sriov_irq", "vm", "guest",
                     "benchmark", "validate"], order
    # The guest stage says why it skipped the NVIDIA steps; the benchmark stage says it
    # sent no load in check mode. Neither is silent.
    assert "SKIPPING the NVIDIA driver" in proc.stdout
    assert "check mode: no benchmark ran on tenant tenant-a100" in proc.stdout
    # Check mode wrote nothing: no ledger, no state, the fixture tree untouched.
    assert not os.path.exists(os.path.dirname(runbook_host["vars"]["gpuhost_ledger_path"]))
    assert not os.path.exists(runbook_host["vars"]["gpuhost_state_dir"])
    assert _tree_state(runbook_host["root"]) == before


def test_tenant_ledger_module_reserves_then_is_idempotent(runbook_host, tmp_path):
    args = json.dumps({"path": str(tmp_path / "ledger.json"), "root": runbook_host["root"],
                       "tenants": [{"name": "t1", "gpus": 1, "vcpus": 4, "memory_gib": 4,
                                    "hugepage_size": "2M", "ssh_authorized_keys": ["k"]}]})
    results = []
    for check in (True, False, False):
        argv = ["localhost", "-c", "local", "-m", "gpuhost.kvm.tenant_ledger", "-a", args,
                "-e", "ansible_python_interpreter=%s" % sys.executable]
        proc = run_tool("ansible", *(argv + (["--check"] if check else [])))
        results.append("CHANGED" in proc.stdout.split("\n")[0])
    assert results == [True, True, False]
    data = json.loads((tmp_path / "ledger.json").read_text())
    assert data["serial"] == 1 and data["body"]["tenants"][0]["name"] == "t1"


def test_ansible_doc_renders_tenant_ledger():
    proc = run_tool("ansible-doc", "gpuhost.kvm.tenant_ledger")
    assert "allocation ledger" in proc.stdout and "EXAMPLES" in proc.stdout


def test_site_check_mode_before_the_vfs_exist_reports_instead_of_failing(tmp_path):
    # A fresh host: the PF offers 8 VFs but none is created yet, so the tenant's VF is
    # planned at its future address. Check mode creates no VF and reserves no hugepages,
    # so every stage runs: sriov_irq leaves the VF it would create out of the IRQ pins,
    # the vm stage reports the domain it cannot preflight yet, and validate's report
    # names the function it could not check instead of the task failing.
    host = point_hk_gpu_01_at(tmp_path, devices=(
        fixturegen.gpu(fixturegen.RUNBOOK_GPU, 0)
        + fixturegen.sriov_pf(fixturegen.RUNBOOK_PF, 0, vfs=0, totalvfs=8)
        + fixturegen.endpoint("0000:b1:00.0", 1, 0x010802, 0x144D, 0xA80A, "nvme",
                              msi=["nvme0q%d" % q for q in range(4)])))
    proc = run_tool("ansible-playbook", "site.yml", "--check", "-i", INVENTORY, "-l",
                    "hk-gpu-01", "-e", host["extra"], check=False, timeout=900)
    recap = _recap(proc.stdout)
    assert recap["failed"] == 0, proc.stdout[-6000:]
    printed = " ".join(proc.stdout.split())
    assert "Check mode: tenant-a100 is not defined yet:" in printed
    assert "PCI function 0000:41:00.2 does not exist on this host" in printed
    assert "the sriov_irq stage creates the VF first" in printed
    assert ("not checked, the functions do not exist: 0000:41:00.2 (run the sriov_irq "
            "stage)") in printed


def _plan_with(host, path, extra_vars):
    """playbooks/plan.yml for hk-gpu-01 with ``extra_vars`` (written to ``path``, which
    later runs take too); returns the path and the plan's Markdown page."""
    path.write_text(json.dumps(extra_vars))
    proc = run_tool("ansible-playbook", "playbooks/plan.yml", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", host["extra"], "-e", "@%s" % path)
    assert _recap(proc.stdout)["failed"] == 0, proc.stdout[-3000:]
    return path, (host["base"] / "reports" / "hk-gpu-01" / "plan.md").read_text()


def _on_vfio_pci(root, functions):
    """Put the fake's functions on vfio-pci, as the vfio stage leaves them on a live host
    (the HGX fake's start on nvidia and nvidia-nvswitch)."""
    vfio = os.path.join(root, "sys/bus/pci/drivers/vfio-pci")
    os.makedirs(vfio, exist_ok=True)
    for function in functions:
        device = os.path.realpath(os.path.join(root, "sys/bus/pci/devices", function))
        os.remove(os.path.join(device, "driver"))
        os.symlink(os.path.relpath(vfio, device), os.path.join(device, "driver"))


def test_shared_nvswitch_model_plans_a_partition_and_the_vm_stage_activates_it_with_stubbed_fmpm(tmp_path):
    """An HGX H100 fake (published NVSwitch IDs) in NVIDIA's shared-NVSwitch model, Fabric
    Manager's partition tool STUBBED (tests/support/fakes.py): plan.yml places a two-GPU
    tenant on the GPUs of one partition, and site.yml's vm stage activates that partition
    before it defines and starts the domain (libvirt's test driver)."""
    from support.fakes import HGX_PARTITION_SETS, active_partitions, stub_fmpm
    host = point_hk_gpu_01_at(tmp_path, build=fixturegen.build_hgx_h100_host,
                              hugepages={2048: (8192, 8192, 0), 1048576: (0, 0, 0)})
    fmpm, state = stub_fmpm(tmp_path)
    os.makedirs(host["vars"]["vm_image_dir"])
    shared, markdown = _plan_with(host, tmp_path / "shared.json", {
        "gpuhost_nvswitch_model": "shared", "gpuhost_fabric_manager_fmpm": fmpm,
        "gpuhost_tenants": [{"name": "pair", "gpus": 2, "vcpus": 8, "memory_gib": 8,
                             "hugepage_size": "2M", "iothreads": 0}]})
    placed = sorted(re.findall(r"\| GPU \| (\S+) \| pair \|", markdown))
    assert placed in [sorted(s) for s in HGX_PARTITION_SETS if len(s) == 2], markdown
    assert active_partitions(state) == []          # planning activates nothing

    proc = run_tool("ansible-playbook", "site.yml", "--tags", "vm", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", host["extra"], "-e", "@%s" % shared, timeout=900)
    assert _recap(proc.stdout)["failed"] == 0, proc.stdout[-3000:]
    ledger = json.loads(open(host["vars"]["gpuhost_ledger_path"]).read())["body"]["tenants"][0]
    assert [g["address"] for g in ledger["gpus"]] == placed
    assert active_partitions(state) == [ledger["fabric_partition"]]
    assert "Activate each tenant's NVLink partition" in proc.stdout

    # Offboarding: the domain goes, then the partition is deactivated (stubbed fmpm),
    # then the scrub and the release.
    _on_vfio_pci(host["root"], placed)
    proc = run_tool("ansible-playbook", "playbooks/tenant_offboard.yml", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", host["extra"], "-e", "@%s" % shared, "-e", "tenant=pair", timeout=900)
    assert _recap(proc.stdout)["failed"] == 0, proc.stdout[-3000:]
    assert active_partitions(state) == []
    calls = json.loads(state.read_text())["calls"]
    assert calls.index(["-d", str(ledger["fabric_partition"])]) > calls.index(["-a", str(ledger["fabric_partition"])])


def test_full_nvswitch_model_gives_one_tenant_the_board_and_the_vm_stage_defines_its_cells(tmp_path):
    """An HGX H100 fake (published NVSwitch IDs) in NVIDIA's full-passthrough model: plan.yml
    gives one tenant all eight GPUs and the four NVSwitches, one guest cell per node, and
    site.yml's vm stage defines and starts its domain (libvirt's test driver, the domain
    preflight on the fake's topology). No board, no Fabric Manager runs here; a tenant
    asking for part of the board is refused with the fix."""
    host = point_hk_gpu_01_at(tmp_path, build=fixturegen.build_hgx_h100_host,
                              hugepages={2048: (8192, 8192, 0), 1048576: (0, 0, 0)})
    os.makedirs(host["vars"]["vm_image_dir"])
    full, markdown = _plan_with(host, tmp_path / "full.json", {
        "gpuhost_nvswitch_model": "full",
        "gpuhost_tenants": [{"name": "board", "gpus": 8, "vcpus": 16, "memory_gib": 16,
                             "hugepage_size": "2M", "iothreads": 0}]})
    assert len(re.findall(r"\| GPU \| \S+ \| board \|", markdown)) == 8, markdown
    assert len(re.findall(r"\| NVSwitch \| \S+ \| board \|", markdown)) == 4, markdown

    proc = run_tool("ansible-playbook", "site.yml", "--tags", "vm", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", host["extra"], "-e", "@%s" % full, "-v", timeout=900)
    assert _recap(proc.stdout)["failed"] == 0, proc.stdout[-3000:]
    assert "changed: [hk-gpu-01] => (item=board)" in proc.stdout
    # the defined domain's XML, as the module returns it: a cell and a memnode per node
    assert "<cell id='1' cpus='8-15' memory='8388608' unit='KiB'/>" in proc.stdout, proc.stdout[-3000:]
    assert "<memnode cellid='1' mode='strict' nodeset='1'/>" in proc.stdout
    tenant = json.loads(open(host["vars"]["gpuhost_ledger_path"]).read())["body"]["tenants"][0]
    assert [c["gpus"] for c in tenant["guest_cells"]] == [
        ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"],
        ["0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]]
    assert [s["address"] for s in tenant["nvswitches"]] == ["0000:0b:00.0", "0000:0c:00.0", "0000:8b:00.0",
                                                            "0000:8c:00.0"]

    # Offboarding frees the whole board: the scrub resets the GPUs and the ledger lets the
    # NVSwitches go too.
    _on_vfio_pci(host["root"], [g["address"] for g in tenant["gpus"]] + [s["address"] for s in tenant["nvswitches"]])
    proc = run_tool("ansible-playbook", "playbooks/tenant_offboard.yml", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", host["extra"], "-e", "@%s" % full, "-e", "tenant=board", timeout=900)
    assert _recap(proc.stdout)["failed"] == 0, proc.stdout[-3000:]
    assert json.loads(open(host["vars"]["gpuhost_ledger_path"]).read())["body"]["tenants"] == []

    part = tmp_path / "part.json"
    part.write_text(json.dumps({"gpuhost_nvswitch_model": "full", "gpuhost_tenants": [
        {"name": "pair", "gpus": 2, "vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"}]}))
    proc = run_tool("ansible-playbook", "playbooks/plan.yml", "-i", INVENTORY, "-l", "hk-gpu-01",
                    "-e", host["extra"], "-e", "@%s" % part, "-e",
                    "gpuhost_ledger_path=%s" % (tmp_path / "other-ledger.json"), check=False)
    assert _recap(proc.stdout)["failed"] == 1
    assert "one tenant gets the whole board" in " ".join(proc.stdout.split())
