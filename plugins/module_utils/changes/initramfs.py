# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""initramfs' core: the host driver blacklist, the early-module block, dracut's install
items, and the rebuild when an input is newer than an installed kernel's image
(boot_files.py says why)."""

from __future__ import annotations

import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.boot_files import BootPlan, command_step, host_path, validate_argv
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.blocks import add_block_step, replace_block
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import FileChange
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import mechanisms
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.host_facts import check_image_pattern, read_initramfs

# -- initramfs -----------------------------------------------------------------------------

INITRAMFS_TOOLS = ("initramfs-tools", "dracut")
BLACKLIST_HEADER = ("# Managed by gpuhost.kvm (iommu role): this host passes its GPUs through whole,\n"
                    "# so no host driver may claim them before vfio-pci (runbook section 4).\n")
EARLY_MODULES_MARKER = "# {mark} gpuhost.kvm iommu role: load vfio-pci before any GPU driver"
_MODULE_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MODULE_OPTION_RE = re.compile(r"[A-Za-z0-9_-]{1,64}( [A-Za-z0-9_.,=-]{1,128})+")
MAX_MODULES = 64
# dracut's install_items file (mechanisms.py, which lists it among dracut's inputs);
# vfio_bind wrote it itself before, and the same path takes over what it left.
DRACUT_INSTALL_ITEMS_PATH = mechanisms.DRACUT_INSTALL_ITEMS_PATH
INSTALL_ITEMS_HEADER = ("# Managed by gpuhost.kvm (initramfs module): the files the vfio-pci binding\n"
                        "# needs in the initramfs (vfio_bind's initramfs_files).\n")
MAX_INSTALL_ITEMS = 256
_INSTALL_ITEM_RE = re.compile(r"/[A-Za-z0-9_.@:+-][A-Za-z0-9_.@:+/-]{0,254}")


def validate_module_names(names, field):
    """Kernel module names, each one plain token; a GpuhostError names the bad one."""
    if not isinstance(names, list) or len(names) > MAX_MODULES:
        raise GpuhostError("give at most %d module names" % MAX_MODULES, field=field,
                           fix="list the kernel modules by name")
    for index, name in enumerate(names):
        if not isinstance(name, str) or not _MODULE_NAME_RE.fullmatch(name):
            raise GpuhostError("%r is not a kernel module name" % (name,),
                               field="%s[%d]" % (field, index),
                               fix="give the module's name (letters, digits, _ and -)")
    return list(names)


def validate_module_options(options, field):
    """``modprobe.d`` option lines (``module opt=value ...``) without the ``options``."""
    if not isinstance(options, list) or len(options) > MAX_MODULES:
        raise GpuhostError("give at most %d option lines" % MAX_MODULES, field=field,
                           fix="list lines such as 'nouveau modeset=0'")
    for index, line in enumerate(options):
        if not isinstance(line, str) or not _MODULE_OPTION_RE.fullmatch(line):
            raise GpuhostError("%r is not a module option line" % (line,),
                               field="%s[%d]" % (field, index),
                               fix="give 'module option=value', such as 'nouveau modeset=0'")
    return list(options)


def validate_install_items(items, field):
    """Absolute paths dracut can take in its space-separated, double-quoted
    ``install_items+=" ... "``: no blanks, quotes, ``$`` or ``..`` (dracut.conf is
    sourced by bash, so anything else could run)."""
    if not isinstance(items, list) or len(items) > MAX_INSTALL_ITEMS:
        raise GpuhostError("give at most %d install items" % MAX_INSTALL_ITEMS, field=field,
                           fix="list absolute file paths, such as vfio_bind's initramfs_files")
    for index, item in enumerate(items):
        if not isinstance(item, str) or not _INSTALL_ITEM_RE.fullmatch(item) \
                or "/../" in item + "/" or "/./" in item + "/" or "//" in item:
            raise GpuhostError("%r is not a plain absolute file path" % (item,),
                               field="%s[%d]" % (field, index),
                               fix="give absolute paths of letters, digits and _ . @ : + - /")
    return sorted(set(items))


def install_items_content(items):
    """The dracut configuration that installs ``items`` into the image."""
    return INSTALL_ITEMS_HEADER + 'install_items+=" %s "\n' % " ".join(items)


def blacklist_content(modules, options):
    """The modprobe.d file that keeps ``modules`` off the GPUs (what the iommu role wrote
    before the initramfs module, byte for byte)."""
    return (BLACKLIST_HEADER + "".join("blacklist %s\n" % name for name in modules)
            + "".join("options %s\n" % line for line in options))


def early_modules_block(tool, modules):
    """The lines of the marked block that makes ``tool`` load ``modules`` first:
    initramfs-tools reads one module per line, dracut a force_drivers+= line."""
    if tool == "dracut":
        return 'force_drivers+=" %s "' % " ".join(modules)
    return "\n".join(modules)


def initramfs_plan(writer, params, run_command):
    """The initramfs module's plan: the blacklist file, the early-module block, and the
    rebuild when an input changed or an installed kernel's image is older than the
    newest input (read from the host, so a killed run still rebuilds next time)."""
    tool = params.get("tool") or "initramfs-tools"
    mechanism = None
    if tool == "auto":
        # The one place that decides (host/mechanisms.py): dracut with dracut.conf.d wins
        # over update-initramfs with /etc/initramfs-tools; neither is a refusal.
        mechanism = mechanisms.chosen("initramfs", writer.root, field="tool")
        tool = mechanism["choice"]
    pattern = params.get("image_pattern")
    check_image_pattern(pattern, field="image_pattern")
    argv = validate_argv(params.get("rebuild_argv"), "rebuild_argv")
    plan = BootPlan(method=tool, mechanism=mechanism)
    inputs = []
    blacklist = validate_module_names(params.get("blacklist_modules") or [], "blacklist_modules")
    options = validate_module_options(params.get("module_options") or [], "module_options")
    if blacklist or options:
        path = host_path(params.get("blacklist_path"), "blacklist_path")
        plan.changes.put_file(writer, path, blacklist_content(blacklist, options), mode=0o644,
                              field="blacklist_path")
        inputs.append(path)
    early = validate_module_names(params.get("early_modules") or [], "early_modules")
    if early:
        path = host_path(params.get("early_modules_path"), "early_modules_path")
        before = writer.read_file(path, "early_modules_path")
        block = early_modules_block(tool, early)
        after = replace_block(before.encode("utf-8") if before is not None else None,
                              block, EARLY_MODULES_MARKER).decode("utf-8")
        if after != before:
            # the modules file is shared (host_files, the admin's own lines): the block
            # is merged into it under its lock when the step runs
            plan.changes.files.append(FileChange(path, before, after, 0o644))
            add_block_step(plan.changes, writer, path, block, EARLY_MODULES_MARKER, 0o644,
                           field="early_modules_path",
                           description="%s %s" % ("create" if before is None else "update", path))
        inputs.append(path)
    items = params.get("install_items")
    if items is not None:
        if tool != "dracut":
            raise GpuhostError(
                "install_items is dracut's; %s builds only its own modules file into the "
                "image" % tool, field="install_items",
                fix="leave install_items unset with initramfs-tools: vfio_bind's udev rules "
                    "and overrides act after the switch to the real root")
        items = validate_install_items(items, "install_items")
        path = host_path(params.get("install_items_path"), "install_items_path")
        # None removes the file: no binding left needs anything in the image.
        plan.changes.put_file(writer, path, install_items_content(items) if items else None,
                              mode=0o644, field="install_items_path")
        # The items' own ages count: a rule written by a run killed before this one's
        # rebuild is newer than the image.
        inputs.extend([path] + items)
    for index, path in enumerate(params.get("extra_inputs") or []):
        inputs.append(host_path(path, "extra_inputs[%d]" % index))
    plan.stale = read_initramfs(inputs, pattern, writer.root)["stale"]
    plan.rebuild = bool(plan.changes) or bool(plan.stale) or bool(params.get("force"))
    if plan.rebuild:
        command_step(plan, run_command, argv, "rebuild_argv",
                     "read the generator's error and run again; the files were put back, so "
                     "the next run rebuilds from scratch")
    return plan
