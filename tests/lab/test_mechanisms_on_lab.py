# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mechanism detector and host slimming on the lab's real Debian guest: what
host_facts' mechanisms subset reports is checked against the guest's own files, asked
over SSH; slimming runs in check mode only, so the lab's services are left as they are.
Written for tests/lab; the lab must run it."""

import json
import shlex

import pytest

pytestmark = pytest.mark.lab


def _facts(lab):
    rc, result = lab.module("gpuhost.kvm.host_facts", {"gather": ["platform", "mechanisms"]})
    assert rc == 0, json.dumps(result, indent=1)[:4000]
    return result["ansible_facts"]


def _exists(lab, path):
    return lab.ssh("test -e %s && echo yes || echo no" % shlex.quote(path)).stdout.strip() == "yes"


def test_mechanisms_on_the_debian_lab_match_its_files(lab):
    facts = _facts(lab)
    assert facts["os_family"] == "Debian"
    found = facts["gpuhost_mechanisms"]
    boot = found["boot_loader"]
    # Debian boots grub.cfg, not BLS entries: grub, detected from update-grub's binary.
    assert boot["choice"] == "grub" and boot["source"] == "detected", boot
    assert _exists(lab, boot["evidence"]["grub"][0].split()[0])
    initramfs = found["initramfs"]
    expected = "dracut" if _exists(lab, "/etc/dracut.conf.d") and _exists(lab, "/usr/bin/dracut") \
        else "initramfs-tools"
    assert initramfs["choice"] == expected and initramfs["source"] == "detected", initramfs
    libvirt = found["libvirt"]
    enabled = lab.ssh("systemctl is-enabled libvirtd.service virtqemud.service 2>/dev/null || true").stdout.split()
    if enabled[:1] == ["enabled"] and enabled[1:2] != ["enabled"]:
        assert libvirt["choice"] == "monolithic" and libvirt["source"] == "detected", libvirt
    assert libvirt["choice"] in ("modular", "monolithic"), libvirt


def test_slimming_in_check_mode_reports_and_changes_nothing_on_the_lab(lab):
    # The lab's minimal Debian has neither cron nor systemd-timesyncd (the first run of
    # this test found both absent): systemd-pstore is a service it has enabled that the
    # host does not need.
    before = lab.ssh("systemctl is-enabled systemd-pstore.service || true").stdout.strip()
    assert before == "enabled", before
    rc, result = lab.module("gpuhost.kvm.host_units",
                            {"units": [{"name": "ssh.service"}],
                             "disable": ["systemd-pstore.service", "gpuhost-no-such-unit.service"]},
                            check_mode=True)
    assert rc == 0, json.dumps(result, indent=1)[:4000]
    assert result["changed"] is True, result
    assert result["slimmed"]["absent"] == ["gpuhost-no-such-unit.service"], result["slimmed"]
    assert "systemd-pstore.service" in result["slimmed"]["disabled"], result["slimmed"]
    assert lab.ssh("systemctl is-enabled systemd-pstore.service || true").stdout.strip() == before
    rc, refused = lab.module("gpuhost.kvm.host_units",
                             {"units": [{"name": "systemd-timesyncd.service"}], "disable": ["ssh"]},
                             check_mode=True)
    assert rc != 0 and "needs" in refused["msg"], refused
