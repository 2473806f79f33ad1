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

import jinja2
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuhost.kvm.plugins.module_utils import vfio

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "iommu")


def _vars(name):
    with open(os.path.join(ROLE, "vars", name), encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        data.update(yaml.safe_load(handle))
    return data


def _render(data, key):
    """The value as Ansible renders it (its own Templar, not plain Jinja: the two differ,
    for one in backslash escapes inside Jinja string literals)."""
    trusted = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in data.items()}
    return Templar(loader=DataLoader(), variables=trusted).template(trusted[key])


def test_debian_block_goes_where_mkinitramfs_reads_and_holds_vfio_binds_modules():
    data = _vars("Debian.yml")
    # mkinitramfs (initramfs-tools 0.142) reads ${CONFDIR}/modules and the package's
    # /usr/share/initramfs-tools/modules.d/*, and no modules.d below /etc.
    assert data["__iommu_initramfs_path"] == vfio.INITRAMFS_TOOLS_MODULES
    lines = _render(data, "__iommu_initramfs_block").splitlines()
    assert lines == list(vfio.EARLY_MODULES)


def test_rhel_snippet_is_not_vfio_binds_file():
    data = _vars("RedHat.yml")
    assert data["__iommu_initramfs_path"].startswith("/etc/dracut.conf.d/")
    assert data["__iommu_initramfs_path"].endswith(".conf")
    assert data["__iommu_initramfs_path"] != vfio.DRACUT_CONF
    assert _render(data, "__iommu_initramfs_block") == 'force_drivers+=" vfio vfio_iommu_type1 vfio_pci "'


def _inputs(data):
    return [jinja2.Template(item).render(**data) for item in data["__iommu_initramfs_inputs"]]


def test_stale_image_check_covers_every_initramfs_file_of_the_role_and_of_vfio_bind():
    # A run killed between one of these writes and the rebuild is caught by the next run
    # only if the file is among the inputs whose mtimes it compares with the images.
    debian = _vars("Debian.yml")
    assert _inputs(debian) == [debian["__iommu_blacklist_path"], vfio.INITRAMFS_TOOLS_MODULES]
    assert debian["__iommu_initramfs_image_pattern"] == "/boot/initrd.img-%s"
    rhel = _vars("RedHat.yml")
    assert _inputs(rhel) == [rhel["__iommu_blacklist_path"], rhel["__iommu_initramfs_path"],
                             vfio.DRACUT_CONF]
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
