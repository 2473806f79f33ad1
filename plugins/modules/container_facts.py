#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: container_facts
short_description: Read a tenant guest's container image and server binding, and judge the binding
version_added: 0.1.0
description:
  - Reads, through the container runtime (docker or podman), whether an image is present
    (O(image)) and, for a container (O(container)), its main process's PID, waiting up to
    O(wait_s) for the container to run.
  - For that process, reads the CPUs and memory nodes the kernel allows it
    (C(Cpus_allowed_list), C(Mems_allowed_list) of C(/proc/<pid>/status) below O(root)),
    and runs C(numactl --show) through the runtime's exec, so that it runs in the
    container's cgroup and cpuset like the server. An image without numactl is reported,
    not failed.
  - With O(cpus) and O(node), judges the binding (runbook section 11, Triton under
    numactl on the GPU's cell) into RV(findings), and fails the task on any of them
    unless O(fail_on_findings=false). C(numactl) on C(docker run) binds only the client,
    so the proof is read from the server process itself.
  - Replaces the guest role's C(command) tasks that read the image and the container.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.read_only
  - gpuhost.kvm.root
options:
  runtime:
    description:
      - The container runtime's program, a name looked up on the PATH or an absolute path.
    type: str
    default: docker
  image:
    description:
      - An image reference whose presence is read (RV(image)).
    type: str
  image_must_exist:
    description:
      - Fail the task when O(image) is not present (after a C(docker load), for example).
    type: bool
    default: false
  container:
    description:
      - The container whose main process is read (RV(container)).
    type: str
  wait_s:
    description:
      - Seconds to wait for O(container) to run (its main PID to be more than 0),
        asking the runtime every 3 seconds. V(0) asks once. At most 3600.
    type: float
    default: 0
  cpus:
    description:
      - The CPU list the server must be bound to (the guest's cell's CPUs). With O(node).
    type: str
  node:
    description:
      - The memory node the server must be bound to. With O(cpus).
    type: int
  unit:
    description:
      - The systemd unit that starts O(container), named in the failure's fix.
    type: str
  fail_on_findings:
    description:
      - With O(cpus) and O(node), fail the task when the container does not run or a
        finding says the binding is wrong, naming each.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Check that the guest has the Triton image
  gpuhost.kvm.container_facts:
    image: nvcr.io/nvidia/tritonserver:24.07-py3
  register: triton_image

- name: Check that Triton runs on NUMA cell 0's CPUs and memory only
  gpuhost.kvm.container_facts:
    container: gpuhost-triton
    wait_s: 120
    cpus: "0-3"
    node: 0
    unit: gpuhost-triton.service
"""

RETURN = r"""
image:
  description: O(image)'s presence.
  returned: when O(image) is given
  type: dict
  contains:
    name:
      description: The reference.
      type: str
    present:
      description: Whether the runtime has it.
      type: bool
    id:
      description: Its ID; null when absent.
      type: str
    error:
      description: What the runtime said when it is absent.
      type: str
  sample: {"name": "nvcr.io/nvidia/tritonserver:24.07-py3", "present": true, "id": "sha256:4f1c", "error": null}
container:
  description: O(container)'s main process and its binding.
  returned: when O(container) is given
  type: dict
  contains:
    name:
      description: The container.
      type: str
    running:
      description: Whether it has a main process.
      type: bool
    pid:
      description: The main PID; null when it does not run.
      type: int
    waited_s:
      description: Seconds spent waiting for it to run.
      type: float
    error:
      description: What the runtime said when it does not run.
      type: str
    cpus_allowed:
      description: The process's C(Cpus_allowed_list), as a normalised CPU list.
      type: str
    mems_allowed:
      description: The process's C(Mems_allowed_list), as a normalised node list.
      type: str
    numactl:
      description:
        - C(numactl --show) in the container (C(ran), C(membind), C(physcpubind)); C(ran)
          false, with C(error), when the image lacks numactl.
      type: dict
  sample:
    name: gpuhost-triton
    running: true
    pid: 4242
    waited_s: 3.0
    error: null
    cpus_allowed: "0-3"
    mems_allowed: "0"
    numactl: {"ran": true, "membind": "0", "physcpubind": "0-3", "error": null}
findings:
  description: With O(cpus) and O(node), what keeps the server off the cell, one sentence each.
  returned: always
  type: list
  elements: str
  sample: ["the server may take memory from nodes 0-1, not only from node 0"]
passed:
  description: With O(cpus) and O(node), whether the container runs bound to the cell; else null.
  returned: always
  type: bool
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.guest import container as core
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import new_module, run_module
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    container_name, finite_number, image_reference, unit_name)

MAX_WAIT_S = 3600
POLL_S = 3.0


