# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the reliability tests share: fake hosts, the host snapshot, and the runners that
drive a module (in process), a role (ansible-playbook on a one-role play) or a playbook
against a fake host.

"Unchanged" is decided by ``host_state``: every path under the case's directory (the
sysfs/procfs root, the ledger, the state and image directories) with its content hash
or symlink target, plus every domain the case's libvirt test-driver connection knows
with its inactive XML. It is taken before and after, and compared.
"""

import inspect
import json
import os
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager

import yaml

from support.fixturegen import HOSTS as FIXTURE_HOSTS
from support.helpers import REPO, ansible_env
from support.sysfs_sim import (
    BuildRefusal, SimulatedKernel, TreeBuilder, build_module, build_sim_host, snapshot)

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PciAddress
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import run_module
from ansible_collections.gpuhost.kvm.plugins.modules import (
    capacity_facts, fleet_place, fleet_report, host_facts, host_files, initramfs,
    iommu_groups_facts, irq_affinity, kernel_cmdline, kserve_loadgen, libvirt_pinned_domain,
    numa_cpuset, sriov_vfs, tenant_ledger, tenant_scrub, vfio_bind)

HERE = os.path.dirname(os.path.abspath(__file__))
INVENTORY = os.path.join(REPO, "inventories", "example", "hosts.yml")
EMPTY_NODE_XML = "<node/>\n"


# -- fake hosts ------------------------------------------------------------------------

class Host:
    """One case's world: ``base`` holds root/ (sys, proc, etc), ledger/, state/, images/."""

    def __init__(self, base, kind="sim", overrides=None):
        self.base = str(base)
        self.root = os.path.join(self.base, "root")
        self.kind = kind
        self.conn = None
        if kind == "sim":
            build_sim_host(self.root)
        else:
            FIXTURE_HOSTS[kind](self.root, **(overrides or {}))
        self.ledger = os.path.join(self.base, "ledger", "ledger.json")
        self.state_dir = os.path.join(self.base, "state")
        self.image_dir = os.path.join(self.base, "images")
        self.kernel = SimulatedKernel(self.root)
        self.node_xml = os.path.join(self.base, "test-node.xml")
        with open(self.node_xml, "w") as handle:
            handle.write(EMPTY_NODE_XML)
        # Files the test itself writes (extra vars, one-role plays) live beside base, so
        # that they are no part of the snapshot.
        self.work = self.base.rstrip("/") + "-work"
        os.makedirs(self.work, exist_ok=True)

    def p(self, host_path):
        return os.path.join(self.root, host_path.lstrip("/"))

    def apply_tweaks(self, tweaks):
        """Data-driven changes that make a host bad in one way (see bad_inputs.yml).

        Besides the header's: sysfs_write {path: value} writes through the simulated
        kernel, netdev {address: name} adds an interface, domains [{name, vcpu_pins,
        hostdevs}] defines other tenants in the case's libvirt connection.
        """
        tweaks = _expand(tweaks or {}, self)
        for host_path in tweaks.get("empty_dir", ()):
            shutil.rmtree(self.p(host_path), ignore_errors=True)
            os.makedirs(self.p(host_path))
        for host_path in tweaks.get("mkdir", ()):
            os.makedirs(self.p(host_path), exist_ok=True)
        for host_path, text in (tweaks.get("write") or {}).items():
            os.makedirs(os.path.dirname(self.p(host_path)), exist_ok=True)
            with open(self.p(host_path), "w") as handle:
                handle.write(text)
        for host_path, hexdata in (tweaks.get("write_hex") or {}).items():
            os.makedirs(os.path.dirname(self.p(host_path)), exist_ok=True)
            with open(self.p(host_path), "wb") as handle:
                handle.write(bytes.fromhex(hexdata))
        for host_path in tweaks.get("mkfifo", ()):
            os.makedirs(os.path.dirname(self.p(host_path)), exist_ok=True)
            os.mkfifo(self.p(host_path))
        for host_path, existing in (tweaks.get("hardlink") or {}).items():
            os.makedirs(os.path.dirname(self.p(host_path)), exist_ok=True)
            os.link(self.p(existing), self.p(host_path))
        for host_path in tweaks.get("remove", ()):
            full = self.p(host_path)
            if os.path.islink(full) or os.path.isfile(full):
                os.unlink(full)
            elif os.path.isdir(full):
                shutil.rmtree(full)
        if tweaks.get("ledger_text") is not None:
            os.makedirs(os.path.dirname(self.ledger), exist_ok=True)
            with open(self.ledger, "w") as handle:
                handle.write(tweaks["ledger_text"])
        # The kernel's part too: writing sriov_numvfs makes the VFs appear.
        for host_path, value in (tweaks.get("sysfs_write") or {}).items():
            SimulatedKernel(self.root).write(host_path, value)
        for address, ifname in (tweaks.get("netdev") or {}).items():
            TreeBuilder(self.root).netdev(address, ifname)
        for domain in tweaks.get("domains", ()):
            self.connection().defineXML(_domain_xml(domain))
        # Each tweak that changes the tree changes what the kernel knows, so start afresh.
        self.kernel = SimulatedKernel(self.root)

    def connection(self):
        """A libvirt test-driver connection private to this host (not test:///default)."""
        if self.conn is None:
            import libvirt
            self.conn = libvirt.open("test://" + os.path.abspath(self.node_xml))
        return self.conn

    def domains(self):
        if self.conn is None:
            return {}
        import libvirt
        return {d.name(): d.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
                for d in self.conn.listAllDomains(0)}


