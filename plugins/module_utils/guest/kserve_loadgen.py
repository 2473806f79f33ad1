# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A closed-loop load generator for the KServe v2 inference protocol over HTTP/1.1.

Triton, MLServer, KServe and most inference servers speak the v2 protocol
(``POST /v2/models/<model>[/versions/<v>]/infer`` with JSON tensors). This client uses
only the standard library (asyncio streams), because it runs inside a minimal tenant
guest through AnsiballZ, where aiohttp or tritonclient cannot be assumed.

Model of the load, the one perf_analyzer calls "concurrency mode": ``concurrency``
workers, each holding one keep-alive connection and sending its next request as soon as
the previous one answered. The run has three parts:

* warm-up: requests started before the warm-up ends (``warmup_s`` seconds *and*
  ``warmup_requests`` answers, whichever comes later) are sent but not counted;
* measurement: every request started after the warm-up, until ``duration_s`` elapsed
  or ``requests`` were started, whichever comes first;
* drain: requests in flight when the measurement ends are awaited and counted.

Latency is measured per request from just before the request is written to just after
the last byte of the answer is read. Percentiles are computed on the exact sorted
samples of the successful requests, by the nearest-rank method: the P-th percentile of n
sorted samples is the sample of rank ceil(P/100 * n) (1-based). It is always a measured
value, never an interpolation, and P100 is the maximum.

Failures are counted by kind (``http_500``, ``timeout``, ``connection_closed``,
``connection_refused``, ``bad_response``). A server that stops during the run (the
connection drops and it refuses a new one) ends the run at once with ``aborted`` set to
a clear reason; the statistics of what was measured until then are still returned, marked
partial. Every request has a timeout and the whole run a hard deadline, so the run never
hangs.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time

from urllib.parse import quote

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    finite_number, positive_int, url as checked_url)

# The longest a run, its warm-up or one request may be told to take: a day.
MAX_RUN_S = 86400.0
# The most tensor elements one request may carry, all inputs together: 2**25, seven
# times the runbook's ResNet50 batch of 32 (32x3x224x224 = 4.8 million). An input
# without data is built as that many zeros in memory and then as JSON (a few bytes per
# element), in check mode too; past this bound one value would exhaust the guest's memory.
MAX_TENSOR_ELEMENTS = 1 << 25
# No inference framework takes more dimensions than this (TensorRT: 8, NumPy: 64).
MAX_TENSOR_DIMS = 64
# Each worker holds one connection and one request in flight.
MAX_CONCURRENCY = 1024
# The most requests a run may count or warm up with: a request-count run has no other end.
MAX_REQUESTS = 10000000

PERCENTILES = (50, 90, 95, 99)

# A model name and version as KServe v2 servers name them (Triton: the model
# repository's directory names): letters, digits, '_', '-' and '.', never '..' and not
# starting with '.'. They become one segment of the URL path, so nothing that could end
# the segment, the path or the request line (/, %, ?, #, blanks, control characters) is
# allowed; the whole value must match (fullmatch: '$' would also match before a final
# newline).
MAX_NAME = 255
_MODEL_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,%d}" % (MAX_NAME - 1))
# A tensor name goes into the JSON body: the model name's characters and ':', which
# TensorFlow's tensor names carry (input_1:0).
_TENSOR_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.:-]{0,%d}" % (MAX_NAME - 1))
# The datatypes of the v2 protocol (its "Tensor Data Types" table).
DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16", "BYTES")

# Failures of the connection itself, as opposed to an answer the server gave.
CONNECTION_ERRORS = ("connection_closed", "connection_refused", "connection_error")

_DTYPE_ZERO = {"BOOL": False, "BYTES": ""}


class _ServerClosed(Exception):
    """The server closed the connection before (or while) answering."""


class _BadResponse(Exception):
    """The bytes read are not an HTTP/1.1 answer."""


# The largest answer body read: far above any v2 inference answer, far below memory.
MAX_BODY_BYTES = 64 * 1024 * 1024


def _content_length(values):
    """The one length the Content-Length header(s) give; two different lengths (a
    doubled header) or a length that is not decimal digits is no HTTP/1.1 answer."""
    if len(values) != 1:
        raise _BadResponse("Content-Length given twice, as %s" % ", ".join(sorted(values)))
    text = next(iter(values))
    if not text.isascii() or not text.isdigit() or int(text) > MAX_BODY_BYTES:
        raise _BadResponse("Content-Length %r is no body length this client reads" % text[:20])
    return int(text)


