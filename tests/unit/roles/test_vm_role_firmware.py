# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vm role's firmware choice: UEFI by default for a tenant with a GPU, the
inventory's firmware key per tenant over it, and the OVMF package of the OS family
installed only when a tenant in scope boots UEFI. The role's own expressions, read from
roles/vm, are rendered with ansible-core's Templar and the collection's filters
(support.role_templar), so this is the role's text, not a copy of it; no play runs (the plan, the host and libvirt are not needed for the choice)."""

import os

import pytest
import yaml

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
from support import REPO
from support.role_templar import render

ROLE = os.path.join(REPO, "roles", "vm")


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


TASKS = _yaml("tasks", "main.yml")
INSTALL = next(t for t in TASKS if t["name"].startswith("Install QEMU"))
DEFINE = next(t for t in TASKS if "gpuhost.kvm.libvirt_pinned_domain" in t)
DEFAULTS = _yaml("defaults", "main.yml")
SPECS = _yaml("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]

GPU = [{"address": "0000:65:00.0", "functions": ["0000:65:00.0", "0000:65:00.1"]}]


def role_vars(family, tenants, definitions, installed=(), **overrides):
    """The variables the role's tasks see: its defaults, the family's vars file, the
    plan's tenants in scope (``tenants``) and the inventory's (``definitions``); and the
    names of the install task's own vars, which are rendered where they are used."""
    variables = dict(DEFAULTS)
    variables.update(_yaml("vars", "%s.yml" % family))
    variables.update(gpuhost_tenants=definitions, __vm_tenants=tenants,
                     __vm_packages_missing=[],
                     ansible_facts={"packages": {name: [{}] for name in installed}})
    variables.update(overrides)
    # The install task's own vars, less the ones pinned above: the tenants in scope and
    # the missing base packages stand for what the plan and the package list give.
    templated = [name for name in INSTALL["vars"] if name not in variables]
    for name in templated:
        variables[name] = INSTALL["vars"][name]
    return variables, templated


def packages_installed(family, tenants, definitions, **kwargs):
    variables, templated = role_vars(family, tenants, definitions, **kwargs)
    return render(["{{ __vm_install }}"], variables, templated)[0]


def firmware_defined(family, tenant, definitions, **kwargs):
    """The firmware option the define task passes for ``tenant``."""
    variables, templated = role_vars(family, [tenant], definitions, **kwargs)
    definition = next((d for d in definitions if d["name"] == tenant["name"]), {})
    variables.update(item=tenant, __vm_def=definition)
    expression = DEFINE["gpuhost.kvm.libvirt_pinned_domain"]["firmware"]
    return render([expression], variables, templated)[0]


def test_the_defaults_and_the_argument_spec_agree_with_the_module():
    assert DEFAULTS["vm_gpu_firmware"] == "efi" and DEFAULTS["vm_firmware"] == "bios"
    for name in ("vm_gpu_firmware", "vm_firmware"):
        assert SPECS[name]["default"] == DEFAULTS[name]
        assert SPECS[name]["choices"] == list(domain_model.FIRMWARE_CHOICES)


@pytest.mark.parametrize("family, package", [("Debian", "ovmf"), ("RedHat", "edk2-ovmf")])
def test_a_gpu_tenant_boots_uefi_and_the_family_firmware_is_installed(family, package):
    tenant = {"name": "tenant-a100", "gpus": GPU}
    definitions = [{"name": "tenant-a100"}]
    assert firmware_defined(family, tenant, definitions) == "efi"
    assert packages_installed(family, [tenant], definitions) == [package]
    # already installed: nothing to install
    assert packages_installed(family, [tenant], definitions, installed=[package]) == []


def test_a_tenant_without_a_gpu_keeps_bios_and_installs_nothing():
    tenant = {"name": "cpu-only", "gpus": []}
    assert firmware_defined("Debian", tenant, [{"name": "cpu-only"}]) == "bios"
    assert packages_installed("Debian", [tenant], [{"name": "cpu-only"}]) == []
    # unless the role is told otherwise for such tenants
    assert firmware_defined("Debian", tenant, [{"name": "cpu-only"}],
                            vm_firmware="efi") == "efi"
    assert packages_installed("Debian", [tenant], [{"name": "cpu-only"}],
                              vm_firmware="efi") == ["ovmf"]


@pytest.mark.parametrize("choice", ["bios", "efi-secure"])
def test_the_inventory_chooses_the_firmware_per_tenant(choice):
    tenant = {"name": "tenant-a100", "gpus": GPU}
    definitions = [{"name": "tenant-a100", "firmware": choice}]
    assert firmware_defined("Debian", tenant, definitions) == choice
    assert packages_installed("Debian", [tenant], definitions) == (
        [] if choice == "bios" else ["ovmf"])


def test_an_empty_firmware_key_means_the_default_for_the_choice_and_the_install():
    tenant = {"name": "tenant-a100", "gpus": GPU}
    definitions = [{"name": "tenant-a100", "firmware": None}]
    assert firmware_defined("Debian", tenant, definitions) == "efi"
    assert packages_installed("Debian", [tenant], definitions) == ["ovmf"]


def test_vm_gpu_firmware_bios_turns_uefi_off_for_the_host():
    tenant = {"name": "tenant-a100", "gpus": GPU}
    assert firmware_defined("Debian", tenant, [{"name": "tenant-a100"}],
                            vm_gpu_firmware="bios") == "bios"
    assert packages_installed("Debian", [tenant], [{"name": "tenant-a100"}],
                              vm_gpu_firmware="bios") == []


def test_only_tenants_in_scope_decide_the_install():
    """A UEFI tenant defined in the inventory but outside this run's scope (another
    tenant being onboarded) installs nothing for a BIOS tenant in scope."""
    in_scope = {"name": "tenant-b", "gpus": GPU}
    definitions = [{"name": "tenant-a", "firmware": "efi"},
                   {"name": "tenant-b", "firmware": "bios"}]
    assert packages_installed("Debian", [in_scope], definitions) == []


def hide_kvm_defined(definitions, **overrides):
    """The hide_kvm option the define task passes for the first tenant."""
    tenant = {"name": "tenant-a100", "gpus": GPU}
    variables, templated = role_vars("Debian", [tenant], definitions, **overrides)
    variables.update(item=tenant, __vm_def=definitions[0])
    expression = DEFINE["gpuhost.kvm.libvirt_pinned_domain"]["hide_kvm"]
    return render([expression], variables, templated)[0]


def test_kvm_stays_visible_by_default_and_the_module_agrees():
    """Hiding KVM was for Windows consumer-GPU drivers (Code 43); a Linux guest would
    lose kvmclock and the paravirtual features with it."""
    from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.argument_spec import (
        ARGUMENT_SPEC)
    assert DEFAULTS["vm_hide_kvm"] is False and SPECS["vm_hide_kvm"]["default"] is False
    assert ARGUMENT_SPEC["hide_kvm"]["default"] is False
    assert domain_model.DomainSpec(name="t", vcpus=1, vcpu_pins=((1,),), memory_kib=1 << 20) \
        .hide_kvm is False
    assert hide_kvm_defined([{"name": "tenant-a100"}]) is False


def test_the_inventory_hides_kvm_per_tenant_or_for_the_host():
    assert hide_kvm_defined([{"name": "tenant-a100", "hide_kvm": True}]) is True
    assert hide_kvm_defined([{"name": "tenant-a100"}], vm_hide_kvm=True) is True
    assert hide_kvm_defined([{"name": "tenant-a100", "hide_kvm": False}],
                            vm_hide_kvm=True) is False
