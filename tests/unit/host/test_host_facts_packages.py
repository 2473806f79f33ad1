# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host_facts' ``packages`` and ``iommu`` subsets: the installed packages in
package_facts' shape (so the roles skip that module's run), and iommu_groups_facts' own
fact, each in the one run the bios and validate roles already make.

The dpkg reader is checked against dpkg itself: ``dpkg-query --admindir`` on the same
status file (tests/fixtures/dpkg/status: stanzas of this build machine's Debian 12
database, plus hand-written multi-arch, removed, half-installed, unpacked, held and
trigger-pending ones)."""

import json
import os
import shutil
import subprocess

import pytest
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import commands
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import host_facts
from ansible_collections.gpuhost.kvm.plugins.modules import host_facts as host_facts_module
from ansible_collections.gpuhost.kvm.plugins.modules import iommu_groups_facts

from support import fixturegen
from support import TESTS

STATUS_FIXTURE = os.path.join(TESTS,
                              "fixtures", "dpkg", "status")


def _root_with_status(tmp_path, text=None):
    root = str(tmp_path / "root")
    for part in ("sys", "proc", "var/lib/dpkg"):
        os.makedirs(os.path.join(root, part), exist_ok=True)
    target = os.path.join(root, "var", "lib", "dpkg", "status")
    if text is None:
        shutil.copy(STATUS_FIXTURE, target)
    else:
        with open(target, "w") as handle:
            handle.write(text)
    return root


def _run(capsys, module, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            module.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def no_commands(monkeypatch):
    def run_command(self, argv, *args, **kwargs):
        pytest.fail("ran a command: %r" % (argv,))
    monkeypatch.setattr(commands, "run_to_the_end", run_command)


STANZA = "Package: %s\nStatus: %s\nArchitecture: %s\nVersion: %s\nSection: admin\n"


# ---------------------------------------------------------------- the dpkg reader

@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query (Debian build machines have it)")
def test_the_dpkg_reader_agrees_with_dpkg_query_on_the_same_status_file(tmp_path):
    admindir = tmp_path / "admin"
    admindir.mkdir()
    shutil.copy(STATUS_FIXTURE, str(admindir / "status"))
    out = subprocess.run(
        ["dpkg-query", "--admindir=%s" % admindir, "-W", "-f",
         "${Package}\\t${Version}\\t${Architecture}\\t${db:Status-Eflag}\\t${db:Status-Status}\\n"],
        check=True, capture_output=True, text=True).stdout
    installed = set()
    for line in out.splitlines():
        name, version, arch, eflag, status = line.split("\t")
        if eflag == "ok" and status in ("installed", "triggers-pending", "triggers-awaited"):
            installed.add((name, version, arch))
    packages = host_facts.parse_dpkg_status(open(STATUS_FIXTURE).read())
    ours = {(entry["name"].split(":")[0], entry["version"], entry["arch"])
            for entries in packages.values() for entry in entries}
    assert ours == installed
    assert len(installed) > 30


def test_installed_means_dpkg_calls_it_installed_whatever_the_selection():
    packages = host_facts.parse_dpkg_status(open(STATUS_FIXTURE).read())
    assert "driverctl" in packages            # hold ok installed
    assert "numactl" in packages              # triggers pending: installed
    # Removed with its conffiles left, interrupted, unpacked: the role installs them,
    # which is what repairs the last two (python-apt would call them installed).
    for name in ("nvidia-driver", "tuned", "irqbalance"):
        assert name not in packages


def test_the_entries_have_package_facts_apt_shape_and_foreign_packages_their_arch():
    packages = host_facts.parse_dpkg_status(open(STATUS_FIXTURE).read())
    assert packages["dpkg"] == [{"name": "dpkg", "version": packages["dpkg"][0]["version"], "arch": "amd64",
                                 "category": "admin", "source": "apt"}]
    # python-apt's names: native and "all" packages bare, a foreign one with its arch.
    assert packages["libc6:i386"][0]["arch"] == "i386"
    assert packages["libc6"][0]["arch"] == "amd64"
    assert packages["tzdata"][0]["arch"] == "all"


@pytest.mark.parametrize("text", [
    "",
    "\x00\x00\x00",
    "garbage without fields\n\n\n",
    "Package: ../etc\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1\n",
    "Package: ok\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1;rm -rf /\n",
    "Package: ok\nStatus: install ok\nArchitecture: amd64\nVersion: 1\n",
    "Package: ok\nStatus: install ok installed\nArchitecture: am d64\nVersion: 1\n",
    "Package: ok\nStatus: install reinstreq installed\nArchitecture: amd64\nVersion: 1\n",
])
def test_garbled_stanzas_are_left_out_without_a_traceback(text):
    assert host_facts.parse_dpkg_status(text) == {}


def test_a_stanza_keeps_its_first_field_and_continuation_lines_are_not_fields():
    text = (STANZA % ("bash", "install ok installed", "amd64", "5.2.15-2+b7")
            + "Version: 9.9\nDescription: GNU shell\n Status: deinstall ok config-files\n")
    assert host_facts.parse_dpkg_status(text)["bash"][0]["version"] == "5.2.15-2+b7"


def test_a_status_file_with_nul_bytes_or_past_its_bound_is_not_read(tmp_path, monkeypatch):
    root = _root_with_status(tmp_path, STANZA % ("bash", "install ok installed", "amd64", "5.2") + "\x00")
    assert host_facts.read_dpkg_packages(root) is None
    monkeypatch.setattr(host_facts, "DPKG_STATUS_MAX_BYTES", 10)
    root = _root_with_status(tmp_path, STANZA % ("bash", "install ok installed", "amd64", "5.2"))
    assert host_facts.read_dpkg_packages(root) is None


def test_no_status_file_is_not_a_host_without_packages(tmp_path):
    assert host_facts.read_dpkg_packages(str(tmp_path)) is None


def test_the_rpm_query_lines_in_package_facts_rpm_shape():
    text = ("bash\t(none)\t5.1.8\t9.el9\tx86_64\n"
            "kernel\t(none)\t5.14.0\t427.el9\tx86_64\n"
            "kernel\t(none)\t5.14.0\t503.el9\tx86_64\n"
            "shim-x64\t1\t15.8\t3.el9\tx86_64\n"
            "gpg-pubkey\t(none)\tfd431d51\t4ae0493b\t(none)\n"
            "broken line\n"
            "evil\t(none)\t1;reboot\t1\tx86_64\n")
    packages = host_facts.parse_rpm_query(text)
    assert sorted(packages) == ["bash", "gpg-pubkey", "kernel", "shim-x64"]
    assert [entry["release"] for entry in packages["kernel"]] == ["427.el9", "503.el9"]
    assert packages["bash"] == [{"name": "bash", "version": "5.1.8", "release": "9.el9", "epoch": None,
                                 "arch": "x86_64", "source": "rpm"}]
    assert packages["shim-x64"][0]["epoch"] == "1"
    assert packages["gpg-pubkey"][0]["arch"] is None


def test_the_rpm_query_names_every_field_it_parses():
    assert host_facts.RPM_QUERY_ARGV[:3] == ["rpm", "--query", "--all"]
    assert host_facts.RPM_QUERY_ARGV[-1] == "%{NAME}\\t%{EPOCH}\\t%{VERSION}\\t%{RELEASE}\\t%{ARCH}\\n"


# ---------------------------------------------------------------- the module

def test_the_packages_subset_returns_ansible_facts_packages(tmp_path, capsys, no_commands):
    root = _root_with_status(tmp_path)
    code, result = _run(capsys, host_facts_module, root=root, gather=["packages"])
    assert code == 0 and result["changed"] is False
    facts = result["ansible_facts"]
    assert facts["packages"] == host_facts.parse_dpkg_status(open(STATUS_FIXTURE).read())
    assert facts["gpuhost_host"]["packages"] == {"read": True, "manager": "dpkg",
                                                 "count": len(facts["packages"]), "error": None}


def test_a_recorded_tree_without_dpkg_gives_no_packages_fact_and_asks_no_rpm(tmp_path, capsys, no_commands):
    root = str(tmp_path / "root")
    os.makedirs(os.path.join(root, "sys"))
    os.makedirs(os.path.join(root, "proc"))
    code, result = _run(capsys, host_facts_module, root=root, gather=["packages"])
    assert code == 0
    assert "packages" not in result["ansible_facts"]
    subset = result["ansible_facts"]["gpuhost_host"]["packages"]
    assert subset["read"] is False and "live host only" in subset["error"]


def test_rpm_is_asked_on_the_live_host_without_dpkg_mocked_rpm(monkeypatch):
    calls = []

    class _Module(object):
        params = dict(root="/", gather=["packages"], devices=[], kernel_log_pattern=None, kernel_log_file=None,
                      units=[], initramfs_inputs=[], initramfs_image_pattern=None, libvirt_uri="qemu:///system",
                      domains=[], gpu_vendor=None)

        def get_bin_path(self, name):
            return "/usr/bin/" + name

        def run_command(self, argv):
            calls.append(argv)
            return 0, "bash\t(none)\t5.1.8\t9.el9\tx86_64\n", ""

    monkeypatch.setattr(host_facts, "read_dpkg_packages", lambda root: None)
    worker = host_facts_module.HostFacts(_Module())
    worker.run()
    assert calls == [host_facts.RPM_QUERY_ARGV]
    assert worker.result["ansible_facts"]["packages"]["bash"][0]["release"] == "9.el9"
    assert worker.facts["packages"]["manager"] == "rpm"


def test_the_iommu_subset_is_iommu_groups_facts_own_fact(tmp_path, capsys, no_commands):
    root = fixturegen.build_dirty_usb_group_host(str(tmp_path / "host"))
    code, alone = _run(capsys, iommu_groups_facts, root=root)
    assert code == 0
    code, together = _run(capsys, host_facts_module, root=root, gather=["memory", "iommu"])
    assert code == 0
    assert together["ansible_facts"]["gpuhost_iommu"] == alone["ansible_facts"]["gpuhost_iommu"]
    assert "iommu" not in together["ansible_facts"]["gpuhost_host"]
    assert together["ansible_facts"]["gpuhost_host"]["gathered"] == ["memory", "iommu"]


def test_the_iommu_subset_refuses_a_bad_gpu_vendor_before_reading(tmp_path, capsys, no_commands):
    root = fixturegen.build_dirty_usb_group_host(str(tmp_path / "host"))
    code, result = _run(capsys, host_facts_module, root=root, gather=["iommu"], gpu_vendor="nvidia")
    assert code == 1
    assert result["ansible_facts"] == {}
    assert result["field"] == "gpu_vendor"
