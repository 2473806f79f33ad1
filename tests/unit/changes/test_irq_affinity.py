# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""irq_affinity against the simulator: selection, managed IRQs, rollback, irqbalance's
config, and the re-apply path when IRQs appear after the fact."""

import errno
import json
import os

import pytest

from support.sysfs_sim import (SimulatedKernel, TreeBuilder, build_sim_host, kernel_managed_irqs,
                               run_module, snapshot)

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity import (
    irqbalance, pinning as irq_pinning, policy as irq_policy)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import parse_cpumask
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_irqs
from ansible_collections.gpuhost.kvm.plugins.modules import irq_affinity

RHEL_CONFIG = ('# irqbalance is a daemon process that distributes interrupts\n'
               'IRQBALANCE_ONESHOT=\n'
               '#IRQBALANCE_BANNED_CPUS=\n'
               'IRQBALANCE_ARGS="--policyscript=/etc/irqbalance.d/policy"\n')


@pytest.fixture
def sim(tmp_path):
    root = build_sim_host(str(tmp_path / "host"))
    # As on the lab kernel: the NVMe I/O queues (41-43) are kernel-managed, the admin
    # queue nvme0q0 (40) takes a pin.
    return SimulatedKernel(root, managed_irqs=kernel_managed_irqs(root))


def pin(sim, check_mode=False, **args):
    args.setdefault("root", sim.root)
    return run_module(irq_affinity, "IrqPinner", args, sim, check_mode=check_mode)


def failed(sim, **args):
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        pin(sim, **args)
    assert snapshot(sim.root) == before
    return info.value


def affinity(sim, irq):
    found = read_irqs(sim.root)[str(irq)]
    return found.smp_affinity_list, found.effective_affinity_list


def test_pin_by_name_then_idempotent(sim):
    result = pin(sim, name_regex="^mlx5_comp", cpus="0-1").result
    assert result["changed"] is True
    assert result["selected"] == [50, 51, 52, 53]
    assert result["changed_irqs"] == [50, 51, 52, 53]
    assert result["previous"]["50"] == "0-7"
    assert affinity(sim, 50) == ((0, 1), (0,))
    again = pin(sim, name_regex="^mlx5_comp", cpus="0-1").result
    assert again["changed"] is False and again["changed_irqs"] == []


def test_effective_inside_but_mask_different_is_rewritten(sim):
    # smp_affinity_list 0-7 with effective 0: effective is inside 0-1, the mask is not.
    assert pin(sim, irqs=[60], cpus="0-1").result["changed_irqs"] == [60]


def test_managed_irqs_are_skipped_not_failed(sim):
    result = pin(sim, pci_devices=["0000:01:00.0"], cpus="0-1").result
    assert result["selected"] == [40, 41, 42, 43]
    assert result["skipped_managed"] == [41, 42, 43]
    assert result["changed_irqs"] == [40]
    assert result["changed"] is True
    assert affinity(sim, 40)[0] == (0, 1)
    again = pin(sim, pci_devices=["0000:01:00.0"], cpus="0-1").result
    assert again["changed"] is False and again["skipped_managed"] == [41, 42, 43]


def test_check_mode_changes_nothing_and_shows_the_diff(sim):
    before = snapshot(sim.root)
    result = pin(sim, check_mode=True, irqs=[60, 61], cpus="2", persistent=True).result
    assert snapshot(sim.root) == before
    assert result["changed"] is True and result["changed_irqs"] == [60, 61]
    assert "/proc/irq/60/smp_affinity_list = 0-7\n" in result["diff"][0]["before"]
    assert "/proc/irq/60/smp_affinity_list = 2\n" in result["diff"][0]["after"]
    assert irq_pinning.CONFIG_FILE in [d["after_header"] for d in result["diff"][1:]]


def test_non_eio_failure_rolls_back_earlier_pins(sim):
    sim.fail_on["/proc/irq/52/smp_affinity_list"] = errno.ENOSPC   # vector space exhausted
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        pin(sim, name_regex="mlx5_comp", cpus="3")
    assert snapshot(sim.root) == before
    assert info.value.details["rolled_back"] == ["pin IRQ 51 to 3", "pin IRQ 50 to 3"]
    assert info.value.details["errno"] == "ENOSPC"


def test_nonexistent_irq_fails_and_changes_nothing(sim):
    err = failed(sim, irqs=[999], cpus="0")
    assert err.field == "irqs" and "IRQ 999 does not exist" in err.message


def test_cpus_outside_online_fail_and_change_nothing(sim):
    err = failed(sim, irqs=[60], cpus="6-9")
    assert err.field == "cpus" and "8-9" in err.message and "online: 0-7" in err.message


def test_unknown_pci_device_and_bad_regex_fail(sim):
    assert failed(sim, pci_devices=["0000:66:00.0"], cpus="0").field == "pci_devices"
    assert failed(sim, name_regex="(", cpus="0").field == "name_regex"


# -- irqbalance --------------------------------------------------------------------

def test_irqbalance_cpulist_keeps_other_lines_and_adds_isolated(sim):
    TreeBuilder(sim.root).write("/sys/devices/system/cpu/isolated", "6\n")
    TreeBuilder(sim.root).write("/etc/sysconfig/irqbalance", RHEL_CONFIG)
    result = pin(sim, irqs=[60], cpus="0-1", irqbalance_banned_cpus="4-5",
                 irqbalance_config="/etc/sysconfig/irqbalance",
                 irqbalance_format="cpulist").result
    assert result["irqbalance_banned_cpus"] == "4-6"
    text = sim.read_file("/etc/sysconfig/irqbalance")
    assert text.startswith(RHEL_CONFIG)
    assert text.endswith("IRQBALANCE_BANNED_CPULIST=4-6\n")
    assert "systemctl try-restart irqbalance (root is not /)" in result["skipped_actions"]
    again = pin(sim, irqs=[60], cpus="0-1", irqbalance_banned_cpus="4-5",
                irqbalance_config="/etc/sysconfig/irqbalance", irqbalance_format="cpulist")
    assert again.result["changed"] is False and again.skipped == []


def test_irqbalance_mask_for_old_versions_replaces_the_cpulist_key(sim):
    TreeBuilder(sim.root).write("/etc/default/irqbalance", "IRQBALANCE_BANNED_CPULIST=1\n")
    pin(sim, irqs=[60], cpus="0", irqbalance_banned_cpus="2-7",
        irqbalance_config="/etc/default/irqbalance", irqbalance_format="mask")
    text = sim.read_file("/etc/default/irqbalance")
    assert "IRQBALANCE_BANNED_CPULIST" not in text
    value = text.strip().splitlines()[-1].split("=", 1)[1]
    assert parse_cpumask(value) == (2, 3, 4, 5, 6, 7)


def test_irqbalance_malformed_config_is_refused(sim):
    TreeBuilder(sim.root).write("/etc/sysconfig/irqbalance", "this is not shell\n")
    err = failed(sim, irqs=[60], cpus="0", irqbalance_banned_cpus="2-7",
                 irqbalance_format="cpulist")
    assert err.field == "irqbalance_config" and "line 1" in err.message


def test_irqbalance_unreadable_config_is_refused(sim):
    os.makedirs(sim.path("/etc/sysconfig/irqbalance"))     # a directory: cannot be read
    err = failed(sim, irqs=[60], cpus="0", irqbalance_banned_cpus="2-7",
                 irqbalance_format="cpulist")
    # Refused by the shared validator (validators.config_path) before anything is read.
    assert err.field == "irqbalance_config" and "is not a file" in err.message


def test_irqbalance_overlap_and_ban_everything_are_refused(sim):
    TreeBuilder(sim.root).write("/etc/sysconfig/irqbalance", "IRQBALANCE_ONESHOT=0\n")
    assert failed(sim, irqs=[60], cpus="0-1", irqbalance_banned_cpus="1-7",
                  irqbalance_format="cpulist").field == "irqbalance_banned_cpus"
    TreeBuilder(sim.root).write("/sys/devices/system/cpu/nohz_full", "0-1\n")
    assert failed(sim, irqs=[60], cpus="1", irqbalance_banned_cpus="2-7",
                  irqbalance_format="cpulist").field == "irqbalance_banned_cpus"


@pytest.mark.parametrize("version,fmt", [("irqbalance version 1.9.2", "cpulist"),
                                         ("irqbalance version 1.8.0", "cpulist"),
                                         ("irqbalance version 1.4.0", "mask"),
                                         ("", "mask")])
def test_format_for_version(version, fmt):
    assert irqbalance.format_for_version(version) == fmt


def test_mask_form_is_32_bit_words():
    assert irqbalance.banned_value(range(32, 64), "mask", 64) == "ffffffff,00000000"


# -- persistence and re-apply ----------------------------------------------------------

def test_persistent_writes_config_helper_udev_rule_and_libvirt_hook(sim):
    os.makedirs(sim.path(irq_pinning.NM_DISPATCHER_DIR))
    pin(sim, name_regex="vfio-msix", cpus="0-1", persistent=True)
    config = json.loads(sim.read_file(irq_pinning.CONFIG_FILE))
    assert config["rules"] == [{"name_regex": "vfio-msix", "pci_devices": [], "irqs": [],
                                "cpus": "0-1"}]
    assert 'ACTION=="add|move", SUBSYSTEM=="net", RUN+="%s"' % irq_pinning.HELPER in \
        sim.read_file(irq_pinning.UDEV_RULE_FILE)
    for path in (irq_pinning.HELPER, irq_pinning.LIBVIRT_HOOK, irq_pinning.NM_DISPATCHER):
        assert os.access(sim.path(path), os.X_OK)
    assert "libvirt_hook_main" in sim.read_file(irq_pinning.LIBVIRT_HOOK)
    assert pin(sim, name_regex="vfio-msix", cpus="0-1",
               persistent=True).result["changed"] is False
    pin(sim, name_regex="mlx5", cpus="2", persistent=True)
    assert len(json.loads(sim.read_file(irq_pinning.CONFIG_FILE))["rules"]) == 2


def test_every_shipped_wrapper_runs_from_the_shipped_library_alone(sim):
    """Each boot helper (the re-apply, irqbalance's policy script, the libvirt hook) must
    import from the files the persistence ships: a wrapper whose module is not shipped
    fails at boot, and irqbalance then balances the pinned IRQs (the policy script's
    module was once left out this way)."""
    from support.shipped import import_failures, wrapper_targets
    pin(sim, name_regex="vfio-msix", cpus="0-1", persistent=True)
    wrappers = (irq_pinning.HELPER, irq_pinning.POLICY_SCRIPT, irq_pinning.LIBVIRT_HOOK)
    assert {m.rsplit(".", 1)[1] for _p, m, _f in wrapper_targets(sim, wrappers)} == {"pinning", "policy"}
    assert import_failures(sim, wrappers) == []


def test_reapply_pins_irqs_that_appear_after_the_fact(sim):
    pin(sim, name_regex="vfio-msix", cpus="0-1", persistent=True)
    # The guest enables MSI-X on the passed-through GPU: new IRQs on all CPUs.
    sim.add_irq(80, "vfio-msix[0](0000:41:00.0)", device="0000:41:00.0")
    sim.add_irq(81, "vfio-msix[1](0000:41:00.0)", device="0000:41:00.0")
    sim.add_irq(82, "vfio-msix[2](0000:41:00.0)", device="0000:41:00.0", managed=True)
    assert affinity(sim, 80)[0] == tuple(range(8))
    assert irq_pinning.reapply_main([], writer=sim) == 0
    assert affinity(sim, 80) == ((0, 1), (0,))
    assert affinity(sim, 81) == ((0, 1), (0,))
    report = irq_pinning.reapply(sim, json.loads(sim.read_file(irq_pinning.CONFIG_FILE)))
    assert report["pinned"] == [] and report["in_place"] == [80, 81]
    assert report["skipped_managed"] == [82]


def test_reapply_watch_keeps_pinning_until_the_deadline(sim):
    pin(sim, name_regex="mlx5_comp", cpus="3", persistent=True)
    ticks = iter(range(100))
    arrivals = {1: 90, 2: 91}

    def sleep(_seconds):
        n = next(ticks)
        if n in arrivals:
            sim.add_irq(arrivals[n], "mlx5_comp%d@pci:0000:03:00.0" % n, device="0000:03:00.0")
    clock = iter([0, 0, 1, 2, 3, 10]).__next__
    assert irq_pinning.reapply_main(["--watch", "5"], writer=sim, sleep=sleep, clock=clock) == 0
    assert affinity(sim, 90)[0] == (3,) and affinity(sim, 91)[0] == (3,)


def test_libvirt_hook_only_acts_on_started():
    forks = []
    assert irq_pinning.libvirt_hook_main(["tenant-a", "prepare", "begin", "-"],
                                         fork=lambda: forks.append(1) or 1) == 0
    assert forks == []
    assert irq_pinning.libvirt_hook_main(["tenant-a", "started", "begin", "-"],
                                         fork=lambda: forks.append(1) or 1) == 0
    assert forks == [1]     # the parent returns at once; the child does the watching


def _qemu_process(sim, name, pid, start, status_xml=True):
    """libvirt's pid file of domain ``name`` (with its status XML, as libvirt keeps both
    for a running domain) and a /proc/<pid>/stat with start time ``start``."""
    run_dir = os.path.join(sim.root, irq_pinning.LIBVIRT_QEMU_RUN_DIR.lstrip("/"))
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, name + ".pid"), "w", encoding="utf-8") as handle:
        handle.write("%d\n" % pid)
    if status_xml:
        with open(os.path.join(run_dir, name + ".xml"), "w", encoding="utf-8") as handle:
            handle.write("<domstatus state='running' pid='%d'/>\n" % pid)
    proc = os.path.join(sim.root, "proc", str(pid))
    os.makedirs(proc, exist_ok=True)
    # comm with a space and a ")" in it, as a hostile or odd process name may have
    fields = ["S"] + ["0"] * 18 + [str(start)] + ["0"] * 10
    with open(os.path.join(proc, "stat"), "w", encoding="utf-8") as handle:
        handle.write("%d (qemu-system) x) %s\n" % (pid, " ".join(fields)))


def _qemu_gone(sim, pid):
    os.remove(os.path.join(sim.root, "proc", str(pid), "stat"))


def test_the_watcher_pins_msix_that_comes_long_after_the_start_and_ends_with_qemu(sim):
    pin(sim, name_regex="vfio-msix", cpus="0-1", persistent=True)
    _qemu_process(sim, "tenant-a", 4242, 777)
    assert irq_pinning.domain_process(sim, "tenant-a") == (4242, "777")
    rounds = []

    def sleep(seconds):
        rounds.append(seconds)
        if len(rounds) == 4:        # the guest's driver loads well after the quick looks
            sim.add_irq(80, "vfio-msix[0](0000:41:00.0)", device="0000:41:00.0")
        if len(rounds) == 6:        # the domain stops: its QEMU is gone
            _qemu_gone(sim, 4242)
    now = iter(range(0, 1000, 3)).__next__
    assert irq_pinning.watch_domains(sim, sleep=sleep, clock=now, log=lambda line: None,
                                     quick_seconds=5) == 0
    assert affinity(sim, 80)[0] == (0, 1)
    # quick looks within 5 s of the QEMU's first sight, slow ones while it lives, the end
    assert rounds == [2] + [irq_pinning.DOMAIN_WATCH_INTERVAL_S] * 5


def test_one_watcher_serves_every_domain_and_looks_quickly_again_at_a_new_one(sim):
    pin(sim, name_regex="vfio-msix", cpus="0-1", persistent=True)
    _qemu_process(sim, "tenant-a", 4242, 777)
    rounds = []

    def sleep(seconds):
        rounds.append(seconds)
        if len(rounds) == 3:        # a second tenant starts while the watcher runs
            _qemu_process(sim, "tenant-b", 4343, 888)
        if len(rounds) == 5:
            sim.add_irq(82, "vfio-msix[0](0000:42:00.0)", device="0000:42:00.0")
        if len(rounds) == 6:
            _qemu_gone(sim, 4242)
        if len(rounds) == 8:
            _qemu_gone(sim, 4343)
    now = iter(range(0, 1000, 3)).__next__
    assert irq_pinning.watch_domains(sim, sleep=sleep, clock=now, log=lambda line: None,
                                     quick_seconds=5) == 0
    assert affinity(sim, 82)[0] == (0, 1)
    # tenant-b's first sight (clock 6) opens quick looks again until 11; it runs alone
    # after tenant-a stops, and the watcher ends with the last QEMU
    assert rounds == [2, 10, 10, 2, 10, 10, 10, 10]


def test_libvirts_own_driver_pid_is_no_domain_and_the_watcher_ends_without_one(sim):
    """libvirt's run folder holds the daemon's driver.pid beside the domains' files (seen
    on the lab: the first watcher never ended, taking libvirtd for a running domain)."""
    pin(sim, name_regex="vfio-msix", cpus="0-1", persistent=True)
    _qemu_process(sim, "driver", 516, 15314, status_xml=False)
    assert irq_pinning.running_domains(sim) == {}
    _qemu_process(sim, "tenant-a", 4242, 777)
    assert list(irq_pinning.running_domains(sim)) == ["tenant-a"]
    rounds = []

    def sleep(seconds):
        rounds.append(seconds)
        os.remove(os.path.join(sim.root, irq_pinning.LIBVIRT_QEMU_RUN_DIR.lstrip("/"), "tenant-a.xml"))
    assert irq_pinning.watch_domains(sim, sleep=sleep, clock=lambda: 0, log=lambda line: None) == 0
    assert rounds == [2]


def test_a_later_process_with_the_domains_old_pid_is_not_the_domain(sim):
    _qemu_process(sim, "tenant-a", 4242, 777)
    process = irq_pinning.domain_process(sim, "tenant-a")
    _qemu_process(sim, "tenant-b", 4242, 999)     # pid reused by another process
    assert irq_pinning.running_domains(sim) == {"tenant-a": (4242, "999"), "tenant-b": (4242, "999")}
    assert irq_pinning.domain_process(sim, "tenant-a") != process


@pytest.mark.parametrize("name", ["", "../etc/x", "a/b", ".hidden", "no-such-domain"])
def test_no_process_for_a_bad_or_unknown_domain_name(sim, name):
    assert irq_pinning.domain_process(sim, name) is None


def test_the_watcher_reads_the_pins_again_and_never_puts_back_a_forgotten_one(sim):
    pin(sim, name_regex="vfio-msix", cpus="0-1", persistent=True, persist_as="tenant-a vfio")
    _qemu_process(sim, "tenant-a", 4242, 777)
    rounds = []

    def sleep(_seconds):
        rounds.append(1)
        if len(rounds) == 1:        # offboarding forgets the pin while the watcher runs
            pin(sim, state="absent", persist_as="tenant-a vfio")
            sim.add_irq(81, "vfio-msix[0](0000:41:00.0)", device="0000:41:00.0")
        if len(rounds) == 2:
            _qemu_gone(sim, 4242)
    assert irq_pinning.watch_domains(sim, sleep=sleep, clock=lambda: 0, log=lambda line: None) == 0
    assert affinity(sim, 81)[0] == tuple(range(8))


def test_the_hooks_child_detaches_and_becomes_the_hosts_one_watcher(sim):
    _qemu_process(sim, "tenant-a", 4242, 777)
    watches = []

    def watch(writer, log):
        watches.append(log)
        # a second tenant's hook, while this watcher holds the lock, leaves it at once
        assert irq_pinning.libvirt_hook_main(["tenant-b", "started", "begin", "-"], fork=lambda: 0,
                                             detach=lambda: log, writer=sim, watch=watch) == 0
        _qemu_gone(sim, 4242)
        return 0
    detached = []
    logger = detached.append
    assert irq_pinning.libvirt_hook_main(["tenant-a", "started", "begin", "-"], fork=lambda: 0,
                                         detach=lambda: detached.append("detached") or logger,
                                         writer=sim, watch=watch) == 0
    assert detached == ["detached"] and watches == [logger]
    # released: the next start's hook becomes the watcher again
    _qemu_process(sim, "tenant-c", 4444, 999)
    assert irq_pinning.libvirt_hook_main(["tenant-c", "started", "begin", "-"], fork=lambda: 0,
                                         detach=lambda: logger, writer=sim,
                                         watch=lambda writer, log: _qemu_gone(sim, 4444) or 0) == 0


def test_a_domain_started_while_the_watcher_gave_up_is_watched_all_the_same(sim):
    """The race of the watcher's end: a new domain's hook tried the lock while the
    watcher still held it, so the watcher must look once more after releasing it."""
    _qemu_process(sim, "tenant-a", 4242, 777)
    calls = []

    def watch(writer, log):
        calls.append(sorted(irq_pinning.running_domains(sim)))
        if len(calls) == 1:
            _qemu_gone(sim, 4242)
            _qemu_process(sim, "tenant-b", 4343, 888)   # its hook found the lock held
        else:
            _qemu_gone(sim, 4343)
        return 0
    assert irq_pinning.host_watcher(sim, log=lambda line: None, watch=watch) == 0
    assert calls == [["tenant-a"], ["tenant-b"]]


# -- irqbalance leaves the pinned IRQs alone (its policy script) ---------------------------

def test_persistent_pins_make_irqbalance_ask_the_policy_script_and_restart(sim):
    TreeBuilder(sim.root).write("/etc/default/irqbalance",
                                "#IRQBALANCE_ONESHOT=\nIRQBALANCE_ARGS=\"--journal\"\n")
    args = dict(pci_devices=["0000:01:00.0"], cpus="0-1", irqbalance_banned_cpus="2-3",
                irqbalance_config="/etc/default/irqbalance", irqbalance_format="cpulist",
                persistent=True)
    result = pin(sim, **args).result
    text = sim.read_file("/etc/default/irqbalance")
    assert ('IRQBALANCE_ARGS="--journal --policyscript=%s"\n' % irq_pinning.POLICY_SCRIPT) in text
    assert "IRQBALANCE_BANNED_CPULIST=2-3\n" in text
    assert os.access(sim.path(irq_pinning.POLICY_SCRIPT), os.X_OK)
    assert "irqbalance_policy_main" in sim.read_file(irq_pinning.POLICY_SCRIPT)
    assert "systemctl try-restart irqbalance (root is not /)" in result["skipped_actions"]
    again = pin(sim, **args)
    assert again.result["changed"] is False and again.skipped == []
    # Another node's pins, later, in a task that does not manage the ban list: irqbalance
    # must hear of them (it asks the policy script only when it starts).
    other = pin(sim, name_regex="^mlx5_comp", cpus="4-5", persistent=True,
                irqbalance_config="/etc/default/irqbalance").result
    assert "systemctl try-restart irqbalance (root is not /)" in other["skipped_actions"]


def test_someone_elses_policy_script_is_refused_not_replaced(sim):
    TreeBuilder(sim.root).write("/etc/sysconfig/irqbalance", RHEL_CONFIG)
    error = failed(sim, irqs=[60], cpus="0-1", irqbalance_banned_cpus="4-5",
                   irqbalance_config="/etc/sysconfig/irqbalance", irqbalance_format="cpulist",
                   persistent=True)
    assert error.field == "irqbalance_config"
    assert "already names the policy script /etc/irqbalance.d/policy" in error.message
    # Without stored pins there is nothing for a policy script to protect: left alone.
    pin(sim, irqs=[60], cpus="0-1", irqbalance_banned_cpus="4-5",
        irqbalance_config="/etc/sysconfig/irqbalance", irqbalance_format="cpulist")
    assert '--policyscript=/etc/irqbalance.d/policy"' in sim.read_file("/etc/sysconfig/irqbalance")


@pytest.mark.parametrize("current, expected", [
    (None, '"--policyscript=/p"'),
    ('""', '"--policyscript=/p"'),
    ('"--journal --policyscript=/p"', '"--journal --policyscript=/p"'),
    ("--journal", '"--journal --policyscript=/p"'),
    ('"-l /p --hintpolicy=ignore"', '"--hintpolicy=ignore --policyscript=/p"'),
])
def test_irqbalance_args_with_policy_script(current, expected):
    assert irqbalance.args_with_policy_script(current, "/p", "f") == expected


def test_policy_script_bans_exactly_the_pinned_irqs(sim, capsys):
    pin(sim, pci_devices=["0000:01:00.0"], cpus="0-1", persistent=True)
    answers = {}
    for irq in (40, 41, 50, 60):
        irq_policy.irqbalance_policy_main(["/sys/devices/x", str(irq)], root=sim.root)
        answers[irq] = capsys.readouterr().out
    # The NVMe controller's IRQs (the managed queues too: irqbalance cannot move them
    # anyway); not the NIC's or the others.
    assert answers == {40: "ban=true\n", 41: "ban=true\n", 50: "", 60: ""}
    # A config that does not parse bans nothing and never fails irqbalance's scan.
    TreeBuilder(sim.root).write(irq_pinning.CONFIG_FILE, "{not json")
    assert irq_policy.irqbalance_policy_main(["/sys/x", "40"], root=sim.root) == 0
    assert capsys.readouterr().out == ""


def test_policy_answers_agree_with_the_whole_selection_on_every_irq(sim, capsys):
    """The policy script looks at the asked IRQ only; its answers must be exactly the set
    the stored pins select when every IRQ is read (selectors of all three kinds, a rule
    that no longer parses, a device that is gone)."""
    config = {"rules": [
        {"name": "node 0", "pci_devices": ["0000:01:00.0", "0000:77:00.0"], "irqs": [],
         "name_regex": None, "cpus": "0-1"},
        {"pci_devices": [], "irqs": [60, 9999], "name_regex": None, "cpus": "2"},
        {"pci_devices": [], "irqs": [], "name_regex": "mlx5_comp[13]", "cpus": "3"},
        {"pci_devices": [], "irqs": [], "name_regex": None, "cpus": "not a cpulist"}]}
    TreeBuilder(sim.root).write(irq_pinning.CONFIG_FILE, json.dumps(config))
    expected = irq_pinning.pinned_irqs(sim.root, config)
    assert expected == {40, 41, 42, 43, 51, 53, 60}
    every = [irq.number for irq in read_irqs(sim.root).values() if irq.number is not None]
    banned = set()
    for number in every:
        irq_policy.irqbalance_policy_main(["/sys/devices/x", str(number)], root=sim.root)
        if capsys.readouterr().out == "ban=true\n":
            banned.add(number)
    assert banned == expected


def live_nvme_pinner(sim):
    """The NVMe controller's IRQs pinned persistently with irqbalance's config, as on the
    live host (systemctl answered here): the pinner, and each command it ran with the
    host's state at that moment."""
    from support.module_args import patch_module_args
    args = dict(root=sim.root, pci_devices=["0000:01:00.0"], cpus="0-1",
                irqbalance_banned_cpus="2-3", irqbalance_config="/etc/default/irqbalance",
                irqbalance_format="cpulist", persistent=True,
                _ansible_check_mode=False, _ansible_diff=True)
    with patch_module_args(args):
        module = irq_affinity.build_module()
    commands = []

    def run_command(argv, **_kwargs):
        commands.append({"argv": argv, "irq_40": affinity(sim, 40)[0],
                         "config": sim.read_file("/etc/default/irqbalance"),
                         "stored": sim.read_file(irq_pinning.CONFIG_FILE)})
        return 0, "", ""
    module.run_command = run_command
    pinner = irq_affinity.IrqPinner(module, writer=sim)
    pinner.live = True      # the simulated root stands for / here: let it restart
    return pinner, commands


