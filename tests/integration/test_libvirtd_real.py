# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt_pinned_domain on a real libvirtd with QEMU under TCG, through real
``ansible localhost -m`` runs.

The test starts its own libvirtd and virtlogd (root, the system qemu driver, a private
socket directory), reserves a few 2 MiB hugepages, creates a real qcow2 overlay and a
cloud-init seed, and then: check mode -> define and start -> check mode -> idempotent
re-run, reads back ``virsh vcpupin``, ``virsh emulatorpin`` and ``virsh numatune`` and
compares them with the plan, and undefines with remove_storage. Everything it changed
(hugepages, daemons, files) is restored at the end; one test at a time on this machine
holds the system qemu driver (a lock), and first removes what an interrupted run left
(its domain, its image folder, its daemons). There is no GPU or IOMMU here, so
the domain has no hostdev; the hostdev XML is covered by the test-driver tests.
"""

import contextlib
import ctypes
import fcntl
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.preflight import (
    descriptor_offers, read_firmware_descriptors)

from support.helpers import ansible_env, run_tool

PREFIX = "gpuhost-it-"
NAME = PREFIX + uuid.uuid4().hex[:8]
PAGES = 64                                  # 128 MiB of 2 MiB pages
NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"
NODE0_2M = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB"


def _why_not():
    if os.geteuid() != 0:
        return "needs root to run the system libvirtd"
    for binary in ("libvirtd", "virtlogd", "qemu-system-x86_64", "qemu-img", "virsh"):
        if not shutil.which(binary):
            return ("%s is missing: install libvirt-daemon-system qemu-system-x86 qemu-utils "
                    "libvirt-clients (bindep.txt, tag test)" % binary)
    if not os.path.isdir(NODE0_2M):
        return "the kernel has no 2 MiB hugepage pool on node 0"
    return None


WORKDIR_PREFIX = "gpuhost-libvirtd-"


def _die_with_parent():
    """In the daemon's child: SIGTERM when pytest dies, even by SIGKILL (a lane stopped
    at its deadline), so that no daemon keeps the system qemu driver's lock."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)    # PR_SET_PDEATHSIG


def stop_leftover_daemons():
    """The libvirtd and virtlogd of an earlier run that died before its fixture ended
    (told apart by their --config in a WORKDIR_PREFIX folder): the system qemu driver
    takes a lock that a second libvirtd cannot, so the next one would not come up.
    Returns their PIDs."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                argv = handle.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) in ("libvirtd", "virtlogd") and any(
                arg.startswith(os.path.join(tempfile.gettempdir(), WORKDIR_PREFIX))
                for arg in argv[1:]):
            pids.append(int(entry))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 15
    while time.time() < deadline and any(os.path.exists("/proc/%d" % pid) for pid in pids):
        time.sleep(0.2)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


class Daemons:
    """A private libvirtd + virtlogd; the qemu driver is the system one (root)."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []
        self.uri = "qemu:///system?socket=%s/libvirt-sock" % workdir

    def start(self):
        conf = os.path.join(self.workdir, "libvirtd.conf")
        with open(conf, "w") as out:
            out.write('unix_sock_dir = "%s"\nauth_unix_rw = "none"\nauth_unix_ro = "none"\n'
                      'log_outputs = "3:file:%s/libvirtd.log"\n' % (self.workdir, self.workdir))
        logd_conf = os.path.join(self.workdir, "virtlogd.conf")
        with open(logd_conf, "w") as out:
            out.write('log_outputs = "3:file:%s/virtlogd.log"\n' % self.workdir)
        for argv in (["virtlogd", "--config", logd_conf, "--pid-file",
                      os.path.join(self.workdir, "virtlogd.pid")],
                     ["libvirtd", "--config", conf, "--pid-file",
                      os.path.join(self.workdir, "libvirtd.pid")]):
            log = open(os.path.join(self.workdir, os.path.basename(argv[0]) + ".out"), "w")
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                               preexec_fn=_die_with_parent))
        deadline = time.time() + 30
        while time.time() < deadline:
            proc = subprocess.run(["virsh", "-c", self.uri, "version"], capture_output=True,
                                  text=True, check=False)
            if proc.returncode == 0:
                return None
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        return "libvirtd did not come up: %s\n%s" % (proc.stderr.strip(), self.log_tail())

    def log_tail(self):
        texts = []
        for name in ("libvirtd.out", "libvirtd.log"):
            path = os.path.join(self.workdir, name)
            if os.path.exists(path):
                with open(path) as handle:
                    texts.append(handle.read()[-2000:])
        return "\n".join(texts)

    def stop(self):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


