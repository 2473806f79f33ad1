#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt_pinned_domain: one NUMA-pinned, hugepage-backed GPU tenant domain."""

DOCUMENTATION = r"""
---
module: libvirt_pinned_domain
short_description: Define and manage a NUMA-pinned, hugepage-backed GPU passthrough domain
version_added: "0.1.0"
description:
  - Builds one tenant domain the way the runbook's section 8 describes it, with lxml, and
    defines it through libvirt-python.
  - "Machine C(q35); C(cpu mode=host-passthrough check=none) with a guest topology that
    matches the pinned sibling pairs, one guest NUMA cell and C(maxphysaddr) sized for
    the GPUs' 64-bit BARs; C(cputune) with one C(vcpupin) per vCPU, C(emulatorpin),
    C(iothreadpin) and optional C(vcpusched); C(numatune) C(memory mode=strict) and
    C(memnode); C(memoryBacking) with hugepages of the plan's size and C(locked)."
  - The GPU and every companion function (HDA, ...) become C(managed=yes) hostdevs in
    one guest slot behind a PCIe root port the module adds, with C(multifunction=on) on
    function 0 and the host's function numbers.
  - Takes its shape either from one tenant of a M(gpuhost.kvm.numa_cpuset) plan
    (O(plan)) or from structured options (O(vcpus), O(vcpu_pins), O(memory_gib), ...).
  - Idempotence compares libvirt's inactive XML with the wanted XML after dropping what
    libvirt assigns by itself (uuid, MAC addresses, device addresses, aliases, implicit
    controllers and input devices, the memballoon, the expanded machine type) unless the
    wanted XML states it. A redefinition keeps the uuid, MAC addresses and guest PCI
    addresses libvirt assigned before.
  - A change to a running domain updates its persistent definition and returns
    RV(restart_required=true); the module never restarts a tenant by itself.
  - "Every refusal names the option that was set (O(memory_nodes), O(emulator_cpus),
    O(hostdevs), ...) or, with O(plan), the plan entry's key (C(plan.emulator_cpus))."
  - "Before defining, preflight refuses: a hostdev outside a clean IOMMU group, used
    by another defined domain, or in an IOMMU group of which another defined domain
    holds a function; pins on offline CPUs; vCPU, emulator or iothread pins overlapping
    another domain's vCPU pins or on SMT siblings of them (O(allow_cpu_overlap)); vCPU pins on the domain's
    own emulator or iothread CPUs (O(allow_vcpu_emulator_overlap)); too few free
    hugepages of the size on the node, counted per node (pages this running domain holds
    count as free); CPUs, memory or the VF on a node other than the GPU's
    (O(allow_cross_node)); host devices on a host whose interrupt remapping is off
    (O(allow_unsafe_interrupts))."
  - "It also applies the host-safety policy of M(gpuhost.kvm.vfio_bind) to every
    hostdev, with the same messages and overrides, because libvirt detaches a
    C(managed=yes) hostdev from the host when the domain starts: never a device on the
    root filesystem's chain (its disk controller, every bridge above it, a controller
    such as Intel VMD that owns the PCI domain holding it) nor a PCI bridge; the NIC of
    the default route or of the SSH connection, or the PF of such a VF, only with
    O(allow_host_critical); the boot VGA with an active console only with
    O(allow_boot_vga)."
  - "A GPU function (the GPU or its HDA) without a usable reset method (no C(reset)
    file in sysfs, or a C(reset_method) that lists no method) is refused unless
    O(allow_no_reset): the host could not wipe it when the tenant leaves
    (M(gpuhost.kvm.tenant_scrub)), so the next tenant would see what this one left."
author:
  - gpuhost.kvm contributors (@gpuhost)
extends_documentation_fragment:
  - gpuhost.kvm.libvirt
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Reports the exact change set (changed_elements, diff, files it would
      create); defines, starts and writes nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
    details: Before and after are the normalized domain XML, so the diff shows only what
      the module manages.
options:
  name:
    description:
      - The libvirt domain name. With O(plan), it must equal the plan entry's C(name).
    type: str
    required: true
  state:
    description:
      - V(present) defines the domain and leaves it as it is (running or not).
      - V(running) defines it and starts it when it is not running.
      - V(shutdown) defines it and asks a running guest to shut down (ACPI).
      - V(destroyed) defines it and powers a running guest off at once.
      - V(absent) powers it off if needed and undefines it; with O(remove_storage) it
        also deletes the files this module created for it, and nothing else.
    type: str
    choices: [present, running, shutdown, destroyed, absent]
    default: present
  plan:
    description:
      - One element of the C(tenants) list of a M(gpuhost.kvm.numa_cpuset) plan (see
        docs/plan-format.md). Gives vCPUs, pins, guest topology, emulator and iothread
        pins, memory, hugepage size, numatune, the GPUs with their companions and BAR
        totals, and the VF.
      - A whole-board tenant of the full NVSwitch passthrough model also gives
        C(guest_cells) - one guest NUMA cell per host node with that node's GPUs, vCPUs
        and memory, written as a C(<cell>) and a C(<memnode>) each, its hugepages counted
        on its own node, and refused when its vCPUs or memory are off its GPUs' node -
        and C(nvswitches), each passed through as a hostdev.
      - Mutually exclusive with the structured options O(vcpus), O(vcpu_pins),
        O(guest_topology), O(memory_gib), O(hugepage_size), O(memory_nodes),
        O(emulator_cpus), O(iothreads), O(iothread_cpus), O(gpus).
    type: dict
  vcpus:
    description: Number of guest vCPUs (structured form).
    type: int
  vcpu_pins:
    description:
      - Host CPU for each vCPU, index = vCPU number; an item may be a cpulist.
    type: list
    elements: raw
  guest_topology:
    description:
      - The guest CPU topology; sockets*dies*cores*threads must equal O(vcpus).
      - Defaults to one socket of O(vcpus) single-thread cores.
    type: dict
    suboptions:
      sockets: {type: int, default: 1, description: Sockets.}
      dies: {type: int, default: 1, description: Dies per socket.}
      cores: {type: int, required: true, description: Cores per die.}
      threads: {type: int, default: 1, description: Threads per core.}
  memory_gib:
    description: Guest memory in GiB (structured form).
    type: float
  hugepage_size:
    description: Backing hugepage size, C(1G) or C(2M), or C(none) for normal pages.
    type: str
    default: 1G
  memory_nodes:
    description: Host NUMA nodes (a list such as C(0)) for C(numatune mode=strict).
    type: str
  emulator_cpus:
    description: Host CPUs for the QEMU emulator threads (cpulist).
    type: str
  iothreads:
    description: Number of iothreads; the system disk uses iothread 1.
    type: int
  iothread_cpus:
    description: Host CPUs every iothread is pinned to (cpulist).
    type: str
  gpus:
    description:
      - GPUs to pass through (structured form). Each item is a PCI address or a dict
        with the keys C(address) (required), C(functions) (the host functions of the
        GPU's slot to pass through, the GPU included), C(bar64_sizes) (the size in bytes
        of each 64-bit prefetchable BAR of the GPU and its companions) and
        C(bar64_total) (bytes of 64-bit prefetchable BARs, counted as one BAR when
        C(bar64_sizes) is not given).
      - Companion functions default to every function of the GPU's slot found in the
        host topology; the BAR sizes default to the 64-bit prefetchable BARs of those
        functions in the host's sysfs C(resource) files.
    type: list
    elements: raw
  hostdevs:
    description:
      - Further host PCI functions to pass through as plain hostdevs (guest address
        chosen by libvirt).
    type: list
    elements: str
    default: []
  hostdev_rom:
    description:
      - The ROM BAR of host functions, written as C(<rom bar='on|off'/>) in their
        hostdev (or VF interface); functions not named get no C(<rom>) element, QEMU's
        default (the ROM BAR shown to the guest).
      - V(off) hides a device's option ROM from the guest, for devices whose ROM the
        guest firmware must not run or that have none it can read.
      - Works with O(plan) and with the structured options. A change is a definition
        change (RV(restart_required) for a running domain).
    type: list
    elements: dict
    suboptions:
      device:
        description:
          - A PCI address of one of the domain's host functions, V(gpus) (every function
            of every GPU, companions included) or V(vf) (the tenant's VF).
          - An address wins over V(gpus) or V(vf); a function given two values otherwise,
            or a device the domain does not pass through, is refused.
        type: str
        required: true
      bar:
        description: V(on) or V(off) (YAML's unquoted true and false count as on and
          off).
        type: raw
        required: true
  disk:
    description:
      - The system disk, a qcow2 overlay on a base image.
      - When O(disk.path) does not exist the module creates it with
        C(qemu-img create -f qcow2 -F <base_format> -b <base_image> -- <path> [size]) and
        records it as created, so O(state=absent) with O(remove_storage) removes it.
        An existing file is used as it is and never removed.
    type: dict
    suboptions:
      path:
        description: The overlay file the domain boots from.
        type: path
        required: true
      base_image:
        description: The base image the overlay is created on.
        type: path
      base_format:
        description: The base image's format.
        type: str
        default: qcow2
        choices: [qcow2, raw]
      size:
        description: Virtual size of a new overlay (qemu-img size, e.g. C(40G)); by
          default the base image's size.
        type: str
      bus:
        description: Disk bus.
        type: str
        default: virtio
        choices: [virtio, sata, scsi]
  cloud_init:
    description:
      - A cloud-init NoCloud seed attached as a read-only SATA cdrom.
      - With O(cloud_init.user_data) the module builds the ISO at
        O(cloud_init.seed_path) (volume id C(cidata)) with the first of
        C(cloud-localds), C(genisoimage), C(mkisofs) or C(xorriso) it finds, rebuilds it
        when the content changes and records it as created. Without it,
        O(cloud_init.seed_path) must be a prebuilt seed, which is used as it is.
    type: dict
    suboptions:
      seed_path:
        description: Where the seed ISO is (or is built).
        type: path
        required: true
      user_data:
        description: The user-data document (a string starting with C(#cloud-config)).
        type: str
      meta_data:
        description: The meta-data document; defaults to C(instance-id) and
          C(local-hostname) set to O(name).
        type: str
      network_config:
        description: A network-config (version 2) document.
        type: str
  network:
    description:
      - The guest NIC. V(vf) passes the VF through (the plan's VF unless
        O(network.vf_address) is given); V(bridge) adds a virtio NIC on a host bridge;
        V(none) adds no NIC.
      - Defaults to V(vf) when the plan has a VF, else V(none).
    type: dict
    suboptions:
      type:
        description: The kind of NIC.
        type: str
        choices: [bridge, vf, none]
        required: true
      bridge:
        description: Host bridge for V(bridge).
        type: str
      vf_address:
        description: PCI address of the VF for V(vf) (default the plan's).
        type: str
      vf_mode:
        description:
          - V(interface) writes C(<interface type='hostdev'>), so libvirt sets the VF's
            MAC (network VFs such as mlx5); V(hostdev) writes a plain hostdev, for VFs
            that are not network devices.
        type: str
        choices: [interface, hostdev]
        default: interface
      mac:
        description:
          - The guest MAC (unicast). By default the plan's VF MAC (C(vf.mac), from the
            tenant's C(nic_vf.mac)) for the plan's VF, else libvirt assigns one and the
            module keeps it.
        type: str
      vlan:
        description:
          - VLAN ID (1-4094) of the VF, written as C(<vlan><tag id='N'/></vlan>); libvirt
            sets it on the VF when the domain starts and clears a VLAN the XML does not
            name. V(vf) with O(network.vf_mode=interface) only.
          - By default the plan's C(vf.vlan) for the plan's VF; V(0) for none.
        type: int
      model:
        description: NIC model for V(bridge).
        type: str
        default: virtio
  kernel:
    description:
      - Boot this kernel directly (libvirt's C(<os><kernel>)) instead of the disk, for a
        small guest without a boot loader, or a rescue kernel.
      - An absolute path below O(boot_images_dir), without C(..) or control characters;
        the file must exist below O(root) as a regular file reached through no symbolic
        link (QEMU reads it at each start).
    type: str
  initrd:
    description:
      - The initrd of O(kernel), with the same rules. Needs O(kernel).
    type: str
  cmdline:
    description:
      - The kernel command line of O(kernel), in printable ASCII, at most 2047 characters
        (x86's limit). Needs O(kernel).
    type: str
  boot_images_dir:
    description:
      - The one directory O(kernel) and O(initrd) must be below (libvirt's own place for
        boot images, labelled C(virt_content_t) by RHEL's SELinux policy).
    type: str
    default: /var/lib/libvirt/boot
  serial_log:
    description:
      - A file below C(/var/log/libvirt) to which virtlogd writes the guest's serial
        console (C(<serial><log append='off'>)), for a guest without a network, or
        to read a boot afterwards.
    type: str
  autostart:
    description: Start the domain when the host boots.
    type: bool
    default: true
  hide_kvm:
    description:
      - Hide the KVM signature from the guest (C(<kvm><hidden state='on'/>)).
      - Only for a Windows guest on a consumer NVIDIA GPU, whose driver stopped with
        Code 43 when it saw a hypervisor. It hides KVM's CPUID leaves, so the guest
        loses kvmclock, steal time and the other paravirtual features; a Linux guest
        on a datacentre GPU needs none of it, hence off by default.
    type: bool
    default: false
  vcpusched:
    description: Real-time scheduling of the vCPU threads.
    type: dict
    suboptions:
      scheduler:
        description: C(fifo) or C(rr).
        type: str
        choices: [fifo, rr]
        required: true
      priority:
        description: Real-time priority 1-99.
        type: int
        required: true
      vcpus:
        description: The vCPUs it applies to (cpulist), all by default.
        type: str
  maxphysaddr:
    description:
      - The guest's physical address width. V(auto) chooses the smallest width the
        guest firmware trusts whose 64-bit PCI window holds every GPU's root-port
        window, by the firmware's own rules (OVMF for O(firmware=efi), SeaBIOS for
        V(bios); see RV(address_width)), never above the host's address sizes (a tenant
        the host cannot serve is refused). A tenant without 64-bit BARs keeps QEMU's
        default 40 bits. It is written as C(<maxphysaddr mode='emulate' bits='N'/>)
        (libvirt 8.7 or later).
      - An older libvirt (RHEL 9.0 has 8.0, Debian 11 7.0) drops the element without
        a word, so it is not written there; V(auto) then checks that QEMU's default 40
        bits hold every GPU's window and refuses the tenant otherwise, and V(emulate)
        and V(passthrough) are refused.
      - V(passthrough) gives the guest the host's width; V(emulate) with
        O(maxphysaddr.bits) sets it; V(none) leaves it to QEMU.
    type: dict
    suboptions:
      mode:
        description: How the width is set.
        type: str
        choices: [auto, emulate, passthrough, none]
        default: auto
      bits:
        description: The width for V(emulate).
        type: int
  firmware:
    description:
      - The guest firmware. V(bios) writes no firmware (SeaBIOS), as before this option.
      - V(efi) boots UEFI (OVMF) without Secure Boot, the runbook's fix for a GPU the
        guest driver stops with Code 43. V(efi-secure) boots OVMF with Secure Boot on
        and the Microsoft keys enrolled, and turns on SMM, which that firmware needs.
      - "Both use libvirt's firmware auto-selection: C(<os firmware='efi'>) with the
        C(secure-boot) and C(enrolled-keys) features, which libvirt matches against the
        firmware descriptors in C(/usr/share/qemu/firmware). The loader and NVRAM paths
        libvirt fills in are not a difference on the next run."
      - Needs machine q35 and the firmware package on the host, C(ovmf) on Debian and
        C(edk2-ovmf) on RHEL; the preflight refuses V(efi) or V(efi-secure) when no
        descriptor below O(root) offers it with its code file present (not for
        O(domain_type=test), whose driver runs no firmware).
      - Both are refused on libvirt older than 7.2 (Debian 11's 7.0), which drops the
        features and boots the first descriptor's build, on Debian 11 Secure Boot with
        the Microsoft keys; use V(bios) there.
      - A change of firmware is a new definition; a running tenant reports
        RV(restart_required). The guest keeps its NVRAM file, so a guest moved to
        V(efi-secure) gets the enrolled keys only with a fresh one (C(virsh start
        --reset-nvram)).
    type: str
    choices: [bios, efi, efi-secure]
    default: bios
  cpu_mode:
    description:
      - V(host-passthrough) (the runbook's) or V(maximum) for QEMU without KVM (TCG
        test hosts).
      - libvirt older than 7.1 (Debian 11's 7.0) does not know V(maximum); there a TCG
        domain (O(domain_type=qemu)) gets C(host-model), the same CPU under TCG, and a
        KVM one is refused.
    type: str
    choices: [host-passthrough, maximum]
    default: host-passthrough
  lock_memory:
    description:
      - Write C(<locked/>) in C(memoryBacking) so guest memory is never swapped
        (libvirt raises QEMU's RLIMIT_MEMLOCK). Turn it off only where the daemon may
        not raise that limit (containers without CAP_SYS_RESOURCE).
    type: bool
    default: true
  shared_memory:
    description: Set C(memAccess=shared) on the guest cell; only vhost-user and virtiofs
      need it.
    type: bool
    default: false
  domain_type:
    description: The domain type; C(qemu) for TCG hosts, C(test) for libvirt's test driver.
    type: str
    choices: [kvm, qemu, test]
    default: kvm
  uuid:
    description: The domain UUID; a defined domain with another UUID is refused.
    type: str
  root:
    description:
      - Root of the host tree the preflight reads sysfs and procfs from.
      - With O(root=/) the host-safety check also finds the NIC of the SSH connection
        (C(SSH_CONNECTION), C(ip -j addr)); with another root it does not.
    type: path
    default: /
  topology:
    description:
      - The host topology as data (the dict form of C(topology_to_dict), as in the
        C(topology) key of M(gpuhost.kvm.capacity_facts)); when given, O(root) is read
        only for the host-safety check of the hostdevs (mounts, routes, consoles).
    type: dict
  allow_cpu_overlap:
    description: Accept vCPU, emulator or iothread pins that overlap another domain's
      vCPUs or their SMT siblings (a warning instead of a refusal).
    type: bool
    default: false
  allow_cross_node:
    description: Accept CPUs, memory or the VF on a node other than the GPU's.
    type: bool
    default: false
  allow_vcpu_emulator_overlap:
    description:
      - Accept vCPU pins on this domain's own O(emulator_cpus) or O(iothread_cpus) (a
        warning instead of a refusal), for a host too small to keep them apart.
    type: bool
    default: false
  allow_unsafe_interrupts:
    description:
      - Accept host devices although the host's interrupt remapping is known to be off
        (C(intremap=off), interrupt chips without C(IR-) in /proc/interrupts, or a DMAR
        unit without the capability); a warning instead of the refusal.
      - Without interrupt remapping a guest can make its device inject interrupts into
        the host and into other tenants (MSI spoofing); vfio also needs
        C(vfio_iommu_type1.allow_unsafe_interrupts=1) to attach such a device.
      - Where interrupt remapping cannot be read at all, the module warns and goes on.
    type: bool
    default: false
  allow_host_critical:
    description:
      - Pass through the NIC of the default route or of the SSH connection (or the PF of
        such a VF), or a disk controller with mounted filesystems other than the root
        filesystem. The same override as M(gpuhost.kvm.vfio_bind)'s; nothing overrides
        the root filesystem's devices or a bridge.
    type: bool
    default: false
  allow_boot_vga:
    description: Pass through the boot VGA although a console is active on it (the same
      override as M(gpuhost.kvm.vfio_bind)'s).
    type: bool
    default: false
  allow_no_reset:
    description:
      - Give the tenant a GPU function that has no usable reset method (a warning
        instead of a refusal). Whoever gets the GPU after this tenant may see what this
        tenant left in it; the same override as M(gpuhost.kvm.tenant_scrub)'s.
    type: bool
    default: false
  remove_storage:
    description: With O(state=absent), delete the files this module created for the
      domain (the overlay and the seed it built), as recorded in O(state_dir).
    type: bool
    default: false
  state_dir:
    description: Where the module records which files it created, one JSON file per
      domain.
    type: path
    default: /var/lib/gpuhost/domains
notes:
  - Host hugepages must be reserved before the domain is defined; the refusal names the
    sysfs file and the count.
  - The module does not hot-plug. Pins and memory of a running domain can be changed
    live with C(virsh vcpupin --live) if that is wanted; the module only reports
    RV(restart_required).
seealso:
  - module: gpuhost.kvm.numa_cpuset
  - name: libvirt domain XML format
    description: The domain XML elements this module writes (cputune, numatune, hostdev).
    link: https://libvirt.org/formatdomain.html
"""

