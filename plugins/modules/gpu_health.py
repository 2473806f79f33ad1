#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: gpu_health
short_description: Read the health of a tenant guest's NVIDIA GPUs and hold it to limits
version_added: 0.1.0
description:
  - Runs C(nvidia-smi -q -x) once in the guest and returns, per GPU, its name, UUID, PCI
    bus ID, driver version, temperature, power draw and limit, ECC mode with its volatile
    and aggregate uncorrected error counts, MIG mode (current and pending), persistence
    mode, retired pages or remapped rows where the GPU keeps them, the active clock event
    (throttle) reasons and the driver's recovery action (drivers 550 and later). A value
    the GPU or driver does not report is null.
  - Reads the guest kernel's log (C(dmesg)) for the NVIDIA driver's Xid reports, per GPU
    and Xid (O(read_xids)).
  - Evaluates the limits given (O(max_temperature_c), O(max_uncorrected_ecc),
    O(mig_must_be_off), O(persistence_must_be_on), O(recovery_action_must_be_none),
    O(throttle_reasons_must_be_clear), O(ignored_xids)) into findings, one per GPU and
    limit, each with its verdict and a sentence that names the fix; a finding that needs
    the host's operator names its C(action) (C(reset), C(reboot), C(drain_p2p) or
    C(service)). The benchmark and validate reports carry them.
  - MIG on a whole-GPU passthrough tenant is a failing finding (O(mig_must_be_off) is on
    by default); a GPU without MIG reports N/A, which passes.
  - Replaces the guest role's C(nvidia-smi -L) command task, whose list of names said
    nothing of the GPU's state.
  - The XML is parsed with a size bound and no entity expansion.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.read_only
options:
  nvidia_smi:
    description:
      - The nvidia-smi program, a name looked up on the PATH or an absolute path.
    type: str
    default: nvidia-smi
  max_temperature_c:
    description:
      - Highest GPU temperature, in degrees Celsius, that passes. Not set, no limit. A
        GPU that reports no temperature fails a limit that is set.
    type: float
  max_uncorrected_ecc:
    description:
      - Most uncorrected ECC errors since the driver loaded (the volatile count) that pass.
        Not set, no limit. The aggregate (lifetime) count, retired pages and remapped rows
        are reported, not held to it, since a GPU that remapped a row and was reset is sound.
      - When set, a C(memory_repair) finding per GPU fails a pending row remap or page
        retirement (action C(reset)) and a row remapping failure (action C(service)).
    type: int
  recovery_action_must_be_none:
    description:
      - Fail a GPU whose driver asks for a recovery action (C(gpu_recovery_action) other
        than None, such as a reset, a reboot or a peer-to-peer drain). Drivers before 550 do not
        report it, which passes.
    type: bool
    default: true
  throttle_reasons_must_be_clear:
    description:
      - The clock event (throttle) reasons that fail a GPU when active. The default holds
        the ones that mean the GPU is in trouble; C(gpu_idle), C(sw_power_cap) and the
        clock settings are normal. An empty list turns the check off.
    type: list
    elements: str
    choices: [gpu_idle, applications_clocks_setting, sw_power_cap, hw_slowdown, hw_thermal_slowdown,
              hw_power_brake_slowdown, sync_boost, sw_thermal_slowdown, display_clocks_setting]
    default: [hw_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, sw_thermal_slowdown]
  read_xids:
    description:
      - Read the guest kernel's log with O(dmesg) and fail a GPU with an Xid report that
        is not in O(ignored_xids). A log that cannot be read (C(kernel.dmesg_restrict)
        without root) is a failing finding that says so.
    type: bool
    default: true
  dmesg:
    description:
      - The dmesg program, a name looked up on the PATH or an absolute path.
    type: str
    default: dmesg
  ignored_xids:
    description:
      - Xids that are not held against the GPU. The default is the ones an application
        causes, for which NVIDIA's Xid catalog asks to restart the application (13, 31,
        43, 45).
    type: list
    elements: int
    default: [13, 31, 43, 45]
  mig_must_be_off:
    description:
      - Fail a GPU whose MIG mode is enabled, now or pending (whole-GPU passthrough).
    type: bool
    default: true
  persistence_must_be_on:
    description:
      - Fail a GPU whose persistence mode is not enabled (C(nvidia-persistenced) not
        running).
    type: bool
    default: false
  fail_on_findings:
    description:
      - Fail the task when a finding fails, with every failing finding in the message.
        V(false) only reports them (RV(passed) is false).
    type: bool
    default: false
