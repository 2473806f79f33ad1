# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 20, the change set and the writer under hostile input: a failed step's error
has exactly one "Fix:", no reader follows a planted link, and the writer's refusals
name the option the caller passes."""

import os

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.transaction import (
    ChangeSet, ChangeSetError, HostWriter)


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
        writer.write_target("/etc/../shadow", field="dest")
    assert info.value.field == "dest" and "has a '..' component" in info.value.message
    with pytest.raises(GpuhostError) as info:
        writer.write_target("/etc/../shadow")
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