def nearest_rank(sorted_samples, percentile):
    """The nearest-rank percentile of already sorted samples (see the module docstring)."""
    if not sorted_samples:
        return None
    if not 0 < percentile <= 100:
        raise ValueError("percentile must be in (0, 100], got %r" % (percentile,))
    rank = max(1, int(math.ceil(percentile / 100.0 * len(sorted_samples))))
    return sorted_samples[rank - 1]


def histogram(sorted_samples, bins=40):
    """Equal-width bins between the smallest and the largest sample, for the plot only."""
    if not sorted_samples:
        return {"edges_ms": [], "counts": []}
    low, high = sorted_samples[0], sorted_samples[-1]
    if high <= low:
        return {"edges_ms": [round(low, 4), round(low, 4)], "counts": [len(sorted_samples)]}
    width = (high - low) / bins
    counts = [0] * bins
    for value in sorted_samples:
        counts[min(bins - 1, int((value - low) / width))] += 1
    edges = [round(low + i * width, 4) for i in range(bins + 1)]
    return {"edges_ms": edges, "counts": counts}


def latency_stats(samples_ms):
    """min/max/mean/P50/P90/P95/P99 (nearest rank) of latencies in milliseconds."""
    ordered = sorted(samples_ms)
    stats = {"count": len(ordered)}
    if not ordered:
        stats.update({"min_ms": None, "max_ms": None, "mean_ms": None})
        stats.update({"p%d_ms" % p: None for p in PERCENTILES})
        return stats
    stats.update({
        "min_ms": round(ordered[0], 4),
        "max_ms": round(ordered[-1], 4),
        "mean_ms": round(sum(ordered) / len(ordered), 4),
    })
    stats.update({"p%d_ms" % p: round(nearest_rank(ordered, p), 4) for p in PERCENTILES})
    return stats


def _zeros(datatype, count):
    value = _DTYPE_ZERO.get(datatype.upper(), 0.0 if datatype.upper().startswith(("FP", "BF")) else 0)
    return [value] * count


def checked_name(value, field, kind="model name"):
    """``value`` (a model name, a model version or a tensor name) unchanged, or a
    GpuhostError naming ``field``: a full match of the name rule, without '..'."""
    pattern = _TENSOR_NAME if kind == "tensor name" else _MODEL_NAME
    extra = ", ':'" if kind == "tensor name" else ""
    if not isinstance(value, str) or not pattern.fullmatch(value) or ".." in value:
        raise GpuhostError(
            "%r is not a usable %s" % (value, kind), field=field,
            fix="give the %s exactly as the server's model configuration has it: 1 to %d "
                "letters, digits, '_', '-' and '.'%s, not starting with '.' and without '..' "
                "(e.g. %s)" % (kind, MAX_NAME, extra,
                               {"model name": "resnet50", "model version": "1"}.get(kind, "INPUT0")))
    return value


def tensor_shape(shape, field):
    """A tensor shape as a list of whole dimensions of 1 or more, at most
    MAX_TENSOR_DIMS of them; the element count is bounded by the caller. Checked before
    any multiplication, so no value makes work in proportion to itself."""
    fix = "give the concrete shape of one request, batch dimension included, e.g. [32, 3, 224, 224]"
    if not isinstance(shape, (list, tuple)) or not shape:
        raise GpuhostError("%r is not a shape" % (shape,), field=field, fix=fix)
    if len(shape) > MAX_TENSOR_DIMS:
        raise GpuhostError("the shape has %d dimensions, more than %d" % (len(shape), MAX_TENSOR_DIMS),
                           field=field, fix=fix)
    dims = []
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise GpuhostError("dimension %r of %r is not a whole number" % (dim, list(shape)), field=field,
                               fix=fix)
        dims.append(dim)
    if any(dim < 1 for dim in dims):
        raise GpuhostError("shape %s has a dimension below 1" % dims, field=field, fix=fix)
    if any(dim > MAX_TENSOR_ELEMENTS for dim in dims):
        raise GpuhostError("shape %s has a dimension above the limit of %d elements per request"
                           % (dims, MAX_TENSOR_ELEMENTS), field=field, fix=fix)
    return dims


