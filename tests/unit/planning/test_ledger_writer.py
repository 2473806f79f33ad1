"""The allocation ledger is written by the collection's one writer (engine/writer.py HostWriter):
never through a link, never over a non-regular file, a '..' path refused, atomic, and
under the ledger's own lock as before (one safe writer)."""

import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import ledger
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter

BODY = ledger.LedgerData(tenants=[{"name": "t1"}], housekeeping={"0": "0"},
                         smt_policy="require")


def test_the_ledger_has_no_writer_of_its_own():
    assert not hasattr(ledger, "_atomic_write")


def test_every_ledger_write_goes_through_the_shared_writer(tmp_path, monkeypatch):
    written = []
    real = HostWriter.write_file

    def spy(self, host_path, content, mode=None, owner=None):
        written.append((host_path, mode))
        return real(self, host_path, content, mode, owner)
    monkeypatch.setattr(HostWriter, "write_file", spy)
    path = tmp_path / "gpuhost" / "ledger.json"
    with ledger.locked(str(path)):
        ledger.write_ledger(str(path), BODY)
    with ledger.locked(str(path)):
        ledger.write_ledger(str(path), ledger.read_ledger(str(path)))
    assert written == [(str(path), 0o600), (str(path) + ".prev", 0o600), (str(path), 0o600)]
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(str(path) + ".prev").st_mode & 0o777 == 0o600
    assert os.stat(tmp_path / "gpuhost").st_mode & 0o777 == 0o700
    assert ledger.read_ledger(str(path)).serial == 2


@pytest.mark.parametrize("planted", ["ledger.json", "ledger.json.prev"])
def test_a_link_planted_at_the_ledger_or_its_copy_is_refused_and_nothing_written(
        tmp_path, planted):
    path = tmp_path / "ledger.json"
    with ledger.locked(str(path)):
        ledger.write_ledger(str(path), BODY)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    if planted == "ledger.json":
        os.unlink(path)
    (tmp_path / planted).symlink_to(victim)
    before = {name: os.readlink(tmp_path / name) if os.path.islink(tmp_path / name)
              else (tmp_path / name).read_bytes()
              for name in os.listdir(tmp_path) if name != "ledger.json.lock"}
    with pytest.raises(GpuhostError) as info:
        with ledger.locked(str(path)):
            ledger.write_ledger(str(path), BODY)
    assert "is a symbolic link" in info.value.message and info.value.field == "path"
    assert "remove the link" in info.value.fix
    assert victim.read_text() == "keep\n"
    after = {name: os.readlink(tmp_path / name) if os.path.islink(tmp_path / name)
             else (tmp_path / name).read_bytes()
             for name in os.listdir(tmp_path) if name != "ledger.json.lock"}
    assert after == before


def test_a_directory_at_the_ledgers_copy_is_refused_before_the_ledger_changes(tmp_path):
    path = tmp_path / "ledger.json"
    with ledger.locked(str(path)):
        ledger.write_ledger(str(path), BODY)
    text = path.read_text()
    (tmp_path / "ledger.json.prev").mkdir()
    with pytest.raises(GpuhostError) as info:
        with ledger.locked(str(path)):
            ledger.write_ledger(str(path), ledger.read_ledger(str(path)))
    assert "is not a regular file" in info.value.message and info.value.field == "path"
    assert path.read_text() == text


def test_a_ledger_path_with_dot_dot_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    path = str(tmp_path / "a" / ".." / "ledger.json")
    with pytest.raises(GpuhostError) as info:
        ledger.write_ledger(path, BODY)
    assert "'..'" in info.value.message and info.value.field == "path"
    assert not (tmp_path / "ledger.json").exists()
