# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tenant_drain against libvirt's real test driver.

Each test opens its own ``test:///<node.xml>`` connection: its domains (running, paused or
shut off through the test driver's ``<test:runstate>``) are real libvirt domains that
shutdown(), destroy() and create() act on. The test driver's shutdown() is
instantaneous: a guest that never powers off is a domain whose shutdown request the
connection wrapper below drops, as a guest without ACPI handling would; everything else
is the test driver's own behaviour.

The module runs in process with that connection (its state lives in the connection), as
tests/unit/domain/test_libvirt_pinned_domain.py does; the last test runs ``ansible -m``, which
opens the node file afresh. The last ones run the iommu role's reboot tasks
(roles/iommu/tasks/reboot.yml) with ansible-playbook up to the reboot, which ansible
refuses on a local connection; the lab proves the reboot itself
(tests/lab/test_lab_boot.py).
"""

import json
import os
import sys

import pytest

from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger as ledger_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import tenant_drain as mod

from support.helpers import ansible_env, run_module_adhoc, run_tool

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is in requirements.txt")

RUNSTATE = {"running": 1, "paused": 3, "shut off": 5}


def node_xml(domains):
    """A test-driver node with ``domains`` ({name: state}) defined."""
    parts = ["<node xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>"]
    for name, state in domains.items():
        parts.append("<domain type='test'><name>%s</name><memory>524288</memory>"
                     "<os><type>hvm</type></os><test:runstate>%d</test:runstate></domain>"
                     % (name, RUNSTATE[state]))
    parts.append("</node>")
    return "\n".join(parts) + "\n"


def write_ledger(path, names):
    data = ledger_core.LedgerData(tenants=[{"name": n} for n in names], serial=1,
                                  updated_at="2026-01-01T00:00:00Z")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as out:
        out.write(ledger_core.render_ledger(data))


class IgnoresShutdown:
    """The connection as the module sees it, with guests ``deaf`` to ACPI: their
    shutdown() request is accepted and nothing happens, as with a hung guest."""

    def __init__(self, conn, deaf):
        self._conn = conn
        self._deaf = set(deaf)

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def lookupByName(self, name):
        domain = self._conn.lookupByName(name)
        if name not in self._deaf:
            return domain
        return _DeafDomain(domain)


class _DeafDomain:
    def __init__(self, domain):
        self._domain = domain

    def __getattr__(self, name):
        return getattr(self._domain, name)

    def shutdown(self):
        return 0


class Host:
    """One test's libvirt node, ledger and record."""

    def __init__(self, tmp_path, domains, tenants=None):
        self.tmp = tmp_path
        self.node = tmp_path / "node.xml"
        self.node.write_text(node_xml(domains))
        self.uri = "test://%s" % self.node
        self.conn = libvirt.open(self.uri)
        self.ledger = str(tmp_path / "gpuhost" / "ledger.json")
        write_ledger(self.ledger, list(domains) if tenants is None else tenants)
        self.record = str(tmp_path / "gpuhost" / "drain.json")
        self.warnings = []

    def run(self, check=False, deaf=(), **args):
        args.setdefault("uri", self.uri)
        args.setdefault("ledger_path", self.ledger)
        args.setdefault("record_path", self.record)
        args.update(_ansible_check_mode=check, _ansible_diff=True)
        with patch_module_args(args):
            module = mod.build_module()
        module.warn = self.warnings.append
        conn = IgnoresShutdown(self.conn, deaf) if deaf else self.conn
        runner = mod.TenantDrain(module, conn=conn)
        try:
            runner.run()
        except GpuhostError as err:
            return dict(runner.result, failed=True, **err.to_result())
        return runner.result

    def states(self):
        return {d.name(): mod.core.state_name(d.state()[0])
                for d in self.conn.listAllDomains(0)}

    def recorded(self):
        if not os.path.exists(self.record):
            return None
        with open(self.record) as handle:
            return json.load(handle)


