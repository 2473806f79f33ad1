#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: kernel_cmdline
short_description: Ensure kernel arguments for the next boot and report the running kernel's
version_added: "0.1.0"
description:
  - The single owner of the kernel command line. In one module run it puts O(args) into
    the boot configuration, regenerates what the boot loader reads when needed, and says
    which arguments the running kernel (C(/proc/cmdline)) lacks.
  - V(grub) (Debian) - writes a drop-in that appends O(args) to C(GRUB_CMDLINE_LINUX) and
    runs O(grub_update_argv) when the drop-in changed or when a C(linux) line of the
    generated O(grub_cfg) lacks an argument, so a run killed between the two still
    regenerates next time. If the regeneration fails, the drop-in is put back as it was.
  - V(grubby) (RHEL, BLS entries) - reads C(grubby --info=DEFAULT) and, when an argument
    is missing, runs C(grubby --update-kernel=ALL --args=...).
  - With O(from_plan), the arguments a host plan needs come first (the iommu role's way) -
    the IOMMU, the plan's 1G hugepages reserved at boot, the CPU isolation and the
    C-state limit - and the module says what the running kernel reserved of those pages.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.change_attributes
options:
  args:
    description:
      - The kernel arguments, each one C(name) or C(name=value) token of letters, digits
        and C(_.,:/@+=-) (no whitespace, quotes, newlines or NUL), at most 64 in all.
      - With O(from_plan), more arguments, after the plan's.
      - One of O(args) and O(from_plan) is required.
      - Arguments that replace what the host boots or cut the operators off are refused
        unless O(allow_boot_replacing_args) - C(root=), C(init=), C(rdinit=),
        C(systemd.unit=), C(rd.systemd.unit=), the rescue and emergency words
        (C(single), C(rescue), C(emergency), C(s), C(S), C(1)), C(console=),
        C(net.ifnames=), C(biosdevname=), C(ip=), C(modprobe.blacklist=),
        C(module_blacklist=), and C(iommu=off), C(intel_iommu=off), C(amd_iommu=off).
    type: list
    elements: str
  from_plan:
    description:
      - The arguments a host plan (C(gpuhost_plan), docs/plan-format.md) needs, in this
        order - C(amd_iommu=on) when the vendor in C(/proc/cpuinfo) below O(root) is AMD,
        else C(intel_iommu=on); C(iommu=pt) and C(kvm.ignore_msrs=1) as asked; the 1G
        hugepages the plan reserves (C(default_hugepagesz=1G) when it uses no other
        size, C(hugepagesz=1G), then C(hugepages=0:N,1:M) per node on a kernel of 5.16
        or newer, which reads that form, else the host-wide C(hugepages=SUM), see
        RV(gigantic_fallback)); the isolation arguments; the C-state limit.
      - The running kernel (C(/proc/sys/kernel/osrelease) below O(root)) decides the
        form of C(hugepages=).
    type: dict
    suboptions:
      plan:
        description: The host plan; its C(hugepages), C(online_cpus) and C(housekeeping_cpus) are read.
        type: dict
        required: true
      iommu_passthrough:
        description: Add C(iommu=pt) (host devices keep identity mappings; the runbook's choice).
        type: bool
        default: true
      ignore_msrs:
        description: Add C(kvm.ignore_msrs=1) (guests that read unknown MSRs do not crash).
        type: bool
        default: true
      isolate_tenant_cpus:
        description:
          - Add C(isolcpus=managed_irq,domain,CPUS), C(nohz_full=CPUS) and
            C(rcu_nocbs=CPUS) for every online CPU that is not housekeeping, so that
            onboarding a tenant never needs a new command line.
        type: bool
        default: false
      max_cstate:
        description:
          - The deepest C-state the CPUs may enter, 0 to 9 - C(intel_idle.max_cstate=N)
            and C(processor.max_cstate=N) (each kernel ignores the one for the driver it
            does not run). Unset, no limit.
        type: int
  allow_boot_replacing_args:
    description:
      - Write the arguments of O(args) that replace what the host boots all the same
        (keep a console at hand for the reboot).
    type: bool
    default: false
  method:
    description:
      - V(auto) asks the host's files below O(root) (the collection's one detector, which
        host_facts' C(mechanisms) subset reports too) - V(grubby) when a grubby binary and
        BLS entries in C(/boot/loader/entries) exist, else V(grub) when update-grub or
        grub-mkconfig and C(/etc/default/grub) (or C(grub.d)) exist. Neither is a refusal
        that says what to install; RV(mechanism) holds the evidence.
    type: str
    choices: [auto, grub, grubby]
    default: auto
  grub_dropin:
    description: The GRUB drop-in the V(grub) method writes.
    type: path
    default: /etc/default/grub.d/90-gpuhost.cfg
  grub_cfg:
    description: The generated configuration the boot loader reads (V(grub) method).
    type: path
    default: /boot/grub/grub.cfg
  grub_update_argv:
    description: The command that regenerates O(grub_cfg).
    type: list
    elements: str
    default: [update-grub]
notes:
  - With O(root) other than V(/), files are written below O(root) but no host command
    runs (not C(update-grub), not C(grubby)); RV(skipped) lists what would have run.
  - Check mode runs the read-only C(grubby --info=DEFAULT) and nothing that writes.
attributes:
  diff_mode:
    details: Shows the GRUB drop-in (grubby edits are listed in RV(steps)).
seealso:
  - module: gpuhost.kvm.initramfs
"""

EXAMPLES = r"""
- name: Put the plan's kernel arguments into the boot configuration
  gpuhost.kvm.kernel_cmdline:
    from_plan:
      plan: "{{ gpuhost_plan }}"
      max_cstate: 1
    args: [quiet]
  register: cmdline

- name: Turn the IOMMU on for the next boot
  gpuhost.kvm.kernel_cmdline:
    args: [intel_iommu=on, iommu=pt]
  register: cmdline

- name: Reboot when the running kernel lacks an argument
  ansible.builtin.reboot:
  when: cmdline.reboot_required
"""

RETURN = r"""
method:
  description: The method used.
  returned: always
  type: str
  sample: grub
mechanism:
  description: With O(method=auto), the detector's answer - C(choice), C(source)
    (C(detected)), C(evidence) per candidate and C(notes) (evidence refused, such as a
    link out of O(root)).
  returned: when O(method=auto)
  type: dict
  sample: {choice: grubby, source: detected, evidence: {grubby: [/usr/sbin/grubby exists]}}
args:
  description: The arguments the next boot carries (with O(from_plan), the plan's first).
  returned: always
  type: list
  elements: str
  sample: [intel_iommu=on, iommu=pt, kvm.ignore_msrs=1, hugepagesz=1G, "hugepages=0:64,1:64"]
gigantic_fallback:
  description:
    - With O(from_plan), why the plan's 1G pages are reserved as one host-wide count and
      not per node (a kernel older than 5.16, or one whose release is unreadable), and
      what that risks; empty when they are per node or the plan has none.
  returned: always
  type: str
gigantic_shortfalls:
  description:
    - With O(from_plan), one line per node whose 1G pool the running kernel holds fewer
      pages of than the plan wants (all nodes together on a kernel older than 5.16). Read
      it after the reboot that applied the arguments.
  returned: always
  type: list
  elements: str
  sample: ["node 1: wanted 16 pages of 1G reserved at boot, got 9"]
missing_active:
  description: The arguments the running kernel's command line lacks.
  returned: always
  type: list
  elements: str
  sample: [intel_iommu=on]
missing_next_boot:
  description: The arguments the next boot's configuration lacked before this run (grub.cfg or the default BLS entry).
  returned: always
  type: list
  elements: str
  sample: []
reboot_required:
  description: Whether the running kernel lacks an argument.
  returned: always
  type: bool
steps:
  description: The planned (check mode) or applied steps, in order.
  returned: always
  type: list
  elements: str
  sample: ["update /etc/default/grub.d/90-gpuhost.cfg", "run update-grub"]
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
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.kernel_cmdline import cmdline_plan
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter


def build_module():
    spec = argument_spec(
        ROOT_ARGUMENT_SPEC,
        args=dict(type="list", elements="str"),
        from_plan=dict(type="dict", options=dict(
            plan=dict(type="dict", required=True),
            iommu_passthrough=dict(type="bool", default=True),
            ignore_msrs=dict(type="bool", default=True),
            isolate_tenant_cpus=dict(type="bool", default=False),
            max_cstate=dict(type="int"))),
        method=dict(type="str", choices=["auto", "grub", "grubby"], default="auto"),
        grub_dropin=dict(type="path", default="/etc/default/grub.d/90-gpuhost.cfg"),
        grub_cfg=dict(type="path", default="/boot/grub/grub.cfg"),
        grub_update_argv=dict(type="list", elements="str", default=["update-grub"]),
        allow_boot_replacing_args=dict(type="bool", default=False))
    return new_module(AnsibleModule, argument_spec=spec, supports_check_mode=True,
                      required_one_of=[("args", "from_plan")])


class KernelCmdline(PlannedChange):
    """Plans and applies one kernel_cmdline task."""

    def __init__(self, module, writer=None, run_command=None):
        super(KernelCmdline, self).__init__(module)
        self.writer = writer or HostWriter(module.params["root"])
        self.commands = host_commands(module, run_command)

    def decide(self):
        return cmdline_plan(self.writer, self.module.params, self.commands)

    @property
    def result(self):
        plan = self.plan
        extra = {"mechanism": plan.mechanism} if plan and plan.mechanism else {}
        return self.change_result(method=plan.method if plan else self.module.params["method"],
                                  **extra,
                                  args=list(plan.args) if plan else [],
                                  gigantic_fallback=plan.gigantic_fallback if plan else "",
                                  gigantic_shortfalls=list(plan.gigantic_shortfalls) if plan else [],
                                  missing_active=list(plan.missing_active) if plan else [],
                                  missing_next_boot=list(plan.missing_next_boot) if plan else [],
                                  reboot_required=bool(plan and plan.missing_active),
                                  skipped=list(plan.skipped) if plan else [])


def main():
    module = build_module()
    run_module(module, KernelCmdline(module), changes_host=True)


if __name__ == "__main__":
    main()
