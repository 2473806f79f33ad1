# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""domain.compare on its own: what libvirt_pinned_domain decides before it acts.

The existing domain is always one libvirt itself wrote: the wanted XML defined on a
private test-driver connection and read back inactive, so the UUID, MACs and PCI
addresses libvirt assigns are the real ones the comparison must keep and ignore."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import compare
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import xml as dx
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

from support.domain_xml import private_connection, runbook_tenant

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is in requirements.txt")


def spec(**overrides):
    overrides.setdefault("disk", domain_model.DiskSpec(path="/var/lib/libvirt/images/tenant-a100.qcow2"))
    overrides.setdefault("seed_path", None)
    return domain_model.spec_from_plan(runbook_tenant(), **overrides)


def defined_by_libvirt(tmp_path, domain_spec, active=False, autostart=False):
    """``domain_spec`` defined on libvirt's test driver, as ExistingDomain."""
    conn = private_connection(tmp_path)
    dom = conn.defineXML(dx.to_string(dx.build_domain_xml(domain_spec)))
    return compare.ExistingDomain(
        inactive_xml=dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), active=active,
        autostart=autostart, uuid=dom.UUIDString())


def test_a_new_domain_is_defined_started_and_autostarted():
    change = compare.plan_domain_change(None, spec(), "running")
    assert change.actions == ["define", "start", "autostart on"]
    assert change.define and change.changed_elements
    assert change.run_state_action == "start" and change.set_autostart is True
    assert change.restart_required is False
    assert change.diff["before"] == "" and "<domain" in change.diff["after"]


def test_storage_steps_come_first():
    change = compare.plan_domain_change(None, spec(), "present",
                                        storage_actions=["create overlay /a.qcow2"])
    assert change.actions[:2] == ["create overlay /a.qcow2", "define"]
    assert change.run_state_action is None


def test_what_libvirt_read_back_is_no_change(tmp_path):
    wanted = spec()
    existing = defined_by_libvirt(tmp_path, wanted, active=True, autostart=True)
    change = compare.plan_domain_change(existing, wanted, "running")
    assert change.actions == [] and change.changed_elements == []
    assert not change.define and change.restart_required is False
    assert change.diff["before"] == change.diff["after"]


def test_a_changed_running_domain_is_redefined_and_needs_a_restart(tmp_path):
    existing = defined_by_libvirt(tmp_path, spec(), active=True, autostart=True)
    change = compare.plan_domain_change(existing, spec(memory_access="shared"), "running")
    assert change.actions == ["define"]
    assert change.changed_elements and change.restart_required is True
    assert change.diff["before"] != change.diff["after"]
    # What libvirt assigned survives the redefinition.
    assert existing.uuid in change.xml_to_define


def test_a_changed_stopped_domain_needs_no_restart(tmp_path):
    existing = defined_by_libvirt(tmp_path, spec(), active=False, autostart=True)
    change = compare.plan_domain_change(existing, spec(memory_access="shared"), "present")
    assert change.actions == ["define"] and change.restart_required is False


def test_a_domain_being_shut_down_needs_no_restart_for_its_change(tmp_path):
    existing = defined_by_libvirt(tmp_path, spec(), active=True, autostart=True)
    change = compare.plan_domain_change(existing, spec(memory_access="shared"), "shutdown")
    assert change.actions == ["define", "shutdown"]
    assert change.run_state_action == "shutdown" and change.restart_required is False


def test_a_rebuilt_seed_restarts_a_running_guest_even_with_the_same_xml(tmp_path):
    wanted = spec()
    existing = defined_by_libvirt(tmp_path, wanted, active=True, autostart=True)
    change = compare.plan_domain_change(existing, wanted, "running",
                                        storage_actions=["rebuild seed /s.iso"],
                                        storage_restarts=True)
    assert change.actions == ["rebuild seed /s.iso"] and not change.define
    assert change.restart_required is True


@pytest.mark.parametrize("state, active, expected", [
    ("running", True, None), ("running", False, "start"),
    ("shutdown", True, "shutdown"), ("shutdown", False, None),
    ("destroyed", True, "destroy"), ("destroyed", False, None),
    ("present", True, None), ("present", False, None),
])
def test_run_state_actions(tmp_path, state, active, expected):
    wanted = spec()
    existing = defined_by_libvirt(tmp_path, wanted, active=active, autostart=True)
    change = compare.plan_domain_change(existing, wanted, state)
    assert change.run_state_action == expected
    assert change.actions == ([expected] if expected else [])


def test_autostart_is_turned_off_when_asked(tmp_path):
    wanted = spec()
    existing = defined_by_libvirt(tmp_path, wanted, active=False, autostart=True)
    change = compare.plan_domain_change(existing, wanted, "present", autostart=False)
    assert change.actions == ["autostart off"] and change.set_autostart is False


def test_another_uuid_under_the_same_name_is_refused(tmp_path):
    existing = defined_by_libvirt(tmp_path, spec())
    compare.check_same_machine(existing, existing.uuid.upper(), "tenant-a100")
    compare.check_same_machine(existing, "", "tenant-a100")
    compare.check_same_machine(None, "4dea22b3-1d52-d8f3-2516-782e98ab3fa0", "tenant-a100")
    with pytest.raises(GpuhostError) as err:
        compare.check_same_machine(existing, "4dea22b3-1d52-d8f3-2516-782e98ab3fa0",
                                   "tenant-a100")
    assert err.value.field == "uuid" and "undefine tenant-a100" in err.value.fix


def test_removal_destroys_a_running_domain_then_undefines_then_removes_files(tmp_path):
    existing = defined_by_libvirt(tmp_path, spec(), active=True)
    removal = compare.plan_domain_removal(existing, ["/d/a.qcow2", "/d/a-seed.iso"])
    assert removal.actions == ["destroy", "undefine", "remove /d/a.qcow2",
                               "remove /d/a-seed.iso"]
    assert removal.diff == {"before": existing.inactive_xml, "after": ""}


def test_removal_of_an_absent_domain_only_removes_what_is_left():
    removal = compare.plan_domain_removal(None, ["/d/a.qcow2"])
    assert removal.actions == ["remove /d/a.qcow2"] and removal.changed_elements == []
    assert compare.plan_domain_removal(None).actions == []


def test_a_rom_bar_change_is_a_definition_change_of_that_hostdev(tmp_path):
    gpu = runbook_tenant()["gpus"][0]["address"]
    existing = defined_by_libvirt(tmp_path, spec(rom_bar={gpu: "on"}), active=True,
                                  autostart=True)
    assert "<rom bar='on'/>" in existing.inactive_xml
    same = compare.plan_domain_change(existing, spec(rom_bar={gpu: "on"}), "running")
    assert same.changed_elements == [] and same.actions == []
    off = compare.plan_domain_change(existing, spec(rom_bar={gpu: "off"}), "running")
    assert off.changed_elements == ["devices/hostdev %s" % gpu]
    assert off.actions == ["define"] and off.restart_required is True
    assert '<rom bar="off"/>' in off.xml_to_define
    dropped = compare.plan_domain_change(existing, spec(), "running")
    assert dropped.changed_elements == ["devices/hostdev %s" % gpu]
    assert "<rom" not in dropped.xml_to_define
