# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A symbolic link planted at a state file (vfio_bind, sriov_vfs, irq_affinity)
is refused before it is read (state_file.read_state_nofollow: no follow, O_NOFOLLOW), naming the
option that keeps the file, with exactly one "Fix:"."""

import os

import pytest

from support.sysfs_sim import SimulatedKernel, TreeBuilder, build_sim_host, run_module

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import read_host_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.modules import irq_affinity, sriov_vfs, vfio_bind
from support.planted_links import plant, refused

GPU = "0000:41:00.0"


@pytest.fixture
def sim(tmp_path):
    return SimulatedKernel(build_sim_host(str(tmp_path / "host")))


def test_vfio_state_file_link_is_refused_unread(sim):
    plant(sim, "/var/lib/gpuhost/vfio-bind.json")
    err = refused(sim, vfio_bind, "VfioBinder", dict(devices=[GPU]))
    assert "/var/lib/gpuhost/vfio-bind.json is a symbolic link (to " in err.message
    assert "JSON" not in err.message


def test_vfio_state_file_link_is_refused_in_check_mode_too(sim):
    plant(sim, "/var/lib/gpuhost/vfio-bind.json")
    with pytest.raises(GpuhostError) as info:
        run_module(vfio_bind, "VfioBinder", dict(devices=[GPU], root=sim.root), sim,
                   check_mode=True)
    assert "is a symbolic link" in info.value.message


def test_sriov_state_file_link_is_refused_unread(sim):
    plant(sim, "/etc/gpuhost/sriov.json")
    err = refused(sim, sriov_vfs, "SriovConfigurator",
                  dict(pf="eno1", num_vfs=2, persistent=True))
    assert err.field == "persistent" and "JSON" not in err.message
    assert "/etc/gpuhost/sriov.json is a symbolic link (to " in err.message


def test_irq_state_file_link_is_refused_unread(sim):
    plant(sim, "/etc/gpuhost/irq-affinity.json")
    err = refused(sim, irq_affinity, "IrqPinner", dict(irqs=[60], cpus="0", persistent=True))
    assert err.field == "persistent" and "JSON" not in err.message


def test_read_host_text_never_opens_a_link(tmp_path, monkeypatch):
    root = str(tmp_path)
    TreeBuilder(root).write("/etc/real", "x\n")
    os.symlink(os.path.join(root, "etc/real"), os.path.join(root, "etc/link"))
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: opened.append(p) or real_open(p, *a, **k))
    with pytest.raises(GpuhostError) as info:
        read_host_text(HostWriter(root), "/etc/link", "opt", "fix it")
    assert info.value.field == "opt" and opened == []
    assert read_host_text(HostWriter(root), "/etc/real", "opt", "f") == "x\n"
    assert read_host_text(HostWriter(root), "/etc/none", "opt", "f") is None
