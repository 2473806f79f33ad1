# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A PCI function's state as the kernel shows it with no host driver of the device's
own (a GPU on vfio-pci between tenants): whether it still answers on its bus, its power
state, its link's speed and width against what it can do, and its AER error counters.
Then the judgement: what makes a GPU unfit for the next tenant.

Every reader takes the host's root folder. The attributes (drivers/pci/pci-sysfs.c,
drivers/pci/pcie/aer.c): ``config`` (the first bytes of configuration space: a device
that fell off its bus reads all ones), ``power_state`` (D0, D1, D2, D3hot, D3cold,
unknown, error; kernel 5.18 and later), ``current_link_speed``/``max_link_speed``
("16.0 GT/s PCIe"), ``current_link_width``/``max_link_width``, ``aer_dev_correctable``,
``aer_dev_fatal``, ``aer_dev_nonfatal`` (one "Name count" line per error kind and a
TOTAL_ERR_* line; present where the function has an AER capability and the kernel owns
AER). A missing attribute is None: unknown, never taken for sound or broken.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import kernel_log as kernel_log_core
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import reader
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PCI_DEVICES_DIR, normalize_address
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

AER_KINDS = ("correctable", "fatal", "nonfatal")
_AER_TOTALS = {"correctable": "TOTAL_ERR_COR", "fatal": "TOTAL_ERR_FATAL", "nonfatal": "TOTAL_ERR_NONFATAL"}
_AER_LINE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]{0,40}) (?P<count>[0-9]{1,20})")
# The kernel prints "Unknown" (or "Unknown speed") for a speed it cannot name.
_SPEED = re.compile(r"(?P<gts>[0-9]{1,3}(?:\.[0-9]{1,2})?) GT/s(?: PCIe)?")
POWER_STATES = ("D0", "D1", "D2", "D3hot", "D3cold", "unknown", "error")
# The widths a PCIe link can train at (x1 to x32).
_WIDTHS = (1, 2, 4, 8, 12, 16, 32)


@dataclass(frozen=True)
class LinkState:
    """A function's PCIe link: current and maximum speed (GT/s) and width (lanes)."""

    current_speed_gts: Optional[float] = None
    max_speed_gts: Optional[float] = None
    current_width: Optional[int] = None
    max_width: Optional[int] = None

    @property
    def width_degraded(self):
        """True when the link trained narrower than the function can go (an x8 link for
        an x16 GPU halves its bandwidth); None when either width is unknown."""
        if self.current_width is None or self.max_width is None:
            return None
        return self.current_width < self.max_width

    @property
    def speed_below_max(self):
        if self.current_speed_gts is None or self.max_speed_gts is None:
            return None
        return self.current_speed_gts < self.max_speed_gts


@dataclass(frozen=True)
class DeviceState:
    """What the kernel shows of one function. ``answers``: False when its configuration
    space reads all ones (gone from the bus), None when it could not be read."""

    address: str
    answers: Optional[bool] = None
    power_state: Optional[str] = None
    link: LinkState = field(default_factory=LinkState)
    aer: Dict[str, Dict[str, int]] = field(default_factory=dict)
    # The kernel log's messages about it (kernel_log.py): resets or power changes that
    # failed, and resets that went through with a warning; None when the log was not read.
    reset_failures: Optional[Tuple[str, ...]] = None
    reset_warnings: Tuple[str, ...] = ()

    def aer_total(self, kind):
        """The TOTAL_ERR_* count of ``kind``, or None when the kernel shows no counters."""
        counters = self.aer.get(kind)
        if counters is None:
            return None
        return counters.get(_AER_TOTALS[kind], sum(counters.values()))

    def as_dict(self):
        return {"address": self.address, "answers": self.answers, "power_state": self.power_state,
                "link": {"current_speed_gts": self.link.current_speed_gts,
                         "max_speed_gts": self.link.max_speed_gts,
                         "current_width": self.link.current_width, "max_width": self.link.max_width},
                "aer": {kind: dict(counters) for kind, counters in self.aer.items()},
                "aer_totals": {kind: self.aer_total(kind) for kind in AER_KINDS},
                "reset_failures": None if self.reset_failures is None else list(self.reset_failures),
                "reset_warnings": list(self.reset_warnings)}


def parse_aer_counters(text, shown="aer_dev_*"):
    """{name: count} of an aer_dev_* attribute; None for no text. A line that is not
    "Name count" is refused naming the file: a counter read wrong could pass a GPU."""
    if text is None:
        return None
    counters = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        match = _AER_LINE.fullmatch(line)
        if match is None or len(counters) >= 64:
            raise GpuhostError("%s holds %r, not an AER counter line (Name count)" % (shown, line[:80]),
                               field="root", fix="read the host's own sysfs (root /); a recorded tree "
                                                 "must keep the kernel's text unchanged")
        counters[match.group("name")] = int(match.group("count"))
    return counters


