# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters of the benchmark role: thin wrappers of plugin_utils bench_parsers and
bench_report, run on the controller, so the role parses, gates and renders with the
functions the Python tests check."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import bench_parsers, bench_report
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import format_cpulist, parse_cpulist


def bench_perf_analyzer(text, concurrency=None):
    return bench_parsers.perf_analyzer_result(bench_parsers.parse_perf_analyzer_csv(text), concurrency)


def bench_outcome(tenant, host, result, run_at, limits=None, settings=None, previous=None,
                  gpu_health=None, jitter=None):
    """The gate, the report, its files and the summary line of one tenant's run."""
    try:
        return bench_report.tenant_outcome(tenant, host, result, run_at, limits, settings, previous,
                                           gpu_health, jitter)
    except GpuhostError as err:
        raise AnsibleFilterError("bench_outcome: %s" % err) from err


def bench_cpulist_count(cpulist):
    """How many CPUs a cpulist names (cyclictest runs one thread per CPU)."""
    return len(parse_cpulist(cpulist))


def bench_cpulist(cpulist):
    """A cpulist in its shortest form, so that two spellings of one set compare equal."""
    return format_cpulist(parse_cpulist(cpulist))


class FilterModule(object):

    def filters(self):
        return {
            "bench_trtexec": bench_parsers.parse_trtexec,
            "bench_perf_analyzer": bench_perf_analyzer,
            "bench_cpulist": bench_cpulist,
            "bench_cpulist_count": bench_cpulist_count,
            "bench_outcome": bench_outcome,
        }