EXAMPLES = r"""
- name: Plan the runbook's tenant-a100 on the GPU's node
  gpuhost.kvm.numa_cpuset:
    tenants:
      - name: tenant-a100
        gpus: ["0000:65:00.0"]
        vcpus: 30
        memory_gib: 64
        hugepage_size: 1G
        nic_vf: true
        iothreads: 2
  register: placement

- name: Define and start tenant-a100 from its plan entry
  gpuhost.kvm.libvirt_pinned_domain:
    name: tenant-a100
    plan: "{{ placement.plan.tenants | selectattr('name', 'equalto', 'tenant-a100') | first }}"
    state: running
    disk:
      path: /var/lib/libvirt/images/tenant-a100.qcow2
      base_image: /var/lib/libvirt/images/rhel-9.4-base.qcow2
      size: 200G
    cloud_init:
      seed_path: /var/lib/libvirt/images/tenant-a100-seed.iso
      user_data: |
        #cloud-config
        users:
          - name: ops
            ssh_authorized_keys: ["{{ ops_ssh_key }}"]
            sudo: ALL=(ALL) NOPASSWD:ALL
  register: tenant

- name: Tell the operator when the change waits for a restart
  ansible.builtin.debug:
    msg: "tenant-a100 changed ({{ tenant.changed_elements | join(', ') }}); restart it in a maintenance window"
  when: tenant.restart_required

- name: Define a tenant from structured options with a bridge NIC
  gpuhost.kvm.libvirt_pinned_domain:
    name: tenant-l4
    vcpus: 8
    vcpu_pins: [17, 49, 18, 50, 19, 51, 20, 52]
    guest_topology: {sockets: 1, dies: 1, cores: 4, threads: 2}
    memory_gib: 32
    hugepage_size: 1G
    memory_nodes: "1"
    emulator_cpus: "16,48"
    iothreads: 1
    iothread_cpus: "16,48"
    gpus:
      - "0000:ca:00.0"
    network:
      type: bridge
      bridge: br0
    disk:
      path: /var/lib/libvirt/images/tenant-l4.qcow2
      base_image: /var/lib/libvirt/images/rhel-9.4-base.qcow2
    cloud_init:
      seed_path: /var/lib/libvirt/images/tenant-l4-seed.iso
    state: running

- name: Give the vCPU threads real-time priority and stop hiding KVM
  gpuhost.kvm.libvirt_pinned_domain:
    name: tenant-a100
    plan: "{{ placement.plan.tenants[0] }}"
    vcpusched:
      scheduler: fifo
      priority: 1
    state: present

- name: Hide the GPU's option ROM from the guest, keep the VF's
  gpuhost.kvm.libvirt_pinned_domain:
    name: tenant-a100
    plan: "{{ placement.plan.tenants[0] }}"
    hostdev_rom:
      - device: gpus
        bar: "off"
    state: present
- name: Boot a diskless tenant straight into its kernel, its console logged
  gpuhost.kvm.libvirt_pinned_domain:
    name: tenant-rescue
    plan: "{{ placement.plan.tenants[0] }}"
    kernel: /var/lib/libvirt/boot/vmlinuz-6.1.0-28-amd64
    initrd: /var/lib/libvirt/boot/initrd.img-6.1.0-28-amd64
    cmdline: console=ttyS0,115200 break=premount
    serial_log: /var/log/libvirt/qemu/tenant-rescue-serial.log
    state: running

- name: Boot tenant-a100 with UEFI (OVMF) instead of SeaBIOS
  gpuhost.kvm.libvirt_pinned_domain:
    name: tenant-a100
    plan: "{{ placement.plan.tenants[0] }}"
    firmware: efi
    state: running

- name: Offboard tenant-a100 and delete the overlay and seed this module created
  gpuhost.kvm.libvirt_pinned_domain:
    name: tenant-a100
    state: absent
    remove_storage: true
"""

