"""The allocation ledger: atomic writes, the lock, corruption detection, and reservations
planned around the tenants already in it (on the synthetic runbook host)."""

import json
import multiprocessing
import os

import pytest

from support.fixturegen import build_runbook_host, build_eight_gpu_host

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology

TENANT_A = {"name": "tenant-a100", "gpus": ["0000:65:00.0"], "vcpus": 30, "memory_gib": 64,
            "hugepage_size": "1G", "nic_vf": True, "iothreads": 2,
            "emulator_policy": "housekeeping",
            "ssh_authorized_keys": ["ssh-ed25519 AAAA test"], "guest_address": "192.0.2.51/24"}


@pytest.fixture(scope="module")
def runbook(tmp_path_factory):
    root = tmp_path_factory.mktemp("runbook")
    build_runbook_host(str(root))
    return read_host_topology(str(root), with_irqs=False)


@pytest.fixture(scope="module")
def eight_gpu(tmp_path_factory):
    root = tmp_path_factory.mktemp("eight")
    build_eight_gpu_host(str(root))
    return str(root)


def test_missing_ledger_is_empty_and_reserve_keeps_guest_keys_out_of_the_planner(runbook,
                                                                                 tmp_path):
    data = ledger.read_ledger(str(tmp_path / "ledger.json"))
    assert data.tenants == [] and data.serial == 0
    new, plan, added = ledger.reserve(data, runbook, [TENANT_A])
    assert added == ["tenant-a100"]
    entry = plan["tenants"][0]
    assert entry["node"] == 0
    assert entry["gpus"][0]["functions"] == ["0000:65:00.0", "0000:65:00.1"]
    assert entry["vf"]["pf"] == "0000:41:00.0"
    assert "ssh_authorized_keys" not in json.dumps(new.body())
    assert new.housekeeping == {"0": "0,32", "1": "16,48"}


def test_write_then_read_round_trips_with_serial_and_prev_copy(runbook, tmp_path):
    path = str(tmp_path / "state" / "ledger.json")
    new = ledger.reserve(ledger.read_ledger(path), runbook, [TENANT_A])[0]
    with ledger.locked(path):
        first = ledger.write_ledger(path, new, now="2026-01-01T00:00:00Z")
    assert first.serial == 1
    assert not os.path.exists(path + ".prev")
    again = ledger.read_ledger(path)
    assert again.body() == new.body() and again.serial == 1
    with ledger.locked(path):
        second = ledger.write_ledger(path, again)
    assert second.serial == 2
    assert json.load(open(path + ".prev"))["serial"] == 1
    # No temporary file is left behind in the ledger's directory.
    assert sorted(os.listdir(os.path.dirname(path))) == ["ledger.json", "ledger.json.lock",
                                                         "ledger.json.prev"]


