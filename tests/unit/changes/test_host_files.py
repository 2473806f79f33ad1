# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuhost.kvm.host_files: a set of files in one task, decided then applied, against a
tree below ``root``: check mode and diff, idempotence, a failure at every write rolled
back to the byte and the mode, links and non-regular files refused before anything is
written, and every bad entry named by its option with the fix."""

import errno
import os
import stat

import pytest

from support.sysfs_sim import run_module

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.host_files import (
    MAX_ENTRIES, MAX_TOTAL_BYTES, validate_entries)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.blocks import replace_block
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.modules import host_files

MARKER = "# {mark} gpuhost.kvm iommu role: load vfio-pci before any GPU driver"

SET = [
    {"path": "/var/lib/gpuhost", "state": "directory", "mode": "0700"},
    {"path": "/var/lib/gpuhost/plan.json", "content": '{\n    "tenants": []\n}\n',
     "mode": "0600"},
    {"path": "/etc/gpuhost/numa.conf", "content": "HUGEPAGES 0 2048 512\nGOVERNOR performance\n",
     "mode": "0644"},
    {"path": "/usr/local/libexec/gpuhost/gpuhost-numa-setup", "content": "#!/bin/sh\nexit 0\n",
     "mode": "0755"},
    {"path": "/etc/sysctl.d/90-gpuhost-hugepages.conf", "state": "absent"},
]


def tree(root):
    """Every path below ``root``: kind, mode and content (the mode counts too)."""
    state = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(folder, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, root)
            if stat.S_ISLNK(st.st_mode):
                state[rel] = ("link", os.readlink(full))
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as handle:
                    state[rel] = ("file", oct(stat.S_IMODE(st.st_mode)), handle.read())
            else:
                state[rel] = ("dir", oct(stat.S_IMODE(st.st_mode)))
    return state


def run(root, files, check_mode=False, writer=None):
    return run_module(host_files, "HostFiles", {"files": files, "root": str(root)},
                      writer or HostWriter(str(root)), check_mode=check_mode)


def refused(root, files, writer=None):
    with pytest.raises(GpuhostError) as info:
        run(root, files, writer=writer)
    return info.value


def test_check_mode_then_apply_then_check_mode_again(tmp_path):
    before = tree(tmp_path)
    check = run(tmp_path, SET, check_mode=True)
    assert check.result["changed"]
    assert tree(tmp_path) == before                     # check mode wrote nothing
    # The absent file was never there: it is no change.
    assert check.result["changed_paths"] == [e["path"] for e in SET[:4]]
    assert check.result["steps"] == [
        "create directory /var/lib/gpuhost (mode 0700)",
        "create /var/lib/gpuhost/plan.json (mode 0600)",
        "create /etc/gpuhost/numa.conf (mode 0644)",
        "create /usr/local/libexec/gpuhost/gpuhost-numa-setup (mode 0755)"]
    diff = {(d["before_header"], d["before"], d["after"]) for d in check.result["diff"]}
    assert ("/etc/gpuhost/numa.conf", "", SET[2]["content"]) in diff
    assert ("/var/lib/gpuhost (type, mode, owner)", "(absent)\n",
            "directory, mode 0700, owner 0:0\n") in diff
    assert ("/usr/local/libexec/gpuhost/gpuhost-numa-setup (type, mode, owner)", "(absent)\n",
            "file, mode 0755, owner 0:0\n") in diff

    applied = run(tmp_path, SET)
    assert applied.result["changed"]
    assert applied.result["changed_paths"] == check.result["changed_paths"]
    after = tree(tmp_path)
    assert after["var/lib/gpuhost"] == ("dir", "0o700")
    assert after["var/lib/gpuhost/plan.json"] == ("file", "0o600", SET[1]["content"].encode())
    assert after["usr/local/libexec/gpuhost/gpuhost-numa-setup"][:2] == ("file", "0o755")

    again = run(tmp_path, SET, check_mode=True)
    assert not again.result["changed"]
    assert again.result["changed_paths"] == [] and again.result["diff"] == []


def test_second_apply_changes_nothing(tmp_path):
    run(tmp_path, SET)
    before = tree(tmp_path)
    second = run(tmp_path, SET)
    assert not second.result["changed"]
    assert second.result["steps"] == [] and second.result["changed_paths"] == []
    assert tree(tmp_path) == before


def test_only_what_differs_changes_and_the_diff_shows_it(tmp_path):
    run(tmp_path, SET)
    os.chmod(tmp_path / "etc/gpuhost/numa.conf", 0o600)
    files = [dict(e) for e in SET]
    files[1]["content"] = '{\n    "tenants": ["t1"]\n}\n'
    result = run(tmp_path, files).result
    assert result["changed_paths"] == ["/var/lib/gpuhost/plan.json", "/etc/gpuhost/numa.conf"]
    assert result["steps"] == ["update /var/lib/gpuhost/plan.json",
                               "set /etc/gpuhost/numa.conf to mode 0644, owner 0:0"]
    assert result["diff"] == [
        {"before_header": "/var/lib/gpuhost/plan.json",
         "after_header": "/var/lib/gpuhost/plan.json",
         "before": SET[1]["content"], "after": files[1]["content"]},
        {"before_header": "/etc/gpuhost/numa.conf (type, mode, owner)",
         "after_header": "/etc/gpuhost/numa.conf (type, mode, owner)",
         "before": "file, mode 0600, owner 0:0\n", "after": "file, mode 0644, owner 0:0\n"}]
    assert stat.S_IMODE(os.stat(tmp_path / "etc/gpuhost/numa.conf").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "var/lib/gpuhost/plan.json").st_mode) == 0o600


def test_directory_mode_is_set_on_an_existing_directory(tmp_path):
    os.makedirs(tmp_path / "var/lib/gpuhost", mode=0o755)
    os.chmod(tmp_path / "var/lib/gpuhost", 0o755)
    result = run(tmp_path, SET[:1]).result
    assert result["steps"] == ["set directory /var/lib/gpuhost to mode 0700, owner 0:0"]
    assert stat.S_IMODE(os.stat(tmp_path / "var/lib/gpuhost").st_mode) == 0o700


def test_absent_removes_a_file_and_is_then_no_change(tmp_path):
    path = tmp_path / "etc/sysctl.d/90-gpuhost-hugepages.conf"
    path.parent.mkdir(parents=True)
    path.write_text("vm.nr_hugepages = 512\n")
    entry = [{"path": "/etc/sysctl.d/90-gpuhost-hugepages.conf", "state": "absent"}]
    check = run(tmp_path, entry, check_mode=True).result
    assert check["changed_paths"] == [entry[0]["path"]] and path.exists()
    assert check["diff"][0]["before"] == "vm.nr_hugepages = 512\n"
    assert check["diff"][0]["after"] == ""
    assert run(tmp_path, entry).result["steps"] == ["remove " + entry[0]["path"]]
    assert not path.exists() and path.parent.is_dir()
    assert not run(tmp_path, entry).result["changed"]


def test_owner_and_group_by_number(tmp_path):
    files = [{"path": "/etc/x.conf", "content": "x\n", "mode": "0640", "owner": "1234",
              "group": "4321"}]
    run(tmp_path, files)
    st = os.stat(tmp_path / "etc/x.conf")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 4321, 0o640)
    files[0]["owner"] = "root"
    result = run(tmp_path, files).result
    assert result["steps"] == ["set /etc/x.conf to mode 0640, owner 0:4321"]
    assert os.stat(tmp_path / "etc/x.conf").st_uid == 0


def test_unknown_owner_is_refused_before_anything_is_written(tmp_path):
    before = tree(tmp_path)
    err = refused(tmp_path, SET[:2] + [{"path": "/etc/y", "content": "", "mode": "0644",
                                        "owner": "no-such-user-gpuhost"}])
    assert err.field == "files[2].owner"
    assert "no user 'no-such-user-gpuhost' on the host" in err.message
    assert "create the user first, or name one that exists" in err.message
    assert tree(tmp_path) == before


class FailingWriter(HostWriter):
    """Fails the ``fail_at``-th host mutation (1-based) with EIO, and counts them."""

    def __init__(self, root, fail_at=None):
        super().__init__(root)
        self.fail_at = fail_at
        self.mutations = 0

    def _tick(self, what):
        self.mutations += 1
        if self.mutations == self.fail_at:
            raise OSError(errno.EIO, os.strerror(errno.EIO), what)

    def write_file(self, host_path, content, *args, **kwargs):
        self._tick(host_path)
        return super().write_file(host_path, content, *args, **kwargs)

    def make_folder(self, host_path, mode, owner=None):
        self._tick(host_path)
        return super().make_folder(host_path, mode, owner)

    def set_attributes(self, host_path, mode=None, owner=None):
        self._tick(host_path)
        return super().set_attributes(host_path, mode, owner)

    def remove_file(self, host_path):
        self._tick(host_path)
        return super().remove_file(host_path)


def _lived_in(root):
    """A host where the set finds a bit of everything: an older plan, a file with the
    wrong mode, a file to remove, and folders to make."""
    os.makedirs(os.path.join(root, "var/lib/gpuhost"))
    os.chmod(os.path.join(root, "var/lib/gpuhost"), 0o755)
    with open(os.path.join(root, "var/lib/gpuhost/plan.json"), "w") as handle:
        handle.write("{}\n")
    os.chmod(os.path.join(root, "var/lib/gpuhost/plan.json"), 0o644)
    os.makedirs(os.path.join(root, "etc/gpuhost"))
    with open(os.path.join(root, "etc/gpuhost/numa.conf"), "w") as handle:
        handle.write(SET[2]["content"])
    os.chmod(os.path.join(root, "etc/gpuhost/numa.conf"), 0o600)
    os.makedirs(os.path.join(root, "etc/sysctl.d"))
    with open(os.path.join(root, "etc/sysctl.d/90-gpuhost-hugepages.conf"), "w") as handle:
        handle.write("vm.nr_hugepages = 512\n")


def test_a_failure_at_every_write_rolls_the_whole_set_back(tmp_path):
    count = tmp_path / "count"
    _lived_in(str(count))
    counter = FailingWriter(str(count))
    run(count, SET, writer=counter)
    # directory mode, plan update, numa.conf mode, script (with its folders), removal
    assert counter.mutations == 5
    for position in range(1, counter.mutations + 1):
        root = tmp_path / ("n%d" % position)
        _lived_in(str(root))
        before = tree(root)
        writer = FailingWriter(str(root), fail_at=position)
        with pytest.raises(GpuhostError) as info:
            run(root, SET, writer=writer)
        err = info.value
        assert "(EIO)" in err.message and "rolled back %d earlier step(s)" % (position - 1) \
            in err.message, err.message
        assert not err.details["rollback_failed"]
        assert tree(root) == before, "failure at write %d left the host changed" % position


def test_a_failed_run_reports_no_change(tmp_path):
    from support.module_args import patch_module_args
    with patch_module_args({"files": SET, "root": str(tmp_path), "_ansible_diff": True}):
        module = host_files.build_module()
    worker = host_files.HostFiles(module, writer=FailingWriter(str(tmp_path), fail_at=3))
    with pytest.raises(GpuhostError):
        worker.run()
    assert worker.result["changed"] is False and worker.result["changed_paths"] == []


@pytest.mark.parametrize("state,entry", [
    ("file", {"content": "x\n", "mode": "0644"}),
    ("directory", {"state": "directory", "mode": "0755"}),
    ("absent", {"state": "absent"}),
])
def test_a_link_at_the_destination_is_refused_and_nothing_is_written(tmp_path, state, entry):
    os.makedirs(tmp_path / "etc")
    (tmp_path / "elsewhere").write_text("not yours\n")
    os.symlink(str(tmp_path / "elsewhere"), str(tmp_path / "etc/target"))
    before = tree(tmp_path)
    err = refused(tmp_path, SET[:3] + [dict(entry, path="/etc/target")])
    assert err.field == "files[3].path"
    assert "/etc/target is a symbolic link (to %s): gpuhost.kvm never writes through a link" \
        % (tmp_path / "elsewhere") in err.message
    assert "remove the link (or put the real file in its place) and run again" in err.message
    assert tree(tmp_path) == before


def test_non_regular_destinations_are_refused(tmp_path):
    os.makedirs(tmp_path / "etc/a.conf")
    os.mkfifo(str(tmp_path / "etc/fifo"))
    (tmp_path / "etc/plain").write_text("x\n")
    cases = [
        ({"path": "/etc/a.conf", "content": "x\n", "mode": "0644"},
         "/etc/a.conf is a directory; host_files writes or removes only regular files there"),
        ({"path": "/etc/a.conf", "state": "absent"},
         "/etc/a.conf is a directory; host_files writes or removes only regular files there"),
        ({"path": "/etc/plain", "state": "directory", "mode": "0755"},
         "/etc/plain is a file; host_files makes a directory there"),
        ({"path": "/etc/fifo", "content": "x\n", "mode": "0644"},
         "/etc/fifo is neither a regular file nor a directory"),
        ({"path": "/etc/plain/under", "content": "x\n", "mode": "0644"},
         "/etc/plain/under cannot be made: /etc/plain is not a directory"),
    ]
    before = tree(tmp_path)
    for entry, message in cases:
        err = refused(tmp_path, [SET[2], entry])
        assert err.field == "files[1].path" and message in err.message, err.message
    assert tree(tmp_path) == before


def test_a_link_in_the_folder_leading_out_of_root_is_refused(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    os.makedirs(root / "etc")
    os.makedirs(outside)
    os.symlink(str(outside), str(root / "etc/gpuhost"))
    err = refused(root, [{"path": "/etc/gpuhost/numa.conf", "content": "x\n", "mode": "0644"}])
    assert err.field == "root" and "leads out of" in err.message
    assert os.listdir(outside) == []


@pytest.mark.parametrize("entry,field,fragments", [
    ({"path": "/etc/../root/.ssh/authorized_keys", "content": "k\n", "mode": "0600"},
     "files[0].path", ["/etc/../root/.ssh/authorized_keys has a '..' component",
                       "without '..'"]),
    ({"path": "etc/x.conf", "content": "x\n", "mode": "0644"},
     "files[0].path", ["etc/x.conf is not an absolute path", "starting with /"]),
    ({"path": "/etc//x.conf", "content": "x\n", "mode": "0644"},
     "files[0].path", ["/etc//x.conf is not written in its plain form", "write it as /etc/x.conf"]),
    ({"path": "/", "state": "directory", "mode": "0755"},
     "files[0].path", ["/ names the root directory"]),
    ({"path": "/etc/x.conf", "content": "x\n", "mode": 420},
     "files[0].mode", ["mode 420 is not a string", "quote the mode as an octal string"]),
    ({"path": "/etc/x.conf", "content": "x\n", "mode": "rw-r--r--"},
     "files[0].mode", ["mode 'rw-r--r--' is not an octal mode", "three or four octal digits"]),
    ({"path": "/etc/x.conf", "content": "x\n", "mode": "0944"},
     "files[0].mode", ["mode '0944' is not an octal mode"]),
    ({"path": "/etc/x.conf", "content": "x\n"},
     "files[0].mode", ["a file needs a mode", "for example '0644'"]),
    ({"path": "/etc/gpuhost", "state": "directory"},
     "files[0].mode", ["a directory needs a mode"]),
    ({"path": "/etc/x.conf", "mode": "0644"},
     "files[0].content", ["/etc/x.conf has no content", "state: directory or absent"]),
    ({"path": "/etc/gpuhost", "state": "directory", "mode": "0755", "content": "x"},
     "files[0].content", ["a path with state directory takes no content"]),
    ({"path": "/etc/x.conf", "state": "absent", "mode": "0644"},
     "files[0].mode", ["an absent file has no mode", "drop the mode"]),
    ({"path": "/etc/x.conf", "content": "x\n", "block": "y", "marker": "# {mark}",
      "mode": "0644"},
     "files[0].block", ["/etc/x.conf has both content and a block"]),
    ({"path": "/etc/x.conf", "block": "y", "marker": "# managed", "mode": "0644"},
     "files[0].marker", ["a block needs a one-line marker with {mark} in it"]),
])
def test_bad_entries_name_the_option_and_the_fix(tmp_path, entry, field, fragments):
    err = refused(tmp_path, [entry])
    assert err.field == field, err.message
    for fragment in fragments:
        assert fragment in err.message, err.message
    assert os.listdir(tmp_path) == []


def test_an_unknown_state_is_refused_by_the_core_too():
    # The module's choices refuse it first; the core does not rely on them.
    with pytest.raises(GpuhostError) as info:
        validate_entries([{"path": "/etc/x.conf", "state": "link", "mode": "0644"}])
    assert info.value.field == "files[0].state"
    assert "state 'link' is not one of file, directory, absent" in info.value.message


def test_a_path_listed_twice_is_refused():
    with pytest.raises(GpuhostError) as info:
        validate_entries([SET[2], dict(SET[2], content="y\n")])
    assert info.value.field == "files[1].path"
    assert "/etc/gpuhost/numa.conf is listed twice (files[0] and files[1])" in info.value.message


def test_the_set_is_bounded():
    big = "x" * (MAX_TOTAL_BYTES // 2 + 1)
    with pytest.raises(GpuhostError) as info:
        validate_entries([{"path": "/a", "content": big, "mode": "0644"},
                          {"path": "/b", "content": big, "mode": "0644"}])
    assert info.value.field == "files[1].content"
    assert "split the set" in info.value.message
    with pytest.raises(GpuhostError) as info:
        validate_entries([{"path": "/f%d" % n, "state": "absent"}
                          for n in range(MAX_ENTRIES + 1)])
    assert info.value.field == "files"


# -- marked blocks in a shared file --------------------------------------------------------

BEGIN = MARKER.replace("{mark}", "BEGIN") + "\n"
END = MARKER.replace("{mark}", "END") + "\n"


def test_block_is_what_blockinfile_writes():
    # Appended after the administrator's lines (a missing final newline is added first),
    # replaced in place, removed when empty: ansible.builtin.blockinfile's defaults.
    admin = b"# List of modules\nnvme"
    first = replace_block(admin, "vfio\nvfio_pci", MARKER)
    assert first == (b"# List of modules\nnvme\n" + BEGIN.encode() + b"vfio\nvfio_pci\n"
                     + END.encode())
    edited = first + b"loop\n"
    second = replace_block(edited, "vfio\nvfio_iommu_type1\nvfio_pci\n", MARKER)
    assert second == (b"# List of modules\nnvme\n" + BEGIN.encode()
                      + b"vfio\nvfio_iommu_type1\nvfio_pci\n" + END.encode() + b"loop\n")
    assert replace_block(second, "vfio\nvfio_iommu_type1\nvfio_pci", MARKER) == second
    assert replace_block(second, "", MARKER) == b"# List of modules\nnvme\nloop\n"
    assert replace_block(None, "vfio", MARKER) == (BEGIN + "vfio\n" + END).encode()


def test_block_entry_keeps_the_other_lines_and_is_idempotent(tmp_path):
    modules = tmp_path / "etc/initramfs-tools/modules"
    modules.parent.mkdir(parents=True)
    modules.write_text("# admin\nnvme\n")
    os.chmod(modules, 0o644)
    files = [{"path": "/etc/modprobe.d/gpuhost-blacklist-gpu.conf",
              "content": "blacklist nouveau\n", "mode": "0644"},
             {"path": "/etc/initramfs-tools/modules", "block": "vfio\nvfio_iommu_type1\nvfio_pci",
              "marker": MARKER, "mode": "0644"}]
    check = run(tmp_path, files, check_mode=True).result
    assert check["changed_paths"] == [f["path"] for f in files]
    assert modules.read_text() == "# admin\nnvme\n"
    assert run(tmp_path, files).result["steps"] == [
        "create /etc/modprobe.d/gpuhost-blacklist-gpu.conf (mode 0644)",
        "update /etc/initramfs-tools/modules"]
    assert modules.read_text() == "# admin\nnvme\n" + BEGIN + \
        "vfio\nvfio_iommu_type1\nvfio_pci\n" + END
    assert not run(tmp_path, files).result["changed"]