def test_a_rolled_back_run_restarts_irqbalance_on_the_restored_config(sim):
    """A pin that fails after the restart rolls the config and stored pins back; without
    a second restart irqbalance would keep running on the rolled-back config."""
    old_config = "IRQBALANCE_ARGS=\"--journal\"\n"
    TreeBuilder(sim.root).write("/etc/default/irqbalance", old_config)
    sim.fail_on["/proc/irq/41/smp_affinity_list"] = errno.ENOSPC
    pinner, commands = live_nvme_pinner(sim)
    with pytest.raises(GpuhostError) as info:
        pinner.run()
    assert info.value.details["rolled_back"][-1] == "systemctl try-restart irqbalance"
    restarts = [c for c in commands
                if c["argv"] == ["systemctl", "try-restart", "--", "irqbalance"]]
    assert len(restarts) == 2
    assert irq_pinning.POLICY_SCRIPT in restarts[0]["config"]
    # The second restart comes after everything else was undone.
    assert {key: restarts[1][key] for key in ("config", "stored", "irq_40")} == {
        "config": old_config, "stored": None, "irq_40": tuple(range(8))}
    assert sim.read_file("/etc/default/irqbalance") == old_config


def test_irqbalance_restarts_before_the_pins_are_written(sim):
    """The lab's second site.yml run re-pinned the NIC's IRQs: the pins had been written
    while the old irqbalance (no policy script yet) ran, and it moved them before the
    restart. The restart must come after the config and stored pins, before the pins."""
    TreeBuilder(sim.root).write("/etc/default/irqbalance", "IRQBALANCE_ARGS=\"--journal\"\n")
    pinner, seen_at_restart = live_nvme_pinner(sim)
    pinner.run()
    steps = pinner.result["steps"]
    restart = steps.index("systemctl try-restart irqbalance")
    assert steps.index("pin IRQ 40 to 0-1") > restart
    assert steps.index("create %s" % irq_pinning.CONFIG_FILE) < restart
    restarts = [call for call in seen_at_restart
                if call["argv"] == ["systemctl", "try-restart", "--", "irqbalance"]]
    assert len(restarts) == 1
    state = restarts[0]
    assert state["irq_40"] == tuple(range(8))            # not pinned yet
    assert irq_pinning.POLICY_SCRIPT in state["config"]   # irqbalance will ask the policy
    assert "0000:01:00.0" in state["stored"]              # ...which already knows the pin
    assert affinity(sim, 40)[0] == (0, 1)
    assert pinner.result["irqbalance_restarted"] is True
    # The boot unit: a block device's IRQs have no udev event, so after a reboot only it
    # puts the NVMe admin queue's pin back (the lab's reboot showed that).
    assert [call["argv"] for call in seen_at_restart
            if call["argv"][:2] == ["systemctl", "enable"]] == [
        ["systemctl", "enable", "--", irq_pinning.UNIT_NAME]]
    unit = sim.read_file(irq_pinning.UNIT_FILE)
    assert "ExecStart=%s --watch" % irq_pinning.HELPER in unit
    assert "WantedBy=multi-user.target" in unit