RETURN = r"""
name:
  description: The domain name.
  returned: always
  type: str
  sample: tenant-a100
uuid:
  description: The domain UUID (empty when it is not defined, or in check mode before
    the first definition).
  returned: always
  type: str
  sample: 4dea22b3-1d52-d8f3-2516-782e98ab3fa0
xml:
  description: The domain's inactive XML as libvirt holds it after the run; in check mode
    the XML the module would define.
  returned: when state is not absent
  type: str
changed_elements:
  description: The parts of the definition that differ (or would), as normalized keys
    such as C(cputune/vcpupin 3) or C(devices/hostdev 0000:65:00.1); C(domain) for a
    new definition.
  returned: always
  type: list
  elements: str
  sample: ["cputune/emulatorpin", "memoryBacking"]
restart_required:
  description: True when the persistent definition of a running domain changed; the new
    definition applies at the next start. The module never restarts the tenant.
  returned: always
  type: bool
  sample: false
actions:
  description: What the module did (or would do in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: ["create overlay /var/lib/libvirt/images/tenant-a100.qcow2", "define", "start"]
created_files:
  description: Files this module created for the domain, as recorded in O(state_dir).
  returned: always
  type: list
  elements: str
removed_files:
  description: Files removed with O(remove_storage).
  returned: when state is absent
  type: list
  elements: str
warnings_preflight:
  description: Preflight findings accepted through an allow_* option.
  returned: always
  type: list
  elements: str
diff:
  description:
    - Normalized before/after domain XML (with --diff).
    - C(after_header) names the guest address width and the 64-bit PCI window it
      yields, as in RV(address_width).
  returned: when diff mode is on
  type: dict
address_width:
  description:
    - The guest physical address width written as C(<maxphysaddr>) and the 64-bit PCI
      window the guest firmware opens with it (in check mode too), computed with the
      firmware's own rules from the GPUs' 64-bit BARs, the guest RAM and the host's
      CPU (vendor_id, pdpe1gb and address sizes from /proc/cpuinfo under O(root)).
    - C(bits) is the width, C(window) the window's first and last address, C(size_gib)
      its size, C(firmware) the O(firmware) and C(vendor) the CPU vendor the
      firmware's rule was applied for (C(unknown) under TCG or without
      /proc/cpuinfo; then only widths every vendor's rule trusts).
    - Null with O(maxphysaddr.mode=none), or passthrough with the host's width unknown.
    - Under libvirt older than 8.7, QEMU's default width, which is not written.
  returned: when state is not absent
  type: dict
  sample: {"bits": 41, "window": "0x1c000000000-0x1ffffffffff", "size_gib": 256,
           "firmware": "efi", "vendor": "GenuineIntel"}
state:
  description: The domain's run state after the module (C(running), C(shut off),
    C(absent), ...).
  returned: always
  type: str
details:
  description:
    - Why the preflight refused the domain; the module failed.
    - C(refusals) lists each refusal with C(field) (the option it is about), C(msg),
      C(fix), C(override) (the allow_* option that accepts it, or null) and C(kind).
    - C(kind) is a stable name for the refusals a caller may handle, matched instead of
      the wording. C(hugepages_short) means the node has too few free hugepages.
      C(vf_missing) means the tenant's planned VF does not exist (yet).
      C(hostdev_missing) means another passthrough function does not exist.
      C(no_interrupt_remapping) means the host's interrupt remapping is off.
      C(firmware_missing) means no firmware package offers the O(firmware) asked for.
      It is null for the rest.
  returned: on a preflight refusal
  type: dict
"""

