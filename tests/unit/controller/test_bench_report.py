# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The acceptance gate, the comparison with the previous run and the three reports, fed
results in the shape the runners return (literal dicts and a parsed real trtexec log)."""

from __future__ import annotations

import json
import os
import xml.dom.minidom

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import bench_parsers, bench_report
from ansible_collections.gpuhost.kvm.plugins.module_utils.guest.kserve_loadgen import histogram
from support import TESTS

BENCH = os.path.join(TESTS, "fixtures", "bench")


def builtin_result(p95=7.2, p99=8.1, throughput=4400.0, failed=0, complete=True):
    samples = sorted([6.0 + i * 0.01 for i in range(100)])
    return {"runner": "builtin", "complete": complete, "aborted": None if complete else "server stopped",
            "requests_sent": 100 + failed, "requests_succeeded": 100, "requests_failed": failed,
            "errors": {"http_500": failed} if failed else {}, "throughput": throughput, "concurrency": 8,
            "batch_size": 32, "latency": {"p50_ms": 6.5, "p90_ms": 7.0, "p95_ms": p95, "p99_ms": p99,
                                          "min_ms": 6.0, "max_ms": 9.0, "mean_ms": 6.6},
            "histogram": histogram(samples)}


def test_gate_passes_at_the_runbook_figures():
    gate = bench_report.evaluate_gate("tenant-a100", builtin_result(), p95_ms_max=8.0, p99_ms_max=12.0,
                                      min_throughput=4000)
    assert gate["passed"] and gate["failures"] == []
    assert [c["option"] for c in gate["checks"]] == ["benchmark_p95_ms_max", "benchmark_p99_ms_max",
                                                     "benchmark_min_throughput", "benchmark_max_error_ratio"]


def test_gate_failures_name_tenant_and_figure():
    gate = bench_report.evaluate_gate("tenant-a100", builtin_result(p95=9.25, throughput=3000.5),
                                      p95_ms_max=8.0, min_throughput=4000)
    assert not gate["passed"]
    assert gate["failures"] == [
        "tenant-a100: P95 latency 9.25 ms is above the 8 ms limit (benchmark_p95_ms_max)",
        "tenant-a100: throughput 3000.5 inferences/s is below the 4000 inferences/s limit (benchmark_min_throughput)"]


def test_gate_counts_failed_requests_and_partial_runs():
    gate = bench_report.evaluate_gate("t", builtin_result(failed=3, complete=False), p95_ms_max=8.0)
    assert gate["failures"][0] == "t: the benchmark run did not complete (server stopped); its figures are partial"
    assert gate["failures"][1] == "t: 3 of 103 requests failed (http_500 x3), above benchmark_max_error_ratio 0.0"
    assert bench_report.evaluate_gate("t", builtin_result(failed=3), max_error_ratio=0.05)["passed"]


def test_gate_on_a_parsed_trtexec_run():
    with open(os.path.join(BENCH, "trtexec_trt10_16_rtx6000ada.log")) as handle:
        result = bench_parsers.parse_trtexec(handle.read())
    assert bench_report.evaluate_gate("t", result, p95_ms_max=0.2, p99_ms_max=0.3)["passed"]
    failing = bench_report.evaluate_gate("t", result, p95_ms_max=0.1)
    assert failing["failures"] == ["t: P95 latency 0.122 ms is above the 0.1 ms limit (benchmark_p95_ms_max)"]


def test_comparison_with_previous_report():
    previous = bench_report.build_report("t", "h", builtin_result(p95=8.0, throughput=4000.0),
                                         {"passed": True, "checks": [], "failures": []}, "2026-01-01T00:00:00Z")
    current = builtin_result(p95=7.2, throughput=4400.0)
    comparison = bench_report.compare(current, json.loads(bench_report.report_json(previous)))
    rows = {row["figure"]: row for row in comparison["figures"]}
    assert rows["P95 latency (ms)"] == {"figure": "P95 latency (ms)", "before": 8.0, "after": 7.2, "change_pct": -10.0}
    assert rows["throughput (inferences/s)"]["change_pct"] == 10.0
    assert comparison["previous_run_at"] == "2026-01-01T00:00:00Z" and comparison["previous_passed"] is True
    assert bench_report.compare(current, None) is None


def test_markdown_and_svg_reports():
    result = builtin_result(p95=9.0)
    gate = bench_report.evaluate_gate("tenant-a100", result, p95_ms_max=8.0)
    report = bench_report.build_report("tenant-a100", "hk-gpu-01", result, gate, "2026-02-02T00:00:00Z")
    markdown = bench_report.report_markdown(report)
    assert markdown.startswith("# Benchmark of tenant-a100 on hk-gpu-01: FAIL\n")
    assert "| P95 (ms) | 9 |" in markdown and "| P95 latency (benchmark_p95_ms_max) | 8 ms | 9 | FAIL |" in markdown
    assert "No previous report of this tenant." in markdown
    svg = bench_report.report_svg(report)
    document = xml.dom.minidom.parseString(svg)
    rects = document.getElementsByTagName("rect")
    assert len(rects) == 1 + 40  # background + one bar per histogram bin
    assert "P95 latency max 8" in svg and ">P95 9<" in svg


def test_foreign_text_in_the_markdown_report_stays_inert_text():
    # The error examples come from the inference server, the aborted reason and the GPU
    # health from the guest: none may end a table cell or a line, or become HTML.
    result = builtin_result(failed=2, complete=False)
    result["aborted"] = "server said <b>bye</b>\n# not a heading"
    result["errors"] = {"http_500": 2}
    result["error_examples"] = {"http_500": "bad | request\n<script>x</script>"}
    gate = bench_report.evaluate_gate("tenant-a100", result, p95_ms_max=8.0)
    report = bench_report.build_report("tenant-a100", "hk-gpu-01", result, gate, "2026-02-02T00:00:00Z")
    report["gpu_health"] = {"read": False, "error": "nvidia-smi: <no device> | gone"}
    markdown = bench_report.report_markdown(report)
    assert "<" not in markdown and ">" not in markdown
    assert "\n# not a heading" not in markdown and "# not a heading" in markdown
    assert "bad \\| request &lt;script&gt;x&lt;/script&gt;" in markdown
    assert "Not read: nvidia-smi: &lt;no device&gt; \\| gone" in markdown


def test_svg_without_samples_draws_percentile_bars():
    with open(os.path.join(BENCH, "perf_analyzer_inception_graphdef.csv")) as handle:
        result = bench_parsers.perf_analyzer_result(bench_parsers.parse_perf_analyzer_csv(handle.read()), 1)
    gate = bench_report.evaluate_gate("t", result, p95_ms_max=20.0)
    svg = bench_report.report_svg(bench_report.build_report("t", "h", result, gate, "now"))
    xml.dom.minidom.parseString(svg)
    assert "percentiles only" in svg and "19.753 ms" in svg


def test_jitter_ceiling():
    with open(os.path.join(BENCH, "cyclictest_rt_tests_2_4_dev_vm.txt")) as handle:
        parsed = bench_parsers.parse_cyclictest(handle.read())
    jitter = bench_report.evaluate_jitter("t", parsed, 100, "0-1")
    assert not jitter["passed"]
    assert jitter["failures"] == ["t: host jitter 1046 us on CPUs 0-1 is above the 100 us ceiling "
                                  "(benchmark_cyclictest_max_us)"]
    assert bench_report.evaluate_jitter("t", parsed, 2000, "0-1")["passed"]


PUBLISHED = os.path.join(TESTS, "fixtures", "published")


def gpu_health_result(name, **limits):
    """What the gpu_health module returns for a published nvidia-smi report."""
    from ansible_collections.gpuhost.kvm.plugins.module_utils.guest import gpu_health
    with open(os.path.join(PUBLISHED, name)) as handle:
        health = gpu_health.parse_nvidia_smi_xml(handle.read())
    findings = gpu_health.health_findings(health, **limits)
    summary = gpu_health.health_summary(health, findings)
    return {"changed": False, "health": health, "findings": findings, "passed": summary["passed"],
            "failures": summary["failures"]}


def test_gate_with_the_gpu_health_of_a_published_t4_report():
    health = gpu_health_result("nvidia_smi_q_x_tesla_t4_passthrough_515_105_01.xml", max_temperature_c=85,
                               max_uncorrected_ecc=0, persistence_must_be_on=True)
    gate = bench_report.evaluate_gate("tenant-t4", builtin_result(), p95_ms_max=8.0, gpu_health=health)
    options = [c["option"] for c in gate["checks"]]
    assert options[:2] == ["benchmark_p95_ms_max", "benchmark_max_error_ratio"]
    # the ECC limit gates the volatile count and a pending or failed memory repair
    assert options[2:] == ["benchmark_gpu_max_temperature_c", "benchmark_gpu_max_uncorrected_ecc",
                           "benchmark_gpu_max_uncorrected_ecc", "benchmark_gpu_mig_must_be_off",
                           "benchmark_gpu_persistence_must_be_on"]
    temperature = gate["checks"][2]
    assert temperature["measured"] == 40.0 and temperature["limit"] == 85 and temperature["passed"]
    # The T4 report says persistence mode Disabled: the only failure.
    assert not gate["passed"] and len(gate["failures"]) == 1
    assert gate["failures"][0].startswith("tenant-t4: 00000000:00:1E.0 (Tesla T4): persistence mode off")
    report = bench_report.build_report("tenant-t4", "hk-gpu-01", builtin_result(), gate, "2026-12-03T05:40:00Z",
                                       gpu_health=health)
    section = report["gpu_health"]
    assert section["read"] and section["driver_version"] == "515.105.01"
    assert section["gpus"][0]["power_draw_w"] == 26.78 and section["gpus"][0]["power_limit_w"] == 70.0
    markdown = bench_report.report_markdown(report)
    assert "## GPU health after the load" in markdown
    assert "| 00000000:00:1E.0 Tesla T4 | 40 | 26.78 / 70 | 0 / 0 | - | off |" in markdown
    assert json.loads(bench_report.report_json(report))["gpu_health"]["findings"][4]["check"] == "persistence"


def test_gate_fails_on_mig_enabled_in_a_published_a100_report():
    health = gpu_health_result("nvidia_smi_q_x_a100_sxm4_mig_535_54_03.xml")
    gate = bench_report.evaluate_gate("tenant-a100", builtin_result(), p95_ms_max=8.0, gpu_health=health)
    assert not gate["passed"] and "MIG is on (pending on, 4 MIG device(s))" in gate["failures"][0]
    report = bench_report.build_report("tenant-a100", "hk-gpu-01", builtin_result(), gate, "t", gpu_health=health)
    assert "| on |" in bench_report.report_markdown(report)


def test_gpu_health_not_read_is_reported_and_does_not_gate():
    """A guest without nvidia-smi (the lab's tenant): the module's message, no check."""
    not_read = {"failed": True, "msg": "nvidia_smi: nvidia-smi is not installed (not on the PATH)"}
    gate = bench_report.evaluate_gate("tenant-lab", builtin_result(), p95_ms_max=8.0, gpu_health=not_read)
    assert gate["passed"]
    assert [c["option"] for c in gate["checks"]] == ["benchmark_p95_ms_max", "benchmark_max_error_ratio"]
    report = bench_report.build_report("tenant-lab", "h", builtin_result(), gate, "t", gpu_health=not_read)
    assert report["gpu_health"] == {"read": False, "error": not_read["msg"], "driver_version": None,
                                    "gpus": [], "findings": []}
    assert "Not read: nvidia_smi: nvidia-smi is not installed" in bench_report.report_markdown(report)
    # Not asked for (benchmark_gpu_health false: the task is skipped): no section at all.
    skipped = bench_report.build_report("tenant-lab", "h", builtin_result(), gate, "t",
                                        gpu_health={"skipped": True})
    assert skipped["gpu_health"] is None and "GPU health" not in bench_report.report_markdown(skipped)


def _cyclictest_output():
    with open(os.path.join(BENCH, "cyclictest_rt_tests_2_4_dev_vm.txt")) as handle:
        return handle.read()


def test_outcome_of_a_passing_run_has_the_report_its_files_and_the_figures_line():
    outcome = bench_report.tenant_outcome(
        "tenant-a100", "hk-gpu-01", builtin_result(), "2026-12-06T13:00:00Z",
        limits={"p95_ms_max": 8.0, "p99_ms_max": 12.0, "min_throughput": 0.0, "max_error_ratio": 0.0},
        settings={"runner": "builtin"})
    assert outcome["passed"] is True and outcome["failures"] == []
    assert outcome["summary"] == "P95 7.2 ms, P99 8.1 ms, 4400 inferences/s (builtin)"
    # a limit of 0 is not checked: P95, P99 and the failed-request ratio are
    assert [c["option"] for c in outcome["report"]["gate"]["checks"]] == [
        "benchmark_p95_ms_max", "benchmark_p99_ms_max", "benchmark_max_error_ratio"]
    files = {item["ext"]: item["text"] for item in outcome["files"]}
    assert sorted(files) == ["json", "md", "svg"]
    assert json.loads(files["json"]) == outcome["report"]
    assert files["md"] == outcome["markdown"] == bench_report.report_markdown(outcome["report"])
    xml.dom.minidom.parseString(files["svg"])


def test_outcome_adds_the_jitter_check_to_the_gate_and_the_settings():
    jitter = {"output": _cyclictest_output(), "max_us": 1, "cpus": "4-7"}
    outcome = bench_report.tenant_outcome("t", "h", builtin_result(), "2026-12-06T13:00:00Z",
                                          limits={"p95_ms_max": "8.0"}, settings={"runner": "builtin"},
                                          jitter=jitter)
    worst = bench_parsers.parse_cyclictest(jitter["output"])["max_us"]
    assert outcome["passed"] is False
    assert outcome["failures"] == ["t: host jitter %d us on CPUs 4-7 is above the 1 us ceiling "
                                   "(benchmark_cyclictest_max_us)" % worst]
    assert outcome["summary"] == outcome["failures"][0]
    checks = outcome["report"]["gate"]["checks"]
    assert [c["option"] for c in checks] == ["benchmark_p95_ms_max", "benchmark_max_error_ratio",
                                             "benchmark_cyclictest_max_us"]
    assert outcome["report"]["settings"]["jitter"]["cyclictest"]["max_us"] == worst
    under = bench_report.tenant_outcome("t", "h", builtin_result(), "x", jitter=dict(jitter, max_us=worst))
    assert under["passed"] is True


def test_outcome_compares_with_the_previous_report_given_as_text():
    first = bench_report.tenant_outcome("t", "h", builtin_result(p95=8.0), "2026-12-01T00:00:00Z")
    second = bench_report.tenant_outcome("t", "h", builtin_result(p95=7.2), "2026-12-06T00:00:00Z",
                                         previous=first["files"][0]["text"])
    comparison = second["report"]["comparison"]
    assert comparison["previous_run_at"] == "2026-12-01T00:00:00Z"
    assert comparison["figures"][1] == {"figure": "P95 latency (ms)", "before": 8.0, "after": 7.2,
                                        "change_pct": -10.0}
    # no previous report (the lookup of a missing file gives empty text): no comparison
    assert bench_report.tenant_outcome("t", "h", builtin_result(), "x", previous="")["report"]["comparison"] is None


@pytest.mark.parametrize("previous, words", [("{not json", "is not JSON"), ("[1, 2]", "holds list, not a report")])
def test_outcome_refuses_a_previous_report_that_is_not_one(previous, words):
    with pytest.raises(GpuhostError, match=words) as raised:
        bench_report.tenant_outcome("t", "h", builtin_result(), "x", previous=previous)
    assert raised.value.field == "previous" and "benchmark_report_dir" in str(raised.value)


@pytest.mark.parametrize("limits, words", [
    ({"p95_ms_max": "eight"}, "'eight' is not a finite number"),
    ({"p99_ms_max": "nan"}, "'nan' is not a finite number"),
    ({"min_throughput": float("inf")}, "inf is not a finite number"),
    ({"p95_ms_max": -1}, "benchmark_p95_ms_max must be at least 0, got -1"),
    ({"max_error_ratio": 1.5}, "benchmark_max_error_ratio must be at most 1, got 1.5"),
])
def test_outcome_refuses_a_limit_that_is_not_a_usable_number(limits, words):
    with pytest.raises(GpuhostError, match=words) as raised:
        bench_report.tenant_outcome("t", "h", builtin_result(), "x", limits=limits)
    assert raised.value.field == "benchmark_%s" % next(iter(limits))
