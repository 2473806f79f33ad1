"""One host-safety policy, worded for the action of the module that applies it.

Every refusal has the same structure in vfio_bind, libvirt_pinned_domain and sriov_vfs:
``<address> <what it is to the host>: <what THIS module's action does to it>, and <what
the host loses> (set <override>: true to override | no override)``. No module borrows
another's words ("binding it to vfio-pci" is vfio_bind's), and no message names an
override option the calling module does not have."""

import re
from types import SimpleNamespace

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import safety_context
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy import host_safety
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import preflight as domain_preflight
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import vfio_bind as vfio
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.critical import HostCriticalDevices
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy.host_safety import (
    BIND, CHANGE_VF_COUNT, PASS_THROUGH, UNBIND)
from ansible_collections.gpuhost.kvm.plugins.modules import (
    libvirt_pinned_domain, sriov_vfs, vfio_bind)

BRIDGE, ROOT, DATA, NIC, VGA, GUEST, BUSY = (
    "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0",
    "0000:05:00.0", "0000:06:00.0")
EVERY = [BRIDGE, ROOT, DATA, NIC, VGA, GUEST, BUSY]
MODULES = {BIND: vfio_bind, UNBIND: vfio_bind, PASS_THROUGH: libvirt_pinned_domain,
           CHANGE_VF_COUNT: sriov_vfs}


def every_kind_context():
    """A host on which each address meets one refusal of every kind there is."""
    functions = {a: SimpleNamespace(is_bridge=a == BRIDGE, driver="vfio-pci" if a == GUEST
                                    else "nvme", iommu_group=i, boot_vga=a == VGA)
                 for i, a in enumerate(EVERY)}
    critical = HostCriticalDevices(
        root_fs={ROOT: ["/"]}, storage={ROOT: ["/"], DATA: ["/srv"]},
        network={NIC: ["the default route (eno1)"]},
        console={VGA: "boot VGA with an active console (VGA text console; vtconsole x)"})
    return safety_context.HostContext(
        functions=functions, iommu_enabled=True, critical=critical,
        domain_devices={GUEST: ["tenant-b"]}, acs_override="downstream",
        group_verdict=lambda members: SimpleNamespace(clean=False, foreign=[], reasons=["x"]),
        open_users=lambda address, driver: {42: ("Xorg", ["/dev/dri/card0"])}
        if address == BUSY else {})


def spec_of(module, monkeypatch):
    """The options of ``module``: its build_module()'s argument_spec."""
    seen = {}

    def capture(**kwargs):
        seen.update(kwargs)
        return SimpleNamespace(params={})
    monkeypatch.setattr(module, "AnsibleModule", capture)
    module.build_module()
    return set(seen["argument_spec"])


def messages(action, addresses=None):
    """(field, msg, fix) of each refusal the module of ``action`` reports, one address
    at a time and all together (every kind of critical device when ``addresses`` is
    None), through the code path that module uses."""
    addresses = EVERY if addresses is None else addresses
    context = every_kind_context()
    out = []
    for chosen in [[a] for a in addresses] + [list(addresses)]:
        if action in (BIND, UNBIND):
            refusals = []
            for address in chosen:
                found = host_safety.refusals_for(context, address, {}, action=action)
                refusals += found if action is BIND else [
                    r for r in found if r.override == "allow_attached_to_running_domain"]
            if action is BIND:
                refusals += host_safety.check_groups(context, chosen, {})
            try:
                host_safety.raise_refusals(refusals, {}, action)
            except GpuhostError as err:
                out.append((err.field, err.msg, err.fix))
        elif action is PASS_THROUGH:
            report = domain_preflight.PreflightReport()
            spec = SimpleNamespace(hostdev_addresses=lambda chosen=chosen: chosen)
            domain_preflight.check_host_safety(spec, report, context, {},
                                               {a: "hostdevs" for a in chosen})
            out += [(r.field, r.reason, r.fix) for r in report.refusals]
        else:
            try:
                host_safety.check_vf_count_change(context, "0000:03:00.0", chosen, 4, {})
            except GpuhostError as err:
                out.append((err.field, err.msg, err.fix))
    assert out, action
    return out


@pytest.mark.parametrize("action", [BIND, UNBIND, PASS_THROUGH, CHANGE_VF_COUNT],
                         ids=lambda a: "%s-%s" % (a.module, a.verb.replace(" ", "-")))
def test_every_override_a_refusal_names_is_an_option_of_the_calling_module(
        action, monkeypatch):
    options = spec_of(MODULES[action], monkeypatch)
    assert set(action.overrides) <= options
    for field, msg, fix in messages(action):
        named = set(re.findall(r"\ballow_[a-z_]+", msg + " " + fix))
        assert named <= options, (action.module, named - options, msg)
        assert field in options, (action.module, field, msg)


def test_the_modules_pass_their_own_action():
    assert libvirt_pinned_domain.HOST_SAFETY_OVERRIDES == PASS_THROUGH.overrides
    assert vfio.OVERRIDES == BIND.overrides == UNBIND.overrides
    assert {a.module for a in host_safety.ACTIONS} == {
        "vfio_bind", "libvirt_pinned_domain", "sriov_vfs"}


_STRUCTURE = re.compile(r"(?P<address>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (?P<what>.+?): "
                        r"(?P<takes>%s), and (?P<loses>[^()]+(?:\([^()]*\))?[^()]*) "
                        r"\((?:set (?P<option>allow_[a-z_]+): true to override|no override)\)")


@pytest.mark.parametrize("action, takes, foreign", [
    (BIND, "binding it to vfio-pci unbinds it from the host",
     ["passing it through", "changing the VF count"]),
    (PASS_THROUGH, "passing it through to a domain detaches it from the host",
     ["unbinding", "binding it", "changing the VF count"]),
    (CHANGE_VF_COUNT, "changing the VF count destroys it",
     ["unbinding", "binding it", "passing it through", "passing a bridge"]),
])
def test_each_module_words_the_refusal_from_its_own_action(action, takes, foreign):
    assert action.takes == takes
    pattern = re.compile(_STRUCTURE.pattern % re.escape(takes))
    addresses = [a for a in EVERY if a not in (GUEST, BUSY)] if action is not BIND else EVERY
    for _field, msg, _fix in messages(action, addresses):
        for word in foreign:
            assert word not in msg, (word, msg)
        host_loss = list(pattern.finditer(msg))
        assert host_loss, msg
    root = [m for _f, m, _x in messages(action, [ROOT])][0]
    assert ("%s holds the root filesystem: %s, and the host stops at once (and this module "
            "with it) (no override)" % (ROOT, takes)) in root


def test_a_refusal_whose_override_the_module_lacks_has_no_override_there():
    """sriov_vfs has no allow_boot_vga: a console on a VF it would destroy is refused
    without an override, never with another module's option."""
    (field, msg, fix), = messages(CHANGE_VF_COUNT, [VGA])[:1]
    assert "allow_boot_vga" not in msg + fix and "(no override)" in msg
    assert field == "num_vfs" and fix.startswith("keep num_vfs at 1")


def test_the_vf_count_refusal_reads_whole():
    (field, msg, fix), = messages(CHANGE_VF_COUNT, [NIC])[:1]
    assert msg == ("refusing to change the VF count of 0000:03:00.0 from 1 to 4 (the kernel "
                   "removes every VF first): 0000:03:00.0 is the NIC of the default route "
                   "(eno1): changing the VF count destroys it, and the host loses that "
                   "connection (set allow_host_critical: true to override)")
    assert field == "allow_host_critical"
