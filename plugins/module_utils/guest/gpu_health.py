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

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import decode_text

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
# Why the clocks are held down: clocks_event_reasons from driver 535 on, before it
# clocks_throttle_reasons, each child "<block>_reason_<name>" Active or Not Active.
THROTTLE_REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
                    "hw_thermal_slowdown", "hw_power_brake_slowdown", "sync_boost",
                    "sw_thermal_slowdown", "display_clocks_setting")
_THROTTLE_BLOCKS = (("clocks_event_reasons", "clocks_event_reason_"),
                    ("clocks_throttle_reasons", "clocks_throttle_reason_"))
# What the driver (550 on) says the GPU needs after an error, as nvidia-smi prints it
# (gpu_recovery_action), and the action each asks of the host's operator.
RECOVERY_ACTIONS = {"none": None, "reset": "reset", "drain and reset": "reset",
                    "reboot": "reboot", "drain p2p": "drain_p2p"}
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


def _tool_text(output, field, what, give, limit, fix):
    """A tool's output as text, decoded as every host text is (a byte that is not UTF-8
    becomes U+FFFD); refused when it is not text or holds more than ``limit`` bytes."""
    if isinstance(output, bytes):
        text = decode_text(output)
    elif isinstance(output, str):
        # run_command hands a byte that is not UTF-8 on as a lone surrogate: back to the
        # byte, then decoded as every host text is, never a UnicodeEncodeError
        text = decode_text(output.encode("utf-8", "surrogateescape"))
    else:
        raise GpuhostError("%s is %s, not text" % (what, type(output).__name__), field=field,
                           fix="give %s" % give)
    size = len(text.encode("utf-8"))
    if size > limit:
        raise GpuhostError("%s is %d bytes, more than the %d accepted" % (what, size, limit),
                           field=field, fix=fix)
    return text


def parse_xml(text):
    """The root element of an ``nvidia-smi -q -x`` report, parsed safely."""
    data = _tool_text(text, "nvidia_smi", "the nvidia-smi output", "the text nvidia-smi -q -x printed",
                      MAX_XML_BYTES, "give the output of nvidia-smi -q -x for the GPUs of this guest"
                      ).encode("utf-8")
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


def _throttle_reasons(gpu, field):
    """{reason: active} for the reasons the report lists (None when it lists none)."""
    for block_name, prefix in _THROTTLE_BLOCKS:
        block = gpu.find(block_name)
        if block is None or not len(block):
            continue
        reasons = {}
        for reason in THROTTLE_REASONS:
            text = _raw(block, prefix + reason)
            if text is None:
                continue
            if text.lower() not in ("active", "not active"):
                raise GpuhostError("%s/%s%s is %r, not Active or Not Active" % (
                    block_name, prefix, reason, text), field=field,
                    fix="give the output of nvidia-smi -q -x unchanged")
            reasons[reason] = text.lower() == "active"
        return reasons or None
    return None


def _recovery_action(gpu, field):
    """What gpu_recovery_action asks for: "none", "reset", "reboot", "drain_p2p", or
    None where the driver does not report it (before 550, or N/A)."""
    found = gpu.find("gpu_recovery_action")
    if found is None or len(found):
        return None
    text = " ".join((found.text or "").split())
    if text.lower() == "none":
        return "none"       # the one field where "None" is a value, not "no value"
    if _raw(gpu, "gpu_recovery_action") is None:
        return None
    action = RECOVERY_ACTIONS.get(text.lower())
    if action is None:
        raise GpuhostError("gpu_recovery_action is %r, none of %s" % (
            text[:_TEXT_MAX], ", ".join(sorted(RECOVERY_ACTIONS))), field=field,
            fix="give the output of nvidia-smi -q -x unchanged; a driver newer than this "
                "collection may print an action it does not know: read it with nvidia-smi")
    return action


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
        "throttle_reasons": _throttle_reasons(element, field),
        "recovery_action": _recovery_action(element, field),
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
    and remapped rows where the GPU has them, the active clock event (throttle) reasons
    and the driver's recovery action. Every unavailable value is None."""
    root = parse_xml(text)
    driver_version = _text(root, "driver_version", "nvidia_smi.driver_version")
    return {
        "driver_version": driver_version,
        "cuda_version": _text(root, "cuda_version", "nvidia_smi.cuda_version"),
        "attached_gpus": _count(root, "attached_gpus", "nvidia_smi.attached_gpus"),
        "gpus": [_gpu(element, driver_version, index) for index, element in enumerate(root.findall("gpu"))],
    }


