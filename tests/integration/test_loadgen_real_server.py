# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The built-in load generator against a real KServe v2 server (MLServer) on loopback:
percentiles of a distribution the model controls, the gate failing on purpose, a model
that raises, and a server killed in the middle of a run."""

from __future__ import annotations

import math
import signal
import threading
import time

import pytest

from ansible_collections.gpuhost.kvm.plugins.plugin_utils import bench_report
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.guest.kserve_loadgen import LoadRun, run_load

from mlserver_fixture import MLServerProcess

INPUTS = [{"name": "INPUT0", "shape": [4], "datatype": "FP32"}]
FAST_MS = 10.0
SLOW_MS = 120.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = MLServerProcess(tmp_path_factory.mktemp("mlserver"), {
        # 1 request in 4 is slow: P50 is a fast answer, P90 and above are slow ones.
        "quartile_slow": {"sleep_ms": FAST_MS, "slow_every": 4, "slow_ms": SLOW_MS},
        "steady": {"sleep_ms": FAST_MS},
        "broken": {"fail": True},
        "rejecting": {"fail": "protocol"},
    }).start()
    yield proc
    proc.stop()


@pytest.fixture
def hard_timeout():
    """Fail the test (instead of hanging the suite) if it runs past its limit."""
    def on_alarm(signum, frame):
        raise AssertionError("the test ran past its hard timeout: the load generator hangs")
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(45)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_percentiles_of_a_controlled_distribution(server, hard_timeout):
    # Sequential requests: exactly every 4th answer the model gives is slow, so 25 % of
    # the measured samples (+-1 for the warm-up's phase) are >= SLOW_MS, the rest >= FAST_MS.
    result = run_load(url=server.url, model="quartile_slow", inputs=INPUTS, concurrency=1,
                      requests=80, warmup_requests=3, keep_samples=True)
    samples = sorted(result["samples_ms"])
    assert result["complete"] and result["requests_succeeded"] == 80 and result["requests_failed"] == 0
    slow = [s for s in samples if s >= SLOW_MS]
    assert 19 <= len(slow) <= 21
    # Nearest rank, recomputed here from the returned samples.
    for p in (50, 90, 95, 99):
        assert result["latency"]["p%d_ms" % p] == samples[math.ceil(p / 100.0 * len(samples)) - 1]
    assert FAST_MS <= result["latency"]["min_ms"] < SLOW_MS
    assert FAST_MS <= result["latency"]["p50_ms"] < SLOW_MS
    assert result["latency"]["p90_ms"] >= SLOW_MS
    assert result["latency"]["p99_ms"] >= SLOW_MS
    assert result["warmup_requests_sent"] >= 3
    assert sum(result["histogram"]["counts"]) == 80


def test_duration_limit_concurrency_and_throughput(server, hard_timeout):
    started = time.monotonic()
    result = run_load(url=server.url, model="steady", inputs=INPUTS, concurrency=4, duration_s=2.0,
                      warmup_s=0.5)
    elapsed = time.monotonic() - started
    assert result["complete"] and result["requests_failed"] == 0
    assert 2.0 <= result["measured_s"] < 2.0 + 1.0
    assert elapsed < 2.5 + 5
    assert result["latency"]["min_ms"] >= FAST_MS
    # 4 workers, each at most one request per FAST_MS: throughput cannot exceed 4/FAST_MS.
    assert 0 < result["throughput_rps"] <= 4 * 1000.0 / FAST_MS
    assert result["throughput_rps"] == pytest.approx(result["requests_succeeded"] / result["measured_s"], rel=1e-3)


def test_gate_fails_when_threshold_is_below_measured_p95(server, hard_timeout):
    result = run_load(url=server.url, model="steady", inputs=INPUTS, concurrency=2, duration_s=1.5)
    p95 = result["latency"]["p95_ms"]
    failing = bench_report.evaluate_gate("tenant-a100", result, p95_ms_max=p95 * 0.5)
    assert not failing["passed"]
    assert failing["failures"][0].startswith("tenant-a100: P95 latency %s ms is above" % bench_report._num(p95))
    assert "benchmark_p95_ms_max" in failing["failures"][0]
    passing = bench_report.evaluate_gate("tenant-a100", result, p95_ms_max=p95 * 2, min_throughput=1.0)
    assert passing["passed"], passing["failures"]


def test_model_that_raises_is_counted_by_kind(server, hard_timeout):
    result = run_load(url=server.url, model="broken", inputs=INPUTS, concurrency=2, requests=20)
    assert result["complete"]
    assert result["requests_succeeded"] == 0 and result["requests_failed"] == 20
    assert result["errors"] == {"http_500": 20}
    assert result["error_examples"]["http_500"] == "Internal Server Error"
    assert result["latency"]["p95_ms"] is None
    gate = bench_report.evaluate_gate("tenant-b", result, p95_ms_max=8.0)
    assert not gate["passed"]
    assert any("P95 latency was not measured" in f for f in gate["failures"])
    assert any("20 of 20 requests failed" in f for f in gate["failures"])


def test_v2_error_body_is_reported(server, hard_timeout):
    result = run_load(url=server.url, model="rejecting", inputs=INPUTS, concurrency=1, requests=5)
    assert result["errors"] == {"http_400": 5}
    assert result["error_examples"]["http_400"] == "controlled failure: input rejected"


def test_unknown_model_is_refused_before_the_run(server, hard_timeout):
    with pytest.raises(GpuhostError) as err:
        run_load(url=server.url, model="no-such-model", inputs=INPUTS, requests=1)
    assert "not ready" in str(err.value) and err.value.field == "model"


def test_server_killed_mid_run_gives_partial_report_without_hanging(tmp_path, hard_timeout):
    victim = MLServerProcess(tmp_path, {"steady": {"sleep_ms": FAST_MS}}).start()
    try:
        run = LoadRun(url=victim.url, model="steady", inputs=INPUTS, concurrency=4, duration_s=30.0,
                      timeout_s=5.0)
        killer = threading.Timer(1.5, victim.kill)
        killer.start()
        started = time.monotonic()
        result = run.run()
        elapsed = time.monotonic() - started
        killer.join()
    finally:
        victim.kill()
    # The 30 s run ends within a request timeout of the kill, not at 30 s.
    assert elapsed < 1.5 + 5.0 + 2.0
    assert not result["complete"]
    assert "stopped answering during the run" in result["aborted"]
    assert "refused" in result["aborted"]
    assert result["requests_succeeded"] > 0
    assert result["latency"]["p95_ms"] is not None
    gate = bench_report.evaluate_gate("tenant-c", result, p95_ms_max=1000.0)
    assert not gate["passed"]
    assert gate["failures"][0].startswith("tenant-c: the benchmark run did not complete")
    report = bench_report.build_report("tenant-c", "hk-gpu-01", result, gate, "2026-01-01T00:00:00Z")
    markdown = bench_report.report_markdown(report)
    assert "FAIL (PARTIAL RUN)" in markdown and "did not complete" in markdown


def test_nothing_listening_is_a_clear_error(hard_timeout):
    from mlserver_fixture import free_port
    with pytest.raises(GpuhostError) as err:
        run_load(url="http://127.0.0.1:%d" % free_port(), model="m", inputs=INPUTS, requests=1)
    assert "does not answer" in str(err.value) and "Fix:" in str(err.value)