def test_a_disabled_boot_unit_is_enabled_again(sim):
    args = dict(root=sim.root, pci_devices=["0000:01:00.0"], cpus="0-1", persistent=True)
    pin(sim, **args)
    from support.module_args import patch_module_args
    calls = []
    for enabled_rc, check_mode in ((1, True), (1, False), (0, False)):
        with patch_module_args(dict(args, _ansible_check_mode=check_mode)):
            module = irq_affinity.build_module()
        module.run_command = (lambda argv, rc=enabled_rc, **_kw:
                              calls.append(argv) or (rc if "is-enabled" in argv else 0, "", ""))
        pinner = irq_affinity.IrqPinner(module, writer=sim)
        pinner.live = True
        pinner.run()
        enable = "systemctl enable %s" % irq_pinning.UNIT_NAME
        assert (enable in pinner.result["steps"]) is (enabled_rc != 0)
        assert pinner.result["changed"] is (enabled_rc != 0)
    assert calls.count(["systemctl", "enable", "--", irq_pinning.UNIT_NAME]) == 1
    assert ["systemctl", "is-enabled", "--", irq_pinning.UNIT_NAME] in calls


def test_check_mode_knows_the_managed_irqs_a_real_run_met(sim):
    """validate.yml on its own (no sriov_irq run in the same play) runs irq_affinity in
    check mode: after a reboot it flagged the NVMe I/O queues, which no write can move.
    A real run stores their names (numbers move between boots); check mode uses them."""
    args = dict(pci_devices=["0000:01:00.0"], cpus="0-1", persistent=True)
    before = pin(sim, check_mode=True, **args).result
    assert before["changed_irqs"] == [40, 41, 42, 43]       # nothing tells them apart yet
    first = pin(sim, **args).result
    assert first["skipped_managed"] == [41, 42, 43]
    stored = json.loads(sim.read_file(irq_pinning.CONFIG_FILE))
    assert stored["kernel_managed"] == ["nvme0q1", "nvme0q2", "nvme0q3"]
    check = pin(sim, check_mode=True, **args).result
    assert check["changed"] is False and check["changed_irqs"] == []
    assert check["skipped_managed"] == [41, 42, 43]
    again = pin(sim, **args).result
    assert again["changed"] is False and again["skipped_managed"] == [41, 42, 43]
    # A pin out of place is still found next to them.
    sim.write("/proc/irq/40/smp_affinity_list", "0-7")
    assert pin(sim, check_mode=True, **args).result["changed_irqs"] == [40]


