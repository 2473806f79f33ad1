# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The change set: ordered apply, reverse rollback, file steps and the diff."""

import errno
import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import (
    ChangeSet, ChangeSetError)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.shipping import (
    gpuhost_imports, python_library_files, wrapper_script)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.state_file import StateFile
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter


def test_steps_apply_in_order():
    log = []
    changes = ChangeSet()
    for name in "abc":
        changes.add(name, lambda n=name: log.append(n), lambda n=name: log.append("undo " + n))
    assert changes.apply() == ["a", "b", "c"]
    assert log == ["a", "b", "c"]


def test_failure_undoes_applied_steps_in_reverse_and_names_them():
    log = []
    changes = ChangeSet()
    changes.add("a", lambda: log.append("a"), lambda: log.append("undo a"))
    changes.add("b (no undo)", lambda: log.append("b"))
    changes.add("c", lambda: log.append("c"), lambda: log.append("undo c"))

    def boom():
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
    changes.add("d", boom, lambda: log.append("undo d"))
    with pytest.raises(ChangeSetError) as info:
        changes.apply()
    assert log == ["a", "b", "c", "undo c", "undo a"]
    err = info.value
    assert err.details["failed_step"] == "d"
    assert err.details["rolled_back"] == ["c", "a"]
    assert err.details["errno"] == "EBUSY"
    assert "rolled back 2 earlier step(s)" in err.message
    assert isinstance(err.__cause__, OSError)


def test_an_undo_last_step_is_undone_after_every_other_step():
    # A service restart placed between its config file and later steps: its undo (restart
    # again) must see the config the other undos put back.
    log = []
    changes = ChangeSet()
    changes.add("config", lambda: log.append("config"), lambda: log.append("undo config"))
    changes.add("restart", lambda: log.append("restart"), lambda: log.append("undo restart"),
                undo_last=True)
    changes.add("pin", lambda: log.append("pin"), lambda: log.append("undo pin"))

    def fails():
        raise OSError(errno.EIO, "io")
    changes.add("fails", fails)
    with pytest.raises(ChangeSetError) as info:
        changes.apply()
    assert log == ["config", "restart", "pin", "undo pin", "undo config", "undo restart"]
    assert info.value.details["rolled_back"] == ["pin", "config", "restart"]


def test_failed_undo_is_reported_and_the_rest_still_undone():
    log = []
    changes = ChangeSet()
    changes.add("a", lambda: log.append("a"), lambda: log.append("undo a"))

    def bad_undo():
        raise OSError(errno.EIO, "io")
    changes.add("b", lambda: log.append("b"), bad_undo)
    changes.add("c", lambda: (x for x in ()).throw(GpuhostError("nope", field="x", fix="y")))
    with pytest.raises(ChangeSetError) as info:
        changes.apply()
    assert log == ["a", "b", "undo a"]
    assert info.value.details["rollback_failed"][0].startswith("b: ")
    assert "ROLLBACK INCOMPLETE" in info.value.message
    assert info.value.field == "x"


def test_put_file_creates_updates_removes_and_rolls_back(tmp_path):
    writer = HostWriter(str(tmp_path))
    writer.write_file("/etc/a.conf", "old\n", 0o600)
    changes = ChangeSet()
    assert changes.put_file(writer, "/etc/a.conf", "new\n")
    assert changes.put_file(writer, "/etc/b.conf", "b\n")
    assert not changes.put_file(writer, "/etc/missing", None)
    assert not changes.put_file(writer, "/etc/b2", None)
    changes.add("fail", lambda: (x for x in ()).throw(OSError(errno.EIO, "io")))
    with pytest.raises(ChangeSetError):
        changes.apply()
    assert (tmp_path / "etc/a.conf").read_text() == "old\n"
    assert not (tmp_path / "etc/b.conf").exists()
    assert stat.S_IMODE(os.stat(tmp_path / "etc/a.conf").st_mode) == 0o600
    diff = changes.diff()
    assert diff[0] == {"before_header": "/etc/a.conf", "after_header": "/etc/a.conf",
                       "before": "old\n", "after": "new\n"}


