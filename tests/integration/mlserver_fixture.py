# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real KServe v2 server on 127.0.0.1 for the load generator's tests: MLServer (from
PyPI, pinned in requirements.txt) serving small models this file writes, whose latency
and failures the tests control:

* ``sleep_ms``: every answer waits at least that long, by the real monotonic clock
  (MLServer runs on uvloop, whose timers count from the loop's cached time in whole
  milliseconds, so a plain asyncio.sleep(0.010) can end early: the client measured a
  whole request to a 10 ms model at 9.77 ms on a loaded machine, 2026-12-01; the model
  sleeps again until the clock has passed);
* ``slow_every`` / ``slow_ms``: every N-th request waits ``slow_ms`` instead, which gives
  a distribution whose percentiles are known in advance;
* ``fail``: the model raises RuntimeError (MLServer answers a plain HTTP 500), or with
  ``fail: protocol`` an MLServerError (a v2 error body ``{"error": ...}`` with HTTP 400).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

MODEL_CODE = '''
import asyncio
import time
from mlserver import MLModel
from mlserver.errors import MLServerError
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class ControlledLatencyModel(MLModel):
    async def load(self):
        extra = (self.settings.parameters.extra or {}) if self.settings.parameters else {}
        self._sleep_s = float(extra.get("sleep_ms", 0)) / 1000.0
        self._slow_every = int(extra.get("slow_every", 0))
        self._slow_s = float(extra.get("slow_ms", 0)) / 1000.0
        self._fail = extra.get("fail", False)
        self._count = 0
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        if self._fail == "protocol":
            raise MLServerError("controlled failure: input rejected", status_code=400)
        if self._fail:
            raise RuntimeError("controlled failure: this model always raises")
        self._count += 1
        slow = self._slow_every and self._count % self._slow_every == 0
        await self._wait(self._slow_s if slow else self._sleep_s)
        data = NumpyCodec.decode_input(payload.inputs[0])
        return InferenceResponse(model_name=self.name, outputs=[NumpyCodec.encode_output("OUTPUT0", data)])

    @staticmethod
    async def _wait(seconds):
        deadline = time.monotonic() + seconds
        remaining = seconds
        while remaining > 0:
            await asyncio.sleep(remaining)
            remaining = deadline - time.monotonic()
'''


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MLServerProcess(object):
    """MLServer started in its own session, so that the tests can kill it whole."""

    def __init__(self, workdir, models):
        self.workdir = str(workdir)
        self.models = models
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(self.workdir, "mlserver.log")
        self.process = None

    def write_repository(self):
        with open(os.path.join(self.workdir, "controlled_model.py"), "w") as handle:
            handle.write(MODEL_CODE)
        settings = {"http_port": self.port, "grpc_port": free_port(), "metrics_port": free_port(),
                    "host": "127.0.0.1", "parallel_workers": 0, "debug": False}
        with open(os.path.join(self.workdir, "settings.json"), "w") as handle:
            json.dump(settings, handle)
        for name, extra in self.models.items():
            model_dir = os.path.join(self.workdir, name)
            os.makedirs(model_dir, exist_ok=True)
            with open(os.path.join(model_dir, "model-settings.json"), "w") as handle:
                json.dump({"name": name, "implementation": "controlled_model.ControlledLatencyModel",
                           "parameters": {"extra": extra}}, handle)

    def start(self, timeout=60):
        self.write_repository()
        mlserver = os.path.join(os.path.dirname(sys.executable), "mlserver")
        env = dict(os.environ, PYTHONPATH=self.workdir)
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen([mlserver, "start", self.workdir], cwd=self.workdir, env=env,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("mlserver exited with %s:\n%s" % (self.process.returncode, self.log()))
            if all(self.ready(name) for name in self.models):
                return self
            time.sleep(0.25)
        self.kill()
        raise RuntimeError("mlserver not ready after %d s:\n%s" % (timeout, self.log()))

    def ready(self, model):
        try:
            with urllib.request.urlopen("%s/v2/models/%s/ready" % (self.url, model), timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def log(self):
        with open(self.log_path) as handle:
            return handle.read()[-4000:]

    def kill(self):
        """SIGKILL the whole server at once, as a crash or an OOM kill would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