def test_checked_refuses_and_lists_the_running_tenants(tmp_path):
    host = Host(tmp_path, {"tenant-a": "running", "tenant-b": "running", "scratch": "running",
                           "tenant-off": "shut off"}, tenants=["tenant-a", "tenant-b", "tenant-off"])
    result = host.run(state="checked")
    assert result["failed"] and result["changed"] is False and result["field"] == "state"
    assert ("a reboot of the host would stop 3 running domain(s): tenants tenant-a (running), "
            "tenant-b (running); not in the allocation ledger: scratch (running)") in result["msg"]
    assert "set gpuhost_drain: true" in result["msg"]
    assert [(d["name"], d["tenant"]) for d in result["running"]] == [
        ("tenant-a", True), ("tenant-b", True), ("scratch", False)]
    assert host.recorded() is None


def test_checked_without_failing_returns_the_list_and_nothing_running_passes(tmp_path):
    host = Host(tmp_path, {"tenant-a": "running", "tenant-b": "shut off"})
    result = host.run(state="checked", fail_when_running=False)
    assert "failed" not in result and not result["changed"]
    assert [d["name"] for d in result["running"]] == ["tenant-a"]
    host.conn.lookupByName("tenant-a").shutdown()
    quiet = host.run(state="checked")
    assert "failed" not in quiet and quiet["running"] == [] and not quiet["changed"]


def test_drain_then_restore_starts_exactly_the_domains_the_drain_stopped(tmp_path):
    """The test driver's shutdown is instantaneous: the wait finds them off at once."""
    host = Host(tmp_path, {"tenant-a": "running", "tenant-b": "running",
                           "tenant-off": "shut off"})
    drained = host.run(state="drained", timeout=30)
    assert "failed" not in drained and drained["changed"]
    assert drained["to_stop"] == drained["stopped"] == ["tenant-a", "tenant-b"]
    assert drained["destroyed"] == drained["late"] == drained["restarted"] == []
    assert drained["pending_restore"] == ["tenant-a", "tenant-b"]
    assert host.states() == {"tenant-a": "shut off", "tenant-b": "shut off",
                             "tenant-off": "shut off"}
    assert host.recorded() == {"version": 1, "domains": {
        "tenant-a": {"uri": host.uri, "tenant": True},
        "tenant-b": {"uri": host.uri, "tenant": True}}}
    assert drained["steps"] == [
        "create %s" % host.record, "ask tenant-a to shut down (ACPI)",
        "ask tenant-b to shut down (ACPI)",
        "wait up to 30 s for tenant-a, tenant-b to power off (a late one undoes the drain)"]
    # A second drain finds nothing running: no change, the record kept.
    again = host.run(state="drained", timeout=30)
    assert not again["changed"] and again["pending_restore"] == ["tenant-a", "tenant-b"]

    restored = host.run(state="restored")
    assert restored["changed"] and restored["started"] == ["tenant-a", "tenant-b"]
    assert host.states() == {"tenant-a": "running", "tenant-b": "running",
                             "tenant-off": "shut off"}
    assert host.recorded() == {"version": 1, "domains": {}}
    assert restored["pending_restore"] == []
    assert not host.run(state="restored")["changed"]


def test_restore_only_drops_what_autostart_already_started(tmp_path):
    host = Host(tmp_path, {"tenant-a": "running", "tenant-b": "running"})
    host.run(state="drained", timeout=30)
    host.conn.lookupByName("tenant-b").create()          # libvirt's autostart at boot
    restored = host.run(state="restored")
    assert restored["started"] == ["tenant-a"] and restored["already_running"] == ["tenant-b"]
    assert host.recorded()["domains"] == {}