@pytest.mark.parametrize("damage,why", [
    (lambda text: "", "empty"),
    (lambda text: text[: len(text) // 2], "not valid JSON"),
    (lambda text: text.replace('"memory_gib": 64', '"memory_gib": 32'), "checksum"),
    (lambda text: json.dumps({"hello": 1}), "not a gpuhost.kvm ledger"),
])
def test_corrupt_ledger_is_detected_with_recovery_steps_never_reset(runbook, tmp_path,
                                                                    damage, why):
    path = str(tmp_path / "ledger.json")
    new = ledger.reserve(ledger.read_ledger(path), runbook, [TENANT_A])[0]
    ledger.write_ledger(path, new)
    damaged = damage(open(path).read())
    with open(path, "w") as handle:
        handle.write(damaged)
    with pytest.raises(ledger.LedgerCorruptError) as info:
        ledger.read_ledger(path)
    assert why in info.value.message
    assert ".prev" in info.value.fix and "do not delete" in info.value.fix
    assert open(path).read() == damaged          # untouched


def test_newer_ledger_version_is_refused(tmp_path):
    path = tmp_path / "ledger.json"
    body = {"tenants": [], "housekeeping": {}, "smt_policy": None}
    path.write_text(json.dumps({"format": ledger.LEDGER_FORMAT, "version": 99,
                                "checksum": ledger.checksum(body), "body": body}))
    with pytest.raises(ledger.LedgerCorruptError, match="version 99"):
        ledger.read_ledger(str(path))


def test_existing_tenant_keeps_its_pins_when_another_is_added(eight_gpu, tmp_path):
    topo = read_host_topology(eight_gpu, with_irqs=False)
    first = {"name": "a", "gpus": 1, "vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"}
    second = {"name": "b", "gpus": 1, "vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"}
    one, plan1 = ledger.reserve(ledger.LedgerData(), topo, [first])[:2]
    two, plan2, added = ledger.reserve(one, topo, [first, second])
    assert added == ["b"]
    assert plan2["tenants"][0] == plan1["tenants"][0]
    a_cpus = set(plan2["tenants"][0]["vcpu_pins"])
    assert not a_cpus & set(plan2["tenants"][1]["vcpu_pins"])
    assert plan2["tenants"][0]["gpus"][0]["address"] != plan2["tenants"][1]["gpus"][0]["address"]


def test_conflicting_explicit_gpu_is_refused_naming_the_holder(runbook):
    held = ledger.reserve(ledger.LedgerData(), runbook, [TENANT_A])[0]
    thief = dict(TENANT_A, name="tenant-b", nic_vf=False, vcpus=2, memory_gib=1)
    with pytest.raises(GpuhostError) as info:
        ledger.reserve(held, runbook, [thief])
    assert "tenant-a100" in info.value.message


def test_changed_request_and_changed_policy_are_refused(runbook):
    held = ledger.reserve(ledger.LedgerData(), runbook, [TENANT_A])[0]
    with pytest.raises(GpuhostError, match="request differs"):
        ledger.reserve(held, runbook, [dict(TENANT_A, vcpus=28)])
    with pytest.raises(GpuhostError, match="SMT policy"):
        ledger.reserve(held, runbook, [TENANT_A], smt_policy="prefer")
    with pytest.raises(GpuhostError, match="housekeeping"):
        ledger.reserve(held, runbook, [TENANT_A], housekeeping={"0": "1,33"})


def test_release_drops_only_the_named_tenant(eight_gpu):
    topo = read_host_topology(eight_gpu, with_irqs=False)
    both, plan = ledger.reserve(ledger.LedgerData(), topo, [
        {"name": "a", "gpus": 1, "vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"},
        {"name": "b", "gpus": 1, "vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"}])[:2]
    rest, plan_rest, removed = ledger.release(both, topo, ["b", "nobody"])
    assert removed == ["b"]
    assert [t["name"] for t in plan_rest["tenants"]] == ["a"]
    assert plan_rest["tenants"][0] == plan["tenants"][0]


def _hold_lock(path, ready, release):
    with ledger.locked(path):
        ready.set()
        release.wait(10)


def test_lock_is_exclusive_and_times_out_naming_the_holder(tmp_path):
    path = str(tmp_path / "ledger.json")
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(path, ready, release))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(ledger.LedgerLockTimeout) as info:
            with ledger.locked(path, timeout=0.3):
                pass
        assert "PID %d" % holder.pid in info.value.message
    finally:
        release.set()
        holder.join(10)
    with ledger.locked(path, timeout=1):
        pass


def _onboard(root, path, name, queue):
    topo = read_host_topology(root, with_irqs=False)
    request = {"name": name, "gpus": 1, "vcpus": 8, "memory_gib": 8, "hugepage_size": "2M"}
    try:
        with ledger.locked(path, timeout=30):
            current = ledger.read_ledger(path)
            new, plan = ledger.reserve(current, topo, [request])[:2]
            ledger.write_ledger(path, new)
        entry = [t for t in plan["tenants"] if t["name"] == name][0]
        queue.put((name, entry["gpus"][0]["address"], tuple(entry["vcpu_pins"])))
    except GpuhostError as err:
        queue.put((name, "error", err.message))


def test_concurrent_onboardings_get_different_gpus_and_cores(eight_gpu, tmp_path):
    path = str(tmp_path / "ledger.json")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    workers = [ctx.Process(target=_onboard, args=(eight_gpu, path, "t%d" % i, queue))
               for i in range(4)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=60) for dummy in workers]
    for worker in workers:
        worker.join(10)
    assert all(r[1] != "error" for r in results), results
    gpus = [r[1] for r in results]
    assert len(set(gpus)) == 4
    cpus = [c for r in results for c in r[2]]
    assert len(cpus) == len(set(cpus))
    final = ledger.read_ledger(path)
    assert sorted(final.names()) == ["t0", "t1", "t2", "t3"] and final.serial == 4


