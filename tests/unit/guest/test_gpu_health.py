# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia-smi -q -x parser and the health limits, on published real reports
(tests/fixtures/published/README.md names each source): the expected values are the ones
printed there. Tests named "derived" change one element of a real report, to reach a
case no published report shows (an error count above zero, a field removed); hostile
inputs are refused with the field at fault."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.guest import gpu_health
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from support import TESTS

PUBLISHED = os.path.join(TESTS, "fixtures", "published")
A100_MIG = "nvidia_smi_q_x_a100_sxm4_mig_535_54_03.xml"
T4 = "nvidia_smi_q_x_tesla_t4_passthrough_515_105_01.xml"
A10G = "nvidia_smi_q_x_a10g_passthrough_515_105_01.xml"
DUAL_A5000_V13 = "nvidia_smi_q_x_dual_rtx_a5000_v13_590_44_01.xml"


def published(name):
    with open(os.path.join(PUBLISHED, name)) as handle:
        return handle.read()


def derived(name, old, new):
    text = published(name)
    assert text.count(old) == 1, old
    return text.replace(old, new)


def by_check(findings):
    return {f["check"]: f for f in findings}


def test_a100_schema_v12_with_mig_enabled():
    health = gpu_health.parse_nvidia_smi_xml(published(A100_MIG))
    assert health["driver_version"] == "535.54.03" and health["cuda_version"] == "12.2"
    # The published file keeps one <gpu> of the four it counts.
    assert health["attached_gpus"] == 4 and len(health["gpus"]) == 1
    gpu = health["gpus"][0]
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB"
    assert gpu["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu["pci_bus_id"] == "00000000:01:00.0" and gpu["driver_version"] == "535.54.03"
    assert gpu["temperature_c"] == 27.0 and gpu["temperature_slowdown_c"] == 89.0
    assert gpu["temperature_shutdown_c"] == 92.0
    # v12: gpu_power_readings/current_power_limit.
    assert gpu["power_draw_w"] == 67.03 and gpu["power_limit_w"] == 500.0
    assert gpu["ecc_enabled"] is True and gpu["ecc_pending_enabled"] is True
    assert gpu["ecc_volatile_uncorrected"] == 0 and gpu["ecc_aggregate_uncorrected"] == 0
    assert gpu["mig_enabled"] is True and gpu["mig_pending_enabled"] is True and gpu["mig_devices"] == 4
    assert gpu["persistence_enabled"] is False
    # Retired pages all N/A, remapped rows N/A: None, not zeros.
    assert gpu["retired_pages"] is None and gpu["remapped_rows"] is None
    # "None" (bare metal, as nvidia-smi prints it) reads as no mode.
    assert gpu["virtualization_mode"] is None


def test_t4_schema_v11_in_a_passthrough_guest():
    health = gpu_health.parse_nvidia_smi_xml(published(T4))
    gpu = health["gpus"][0]
    assert health["driver_version"] == "515.105.01" and health["attached_gpus"] == 1
    assert gpu["name"] == "Tesla T4" and gpu["pci_bus_id"] == "00000000:00:1E.0"
    assert gpu["virtualization_mode"] == "Pass-Through"
    assert gpu["temperature_c"] == 40.0 and gpu["temperature_shutdown_c"] == 96.0
    # v11: power_readings, whose enforced limit is the one in force.
    assert gpu["power_draw_w"] == 26.78 and gpu["power_limit_w"] == 70.0
    assert gpu["mig_enabled"] is None and gpu["mig_pending_enabled"] is None and gpu["mig_devices"] == 0
    assert gpu["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False}
    assert gpu["remapped_rows"] is None


def test_a10g_remapped_rows():
    gpu = gpu_health.parse_nvidia_smi_xml(published(A10G))["gpus"][0]
    assert gpu["name"] == "NVIDIA A10G" and gpu["temperature_c"] == 17.0
    assert gpu["power_draw_w"] == 25.58 and gpu["power_limit_w"] == 300.0
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["retired_pages"] is None


def test_mig_enabled_fails_a_whole_gpu_tenant():
    health = gpu_health.parse_nvidia_smi_xml(published(A100_MIG))
    mig = by_check(gpu_health.health_findings(health))["mig_off"]
    assert not mig["passed"] and mig["measured"] == "on"
    assert "4 MIG device(s)" in mig["detail"] and "-mig 0" in mig["detail"]
    summary = gpu_health.health_summary(health, gpu_health.health_findings(health))
    assert not summary["passed"] and summary["failures"] == [mig["detail"]]


def test_mig_not_supported_passes_and_says_so():
    health = gpu_health.parse_nvidia_smi_xml(published(T4))
    mig = by_check(gpu_health.health_findings(health))["mig_off"]
    assert mig["passed"] and "MIG not supported (N/A)" in mig["detail"]


def test_mig_pending_only_fails_derived():
    """MIG off now but pending on: the next reset slices the GPU."""
    text = derived(A100_MIG, "<current_mig>Enabled</current_mig>", "<current_mig>Disabled</current_mig>")
    mig = by_check(gpu_health.health_findings(gpu_health.parse_nvidia_smi_xml(text)))["mig_off"]
    assert not mig["passed"] and "MIG is off (pending on" in mig["detail"]


def test_temperature_limit_on_the_printed_temperature():
    health = gpu_health.parse_nvidia_smi_xml(published(T4))
    assert by_check(gpu_health.health_findings(health, max_temperature_c=40))["temperature"]["passed"]
    hot = by_check(gpu_health.health_findings(health, max_temperature_c=39.5))["temperature"]
    assert not hot["passed"] and hot["measured"] == 40.0 and "40 C above the 39.5 C limit" in hot["detail"]


def test_temperature_not_reported_fails_a_set_limit_derived():
    text = derived(T4, "<gpu_temp>40 C</gpu_temp>", "<gpu_temp>N/A</gpu_temp>")
    health = gpu_health.parse_nvidia_smi_xml(text)
    assert health["gpus"][0]["temperature_c"] is None
    finding = by_check(gpu_health.health_findings(health, max_temperature_c=85))["temperature"]
    assert not finding["passed"] and "temperature not reported" in finding["detail"]


def test_persistence_must_be_on():
    health = gpu_health.parse_nvidia_smi_xml(published(A10G))
    assert "persistence" not in by_check(gpu_health.health_findings(health))
    finding = by_check(gpu_health.health_findings(health, persistence_must_be_on=True))["persistence"]
    assert not finding["passed"] and "nvidia-persistenced" in finding["detail"]


def test_ecc_counts_against_the_limit():
    health = gpu_health.parse_nvidia_smi_xml(published(A10G))
    assert by_check(gpu_health.health_findings(health, max_uncorrected_ecc=0))["ecc"]["passed"]


A10G_AGGREGATE_DRAM = ("</sram_uncorrectable>\n                <dram_correctable>0</dram_correctable>\n"
                       "                <dram_uncorrectable>0</dram_uncorrectable>\n            </aggregate>")
A10G_VOLATILE_DRAM = ("</sram_uncorrectable>\n                <dram_correctable>0</dram_correctable>\n"
                      "                <dram_uncorrectable>0</dram_uncorrectable>\n            </volatile>")
A10G_ROWS = ("<remapped_row_corr>0</remapped_row_corr>\n            <remapped_row_unc>0</remapped_row_unc>\n"
             "            <remapped_row_pending>No</remapped_row_pending>\n"
             "            <remapped_row_failure>No</remapped_row_failure>")


def a10g_rows(corr=0, unc=0, pending="No", failure="No", aggregate=0, volatile=0):
    """The published A10G report with its row remapper and DRAM counts changed (derived:
    no published report shows a GPU that remapped rows)."""
    text = derived(A10G, A10G_ROWS, A10G_ROWS.replace(
        "corr>0<", "corr>%d<" % corr).replace("unc>0<", "unc>%d<" % unc).replace(
        "pending>No<", "pending>%s<" % pending).replace("failure>No<", "failure>%s<" % failure))
    text = text.replace(A10G_AGGREGATE_DRAM, A10G_AGGREGATE_DRAM.replace(
        "<dram_uncorrectable>0<", "<dram_uncorrectable>%d<" % aggregate))
    return text.replace(A10G_VOLATILE_DRAM, A10G_VOLATILE_DRAM.replace(
        "<dram_uncorrectable>0<", "<dram_uncorrectable>%d<" % volatile))


def test_the_ecc_gate_passes_remapped_rows_and_a_clean_volatile_count_derived():
    """A GPU that once had uncorrected errors, remapped the rows and was reset is sound:
    its lifetime (aggregate) count and its remapped rows are reported, not failed."""
    health = gpu_health.parse_nvidia_smi_xml(a10g_rows(corr=2, unc=1, aggregate=3))
    gpu = health["gpus"][0]
    assert gpu["ecc_aggregate_uncorrected"] == 3 and gpu["ecc_volatile_uncorrected"] == 0
    assert gpu["remapped_rows"] == {"correctable": 2, "uncorrectable": 1, "pending": False, "failure": False}
    findings = by_check(gpu_health.health_findings(health, max_uncorrected_ecc=0))
    ecc, repair = findings["ecc"], findings["memory_repair"]
    assert ecc["passed"] and ecc["measured"] == 0
    assert "3 in the GPU's lifetime (reported, not held to the limit)" in ecc["detail"]
    assert repair["passed"] and repair["measured"] == "none" and "action" not in repair
    assert "2 row(s) remapped for correctable and 1 for uncorrectable errors" in repair["detail"]


def test_volatile_uncorrected_errors_above_the_limit_fail_derived():
    health = gpu_health.parse_nvidia_smi_xml(a10g_rows(volatile=3, aggregate=3))
    ecc = by_check(gpu_health.health_findings(health, max_uncorrected_ecc=0))["ecc"]
    assert not ecc["passed"] and ecc["measured"] == 3 and "drain the tenant" in ecc["detail"]
    assert by_check(gpu_health.health_findings(health, max_uncorrected_ecc=3))["ecc"]["passed"]


def test_a_pending_row_remap_asks_for_a_reset_derived():
    health = gpu_health.parse_nvidia_smi_xml(a10g_rows(unc=1, pending="Yes", volatile=1, aggregate=1))
    findings = by_check(gpu_health.health_findings(health, max_uncorrected_ecc=1))
    repair = findings["memory_repair"]
    assert findings["ecc"]["passed"]
    assert not repair["passed"] and repair["action"] == "reset" and repair["measured"] == "pending"
    assert "a row remap is pending" in repair["detail"] and "reset the GPU" in repair["detail"]


def test_a_row_remap_failure_fails_naming_the_gpu_and_asks_for_service_derived():
    health = gpu_health.parse_nvidia_smi_xml(a10g_rows(unc=8, failure="Yes", aggregate=8))
    repair = by_check(gpu_health.health_findings(health, max_uncorrected_ecc=0))["memory_repair"]
    assert not repair["passed"] and repair["action"] == "service" and repair["gpu"] == "00000000:00:1E.0"
    assert repair["detail"].startswith("00000000:00:1E.0 (NVIDIA A10G): row remapping FAILED")


def test_a_pending_page_retirement_asks_for_a_reset_derived():
    """Before Ampere, pages are retired instead of rows remapped (the T4 printed No)."""
    text = derived(T4, "<pending_retirement>No</pending_retirement>",
                   "<pending_retirement>Yes</pending_retirement>")
    repair = by_check(gpu_health.health_findings(gpu_health.parse_nvidia_smi_xml(text),
                                                 max_uncorrected_ecc=0))["memory_repair"]
    assert not repair["passed"] and repair["action"] == "reset" and "page retirement is pending" in repair["detail"]


def test_clock_event_reasons_under_both_names():
    """clocks_throttle_reasons before driver 535 (the A10G's 515), clocks_event_reasons
    from it (the A100's 535): an idle GPU's gpu_idle is active and is no trouble."""
    for name in (A10G, A100_MIG):
        reasons = gpu_health.parse_nvidia_smi_xml(published(name))["gpus"][0]["throttle_reasons"]
        assert set(reasons) == set(gpu_health.THROTTLE_REASONS)
        assert reasons["gpu_idle"] is (name == A10G) and not reasons["hw_slowdown"]
    health = gpu_health.parse_nvidia_smi_xml(published(A10G))
    throttle = by_check(gpu_health.health_findings(
        health, throttle_reasons_must_be_clear=gpu_health.HARDWARE_THROTTLE_REASONS))["throttle"]
    assert throttle["passed"] and throttle["measured"] == []


def test_a_hardware_slowdown_fails_the_throttle_check_derived():
    text = derived(A100_MIG, "<clocks_event_reason_hw_power_brake_slowdown>Not Active<",
                   "<clocks_event_reason_hw_power_brake_slowdown>Active<")
    health = gpu_health.parse_nvidia_smi_xml(text)
    throttle = by_check(gpu_health.health_findings(
        health, throttle_reasons_must_be_clear=gpu_health.HARDWARE_THROTTLE_REASONS))["throttle"]
    assert not throttle["passed"] and throttle["measured"] == ["hw_power_brake_slowdown"]
    assert "clocks held down by hw_power_brake_slowdown" in throttle["detail"]
    assert "throttle" not in by_check(gpu_health.health_findings(health))


def test_a_throttle_reason_that_is_neither_active_nor_not_is_refused_derived():
    text = derived(A100_MIG, "<clocks_event_reason_hw_slowdown>Not Active<",
                   "<clocks_event_reason_hw_slowdown>Maybe<")
    with pytest.raises(GpuhostError) as refused:
        gpu_health.parse_nvidia_smi_xml(text)
    assert "not Active or Not Active" in str(refused.value)


def test_the_driver_recovery_action_none_passes_and_a_reset_fails_derived():
    """Driver 590 prints gpu_recovery_action None (no action): the one field where
    "None" is a value. Derived: the same report asking for a reset, and for a reboot."""
    health = gpu_health.parse_nvidia_smi_xml(published(DUAL_A5000_V13))
    assert [gpu["recovery_action"] for gpu in health["gpus"]] == ["none", "none"]
    assert all(f["passed"] for f in gpu_health.health_findings(health, recovery_action_must_be_none=True)
               if f["check"] == "recovery_action")
    for printed, action in (("Reset", "reset"), ("Drain and Reset", "reset"), ("Reboot", "reboot"),
                            ("Drain P2P", "drain_p2p")):
        text = published(DUAL_A5000_V13).replace("<gpu_recovery_action>None<",
                                                 "<gpu_recovery_action>%s<" % printed, 1)
        findings = gpu_health.health_findings(gpu_health.parse_nvidia_smi_xml(text),
                                              recovery_action_must_be_none=True)
        first = [f for f in findings if f["check"] == "recovery_action"][0]
        assert not first["passed"] and first["action"] == action and first["gpu"] == "00000000:81:00.0"
    assert gpu_health.parse_nvidia_smi_xml(published(T4))["gpus"][0]["recovery_action"] is None
    with pytest.raises(GpuhostError) as refused:
        gpu_health.parse_nvidia_smi_xml(published(DUAL_A5000_V13).replace(
            "<gpu_recovery_action>None<", "<gpu_recovery_action>Replace the universe<", 1))
    assert refused.value.field == "nvidia_smi.gpu[0]"


# Xid reports as published in kernel logs (each line's source in the comment); the line
# for Xid 79 and the one on the A10G's bus are derived (the bus or code changed).
PUBLISHED_XID_LINES = [
    # a GitHub gist by kohsuke (84ce815d0a8ad85ecaf6), "nvidia problem"
    "Dec 23 23:30:56 rescue kernel: [  179.437933] NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000005 intr 00008000",
    # stas00/ml-engineering, compute/accelerator/nvidia/debug.md
    "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
    # a pastebin (NGng33SB): the form without "PCI:"
    "Nov 22 18:29:55 hostname kernel: [  966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000",
]


def test_xid_reports_are_read_per_gpu_and_code_from_published_lines():
    events = gpu_health.xid_events("\n".join(PUBLISHED_XID_LINES * 2 + ["unrelated line", "NVRM: Xid (junk"]))
    assert events == [
        {"bus": "0000:01:00", "code": 32, "count": 2, "last": "Channel ID 00000005 intr 00008000"},
        {"bus": "0000:10:1c", "code": 63, "count": 2,
         "last": "pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."},
        {"bus": "0000:01:00", "code": 31, "count": 2, "last": "Ch 0000000b, engmask 00000120, intr 10000000"}]


def test_xids_held_against_a_gpu_and_one_that_fell_off_the_bus_derived():
    """The A10G (00000000:00:1E.0) with an application's page fault (Xid 31: its own
    restart, ignored) and a row remap (Xid 63: a reset); a GPU at 0000:3b:00 that
    nvidia-smi no longer lists reported Xid 79 (fallen off the bus: a reboot)."""
    log = "\n".join([
        "NVRM: Xid (PCI:0000:00:1e): 31, pid=7, Ch 0000000b, intr 10000000",
        "NVRM: Xid (PCI:0000:00:1e): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
        "[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."])
    health = gpu_health.parse_nvidia_smi_xml(published(A10G))
    findings = [f for f in gpu_health.health_findings(health, xids=gpu_health.xid_events(log))
                if f["check"] == "xid"]
    listed, lost = findings
    assert listed["gpu"] == "00000000:00:1E.0" and not listed["passed"] and listed["action"] == "reset"
    assert listed["measured"] == [63] and "Xid 63 x1" in listed["detail"] and "Xid 31" not in listed["detail"]
    assert lost["gpu"] == "0000:3b:00" and lost["action"] == "reboot" and "not listed by nvidia-smi" in lost["detail"]
    clean = gpu_health.health_findings(health, xids=gpu_health.xid_events(log.splitlines()[0]))
    assert [f["passed"] for f in clean if f["check"] == "xid"] == [True]
    assert "xid" not in by_check(gpu_health.health_findings(health))


def test_a_kernel_log_past_its_bound_or_not_text_is_refused():
    with pytest.raises(GpuhostError):
        gpu_health.xid_events(" " * (gpu_health.MAX_KERNEL_LOG_BYTES + 1))
    with pytest.raises(GpuhostError):
        gpu_health.xid_events(None)
    many = "\n".join("NVRM: Xid (PCI:0000:%02x:00): %d, x" % (bus, code)
                     for bus in range(256) for code in range(17))
    with pytest.raises(GpuhostError) as refused:
        gpu_health.xid_events(many)
    assert "more than 4096 kinds" in str(refused.value)


def test_missing_and_bracketed_fields_are_none_derived():
    text = derived(T4, "<power_draw>26.78 W</power_draw>", "<power_draw>[N/A]</power_draw>")
    text = text.replace("<uuid>GPU-d37e67a5-91dd-3774-a5cb-99096249601a</uuid>", "")
    text = text.replace("<persistence_mode>Disabled</persistence_mode>",
                        "<persistence_mode>[Not Supported]</persistence_mode>")
    gpu = gpu_health.parse_nvidia_smi_xml(text)["gpus"][0]
    assert gpu["power_draw_w"] is None and gpu["uuid"] is None and gpu["persistence_enabled"] is None
    assert gpu["power_limit_w"] == 70.0


def test_no_gpu_listed_is_a_failing_finding():
    health = gpu_health.parse_nvidia_smi_xml("<nvidia_smi_log><driver_version>550.90.07</driver_version>"
                                             "<attached_gpus>0</attached_gpus></nvidia_smi_log>")
    findings = gpu_health.health_findings(health)
    assert [f["check"] for f in findings] == ["gpu_present"] and not findings[0]["passed"]


@pytest.mark.parametrize("text, message", [
    ('<?xml version="1.0"?><!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaaaaaaaa">'
     '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><nvidia_smi_log>&b;</nvidia_smi_log>', "internal DOCTYPE"),
    ('<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd"><nvidia_smi_log>'
     '<driver_version>&xxe;</driver_version></nvidia_smi_log>', "declares an entity"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "not XML"),
    ("<nvidia_smi_log><gpu>", "not XML"),
    ("<html><body/></html>", "not an nvidia-smi report"),
])
def test_hostile_or_broken_xml_is_refused(text, message):
    with pytest.raises(GpuhostError) as err:
        gpu_health.parse_nvidia_smi_xml(text)
    assert message in str(err.value) and err.value.field == "nvidia_smi"


def test_huge_document_is_refused_before_parsing():
    text = "<nvidia_smi_log>" + " " * gpu_health.MAX_XML_BYTES + "</nvidia_smi_log>"
    with pytest.raises(GpuhostError, match="more than the"):
        gpu_health.parse_nvidia_smi_xml(text)


@pytest.mark.parametrize("value", ["nan C", "NaN", "1e400 C", "9999999999999999999999 C", "40 F", "forty"])
def test_a_temperature_that_is_not_a_reading_is_refused_derived(value):
    text = derived(T4, "<gpu_temp>40 C</gpu_temp>", "<gpu_temp>%s</gpu_temp>" % value)
    with pytest.raises(GpuhostError) as err:
        gpu_health.parse_nvidia_smi_xml(text)
    assert "temperature/gpu_temp" in str(err.value) and err.value.field == "nvidia_smi.gpu[0]"


@pytest.mark.parametrize("name", ["Tesla&#127; T4", "T4" * 200])
def test_a_name_with_control_characters_or_too_long_is_refused_derived(name):
    """XML 1.0 itself refuses most control characters (ESC is not XML); DEL it allows."""
    text = derived(T4, "<product_name>Tesla T4</product_name>", "<product_name>%s</product_name>" % name)
    with pytest.raises(GpuhostError, match="control characters") as err:
        gpu_health.parse_nvidia_smi_xml(text)
    assert err.value.field == "nvidia_smi.gpu[0]"


def test_an_escape_character_is_not_xml():
    text = derived(T4, "<product_name>Tesla T4</product_name>", "<product_name>Tesla&#27;[2J T4</product_name>")
    with pytest.raises(GpuhostError, match="not XML"):
        gpu_health.parse_nvidia_smi_xml(text)


def test_a_mode_that_is_neither_is_refused_derived():
    text = derived(T4, "<current_ecc>Enabled</current_ecc>", "<current_ecc>Maybe</current_ecc>")
    with pytest.raises(GpuhostError, match="not Enabled or Disabled"):
        gpu_health.parse_nvidia_smi_xml(text)


# The validate report's check, from what the guest and benchmark stages publish.

def guest_result(name, **limits):
    health = gpu_health.parse_nvidia_smi_xml(published(name))
    findings = gpu_health.health_findings(health, **limits)
    summary = gpu_health.health_summary(health, findings)
    return {"passed": summary["passed"], "detail": "", "health": {
        "driver_version": health["driver_version"], "gpus": health["gpus"], "findings": findings}}


def test_validate_gpu_health_fails_on_mig_and_passes_a_healthy_t4():
    from ansible_collections.gpuhost.kvm.plugins.plugin_utils import validation
    check = validation.check_gpu_health({"tenant-a100": guest_result(A100_MIG),
                                         "tenant-t4": guest_result(T4, max_temperature_c=85)})
    assert check["id"] == "gpu_health" and check["status"] == "fail"
    assert check["detail"].startswith("tenant-a100 (guest stage): 00000000:01:00.0 (NVIDIA A100-SXM4-80GB): MIG is on")
    assert "tenant-t4 (guest stage): 1 GPU(s), 00000000:00:1E.0 40 C, 26.78 W" in check["detail"]
    healthy = validation.check_gpu_health({"tenant-t4": guest_result(T4, max_temperature_c=85)})
    assert healthy["status"] == "pass"


def test_validate_gpu_health_reads_the_benchmark_after_the_guest():
    """The benchmark's read, after the load, is the newer one: it decides."""
    from ansible_collections.gpuhost.kvm.plugins.plugin_utils import bench_report, validation
    hot = guest_result(T4, max_temperature_c=39)
    section = bench_report.gpu_health_section({"health": gpu_health.parse_nvidia_smi_xml(published(T4)),
                                               "findings": hot["health"]["findings"]})
    check = validation.check_gpu_health({"tenant-t4": guest_result(T4, max_temperature_c=85)},
                                        {"tenant-t4": {"passed": False, "detail": "", "gpu_health": section}})
    assert check["status"] == "fail" and "tenant-t4 (after the benchmark)" in check["detail"]
    assert "40 C above the 39 C limit" in check["detail"]


def test_validate_gpu_health_not_run_without_a_read():
    from ansible_collections.gpuhost.kvm.plugins.plugin_utils import validation
    check = validation.check_gpu_health({"tenant-lab": {"passed": False, "detail": "NVIDIA steps skipped",
                                                        "health": None}},
                                        {"tenant-lab": {"passed": True, "gpu_health": {"read": False}}})
    assert check["status"] == "not_run"


def test_two_rtx_a5000_schema_v13_driver_590():
    """Schema v13 dropped power_draw for an average and an instant reading, and prints
    "Requested functionality has been deprecated" for fields it retired."""
    health = gpu_health.parse_nvidia_smi_xml(published(DUAL_A5000_V13))
    assert health["driver_version"] == "590.44.01" and health["cuda_version"] == "13.1"
    assert [g["pci_bus_id"] for g in health["gpus"]] == ["00000000:81:00.0", "00000000:C1:00.0"]
    first, second = health["gpus"]
    assert first["name"] == second["name"] == "NVIDIA RTX A5000"
    assert first["temperature_c"] == 13.0 and second["temperature_c"] == 15.0
    assert first["power_draw_w"] == 6.41 and first["power_draw_instant_w"] == 6.52
    assert second["power_draw_w"] == 13.6 and second["power_limit_w"] == 230.0
    assert first["persistence_enabled"] is True and first["ecc_enabled"] is False
    # ECC off: every counter N/A, so None, and the ECC limit has nothing to hold.
    assert first["ecc_volatile_uncorrected"] is None and first["ecc_aggregate_uncorrected"] is None
    assert second["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    findings = gpu_health.health_findings(health, max_temperature_c=85, max_uncorrected_ecc=0,
                                          persistence_must_be_on=True)
    assert len(findings) == 10 and all(f["passed"] for f in findings)
    assert [f["gpu"] for f in findings if f["check"] == "ecc"] == ["00000000:81:00.0", "00000000:C1:00.0"]
    assert "ECC is disabled" in by_check(findings)["ecc"]["detail"]


def test_older_drivers_have_no_instant_power_reading():
    assert gpu_health.parse_nvidia_smi_xml(published(T4))["gpus"][0]["power_draw_instant_w"] is None
