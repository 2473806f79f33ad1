# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host writer restores the default SELinux context of what it writes, after the
rename, where SELinux is enabled; without the bindings or with SELinux disabled it does
nothing. This machine runs no SELinux, so the bindings are a stub put in sys.modules
under the name the writer imports (ansible's ctypes wrapper of libselinux): every test
that uses it says "stubbed_selinux" in its name."""

import os
import stat
import sys
import types

import pytest

from support.sysfs_sim import SimulatedKernel, build_sim_host, run_module

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity import pinning as irq_pinning
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.irq_affinity.pinning import LIBVIRT_HOOK
from ansible_collections.gpuhost.kvm.plugins.modules import irq_affinity
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import (
    SELINUX_BINDINGS, HostWriter)

# The stub's policy: the types Debian's reference policy gives these paths, as docs/selinux.md
# lists them and tests/integration/test_selinux_policy.py looks them up with its
# matchpathcon: "/etc/libvirt/.*/.*" is virt_etc_rw_t, and /usr/local/libexec matches no
# bin_t entry, so "/usr/.*" (usr_t). RHEL 9's policy is not read here.
VIRT_ETC_RW = "system_u:object_r:virt_etc_rw_t:s0"
POLICY = {
    (LIBVIRT_HOOK, stat.S_IFREG): VIRT_ETC_RW,
    ("/etc/libvirt/hooks/qemu.d", stat.S_IFDIR): VIRT_ETC_RW,
    ("/usr/local/libexec/gpuhost/gpuhost-irq-reapply", stat.S_IFREG):
        "system_u:object_r:usr_t:s0",
}
UNLABELED = "system_u:object_r:user_tmp_t:s0"


class StubSelinux(types.ModuleType):
    """libselinux as ansible.module_utils.compat.selinux wraps it, recording each call
    with whether the path existed at the time (so "after the rename" is observable)."""

    def __init__(self, enabled=True, policy=None):
        super().__init__(SELINUX_BINDINGS)
        self.enabled = enabled
        self.policy = POLICY if policy is None else policy
        self.calls = []
        self.labels = {}

    def is_selinux_enabled(self):
        self.calls.append(("is_selinux_enabled",))
        return 1 if self.enabled else 0

    def matchpathcon(self, path, mode):
        self.calls.append(("matchpathcon", path, mode))
        if (path, mode) not in self.policy:
            raise OSError(2, "No such file or directory")
        return [0, self.policy[(path, mode)]]

    def lgetfilecon_raw(self, path):
        self.calls.append(("lgetfilecon_raw", path))
        return [0, self.labels.get(path, UNLABELED)]

    def lsetfilecon(self, path, context):
        self.calls.append(("lsetfilecon", path, context, os.path.isfile(path) or
                           os.path.isdir(path), sorted(os.listdir(os.path.dirname(path)))))
        self.labels[path] = context
        return 0


@pytest.fixture
def stub(monkeypatch):
    bindings = StubSelinux()
    monkeypatch.setitem(sys.modules, SELINUX_BINDINGS, bindings)
    return bindings


def setcalls(bindings):
    return [call for call in bindings.calls if call[0] == "lsetfilecon"]


def test_stubbed_selinux_hook_gets_the_default_context_after_the_rename(stub, tmp_path):
    writer = HostWriter(str(tmp_path))
    writer.write_file(LIBVIRT_HOOK, "#!/bin/sh\n", mode=0o755)
    target = str(tmp_path / LIBVIRT_HOOK.lstrip("/"))
    assert ("matchpathcon", LIBVIRT_HOOK, stat.S_IFREG) in stub.calls
    hook_call = [call for call in setcalls(stub) if call[1] == target]
    # set on the final path, which exists then, with no temporary file left beside it
    assert hook_call == [("lsetfilecon", target, VIRT_ETC_RW, True,
                          ["gpuhost-irq-affinity"])]
    # the folders it created get their defaults too (the one the stub's policy knows),
    # outermost first, then the file
    folder = str(tmp_path / "etc/libvirt/hooks/qemu.d")
    assert stub.labels[folder] == VIRT_ETC_RW
    assert [call[1] for call in setcalls(stub)] == [folder, target]


def test_stubbed_selinux_boot_helper_gets_its_default_and_a_right_label_is_left_alone(stub, tmp_path):
    writer = HostWriter(str(tmp_path))
    helper = "/usr/local/libexec/gpuhost/gpuhost-irq-reapply"
    target = str(tmp_path / helper.lstrip("/"))
    writer.write_file(helper, "#!/bin/sh\n", mode=0o755)
    assert stub.labels[target] == "system_u:object_r:usr_t:s0"
    stub.calls.clear()
    writer.write_file(helper, "#!/bin/sh\nexit 0\n")
    assert ("lgetfilecon_raw", target) in stub.calls
    assert setcalls(stub) == []


def test_stubbed_selinux_path_without_a_default_is_left_as_it_is(stub, tmp_path):
    HostWriter(str(tmp_path)).write_file("/srv/other.conf", "x\n")
    assert ("matchpathcon", "/srv/other.conf", stat.S_IFREG) in stub.calls
    assert setcalls(stub) == []


def test_stubbed_selinux_refused_label_names_the_option_and_the_fix(stub, tmp_path):
    def refuse(path, context):
        raise OSError(22, "Invalid argument")
    stub.lsetfilecon = refuse
    (tmp_path / "etc/libvirt/hooks/qemu.d").mkdir(parents=True)
    with pytest.raises(GpuhostError) as err:
        HostWriter(str(tmp_path)).write_file(LIBVIRT_HOOK, "#!/bin/sh\n", field="hook")
    assert err.value.field == "hook"
    assert "virt_etc_rw_t" in str(err.value) and "matchpathcon %s" % LIBVIRT_HOOK in str(err.value)


def test_stubbed_selinux_disabled_calls_nothing_but_the_check(monkeypatch, tmp_path):
    bindings = StubSelinux(enabled=False)
    monkeypatch.setitem(sys.modules, SELINUX_BINDINGS, bindings)
    HostWriter(str(tmp_path)).write_file(LIBVIRT_HOOK, "#!/bin/sh\n")
    HostWriter(str(tmp_path)).make_folder("/var/lib/gpuhost", 0o700)
    assert set(bindings.calls) == {("is_selinux_enabled",)}


def test_without_the_bindings_the_writer_writes_and_says_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, SELINUX_BINDINGS, None)   # import fails
    HostWriter(str(tmp_path)).write_file(LIBVIRT_HOOK, "#!/bin/sh\n")
    assert (tmp_path / LIBVIRT_HOOK.lstrip("/")).read_text() == "#!/bin/sh\n"
    assert capsys.readouterr() == ("", "")


def test_stubbed_selinux_make_folder_labels_what_it_created(stub, tmp_path):
    created = HostWriter(str(tmp_path)).make_folder("/etc/libvirt/hooks/qemu.d", 0o755)
    assert created[0] == "/etc/libvirt/hooks/qemu.d"
    assert stub.labels == {str(tmp_path / "etc/libvirt/hooks/qemu.d"):
                           VIRT_ETC_RW}


class EveryPathPolicy(dict):
    """A stub policy with a default for every path: a type named after the path."""

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        return "system_u:object_r:%s_t:s0" % key[0].strip("/").replace("/", "_").replace(".", "_")


def test_stubbed_selinux_irq_affinity_persistence_labels_the_hook_and_the_boot_helper(
        monkeypatch, tmp_path):
    """The files irq_affinity installs for boot and for libvirt (the helper, the udev rule,
    the libvirt qemu hook, the NetworkManager dispatcher script, the config) each get the
    default context of their host path, through the module's own writes."""
    bindings = StubSelinux(policy=EveryPathPolicy())
    monkeypatch.setitem(sys.modules, SELINUX_BINDINGS, bindings)
    root = build_sim_host(str(tmp_path / "host"))
    os.makedirs(os.path.join(root, irq_pinning.NM_DISPATCHER_DIR.lstrip("/")))
    run_module(irq_affinity, "IrqPinner", {"root": root, "name_regex": "mlx5_comp",
                                           "cpus": "0-1", "persistent": True},
               SimulatedKernel(root))
    labelled = {call[1][len(root):]: call[2] for call in setcalls(bindings)}
    for path in (irq_pinning.HELPER, irq_pinning.LIBVIRT_HOOK, irq_pinning.NM_DISPATCHER,
                 irq_pinning.UDEV_RULE_FILE, irq_pinning.CONFIG_FILE):
        assert labelled[path] == EveryPathPolicy()[(path, stat.S_IFREG)], path
        assert ("matchpathcon", path, stat.S_IFREG) in bindings.calls
