"""The execution environment: ansible-builder create (tools/ee) makes a build context
whose Containerfile and _build files install this collection from its tarball with its
Python and system requirements. No container engine here, so the image is not built;
ansible-builder's own introspection script is run on the installed tarball instead,
which is what the builder stage runs inside the image."""

import os
import subprocess
import sys
import tarfile

import pytest
import yaml
from bindep.depends import Depends

import gates
from gates import output_of, run_gate
from support.helpers import REPO, ansible_env, run_tool

pytestmark = gates.ENABLED


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    out = tmp_path_factory.mktemp("ee") / "context"
    proc = run_gate([os.path.join(REPO, "tools", "ee"), "create", str(out)])
    assert proc.returncode == 0, output_of(proc)
    return out


def test_containerfile_pins_core_and_runner_and_runs_every_stage(context):
    text = (context / "Containerfile").read_text()
    with open(os.path.join(REPO, "requirements.txt"), encoding="utf-8") as handle:
        core_pin = next(line.strip() for line in handle if line.startswith("ansible-core=="))
    assert 'ARG ANSIBLE_INSTALL_REFS="%s ansible-runner==' % core_pin in text
    assert 'ARG PYCMD="/usr/bin/python3.11"' in text
    for stage in ("AS base", "AS galaxy", "AS builder", "AS final"):
        assert stage in text
    assert "ansible-galaxy collection install" in text
    assert "introspect.py introspect" in text


def test_galaxy_requirements_install_the_tarball_and_pinned_dependencies(context):
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    names = {c["name"]: c for c in requirements["collections"]}
    tarball = context / "_build" / names["collections/gpuhost-kvm.tar.gz"]["name"]
    assert names["collections/gpuhost-kvm.tar.gz"]["type"] == "file"
    assert tarball.is_file()
    with open(os.path.join(REPO, "requirements.yml"), encoding="utf-8") as handle:
        pinned = {c["name"]: str(c["version"])
                  for c in yaml.safe_load(handle)["collections"]}
    for name, version in pinned.items():
        assert str(names[name]["version"]) == version, name
    with tarfile.open(tarball) as archive:
        members = set(archive.getnames())
    for required in ("MANIFEST.json", "meta/execution-environment.yml",
                     "meta/ee-requirements.txt", "meta/ee-bindep.txt",
                     "plugins/modules/vfio_bind.py", "roles/vfio/tasks/main.yml",
                     "playbooks/site.yml"):
        assert required in members, required
    assert not any(m.startswith((".venv/", ".collections/", "tests/fixtures/", "dist/"))
                   for m in members)


def test_introspection_of_the_installed_tarball_finds_our_requirements(context, tmp_path):
    install = tmp_path / "collections"
    run_tool("ansible-galaxy", "collection", "install", "-p", install,
             context / "_build" / "collections" / "gpuhost-kvm.tar.gz",
             env=ansible_env(ANSIBLE_COLLECTIONS_PATH=str(install)))
    proc = subprocess.run(
        [sys.executable, str(context / "_build" / "scripts" / "introspect.py"), "introspect",
         str(install), "--write-pip", str(tmp_path / "pip.txt"),
         "--write-bindep", str(tmp_path / "bindep.txt")],
        capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pip = (tmp_path / "pip.txt").read_text()
    for package in ("libvirt-python==", "lxml==", "jmespath=="):
        assert package in pip
    # What the builder stage installs on the EE's (RPM) base image: the compile profile
    # brings libvirt's headers and pkgconf for libvirt-python; the runtime keeps the libs.
    depends = Depends((tmp_path / "bindep.txt").read_text())
    rpm = ["platform:rpm", "platform:redhat", "platform:centos"]
    compile_rules = {r[0] for r in depends.active_rules(rpm + ["compile"])}
    runtime_rules = {r[0] for r in depends.active_rules(rpm)}
    assert {"libvirt-devel", "pkgconf-pkg-config", "gcc", "python3.11-devel"} <= compile_rules
    assert "libvirt-libs" in runtime_rules and "libvirt-devel" not in runtime_rules


def test_meta_execution_environment_points_at_existing_files():
    with open(os.path.join(REPO, "meta", "execution-environment.yml"), encoding="utf-8") as f:
        meta = yaml.safe_load(f)
    assert meta["version"] == 1
    for key in ("python", "system"):
        assert os.path.isfile(os.path.join(REPO, meta["dependencies"][key])), key
