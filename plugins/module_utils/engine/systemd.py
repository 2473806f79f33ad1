# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""systemctl, called one way: ``--`` before the units, and a failure that raises."""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError


def systemctl_argv(verb, *units):
    """``systemctl VERB -- UNITS``: ``--`` before the units, so that no unit is ever
    read as an option (``daemon-reload`` takes none and gets none)."""
    return ["systemctl", verb] + (["--"] + list(units) if units else [])


def systemctl(module, *args, field="persistent", fix="check systemd on the host"):
    """Run ``systemctl ARGS`` on the host; a failure raises (a change set rolls back)."""
    rc, out, err = module.run_command(systemctl_argv(*args))
    if rc != 0:
        raise GpuhostError("systemctl %s failed: %s" % (" ".join(args), (err or out).strip()),
                           field=field, fix=fix)