# The limits a GPU is held to, each off when None (False for the modes, () for the lists).
HEALTH_LIMITS = ("max_temperature_c", "max_uncorrected_ecc", "mig_must_be_off", "persistence_must_be_on",
                 "recovery_action_must_be_none", "throttle_reasons_must_be_clear", "ignored_xids")
# The clock event reasons that mean the GPU itself is in trouble (its board's slowdown
# signal, an over-temperature, the power brake), not a setting or an idle GPU.
HARDWARE_THROTTLE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                             "sw_thermal_slowdown")
# Xids an application causes (an illegal instruction, a page fault, a channel its own
# error stopped, the clean-up after it): NVIDIA's catalog asks to restart the application,
# not to touch the GPU. Every other Xid is held against the GPU.
APPLICATION_XIDS = (13, 31, 43, 45)
# What NVIDIA's Xid catalog asks for the Xids of a GPU that needs the host's operator;
# any other Xid asks for a reset, then support if it returns.
XID_ACTIONS = {48: "reset", 63: "reset", 64: "service", 74: "reset", 79: "reboot", 95: "reset",
               119: "reset", 120: "reset"}
_ACTION_FIXES = {
    "reset": "drain the tenant, reset the GPU (offboard it: tenant_scrub resets it) and read it again",
    "reboot": "drain the tenant and reboot the host: the GPU no longer answers on its bus",
    "drain_p2p": "drain the tenant's peer-to-peer (NVLink) work and read the GPU again",
    "service": "take the GPU out of service and have it replaced (nvidia-bug-report.sh for the case)",
}
# Bounds on what a kernel log may hold for this reader: the kernel's ring buffer is at
# most 32 MiB (CONFIG_LOG_BUF_SHIFT 25); distinct (GPU, Xid) pairs far above 8 GPUs' worth.
MAX_KERNEL_LOG_BYTES = 64 * 1024 * 1024
MAX_XID_KINDS = 4096
_XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):"
                       r"(?P<device>[0-9a-fA-F]{2})(?:\.[0-7])?\): (?P<code>[0-9]{1,4})\b,?\s*(?P<text>.*)")


