# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CHECK-ONLY tests of the guest role's NVIDIA data: its per-OS vars and the Triton unit
template, rendered here with Jinja. No NVIDIA GPU, no RHEL and no docker run on this
machine, so the driver, toolkit and GPU container steps are checked as data and text,
not executed (the role itself runs in check mode in tests/integration)."""

from __future__ import annotations

import json
import os
import re

import jinja2
import pytest
import yaml

from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible.plugins.test.core import TestModule as CoreTests
from support import REPO, TESTS

ROLE = os.path.join(REPO, "roles", "guest")


def load(path):
    with open(os.path.join(ROLE, path)) as handle:
        return yaml.safe_load(handle)


def render_unit(runtime, gpu, os_family="Debian", cpus="0-15", node=0):
    variables = dict(load("defaults/main.yml"))
    variables.update(load("vars/%s.yml" % os_family))
    variables.update({
        "guest_container_runtime": runtime, "guest_numa_node": node, "__guest_cpus": cpus, "__guest_gpu": gpu,
        "__guest_container": "gpuhost-triton", "__guest_image": "nvcr.io/nvidia/tritonserver:24.07-py3",
        "__guest_gpu_args": load("vars/main.yml")["__guest_gpu_args"],
    })
    variables["__guest_runtime_bin"] = variables["__guest_runtime"][runtime]["bin"]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")),
                             trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(CoreFilters().filters())  # Ansible's own bool, quote, ...
    return env.get_template("gpuhost-triton.service.j2").render(**variables)


def test_mocked_docker_unit_with_gpu_is_bound_to_the_cell():
    unit = render_unit("docker", True, cpus="0-15", node=0)
    assert "ExecStart=/usr/bin/numactl --cpunodebind=0 --membind=0" in unit
    assert "--cpuset-cpus=0-15 --cpuset-mems=0" in unit
    assert "--gpus all" in unit
    assert "-p 8000:8000 -p 8001:8001 -p 8002:8002" in unit
    assert "-v /models:/models" in unit
    assert "Requires=docker.service" in unit
    assert "nvcr.io/nvidia/tritonserver:24.07-py3 tritonserver --model-repository=/models" in unit


def test_mocked_podman_unit_uses_cdi_and_no_daemon():
    unit = render_unit("podman", True, os_family="RedHat", cpus="0-7", node=1)
    assert "--device nvidia.com/gpu=all" in unit and "--gpus" not in unit
    assert "--cpunodebind=1 --membind=1" in unit and "--cpuset-mems=1" in unit
    assert "Requires=" not in unit and "/usr/bin/podman run" in unit


def test_unit_without_gpu_has_no_gpu_flag():
    unit = render_unit("docker", False)
    assert "--gpus" not in unit and "nvidia.com/gpu" not in unit


def test_check_only_rhel9_driver_and_runtime_vars():
    rhel = load("vars/RedHat.yml")
    assert rhel["__guest_driver_packages"] == ["@nvidia-driver:{{ guest_nvidia_driver_stream }}"]
    assert "compute/cuda/repos/rhel" in rhel["__guest_cuda_repo_url"]
    # RHEL's own "docker" package is podman-docker: docker means Docker CE here.
    assert rhel["__guest_runtime"]["docker"]["packages"] == ["docker-ce", "docker-ce-cli", "containerd.io"]
    assert rhel["__guest_runtime"]["podman"]["service"] == ""
    assert "numactl" in rhel["__guest_base_packages"]


def test_check_only_debian12_driver_vars():
    debian = load("vars/Debian.yml")
    assert "nvidia-driver" in debian["__guest_driver_packages"]
    # The components go onto the guest's own sources: no archive address in the role.
    assert "debian.org" not in json.dumps(debian)
    deb822, one_line = debian["__guest_nonfree_sources"]
    assert deb822["path"] == "/etc/apt/sources.list.d/debian.sources"
    enabled = "Components: main contrib non-free non-free-firmware"
    for line in ("Components: main", "Components: main non-free-firmware", "Components:\tmain "):
        assert re.sub(deb822["regexp"], deb822["replace"], line, flags=re.M) == enabled, line
    # Already enabled, or another component list: left alone (a second run changes nothing).
    for line in (enabled, "Components: main contrib"):
        assert re.sub(deb822["regexp"], deb822["replace"], line, flags=re.M) == line
    for before, after in (
            ("deb http://mirror.example/archive bookworm main",
             "deb http://mirror.example/archive bookworm main contrib non-free non-free-firmware"),
            ("deb [signed-by=/k.gpg] http://m.example/d bookworm-updates main non-free-firmware",
             "deb [signed-by=/k.gpg] http://m.example/d bookworm-updates main contrib non-free non-free-firmware"),
            ("deb-src http://mirror.example/archive bookworm main",
             "deb-src http://mirror.example/archive bookworm main")):
        # ansible.builtin.replace's \1 is Python's, as in re.sub
        assert re.sub(one_line["regexp"], one_line["replace"], before, flags=re.M) == after, before
    assert debian["__guest_runtime"]["docker"]["packages"] == ["apparmor", "docker.io"]


def test_ngc_key_is_no_log():
    triton = load("tasks/triton.yml")
    login = [t for t in triton if "nvcr.io" in t["name"]][0]
    assert login["no_log"] is True and login["ansible.builtin.command"]["stdin"] == "{{ guest_ngc_api_key }}"
    spec = load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert spec["guest_ngc_api_key"]["no_log"] is True


# Pinned versions: the install requests, the held packages and the lock command, rendered
# from the role's own expressions (tasks/main.yml's include vars, the task files) with
# Ansible's filters. CHECK-ONLY: no apt/dpkg or dnf change runs on this machine.

def render_native(expression, variables):
    from jinja2.nativetypes import NativeEnvironment
    env = NativeEnvironment(undefined=jinja2.StrictUndefined)
    # Ansible's own default filter expects Ansible's undefined values; Jinja's takes Jinja's.
    env.filters.update(dict((name, f) for name, f in CoreFilters().filters().items() if name not in ("default", "d")))
    env.tests.update(CoreTests().tests())
    return env.from_string(expression).render(**variables)


def tasks(path):
    """The task file's tasks, those of its blocks included (tasks/main.yml is one block,
    whose vars hold the role's derived names)."""
    return flatten(load(path))