def build_infer_body(inputs, outputs=None, parameters=None):
    """The JSON body of a v2 infer request. An input without ``data`` is filled with zeros
    of its shape, so that a benchmark can name shapes without shipping tensors."""
    if not inputs:
        raise GpuhostError("at least one input tensor is needed", field="inputs",
                           fix="give name, shape and datatype of each model input, as in the model's config")
    tensors = []
    total_elements = 0
    for index, tensor in enumerate(inputs):
        for key in ("name", "shape", "datatype"):
            if key not in tensor:
                raise GpuhostError("input tensor has no %s" % key, field="inputs[%d].%s" % (index, key),
                                   fix="give name, shape and datatype of each model input")
        checked_name(tensor["name"], "inputs[%d].name" % index, "tensor name")
        if tensor["datatype"] not in DATATYPES:
            raise GpuhostError("%r is not a datatype of the v2 protocol" % (tensor["datatype"],),
                               field="inputs[%d].datatype" % index,
                               fix="use one of %s, as the model configuration has it" % ", ".join(DATATYPES))
        shape = tensor_shape(tensor["shape"], "inputs[%d].shape" % index)
        elements = math.prod(shape)
        total_elements += elements
        if total_elements > MAX_TENSOR_ELEMENTS:
            raise GpuhostError(
                "shape %s makes the request %s elements, above the limit of %d (2**25)"
                % (shape, "{0:,}".format(total_elements), MAX_TENSOR_ELEMENTS),
                field="inputs[%d].shape" % index,
                fix="give the shape of one request as the model takes it (the runbook's ResNet50: "
                    "[32, 3, 224, 224]); measure a larger batch as several requests with a higher "
                    "concurrency")
        entry = {"name": tensor["name"], "shape": shape, "datatype": tensor["datatype"]}
        if tensor.get("data") is None:
            entry["data"] = _zeros(tensor["datatype"], elements)
        else:
            entry["data"] = tensor["data"]
        if tensor.get("parameters"):
            entry["parameters"] = tensor["parameters"]
        tensors.append(entry)
    body = {"inputs": tensors}
    if outputs:
        body["outputs"] = [{"name": checked_name(name, "outputs[%d]" % index, "tensor name")}
                           for index, name in enumerate(outputs)]
    if parameters:
        body["parameters"] = parameters
    return json.dumps(body, separators=(",", ":")).encode()


def parse_url(url):
    """(host, port, base path) of an http:// URL (``HOST:PORT`` alone means http), checked
    by the one URL validator; https is refused with a reason."""
    if isinstance(url, str) and "://" not in url:
        url = "http://" + url
    scheme, host, port, path = checked_url(url, field="url", schemes=("http", "https"),
                                           example="http://127.0.0.1:8000")
    if scheme != "http":
        raise GpuhostError("only plain http is supported, got %s" % scheme, field="url",
                           fix="point the load generator at the server's HTTP port inside the guest "
                               "(Triton: 8000), the way perf_analyzer -u does")
    return host, port, path


def infer_path(base, model, version=None):
    path = "%s/v2/models/%s" % (base, quote(model, safe=""))
    if version:
        path += "/versions/%s" % quote(str(version), safe="")
    return path + "/infer"


