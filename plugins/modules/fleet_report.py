#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: fleet_report
short_description: Write the fleet capacity report (Markdown, JSON and SVG) from every host's capacity facts
version_added: 0.1.0
description:
  - Takes the C(gpuhost_capacity) fact of every host (M(gpuhost.kvm.capacity_facts)) and
    writes a fleet report into a directory, usually on the controller.
  - The report has, per host and NUMA node, the free GPUs (and how many have a clean
    IOMMU group), the free whole cores, the free hugepages per size and the free VFs,
    plus the tenants per host and the fleet totals. Hosts without data (unreachable, or
    their facts task failed) are listed as such, never dropped silently.
  - The files are C(fleet-capacity.md), C(fleet-capacity.json) and C(fleet-capacity.svg).
    They carry no timestamp, so an unchanged fleet rewrites nothing and reports no
    change. Each file is written by the collection's one writer, as a temporary file in
    O(dest), fsync, rename, fsync of the directory.
  - Every file is checked before the first is written, in check mode too. A report file
    that is a symbolic link, or anything but a regular file, is refused, never written
    through or replaced; so is a O(dest) that is not a directory.
author:
  - gpuhost.kvm contributors (@gpuhost)
options:
  hosts:
    description:
      - Host name to that host's C(gpuhost_capacity) fact (its C(topology) and C(ledger)
        keys are used), or to null for a host that gave no data.
      - A host whose fact is missing, of another shape or unusable is listed without
        data, with the reason; the other hosts are reported as usual.
    type: dict
    required: true
  dest:
    description:
      - Directory to write the report files into; created when missing.
      - An absolute path; a relative one is refused.
    type: path
    required: true
  formats:
    description: Which files to write.
    type: list
    elements: str
    choices: [markdown, json, svg]
    default: [markdown, json, svg]
attributes:
  check_mode:
    support: full
    description: Computes the report and says which files would change, writes nothing.
  diff_mode:
    support: full
    description: Shows the Markdown and JSON files before and after.
seealso:
  - module: gpuhost.kvm.capacity_facts
  - module: gpuhost.kvm.fleet_place
"""

EXAMPLES = r"""
- name: Write the fleet report on the controller
  gpuhost.kvm.fleet_report:
    hosts: >-
      {{ dict(groups['gpu_hosts'] | zip(groups['gpu_hosts'] | map('extract', hostvars)
         | map(attribute='ansible_facts.gpuhost_capacity', default=None))) }}
    dest: "{{ playbook_dir }}/../reports/fleet"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
report:
  description:
    - The fleet report as data (format C(gpuhost.kvm/fleet-report), version 1).
    - C(totals) sums the fleet; C(hosts) maps each host to its capacity (see
      M(gpuhost.kvm.capacity_facts)) or to C({error}) when it gave no data.
  type: dict
  returned: success
  sample:
    format: gpuhost.kvm/fleet-report
    version: 1
    totals: {hosts: 2, hosts_without_data: 0, tenants: 1, gpus_total: 9, gpus_free: 8,
             gpus_free_clean: 8, gpus_stranded: 0, cores_total: 96, cores_free: 88,
             vfs_free: 40}
    hosts: {}
files:
  description: The report files, each with its path and whether it changed.
  type: list
  elements: dict
  returned: success
  sample: [{path: /srv/reports/fleet/fleet-capacity.md, changed: true}]
steps:
  description: The writes, in order (planned in check mode); a failed write puts back
    the files written before it.
  type: list
  elements: str
  returned: always
  sample: ["update /srv/reports/fleet/fleet-capacity.md"]
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.fleet import fleet_report
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.fleet_render import render_markdown, render_svg
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, StepPlan, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import describe_os_error
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import absolute_path

FILES = {
    "markdown": "fleet-capacity.md",
    "json": "fleet-capacity.json",
    "svg": "fleet-capacity.svg",
}


def _as_dest(err):
    """The writer's refusal of a report file, named by the option that chose the path."""
    err.field = "dest"
    return err


