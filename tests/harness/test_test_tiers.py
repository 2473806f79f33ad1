# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The two proof tiers: tools/test (CI, -m "not acceptance") and tools/acceptance (every
test). Which lab proofs are acceptance-only is pinned here, read from the test files'
decorators, so that a proof does not drift out of CI (or into it) unnoticed."""

import ast
import configparser
import glob
import os

from support import REPO, TESTS

ACCEPTANCE_ONLY = {
    "test_lab_boot.py": {
        "test_iommu_role_never_reboots_without_reboot_ok_and_its_arguments_apply_after_reboot",
        "test_iommu_reboot_is_refused_while_a_domain_runs_and_drains_it_with_gpuhost_drain"},
    "test_site_on_lab.py": {
        "test_check_mode_on_a_fresh_lab_changes_nothing",
        "test_reboot_without_rerunning_brings_the_host_back",
        "test_verify_after_the_reboot_reads_the_kernel_and_validates",
        "test_concurrent_onboardings_get_the_free_gpu_once_and_keep_the_first_tenant",
        "test_interrupted_converge_then_rerun_reaches_the_uninterrupted_state",
        "test_default_scenario_destroys_the_lab_and_creates_it_from_a_stopped_lab"},
    "test_tenant_guest_on_lab.py": {"test_tenant_guest_scenario_serves_and_gates_the_tenant"},
    # L2 kernels in a tenant (TCG inside TCG): for its MSI/MSI-X lines, ~10 min; through
    # OVMF with the 64 GiB BAR, ~10 min (551 s to the guest's /init, 2026-12-05).
    "test_modules_on_lab.py": {"test_planned_tenant_l2_kernel_enables_msi_and_the_hook_pins_it",
                               "test_uefi_tenant_maps_the_64_gib_bar_of_the_gpu_behind_the_switch"},
    # The dracut variant, a lab of its own.
    "test_dracut_on_lab.py": {
        "test_the_dracut_lab_has_no_initramfs_tools_and_host_facts_detect_dracut",
        "test_site_converges_the_dracut_lab_through_its_iommu_reboot",
        "test_the_running_kernels_dracut_image_loads_vfio_pci_first",
        "test_after_a_reboot_vfio_pci_has_the_gpu_functions_before_any_other_driver"},
    # The EL9-like variant (Debian 11, Python 3.9, kernel 5.10, dracut), a lab of its own
    # converged by the oldest ansible-core.
    "test_el9like_on_lab.py": {
        "test_the_el9like_lab_has_python_3_9_kernel_5_10_dracut_and_the_oldest_ansible_core",
        "test_site_converges_with_the_oldest_ansible_core_on_the_host_wide_1g_fallback",
        "test_second_run_with_the_oldest_ansible_core_changes_nothing"},
}
# The site proofs CI keeps: the converge (with its reboot and validate) and idempotence.
IN_CI = {"test_site_on_lab.py": {"test_site_converges_reboots_for_the_kernel_arguments_and_validates",
                                 "test_second_run_changes_nothing"}}


def _marks(decorator):
    """'acceptance' for @pytest.mark.acceptance (called or not)."""
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
        return node.attr
    return None


def _tests_by_mark(path):
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    marked, unmarked = set(), set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            marks = {_marks(d) for d in node.decorator_list}
            (marked if "acceptance" in marks else unmarked).add(node.name)
    return marked, unmarked


def test_exactly_the_listed_lab_proofs_are_acceptance_only():
    found = {}
    # tests/fixtures is left out: its sysfs dumps are full of symlinks (pytest.ini)
    paths = [path for directory in ("unit", "integration", "reliability", "quality", "lab")
             for path in glob.glob(os.path.join(TESTS, directory, "test_*.py"))]
    for path in sorted(paths):
        marked, unmarked = _tests_by_mark(path)
        if marked:
            found[os.path.basename(path)] = marked
        for name, keep in IN_CI.items():
            if os.path.basename(path) == name:
                assert keep <= unmarked, keep - unmarked
    assert found == ACCEPTANCE_ONLY


def test_the_tests_that_start_from_a_first_boot_again_run_last_and_are_acceptance_only():
    with open(os.path.join(TESTS, "lab", "conftest.py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    names = [node.value for node in tree.body if isinstance(node, ast.Assign)
             and [t.id for t in node.targets] == ["FIRST_BOOT_AGAIN"]][0]
    assert set(ast.literal_eval(names)) <= ACCEPTANCE_ONLY["test_site_on_lab.py"]


def test_the_files_that_boot_a_lab_of_their_own_are_acceptance_only():
    with open(os.path.join(TESTS, "lab", "conftest.py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    names = [node.value for node in tree.body if isinstance(node, ast.Assign)
             and [t.id for t in node.targets] == ["OWN_LAB_FILES"]][0]
    for name in ast.literal_eval(names):
        marked, unmarked = _tests_by_mark(os.path.join(TESTS, "lab", name))
        assert marked == ACCEPTANCE_ONLY[name] and not unmarked, (name, unmarked)


def test_the_marker_is_declared_and_the_old_one_is_gone():
    ini = configparser.ConfigParser()
    ini.read(os.path.join(REPO, "pytest.ini"))
    markers = [line.split(":")[0].strip() for line in ini["pytest"]["markers"].splitlines() if ":" in line]
    assert "acceptance" in markers and "lab_converge" not in markers
    for path in [os.path.join(REPO, "tools", name) for name in ("test", "acceptance")] + [os.path.join(REPO, "README.md")]:
        with open(path, encoding="utf-8") as handle:
            assert "lab_converge" not in handle.read(), path
