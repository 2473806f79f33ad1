"""Helpers for tests that run the real ansible command-line tools from the venv."""

import json
import os
import subprocess
import sys

from . import REPO
from .fixturegen import build_runbook_host

BIN = os.path.dirname(sys.executable)


def ansible_env(**extra):
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = os.path.join(REPO, "ansible.cfg")
    env["ANSIBLE_NOCOLOR"] = "1"
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


def interpreter_args():
    """``-e ansible_python_interpreter=...`` naming the interpreter the module_python
    fixture chose for the test's modules (GPUHOST_TEST_MODULE_PYTHON), else nothing.
    Last on the command line, so it wins over any other setting of it."""
    python = os.environ.get("GPUHOST_TEST_MODULE_PYTHON")
    return ["-e", "ansible_python_interpreter=%s" % python] if python else []


def run_tool(tool, *args, cwd=REPO, env=None, check=True, timeout=300):
    """Run one of the venv's ansible tools; on failure the assertion shows its output.
    ``ansible`` and ``ansible-playbook`` run modules with the interpreter of
    ``interpreter_args``."""
    argv = [os.path.join(BIN, tool)] + [str(a) for a in args]
    if tool in ("ansible", "ansible-playbook"):
        argv += interpreter_args()
    proc = subprocess.run(argv, cwd=cwd, env=env or ansible_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError("%s failed (rc=%d)\nstdout:\n%s\nstderr:\n%s"
                             % (" ".join(argv), proc.returncode, proc.stdout, proc.stderr))
    return proc


def folded(text):
    """``text`` with its whitespace folded to single spaces: the YAML result format wraps
    long lines, and where it breaks them differs between ansible-core versions."""
    return " ".join(text.split())


def run_module_adhoc(module, args, python=None, check=False, timeout=300):
    """``ansible localhost -m MODULE -a ARGS`` on a local connection: (process, result).
    ``python`` None: this test's own, or the one the module_python fixture chose
    (``run_tool``)."""
    python = python or sys.executable
    argv = ["localhost", "-i", "localhost,", "-c", "local", "-m", module, "-a", json.dumps(args),
            "-e", "ansible_python_interpreter=%s" % python]
    if check:
        argv.append("--check")
    env = ansible_env(ANSIBLE_STDOUT_CALLBACK="minimal", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = run_tool("ansible", *argv, env=env, check=False, timeout=timeout)
    start = proc.stdout.index("{", proc.stdout.find("localhost | "))
    return proc, json.loads(proc.stdout[start:])


# The example inventory, whose hk-gpu-01 the playbook tests point at a synthetic host.
INVENTORY = os.path.join(REPO, "inventories", "example", "hosts.yml")


def point_hk_gpu_01_at(base, build=build_runbook_host, **overrides):
    """Build a synthetic host below ``base`` and the extra vars that point hk-gpu-01 at
    it (local connection, test:///default libvirt, state and ledger below ``base``, the
    guests' services left alone)."""
    root = str(base / "root")
    build(root, **overrides)
    # irqbalance installed, as the sriov_irq role's package task leaves a real host (the
    # task does not run here): irq_affinity writes its ban list into this file and never
    # creates it
    for config in ("etc/default/irqbalance", "etc/sysconfig/irqbalance"):
        os.makedirs(os.path.dirname(os.path.join(root, config)), exist_ok=True)
        with open(os.path.join(root, config), "w", encoding="utf-8") as handle:
            handle.write("IRQBALANCE_ONESHOT=0\n")
    image = str(base / "base.qcow2")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", image, "1G"], check=True)
    extra = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpuhost_sysfs_root": root,
        "gpuhost_ledger_path": str(base / "ledger" / "ledger.json"),
        "gpuhost_state_dir": str(base / "state"),
        "gpuhost_libvirt_uri": "test:///default",
        "plan_output_dir": str(base / "reports"),
        "validate_report_dir": str(base / "reports"),
        "vm_base_image": image,
        "vm_image_dir": str(base / "images"),
        "vm_domain_type": "test",
        # The tenants' guests run here too (the local connection is an extra var): this
        # machine has no systemd as PID 1 to start their services.
        "guest_manage_services": False,
    }
    path = base / "extra.json"
    path.write_text(json.dumps(extra))
    return {"base": base, "root": root, "extra": "@%s" % path, "vars": extra}


def role_tasks(role, file="main.yml"):
    """The tasks of ``roles/<role>/tasks/<file>``, the tasks inside blocks included (a
    role may wrap its tasks in a block that carries its derived vars)."""
    import yaml
    with open(os.path.join(REPO, "roles", role, "tasks", file), encoding="utf-8") as handle:
        top = yaml.safe_load(handle) or []

    def walk(tasks):
        for task in tasks:
            yield task
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key) or [])
    return list(walk(top))


def write_under(root, path, text):
    """Write ``text`` to the host path ``path`` below the test's ``root``, making its folders."""
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(text)


def read_under(root, path):
    """The text of the host path ``path`` below the test's ``root``."""
    with open(os.path.join(str(root), path.lstrip("/")), encoding="utf-8") as handle:
        return handle.read()
