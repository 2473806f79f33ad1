# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""irq_affinity decides, then acts: a link at irqbalance_config and an odd
/sys/devices/system/cpu/online are refused before anything is planned; every refusal
names an option of the module (checked against its argument_spec) and has exactly one
"Fix:"."""

import os
import re

import pytest

from support.sysfs_sim import SimulatedKernel, build_sim_host, run_module
from support.planted_links import _options, plant, refused

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import topology
from ansible_collections.gpuhost.kvm.plugins.modules import irq_affinity
from support import REPO


@pytest.fixture
def sim(tmp_path):
    return SimulatedKernel(build_sim_host(str(tmp_path / "host")))


IRQ_BAN = dict(irqs=[60], cpus="0", irqbalance_banned_cpus="2-7", irqbalance_format="cpulist")


@pytest.mark.parametrize("args", [IRQ_BAN, dict(irqs=[60], cpus="0"),
                                  dict(irqs=[60], cpus="0", persistent=True)])
def test_irq_link_at_irqbalance_config_is_refused_unread_naming_the_option(sim, args):
    plant(sim, "/etc/sysconfig/irqbalance", "this is not shell\n")
    err = refused(sim, irq_affinity, "IrqPinner", args)
    assert err.field == "irqbalance_config"
    assert "/etc/sysconfig/irqbalance is a symbolic link (to " in err.message
    assert "not KEY=value" not in err.message


@pytest.mark.parametrize("text", ["0-\x007", "\x000-7\x00x", "", "zero", "(null)", "0-99999999999"])
def test_irq_odd_cpu_online_is_refused_before_planning(sim, text):
    # the ban list goes into irqbalance's config, which a host with irqbalance has
    os.makedirs(sim.path("/etc/sysconfig"), exist_ok=True)
    with open(sim.path("/etc/sysconfig/irqbalance"), "w") as handle:
        handle.write("IRQBALANCE_ONESHOT=0\n")
    with open(sim.path("/sys/devices/system/cpu/online"), "w") as handle:
        handle.write(text + "\n")
    err = refused(sim, irq_affinity, "IrqPinner", IRQ_BAN)
    assert err.field == "root"
    assert "/sys/devices/system/cpu/online holds " in err.message


def test_irq_online_with_padding_nuls_is_still_read(sim):
    with open(sim.path("/sys/devices/system/cpu/online"), "w") as handle:
        handle.write("0-7\x00\x00\n")
    assert topology.read_online_cpus(sim.root) == tuple(range(8))


def test_irq_odd_affinity_of_an_irq_is_unknown_not_a_cpulist_error(sim):
    # an IRQ with a /proc/irq entry and no /proc/interrupts row is read on its own
    folder = sim.path("/proc/irq/61")
    os.makedirs(folder, exist_ok=True)
    for name in ("smp_affinity_list", "effective_affinity_list"):
        with open(os.path.join(folder, name), "w") as handle:
            handle.write("0-\x003\n")
    worker = run_module(irq_affinity, "IrqPinner", dict(root=sim.root, irqs=[61], cpus="0"),
                        sim, check_mode=True)
    assert worker.result["changed_irqs"] == [61]


def test_irq_every_literal_field_is_an_irq_affinity_option():
    options = _options(irq_affinity, dict(irqs=[60], cpus="0"))
    for name in ("plugins/module_utils/changes/irq_affinity/pinning.py", "plugins/module_utils/changes/irq_affinity/irqbalance.py",
                 "plugins/module_utils/host/irq_pins.py", "plugins/module_utils/host/irqbalance_config.py",
                 "plugins/modules/irq_affinity.py"):
        with open(os.path.join(REPO, name), encoding="utf-8") as handle:
            fields = set(re.findall(r'field="(\w+)"', handle.read()))
        assert fields <= options, (name, fields - options)
