# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The molecule scenario molecule/host_modules on the running lab: the whole sequence
(syntax, create, prepare, check, converge, idempotence, verify, cleanup, destroy) with
the real molecule, reusing this session's lab (GPUHOST_LAB_KEEP=1: create finds it
running, destroy leaves it). Runs after test_modules_on_lab.py, whose last test gives
the devices back; the scenario's cleanup gives them back again for the tests after it.

The default scenario (site.yml converged on the lab) runs step by step in
tests/lab/test_site_on_lab.py."""

import os

from conftest import RUN_DIR, molecule_steps_in_order, reset_molecule, run_molecule

SCENARIO_STEPS = ["syntax", "create", "prepare", "check", "converge", "idempotence",
                  "verify", "cleanup", "destroy"]


def test_host_modules_scenario_passes_its_whole_sequence(lab):
    env = lab.ansible_env(GPUHOST_LAB_KEEP="1", GPUHOST_LAB_RUN=RUN_DIR,
                          MOLECULE_NO_LOG="false", NO_COLOR="1")
    # From no state: one left by a killed run made molecule skip create (2026-12-02).
    reset_molecule("host_modules", env)
    output = run_molecule("host_modules", "test", env, timeout=1500)
    # Every step of the sequence ran and succeeded, in order.
    molecule_steps_in_order(output, "host_modules", SCENARIO_STEPS)
    # The lab is as the scenario found it: GPU back on its native driver, no VFs.
    assert os.path.basename(lab.ssh("readlink /sys/bus/pci/devices/0000:41:00.0/driver")
                            .stdout.strip()) == "bochs-drm"
    assert lab.read("/sys/bus/pci/devices/0000:22:00.0/sriov_numvfs").strip() == "0"