notes:
  - The guest's driver must be loaded; when nvidia-smi cannot reach it, the module fails
    with nvidia-smi's own message.
seealso:
  - module: gpuhost.kvm.host_facts
"""

EXAMPLES = r"""
- name: Read the GPU's health, and hold it to the site's limits
  gpuhost.kvm.gpu_health:
    max_temperature_c: 85
    max_uncorrected_ecc: 0
    persistence_must_be_on: true
  register: gpu

- name: Show the findings
  ansible.builtin.debug:
    msg: "{{ gpu.findings | map(attribute='detail') | list }}"
"""

RETURN = r"""
health:
  description: What C(nvidia-smi -q -x) reported.
  returned: success
  type: dict
  contains:
    driver_version:
      description: The driver's version, or null.
      type: str
      sample: 535.54.03
    cuda_version:
      description: The CUDA version the driver supports, or null.
      type: str
      sample: "12.2"
    attached_gpus:
      description: The GPU count nvidia-smi printed.
      type: int
      sample: 1
    gpus:
      description:
        - One entry per GPU, with C(index), C(name), C(uuid), C(pci_bus_id),
          C(driver_version), C(virtualization_mode), C(temperature_c),
          C(temperature_slowdown_c), C(temperature_shutdown_c), C(power_draw_w) (drivers 570 and
          later, the one-second average), C(power_draw_instant_w) (570 and later), C(power_limit_w), C(ecc_enabled), C(ecc_pending_enabled),
          C(ecc_volatile_uncorrected), C(ecc_volatile_corrected),
          C(ecc_aggregate_uncorrected), C(ecc_aggregate_corrected), C(mig_enabled),
          C(mig_pending_enabled), C(mig_devices), C(persistence_enabled),
          C(retired_pages) and C(remapped_rows); null where not reported.
      type: list
      elements: dict
      sample:
        - index: 0
          name: Tesla T4
          pci_bus_id: "00000000:00:1E.0"
          temperature_c: 40.0
          power_draw_w: 26.78
          power_limit_w: 70.0
          ecc_enabled: true
          ecc_aggregate_uncorrected: 0
          mig_enabled: null
          persistence_enabled: false
findings:
  description:
    - One per GPU and limit, with C(gpu) (the PCI bus ID), C(name), C(check)
      (C(temperature), C(ecc), C(memory_repair), C(mig_off), C(persistence),
      C(recovery_action), C(throttle), C(xid) or C(gpu_present)), C(passed), C(limit),
      C(measured) and C(detail); C(action) (C(reset), C(reboot), C(drain_p2p), C(service))
      where the GPU needs its operator.
    - An C(xid) finding for a bus the kernel log names and nvidia-smi does not list (a
      GPU that fell off the bus).
  returned: success
  type: list
  elements: dict
  sample:
    - gpu: "00000000:01:00.0"
      name: NVIDIA A100-SXM4-80GB
      check: mig_off
      passed: false
      limit: "off"
      measured: "on"
      detail: MIG is on (pending on, 4 MIG device(s)) on a whole-GPU passthrough tenant
passed:
  description: Whether every finding passed.
  returned: success
  type: bool
  sample: false
failures:
  description: The details of the findings that failed.
  returned: success
  type: list
  elements: str
  sample: []
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.guest import gpu_health
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import new_module, run_module
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import finite_number, positive_int

# Xids are numbered in the hundreds; four digits is what the driver's log line holds.
MAX_XID = 9999

# Far above any GPU's shutdown threshold (about 100 C): a larger limit is a typo.
MAX_TEMPERATURE_LIMIT_C = 150


