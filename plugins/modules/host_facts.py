#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: host_facts
short_description: Read what the gpuhost.kvm roles need to know about a host, in one run
version_added: 0.1.0
description:
  - Returns one fact, C(gpuhost_host), with the subsets named in O(gather), namely firmware
    (IOMMU ACPI tables, kernel command line, ACS override), CPU power (governor,
    C-states), memory (/proc/meminfo and every node's hugepage pools), PCI functions
    (presence, NUMA node, SR-IOV counts, driver), every PCI function's IDs, class and
    driver (C(pci)), where each running domain of O(domains) really is (C(realized), its
    QEMU threads' allowed CPUs, its memory and hugepage mappings per node, the /dev/vfio
    groups it holds (fd links, read and never followed) with their devices' drivers, and
    those devices' vfio IRQs with their CPUs, from /proc and /sys), irqbalance's ban list
    as its environment file sets it and every IRQ's effective affinity (C(irqbalance)), matching kernel log
    lines, tuned's profile, systemd units against the files they read, the initramfs
    images against their inputs, libvirt's running domains and vCPU pins, and the installed packages
    (as C(ansible.builtin.package_facts) gives them, in RV(ansible_facts.packages)); the
    C(iommu) subset returns M(gpuhost.kvm.iommu_groups_facts)' fact, RV(ansible_facts.gpuhost_iommu).
  - The C(mechanisms) subset publishes RV(ansible_facts.gpuhost_mechanisms) - which boot
    loader tooling (V(grubby) or V(grub)), initramfs generator (V(dracut) or
    V(initramfs-tools)) and libvirt daemon layout (V(modular) virtqemud or V(monolithic)
    libvirtd) the host below O(root) has, with the evidence, and where the choice came
    from (C(detected), or the OS family's default where both or none were found).
  - The C(platform) subset publishes the distribution, its version, the OS family and
    the package manager as C(ansible.builtin.setup)'s C(distribution) and C(pkg_mgr)
    subsets do, with the same collectors, so that the roles' C(setup) run is skipped.
    These describe the system the module runs on, whatever O(root) is, since they choose
    the commands that run there.
  - One module run replaces the roles' C(stat), C(slurp) and C(grep) reads. Under TCG
    every task costs seconds, and parsing grep output breaks on the colons of PCI
    addresses.
  - Files are read below O(root); the journal, systemd and libvirt are asked only on the
    live host (O(root=/)), and a recorded tree reports them as not read.
  - The module only reads; it never changes the host.
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.root
  - gpuhost.kvm.read_only
  - gpuhost.kvm.gpu_selection
options:
  gather:
    description:
      - The subsets to read. Each costs only its own reads.
    type: list
    elements: str
    choices: [firmware, cpu_power, memory, devices, kernel_log, tuned, units, initramfs, libvirt,
              packages, iommu, platform, pci, realized, irqbalance, mechanisms]
    default: [firmware, cpu_power, memory]
  os_family:
    description:
      - The OS family whose mechanisms the C(mechanisms) subset falls back on where the
        host's files do not decide (both found, or none). Unset, the family the
        C(platform) subset reads in the same run, else none (an undecided mechanism is
        then a refusal in the fact).
    type: str
  devices:
    description:
      - PCI functions (V(0000:65:00.0), or without the domain) the C(devices) subset reads.
    type: list
    elements: str
    default: []
  kernel_log_pattern:
    description:
      - A Python regular expression; the C(kernel_log) subset returns the lines of this
        boot's kernel log that it finds. Required with that subset.
    type: str
  kernel_log_file:
    description:
      - Read the kernel log from this file on the host instead of the journal (a host
        without journald, or a saved C(dmesg)). The path is the controller's view of the
        managed host, not below O(root).
    type: path
  units:
    description:
      - Systemd units the C(units) subset compares with the files they read.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The unit's name with its suffix.
        type: str
        required: true
      inputs:
        description: The files the unit applies (its unit file, configuration, scripts).
        type: list
        elements: path
        default: []
  initramfs_inputs:
    description:
      - Files that end up in the initramfs; the C(initramfs) subset lists the installed
        kernels' images that are older than the newest of them.
    type: list
    elements: path
    default: []
  initramfs_image_pattern:
    description:
      - The image path with C(%s) for the kernel version (V(/boot/initrd.img-%s) on
        Debian, V(/boot/initramfs-%s.img) on RHEL). Required with the C(initramfs) subset.
    type: str
  libvirt_uri:
    description: The libvirt connection the C(libvirt) subset asks.
    type: str
    default: qemu:///system
  domains:
    description:
      - Domains whose vCPU pins the C(libvirt) subset reads, and whose QEMU process the
        C(realized) subset reads; a domain that is not
        defined is reported as null.
    type: list
    elements: str
    default: []
  irqbalance_config:
    description:
      - irqbalance's environment file, which the C(irqbalance) subset reads (C(/etc/sysconfig/irqbalance)
        on RHEL, C(/etc/default/irqbalance) on Debian). A link there is refused unread.
    type: path
    default: /etc/sysconfig/irqbalance
  gpu_vendor:
    description:
      - With the C(iommu) subset, only report GPUs of this PCI vendor (four hex digits,
        V(10de) NVIDIA), as M(gpuhost.kvm.iommu_groups_facts) does.
    type: str
attributes:
  facts:
    support: full
    description: Returns C(gpuhost_host) and, with the subsets that publish them, C(packages), C(gpuhost_iommu) and the platform facts.
requirements:
  - libvirt-python, for the C(libvirt) subset only
seealso:
  - module: gpuhost.kvm.iommu_groups_facts
"""

EXAMPLES = r"""
- name: Read the BIOS preflight's inputs
  gpuhost.kvm.host_facts:
    gather: [firmware, cpu_power, devices, kernel_log]
    devices: ["0000:65:00.0"]
    kernel_log_pattern: 'not enough MMIO|no space for \[mem'

- name: Is the NUMA boot unit running with the files on disk?
  gpuhost.kvm.host_facts:
    gather: [units, tuned]
    units:
      - name: gpuhost-numa.service
        inputs: [/etc/systemd/system/gpuhost-numa.service, /etc/gpuhost/numa.conf]
"""

RETURN = r"""
ansible_facts:
  description: The facts read.
  returned: always
  type: dict
  contains:
    gpuhost_host:
      description: One key per gathered subset (but C(iommu), whose answer is
        RV(ansible_facts.gpuhost_iommu)), plus C(gathered) and C(root).
      type: dict
      sample:
        gathered: [firmware, memory]
        root: /
        firmware:
          acpi_tables: [DMAR]
          cmdline: BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt
          acs_override: []
        memory:
          meminfo: {MemTotal: 65536000, HugePages_Total: 1024}
          hugepages: {"0": {"2048": {nr: 1024, free: 0, surplus: 0}}}
          kernel_release: 6.8.0-45-generic
        devices:
          "0000:65:00.0": {present: true, numa_node: 0, sriov_totalvfs: null,
                           sriov_numvfs: null, driver: vfio-pci}
        kernel_log: {source: journal, matches: []}
        pci:
          "0000:00:05.0": {vendor: 10de, device: 20b5, class: "0x030200", driver: nvidia}
        realized:
          tenant-a:
            running: true
            pid: 4242
            placement:
              pid: 4242
              vcpus: {"0": [2], "1": [3]}
              iothreads: {iothread1: [0, 1]}
              emulator: [{tid: 4242, name: qemu-system-x86, cpus: [0, 1]}]
              memory_kib: {huge: {"0": 1048576}, other: {"0": 20480}}
              numa_maps_read: true
              huge_mappings: [{address: 7f1c00000000, page_kib: 2048, pages: {"0": 512}}]
              hugepages: {"0": {"2048": 512}}
              vfio: {fds_read: true, groups: {"12": {"0000:65:00.0": vfio-pci, "0000:65:00.1": vfio-pci}}, bridges: []}
              vfio_irqs: [{irq: 70, name: "vfio-msix[0](0000:65:00.0)", device: "0000:65:00.0", cpus: [0, 1], effective: [0]}]
        irqbalance:
          config: /etc/default/irqbalance
          exists: true
          key: IRQBALANCE_BANNED_CPULIST
          banned_cpus: "2-31,34-63"
          kernel_managed_names: [nvme0q1]
          irqs: [{irq: 70, name: "vfio-msix[0](0000:65:00.0)", chip: "IR-PCI-MSIX-0000:65:00.0", cpus: [0, 1], effective: [0]}]
        tuned: {active_profile: virtual-host}
        units:
          gpuhost-numa.service: {read: true, active: true, enabled: true,
                                 daemon_reload: false, restart: false, reasons: []}
        initramfs: {inputs: {}, images: {}, stale: []}
        libvirt: {read: true, error: null, running: [tenant-a],
                  vcpu_pins: {tenant-a: {"0": "2", "1": "3"}}}
        packages: {read: true, manager: dpkg, count: 412, error: null}
        platform: {published: [distribution, distribution_version, distribution_major_version,
                               distribution_release, os_family, pkg_mgr]}
    packages:
      description:
        - With the C(packages) subset, the installed packages in the shape
          C(ansible.builtin.package_facts) gives them (its apt or rpm manager), so that a
          later C(ansible_facts.packages is not defined) test skips that module's run.
        - Read from dpkg's status file below O(root) (no C(origin) key, which that file
          does not record; only packages dpkg lists as installed, not half-installed or
          unpacked ones), else on the live host from C(rpm --query --all). Absent when
          neither could be read.
      returned: when the packages subset was read
      type: dict
      sample: {"dpkg": [{name: dpkg, version: 1.21.22, arch: amd64, category: admin, source: apt}]}
    gpuhost_mechanisms:
      description:
        - With the C(mechanisms) subset, per kind (C(boot_loader), C(initramfs),
          C(libvirt)) - C(choice) (null when undecided and no family default applies),
          C(source) (C(detected), C(os_default (both ... found)), C(os_default (none
          found)), or C(none found)), C(evidence) per candidate, C(notes) (evidence
          refused, such as a link out of O(root)), C(os_default), C(refusal) (C(msg) and
          C(fix) when undecided), and what the roles pass on (C(packages), C(grub_cfg),
          C(grub_update_argv), C(early_modules_path), C(image_pattern), C(rebuild_argv),
          C(units), C(start_units)).
      returned: when the mechanisms subset was read
      type: dict
      sample:
        os_family: Debian
        boot_loader: {choice: grub, source: detected,
                      evidence: {grub: [/usr/sbin/update-grub exists, /etc/default/grub exists]}}
        initramfs: {choice: dracut, source: detected,
                    evidence: {dracut: [/usr/bin/dracut exists, /etc/dracut.conf.d exists]}}
        libvirt: {choice: monolithic, source: "os_default (none found)", evidence: {}}
    gpuhost_iommu:
      description:
        - With the C(iommu) subset, the fact M(gpuhost.kvm.iommu_groups_facts) returns (the
          same reader), so that one run reads it with the other subsets.
      returned: when the iommu subset was read
      type: dict
    distribution:
      description:
        - With the C(platform) subset, the facts C(ansible.builtin.setup) gives with
          C(gather_subset=[distribution, pkg_mgr]) (C(distribution),
          C(distribution_version), C(distribution_major_version),
          C(distribution_release), C(os_family), C(pkg_mgr)); only C(distribution) is
          shown here.
      returned: when the platform subset was read
      type: str
      sample: Debian
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts.system.distribution import DistributionFactCollector
from ansible.module_utils.facts.system.pkg_mgr import PkgMgrFactCollector

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import host_facts, mechanisms, realized
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import irqbalance_config, systemd_units
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.irq_pins import known_managed_names
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import HostReader
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import format_cpulist
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_irqs
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.common_args import (
    GPU_SELECTION_ARGUMENT_SPEC, ROOT_ARGUMENT_SPEC, argument_spec)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import GpuSelection
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.iommu_facts import (
    check_iommu_options, read_iommu_facts)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.libvirt_conn import (
    libvirt, libvirt_error_text, open_connection)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    absolute_path, domain_name, unit_name)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.roots import is_live_root
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import new_module, run_module
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import read_file_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.sysfs import validate_root