def test_restore_of_an_undefined_domain_starts_the_others_and_names_it(tmp_path):
    host = Host(tmp_path, {"tenant-a": "running", "tenant-b": "running"})
    host.run(state="drained", timeout=30)
    host.conn.lookupByName("tenant-b").undefine()
    restored = host.run(state="restored")
    assert restored["failed"] and restored["started"] == ["tenant-a"]
    assert "tenant-b is in the drain record" in restored["msg"]
    assert restored["pending_restore"] == ["tenant-b"]
    assert list(host.recorded()["domains"]) == ["tenant-b"]


def test_timeout_with_fail_starts_the_stopped_ones_again_and_names_the_stuck_one(tmp_path):
    """tenant-b ignores the shutdown request (see IgnoresShutdown)."""
    host = Host(tmp_path, {"tenant-a": "running", "tenant-b": "running",
                           "tenant-c": "running"})
    result = host.run(state="drained", timeout=0.3, on_timeout="fail", deaf=["tenant-b"])
    assert result["failed"] and result["changed"] is False and result["field"] == "timeout"
    assert ("tenant-b did not power off within 0.3 s of the shutdown request, and on_timeout "
            "is fail: the drain was undone (started again: tenant-a, tenant-c), the host was "
            "not rebooted") in result["msg"]
    assert result["late"] == ["tenant-b"] and result["restarted"] == ["tenant-a", "tenant-c"]
    assert result["details"] == {"late": ["tenant-b"], "restarted": ["tenant-a", "tenant-c"]}
    assert set(host.states().values()) == {"running"}
    assert host.recorded() is None                     # the record was taken back
    assert not os.path.exists(host.record + ".lock")
    assert result["pending_restore"] == []


def test_timeout_with_destroy_forces_the_stuck_one_off_and_names_it(tmp_path):
    """tenant-b ignores the shutdown request; tenant-a's is instantaneous (test driver)."""
    host = Host(tmp_path, {"tenant-a": "running", "tenant-b": "running"})
    result = host.run(state="drained", timeout=0.2, on_timeout="destroy", deaf=["tenant-b"])
    assert "failed" not in result and result["changed"]
    assert result["stopped"] == ["tenant-a"] and result["destroyed"] == ["tenant-b"]
    assert result["late"] == ["tenant-b"]
    assert host.warnings == ["forced off after 0.2 s without powering off "
                             "(on_timeout=destroy): tenant-b"]
    assert set(host.states().values()) == {"shut off"}
    assert sorted(host.recorded()["domains"]) == ["tenant-a", "tenant-b"]
    assert host.run(state="restored")["started"] == ["tenant-a", "tenant-b"]


def test_check_mode_reports_the_plan_and_changes_nothing(tmp_path):
    host = Host(tmp_path, {"tenant-a": "running", "tenant-b": "shut off"})
    drained = host.run(check=True, state="drained", timeout=30)
    assert drained["changed"] and drained["to_stop"] == ["tenant-a"]
    assert drained["stopped"] == [] and drained["pending_restore"] == ["tenant-a"]
    domains, record = drained["diff"]
    assert (domains["before"], domains["after"]) == ("tenant-a: running\n",
                                                     "tenant-a: shut off\n")
    assert record["before"] == "" and '"tenant-a"' in record["after"]
    assert host.states() == {"tenant-a": "running", "tenant-b": "shut off"}
    assert os.listdir(os.path.dirname(host.record)) == ["ledger.json"]   # no record, no lock

    host.run(state="drained", timeout=30)
    restored = host.run(check=True, state="restored")
    assert restored["changed"] and restored["to_start"] == ["tenant-a"]
    assert restored["started"] == [] and host.states()["tenant-a"] == "shut off"
    assert list(host.recorded()["domains"]) == ["tenant-a"]


def test_a_paused_tenant_is_refused_before_anything_is_shut_down(tmp_path):
    host = Host(tmp_path, {"tenant-a": "running", "tenant-p": "paused"})
    result = host.run(state="drained", timeout=30)
    assert result["failed"] and "virsh resume tenant-p" in result["msg"]
    assert host.states() == {"tenant-a": "running", "tenant-p": "paused"}
    assert host.recorded() is None


