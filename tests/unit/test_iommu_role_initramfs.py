# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The iommu role's "load vfio early" file, per OS family, against what the initramfs
tools read and what vfio_bind's persistent binding writes: the role and the module must
never fight over one file (RHEL), and on Debian they share /etc/initramfs-tools/modules
so that the module finds its lines already there."""

import os

import glob
import re

import yaml

from ansible_collections.gpuhost.kvm.plugins.module_utils import boot_config, vfio

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


def test_debian_block_goes_where_mkinitramfs_reads_and_holds_vfio_binds_modules():
    data = _vars("Debian.yml")
    # mkinitramfs (initramfs-tools 0.142) reads ${CONFDIR}/modules and the package's
    # /usr/share/initramfs-tools/modules.d/*, and no modules.d below /etc.
    assert data["__iommu_initramfs_path"] == vfio.INITRAMFS_TOOLS_MODULES
    assert data["__iommu_initramfs_tool"] == "initramfs-tools"
    assert _block(data).splitlines() == list(vfio.EARLY_MODULES)


def test_rhel_snippet_is_not_vfio_binds_file():
    data = _vars("RedHat.yml")
    assert data["__iommu_initramfs_path"].startswith("/etc/dracut.conf.d/")
    assert data["__iommu_initramfs_path"].endswith(".conf")
    assert data["__iommu_initramfs_path"] != vfio.DRACUT_CONF
    assert data["__iommu_initramfs_tool"] == "dracut"
    assert _block(data) == 'force_drivers+=" vfio vfio_iommu_type1 vfio_pci "'


def test_stale_image_check_covers_every_initramfs_file_of_vfio_bind():
    # A run killed between one of vfio_bind's writes and the rebuild is caught by the
    # next run only if the file is among the inputs whose mtimes the initramfs module
    # compares with the images (its own two files always are).
    debian = _vars("Debian.yml")
    assert debian["__iommu_initramfs_extra_inputs"] == []   # vfio_bind shares the modules file
    assert debian["__iommu_initramfs_image_pattern"] == "/boot/initrd.img-%s"
    rhel = _vars("RedHat.yml")
    assert rhel["__iommu_initramfs_extra_inputs"] == [vfio.DRACUT_CONF]
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


def test_vfio_role_rebuilds_the_same_images_from_vfio_binds_file():
    # Both roles rebuild through gpuhost.kvm.initramfs: the same images and generator,
    # and the vfio role's input is the file vfio_bind writes for that generator.
    for family, written in (("Debian", vfio.INITRAMFS_TOOLS_MODULES), ("RedHat", vfio.DRACUT_CONF)):
        iommu = _vars(family + ".yml")
        with open(os.path.join(ROLE, "..", "vfio", "vars", family + ".yml"), encoding="utf-8") as handle:
            role = yaml.safe_load(handle)
        assert role["__vfio_initramfs"] == iommu["__iommu_initramfs_tool"]
        assert role["__vfio_initramfs_image_pattern"] == iommu["__iommu_initramfs_image_pattern"]
        assert role["__vfio_initramfs_inputs"] == [written]
        assert role["__vfio_initramfs_argv"] == iommu["__iommu_initramfs_argv"]