def _domain_xml(domain):
    """Test-driver XML of another tenant's domain: {name, vcpu_pins, hostdevs}."""
    pins = "".join("<vcpupin vcpu='%d' cpuset='%s'/>" % (vcpu, cpus)
                   for vcpu, cpus in enumerate(domain.get("vcpu_pins") or ()))
    hostdevs = ""
    for address in domain.get("hostdevs") or ():
        parsed = PciAddress.parse(address)
        hostdevs += ("<hostdev mode='subsystem' type='pci' managed='yes'><source><address "
                     "domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/></source>"
                     "</hostdev>" % (parsed.domain, parsed.bus, parsed.slot, parsed.function))
    return ("<domain type='test'><name>%s</name><memory>1048576</memory><vcpu>%d</vcpu>"
            "<os><type>hvm</type></os><cputune>%s</cputune><devices>%s</devices></domain>"
            % (domain["name"], max(1, len(domain.get("vcpu_pins") or ())), pins, hostdevs))


def host_state(host):
    """The snapshot that "unchanged" is judged by: every path under the case's directory,
    lock files included (a refusal creates no lock file nor the folder for one)."""
    return {"files": snapshot(host.base), "domains": host.domains()}


def state_difference(before, after):
    """Human-readable list of what changed between two host_state snapshots."""
    changes = []
    for kind in ("files", "domains"):
        old, new = before[kind], after[kind]
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                changes.append("%s %s: %s -> %s" % (kind, key, _short(old.get(key)),
                                                    _short(new.get(key))))
    return changes


def _short(value):
    text = "(absent)" if value is None else str(value)
    return text if len(text) < 70 else text[:67] + "..."


# -- running modules in process ----------------------------------------------------------

def _build(module_file, args, check_mode=False):
    """The module, or the BuildRefusal (a GpuhostError) of an option refused while it
    is built (runner.new_module)."""
    return build_module(module_file, dict(args, _ansible_check_mode=check_mode,
                                          _ansible_diff=True))


def _with_root(args, host):
    args = dict(args)
    args.setdefault("root", host.root)
    return args


def _expand(value, host):
    """Case data may name the host's own paths: {root}, {base}, {ledger}, {state}."""
    if isinstance(value, str):
        for token, path in (("{root}", host.root), ("{base}", host.base),
                            ("{ledger}", host.ledger), ("{state}", host.state_dir),
                            ("{images}", host.image_dir)):
            value = value.replace(token, path)
        return value
    if isinstance(value, list):
        return [_expand(v, host) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, host) for k, v in value.items()}
    return value


