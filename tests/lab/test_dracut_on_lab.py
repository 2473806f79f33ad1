# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The dracut path for real: the lab's dracut variant
(``GPUHOST_LAB_VARIANT=dracut lab/build``: the same Debian 12 image with dracut instead
of initramfs-tools, lab/variants/dracut) is booted as a lab of its own, converged with
site.yml, and its initramfs and its next boot are read back.

Until this test the collection's dracut path (host/mechanisms.py's detection, the
initramfs module's ``force_drivers+=`` and ``install_items+=`` files, ``dracut --force
--regenerate-all`` and the image name it writes) had run only in unit tests with a mocked
generator. Here the real dracut builds the image, and the checks read what it built:

1. the image has no initramfs-tools and host_facts' mechanisms subset says dracut,
   detected from the guest's own files;
2. site.yml converges it, limited to the stages that touch the initramfs and the
   binding (``--tags bios,iommu,vfio``; the plan runs always): the iommu role's reboot
   for its kernel arguments included; numa, sriov_irq and vm do not touch the initramfs
   and are proven on the default image by test_site_on_lab.py. The limited converge took
   189 s on 2026-12-03 (idle cores; ok=38 changed=6), the whole file 326 s: first boot
   43 s, the reboot after the converge 64 s;
3. ``lsinitrd`` of the running kernel's image lists vfio, vfio_iommu_type1 and vfio-pci
   and the configuration that loads them first (``rd.driver.pre=``, from the iommu role's
   ``force_drivers+=``), and the binding's udev rules and overrides are in it; the
   initramfs module then finds nothing stale (no rebuild at every run);
4. after one more reboot, the GPU functions the plan assigned are on vfio-pci and the
   boot's kernel log shows vfio-pci loaded and bound to the GPU before the switch to the
   real root, and no other driver touching them. The bind is the initramfs's: the
   binding's udev rule sets driver_override and then probes the device, since vfio-pci
   registered before udev ran. Without that probe the GPU was bound only on the real
   root, by driverctl's own unit, and its HDA function, for which systemd started no such
   unit, stayed on no driver (acceptance-20261203T1718Z, acceptance-20261206T0115Z).
   Measured with the probe: vfio loaded at 16.7 s, vfio-pci on 21:00.0 at 21.1 s, switch
   at 24.9 s.

Marker ``acceptance`` (tools/acceptance only). It boots a second lab (its own state
directory, ``GPUHOST_LAB_DRACUT_RUN``, default lab/.run-dracut, and ports,
``GPUHOST_LAB_DRACUT_PORTS``, default 2300-2330): conftest.py runs it after every other
test of its lane, and it stops the lane's own lab first, so two TCG guests of one lane
never share the build machine's 2 cores. It takes its lab down at the end
(``GPUHOST_LAB_KEEP=1`` keeps it). Measured figures are in
bench/results/dracut-lab-*.md; the run writes its evidence to dracut-proof.txt in the
lab's state directory.
"""

import json
import os
import re
import shlex
import time

import pytest
from support import REPO

from conftest import LAB_DIR, variant_lab

pytestmark = pytest.mark.lab

DRACUT_RUN = os.environ.get("GPUHOST_LAB_DRACUT_RUN", os.path.join(LAB_DIR, ".run-dracut"))
DRACUT_PORTS = os.environ.get("GPUHOST_LAB_DRACUT_PORTS", "2300-2330")
PCI = "/sys/bus/pci/devices/"
# The lab inventory's tenant GPU (inventories/lab/host_vars/hk-gpu-01.yml) and its HDA
# function, which the plan passes through with it (same slot, same IOMMU group).
GPU0, GPU0_HDA = "0000:21:00.0", "0000:21:00.1"
# The drivers the kernel binds to them without the binding (lab/README.md).
NATIVE_DRIVERS = {GPU0: "bochs-drm", GPU0_HDA: "snd_hda_intel"}
VFIO_MODULES = ("vfio", "vfio_iommu_type1", "vfio-pci")
SITE_TAGS = "bios,iommu,vfio"

# Timings and evidence of this run, written to dracut-proof.txt.
PROOF = {"timings": {}, "evidence": {}}


def _write_proof():
    with open(os.path.join(DRACUT_RUN, "dracut-proof.txt"), "w", encoding="utf-8") as handle:
        handle.write(json.dumps(PROOF["timings"], indent=1, sort_keys=True) + "\n")
        for name, text in PROOF["evidence"].items():
            handle.write("\n== %s\n%s\n" % (name, text.rstrip()))


@pytest.fixture(scope="module")
def dracut_lab():
    """The dracut variant, built (cached by its recipe) and booted from a first boot,
    or reused when its lab already runs."""
    for instance in variant_lab("dracut", DRACUT_RUN, DRACUT_PORTS, PROOF["timings"]):
        yield instance
        _write_proof()      # before the generator takes the lab down


def _facts(lab, *gather):
    rc, result = lab.module("gpuhost.kvm.host_facts", {"gather": list(gather)})
    assert rc == 0, json.dumps(result, indent=1)[:4000]
    return result["ansible_facts"]


def _kernel_image(lab):
    release = lab.ssh("uname -r").stdout.strip()
    return release, "/boot/initrd.img-%s" % release


def _lsinitrd(lab, image, *args):
    return lab.ssh("lsinitrd %s %s" % (" ".join(shlex.quote(a) for a in args), shlex.quote(image)),
                   timeout=600).stdout


def _image_names(listing):
    """The paths of lsinitrd's long listing (its last field; a link's name, not its target)."""
    names = set()
    for line in listing.splitlines():
        fields = line.split(" -> ")[0].split()
        if len(fields) >= 9 and fields[0][:1] in "-dlcbps":
            names.add(fields[-1])
    return names


def _driver(lab, address):
    out = lab.ssh("readlink %s%s/driver || true" % (PCI, address)).stdout.strip()
    return out.rsplit("/", 1)[-1] if out else None


def _bound_files(lab):
    """The binding's boot-time files on the host: driverctl overrides and udev rules."""
    out = lab.ssh("ls -1 /etc/driverctl.d/ /etc/udev/rules.d/ 2>/dev/null || true").stdout
    return sorted(line for line in out.splitlines()
                  if line.startswith("pci-") or line.startswith("61-gpuhost-vfio-"))