class HttpConnection:
    """One keep-alive HTTP/1.1 connection driven with asyncio streams."""

    def __init__(self, host, port, connect_timeout):
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout
        self.reader = None
        self.writer = None
        self.used = False

    @property
    def is_open(self):
        return self.writer is not None

    async def open(self):
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port), self.connect_timeout)
        self.used = False

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, method, path, body=b"", headers=None):
        """Send one request and read its answer: (status, headers, body)."""
        lines = ["%s %s HTTP/1.1" % (method, path), "Host: %s:%d" % (self.host, self.port),
                 "Content-Length: %d" % len(body), "Connection: keep-alive"]
        for name, value in (headers or {}).items():
            lines.append("%s: %s" % (name, value))
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        self.used = True
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise _ServerClosed("closed before answering")
        parts = status_line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise _BadResponse("not an HTTP/1.1 status line: %r" % status_line[:80])
        status = int(parts[1])
        answer_headers = {}
        lengths = set()
        while True:
            line = await self.reader.readline()
            if not line:
                raise _ServerClosed("closed in the middle of the headers")
            if line in (b"\r\n", b"\n"):
                break
            name, dummy, value = line.decode("latin-1").partition(":")
            answer_headers[name.strip().lower()] = value.strip()
            if name.strip().lower() == "content-length":
                lengths.update(part.strip() for part in value.split(","))
        # A truncated body ends in asyncio.IncompleteReadError, which the callers tell
        # from a closed connection (a request that may have been served is not retried).
        if "chunked" in answer_headers.get("transfer-encoding", "").lower():
            payload = await self._read_chunked()
        elif lengths:
            payload = await self.reader.readexactly(_content_length(lengths))
        else:
            payload = await self._read_to_end()
            answer_headers["connection"] = "close"
        if answer_headers.get("connection", "").lower() == "close":
            self.close()
        return status, answer_headers, payload

    async def _read_to_end(self):
        chunks, size = [], 0
        while True:
            chunk = await self.reader.read(1 << 16)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _BadResponse("a body of more than %d bytes" % MAX_BODY_BYTES)
            chunks.append(chunk)

    async def _read_chunked(self):
        chunks = []
        while True:
            size_line = await self.reader.readline()
            if not size_line:
                raise _ServerClosed("closed in the middle of a chunked body")
            size_text = size_line.split(b";")[0].strip() or b"0"
            if not re.fullmatch(rb"[0-9a-fA-F]{1,8}", size_text) or \
                    int(size_text, 16) > MAX_BODY_BYTES - sum(map(len, chunks)):
                raise _BadResponse("not a chunk size the body can have: %r" % size_line[:40])
            size = int(size_text, 16)
            if size == 0:
                while (await self.reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)