def test_write_file_keeps_mode_of_replaced_file_and_leaves_no_temp(tmp_path):
    writer = HostWriter(str(tmp_path))
    writer.write_file("/etc/x", "1", 0o640)
    writer.write_file("/etc/x", "2")
    assert stat.S_IMODE(os.stat(tmp_path / "etc/x").st_mode) == 0o640
    assert os.listdir(tmp_path / "etc") == ["x"]


def test_value_diff_lists_kernel_attributes(tmp_path):
    writer = HostWriter(str(tmp_path))
    (tmp_path / "attr").write_text("0\n")
    changes = ChangeSet()
    changes.set_value(writer, "/attr", "1", "0")
    assert changes.diff() == [{"before_header": "kernel attributes",
                               "after_header": "kernel attributes",
                               "before": "/attr = 0\n", "after": "/attr = 1\n"}]
    changes.apply()
    assert (tmp_path / "attr").read_text() == "1"


def test_a_helper_missing_from_the_payload_is_refused_naming_it_not_a_traceback(tmp_path):
    """A module's payload holds only what it imports: asking to ship anything else is a
    refusal while the module runs, not a ModuleNotFoundError at the next boot."""
    with pytest.raises(GpuhostError) as info:
        python_library_files(["changes.no_such_helper"], dest=str(tmp_path))
    assert "cannot ship ansible_collections.gpuhost.kvm.plugins.module_utils.changes.no_such_helper" in info.value.msg
    assert "import ansible_collections.gpuhost.kvm.plugins.module_utils.changes.no_such_helper" in info.value.fix


def test_library_files_follow_imports_and_wrapper_runs_them(tmp_path):
    files = python_library_files(["changes.irq_affinity.pinning"], dest=str(tmp_path))
    below = str(tmp_path) + "/ansible_collections/gpuhost/kvm/plugins/module_utils/"
    names = sorted(p[len(below):] for p in files)
    assert {"changes/__init__.py", "changes/irq_affinity/__init__.py", "changes/irq_affinity/pinning.py", "engine/changeset.py",
            "engine/writer.py", "engine/state_file.py", "engine/shipping.py",
            "host/__init__.py", "host/topology.py", "host/sysfs.py", "host/pci.py",
            "engine/__init__.py", "engine/cpuset.py", "engine/errors.py"} <= set(names)
    text = wrapper_script("ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity.pinning",
                          "reapply_main", dest=str(tmp_path), interpreter="/usr/bin/python3")
    assert text.startswith("#!/usr/bin/python3\n")
    assert "sys.exit(reapply_main(sys.argv[1:]))" in text


PACKAGE = "ansible_collections.gpuhost.kvm.plugins.module_utils"
EXAMPLE_SOURCE = '''"""from ansible_collections.gpuhost.kvm.plugins.module_utils import ledger"""
# from ansible_collections.gpuhost.kvm.plugins.module_utils import fleet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import cpuset as cs, errors
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import normalize_address
from ansible.module_utils.basic import AnsibleModule


def late():
    import ansible_collections.gpuhost.kvm.plugins.module_utils.host.sysfs
from .host import topology
from .engine.validators import cpu_list
from .engine import changeset as cs2
'''


def test_imports_are_read_from_the_syntax_tree_not_the_text():
    # An attribute imported from a module (normalize_address) is not a module; the
    # docstring and the comment name modules that are not imported.
    assert gpuhost_imports(EXAMPLE_SOURCE, PACKAGE + ".example") == [
        "engine", "engine.changeset", "engine.cpuset", "engine.errors", "engine.validators",
        "host", "host.pci", "host.sysfs", "host.topology"]


# The boot helpers run at boot under the host's own Python, where ansible is not
# installed: an import of ansible anywhere in what they ship fails there, while this
# test process (and python -I beside a virtual environment's ansible) would import it.
NO_ANSIBLE = ("import importlib.abc, sys\n"
              "class NoAnsible(importlib.abc.MetaPathFinder):\n"
              "    def find_spec(self, name, path=None, target=None):\n"
              "        if name == 'ansible' or name.startswith('ansible.'):\n"
              "            raise ImportError('the boot helper imports %s, which a host without ansible lacks' % name)\n"
              "sys.meta_path.insert(0, NoAnsible())\n")


@pytest.mark.parametrize("helper", ["changes.sriov_vfs", "changes.irq_affinity.pinning",
                                    "changes.irq_affinity.policy", "changes.numa_boot"])