def flatten(entries):
    for entry in entries:
        yield from (flatten(entry["block"]) if "block" in entry else [entry])


def task(path, name):
    return [t for t in tasks(path) if t.get("name") == name][0]


def pin_variables(os_family, method="repo", driver="", toolkit=""):
    variables = dict(load("defaults/main.yml"))
    variables.update(load("vars/%s.yml" % os_family))
    variables.update(guest_nvidia_driver_method=method, guest_nvidia_driver_version=driver,
                     guest_nvidia_container_toolkit_version=toolkit, guest_nvidia_driver_stream="550",
                     __guest_nvswitches=0)
    # Ansible templates a variable's value when it is used; the lists of packages hold
    # templates (the RHEL stream) that are resolved here the same way.
    for name in ("__guest_driver_packages",):
        variables[name] = [render_native(item, variables) if "{{" in item else item for item in variables[name]]
    driver_include = task("tasks/main.yml", "Install the NVIDIA driver")["vars"]
    toolkit_include = task("tasks/main.yml", "Install the NVIDIA container toolkit")["vars"]
    for name, expression in list(driver_include.items()) + list(toolkit_include.items()):
        variables[name] = render_native(expression, variables)
    return variables


def test_check_only_debian12_pinned_driver_and_toolkit_render():
    variables = pin_variables("Debian", driver="535.216.01-1~deb12u1", toolkit="1.17.3-1")
    install = task("tasks/driver_repo_Debian.yml", "Install nvidia-driver from non-free")["ansible.builtin.apt"]
    assert render_native(install["name"], variables) == [
        "nvidia-driver=535.216.01-1~deb12u1", "nvidia-persistenced", "firmware-misc-nonfree"]
    assert variables["__guest_ctk_install"] == ["nvidia-container-toolkit=1.17.3-1",
                                                "nvidia-container-toolkit-base=1.17.3-1"]
    hold = task("tasks/toolkit_Debian.yml", "Hold the NVIDIA driver and container toolkit at their installed versions")
    assert hold["ansible.builtin.dpkg_selections"] == {"name": "{{ item }}", "selection": "hold"}
    assert render_native(hold["loop"], variables) == [
        "nvidia-driver", "nvidia-kernel-dkms", "nvidia-container-toolkit", "nvidia-container-toolkit-base"]
    ctk = task("tasks/toolkit_Debian.yml", "Install nvidia-container-toolkit")["ansible.builtin.apt"]
    assert render_native(ctk["name"], variables) == variables["__guest_ctk_install"]