def test_a_failed_run_takes_back_the_managed_record(sim, monkeypatch):
    args = dict(pci_devices=["0000:01:00.0"], cpus="0-1", persistent=True)
    pin(sim, irqs=[60], cpus="0-1", persistent=True)
    before = snapshot(sim.root)
    real_add = irq_pinning.add_managed_record

    def add_then_fail(changes, *rest):
        wrote = real_add(changes, *rest)

        def boom():
            raise OSError(errno.ENOSPC, "No space left on device")
        changes.add("a later step that fails", boom)
        return wrote
    monkeypatch.setattr(irq_affinity, "add_managed_record", add_then_fail)
    with pytest.raises(GpuhostError):
        pin(sim, **args)
    assert snapshot(sim.root) == before


def test_one_task_per_node_rerun_leaves_the_stored_pins_alone(sim):
    """The lab's second site.yml run: sriov_irq pins node 0, then node 1; each task moved
    its rule to the end of the stored pins, so every run rewrote the file twice and
    restarted irqbalance twice."""
    node0 = dict(pci_devices=["0000:01:00.0"], cpus="0-1", persistent=True,
                 persist_as="sriov_irq node 0")
    node1 = dict(name_regex="^mlx5_comp", cpus="4-5", persistent=True,
                 persist_as="sriov_irq node 1")
    pin(sim, **node0)
    pin(sim, **node1)
    stored = sim.read_file(irq_pinning.CONFIG_FILE)
    for args in (node0, node1):
        again = pin(sim, **args)
        assert again.result["changed"] is False, again.result["steps"]
    assert sim.read_file(irq_pinning.CONFIG_FILE) == stored