# What a module run leaves for the refusal checks: the worker (its ``result`` is what
# main() hands to fail_json with the error's keys) and the commands it tried to start.
_LAST = threading.local()


def _go(worker):
    """Run a module's worker, keeping it where ``run_module_refusal`` finds it even when
    ``run()`` raises."""
    _LAST.worker = worker
    worker.run()
    return worker


class CommandStarted(AssertionError):
    """A module tried to start an external command where none may run."""


# Every way Python code starts a process: subprocess (the modules' run_command,
# engine/commands.py, uses Popen), os.system, os.popen (Popen again), the exec*/spawn* families and fork.
_OS_STARTERS = ("system", "posix_spawn", "posix_spawnp", "fork", "forkpty", "execv", "execve",
                "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv",
                "spawnve", "spawnvp", "spawnvpe")


@contextmanager
def no_commands():
    """Record (and refuse to start) every external command for the length of the block;
    yields the list of argv tried. A refusal must come before the first command."""
    started = []

    def refuse(how):
        def starter(*args, **kwargs):
            argv = args[0] if args else kwargs.get("args")
            started.append("%s %s" % (how, argv if isinstance(argv, str) else list(argv or ())))
            raise CommandStarted("%s started %r in a case that must be refused before any "
                                 "command" % (how, argv))
        return starter

    class RefusedPopen(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            refuse("subprocess.Popen")(args)

    saved = {"Popen": subprocess.Popen}
    subprocess.Popen = RefusedPopen
    for name in _OS_STARTERS:
        if hasattr(os, name):
            saved[name] = getattr(os, name)
            setattr(os, name, refuse("os." + name))
    try:
        yield started
    finally:
        subprocess.Popen = saved.pop("Popen")
        for name, function in saved.items():
            setattr(os, name, function)


class ModuleOutcome:
    """One module run of a refusal case: ``error`` (the GpuhostError, None when it
    succeeded), ``result`` (the dict main() would pass to fail_json or exit_json) and
    ``commands`` (external commands it tried to start)."""

    def __init__(self, error, result, commands):
        self.error = error
        self.result = result
        self.commands = commands


def run_vfio_bind(host, args, check_mode=False):
    module = _build(vfio_bind, _with_root(args, host), check_mode)
    worker = vfio_bind.VfioBinder(module, writer=host.kernel)
    return _go(worker)


def run_sriov_vfs(host, args, check_mode=False):
    module = _build(sriov_vfs, _with_root(args, host), check_mode)
    worker = sriov_vfs.SriovConfigurator(module, writer=host.kernel)
    return _go(worker)


def run_irq_affinity(host, args, check_mode=False):
    module = _build(irq_affinity, _with_root(args, host), check_mode)
    worker = irq_affinity.IrqPinner(module, writer=host.kernel)
    return _go(worker)


def run_numa_cpuset(host, args, check_mode=False):
    worker = numa_cpuset.NumaCpusetPlanner(_build(numa_cpuset, _with_root(args, host),
                                                  check_mode))
    return _go(worker)


def run_iommu_groups_facts(host, args, check_mode=False):
    worker = iommu_groups_facts.IommuGroupsFacts(_build(iommu_groups_facts,
                                                        _with_root(args, host), check_mode))
    return _go(worker)


def run_host_facts(host, args, check_mode=False):
    worker = host_facts.HostFacts(_build(host_facts, _with_root(args, host), check_mode))
    return _go(worker)


def run_tenant_ledger(host, args, check_mode=False):
    args = _with_root(args, host)
    args.setdefault("path", host.ledger)
    worker = tenant_ledger.TenantLedger(_build(tenant_ledger, args, check_mode))
    return _go(worker)


def run_tenant_scrub(host, args, check_mode=False):
    args = _with_root(args, host)
    args.setdefault("ledger_path", host.ledger)
    worker = tenant_scrub.TenantScrub(_build(tenant_scrub, args, check_mode),
                                      writer=host.kernel)
    return _go(worker)


def run_libvirt_pinned_domain(host, args, check_mode=False):
    """With ``uri`` given the module connects by itself; otherwise it gets the host's
    private test-driver connection."""
    args = _with_root(args, host)
    args.setdefault("state_dir", host.state_dir)
    args.setdefault("domain_type", "test")
    own_uri = "uri" in args
    args.setdefault("uri", "test:///unused-the-connection-is-given")
    module = _build(libvirt_pinned_domain, args, check_mode)
    worker = libvirt_pinned_domain.PinnedDomain(
        module, conn=None if own_uri else host.connection())
    return _go(worker)


def run_capacity_facts(host, args, check_mode=False):
    args = _with_root(args, host)
    args.setdefault("ledger_path", host.ledger)
    worker = capacity_facts.CapacityFacts(_build(capacity_facts, args, check_mode))
    return _go(worker)


def run_fleet_place(host, args, check_mode=False):
    """Runs on the controller: no root; the case's hosts are data."""
    worker = fleet_place.FleetPlace(_build(fleet_place, args, check_mode))
    return _go(worker)


def run_fleet_report(host, args, check_mode=False):
    args = dict(args)
    args.setdefault("dest", os.path.join(host.base, "reports"))
    worker = fleet_report.FleetReport(_build(fleet_report, args, check_mode))
    return _go(worker)


def run_kserve_loadgen(host, args, check_mode=False):
    """Runs in the tenant guest against a server; every case is refused before the
    first request, so no server is needed."""
    worker = kserve_loadgen.LoadGenerator(_build(kserve_loadgen, args, check_mode))
    return _go(worker)


def _writing_module(module_file, class_name):
    """The runner of a module that writes host files through its own HostWriter (no
    simulated kernel needed): host_files, kernel_cmdline, initramfs."""
    def run(host, args, check_mode=False):
        module = _build(module_file, _with_root(args, host), check_mode)
        return _go(getattr(module_file, class_name)(module, writer=HostWriter(host.root)))
    return run


MODULE_RUNNERS = {
    "host_files": _writing_module(host_files, "HostFiles"),
    "kernel_cmdline": _writing_module(kernel_cmdline, "KernelCmdline"),
    "initramfs": _writing_module(initramfs, "Initramfs"),
    "vfio_bind": run_vfio_bind,
    "sriov_vfs": run_sriov_vfs,
    "irq_affinity": run_irq_affinity,
    "numa_cpuset": run_numa_cpuset,
    "iommu_groups_facts": run_iommu_groups_facts,
    "host_facts": run_host_facts,
    "tenant_ledger": run_tenant_ledger,
    "tenant_scrub": run_tenant_scrub,
    "libvirt_pinned_domain": run_libvirt_pinned_domain,
    "capacity_facts": run_capacity_facts,
    "fleet_place": run_fleet_place,
    "fleet_report": run_fleet_report,
    "kserve_loadgen": run_kserve_loadgen,
}


def run_module_case(host, target, args, check_mode=False):
    """Run one module; return the GpuhostError it raised, or None when it succeeded."""
    try:
        MODULE_RUNNERS[target](host, _expand(args, host), check_mode)
    except GpuhostError as err:
        return err
    return None


class _Reported(Exception):
    """What a module's fail_json or exit_json was handed."""

    def __init__(self, result):
        super().__init__("reported")
        self.result = result


class _ReportingModule:
    """Stands in for AnsibleModule where only the reporting calls are made."""

    def fail_json(self, **result):
        raise _Reported(dict(result, failed=True))

    def exit_json(self, **result):
        raise _Reported(result)


class _Replay:
    """A worker that has already run: ``run()`` raises the error it raised, ``result`` is
    its result, so main()'s own reporting code can turn them into fail_json's dict."""

    def __init__(self, worker, error):
        self.worker, self.error = worker, error

    @property
    def result(self):
        return self.worker.result if self.worker is not None else {}

    @property
    def failed_result(self):
        return getattr(self.worker, "failed_result", None)

    def run(self):
        raise self.error


def _failure_result(target, worker, error):
    """The dict the module's main() hands to fail_json for ``error``, from the very
    function every main() reports through (runner.run_module): a host-changing module
    (``changes_host=True``) says changed=false for a refusal or a rolled-back run,
    whatever the worker planned."""
    # Each target is named after its module file (imported above under that name).
    main = getattr(sys.modules["ansible_collections.gpuhost.kvm.plugins.modules." + target], "main")
    try:
        run_module(_ReportingModule(), _Replay(worker, error),
                   changes_host="changes_host=True" in inspect.getsource(main))
    except _Reported as reported:
        return reported.result
    raise AssertionError("run_module reported nothing")


def run_module_refusal(host, target, args, check_mode=False):
    """Run one module of a case that must be refused, with every external command
    refused (``no_commands``); return its ModuleOutcome, whose result is the dict the
    module's main() would hand to fail_json (``_failure_result``)."""
    _LAST.worker = None
    error = None
    with no_commands() as started:
        try:
            MODULE_RUNNERS[target](host, _expand(args, host), check_mode)
        except GpuhostError as err:
            error = err
    worker = _LAST.worker
    _LAST.worker = None
    if error is None:
        result = dict(worker.result) if worker is not None else {}
    elif isinstance(error, BuildRefusal):
        result = dict(error.result)         # what the module printed, before any worker
    else:
        result = _failure_result(target, worker, error)
    return ModuleOutcome(error, result, list(started))


# -- roles and playbooks through ansible-playbook ---------------------------------------

def host_extra_vars(host):
    """Point the inventory's hk-gpu-01 (or localhost) at the fake host, locally."""
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpuhost_sysfs_root": host.root,
        "gpuhost_ledger_path": host.ledger,
        "gpuhost_state_dir": host.state_dir,
        "gpuhost_libvirt_uri": "test:///default",
        "plan_output_dir": os.path.join(host.base, "reports"),
        "validate_report_dir": os.path.join(host.base, "reports"),
        "vm_image_dir": host.image_dir,
        "vm_domain_type": "test",
    }


