# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""irqbalance's environment file: keep it away from the tenant CPUs.

irqbalance 1.8 and later read IRQBALANCE_BANNED_CPULIST (a cpulist); older versions
read IRQBALANCE_BANNED_CPUS, a hex mask written as comma-separated 32-bit words
(cpuset.format_cpumask). Setting either turns off irqbalance's own ban of the
isolcpus/nohz_full CPUs, so those are added to the ban list. The file is
/etc/sysconfig/irqbalance on RHEL and /etc/default/irqbalance on Debian; the caller
gives the path. Every other line of the file is kept as it is.

With pins to protect, IRQBALANCE_ARGS also names gpuhost.kvm's policy script
(irq_pinning.POLICY_SCRIPT), which bans the pinned IRQs from balancing; the other
arguments in it are kept, and someone else's policy script is refused, not replaced.
"""

from __future__ import annotations

import re
import shlex

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist, format_cpumask)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.irqbalance_config import (
    ARGS_KEY, ASSIGNMENT, CPULIST_KEY, MASK_KEY, POLICY_OPTION, line_value, read_config)

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def format_for_version(version_text):
    """``cpulist`` for irqbalance >= 1.8, ``mask`` for older or unknown versions.

    The mask form is the safe guess: 1.8 and later still read it (with a deprecation
    warning), while older versions ignore the cpulist key entirely.
    """
    match = _VERSION.search(version_text or "")
    if not match:
        return "mask"
    return "cpulist" if (int(match.group(1)), int(match.group(2))) >= (1, 8) else "mask"


def banned_value(cpus, fmt, nr_cpus=None):
    if fmt == "cpulist":
        return format_cpulist(cpus)
    return format_cpumask(cpus, nr_cpus)


def render(text, key, value, drop_keys=(),
           comment="# Managed by gpuhost.kvm irq_affinity: keep IRQs off tenant CPUs."):
    """The file with ``key=value`` set in place (or appended after ``comment``) and
    ``drop_keys`` removed."""
    lines = text.splitlines()
    out = []
    placed = False
    for line in lines:
        match = ASSIGNMENT.match(line)
        if match and match.group(1) == key:
            if not placed:
                out.append("%s=%s" % (key, value))
                placed = True
            continue
        if match and match.group(1) in drop_keys:
            continue
        out.append(line)
    if not placed:
        out.append(comment)
        out.append("%s=%s" % (key, value))
    return "\n".join(out) + "\n"


def banned_cpus(wanted, cpu_state):
    """The ban list: the CPUs asked for plus isolcpus and nohz_full."""
    banned = set(wanted) | set(cpu_state.isolated or ()) | set(cpu_state.nohz_full or ())
    online = set(cpu_state.online or ())
    if online and online <= banned:
        raise GpuhostError(
            "banning CPUs %s (with isolcpus/nohz_full) leaves irqbalance no online CPU"
            % format_cpulist(banned), field="irqbalance_banned_cpus",
            fix="leave at least one housekeeping CPU out of the ban list")
    return tuple(sorted(banned))


def args_with_policy_script(current, script, path):
    """IRQBALANCE_ARGS (its file value, quoted or not) with ``--policyscript=script``."""
    try:
        words = shlex.split(current or "")
    except ValueError as err:
        raise GpuhostError("%s in %s cannot be read as shell words: %s" % (ARGS_KEY, path, err),
                           field="irqbalance_config", fix="fix the quoting of that line")
    if len(words) == 1 and " " in words[0]:
        words = shlex.split(words[0])
    words = [w for w in words if w]
    kept, theirs = [], []
    index = 0
    while index < len(words):
        word = words[index]
        if word.startswith(POLICY_OPTION + "="):
            theirs.append(word.split("=", 1)[1])
        elif word in (POLICY_OPTION, "-l") and index + 1 < len(words):
            theirs.append(words[index + 1])
            index += 1
        else:
            kept.append(word)
        index += 1
    foreign = [s for s in theirs if s != script]
    if foreign:
        raise GpuhostError(
            "%s in %s already names the policy script %s; gpuhost.kvm needs its own (%s) "
            "so that irqbalance leaves the pinned IRQs alone" % (ARGS_KEY, path, foreign[0], script),
            field="irqbalance_config",
            fix="fold that script's rules into a wrapper that also runs %s, or stop "
                "irqbalance on this host" % script)
    return '"%s"' % " ".join(kept + ["%s=%s" % (POLICY_OPTION, script)])


def plan_config(changes, writer, path, wanted_cpus, cpu_state, fmt, policy_script=None):
    """Add the config file change; returns (changed, banned CPUs). ``policy_script``:
    also make irqbalance ask that script which IRQs to leave alone."""
    text = read_config(writer, path)
    banned = banned_cpus(wanted_cpus, cpu_state)
    nr_cpus = len(cpu_state.possible) if cpu_state.possible else None
    key, other = (CPULIST_KEY, MASK_KEY) if fmt == "cpulist" else (MASK_KEY, CPULIST_KEY)
    new = render(text, key, banned_value(banned, fmt, nr_cpus), drop_keys=(other,))
    if policy_script:
        new = render(new, ARGS_KEY, args_with_policy_script(line_value(new, ARGS_KEY),
                                                            policy_script, path),
                     comment="# Managed by gpuhost.kvm irq_affinity: irqbalance leaves the "
                             "IRQs it pins alone.")
    changed = changes.put_file(writer, path, new)
    return changed, banned