def test_a_named_pin_replaces_its_older_self_whatever_its_selectors(sim):
    # Stored before pins had names: the named rule with the same selectors takes its place.
    pin(sim, pci_devices=["0000:01:00.0"], cpus="0-1", persistent=True)
    pin(sim, pci_devices=["0000:01:00.0"], cpus="0-1", persistent=True,
        persist_as="sriov_irq node 0")
    rules = json.loads(sim.read_file(irq_pinning.CONFIG_FILE))["rules"]
    assert [r.get("name") for r in rules] == ["sriov_irq node 0"]
    # A tenant onboarded on the node adds a device and the CPUs change: one rule still,
    # never an old one left to pin the NVMe back to 0-1 at the next re-apply.
    pin(sim, pci_devices=["0000:01:00.0", "0000:03:00.0"], cpus="2-3", persistent=True,
        persist_as="sriov_irq node 0")
    rules = json.loads(sim.read_file(irq_pinning.CONFIG_FILE))["rules"]
    assert len(rules) == 1
    assert rules[0]["pci_devices"] == ["0000:01:00.0", "0000:03:00.0"]
    assert rules[0]["cpus"] == "2-3"
    assert irq_pinning.reapply_main([], writer=sim) == 0
    assert affinity(sim, 40)[0] == (2, 3)
    # Unnamed pins of other selectors stay.
    pin(sim, irqs=[60], cpus="0-1", persistent=True)
    pin(sim, pci_devices=["0000:01:00.0"], cpus="2-3", persistent=True,
        persist_as="sriov_irq node 0")
    rules = json.loads(sim.read_file(irq_pinning.CONFIG_FILE))["rules"]
    assert [r.get("name") for r in rules] == ["sriov_irq node 0", None]