def run_playbook(host, playbook, extra=None, check=True, limit="hk-gpu-01", verbosity=0,
                 timeout=300, env=None):
    """ansible-playbook on the example inventory with the fake host's variables; returns
    the CompletedProcess (stdout+stderr merged into .output)."""
    variables = host_extra_vars(host)
    variables.update(extra or {})
    vars_file = os.path.join(host.work, "extra-%d.json" % len(os.listdir(host.work)))
    with open(vars_file, "w") as handle:
        json.dump(variables, handle)
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), playbook,
            "-i", INVENTORY, "-e", "@" + vars_file]
    if limit:
        argv += ["-l", limit]
    if check:
        argv.append("--check")
    if verbosity:
        argv.append("-" + "v" * verbosity)
    proc = subprocess.run(argv, cwd=REPO, env=env or ansible_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)
    proc.output = proc.stdout + proc.stderr
    return proc


def role_playbook(host, role):
    """A play of one role (or a list of roles) against hk-gpu-01, so that the example
    inventory's group_vars and host_vars apply."""
    roles = [role] if isinstance(role, str) else list(role)
    path = os.path.join(host.work, "role-%s.yml" % "-".join(roles))
    play = [{"name": "Reliability: %s" % ", ".join(roles),
             "hosts": "gpu_hosts", "gather_facts": False,
             "roles": [{"role": "gpuhost.kvm.%s" % r} for r in roles]}]
    with open(path, "w") as handle:
        yaml.safe_dump(play, handle)
    return path


def run_role_case(host, role, variables, check=True, env=None):
    return run_playbook(host, role_playbook(host, role), variables, check=check, env=env)


def run_playbook_case(host, playbook, variables, check=True, env=None):
    return run_playbook(host, os.path.join(REPO, playbook), variables, check=check, env=env)


def load_cases(name="bad_inputs.yml"):
    with open(os.path.join(HERE, name)) as handle:
        return yaml.safe_load(handle)
