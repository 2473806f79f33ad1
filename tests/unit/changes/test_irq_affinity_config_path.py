"""irq_affinity's irqbalance_config goes through the shared validator
(validators.config_path), like every config path: absolute, no control characters,
plain, and a file (under root) when it is there; the error names irqbalance_config."""

import os

import pytest
from ansible.module_utils.basic import AnsibleModule

from support.sysfs_sim import SimulatedKernel, TreeBuilder, build_sim_host, run_module, snapshot

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import validators
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import irq_affinity


@pytest.fixture
def sim(tmp_path):
    return SimulatedKernel(build_sim_host(str(tmp_path / "host")))


def failed(sim, **args):
    args.setdefault("root", sim.root)
    before = snapshot(sim.root)
    with pytest.raises(GpuhostError) as info:
        run_module(irq_affinity, "IrqPinner", args, sim)
    assert snapshot(sim.root) == before
    return info.value


@pytest.mark.parametrize("value, words", [
    ("etc/sysconfig/irqbalance", "is a relative path"),
    ("/etc/sysconfig/irqbalance\n", "holds control characters"),
    ("", "is not a path"),
])
def test_a_bad_irqbalance_config_is_refused_naming_the_option(sim, value, words):
    TreeBuilder(sim.root).write("/etc/sysconfig/irqbalance", "IRQBALANCE_ONESHOT=0\n")
    err = failed(sim, irqs=[60], cpus="0", irqbalance_banned_cpus="2-7",
                 irqbalance_format="cpulist", irqbalance_config=value)
    assert err.field == "irqbalance_config" and words in err.message, err.message


def test_a_relative_irqbalance_config_is_refused_without_a_ban_list_too(sim):
    err = failed(sim, irqs=[60], cpus="0", irqbalance_config="etc/default/irqbalance")
    assert err.field == "irqbalance_config" and "is a relative path" in err.message


def test_a_directory_at_irqbalance_config_is_refused_by_the_validator(sim):
    os.makedirs(sim.path("/etc/sysconfig/irqbalance"))
    err = failed(sim, irqs=[60], cpus="0", irqbalance_banned_cpus="2-7",
                 irqbalance_format="cpulist")
    assert err.field == "irqbalance_config"
    assert "/etc/sysconfig/irqbalance is not a file" in err.message


def test_irqbalance_config_is_written_in_its_plain_form(sim):
    TreeBuilder(sim.root).write("/etc/default/irqbalance", "IRQBALANCE_ONESHOT=0\n")
    run_module(irq_affinity, "IrqPinner",
               dict(root=sim.root, irqs=[60], cpus="0", irqbalance_banned_cpus="2-7",
                    irqbalance_format="cpulist",
                    irqbalance_config="/etc//default/./irqbalance"), sim)
    assert "IRQBALANCE_BANNED_CPULIST=2-7" in sim.read_file("/etc/default/irqbalance")


def test_config_path_under_a_root_checks_the_file_there(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "irqbalance").write_text("A=1\n")
    assert validators.config_path("/etc/irqbalance", "f", root=str(tmp_path)) == "/etc/irqbalance"
    assert validators.config_path("/etc/missing", "f", root=str(tmp_path),
                                  missing_ok=True) == "/etc/missing"
    with pytest.raises(GpuhostError) as info:
        validators.config_path("/etc/missing", "f", root=str(tmp_path))
    assert info.value.field == "f" and "does not exist" in info.value.message
    with pytest.raises(GpuhostError) as info:
        validators.config_path("/etc", "f", root=str(tmp_path), missing_ok=True)
    assert "/etc is not a file" in info.value.message


def test_a_missing_irqbalance_config_is_refused_not_created(sim):
    # Before: the module created /etc/sysconfig/irqbalance from nothing.
    err = failed(sim, irqs=[60], cpus="0", irqbalance_banned_cpus="2-7",
                 irqbalance_format="cpulist")
    assert err.field == "irqbalance_config" and "never created" in err.fix
    assert not os.path.exists(sim.path("/etc/sysconfig/irqbalance"))


@pytest.mark.parametrize("value", ["/../outside/irqbalance", "/etc/sysconfig/../../../x"])
def test_an_irqbalance_config_with_dotdot_is_refused(sim, value):
    # Before: '..' was normalised away, naming another file than the one given.
    err = failed(sim, irqs=[60], cpus="0", irqbalance_banned_cpus="2-7",
                 irqbalance_format="cpulist", irqbalance_config=value)
    assert err.field == "irqbalance_config" and "'..'" in err.message


def test_check_mode_before_irqbalance_is_installed_shows_the_ban_and_warns(sim, monkeypatch):
    """Check mode on a fresh host runs before the package task has installed the file:
    the ban list is shown, nothing is written, and the real run would still refuse."""
    warnings = []
    monkeypatch.setattr(AnsibleModule, "warn", lambda self, text: warnings.append(text))
    before = snapshot(sim.root)
    worker = run_module(irq_affinity, "IrqPinner",
                        dict(root=sim.root, irqs=[60], cpus="0", irqbalance_banned_cpus="2-7",
                             irqbalance_format="cpulist"), sim, check_mode=True)
    assert snapshot(sim.root) == before
    assert worker.result["changed"] is True
    assert any("/etc/sysconfig/irqbalance does not exist yet" in w for w in warnings), warnings
    err = failed(sim, irqs=[60], cpus="0", irqbalance_banned_cpus="2-7",
                 irqbalance_format="cpulist")
    assert err.field == "irqbalance_config" and "never created" in err.fix
