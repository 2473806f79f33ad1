# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A tenant guest's container, read for the guest role: whether an image is present, the
server container's main PID, the CPUs and memory nodes the kernel lets that process use
(``/proc/<pid>/status`` below a root), what ``numactl --show`` says inside the
container, and the verdict on its binding to the guest's NUMA cell (runbook section 11).

Plain functions: the module (plugins/modules/container_facts.py) runs the runtime's
commands and hands their output here.

numactl on ``docker run`` binds only the client; the server is bound by the container's
cpuset. So the proof is read from the server process itself, and numactl runs through
the runtime's exec, in the container's cgroup and cpuset like the server (entered with
nsenter it would run in the caller's cgroup and show the whole machine).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    MAX_NODE, format_cpulist, parse_cpulist)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import read_file_text

# The inspect formats (Go templates of docker and podman alike).
PID_FORMAT = "{{.State.Pid}}"
IMAGE_ID_FORMAT = "{{.Id}}"

_STATUS_FIELD = re.compile(r"^(Cpus_allowed_list|Mems_allowed_list):\s*(\S+)\s*$", re.M)
_NUMACTL_FIELD = re.compile(r"^(membind|physcpubind|cpubind|nodebind):\s*(.*?)\s*$", re.M)


def image_inspect_argv(runtime, image):
    return [runtime, "image", "inspect", "--format", IMAGE_ID_FORMAT, "--", image]


def pid_inspect_argv(runtime, container):
    return [runtime, "inspect", "--format", PID_FORMAT, "--", container]


def numactl_argv(runtime, container):
    return [runtime, "exec", "--", container, "numactl", "--show"]


def parse_pid(text):
    """The main PID ``docker inspect --format {{.State.Pid}}`` printed; None when the
    container is not running (0) or the answer is not a number."""
    text = (text or "").strip()
    if not text.isdigit():
        return None
    pid = int(text)
    return pid if pid > 0 else None


def read_process_binding(root, pid):
    """The CPUs and memory nodes the kernel allows process ``pid`` (its
    ``Cpus_allowed_list`` and ``Mems_allowed_list``), read below ``root``:
    {cpus_allowed, mems_allowed}, each normalised ("0-3"), None when absent."""
    path = os.path.join(root, "proc", str(int(pid)), "status")
    try:
        text = read_file_text(path, field="container")
    except OSError as err:
        raise GpuhostError("cannot read %s: %s" % (path, err.strerror), field="container",
                           fix="the container's main process exited after its PID was read: "
                               "see the runtime's logs of the container") from None
    fields = dict(_STATUS_FIELD.findall(text))
    return {"cpus_allowed": _normal(fields.get("Cpus_allowed_list"), "Cpus_allowed_list"),
            "mems_allowed": _normal(fields.get("Mems_allowed_list"), "Mems_allowed_list")}


def parse_numactl_show(text):
    """``numactl --show``'s membind and physcpubind, as CPU/node lists ("0-3"); None for
    a line it did not print."""
    fields = dict(_NUMACTL_FIELD.findall(text or ""))
    return {"membind": _normal_words(fields.get("membind"), "membind"),
            "physcpubind": _normal_words(fields.get("physcpubind"), "physcpubind")}


def binding_target(cpus, node):
    """The binding asked for, checked and normalised: ("0-3", "0")."""
    if not isinstance(cpus, str) or not cpus.strip():
        raise GpuhostError("cpus is empty", field="cpus", fix="give the cell's CPU list, such as 0-3")
    wanted_cpus = format_cpulist(parse_cpulist(cpus.strip(), "cpus"))
    if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node <= MAX_NODE:
        raise GpuhostError("node %r is not a NUMA node number" % (node,), field="node",
                           fix="a number from 0 to %d" % MAX_NODE)
    return wanted_cpus, str(node)


def binding_findings(observed, cpus, node):
    """What keeps the server off the guest's cell: a sentence per finding, empty when the
    process and (where numactl ran) its container both say CPUs ``cpus``, node ``node``."""
    wanted_cpus, wanted_node = binding_target(cpus, node)
    findings = []
    if observed.get("cpus_allowed") != wanted_cpus:
        findings.append("the server may run on CPUs %s, not only on cell %s's CPUs %s"
                        % (observed.get("cpus_allowed"), wanted_node, wanted_cpus))
    if observed.get("mems_allowed") != wanted_node:
        findings.append("the server may take memory from nodes %s, not only from node %s"
                        % (observed.get("mems_allowed"), wanted_node))
    numactl = observed.get("numactl") or {}
    if numactl.get("ran"):
        if numactl.get("membind") != wanted_node:
            findings.append("numactl --show in the container says membind %s, not %s"
                            % (numactl.get("membind"), wanted_node))
        if numactl.get("physcpubind") != wanted_cpus:
            findings.append("numactl --show in the container says physcpubind %s, not %s"
                            % (numactl.get("physcpubind"), wanted_cpus))
    return findings


def _normal(text, field):
    if text is None:
        return None
    try:
        return format_cpulist(parse_cpulist(text, field))
    except GpuhostError:
        return text


def _normal_words(text, field):
    if text is None:
        return None
    return _normal(",".join(text.split()), field)
