# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The iommu role's "load vfio early" file, per OS family, against what the initramfs
tools read, and the vfio role's run of the same initramfs module (its one owner): on
RHEL the two write different dracut files, and both rebuild the same images."""

import os

import glob
import re

import yaml

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import boot_config, vfio

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "iommu")


def _vars(name):
    with open(os.path.join(ROLE, "vars", name), encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        data.update(yaml.safe_load(handle))
    return data


def _block(data):
    """The early-module block the initramfs module writes for the role's vars."""
    return boot_config.early_modules_block(data["__iommu_initramfs_tool"],
                                           data["__iommu_vfio_modules"])


def test_debian_block_goes_where_mkinitramfs_reads_and_holds_the_modules_vfio_bind_loads():
    data = _vars("Debian.yml")
    # mkinitramfs (initramfs-tools 0.142) reads ${CONFDIR}/modules and the package's
    # /usr/share/initramfs-tools/modules.d/*, and no modules.d below /etc.
    assert data["__iommu_initramfs_path"] == "/etc/initramfs-tools/modules"
    assert data["__iommu_initramfs_tool"] == "initramfs-tools"
    assert _block(data).splitlines() == list(vfio.EARLY_MODULES)


def test_rhel_snippet_is_not_the_install_items_file():
    data = _vars("RedHat.yml")
    assert data["__iommu_initramfs_path"].startswith("/etc/dracut.conf.d/")
    assert data["__iommu_initramfs_path"].endswith(".conf")
    assert data["__iommu_initramfs_path"] != boot_config.DRACUT_INSTALL_ITEMS_PATH
    assert data["__iommu_initramfs_tool"] == "dracut"
    assert _block(data) == 'force_drivers+=" vfio vfio_iommu_type1 vfio_pci "'


def test_stale_image_check_covers_the_install_items_file():
    # A run killed between the vfio role's dracut list and its rebuild is caught by the
    # next run's iommu role only if that file is among the inputs whose mtimes the
    # initramfs module compares with the images (its own two files always are).
    debian = _vars("Debian.yml")
    assert debian["__iommu_initramfs_extra_inputs"] == []   # no binding file is in the image
    assert debian["__iommu_initramfs_image_pattern"] == "/boot/initrd.img-%s"
    rhel = _vars("RedHat.yml")
    assert rhel["__iommu_initramfs_extra_inputs"] == [boot_config.DRACUT_INSTALL_ITEMS_PATH]
    assert rhel["__iommu_initramfs_image_pattern"] == "/boot/initramfs-%s.img"


# A single-quoted YAML scalar keeps a backslash as it is, and Jinja (ansible-core 2.19)
# then keeps it inside its own string literal too: '{{ x | join("\n") }}' joins with a
# backslash and an n. Checked over every role file, since the iommu role shipped one.
_SINGLE_QUOTED_ESCAPE = re.compile(r"""(?:^|[\s:\-])'[^']*\{[{%][^']*\\[ntr][^']*'""")


def test_no_role_writes_a_backslash_escape_into_jinja_through_a_single_quoted_scalar():
    roles = os.path.join(os.path.dirname(__file__), "..", "..", "roles")
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


def test_vfio_role_rebuilds_the_same_images_on_rhel_and_never_on_debian():
    # Both roles rebuild through gpuhost.kvm.initramfs: on RHEL the same images with the
    # same command, plus modules-load.d (which dracut builds in) among the inputs. On
    # Debian no file of the binding is in the image, so the vfio role has nothing to
    # rebuild from.
    iommu, role = _vars("RedHat.yml"), _vfio_vars("RedHat")
    assert role["__vfio_initramfs"] == iommu["__iommu_initramfs_tool"] == "dracut"
    assert role["__vfio_initramfs_image_pattern"] == iommu["__iommu_initramfs_image_pattern"]
    assert role["__vfio_initramfs_argv"] == iommu["__iommu_initramfs_argv"]
    assert role["__vfio_initramfs_extra_inputs"] == [vfio.MODULES_LOAD]
    assert vfio.in_initramfs_image(vfio.MODULES_LOAD, "dracut")
    debian = _vfio_vars("Debian")
    assert debian["__vfio_initramfs"] == _vars("Debian.yml")["__iommu_initramfs_tool"]
    assert not any(key.startswith("__vfio_initramfs_") for key in debian)
    assert not vfio.in_initramfs_image(vfio.MODULES_LOAD, "initramfs-tools")
