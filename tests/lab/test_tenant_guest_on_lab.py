# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The molecule scenario molecule/tenant_guest on the running lab, the lab acting as a
tenant's guest: the guest role installs Docker from Debian's archive, loads the server
image from an archive built on this machine (lab/tenant-image/build, no registry), runs
it under systemd bound to NUMA cell 1, and verify runs the benchmark role through port
8000 with its gate passing, then failing on purpose. The whole sequence (syntax, create,
prepare, check, converge, idempotence, verify, destroy) runs with the real molecule.

Marker "acceptance": tools/acceptance runs it after the site proofs of
test_site_on_lab.py and before the ones that start from a first boot again (order in
tests/lab/conftest.py): it leaves Docker and the server running in the lab, which no
earlier test expects."""

import json
import os
import re
import subprocess

import pytest

from conftest import REPO, RUN_DIR, VENV_BIN, molecule_steps_in_order, run_molecule

SCENARIO_STEPS = ["syntax", "create", "prepare", "check", "converge", "idempotence",
                  "verify", "destroy"]


@pytest.mark.acceptance
def test_tenant_guest_scenario_serves_and_gates_the_tenant(lab, tmp_path):
    reports = tmp_path / "reports"
    env = lab.ansible_env(GPUHOST_LAB_KEEP="1", GPUHOST_LAB_RUN=RUN_DIR, GPUHOST_TENANT_REPORT_DIR=str(reports),
                          MOLECULE_NO_LOG="false", NO_COLOR="1")
    # A lab kept from an earlier run has the image and the unit: take them away, so that
    # the converge below always loads the archive.
    lab.ssh("if command -v docker >/dev/null; then systemctl disable --now gpuhost-triton.service || true;"
            " docker rm --force gpuhost-triton || true; docker image prune --all --force; fi", timeout=600)
    # A guest image built minutes ago, as a cold CI run builds the lab's: no package lists
    # (the build cleaned them) in a lists directory written minutes ago, which the apt
    # module takes for a fresh cache. The guest role must update anyway (a cached lab image
    # hours old hid this until CI, 2026-11-30).
    lab.ssh("rm -f /var/lib/apt/periodic/update-success-stamp; find /var/lib/apt/lists -maxdepth 1 -type f"
            " -name '*_Packages*' -delete; touch /var/lib/apt/lists", timeout=120)
    # A run killed before its destroy leaves molecule's state saying "created": its next
    # create would be skipped, keeping a stale SSH port. Start from no state.
    subprocess.run([os.path.join(VENV_BIN, "molecule"), "reset", "-s", "tenant_guest"], cwd=REPO, env=env,
                   capture_output=True, text=True, timeout=300, check=True, stdin=subprocess.DEVNULL)
    output = run_molecule("tenant_guest", "test", env, timeout=2700)
    positions = molecule_steps_in_order(output, "tenant_guest", SCENARIO_STEPS)

    # The NVIDIA steps were skipped out loud: in check mode, then for want of a GPU.
    assert "SKIPPING the NVIDIA driver, CUDA and nvidia-container-toolkit steps on tenant guest tenant-lab: check mode" \
        in output
    assert "SKIPPING the NVIDIA driver, CUDA and nvidia-container-toolkit steps on tenant guest tenant-lab: " \
        "no NVIDIA GPU is visible" in output

    # The image came from the archive: loaded by the converge, found by the idempotence run.
    def step_output(step):
        index = SCENARIO_STEPS.index(step)
        return output[positions[index - 1]:positions[index]]

    load_task = r"TASK \[gpuhost\.kvm\.guest : Load the image archive\] \*+\n%s: \[tenant-lab\]"
    assert re.search(load_task % "changed", step_output("converge")), step_output("converge")[-5000:]
    assert re.search(load_task % "skipping", step_output("idempotence"))

    # The reports on the controller: the last run is the one whose gate was set below the
    # P95 of the run before it, and it says so and compares itself with that run.
    tenant_dir = reports / "tenant-lab" / "tenant-lab"
    for ext in ("json", "md", "svg"):
        assert (tenant_dir / ("benchmark." + ext)).is_file(), ext
    report = json.loads((tenant_dir / "benchmark.json").read_text())
    assert report["tenant"] == "tenant-lab" and report["runner"] == "builtin"
    assert not report["gate"]["passed"]
    assert any("P95 latency" in failure for failure in report["gate"]["failures"])
    assert report["comparison"]["previous_passed"] is True
    assert report["result"]["requests_succeeded"] > 0 and report["result"]["requests_failed"] == 0
    # The lab's guest has no NVIDIA GPU, so no nvidia-smi: the GPU health after the load is
    # reported as not read, and gates nothing (the P95 failure above is the only one).
    assert report["gpu_health"]["read"] is False and "nvidia-smi" in report["gpu_health"]["error"]
    assert not [c for c in report["gate"]["checks"] if c["option"].startswith("benchmark_gpu_")]
    assert "## Compared with the previous run" in (tenant_dir / "benchmark.md").read_text()

    # The harness's own look at the lab, apart from the scenario's verify: the server runs
    # in its container on node 1's CPUs and memory.
    pid = lab.ssh("docker inspect --format '{{.State.Pid}}' gpuhost-triton").stdout.strip()
    status = dict(line.split(":\t", 1) for line in lab.read("/proc/%s/status" % pid).splitlines() if ":\t" in line)
    assert status["Cpus_allowed_list"].strip() == lab.read("/sys/devices/system/node/node1/cpulist").strip()
    assert status["Mems_allowed_list"].strip() == "1"
