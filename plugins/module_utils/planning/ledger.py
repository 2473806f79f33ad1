# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The allocation ledger: which tenant holds which GPU, cores, VF and hugepages on a host.

The ledger is one JSON file on the host (``/var/lib/gpuhost/ledger.json`` by default).
It is the memory that lets ``tenant_onboard.yml`` add a tenant without moving the
tenants already running, and that stops two onboardings started at the same time from
taking the same GPU:

* every read-modify-write holds an exclusive ``flock`` on ``<ledger>.lock`` for its
  whole duration (``locked()``), and re-reads the ledger under that lock;
* a new version is written by the collection's one writer (``HostWriter.write_file``):
  a temporary file in the same directory, fsynced and renamed over the old one, then
  the directory fsynced, so a crash leaves either the old or the new ledger, never half
  of one; a link or a non-regular file at the ledger's place is refused, never written
  through (``write_ledger()``);
* the previous good version is kept as ``<ledger>.prev``;
* the body carries a SHA-256 checksum and a serial number. A ledger that does not parse,
  is truncated or fails its checksum is reported with recovery steps
  (``LedgerCorruptError``) and is never reset silently: resetting it would hand running
  tenants' GPUs and cores to the next tenant.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import hashlib
import json
import os
import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import FileLock, HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    config_path, domain_name, finite_number)
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import (
    check_unique_macs, plan_placement, resolve_housekeeping, tenant_request_from_dict, TenantRequest)

