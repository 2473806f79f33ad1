# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every option of every module, fuzzed from the module's own argument spec.

The modules are found in plugins/modules and their argument specs read from their own
``build_module()`` (``module_specs``), so a module added later is fuzzed with no case
written for it. For every option, hostile values of its declared type run through the
module's own ``main()`` in process (``run_main``) against a fake host (harness.Host):

* the fixed hostile values of its type, each named by its class (``hostile_values``; in
  tools/test the first value of each class, in tools/acceptance all of them): strings
  with a newline, a NUL, control characters, a leading ``-``, markup, 10,000 characters,
  look-alike Unicode digits; paths with ``..``, absolute links, links out of root, a FIFO,
  a directory, a device node, a hard link; numbers 0, negative, NaN, infinity, 10**400;
  lists of a million items; dicts of the wrong shape; a value of another type;
* then hypothesis' own values of that type (fixed seed: ``derandomize=True``,
  ``database=None``), ``GPUHOST_FUZZ_EXAMPLES`` per option.

Every run is bounded (``HANG_S``, an interval timer) and must end in one of: refused
(fail_json), accepted (exit_json), or stopped at its first external command or network
connection, which the recorder refuses (harness.no_commands, ``no_connections``), so
nothing runs. Every run asserts: no traceback (no exception out of main(), no
``exception`` or ``module_stderr`` in the result), no hang, the fake host unchanged
(``fast_state`` after each run: kind, size, mtime and inode of every path, and the
libvirt domains; harness.host_state's content digests after each option) and, for a
refusal, no command started, changed not true and a ``field`` or message that names
the option (or quotes the value, for a refusal of how two options fit together).

Check mode and not: every example runs in check mode first. A refusal there must come
before any change, so the same value runs again outside check mode and must be refused
the same way, with nothing changed. A value that check mode accepts is one the option
takes (0 for a count that allows 0, a path that names nothing yet): it is not run
outside check mode, where applying it may rightly change the host; check mode must not
have changed it. The run's options besides the fuzzed one are a baseline that the
module accepts on the fake host in check mode (``BASELINE``, checked by a test), so
that a refusal can be pinned on the fuzzed option.

Not seen here: libvirt's side. A module opens its own test-driver connection to the
fake host's node XML, whose domains live in that connection only, so the snapshot shows
no domain a run defined; a refusal's libvirt side is checked by test_bad_inputs.py,
which hands the module the host's own connection.

The time bound: ``GPUHOST_FUZZ_BUDGET_S`` (240 s by default, 900 s when tools/acceptance
records its run), after which the remaining options run their fixed hostile values
only; the totals (modules, options, examples, outcomes, seconds) are written to
tests/output/fuzz-modules.json and printed.
"""

import contextlib
import glob
import importlib
import io
import json
import math
import os
import re
import signal
import socket
import stat
import time
import traceback
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.module_args import patch_module_args

import harness
from support.helpers import REPO

from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning import fleet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import MAX_LIST_ITEMS

MODULE_PACKAGE = "ansible_collections.gpuhost.kvm.plugins.modules."
MODULE_NAMES = sorted(os.path.basename(p)[:-3]
                      for p in glob.glob(os.path.join(REPO, "plugins", "modules", "*.py"))
                      if not p.endswith("__init__.py"))
ACCEPTANCE = bool(os.environ.get("GPUHOST_ACCEPTANCE_RECORD"))
BUDGET_S = float(os.environ.get("GPUHOST_FUZZ_BUDGET_S") or (900 if ACCEPTANCE else 240))
EXAMPLES = int(os.environ.get("GPUHOST_FUZZ_EXAMPLES") or (30 if ACCEPTANCE else 6))
HANG_S = 20
SUMMARY = os.path.join(REPO, "tests", "output", "fuzz-modules.json")


# -- the modules and their options ---------------------------------------------------------

class _SpecSeen(RuntimeError):
    """Stops build_module() once its AnsibleModule is called (a RuntimeError:
    runner.new_module lets it through, as it does validate-modules')."""


def module_spec(name):
    """``name``'s argument spec and AnsibleModule rules, from its build_module()."""
    module_file = importlib.import_module(MODULE_PACKAGE + name)
    seen = {}

    def capture(**kwargs):
        seen.update(kwargs)
        raise _SpecSeen(name)
    with mock.patch.object(module_file, "AnsibleModule", capture):
        with pytest.raises(_SpecSeen):
            module_file.build_module()
    return seen["argument_spec"]


SPECS = {name: module_spec(name) for name in MODULE_NAMES}
OPTIONS = [(name, option) for name in MODULE_NAMES for option in sorted(SPECS[name])]

# What the fake host gives the options that name its places, for every module that has
# them; the fuzzed option replaces its own.
HOST_PLACES = {
    "root": lambda host: host.root,
    "ledger_path": lambda host: host.ledger,
    "path": lambda host: host.ledger,
    "state_dir": lambda host: host.state_dir,
    "record_path": lambda host: os.path.join(host.base, "state", "drain.json"),
    "dest": lambda host: os.path.join(host.base, "reports"),
    "uri": lambda host: "test://" + host.node_xml,
    "libvirt_uri": lambda host: "test://" + host.node_xml,
    "url": lambda host: "http://127.0.0.1:9",
}
INPUTS = [{"name": "x", "shape": [1], "datatype": "FP32"}]
# Valid values of the required options (and of those a rule requires), which the module
# accepts on the fake host in check mode; a module without an entry gets a plain value
# of each required option's type (``baseline``).
TENANT = {"name": "t1", "gpus": 0, "vcpus": 2, "memory_gib": 2, "hugepage_size": "2M"}
BASELINE = {
    "container_facts": {"image": "registry.example/server:1"},
    "fleet_place": {"tenant": TENANT, "hosts": lambda host: {"sim": {"candidate": dict(
        fleet.evaluate_host(read_host_topology(host.root), None, TENANT), tenant="t1")}}},
    "fabric_partition": {"fmpm": "/bin/sh"},
    "fleet_report": {"hosts": {}},
    "gpu_health": {"nvidia_smi": "/bin/sh"},
    "host_files": {"files": [{"path": "/etc/gpuhost-fuzz.conf", "content": "x\n",
                              "mode": "0644"}]},
    "host_units": {"units": [{"name": "gpuhost-fuzz.service"}]},
    "initramfs": {"image_pattern": "/boot/initrd.img-%s",
                  "rebuild_argv": ["update-initramfs", "-u", "-k", "all"]},
    "irq_affinity": {"irqs": [60], "cpus": "0"},
    "kernel_cmdline": {"args": ["iommu=pt"], "method": "grub"},
    "kserve_loadgen": {"model": "m", "requests": 1, "inputs": INPUTS},
    "libvirt_pinned_domain": {"name": "t1", "vcpus": 2, "vcpu_pins": [1, 2], "memory_gib": 1,
                              "hugepage_size": "none", "memory_nodes": "0",
                              "domain_type": "test"},
    "sriov_vfs": {"pf": "eno1", "num_vfs": 2},
    "tenant_ledger": {"tenants": [{"name": "t1", "vcpus": 2, "memory_gib": 2,
                                   "hugepage_size": "2M"}]},
    "tenant_scrub": {"name": "t1"},
    "vfio_bind": {"devices": ["0000:41:00.0"]},
}
PLAIN = {"str": "x", "path": "/x", "int": 1, "float": 1.0, "bool": False, "list": [],
         "dict": {}, "raw": "x"}


def baseline(name, host):
    spec = SPECS[name]
    args = {option: place(host) for option, place in HOST_PLACES.items() if option in spec}
    for option, rules in spec.items():
        if rules.get("required") and option not in BASELINE.get(name, {}):
            args[option] = (rules.get("choices") or [PLAIN[rules.get("type") or "str"]])[0]
    args.update({option: value(host) if callable(value) else value
                 for option, value in BASELINE.get(name, {}).items()})
    return args


# -- hostile values, by class ------------------------------------------------------------

# A million items in tools/acceptance; in tools/test the smallest list the bound refuses
# (runner.MAX_LIST_ITEMS + 1): ansible-core's own decoding and echo of the arguments
# takes most of the ten seconds a million-item run costs.
MANY_ITEMS = 10 ** 6 if ACCEPTANCE else MAX_LIST_ITEMS + 1


def _one_per_class(values):
    """Outside tools/acceptance, the first value of each class only (the time bound)."""
    if ACCEPTANCE:
        return values
    seen = set()
    return [(cls, value) for cls, value in values if not (cls in seen or seen.add(cls))]


def _strings():
    return _one_per_class([
        ("newline", "a\nb"), ("nul", "a\x00b"), ("control", "a\x1b[2Jb\x7f\r"),
        ("leading-dash", "--help"), ("leading-dash", "-oProxyCommand=sh"),
        ("markup", "<script>alert(1)</script>&amp;"), ("markup", "{{ lookup('pipe','id') }}"),
        ("long", "x" * 10000), ("lookalike-digits", "\u0661\u0662"),
        ("lookalike-digits", "\uff11\uff12"), ("lookalike-digits", "\U0001d7cf"),
        ("empty", ""), ("blank", "  \t "),
    ])


def _paths(host):
    out = [("dotdot", "../../../../etc/passwd"), ("dotdot", "/var/../../etc"),
           ("relative", "etc/passwd")]
    for cls, rel in (("fifo", "fuzz/fifo"), ("directory", "fuzz/dir"),
                     ("device-node", "fuzz/device"), ("hard-link", "fuzz/hardlink"),
                     ("link-out-of-root", "fuzz/link-out"), ("absolute-link", "fuzz/link-abs")):
        out += [(cls, os.path.join(host.root, rel)), (cls, "/" + rel)]
    return _one_per_class(out + [(cls, value) for cls, value in _strings()
                                 if cls not in ("long", "empty", "blank", "lookalike-digits")])


def plant_path_kinds(host):
    """The kinds of file a hostile path names, under root/fuzz/."""
    where = host.p("fuzz")
    os.makedirs(os.path.join(where, "dir"))
    os.mkfifo(os.path.join(where, "fifo"))
    target = os.path.join(where, "file")
    with open(target, "w") as handle:
        handle.write("x\n")
    os.link(target, os.path.join(where, "hardlink"))
    try:
        os.mknod(os.path.join(where, "device"), 0o600 | 0o020000, os.makedev(1, 3))
    except OSError:     # no CAP_MKNOD here: a link to the host's /dev/null instead
        os.symlink("/dev/null", os.path.join(where, "device"))
    os.symlink("/etc/passwd", os.path.join(where, "link-out"))
    os.symlink(os.path.join(host.root, "etc"), os.path.join(where, "link-abs"))


def _numbers():
    return _one_per_class([
        ("huge", 10 ** 400), ("zero", 0), ("negative", -1), ("nan", float("nan")),
        ("infinity", float("inf")), ("lookalike-digits", "\u0661"), ("float-for-int", 1.5),
        ("negative", -2 ** 63), ("huge", 2 ** 64), ("huge", -10 ** 400),
        ("infinity", float("-inf")), ("nan", "NaN"), ("infinity", "inf"), ("huge", "1e400")])


def _wrong_types():
    return [("wrong-type", [1]), ("wrong-type", {"a": 1}), ("wrong-type", None),
            ("wrong-type", True)]


def hostile_values(rules, host):
    """(class, value) of every fixed hostile value of an option's declared type."""
    kind = rules.get("type") or "str"
    if kind in ("str", "raw"):
        values = _strings()
    elif kind == "path":
        values = _paths(host)
    elif kind in ("int", "float"):
        values = _numbers()
    elif kind == "bool":
        # ansible-core's boolean() strips white space: "yes\n" is true, "yes\x00" no bool
        values = [("not-a-bool", "maybe"), ("not-a-bool", 2), ("not-a-bool", "yes\x00")]
    elif kind == "list":
        element = {"type": rules.get("elements") or "raw", "options": rules.get("options")}
        values = [("million-items", [_plain(element)] * MANY_ITEMS),
                  ("wrong-elements", [None]), ("wrong-elements", [[1]]),
                  ("wrong-elements", [{"a": 1}]), ("comma-string", "a,b")]
        values += [("element-" + cls, [value]) for cls, value in hostile_values(element, host)
                   if cls not in ("million-items", "wrong-type")][:8 if ACCEPTANCE else 4]
    elif kind == "dict":
        values = [("dict-shape", [1]), ("dict-shape", "a=1"), ("dict-shape", {"no such": 1}),
                  ("dict-shape", {"a": {"b": {"c": [1]}}})]
        for sub, sub_rules in sorted((rules.get("options") or {}).items()):
            values += [("sub-%s-%s" % (sub, cls), {sub: value})
                       for cls, value in hostile_values(sub_rules, host)[:4 if ACCEPTANCE else 2]]
    else:
        values = []
    return values + _wrong_types()


def _plain(rules):
    if rules.get("options"):
        return {}
    return PLAIN.get(rules.get("type") or "str", "x")


def strategy(rules):
    """hypothesis' values of an option's declared type (nested for lists and dicts)."""
    kind = rules.get("type") or "str"
    text = st.text(min_size=0, max_size=40)
    if kind in ("str", "raw", "path"):
        return st.one_of(text, st.builds(lambda a, b: a + "\n" + b, text, text),
                         st.builds(lambda a: "-" + a, text), st.just("/").map(str) | text.map(
                             lambda a: "/../" + a))
    if kind == "int":
        return st.one_of(st.integers(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                         st.floats(allow_nan=True, allow_infinity=True))
    if kind == "float":
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers())
    if kind == "bool":
        return st.one_of(st.booleans(), text, st.integers())
    if kind == "list":
        element = {"type": rules.get("elements") or "raw", "options": rules.get("options")}
        return st.lists(strategy(element), max_size=5)
    if kind == "dict":
        subs = rules.get("options")
        if not subs:
            return st.dictionaries(text, st.one_of(text, st.integers()), max_size=4)
        return st.fixed_dictionaries({}, optional={name: strategy(sub)
                                                   for name, sub in subs.items()})
    return st.none()


# -- one run -------------------------------------------------------------------------------

class Hang(Exception):
    """The run went past HANG_S."""


@contextlib.contextmanager
def bounded(seconds):
    def expire(signum, frame):
        raise Hang("past %d s" % seconds)
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def no_connections(started):
    """Refuse (and record) every network connection and name lookup."""
    def refuse(what):
        def refused(*args, **kwargs):
            started.append("%s %r" % (what, args[1:] if what == "connect" else args[:2]))
            raise harness.CommandStarted("%s in a fuzzed run" % what)
        return refused
    with mock.patch.object(socket.socket, "connect", refuse("connect")), \
            mock.patch.object(socket, "getaddrinfo", refuse("getaddrinfo")), \
            mock.patch.object(socket, "create_connection", refuse("create_connection")):
        yield


class Run:
    """One module run: ``kind`` refused, accepted, stopped (at a command or connection),
    crashed (an exception out of main()) or hung; ``result`` the JSON it printed."""

    def __init__(self, kind, result=None, started=(), detail=""):
        self.kind, self.result, self.started, self.detail = kind, result or {}, list(started), detail


def run_main(name, args, check_mode):
    module_file = importlib.import_module(MODULE_PACKAGE + name)
    out, err = io.StringIO(), io.StringIO()
    args = dict(args, _ansible_check_mode=check_mode)
    with harness.no_commands() as started:
        with no_connections(started), patch_module_args(args), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                with bounded(HANG_S):
                    module_file.main()
            except SystemExit:
                pass
            except Hang:
                return Run("hung", started=started)
            except harness.CommandStarted:
                return Run("stopped", started=started)
            except Exception:  # pylint: disable=broad-except
                return Run("crashed", started=started, detail=traceback.format_exc())
    text = out.getvalue().strip()
    try:
        result = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
    except ValueError:
        return Run("crashed", started=started, detail="no JSON result: %r" % text[-2000:])
    if started:
        return Run("stopped", result, started)
    return Run("refused" if result.get("failed") else "accepted", result, started)


def other_tree(root, host):
    """A root that is a folder (or names none, a dangling link too), but not the fake host's tree: the
    real / or an empty one. The module refuses what it does not find there (a device,
    a CPU, a file), naming that option; a root that is not a folder at all is refused
    naming root (runner.new_module)."""
    return isinstance(root, str) and os.path.isabs(root) and \
        os.path.realpath(root) != os.path.realpath(host.root) and \
        (os.path.isdir(root) or not os.path.exists(root))


def names_option(result, option, rules, value):
    """The refusal points at ``option``: its field, its name (or an alias) in the
    message, or the message quotes the value given (a refusal of how two options fit
    together names the other one: "18446744073709551616 vCPUs but 2 vcpu pins")."""
    field = str(result.get("field") or "")
    message = str(result.get("msg", ""))
    names = [option] + list(rules.get("aliases") or ())
    if any(field == n or field.startswith((n + ".", n + "[")) for n in names):
        return True
    shown = [str(value), repr(value)]
    if isinstance(value, float) and value.is_integer() and rules.get("type") == "int":
        shown.append(str(int(value)))        # 1.0 for an int option is 1 to the module
    quoted = isinstance(value, (str, int, float)) and not isinstance(value, bool) and any(
        len(text) >= (1 if isinstance(value, (int, float)) else 3) and re.search(r"(?<![\w.])%s(?![\w.])" % re.escape(text), message)
        for text in shown)
    return quoted or any(n in message for n in names)


# -- the fuzzer ----------------------------------------------------------------------------

class Fuzzer:
    """Totals across the session, and the budget."""

    def __init__(self):
        self.started = None
        self.options = set()
        self.modules = set()
        self.examples = 0
        self.outcomes = {}
        self.by_class = {}
        self.hypothesis_examples = 0

    def over_budget(self):
        return self.started is not None and time.monotonic() - self.started > BUDGET_S

    def count(self, kind, cls):
        self.examples += 1
        self.outcomes[kind] = self.outcomes.get(kind, 0) + 1
        self.by_class[cls] = self.by_class.get(cls, 0) + 1

    def write(self):
        summary = {"modules": len(self.modules), "options": len(self.options),
                   "modules_total": len(MODULE_NAMES), "options_total": len(OPTIONS),
                   "examples": self.examples,
                   "hypothesis_examples": self.hypothesis_examples,
                   "outcomes": self.outcomes,
                   "seconds": round(time.monotonic() - self.started, 1),
                   "budget_s": BUDGET_S, "examples_per_option": EXAMPLES,
                   "classes": dict(sorted(self.by_class.items()))}
        os.makedirs(os.path.dirname(SUMMARY), exist_ok=True)
        with open(SUMMARY, "w") as handle:
            json.dump(summary, handle, indent=2, sort_keys=True)
            handle.write("\n")
        return summary


FUZZER = Fuzzer()


@pytest.fixture(scope="module")
def fuzzer():
    FUZZER.started = FUZZER.started or time.monotonic()
    yield FUZZER
    summary = FUZZER.write()
    print("\nfuzz: %(modules)d of %(modules_total)d modules, %(options)d of %(options_total)d "
          "options, %(examples)d examples (%(hypothesis_examples)d from hypothesis) in "
          "%(seconds)s s; outcomes %(outcomes)s" % summary)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """One fake host per module, made once: every run must leave it as it was."""
    made = {}

    def host_of(name):
        if name not in made:
            base = tmp_path_factory.mktemp("fuzz-" + name) / "host"
            base.mkdir()
            host = harness.Host(base, "sim")
            plant_path_kinds(host)
            made[name] = (host, {"full": harness.host_state(host), "fast": fast_state(host)})
        return made[name]
    return host_of


def fast_state(host):
    """What every run is checked against: each path under the case's directory with its
    kind, size, mtime and inode (a write changes them; a folder: its kind), and the
    libvirt domains. The
    full snapshot (content digests, harness.host_state) is compared once per option."""
    files = {}
    for dirpath, dirnames, filenames in os.walk(host.base):
        for entry in dirnames + filenames:
            full = os.path.join(dirpath, entry)
            info = os.lstat(full)
            # A folder's own times change when a lock file comes and goes; what it holds
            # is listed entry by entry, as harness.host_state does.
            files[os.path.relpath(full, host.base)] = (info.st_mode,) if stat.S_ISDIR(
                info.st_mode) else (info.st_mode, info.st_size, info.st_mtime_ns, info.st_ino,
                                    os.readlink(full) if os.path.islink(full) else None)
    return {"files": files, "domains": host.domains()}


def check_value(name, option, value, cls, host, before, fuzzer):
    """Run ``value`` for ``option`` in check mode (and again outside it when refused);
    assert every property of the module docstring."""
    rules = SPECS[name][option]
    args = dict(baseline(name, host), **{option: value})
    where = "%s %s=%s (%s)" % (name, option, _short(value), cls)
    for check_mode in (True, False):
        run = run_main(name, args, check_mode)
        fuzzer.count(run.kind, cls)
        assert run.kind not in ("crashed", "hung"), "%s %s in %s mode:\n%s" % (
            where, run.kind, "check" if check_mode else "normal", run.detail)
        result_text = json.dumps(run.result, default=str)
        # A stopped run's exception is the recorder's refusal of its command.
        assert run.kind == "stopped" or ("module_stderr" not in run.result
                                         and "exception" not in run.result), (
            "%s: a traceback in the result: %s" % (where, result_text[-3000:]))
        changes = harness.state_difference(before["fast"], fast_state(host))
        assert not changes, "%s changed the host (check mode %s):\n%s" % (
            where, check_mode, "\n".join(changes[:20]))
        if run.kind != "refused":
            return run.kind
        # ansible-core's own refusals leave changed out: not changed either.
        assert not run.result.get("changed"), "%s: refused with changed true" % where
        assert names_option(run.result, option, rules, value) or (
            option == "root" and other_tree(value, host)), (
            "%s: the refusal names neither the option nor its field: %s" % (
                where, result_text[:2000]))
    return "refused"


def _short(value):
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."


@pytest.mark.parametrize("name, option", OPTIONS, ids=["%s.%s" % pair for pair in OPTIONS])
def test_every_option_refuses_hostile_values_safely(name, option, hosts, fuzzer):
    host, before = hosts(name)
    fuzzer.modules.add(name)
    fuzzer.options.add((name, option))
    rules = SPECS[name][option]
    for cls, value in hostile_values(rules, host):
        check_value(name, option, value, cls, host, before, fuzzer)
    if not fuzzer.over_budget() and EXAMPLES:
        generate(name, option, rules, host, before, fuzzer)
    changes = harness.state_difference(before["full"], harness.host_state(host))
    assert not changes, "the fuzz of %s.%s changed the host:\n%s" % (
        name, option, "\n".join(changes[:20]))


def generate(name, option, rules, host, before, fuzzer):
    """hypothesis' own values of the option's type, from a fixed seed."""

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(value=strategy(rules))
    def generated(value):
        fuzzer.hypothesis_examples += 1
        check_value(name, option, value, "hypothesis", host, before, fuzzer)
    generated()


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_the_baseline_is_accepted_in_check_mode(name, hosts):
    """Each module takes its baseline on the fake host in check mode (or goes as far
    as its first command), so that a refusal in the fuzz is the fuzzed option's."""
    host, before = hosts(name)
    run = run_main(name, baseline(name, host), True)
    assert run.kind in ("accepted", "stopped"), (run.kind, run.result, run.detail)
    assert not harness.state_difference(before["full"], harness.host_state(host))


def test_every_module_and_option_is_fuzzed():
    """The modules are read from plugins/modules, the options from their specs: one a
    module adds is fuzzed with nothing written for it."""
    files = sorted(os.path.basename(p)[:-3] for p in glob.glob(
        os.path.join(REPO, "plugins", "modules", "*.py")) if not p.endswith("__init__.py"))
    assert files == MODULE_NAMES and len(MODULE_NAMES) >= 20
    assert sorted({name for name, _option in OPTIONS}) == files
    for name in files:
        assert sorted(option for n, option in OPTIONS if n == name) == sorted(SPECS[name])
    assert set(BASELINE) <= set(files), "a baseline for a module that is gone"


def test_a_hostile_class_of_every_type():
    """The fixed values name their classes, and each type has the ones the item asks."""
    host = type("H", (), {"root": "/r"})()

    def classes(kind):
        return {cls for cls, _value in hostile_values({"type": kind}, host)}
    assert {"newline", "nul", "control", "leading-dash", "markup", "long",
            "lookalike-digits"} <= classes("str")
    assert {"dotdot", "absolute-link", "link-out-of-root", "fifo", "directory",
            "device-node", "hard-link"} <= classes("path")
    assert {"zero", "negative", "nan", "infinity", "huge"} <= classes("int") & classes("float")
    assert "million-items" in classes("list") and "dict-shape" in classes("dict")
    assert any(math.isnan(v) for c, v in _numbers() if c == "nan" and isinstance(v, float))
