# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleet_report writes its files through the collection's one writer
(engine/writer.py HostWriter): never through a planted link, never over what is not a
regular file, every file checked before the first is written, each replaced atomically."""

import os

import pytest
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import writer
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import fleet_report

HOSTS = {"a": None, "b": {"error": "unreachable"}}


def _worker(dest, check_mode=False, formats=None):
    args = {"hosts": HOSTS, "dest": str(dest), "_ansible_check_mode": check_mode}
    if formats:
        args["formats"] = formats
    with patch_module_args(args):
        module = fleet_report.build_module()
    return fleet_report.FleetReport(module)


def _tree(path):
    found = {}
    for folder, dirs, files in os.walk(str(path)):
        for name in dirs + files:
            full = os.path.join(folder, name)
            if os.path.islink(full):
                found[full] = "-> " + os.readlink(full)
            elif os.path.isfile(full):
                with open(full, "rb") as handle:
                    found[full] = handle.read()
            else:
                found[full] = "dir"
    return found


def test_the_files_are_written_by_the_shared_writer(tmp_path, monkeypatch):
    written = []
    original = writer.HostWriter.write_file

    def record(self, host_path, content, mode=None, owner=None):
        written.append(host_path)
        return original(self, host_path, content, mode, owner)
    monkeypatch.setattr(writer.HostWriter, "write_file", record)
    dest = tmp_path / "reports" / "fleet"
    worker = _worker(dest)
    worker.run()
    assert sorted(written) == sorted(str(dest / name) for name in fleet_report.FILES.values())
    assert sorted(os.listdir(str(dest))) == sorted(fleet_report.FILES.values())   # no temp left
    again = _worker(dest)
    again.run()
    assert again.result["changed"] is False and len(written) == 3


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_planted_link_at_a_report_file_is_refused_before_any_write(tmp_path, check_mode):
    # Before: the JSON was written to a temp file beside the link and moved over it
    # (atomic_move), and the Markdown written first; now nothing is written at all.
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    dest = tmp_path / "fleet"
    dest.mkdir()
    os.symlink(str(outside), str(dest / "fleet-capacity.json"))
    before = _tree(tmp_path)
    worker = _worker(dest, check_mode)
    with pytest.raises(GpuhostError) as err:
        worker.run()
    assert err.value.field == "dest"
    assert "fleet-capacity.json is a symbolic link (to %s)" % outside in err.value.message
    assert "never writes through a link" in err.value.message
    assert _tree(tmp_path) == before
    assert worker.result["changed"] is False


def test_a_directory_where_a_report_file_goes_is_refused(tmp_path):
    dest = tmp_path / "fleet"
    (dest / "fleet-capacity.svg").mkdir(parents=True)
    before = _tree(tmp_path)
    worker = _worker(dest)
    with pytest.raises(GpuhostError) as err:
        worker.run()
    assert err.value.field == "dest" and "fleet-capacity.svg is not a regular file" in err.value.message
    assert _tree(tmp_path) == before and worker.result["changed"] is False


def test_a_dest_that_is_a_file_is_refused(tmp_path):
    dest = tmp_path / "fleet"
    dest.write_text("not a directory\n")
    worker = _worker(dest)
    with pytest.raises(GpuhostError) as err:
        worker.run()
    assert err.value.field == "dest" and "is not a directory" in err.value.message
    assert dest.read_text() == "not a directory\n"


def test_a_file_that_cannot_be_written_puts_back_the_ones_written_before_it(tmp_path, monkeypatch):
    # The Markdown is written first; the JSON's write fails (a full disk): the old
    # Markdown comes back byte for byte and the new SVG is never written, so the
    # report is never half the old one and half the new.
    import errno
    from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import runner
    dest = tmp_path / "fleet"
    dest.mkdir()
    (dest / "fleet-capacity.md").write_bytes(b"old markdown\n")
    (dest / "fleet-capacity.json").write_bytes(b"{}\n")
    before = _tree(tmp_path)
    original = writer.HostWriter.write_file

    def full_disk(self, host_path, content, mode=None, owner=None, field=None):
        if host_path.endswith(".json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, host_path, content, mode, owner, field)
    monkeypatch.setattr(writer.HostWriter, "write_file", full_disk)
    worker = _worker(dest)
    with pytest.raises(GpuhostError) as err:
        worker.run()
    assert err.value.field == "dest" and "No space left on device" in err.value.message
    assert err.value.details["rolled_back"] == ["update %s" % (dest / "fleet-capacity.md")]
    assert _tree(tmp_path) == before
    failures = []

    class Module(object):
        def fail_json(self, **result):
            failures.append(result)
            raise SystemExit(1)
    worker = _worker(dest)
    with pytest.raises(SystemExit):
        runner.run_module(Module(), worker, changes_host=True)
    assert failures[0]["changed"] is False and _tree(tmp_path) == before