class GpuHealth(object):

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.health = None
        self.findings = []

    def limits(self):
        params = self.params
        limits = {"mig_must_be_off": params["mig_must_be_off"],
                  "persistence_must_be_on": params["persistence_must_be_on"],
                  "max_temperature_c": None, "max_uncorrected_ecc": None}
        if params["max_temperature_c"] is not None:
            limits["max_temperature_c"] = finite_number(
                params["max_temperature_c"], "max_temperature_c", maximum=MAX_TEMPERATURE_LIMIT_C,
                unit="degrees Celsius")
        if params["max_uncorrected_ecc"] is not None:
            limits["max_uncorrected_ecc"] = positive_int(params["max_uncorrected_ecc"], "max_uncorrected_ecc",
                                                         minimum=0)
        limits["recovery_action_must_be_none"] = params["recovery_action_must_be_none"]
        limits["throttle_reasons_must_be_clear"] = tuple(params["throttle_reasons_must_be_clear"] or ())
        limits["ignored_xids"] = tuple(positive_int(code, "ignored_xids[%d]" % index, minimum=0, maximum=MAX_XID)
                                       for index, code in enumerate(params["ignored_xids"] or ()))
        return limits

    def _program(self, option):
        program = self.params[option]
        return self.module.get_bin_path(program) if "/" not in program else program

    def run(self):
        limits = self.limits()
        program = self.params["nvidia_smi"]
        path = self._program("nvidia_smi")
        if not path:
            raise GpuhostError("%s is not installed (not on the PATH)" % program, field="nvidia_smi",
                               fix="install the NVIDIA driver in the guest (the guest role does, when it sees an "
                                   "NVIDIA GPU), or give the program's path")
        # No positional argument: nothing for "--" to protect.
        argv = [path, "-q", "-x"]
        try:
            rc, out, err = self.module.run_command(argv)
        except OSError as error:
            raise GpuhostError("cannot run %s: %s" % (path, error.strerror), field="nvidia_smi",
                               fix="give an executable nvidia-smi") from None
        if rc != 0:
            raise GpuhostError("%s -q -x failed (rc=%d): %s" % (path, rc, (out or err).strip()[:2000] or "no output"),
                               field="nvidia_smi",
                               fix="the driver does not reach the GPU: check that the kernel module is loaded "
                                   "(lsmod | grep nvidia), that the GPU is passed through (lspci -nn -d 10de:), "
                                   "and dmesg for NVRM errors")
        self.health = gpu_health.parse_nvidia_smi_xml(out)
        xids, unread = self.read_xids() if self.params["read_xids"] else (None, None)
        self.findings = gpu_health.health_findings(self.health, xids=xids, **limits)
        if unread:
            self.findings.append(gpu_health.unread_kernel_log_finding(unread))

    def read_xids(self):
        """(the Xid reports of the kernel log, None), or (None, why it was not read)."""
        path = self._program("dmesg")
        if not path:
            return None, "%s is not installed (not on the PATH)" % self.params["dmesg"]
        try:
            rc, out, err = self.module.run_command([path])
        except OSError as error:
            return None, "cannot run %s: %s" % (path, error.strerror)
        if rc != 0:
            return None, "%s failed (rc=%d): %s" % (path, rc, (err or out).strip()[:500] or "no output")
        return gpu_health.xid_events(out), None

    @property
    def summary(self):
        return gpu_health.health_summary(self.health or {}, self.findings)

    @property
    def failed(self):
        return self.params["fail_on_findings"] and not self.summary["passed"]

    @property
    def result(self):
        summary = self.summary
        result = {"changed": False, "health": self.health, "findings": self.findings,
                  "passed": summary["passed"], "failures": summary["failures"]}
        if self.health is not None:
            result["msg"] = ("GPU health: %d GPU(s), %s" % (len(self.health["gpus"]), "every finding passed"
                             if summary["passed"] else "FAILED: " + "; ".join(summary["failures"])))
        return result


def build_module():
    return new_module(
        AnsibleModule, argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            max_temperature_c=dict(type="float"),
            max_uncorrected_ecc=dict(type="int"),
            mig_must_be_off=dict(type="bool", default=True),
            persistence_must_be_on=dict(type="bool", default=False),
            fail_on_findings=dict(type="bool", default=False),
            recovery_action_must_be_none=dict(type="bool", default=True),
            throttle_reasons_must_be_clear=dict(type="list", elements="str",
                                                choices=list(gpu_health.THROTTLE_REASONS),
                                                default=list(gpu_health.HARDWARE_THROTTLE_REASONS)),
            read_xids=dict(type="bool", default=True),
            dmesg=dict(type="str", default="dmesg"),
            ignored_xids=dict(type="list", elements="int", default=list(gpu_health.APPLICATION_XIDS)),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    run_module(module, GpuHealth(module))


if __name__ == "__main__":
    main()