def test_bad_tenant_is_refused_before_the_lock_creates_anything(eight_gpu, tmp_path):
    """tenant_ledger validates its input first: a refused request leaves no ledger
    folder and no lock file behind."""
    from support.module_args import patch_module_args
    from ansible_collections.gpuhost.kvm.plugins.modules import tenant_ledger

    folder = tmp_path / "gpuhost"
    cases = [({"state": "present", "tenants": [dict(TENANT_A, vcpus=0)]}, "tenants[0].vcpus"),
             ({"state": "present", "tenants": [dict(TENANT_A), dict(TENANT_A)]},
              "tenants[1].name"),
             ({"state": "absent", "names": ["../etc"]}, "names[0]")]
    for args, field in cases:
        args = dict(args, path=str(folder / "ledger.json"), root=eight_gpu,
                    _ansible_check_mode=False, _ansible_diff=False)
        with patch_module_args(args):
            module = tenant_ledger.build_module()
        with pytest.raises(GpuhostError) as excinfo:
            tenant_ledger.TenantLedger(module).run()
        assert excinfo.value.field == field, excinfo.value.message
        assert not folder.exists()


def test_a_link_planted_at_the_lock_file_is_refused_and_its_target_untouched(tmp_path):
    from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger as ledger_core
    from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    path = tmp_path / "ledger.json"
    (tmp_path / "ledger.json.lock").symlink_to(victim)
    for read_only in (False, True):
        with pytest.raises(GpuhostError) as info:
            with ledger_core.locked(str(path), timeout=0, read_only=read_only):
                pass
        assert "is a symbolic link" in info.value.message and "remove the link" in info.value.fix
    assert victim.read_text() == "keep\n"


# -- state-file races: two writers, one ledger ---------------------------------------------

@pytest.mark.parametrize("spelling", [
    {"0": "32,0"}, {"0": "0,32-32", "1": "48,16"}, {0: "0,32"}, {"0": " 0,32 ", "1": "16,48"},
    {"1": "16-16,48"}])
def test_the_same_housekeeping_written_differently_is_the_same_request(runbook, spelling):
    held = ledger.reserve(ledger.LedgerData(), runbook, [TENANT_A])[0]
    assert held.housekeeping == {"0": "0,32", "1": "16,48"}
    again, dummy, added = ledger.reserve(held, runbook, [TENANT_A], housekeeping=spelling)
    assert added == [] and again.body() == held.body()
    # Other CPUs are another request, whatever the spelling.
    with pytest.raises(GpuhostError) as info:
        ledger.reserve(held, runbook, [TENANT_A], housekeeping={"0": "33,1"})
    assert info.value.field == "housekeeping" and "differs from" in info.value.message


def _module_error(root, path, **args):
    """Run tenant_ledger itself; return its error and the options it has."""
    from support.module_args import patch_module_args
    from ansible_collections.gpuhost.kvm.plugins.modules import tenant_ledger
    args = dict(args, path=path, root=root, _ansible_check_mode=False, _ansible_diff=False)
    with patch_module_args(args):
        module = tenant_ledger.build_module()
    with pytest.raises(GpuhostError) as info:
        tenant_ledger.TenantLedger(module).run()
    return info.value, set(module.argument_spec)