@pytest.mark.acceptance
def test_the_dracut_lab_has_no_initramfs_tools_and_host_facts_detect_dracut(dracut_lab):
    lab = dracut_lab
    status = lab.ssh("dpkg-query -W -f '${Status}' initramfs-tools 2>/dev/null || true").stdout
    assert "installed" not in status.split(), status
    assert lab.ssh("command -v update-initramfs || true").stdout.strip() == ""
    assert lab.ssh("dpkg-query -W -f '${Status}' dracut").stdout.endswith(" installed")
    release, image = _kernel_image(lab)
    # The image the lab booted is dracut's (lsinitrd reads dracut's own marker files).
    modules = _lsinitrd(lab, image, "-m")
    assert "dracut modules:" in modules, modules[:3000]
    facts = _facts(lab, "platform", "mechanisms")
    assert facts["os_family"] == "Debian"
    initramfs = facts["gpuhost_mechanisms"]["initramfs"]
    PROOF["evidence"]["host_facts mechanisms.initramfs"] = json.dumps(initramfs, indent=1, sort_keys=True)
    assert initramfs["choice"] == "dracut" and initramfs["source"] == "detected", initramfs
    assert set(initramfs["evidence"]) == {"dracut"}, initramfs
    assert initramfs["packages"] == ["dracut"], initramfs
    # Debian's dracut writes the name Debian's kernel hooks and GRUB read.
    assert initramfs["image_pattern"] % release == image, initramfs
    assert initramfs["rebuild_argv"] == ["dracut", "--force", "--regenerate-all"], initramfs
    size = int(lab.ssh("stat -c %%s %s" % image).stdout)
    PROOF["timings"]["initramfs_bytes_first_boot"] = size
    PROOF["evidence"]["lsinitrd -m (first boot)"] = modules


@pytest.mark.acceptance
def test_site_converges_the_dracut_lab_through_its_iommu_reboot(dracut_lab):
    lab = dracut_lab
    boots_before = lab.boot_count()
    t0 = time.monotonic()
    proc = lab.playbook(os.path.join(REPO, "playbooks", "site.yml"), "--tags", SITE_TAGS, timeout=3600)
    PROOF["timings"]["converge_%s_s" % SITE_TAGS.replace(",", "_")] = round(time.monotonic() - t0, 1)
    recap = proc.stdout[proc.stdout.rfind("PLAY RECAP"):]
    PROOF["evidence"]["site.yml recap"] = recap
    assert re.search(r"hk-gpu-01\s*:\s*ok=\d+\s+changed=[1-9]\d*\s+unreachable=0\s+failed=0", recap), recap
    # The iommu role rebooted for its kernel arguments and the new image.
    assert lab.boot_count() == boots_before + 1, proc.stdout[-6000:]
    cmdline = lab.read("/proc/cmdline")
    assert "intel_iommu=on" in cmdline.split() and "iommu=pt" in cmdline.split(), cmdline


