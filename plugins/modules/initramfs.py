#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: initramfs
short_description: Keep the GPU-driver blacklist and early vfio modules in the initramfs
version_added: "0.1.0"
description:
  - The single owner of the initramfs. In one module run it writes the modprobe.d
    blacklist, the early-module configuration, checks every installed kernel's image
    against its inputs and rebuilds the images when needed.
  - The early modules are a marked block of O(early_modules_path), so a file shared with
    the administrator (initramfs-tools' C(/etc/initramfs-tools/modules)) keeps its other
    lines; with O(tool=dracut) the block is a C(force_drivers+=) line.
  - Rebuilds when an input changed, or when an installed kernel's image (O(image_pattern))
    is older than the newest input (O(extra_inputs) included), so a run killed before the
    rebuild still rebuilds next time. If the rebuild fails, the files it wrote are put
    back as they were.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.change_attributes
options:
  tool:
    description:
      - The initramfs generator the host uses.
      - V(auto) asks the host's files below O(root) (the collection's one detector, which
        host_facts' C(mechanisms) subset reports too) - V(dracut) when a dracut binary and
        C(/etc/dracut.conf.d) exist (Debian's dracut package replaces initramfs-tools,
        whose configuration stays), else V(initramfs-tools) when update-initramfs and
        C(/etc/initramfs-tools) exist. Neither is a refusal that says what to install.
    type: str
    choices: [auto, initramfs-tools, dracut]
    default: initramfs-tools
  blacklist_path:
    description: The modprobe.d file that blacklists O(blacklist_modules).
    type: path
    default: /etc/modprobe.d/gpuhost-blacklist-gpu.conf
  blacklist_modules:
    description: Kernel modules no host driver may load for the GPUs. Empty with an empty
      O(module_options) - no blacklist file is managed.
    type: list
    elements: str
    default: []
  module_options:
    description: C(options) lines of the blacklist file, without the word C(options).
    type: list
    elements: str
    default: []
  early_modules_path:
    description: The file whose marked block lists O(early_modules).
    type: path
    default: /etc/initramfs-tools/modules
  early_modules:
    description: The modules the initramfs loads first. Empty - the file is not managed.
    type: list
    elements: str
    default: []
  install_items:
    description:
      - With O(tool=dracut), the files dracut installs into the image (its
        C(install_items)), such as vfio_bind's
        RV(gpuhost.kvm.vfio_bind#module:initramfs_files). They are written to
        O(install_items_path), a whole file of this module's own, and their ages count
        as inputs. An empty list removes that file.
      - Unset, the file is not managed. Refused with O(tool=initramfs-tools), which builds
        only its modules file into the image.
      - Plain absolute paths only (dracut.conf is a shell script).
    type: list
    elements: str
  install_items_path:
    description: The dracut configuration file that holds O(install_items).
    type: path
    default: /etc/dracut.conf.d/gpuhost-vfio.conf
  extra_inputs:
    description: Other files that go into the image (written by other modules); only
      their age is read.
    type: list
    elements: path
    default: []
  force:
    description:
      - Rebuild even when no input changed and no image is older than an input, for a
        caller that knows another module changed a file the generator builds in (such as
        vfio_bind's RV(gpuhost.kvm.vfio_bind#module:initramfs_rebuild_required)).
    type: bool
    default: false
  image_pattern:
    description:
      - Each installed kernel's image, with C(%s) for the kernel version. Needed; not
        marked required so that an undecided O(tool=auto) is refused first, with the fix
        (the roles pass host_facts' C(gpuhost_mechanisms.initramfs.image_pattern)).
    type: str
  rebuild_argv:
    description:
      - The command that rebuilds every installed kernel's image. Needed, as O(image_pattern).
    type: list
    elements: str
notes:
  - With O(root) other than V(/), files are written below O(root) but the rebuild never
    runs; RV(skipped) lists it.
attributes:
  diff_mode:
    details: Shows every file written.
seealso:
  - module: gpuhost.kvm.kernel_cmdline
"""

EXAMPLES = r"""
- name: Blacklist the GPU drivers and load vfio early (Debian)
  gpuhost.kvm.initramfs:
    blacklist_modules: [nouveau, nvidia]
    module_options: ["nouveau modeset=0"]
    early_modules: [vfio, vfio_iommu_type1, vfio_pci]
    image_pattern: /boot/initrd.img-%s
    rebuild_argv: [update-initramfs, -u, -k, all]
  register: initramfs

- name: Install vfio_bind's rules and overrides into the image and rebuild (RHEL)
  gpuhost.kvm.initramfs:
    tool: dracut
    install_items: "{{ bind.initramfs_files }}"
    image_pattern: /boot/initramfs-%s.img
    rebuild_argv: [dracut, --force, --regenerate-all]
"""

RETURN = r"""
tool:
  description: The generator used (the detected one with O(tool=auto)).
  returned: success
  type: str
  sample: dracut
mechanism:
  description: With O(tool=auto), the detector's answer - C(choice), C(source)
    (C(detected)), C(evidence) per candidate and C(notes).
  returned: when O(tool=auto)
  type: dict
rebuilt:
  description: Whether the images were rebuilt (check mode - would be).
  returned: always
  type: bool
stale:
  description: The images older than the newest input, before this run.
  returned: always
  type: list
  elements: str
  sample: [/boot/initrd.img-6.1.0-18-amd64]
reboot_required:
  description: Whether the next boot needs a new image (rebuilt by this run, or still to be
    rebuilt because O(root) is not V(/)).
  returned: always
  type: bool
steps:
  description: The planned (check mode) or applied steps, in order.
  returned: always
  type: list
  elements: str
  sample: ["update /etc/initramfs-tools/modules", "run update-initramfs -u -k all"]
skipped:
  description: The host commands not run because O(root) is not V(/).
  returned: always
  type: list
  elements: str
field:
  description: On failure, the option at fault.
  returned: failure
  type: str
details:
  description: On a failed step, the step, what was rolled back and what could not be.
  returned: failure
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.boot_files import host_commands
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.initramfs import (
    DRACUT_INSTALL_ITEMS_PATH, initramfs_plan, INITRAMFS_TOOLS)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter


def build_module():
    spec = argument_spec(
        ROOT_ARGUMENT_SPEC,
        tool=dict(type="str", choices=["auto"] + list(INITRAMFS_TOOLS), default="initramfs-tools"),
        blacklist_path=dict(type="path", default="/etc/modprobe.d/gpuhost-blacklist-gpu.conf"),
        blacklist_modules=dict(type="list", elements="str", default=[]),
        module_options=dict(type="list", elements="str", default=[]),
        early_modules_path=dict(type="path", default="/etc/initramfs-tools/modules"),
        early_modules=dict(type="list", elements="str", default=[]),
        install_items=dict(type="list", elements="str"),
        install_items_path=dict(type="path", default=DRACUT_INSTALL_ITEMS_PATH),
        extra_inputs=dict(type="list", elements="path", default=[]),
        force=dict(type="bool", default=False),
        image_pattern=dict(type="str"),
        rebuild_argv=dict(type="list", elements="str"))
    return new_module(AnsibleModule, argument_spec=spec, supports_check_mode=True)


class Initramfs(PlannedChange):
    """Plans and applies one initramfs task."""

    def __init__(self, module, writer=None, run_command=None):
        super(Initramfs, self).__init__(module)
        self.writer = writer or HostWriter(module.params["root"])
        self.commands = host_commands(module, run_command)

    def decide(self):
        return initramfs_plan(self.writer, self.module.params, self.commands)

    @property
    def result(self):
        plan = self.plan
        extra = {"mechanism": plan.mechanism} if plan and plan.mechanism else {}
        if plan:
            extra["tool"] = plan.method
        return self.change_result(**extra, rebuilt=bool(self.done and plan.rebuild and not plan.skipped),
                                  stale=list(plan.stale) if plan else [],
                                  reboot_required=bool(plan and plan.rebuild),
                                  skipped=list(plan.skipped) if plan else [])


def main():
    module = build_module()
    run_module(module, Initramfs(module), changes_host=True)


if __name__ == "__main__":
    main()