def _ledger_text(body, serial=1):
    return json.dumps({"format": ledger.LEDGER_FORMAT, "version": 1, "serial": serial,
                       "checksum": ledger.checksum(body), "body": body})


@pytest.mark.parametrize("name,body,serial,where", [
    ("tenant-without-node",
     {"tenants": [{"name": "old", "vcpu_pins": [2, 66], "memory_gib": 2}],
      "housekeeping": {"0": "0,64"}, "smt_policy": "require"}, 1, "tenants[0].node"),
    ("cpus-not-a-list",
     {"tenants": [{"name": "old", "node": 0, "vcpu_pins": "two"}],
      "housekeeping": {}, "smt_policy": "require"}, 1, "tenants[0].vcpu_pins"),
    ("two-tenants-one-cpu",
     {"tenants": [{"name": "a", "node": 0, "vcpu_pins": [2, 66]},
                  {"name": "b", "node": 0, "vcpu_pins": [2, 66]}],
      "housekeeping": {"0": "0,64"}, "smt_policy": "require"}, 1, "tenants[1]"),
    ("housekeeping-garbage",
     {"tenants": [{"name": "a", "node": 0, "vcpu_pins": [2, 66]}],
      "housekeeping": {"0": "zero"}, "smt_policy": "require"}, 1, "housekeeping.0"),
    ("serial-not-a-number", {"tenants": [], "housekeeping": {}, "smt_policy": None}, "x", None),
])
@pytest.mark.parametrize("state", ["present", "absent"])
def test_a_corrupt_ledger_is_reported_under_path_with_the_recovery(eight_gpu, tmp_path, name,
                                                                   body, serial, where, state):
    path = tmp_path / "ledger.json"
    path.write_text(_ledger_text(body, serial))
    before = path.read_text()
    args = ({"tenants": [{"name": "new", "gpus": 1, "vcpus": 8, "memory_gib": 8,
                          "hugepage_size": "2M"}]} if state == "present" else {"names": ["nobody"]})
    err, options = _module_error(eight_gpu, str(path), state=state, **args)
    assert isinstance(err, ledger.LedgerCorruptError), (name, err.message)
    assert err.field == "path" and err.field in options, (name, err.message)
    assert "the allocation ledger %s is corrupt" % path in err.message, err.message
    if where:
        assert "(at %s" % where in err.message, err.message
    assert "do not delete it" in err.fix and "cp -p" in err.fix
    assert path.read_text() == before


def test_a_released_tenants_gpu_cores_vf_and_hugepages_go_to_the_next_tenant(runbook):
    # TENANT_A holds node 0's only GPU, all 30 of its non-housekeeping CPUs, a VF and
    # 64 1 GiB pages; the next tenant asks for the same amounts.
    held, plan_a = ledger.reserve(ledger.LedgerData(), runbook, [TENANT_A])[:2]
    a = plan_a["tenants"][0]
    nxt = {"name": "tenant-next", "gpus": 1, "vcpus": 30, "memory_gib": 64,
           "hugepage_size": "1G", "nic_vf": True, "iothreads": 2,
           "emulator_policy": "housekeeping"}
    with pytest.raises(GpuhostError) as info:
        ledger.reserve(held, runbook, [nxt])
    assert "tenant-a100" in info.value.message      # named as the holder
    rest = ledger.release(held, runbook, ["tenant-a100"])[0]
    assert rest.tenants == []
    after, plan_b, added = ledger.reserve(rest, runbook, [nxt])
    assert added == ["tenant-next"]
    b = plan_b["tenants"][0]
    assert b["gpus"][0]["functions"] == a["gpus"][0]["functions"]
    assert sorted(b["vcpu_pins"]) == sorted(a["vcpu_pins"])
    assert b["dedicated_cpus"] == a["dedicated_cpus"]
    assert b["vf"]["address"] == a["vf"]["address"]
    assert b["hugepages"] == a["hugepages"] == {"0": 64}
    # the host's page total counts the new tenant's pages alone, not the released ones
    assert plan_b["hugepages"] == plan_a["hugepages"]
    assert after.names() == ["tenant-next"]
