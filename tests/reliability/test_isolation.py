# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Isolation between tenants and from the host, sVirt labels, and secrets kept out of
every log, diff and report."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml

import harness
from support.helpers import REPO, ansible_env

from ansible_collections.gpuhost.kvm.plugins.module_utils.host.critical import read_host_critical
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology

TENANTS = [{"name": "t%d" % i, "gpus": 1, "vcpus": 8, "memory_gib": 8, "nic_vf": True}
           for i in range(6)]


@pytest.fixture(scope="module")
def eight_gpu(tmp_path_factory):
    host = harness.Host(tmp_path_factory.mktemp("eight") / "host", "eight_gpu")
    topology = read_host_topology(host.root, with_irqs=False)
    plan = plan_placement(topology, TENANTS)
    return host, topology, plan


def _tenant_devices(entry):
    devices = []
    for gpu in entry.get("gpus") or ():
        devices += gpu.get("functions") or [gpu["address"]]
    if entry.get("vf"):
        devices.append(entry["vf"]["address"])
    return devices


def test_every_tenant_group_holds_only_that_tenants_devices(eight_gpu, tally):
    host, topology, plan = eight_gpu
    critical = read_host_critical(host.root, topology.pci)
    host_critical = set(critical.storage) | set(critical.network) | set(critical.console)
    owner = {a: t["name"] for t in plan["tenants"] for a in _tenant_devices(t)}
    assert len(plan["tenants"]) == len(TENANTS)
    for entry in plan["tenants"]:
        tally.bump("isolation", "checks")
        mine = set(_tenant_devices(entry))
        assert mine, entry
        for address in sorted(mine):
            group = topology.pci[address].iommu_group
            assert group is not None, address
            for member in topology.iommu.groups[group]:
                if member in mine or topology.pci[member].is_bridge:
                    continue
                raise AssertionError("group %d of %s (tenant %s) also holds %s (%s)" % (
                    group, address, entry["name"], member, owner.get(member, "the host")))
            assert not (set(topology.iommu.groups[group]) & host_critical), (group, address)
        tally.bump("isolation", "held")


def test_domain_preflight_accepts_each_tenant_and_refuses_a_shared_gpu(eight_gpu, tmp_path,
                                                                       tally):
    host, _topology, plan = eight_gpu
    host = harness.Host(tmp_path / "domains", "eight_gpu")
    for entry in plan["tenants"]:
        worker = harness.run_libvirt_pinned_domain(
            host, {"name": entry["name"], "plan": entry, "allow_cross_node": False})
        assert worker.changed and not worker.warnings
    tally.bump("isolation", "checks")
    thief = dict(plan["tenants"][0], name="thief")
    err = harness.run_module_case(host, "libvirt_pinned_domain",
                                  {"name": "thief", "plan": thief})
    assert err is not None
    assert "already used by domain t0 (defined)" in err.message, err.message
    tally.bump("isolation", "held")


def _seclabels(xml_text):
    return [dict(e.attrib) for e in ET.fromstring(xml_text).iter("seclabel")]


def test_domains_keep_svirt_labels(eight_gpu, tmp_path, tally):
    """No XML the builder emits (check mode) or libvirt stores turns the security driver
    off: no <seclabel type='none'/>, no relabel='no'."""
    _host, _topology, plan = eight_gpu
    host = harness.Host(tmp_path / "svirt", "eight_gpu")
    os.makedirs(host.image_dir)
    emitted = []
    for index, entry in enumerate(plan["tenants"][:3]):
        args = {"name": entry["name"], "plan": entry,
                "network": {"type": "vf", "vf_mode": ("interface", "hostdev")[index % 2]},
                "disk": {"path": os.path.join(host.image_dir, "%s.qcow2" % entry["name"]),
                         "size": "1G"}}
        emitted.append(harness.run_libvirt_pinned_domain(host, args, check_mode=True).xml)
        emitted.append(harness.run_libvirt_pinned_domain(host, args).xml)
    emitted += list(host.domains().values())
    tally.bump("isolation", "checks")
    for xml_text in emitted:
        for label in _seclabels(xml_text):
            assert label.get("type") != "none" and label.get("relabel") != "no", label
        assert "seclabel type='none'" not in xml_text.replace('"', "'")
    tally.bump("isolation", "held")


