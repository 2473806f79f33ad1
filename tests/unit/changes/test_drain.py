# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pure core of tenant_drain (module_utils/changes/tenant_drain.py), fed literal domain lists: which
domains block a reboot, the drain plan, the wait with its clock, the record and the
restore plan. The module against libvirt's test driver is in
tests/integration/test_tenant_drain_libvirt.py."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import tenant_drain as drain
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter

URI = "qemu:///system"


def dom(name, state="running", tenant=True, autostart=False):
    return drain.Domain(name=name, state=state, active=state not in ("shut off", "crashed"),
                        autostart=autostart, tenant=tenant)


HOST = [dom("tenant-b"), dom("tenant-a", autostart=True), dom("scratch", tenant=False),
        dom("tenant-off", state="shut off"), dom("old", state="crashed", tenant=False)]


def test_running_lists_what_a_reboot_stops_tenants_first_then_others_by_name():
    assert [d.name for d in drain.running(HOST)] == ["tenant-a", "tenant-b", "scratch"]


def test_reboot_refusal_names_every_running_domain_and_how_to_drain():
    err = drain.reboot_refusal(drain.running(HOST))
    assert err.field == "state"
    assert ("a reboot of the host would stop 3 running domain(s): tenants tenant-a "
            "(running), tenant-b (running); not in the allocation ledger: scratch "
            "(running)") in err.message
    assert "set gpuhost_drain: true" in err.message and "stop them yourself" in err.message
    assert err.details == {"running": ["tenant-a", "tenant-b", "scratch"]}


def test_drain_plan_orders_the_requests_and_keeps_timeout_and_decision():
    plan = drain.plan_drain(HOST, 120, "destroy")
    assert plan.order == ["tenant-a", "tenant-b", "scratch"]
    assert (plan.timeout, plan.on_timeout) == (120.0, "destroy")
    assert plan.tenants == {"tenant-a": True, "tenant-b": True, "scratch": False}


def test_nothing_running_is_an_empty_plan():
    assert not drain.plan_drain([dom("a", state="shut off")], 10, "fail")


@pytest.mark.parametrize("state,advice", [("paused", "virsh resume tenant-p"),
                                          ("pmsuspended", "virsh dompmwakeup tenant-p")])
def test_a_guest_that_cannot_act_on_the_request_is_refused_before_anything(state, advice):
    with pytest.raises(GpuhostError) as err:
        drain.plan_drain(HOST + [dom("tenant-p", state=state)], 10, "destroy")
    assert "cannot drain tenant-p: a %s guest cannot act on a shutdown request" % state \
        in err.value.message
    assert advice in err.value.message and "nothing was shut down" in err.value.message


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "soon", True, 86401])
def test_timeout_must_be_a_finite_positive_number_of_at_most_a_day(value):
    with pytest.raises(GpuhostError) as err:
        drain.plan_drain(HOST, value, "fail")
    assert err.value.field == "timeout"


def test_on_timeout_is_fail_or_destroy():
    with pytest.raises(GpuhostError) as err:
        drain.plan_drain(HOST, 10, "wait")
    assert err.value.field == "on_timeout" and "fail" in err.value.fix


class Clock:
    """A clock that moves only when the wait sleeps, and guests that power off at set
    times (None: never)."""

    def __init__(self, off_at):
        self.now = 0.0
        self.off_at = off_at
        self.sleeps = 0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps += 1
        self.now += seconds

    def is_active(self, name):
        off = self.off_at[name]
        return off is None or self.now < off


def test_wait_returns_when_every_domain_is_off():
    clock = Clock({"a": 3.0, "b": 5.0})
    late = drain.wait_until_off({"a": 0.0, "b": 0.0}, clock.is_active, 60, clock, clock.sleep)
    assert late == [] and 5.0 <= clock.now < 6.0


def test_wait_gives_each_domain_its_timeout_from_its_own_request():
    # b was asked 4 s after a: at a's expiry (10 s) b still has 4 s, and is off at 12 s.
    clock = Clock({"a": None, "b": 12.0})
    late = drain.wait_until_off({"a": 0.0, "b": 4.0}, clock.is_active, 10, clock, clock.sleep,
                                poll=1.0)
    assert late == ["a"] and clock.now == 12.0


def test_wait_names_every_late_domain_in_request_order():
    clock = Clock({"b": None, "a": None, "c": 1.0})
    late = drain.wait_until_off({"b": 0.0, "a": 0.0, "c": 0.0}, clock.is_active, 2, clock,
                                clock.sleep)
    assert late == ["b", "a"]


def test_poll_interval_is_a_second_and_shorter_for_short_timeouts():
    assert drain.poll_interval(300) == 1.0
    assert drain.poll_interval(2) == 0.1
    assert drain.poll_interval(0.1) == 0.05


def test_timeout_error_says_what_was_undone_and_the_three_ways_out():
    err = drain.timeout_error(["tenant-b"], 30, ["tenant-a"])
    assert err.field == "timeout"
    assert ("tenant-b did not power off within 30 s of the shutdown request, and on_timeout "
            "is fail: the drain was undone (started again: tenant-a), the host was not "
            "rebooted, and it got the request and may still act on it") in err.message
    for way_out in ("shut it down from inside", "gpuhost_drain_timeout",
                    "gpuhost_drain_expired: destroy"):
        assert way_out in err.fix
    assert err.details == {"late": ["tenant-b"], "restarted": ["tenant-a"]}


def test_record_round_trip_through_the_shared_state_file(tmp_path):
    writer = HostWriter("/")
    spec = drain.record_spec(str(tmp_path / "state" / "drain.json"))
    empty = spec.read(writer)
    assert empty == {"domains": {}}
    plan = drain.plan_drain(HOST, 10, "fail")
    after = drain.record_with(empty, plan, URI)
    assert after["domains"]["scratch"] == {"uri": URI, "tenant": False}
    from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
    changes = ChangeSet()
    assert changes.put_state(writer, spec, empty, after)
    changes.apply()
    assert drain.recorded(spec.read(writer), URI) == ["scratch", "tenant-a", "tenant-b"]
    assert drain.recorded(spec.read(writer), "qemu:///session") == []


def test_restore_plan_starts_the_off_ones_drops_the_autostarted_and_names_the_gone():
    record = {"domains": {"tenant-a": {"uri": URI}, "tenant-b": {"uri": URI},
                          "gone": {"uri": URI}, "elsewhere": {"uri": "qemu:///session"}}}
    domains = [dom("tenant-a", state="shut off"), dom("tenant-b", autostart=True)]
    plan = drain.plan_restore(record, domains, URI)
    assert (plan.start, plan.already_running, plan.missing) == (["tenant-a"], ["tenant-b"],
                                                                ["gone"])
    assert plan.settled == ["tenant-a", "tenant-b"]
    left = drain.record_without(record, plan.settled)
    assert sorted(left["domains"]) == ["elsewhere", "gone"]


def test_missing_error_says_how_to_bring_it_back_or_forget_it():
    err = drain.missing_error(["gone"], "/var/lib/gpuhost/drain.json")
    assert "gone is in the drain record /var/lib/gpuhost/drain.json but not defined" \
        in err.message
    assert "tenant_onboard.yml" in err.fix and err.field == "record_path"


def test_qemu_status_names_are_the_pid_files():
    assert drain.qemu_status_names(["a.pid", "a.xml", "b.pid", ".pid", "c.xml"]) == ["a", "b"]


def test_state_names_are_virshs_words():
    assert [drain.state_name(c) for c in (1, 3, 5, 7, 42)] == [
        "running", "paused", "shut off", "pmsuspended", "unknown (42)"]