@pytest.mark.acceptance
def test_the_running_kernels_dracut_image_loads_vfio_pci_first(dracut_lab):
    lab = dracut_lab
    dummy, image = _kernel_image(lab)
    listing = _lsinitrd(lab, image)
    PROOF["evidence"]["lsinitrd (after the converge)"] = "\n".join(
        line for line in listing.splitlines() if "vfio" in line or "driverctl" in line or "gpuhost" in line
        or "cmdline.d" in line)
    names = _image_names(listing)
    for module in VFIO_MODULES:
        found = [n for n in names if re.search(r"/kernel/drivers/vfio/(pci/)?%s\.ko" % re.escape(module), n)]
        assert found, (module, sorted(names)[:400])
    # force_drivers+= makes dracut write rd.driver.pre= for each module into the image's
    # command line, and its cmdline hook loads them before udev starts.
    config = lab.read("/etc/dracut.conf.d/gpuhost-iommu-vfio.conf")
    assert re.search(r'^force_drivers\+=" vfio vfio_iommu_type1 vfio_pci "$', config, re.M), config
    forced = lab.ssh("lsinitrd -f etc/cmdline.d/20-force_drivers.conf %s" % image).stdout
    PROOF["evidence"]["etc/cmdline.d/20-force_drivers.conf"] = forced
    assert set(re.findall(r"rd\.driver\.pre=(\S+)", forced)) == {"vfio", "vfio_iommu_type1", "vfio_pci"}, forced
    # The binding's files (vfio_bind's initramfs_files) are in the image, as the vfio
    # role's run of the initramfs module listed them (install_items+=).
    items = lab.read("/etc/dracut.conf.d/gpuhost-vfio.conf")
    PROOF["evidence"]["/etc/dracut.conf.d/gpuhost-vfio.conf"] = items
    listed = re.search(r'^install_items\+=" (.*) "$', items, re.M).group(1).split()
    assert listed, items
    for path in listed:
        # On merged /usr, dracut puts /bin/cat at usr/bin/cat (bin is a link).
        assert path.lstrip("/") in names or "usr" + path in names, (path, sorted(names)[:400])
    assert _bound_files(lab), "no binding file on the host"
    # Nothing stale: the image dracut wrote is the one the module compares (no rebuild,
    # and no reboot asked for, at every run).
    facts = _facts(lab, "mechanisms")["gpuhost_mechanisms"]["initramfs"]
    rc, result = lab.module("gpuhost.kvm.initramfs", {
        "tool": "dracut", "early_modules_path": facts["early_modules_path"],
        "early_modules": ["vfio", "vfio_iommu_type1", "vfio_pci"],
        "blacklist_modules": [], "extra_inputs": facts["extra_inputs"],
        "image_pattern": facts["image_pattern"], "rebuild_argv": facts["rebuild_argv"]}, check_mode=True)
    assert rc == 0 and result["changed"] is False and result["stale"] == [], result
    PROOF["timings"]["initramfs_bytes_converged"] = int(lab.ssh("stat -c %%s %s" % image).stdout)


@pytest.mark.acceptance
def test_after_a_reboot_vfio_pci_has_the_gpu_functions_before_any_other_driver(dracut_lab):
    lab = dracut_lab
    bound = _bound_files(lab)
    assert {name for name in bound if GPU0 in name} and {name for name in bound if GPU0_HDA in name}, bound
    t0 = time.monotonic()
    lab.reboot()
    PROOF["timings"]["reboot_to_ssh_s"] = round(time.monotonic() - t0, 1)
    # sshd answers before the boot's jobs are done, and driverctl's udev-started units
    # rebind on the real root. The binding is judged once the boot has finished (its
    # exit status says "degraded" or not; either is a finished boot).
    lab.ssh("systemctl is-system-running --wait", check=False, timeout=600)
    PROOF["timings"]["reboot_to_boot_finished_s"] = round(time.monotonic() - t0, 1)
    for address in (GPU0, GPU0_HDA):
        assert _driver(lab, address) == "vfio-pci", (address, _driver(lab, address), lab.console_log)
    journal = lab.ssh("journalctl -b -o short-monotonic --no-pager -q", timeout=600).stdout.splitlines()
    switch = [i for i, line in enumerate(journal) if "Switching root" in line]
    vfio_loaded = [i for i, line in enumerate(journal) if "VFIO - User Level meta-driver" in line]
    assert switch and vfio_loaded, (len(journal), journal[:80])
    assert vfio_loaded[0] < switch[0], (journal[vfio_loaded[0]], journal[switch[0]])
    touching = [line for line in journal if any(a in line for a in (GPU0, GPU0_HDA))]
    PROOF["evidence"]["journal: the GPU functions"] = "\n".join(
        [journal[vfio_loaded[0]], journal[switch[0]]] + touching)
    # vfio-pci logs its bind of a VGA function (vgaarb); the HDA function logs none.
    gpu_bound = [i for i, line in enumerate(journal) if "vfio-pci %s" % GPU0 in line]
    assert gpu_bound and gpu_bound[0] < switch[0], touching
    for address, native in NATIVE_DRIVERS.items():
        others = [line for line in touching if address in line and native.replace("-", "_") in line.replace("-", "_")]
        assert not others, others
