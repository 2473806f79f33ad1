# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host slimming in the numa role: the role's own expressions, read
from roles/numa and rendered with ansible-core's Templar, hand gpuhost_slim_services and
the services the collection needs to host_units (whose decisions test_host_units.py
tests), and the report task lists what became of each. No play runs."""

import os

import yaml

from support.helpers import role_tasks

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from support import REPO

ROLES = os.path.join(REPO, "roles")


def _tasks():
    return role_tasks("numa")


def _render(value, variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(value))


UNITS = next(t for t in _tasks() if "gpuhost.kvm.host_units" in t)
REPORT = next(t for t in _tasks() if t["name"].startswith("Report the slimmed services"))


def test_the_default_slims_nothing_and_irqbalance_is_kept_while_sriov_irq_uses_it():
    with open(os.path.join(ROLES, "plan", "defaults", "main.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["gpuhost_slim_services"] == []
    args = UNITS["gpuhost.kvm.host_units"]
    assert args["disable"] == "{{ gpuhost_slim_services }}"
    assert "irqbalance" in _render(args["needed"], {})
    assert _render(args["needed"], {"sriov_irq_manage_irqbalance": False}) == {}


def _report(slimmed, check_mode=False, slim=("cups.service",)):
    variables = dict(REPORT["vars"], __numa_units={"slimmed": slimmed}, gpuhost_slim_services=list(slim),
                     numa_cpu_governor="", __numa_governor="performance", ansible_check_mode=check_mode)
    variables = {key: trust_as_template(value) if isinstance(value, str) else value
                 for key, value in variables.items()}
    return _render("{{ %s }}" % REPORT["when"], variables), _render(REPORT["ansible.builtin.debug"]["msg"], variables)


def test_the_report_lists_disabled_stopped_already_off_and_absent_services():
    shown, msg = _report({"disabled": ["cups.service"], "stopped": ["cups.service"],
                          "already": ["bluetooth.service"], "absent": ["ModemManager.service"]})
    assert shown is True
    assert msg == ["Host slimming: disabled cups.service; stopped cups.service; "
                   "already off bluetooth.service; not installed ModemManager.service."]
    dummy, check = _report({"disabled": ["cups.service"], "stopped": [], "already": [], "absent": []},
                           check_mode=True)
    assert check[0].startswith("Host slimming (check mode: would be): disabled cups.service; stopped none")


def test_no_report_when_nothing_is_slimmed():
    shown, dummy = _report({"disabled": [], "stopped": [], "already": [], "absent": []}, slim=())
    assert shown is False
