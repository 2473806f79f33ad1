"""The collection builds as a Galaxy tarball, installs into an empty path, and a module
runs from the installed copy (not from the checkout)."""

import glob
import json

from support.helpers import REPO, ansible_env, run_tool


def test_galaxy_build_install_and_run_module_from_tarball(tmp_path):
    out = tmp_path / "dist"
    run_tool("ansible-galaxy", "collection", "build", "--output-path", out, REPO)
    tarballs = glob.glob(str(out / "gpuhost-kvm-*.tar.gz"))
    assert len(tarballs) == 1, tarballs

    # Install and run from an empty directory with only the installed path configured,
    # so the checkout's ansible.cfg and self-link can neither satisfy the install
    # ("already installed") nor be what resolves the module.
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    install_path = tmp_path / "installed"
    empty_cfg = cwd / "ansible.cfg"
    empty_cfg.write_text("[defaults]\n")
    env = ansible_env(ANSIBLE_COLLECTIONS_PATH=str(install_path), ANSIBLE_CONFIG=str(empty_cfg),
                      ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    run_tool("ansible-galaxy", "collection", "install", "-p", install_path, tarballs[0],
             cwd=cwd, env=env)
    installed = install_path / "ansible_collections" / "gpuhost" / "kvm"
    assert (installed / "plugins" / "modules" / "iommu_groups_facts.py").is_file()
    assert (installed / "MANIFEST.json").is_file()
    # The build must not ship the checkout's self-link, the venv or CI files.
    assert not (installed / ".collections").exists()
    assert not (installed / ".venv").exists()

    proc = run_tool("ansible", "localhost", "-c", "local", "-m",
                    "gpuhost.kvm.iommu_groups_facts", cwd=cwd, env=env)
    # The default callback prints "localhost | SUCCESS => {json}" for ad-hoc runs.
    header, dummy, body = proc.stdout.partition("=>")
    assert "SUCCESS" in header, proc.stdout
    result = json.loads(body)
    assert result["changed"] is False
    assert "gpuhost_iommu" in result["ansible_facts"]
    assert set(result) <= {"ansible_facts", "changed", "invocation", "_ansible_no_log", "warnings"}, \
        sorted(result)