import copy

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import (
    canonical as domain_canonical, model as domain_model, xml as dx)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.address_width import report_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.compare import (
    DomainPlan, check_same_machine, plan_domain_change, plan_domain_removal)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.direct_boot import (
    check_boot_files)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.lifecycle import (
    defined_domains, existing_domain, inactive_xml, lookup_domain, set_autostart,
    set_run_state, state_name, undefine_domain)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.preflight import (
    preflight_from_params)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.argument_spec import (
    ARGUMENT_SPEC, MODULE_RULES, check_float_options, domain_spec_from_params)
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.storage import DomainStorage
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSetError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.policy.host_safety import PASS_THROUGH
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.safety_context import read_module_context
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.libvirt_conn import (
    HAS_LIBVIRT, LIBVIRT_IMPORT_ERROR, LIBVIRT_REQUIREMENT, daemon_version, libvirt,
    libvirt_error_text, open_connection)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.runner import (
    PlannedChange, new_module, run_module)
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes.tenant_scrub import check_reset_methods
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import (
    read_host_topology, topology_from_dict)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import domain_name

HOST_SAFETY_OVERRIDES = PASS_THROUGH.overrides   # what host_safety may name here


def build_module():
    return new_module(AnsibleModule, argument_spec=copy.deepcopy(ARGUMENT_SPEC), supports_check_mode=True,
                      **copy.deepcopy(MODULE_RULES))


