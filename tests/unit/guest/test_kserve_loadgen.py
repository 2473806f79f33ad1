# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The load generator's pure parts: nearest-rank percentiles, the histogram, the request
body, URLs and the refusals of a run without an end. Its behaviour against a server is
tested on a real one in tests/integration/test_loadgen_real_server.py."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.guest import kserve_loadgen as lg
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError


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


# -- bounded work from one value, one URL validator --------------------------------------

def _check_mode_generator(**options):
    """The module's own worker in check mode, as ansible-playbook --check runs it."""
    from support.module_args import patch_module_args
    from ansible_collections.gpuhost.kvm.plugins.modules import kserve_loadgen as module_file
    args = {"model": "resnet50", "requests": 10, "_ansible_check_mode": True}
    args.update(options)
    with patch_module_args(args):
        return module_file.LoadGenerator(module_file.build_module())


def test_a_huge_shape_is_refused_before_anything_is_built_even_in_check_mode():
    # 10**12 zeros: before the bound the list was built in full (MemoryError or an
    # exhausted guest), in check mode too.
    generator = _check_mode_generator(
        inputs=[{"name": "x", "shape": [100000, 100000, 100], "datatype": "FP32"}])
    with pytest.raises(GpuhostError) as err:
        generator.run()
    assert err.value.field == "inputs[0].shape"
    assert "above the limit of 33554432" in err.value.message
    assert "[32, 3, 224, 224]" in err.value.fix
    assert generator.msg == ""                      # nothing was run or planned


def test_the_element_bound_counts_every_input_together():
    half = [4096, 4096]                             # 2**24 elements each
    lg.build_infer_body([{"name": "a", "shape": [64], "datatype": "FP32"}])
    with pytest.raises(GpuhostError) as err:
        lg.build_infer_body([{"name": "a", "shape": half, "datatype": "FP32"},
                             {"name": "b", "shape": half + [2], "datatype": "FP32"}])
    assert err.value.field == "inputs[1].shape"


@pytest.mark.parametrize("shape, message", [
    ([1] * 65, "has 65 dimensions, more than 64"),
    ([2, "3"], "dimension '3' of [2, '3'] is not a whole number"),
    ([True, 3], "is not a whole number"),
    ([], "is not a shape"),
    ([1 << 40], "has a dimension above the limit"),
])
def test_odd_shapes_get_an_answer_naming_the_input(shape, message):
    with pytest.raises(GpuhostError) as err:
        lg.build_infer_body([{"name": "x", "shape": shape, "datatype": "FP32"}])
    assert err.value.field == "inputs[0].shape" and message in err.value.message


@pytest.mark.parametrize("url, message", [
    ("http://triton:0", "has no valid port"),
    ("http://triton:99999", "has no valid port"),
    ("http://[::1", "is not a URL"),
    ("http://user:pw@triton:8000", "carries credentials"),
    ("http://triton:8000/?model=x", "has a query or a fragment"),
    ("http://tri ton:8000", "holds blanks or control characters"),
    ("http://triton:8000\n", "holds blanks or control characters"),
    ("http://:8000", "has no valid host"),
])
def test_malformed_urls_are_refused_naming_the_option(url, message):
    # Before the one URL validator, ports 0 and 99999 passed (or raised ValueError from
    # urlsplit), and credentials or a query went into the request line.
    with pytest.raises(GpuhostError) as err:
        lg.parse_url(url)
    assert err.value.field == "url" and message in err.value.message
    assert "http://127.0.0.1:8000" in err.value.fix