def test_the_order_of_the_devices_does_not_change_the_stored_pin(sim):
    """The lab's re-run, again: sriov_irq hands the devices through Jinja's difference
    filter, whose order changes between runs; the stored pin must not."""
    devices = ["0000:03:00.0", "0000:01:00.0"]
    first = pin(sim, pci_devices=devices, cpus="0-1", persistent=True,
                persist_as="sriov_irq node 0").result
    assert first["changed"] is True
    stored = sim.read_file(irq_pinning.CONFIG_FILE)
    again = pin(sim, pci_devices=list(reversed(devices)) + ["0000:01:00.0"], cpus="0-1",
                persistent=True, persist_as="sriov_irq node 0").result
    assert again["changed"] is False, again["steps"]
    assert sim.read_file(irq_pinning.CONFIG_FILE) == stored


def test_absent_forgets_the_named_pin_and_leaves_the_irqs_and_other_pins(sim):
    """A node whose last tenant left: its stored pin must stop being re-applied, while the
    other nodes' pins stay."""
    pin(sim, pci_devices=["0000:01:00.0"], cpus="0-1", persistent=True,
        persist_as="sriov_irq node 0")
    pin(sim, irqs=[60], cpus="2-3", persistent=True, persist_as="sriov_irq node 1")
    assert affinity(sim, 60)[0] == (2, 3)

    preview = pin(sim, check_mode=True, state="absent", persist_as="sriov_irq node 1").result
    assert preview["changed"] is True
    assert preview["steps"] == ["update %s" % irq_pinning.CONFIG_FILE]
    assert [r["name"] for r in json.loads(sim.read_file(irq_pinning.CONFIG_FILE))["rules"]] \
        == ["sriov_irq node 0", "sriov_irq node 1"]

    result = pin(sim, state="absent", persist_as="sriov_irq node 1").result
    assert result["changed"] is True
    assert result["selected"] == [] and result["changed_irqs"] == []
    rules = json.loads(sim.read_file(irq_pinning.CONFIG_FILE))["rules"]
    assert [r["name"] for r in rules] == ["sriov_irq node 0"]
    assert affinity(sim, 60)[0] == (2, 3)     # left where it is; only the re-apply forgets
    # The re-apply no longer puts IRQ 60 back.
    TreeBuilder(sim.root).write("/proc/irq/60/smp_affinity_list", "0-7\n")
    assert irq_pinning.reapply_main([], writer=sim) == 0
    assert affinity(sim, 60)[0] == tuple(range(8))
    assert affinity(sim, 40)[0] == (0, 1)

    again = pin(sim, state="absent", persist_as="sriov_irq node 1").result
    assert again["changed"] is False and again["steps"] == []