JOURNAL_KERNEL_LOG_ARGV = ["journalctl", "--dmesg", "--boot", "--no-pager", "--output=cat"]
NOT_LIVE = "not read: root is a recorded tree, not the live host"
LIBVIRT_NOT_LIVE = "libvirt is asked on the live host only (root is a recorded tree)"


class HostFacts(object):
    """Checks every option, then reads each gathered subset once."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.root = self.params["root"]
        self.live = is_live_root(self.root)
        self.facts = {"gathered": list(dict.fromkeys(self.params["gather"])), "root": self.root}
        self.packages = None
        self.iommu = None
        self.platform = None
        self.mechanisms = None
        self.selection = None    # what counts as a GPU in the iommu subset (check())

    def check(self):
        validate_root(self.root)
        gather = self.params["gather"]
        # Whatever the subsets: a bad list is the inventory's fault on every run.
        self.selection = GpuSelection.from_options(self.params.get("gpu_devices"),
                                                   self.params.get("gpu_devices_only"))
        if "iommu" in gather:
            check_iommu_options(self.root, self.params["gpu_vendor"])
        if "kernel_log" in gather and not self.params["kernel_log_pattern"]:
            raise GpuhostError("the kernel_log subset needs a pattern", field="kernel_log_pattern",
                               fix="give the regular expression of the lines to return")
        if "initramfs" in gather:
            host_facts.check_image_pattern(self.params["initramfs_image_pattern"])
            for index, path in enumerate(self.params["initramfs_inputs"]):
                absolute_path(path, "initramfs_inputs[%d]" % index)
        for index, unit in enumerate(self.params["units"]):
            unit_name(unit["name"], "units[%d].name" % index)
            for number, path in enumerate(unit["inputs"]):
                absolute_path(path, "units[%d].inputs[%d]" % (index, number))
        for index, name in enumerate(self.params["domains"]):
            domain_name(name, "domains[%d]" % index)

    def run(self):
        self.check()
        readers = {
            "firmware": lambda: host_facts.read_firmware(self.root),
            "cpu_power": lambda: host_facts.read_cpu_power(self.root),
            "memory": lambda: host_facts.read_memory(self.root),
            "devices": lambda: host_facts.read_devices(self.params["devices"], self.root),
            "kernel_log": self.read_kernel_log,
            "tuned": lambda: host_facts.read_tuned(self.root),
            "units": self.read_units,
            "initramfs": lambda: host_facts.read_initramfs(
                self.params["initramfs_inputs"], self.params["initramfs_image_pattern"], self.root),
            "libvirt": self.read_libvirt,
            "packages": self.read_packages,
            "iommu": lambda: read_iommu_facts(self.module, self.root, self.params["gpu_vendor"],
                                              self.selection),
            "platform": self.read_platform,
            "pci": lambda: host_facts.read_pci(self.root),
            "realized": self.read_realized,
            "irqbalance": self.read_irqbalance,
            "mechanisms": self.read_mechanisms,
        }
        # mechanisms last: it falls back on the family the platform subset reads.
        for subset in sorted(self.facts["gathered"], key=lambda name: name == "mechanisms"):
            self.facts[subset] = readers[subset]()
        # The very fact iommu_groups_facts returns, under its own name.
        self.iommu = self.facts.pop("iommu", None)

    def run_checked(self, argv, what, environ=None):
        """stdout of argv (no shell, ``--`` where the tool takes positional names)."""
        # Only what the caller asks for: most commands need the host's own environment.
        extra = {"environ_update": environ} if environ else {}
        rc, out, err = self.module.run_command(argv, **extra)
        if rc != 0:
            raise GpuhostError("%s failed (%s): %s" % (what, " ".join(argv), (err or out).strip() or "rc=%d" % rc),
                               field="gather", fix="run the command on the host to see why")
        return out

    def read_kernel_log(self):
        pattern = self.params["kernel_log_pattern"]
        path = self.params["kernel_log_file"]
        if path:
            try:
                lines = read_file_text(path, field="kernel_log_file").splitlines()
            except OSError as err:
                raise GpuhostError("cannot read the kernel log %s: %s" % (path, err.strerror),
                                   field="kernel_log_file",
                                   fix="give a readable file, or leave it empty to read the journal") from None
            source = path
        elif not self.live:
            return {"source": NOT_LIVE, "matches": []}
        else:
            lines = self.run_checked(JOURNAL_KERNEL_LOG_ARGV, "reading the kernel log").splitlines()
            source = "journal"
        return {"source": source, "matches": host_facts.kernel_log_matches(lines, pattern)}

    def read_units(self):
        units = {}
        for unit in self.params["units"]:
            if not self.live:
                units[unit["name"]] = dict(systemd_units.unit_refresh({}, {}), read=False)
                continue
            out = self.run_checked(
                systemd_units.show_argv([unit["name"]], systemd_units.UNIT_PROPERTIES),
                "asking systemd for %s" % unit["name"], environ=systemd_units.SHOW_ENVIRON)
            units[unit["name"]] = dict(systemd_units.unit_refresh(
                systemd_units.parse_unit_properties(out),
                host_facts.input_mtimes(unit["inputs"], self.root)), read=True)
        return units

    def read_packages(self):
        """What the package manager lists as installed: dpkg's status file (below root),
        else, on the live host, rpm's database. ``self.packages`` keeps the list for
        ``ansible_facts.packages``; the subset itself says only where it came from."""
        packages = host_facts.read_dpkg_packages(self.root)
        manager = "dpkg" if packages is not None else None
        if packages is None and self.live and self.module.get_bin_path("rpm"):
            packages = host_facts.parse_rpm_query(
                self.run_checked(host_facts.RPM_QUERY_ARGV, "listing the installed packages"))
            manager = "rpm"
        self.packages = packages
        if packages is None:
            return {"read": False, "manager": None, "count": 0,
                    "error": "no dpkg status file below %s%s" % (
                        self.root, "" if self.live else " and rpm is asked on the live host only")}
        return {"read": True, "manager": manager, "count": len(packages), "error": None}

    def read_platform(self):
        """setup's own distribution and pkg_mgr collectors, so that the facts are exactly
        the ones a setup run would give (RHEL's derivatives, dnf5, apt-rpm included).
        ``self.platform`` keeps them for ``ansible_facts``; the subset names them."""
        facts = DistributionFactCollector().collect(module=self.module)
        # pkg_mgr's collector reads the family under setup's prefixed name.
        facts.update(PkgMgrFactCollector().collect(
            module=self.module, collected_facts={"ansible_os_family": facts.get("os_family")}))
        self.platform = dict((name, facts.get(name)) for name in host_facts.PLATFORM_FACTS)
        return {"published": list(host_facts.PLATFORM_FACTS)}

    def read_mechanisms(self):
        """The host's boot loader, initramfs generator and libvirt layout below root
        (mechanisms.detect_mechanisms); ``self.mechanisms`` keeps them for
        ``ansible_facts.gpuhost_mechanisms``, the subset names the choices."""
        family = self.params["os_family"] or (self.platform or {}).get("os_family")
        self.mechanisms = mechanisms.detect_mechanisms(self.root, family)
        return dict((kind, self.mechanisms[kind]["choice"]) for kind in mechanisms.KINDS)

    def read_realized(self):
        """Per domain of ``domains``: whether libvirt's pid file names a process, and
        where its threads, memory, vfio groups and IRQs are (realized.read_domains), below root."""
        return realized.read_domains(self.params["domains"], self.root)

    def read_irqbalance(self):
        """irqbalance's ban list as its environment file sets it (irqbalance_config.banned_in_config),
        the IRQ names irq_affinity found kernel-managed before, and every numbered IRQ's
        name and effective affinity: what validate's irqbalance check compares."""
        host = HostReader(self.root)
        path = self.params["irqbalance_config"]
        exists = os.path.lexists(host.path(path))
        key, banned = irqbalance_config.banned_in_config(irqbalance_config.read_config(host, path))
        irqs = [{"irq": irq.number, "name": irq.name, "chip": irq.chip,
                 "cpus": list(irq.smp_affinity_list) if irq.smp_affinity_list is not None else None,
                 "effective": list(irq.effective_affinity_list) if irq.effective_affinity_list is not None else None}
                for irq in sorted((i for i in read_irqs(self.root).values() if i.number is not None),
                                  key=lambda i: i.number)]
        return {"config": path, "exists": exists, "key": key,
                "banned_cpus": format_cpulist(banned) if banned is not None else None,
                "kernel_managed_names": sorted(known_managed_names(host)), "irqs": irqs}

    def read_libvirt(self):
        answer = {"read": False, "error": None, "running": [], "vcpu_pins": {}}
        if not self.live:
            answer["error"] = LIBVIRT_NOT_LIVE
            return answer
        try:
            conn = open_connection(self.params["libvirt_uri"])
        except GpuhostError as err:
            # A report's input, not the module's failure: validate names it.
            answer["error"] = "%s (%s)" % (err.msg, err.fix)
            return answer
        try:
            answer["running"] = sorted(dom.name() for dom in conn.listAllDomains(
                libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE))
            for name in self.params["domains"]:
                try:
                    dom = conn.lookupByName(name)
                except libvirt.libvirtError as err:
                    if err.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                        raise
                    answer["vcpu_pins"][name] = None
                    continue
                answer["vcpu_pins"][name] = host_facts.vcpu_pins(dom.vcpuPinInfo(0))
        except libvirt.libvirtError as err:
            answer["error"] = "libvirt at %s: %s" % (self.params["libvirt_uri"], libvirt_error_text(err))
            return answer
        finally:
            conn.close()
        answer["read"] = True
        return answer

    @property
    def result(self):
        result = {"changed": False, "ansible_facts": {"gpuhost_host": self.facts}}
        if self.packages is not None:
            result["ansible_facts"]["packages"] = self.packages
        if self.iommu is not None:
            result["ansible_facts"]["gpuhost_iommu"] = self.iommu
        if self.platform is not None:
            result["ansible_facts"].update(self.platform)
        if self.mechanisms is not None:
            result["ansible_facts"]["gpuhost_mechanisms"] = self.mechanisms
        return result

    @property
    def failed_result(self):
        """No partial fact: a failed read must not look like a host without the rest."""
        return {"changed": False, "ansible_facts": {}}


def build_module():
    return new_module(
        AnsibleModule, argument_spec=argument_spec(
            ROOT_ARGUMENT_SPEC,
            GPU_SELECTION_ARGUMENT_SPEC,
            gather={"type": "list", "elements": "str", "choices": list(host_facts.GATHER_SUBSETS),
                    "default": ["firmware", "cpu_power", "memory"]},
            devices={"type": "list", "elements": "str", "default": []},
            kernel_log_pattern={"type": "str"},
            kernel_log_file={"type": "path"},
            units={"type": "list", "elements": "dict", "default": [],
                   "options": {"name": {"type": "str", "required": True},
                               "inputs": {"type": "list", "elements": "path", "default": []}}},
            initramfs_inputs={"type": "list", "elements": "path", "default": []},
            initramfs_image_pattern={"type": "str"},
            libvirt_uri={"type": "str", "default": "qemu:///system"},
            domains={"type": "list", "elements": "str", "default": []},
            irqbalance_config={"type": "path", "default": "/etc/sysconfig/irqbalance"},
            gpu_vendor={"type": "str"},
            os_family={"type": "str"},
        ),
        supports_check_mode=True,
    )


def main():
    module = build_module()
    run_module(module, HostFacts(module))


if __name__ == "__main__":
    main()
