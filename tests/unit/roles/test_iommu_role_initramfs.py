# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The iommu role's "load vfio early" file, per initramfs generator (the detector's
table, which the roles take through gpuhost_mechanisms), against what the generators
read, and the vfio role's run of the same initramfs module (its one owner): with dracut
the two write different files, and both rebuild the same images."""

import os

import glob
import re

import yaml

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import initramfs as initramfs_core, vfio_bind as vfio
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import mechanisms
from support.helpers import role_tasks
from support import REPO

ROLE = os.path.join(REPO, "roles", "iommu")


def _settings(tool, family):
    """What the stage's gpuhost_mechanisms hands the roles for ``tool`` on ``family``
    (the detector's table, the one place the roles' initramfs files are named)."""
    return mechanisms.initramfs_settings(tool, family)


def _block(tool):
    """The early-module block the initramfs module writes for the role's modules."""
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        modules = yaml.safe_load(handle)["__iommu_vfio_modules"]
    return initramfs_core.early_modules_block(tool, modules)


def test_initramfs_tools_block_goes_where_mkinitramfs_reads_and_holds_the_modules_vfio_bind_loads():
    # mkinitramfs (initramfs-tools 0.142) reads ${CONFDIR}/modules and the package's
    # /usr/share/initramfs-tools/modules.d/*, and no modules.d below /etc.
    assert _settings("initramfs-tools", "Debian")["early_modules_path"] == "/etc/initramfs-tools/modules"
    assert _block("initramfs-tools").splitlines() == list(vfio.EARLY_MODULES)


def test_dracut_snippet_is_not_the_install_items_file():
    for family in ("RedHat", "Debian"):
        path = _settings("dracut", family)["early_modules_path"]
        assert path.startswith("/etc/dracut.conf.d/") and path.endswith(".conf")
        assert path != initramfs_core.DRACUT_INSTALL_ITEMS_PATH
    assert _block("dracut") == 'force_drivers+=" vfio vfio_iommu_type1 vfio_pci "'


def test_stale_image_check_covers_the_install_items_file():
    # A run killed between the vfio role's dracut list and its rebuild is caught by the
    # next run's iommu role only if that file is among the inputs whose mtimes the
    # initramfs module compares with the images (its own two files always are).
    debian = _settings("initramfs-tools", "Debian")
    assert debian["extra_inputs"] == []   # no binding file is in the image
    assert debian["image_pattern"] == "/boot/initrd.img-%s"
    rhel = _settings("dracut", "RedHat")
    assert rhel["extra_inputs"] == [initramfs_core.DRACUT_INSTALL_ITEMS_PATH]
    assert rhel["image_pattern"] == "/boot/initramfs-%s.img"
    # Debian's dracut builds the images Debian's kernel hooks and GRUB look for.
    assert _settings("dracut", "Debian")["image_pattern"] == "/boot/initrd.img-%s"


def test_iommu_role_takes_its_boot_mechanisms_from_the_detector_not_the_os_family():
    tasks = {task["name"]: task for task in role_tasks("iommu") + role_tasks("iommu", "kernel_cmdline.yml")}
    cmdline = tasks["Put the plan's kernel arguments into the boot configuration"]["gpuhost.kvm.kernel_cmdline"]
    assert cmdline["method"] == "{{ gpuhost_mechanisms.boot_loader.choice or 'auto' }}"
    initramfs = tasks["Blacklist the GPU drivers, load vfio early and rebuild the initramfs"]["gpuhost.kvm.initramfs"]
    assert initramfs["tool"] == "{{ gpuhost_mechanisms.initramfs.choice or 'auto' }}"
    for key in ("early_modules_path", "image_pattern", "rebuild_argv"):
        assert "gpuhost_mechanisms.initramfs.%s" % key in initramfs[key]


# A single-quoted YAML scalar keeps a backslash as it is, and Jinja (ansible-core 2.19)
# then keeps it inside its own string literal too: '{{ x | join("\n") }}' joins with a
# backslash and an n. Checked over every role file, since the iommu role shipped one.
_SINGLE_QUOTED_ESCAPE = re.compile(r"""(?:^|[\s:\-])'[^']*\{[{%][^']*\\[ntr][^']*'""")


def test_no_role_writes_a_backslash_escape_into_jinja_through_a_single_quoted_scalar():
    roles = os.path.join(REPO, "roles")
    offenders = []
    for path in glob.glob(os.path.join(roles, "*", "*", "*.yml")):
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.lstrip().startswith("#") and _SINGLE_QUOTED_ESCAPE.search(line):
                    offenders.append("%s:%d: %s" % (os.path.relpath(path, roles), number, line.strip()))
    assert not offenders, offenders


def _vfio_vars(family):
    with open(os.path.join(ROLE, "..", "vfio", "vars", family + ".yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_vfio_role_rebuilds_the_same_images_only_with_dracut():
    # Both roles rebuild through gpuhost.kvm.initramfs with the detector's image pattern
    # and command, so they rebuild the same images; the vfio role adds modules-load.d
    # (which dracut builds in) to the inputs. With initramfs-tools no file of the
    # binding is in the image, so the vfio role has nothing to rebuild from.
    with open(os.path.join(ROLE, "..", "vfio", "tasks", "main.yml"), encoding="utf-8") as handle:
        tasks = {task["name"]: task for task in yaml.safe_load(handle)}
    rebuild = tasks["List the binding's files for dracut and rebuild the initramfs when they changed"]
    assert "gpuhost_mechanisms.initramfs.choice == 'dracut'" in rebuild["when"]
    assert rebuild["gpuhost.kvm.initramfs"]["image_pattern"] == "{{ gpuhost_mechanisms.initramfs.image_pattern }}"
    assert rebuild["gpuhost.kvm.initramfs"]["rebuild_argv"] == "{{ gpuhost_mechanisms.initramfs.rebuild_argv }}"
    for family in ("RedHat", "Debian"):
        assert _vfio_vars(family)["__vfio_initramfs_extra_inputs"] == [vfio.MODULES_LOAD]
    assert vfio.in_initramfs_image(vfio.MODULES_LOAD, "dracut")
    assert not vfio.in_initramfs_image(vfio.MODULES_LOAD, "initramfs-tools")


def test_the_shared_nvswitch_model_leaves_nvidia_to_the_nvswitches():
    """The blacklist the role hands the initramfs module: every GPU driver by default,
    all but nvidia (the NVSwitches' driver) in NVIDIA's shared-NVSwitch model, where the
    GPUs stay on vfio-pci by their driver_override."""
    import jinja2
    task = next(t for t in role_tasks("iommu") if t.get("name", "").startswith("Blacklist the GPU drivers"))
    expression = task["gpuhost.kvm.initramfs"]["blacklist_modules"]
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as handle:
        modules = yaml.safe_load(handle)["iommu_blacklist_modules"]
    env = jinja2.Environment()

    def render(model):
        import ast
        return ast.literal_eval(env.from_string(expression).render(
            iommu_blacklist_modules=modules, gpuhost_nvswitch_model=model))
    assert render("none") == modules and "nvidia" in modules
    assert render("shared") == [m for m in modules if m != "nvidia"]
