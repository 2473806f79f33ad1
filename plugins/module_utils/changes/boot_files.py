# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the generated boot files (GRUB's grub.cfg, the initramfs images) are up to
date with the inputs the roles write, decided from the host's files rather than from
what the current run changed.

A run killed after writing an input and before regenerating from it (``update-grub``,
``update-initramfs``, ``dracut``) leaves the input already in place: the next run finds it
unchanged, and a regeneration keyed on "this task changed" never happens. The lab's
interrupted-converge proof (seed 3, killed at the GRUB drop-in) showed exactly that: the
re-run rebooted into the old command line. So the roles regenerate when an input changed
*or* when the generated file does not reflect the inputs:

- grub.cfg: a ``linux`` line of the generated configuration lacks a kernel argument
  (every generated entry carries GRUB_CMDLINE_LINUX, so any one of them is a witness);
- initramfs: an installed kernel's image is older than the newest input (read by
  host_facts.read_initramfs, the same decision from the image files' ages).

Here: what both boot modules share, the plan and the host commands that regenerate the
files; kernel_cmdline.py and initramfs.py are the two cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.roots import is_live_root
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import absolute_path


# -- the host commands that regenerate boot files --------------------------------------------

def validate_argv(argv, field):
    """A command as a non-empty list of strings without NUL or newlines."""
    if not isinstance(argv, list) or not argv or len(argv) > 32:
        raise GpuhostError("the command must be a list of 1 to 32 words", field=field,
                           fix="give it as a list, such as [update-grub]")
    for index, word in enumerate(argv):
        if not isinstance(word, str) or not word or "\0" in word or "\n" in word:
            raise GpuhostError("%r is not a command word" % (word,),
                               field="%s[%d]" % (field, index),
                               fix="give plain words without NUL or newlines")
    return list(argv)


def host_commands(module, run_command):
    """The command runner: the one given (tests), the module's on the running host,
    None below another root (nothing may run against a tree that is not the host)."""
    if run_command is not None:
        return run_command
    if is_live_root(module.params["root"]):
        return lambda argv: module.run_command(argv, check_rc=False)
    return None


def add_command_step(changes, run_command, argv, field, fix):
    """A step that runs ``argv`` through ``run_command`` (AnsibleModule.run_command's
    shape) and fails, rolling back the steps before it, when it exits non-zero."""
    def apply():
        rc, dummy, err = run_command(argv)
        if rc != 0:
            tail = " ".join((err or "").strip().splitlines()[-3:])
            raise GpuhostError("%s exited %d%s" % (" ".join(argv), rc, ": " + tail if tail else ""),
                               field=field, fix=fix)
    changes.add("run %s" % " ".join(argv), apply)


@dataclass
class BootPlan:
    """A boot module's change set and what it found."""

    changes: ChangeSet = dataclass_field(default_factory=ChangeSet)
    method: str = ""
    missing_active: List[str] = dataclass_field(default_factory=list)
    missing_next_boot: List[str] = dataclass_field(default_factory=list)
    skipped: List[str] = dataclass_field(default_factory=list)
    stale: List[str] = dataclass_field(default_factory=list)
    rebuild: bool = False
    # The detector's answer (choice, source, evidence) when the method was auto.
    mechanism: Optional[dict] = None
    # kernel_cmdline: the arguments the next boot must carry, and with a host plan, why
    # its 1G pages are reserved host-wide ("" when per node) and which pools the
    # running kernel left short.
    args: List[str] = dataclass_field(default_factory=list)
    gigantic_fallback: str = ""
    gigantic_shortfalls: List[str] = dataclass_field(default_factory=list)


REGENERATE_FIX = "read the command's error, repair the boot loader setup and run again"


def command_step(plan, run_command, argv, field_name, fix):
    if run_command is None:
        plan.skipped.append(" ".join(argv))
    else:
        add_command_step(plan.changes, run_command, argv, field_name, fix)


def host_path(value, field_name):
    """``value`` as given, once the shared validator has found it an absolute path
    without control characters (the writer refuses a '..' and the root folder)."""
    absolute_path(value, field_name, kind="file")
    return value
