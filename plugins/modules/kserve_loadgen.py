#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: kserve_loadgen
short_description: Measure an inference server's latency with a KServe v2 load generator
version_added: "0.1.0"
description:
  - Sends KServe v2 (Open Inference Protocol) infer requests over HTTP/1.1 to a model of
    a server such as Triton, MLServer or KServe, from the host the task runs on (the
    tenant guest), and returns latency percentiles, throughput and failed requests.
  - Closed loop, like perf_analyzer's concurrency mode. O(concurrency) workers each keep
    one keep-alive connection and send the next request when the previous one is
    answered.
  - Requests started during the warm-up (O(warmup_s) seconds and O(warmup_requests)
    answers, whichever comes later) are not counted. The measurement then runs for
    O(duration_s) seconds or O(requests) requests, whichever comes first.
  - Percentiles are nearest-rank values of the exact sorted latencies of the successful
    requests, never interpolated and never averaged. The P-th percentile of n samples is
    the sample of rank ceil(P/100*n).
  - Pure Python standard library (asyncio), so it runs in a minimal guest with no client
    package installed.
  - If the server stops answering during the run, the task fails at once and names the
    reason. It still returns what was measured until then, with RV(complete=false). Each
    request has O(timeout_s) and the run has a hard deadline, so a hung server cannot
    hang the play.
  - The module checks that the model is ready before the run and fails with the server's
    answer if it is not.
author:
  - gpuhost.kvm contributors (@gpuhost)