def test_a_boot_helpers_library_imports_on_its_own(tmp_path, helper):
    """What a boot helper gets shipped is enough: with nothing else of the collection on
    the path (python -I, the shipped tree only) and no ansible at all, its module
    imports."""
    for path, text in python_library_files([helper], dest=str(tmp_path)).items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    probe = (NO_ANSIBLE + "import importlib\n"
             "sys.path.insert(0, sys.argv[1])\n"
             "module = importlib.import_module(%r + '.' + sys.argv[2])\n"
             "assert module.__file__.startswith(sys.argv[1]), module.__file__\n" % PACKAGE)
    proc = subprocess.run([sys.executable, "-I", "-c", probe, str(tmp_path), helper],
                          capture_output=True, text=True, check=False, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr


# -- one safe writer: confined to root, never through a link (hostile-input class 4) ----

def test_a_link_planted_at_the_destination_is_refused_and_its_target_untouched(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (root / "etc" / "gpuhost.conf").symlink_to(victim)
    writer = HostWriter(str(root))
    with pytest.raises(GpuhostError) as info:
        writer.write_file("/etc/gpuhost.conf", "new\n")
    assert "is a symbolic link" in info.value.message and "never writes through a link" in info.value.message
    assert info.value.field == "path" and "remove the link" in info.value.fix
    assert victim.read_text() == "keep\n" and (root / "etc" / "gpuhost.conf").is_symlink()


@pytest.mark.parametrize("host_path", ["/etc/../../outside.conf", "../outside.conf", "/etc/a/../../../x"])
def test_dot_dot_never_leaves_root(tmp_path, host_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    writer = HostWriter(str(root))
    for write in (lambda: writer.write_file(host_path, "x\n"), lambda: writer.write(host_path, "1"),
                  lambda: writer.remove_file(host_path)):
        with pytest.raises(GpuhostError) as info:
            write()
        assert "has a '..' component" in info.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_an_absolute_link_inside_the_tree_does_not_carry_writes_out_of_root(tmp_path):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "modprobe.d").symlink_to(outside)          # absolute, planted
    writer = HostWriter(str(root))
    with pytest.raises(GpuhostError) as info:
        writer.write_file("/etc/modprobe.d/gpuhost.conf", "blacklist x\n")
    assert "leads out of" in info.value.message and info.value.field == "root"
    with pytest.raises(GpuhostError):
        writer.write("/etc/modprobe.d/attr", "1")
    assert list(outside.iterdir()) == []


def test_links_that_stay_inside_root_are_followed_for_folders(tmp_path):
    # sysfs is full of relative links (devices/X -> ../../devices/pci0000:00/X): a write
    # through a folder link that stays inside the tree is the normal case.
    root = tmp_path / "root"
    real = root / "sys" / "devices" / "pci0000:00" / "0000:41:00.0"
    real.mkdir(parents=True)
    (real / "driver_override").write_text("(null)\n")
    (root / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    (root / "sys" / "bus" / "pci" / "devices" / "0000:41:00.0").symlink_to("../../../devices/pci0000:00/0000:41:00.0")
    HostWriter(str(root)).write("/sys/bus/pci/devices/0000:41:00.0/driver_override", "vfio-pci")
    assert (real / "driver_override").read_text() == "vfio-pci"


def test_a_directory_at_the_destination_is_not_replaced(tmp_path):
    root = tmp_path / "root"
    (root / "etc" / "gpuhost.conf").mkdir(parents=True)
    with pytest.raises(GpuhostError) as info:
        HostWriter(str(root)).write_file("/etc/gpuhost.conf", "x\n")
    assert "is not a regular file" in info.value.message


# -- state files: locked, re-read, merged -------------------------------------------------

STATE = StateFile("/var/lib/gpuhost/test-state.json", "devices", dict, field="state",
                  fix="remove the file")
RULES = StateFile("/etc/gpuhost/test-rules.json", "rules", list, field="persistent",
                  fix="fix or remove the file", identity=lambda item: item.get("name"),
                  sets=("names",))


def _stored(writer, spec):
    return json.loads(writer.read_file(spec.path))


def test_threads_merging_at_once_keep_every_entry(tmp_path):
    writer = HostWriter(str(tmp_path))
    count = 8
    barrier = threading.Barrier(count)
    errors = []

    def one(index):
        try:
            stale = STATE.read(writer)      # every thread plans from the same read
            barrier.wait(10)
            changes = ChangeSet()
            after = dict(stale, devices=dict(stale["devices"], **{"dev%d" % index: {"n": index}}))
            assert changes.put_state(writer, STATE, stale, after)
            changes.apply()
        except Exception as err:   # reported below; a thread cannot fail the test itself
            errors.append(err)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    stored = _stored(writer, STATE)
    assert stored == {"version": 1, "devices": {"dev%d" % i: {"n": i} for i in range(count)}}
    assert os.path.isfile(writer.path(STATE.path + ".lock"))


def test_a_removal_planned_from_a_stale_read_removes_only_its_own_key(tmp_path):
    writer = HostWriter(str(tmp_path))
    writer.write_file(STATE.path, json.dumps({"devices": {"a": {"n": 1}}}))
    stale = STATE.read(writer)
    changes = ChangeSet()
    assert changes.put_state(writer, STATE, stale, {"devices": {}})
    # Another run adds its entry after this plan read the file.
    writer.write_file(STATE.path, json.dumps({"devices": {"a": {"n": 1}, "b": {"n": 2}}}))
    changes.apply()
    assert _stored(writer, STATE) == {"version": 1, "devices": {"b": {"n": 2}}}


def test_list_entries_merge_in_place_and_names_as_a_set(tmp_path):
    writer = HostWriter(str(tmp_path))
    writer.write_file(RULES.path, json.dumps(
        {"rules": [{"name": "a", "cpus": "0"}, {"name": "b", "cpus": "1"}], "names": ["x"]}))
    stale = RULES.read(writer)
    after = {"rules": [{"name": "a", "cpus": "0-1"}, {"name": "b", "cpus": "1"}],
             "names": ["x", "y"]}
    changes = ChangeSet()
    changes.put_state(writer, RULES, stale, after)
    writer.write_file(RULES.path, json.dumps(
        {"rules": [{"name": "c", "cpus": "2"}, {"name": "a", "cpus": "0"}],
         "names": ["x", "z"]}))
    changes.apply()
    assert _stored(writer, RULES) == {
        "version": 1, "rules": [{"name": "c", "cpus": "2"}, {"name": "a", "cpus": "0-1"}],
        "names": ["x", "y", "z"]}


def test_rollback_restores_the_exact_file_or_only_its_own_entries(tmp_path):
    writer = HostWriter(str(tmp_path))

    def failing_run(before, after):
        changes = ChangeSet()
        changes.put_state(writer, STATE, before, after)

        def later():
            raise OSError(errno.EIO, "io")
        changes.add("a later step", later)
        return changes
    # A new file, untouched since: the file, its lock and its folders go again.
    changes = failing_run({"devices": {}}, {"devices": {"a": {"n": 1}}})
    with pytest.raises(ChangeSetError):
        changes.apply()
    assert os.listdir(str(tmp_path)) == []
    # An old file without a version: byte for byte what it was.
    legacy = '{"devices": {"a": {"n": 1}}}'
    writer.write_file(STATE.path, legacy)
    changes = failing_run(STATE.read(writer), {"devices": {"a": {"n": 2}}})
    with pytest.raises(ChangeSetError):
        changes.apply()
    assert writer.read_file(STATE.path) == legacy
    # Another run wrote between this run's step and its rollback: its entry stays.
    changes = ChangeSet()
    changes.put_state(writer, STATE, STATE.read(writer), {"devices": {"a": {"n": 3}}})

    def another_run_then_fail():
        data = STATE.read(writer)
        data["devices"]["b"] = {"n": 9}
        writer.write_file(STATE.path, STATE.dump(data))
        raise OSError(errno.EIO, "io")
    changes.add("another run writes, then this run fails", another_run_then_fail)
    with pytest.raises(ChangeSetError):
        changes.apply()
    assert _stored(writer, STATE) == {"version": 1, "devices": {"a": {"n": 1}, "b": {"n": 9}}}


@pytest.mark.parametrize("text,fragment", [
    ('{"version": 2, "devices": {}}', "has version 2; this gpuhost.kvm reads version 1"),
    ('{"version": "1", "devices": {}}', 'has version "1"'),
    ('{"version": true, "devices": {}}', "has version true"),
    ('{"devices": {"a": 1}}', "valid JSON of another shape"),
    ('[]', "valid JSON of another shape"),
])
def test_an_unknown_version_or_shape_names_the_file_and_the_fix(tmp_path, text, fragment):
    writer = HostWriter(str(tmp_path))
    writer.write_file(STATE.path, text)
    with pytest.raises(GpuhostError) as info:
        STATE.read(writer)
    assert STATE.path + " " in info.value.message and fragment in info.value.message
    assert info.value.field == "state" and "remove the file" in info.value.fix
    # The step re-reads under the lock and refuses the same way, writing nothing.
    writer.write_file(STATE.path, '{"devices": {}}')
    changes = ChangeSet()
    changes.put_state(writer, STATE, STATE.read(writer), {"devices": {"a": {"n": 1}}})
    writer.write_file(STATE.path, text)
    with pytest.raises(ChangeSetError) as info:
        changes.apply()
    assert fragment in info.value.message and writer.read_file(STATE.path) == text


def test_names_must_be_a_list_of_strings(tmp_path):
    writer = HostWriter(str(tmp_path))
    writer.write_file(RULES.path, '{"rules": [], "names": "x"}')
    with pytest.raises(GpuhostError, match='"names": \\["...", ...\\]'):
        RULES.read(writer)


def test_a_link_planted_at_the_state_lock_is_refused_and_its_target_untouched(tmp_path):
    root = tmp_path / "root"
    (root / "var/lib/gpuhost").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    lock = root / "var/lib/gpuhost/test-state.json.lock"
    writer = HostWriter(str(root))
    changes = ChangeSet()
    # Planted after the plan: the step's O_NOFOLLOW open refuses it.
    changes.put_state(writer, STATE, {"devices": {}}, {"devices": {"a": {"n": 1}}})
    lock.symlink_to(victim)
    with pytest.raises(ChangeSetError) as info:
        changes.apply()
    assert "test-state.json.lock is a symbolic link" in info.value.message
    assert "remove the link" in info.value.message and info.value.field == "state"
    # Planted before: the plan refuses it, before its first write.
    with pytest.raises(GpuhostError) as info:
        ChangeSet().put_state(writer, STATE, {"devices": {}}, {"devices": {"a": {"n": 1}}})
    assert "test-state.json.lock is a symbolic link" in info.value.message
    assert victim.read_text() == "keep\n" and not writer.exists(STATE.path)


@pytest.mark.parametrize("planted", ["test-state.json", "test-state.json.lock"])
def test_a_folder_at_the_state_file_or_its_lock_is_refused_by_the_plan(tmp_path, planted):
    writer = HostWriter(str(tmp_path))
    os.makedirs(writer.path("/var/lib/gpuhost/" + planted))
    with pytest.raises(GpuhostError) as info:
        ChangeSet().put_state(writer, STATE, {"devices": {}}, {"devices": {"a": {"n": 1}}})
    assert "/var/lib/gpuhost/%s is not a regular file" % planted in info.value.message
    assert info.value.field == "state" and info.value.fix == "move it away and run again"


def test_a_held_state_lock_times_out_naming_the_file_and_the_holder(tmp_path):
    writer = HostWriter(str(tmp_path))
    with writer.lock(STATE.path, "state"):
        with pytest.raises(GpuhostError) as info:
            with writer.lock(STATE.path, "state", timeout=0.2):
                pass
    assert "%s.lock is locked by another run (PID %d)" % (STATE.path, os.getpid()) \
        in info.value.message
    assert info.value.field == "state" and "wait for the other" in info.value.fix


def test_a_state_lock_names_its_holder_only_while_held(tmp_path):
    # A PID left in a released lock would name a finished run, and make two converges
    # of one host leave different files (the lab's interrupted-converge proof, seed 679).
    writer = HostWriter(str(tmp_path))
    lock_file = writer.path(STATE.path + ".lock")
    with writer.lock(STATE.path, "state"):
        with open(lock_file) as held:
            assert held.read() == "%d\n" % os.getpid()
    assert os.path.getsize(lock_file) == 0
