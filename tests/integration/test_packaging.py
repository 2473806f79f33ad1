"""The collection builds as a Galaxy tarball, installs into an empty path, and a module
runs from the installed copy (not from the checkout)."""

import glob
import json
import os

from helpers import REPO, ansible_env, run_tool


def test_galaxy_build_install_and_run_module_from_tarball(tmp_path):
    out = tmp_path / "dist"
    run_tool("ansible-galaxy", "collection", "build", "--output-path", out, REPO)
    tarballs = glob.glob(str(out / "gpuhost-kvm-*.tar.gz"))
    assert len(tarballs) == 1, tarballs

    install_path = tmp_path / "installed"
    run_tool("ansible-galaxy", "collection", "install", "-p", install_path, tarballs[0])
    installed = install_path / "ansible_collections" / "gpuhost" / "kvm"
    assert (installed / "plugins" / "modules" / "iommu_groups_facts.py").is_file()
    assert (installed / "MANIFEST.json").is_file()
    # The build must not ship the checkout's self-link, the venv or CI files.
    assert not (installed / ".collections").exists()
    assert not (installed / ".venv").exists()

    # Run from an empty directory with only the installed path configured, so the
    # checkout's own ansible.cfg and self-link cannot be what resolves the module.
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = ansible_env(ANSIBLE_COLLECTIONS_PATH=str(install_path), ANSIBLE_CONFIG="/dev/null",
                      ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json")
    proc = run_tool("ansible", "localhost", "-c", "local", "-m",
                    "gpuhost.kvm.iommu_groups_facts", cwd=cwd, env=env)
    result = json.loads(proc.stdout)
    task = result["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert "gpuhost_iommu" in task["ansible_facts"]
    assert os.path.realpath(task.get("invocation", {}).get("module_args", {}).get("root", "/")) == "/"