options:
  url:
    description:
      - Base URL of the server's HTTP endpoint (Triton's is port 8000). Plain C(http) only.
      - A scheme, a host and an optional port of 1 to 65535, with an optional path
        prefix; credentials, a query, a fragment, blanks or control characters are
        refused. C(HOST:PORT) alone means C(http://HOST:PORT).
    type: str
    default: http://127.0.0.1:8000
  model:
    description:
      - The model name, as in C(/v2/models/<model>/infer).
      - 1 to 255 letters, digits, C(_), C(-) and C(.), not starting with C(.) and
        without C(..); anything else (a C(/), a newline, C(%), C(?)) is refused.
    type: str
    required: true
  model_version:
    description:
      - A model version; the server's default version when left out.
      - The same characters as O(model).
    type: str
  inputs:
    description:
      - The request's input tensors, in KServe v2 JSON form. An input without O(inputs[].data)
        is sent as zeros of its shape.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - The input's name in the model configuration.
          - The characters of O(model) and C(:) (TensorFlow's C(input_1:0)).
        type: str
        required: true
      shape:
        description:
          - The shape of one request, batch dimension first when the model batches.
          - Every dimension is 1 or more, at most 64 dimensions. All inputs together may
            have at most 33554432 (2**25) elements, checked before anything is built, in
            check mode too; the runbook's ResNet50 at batch 32 has 4.8 million.
        type: list
        elements: int
        required: true
      datatype:
        description:
          - The v2 datatype, for example C(FP32), C(FP16), C(INT64), C(BYTES), in capitals
            as the protocol writes it.
        type: str
        required: true
      data:
        description: The flattened tensor contents; zeros when left out.
        type: list
        elements: raw
      parameters:
        description: Per-tensor parameters of the v2 protocol.
        type: dict
  outputs:
    description:
      - Names of the outputs to ask for; all of them when left out.
      - Each as O(inputs[].name).
    type: list
    elements: str
  parameters:
    description: Request-level parameters of the v2 protocol.
    type: dict
  concurrency:
    description: Requests in flight at all times (the runbook measured with 8); 1 to 1024.
    type: int
    default: 1
  duration_s:
    description: Seconds of measurement after the warm-up; more than 0, at most 86400.
    type: float
  requests:
    description: Requests to measure after the warm-up; 1 to 10000000.
    type: int
  warmup_s:
    description: Seconds of warm-up whose requests are not counted; 0 to 86400.
    type: float
    default: 0
  warmup_requests:
    description: Answers to receive during the warm-up before the measurement starts; 0 to 10000000.
    type: int
    default: 0
  timeout_s:
    description: Seconds one request may take before it counts as a C(timeout) failure; more than 0, at most 86400.
    type: float
    default: 10
  connect_timeout_s:
    description: Seconds a connection may take to open; more than 0, at most 86400.
    type: float
    default: 5
  batch_size:
    description:
      - Inferences one request carries (the batch dimension of its inputs). RV(throughput)
        is requests per second times this value, the unit of perf_analyzer's
        "Inferences/Second".
      - 1 or more.
    type: int
    default: 1
  keep_samples:
    description: Also return every measured latency (RV(samples_ms)); large for long runs.
    type: bool
    default: false
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: In check mode no request is sent and the module says so in RV(msg).
  diff_mode:
    description: Nothing on the target changes, so there is nothing to diff.
    support: none
notes:
  - gRPC and Triton's binary tensor extension are not used. Large tensors, such as
    ResNet50 at batch 32, cost the client JSON encoding time. That time is spent once,
    before the run, and is not in the latency.
seealso:
  - name: KServe v2 / Open Inference Protocol
    description: The REST protocol that the requests follow.
    link: https://kserve.github.io/website/latest/modelserving/data_plane/v2_protocol/
"""

EXAMPLES = r"""
- name: Measure ResNet50 at batch 32 with 8 requests in flight for 60 s
  gpuhost.kvm.kserve_loadgen:
    url: http://127.0.0.1:8000
    model: resnet50
    inputs:
      - name: input
        shape: [32, 3, 224, 224]
        datatype: FP32
    batch_size: 32
    concurrency: 8
    warmup_s: 10
    duration_s: 60
  register: bench

- name: Send exactly 1000 requests after 100 warm-up answers
  gpuhost.kvm.kserve_loadgen:
    model: simple
    inputs:
      - name: INPUT0
        shape: [1, 16]
        datatype: INT32
    warmup_requests: 100
    requests: 1000
"""

RETURN = r"""
msg:
  description: One line saying what was measured, or why the run stopped.
  returned: always
  type: str
complete:
  description: Whether the run reached its limit. False when the server stopped answering.
  returned: unless check mode
  type: bool
aborted:
  description: Why the run stopped early, or null.
  returned: unless check mode
  type: str
latency:
  description: count, min_ms, max_ms, mean_ms, p50_ms, p90_ms, p95_ms, p99_ms of the successful measured requests.
  returned: unless check mode
  type: dict
  sample: {count: 4711, min_ms: 6.1, max_ms: 9.8, mean_ms: 6.9, p50_ms: 6.8, p90_ms: 7.1, p95_ms: 7.2, p99_ms: 8.0}
throughput:
  description: Successful requests per second of measurement, times O(batch_size).
  returned: unless check mode
  type: float
throughput_rps:
  description: Successful requests per second of measurement.
  returned: unless check mode
  type: float
requests_sent:
  description: Measured requests (answered or failed).
  returned: unless check mode
  type: int
requests_succeeded:
  description: Measured requests answered with HTTP 200 and outputs.
  returned: unless check mode
  type: int
requests_failed:
  description: Measured requests that failed.
  returned: unless check mode
  type: int
errors:
  description: Failed requests by kind (http_NNN, timeout, connection_closed, connection_refused, bad_response).
  returned: unless check mode
  type: dict
error_examples:
  description: The first message seen of each error kind.
  returned: unless check mode
  type: dict
warmup_requests_sent:
  description: Requests sent during the warm-up (not counted).
  returned: unless check mode
  type: int
measured_s:
  description: Seconds from the end of the warm-up to the last counted answer.
  returned: unless check mode
  type: float
histogram:
  description: 40 equal-width bins of the latencies (edges_ms, counts), for the report's plot.
  returned: unless check mode
  type: dict
samples_ms:
  description: Every measured latency, in order of completion.
  returned: when keep_samples
  type: list
  elements: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.guest.kserve_loadgen import LoadRun
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import new_module, run_module

RUN_OPTIONS = ("url", "model", "model_version", "inputs", "outputs", "parameters", "concurrency", "duration_s",
               "requests", "warmup_s", "warmup_requests", "timeout_s", "connect_timeout_s", "batch_size",
               "keep_samples")


def build_module():
    return new_module(
        AnsibleModule, argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:8000"),
            model=dict(type="str", required=True),
            model_version=dict(type="str"),
            inputs=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                shape=dict(type="list", elements="int", required=True),
                datatype=dict(type="str", required=True),
                data=dict(type="list", elements="raw"),
                parameters=dict(type="dict"),
            )),
            outputs=dict(type="list", elements="str"),
            parameters=dict(type="dict"),
            concurrency=dict(type="int", default=1),
            duration_s=dict(type="float"),
            requests=dict(type="int"),
            warmup_s=dict(type="float", default=0),
            warmup_requests=dict(type="int", default=0),
            timeout_s=dict(type="float", default=10),
            connect_timeout_s=dict(type="float", default=5),
            batch_size=dict(type="int", default=1),
            keep_samples=dict(type="bool", default=False),
        ),
        required_one_of=[("duration_s", "requests")],
        supports_check_mode=True,
    )


class LoadGenerator(object):

    def __init__(self, module):
        self.module = module
        self.stats = {}
        self.msg = ""

    def run(self):
        params = self.module.params
        load = LoadRun(**dict((name, params[name]) for name in RUN_OPTIONS))
        limit = " and ".join(part for part in (
            "%s s" % params["duration_s"] if params["duration_s"] is not None else "",
            "%s requests" % params["requests"] if params["requests"] is not None else "") if part)
        if self.module.check_mode:
            self.msg = ("check mode: no request sent; would measure model %s at %s with concurrency %d for %s"
                        % (params["model"], params["url"], params["concurrency"], limit))
            return
        self.stats = load.run()
        latency = self.stats["latency"]
        if self.stats["aborted"]:
            self.msg = "PARTIAL run: %s" % self.stats["aborted"]
        else:
            self.msg = ("%d requests answered, %d failed; P50 %s ms, P95 %s ms, P99 %s ms; %s inferences/s"
                        % (self.stats["requests_succeeded"], self.stats["requests_failed"], latency["p50_ms"],
                           latency["p95_ms"], latency["p99_ms"], self.stats["throughput"]))

    @property
    def failed(self):
        return bool(self.stats.get("aborted"))

    @property
    def result(self):
        result = dict(self.stats)
        result.update(changed=False, msg=self.msg)
        return result


def main():
    module = build_module()
    run_module(module, LoadGenerator(module))


if __name__ == "__main__":
    main()