class ContainerFacts(object):
    def __init__(self, module, clock=time.monotonic, sleep=time.sleep):
        self.module = module
        self.params = module.params
        self.clock = clock
        self.sleep = sleep
        self.image = None
        self.container = None
        self.findings = []
        self.passed = None

    def runtime(self):
        program = self.params["runtime"]
        path = self.module.get_bin_path(program) if "/" not in program else program
        if not path:
            raise GpuhostError("%s is not installed (not on the PATH)" % program, field="runtime",
                               fix="install the container runtime in the guest (the guest role does), "
                                   "or give the program's path")
        return path

    def ask(self, argv):
        try:
            return self.module.run_command(argv)
        except OSError as error:
            raise GpuhostError("cannot run %s: %s" % (argv[0], error.strerror), field="runtime",
                               fix="give an executable container runtime") from None

    def check(self):
        params = self.params
        if params["image"] is not None:
            image_reference(params["image"])
        if params["container"] is not None:
            container_name(params["container"])
        if params["unit"] is not None:
            unit_name(params["unit"], "unit")
        self.wait_s = finite_number(params["wait_s"], "wait_s", allow_minimum=True, maximum=MAX_WAIT_S,
                                    unit="seconds")
        if (params["cpus"] is None) != (params["node"] is None):
            raise GpuhostError("cpus and node go together", field="cpus" if params["cpus"] is None else "node",
                               fix="give the cell's CPU list and its memory node, or neither")
        if params["cpus"] is not None:
            if params["container"] is None:
                raise GpuhostError("cpus and node judge a container's binding, and no container is given",
                                   field="container", fix="name the container that must be bound")
            core.binding_target(params["cpus"], params["node"])
        if params["image"] is None and params["container"] is None:
            raise GpuhostError("nothing to read", field="container", fix="give an image, a container, or both")

    def run(self):
        self.check()
        runtime = self.runtime()
        if self.params["image"] is not None:
            self.image = self.read_image(runtime, self.params["image"])
            if self.params["image_must_exist"] and not self.image["present"]:
                raise GpuhostError("the image %s is not in this guest (%s)" % (self.image["name"], self.image["error"]),
                                   field="image", fix="load it (docker load --input FILE) or pull it")
        if self.params["container"] is not None:
            self.container = self.read_container(runtime, self.params["container"])
            if self.params["cpus"] is not None:
                self.judge()

    def read_image(self, runtime, image):
        rc, out, err = self.ask(core.image_inspect_argv(runtime, image))
        present = rc == 0 and bool(out.strip())
        return {"name": image, "present": present, "id": out.strip() if present else None,
                "error": None if present else ((err or out).strip()[:500] or "rc=%d" % rc)}

    def read_container(self, runtime, name):
        started = self.clock()
        while True:
            rc, out, err = self.ask(core.pid_inspect_argv(runtime, name))
            pid = core.parse_pid(out) if rc == 0 else None
            waited = self.clock() - started
            if pid is not None or waited + POLL_S > self.wait_s:
                break
            self.sleep(POLL_S)
        answer = {"name": name, "running": pid is not None, "pid": pid, "waited_s": round(waited, 1),
                  "error": None if pid is not None else ((err or out).strip()[:500] or "not running"),
                  "cpus_allowed": None, "mems_allowed": None, "numactl": {"ran": False, "error": None}}
        if pid is None:
            return answer
        answer.update(core.read_process_binding(self.params["root"], pid))
        rc, out, err = self.ask(core.numactl_argv(runtime, name))
        if rc == 0:
            answer["numactl"] = dict(core.parse_numactl_show(out), ran=True, error=None)
        else:
            answer["numactl"] = {"ran": False, "error": (err or out).strip()[:500] or "rc=%d" % rc}
        return answer

    def judge(self):
        container = self.container
        unit = self.params["unit"] or "the container's unit"
        if not container["running"]:
            self.findings = ["the container %s was not running after %s s (%s)"
                             % (container["name"], container["waited_s"], container["error"])]
            self.fix = ("see journalctl -u %s; raise the wait (guest_triton_start_timeout_s) if the "
                        "image is only slow to start" % unit)
        else:
            self.findings = core.binding_findings(container, self.params["cpus"], self.params["node"])
            self.fix = "check the --cpuset-cpus/--cpuset-mems of %s" % unit
        self.passed = not self.findings

    @property
    def failed(self):
        return self.params["fail_on_findings"] and self.passed is False

    @property
    def result(self):
        result = {"changed": False, "findings": self.findings, "passed": self.passed}
        if self.image is not None:
            result["image"] = self.image
        if self.container is not None:
            result["container"] = self.container
        if self.passed is not None:
            container = self.container
            where = ("PID %s: Cpus_allowed_list %s, Mems_allowed_list %s; numactl --show in its container: %s"
                     % (container["pid"], container["cpus_allowed"], container["mems_allowed"],
                        "membind %s, physcpubind %s" % (container["numactl"].get("membind"),
                                                        container["numactl"].get("physcpubind"))
                        if container["numactl"]["ran"] else "not run (%s)" % container["numactl"]["error"])
                     if container["running"] else "not running")
            if self.passed:
                result["msg"] = "%s is bound to CPUs %s and node %s (%s)" % (
                    container["name"], self.params["cpus"], self.params["node"], where)
            else:
                # Worded as every GpuhostError is: the fix after the reason.
                result["msg"] = "%s is not bound to CPUs %s and node %s: %s (%s). Fix: %s" % (
                    container["name"], self.params["cpus"], self.params["node"], "; ".join(self.findings), where,
                    self.fix)
        return result


def build_module():
    return new_module(
        AnsibleModule, argument_spec=dict(
            runtime=dict(type="str", default="docker"),
            image=dict(type="str"),
            image_must_exist=dict(type="bool", default=False),
            container=dict(type="str"),
            wait_s=dict(type="float", default=0),
            cpus=dict(type="str"),
            node=dict(type="int"),
            unit=dict(type="str"),
            fail_on_findings=dict(type="bool", default=True),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    run_module(module, ContainerFacts(module))


if __name__ == "__main__":
    main()
