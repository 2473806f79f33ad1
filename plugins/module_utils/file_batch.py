# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read many small host files (sysfs attributes, /proc/cmdline, /proc/meminfo) in one
remote command instead of one ``slurp`` per file.

Every module run on a host starts a Python interpreter there; on the lab under TCG that
costs seconds, so the roles' read-only passes (bios, numa, validate) were dominated by
slurp loops. One ``grep`` prints every file, each line prefixed by the file's path, and
:func:`parse_batch_output` splits that back into one text per path on the controller.

A path that does not exist or cannot be read is left out of the result, as a failed
slurp would be: the caller decides whether that is a finding or an error.
"""

from __future__ import annotations

import posixpath

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError


def _unique(paths, field):
    if isinstance(paths, str) or not isinstance(paths, (list, tuple)):
        raise GpuhostError("expected a list of file paths, got %r" % (paths,), field=field,
                           fix="pass a list, for example [root ~ '/proc/cmdline']")
    unique = []
    for path in paths:
        if not isinstance(path, str) or not path.startswith("/"):
            raise GpuhostError("%r is not an absolute path" % (path,), field=field,
                               fix="prefix the file with the sysfs root (gpuhost_sysfs_root)")
        if path not in unique:
            unique.append(path)
    return unique


def pci_attribute_paths(addresses, attribute, root="/"):
    """The sysfs file ``attribute`` (numa_node, sriov_totalvfs) of each PCI function,
    below ``root``."""
    if isinstance(addresses, str) or not isinstance(addresses, (list, tuple)):
        raise GpuhostError("expected a list of PCI addresses, got %r" % (addresses,),
                           field="addresses", fix="pass a list such as ['0000:65:00.0']")
    if not attribute or "/" in attribute:
        raise GpuhostError("%r is not a sysfs attribute name" % (attribute,), field="attribute",
                           fix="name one file of the device directory, such as numa_node")
    return [posixpath.join(root or "/", "sys/bus/pci/devices", address, attribute)
            for address in addresses]


def batch_read_argv(paths):
    """The argv that prints every line of every file as ``PATH:LINE``.

    ``--text`` so that a NUL in an attribute never turns a file into "Binary file
    matches"; ``--no-messages`` so that a missing file is simply absent from the output
    (grep then exits 2, which the task must accept). Paths are deduplicated, since grep
    would print a file listed twice twice.
    """
    return (["grep", "--text", "--no-messages", "--with-filename", "--regexp=", "--"]
            + _unique(paths, "paths"))


def parse_batch_output(output, paths, missing=None):
    """``{path: text}`` for every file of ``paths`` that printed at least one line.

    With ``missing`` given, every path is in the result and the ones that printed
    nothing (absent, unreadable or empty) map to it.

    Lines are matched against the requested paths, longest first, rather than split at
    the first colon: PCI addresses (``0000:65:00.0``) and /proc/meminfo put colons in
    both halves. A file's lines are joined by newlines, without the trailing newline, as
    ``slurp | b64decode | trim`` would give for a one-line attribute.
    """
    if output is None:
        output = ""
    if not isinstance(output, str):
        raise GpuhostError("expected the command's stdout text, got %r" % (output,),
                           field="output", fix="pass the registered result's stdout")
    wanted = sorted(_unique(paths, "paths"), key=len, reverse=True)
    lines = {}
    for line in output.splitlines():
        for path in wanted:
            if line.startswith(path + ":"):
                lines.setdefault(path, []).append(line[len(path) + 1:])
                break
    texts = dict((path, "\n".join(text)) for path, text in lines.items())
    if missing is not None:
        for path in wanted:
            texts.setdefault(path, missing)
    return texts