def parse_link_speed(text):
    """GT/s of "16.0 GT/s PCIe" (kernels before 4.20 print no " PCIe"); None for
    "Unknown", "Unknown speed" or no text."""
    match = _SPEED.fullmatch((text or "").strip())
    return float(match.group("gts")) if match else None


def parse_link_width(text):
    """Lanes of a link width attribute ("16"); None for 0 (link down is read from the
    speed) or anything that is no PCIe width."""
    value = sysfs.parse_int_text(text)
    return value if value in _WIDTHS else None


def read_device_state(address, root="/", kernel_log=None, log_since=None):
    """The DeviceState of ``address`` on the host under ``root``. ``kernel_log``: a
    kernel_log.KernelLog read once for every device of the call (None: not judged);
    ``log_since``: its mark() after which the messages count (None: the whole boot)."""
    canonical = normalize_address(address)
    base = sysfs.path(root, PCI_DEVICES_DIR, canonical)
    if not os.path.isdir(base):
        raise GpuhostError("no PCI function %s on this host" % canonical, field="address",
                           fix="list the host's devices with lspci -D and use one of their addresses; "
                               "a GPU that was removed needs a rescan (echo 1 > /sys/bus/pci/rescan)")
    dev_dir = sysfs.resolve_dir(root, base)
    entries = set(sysfs.list_dir(dev_dir))

    def text(name):
        return sysfs.read_text(os.path.join(dev_dir, name)) if name in entries else None

    answers = None
    if "config" in entries:
        try:
            head = reader.read_bytes(os.path.join(dev_dir, "config"), root=root, max_bytes=4096)[:4]
        except (OSError, GpuhostError):
            head = b""
        if len(head) == 4:
            answers = head != b"\xff\xff\xff\xff"
    power = text("power_state")
    link = LinkState(current_speed_gts=parse_link_speed(text("current_link_speed")),
                     max_speed_gts=parse_link_speed(text("max_link_speed")),
                     current_width=parse_link_width(text("current_link_width")),
                     max_width=parse_link_width(text("max_link_width")))
    aer = {}
    for kind in AER_KINDS:
        name = "aer_dev_" + kind
        counters = parse_aer_counters(text(name), shown="%s/%s" % (canonical, name))
        if counters is not None:
            aer[kind] = counters
    failures, warnings = None, ()
    if kernel_log is not None:
        failures = kernel_log.about(canonical, kernel_log_core.RESET_FAILED, log_since)
        warnings = kernel_log.about(canonical, kernel_log_core.RESET_NOTED, log_since)
    return DeviceState(address=canonical, answers=answers,
                       power_state=power if power in POWER_STATES else None, link=link, aer=aer,
                       reset_failures=failures, reset_warnings=warnings)


def unfit_reasons(state, fatal_before=0, judge_kernel_log=True):
    """Why ``state`` makes a GPU unfit for the next tenant, one sentence each; [] when
    sound. ``fatal_before``: the fatal AER count when it was last known sound (the
    counters only grow until the function is removed and found again).
    ``judge_kernel_log``: false for a reader that has no mark of when the GPU was last
    sound (validate), which then names the log's failures in notes() only."""
    reasons = []
    if judge_kernel_log and state.reset_failures:
        reasons.append("%s failed a reset or power change, as the kernel log says: %s"
                       % (state.address, "; ".join(state.reset_failures[-3:])))
    if state.answers is False:
        reasons.append("%s does not answer on its bus (its configuration space reads all ones): "
                       "it fell off the bus" % state.address)
    if state.power_state in ("unknown", "error"):
        reasons.append("%s is in power state %s: the kernel cannot reach it" % (state.address, state.power_state))
    fatal = state.aer_total("fatal")
    if fatal is not None and fatal > fatal_before:
        reasons.append("%s reported %d fatal AER error(s)%s" % (
            state.address, fatal - fatal_before, " since it was last sound" if fatal_before else ""))
    if state.link.width_degraded:
        reasons.append("%s's link trained at x%d, below its x%d: it has a fraction of its bandwidth"
                       % (state.address, state.link.current_width, state.link.max_width))
    return reasons


def notes(state):
    """What is worth saying but unfits no GPU by itself: the kernel log's reset messages
    (judged by unfit_reasons where a mark says since when), a lower link speed (a GPU
    lowers its own when idle), correctable and non-fatal AER errors."""
    said = ["%s, in the kernel log of this boot: %s" % (state.address, line)
            for line in (state.reset_failures or ())[-3:] + state.reset_warnings[-3:]]
    if state.link.speed_below_max:
        said.append("%s's link runs at %g GT/s of its %g (a GPU lowers its link speed when idle)"
                    % (state.address, state.link.current_speed_gts, state.link.max_speed_gts))
    for kind in ("nonfatal", "correctable"):
        total = state.aer_total(kind)
        if total:
            said.append("%s reported %d %s AER error(s)" % (state.address, total, kind.replace("nonfatal", "non-fatal")))
    return said


def fatal_count(state):
    """The fatal AER count to remember as the GPU's sound baseline (0 when not shown)."""
    return state.aer_total("fatal") or 0
