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
import yaml

from ansible.plugins.filter.core import FilterModule as CoreFilters

ROLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles", "guest")


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