@pytest.mark.parametrize("options, field, message", [
    ({"concurrency": 5000}, "concurrency", "at most 1024"),
    ({"warmup_requests": -1}, "warmup_requests", "at least 0, got -1"),
    ({"requests": 10 ** 9}, "requests", "at most 10000000"),
    ({"batch_size": 0}, "batch_size", "at least 1, got 0"),
    ({"timeout_s": 0.0}, "timeout_s", "more than 0"),
    ({"duration_s": float("inf")}, "duration_s", "is not a finite number"),
])
def test_counts_sizes_and_timeouts_are_bounded(options, field, message):
    arguments = dict(url="http://127.0.0.1:1", model="m",
                     inputs=[{"name": "x", "shape": [1], "datatype": "FP32"}], requests=10)
    arguments.update(options)
    with pytest.raises(GpuhostError) as err:
        lg.LoadRun(**arguments)
    assert err.value.field == field and message in err.value.message


# -- names that reach the URL path or the request body -----------------------------------

_RUN = dict(url="http://127.0.0.1:1", inputs=[{"name": "x", "shape": [1], "datatype": "FP32"}],
            requests=10)


@pytest.mark.parametrize("model", [
    "resnet50\n", "resnet50\nHost: elsewhere", "../admin", "..", ".", ".hidden", "a..b",
    "a/b", "a%2Fb", "a b", "a?x=1", "a#f", "", "m\x00", "m\r", "é", "a" * 256, 50, None,
])
def test_a_model_name_that_breaks_the_url_is_refused(model):
    # Before: quote() hid "../" and newlines as %2F and %0A in the path; a server that
    # decodes the path before routing saw another model, or another endpoint.
    with pytest.raises(GpuhostError) as err:
        lg.LoadRun(model=model, **_RUN)
    assert err.value.field == "model"
    assert "is not a usable model name" in err.value.message
    assert "letters, digits, '_', '-' and '.'" in err.value.fix


@pytest.mark.parametrize("model", ["resnet50", "resnet_50-v1.5", "densenet_onnx", "M", "0", "-x",
                                   "a" * 255])
def test_plain_model_names_pass(model):
    run = lg.LoadRun(model=model, **_RUN)
    assert run.path == "/v2/models/%s/infer" % model


@pytest.mark.parametrize("version", ["1\n", "../1", "1/2", "..", " 1", ".1"])
def test_a_model_version_that_breaks_the_url_is_refused(version):
    with pytest.raises(GpuhostError) as err:
        lg.LoadRun(model="m", model_version=version, **_RUN)
    assert err.value.field == "model_version" and "is not a usable model version" in err.value.message


def test_a_model_version_may_be_a_number():
    assert lg.LoadRun(model="m", model_version=2, **_RUN).path == "/v2/models/m/versions/2/infer"
    assert lg.LoadRun(model="m", model_version="", **_RUN).path == "/v2/models/m/infer"


@pytest.mark.parametrize("name", ["x\n", "../x", "x/../y", "..", ".x", "a b", "", "x\"", 7, None])
def test_an_input_name_outside_the_name_rule_is_refused(name):
    with pytest.raises(GpuhostError) as err:
        lg.build_infer_body([{"name": "ok", "shape": [1], "datatype": "FP32"},
                             {"name": name, "shape": [1], "datatype": "FP32"}])
    assert err.value.field == "inputs[1].name"
    assert "is not a usable tensor name" in err.value.message


@pytest.mark.parametrize("name", ["INPUT0", "input.1", "input_1:0", "serving-default"])
def test_tensor_names_of_common_frameworks_pass(name):
    body = json.loads(lg.build_infer_body([{"name": name, "shape": [1], "datatype": "FP32"}],
                                          outputs=[name]))
    assert body["inputs"][0]["name"] == name and body["outputs"] == [{"name": name}]


def test_an_output_name_outside_the_name_rule_is_refused():
    with pytest.raises(GpuhostError) as err:
        lg.LoadRun(model="m", outputs=["OUTPUT0", "OUT\n1"], **_RUN)
    assert err.value.field == "outputs[1]" and "is not a usable tensor name" in err.value.message


def test_a_datatype_is_one_of_the_protocol():
    with pytest.raises(GpuhostError) as err:
        lg.build_infer_body([{"name": "x", "shape": [1], "datatype": "FP32\n"}])
    assert err.value.field == "inputs[0].datatype" and "FP32" in err.value.fix
