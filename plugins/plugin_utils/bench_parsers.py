# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers of NVIDIA's benchmark tools, into the result shape the built-in load generator
returns (``runner``, ``throughput`` in inferences per second, ``latency`` with
``p50_ms``..``p99_ms``), so that one gate and one report serve every runner.

* trtexec: the "=== Performance summary ===" block it prints after a timed run
  (``trtexec --loadEngine=... --streams=N --duration=S``). Its ``Throughput: X qps``
  counts queries, each query being one execution of the engine's whole batch.
* perf_analyzer: the CSV written with ``-f out.csv``, one row per concurrency step, in the
  order the steps finished; latencies there are microseconds.

Both are tested on real output from NVIDIA's documentation and sample repositories
(tests/fixtures/bench/SOURCE.md).
"""

from __future__ import annotations

import csv
import io
import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import positive_int

_TRTEXEC_PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)*")
_TRTEXEC_STAT = re.compile(r"(min|max|mean|median|percentile\(([\d.]+)%\))\s*=\s*([-+\d.eE]+)\s*ms")
_TRTEXEC_METRICS = {
    "Latency": "latency",
    "Enqueue Time": "enqueue_time",
    "H2D Latency": "h2d_latency",
    "GPU Compute Time": "gpu_compute_time",
    "D2H Latency": "d2h_latency",
}
_TRTEXEC_TOTALS = {
    "Total Host Walltime": "total_host_walltime_s",
    "Total GPU Compute Time": "total_gpu_compute_time_s",
}


def _percentile_key(text):
    value = float(text)
    return "p%s_ms" % (int(value) if value.is_integer() else text)


def _trtexec_stats(text):
    stats = {}
    for name, percentile, value in _TRTEXEC_STAT.findall(text):
        if percentile:
            stats[_percentile_key(percentile)] = float(value)
        elif name == "median":
            stats["p50_ms"] = float(value)
        else:
            stats["%s_ms" % name] = float(value)
    return stats


def _trtexec_lines(text):
    """Each line without its ``[date] [I]`` prefixes."""
    for raw in text.splitlines():
        yield raw, _TRTEXEC_PREFIX.sub("", raw.strip()).strip()


def parse_trtexec(text, batch_size=1):
    """The performance summary of a trtexec run.

    ``latency`` is trtexec's "Latency" (H2D + GPU compute + D2H of one query);
    ``throughput`` is its qps times ``batch_size`` (the batch each query carries).
    """
    # A batch below 1 would report a throughput of zero or less as if it were measured.
    batch_size = positive_int(batch_size, "batch_size")
    result = {"runner": "trtexec", "complete": True, "aborted": None, "batch_size": batch_size,
              "warnings": []}
    in_summary = False
    found_summary = False
    profiler_note = False
    for raw, line in _trtexec_lines(text):
        if line.startswith("&&&& FAILED"):
            raise GpuhostError("trtexec reported a failure: %s" % line, field="trtexec",
                               fix="read the trtexec output above the FAILED line; check the engine "
                                   "path and that it was built for this GPU and TensorRT version")
        if line.startswith("TensorRT version:"):
            result["tensorrt_version"] = line.split(":", 1)[1].strip()
        elif line.startswith("Inference Streams:"):
            result["streams"] = int(line.split(":", 1)[1])
        elif line.startswith("Selected Device:"):
            result["device"] = line.split(":", 1)[1].strip()
        elif line.startswith("Timing trace has"):
            match = re.match(r"Timing trace has (\d+) queries over ([\d.]+) s", line)
            if match:
                result["queries"] = int(match.group(1))
        elif "e2e network timing is not reported" in line:
            profiler_note = True
        elif line == "=== Performance summary ===":
            in_summary = found_summary = True
            continue
        elif line.startswith("==="):
            in_summary = False
        if not in_summary:
            continue
        key, dummy, rest = line.partition(":")
        if key == "Throughput":
            result["throughput_qps"] = float(rest.split()[0])
        elif key in _TRTEXEC_METRICS:
            result[_TRTEXEC_METRICS[key]] = _trtexec_stats(rest)
        elif key in _TRTEXEC_TOTALS:
            result[_TRTEXEC_TOTALS[key]] = float(rest.split()[0])
        elif "[W]" in raw and line.startswith("*"):
            result["warnings"].append(line.lstrip("* ").strip())
    if not found_summary or "throughput_qps" not in result or "latency" not in result:
        fix = "run trtexec with --duration (and --streams) and without --dumpProfile"
        if profiler_note:
            fix = ("trtexec prints no end-to-end timing when --dumpProfile profiles the timed run: "
                   "add --separateProfileRun (the runbook's command has it)")
        raise GpuhostError("no performance summary in the trtexec output", field="trtexec", fix=fix)
    result["throughput"] = round(result["throughput_qps"] * result["batch_size"], 3)
    return result


_PERF_COLUMNS = {
    "Concurrency": "concurrency",
    "Request Rate": "request_rate",
    "Inferences/Second": "throughput",
}


def _column_key(name):
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")


def parse_perf_analyzer_csv(text):
    """Every step of a perf_analyzer ``-f`` CSV, sorted by concurrency (or request rate).

    Latency columns are converted from microseconds to ``*_ms``; the ``pNN latency``
    columns become ``latency.pNN_ms``.
    """
    rows = list(csv.reader(io.StringIO(text.strip())))
    if len(rows) < 2 or "Inferences/Second" not in rows[0]:
        raise GpuhostError("not a perf_analyzer CSV (no Inferences/Second column)", field="perf_analyzer",
                           fix="run perf_analyzer with -f FILE and read that file")
    header = [name.strip() for name in rows[0]]
    steps = []
    for line_number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise GpuhostError("line %d has %d fields, the header %d" % (line_number, len(row), len(header)),
                               field="perf_analyzer", fix="give the CSV exactly as perf_analyzer wrote it")
        step = {"latency": {}, "components_ms": {}}
        for name, cell in zip(header, row):
            try:
                value = float(cell)
            except ValueError:
                raise GpuhostError("line %d: %s is %r, not a number" % (line_number, name, cell),
                                   field="perf_analyzer", fix="give the CSV exactly as perf_analyzer wrote it")
            match = re.match(r"^p([\d.]+) latency\Z", name)
            if name in _PERF_COLUMNS:
                step[_PERF_COLUMNS[name]] = int(value) if name == "Concurrency" else value
            elif match:
                step["latency"][_percentile_key(match.group(1))] = value / 1000.0
            elif name == "Avg latency":
                step["latency"]["mean_ms"] = value / 1000.0
            else:
                step["components_ms"][_column_key(name)] = value / 1000.0
        steps.append(step)
    order = "concurrency" if "concurrency" in steps[0] else "request_rate"
    steps.sort(key=lambda step: step.get(order, 0))
    return {"runner": "perf_analyzer", "steps": steps, "step_by": order}


def perf_analyzer_result(parsed, concurrency=None):
    """The result of one step: the one at ``concurrency``, or the highest load measured."""
    steps = parsed["steps"]
    if not steps:
        raise GpuhostError("the perf_analyzer CSV has no step", field="perf_analyzer",
                           fix="check that perf_analyzer finished (its stdout says why not)")
    if concurrency is None:
        step = steps[-1]
    else:
        matching = [s for s in steps if s.get("concurrency") == int(concurrency)]
        if not matching:
            measured = ", ".join(str(s.get("concurrency")) for s in steps)
            raise GpuhostError("no step at concurrency %s (measured: %s)" % (concurrency, measured),
                               field="benchmark_concurrency",
                               fix="include it in --concurrency-range, or gate on a measured one")
        step = matching[0]
    return {
        "runner": "perf_analyzer",
        "complete": True,
        "aborted": None,
        "concurrency": step.get("concurrency"),
        "throughput": step["throughput"],
        "latency": dict(step["latency"]),
        "components_ms": dict(step["components_ms"]),
        "steps": [{"concurrency": s.get("concurrency"), "throughput": s["throughput"],
                   "p95_ms": s["latency"].get("p95_ms"), "p99_ms": s["latency"].get("p99_ms")}
                  for s in steps],
    }


_CYCLICTEST_THREAD = re.compile(
    r"^T:\s*(\d+)\s*\(\s*(\d+)\)\s*P:\s*(\d+)\s+I:\s*(\d+)\s+C:\s*(\d+)\s+Min:\s*(\d+)\s+Act:\s*(\d+)"
    r"\s+Avg:\s*(\d+)\s+Max:\s*(\d+)")


def parse_cyclictest(text):
    """Per-thread wake-up latencies (microseconds) of ``cyclictest --quiet``, and the worst."""
    threads = []
    for line in text.splitlines():
        match = _CYCLICTEST_THREAD.match(line.strip())
        if match:
            thread, dummy, priority, interval, cycles, low, dummy, avg, high = (
                int(v) for v in match.groups())
            threads.append({"thread": thread, "priority": priority, "interval_us": interval, "cycles": cycles,
                            "min_us": low, "avg_us": avg, "max_us": high})
    if not threads:
        raise GpuhostError("no thread summary (T: ... Max: ...) in the cyclictest output", field="cyclictest",
                           fix="run cyclictest with --quiet and let it finish (--duration)")
    return {"threads": threads, "max_us": max(t["max_us"] for t in threads),
            "avg_us": round(sum(t["avg_us"] for t in threads) / float(len(threads)), 1)}
