# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RHEL 9's platform Python (3.9) as the modules' interpreter: Debian 11's python3.9 in a
root that tools/py39-root builds once (tools/setup runs it), started on that root's own
loader and libraries by its wrapper. The ``module_python`` fixture (tests/conftest.py)
runs a module CLI test once with the test's usual interpreter and once with this one.

``RUNS`` names, for every module in plugins/modules, the test whose Python 3.9 run
executes it; that run checks that it did (the wrapper's log of the AnsiballZ files it
started), and tests/unit/modules/test_py39_coverage.py that no module is missing."""

import os
import subprocess

import pytest

from . import REPO

TOOL = os.path.join(REPO, "tools", "py39-root")

_CLI = "tests/integration/test_host_modules_cli.py"
_PLAYBOOKS = "tests/integration/test_playbooks.py"
_RUNS_OF_TESTS = {
    "tests/integration/test_facts_module_cli.py::test_runs_against_a_fixture_root_in_check_mode":
        ["iommu_groups_facts"],
    "tests/integration/test_facts_module_cli.py::test_host_facts_platform_gives_setups_own_facts":
        ["host_facts"],
    _CLI + "::test_vfio_bind_check_mode_plans_without_touching_the_tree": ["vfio_bind"],
    _CLI + "::test_sriov_vfs_check_mode_and_too_many_vfs": ["sriov_vfs"],
    _CLI + "::test_irq_affinity_check_mode_bad_cpus_and_no_op": ["irq_affinity"],
    _CLI + "::test_fabric_partition_with_stubbed_fmpm_activates_once_through_ansible": ["fabric_partition"],
    "tests/integration/test_numa_cpuset_cli.py::test_module_plans_the_runbook_tenant_from_a_root_tree":
        ["numa_cpuset"],
    "tests/integration/test_libvirt_pinned_domain_cli.py::test_check_mode_reads_the_runbook_host_through_root":
        ["libvirt_pinned_domain"],
    _PLAYBOOKS + "::test_site_check_mode_on_the_runbook_host_completes_without_failures":
        ["host_facts", "host_files", "host_units", "initramfs", "kernel_cmdline",
         "vfio_bind", "sriov_vfs", "irq_affinity", "tenant_ledger", "libvirt_pinned_domain"],
    "tests/integration/test_tenant_drain_libvirt.py::test_ansible_run_of_checked_fails_naming_the_running_tenant":
        ["tenant_drain"],
    "tests/integration/test_offboard_playbook.py::test_a_refused_scrub_keeps_the_tenant_in_the_ledger":
        ["tenant_scrub", "libvirt_pinned_domain"],
    "tests/integration/test_fleet_capacity.py::test_report_check_mode_then_apply_then_nothing_to_change":
        ["capacity_facts", "fleet_report"],
    "tests/integration/test_fleet_onboard_and_rolling.py::test_the_fleet_chooses_a_host_records_why_and_onboards_only_there":
        ["capacity_facts", "fleet_place"],
    "tests/integration/test_guest_modules_cli.py::test_gpu_health_fake_nvidia_smi_t4_report_passes_the_limits":
        ["gpu_health"],
    "tests/integration/test_guest_modules_cli.py::test_container_facts_fake_runtime_tells_a_present_image_from_a_missing_one":
        ["container_facts"],
    "tests/integration/test_guest_benchmark_roles.py::test_benchmark_loadgen_host_check_mode_runs_the_load_generator_there":
        ["kserve_loadgen"],
}
# module -> the test ids whose Python 3.9 run executes it
RUNS = {}
for _test, _modules in _RUNS_OF_TESTS.items():
    for _module in _modules:
        RUNS.setdefault(_module, []).append(_test)


def python39():
    """The wrapper of the built Python 3.9 root; fails (never skips) when it is not built."""
    path = subprocess.run([TOOL, "--path"], capture_output=True, text=True,
                          check=False).stdout.strip()
    if not path:
        pytest.fail("no Python 3.9 root: run tools/setup (it builds it with tools/py39-root)",
                    pytrace=False)
    return path


def root_dir():
    """The Debian 11 root the Python 3.9 wrapper runs from."""
    return os.path.join(os.path.dirname(python39()), "root")


def run_in_root(program, *args, timeout=60):
    """Run ``program`` of the root (a path relative to it) on the root's own loader and
    libraries, as the wrapper runs python3.9. Returns the completed process."""
    root = root_dir()
    libs = "%s/lib/x86_64-linux-gnu:%s/usr/lib/x86_64-linux-gnu" % (root, root)
    return subprocess.run([os.path.join(root, "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
                           "--library-path", libs, os.path.join(root, program)] + list(args),
                          capture_output=True, text=True, timeout=timeout, check=False)


def modules_started(log_path):
    """The gpuhost.kvm modules a Python 3.9 wrapper log shows started (AnsiballZ files)."""
    if not os.path.exists(log_path):
        return set()
    started = set()
    with open(log_path, encoding="utf-8") as handle:
        for line in handle:
            for word in line.split():
                name = os.path.basename(word)
                if name.startswith("AnsiballZ_") and name.endswith(".py"):
                    started.add(name[len("AnsiballZ_"):-len(".py")])
    return started


def expected_modules(nodeid):
    """The modules ``RUNS`` says the test ``nodeid`` (parameters stripped) runs."""
    return set(_RUNS_OF_TESTS.get(nodeid.split("[", 1)[0], []))
