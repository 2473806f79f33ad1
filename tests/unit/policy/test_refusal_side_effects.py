# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A refused run leaves nothing behind: the lock taken for it (FileLock, every state
file's and the ledger's) is discarded with the folders it created when the run fails
under it or writes nothing. Before the fix, a refused ledger request left the ledger's
folder and lock file."""

import os

import pytest
from support.module_args import patch_module_args

from support import fixturegen

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import FileLock, HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import tenant_ledger


def test_a_failure_under_a_new_lock_leaves_neither_lock_file_nor_folders(tmp_path):
    lock_path = str(tmp_path / "a" / "b" / "state.json.lock")
    with pytest.raises(GpuhostError):
        with FileLock(lock_path, 1.0):
            assert os.path.exists(lock_path)
            raise GpuhostError("refused", field="x", fix="y")
    assert os.listdir(str(tmp_path)) == []


def test_a_lock_file_that_was_there_stays(tmp_path):
    lock_path = str(tmp_path / "state.json.lock")
    open(lock_path, "w").close()
    with pytest.raises(GpuhostError):
        with FileLock(lock_path, 1.0):
            raise GpuhostError("refused", field="x", fix="y")
    assert os.path.exists(lock_path)


def test_a_host_writer_lock_discards_only_what_it_created(tmp_path):
    writer = HostWriter(str(tmp_path))
    (tmp_path / "etc").mkdir()
    with writer.lock("/etc/new/state.json", "state") as lock:
        lock.discard()
    assert sorted(os.listdir(str(tmp_path))) == ["etc"] and os.listdir(str(tmp_path / "etc")) == []


@pytest.fixture
def runbook(tmp_path):
    return fixturegen.build_runbook_host(str(tmp_path / "root"))


def _run(root, path, **args):
    with patch_module_args(dict(args, root=root, path=path)):
        module = tenant_ledger.build_module()
    worker = tenant_ledger.TenantLedger(module)
    worker.run()
    return worker


def test_a_ledger_request_refused_by_placement_creates_no_folder(runbook, tmp_path):
    path = str(tmp_path / "fresh" / "ledger.json")
    with pytest.raises(GpuhostError) as info:
        _run(runbook, path, tenants=[{"name": "t1", "vcpus": 2000, "memory_gib": 2}])
    assert info.value.field == "tenants[0].vcpus"
    assert not os.path.exists(str(tmp_path / "fresh"))


def test_a_release_with_no_ledger_writes_nothing(runbook, tmp_path):
    path = str(tmp_path / "fresh" / "ledger.json")
    worker = _run(runbook, path, state="absent", names=["t9"])
    assert worker.changed is False
    assert not os.path.exists(str(tmp_path / "fresh"))