def test_absent_needs_the_name_and_present_needs_cpus_and_a_selector(sim, capsys):
    for args, missing in ((dict(state="absent"), "persist_as"),
                          (dict(pci_devices=["0000:01:00.0"]), "cpus"),
                          (dict(cpus="0-1"), "name_regex, pci_devices, irqs")):
        before = snapshot(sim.root)
        with pytest.raises(SystemExit):
            pin(sim, **args)
        assert snapshot(sim.root) == before
        message = json.loads(capsys.readouterr().out)["msg"]
        assert message.startswith("state is ") and missing in message, (args, message)


def test_a_device_vector_without_a_proc_irq_entry_is_not_selected(tmp_path):
    """Seen on the lab's igb PF with its interface down, after VFs were created: msi_irqs
    listed 38-40, /proc/irq had no 38-40, and the pin's write failed with ENOENT, rolling
    the whole sriov_irq run back. Such a vector has nothing to pin until it appears."""
    root = str(tmp_path)
    msi = os.path.join(root, "sys/bus/pci/devices/0000:23:00.0/msi_irqs")
    os.makedirs(msi)
    for number in (38, 39, 40, 47):
        open(os.path.join(msi, str(number)), "w").close()
    os.makedirs(os.path.join(root, "proc/irq/47"))
    rule = irq_pinning.IrqRule(cpus=(0, 1), pci_devices=("0000:23:00.0",))
    assert irq_pinning.select_irqs(root, {}, rule) == [47]