def test_unreachable_default_libvirt_with_no_running_domain_status_is_a_warning(tmp_path):
    args = dict(state="checked", uri=mod.DEFAULT_URI, ledger_path=str(tmp_path / "l.json"),
                record_path=str(tmp_path / "drain.json"))
    status = tmp_path / "run-libvirt-qemu"
    status.mkdir()
    (status / "tenant-a.xml").write_text("")       # left from a stopped domain: no .pid

    class Unreachable(mod.TenantDrain):
        def connect(self):
            original = mod.open_connection

            def refuse(uri):
                raise GpuhostError("cannot connect to libvirt at %s: no daemon" % uri, field="uri",
                                   fix="start the daemon")
            mod.open_connection = refuse
            try:
                return super().connect()
            finally:
                mod.open_connection = original

    with patch_module_args(args):
        module = mod.build_module()
    warnings = []
    module.warn = warnings.append
    runner = Unreachable(module, status_dir=str(status))
    runner.run()
    assert runner.result["running"] == [] and "nothing to drain" in warnings[0]

    (status / "tenant-a.pid").write_text("4242\n")
    runner = Unreachable(module, status_dir=str(status))
    with pytest.raises(GpuhostError) as err:
        runner.run()
    assert "shows running domain(s) tenant-a, which a reboot would stop" in err.value.message


def _adhoc(args, check=False):
    return run_module_adhoc("gpuhost.kvm.tenant_drain", args, check=check, timeout=600)


def test_ansible_run_of_checked_fails_naming_the_running_tenant(tmp_path, module_python):
    host = Host(tmp_path, {"tenant-a": "running", "tenant-b": "shut off"})
    proc, result = _adhoc(dict(state="checked", uri=host.uri, ledger_path=host.ledger,
                               record_path=host.record))
    assert proc.returncode != 0 and "FAILED!" in proc.stdout
    assert "would stop 1 running domain(s): tenants tenant-a (running)" in result["msg"]


# -- the iommu role's reboot tasks ---------------------------------------------------------
#
# roles/iommu/tasks/reboot.yml through a real ansible-playbook run on a local connection,
# each of its tenant_drain tasks opening the node file afresh (a task sees the node as
# written, not what an earlier task did to it). ansible refuses a reboot over a local
# connection ("would reboot the control node"), so these runs never get past the reboot
# task: they prove what comes before it (the refusal, the drain's plan, check mode) and
# that the restore runs after a reboot that failed. The reboot itself, with a running
# domain, is the lab's proof (tests/lab/test_lab_boot.py).

REBOOT_TASK = "TASK [gpuhost.kvm.iommu : Reboot to apply the kernel arguments]"
RESTORE_TASK = ("TASK [gpuhost.kvm.iommu : Start again the domains the drain stopped (the record "
                "decides; none recorded, nothing to do)]")


def _reboot_tasks(tmp_path, host, check, **extra):
    """The iommu role's reboot.yml (tasks_from, as main.yml's include runs it) with a
    reboot required and allowed, against ``host``'s test node, ledger and state dir."""
    playbook = tmp_path / "reboot.yml"
    playbook.write_text(
        "- name: The iommu role's reboot tasks\n"
        "  hosts: localhost\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: Include them\n"
        "      ansible.builtin.include_role:\n"
        "        name: gpuhost.kvm.iommu\n"
        "        tasks_from: reboot.yml\n")
    values = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
              "gpuhost_reboot_required": True, "gpuhost_reboot_ok": True,
              "gpuhost_libvirt_uri": host.uri, "gpuhost_ledger_path": host.ledger,
              "gpuhost_state_dir": os.path.dirname(host.record),
              "__iommu_cmdline": {"args": ["iommu=pt"]}}
    values.update(extra)
    (tmp_path / "extra.json").write_text(json.dumps(values))
    argv = ["-i", "localhost,", str(playbook), "-e", "@%s" % (tmp_path / "extra.json"), "-v"]
    if check:
        argv.append("--check")
    env = ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    return run_tool("ansible-playbook", *argv, env=env, check=False, timeout=600)


