# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DomainSpec of libvirt_pinned_domain, built from its options (``params``, as
AnsibleModule checked them) and the host topology. Pure: no libvirt, no file."""

from __future__ import annotations

from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import model as domain_model
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PciAddress
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain.direct_boot import (
    DEFAULT_BOOT_IMAGES_DIR, direct_boot_from_params, serial_log_from_params)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import (
    normalize_address, slot_bar64_sizes)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    absolute_path, domain_uuid, finite_number, interface_name, whole_number)


def float_options(argument_spec, params, prefix=""):
    """(option name, value) of every option and sub-option typed float that was given,
    found from the argument spec itself, so that a float option added later is
    checked too."""
    found = []
    for name, option in argument_spec.items():
        value = (params or {}).get(name)
        if value is None:
            continue
        if option.get("type") == "float":
            found.append((prefix + name, value))
        suboptions = option.get("options")
        if suboptions:
            items = value if option.get("type") == "list" else [value]
            for index, item in enumerate(items):
                where = "%s%s%s." % (prefix, name, "[%d]" % index
                                     if option.get("type") == "list" else "")
                found.extend(float_options(suboptions, item, where))
    return found


def check_float_options(argument_spec, params):
    """Every float option through the shared validator: Ansible's float type takes
    .nan, .inf, "nan" and "inf", which compare false with everything or overflow
    int() later."""
    for name, value in float_options(argument_spec, params):
        finite_number(value, name, unit="GiB" if name.endswith("_gib") else "")


def domain_spec_from_params(params, topo):
    """The DomainSpec the options ask for: from the plan's tenant entry when ``plan``
    is given, else from the structured options. ``topo`` fills in a GPU's functions
    and BAR sizes the options leave out (None: take the options as they are).
    ``hostdev_rom`` then names the ROM BAR of the host functions it picks."""
    spec = _spec_of_shape(params, topo)
    spec.rom_bar = rom_bar_settings(params.get("hostdev_rom"), spec)
    return spec


# hostdev_rom's words for groups of the domain's host functions
ROM_BAR_GROUPS = ("gpus", "vf")
ROM_BAR_VALUES = ("on", "off")


def rom_bar_settings(items, spec, field="hostdev_rom"):
    """host function -> "on"/"off" from ``hostdev_rom`` items ``{device, bar}``.

    ``device`` is a PCI address of one of the domain's host functions, ``gpus`` (every
    function of every GPU, companions included: a count of GPUs in the plan does not
    say which addresses they get) or ``vf`` (the tenant's VF). An address is more
    specific than a group and wins over it; one function given two values at the same
    level is refused, as is a device the domain does not take."""
    if items is None:
        return {}
    if not isinstance(items, (list, tuple)):
        raise GpuhostError("%r is not a list of {device, bar}" % (items,), field=field,
                           fix="write hostdev_rom: [{device: gpus, bar: 'off'}]")
    mine = set(normalize_address(a) for a in spec.hostdev_addresses())
    by_group, by_address = {}, {}
    for index, item in enumerate(items):
        where = "%s[%d]" % (field, index)
        if not isinstance(item, dict) or set(item) - {"device", "bar"}:
            raise GpuhostError("%r is not a {device, bar} mapping" % (item,), field=where,
                               fix="give device (a PCI address, gpus or vf) and bar "
                                   "(on or off)")
        value = item.get("bar")
        if isinstance(value, bool):          # YAML 1.1 reads an unquoted off as false
            value = "on" if value else "off"
        if value not in ROM_BAR_VALUES:
            raise GpuhostError("ROM BAR %r is neither on nor off" % (value,),
                               field=where + ".bar", fix="write bar: 'on' or bar: 'off'")
        device = item.get("device")
        if device in ROM_BAR_GROUPS:
            functions = _rom_group_functions(spec, device)
            if not functions:
                raise GpuhostError("the domain has no %s for hostdev_rom"
                                   % ("GPU" if device == "gpus" else "VF"),
                                   field=where + ".device",
                                   fix="drop the entry, or name a device the domain has")
            target = by_group
        else:
            address = normalize_address(device, field=where + ".device")
            if address not in mine:
                raise GpuhostError(
                    "%s is not one of this domain's host devices (%s)"
                    % (address, ", ".join(sorted(mine)) or "none"), field=where + ".device",
                    fix="name a function the domain passes through, or gpus or vf")
            functions, target = [address], by_address
        for function in functions:
            function = normalize_address(function)
            if function in target and target[function][1] != value:
                raise GpuhostError(
                    "%s is given ROM BAR %s by %s and %s by %s"
                    % (function, target[function][1], target[function][0], value, where),
                    field=where, fix="name every function once")
            target[function] = (where, value)
    by_group.update(by_address)
    return {function: value for function, (_where, value) in sorted(by_group.items())}


def _rom_group_functions(spec, group):
    """The host functions a hostdev_rom group word stands for (none: the domain has
    no such device)."""
    if group == "gpus":
        return [f for gpu in spec.gpus for f in gpu.functions]
    if spec.network.kind == "vf" and spec.network.vf_address:
        return [spec.network.vf_address]
    return []


def _spec_of_shape(params, topo):
    """The DomainSpec of the plan entry or of the structured options."""
    name = params["name"]
    common = dict(
        extra_hostdevs=tuple(normalize_address(a, field="hostdevs") for a in params["hostdevs"]),
        hide_kvm=params["hide_kvm"], domain_type=params["domain_type"],
        cpu_mode=params["cpu_mode"], uuid=domain_uuid(params["uuid"]),
        memory_access="shared" if params["shared_memory"] else None,
        vcpusched=params["vcpusched"], locked=params["lock_memory"],
    )
    common["firmware"] = params["firmware"]
    common.update(guest_cpu_of(topo, params["domain_type"]))
    if params["maxphysaddr"]:
        common["maxphysaddr_mode"] = params["maxphysaddr"]["mode"]
        common["maxphysaddr_bits"] = params["maxphysaddr"]["bits"]
    if params["disk"]:
        common["disk"] = domain_model.DiskSpec(
            path=absolute_path(params["disk"]["path"], "disk.path", "disk image"),
            bus=params["disk"]["bus"])
    if params["cloud_init"]:
        common["seed_path"] = params["cloud_init"]["seed_path"]
    common["direct_boot"] = direct_boot_from_params(params)
    common["serial_log"] = serial_log_from_params(params)
    network = params["network"]
    if network:
        common["network"] = domain_model.NetworkSpec(
            kind=network["type"],
            bridge=None if network["bridge"] is None else
            interface_name(network["bridge"], "network.bridge"),
            vf_address=normalize_address(network["vf_address"], field="network.vf_address")
            if network["vf_address"] else None,
            vf_mode=network["vf_mode"], mac=network["mac"], model=network["model"],
            vlan=network["vlan"])
    if params["plan"] is not None:
        plan_name = params["plan"].get("name")
        if plan_name != name:
            raise GpuhostError(
                "the plan entry is for %r, not %r" % (plan_name, name), field="plan",
                fix="pass the plan's tenants entry whose name is %s" % name)
        return domain_model.spec_from_plan(params["plan"], **common)
    if network and network["type"] == "vf" and not network["vf_address"]:
        raise GpuhostError("network type vf needs vf_address without a plan",
                           field="network.vf_address",
                           fix="give the VF's PCI address, or pass a plan with a VF")
    return domain_model.spec_from_options(
        name, params["vcpus"], params["vcpu_pins"], params["memory_gib"],
        guest_topology=params["guest_topology"],
        hugepage_size_kib=domain_model.hugepage_size_to_kib(params["hugepage_size"]),
        memory_nodeset=params["memory_nodes"] or (),
        emulator_cpus=params["emulator_cpus"] or (),
        iothreads=params["iothreads"] or 0,
        iothread_cpus=params["iothread_cpus"] or (),
        gpus=[gpu_from_option(g, topo, i) for i, g in enumerate(params["gpus"] or ())],
        **common)


def guest_cpu_of(topo, domain_type="kvm"):
    """The DomainSpec's cpu_vendor, cpu_1g_pages and host_phys_bits from the host's
    /proc/cpuinfo (under KVM, host-passthrough and maximum show the guest the host's
    CPU); unknown values are left to DomainSpec's defaults. Under TCG (domain_type
    qemu) the guest CPU is QEMU's own, whatever the host's, and no EPT limits its
    width: nothing is taken from the host."""
    cpus = getattr(topo, "cpus", None)
    if cpus is None or domain_type == "qemu":
        return {}
    values = {"cpu_vendor": cpus.vendor, "host_phys_bits": cpus.phys_bits}
    if cpus.flags:
        values["cpu_1g_pages"] = "pdpe1gb" in cpus.flags
    return values


def gpu_from_option(item, topo, index):
    """The GpuSpec of ``gpus[index]``: a PCI address or {address, functions,
    bar64_total}; what it leaves out comes from the topology (every function in the
    GPU's slot, and their 64-bit prefetchable BARs)."""
    field = "gpus[%d]" % index
    if isinstance(item, str):
        item = {"address": item}
    if not isinstance(item, dict) or "address" not in item:
        raise GpuhostError("%r is neither a PCI address nor a dict with address" % (item,),
                           field=field, fix="write 0000:65:00.0 or {address: ...}")
    address = normalize_address(item["address"], field=field)
    functions = item.get("functions")
    bar64 = item.get("bar64_total")
    sizes = domain_model.bar64_sizes_of(item.get("bar64_sizes"), field + ".bar64_sizes")
    slot = PciAddress.parse(address).slot_key
    if functions is None and topo is not None:
        functions = sorted(a for a in topo.pci if PciAddress.parse(a).slot_key == slot)
    if bar64 is None and not sizes and topo is not None:
        sizes = slot_bar64_sizes(topo.pci[a] for a in functions or () if a in topo.pci)
        bar64 = sum(sizes)
    return domain_model.GpuSpec(address=address, functions=tuple(functions or (address,)),
                                bar64_total=whole_number(bar64 or 0, field + ".bar64_total", 0,
                                                         domain_model.MAX_BAR_BYTES),
                                bar64_sizes=sizes, origin=field)


# The module's options (libvirt_pinned_domain's DOCUMENTATION says what each means), next
# to domain_spec_from_params, the one reader of them.
STRUCTURED_OPTIONS = ("vcpus", "vcpu_pins", "guest_topology", "memory_gib", "memory_nodes",
                      "emulator_cpus", "iothreads", "iothread_cpus", "gpus")
DEFINED_STATES = ("present", "running", "shutdown", "destroyed")
ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    uri=dict(type="str", default="qemu:///system"),
    state=dict(type="str", default="present",
               choices=["present", "running", "shutdown", "destroyed", "absent"]),
    plan=dict(type="dict"),
    vcpus=dict(type="int"),
    vcpu_pins=dict(type="list", elements="raw"),
    guest_topology=dict(type="dict", options=dict(
        sockets=dict(type="int", default=1), dies=dict(type="int", default=1),
        cores=dict(type="int", required=True), threads=dict(type="int", default=1))),
    memory_gib=dict(type="float"),
    hugepage_size=dict(type="str", default="1G"),
    memory_nodes=dict(type="str"),
    emulator_cpus=dict(type="str"),
    iothreads=dict(type="int"),
    iothread_cpus=dict(type="str"),
    gpus=dict(type="list", elements="raw"),
    hostdevs=dict(type="list", elements="str", default=[]),
    hostdev_rom=dict(type="list", elements="dict", options=dict(
        device=dict(type="str", required=True),
        bar=dict(type="raw", required=True))),
    disk=dict(type="dict", options=dict(
        path=dict(type="path", required=True),
        base_image=dict(type="path"),
        base_format=dict(type="str", default="qcow2", choices=["qcow2", "raw"]),
        size=dict(type="str"),
        bus=dict(type="str", default="virtio", choices=["virtio", "sata", "scsi"]))),
    cloud_init=dict(type="dict", options=dict(
        seed_path=dict(type="path", required=True),
        user_data=dict(type="str", no_log=True),
        meta_data=dict(type="str", no_log=True),
        network_config=dict(type="str", no_log=True))),
    network=dict(type="dict", options=dict(
        type=dict(type="str", required=True, choices=["bridge", "vf", "none"]),
        bridge=dict(type="str"),
        vf_address=dict(type="str"),
        vf_mode=dict(type="str", default="interface", choices=["interface", "hostdev"]),
        mac=dict(type="str"),
        vlan=dict(type="int"),
        model=dict(type="str", default="virtio")),
        required_if=[("type", "bridge", ("bridge",))]),
    kernel=dict(type="str"),
    initrd=dict(type="str"),
    cmdline=dict(type="str"),
    boot_images_dir=dict(type="str", default=DEFAULT_BOOT_IMAGES_DIR),
    serial_log=dict(type="str"),
    autostart=dict(type="bool", default=True),
    hide_kvm=dict(type="bool", default=False),
    vcpusched=dict(type="dict", options=dict(
        scheduler=dict(type="str", required=True, choices=["fifo", "rr"]),
        priority=dict(type="int", required=True),
        vcpus=dict(type="str"))),
    maxphysaddr=dict(type="dict", options=dict(
        mode=dict(type="str", default="auto",
                  choices=["auto", "emulate", "passthrough", "none"]),
        bits=dict(type="int"))),
    firmware=dict(type="str", default="bios", choices=list(domain_model.FIRMWARE_CHOICES)),
    cpu_mode=dict(type="str", default="host-passthrough",
                  choices=["host-passthrough", "maximum"]),
    lock_memory=dict(type="bool", default=True),
    shared_memory=dict(type="bool", default=False),
    domain_type=dict(type="str", default="kvm", choices=["kvm", "qemu", "test"]),
    uuid=dict(type="str"),
    root=dict(type="path", default="/"),
    topology=dict(type="dict"),
    allow_cpu_overlap=dict(type="bool", default=False),
    allow_cross_node=dict(type="bool", default=False),
    allow_vcpu_emulator_overlap=dict(type="bool", default=False),
    allow_unsafe_interrupts=dict(type="bool", default=False),
    allow_host_critical=dict(type="bool", default=False),
    allow_boot_vga=dict(type="bool", default=False),
    allow_no_reset=dict(type="bool", default=False),
    remove_storage=dict(type="bool", default=False),
    state_dir=dict(type="path", default="/var/lib/gpuhost/domains"),
)
MODULE_RULES = dict(
    mutually_exclusive=[("plan", option) for option in STRUCTURED_OPTIONS],
    required_together=[("vcpus", "vcpu_pins", "memory_gib")],
    required_if=[("state", state, ("plan", "vcpus"), True) for state in DEFINED_STATES],
    required_by=dict(initrd=("kernel",), cmdline=("kernel",)),
)
