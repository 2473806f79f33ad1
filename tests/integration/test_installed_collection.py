"""The playbooks run from an installed tarball, not from the checkout: the collection is
built, installed into an empty collections path, and its playbooks are addressed by
their collection names (gpuhost.kvm.site, gpuhost.kvm.fleet_capacity) from a directory
that has neither the checkout's ansible.cfg nor its self-link."""

import glob
import json

import pytest

from support import fleetsim
from support.helpers import REPO, ansible_env, run_tool


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("installed")
    run_tool("ansible-galaxy", "collection", "build", "--output-path", base / "dist", REPO)
    tarball = glob.glob(str(base / "dist" / "gpuhost-kvm-*.tar.gz"))[0]
    cwd = base / "elsewhere"
    cwd.mkdir()
    (cwd / "ansible.cfg").write_text("[defaults]\n")
    env = ansible_env(ANSIBLE_CONFIG=str(cwd / "ansible.cfg"),
                      ANSIBLE_COLLECTIONS_PATH=str(base / "collections"))
    run_tool("ansible-galaxy", "collection", "install", "-p", base / "collections", tarball,
             cwd=cwd, env=env)
    return base, cwd, env


def test_site_playbook_resolves_every_role_from_the_installed_copy(installed):
    cwd, env = installed[1:]
    proc = run_tool("ansible-playbook", "gpuhost.kvm.site", "--syntax-check",
                    "-i", "%s/inventories/example" % REPO, cwd=cwd, env=env)
    assert "playbook: " in proc.stdout
    listed = run_tool("ansible-playbook", "gpuhost.kvm.site", "--list-tasks",
                      "-i", "%s/inventories/example" % REPO, cwd=cwd, env=env).stdout
    for role in ("plan", "bios", "iommu", "vfio", "numa", "sriov_irq", "vm", "validate"):
        assert "gpuhost.kvm.%s : " % role in listed, role


def test_fleet_capacity_runs_from_the_installed_copy(installed):
    base, cwd, env = installed
    inventory, expected = fleetsim.build_fleet(str(base / "fleet"), 3)
    report = base / "report"
    run_tool("ansible-playbook", "gpuhost.kvm.fleet_capacity", "-i", inventory,
             "-e", "fleet_report_dir=%s" % report, cwd=cwd, env=env)
    data = json.loads((report / "fleet-capacity.json").read_text())
    assert sorted(data["hosts"]) == sorted(expected)
