# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The load generator's pure parts: nearest-rank percentiles, the histogram, the request
body, URLs and the refusals of a run without an end. Its behaviour against a server is
tested on a real one in tests/integration/test_loadgen_real_server.py."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils import kserve_loadgen as lg
from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError


def test_nearest_rank_on_1_to_100():
    samples = list(range(1, 101))
    assert [lg.nearest_rank(samples, p) for p in (50, 90, 95, 99, 100)] == [50, 90, 95, 99, 100]


def test_nearest_rank_small_samples_is_a_measured_value():
    assert lg.nearest_rank([3.0, 5.0, 9.0], 50) == 5.0     # rank ceil(1.5) = 2
    assert lg.nearest_rank([3.0, 5.0, 9.0], 95) == 9.0     # rank ceil(2.85) = 3
    assert lg.nearest_rank([7.0], 99) == 7.0
    assert lg.nearest_rank([], 95) is None
    with pytest.raises(ValueError):
        lg.nearest_rank([1.0], 0)


def test_latency_stats():
    stats = lg.latency_stats([float(v) for v in range(20, 0, -1)])
    assert stats == {"count": 20, "min_ms": 1.0, "max_ms": 20.0, "mean_ms": 10.5,
                     "p50_ms": 10.0, "p90_ms": 18.0, "p95_ms": 19.0, "p99_ms": 20.0}
    assert lg.latency_stats([])["p95_ms"] is None


def test_histogram_counts_every_sample():
    hist = lg.histogram(sorted([1.0, 1.5, 2.0, 2.0, 9.0]), bins=8)
    assert sum(hist["counts"]) == 5 and len(hist["edges_ms"]) == 9
    assert hist["counts"][0] == 2 and hist["counts"][-1] == 1
    assert lg.histogram([4.0, 4.0]) == {"edges_ms": [4.0, 4.0], "counts": [2]}


def test_infer_body_fills_zeros_and_keeps_data():
    body = json.loads(lg.build_infer_body([{"name": "x", "shape": [2, 3], "datatype": "FP16"},
                                           {"name": "ids", "shape": [2], "datatype": "INT64", "data": [7, 8]}],
                                          outputs=["y"]))
    assert body["inputs"][0] == {"name": "x", "shape": [2, 3], "datatype": "FP16", "data": [0.0] * 6}
    assert body["inputs"][1]["data"] == [7, 8]
    assert body["outputs"] == [{"name": "y"}]


def test_infer_body_refusals():
    with pytest.raises(GpuhostError) as err:
        lg.build_infer_body([{"name": "x", "shape": [0, 3], "datatype": "FP32"}])
    assert err.value.field == "inputs[0].shape"
    with pytest.raises(GpuhostError):
        lg.build_infer_body([{"name": "x", "datatype": "FP32"}])


def test_urls_and_paths():
    assert lg.parse_url("http://10.0.0.5:8000") == ("10.0.0.5", 8000, "")
    assert lg.parse_url("127.0.0.1:8000/prefix/") == ("127.0.0.1", 8000, "/prefix")
    assert lg.infer_path("", "resnet50", 2) == "/v2/models/resnet50/versions/2/infer"
    assert lg.infer_path("/p", "a/b") == "/p/v2/models/a%2Fb/infer"
    with pytest.raises(GpuhostError, match="only plain http"):
        lg.parse_url("https://triton:8000")


def test_a_run_needs_an_end_and_a_sane_concurrency():
    inputs = [{"name": "x", "shape": [1], "datatype": "FP32"}]
    with pytest.raises(GpuhostError) as err:
        lg.LoadRun("http://127.0.0.1:1", "m", inputs)
    assert err.value.field == "duration_s"
    with pytest.raises(GpuhostError) as err:
        lg.LoadRun("http://127.0.0.1:1", "m", inputs, requests=10, concurrency=0)
    assert err.value.field == "concurrency"


def test_hard_deadline_bounds_the_run():
    inputs = [{"name": "x", "shape": [1], "datatype": "FP32"}]
    run = lg.LoadRun("http://127.0.0.1:1", "m", inputs, duration_s=60, warmup_s=10, timeout_s=10)
    assert run.hard_deadline_s() == 10 + 60 + 10 + 5 + 5
