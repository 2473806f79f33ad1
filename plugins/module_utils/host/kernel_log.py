# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kernel's log as /dev/kmsg gives it, and what it says of a PCI function's resets.

A GPU on vfio-pci is reset by vfio when its tenant's QEMU lets it go, and by the
kernel's own reset attribute when the scrub writes it; a reset that fails in vfio's
path says so only in the kernel log. /dev/kmsg (Documentation/ABI/testing/dev-kmsg)
gives one record per read: "level,seq,usec,flags;text", then " KEY=value" lines, among
them "DEVICE=+pci:0000:41:00.0" for a message about a PCI function. Reading it has no
side effect (a reader opening it starts at the oldest record it holds), and its sequence
numbers restart with each boot, so a position in it is (boot id, sequence number).

The messages judged (drivers/pci/pci.c, every kernel since 4.x): a function that did not
come back from a reset ("not ready 65535ms after FLR; giving up") and one whose power
state could not be changed ("Unable to change power state from D3cold to D0, device
inaccessible") failed; an FLR that had to go on with transactions pending and vfio
restoring BARs lost to a reset are noted.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from typing import Optional, Tuple

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import reader
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import sysfs

KMSG = "dev/kmsg"
BOOT_ID = "proc/sys/kernel/random/boot_id"
# The kernel keeps at most its log buffer (up to 32 MiB with log_buf_len); a file given
# under a recorded root is cut at the reader's bound.
MAX_RECORDS = 200000
_RECORD = re.compile(r"(?P<level>[0-9]{1,4}),(?P<seq>[0-9]{1,20}),(?P<usec>[0-9]{1,20}),[^;]{0,16};(?P<text>.*)")
_DEVICE = re.compile(r"DEVICE=\+pci:(?P<address>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])")
# "<driver> <address>: " as dev_printk prefixes a message of a bound device.
_PREFIX = re.compile(r"(?:[A-Za-z0-9_.-]{1,40} )?(?P<address>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): ")
RESET_FAILED = (
    re.compile(r"not ready [0-9]+ms after (?P<what>[^;]{1,40}); giving up"),
    re.compile(r"Unable to change power state from \S+ to \S+, device inaccessible"),
)
RESET_NOTED = (
    re.compile(r"timed out waiting for pending transaction; performing function level reset anyway"),
    re.compile(r"reset recovery - restoring BARs"),
)


@dataclass(frozen=True)
class KernelMessage:
    seq: int
    text: str
    address: Optional[str] = None      # the PCI function it is about, when it names one


@dataclass(frozen=True)
class KernelLog:
    """The records /dev/kmsg held when read, and the boot they belong to."""

    boot_id: Optional[str]
    messages: Tuple[KernelMessage, ...] = ()

    @property
    def last_seq(self):
        return max((message.seq for message in self.messages), default=-1)

    def mark(self):
        """The position after the last record read: {"boot_id", "seq"}."""
        return {"boot_id": self.boot_id, "seq": self.last_seq}

    def about(self, address, patterns, since=None):
        """The messages about ``address`` that match one of ``patterns`` and come after
        ``since`` (a mark() of this boot; one of another boot, or None, means all)."""
        after = since.get("seq", -1) if since and since.get("boot_id") == self.boot_id else -1
        return tuple(message.text for message in self.messages
                     if message.address == address and message.seq > after
                     and any(pattern.search(message.text) for pattern in patterns))


def parse_kmsg(text, limit=MAX_RECORDS):
    """The KernelMessages of /dev/kmsg's text (records, each with its continuation
    lines); lines that are no record are skipped, as a reader skips what it cannot use."""
    messages = []
    current = None
    for line in text.splitlines():
        if line.startswith(" "):
            match = _DEVICE.fullmatch(line.strip())
            if current is not None and match:
                current["address"] = match.group("address")
            continue
        if current is not None:
            messages.append(KernelMessage(**current))
            if len(messages) >= limit:
                return tuple(messages)
        match = _RECORD.fullmatch(line)
        current = None
        if match:
            body = match.group("text")
            prefix = _PREFIX.match(body)
            current = {"seq": int(match.group("seq")), "text": body,
                       "address": prefix.group("address") if prefix else None}
    if current is not None and len(messages) < limit:
        messages.append(KernelMessage(**current))
    return tuple(messages)


def read_kernel_log(root="/"):
    """The KernelLog of the host under ``root``; None when /dev/kmsg cannot be read (no
    such file, no permission, a link): unknown, never taken for a clean log."""
    try:
        boot_id = sysfs.read_text(sysfs.path(root, BOOT_ID))
        for _attempt in range(3):
            try:
                data = reader.read_bytes(sysfs.path(root, KMSG), root=root, special_ok=True,
                                         no_follow=True)
                break
            except OSError as err:
                # EPIPE: the record the reader stood on was overwritten; read again.
                if err.errno != errno.EPIPE:
                    raise
        else:
            return None
    except (OSError, ValueError, GpuhostError):    # GpuhostError: out of root, too large
        return None
    return KernelLog(boot_id=boot_id.strip() if boot_id else None,
                     messages=parse_kmsg(reader.decode_text(data)))