def _task_output(out, task):
    return out.split(task, 1)[1].split("TASK [", 1)[0] if task in out else None


@pytest.mark.parametrize("check", [False, True], ids=["run", "check-mode"])
def test_iommu_reboot_without_gpuhost_drain_is_refused_naming_the_running_domain(tmp_path, check):
    """A reboot needed while tenants run is refused, and the refusal lists the
    running tenants: the first task fails, naming each running domain and the way out
    (gpuhost_drain), and neither the reboot nor the restore runs."""
    host = Host(tmp_path, {"tenant-a": "running", "scratch": "running", "tenant-off": "shut off"},
                tenants=["tenant-a", "tenant-off"])
    proc = _reboot_tasks(tmp_path, host, check)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 2, proc.stdout[-4000:]
    assert ("a reboot of the host would stop 2 running domain(s): tenants tenant-a (running); "
            "not in the allocation ledger: scratch (running)") in out, out[-4000:]
    assert "set gpuhost_drain: true" in out
    assert REBOOT_TASK not in proc.stdout and RESTORE_TASK not in proc.stdout
    assert host.recorded() is None


def test_iommu_reboot_with_gpuhost_drain_in_check_mode_reports_the_drain_and_changes_nothing(tmp_path):
    """Check mode: the drain reports the domain it would shut down and writes no record;
    the reboot task is where ansible stops a local run, and the restore after it (always)
    finds nothing recorded."""
    host = Host(tmp_path, {"tenant-a": "running"})
    proc = _reboot_tasks(tmp_path, host, True, gpuhost_drain=True)
    out = proc.stdout
    drain = _task_output(out, "TASK [gpuhost.kvm.iommu : Refuse the reboot while domains run, or "
                              "shut them down gracefully (gpuhost_drain)]")
    assert drain is not None and "changed: [localhost]" in drain, out[-4000:]
    assert '"to_stop": [' in drain and '"tenant-a"' in drain, drain
    assert "ask tenant-a to shut down (ACPI)" in drain
    assert "with local connection would reboot the control node" in _task_output(out, REBOOT_TASK)
    restore = _task_output(out, RESTORE_TASK)
    assert restore is not None and "ok: [localhost]" in restore, out[-4000:]
    assert not os.path.exists(host.record)


def test_iommu_reboot_with_gpuhost_drain_restores_after_a_failed_reboot(tmp_path):
    """A real drain (on_timeout destroy, as the lab's proof sets it) records the domain
    and shuts it down; the reboot fails (ansible's local-connection refusal stands in for
    a reboot that did not happen); the restore, in the block's always, still runs and
    settles the record: the test node shows the domain running again (every task opens
    it afresh), so the restore takes it off the record as already running."""
    host = Host(tmp_path, {"tenant-a": "running"})
    proc = _reboot_tasks(tmp_path, host, False, gpuhost_drain=True, gpuhost_drain_timeout=5,
                         gpuhost_drain_on_timeout="destroy")
    out = proc.stdout
    assert proc.returncode == 2, out[-4000:]
    drain = _task_output(out, "TASK [gpuhost.kvm.iommu : Refuse the reboot while domains run, or "
                              "shut them down gracefully (gpuhost_drain)]")
    assert drain is not None and "changed: [localhost]" in drain, out[-4000:]
    assert '"stopped": [' in drain and '"tenant-a"' in drain, drain
    assert "with local connection would reboot the control node" in _task_output(out, REBOOT_TASK)
    restore = _task_output(out, RESTORE_TASK)
    assert restore is not None and '"already_running": [' in restore, out[-4000:]
    assert '"pending_restore": []' in " ".join(restore.split()), restore
    assert host.recorded()["domains"] == {}
