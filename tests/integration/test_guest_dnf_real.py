# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The guest role's RHEL package path with a real dnf: Debian's dnf 4,
ansible.builtin.dnf, rpm, dnf's versionlock plugin and modularity, installing into an
installroot from a stand-in repository built here (tiny rpms by rpmbuild, createrepo_c,
and the nvidia-driver module stream in modules.yaml by modifyrepo_c).

Faked: the OS identity (RedHat 9 facts, from a module in the play's library) and the
NVIDIA GPU (a recorded-style sysfs tree with one 10de function). Everything else is real:

* The role's own task files, vars and defaults run, through a copy of its tasks/main.yml
  without the steps that need a running GPU or systemd (GPU health, the runtime's GPU
  hook, Triton); the steps kept are named below and must still be in main.yml.
* ansible.builtin.dnf takes installroot, conf_file and releasever from the play's
  module_defaults; the conf file reads only the stand-in repository and points dnf's
  plugin configuration at a lock list of the test's (the host's plugin is loaded before
  the root has the plugin's package).
* ansible.builtin.yum_repository writes the role's repository files to a directory of
  their own (module_defaults reposdir): NVIDIA's and Docker's hosts cannot be reached
  here, so dnf reads the stand-in (gpgcheck off, in the stand-in only) and the test reads
  the files the role wrote.
* ansible.builtin.rpm_key imports a GPG key generated here (guest_cuda_repo_key, as an
  offline site would), through an rpm on the play's PATH that adds --root: rpm_key has
  no root option, and the host's rpm database is left alone (checked).
* "dnf versionlock add" gets --config/--installroot through guest_dnf_command_args.

dnf is installed by tools/setup (bindep.txt); without it this test fails, it is not skipped."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from support import REPO
from support.sysfs_sim import TreeBuilder

VENV_BIN = os.path.dirname(sys.executable)
SYSTEM_PYTHON = "/usr/bin/python3"
TOOLS = ("dnf", "rpm", "rpmbuild", "createrepo_c", "modifyrepo_c", "gpg")
STREAM = "550"
DRIVER_VERSION = "550.90.07"
# name -> version of each stand-in package, the names from roles/guest/vars/RedHat.yml.
PACKAGES = {
    "numactl": "2.0.16", "util-linux": "2.37.4",
    "nvidia-driver": DRIVER_VERSION, "nvidia-driver-libs": DRIVER_VERSION, "nvidia-persistenced": DRIVER_VERSION,
    "nvidia-container-toolkit": "1.17.3", "nvidia-container-toolkit-base": "1.17.3",
    "python3-dnf-plugin-versionlock": "4.3.0",
    "docker-ce": "27.3.1", "docker-ce-cli": "27.3.1", "containerd.io": "1.7.22",
}
MODULE_PACKAGES = ("nvidia-driver", "nvidia-driver-libs", "nvidia-persistenced")
HELD = MODULE_PACKAGES + ("nvidia-container-toolkit", "nvidia-container-toolkit-base")
RELEASE = "1.el9"
# The steps of tasks/main.yml that run here; the others need a running GPU or systemd.
KEPT_STEPS = (
    "Set platform/version specific variables",
    "Install numactl and the base tools",
    "Read the guest's PCI functions",
    "Decide whether the NVIDIA steps run",
    "Say why the NVIDIA driver and container toolkit steps are skipped",
    "Install the NVIDIA driver",
    "Install the container runtime",
    "Install the NVIDIA container toolkit",
)

FACTS_MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule

FACTS = {"distribution": "RedHat", "distribution_major_version": "9", "distribution_version": "9.4",
         "distribution_release": "Plow", "os_family": "RedHat", "architecture": "x86_64", "pkg_mgr": "dnf"}

AnsibleModule(argument_spec={}, supports_check_mode=True).exit_json(changed=False, ansible_facts=FACTS)
'''


def _missing_tools():
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def _run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120, **kwargs)


def _spec():
    """One spec, a subpackage per stand-in package (rpmbuild writes them all at once);
    the versionlock plugin's package ships the lock list, as RHEL's does."""
    main = "numactl"
    lines = ["Name: %s" % main, "Version: %s" % PACKAGES[main], "Release: %s" % RELEASE,
             "Summary: stand-in", "License: MIT", "BuildArch: noarch", "%description", "stand-in",
             "%install", "mkdir -p %{buildroot}/etc/dnf/plugins", "touch %{buildroot}/etc/dnf/plugins/versionlock.list",
             "%files"]
    for name, version in PACKAGES.items():
        if name == main:
            continue
        lines += ["%%package -n %s" % name, "Summary: stand-in", "Version: %s" % version,
                  "%%description -n %s" % name, "stand-in", "%%files -n %s" % name]
        if name == "python3-dnf-plugin-versionlock":
            lines.append("%config(noreplace) /etc/dnf/plugins/versionlock.list")
    return "\n".join(lines) + "\n"


MODULES_YAML = """---
document: modulemd
version: 2
data:
  name: nvidia-driver
  stream: "{stream}"
  version: 20240601000000
  context: 0dc0a2f1
  arch: x86_64
  summary: NVIDIA driver (stand-in)
  description: NVIDIA driver (stand-in)
  license:
    module: [MIT]
  profiles:
    default:
      rpms: [{names}]
  artifacts:
    rpms: [{artifacts}]
...
---
document: modulemd-defaults
version: 1
data:
  module: nvidia-driver
  profiles:
    "{stream}": [default]
...
"""


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The stand-in repository (rpms, repodata, modules), the dnf configuration that
    reads only it, a GPG key for rpm_key and a sysfs tree with one NVIDIA GPU."""
    missing = _missing_tools()
    assert not missing, ("real-dnf test needs %s: run tools/setup (bindep.txt: dnf python3-dnf "
                         "dnf-plugins-core rpm createrepo-c gpg)" % ", ".join(missing))
    probe = _run([SYSTEM_PYTHON, "-c", "import dnf, dnf.subject; print(dnf.VERSION)"])
    assert probe.returncode == 0, "the system python has no dnf bindings (python3-dnf): " + probe.stderr
    base = tmp_path_factory.mktemp("dnf-real")
    repo, top = base / "repo", base / "rpmbuild"
    repo.mkdir()
    spec = base / "standin.spec"
    spec.write_text(_spec())
    built = _run(["rpmbuild", "-bb", "--quiet", "--define", "_topdir %s" % top, "--define", "_rpmdir %s" % repo,
                  "--define", "_build_id_links none", str(spec)])
    assert built.returncode == 0, built.stdout + built.stderr
    created = _run(["createrepo_c", "-q", str(repo)])
    assert created.returncode == 0, created.stderr
    artifacts = ", ".join("%s-0:%s-%s.noarch" % (name, PACKAGES[name], RELEASE) for name in MODULE_PACKAGES)
    modules = base / "modules.yaml"
    modules.write_text(MODULES_YAML.format(stream=STREAM, names=", ".join(MODULE_PACKAGES), artifacts=artifacts))
    added = _run(["modifyrepo_c", "--mdtype=modules", str(modules), str(repo / "repodata")])
    assert added.returncode == 0, added.stderr

    # GPG key for rpm_key, generated here (the CUDA key of an offline site's mirror).
    gnupg = base / "gnupg"
    gnupg.mkdir(mode=0o700)
    key = base / "RPM-GPG-KEY-standin"
    gen = _run(["gpg", "--homedir", str(gnupg), "--batch", "--passphrase", "", "--quick-gen-key",
                "gpuhost stand-in <standin@localhost>", "rsa2048", "sign", "never"])
    assert gen.returncode == 0, gen.stderr
    exported = _run(["gpg", "--homedir", str(gnupg), "--armor", "--export", "standin@localhost"])
    assert exported.returncode == 0 and "PUBLIC KEY" in exported.stdout, exported.stderr
    key.write_text(exported.stdout)

    sysfs = base / "sysfs"
    TreeBuilder(sysfs).pci("0000:06:00.0", 0x030200, vendor=0x10de, device=0x2335)
    return {"base": base, "repo": repo, "key": key, "sysfs": sysfs}


def _trimmed_role(dest):
    """A role whose files are the guest role's, but for a main.yml without the steps that
    need a running GPU or systemd; fails when a kept step has left main.yml."""
    source = os.path.join(REPO, "roles", "guest")
    os.makedirs(os.path.join(dest, "tasks"))
    for sub in ("defaults", "vars", "meta", "templates", "files"):
        if os.path.isdir(os.path.join(source, sub)):
            os.symlink(os.path.join(source, sub), os.path.join(dest, sub))
    for name in os.listdir(os.path.join(source, "tasks")):
        if name != "main.yml":
            os.symlink(os.path.join(source, "tasks", name), os.path.join(dest, "tasks", name))
    with open(os.path.join(source, "tasks", "main.yml"), encoding="utf-8") as handle:
        main = yaml.safe_load(handle)
    block = main[0]["block"]
    names = [task["name"] for task in block]
    assert [name for name in KEPT_STEPS if name not in names] == []
    main[0]["block"] = [task for task in block if task["name"] in KEPT_STEPS]
    with open(os.path.join(dest, "tasks", "main.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(main, handle, sort_keys=False)


class Site:
    """One installroot, its dnf configuration and a play that runs the role into it."""

    def __init__(self, standin, path):
        self.path, self.root = path, path / "root"
        self.conf, self.role_repos = path / "dnf.conf", path / "role-repos.d"
        for sub in ("root", "role-repos.d", "repos.d", "pluginconf", "bin", "home", "play/library", "roles"):
            (path / sub).mkdir(parents=True)
        (path / "repos.d" / "standin.repo").write_text(
            "[standin]\nname=stand-in for NVIDIA's, Docker's and RHEL's repositories\n"
            "baseurl=file://%s\ngpgcheck=0\n" % standin["repo"])
        self.conf.write_text("[main]\nreposdir=%s\npluginconfpath=%s\nmodule_platform_id=platform:el9\n"
                             "gpgcheck=0\nskip_if_unavailable=False\n" % (path / "repos.d", path / "pluginconf"))
        # The host's versionlock plugin loads before the root has its package: its list
        # lies beside the root, there from the start.
        self.locklist = path / "versionlock.list"
        self.locklist.write_text("")
        (path / "pluginconf" / "versionlock.conf").write_text(
            "[main]\nenabled = 1\nlocklist = %s\n" % self.locklist)
        rpm = path / "bin" / "rpm"
        rpm.write_text('#!/bin/sh\nexec %s --root=%s "$@"\n' % (shutil.which("rpm"), self.root))
        rpm.chmod(0o755)
        (path / "play" / "library" / "fake_os_facts.py").write_text(FACTS_MODULE)
        # Debian's rpm keeps its database under $HOME (~/.rpmdb, apart from dpkg's); RHEL's
        # is /var/lib/rpm, in the root. Every rpm and dnf here runs with this HOME.
        (path / "home" / ".rpmmacros").write_text("%_dbpath /var/lib/rpm\n")
        self.env = dict(os.environ, HOME=str(path / "home"))
        _trimmed_role(str(path / "roles" / "guest_rhel"))
        self.dnf_args = ["--config=%s" % self.conf, "--installroot=%s" % self.root, "--releasever=9"]
        play = [{
            "name": "The guest role's RHEL package path, real dnf into an installroot",
            "hosts": "localhost", "connection": "local", "gather_facts": False,
            "environment": {"PATH": "%s:%s" % (path / "bin", os.environ.get("PATH", "/usr/bin:/bin")),
                            "HOME": str(path / "home")},
            "module_defaults": {
                "ansible.builtin.dnf": {"conf_file": str(self.conf), "installroot": str(self.root), "releasever": "9"},
                "ansible.builtin.yum_repository": {"reposdir": str(self.role_repos)},
            },
            "tasks": [
                {"name": "Fake the OS identity: RedHat 9", "fake_os_facts": {}},
                {"name": "Run the guest role", "ansible.builtin.include_role": {"name": "guest_rhel"}, "vars": {
                    "guest_sysfs_root": str(standin["sysfs"]),
                    "guest_manage_services": False,
                    "guest_nvidia_driver_stream": STREAM,
                    "guest_cuda_repo_url": "file://%s" % standin["repo"],
                    "guest_cuda_repo_key": str(standin["key"]),
                    "guest_dnf_command_args": self.dnf_args,
                }},
            ],
        }]
        self.playbook = path / "play" / "site.yml"
        self.playbook.write_text(yaml.safe_dump(play, sort_keys=False))

    def play(self, *args):
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_ROLES_PATH=str(self.path / "roles"),
                   PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
        return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", str(self.playbook),
                               "-e", "ansible_python_interpreter=%s" % SYSTEM_PYTHON] + list(args),
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)

    def rpm_q(self, *names):
        return _run([shutil.which("rpm"), "--root=%s" % self.root, "-q"] + list(names), env=self.env)

    def dnf(self, *args, quiet=True):
        return _run(["dnf"] + (["-q"] if quiet else []) + self.dnf_args + list(args), env=self.env)


def _recap(proc):
    match = re.search(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", proc.stdout)
    assert match, proc.stdout[-3000:] + proc.stderr[-2000:]
    return {"ok": int(match.group(1)), "changed": int(match.group(2)), "failed": int(match.group(4))}


def _task_result(proc, task):
    """What ansible-playbook printed under ``task`` (the last task of that name: an include
    and the task it includes may share one)."""
    found = re.findall(r"TASK \[[^\]]*%s\] \*+\n(.*?)(?=\nTASK |\nPLAY RECAP)" % re.escape(task), proc.stdout, re.S)
    assert found, task
    return found[-1]


def test_guest_rhel9_faked_os_and_gpu_real_dnf_installs_locks_and_is_idempotent(standin, tmp_path):
    host_keys = _run(["rpm", "-q", "gpg-pubkey"]).stdout
    site = Site(standin, tmp_path)
    first = site.play()
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    assert _recap(first)["changed"] > 0

    installed = site.rpm_q(*PACKAGES)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    for name, version in PACKAGES.items():
        assert "%s-%s-%s.noarch" % (name, version, RELEASE) in installed.stdout
    # The module stream is enabled (dnf's own view, and its state file in the root).
    modules = site.dnf("module", "list", "--enabled", "nvidia-driver")
    assert re.search(r"^nvidia-driver\s+%s \[e\]" % STREAM, modules.stdout, re.M), modules.stdout + modules.stderr
    state = (site.root / "etc" / "dnf" / "modules.d" / "nvidia-driver.module").read_text()
    assert "stream=%s" % STREAM in state and "state=enabled" in state
    # The lock list holds the driver and the toolkit at the versions installed.
    locks = site.dnf("versionlock", "list")
    assert locks.returncode == 0, locks.stderr
    for name in HELD:
        assert "%s-0:%s-%s.*" % (name, PACKAGES[name], RELEASE) in locks.stdout.split("\n"), locks.stdout
    # dnf 4's versionlock plugin's wording, which the role's changed_when reads.
    lock_task = _task_result(first, "Lock the NVIDIA driver and container toolkit at their installed versions")
    assert lock_task.startswith("changed: [localhost]"), lock_task

    # The role's repository definitions, written where dnf does not read them here.
    cuda = (site.role_repos / "cuda-rhel9.repo").read_text()
    assert "baseurl = file://%s" % standin["repo"] in cuda and "gpgcheck = 1" in cuda
    assert "gpgkey = %s" % standin["key"] in cuda
    assert "repo_gpgcheck = 1" in (site.role_repos / "nvidia-container-toolkit.repo").read_text()
    with open(os.path.join(REPO, "roles", "guest", "vars", "RedHat.yml"), encoding="utf-8") as handle:
        docker_url = yaml.safe_load(handle)["__guest_runtime"]["docker"]["repo_url"]
    assert "baseurl = %s" % docker_url in (site.role_repos / "docker-ce-stable.repo").read_text()
    # The key went into the installroot's rpm database, not the host's.
    assert site.rpm_q("gpg-pubkey").returncode == 0
    assert _run(["rpm", "-q", "gpg-pubkey"]).stdout == host_keys

    second = site.play()
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-2000:]
    assert _recap(second)["changed"] == 0, second.stdout[-4000:]
    lock_again = _task_result(second, "Lock the NVIDIA driver and container toolkit at their installed versions")
    assert lock_again.startswith("ok: [localhost]"), lock_again


def test_guest_rhel9_faked_os_and_gpu_real_dnf_check_mode_changes_nothing(standin, tmp_path):
    site = Site(standin, tmp_path)
    proc = site.play("--check")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert _recap(proc)["changed"] > 0
    assert _task_result(proc, "Install numactl and the base tools").startswith("changed: [localhost]")
    # Check mode: the driver and toolkit steps are skipped, and say so.
    assert "SKIPPING the NVIDIA driver, CUDA and nvidia-container-toolkit steps" in proc.stdout
    assert _task_result(proc, "Install the NVIDIA container toolkit").startswith("skipping: [localhost]")
    # Nothing was installed, no module enabled, nothing written in the root's /etc.
    everything = _run([shutil.which("rpm"), "--root=%s" % site.root, "-qa"], env=site.env)
    assert everything.stdout.strip() == "", everything.stdout
    assert not (site.root / "etc" / "dnf" / "modules.d").exists()
    assert os.listdir(site.role_repos) == []


def test_versionlock_wording_of_this_dnf(standin, tmp_path):
    """What the role's changed_when and failed_when read, from this dnf's versionlock
    plugin: the first add, a repeat, and a name with no package (rc 0, nothing locked)."""
    site = Site(standin, tmp_path)
    installed = site.dnf("-y", "install", "nvidia-container-toolkit", "python3-dnf-plugin-versionlock")
    assert installed.returncode == 0, installed.stderr
    first = site.dnf("versionlock", "add", "--", "nvidia-container-toolkit", quiet=False)
    assert first.returncode == 0 and "Adding versionlock on: nvidia-container-toolkit-0:1.17.3-1.el9.*" in first.stdout
    again = site.dnf("versionlock", "add", "--", "nvidia-container-toolkit", quiet=False)
    assert again.returncode == 0 and "Adding versionlock on" not in again.stdout
    assert "Package already locked in equivalent form" in again.stdout + again.stderr
    absent = site.dnf("versionlock", "add", "--", "no-such-package", quiet=False)
    assert absent.returncode == 0 and "No package found for: no-such-package" in absent.stdout
