# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab tenant's inference server: a KServe v2 (HTTP/REST) server in the standard
library, standing in for Triton in the lab guest (lab/tenant-image/README.md says why).

It serves a Triton-like model repository: every directory ``<repo>/<model>/`` with a
``config.json`` is a model::

    {"inputs":  [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}],
     "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}],
     "compute_rounds": 4}

An infer request is checked against the config (names, datatypes, shapes, element
counts; -1 is a free dimension) and answered with the sum of each batch row, computed
``compute_rounds`` times so that a request costs real CPU time on the cores the server
is bound to. Errors are v2 error bodies (``{"error": "..."}``): 400 for a bad request,
404 for an unknown model or path.

Endpoints: ``GET /v2``, ``/v2/health/live``, ``/v2/health/ready``,
``/v2/models/<m>[/versions/<v>]``, ``.../ready``; ``POST .../infer``.

Usage: v2server.py --model-repository=/models [--http-port=8000] [--host=0.0.0.0]
"""

import argparse
import json
import math
import os
import re
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SERVER_NAME = "gpuhost-lab-v2server"
SERVER_VERSION = "1.0"
DATATYPES = {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16"}
MODEL_PATH = re.compile(r"^/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?"
                        r"(?P<action>/ready|/infer)?$")


class RequestError(Exception):
    def __init__(self, status, message):
        Exception.__init__(self, message)
        self.status = status


class Model(object):
    def __init__(self, name, config):
        self.name = name
        self.inputs = config.get("inputs") or []
        self.outputs = config.get("outputs") or [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}]
        self.rounds = max(1, int(config.get("compute_rounds", 1)))
        self.versions = [str(v) for v in config.get("versions", ["1"])]
        for tensor in self.inputs:
            if tensor.get("datatype") not in DATATYPES:
                raise ValueError("model %s: input %s has datatype %r, not a v2 datatype"
                                 % (name, tensor.get("name"), tensor.get("datatype")))

    def metadata(self):
        return {"name": self.name, "versions": self.versions, "platform": SERVER_NAME,
                "inputs": self.inputs, "outputs": self.outputs}

    def check_input(self, tensor, expected):
        shape = tensor.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise RequestError(400, "input %s: shape must be a list of non-negative integers" % expected["name"])
        if tensor.get("datatype") != expected["datatype"]:
            raise RequestError(400, "input %s: datatype %s, the model expects %s"
                               % (expected["name"], tensor.get("datatype"), expected["datatype"]))
        want = expected.get("shape", [])
        if len(want) != len(shape) or any(w != -1 and w != d for w, d in zip(want, shape)):
            raise RequestError(400, "input %s: shape %s does not match the model's %s"
                               % (expected["name"], shape, want))
        data = tensor.get("data")
        if not isinstance(data, list) or len(data) != math.prod(shape):
            raise RequestError(400, "input %s: %s elements of data for shape %s"
                               % (expected["name"], len(data) if isinstance(data, list) else "no", shape))
        return shape, data

    def infer(self, request):
        given = {t.get("name"): t for t in request.get("inputs") or [] if isinstance(t, dict)}
        if not self.inputs:
            raise RequestError(400, "model %s has no inputs in its config" % self.name)
        first = self.inputs[0]
        if first["name"] not in given:
            raise RequestError(400, "input %s is missing (the model expects %s)"
                               % (first["name"], ", ".join(t["name"] for t in self.inputs)))
        for expected in self.inputs[1:]:
            if expected["name"] not in given:
                raise RequestError(400, "input %s is missing" % expected["name"])
            self.check_input(given[expected["name"]], expected)
        shape, data = self.check_input(given[first["name"]], first)
        rows = shape[0] if shape else 1
        width = len(data) // rows if rows else 0
        try:
            for dummy in range(self.rounds):
                sums = [float(sum(data[row * width:(row + 1) * width])) for row in range(rows)]
        except TypeError:
            raise RequestError(400, "input %s: data holds non-numbers" % first["name"])
        output = self.outputs[0]
        return {"model_name": self.name, "model_version": self.versions[-1],
                "id": request.get("id", ""),
                "outputs": [{"name": output["name"], "datatype": output.get("datatype", "FP32"),
                             "shape": [rows], "data": sums}]}


def load_repository(path):
    models = {}
    for name in sorted(os.listdir(path)):
        config_path = os.path.join(path, name, "config.json")
        if os.path.isfile(config_path):
            with open(config_path, encoding="utf-8") as handle:
                models[name] = Model(name, json.load(handle))
    return models


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in one write with Nagle off: two small writes on a keep-alive
    # connection meet the client's delayed ACK and every answer waits 40 ms.
    disable_nagle_algorithm = True
    server_version = "%s/%s" % (SERVER_NAME, SERVER_VERSION)

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass

    def send_json(self, status, body):
        payload = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self._headers_buffer.append(b"\r\n" + payload)
        self.flush_headers()

    def model(self, match):
        model = self.server.models.get(match.group("model"))
        version = match.group("version")
        if model is None or (version is not None and version not in model.versions):
            suffix = " version %s" % version if version else ""
            raise RequestError(404, "unknown model %s%s" % (match.group("model"), suffix))
        return model

    def do_GET(self):
        try:
            if self.path == "/v2":
                return self.send_json(200, {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": []})
            if self.path in ("/v2/health/live", "/v2/health/ready"):
                return self.send_json(200, {"live": True} if self.path.endswith("live") else {"ready": True})
            match = MODEL_PATH.match(self.path)
            if match is None or match.group("action") == "/infer":
                raise RequestError(404, "no such endpoint: GET %s" % self.path)
            model = self.model(match)
            if match.group("action") == "/ready":
                return self.send_json(200, {"name": model.name, "ready": True})
            return self.send_json(200, model.metadata())
        except RequestError as err:
            return self.send_json(err.status, {"error": str(err)})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        try:
            match = MODEL_PATH.match(self.path)
            if match is None or match.group("action") != "/infer":
                raise RequestError(404, "no such endpoint: POST %s" % self.path)
            model = self.model(match)
            try:
                request = json.loads(body)
            except ValueError as err:
                raise RequestError(400, "the body is not JSON: %s" % err)
            if not isinstance(request, dict):
                raise RequestError(400, "the body must be a JSON object")
            return self.send_json(200, model.infer(request))
        except RequestError as err:
            return self.send_json(err.status, {"error": str(err)})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--model-repository", required=True)
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--host", default="0.0.0.0")
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.http_port), Handler)
    server.daemon_threads = True
    server.models = load_repository(args.model_repository)
    if not server.models:
        sys.stderr.write("no model in %s (a model is <name>/config.json)\n" % args.model_repository)
        return 1
    # docker stop sends SIGTERM; shut down cleanly instead of dying mid-answer.
    signal.signal(signal.SIGTERM, lambda *dummy: threading.Thread(target=server.shutdown).start())
    sys.stderr.write("%s serving %s on %s:%d\n" % (SERVER_NAME, ", ".join(server.models), args.host,
                                                   args.http_port))
    sys.stderr.flush()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
