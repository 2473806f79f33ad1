# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render the reliability summary (written by conftest.py) as one table.

    python tests/reliability/summary.py [summary.json]

Exit status 1 when any case changed the host or a fault was not recovered.
"""

import json
import os
import sys

DEFAULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "output", "reliability-summary.json")


def rows(data):
    bad = data["bad_inputs"]
    yield ("Bad inputs", "cases tried", bad["tried"])
    yield ("", "failed safely (exact message, host unchanged)", bad["failed_safely"])
    yield ("", "changed the host (must be 0)", bad["changed_host"])
    for kind, per in sorted(bad["by_target"].items()):
        yield ("", "  %s: tried / failed safely" % kind,
               "%d / %d" % (per["tried"], per["failed_safely"]))
    lockout = data["lockout"]
    yield ("Lockout", "attempts on host-critical devices, reboot guards", lockout["tried"])
    yield ("", "refused / guarded", lockout["refused"])
    faults = data["faults"]
    yield ("Faults", "injected", faults["injected"])
    yield ("", "recovered (host back to its snapshot)", faults["recovered"])
    for kind, per in sorted(faults["kinds"].items()):
        yield ("", "  %s: injected / recovered" % kind,
               "%d / %d" % (per["injected"], per["recovered"]))
    conflicts = data["conflicts"]
    yield ("Concurrency", "concurrent conflicts staged", conflicts["tried"])
    yield ("", "resolved (one wins, one fails naming it, nothing twice)",
           conflicts["resolved"])
    isolation = data["isolation"]
    yield ("Isolation", "checks", isolation["checks"])
    yield ("", "held", isolation["held"])


def render(data):
    table = list(rows(data))
    width = max(len(r[1]) for r in table)
    lines = ["%-12s %-*s %s" % ("", width, "", "count"), "-" * (width + 22)]
    for section, label, value in table:
        lines.append("%-12s %-*s %s" % (section, width, label, value))
    return "\n".join(lines)


def healthy(data):
    return (data["bad_inputs"]["changed_host"] == 0
            and data["faults"]["recovered"] == data["faults"]["injected"]
            and data["conflicts"]["resolved"] == data["conflicts"]["tried"]
            and data["bad_inputs"]["failed_safely"] == data["bad_inputs"]["tried"])


def main(argv):
    path = argv[1] if len(argv) > 1 else DEFAULT
    with open(path) as handle:
        data = json.load(handle)
    print(render(data))
    return 0 if healthy(data) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
