# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Faults injected in the middle of a change, and what is left afterwards.

* vfio_bind, sriov_vfs and irq_affinity: the simulated kernel fails the Nth host write
  (sysfs attribute, configuration file or file removal), for every N of the run; the
  module must raise and leave the host exactly as the snapshot before it.
* libvirt_pinned_domain: libvirt itself refuses a redefinition (a connection wrapper
  adds an invalid hostdev to the XML the module sends, and the real test driver rejects
  it); the previous definition, the files and the storage record stay as they were.
* The allocation ledger, corrupted or cut at many lengths: detected, reported with the
  recovery steps, and never reset or rewritten.

The interrupted converge and the reboot need the QEMU lab (tests/lab); they are not here.
"""

import errno
import os

import pytest

import harness
from support.sysfs_sim import SimulatedKernel

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger as ledger_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology


class FailingKernel(SimulatedKernel):
    """Fails the ``fail_at``-th host mutation (1-based) once, and counts them all.

    The error is EIO (a device that stops answering), except on /proc/irq, where EIO
    means "kernel-managed IRQ" and is rightly skipped: there it is ENOSPC (the CPU's
    vector space exhausted), a real failure.
    """

    def __init__(self, root, fail_at=None, **kwargs):
        super().__init__(root, **kwargs)
        self.fail_at = fail_at
        self.mutations = 0
        self.injected = None

    def _tick(self, what):
        self.mutations += 1
        if self.fail_at is not None and self.mutations == self.fail_at:
            self.fail_at = None
            code = errno.ENOSPC if str(what).startswith("/proc/irq/") else errno.EIO
            self.injected = (code, what)
            raise OSError(code, os.strerror(code), what)

    def write(self, host_path, value):
        self._tick(host_path)
        return super().write(host_path, value)

    def write_file(self, host_path, content, *args, **kwargs):
        self._tick(host_path)
        return super().write_file(host_path, content, *args, **kwargs)

    def remove_file(self, host_path):
        self._tick(host_path)
        return super().remove_file(host_path)


GPU = "0000:41:00.0"
# (name, prepare the host, module, args): each a real change with several steps. The
# preparation is a module run (module, args) or the harness's tweaks of the tree (a dict).
SCENARIOS = [
    ("vfio-bind-gpu-hda-persistent", None, "vfio_bind",
     {"devices": [GPU], "persistent": True, "persistence": "udev", "initramfs": "dracut"}),
    ("vfio-give-back", ("vfio_bind", {"devices": [GPU]}), "vfio_bind",
     {"devices": [GPU], "state": "unbound"}),
    ("sriov-create-vfs-on-vfio", None, "sriov_vfs",
     {"pf": "eno1", "num_vfs": 3, "vf_driver": "vfio-pci", "persistent": True}),
    ("sriov-change-count", ("sriov_vfs", {"pf": "eno1", "num_vfs": 2}), "sriov_vfs",
     {"pf": "eno1", "num_vfs": 4, "vf_driver": "vfio-pci"}),
    # irqbalance installed, as the sriov_irq role leaves it: its config exists
    ("irq-pin-with-irqbalance", {"write": {"/etc/sysconfig/irqbalance": "IRQBALANCE_ONESHOT=0\n"}},
     "irq_affinity",
     {"name_regex": "^mlx5_comp|^nvme", "cpus": "0-1", "irqbalance_banned_cpus": "2-7",
      "irqbalance_format": "cpulist", "persistent": True}),
]


def _host(base, fail_at=None, prepare=None):
    host = harness.Host(base, "sim")
    if isinstance(prepare, dict):
        host.apply_tweaks(prepare)
    elif prepare:
        harness.run_module_case(host, prepare[0], prepare[1])
    host.kernel = FailingKernel(host.root, fail_at=fail_at,
                                native_drivers=host.kernel.native_drivers,
                                vf_drivers=host.kernel.vf_drivers)
    return host


def _mutations(tmp_path, prepare, target, args):
    """How many host mutations the run makes when nothing fails."""
    host = _host(tmp_path / "count", prepare=prepare)
    err = harness.run_module_case(host, target, args)
    assert err is None, err and err.message
    assert host.kernel.mutations > 1
    return host.kernel.mutations


@pytest.mark.parametrize("name,prepare,target,args", SCENARIOS,
                         ids=[s[0] for s in SCENARIOS])
def test_failure_at_every_write_rolls_back_to_the_snapshot(name, prepare, target, args,
                                                           tmp_path, tally):
    total = _mutations(tmp_path, prepare, target, args)
    for position in range(1, total + 1):
        host = _host(tmp_path / ("n%d" % position), fail_at=position, prepare=prepare)
        before = harness.host_state(host)
        err = harness.run_module_case(host, target, args)
        changes = harness.state_difference(before, harness.host_state(host))
        tally.fault("%s write failure" % target, err is not None and not changes)
        assert err is not None, "fault at mutation %d of %d went unnoticed" % (position, total)
        code, path = host.kernel.injected
        assert "(%s)" % errno.errorcode[code] in err.message, err.message
        assert "rolled back" in err.message, err.message
        assert not err.details.get("rollback_failed"), err.details
        assert not changes, "fault at mutation %d of %d (%s) left:\n%s" % (
            position, total, err.details.get("failed_step"), "\n".join(changes))


# -- libvirt define ------------------------------------------------------------------------

BAD_HOSTDEV = ("<hostdev mode='subsystem' type='pci' managed='yes'><source>"
               "<address domain='0x0000' bus='0x65' slot='0x00' function='0x9'/>"
               "</source></hostdev>")


class RejectingConnection:
    """The real test-driver connection, except that defineXML gets an invalid hostdev
    added to the XML, as a half-built definition would have; libvirt then refuses it."""

    def __init__(self, conn):
        self._conn = conn
        self.refused = 0

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def defineXML(self, xml):
        import libvirt
        try:
            return self._conn.defineXML(xml.replace("</devices>", BAD_HOSTDEV + "</devices>"))
        except libvirt.libvirtError:
            self.refused += 1
            raise


def _domain_args(host, **extra):
    args = {"name": "t1", "vcpus": 2, "vcpu_pins": [1, 33], "memory_gib": 2,
            "hugepage_size": "2M", "memory_nodes": "0", "state": "present",
            "disk": {"path": os.path.join(host.image_dir, "t1.qcow2"), "size": "1G"},
            "cloud_init": {"seed_path": os.path.join(host.image_dir, "t1-seed.iso"),
                           "user_data": "#cloud-config\nhostname: t1\n"}}
    args.update(extra)
    return args


def test_refused_redefinition_leaves_the_previous_definition_intact(tmp_path, tally):
    from ansible_collections.gpuhost.kvm.plugins.modules import libvirt_pinned_domain
    host = harness.Host(tmp_path / "host", "runbook")
    os.makedirs(host.image_dir)
    first = harness.run_libvirt_pinned_domain(host, _domain_args(host))
    assert first.changed and host.domains().keys() == {"t1"}
    before = harness.host_state(host)
    # The new definition changes the pins and the seed: storage work happens first, then
    # the define that libvirt refuses.
    args = _domain_args(host, vcpu_pins=[2, 34])
    args["cloud_init"]["user_data"] += "timezone: UTC\n"
    args["disk"]["path"] = os.path.join(host.image_dir, "t1-new.qcow2")
    args.update(root=host.root, state_dir=host.state_dir, domain_type="test",
                uri="test:///unused", _ansible_check_mode=False, _ansible_diff=True)
    from support.module_args import patch_module_args
    with patch_module_args(args):
        module = libvirt_pinned_domain.build_module()
    conn = RejectingConnection(host.connection())
    worker = libvirt_pinned_domain.PinnedDomain(module, conn=conn)
    with pytest.raises(GpuhostError) as info:
        worker.run()
    assert conn.refused == 1
    assert "libvirt refused the definition" in info.value.message
    assert "Invalid PCI address function=0x9" in info.value.message
    changes = harness.state_difference(before, harness.host_state(host))
    tally.fault("libvirt define refused", not changes)
    assert not changes, "\n".join(changes)


# -- the allocation ledger -----------------------------------------------------------------

def _good_ledger(host):
    topology = read_host_topology(host.root, with_irqs=False)
    with ledger_core.locked(host.ledger):
        data = ledger_core.read_ledger(host.ledger)
        new, _plan, added = ledger_core.reserve(
            data, topology, [{"name": "t1", "gpus": 1, "vcpus": 4, "memory_gib": 4,
                              "hugepage_size": "2M"}])
        ledger_core.write_ledger(host.ledger, new)
    assert added == ["t1"]
    with open(host.ledger) as handle:
        return handle.read(), topology


def test_corrupt_or_truncated_ledger_is_reported_never_reset(tmp_path, tally):
    host = harness.Host(tmp_path / "host", "runbook")
    text, topology = _good_ledger(host)
    damaged = [text[:cut] for cut in sorted(set(
        [0, 1, 10, len(text) // 4, len(text) // 2, len(text) - 40, len(text) - 2]))]
    damaged.append(text.replace('"t1"', '"t2"', 1))          # edited by hand: checksum
    damaged.append("\x00" * len(text))                         # a zeroed block after a crash
    for index, content in enumerate(damaged):
        with open(host.ledger, "w") as handle:
            handle.write(content)
        before = harness.host_state(host)
        with pytest.raises(ledger_core.LedgerCorruptError) as info:
            with ledger_core.locked(host.ledger):
                ledger_core.read_ledger(host.ledger)
        module_err = harness.run_module_case(
            host, "tenant_ledger", {"tenants": [{"name": "t9", "gpus": 0, "vcpus": 2,
                                                 "memory_gib": 2, "hugepage_size": "2M"}]})
        changes = harness.state_difference(before, harness.host_state(host))
        tally.fault("ledger corrupt", module_err is not None and not changes)
        message = info.value.message
        assert "is corrupt" in message and "do not delete it" in message, message
        assert "virsh dumpxml NAME" in message and host.ledger + ".prev" in message
        assert isinstance(module_err, ledger_core.LedgerCorruptError), (index, module_err)
        assert not changes, (index, changes)


def test_release_on_a_corrupt_ledger_is_refused_too(tmp_path, tally):
    host = harness.Host(tmp_path / "host", "runbook")
    text, _topology = _good_ledger(host)
    with open(host.ledger, "w") as handle:
        handle.write(text[: len(text) // 3])
    before = harness.host_state(host)
    err = harness.run_module_case(host, "tenant_ledger", {"state": "absent", "names": ["t1"]})
    changes = harness.state_difference(before, harness.host_state(host))
    tally.fault("ledger corrupt", err is not None and not changes)
    assert isinstance(err, ledger_core.LedgerCorruptError)
    assert not changes
