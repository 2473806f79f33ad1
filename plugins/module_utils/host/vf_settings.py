# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A tenant VF's network isolation settings (MAC, VLAN, spoof checking, trust): the
defaults and the one reader of a plan's ``vf`` entry that every consumer uses. The
validators every input goes through are in validators.py.

The same values travel from the tenant request (``nic_vf: {mac, vlan, spoofchk,
trust}``) into the plan's ``vf`` entry, to gpuhost.kvm.sriov_vfs (``ip link set dev
<pf> vf <n> ...``), into the domain XML (``<mac>``, ``<vlan>``) and back from the host
into the validation report. A plan written before these keys existed lacks them:
``vf_settings()`` reads a missing key as its default, so every consumer agrees.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    MAC_EXAMPLE, ZERO_MAC, validate_flag, validate_mac, validate_vlan)

SETTING_KEYS = ("mac", "vlan", "spoofchk", "trust")
# A tenant VF without settings: the driver's own MAC, no VLAN, anti-spoofing on and not
# trusted (no MAC change, no promiscuous mode from inside the guest).
DEFAULTS = {"mac": None, "vlan": 0, "spoofchk": True, "trust": False}


@dataclass(frozen=True)
class VfRequest:
    """What a tenant asks of its VF: ``nic_vf: true`` is ``VfRequest()``."""

    mac: Optional[str] = None
    vlan: int = 0
    spoofchk: bool = True
    trust: bool = False

    def as_dict(self):
        return {"mac": self.mac, "vlan": self.vlan, "spoofchk": self.spoofchk,
                "trust": self.trust}


def parse_nic_vf(value, field="nic_vf"):
    """A request's ``nic_vf``: false/absent -> False, true -> VfRequest() with the
    defaults, a mapping -> VfRequest with its settings (every key optional; a key given
    as null keeps its default)."""
    if value is None or value is False:
        return False
    if value is True:
        return VfRequest()
    if isinstance(value, VfRequest):
        value = value.as_dict()
    if not isinstance(value, dict):
        raise GpuhostError("%r is not true or false" % (value,), field=field,
                           fix="write nic_vf: true or nic_vf: false, or a mapping such as "
                               "nic_vf: {mac: \"%s\", vlan: 100, spoofchk: true, trust: "
                               "false}" % MAC_EXAMPLE)
    unknown = sorted(str(k) for k in value if k not in SETTING_KEYS)
    if unknown:
        raise GpuhostError("unknown nic_vf keys %s" % ", ".join(unknown), field=field,
                           fix="use only %s" % ", ".join(SETTING_KEYS))
    settings = dict(DEFAULTS)
    if value.get("mac") is not None:
        settings["mac"] = validate_mac(value["mac"], field="%s.mac" % field)
    if value.get("vlan") is not None:
        settings["vlan"] = validate_vlan(value["vlan"], field="%s.vlan" % field)
    for flag in ("spoofchk", "trust"):
        if value.get(flag) is not None:
            settings[flag] = validate_flag(value[flag], "%s.%s" % (field, flag))
    return VfRequest(**settings)


def vf_settings(vf_entry):
    """The settings of a plan's ``vf`` entry with the defaults for missing keys (a plan
    written before they existed), or None when the tenant has no VF."""
    if not vf_entry:
        return None
    result = {}
    for key in SETTING_KEYS:
        value = vf_entry.get(key)
        result[key] = DEFAULTS[key] if value is None else value
    if result["mac"] is not None:
        result["mac"] = str(result["mac"]).lower()
    result["vlan"] = int(result["vlan"])
    result["spoofchk"] = bool(result["spoofchk"])
    result["trust"] = bool(result["trust"])
    return result


def _shown(key, value):
    if key == "mac":
        return value or "none (the driver's own)"
    if key == "vlan":
        return str(value) if value else "0 (none)"
    return "true" if value else "false"


def settings_differences(wanted, placed, prefix="nic_vf"):
    """What differs between two settings dicts, as ``nic_vf.vlan 100, placed with 0``."""
    return ["%s.%s %s, placed with %s" % (prefix, key, _shown(key, wanted[key]),
                                          _shown(key, placed[key]))
            for key in SETTING_KEYS if wanted[key] != placed[key]]


