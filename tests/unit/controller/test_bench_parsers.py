# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The trtexec, perf_analyzer and cyclictest parsers on real published output
(tests/fixtures/bench/SOURCE.md names each source); expected numbers are the printed ones."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.plugin_utils import bench_parsers
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from support import TESTS

BENCH = os.path.join(TESTS, "fixtures", "bench")


def fixture(name):
    with open(os.path.join(BENCH, name)) as handle:
        return handle.read()


def test_trtexec_10_performance_summary():
    result = bench_parsers.parse_trtexec(fixture("trtexec_trt10_16_rtx6000ada.log"))
    assert result["tensorrt_version"] == "10.16.0" and result["streams"] == 1
    assert result["device"] == "NVIDIA RTX 6000 Ada Generation"
    assert result["throughput_qps"] == 11841.6 and result["throughput"] == 11841.6
    assert result["queries"] == 35528
    assert result["latency"] == {"min_ms": 0.0446777, "max_ms": 1.15759, "mean_ms": 0.0744307, "p50_ms": 0.0620117,
                                 "p90_ms": 0.0888672, "p95_ms": 0.122192, "p99_ms": 0.257355}
    assert result["gpu_compute_time"]["p99_ms"] == 0.248779
    assert result["enqueue_time"]["p95_ms"] == 0.0806885
    assert result["h2d_latency"]["min_ms"] == 0.00268555 and result["d2h_latency"]["max_ms"] == 0.182007
    assert result["total_host_walltime_s"] == 3.00027 and result["total_gpu_compute_time_s"] == 2.2864
    assert result["warnings"] == [
        "Throughput may be bound by Enqueue Time rather than GPU Compute and the GPU may be under-utilized.",
        "GPU compute time is unstable, with coefficient of variance = 65.8769%."]


def test_trtexec_8_6_with_batch_size():
    result = bench_parsers.parse_trtexec(fixture("trtexec_trt86_rtx3090.log"), batch_size=4)
    assert result["tensorrt_version"] == "8.6.0"
    assert result["throughput_qps"] == 21009.2
    assert result["throughput"] == pytest.approx(84036.8)
    assert result["latency"]["p95_ms"] == 0.053772 and result["latency"]["p50_ms"] == 0.0517578
    assert result["gpu_compute_time"]["mean_ms"] == 0.0451127


def test_trtexec_dump_profile_without_summary_names_the_fix():
    with pytest.raises(GpuhostError) as err:
        bench_parsers.parse_trtexec(fixture("trtexec_trt10_16_dumpprofile_no_summary.log"))
    assert "--separateProfileRun" in str(err.value) and err.value.field == "trtexec"


def test_trtexec_failure_is_reported():
    with pytest.raises(GpuhostError, match="trtexec reported a failure"):
        bench_parsers.parse_trtexec("&&&& FAILED TensorRT.trtexec [TensorRT v101600] # trtexec --loadEngine=x\n")


def test_perf_analyzer_csv_steps_sorted_and_in_ms():
    parsed = bench_parsers.parse_perf_analyzer_csv(fixture("perf_analyzer_inception_graphdef.csv"))
    assert [s["concurrency"] for s in parsed["steps"]] == [1, 2, 3, 4]
    two = parsed["steps"][1]
    assert two["throughput"] == 87.2
    assert two["latency"] == {"p50_ms": 21.874, "p90_ms": 28.557, "p95_ms": 29.768, "p99_ms": 34.766}
    assert two["components_ms"]["server_queue"] == 9.151
    assert two["components_ms"]["server_compute_infer"] == 11.346


def test_perf_analyzer_result_picks_the_concurrency_step():
    parsed = bench_parsers.parse_perf_analyzer_csv(fixture("perf_analyzer_inception_graphdef.csv"))
    result = bench_parsers.perf_analyzer_result(parsed, concurrency=4)
    assert result["concurrency"] == 4 and result["throughput"] == 84.2
    assert result["latency"]["p95_ms"] == 59.225 and result["latency"]["p99_ms"] == 64.886
    assert bench_parsers.perf_analyzer_result(parsed)["concurrency"] == 4
    with pytest.raises(GpuhostError) as err:
        bench_parsers.perf_analyzer_result(parsed, concurrency=8)
    assert "measured: 1, 2, 3, 4" in str(err.value) and err.value.field == "benchmark_concurrency"


def test_perf_client_older_csv_with_one_compute_column():
    parsed = bench_parsers.parse_perf_analyzer_csv(fixture("perf_client_resnet50_netdef.csv"))
    one = parsed["steps"][0]
    assert one["concurrency"] == 1 and one["throughput"] == 160.8
    assert one["components_ms"]["server_compute"] == 4.801
    assert one["latency"]["p99_ms"] == 7.407


def test_not_a_perf_analyzer_csv():
    with pytest.raises(GpuhostError, match="not a perf_analyzer CSV"):
        bench_parsers.parse_perf_analyzer_csv("a,b\n1,2\n")


def test_cyclictest_recorded_output():
    result = bench_parsers.parse_cyclictest(fixture("cyclictest_rt_tests_2_4_dev_vm.txt"))
    assert [t["max_us"] for t in result["threads"]] == [702, 1046]
    assert result["max_us"] == 1046 and result["threads"][0]["interval_us"] == 200
    assert result["threads"][1]["cycles"] == 9964


def test_cyclictest_without_summary():
    with pytest.raises(GpuhostError, match="no thread summary"):
        bench_parsers.parse_cyclictest("# /dev/cpu_dma_latency set to 0us\n")
