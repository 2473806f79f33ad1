"""tenant_ledger with hostile option values: a number that is not finite is
refused by the shared validator naming the tenant's key, never a traceback from int();
a relative ledger path is refused, never written into the module's working
directory."""

import os

import pytest

from support.fixturegen import build_runbook_host
from support.sysfs_sim import build_module

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import tenant_ledger

TENANT = {"name": "t1", "vcpus": 2, "memory_gib": 2, "hugepage_size": "2M"}


@pytest.fixture(scope="module")
def runbook_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("runbook")
    build_runbook_host(str(root))
    return str(root)


def run(root, **args):
    args = dict(args, root=root, _ansible_check_mode=False, _ansible_diff=False)
    module = build_module(tenant_ledger, args)
    tenant_ledger.TenantLedger(module).run()


def fail(root, **args):
    with pytest.raises(GpuhostError) as info:
        run(root, **args)
    return info.value


@pytest.mark.parametrize("key", ["memory_gib", "vcpus", "gpus", "iothreads"])
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_number_that_is_not_finite_is_refused_naming_the_key(runbook_root, tmp_path, key,
                                                               value):
    path = tmp_path / "gpuhost" / "ledger.json"
    err = fail(runbook_root, path=str(path), tenants=[dict(TENANT, **{key: value})])
    assert err.field == "tenants[0].%s" % key
    assert "is not a finite number" in err.msg or "is not a whole number" in err.msg
    assert not path.parent.exists()


def test_the_ledger_library_refuses_infinity_too(runbook_root):
    with pytest.raises(GpuhostError) as info:
        ledger.validate_tenants([dict(TENANT, memory_gib=float("inf"))])
    assert info.value.field == "tenants[0].memory_gib"


@pytest.mark.parametrize("relative", ["ledger.json", "./gpuhost/ledger.json", "sub/../l.json"])
def test_a_relative_ledger_path_is_refused_and_nothing_is_written(runbook_root, tmp_path,
                                                                  monkeypatch, relative):
    monkeypatch.chdir(tmp_path)
    err = fail(runbook_root, path=relative, tenants=[TENANT])
    assert err.field == "path"
    assert "is a relative path" in err.msg and "absolute path" in err.fix
    assert os.listdir(str(tmp_path)) == []
    err = fail(runbook_root, path=relative, state="absent", names=["t1"])
    assert err.field == "path"
    assert os.listdir(str(tmp_path)) == []


def test_the_ledger_writer_and_lock_refuse_a_relative_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(GpuhostError) as info:
        ledger.write_ledger("ledger.json", ledger.LedgerData())
    assert info.value.field == "path" and "relative" in info.value.msg
    with pytest.raises(GpuhostError) as info:
        with ledger.locked("ledger.json"):
            pass
    assert info.value.field == "path" and "relative" in info.value.msg
    assert os.listdir(str(tmp_path)) == []


def test_a_directory_at_the_ledger_path_is_refused(runbook_root, tmp_path):
    (tmp_path / "ledger.json").mkdir()
    err = fail(runbook_root, path=str(tmp_path / "ledger.json"), tenants=[TENANT])
    assert err.field == "path" and "is not a ledger file" in err.msg


# -- the ledger is never read through a link ----------------------------------------------

def test_read_ledger_refuses_a_planted_link_unread(tmp_path):
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{not the ledger")
    path = tmp_path / "ledger.json"
    os.symlink(str(outside), str(path))
    with pytest.raises(GpuhostError) as info:
        ledger.read_ledger(str(path))
    err = info.value
    assert err.field == "path" and err.message.count("Fix:") == 1
    assert "%s is a symbolic link (to %s)" % (path, outside) in err.message
    assert "corrupt" not in err.message


def test_read_ledger_refuses_a_link_planted_after_the_check(tmp_path, monkeypatch):
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    path = tmp_path / "ledger.json"
    os.symlink(str(outside), str(path))
    monkeypatch.setattr(os.path, "islink", lambda p: False)     # the O_NOFOLLOW open
    with pytest.raises(GpuhostError) as info:
        ledger.read_ledger(str(path))
    assert "is a symbolic link" in info.value.message


def test_read_ledger_reports_a_file_that_is_not_utf8_as_corrupt(tmp_path):
    path = tmp_path / "ledger.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ledger.LedgerCorruptError) as info:
        ledger.read_ledger(str(path))
    assert "is corrupt: it is not UTF-8 text" in info.value.message
    assert info.value.message.count("Fix:") == 1
