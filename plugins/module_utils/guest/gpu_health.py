# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A passed-through GPU's health as the guest's driver reports it (``nvidia-smi -q -x``),
and the limits it must meet, as plain data. It runs in the tenant guest (module
gpu_health), so it uses the standard library only.

Why the XML report and not ``--query-gpu=... --format=csv``: one run gives every field,
and a field the GPU or driver lacks is an element that says ``N/A``, where the CSV form
fails the whole query on a field name that driver does not know. Field names changed
across schema versions (v11 ``power_readings``/``power_limit``, v12 ``gpu_power_readings``/
``current_power_limit``; ``sram_uncorrectable`` split into ``_parity``/``_secded`` in 555;
v13 ``average_power_draw``/``instant_power_draw`` in 570), so each value is looked up
under every name it has had. Tested on published reports
(tests/fixtures/published/README.md names each one).

Missing or unavailable values (``N/A``, ``[N/A]``, ``[Not Supported]``, any bracketed
reason) are None. A value that is present but not what nvidia-smi prints (NaN, a
twenty-digit temperature) is refused with the field's name: a health report that turned
garbage into a pass would hide the very fault it is there to show.

The XML is parsed with a size bound and no document type declarations beyond the one
external reference nvidia-smi writes: an ENTITY declaration (billion laughs, external
entities) is refused before it can be expanded.
"""

from __future__ import annotations

import math
import re
from xml.etree import ElementTree
from xml.parsers import expat

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.sysfs import decode_text

# nvidia-smi -q -x is about 20 kB per GPU (most of it the supported clocks list); 16 MiB
# is hundreds of GPUs, and still a bound a hostile or broken tool cannot get past.
MAX_XML_BYTES = 16 * 1024 * 1024
# What the driver and the nvidia-smi that reads it print for "no value".
_NOT_AVAILABLE = frozenset(("", "N/A", "NA", "None", "Not Supported", "Unknown Error",
                            # Driver 590 (schema v13) in place of fields it dropped.
                            "Requested functionality has been deprecated"))
# A number as nvidia-smi prints it: digits, an optional fraction, an optional unit. The
# bound on digits keeps an absurd value from passing as a reading.
_NUMBER = re.compile(r"(?P<number>-?[0-9]{1,12}(?:\.[0-9]{1,6})?)\s*(?P<unit>[A-Za-z%/()]*)")
_TEXT_MAX = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Each value under every element path it has had, newest schema first.
# v13 (driver 570 on) prints an average over a second and an instant reading instead of
# power_draw; the average is the one a limit is compared with.
_POWER_DRAW = ("gpu_power_readings/power_draw", "gpu_power_readings/average_power_draw", "power_readings/power_draw")
_POWER_DRAW_INSTANT = ("gpu_power_readings/instant_power_draw",)
_POWER_LIMIT = ("gpu_power_readings/current_power_limit", "power_readings/enforced_power_limit",
                "power_readings/power_limit")
_UNCORRECTABLE = ("sram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded",
                  "dram_uncorrectable")
_CORRECTABLE = ("sram_correctable", "dram_correctable")
# Before schema v11: single_bit/double_bit counters, each with a total.
_OLD_UNCORRECTABLE = ("double_bit/total",)
_OLD_CORRECTABLE = ("single_bit/total",)


def _refuse_entity(*_args):
    raise GpuhostError("the nvidia-smi XML declares an entity; nvidia-smi never does",
                       field="nvidia_smi",
                       fix="give the output of nvidia-smi -q -x unchanged; a document with ENTITY "
                           "declarations is refused so that it cannot expand or read files")


def _refuse_internal_subset(_name, _system_id, _public_id, has_internal_subset):
    if has_internal_subset:
        raise GpuhostError("the nvidia-smi XML has an internal DOCTYPE subset; nvidia-smi writes "
                           "only a reference to its DTD", field="nvidia_smi",
                           fix="give the output of nvidia-smi -q -x unchanged")


def parse_xml(text):
    """The root element of an ``nvidia-smi -q -x`` report, parsed safely."""
    if isinstance(text, bytes):
        data = decode_text(text).encode("utf-8")
    elif isinstance(text, str):
        # run_command hands a byte that is not UTF-8 on as a lone surrogate: back to the
        # byte, then decoded as every host text is (U+FFFD), never a UnicodeEncodeError
        data = decode_text(text.encode("utf-8", "surrogateescape")).encode("utf-8")
    else:
        raise GpuhostError("the nvidia-smi output is %s, not text" % type(text).__name__,
                           field="nvidia_smi", fix="give the text nvidia-smi -q -x printed")
    if len(data) > MAX_XML_BYTES:
        raise GpuhostError("the nvidia-smi XML is %d bytes, more than the %d accepted"
                           % (len(data), MAX_XML_BYTES), field="nvidia_smi",
                           fix="give the output of nvidia-smi -q -x for the GPUs of this guest")
    # expat itself, with the handlers defusedxml sets: ElementTree's C parser does not
    # expose its expat, so the tree is built here from the same events.
    builder = ElementTree.TreeBuilder()
    parser = expat.ParserCreate()
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    parser.EntityDeclHandler = _refuse_entity
    parser.UnparsedEntityDeclHandler = _refuse_entity
    parser.ExternalEntityRefHandler = _refuse_entity
    parser.StartDoctypeDeclHandler = _refuse_internal_subset
    # An entity the document never declared (its DTD is not read): expat would skip it.
    parser.SkippedEntityHandler = _refuse_entity
    try:
        parser.Parse(data, True)
        root = builder.close()
    except (expat.ExpatError, AssertionError) as err:
        raise GpuhostError("the nvidia-smi output is not XML (%s)" % err, field="nvidia_smi",
                           fix="run nvidia-smi -q -x in the guest; a driver that cannot reach the "
                               "GPU prints an error instead of the report") from None
    if root.tag != "nvidia_smi_log":
        raise GpuhostError("the XML is a <%s>, not an nvidia-smi report (<nvidia_smi_log>)" % root.tag,
                           field="nvidia_smi", fix="give the output of nvidia-smi -q -x")
    return root


def _raw(element, path):
    """The stripped text at ``path``, or None when absent or unavailable."""
    found = element.find(path) if element is not None else None
    if found is None:
        return None
    if len(found):
        # An element with children where a value was expected (remapped_rows is either).
        return None
    text = " ".join((found.text or "").split())
    if text in _NOT_AVAILABLE or (text.startswith("[") and text.endswith("]")):
        return None
    return text


def _text(element, path, field):
    text = _raw(element, path)
    if text is None:
        return None
    if len(text) > _TEXT_MAX or _CONTROL.search(text):
        raise GpuhostError("%s is %d characters or holds control characters" % (path, len(text)),
                           field=field, fix="give the output of nvidia-smi -q -x unchanged")
    return text


def _number(element, paths, field, units=("",)):
    """The first of ``paths`` that has a value, as a float, in one of ``units``."""
    if isinstance(paths, str):
        paths = (paths,)
    for path in paths:
        text = _raw(element, path)
        if text is None:
            continue
        match = _NUMBER.fullmatch(text)
        number = float(match.group("number")) if match else float("nan")
        if match is None or match.group("unit") not in units or math.isnan(number):
            raise GpuhostError("%s is %r, not a number%s" % (
                path, text, " in %s" % "/".join(u for u in units if u) if any(units) else ""),
                field=field, fix="give the output of nvidia-smi -q -x unchanged")
        return number
    return None


def _count(element, paths, field):
    number = _number(element, paths, field)
    if number is None:
        return None
    if number < 0 or not number.is_integer():
        raise GpuhostError("%s is %s, not a count" % (paths, number), field=field,
                           fix="give the output of nvidia-smi -q -x unchanged")
    return int(number)


def _mode(element, path, field):
    """Enabled/Disabled (Yes/No) as True/False; None when unavailable."""
    text = _raw(element, path)
    if text is None:
        return None
    lowered = text.lower()
    if lowered in ("enabled", "yes", "on"):
        return True
    if lowered in ("disabled", "no", "off"):
        return False
    raise GpuhostError("%s is %r, not Enabled or Disabled" % (path, text), field=field,
                       fix="give the output of nvidia-smi -q -x unchanged")


def _sum_counts(element, names, field):
    """The sum of the counters present (None when none is)."""
    values = [_count(element, name, field) for name in names]
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _ecc_counts(gpu, scope, field):
    block = gpu.find("ecc_errors/%s" % scope)
    if block is None:
        return None, None
    uncorrected = _sum_counts(block, _UNCORRECTABLE, field)
    corrected = _sum_counts(block, _CORRECTABLE, field)
    if uncorrected is None:
        uncorrected = _sum_counts(block, _OLD_UNCORRECTABLE, field)
    if corrected is None:
        corrected = _sum_counts(block, _OLD_CORRECTABLE, field)
    return uncorrected, corrected


def _remapped_rows(gpu, field):
    block = gpu.find("remapped_rows")
    if block is None or not len(block):
        return None
    return {"correctable": _count(block, "remapped_row_corr", field),
            "uncorrectable": _count(block, "remapped_row_unc", field),
            "pending": _mode(block, "remapped_row_pending", field),
            "failure": _mode(block, "remapped_row_failure", field)}


def _retired_pages(gpu, field):
    block = gpu.find("retired_pages")
    if block is None:
        return None
    single = _count(block, "multiple_single_bit_retirement/retired_count", field)
    double = _count(block, "double_bit_retirement/retired_count", field)
    pending = _mode(block, "pending_retirement", field)
    if single is None and double is None and pending is None:
        return None
    return {"single_bit": single, "double_bit": double, "pending": pending}


def _gpu(element, driver_version, index):
    field = "nvidia_smi.gpu[%d]" % index
    mig_devices = element.find("mig_devices")
    volatile_unc, volatile_corr = _ecc_counts(element, "volatile", field)
    aggregate_unc, aggregate_corr = _ecc_counts(element, "aggregate", field)
    return {
        "index": index,
        "name": _text(element, "product_name", field),
        "uuid": _text(element, "uuid", field),
        "pci_bus_id": _text(element, "pci/pci_bus_id", field) or _text_attribute(element, "id", field),
        "driver_version": driver_version,
        "virtualization_mode": _text(element, "gpu_virtualization_mode/virtualization_mode", field),
        "temperature_c": _number(element, "temperature/gpu_temp", field, ("C",)),
        "temperature_slowdown_c": _number(element, "temperature/gpu_temp_slow_threshold", field, ("C",)),
        "temperature_shutdown_c": _number(element, "temperature/gpu_temp_max_threshold", field, ("C",)),
        "power_draw_w": _number(element, _POWER_DRAW, field, ("W",)),
        "power_draw_instant_w": _number(element, _POWER_DRAW_INSTANT, field, ("W",)),
        "power_limit_w": _number(element, _POWER_LIMIT, field, ("W",)),
        "ecc_enabled": _mode(element, "ecc_mode/current_ecc", field),
        "ecc_pending_enabled": _mode(element, "ecc_mode/pending_ecc", field),
        "ecc_volatile_uncorrected": volatile_unc,
        "ecc_volatile_corrected": volatile_corr,
        "ecc_aggregate_uncorrected": aggregate_unc,
        "ecc_aggregate_corrected": aggregate_corr,
        "mig_enabled": _mode(element, "mig_mode/current_mig", field),
        "mig_pending_enabled": _mode(element, "mig_mode/pending_mig", field),
        "mig_devices": len(mig_devices.findall("mig_device")) if mig_devices is not None else 0,
        "persistence_enabled": _mode(element, "persistence_mode", field),
        "retired_pages": _retired_pages(element, field),
        "remapped_rows": _remapped_rows(element, field),
    }


def _text_attribute(element, name, field):
    value = " ".join((element.get(name) or "").split())
    if not value:
        return None
    if len(value) > _TEXT_MAX or _CONTROL.search(value):
        raise GpuhostError("the %s attribute is too long or holds control characters" % name,
                           field=field, fix="give the output of nvidia-smi -q -x unchanged")
    return value


def parse_nvidia_smi_xml(text):
    """{"driver_version", "cuda_version", "attached_gpus", "gpus": [per GPU]} of an
    ``nvidia-smi -q -x`` report. Per GPU: name, uuid, pci_bus_id, driver_version,
    temperature (and the slowdown/shutdown thresholds), power draw and limit, ECC mode
    (current, pending) with volatile and aggregate uncorrected/corrected error counts,
    MIG mode (current, pending) and its device count, persistence mode, retired pages
    and remapped rows where the GPU has them. Every unavailable value is None."""
    root = parse_xml(text)
    driver_version = _text(root, "driver_version", "nvidia_smi.driver_version")
    return {
        "driver_version": driver_version,
        "cuda_version": _text(root, "cuda_version", "nvidia_smi.cuda_version"),
        "attached_gpus": _count(root, "attached_gpus", "nvidia_smi.attached_gpus"),
        "gpus": [_gpu(element, driver_version, index) for index, element in enumerate(root.findall("gpu"))],
    }


# The limits a GPU is held to, each off when None (False for the two modes).
HEALTH_LIMITS = ("max_temperature_c", "max_uncorrected_ecc", "mig_must_be_off", "persistence_must_be_on")


def _finding(gpu, check, passed, detail, limit=None, measured=None):
    return {"gpu": gpu["pci_bus_id"] or str(gpu["index"]), "name": gpu["name"], "check": check,
            "passed": passed, "limit": limit, "measured": measured, "detail": detail}


def health_findings(health, max_temperature_c=None, max_uncorrected_ecc=None,
                    mig_must_be_off=True, persistence_must_be_on=False):
    """One finding per GPU and limit set: {"gpu", "name", "check", "passed", "limit",
    "measured", "detail"}. A value the GPU does not report passes a limit it cannot break
    (MIG N/A: a GPU without MIG) and is named as unread where it could (a temperature
    N/A fails a temperature limit: the limit was set because it must be watched)."""
    findings = []
    if not health.get("gpus"):
        return [{"gpu": None, "name": None, "check": "gpu_present", "passed": False, "limit": None,
                 "measured": 0, "detail": "nvidia-smi lists no GPU: the driver sees none of the "
                                          "passed-through functions"}]
    for gpu in health["gpus"]:
        label = "%s (%s)" % (gpu["pci_bus_id"] or gpu["index"], gpu["name"] or "unnamed GPU")
        if max_temperature_c is not None:
            temp = gpu["temperature_c"]
            passed = temp is not None and temp <= max_temperature_c
            findings.append(_finding(gpu, "temperature", passed, (
                "%s: temperature not reported, limit %s C" % (label, _plain(max_temperature_c)) if temp is None
                else "%s: %s C %s the %s C limit" % (
                    label, _plain(temp), "within" if passed else "above", _plain(max_temperature_c))),
                max_temperature_c, temp))
        if max_uncorrected_ecc is not None:
            counts = [c for c in (gpu["ecc_volatile_uncorrected"], gpu["ecc_aggregate_uncorrected"])
                      if c is not None]
            worst = max(counts) if counts else None
            if gpu["ecc_enabled"] is False:
                passed, detail = True, "%s: ECC is disabled, no error count to read" % label
            else:
                passed = worst is None or worst <= max_uncorrected_ecc
                detail = ("%s: no ECC error counters reported" % label if worst is None else
                          "%s: %d uncorrected ECC error(s) (volatile %s, aggregate %s), limit %d%s" % (
                              label, worst, gpu["ecc_volatile_uncorrected"], gpu["ecc_aggregate_uncorrected"],
                              max_uncorrected_ecc,
                              "" if passed else "; drain the tenant and have the GPU checked "
                                                "(nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER)"))
            rows = gpu["remapped_rows"] or {}
            if rows.get("failure"):
                passed = False
                detail += "; row remapping FAILED: the GPU needs service"
            findings.append(_finding(gpu, "ecc", passed, detail, max_uncorrected_ecc, worst))
        if mig_must_be_off:
            mig = gpu["mig_enabled"]
            pending = gpu["mig_pending_enabled"]
            passed = not mig and not pending
            if mig is None and pending is None:
                detail = "%s: MIG not supported (N/A), so it is off" % label
            elif passed:
                detail = "%s: MIG off" % label
            else:
                detail = ("%s: MIG is %s (pending %s, %d MIG device(s)) on a whole-GPU passthrough tenant: "
                          "the tenant gets slices, not the GPU. Disable it (nvidia-smi -i %s -mig 0, then "
                          "a GPU reset or a guest reboot), or plan the GPU as MIG (runbook section 13)" % (
                              label, _on_off(mig), _on_off(pending), gpu["mig_devices"],
                              gpu["pci_bus_id"] or gpu["index"]))
            findings.append(_finding(gpu, "mig_off", passed, detail, "off", _on_off(mig)))
        if persistence_must_be_on:
            mode = gpu["persistence_enabled"]
            passed = mode is True
            findings.append(_finding(gpu, "persistence", passed, (
                "%s: persistence mode on" % label if passed else
                "%s: persistence mode %s: the driver unloads between clients and the first request pays "
                "for its start; enable nvidia-persistenced" % (label, _on_off(mode))),
                "on", _on_off(mode)))
    return findings


def _on_off(value):
    return {True: "on", False: "off"}.get(value, "not reported")


def _plain(number):
    return ("%.2f" % number).rstrip("0").rstrip(".") if isinstance(number, float) else str(number)


def health_summary(health, findings):
    """{"passed", "failures", "gpus", "findings"}: what the reports carry."""
    failures = [f["detail"] for f in findings if not f["passed"]]
    return {"passed": not failures, "failures": failures, "driver_version": health.get("driver_version"),
            "gpus": health.get("gpus") or [], "findings": findings}
