# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RHEL 9's toolchain where Debian has it: the lab's el9like variant
(``GPUHOST_LAB_VARIANT=el9like lab/build``, lab/variants/el9like: the dracut variant on
Debian 11, with Python 3.9 as /usr/bin/python3, kernel 5.10, dracut 051 and libvirt 7.0)
is booted as a lab of its own and converged by site.yml with the oldest ansible-core of
tests/ansible-matrix.txt (its virtual environment, .venv-ansible-<minor>, from
tools/setup), as lab/converge does: the iommu role's reboot included, then a second run
that changes nothing.

The tenant takes 1 GiB pages here (the inventory's tenant with ``hugepage_size: 1G`` on
"GPU" 1, passed as extra vars): a kernel older than 5.16 (RHEL 9 runs 5.14) does not read the
per-node ``hugepages=<node>:<count>``, so the iommu role writes the host-wide count and
says so, and the numa role's boot unit places the pages per node: the fallback path runs
for real.

What still differs from RHEL 9 (grubby and BLS, SELinux, the modular libvirt daemons,
package names) and which tests cover it: docs/testing.md.

Marker ``acceptance`` (tools/acceptance only). It has a lane of its own, lab-el9like
(tests/lanes.py), in the lab-site lane's queue: it starts when that lane ends, so the
machine runs two labs at a time. In one pytest session it comes last (tests/lab/
conftest.py's OWN_LAB_FILES) and stops the session's lab first. Its state directory is
``GPUHOST_LAB_EL9LIKE_RUN`` (default lab/.run-el9like), its ports
``GPUHOST_LAB_EL9LIKE_PORTS`` (default 2340-2370); it takes its lab down at the end
(``GPUHOST_LAB_KEEP=1`` keeps it). The run writes its evidence to el9like-proof.txt in
the lab's state directory.
"""

import json
import os
import re
import subprocess
import time

import pytest
import yaml
from support import REPO

import lanes
from conftest import HOST, LAB_DIR, variant_lab

pytestmark = pytest.mark.lab

EL9LIKE_RUN = os.environ.get("GPUHOST_LAB_EL9LIKE_RUN", os.path.join(LAB_DIR, ".run-el9like"))
EL9LIKE_PORTS = os.environ.get("GPUHOST_LAB_EL9LIKE_PORTS", "2340-2370")
SITE = os.path.join(REPO, "site.yml")
HOST_VARS = os.path.join(REPO, "inventories", "lab", "host_vars", "%s.yml" % HOST)
RECAP_RE = re.compile(r"^%s\s*:\s*(?P<counts>(?:\w+=\d+\s*)+)$" % re.escape(HOST), re.M)
GIGANTIC = "/sys/devices/system/node/node%d/hugepages/hugepages-1048576kB/nr_hugepages"
GPU1 = "0000:41:00.0"                 # "GPU" 1, on node 1 (lab/README.md)

PROOF = {"timings": {}, "evidence": {}}


def oldest_ansible_core():
    """(version, bin directory) of the matrix's oldest ansible-core."""
    version = min((v for v, dummy in lanes.read_matrix()),
                  key=lambda v: tuple(int(p) for p in v.split(".")))
    return version, os.path.join(REPO, lanes.matrix_venv(version), "bin")


OLDEST, OLDEST_BIN = oldest_ansible_core()


def _write_proof():
    with open(os.path.join(EL9LIKE_RUN, "el9like-proof.txt"), "w", encoding="utf-8") as handle:
        handle.write(json.dumps(PROOF["timings"], indent=1, sort_keys=True) + "\n")
        for name, text in PROOF["evidence"].items():
            handle.write("\n== %s\n%s\n" % (name, text.rstrip()))


@pytest.fixture(scope="module")
def el9like_lab():
    """The el9like variant, built (cached by its recipe) and booted from a first boot, or
    reused when its lab already runs; Ansible from the oldest ansible-core's venv."""
    if not os.path.exists(os.path.join(OLDEST_BIN, "ansible-playbook")):
        pytest.fail("%s is missing: tools/setup builds the ansible-core matrix's virtual environments "
                    "(tests/ansible-matrix.txt)" % os.path.dirname(OLDEST_BIN), pytrace=False)
    for instance in variant_lab("el9like", EL9LIKE_RUN, EL9LIKE_PORTS, PROOF["timings"],
                                bin_dir=OLDEST_BIN):
        yield instance
        _write_proof()      # before the generator takes the lab down


@pytest.fixture(scope="module")
def gigantic_tenants(tmp_path_factory):
    """Extra vars: the lab inventory's tenant on 1 GiB pages, with "GPU" 1, on node 1.

    Not on node 0: there the lab has no 1 GiB block to give (measured 2026-12-05 on this
    variant: hugepages=1 at boot put the page on node 1, and raising node 0 to 1 page at
    run time failed with 2.3 of its 2.5 GiB free), so the numa role's boot unit failed,
    as the runbook says run-time 1G allocation can. Node 1 has no NIC PF, so the tenant
    takes no VF here, and it is defined, not started."""
    with open(HOST_VARS, encoding="utf-8") as handle:
        tenants = yaml.safe_load(handle)["gpuhost_tenants"]
    tenants[0] = dict(tenants[0], hugepage_size="1G", gpus=[GPU1])
    del tenants[0]["nic_vf"]
    # Defined, not started: this variant's image has no tenant boot files (no
    # initramfs-tools to build them, lab/image/customize).
    for key in ("state", "kernel", "initrd", "cmdline", "serial_log"):
        tenants[0].pop(key, None)
    path = tmp_path_factory.mktemp("el9like") / "tenants-1g.yml"
    # SeaBIOS: libvirt 7.0 cannot be told which UEFI build to take, and
    # libvirt_pinned_domain refuses UEFI there (domain/xml.py, FIRMWARE_FEATURES_SINCE).
    path.write_text(yaml.safe_dump({"gpuhost_tenants": tenants, "vm_gpu_firmware": "bios"}),
                    encoding="utf-8")
    return tenants[0], "@%s" % path


def _recap(output):
    matches = RECAP_RE.findall(output)
    assert matches, "no PLAY RECAP for %s in:\n%s" % (HOST, output[-5000:])
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", matches[-1])}


def _changed_tasks(output):
    """The tasks whose result line says changed, for a failed idempotence check."""
    tasks, current = [], None
    for line in output.splitlines():
        if line.startswith("TASK ["):
            current = line
        elif line.startswith("changed:") and current:
            tasks.append(current)
    return "\n".join(tasks)


class _Steps:
    converged = False


@pytest.mark.acceptance
def test_the_el9like_lab_has_python_3_9_kernel_5_10_dracut_and_the_oldest_ansible_core(el9like_lab):
    lab = el9like_lab
    rc, result = lab.module("ansible.builtin.setup", {"gather_subset": ["!all", "min"]})
    assert rc == 0, json.dumps(result, indent=1)[:4000]
    facts = result["ansible_facts"]
    PROOF["evidence"]["setup (min)"] = json.dumps(
        {key: facts.get(key) for key in ("ansible_python_version", "ansible_distribution",
                                         "ansible_distribution_version", "ansible_kernel",
                                         "ansible_selinux", "ansible_service_mgr")},
        indent=1, sort_keys=True)
    assert facts["ansible_python_version"].startswith("3.9."), facts["ansible_python_version"]
    assert facts["ansible_python"]["executable"] == "/usr/bin/python3", facts["ansible_python"]
    assert (facts["ansible_distribution"], facts["ansible_distribution_major_version"]) == ("Debian", "11")
    assert facts["ansible_kernel"].startswith("5.10."), facts["ansible_kernel"]
    controller = subprocess.run([os.path.join(OLDEST_BIN, "ansible"), "--version"], capture_output=True,
                                text=True, check=True, stdin=subprocess.DEVNULL).stdout
    assert "[core %s]" % OLDEST in controller, controller
    # dracut, and nothing else, makes the initramfs; host_facts detects it.
    assert "installed" not in lab.ssh("dpkg-query -W -f '${Status}' initramfs-tools 2>/dev/null || true").stdout.split()
    assert lab.ssh("dpkg-query -W -f '${Status}' dracut").stdout.endswith(" installed")
    rc, result = lab.module("gpuhost.kvm.host_facts", {"gather": ["platform", "mechanisms", "memory"]})
    assert rc == 0, json.dumps(result, indent=1)[:4000]
    host = result["ansible_facts"]
    initramfs = host["gpuhost_mechanisms"]["initramfs"]
    assert initramfs["choice"] == "dracut" and initramfs["source"] == "detected", initramfs
    release = host["gpuhost_host"]["memory"]["kernel_release"]
    PROOF["evidence"]["host_facts"] = json.dumps({"initramfs": initramfs, "kernel_release": release},
                                                 indent=1, sort_keys=True)
    assert release.startswith("5.10."), release
    PROOF["evidence"]["libvirt"] = lab.ssh("virsh version").stdout


@pytest.mark.acceptance
def test_site_converges_with_the_oldest_ansible_core_on_the_host_wide_1g_fallback(
        el9like_lab, gigantic_tenants):
    lab = el9like_lab
    tenant, extra_vars = gigantic_tenants
    boots_before = lab.boot_count()
    t0 = time.monotonic()
    proc = lab.playbook(SITE, "-e", extra_vars, timeout=3600)
    PROOF["timings"]["converge_s"] = round(time.monotonic() - t0, 1)
    recap = _recap(proc.stdout)
    PROOF["evidence"]["converge recap"] = json.dumps(recap, sort_keys=True)
    assert recap["failed"] == 0 and recap["unreachable"] == 0 and recap["changed"] > 0, recap
    # The iommu role rebooted once for its kernel arguments.
    assert lab.boot_count() == boots_before + 1, proc.stdout[-6000:]
    args = lab.read("/proc/cmdline").split()
    PROOF["evidence"]["/proc/cmdline"] = " ".join(args)
    assert {"intel_iommu=on", "iommu=pt", "default_hugepagesz=1G", "hugepagesz=1G"} <= set(args), args
    # Kernel 5.10 reads no per-node form: the host-wide count, and the role said why.
    assert "hugepages=1" in args and not [a for a in args if re.fullmatch(r"hugepages=\d+:.*", a)], args
    flat = " ".join(proc.stdout.split())
    assert "predates the per-node form hugepages=<node>:<count> (Linux 5.16)" in flat, flat[-6000:]
    # The plan's node holds the page after the boot (the numa role's unit moves it there
    # when the kernel put it elsewhere).
    pages = [int(lab.read(GIGANTIC % node).strip()) for node in (0, 1)]
    PROOF["evidence"]["1G pages per node"] = str(pages)
    assert pages == [0, 1], pages
    # dracut made the image, with vfio forced in early.
    config = lab.read("/etc/dracut.conf.d/gpuhost-iommu-vfio.conf")
    assert re.search(r'^force_drivers\+=" vfio vfio_iommu_type1 vfio_pci "$', config, re.M), config
    assert lab.ssh("test ! -e /etc/initramfs-tools/modules && echo absent").stdout.strip() == "absent"
    # libvirt 7.0: the domain has no <maxphysaddr> (it would drop it) and host-model for
    # the TCG lab's cpu mode maximum (it refuses maximum).
    xml = lab.ssh("virsh dumpxml --inactive %s" % tenant["name"]).stdout
    PROOF["evidence"]["domain <cpu>"] = "\n".join(line for line in xml.splitlines()
                                                  if "cpu" in line or "page size" in line)
    assert "<cpu mode='host-model'" in xml and "maxphysaddr" not in xml, xml
    assert "<page size='1048576' unit='KiB'" in xml, xml
    assert "<os firmware=" not in xml, xml
    _Steps.converged = True


@pytest.mark.acceptance
def test_second_run_with_the_oldest_ansible_core_changes_nothing(el9like_lab, gigantic_tenants):
    assert _Steps.converged, "needs the converge of this module first"
    lab = el9like_lab
    boots_before = lab.boot_count()
    t0 = time.monotonic()
    proc = lab.playbook(SITE, "-e", gigantic_tenants[1], timeout=3600)
    PROOF["timings"]["second_run_s"] = round(time.monotonic() - t0, 1)
    recap = _recap(proc.stdout)
    PROOF["evidence"]["second run recap"] = json.dumps(recap, sort_keys=True)
    assert recap["changed"] == 0, ("second run changed: %s\n%s\nconsole log: %s"
                                   % (recap, _changed_tasks(proc.stdout), lab.console_log))
    assert recap["failed"] == 0 and recap["unreachable"] == 0, recap
    assert lab.boot_count() == boots_before
