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