class LoadRun:
    """One run of the load generator; ``run()`` returns the result dict."""

    def __init__(self, url, model, inputs, model_version=None, outputs=None, parameters=None,
                 concurrency=1, duration_s=None, requests=None, warmup_s=0.0, warmup_requests=0,
                 timeout_s=10.0, connect_timeout_s=5.0, batch_size=1, check_ready=True, keep_samples=False):
        if duration_s is None and requests is None:
            raise GpuhostError("the run has no end", field="duration_s",
                               fix="give duration_s (seconds of measurement) or requests (a count), or both")
        concurrency = positive_int(concurrency, "concurrency", maximum=MAX_CONCURRENCY,
                                   fix="use the number of requests in flight the tenant must sustain "
                                       "(the runbook: 8)")
        # Finite and bounded: a NaN or infinite duration or timeout never ends the run.
        if duration_s is not None:
            duration_s = finite_number(duration_s, "duration_s", maximum=MAX_RUN_S, unit="seconds")
        if requests is not None:
            requests = positive_int(requests, "requests", maximum=MAX_REQUESTS)
        warmup_requests = positive_int(warmup_requests or 0, "warmup_requests", minimum=0,
                                       maximum=MAX_REQUESTS)
        timeout_s = finite_number(timeout_s, "timeout_s", maximum=MAX_RUN_S, unit="seconds")
        connect_timeout_s = finite_number(connect_timeout_s, "connect_timeout_s", maximum=MAX_RUN_S,
                                          unit="seconds")
        warmup_s = finite_number(warmup_s or 0, "warmup_s", allow_minimum=True, maximum=MAX_RUN_S,
                                 unit="seconds")
        batch_size = positive_int(batch_size, "batch_size")
        self.host, self.port, base = parse_url(url)
        # Both become segments of the URL path: checked whole, never quoted into shape.
        model = checked_name(model, "model")
        if model_version is not None and model_version != "":
            model_version = checked_name(
                str(model_version) if isinstance(model_version, int) and not isinstance(
                    model_version, bool) else model_version, "model_version", "model version")
        self.url = url
        self.model = model
        self.path = infer_path(base, model, model_version)
        self.ready_path = self.path[:-len("/infer")] + "/ready"
        self.body = build_infer_body(inputs, outputs, parameters)
        self.concurrency = int(concurrency)
        self.duration_s = duration_s
        self.requests = requests
        self.warmup_s = float(warmup_s or 0)
        self.warmup_requests = int(warmup_requests or 0)
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.batch_size = int(batch_size)
        self.check_ready = check_ready
        self.keep_samples = keep_samples
        # State of the run.
        self.samples_ms = []
        self.errors = {}
        self.error_examples = {}
        self.warmup_sent = 0
        self.started = 0
        self.aborted = None
        self.measure_start = None
        self._warmup_answered = 0
        self._last_answer = None
        self._stop = None

    # -- the run ---------------------------------------------------------------------

    def run(self):
        return asyncio.run(self._main())

    def hard_deadline_s(self):
        """Seconds after which the run is cut whatever happens: the planned time plus one
        request timeout and a margin, or a request-count run's worst case."""
        warmup = self.warmup_s + (self.warmup_requests / self.concurrency + 1) * self.timeout_s \
            if self.warmup_requests else self.warmup_s
        if self.duration_s is not None:
            measure = self.duration_s
        else:
            measure = math.ceil(self.requests / self.concurrency) * self.timeout_s
        return warmup + measure + self.timeout_s + self.connect_timeout_s + 5.0

    async def _main(self):
        self._stop = asyncio.Event()
        if self.check_ready:
            await self._check_ready()
        self.t0 = time.perf_counter()
        if not self.warmup_s and not self.warmup_requests:
            self.measure_start = self.t0
        workers = [asyncio.ensure_future(self._worker(index)) for index in range(self.concurrency)]
        done, pending = await asyncio.wait(workers, timeout=self.hard_deadline_s())
        if pending:
            self._abort("the run passed its hard deadline of %.0f s with %d requests still unanswered; "
                        "the server hangs" % (self.hard_deadline_s(), len(pending)))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if task.exception() is not None and not self.aborted:
                self._abort("load generator worker failed: %r" % (task.exception(),))
        return self.result()

    async def _check_ready(self):
        conn = HttpConnection(self.host, self.port, self.connect_timeout_s)
        where = "http://%s:%d%s" % (self.host, self.port, self.ready_path)
        try:
            await conn.open()
            status, dummy, payload = await asyncio.wait_for(conn.request("GET", self.ready_path),
                                                            self.timeout_s)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, _ServerClosed,
                _BadResponse) as exc:
            raise GpuhostError("the inference server does not answer at %s: %s" % (where, _describe(exc)),
                               field="url", fix="start the server (gpuhost-triton.service in the guest) and check "
                                                "that url names its HTTP port")
        finally:
            conn.close()
        if status != 200:
            raise GpuhostError("model %r is not ready (%s answered HTTP %d: %s)"
                               % (self.model, where, status, payload[:200].decode("utf-8", "replace")),
                               field="model", fix="check the model name and the server's log; the model must "
                                                  "load before it is measured")

    def _abort(self, reason):
        if not self.aborted:
            self.aborted = reason
        self._stop.set()

    def _in_warmup(self, now):
        if self.measure_start is not None:
            return False
        if now - self.t0 >= self.warmup_s and self._warmup_answered >= self.warmup_requests:
            self.measure_start = now
            return False
        return True

    def _next_request_counted(self):
        """Whether the next request may start: None to stop, else whether it is measured."""
        if self._stop.is_set():
            return None
        now = time.perf_counter()
        if self._in_warmup(now):
            return False
        if self.duration_s is not None and now - self.measure_start >= self.duration_s:
            self._end_measurement()
            return None
        if self.requests is not None and self.started >= self.requests:
            self._end_measurement()
            return None
        self.started += 1
        return True

    def _end_measurement(self):
        self._stop.set()

    async def _worker(self, index):
        conn = HttpConnection(self.host, self.port, self.connect_timeout_s)
        try:
            while True:
                counted = self._next_request_counted()
                if counted is None:
                    return
                if not counted:
                    self.warmup_sent += 1
                kind, detail, latency_ms = await self._one_request(conn)
                if self.aborted:
                    return
                if counted:
                    self._last_answer = time.perf_counter()
                if kind is None:
                    if counted:
                        self.samples_ms.append(latency_ms)
                    else:
                        self._warmup_answered += 1
                else:
                    if counted:
                        self.errors[kind] = self.errors.get(kind, 0) + 1
                        self.error_examples.setdefault(kind, detail)
                    if kind in CONNECTION_ERRORS and not await self._server_still_there(conn):
                        self._abort("the server at %s:%d stopped answering during the run (%s; a new connection "
                                    "was refused) after %d measured requests"
                                    % (self.host, self.port, detail, len(self.samples_ms) + self._error_count()))
                        return
        finally:
            conn.close()

    def _error_count(self):
        return sum(self.errors.values())

    async def _server_still_there(self, conn):
        conn.close()
        try:
            await conn.open()
            return True
        except (OSError, asyncio.TimeoutError):
            return False

    async def _one_request(self, conn):
        """(error kind or None, detail, latency in ms) of one infer request."""
        for attempt in (1, 2):
            reused = conn.is_open and conn.used
            try:
                if not conn.is_open:
                    await conn.open()
                start = time.perf_counter()
                status, dummy, payload = await asyncio.wait_for(
                    conn.request("POST", self.path, self.body, {"Content-Type": "application/json"}),
                    self.timeout_s)
                latency_ms = (time.perf_counter() - start) * 1000.0
            except asyncio.TimeoutError:
                conn.close()
                return "timeout", "no answer within %.3g s" % self.timeout_s, None
            except ConnectionRefusedError as exc:
                conn.close()
                return "connection_refused", _describe(exc), None
            except (_ServerClosed, asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
                conn.close()
                # A keep-alive connection the server closed while idle is not a failure of
                # this request: retry it once on a fresh connection, as HTTP clients do.
                if reused and attempt == 1 and not isinstance(exc, asyncio.IncompleteReadError):
                    continue
                return "connection_closed", _describe(exc), None
            except _BadResponse as exc:
                conn.close()
                return "bad_response", str(exc), None
            except OSError as exc:
                conn.close()
                return "connection_error", _describe(exc), None
            if status != 200:
                return "http_%d" % status, _error_text(payload), latency_ms
            if b'"outputs"' not in payload:
                return "bad_response", "HTTP 200 without outputs: %s" % payload[:200].decode("utf-8", "replace"), None
            return None, None, latency_ms
        return "connection_closed", "closed twice", None

    # -- the result ------------------------------------------------------------------

    def result(self):
        # The measured time runs from the end of the warm-up to the last counted answer,
        # so that requests drained after the limit count with the time they took.
        measured_s = None
        if self.measure_start is not None and self._last_answer is not None:
            measured_s = max(self._last_answer - self.measure_start, 1e-9)
        ordered = sorted(self.samples_ms)
        succeeded = len(ordered)
        failed = self._error_count()
        throughput_rps = round(succeeded / measured_s, 3) if measured_s else 0.0
        result = {
            "runner": "builtin",
            "url": self.url,
            "model": self.model,
            "concurrency": self.concurrency,
            "batch_size": self.batch_size,
            "complete": self.aborted is None,
            "aborted": self.aborted,
            "warmup_requests_sent": self.warmup_sent,
            "requests_sent": succeeded + failed,
            "requests_succeeded": succeeded,
            "requests_failed": failed,
            "errors": dict(sorted(self.errors.items())),
            "error_examples": dict(sorted(self.error_examples.items())),
            "measured_s": round(measured_s, 4) if measured_s else 0.0,
            "throughput_rps": throughput_rps,
            "throughput": round(throughput_rps * self.batch_size, 3),
            "latency": latency_stats(ordered),
            "histogram": histogram(ordered),
            "percentile_method": "nearest-rank on exact sorted samples of successful requests",
        }
        if self.keep_samples:
            result["samples_ms"] = [round(value, 4) for value in self.samples_ms]
        return result


def _describe(exc):
    text = str(exc) or type(exc).__name__
    return "%s: %s" % (type(exc).__name__, text) if type(exc).__name__ not in text else text


def _error_text(payload):
    """The server's own error message (v2 protocol: {"error": "..."})."""
    try:
        return str(json.loads(payload.decode("utf-8")).get("error"))[:300]
    except (ValueError, AttributeError, UnicodeDecodeError):
        return payload[:300].decode("utf-8", "replace")


def run_load(**options):
    """Run the load generator with LoadRun's options and return its result dict."""
    return LoadRun(**options).run()