def live_pinner_answering(sim, active_units, **extra):
    """A persistent pin on the live host (systemctl answered here): ``active_units`` are
    the units ``systemctl is-active`` calls running; every command run is recorded."""
    from support.module_args import patch_module_args
    args = dict(root=sim.root, pci_devices=["0000:01:00.0"], cpus="0-1", persistent=True,
                _ansible_check_mode=False, _ansible_diff=False, **extra)
    with patch_module_args(args):
        module = irq_affinity.build_module()
    calls = []

    def run_command(argv, **_kwargs):
        calls.append(argv)
        if argv[1] == "is-active":
            return (0 if argv[-1] in active_units else 3), "", ""
        return 0, "", ""
    module.run_command = run_command
    pinner = irq_affinity.IrqPinner(module, writer=sim)
    pinner.live = True
    return pinner, calls


@pytest.mark.parametrize("active", [("libvirtd.service",), ("virtqemud.service",), ()])
def test_a_new_libvirt_hook_reloads_the_running_libvirt_daemon(sim, active):
    """libvirt looks for hook scripts at its daemon's start and on SIGHUP only
    (src/util/virhook.c caches virHooksFound): the hook written while libvirtd runs (the
    vm stage starts it before the sriov_irq stage pins) would not run for the tenants
    started before the host's next boot. The running daemon, monolithic or modular, is
    reloaded once; none running, none is; a second run (hook unchanged) reloads nothing."""
    pinner, calls = live_pinner_answering(sim, active)
    pinner.run()
    reloads = [argv for argv in calls if argv[1] == "reload"]
    assert reloads == ([["systemctl", "reload", "--"] + list(active)] if active else [])
    assert sim.read_file(irq_pinning.LIBVIRT_HOOK)
    again, calls = live_pinner_answering(sim, active)
    again.run()
    assert [argv for argv in calls if argv[1] == "reload"] == []


def test_a_rolled_back_run_reloads_libvirt_again_without_the_hook(sim):
    """A pin that fails after the hook and the reload takes the hook away again; the
    daemon is reloaded once more, after the hook is gone, so it does not keep calling a
    hook that no longer exists."""
    sim.fail_on["/proc/irq/40/smp_affinity_list"] = errno.ENOSPC
    pinner, calls = live_pinner_answering(sim, ("libvirtd.service",))
    with pytest.raises(GpuhostError) as info:
        pinner.run()
    assert info.value.details["rolled_back"][-1] == "systemctl reload libvirtd.service"
    assert [argv for argv in calls if argv[1] == "reload"] == [
        ["systemctl", "reload", "--", "libvirtd.service"]] * 2
    assert sim.read_file(irq_pinning.LIBVIRT_HOOK) is None


def test_a_hook_below_another_root_reloads_nothing_and_says_so(sim):
    result = pin(sim, pci_devices=["0000:01:00.0"], cpus="0-1", persistent=True).result
    assert "systemctl reload the running libvirt daemon (root is not /)" in result["skipped_actions"]


def test_a_passed_through_functions_intx_line_is_selected_by_its_vfio_handler(sim):
    """A function whose guest drives it by INTx has no msi_irqs: vfio-pci's handler
    vfio-intx(ADDR) sits on a legacy line, which on the lab was shared (IRQ 11). A rule by
    device covers that line and the function's vfio-msi/-msix vectors; a look-alike name
    of another function, or a handler that only mentions vfio, is not covered."""
    sim.add_irq(11, "vfio-intx(0000:41:00.1), uhci_hcd:usb1", chip="IR-IO-APIC")
    sim.add_irq(12, "vfio-intx(0000:41:00.10)", chip="IR-IO-APIC")
    sim.add_irq(13, "myvfio-intx(0000:41:00.1)", chip="IR-IO-APIC")
    sim.add_irq(85, "vfio-msi[0](0000:41:00.1)")
    result = pin(sim, pci_devices=["0000:41:00.1"], cpus="0-1", persistent=True).result
    assert 11 in result["selected"] and 85 in result["selected"]
    assert not {12, 13} & set(result["selected"])
    assert affinity(sim, 11)[0] == (0, 1)
    # irqbalance's policy script answers the same for each line, from the kernel's
    # one-line actions file, and the re-apply pins the line again after a guest restart.
    config = json.loads(sim.read_file(irq_pinning.CONFIG_FILE))
    assert {11, 85} <= irq_pinning.pinned_irqs(sim.root, config)
    for number, banned in ((11, True), (12, False), (13, False), (85, True)):
        out = []
        irq_policy.irqbalance_policy_main(["/sys/x", str(number)], root=sim.root,
                                          out=type("Out", (), {"write": out.append})())
        assert (out == ["ban=true\n"]) is banned, number
    sim.write_file("/proc/irq/11/smp_affinity_list", "0-7")
    assert irq_pinning.reapply(sim, config)["pinned"] == [11]