# Every private libvirtd shares the system qemu driver's state (/etc/libvirt/qemu,
# /run/libvirt/qemu), so a second test run on this machine would see this one's domain
# and refuse its pins as overlapping. One run at a time holds this lock.
DRIVER_LOCK = "/run/lock/gpuhost-libvirtd-real.lock"


@pytest.fixture
def system_qemu_driver():
    """The system qemu driver to this test alone (waiting for another run's test)."""
    os.makedirs(os.path.dirname(DRIVER_LOCK), exist_ok=True)
    with open(DRIVER_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def remove_leftovers(uri):
    """Domains and image folders of this test that an interrupted run (SIGKILL, a
    lane stopped at its deadline) left behind; with the driver lock held, no other
    run owns them. Returns the names removed."""
    names = [n for n in subprocess.run(["virsh", "-c", uri, "list", "--all", "--name"],
                                       capture_output=True, text=True,
                                       check=False).stdout.split()
             if n.startswith(PREFIX)]
    for name in names:
        subprocess.run(["virsh", "-c", uri, "destroy", "--", name], capture_output=True,
                       check=False)
        subprocess.run(["virsh", "-c", uri, "undefine", "--nvram", "--", name],
                       capture_output=True, check=False)
    for directory in glob.glob(os.path.join("/var/lib/libvirt/images", PREFIX + "*")):
        shutil.rmtree(directory, ignore_errors=True)
    return names


@pytest.fixture
def libvirtd(system_qemu_driver):
    reason = _why_not()
    if reason:
        pytest.skip("REAL LIBVIRTD TEST NOT RUN: " + reason)
    stopped = stop_leftover_daemons()
    workdir = tempfile.mkdtemp(prefix=WORKDIR_PREFIX)
    daemons = Daemons(workdir)
    try:
        failure = daemons.start()
        # root and the binaries are here (checked above): a daemon that does not come
        # up is a fault of this machine, never a quiet skip of the proof
        assert not failure, failure
        if stopped:
            print("stopped the daemons of an interrupted run: %s" % stopped)
        left = remove_leftovers(daemons.uri)
        stale = [n for n in subprocess.run(
            ["virsh", "-c", daemons.uri, "list", "--all", "--name"], capture_output=True,
            text=True, check=False).stdout.split() if n.startswith(PREFIX)]
        assert not stale, "could not remove leftovers %s of an interrupted run" % stale
        if left:
            print("removed the leftovers of an interrupted run: %s" % ", ".join(left))
        yield daemons
    finally:
        subprocess.run(["virsh", "-c", daemons.uri, "destroy", NAME], capture_output=True,
                       check=False)
        subprocess.run(["virsh", "-c", daemons.uri, "undefine", "--nvram", NAME],
                       capture_output=True, check=False)
        daemons.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _hugetlbfs_mounted():
    with open("/proc/mounts") as handle:
        return [line.split()[1] for line in handle if line.split()[2] == "hugetlbfs"]


@pytest.fixture
def hugetlbfs():
    """libvirt backs guests with files on a hugetlbfs mount, which systemd normally
    mounts at /dev/hugepages; mount it for the test if nothing did."""
    if _hugetlbfs_mounted():
        yield _hugetlbfs_mounted()[0]
        return
    os.makedirs("/dev/hugepages", exist_ok=True)
    proc = subprocess.run(["mount", "-t", "hugetlbfs", "hugetlbfs", "/dev/hugepages"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip("REAL LIBVIRTD TEST NOT RUN: cannot mount hugetlbfs: %s" % proc.stderr)
    try:
        yield "/dev/hugepages"
    finally:
        subprocess.run(["umount", "/dev/hugepages"], capture_output=True, check=False)


@pytest.fixture
def hugepages(hugetlbfs):
    """Reserve PAGES more 2 MiB pages for the test and give them back afterwards."""
    with open(NR_HUGEPAGES) as handle:
        before = int(handle.read())
    with open(os.path.join(NODE0_2M, "free_hugepages")) as handle:
        free = int(handle.read())
    wanted = before + max(0, PAGES - free)
    with open(NR_HUGEPAGES, "w") as out:
        out.write(str(wanted))
    with open(os.path.join(NODE0_2M, "free_hugepages")) as handle:
        free = int(handle.read())
    try:
        if free < PAGES:
            pytest.skip("REAL LIBVIRTD TEST NOT RUN: the kernel gave only %d of %d free "
                        "2 MiB pages (memory too fragmented)" % (free, PAGES))
        yield free
    finally:
        with open(NR_HUGEPAGES, "w") as out:
            out.write(str(before))


@pytest.fixture
def images(libvirtd):
    """Image files live where the qemu user (libvirt-qemu) may traverse (made after
    libvirtd has removed an interrupted run's folders)."""
    directory = tempfile.mkdtemp(prefix=PREFIX, dir="/var/lib/libvirt/images")
    os.chmod(directory, 0o711)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _can_raise_memlock():
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        return False
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))
    return True


def host_cpus():
    with open("/sys/devices/system/cpu/online") as handle:
        text = handle.read().strip()
    cpus = []
    for part in text.split(","):
        first, dummy, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def tcg_plan():
    """A plan entry (docs/plan-format.md) for this small host: 2 vCPUs pinned one per
    host CPU, emulator and iothread on CPU 0, 128 MiB of 2 MiB pages, strict node 0."""
    cpus = host_cpus()
    pins = [cpus[0], cpus[1 % len(cpus)]]
    return {
        "name": NAME, "node": 0, "gpus": [], "vcpus": 2, "vcpu_pins": pins,
        "guest_topology": {"sockets": 1, "dies": 1, "cores": 2, "threads": 1},
        "emulator_cpus": str(cpus[0]), "iothreads": 1, "iothread_cpus": str(cpus[0]),
        "memory_gib": PAGES * 2 / 1024.0, "hugepage_size_kib": 2048,
        "hugepages": {"0": PAGES}, "numatune": {"mode": "strict", "nodeset": "0"},
        "vf": None,
    }


def module(uri, images_dir, check=False, **args):
    # tcg_plan() puts vCPU 0 on the emulator's CPU: a two-CPU test host cannot keep
    # them apart, which the module refuses unless told.
    base = dict(name=NAME, uri=uri, domain_type="qemu", cpu_mode="maximum",
                state_dir=os.path.join(images_dir, "state"), allow_vcpu_emulator_overlap=True)
    base.update(args)
    argv = ["localhost", "-i", "localhost,", "-c", "local", "-m",
            "gpuhost.kvm.libvirt_pinned_domain", "-a", json.dumps(base),
            "-e", "ansible_python_interpreter=%s" % sys.executable, "--diff"]
    if check:
        argv.append("--check")
    env = ansible_env(ANSIBLE_STDOUT_CALLBACK="minimal", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = run_tool("ansible", *argv, env=env, check=False, timeout=180)
    marker = proc.stdout.find("localhost | ")
    try:
        result = json.loads(proc.stdout[proc.stdout.index("{", marker):])
    except ValueError:
        raise AssertionError("no JSON result (rc %d):\n%s\n%s"
                             % (proc.returncode, proc.stdout, proc.stderr))
    failed = proc.returncode != 0 or proc.stdout[marker:].startswith("localhost | FAILED")
    assert not failed, json.dumps(result, indent=2)
    return result


def virsh(uri, *args):
    proc = subprocess.run(["virsh", "-c", uri] + list(args), capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_tcg_domain_define_start_idempotent_readback_undefine(hugepages, libvirtd, images):
    uri = libvirtd.uri
    plan = tcg_plan()
    base = os.path.join(images, "base.qcow2")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", base, "256M"], check=True)
    args = dict(plan=plan, state="running",
                disk={"path": os.path.join(images, "overlay.qcow2"), "base_image": base},
                cloud_init={"seed_path": os.path.join(images, "seed.iso"),
                            "user_data": "#cloud-config\nhostname: tenant\n"},
                network={"type": "none"},
                # This container may not raise RLIMIT_MEMLOCK (no CAP_SYS_RESOURCE), so
                # libvirt cannot start a <locked/> guest here; the test-driver tests
                # cover <locked/>.
                lock_memory=_can_raise_memlock())

    preview = module(uri, images, check=True, **args)
    assert preview["changed"] and "define" in preview["actions"]
    assert "start" in preview["actions"]
    assert NAME not in virsh(uri, "list", "--all", "--name").split()
    assert not os.path.exists(args["disk"]["path"])

    applied = module(uri, images, **args)
    assert applied["changed"] and applied["state"] == "running", json.dumps(applied, indent=1)
    assert os.path.exists(args["disk"]["path"]) and os.path.exists(args["cloud_init"]["seed_path"])

    rerun = module(uri, images, **args)
    assert not rerun["changed"], (rerun["changed_elements"], rerun["actions"])
    assert not rerun["restart_required"]

    # Read the pins back from the running QEMU through virsh and compare with the plan.
    vcpupin = virsh(uri, "vcpupin", NAME)
    pins = {}
    for line in vcpupin.splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) == 2 and parts[0].isdigit():
            pins[int(parts[0])] = parts[1]
    assert pins == {i: str(cpu) for i, cpu in enumerate(plan["vcpu_pins"])}, vcpupin
    emulatorpin = virsh(uri, "emulatorpin", NAME)
    assert emulatorpin.split()[-1] == plan["emulator_cpus"], emulatorpin
    numatune = dict((k.strip(), v.strip()) for k, v in (
        line.split(":", 1) for line in virsh(uri, "numatune", NAME).splitlines() if ":" in line))
    assert numatune["numa_mode"].strip() == "strict"
    assert numatune["numa_nodeset"].strip() == plan["numatune"]["nodeset"]
    with open(os.path.join(NODE0_2M, "free_hugepages")) as handle:
        assert int(handle.read()) <= hugepages - PAGES        # the guest holds them

    # A change while it runs: persistent config updated, restart_required, no restart.
    domain_id = virsh(uri, "domid", NAME).strip()
    changed = module(uri, images, **dict(args, hide_kvm=True))
    assert changed["changed"] and changed["restart_required"]
    assert virsh(uri, "domid", NAME).strip() == domain_id

    gone = module(uri, images, name=NAME, state="absent", remove_storage=True)
    assert gone["changed"] and sorted(gone["removed_files"]) == sorted(
        [args["disk"]["path"], args["cloud_init"]["seed_path"]])
    assert NAME not in virsh(uri, "list", "--all", "--name").split()
    assert os.path.exists(base)


def test_uefi_tcg_domain_boots_ovmf_and_a_rerun_changes_nothing(hugepages, libvirtd, images):
    """firmware efi on the real QEMU driver: libvirt's auto-selection picks the
    installed OVMF's plain UEFI descriptor, QEMU gets its code and the guest's own NVRAM
    as pflash, the stored definition stays what the module wrote (a rerun changes
    nothing), a change back to BIOS is one restart-requiring change, and state=absent
    removes the NVRAM. Needs the OVMF package (ovmf, edk2-ovmf) on this machine."""
    offered = [d for d in read_firmware_descriptors("/").descriptors
               if descriptor_offers(d, "efi") and d.executable_present]
    if not offered:
        pytest.skip("REAL LIBVIRTD UEFI TEST NOT RUN: no firmware descriptor in "
                    "/usr/share/qemu/firmware offers plain UEFI (install ovmf or edk2-ovmf)")
    uri = libvirtd.uri
    args = dict(plan=tcg_plan(), state="running", network={"type": "none"},
                lock_memory=_can_raise_memlock(), firmware="efi")
    applied = module(uri, images, **args)
    assert applied["changed"] and applied["state"] == "running", json.dumps(applied, indent=1)
    stored = ET.fromstring(virsh(uri, "dumpxml", "--inactive", NAME))
    assert stored.find("os").get("firmware") == "efi"
    live = ET.fromstring(virsh(uri, "dumpxml", NAME))
    loader, nvram = live.find("os/loader"), live.find("os/nvram")
    assert loader is not None and nvram is not None, virsh(uri, "dumpxml", NAME)
    # libvirt takes the first matching descriptor by file name, as the preflight lists them
    assert loader.text == offered[0].executable, (loader.text, offered)
    assert (loader.get("type"), loader.get("readonly")) == ("pflash", "yes")
    assert os.path.getsize(nvram.text) > 0
    with open("/run/libvirt/qemu/%s.pid" % NAME) as handle:
        pid = handle.read().strip()
    with open("/proc/%s/cmdline" % pid, "rb") as handle:
        cmdline = handle.read().replace(b"\0", b" ").decode()
    assert loader.text in cmdline and nvram.text in cmdline and "pflash0=" in cmdline, cmdline

    rerun = module(uri, images, **args)
    assert not rerun["changed"], (rerun["changed_elements"], rerun["actions"])
    bios = dict(args)
    bios["firmware"] = "bios"
    back = module(uri, images, check=True, **bios)
    assert back["changed_elements"] == ["os"] and back["restart_required"] is True

    gone = module(uri, images, name=NAME, state="absent")
    assert gone["changed"] and not os.path.exists(nvram.text)
