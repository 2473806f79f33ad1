# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What libvirt_pinned_domain would do to a domain, decided before anything is done.

Pure functions: the domain as libvirt has it (``ExistingDomain``, or None) and the
DomainSpec go in; the actions, ``restart_required`` and the --diff come out. The
module reports them in check mode and carries them out otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import canonical as domain_canonical
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import xml as dx
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

# target state -> (action when the domain's activity differs, active afterwards)
RUN_STATE_ACTIONS = {"running": ("start", True), "shutdown": ("shutdown", False),
                     "destroyed": ("destroy", False)}


@dataclass
class ExistingDomain:
    """The domain libvirt has under the name: its inactive XML and its state."""

    inactive_xml: str
    active: bool
    autostart: bool
    uuid: str = ""


@dataclass
class DomainChange:
    """The decision for one run. ``xml_to_define`` is the wanted XML with what libvirt
    assigned to the existing domain (UUID, MACs, addresses) kept."""

    wanted: object
    xml_to_define: str
    changed_elements: List[str]
    actions: List[str]
    restart_required: bool
    diff: dict
    run_state_action: Optional[str] = None
    set_autostart: Optional[bool] = None

    @property
    def define(self):
        return bool(self.changed_elements)


@dataclass
class DomainRemoval:
    actions: List[str] = field(default_factory=list)
    changed_elements: List[str] = field(default_factory=list)
    diff: dict = field(default_factory=lambda: {"before": "", "after": ""})


@dataclass
class DomainPlan:
    """What one run decided: the domain as libvirt has it, the change (a DomainChange,
    or a removal for state absent), the storage steps and the files to remove. Its
    change set is built when it is applied: the storage's, then the define."""

    change: object
    domain: object = None
    storage_steps: list = field(default_factory=list)
    to_remove: list = field(default_factory=list)
    changes: ChangeSet = field(default_factory=ChangeSet)


def check_same_machine(existing, uuid, name):
    """Refuse to redefine ``existing`` under another UUID: the uuid option names a
    machine, and a domain of that name with another UUID is a different one."""
    if existing is not None and uuid and existing.uuid.lower() != uuid.lower():
        raise GpuhostError(
            "domain %s exists with UUID %s, not %s" % (name, existing.uuid, uuid),
            field="uuid",
            fix="drop the uuid option to keep the existing domain, or undefine %s "
                "first if it is a different machine" % name)


def plan_domain_change(existing, spec, state, autostart=True, storage_actions=(),
                       storage_restarts=False):
    """The change that takes ``existing`` (None: no such domain) to ``spec`` in
    ``state`` with ``autostart``. ``storage_actions`` (the overlay and seed steps) come
    first; ``storage_restarts``: a seed the running guest has open is rebuilt, so it
    needs a restart even when the XML stays the same."""
    existing_xml = existing.inactive_xml if existing is not None else None
    wanted = dx.build_domain_xml(spec)
    to_define = domain_canonical.merge_assigned(wanted, existing_xml)
    changed = domain_canonical.changed_elements(existing_xml, wanted)
    before, after = ("", domain_canonical.canonical_form(wanted, wanted)[1]) if existing_xml is None \
        else domain_canonical.canonical_form(existing_xml, wanted)
    actions = list(storage_actions)
    if changed:
        actions.append("define")
    active = bool(existing is not None and existing.active)
    run_state_action, will_be_active = None, active
    if state in RUN_STATE_ACTIONS:
        action, active_after = RUN_STATE_ACTIONS[state]
        if active != active_after:
            run_state_action, will_be_active = action, active_after
            actions.append(action)
    set_autostart = None
    if bool(existing is not None and existing.autostart) != autostart:
        set_autostart = autostart
        actions.append("autostart %s" % ("on" if autostart else "off"))
    return DomainChange(
        wanted=wanted, xml_to_define=dx.to_string(to_define), changed_elements=changed,
        actions=actions, diff={"before": before, "after": after},
        restart_required=bool(active and will_be_active and (changed or storage_restarts)),
        run_state_action=run_state_action, set_autostart=set_autostart)


def plan_domain_removal(existing, files_to_remove=()):
    """Destroy (when running) and undefine ``existing``, then remove the files."""
    removal = DomainRemoval()
    if existing is not None:
        if existing.active:
            removal.actions.append("destroy")
        removal.actions.append("undefine")
        removal.changed_elements = ["domain"]
        removal.diff = {"before": existing.inactive_xml, "after": ""}
    removal.actions.extend("remove %s" % path for path in files_to_remove)
    return removal