# -- secrets --------------------------------------------------------------------------------

PLANTED_PASSWORD = "Planted-Cloud-Init-Pw-7f3a9c"
PLANTED_NGC_KEY = "nvapi-PLANTED-NGC-KEY-0123456789abcdef"


def _run_verbose(host, play, check):
    path = os.path.join(host.work, "secret-play.yml")
    with open(path, "w") as handle:
        yaml.safe_dump(play, handle)
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), path,
            "-i", "localhost,", "-c", "local", "-e",
            "ansible_python_interpreter=%s" % sys.executable, "--diff", "-vvv"]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, cwd=REPO, env=ansible_env(), capture_output=True, text=True,
                          timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _files_containing(folder, secret, skip=()):
    found = []
    for directory, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(directory, name)
            if path.endswith(skip) or os.path.islink(path):
                continue
            with open(path, "rb") as handle:
                if secret.encode() in handle.read():
                    found.append(path)
    return found


@pytest.mark.parametrize("check", [True, False], ids=["check-mode", "apply"])
def test_cloud_init_password_never_appears_in_a_vvv_run(tmp_path, check, tally):
    host = harness.Host(tmp_path / "host", "runbook")
    os.makedirs(host.image_dir)
    user_data = ("#cloud-config\nchpasswd:\n  expire: false\n  users:\n"
                 "    - {name: gpuhost, password: %s, type: text}\n" % PLANTED_PASSWORD)
    task = {"name": "Define a tenant with a cloud-init password",
            "gpuhost.kvm.libvirt_pinned_domain": {
                "name": "secret-tenant", "uri": "test://" + host.node_xml,
                "domain_type": "test", "root": host.root, "state_dir": host.state_dir,
                "vcpus": 2, "vcpu_pins": [1, 33], "memory_gib": 2, "hugepage_size": "2M",
                "memory_nodes": "0",
                "cloud_init": {"seed_path": os.path.join(host.image_dir, "seed.iso"),
                               "user_data": user_data}},
            "register": "domain"}
    report = {"name": "Write the result as a report",
              "ansible.builtin.copy": {"content": "{{ domain | to_nice_json }}",
                                       "dest": os.path.join(host.work, "report.json")}}
    rc, output = _run_verbose(host, [{"hosts": "localhost", "gather_facts": False,
                                      "tasks": [task, report]}], check)
    tally.bump("isolation", "checks")
    assert rc == 0, output[-4000:]
    assert "secret-tenant" in output
    assert PLANTED_PASSWORD not in output
    # Only the seed ISO itself may hold it: not the state record, not the report.
    leaks = _files_containing(host.base, PLANTED_PASSWORD, skip=("seed.iso",))
    leaks += _files_containing(host.work, PLANTED_PASSWORD, skip=("secret-play.yml",))
    assert not leaks, leaks
    if not check:
        assert os.path.exists(os.path.join(host.image_dir, "seed.iso"))
    tally.bump("isolation", "held")


def test_ngc_key_never_appears_when_the_guest_role_refuses_its_variables(tmp_path, tally):
    """The guest role's argument spec marks the key no_log; a -vvv run that fails the
    spec on another variable must not print the key with the provided arguments."""
    host = harness.Host(tmp_path / "host", "runbook")
    spec = yaml.safe_load(open(os.path.join(REPO, "roles/guest/meta/argument_specs.yml")))
    options = spec["argument_specs"]["main"]["options"]
    assert options["guest_ngc_api_key"].get("no_log") is True
    wrong = next(name for name, opt in sorted(options.items())
                 if opt.get("type") == "bool")
    play = [{"hosts": "localhost", "gather_facts": False,
             "roles": [{"role": "gpuhost.kvm.guest"}],
             "vars": {"guest_ngc_api_key": PLANTED_NGC_KEY, wrong: "perhaps"}}]
    rc, output = _run_verbose(host, play, check=True)
    tally.bump("isolation", "checks")
    assert rc != 0 and wrong in output, output[-3000:]
    assert PLANTED_NGC_KEY not in output
    tally.bump("isolation", "held")
