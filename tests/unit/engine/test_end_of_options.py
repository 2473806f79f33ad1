"""Every command the collection runs puts "--" before its positional arguments where the
tool reads it as the end of the options (command-line injection).

The inventory (``grep -rn "run_command\\|subprocess" plugins/``):

* qemu-img create ... -- PATH [SIZE]         (domain/storage.py; test_libvirt_pinned_domain)
* systemctl VERB -- UNIT...                   (engine/systemd.py systemctl, irq_affinity is-enabled)
* modprobe -- vfio-pci                        (vfio_bind, sriov_vfs, gpuhost-sriov-apply)
* cloud-localds [--network-config F] -- OUT USER META; genisoimage/mkisofs ... -- FILES
* journalctl, systemctl show -p ... -- UNIT  (host_facts; test_host_facts)
* systemctl show -p ... -- UNIT..., systemctl VERB -- UNIT  (host_units; test_host_units)
* ip ... dev NAME: iproute2 has no "--" ("--" is taken as a device name); its ``dev``
  keyword takes the next word literally, and the name is checked by
  validators.interface_name first (iommu_groups_facts, sriov).
* xorriso -as mkisofs: "--" would end the mkisofs emulation; its paths are absolute
  names in a folder the module made.
* irqbalance --version, ip -j addr show: no positional argument.
"""

import os
from types import SimpleNamespace

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import systemd
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.domain import storage as domain_storage
from ansible_collections.gpuhost.kvm.plugins.modules import sriov_vfs, vfio_bind


class FakeModule:
    def __init__(self, tools=()):
        self.calls = []
        self.tools = tools

    def run_command(self, argv, **_kwargs):
        self.calls.append(list(argv))
        if "-output" in argv:                       # genisoimage / xorriso
            open(argv[argv.index("-output") + 1], "w").close()
        elif argv and argv[0].endswith("cloud-localds"):
            open(argv[argv.index("--") + 1], "w").close()
        return 0, "", ""

    def get_bin_path(self, name):
        return "/usr/bin/%s" % name if name in self.tools else None


def test_systemctl_puts_end_of_options_before_the_units():
    module = FakeModule()
    systemd.systemctl(module, "try-restart", "irqbalance")
    systemd.systemctl(module, "enable", "gpuhost-sriov.service")
    systemd.systemctl(module, "daemon-reload")
    assert module.calls == [["systemctl", "try-restart", "--", "irqbalance"],
                            ["systemctl", "enable", "--", "gpuhost-sriov.service"],
                            ["systemctl", "daemon-reload"]]


@pytest.mark.parametrize("module_file, cls", [(vfio_bind, "VfioBinder"),
                                              (sriov_vfs, "SriovConfigurator")])
def test_modprobe_gets_end_of_options(module_file, cls):
    module = FakeModule()
    getattr(module_file, cls)._modprobe(SimpleNamespace(module=module))
    assert module.calls == [["modprobe", "--", "vfio-pci"]]


@pytest.mark.parametrize("tool, with_network", [("cloud-localds", False),
                                                ("cloud-localds", True),
                                                ("genisoimage", False), ("mkisofs", True)])
def test_seed_builders_get_end_of_options_before_their_paths(tmp_path, tool, with_network):
    module = FakeModule(tools=(tool,))
    cloud = {"user_data": "#cloud-config\n", "meta_data": None,
             "network_config": "version: 2\n" if with_network else None}
    seed = tmp_path / "seed.iso"
    # through the shared writer, as DomainStorage does
    domain_storage.build_seed(module, HostWriter("/"), "t1", cloud, str(seed))
    assert seed.exists()
    argv, = module.calls
    split = argv.index("--")
    options, positional = argv[:split], argv[split + 1:]
    assert all(os.path.isabs(p) for p in positional)
    assert all(not p.startswith("-") for p in positional)
    if tool == "cloud-localds":
        assert positional[0].endswith("seed.iso") and len(positional) == 3
        assert ("--network-config" in options) is with_network
    else:
        assert [os.path.basename(p) for p in positional] == (
            ["user-data", "meta-data"] + (["network-config"] if with_network else []))


def test_xorriso_keeps_its_paths_inside_the_mkisofs_emulation(tmp_path):
    module = FakeModule(tools=("xorriso",))
    cloud = {"user_data": "#cloud-config\n", "meta_data": None, "network_config": None}
    domain_storage.build_seed(module, HostWriter("/"), "t1", cloud,
                              str(tmp_path / "seed.iso"))
    argv, = module.calls
    assert "--" not in argv and argv[1:3] == ["-as", "mkisofs"]
    assert all(os.path.isabs(p) for p in argv[-2:])


@pytest.mark.parametrize("base", [True, False])
def test_qemu_img_gets_end_of_options_before_the_path_and_size(tmp_path, base):
    image = tmp_path / "base.qcow2"
    image.write_text("")
    argv = domain_storage.overlay_argv(FakeModule(tools=("qemu-img",)).get_bin_path,
                                       {"base_image": str(image) if base else None,
                                        "base_format": "qcow2", "path": "/var/lib/x/-o.qcow2",
                                        "size": "40G"})
    assert argv[argv.index("--") + 1:] == ["/var/lib/x/-o.qcow2", "40G"]