def test_check_only_debian12_unpinned_installs_current_and_still_holds():
    variables = pin_variables("Debian")
    install = task("tasks/driver_repo_Debian.yml", "Install nvidia-driver from non-free")["ansible.builtin.apt"]
    assert render_native(install["name"], variables) == ["nvidia-driver", "nvidia-persistenced", "firmware-misc-nonfree"]
    assert variables["__guest_ctk_install"] == ["nvidia-container-toolkit", "nvidia-container-toolkit-base"]
    assert "nvidia-driver" in variables["__guest_nvidia_held_packages"]


def test_check_only_rhel9_versionlock_render():
    variables = pin_variables("RedHat", driver="550.90.07", toolkit="1.17.3")
    install = task("tasks/driver_repo_RedHat.yml", "Install the NVIDIA driver module stream")["ansible.builtin.dnf"]
    assert render_native(install["name"], variables) == ["@nvidia-driver:550", "nvidia-driver-550.90.07"]
    ctk = task("tasks/toolkit_RedHat.yml", "Install nvidia-container-toolkit and dnf's versionlock plugin")
    assert render_native(ctk["ansible.builtin.dnf"]["name"], variables) == [
        "nvidia-container-toolkit-1.17.3", "nvidia-container-toolkit-base-1.17.3", "python3-dnf-plugin-versionlock"]
    lock = task("tasks/toolkit_RedHat.yml", "Lock the NVIDIA driver and container toolkit at their installed versions")
    assert render_native(lock["ansible.builtin.command"]["argv"], variables) == [
        "dnf", "versionlock", "add", "--", "nvidia-driver", "nvidia-driver-libs", "nvidia-persistenced",
        "nvidia-container-toolkit", "nvidia-container-toolkit-base"]
    # "dnf versionlock add" prints this line for each package it locks, nothing for one already locked.
    assert "Adding versionlock on" in lock["changed_when"]


def test_check_only_rhel9_runfile_driver_is_not_locked():
    variables = pin_variables("RedHat", method="runfile")
    assert variables["__guest_nvidia_held_packages"] == ["nvidia-container-toolkit", "nvidia-container-toolkit-base"]


def test_check_only_persistenced_enabled_with_the_repo_driver_and_gated():
    service = task("tasks/main.yml", "Enable nvidia-persistenced")
    assert service["ansible.builtin.systemd_service"] == {
        "name": "nvidia-persistenced.service", "enabled": True, "state": "started"}
    assert "guest_nvidia_driver_method == 'repo'" in service["when"]
    defaults = load("defaults/main.yml")
    for method, expected in (("repo", True), ("runfile", False)):
        assert render_native(defaults["guest_gpu_persistence_must_be_on"],
                             {"guest_nvidia_driver_method": method}) is expected
    # The health read comes after the service, so that persistence mode is on when read.
    names = [t["name"] for t in tasks("tasks/main.yml")]
    assert names.index("Enable nvidia-persistenced") < names.index("Read the GPU health and hold it to the limits")


def test_mocked_gpu_health_result_renders_into_gpuhost_guest_results_for_validate():
    """The publish task's expression, rendered with what gpu_health returns for a
    published T4 report (no GPU here), is what validate's gpu_health check reads."""
    from ansible_collections.gpuhost.kvm.plugins.module_utils.guest import gpu_health
    from ansible_collections.gpuhost.kvm.plugins.plugin_utils import validation
    with open(os.path.join(TESTS, "fixtures", "published",
                           "nvidia_smi_q_x_tesla_t4_passthrough_515_105_01.xml")) as handle:
        health = gpu_health.parse_nvidia_smi_xml(handle.read())
    findings = gpu_health.health_findings(health, max_temperature_c=85, max_uncorrected_ecc=0,
                                          persistence_must_be_on=True)
    summary = gpu_health.health_summary(health, findings)
    module_result = {"changed": False, "health": health, "findings": findings, "passed": summary["passed"],
                     "failures": summary["failures"]}
    publish = task("tasks/main.yml", "Publish the guest's GPU health, for the validate stage")
    expression = publish["ansible.builtin.set_fact"]["gpuhost_guest_results"]
    results = render_native(expression, {"__guest_name": "tenant-t4", "__guest_nvidia_active": True,
                                         "__guest_gpu_health": module_result, "ansible_check_mode": False,
                                         "gpuhost_guest_results": {}})
    tenant = results["tenant-t4"]
    # Persistence mode is Disabled in that report: the one failure, named.
    assert tenant["passed"] is False and "persistence mode off" in tenant["detail"]
    assert tenant["health"]["driver_version"] == "515.105.01" and len(tenant["health"]["findings"]) == 5
    check = validation.check_gpu_health(results)
    assert check["status"] == "fail" and "tenant-t4 (guest stage)" in check["detail"]
    skipped = render_native(expression, {"__guest_name": "tenant-lab", "__guest_nvidia_active": False,
                                         "__guest_gpu_health": {"skipped": True}, "ansible_check_mode": False,
                                         "gpuhost_guest_results": {}})
    assert skipped["tenant-lab"] == {"passed": False, "detail": "NVIDIA steps skipped: no NVIDIA GPU visible",
                                     "health": None}


