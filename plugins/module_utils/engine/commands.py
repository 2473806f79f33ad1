# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The command runner every gpuhost.kvm module gets from new_module() as its
``run_command``: it reads what the command prints to the end.

ansible-core's own ``AnsibleModule.run_command`` (every release this collection supports)
reads the command's pipes in a loop that waits at most one second for output, and leaves
the loop as soon as a wait ends with nothing read and the command has exited. A command
that prints its whole answer and exits between the end of that wait and the check is
reported with its exit status and nothing it printed (ansible/ansible#51393). That takes
only a host busy enough that the command needs more than a second: ``systemctl show``
answered nothing, with status 0, on the loaded lab, and host_units refused the host. A
module that parses an answer must never read an empty one for a real one, so the pipes
are read here until the command closes them (``subprocess.communicate``).

Only what the modules ask of run_command is taken: an argument list (never a shell
line), ``check_rc``, ``environ_update`` and ``data``; the environment is the one
ansible-core would give (the module's own, its ``run_command_environ_update``, the
call's update, no AnsiballZ paths on PYTHONPATH).
"""

from __future__ import annotations

import os
import subprocess

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

# The PYTHONPATH entries AnsiballZ adds for the module itself (ansible-core drops them too):
# a Python program the module runs must not import the module's payload.
_ANSIBALLZ_PATH_SUFFIXES = ("/ansible_modlib.zip", "/debug_dir")


def command_environment(module, environ_update=None):
    """The environment ansible-core's run_command would give the command."""
    env = dict(os.environ)
    env.update(getattr(module, "run_command_environ_update", None) or {})
    env.update(environ_update or {})
    if "PYTHONPATH" in env:
        kept = [entry for entry in env["PYTHONPATH"].split(":")
                if entry and not entry.endswith(_ANSIBALLZ_PATH_SUFFIXES)]
        if kept:
            env["PYTHONPATH"] = ":".join(kept)
        else:
            del env["PYTHONPATH"]
    return env


def run_to_the_end(module, args, check_rc=False, environ_update=None, data=None):
    """``(rc, stdout, stderr)`` of ``args`` (a list: no shell), as run_command returns
    them, with everything the command printed. stdin is ``data`` or nothing, so that no
    command waits on a prompt. A command that cannot be started is a GpuhostError naming
    it; ``check_rc`` fails the module on a non-zero status, as run_command does."""
    if isinstance(args, (str, bytes)) or not args:
        raise GpuhostError("a command is run from a list of arguments, not %r" % (args,),
                           field="command", fix="this is a bug in the module: report it")
    argv = [os.fsencode(arg) if isinstance(arg, str) else arg for arg in args]
    stdin_data = None if data is None else (data if isinstance(data, bytes) else data.encode("utf-8"))
    try:
        proc = subprocess.run(argv, input=stdin_data, capture_output=True, close_fds=True,
                              env=command_environment(module, environ_update), check=False,
                              stdin=None if stdin_data is not None else subprocess.DEVNULL)
    except OSError as err:
        raise GpuhostError("cannot run %s: %s" % (" ".join(str(arg) for arg in args), err.strerror or err),
                           field="command", fix="install the tool on the host, or put it on PATH") from err
    out = proc.stdout.decode("utf-8", "surrogateescape")
    err = proc.stderr.decode("utf-8", "surrogateescape")
    if check_rc and proc.returncode != 0:
        module.fail_json(cmd=[str(arg) for arg in args], rc=proc.returncode, stdout=out, stderr=err,
                         msg=(err or out).strip() or "rc=%d" % proc.returncode)
    return proc.returncode, out, err


def install_runner(module):
    """Give ``module`` (an AnsibleModule) run_to_the_end as its run_command."""
    def run_command(args, check_rc=False, environ_update=None, data=None):
        return run_to_the_end(module, args, check_rc=check_rc, environ_update=environ_update, data=data)
    module.run_command = run_command
    return module
