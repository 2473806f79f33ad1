# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""irqbalance's environment file as it is on the host: its ban list and its arguments,
read and checked, never through a link. changes/irq_affinity/irqbalance.py changes it;
host_facts reports what it bans.
"""

from __future__ import annotations

import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.sysfs import parse_cpus_text

CPULIST_KEY = "IRQBALANCE_BANNED_CPULIST"
MASK_KEY = "IRQBALANCE_BANNED_CPUS"
ARGS_KEY = "IRQBALANCE_ARGS"
POLICY_OPTION = "--policyscript"
ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)\Z")


def check_syntax(text, path):
    """Refuse a file that is not blank lines, comments and KEY=value lines."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not ASSIGNMENT.match(line):
            raise GpuhostError(
                "line %d of %s is not KEY=value: %r" % (number, path, line),
                field="irqbalance_config",
                fix="fix or comment out that line; irqbalance reads the file as a shell "
                    "environment file")


def read_config(host, path):
    """irqbalance's environment file through ``host`` (a HostReader), never through a
    link: a link at ``path`` is refused unread (field irqbalance_config), and the open
    does not follow one."""
    host.refuse_link(path, "irqbalance_config")
    try:
        data = host.read_bytes(path)
        # universal newlines, as the text-mode read before
        text = None if data is None else \
            data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except (IOError, OSError) as err:
        raise GpuhostError("cannot read %s: %s" % (path, err), field="irqbalance_config",
                           fix="check the path and its permissions (become: true)")
    except UnicodeDecodeError as err:
        raise GpuhostError("%s is not a text file (%s)" % (path, err),
                           field="irqbalance_config",
                           fix="check that irqbalance_config names irqbalance's environment "
                               "file (/etc/sysconfig/irqbalance or /etc/default/irqbalance) "
                               "and restore it from the irqbalance package")
    if text is None:
        return ""
    check_syntax(text, path)
    return text


def banned_in_config(text):
    """(key, cpus) of the ban list the file sets: the key irqbalance reads
    (IRQBALANCE_BANNED_CPULIST wins, as in irqbalance 1.8 and later) and its CPUs as a
    sorted tuple; (None, None) when it sets neither, (key, None) when the value cannot
    be parsed. Quotes around the value are the shell's, not part of it."""
    for key, is_mask in ((CPULIST_KEY, False), (MASK_KEY, True)):
        value = line_value(text or "", key)
        if value is None:
            continue
        value = value.strip().strip("\"'")
        return key, parse_cpus_text(value, is_mask=is_mask)
    return None, None


def line_value(text, key):
    """The last value given to ``key`` in the file, as written (quotes included)."""
    value = None
    for line in text.splitlines():
        match = ASSIGNMENT.match(line)
        if match and match.group(1) == key:
            value = match.group(2)
    return value