def _bus_key(bus_id):
    """(domain, bus, device) of a PCI address as nvidia-smi ("00000000:01:00.0") or the
    kernel log ("0000:01:00") prints it; None for anything else."""
    match = re.fullmatch(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?", bus_id or "")
    return tuple(int(part, 16) for part in match.groups()) if match else None


def xid_events(kernel_log):
    """The NVIDIA driver's Xid reports in a kernel log (dmesg's text):
    [{"bus", "code", "count", "last"}], one per GPU and Xid, in the order first seen;
    "bus" as the log prints it, "last" the last report's text (bounded)."""
    kernel_log = _tool_text(kernel_log, "dmesg", "the kernel log", "the text dmesg printed",
                            MAX_KERNEL_LOG_BYTES, "give the output of dmesg (the kernel's ring buffer)")
    events = {}
    for line in kernel_log.splitlines():
        if "NVRM: Xid" not in line:
            continue
        match = _XID_LINE.search(line)
        if match is None:
            continue
        bus = "%s:%s:%s" % (match.group("domain"), match.group("bus"), match.group("device"))
        key = (bus.lower(), int(match.group("code")))
        if key not in events and len(events) >= MAX_XID_KINDS:
            raise GpuhostError("the kernel log holds more than %d kinds of Xid report" % MAX_XID_KINDS,
                               field="dmesg", fix="give the output of dmesg unchanged")
        event = events.setdefault(key, {"bus": bus, "code": key[1], "count": 0, "last": ""})
        event["count"] += 1
        event["last"] = _CONTROL.sub(" ", match.group("text")).strip()[:_TEXT_MAX]
    return list(events.values())


def unread_kernel_log_finding(reason):
    """The failing finding of a kernel log that could not be read: an Xid gate that
    cannot read is not a pass."""
    return {"gpu": None, "name": None, "check": "xid", "passed": False, "limit": "no Xid",
            "measured": None, "detail": "the kernel log was not read for Xid reports (%s): run the "
                                        "task as root (kernel.dmesg_restrict), or set read_xids "
                                        "false" % reason}


def _finding(gpu, check, passed, detail, limit=None, measured=None, action=None):
    finding = {"gpu": gpu["pci_bus_id"] or str(gpu["index"]), "name": gpu["name"], "check": check,
               "passed": passed, "limit": limit, "measured": measured, "detail": detail}
    if action is not None:
        finding["action"] = action
    return finding


def health_findings(health, max_temperature_c=None, max_uncorrected_ecc=None,
                    mig_must_be_off=True, persistence_must_be_on=False,
                    recovery_action_must_be_none=False, throttle_reasons_must_be_clear=(),
                    ignored_xids=APPLICATION_XIDS, xids=None):
    """One finding per GPU and limit set: {"gpu", "name", "check", "passed", "limit",
    "measured", "detail"}, and "action" ("reset", "reboot", "drain_p2p", "service")
    where the GPU needs its operator. A value the GPU does not report passes a limit it
    cannot break (MIG N/A: a GPU without MIG) and is named as unread where it could (a
    temperature N/A fails a temperature limit: the limit was set because it must be
    watched).

    The uncorrected-ECC limit holds the volatile count (since the driver loaded): the
    aggregate count is the GPU's lifetime, and a GPU that once had an error, remapped the
    row and was reset is sound. The aggregate count, retired pages and remapped rows are
    reported; a pending remap or retirement asks for a reset, a remap failure for service.
    ``xids``: what xid_events read of the guest's kernel log, None when not read."""
    findings = []
    if not health.get("gpus"):
        findings.append({"gpu": None, "name": None, "check": "gpu_present", "passed": False, "limit": None,
                         "measured": 0, "detail": "nvidia-smi lists no GPU: the driver sees none of the "
                                                  "passed-through functions"})
    for gpu in health.get("gpus") or ():
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
            findings.append(_ecc_finding(gpu, label, max_uncorrected_ecc))
            findings.append(_memory_repair_finding(gpu, label))
        if mig_must_be_off:
            findings.append(_mig_finding(gpu, label))
        if persistence_must_be_on:
            mode = gpu["persistence_enabled"]
            passed = mode is True
            findings.append(_finding(gpu, "persistence", passed, (
                "%s: persistence mode on" % label if passed else
                "%s: persistence mode %s: the driver unloads between clients and the first request pays "
                "for its start; enable nvidia-persistenced" % (label, _on_off(mode))),
                "on", _on_off(mode)))
        if recovery_action_must_be_none:
            findings.append(_recovery_finding(gpu, label))
        if throttle_reasons_must_be_clear:
            findings.append(_throttle_finding(gpu, label, throttle_reasons_must_be_clear))
    if xids is not None:
        findings.extend(_xid_findings(health.get("gpus") or [], xids, ignored_xids))
    return findings


def _ecc_finding(gpu, label, limit):
    volatile, aggregate = gpu["ecc_volatile_uncorrected"], gpu["ecc_aggregate_uncorrected"]
    if gpu["ecc_enabled"] is False:
        return _finding(gpu, "ecc", True, "%s: ECC is disabled, no error count to read" % label, limit, None)
    passed = volatile is None or volatile <= limit
    detail = ("%s: no volatile ECC error count reported" % label if volatile is None else
              "%s: %d uncorrected ECC error(s) since the driver loaded, limit %d%s" % (
                  label, volatile, limit,
                  "" if passed else "; drain the tenant and have the GPU checked "
                                    "(nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER)"))
    if aggregate:
        detail += "; %d in the GPU's lifetime (reported, not held to the limit)" % aggregate
    return _finding(gpu, "ecc", passed, detail, limit, volatile)


def _memory_repair_finding(gpu, label):
    """Row remapping (Ampere on) or page retirement (before it): a pending repair asks
    for a reset, a failed one for service; repairs done are reported."""
    rows, pages = gpu["remapped_rows"] or {}, gpu["retired_pages"] or {}
    done = []
    if rows.get("correctable") or rows.get("uncorrectable"):
        done.append("%s row(s) remapped for correctable and %s for uncorrectable errors"
                    % (rows.get("correctable") or 0, rows.get("uncorrectable") or 0))
    if pages.get("single_bit") or pages.get("double_bit"):
        done.append("%s page(s) retired for single-bit and %s for double-bit errors"
                    % (pages.get("single_bit") or 0, pages.get("double_bit") or 0))
    done_text = "; ".join(done) if done else "no repaired memory"
    if rows.get("failure"):
        return _finding(gpu, "memory_repair", False, "%s: row remapping FAILED (%s): %s" % (
            label, done_text, _ACTION_FIXES["service"]), "no failure", "failed", "service")
    if rows.get("pending") or pages.get("pending"):
        return _finding(gpu, "memory_repair", False, "%s: a %s is pending (%s): %s" % (
            label, "row remap" if rows.get("pending") else "page retirement", done_text,
            _ACTION_FIXES["reset"]), "none pending", "pending", "reset")
    if not rows and not pages:
        return _finding(gpu, "memory_repair", True, "%s: no row remapper or page retirement "
                                                    "record reported" % label, "none pending", None)
    return _finding(gpu, "memory_repair", True, "%s: none pending (%s)" % (label, done_text),
                    "none pending", "none")


def _mig_finding(gpu, label):
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
    return _finding(gpu, "mig_off", passed, detail, "off", _on_off(mig))


def _recovery_finding(gpu, label):
    action = gpu["recovery_action"]
    if action is None:
        return _finding(gpu, "recovery_action", True, "%s: the driver reports no recovery action "
                                                      "(drivers before 550)" % label, "none", None)
    if action == "none":
        return _finding(gpu, "recovery_action", True, "%s: the driver asks for no recovery" % label,
                        "none", "none")
    return _finding(gpu, "recovery_action", False, "%s: the driver asks for a %s: %s" % (
        label, action.replace("_", " "), _ACTION_FIXES[action]), "none", action, action)


def _throttle_finding(gpu, label, held):
    reasons = gpu["throttle_reasons"]
    if reasons is None:
        return _finding(gpu, "throttle", True, "%s: no clock event reasons reported" % label,
                        list(held), None)
    active = [reason for reason in held if reasons.get(reason)]
    if not active:
        return _finding(gpu, "throttle", True, "%s: none of %s active" % (label, ", ".join(held)),
                        list(held), [])
    return _finding(gpu, "throttle", False, "%s: clocks held down by %s: check the GPU's cooling "
                                            "and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER)"
                    % (label, ", ".join(active)), list(held), active)


def _xid_findings(gpus, xids, ignored):
    """One finding per GPU listed (Xids held against it, or none), and one per bus the
    log names that nvidia-smi does not list (a GPU that fell off the bus is not listed)."""
    listed = {_bus_key(gpu["pci_bus_id"]): gpu for gpu in gpus if _bus_key(gpu["pci_bus_id"])}
    held = [event for event in xids if event["code"] not in ignored]
    by_gpu = {}
    for event in held:
        by_gpu.setdefault(_bus_key(event["bus"]), []).append(event)
    findings = []
    for key, gpu in listed.items():
        label = "%s (%s)" % (gpu["pci_bus_id"], gpu["name"] or "unnamed GPU")
        findings.append(_xid_finding(gpu, label, by_gpu.pop(key, []), ignored))
    for key, events in by_gpu.items():
        bus = events[0]["bus"]
        findings.append(_xid_finding({"pci_bus_id": bus, "index": None, "name": None},
                                     "%s (not listed by nvidia-smi)" % bus, events, ignored))
    return findings


def _xid_finding(gpu, label, events, ignored):
    limit = "no Xid but %s" % ", ".join(str(code) for code in sorted(ignored)) if ignored else "no Xid"
    if not events:
        return _finding(gpu, "xid", True, "%s: no Xid held against the GPU in the kernel log" % label,
                        limit, [])
    actions = [XID_ACTIONS.get(event["code"], "reset") for event in events]
    action = next(a for a in ("service", "reboot", "reset") if a in actions)
    reported = "; ".join("Xid %d x%d (last: %s)" % (event["code"], event["count"], event["last"] or "no text")
                         for event in events)
    return _finding(gpu, "xid", False, "%s: %s: %s" % (label, reported, _ACTION_FIXES[action]),
                    limit, [event["code"] for event in events], action)


def _on_off(value):
    return {True: "on", False: "off"}.get(value, "not reported")


def _plain(number):
    return ("%.2f" % number).rstrip("0").rstrip(".") if isinstance(number, float) else str(number)


def health_summary(health, findings):
    """{"passed", "failures", "gpus", "findings"}: what the reports carry."""
    failures = [f["detail"] for f in findings if not f["passed"]]
    return {"passed": not failures, "failures": failures, "driver_version": health.get("driver_version"),
            "gpus": health.get("gpus") or [], "findings": findings}
