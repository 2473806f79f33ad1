# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The change set and the writer under hostile input: a failed step's error
has exactly one "Fix:", no reader follows a planted link, and the writer's refusals
name the option the caller passes."""

import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import (
    ChangeSet, ChangeSetError)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.state_file import StateFile
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter


def _link(writer, host_path, text="outside\n"):
    outside = os.path.join(os.path.dirname(writer.root), "outside")
    with open(outside, "w") as handle:
        handle.write(text)
    full = writer.path(host_path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    os.symlink(outside, full)
    return outside


@pytest.fixture
def writer(tmp_path):
    root = tmp_path / "host"
    root.mkdir()
    return HostWriter(str(root))


def test_a_write_time_refusal_in_a_change_set_has_exactly_one_fix(writer):
    changes = ChangeSet()
    changes.put_file(writer, "/etc/a.conf", "a\n")
    changes.put_file(writer, "/etc/b.conf", "b\n")
    _link(writer, "/etc/b.conf")     # planted after the plan, before the write
    with pytest.raises(ChangeSetError) as info:
        changes.apply()
    err = info.value
    assert err.message.count("Fix:") == 1, err.message
    assert err.message.count("path: ") == 1, err.message
    assert err.field == "path"
    assert "step 'create /etc/b.conf' failed: /etc/b.conf is a symbolic link" in err.message
    assert err.message.endswith("Fix: remove the link (or put the real file in its place) "
                                "and run again")
    assert err.details["rolled_back"] == ["create /etc/a.conf"]
    assert not os.path.exists(writer.path("/etc/a.conf"))


def test_a_failed_rollback_keeps_exactly_one_fix(writer):
    changes = ChangeSet()

    def undo_fails():
        raise OSError(5, "Input/output error")

    def refused():
        raise GpuhostError("no", field="opt", fix="do this")
    changes.add("a", lambda: None, undo_fails)
    changes.add("b", refused)
    with pytest.raises(ChangeSetError) as info:
        changes.apply()
    message = info.value.message
    assert message.count("Fix:") == 1, message
    assert "ROLLBACK INCOMPLETE" in message and "do this" not in message


# -- the writer's refusals name the caller's option ---------------------------------------

def test_write_target_names_the_option_the_caller_gives(writer):
    with pytest.raises(GpuhostError) as info:
        writer.confined_target("/etc/../shadow", field="dest")
    assert info.value.field == "dest" and "has a '..' component" in info.value.message
    with pytest.raises(GpuhostError) as info:
        writer.confined_target("/etc/../shadow")
    assert info.value.field == "path"           # today's name without one


def test_a_way_out_of_root_still_names_root(writer, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(str(outside), writer.path("/etc"))
    with pytest.raises(GpuhostError) as info:
        writer.check_replaceable("/etc/x.conf", field="dest")
    assert info.value.field == "root" and "leads out of" in info.value.message


@pytest.mark.parametrize("call", [
    lambda w: w.check_replaceable("/etc/x.conf", field="state_dir"),
    lambda w: w.write_file("/etc/x.conf", "new\n", field="state_dir"),
])
def test_a_link_or_a_folder_at_the_file_names_the_option(writer, call):
    _link(writer, "/etc/x.conf")
    with pytest.raises(GpuhostError) as info:
        call(writer)
    assert info.value.field == "state_dir"
    assert "/etc/x.conf is a symbolic link (to " in info.value.message
    os.unlink(writer.path("/etc/x.conf"))
    os.mkdir(writer.path("/etc/x.conf"))
    with pytest.raises(GpuhostError) as info:
        call(writer)
    assert info.value.field == "state_dir" and "is not a regular file" in info.value.message
    with pytest.raises(GpuhostError) as info:
        writer.check_replaceable("/etc/x.conf")
    assert info.value.field == "path"


def test_the_lock_of_a_state_file_names_its_option(writer):
    with pytest.raises(GpuhostError) as info:
        writer.lock("/var/../x.json", "persistent")
    assert info.value.field == "persistent"


# -- no reader follows a planted link ------------------------------------------------------

STATE = StateFile("/var/lib/gpuhost/state.json", "devices", dict, "persistent",
                  "fix or remove the file")
LINK = "is a symbolic link (to "


def _refused(call, field):
    with pytest.raises(GpuhostError) as info:
        call()
    err = info.value
    assert err.field == field and LINK in err.message, err.message
    assert err.message.count("Fix:") == 1
    assert err.message.endswith("Fix: remove the link (or put the real file in its place) "
                                "and run again")
    return err


def test_put_file_refuses_a_link_at_the_file_before_anything_is_written(writer):
    outside = _link(writer, "/etc/b.conf", "the other file\n")
    changes = ChangeSet()
    changes.put_file(writer, "/etc/a.conf", "a\n")
    _refused(lambda: changes.put_file(writer, "/etc/b.conf", "b\n", field="config"), "config")
    _refused(lambda: changes.put_file(writer, "/etc/b.conf", "b\n"), "path")
    assert changes.files[0].path == "/etc/a.conf" and len(changes.files) == 1
    assert not os.path.exists(writer.path("/etc/a.conf"))
    with open(outside) as handle:
        assert handle.read() == "the other file\n"


def test_read_and_read_file_refuse_a_link(writer):
    _link(writer, "/etc/x.conf", "other\n")
    _refused(lambda: writer.read_file("/etc/x.conf"), "path")
    _refused(lambda: writer.read_file("/etc/x.conf", "irqbalance_config"), "irqbalance_config")
    _refused(lambda: writer.read("/etc/x.conf", default="none"), "path")
    assert writer.read("/etc/absent", default="none") == "none"
    assert writer.read_file("/etc/absent") is None


def test_a_link_planted_between_the_check_and_the_open_is_not_followed(writer, monkeypatch):
    _link(writer, "/etc/x.conf", "other\n")
    monkeypatch.setattr(os.path, "islink", lambda path: False)    # the lstat saw a file
    _refused(lambda: writer.read_file("/etc/x.conf"), "path")     # the open: ELOOP


def test_state_file_read_refuses_a_link_naming_its_option(writer):
    _link(writer, STATE.path, '{"devices": {"x": {"n": 1}}}')
    _refused(lambda: STATE.read(writer), "persistent")
    changes = ChangeSet()
    _refused(lambda: changes.put_state(writer, STATE, {"devices": {}},
                                       {"devices": {"a": {"n": 1}}}), "persistent")
    assert not changes


def test_a_state_file_link_planted_after_the_plan_is_refused_under_the_lock(writer):
    changes = ChangeSet()
    changes.put_state(writer, STATE, STATE.read(writer), {"devices": {"a": {"n": 1}}})
    outside = _link(writer, STATE.path, '{"devices": {"x": {"n": 1}}}')
    with pytest.raises(ChangeSetError) as info:
        changes.apply()
    assert info.value.field == "persistent" and LINK in info.value.message
    assert info.value.message.count("Fix:") == 1
    with open(outside) as handle:
        assert handle.read() == '{"devices": {"x": {"n": 1}}}'
    assert os.path.islink(writer.path(STATE.path))


def test_read_file_is_exact_and_refuses_a_way_out(writer):
    with open(writer.path("/crlf.conf"), "wb") as handle:
        handle.write(b"a\r\nb\n")
    assert writer.read_file("/crlf.conf") == "a\r\nb\n"
    with pytest.raises(GpuhostError) as info:
        writer.read_file("/etc/../crlf.conf", "dest")
    assert info.value.field == "dest"
