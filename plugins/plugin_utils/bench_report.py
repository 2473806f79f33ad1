# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The acceptance gate of a tenant's benchmark and its reports (JSON, Markdown, SVG).

A result is the dict that the built-in load generator returns, or that bench_parsers
makes of trtexec and perf_analyzer output: ``throughput`` (inferences per second),
``latency`` (``p50_ms``..``p99_ms``), ``complete``/``aborted`` and, for the built-in
runner, ``errors`` and a ``histogram``. The gate fails on a missed figure, a missing
figure, an incomplete run, or too many failed requests, and every failure names the
tenant and the figure, because that line is what the operator reads in the play recap.
"""

from __future__ import annotations

import json

from xml.sax.saxutils import escape

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.markdown import markdown_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import finite_number
from ansible_collections.gpuhost.kvm.plugins.plugin_utils import bench_parsers

REPORT_VERSION = 1

_FIGURES = (
    # (gate option, where in the result, label, unit, the bound is a ceiling)
    ("p95_ms_max", ("latency", "p95_ms"), "P95 latency", "ms", True),
    ("p99_ms_max", ("latency", "p99_ms"), "P99 latency", "ms", True),
    ("min_throughput", ("throughput",), "throughput", "inferences/s", False),
)


def _lookup(result, path):
    value = result
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


# gpu_health's checks, as the gate names them: (label, the benchmark role's option, unit).
_HEALTH_CHECKS = {
    "gpu_present": ("GPU listed by nvidia-smi", "benchmark_gpu_health", "GPUs"),
    "temperature": ("GPU temperature", "benchmark_gpu_max_temperature_c", "C"),
    "ecc": ("GPU uncorrected ECC errors", "benchmark_gpu_max_uncorrected_ecc", "errors"),
    "mig_off": ("GPU MIG mode", "benchmark_gpu_mig_must_be_off", "mode"),
    "persistence": ("GPU persistence mode", "benchmark_gpu_persistence_must_be_on", "mode"),
    "memory_repair": ("GPU memory repair (row remap, page retirement)", "benchmark_gpu_max_uncorrected_ecc", "state"),
    "recovery_action": ("GPU recovery action", "benchmark_gpu_recovery_action_must_be_none", "action"),
    "throttle": ("GPU clock event reasons", "benchmark_gpu_throttle_reasons_must_be_clear", "reasons"),
    "xid": ("GPU Xid reports", "benchmark_gpu_ignored_xids", "Xids"),
}


def gpu_health_section(gpu_health):
    """The report's view of a gpu_health module result (registered with failed_when
    false): ``read`` and, when read, each GPU's figures and the findings; when not read
    (no nvidia-smi: a guest without an NVIDIA GPU), the module's message. None: the
    health was not asked for."""
    if not gpu_health or gpu_health.get("skipped"):
        return None
    health = gpu_health.get("health")
    if not health:
        return {"read": False, "error": gpu_health.get("msg") or "nvidia-smi gave no report",
                "driver_version": None, "gpus": [], "findings": []}
    keys = ("index", "name", "pci_bus_id", "temperature_c", "power_draw_w", "power_limit_w", "ecc_enabled",
            "ecc_volatile_uncorrected", "ecc_aggregate_uncorrected", "mig_enabled", "mig_pending_enabled",
            "persistence_enabled", "remapped_rows", "retired_pages", "recovery_action", "throttle_reasons")
    return {"read": True, "error": None, "driver_version": health.get("driver_version"),
            "gpus": [dict((key, gpu.get(key)) for key in keys) for gpu in health.get("gpus") or ()],
            "findings": list(gpu_health.get("findings") or ())}


def _health_checks(tenant, section):
    checks, failures = [], []
    for finding in (section or {}).get("findings") or ():
        label, option, unit = _HEALTH_CHECKS.get(finding["check"], (finding["check"], "benchmark_gpu_health", ""))
        checks.append({"figure": "%s (%s)" % (label, finding.get("gpu")) if finding.get("gpu") else label,
                       "option": option, "limit": finding.get("limit"), "measured": finding.get("measured"),
                       "unit": unit, "passed": finding["passed"]})
        if not finding["passed"]:
            failures.append("%s: %s" % (tenant, finding["detail"]))
    return checks, failures


def evaluate_gate(tenant, result, p95_ms_max=None, p99_ms_max=None, min_throughput=None,
                  max_error_ratio=0.0, gpu_health=None):
    """{"passed", "checks", "failures"}: every figure with its limit and verdict.

    ``gpu_health``: the gpu_health module's result, read right after the load (runbook
    section 14: temperature and power within bounds under load); each finding is a
    check. A health that could not be read (no nvidia-smi) adds none: the report says
    why, and the guest stage already failed a GPU guest whose driver does not answer."""
    limits = {"p95_ms_max": p95_ms_max, "p99_ms_max": p99_ms_max, "min_throughput": min_throughput}
    checks = []
    failures = []
    if not result.get("complete", True):
        failures.append("%s: the benchmark run did not complete (%s); its figures are partial"
                        % (tenant, result.get("aborted") or "no reason given"))
    for option, path, label, unit, ceiling in _FIGURES:
        limit = limits[option]
        if limit is None:
            continue
        measured = _lookup(result, path)
        passed = measured is not None and (measured <= limit if ceiling else measured >= limit)
        checks.append({"figure": label, "option": "benchmark_%s" % option, "limit": limit,
                       "measured": measured, "unit": unit, "passed": passed})
        if measured is None:
            failures.append("%s: %s was not measured (no successful request); benchmark_%s is %s %s"
                            % (tenant, label, option, limit, unit))
        elif not passed:
            failures.append("%s: %s %s %s is %s the %s %s limit (benchmark_%s)"
                            % (tenant, label, _num(measured), unit, "above" if ceiling else "below",
                               _num(limit), unit, option))
    sent = result.get("requests_sent")
    failed = result.get("requests_failed") or 0
    if sent:
        ratio = failed / float(sent)
        passed = ratio <= max_error_ratio
        checks.append({"figure": "failed requests", "option": "benchmark_max_error_ratio",
                       "limit": max_error_ratio, "measured": round(ratio, 6), "unit": "ratio",
                       "passed": passed})
        if not passed:
            kinds = ", ".join("%s x%d" % item for item in sorted((result.get("errors") or {}).items()))
            failures.append("%s: %d of %d requests failed (%s), above benchmark_max_error_ratio %s"
                            % (tenant, failed, sent, kinds, max_error_ratio))
    health_checks, health_failures = _health_checks(tenant, gpu_health_section(gpu_health))
    checks += health_checks
    failures += health_failures
    return {"passed": not failures, "checks": checks, "failures": failures}


def _num(value):
    return ("%.3f" % value).rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def compare(current, previous):
    """Changes of the headline figures against the previous report of the same tenant."""
    if not previous:
        return None
    before = previous.get("result", {})
    rows = []
    for label, path in (("P50 latency (ms)", ("latency", "p50_ms")), ("P95 latency (ms)", ("latency", "p95_ms")),
                        ("P99 latency (ms)", ("latency", "p99_ms")), ("throughput (inferences/s)", ("throughput",))):
        old, new = _lookup(before, path), _lookup(current, path)
        change = None
        if old not in (None, 0) and new is not None:
            change = round((new - old) / old * 100.0, 2)
        rows.append({"figure": label, "before": old, "after": new, "change_pct": change})
    return {"previous_run_at": previous.get("run_at"), "previous_runner": before.get("runner"),
            "previous_passed": previous.get("gate", {}).get("passed"), "figures": rows}


def build_report(tenant, host, result, gate, run_at, settings=None, previous=None, gpu_health=None):
    """The JSON report of one tenant's run (a plain dict); ``gpu_health`` as for
    evaluate_gate, reported under ``gpu_health`` (see gpu_health_section)."""
    return {
        "report_version": REPORT_VERSION,
        "tenant": tenant,
        "host": host,
        "run_at": run_at,
        "runner": result.get("runner"),
        "settings": settings or {},
        "result": result,
        "gate": gate,
        "comparison": compare(result, previous),
        "gpu_health": gpu_health_section(gpu_health),
    }


def report_json(report):
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


def _cell(value):
    if value is None:
        return "-"
    return markdown_text(_num(value))


def report_markdown(report):
    result = report["result"]
    gate = report["gate"]
    latency = result.get("latency") or {}
    status = "PASS" if gate["passed"] else "FAIL"
    if not result.get("complete", True):
        status += " (PARTIAL RUN)"
    lines = ["# Benchmark of %s on %s: %s" % (markdown_text(report["tenant"]), markdown_text(report["host"]),
                                              status), "",
             "Run at %s with the %s runner." % (markdown_text(report["run_at"]), markdown_text(report["runner"])),
             ""]
    if not result.get("complete", True):
        lines += ["**The run did not complete:** %s. The figures below cover only what was "
                  "measured before it stopped." % markdown_text(result.get("aborted")), ""]
    lines += ["| Figure | Value |", "|---|---|"]
    for key, label in (("p50_ms", "P50 (ms)"), ("p90_ms", "P90 (ms)"), ("p95_ms", "P95 (ms)"),
                       ("p99_ms", "P99 (ms)"), ("mean_ms", "mean (ms)"), ("min_ms", "min (ms)"),
                       ("max_ms", "max (ms)")):
        if key in latency:
            lines.append("| %s | %s |" % (label, _cell(latency[key])))
    lines.append("| throughput (inferences/s) | %s |" % _cell(result.get("throughput")))
    for key, label in (("concurrency", "concurrency"), ("batch_size", "batch size"),
                       ("requests_succeeded", "requests answered"), ("requests_failed", "requests failed"),
                       ("measured_s", "measured (s)"), ("streams", "trtexec streams")):
        if result.get(key) is not None:
            lines.append("| %s | %s |" % (label, _cell(result[key])))
    if result.get("errors"):
        lines += ["", "Failed requests by kind: " + ", ".join(
            "%s x%d (%s)" % (markdown_text(kind), count,
                             markdown_text((result.get("error_examples") or {}).get(kind, "")))
            for kind, count in sorted(result["errors"].items()))]
    if result.get("percentile_method"):
        lines += ["", "Percentiles: %s." % result["percentile_method"]]
    lines += ["", "## Gate", "", "| Figure | Limit | Measured | Verdict |", "|---|---|---|---|"]
    for check in gate["checks"]:
        lines.append("| %s (%s) | %s %s | %s | %s |" % (check["figure"], check["option"], _cell(check["limit"]),
                                                        check["unit"], _cell(check["measured"]),
                                                        "pass" if check["passed"] else "FAIL"))
    if not gate["checks"]:
        lines.append("| (no limit set) | - | - | - |")
    for failure in gate["failures"]:
        lines.append("")
        lines.append("- " + markdown_text(failure))
    lines += _health_markdown(report.get("gpu_health"))
    comparison = report.get("comparison")
    lines += ["", "## Compared with the previous run", ""]
    if comparison:
        lines += ["Previous run at %s (%s runner, gate %s)." % (
            markdown_text(comparison["previous_run_at"]), markdown_text(comparison["previous_runner"]),
            "passed" if comparison["previous_passed"] else "failed"), "",
            "| Figure | Before | After | Change |", "|---|---|---|---|"]
        for row in comparison["figures"]:
            change = "-" if row["change_pct"] is None else "%+.2f %%" % row["change_pct"]
            lines.append("| %s | %s | %s | %s |" % (row["figure"], _cell(row["before"]), _cell(row["after"]), change))
    else:
        lines.append("No previous report of this tenant.")
    lines += ["", "Latency plot: benchmark.svg."]
    return "\n".join(lines) + "\n"


def _mode_cell(enabled, pending=None):
    text = {True: "on", False: "off"}.get(enabled, "-")
    if pending is not None and pending != enabled:
        text += " (pending %s)" % {True: "on", False: "off"}[pending]
    return text


def _health_markdown(section):
    if section is None:
        return []
    lines = ["", "## GPU health after the load", ""]
    if not section["read"]:
        return lines + ["Not read: %s" % markdown_text(section["error"])]
    lines += ["Driver %s." % markdown_text(section["driver_version"] or "version not reported"), "",
              "| GPU | Temperature (C) | Power (W) | Uncorrected ECC (volatile/aggregate) | MIG | Persistence |",
              "|---|---|---|---|---|---|"]
    for gpu in section["gpus"]:
        power = "%s / %s" % (_cell(gpu["power_draw_w"]), _cell(gpu["power_limit_w"]))
        ecc = ("off" if gpu["ecc_enabled"] is False else
               "%s / %s" % (_cell(gpu["ecc_volatile_uncorrected"]), _cell(gpu["ecc_aggregate_uncorrected"])))
        lines.append("| %s %s | %s | %s | %s | %s | %s |" % (
            _cell(gpu["pci_bus_id"]), markdown_text(gpu["name"] or ""), _cell(gpu["temperature_c"]),
            power, ecc, _mode_cell(gpu["mig_enabled"], gpu["mig_pending_enabled"]),
            _mode_cell(gpu["persistence_enabled"])))
    return lines


def report_svg(report, width=720, height=360):
    """A latency histogram (built-in runner) or, without samples, a bar per percentile,
    with the gate's ceilings drawn as red lines. Plain SVG text, no plotting library."""
    result = report["result"]
    latency = result.get("latency") or {}
    hist = result.get("histogram") or {}
    left, right, top, bottom = 60, 20, 40, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    title = "%s on %s: %s latency (%s)" % (report["tenant"], report["host"], report["runner"],
                                           "PASS" if report["gate"]["passed"] else "FAIL")
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="11">' % (width, height, width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="14">%s</text>' % (left, escape(title))]
    ceilings = [(c["figure"], c["limit"]) for c in report["gate"]["checks"]
                if c["unit"] == "ms" and c["limit"] is not None]
    if hist.get("counts"):
        edges, counts = hist["edges_ms"], hist["counts"]
        low = edges[0]
        high = max([edges[-1]] + [ceiling[1] for ceiling in ceilings])
        span = (high - low) or 1.0
        peak = max(counts) or 1

        def x_of(value):
            return left + (value - low) / span * plot_w

        for index, count in enumerate(counts):
            x0, x1 = x_of(edges[index]), x_of(edges[index + 1])
            bar_h = count / float(peak) * plot_h
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4878a8"><title>%s-%s ms: %d'
                       '</title></rect>' % (x0, top + plot_h - bar_h, max(x1 - x0 - 0.5, 0.5), bar_h,
                                            _num(edges[index]), _num(edges[index + 1]), count))
        for key, colour in (("p50_ms", "#2a9d3a"), ("p95_ms", "#e08a00"), ("p99_ms", "#8a2be2")):
            if latency.get(key) is not None:
                x = x_of(latency[key])
                out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="4 2"/>'
                           % (x, top, x, top + plot_h, colour))
                out.append('<text x="%.1f" y="%d" fill="%s">%s %s</text>'
                           % (x + 2, top + 12, colour, key[:3].upper(), _num(latency[key])))
        for label, limit in ceilings:
            x = x_of(limit)
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="red"/>' % (x, top, x, top + plot_h))
            out.append('<text x="%.1f" y="%d" fill="red">%s max %s</text>'
                       % (x + 2, top + plot_h - 4, escape(label), _num(limit)))
        out.append('<text x="%d" y="%d">%s ms</text>' % (left, height - 15, _num(low)))
        out.append('<text x="%d" y="%d" text-anchor="end">%s ms</text>' % (left + plot_w, height - 15, _num(high)))
        out.append('<text x="%d" y="%d" text-anchor="middle">latency (ms), %d requests</text>'
                   % (left + plot_w // 2, height - 15, sum(counts)))
        out.append('<text x="15" y="%d" transform="rotate(-90 15 %d)" text-anchor="middle">requests</text>'
                   % (top + plot_h // 2, top + plot_h // 2))
    else:
        bars = [(key, latency[key]) for key in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms")
                if latency.get(key) is not None]
        high = max([entry[1] for entry in bars] + [ceiling[1] for ceiling in ceilings] + [1e-9])
        slot = plot_w / float(max(len(bars), 1))
        for index, (key, value) in enumerate(bars):
            bar_h = value / high * plot_h
            x = left + index * slot + slot * 0.15
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4878a8"/>'
                       % (x, top + plot_h - bar_h, slot * 0.7, bar_h))
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                       % (x + slot * 0.35, height - 30, key[:-3].upper()))
            out.append('<text x="%.1f" y="%.1f" text-anchor="middle">%s ms</text>'
                       % (x + slot * 0.35, top + plot_h - bar_h - 3, _num(value)))
        for label, limit in ceilings:
            y = top + plot_h - limit / high * plot_h
            out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="red"/>' % (left, y, left + plot_w, y))
            out.append('<text x="%d" y="%.1f" fill="red">%s max %s ms</text>'
                       % (left + 2, y - 3, escape(label), _num(limit)))
        out.append('<text x="%d" y="%d">%s reports percentiles only (no per-request samples)</text>'
                   % (left, height - 12, escape(str(report["runner"]))))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>'
               % (left, top + plot_h, left + plot_w, top + plot_h))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def evaluate_jitter(tenant, cyclictest, max_us, cpus=""):
    """The host jitter check: the worst cyclictest wake-up latency against a ceiling."""
    worst = cyclictest["max_us"]
    passed = worst <= max_us
    check = {"figure": "host jitter on CPUs %s (cyclictest max)" % cpus, "option": "benchmark_cyclictest_max_us",
             "limit": max_us, "measured": worst, "unit": "us", "passed": passed}
    failures = [] if passed else ["%s: host jitter %d us on CPUs %s is above the %d us ceiling "
                                  "(benchmark_cyclictest_max_us)" % (tenant, worst, cpus, max_us)]
    return {"passed": passed, "check": check, "failures": failures, "cyclictest": cyclictest}


def tenant_outcome(tenant, host, result, run_at, limits=None, settings=None, previous=None,
                   gpu_health=None, jitter=None):
    """Everything the benchmark role makes of one tenant's run, in one call: the gate
    (with the host jitter check when cyclictest ran), the report, its three files and the
    line the validate stage shows.

    ``limits``: ``p95_ms_max``, ``p99_ms_max``, ``min_throughput`` (0 or None: no
    limit, as the role's defaults say) and ``max_error_ratio``. ``previous``: the
    previous report, parsed or as the text of its benchmark.json (empty: none).
    ``jitter``: None, or ``output`` (cyclictest's, ``--quiet``), ``max_us`` and ``cpus``.
    Returns ``report``, ``passed``, ``failures``, ``summary``, ``markdown`` and ``files``
    ([{ext, text}] for json, md and svg)."""
    limits = dict(limits or {})
    settings = dict(settings or {})
    if isinstance(previous, str):
        previous = _previous_report(previous)
    gate = evaluate_gate(tenant, result, **{name: (_limit(limits, name) or None) for name in
                                            ("p95_ms_max", "p99_ms_max", "min_throughput")},
                         max_error_ratio=_limit(limits, "max_error_ratio", maximum=1.0), gpu_health=gpu_health)
    if jitter is not None:
        found = evaluate_jitter(tenant, bench_parsers.parse_cyclictest(jitter["output"]), int(jitter["max_us"]),
                                jitter.get("cpus", ""))
        settings["jitter"] = found
        gate = {"passed": gate["passed"] and found["passed"], "checks": gate["checks"] + [found["check"]],
                "failures": gate["failures"] + found["failures"]}
    report = build_report(tenant, host, result, gate, run_at, settings, previous, gpu_health)
    markdown = report_markdown(report)
    if gate["passed"]:
        latency = result.get("latency") or {}
        summary = "P95 %s ms, P99 %s ms, %s inferences/s (%s)" % (
            _num(latency.get("p95_ms")), _num(latency.get("p99_ms")), _num(result.get("throughput")),
            settings.get("runner") or result.get("runner"))
    else:
        summary = "; ".join(gate["failures"])
    return {"report": report, "passed": gate["passed"], "failures": gate["failures"], "summary": summary,
            "markdown": markdown,
            "files": [{"ext": "json", "text": report_json(report)}, {"ext": "md", "text": markdown},
                      {"ext": "svg", "text": report_svg(report)}]}


def _limit(limits, name, maximum=None):
    """The limit ``name`` as a float of 0 or more (templating may hand it over as text);
    None or empty: 0. A NaN limit would pass every figure, a negative one fail all."""
    value = limits.get(name)
    if value in (None, ""):
        return 0.0
    return finite_number(value, "benchmark_%s" % name, allow_minimum=True, maximum=maximum)


def _previous_report(text):
    """The previous benchmark.json as a dict; None for no text. A file that is not a
    report is refused rather than compared with."""
    if not text.strip():
        return None
    try:
        previous = json.loads(text)
    except ValueError as err:
        raise GpuhostError("the previous benchmark.json is not JSON: %s" % err, field="previous",
                           fix="move the broken report away from benchmark_report_dir; the next run writes a new one")
    if not isinstance(previous, dict):
        raise GpuhostError("the previous benchmark.json holds %s, not a report" % type(previous).__name__,
                           field="previous", fix="move it away from benchmark_report_dir")
    return previous
