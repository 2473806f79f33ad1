"""bench/bench_site.py's reading of an ansible-playbook output: which initramfs rebuilds
ran (changed), and which were skipped or found nothing to do."""

import importlib.util
import os

from support.helpers import REPO

_SPEC = importlib.util.spec_from_file_location("bench_site", os.path.join(REPO, "bench", "bench_site.py"))
bench_site = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench_site)

OUTPUT = """\
TASK [gpuhost.kvm.iommu : Rebuild the initramfs] *******************************
Tuesday 01 December 2026  12:00:00 +0000 (0:00:01.000)       0:01:00.000 *****
changed: [hk-gpu-01]

TASK [gpuhost.kvm.iommu : Reboot to apply the kernel arguments] ****************
changed: [hk-gpu-01]

TASK [gpuhost.kvm.vfio : Rebuild the initramfs so the binding holds from early boot] ***
skipping: [hk-gpu-01]

TASK [gpuhost.kvm.validate : Fail on the checks that failed] *******************
ok: [hk-gpu-01]
"""


def test_counts_only_the_rebuilds_that_ran():
    statuses = [m.group("status") for m in bench_site.REBUILD_RE.finditer(OUTPUT)]
    assert statuses == ["changed", "skipping"]


def test_the_targets_are_the_lab_issues():
    assert bench_site.TARGET_RATIO == 0.25 and bench_site.TARGET_CONVERGE_S == 300


def test_tasks_run_are_ok_plus_failed_since_ok_counts_the_changed_ones():
    recap = ("PLAY RECAP *********************************************************************\n"
             "hk-gpu-01                  : ok=91   changed=25   unreachable=0    failed=0    "
             "skipped=30   rescued=0    ignored=0   \n"
             "localhost                  : ok=2    changed=0    unreachable=0    failed=0    "
             "skipped=0    rescued=0    ignored=0   \n")
    assert bench_site.task_counts(recap, "hk-gpu-01") == {
        "tasks_run": 91, "tasks_skipped": 30, "changed": 25}
    assert bench_site.task_counts(recap, "hk-gpu-02") == {
        "tasks_run": 0, "tasks_skipped": 0, "changed": 0}