# What ``ip -j link show`` reads as a VF's value when the driver does not report it; also
# what a VF usually starts with (no MAC, no VLAN, spoof checking on, not trusted), though
# that is the driver's choice (mlx5 starts with spoof checking off).
FRESH_VF = {"mac": ZERO_MAC, "vlan": 0, "trust": False, "spoofchk": True,
            "link_state": "auto"}


def _vfinfo_int(value, what, field, maximum):
    """A number in ``ip -j link show`` output: a non-negative integer up to ``maximum``
    (JSON gives ints; a string of digits is taken too), else a GpuhostError."""
    if isinstance(value, bool) or not (isinstance(value, int) or (
            isinstance(value, str) and value.isdigit() and value.isascii())):
        number = None
    else:
        number = int(value)
    if number is None or not 0 <= number <= maximum:
        raise GpuhostError("ip -j link show gives %s %r, not a number from 0 to %d"
                           % (what, value, maximum), field=field,
                           fix="check the iproute2 and PF driver versions (ip -j link show dev "
                               "<pf> must list vfinfo_list), then run again")
    return number


def parse_vfinfo(ip_json, field="vfs"):
    """VF index -> current settings from ``ip -j [-d] link show dev <pf>``.

    iproute2 names the MAC ``address`` (``mac`` before 5.x), lists the VLAN in
    ``vlan_list`` (an entry without ``vlan`` is VLAN 0) or as ``vlan``, and leaves out
    ``spoofchk``/``trust`` when the driver does not report them. Output of another
    shape (not JSON, a VF without a number, a negative VF or VLAN) is a GpuhostError
    naming ``field``, never a traceback.
    """
    fix = ("check that ip -j link show dev <pf> prints iproute2's JSON (iproute2 4.x or "
           "later), then run again")
    try:
        data = json.loads(ip_json) if ip_json else []
    except ValueError as exc:
        raise GpuhostError("ip -j link show does not print JSON: %s" % exc, field=field,
                           fix=fix)
    if not isinstance(data, list) or any(not isinstance(link, dict) for link in data):
        raise GpuhostError("ip -j link show prints JSON of another shape (not a list of "
                           "links)", field=field, fix=fix)
    found = {}
    for link in data:
        vfs = link.get("vfinfo_list", []) or []
        if not isinstance(vfs, list) or any(not isinstance(vf, dict) for vf in vfs):
            raise GpuhostError("ip -j link show gives a vfinfo_list that is not a list of "
                               "VFs", field=field, fix=fix)
        for vf in vfs:
            vlans = vf.get("vlan_list") or []
            if not isinstance(vlans, list) or any(not isinstance(v, dict) for v in vlans):
                raise GpuhostError("ip -j link show gives a vlan_list that is not a list of "
                                   "VLANs", field=field, fix=fix)
            vlan = vlans[0].get("vlan", 0) if vlans else vf.get("vlan", 0)
            found[_vfinfo_int(vf.get("vf"), "VF number", field, 0xFFFF)] = {
                "mac": str(vf.get("address", vf.get("mac", FRESH_VF["mac"]))).lower(),
                "vlan": _vfinfo_int(vlan, "VLAN", field, 4095),
                "trust": bool(vf.get("trust", False)),
                "spoofchk": bool(vf.get("spoofchk", True)),
                "link_state": str(vf.get("link_state", "auto")).lower()}
    return found


def setting_mismatches(wanted, have):
    """Where a VF read from the host differs from its plan settings: ``["vlan 0, plan
    100", ...]``. A plan without a MAC leaves the MAC to the driver and libvirt."""
    problems = []
    for key in SETTING_KEYS:
        if key == "mac" and wanted["mac"] is None:
            continue
        if have.get(key) != wanted[key]:
            problems.append("%s %s, plan %s" % (key, _shown(key, have.get(key)),
                                                _shown(key, wanted[key])))
    return problems