# A canonical PCI address, as the quarantine keys its GPUs.
_ADDRESS = re.compile(r"[0-9a-f]{4,5}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
LEDGER_FORMAT = "gpuhost.kvm/ledger"
LEDGER_VERSION = 1
DEFAULT_LEDGER_PATH = "/var/lib/gpuhost/ledger.json"
# The request keys the planner understands; a tenant definition in host_vars also
# carries guest data (SSH keys, network) that the planner must not see.
PLANNER_KEYS = tuple(f.name for f in dataclasses.fields(TenantRequest))


class LedgerCorruptError(GpuhostError):
    """The ledger file exists but cannot be trusted."""


class LedgerLockTimeout(GpuhostError):
    """Another run holds the ledger lock for longer than we are willing to wait."""


@dataclasses.dataclass
class LedgerData:
    """The ledger's body plus its bookkeeping."""

    tenants: list = dataclasses.field(default_factory=list)   # plan tenant entries
    housekeeping: dict = dataclasses.field(default_factory=dict)
    # GPUs no onboarding gets: address -> {"reasons", "tenant" (the last holder), "since"}
    quarantine: dict = dataclasses.field(default_factory=dict)
    # address -> the fatal AER count a GPU had when last found sound: the kernel's
    # counters only grow until the function is removed and found again
    aer_baseline: dict = dataclasses.field(default_factory=dict)
    # address -> the kernel log's position ({"boot_id", "seq"}) when a GPU was last found
    # sound: the log of a boot keeps a reset that failed before it was recovered
    kernel_log_marks: dict = dataclasses.field(default_factory=dict)
    smt_policy: str = None
    serial: int = 0
    updated_at: str = None
    source: str = None          # the file it was read from (for errors), not in the body

    def names(self):
        return [t["name"] for t in self.tenants]

    def body(self):
        body = {"tenants": self.tenants, "housekeeping": self.housekeeping,
                "smt_policy": self.smt_policy}
        # only when there is one: a ledger without keeps the shape (and checksum) the
        # releases before quarantine wrote
        if self.quarantine:
            body["quarantine"] = self.quarantine
        if self.aer_baseline:
            body["aer_baseline"] = self.aer_baseline
        if self.kernel_log_marks:
            body["kernel_log_marks"] = self.kernel_log_marks
        return body


def _canonical(body):
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def checksum(body):
    return "sha256:" + hashlib.sha256(_canonical(body).encode("ascii")).hexdigest()


def _recovery_fix(path):
    prev = path + ".prev"
    return ("do not delete it. Compare it with the last good copy %s (its serial is one "
            "lower); if that copy is intact and no tenant was onboarded since, restore it "
            "with 'cp -p %s %s'. Otherwise rebuild the ledger from the domains that run "
            "(virsh list --all; virsh dumpxml NAME shows each tenant's vcpupin and "
            "hostdevs) and re-run tenant_onboard.yml for each tenant, which keeps their "
            "pins" % (prev, prev, path))


def parse_ledger(text, path=DEFAULT_LEDGER_PATH):
    """Turn the file's text into LedgerData, or raise LedgerCorruptError."""
    def corrupt(why):
        return LedgerCorruptError("the allocation ledger %s is corrupt: %s" % (path, why),
                                  field="path", fix=_recovery_fix(path),
                                  details={"path": path})

    if not text.strip():
        raise corrupt("the file is empty (truncated write or disk full?)")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise corrupt("it is not valid JSON (%s); it may have been truncated" % exc)
    if not isinstance(data, dict) or data.get("format") != LEDGER_FORMAT:
        raise corrupt("it is not a gpuhost.kvm ledger (no format %r)" % LEDGER_FORMAT)
    version = data.get("version")
    if not isinstance(version, int) or version > LEDGER_VERSION or version < 1:
        raise LedgerCorruptError(
            "the allocation ledger %s has version %r; this collection reads version %d"
            % (path, version, LEDGER_VERSION), field="path",
            fix="run the gpuhost.kvm release that wrote it, or a newer one",
            details={"path": path})
    body = data.get("body")
    if not isinstance(body, dict) or not isinstance(body.get("tenants"), list):
        raise corrupt("its body or tenant list is missing")
    if data.get("checksum") != checksum(body):
        raise corrupt("its checksum does not match its content (edited by hand, or a "
                      "partial write)")
    for entry in body["tenants"]:
        if not isinstance(entry, dict) or "name" not in entry:
            raise corrupt("a tenant entry has no name")
    serial = data.get("serial", 0)
    if isinstance(serial, bool) or not isinstance(serial, int) or serial < 0:
        raise corrupt("its serial %s is not a whole number" % json.dumps(serial))
    if not isinstance(body.get("housekeeping") or {}, dict):
        raise corrupt("its housekeeping is not a mapping of NUMA nodes to CPU lists")
    if body.get("smt_policy") is not None and not isinstance(body["smt_policy"], str):
        raise corrupt("its smt_policy is not a name")
    quarantine = body.get("quarantine", {})
    if not isinstance(quarantine, dict) or not all(
            isinstance(address, str) and _ADDRESS.fullmatch(address) and isinstance(entry, dict)
            and isinstance(entry.get("reasons"), list)
            and all(isinstance(reason, str) for reason in entry["reasons"])
            and isinstance(entry.get("functions", []), list)
            and all(isinstance(function, str) and _ADDRESS.fullmatch(function)
                    for function in entry.get("functions", []))
            and isinstance(entry.get("wiped", True), bool)
            for address, entry in quarantine.items()):
        raise corrupt("its quarantine is not a mapping of PCI addresses to their reasons")
    baseline = body.get("aer_baseline", {})
    if not isinstance(baseline, dict) or not all(
            isinstance(address, str) and _ADDRESS.fullmatch(address) and isinstance(count, int)
            and not isinstance(count, bool) and count >= 0 for address, count in baseline.items()):
        raise corrupt("its aer_baseline is not a mapping of PCI addresses to counts")
    marks = body.get("kernel_log_marks", {})
    if not isinstance(marks, dict) or not all(
            isinstance(address, str) and _ADDRESS.fullmatch(address) and is_kernel_log_mark(mark)
            for address, mark in marks.items()) or not all(
            is_kernel_log_mark(entry.get("kernel_log_mark")) for entry in quarantine.values()
            if "kernel_log_mark" in entry):
        raise corrupt("its kernel_log_marks are not a mapping of PCI addresses to kernel log positions")
    return LedgerData(tenants=body["tenants"], housekeeping=body.get("housekeeping") or {},
                      smt_policy=body.get("smt_policy"), quarantine=quarantine,
                      aer_baseline=baseline, kernel_log_marks=marks, serial=serial,
                      updated_at=data.get("updated_at"), source=path)


def is_kernel_log_mark(mark):
    """A kernel log position as kernel_log.KernelLog.mark() gives it."""
    return (isinstance(mark, dict) and set(mark) == {"boot_id", "seq"}
            and (mark["boot_id"] is None or isinstance(mark["boot_id"], str))
            and isinstance(mark["seq"], int) and not isinstance(mark["seq"], bool) and mark["seq"] >= -1)


def read_ledger(path, field="path"):
    """The ledger at ``path``; a missing file is the empty ledger of a new host.

    Never through a link: a link at ``path`` is refused unread with the writer's wording
    (``HostWriter.read_unlinked``), as the writer would refuse to replace it; reading
    through it would show another file's tenants. ``field``: the module's option that
    names the ledger file (tenant_ledger's path, the others' ledger_path)."""
    try:
        return _read_ledger(path)
    except GpuhostError as err:
        if err.field == "path":
            err.field = field
        raise


def _read_ledger(path):
    try:
        data = HostWriter("/").read_unlinked(path, "path")
    except OSError as exc:
        raise GpuhostError("cannot read the allocation ledger %s: %s" % (path, exc.strerror),
                           field="path", fix="check the path and its permissions")
    if data is None:
        return LedgerData()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LedgerCorruptError("the allocation ledger %s is corrupt: it is not UTF-8 text "
                                 "(%s)" % (path, exc), field="path", fix=_recovery_fix(path),
                                 details={"path": path})
    return parse_ledger(text, path)


def render_ledger(data, now=None):
    """The file content for ``data`` (its serial already bumped by the caller)."""
    body = copy.deepcopy(data.body())
    document = {
        "format": LEDGER_FORMAT,
        "version": LEDGER_VERSION,
        "serial": data.serial,
        "updated_at": now or data.updated_at,
        "checksum": checksum(body),
        "body": body,
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def ledger_path(path, field="path"):
    """The ledger's path, checked by the shared validator (validators.config_path) and
    returned as given: absolute (a relative one would land in whatever folder the module
    happens to run in), no control characters, a file when something is there. A '..'
    is left in place for the writer to refuse (normalising would resolve it away)."""
    config_path(path, field, kind="ledger file", missing_ok=True)
    return path


def write_ledger(path, data, now=None):
    """Write ``data`` as the next serial; keep the current good file as ``.prev``.

    Call it only under ``locked(path)``, after ``read_ledger`` returned the current
    version (so the old file is known to be intact when it becomes ``.prev``). Both
    files are written by the collection's one writer (``HostWriter.write_file``: temp
    file, fsync, rename, fsync of the folder; never through a link, never over what is
    not a regular file, no '..'), and both are checked before either is written.
    """
    writer = HostWriter("/")
    path = ledger_path(path)
    for target in (path, path + ".prev"):
        writer.check_replaceable(target, field="path")
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    previous = writer.read_bytes(path)
    if previous is not None:
        writer.write_file(path + ".prev", previous, mode=0o600)
    new = dataclasses.replace(data, serial=data.serial + 1,
                              updated_at=now or datetime.datetime.now(
                                  datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    writer.write_file(path, render_ledger(new), mode=0o600)
    return new


class locked(FileLock):
    """Exclusive flock on ``<path>.lock`` for a whole read-modify-write (transaction's
    FileLock: never through a link, re-taken when the file was replaced).

    ``timeout`` seconds of waiting end in LedgerLockTimeout naming the holder's PID. With
    ``read_only`` (check mode) nothing is created: without a lock file there is no
    ledger to protect yet; with one, it waits for writers with a shared lock.
    """

    what = "the ledger's lock file"

    def __init__(self, path, timeout=60.0, poll=0.05, read_only=False, field="path"):
        # 0 tries once; NaN would never expire (no comparison with it is true). ``field``:
        # the option that names the ledger (read_ledger's).
        super().__init__(ledger_path(path, field) + ".lock",
                         finite_number(timeout, "lock_timeout", allow_minimum=True,
                                       maximum=86400, unit="seconds"),
                         read_only=read_only, poll=poll, field=field)

    def busy_error(self, holder):
        return LedgerLockTimeout(
            "the allocation ledger is locked by another run%s for more than %s s"
            % (" (PID %s)" % holder if holder else "", self.timeout),
            field="lock_timeout",
            fix="wait for the other onboarding/offboarding to finish and run again, or "
                "raise lock_timeout")


def planner_request(tenant, field):
    """The planner's view of a tenant definition: its request keys only."""
    if not isinstance(tenant, dict):
        raise GpuhostError("a tenant must be a mapping, got %r" % (tenant,), field=field,
                           fix="give name, gpus, vcpus and memory_gib for every tenant")
    request = {k: v for k, v in tenant.items() if k in PLANNER_KEYS and v is not None}
    for key, value in request.items():
        if isinstance(value, float):
            # The shared validator for every number given as a float: int() of an
            # infinity raises OverflowError, and NaN compares false with everything.
            finite_number(value, "%s.%s" % (field, key), minimum=float("-inf"),
                          allow_minimum=True)
    return request


_EXISTING_FIELD = re.compile(r"existing\[(\d+)\](.*)", re.S)


def _from_ledger(data, call, ledger_fields=(), indices=None):
    """``call()``, with an error about what the ledger holds reported as the ledger's
    corruption (option ``path``, the recovery steps) instead of under the planner's
    names, which are no options of tenant_ledger: ``existing[i]...`` (the ledger's
    tenant entries; ``indices`` maps them back to the ledger's order) and the
    ``ledger_fields`` whose value came from the ledger, not from the caller."""
    try:
        return call()
    except LedgerCorruptError:
        raise
    except GpuhostError as err:
        field = err.field or ""
        match = _EXISTING_FIELD.fullmatch(field)
        if match:
            index = int(match.group(1))
            where = "tenants[%d]%s" % (indices[index] if indices else index, match.group(2))
        elif field.split(".")[0] in ledger_fields:
            where = field
        else:
            raise
        path = data.source or DEFAULT_LEDGER_PATH
        raise LedgerCorruptError(
            "the allocation ledger %s is corrupt: %s (at %s in the ledger)"
            % (path, err.msg, where), field="path", fix=_recovery_fix(path),
            details={"path": path}) from err


def _housekeeping_of(data, housekeeping, topology):
    """The housekeeping in force: the one the ledger's tenants were placed with wins. A
    request for the same CPUs is the same request however it is written ("0,32",
    "32,0", "0,32-32", node 1 left to its default): both are compared as the CPU sets
    they resolve to on this host."""
    if data.tenants and data.housekeeping:
        placed = _from_ledger(data, lambda: resolve_housekeeping(topology, data.housekeeping),
                              ("housekeeping",))
        if housekeeping and resolve_housekeeping(topology, housekeeping) != placed:
            raise GpuhostError(
                "housekeeping %s differs from %s, which the tenants in the ledger were "
                "placed with" % (housekeeping, data.housekeeping), field="housekeeping",
                fix="keep the housekeeping CPUs while tenants run, or offboard them first")
        return data.housekeeping
    return housekeeping


def validate_tenants(tenants):
    """Check every tenant definition the way the planner will (shape, names, counts) and
    refuse a name or a VF MAC given twice; needs neither the host nor the ledger, so
    callers run it before they take the lock or create anything."""
    seen = {}
    requests = []
    for index, tenant in enumerate(tenants or []):
        field = "tenants[%d]" % index
        request = tenant_request_from_dict(planner_request(tenant, field), field=field)
        if request.name in seen:
            raise GpuhostError("tenant name %s is used twice (tenants[%d] and %s)"
                               % (request.name, seen[request.name], field),
                               field="%s.name" % field, fix="give every tenant its own name")
        seen[request.name] = index
        requests.append((index, request))
    check_unique_macs(requests)


def validate_names(names):
    """Check the tenant names to release before anything is locked or created."""
    for index, name in enumerate(names or []):
        domain_name(name, field="names[%d]" % index)


def reserve(data, topology, tenants, smt_policy="require", housekeeping=None,
            hugepage_check="memory", allow_acs_override=False, vf_count=None,
            gpu_selection=None, fabric_partitions=None, nvswitch_model=None):
    """Plan ``tenants`` around the ledger's tenants; return (new LedgerData, plan, added).

    Tenants already in the ledger keep their entries byte for byte (the planner copies
    ``existing`` unchanged and refuses a request that differs from what was placed). A
    request for a GPU, core or VF held by a ledger tenant fails with the holder's name.
    Pure: reads nothing but its arguments.
    """
    if data.tenants and data.smt_policy and smt_policy != data.smt_policy:
        raise GpuhostError(
            "SMT policy %s differs from %s, which the tenants in the ledger were placed with"
            % (smt_policy, data.smt_policy), field="smt_policy",
            fix="keep gpuhost_smt_policy while tenants run, or offboard them first")
    requests = [planner_request(t, "tenants[%d]" % i) for i, t in enumerate(tenants or [])]
    hk = _housekeeping_of(data, housekeeping, topology)
    plan = _from_ledger(data, lambda: plan_placement(
        topology, requests, housekeeping=hk or None, smt_policy=smt_policy,
        existing=data.tenants, hugepage_check=hugepage_check,
        allow_acs_override=allow_acs_override, vf_count=vf_count,
        gpu_selection=gpu_selection, quarantined=quarantined_reasons(data),
        fabric_partitions=fabric_partitions, nvswitch_model=nvswitch_model),
        ("housekeeping",) if hk is data.housekeeping and hk else ())
    known = set(data.names())
    added = [t["name"] for t in plan["tenants"] if t["name"] not in known]
    new = dataclasses.replace(data, tenants=copy.deepcopy(plan["tenants"]),
                              housekeeping=dict(plan["housekeeping"]), smt_policy=smt_policy)
    return new, plan, added


def release(data, topology, names, hugepage_check="none", gpu_selection=None):
    """Drop ``names`` from the ledger; return (new LedgerData, plan of the rest, removed)."""
    validate_names(names)
    removed = [n for n in data.names() if n in set(names)]
    indices = [i for i, t in enumerate(data.tenants) if t["name"] not in set(names)]
    kept = [data.tenants[i] for i in indices]
    plan = _from_ledger(data, lambda: plan_placement(
        topology, [], housekeeping=data.housekeeping or None,
        smt_policy=data.smt_policy or "require", existing=kept,
        hugepage_check=hugepage_check, gpu_selection=gpu_selection),
        ("housekeeping", "smt_policy"), indices)
    new = dataclasses.replace(data, tenants=copy.deepcopy(plan["tenants"]))
    return new, plan, removed


def quarantined_reasons(data):
    """{address: "reason; reason"} of the ledger's quarantined GPUs, as placement takes them."""
    return {address: "; ".join(entry["reasons"]) for address, entry in sorted(data.quarantine.items())}


def quarantine(data, unfit, tenant, now, fatal_counts=None, functions=None, wiped=True,
               log_marks=None):
    """``data`` with the GPUs of ``unfit`` ({address: [reasons]}) quarantined, each with
    the tenant that held it last, when, its fatal AER count then (``fatal_counts``), its
    PCI functions (``functions``: {address: [functions]}), whether the tenant's state
    was wiped from it (``wiped``: false when its reset failed, so that only a reset lifts
    the quarantine) and the kernel log's position then (``log_marks``: {address: mark}),
    after which a recovery's read counts the log's reset failures. A GPU already
    quarantined keeps its first entry, with the new reasons added; once not wiped, it
    stays so until lifted. Pure."""
    held = copy.deepcopy(data.quarantine)
    for address, reasons in sorted(unfit.items()):
        if not reasons:
            continue
        entry = held.setdefault(address, {"reasons": [], "tenant": tenant, "since": now,
                                          "fatal_aer": (fatal_counts or {}).get(address, 0),
                                          "functions": list((functions or {}).get(address) or [address]),
                                          "wiped": True})
        entry["reasons"].extend(reason for reason in reasons if reason not in entry["reasons"])
        entry["wiped"] = bool(entry.get("wiped", True) and wiped)
        if (log_marks or {}).get(address) is not None:
            entry["kernel_log_mark"] = log_marks[address]
    return dataclasses.replace(data, quarantine=held)


def lift_quarantine(data, unfit, fatal_counts=None, reset_done=(), log_marks=None):
    """``data`` without the quarantined GPUs that ``unfit`` ({address: [reasons]}, read
    again now) finds sound; (new data, lifted, kept {address: reasons}). A GPU read as
    unfit stays, with what the new read says; so does one whose last tenant's state was
    never wiped (its reset failed) unless it is in ``reset_done`` (reset by this call).
    ``fatal_counts`` ({address: fatal AER count now}): a lifted GPU's count becomes its
    baseline, so that the errors that put it in quarantine do not put it back; so does
    its kernel log position (``log_marks``: {address: mark}) for the log's. Pure."""
    held = copy.deepcopy(data.quarantine)
    baseline = dict(data.aer_baseline)
    marks = dict(data.kernel_log_marks)
    lifted, kept = [], {}
    for address in sorted(unfit):
        if address not in held:
            continue
        if not held[address].get("wiped", True) and address not in reset_done:
            unfit = dict(unfit, **{address: list(unfit[address]) + [
                "%s was not wiped since tenant %s left (its reset failed): recover it with "
                "recover_action reset" % (address, held[address].get("tenant"))]})
        if unfit[address]:
            held[address]["reasons"] = list(unfit[address])
            kept[address] = list(unfit[address])
        else:
            del held[address]
            lifted.append(address)
            if (fatal_counts or {}).get(address):
                baseline[address] = fatal_counts[address]
            if (log_marks or {}).get(address) is not None:
                marks[address] = log_marks[address]
    return (dataclasses.replace(data, quarantine=held, aer_baseline=baseline, kernel_log_marks=marks),
            lifted, kept)