class FleetReport(PlannedChange):
    """Computes the report, then writes the files whose content differs, as one change
    set: a file that cannot be written puts back the ones written before it."""

    def __init__(self, module, writer=None):
        super(FleetReport, self).__init__(module)
        self.params = module.params
        # The collection's one writer: no '..', never through a link, atomic replace.
        self.writer = writer or HostWriter("/")
        self.report = None
        self.files = []
        self.file_diffs = []

    def decide(self):
        # Absolute only: a relative directory would be wherever the module happens to run.
        dest = absolute_path(self.params["dest"], "dest", kind="report directory")
        if os.path.lexists(dest) and not os.path.isdir(dest):
            raise GpuhostError("%s is not a directory" % dest, field="dest",
                               fix="move it away, or give the path of a directory")
        paths = [(fmt, os.path.join(dest, FILES[fmt])) for fmt in self.params["formats"]]
        # Every file before the first write (and in check mode): a planted link or a
        # directory at one of them refuses the whole report, never half of it.
        for fmt, path in paths:
            try:
                self.writer.check_replaceable(path, field="dest")
            except GpuhostError as err:
                raise _as_dest(err)
        # A host whose data is not a capacity fact is reported without data by
        # fleet_report, with the reason: one odd host never sinks the fleet's report.
        self.report = fleet_report(self.params["hosts"])
        texts = {
            "markdown": render_markdown(self.report),
            "json": json.dumps(self.report, indent=2, sort_keys=True) + "\n",
            "svg": render_svg(self.report),
        }
        changes = ChangeSet()
        for fmt, path in paths:
            text = texts[fmt]
            try:
                data = self.writer.read_bytes(path)
            except OSError as err:
                raise GpuhostError("cannot read %s: %s" % (path, describe_os_error(err)),
                                   field="dest", fix="give a directory this user can read")
            before = None if data is None else data.decode("utf-8", "replace")
            changed = before != text
            self.files.append({"path": path, "changed": changed})
            if changed and fmt != "svg":
                self.file_diffs.append({"before": before or "", "after": text,
                                        "before_header": path, "after_header": path})
            if changed:
                self._plan_write(changes, path, text.encode("utf-8"), data)
        return StepPlan(changes)

    def _plan_write(self, changes, path, content, before):
        """The step that writes one file; its undo puts back ``before`` (the exact
        bytes), or removes the file and the folders the write made."""
        created = []

        def write():
            created[:] = self._write(path, content) or []

        def undo():
            if before is None:
                self.writer.remove_file(path)
                self.writer.remove_empty_folders(created)
            else:
                self._write(path, before)
        changes.add("%s %s" % ("create" if before is None else "update", path), write, undo)

    def _write(self, path, content):
        """One file by the shared writer (temp file, fsync, rename, fsync of the
        folder; it creates dest when missing and refuses a link planted since)."""
        try:
            return self.writer.write_file(path, content)
        except GpuhostError as err:
            raise _as_dest(err)
        except OSError as err:
            raise GpuhostError("cannot write %s: %s" % (path, describe_os_error(err)),
                               field="dest", fix="give a directory this user can write")

    @property
    def result(self):
        result = {"changed": any(f["changed"] for f in self.files), "files": self.files,
                  "steps": self.plan.changes.descriptions if self.plan else []}
        if self.report is not None:
            result["report"] = self.report
        if self.module._diff and self.file_diffs:
            result["diff"] = self.file_diffs
        return result


def build_module():
    return new_module(
        AnsibleModule, argument_spec={
            "hosts": {"type": "dict", "required": True},
            "dest": {"type": "path", "required": True},
            "formats": {"type": "list", "elements": "str",
                        "choices": sorted(FILES), "default": ["markdown", "json", "svg"]},
        },
        supports_check_mode=True,
    )


def main():
    module = build_module()
    run_module(module, FleetReport(module), changes_host=True)


if __name__ == "__main__":
    main()
