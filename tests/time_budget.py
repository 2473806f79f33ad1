# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab tests' time budget: CI stops a run at 90 minutes and then keeps no result at
all, and the lab's speed under TCG varies twofold from one day to the next (the site
converge took 356 s on 2026-11-30 and 930 s on 2026-12-01). tools/test starts the clock
(GPUHOST_TEST_STARTED) and sets the budget (GPUHOST_TEST_BUDGET_S); before each lab
test, the budget is checked against that test's duration on a slow day. The first lab
test that would end past the budget is skipped, and so is every lab test after it
(later tests need the earlier ones' steps), each naming the budget in its skip reason.
Without GPUHOST_TEST_STARTED, or with a budget of 0, nothing is skipped."""

# Seconds each lab test took on 2026-12-01, a slow day (a cold tools/test run of 96 minutes:
# tests/lab/, in tools/test's order), rounded up. The first lab test carries the image
# build and the first boot.
SLOW_DAY_SECONDS = {
    "test_lab_boots_and_answers_ssh": 420,
    "test_iommu_role_never_reboots_without_reboot_ok_and_its_arguments_apply_after_reboot": 600,
    "test_vfio_binding_and_vfs_survive_a_reboot": 240,
    "test_host_modules_scenario_passes_its_whole_sequence": 240,
    "test_check_mode_on_a_fresh_lab_changes_nothing": 500,
    "test_site_converges_reboots_for_the_kernel_arguments_and_validates": 1100,
    "test_second_run_changes_nothing": 400,
    "test_reboot_without_rerunning_brings_the_host_back": 420,
    "test_verify_after_the_reboot_reads_the_kernel_and_validates": 200,
    "test_concurrent_onboardings_get_the_free_gpu_once_and_keep_the_first_tenant": 420,
    "test_tenant_guest_scenario_serves_and_gates_the_tenant": 1250,
}
# A lab test not named above: a few SSH reads or one module run.
OTHER_LAB_TEST_SECONDS = 60


class TimeBudget:
    """``check(test, now)`` says why ``test`` is skipped, or None to run it."""

    def __init__(self, started, budget_s, slow_day_seconds=None):
        self.started = started
        self.budget_s = budget_s
        self.slow_day_seconds = SLOW_DAY_SECONDS if slow_day_seconds is None else slow_day_seconds
        self.exhausted = None

    @classmethod
    def from_environ(cls, environ):
        started = environ.get("GPUHOST_TEST_STARTED", "")
        budget = environ.get("GPUHOST_TEST_BUDGET_S", "") or "0"
        if not started or int(budget) <= 0:
            return None
        return cls(float(started), int(budget))

    def check(self, test, now):
        if self.exhausted is None:
            elapsed = now - self.started
            expected = self.slow_day_seconds.get(test, OTHER_LAB_TEST_SECONDS)
            if elapsed + expected <= self.budget_s:
                return None
            self.exhausted = (
                "time budget: %d s of tools/test's %d s (GPUHOST_TEST_BUDGET_S; CI stops at 90 minutes) were gone "
                "when %s, about %d s on a slow day, was due: it and every lab test after it are skipped. "
                "GPUHOST_TEST_BUDGET_S=0 runs them all" % (elapsed, self.budget_s, test, expected))
        return self.exhausted
