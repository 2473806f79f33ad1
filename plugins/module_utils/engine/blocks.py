# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Marked blocks of shared host files: the lines between a BEGIN and an END marker, as
ansible.builtin.blockinfile writes them, so that several writers (the host_files module,
the iommu role's early modules) share one file without taking each other's lines."""

from __future__ import annotations


def replace_block(before, block, marker):
    """``before`` (bytes, None for no file) with the lines between the ``marker`` lines
    (``{mark}`` as BEGIN and END) replaced by ``block``, or the marked block appended
    when the file has none: the bytes ansible.builtin.blockinfile writes with its
    defaults (insertafter EOF), so a file it wrote stays unchanged."""
    lines = before.splitlines(True) if before else []
    begin = (marker.replace("{mark}", "BEGIN") + "\n").encode("utf-8")
    end = (marker.replace("{mark}", "END") + "\n").encode("utf-8")
    body = block.encode("utf-8", "surrogateescape")
    if body and not body.endswith(b"\n"):
        body += b"\n"
    new = [begin] + body.splitlines(True) + [end] if body else []
    first = last = None
    for number, line in enumerate(lines):
        if line == begin:
            first = number
        if line == end:
            last = number
    if first is None or last is None:
        at = len(lines)
    else:
        at = min(first, last)
        lines[at:max(first, last) + 1] = []
    if at > 0 and not lines[at - 1].endswith(b"\n"):
        lines[at - 1] += b"\n"
    lines[at:at] = new
    return b"".join(lines)


def block_of(data, marker):
    """The text between the ``marker`` lines of ``data`` (bytes), None when it has none."""
    lines = data.splitlines(True) if data else []
    begin = (marker.replace("{mark}", "BEGIN") + "\n").encode("utf-8")
    end = (marker.replace("{mark}", "END") + "\n").encode("utf-8")
    if begin not in lines or end not in lines:
        return None
    first, last = lines.index(begin), lines.index(end)
    return b"".join(lines[first + 1:last]).decode("utf-8", "surrogateescape")


def add_block_step(changes, writer, host_path, block, marker, mode=None, owner=None,
                   field=None, description=None):
    """A step that puts ``block`` between the ``marker`` lines of the shared host file
    ``host_path``: it reads, merges and writes under the file's lock (HostWriter.lock),
    so another run's block written since the plan read the file is kept, whichever
    module wrote it. The undo puts back, the same way, only this block as it was.
    The destination is checked now (a link, a hard link, not a regular file)."""
    writer.check_replaceable(host_path, field)
    record = {}

    def merge(text, remove_when_empty=False):
        """Put ``text`` (None: no block) into the file as it is now, under its lock;
        returns what the file held."""
        with writer.lock(host_path, field) as lock:
            current = writer.read_unlinked(host_path, field)
            wanted = replace_block(current, text or "", marker)
            if not wanted and (remove_when_empty or current is None):
                writer.remove_file(host_path)
            elif wanted != current:
                writer.write_file(host_path, wanted, mode, owner, field=field)
            lock.remove()     # no lock file is left beside the host's file
        return current

    def apply():
        record["folders"] = writer.missing_folders(host_path)
        record["was"] = merge(block)

    def undo():
        # a file this step created goes again once no other block is left in it
        merge(block_of(record["was"], marker), remove_when_empty=record["was"] is None)
        writer.remove_empty_folders(record["folders"])
    changes.add(description or "update the block of %s" % host_path, apply, undo)