# Full NVSwitch passthrough: a guest that sees NVSwitches gets Fabric Manager at the
# driver's exact version. CHECK-ONLY and MOCKED: the driver version is what gpu_health
# would report; no package manager, NVSwitch or Fabric Manager runs here.

def fabric_manager_variables(os_family, driver_version="550.90.07", pci=None):
    variables = pin_variables(os_family)
    variables.update(load("vars/main.yml"), __guest_gpu_health={"health": {"driver_version": driver_version}})
    block = load("tasks/main.yml")[0]["vars"]
    variables["__guest_fm_package"] = render_native(block["__guest_fm_package"], variables)
    decide = task("tasks/main.yml", "Decide whether the NVIDIA steps run")
    pci = pci or {"0000:01:00.0": {"vendor": "10de", "class": "0x030200"},
                  "0000:05:00.0": {"vendor": "10de", "class": "0x068000"},
                  "0000:06:00.0": {"vendor": "8086", "class": "0x068000"}}
    variables["__guest_nvidia_functions"] = render_native(
        decide["vars"]["__guest_nvidia_functions"], dict(variables, __guest_pci={"ansible_facts": {"gpuhost_host": {"pci": pci}}}))
    variables["__guest_nvswitches"] = render_native(decide["ansible.builtin.set_fact"]["__guest_nvswitches"], variables)
    return variables


@pytest.mark.parametrize("os_family, wanted", [("Debian", "nvidia-fabricmanager-550=550.90.07*"),
                                               ("RedHat", "nvidia-fabricmanager-550-550.90.07")])
def test_mocked_nvswitch_guest_installs_fabric_manager_at_the_driver_version(os_family, wanted):
    variables = fabric_manager_variables(os_family)
    assert int(variables["__guest_nvswitches"]) == 1          # NVIDIA's 0x0680 only
    install = task("tasks/fabric_manager.yml", "Install Fabric Manager at the driver's version")
    assert render_native(install["ansible.builtin.package"]["name"], variables) == wanted
    start = task("tasks/fabric_manager.yml", "Start Fabric Manager")["ansible.builtin.systemd_service"]
    assert start == {"name": "nvidia-fabricmanager.service", "enabled": True, "state": "started"}
    include = task("tasks/main.yml", "Install and start Fabric Manager for the board's NVSwitches")
    assert "__guest_nvswitches | int > 0" in include["when"]
    held = task("tasks/main.yml", "Install the NVIDIA container toolkit")["vars"]["__guest_nvidia_held_packages"]
    assert "nvidia-fabricmanager-550" in render_native(held, variables)


def test_mocked_guest_without_nvswitches_runs_no_fabric_manager_and_the_runfile_is_refused_with_one():
    variables = fabric_manager_variables("Debian", pci={"0000:01:00.0": {"vendor": "10de", "class": "0x030200"}})
    assert int(variables["__guest_nvswitches"]) == 0
    held = task("tasks/main.yml", "Install the NVIDIA container toolkit")["vars"]["__guest_nvidia_held_packages"]
    assert not any("fabricmanager" in p for p in render_native(held, variables))
    refuse = task("tasks/fabric_manager.yml", "Refuse Fabric Manager next to a runfile driver")
    assert refuse["when"] == "guest_nvidia_driver_method != 'repo'"
    names = [t["name"] for t in tasks("tasks/main.yml")]
    assert names.index("Read the GPU health and hold it to the limits") < names.index(
        "Install and start Fabric Manager for the board's NVSwitches")
