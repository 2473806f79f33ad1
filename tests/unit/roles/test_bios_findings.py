# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validation.bios_findings: every finding of the BIOS preflight at once, each with its fix."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.plugin_utils.validation import bios_findings

READY = {"iommu_tables": ["DMAR"], "acs_override": [], "sriov_pfs": {"0000:17:00.0": 8},
         "bar_errors": [], "gpu_bar64_bytes": {"0000:65:00.0": 34359738368}}


def test_a_ready_host_has_no_finding():
    assert bios_findings(READY) == []


def test_every_finding_is_reported_in_one_answer():
    report = {"iommu_tables": [], "acs_override": ["pcie_acs_override=downstream"],
              "sriov_pfs": {"0000:17:00.0": None, "0000:18:00.0": 0, "0000:19:00.0": "4"},
              "bar_errors": ["pci 0000:65:00.0: BAR 1: no space for [mem size 0x800000000 64bit pref]"] * 7,
              "gpu_bar64_bytes": {"0000:65:00.0": 0, "0000:b3:00.0": 34359738368}}
    findings = bios_findings(report)
    assert len(findings) == 6
    assert findings[0].startswith("Neither the DMAR nor the IVRS ACPI table is present")
    assert "pcie_acs_override=downstream is active" in findings[1]
    assert "PF 0000:17:00.0 reports no SR-IOV VFs (sriov_totalvfs missing)" in findings[2]
    assert "PF 0000:18:00.0 reports no SR-IOV VFs (sriov_totalvfs 0)" in findings[3]
    # at most five log lines are quoted
    assert findings[4].count("no space for") == 5 and "bios_fail_on_bar_errors=false" in findings[4]
    assert findings[5].startswith("GPU 0000:65:00.0 has 0 bytes") and "Above 4G Decoding" in findings[5]


@pytest.mark.parametrize("options, report, expected", [
    ({"require_iommu_table": False}, dict(READY, iommu_tables=[]), []),
    ({"fail_on_bar_errors": False}, dict(READY, bar_errors=["BAR 0: not enough MMIO"]), []),
    ({"gpu_bar64_min_bytes": 68719476736}, READY, ["GPU 0000:65:00.0 has 34359738368 bytes"]),
])
def test_the_roles_switches_turn_findings_off_or_raise_the_bar(options, report, expected):
    findings = bios_findings(report, **options)
    assert len(findings) == len(expected)
    for finding, start in zip(findings, expected):
        assert finding.startswith(start)
