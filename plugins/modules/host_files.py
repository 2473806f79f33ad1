#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: host_files
short_description: Write a whole set of files and directories on the host in one task
version_added: "0.1.0"
description:
  - Makes the host hold a list of files (with their content), directories and absent
    files, with their modes and owners, in one module run instead of one copy, template
    or file task each (two module runs each for copy and template).
  - Every entry is checked before anything is read, and every path is checked against
    the host before anything is written. Then the paths that differ are changed in the
    order given, each file replaced atomically (a temporary file in the same directory,
    renamed over it). If one step fails, the paths already changed are put back as they
    were, newest first, and the failure says what was rolled back.
  - Never writes through a symbolic link, and refuses a destination that is not a
    regular file (or, for O(files[].state=directory), not a directory).
  - Render templates on the controller (C(lookup('ansible.builtin.template', ...))) and
    data with C(to_nice_json); the module takes the resulting text.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.change_attributes
options:
  files:
    description:
      - The paths to manage, in the order they are changed. A directory listed before
        the files in it is made first; missing parent directories of a file are made
        too (mode 0755 under the usual umask), as C(mkdir -p) would.
      - At most 256 entries, and at most 4 MiB of content together.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description:
          - Absolute path on the host, in its plain form (no C(..), C(.), doubled or
            trailing C(/)); each path at most once.
        type: str
        required: true
      state:
        description:
          - V(file) writes O(files[].content) to a regular file.
          - V(directory) makes a directory.
          - V(absent) removes a regular file (a directory is refused).
        type: str
        choices: [file, directory, absent]
        default: file
      content:
        description:
          - The exact text of the file (UTF-8). With V(file), give it or O(files[].block);
            refused with the other states.
        type: str
      block:
        description:
          - Instead of O(files[].content), the lines the file holds between two marker
            lines, for a file whose other lines belong to someone else (the administrator,
            another tool). The marked block is replaced where it is, or appended at the end
            of the file (made when missing); an empty block removes it.
          - Writes what C(ansible.builtin.blockinfile) writes with its defaults, so a file
            it managed stays unchanged.
        type: str
      marker:
        description:
          - The marker line of O(files[].block), with C({mark}) standing for C(BEGIN) and
            C(END). Required with O(files[].block).
        type: str
      mode:
        description:
          - The mode as a quoted octal string (V('0644')). Required for files and
            directories; an unquoted YAML number is refused, since YAML reads 0644 as 420.
        type: raw
      owner:
        description: User name (or number) that owns the path. Default V(root).
        type: str
      group:
        description: Group name (or number) of the path. Default V(root).
        type: str
notes:
  - The result's RV(changed_paths) replaces one C(register) per file - later tasks test
    C('/etc/x.conf' in result.changed_paths). In check mode it lists what would change.
  - Owners and groups are looked up on the host running the module.
attributes:
  diff_mode:
    details: One entry per changed content (before and after text) and one per changed type, mode or owner.
seealso:
  - name: ansible.builtin.copy and ansible.builtin.file
    description: One file or directory per task (a stat and a copy each); this module writes a role's whole set in one.
    link: https://docs.ansible.com/ansible/latest/collections/ansible/builtin/copy_module.html
"""

EXAMPLES = r"""
- name: Write the NUMA configuration, its boot script and unit in one task
  gpuhost.kvm.host_files:
    files:
      - path: /etc/gpuhost
        state: directory
        mode: "0700"
      - path: /etc/gpuhost/numa.conf
        content: "{{ lookup('ansible.builtin.template', 'numa.conf.j2') }}"
        mode: "0644"
      - path: /etc/systemd/system/gpuhost-numa.service
        content: "{{ lookup('ansible.builtin.template', 'gpuhost-numa.service.j2') }}"
        mode: "0644"
      - path: /etc/sysctl.d/90-old.conf
        state: absent
  register: numa_files

- name: Load vfio early, in a marked block of a file others edit too
  gpuhost.kvm.host_files:
    files:
      - path: /etc/initramfs-tools/modules
        block: "vfio\nvfio_iommu_type1\nvfio_pci"
        marker: "# {mark} gpuhost.kvm: load vfio-pci before any GPU driver"
        mode: "0644"

- name: Reload systemd when the unit changed
  ansible.builtin.systemd_service:
    daemon_reload: true
  when: "'/etc/systemd/system/gpuhost-numa.service' in numa_files.changed_paths"
"""

RETURN = r"""
changed_paths:
  description: The paths whose content, type, mode or owner changed (check mode - would change), in the order given.
  returned: always
  type: list
  elements: str
  sample: ["/etc/gpuhost/numa.conf"]
steps:
  description: The planned (check mode) or applied steps, in order.
  returned: always
  type: list
  elements: str
  sample: ["create directory /etc/gpuhost (mode 0700)", "update /etc/gpuhost/numa.conf"]
field:
  description: On failure, the option at fault (C(files[2].mode)).
  returned: failure
  type: str
details:
  description: On a failed step, the step, what was rolled back and what could not be.
  returned: failure
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.host_files import (
    plan_host_files, STATES, validate_entries)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter


def build_module():
    entry = dict(path=dict(type="str", required=True),
                 state=dict(type="str", choices=list(STATES), default="file"),
                 content=dict(type="str"),
                 block=dict(type="str"),
                 marker=dict(type="str"),
                 mode=dict(type="raw"),
                 owner=dict(type="str"),
                 group=dict(type="str"))
    spec = argument_spec(ROOT_ARGUMENT_SPEC,
                         files=dict(type="list", elements="dict", options=entry, required=True))
    return new_module(AnsibleModule, argument_spec=spec, supports_check_mode=True)


class HostFiles(PlannedChange):
    """Plans and applies one host_files task."""

    def __init__(self, module, writer=None):
        super(HostFiles, self).__init__(module)
        self.writer = writer or HostWriter(module.params["root"])

    def decide(self):
        return plan_host_files(self.writer, validate_entries(self.module.params["files"]))

    def diff(self):
        return self.plan.diff

    @property
    def result(self):
        return self.change_result(changed_paths=list(self.plan.changed_paths) if self.done else [])


def main():
    module = build_module()
    run_module(module, HostFiles(module), changes_host=True)


if __name__ == "__main__":
    main()