class PinnedDomain(PlannedChange):
    """One run of the module: decide the change (domain.compare), then carry it out
    unless in check mode; a refused define takes the new storage back. The run state
    and autostart are set after the change set, outside it: a domain that fails to
    start keeps its definition and the storage it references."""

    def __init__(self, module, conn=None, topology=None):
        super(PinnedDomain, self).__init__(module)
        self.params = params = module.params
        self.name = params["name"]
        self.conn = conn
        self._topology = topology
        self.storage = DomainStorage(module, self.name, params["state_dir"],
                                     disk=params["disk"], cloud_init=params["cloud_init"])
        self.changed = self.restart_required = False
        self.changed_elements, self.actions, self.warnings = [], [], []
        self.created_files, self.removed_files = [], []
        self.xml, self.uuid, self.run_state = None, "", "absent"
        self.domain_diff = {"before": "", "after": ""}
        self.address_width = None

    @property
    def result(self):
        result = dict(changed=self.changed, name=self.name, uuid=self.uuid,
                      changed_elements=self.changed_elements, restart_required=self.restart_required,
                      actions=self.actions, created_files=self.created_files,
                      warnings_preflight=self.warnings, state=self.run_state)
        if self.params["state"] == "absent":
            result["removed_files"] = self.removed_files
        else:
            result["address_width"] = self.address_width
            if self.xml is not None:
                result["xml"] = self.xml
        if self.module._diff:
            result["diff"] = self.domain_diff
        return result

    def preflight(self, spec, topo):
        # host_safety reads mounts, routes and consoles only for a domain with host devices
        context = read_module_context(self.module, self.params["root"], topo.pci) \
            if spec.hostdev_addresses() else None
        report = preflight_from_params(spec, topo, defined_domains(self.conn), self.params,
                                       context)
        check_reset_methods(spec, topo, report, self.params["allow_no_reset"])
        self.warnings = report.warnings
        report.raise_if_refused()

    def has_work(self):
        return self.changed

    def decide(self):
        # Before anything else: the name is also a file name under state_dir, which must
        # be a usable folder before a change is planned that its record would follow.
        domain_name(self.name)
        self.storage.check_state_dir()
        check_float_options(self.module.argument_spec, self.params)
        if self.conn is None:
            self.conn = open_connection(self.params["uri"])
        domain = lookup_domain(self.conn, self.name)
        existing = existing_domain(domain)
        if self.params["state"] == "absent":
            return self.plan_absent(domain, existing)
        check_same_machine(existing, self.params["uuid"], self.name)
        topo = self._topology if self._topology is not None else (
            topology_from_dict(self.params["topology"]) if self.params["topology"] is not None
            else read_host_topology(root=self.params["root"], with_irqs=False))
        spec = domain_spec_from_params(self.params, topo)
        spec.libvirt_version = daemon_version(self.conn)
        width = domain_model.address_width_for(spec)
        self.address_width = width.report() if width else None
        check_boot_files(spec.direct_boot, self.params["root"])
        self.preflight(spec, topo)
        target, autostart = self.params["state"], self.params["autostart"]
        try:
            storage_steps = self.storage.plan()
        except GpuhostError:
            # the failed result still shows what the XML would change (and nothing done)
            xml_only = plan_domain_change(existing, spec, target, autostart)
            self.changed_elements, self.domain_diff = xml_only.changed_elements, xml_only.diff
            raise
        change = plan_domain_change(
            existing, spec, target, autostart, [s.label for s in storage_steps],
            storage_restarts=any(s.seed_digest for s in storage_steps))
        self.report(change)
        self.created_files = self.storage.files_after(storage_steps)
        self.uuid = existing.uuid if existing is not None else ""
        self.run_state = state_name(domain)
        if (self.module.check_mode or not self.changed) and existing is not None and not change.define:
            self.xml = existing.inactive_xml
        return DomainPlan(change=change, domain=domain, storage_steps=storage_steps)

    def apply(self):
        if self.params["state"] == "absent":
            self.apply_absent(self.plan.domain, self.plan.to_remove)
        else:
            self.apply_define(self.plan.change, self.plan.storage_steps, self.plan.domain)

    def report(self, change):
        self.changed_elements, self.actions, self.domain_diff = change.changed_elements, change.actions, change.diff
        if self.address_width:
            self.domain_diff = dict(self.domain_diff, after_header="%s: %s" % (
                self.name, report_text(self.address_width)))
        self.restart_required, self.changed = change.restart_required, bool(change.actions)
        self.xml = change.xml_to_define

    def apply_define(self, change, storage_steps, domain):
        """The storage steps and the define as one change set: a define libvirt refuses
        undoes the overlay, the seed and the record made before it."""
        changes = self.plan.changes = self.storage.changes(storage_steps)
        newly_created = [s.path for s in storage_steps if s.path not in self.storage.record()["created"]]
        defined = [domain]
        if change.define:
            changes.add("define the domain %s" % self.name,
                        lambda: defined.append(self._define(change.xml_to_define)))
        try:
            changes.apply()
        except ChangeSetError as err:
            self.created_files = [p for p in self.created_files if p not in newly_created]
            if change.define and err.details.get("failed_step", "").startswith("define"):
                err.details["xml"] = change.xml_to_define
            raise
        domain = defined[-1]
        self.storage.finish()
        self.uuid, self.run_state = domain.UUIDString(), state_name(domain)
        set_run_state(domain, change.run_state_action, self.params["state"], self.name)
        set_autostart(domain, self.params["autostart"])
        self.xml = inactive_xml(domain)
        self.uuid, self.run_state = domain.UUIDString(), state_name(domain)
        if change.define:
            self.domain_diff["after"] = domain_canonical.canonical_form(self.xml, change.wanted)[0]

    def _define(self, xml):
        try:
            return self.conn.defineXML(xml)
        except libvirt.libvirtError as exc:
            raise GpuhostError("libvirt refused the definition: %s" % libvirt_error_text(exc),
                               field="name", fix="see the message; the XML is in the "
                                                 "result's xml key") from exc

    def plan_absent(self, domain, existing):
        self.created_files = list(self.storage.record()["created"])
        to_remove = self.storage.removable() if self.params["remove_storage"] else []
        removal = plan_domain_removal(existing, to_remove)
        self.actions, self.changed_elements = removal.actions, removal.changed_elements
        self.domain_diff, self.changed = removal.diff, bool(removal.actions)
        self.uuid = existing.uuid if existing is not None else ""
        if self.module.check_mode or not self.changed:
            self.run_state = state_name(domain)
        return DomainPlan(change=removal, domain=domain, to_remove=to_remove)

    def apply_absent(self, domain, to_remove):
        if domain is not None:
            undefine_domain(domain, self.name)
        if self.params["remove_storage"]:
            self.removed_files = self.storage.remove(to_remove)
        self.run_state = "absent"


def main():
    module = build_module()
    if not HAS_LIBVIRT:
        module.fail_json(msg=missing_required_lib(LIBVIRT_REQUIREMENT),
                         exception=LIBVIRT_IMPORT_ERROR)
    if not dx.HAS_LXML:
        module.fail_json(msg=missing_required_lib("lxml (python3-lxml)"))
    run_module(module, PinnedDomain(module))


if __name__ == "__main__":
    main()
