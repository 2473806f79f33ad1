# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host_facts: the pure readers (module_utils/host_facts) on real and synthetic trees,
and the module: options checked first, one fact out, commands only on the live host."""

import json
import os

import libvirt
import pytest
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import commands
from support.module_args import patch_module_args

from ansible_collections.gpuhost.kvm.plugins.module_utils.host import systemd_units as units
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import host_facts
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.modules import host_facts as host_facts_module

from support import fixturegen
from support import realtrees


# ---------------------------------------------------------------- helpers

def _write(root, rel, text="", mtime=None):
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _bare_root(tmp_path):
    """A recorded tree with only what validate_root asks for (sys/ and proc/)."""
    root = str(tmp_path / "root")
    os.makedirs(os.path.join(root, "sys"))
    os.makedirs(os.path.join(root, "proc"))
    return root


def _snapshot(root):
    """Every entry under root with its kind, size and mtime: what a write would change."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            entries.append((os.path.relpath(path, root), info.st_mode, info.st_size, info.st_mtime_ns))
    return sorted(entries)


def _meminfo_by_hand(path):
    """/proc/meminfo parsed independently of parse_meminfo: name -> first number."""
    values = {}
    with open(path) as handle:
        for line in handle:
            name, dummy, rest = line.partition(":")
            values[name] = int(rest.split()[0])
    return values


def _run(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            host_facts_module.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def no_commands(monkeypatch):
    """The module must not run any command nor open libvirt: fail the test if it does."""
    def run_command(self, argv, *args, **kwargs):
        pytest.fail("host_facts ran a command: %r" % (argv,))

    def open_connection(uri):
        pytest.fail("host_facts opened libvirt at %s" % uri)

    monkeypatch.setattr(commands, "run_to_the_end", run_command)
    monkeypatch.setattr(host_facts_module, "open_connection", open_connection)


@pytest.fixture
def runbook_root(tmp_path):
    return fixturegen.build_runbook_host(str(tmp_path / "runbook"))


# ---------------------------------------------------------------- read_firmware

def test_firmware_of_the_synthetic_intel_host(runbook_root):
    firmware = host_facts.read_firmware(runbook_root)
    assert firmware == {"acpi_tables": ["DMAR"], "cmdline": fixturegen.HostSpec().cmdline, "acs_override": []}


def test_firmware_of_the_synthetic_amd_host(tmp_path):
    root = fixturegen.build_amd_nps4_host(str(tmp_path / "amd"))
    firmware = host_facts.read_firmware(root)
    assert firmware["acpi_tables"] == ["IVRS"]
    assert firmware["cmdline"] == "BOOT_IMAGE=/vmlinuz root=/dev/sda2 ro amd_iommu=on iommu=pt"


def test_firmware_of_a_real_tree_without_acpi_tables():
    root = realtrees.tree(realtrees.XEON_SILVER)
    with open(os.path.join(root, "proc", "cmdline")) as handle:
        expected = handle.read().strip()
    firmware = host_facts.read_firmware(root)
    assert firmware["cmdline"] == expected and firmware["cmdline"].startswith("BOOT_IMAGE=/vmlinuz-3.10.0")
    assert firmware["acpi_tables"] == [] and firmware["acs_override"] == []


def test_firmware_lists_both_tables_in_order_and_every_acs_override(tmp_path):
    root = _bare_root(tmp_path)
    _write(root, "sys/firmware/acpi/tables/IVRS", "IVRS")
    _write(root, "sys/firmware/acpi/tables/DMAR", "DMAR")
    _write(root, "sys/firmware/acpi/tables/APIC", "APIC")
    _write(root, "proc/cmdline", "ro pcie_acs_override=downstream,multifunction xpcie_acs_override=id:1 quiet "
                                 "pcie_acs_override=id:10de:2230\n")
    firmware = host_facts.read_firmware(root)
    assert firmware["acpi_tables"] == ["DMAR", "IVRS"]
    assert firmware["acs_override"] == ["pcie_acs_override=downstream,multifunction", "pcie_acs_override=id:10de:2230"]
    assert firmware["cmdline"].endswith("id:10de:2230")


@pytest.mark.parametrize("make_cmdline", ["missing", "directory"])
def test_unreadable_cmdline_is_none(tmp_path, make_cmdline):
    root = _bare_root(tmp_path)
    if make_cmdline == "directory":
        os.makedirs(os.path.join(root, "proc", "cmdline"))
    firmware = host_facts.read_firmware(root)
    assert firmware == {"acpi_tables": [], "cmdline": None, "acs_override": []}


# ---------------------------------------------------------------- read_cpu_power

CPU0 = "sys/devices/system/cpu/cpu0/"


def test_cpu_power_reads_governor_cstates_and_max_cstate(tmp_path):
    root = _bare_root(tmp_path)
    _write(root, CPU0 + "cpufreq/scaling_governor", "performance\n")
    for index, name in enumerate(["POLL", "C1", "C1E", "C6", "C7s", "C8"]):
        _write(root, CPU0 + "cpuidle/state%d/name" % index, name + "\n")
    _write(root, "sys/module/intel_idle/parameters/max_cstate", "1\n")
    power = host_facts.read_cpu_power(root)
    # the first CSTATE_COUNT states only, in state order
    assert power == {"governor": "performance", "cstates": ["POLL", "C1", "C1E", "C6", "C7s"],
                     "intel_idle_max_cstate": "1"}
    assert host_facts.CSTATE_COUNT == 5


def test_cpu_power_without_cpufreq_cpuidle_or_intel_idle(tmp_path):
    root = _bare_root(tmp_path)
    os.makedirs(os.path.join(root, CPU0))
    assert host_facts.read_cpu_power(root) == {"governor": None, "cstates": [], "intel_idle_max_cstate": None}


def test_cpu_power_of_a_real_tree_without_cpufreq():
    power = host_facts.read_cpu_power(realtrees.tree(realtrees.POWER9))
    assert power == {"governor": None, "cstates": [], "intel_idle_max_cstate": None}


def test_cstates_keep_state_order_across_a_missing_or_empty_state(tmp_path):
    # as the bios role's `select` did before the module: an absent or empty name is left
    # out and the later states keep their order
    root = _bare_root(tmp_path)
    _write(root, CPU0 + "cpuidle/state0/name", "POLL\n")
    _write(root, CPU0 + "cpuidle/state2/name", "C1E\n")
    _write(root, CPU0 + "cpuidle/state3/name", "\n")
    _write(root, CPU0 + "cpuidle/state4/name", "C6\n")
    assert host_facts.read_cpu_power(root)["cstates"] == ["POLL", "C1E", "C6"]


# ---------------------------------------------------------------- memory

def test_memory_of_a_real_two_node_tree_matches_its_files():
    root = realtrees.tree(realtrees.XEON_SILVER)
    memory = host_facts.read_memory(root)
    assert memory["meminfo"] == _meminfo_by_hand(os.path.join(root, "proc", "meminfo"))
    assert memory["meminfo"]["HugePages_Total"] == 4096 and memory["meminfo"]["Hugepagesize"] == 2048
    assert list(memory["hugepages"]) == ["0", "1"]
    for node in ("0", "1"):
        # sizes sorted as numbers: 2048 before 1048576 (as strings it would be last)
        assert list(memory["hugepages"][node]) == ["2048", "1048576"]
        node_dir = os.path.join(root, "sys/devices/system/node/node%s/hugepages" % node)
        for size, pool in memory["hugepages"][node].items():
            for key, name in (("nr", "nr_hugepages"), ("free", "free_hugepages"), ("surplus", "surplus_hugepages")):
                with open(os.path.join(node_dir, "hugepages-%skB" % size, name)) as handle:
                    assert pool[key] == int(handle.read())
    assert memory["hugepages"]["1"]["2048"] == {"nr": 2048, "free": 2048, "surplus": 0}
    total = sum(host_facts.pool_pages(memory, node, 2048) for node in (0, 1))
    assert total == memory["meminfo"]["HugePages_Total"]


def test_memory_nodes_sort_as_numbers_on_a_real_sparse_tree():
    memory = host_facts.read_memory(realtrees.tree(realtrees.POWER9))
    assert list(memory["hugepages"]) == ["0", "8", "250", "251", "252", "253", "254", "255"]
    assert memory["meminfo"]["MemTotal"] == 358162944


def test_memory_node10_after_node2(tmp_path):
    root = _bare_root(tmp_path)
    for node, pages in ((10, 7), (2, 3), (1, 1)):
        base = "sys/devices/system/node/node%d/hugepages/hugepages-2048kB/" % node
        _write(root, base + "nr_hugepages", "%d\n" % pages)
        _write(root, base + "free_hugepages", "%d\n" % (pages - 1))
        _write(root, base + "surplus_hugepages", "0\n")
    os.makedirs(os.path.join(root, "sys/devices/system/node/nodefoo"))
    _write(root, "sys/devices/system/node/possible", "1-2,10\n")
    memory = host_facts.read_memory(root)
    assert list(memory["hugepages"]) == ["1", "2", "10"]
    assert memory["hugepages"]["10"] == {"2048": {"nr": 7, "free": 6, "surplus": 0}}
    assert memory["meminfo"] == {}
    assert json.loads(json.dumps(memory)) == memory


def test_memory_without_numa_takes_the_global_pools_as_node_0(tmp_path):
    root = _bare_root(tmp_path)
    _write(root, "proc/meminfo", "MemTotal:       16384000 kB\nHugePages_Total:     512\n")
    base = "sys/kernel/mm/hugepages/"
    _write(root, base + "hugepages-1048576kB/nr_hugepages", "2\n")
    _write(root, base + "hugepages-2048kB/nr_hugepages", "512\n")
    _write(root, base + "hugepages-2048kB/free_hugepages", "500\n")
    _write(root, base + "hugepages-2048kB/surplus_hugepages", "4\n")
    os.makedirs(os.path.join(root, base, "hugepages-2MB"))      # not the kernel's naming: ignored
    _write(root, base + "README", "x")
    memory = host_facts.read_memory(root)
    assert memory["meminfo"] == {"MemTotal": 16384000, "HugePages_Total": 512}
    # counters that are missing read as 0
    assert memory["hugepages"] == {"0": {"2048": {"nr": 512, "free": 500, "surplus": 4},
                                         "1048576": {"nr": 2, "free": 0, "surplus": 0}}}


def test_memory_counter_that_is_not_an_integer_reads_as_zero(tmp_path):
    root = _bare_root(tmp_path)
    base = "sys/devices/system/node/node0/hugepages/hugepages-2048kB/"
    _write(root, base + "nr_hugepages", "lots\n")
    _write(root, base + "free_hugepages", "1\x002\n")
    _write(root, base + "surplus_hugepages", "3\n")
    assert host_facts.read_memory(root)["hugepages"] == {"0": {"2048": {"nr": 0, "free": 0, "surplus": 3}}}


def test_memory_of_the_synthetic_runbook_host(runbook_root):
    memory = host_facts.read_memory(runbook_root)
    assert list(memory["hugepages"]) == ["0", "1"]
    assert host_facts.pool_pages(memory, 0, 2048) == 1024
    assert host_facts.pool_pages(memory, "1", "1048576", "free") == 32
    assert host_facts.pool_pages(memory, 1, 1048576, "surplus") == 0
    assert memory["meminfo"]["Hugepagesize"] == 2048


@pytest.mark.parametrize("memory, node, size", [
    ({"hugepages": {"0": {"2048": {"nr": 5}}}}, 0, 1048576),   # no such pool
    ({"hugepages": {"0": {"2048": {"nr": 5}}}}, 3, 2048),      # no such node
    ({"hugepages": {}}, 0, 2048),
    ({}, 0, 2048),
    (None, 0, 2048),
])
def test_pool_pages_of_a_missing_pool_is_zero(memory, node, size):
    assert host_facts.pool_pages(memory, node, size) == 0


def test_pool_pages_reads_the_asked_counter():
    memory = {"hugepages": {"0": {"2048": {"nr": 5, "free": 2, "surplus": 1}}}}
    assert [host_facts.pool_pages(memory, 0, 2048, counter) for counter in ("nr", "free", "surplus", "resv")] == [5, 2, 1, 0]


def test_parse_meminfo_takes_kb_sizes_and_hugepage_counts_and_skips_other_lines():
    text = "\n".join([
        "MemTotal:       32768000 kB",
        "  MemFree:   100 kB  ",
        "Active(anon):     208384 kB",
        "HugePages_Total:    1024",
        "HugePages_Free:        0",
        "Node 0 MemUsed:  5 kB",          # a node file's prefix: not stripped here
        "Negative:      -3 kB",
        "Megabytes:     12 MB",
        "Underscored:   1_0 kB",
        "Trailing:      5 kB extra",
        "NoValue:",
        ": 5 kB",
        "Float:   1.5 kB",
        "Hex:     0x10",
        "garbage",
        "",
    ])
    assert host_facts.parse_meminfo(text) == {"MemTotal": 32768000, "MemFree": 100, "Active(anon)": 208384,
                                              "HugePages_Total": 1024, "HugePages_Free": 0}


@pytest.mark.parametrize("text", [None, "", "\n\n"])
def test_parse_meminfo_of_nothing_is_empty(text):
    assert host_facts.parse_meminfo(text) == {}


def test_parse_meminfo_skips_non_ascii_digits():
    assert host_facts.parse_meminfo("MemTotal: \u0661\u0662\u0663 kB\nMemFree: 5 kB") == {"MemFree": 5}


# ---------------------------------------------------------------- read_devices

def test_devices_of_the_runbook_host_by_short_and_full_address(runbook_root):
    devices = host_facts.read_devices(["65:00.0", "0000:41:00.0", "0000:99:00.0"], runbook_root)
    assert list(devices) == ["0000:65:00.0", "0000:41:00.0", "0000:99:00.0"]
    basic = ("present", "numa_node", "sriov_totalvfs", "sriov_numvfs", "driver")
    assert {key: devices["0000:65:00.0"][key] for key in basic} == {
        "present": True, "numa_node": 0, "sriov_totalvfs": None, "sriov_numvfs": None, "driver": "nvidia"}
    assert {key: devices["0000:41:00.0"][key] for key in basic} == {
        "present": True, "numa_node": 0, "sriov_totalvfs": 8, "sriov_numvfs": 8, "driver": "mlx5_core"}
    # The simulated tree writes no link, power or AER attribute: unknown, and no reason.
    assert devices["0000:65:00.0"]["state"]["link"] == {"current_speed_gts": None, "max_speed_gts": None,
                                                        "current_width": None, "max_width": None}
    assert devices["0000:65:00.0"]["unfit"] == [] and devices["0000:65:00.0"]["notes"] == []
    assert devices["0000:99:00.0"] == {"present": False, "numa_node": None, "sriov_totalvfs": None,
                                       "sriov_numvfs": None, "driver": None}


def test_devices_of_a_real_tree_name_the_driver_from_its_link():
    root = realtrees.tree(realtrees.LAPTOP_IOMMU)
    devices = host_facts.read_devices(["00:02.0", "0000:04:00.0", "0000:00:08.0"], root)
    assert devices["0000:00:02.0"]["driver"] == "i915"
    assert devices["0000:04:00.0"]["driver"] == "nvme"
    # a function without a driver link
    assert devices["0000:00:08.0"]["present"] is True and devices["0000:00:08.0"]["driver"] is None
    # The laptop's firmware gives no node (numa_node is -1): unknown, as pci.py reads it.
    assert {entry["numa_node"] for entry in devices.values()} == {None}


# ---------------------------------------------------------------- read_pci

def test_pci_of_the_runbook_host_lists_the_gpu_its_audio_and_the_nic(runbook_root):
    functions = host_facts.read_pci(runbook_root)
    assert functions["0000:65:00.0"] == {"vendor": "10de", "device": "20b5", "class": "0x030200",
                                         "driver": "nvidia"}
    assert functions["0000:65:00.1"] == {"vendor": "10de", "device": "1aef", "class": "0x040300",
                                         "driver": "snd_hda_intel"}
    assert functions["0000:41:00.0"]["driver"] == "mlx5_core"
    # Every function the tree has, each with four-digit IDs.
    listed = sorted(os.listdir(os.path.join(runbook_root, "sys/bus/pci/devices")))
    assert sorted(functions) == listed
    assert all(len(entry["vendor"]) == 4 and len(entry["device"]) == 4 for entry in functions.values())


def test_pci_of_a_real_laptop_tree_matches_its_vendor_files():
    root = realtrees.tree(realtrees.LAPTOP_IOMMU)
    functions = host_facts.read_pci(root)
    assert functions["0000:00:02.0"]["driver"] == "i915" and functions["0000:00:02.0"]["class"].startswith("0x03")
    for address, entry in functions.items():
        with open(os.path.join(root, "sys/bus/pci/devices", address, "vendor")) as handle:
            assert entry["vendor"] == handle.read().strip()[2:].lower(), address


def test_pci_of_a_root_without_pci_is_empty(tmp_path):
    assert host_facts.read_pci(str(tmp_path)) == {}


def test_device_duplicate_spellings_are_one_entry(runbook_root):
    devices = host_facts.read_devices(["65:00.1", "0000:65:00.1", "0:65:0.1"], runbook_root)
    assert list(devices) == ["0000:65:00.1"] and devices["0000:65:00.1"]["driver"] == "snd_hda_intel"


@pytest.mark.parametrize("addresses", [None, [], ()])
def test_no_devices_is_empty(runbook_root, addresses):
    assert host_facts.read_devices(addresses, runbook_root) == {}


def test_device_driver_link_with_absolute_target_stays_in_root(tmp_path):
    root = _bare_root(tmp_path)
    dev = os.path.join(root, "sys/bus/pci/devices/0000:03:00.0")
    os.makedirs(dev)
    _write(root, "sys/bus/pci/devices/0000:03:00.0/numa_node", "1\n")
    os.symlink("/sys/bus/pci/drivers/vfio-pci", os.path.join(dev, "driver"))
    entry = host_facts.read_devices(["3:0.0"], root)["0000:03:00.0"]
    assert {key: entry[key] for key in ("present", "numa_node", "sriov_totalvfs", "sriov_numvfs", "driver")} == {
        "present": True, "numa_node": 1, "sriov_totalvfs": None, "sriov_numvfs": None, "driver": "vfio-pci"}


@pytest.mark.parametrize("address", ["../../etc", "0000:65:00.0/../x", "0000:65\n:00.0", "0000:65:00.0\nx",
                                     "0000:65:00.0/", "65:00", "0000:65:20.0", "", "/sys/bus/pci/devices/0000:65:00.0"])
def test_hostile_device_address_is_refused_naming_its_index(runbook_root, address):
    with pytest.raises(GpuhostError) as err:
        host_facts.read_devices(["0000:65:00.0", address], runbook_root)
    assert err.value.field == "devices[1]" and err.value.fix


# ---------------------------------------------------------------- read_tuned

@pytest.mark.parametrize("content, expected", [("virtual-host\n", "virtual-host"), ("", None), ("\n", None), (None, None)])
def test_tuned_active_profile(tmp_path, content, expected):
    root = _bare_root(tmp_path)
    if content is not None:
        _write(root, "etc/tuned/active_profile", content)
    assert host_facts.read_tuned(root) == {"active_profile": expected}


# ---------------------------------------------------------------- kernel_log_matches

KERNEL_LOG = [
    "pci 0000:65:00.0: BAR 1: no space for [mem size 0x2000000000 64bit pref]",
    "pci 0000:65:00.0: BAR 1: failed to assign [mem size 0x2000000000 64bit pref]",
    "DMAR: IOMMU enabled",
    "pci 0000:41:00.0: BAR 0: assigned [mem 0x3bfff0000000-0x3bfff1ffffff 64bit pref]",
]


def test_kernel_log_matches_searches_each_line_in_order():
    assert host_facts.kernel_log_matches(KERNEL_LOG, r"BAR \d+: (no space|failed)") == KERNEL_LOG[:2]
    assert host_facts.kernel_log_matches(KERNEL_LOG, "IOMMU") == [KERNEL_LOG[2]]     # search, not match
    assert host_facts.kernel_log_matches(KERNEL_LOG, "^IOMMU") == []
    assert host_facts.kernel_log_matches([], "BAR") == []


@pytest.mark.parametrize("pattern", ["BAR (", "[mem", "*", None, 5])
def test_kernel_log_bad_pattern_is_refused(pattern):
    with pytest.raises(GpuhostError) as err:
        host_facts.kernel_log_matches(KERNEL_LOG, pattern)
    assert err.value.field == "kernel_log_pattern" and "not a regular expression" in err.value.msg and err.value.fix


# ---------------------------------------------------------------- initramfs

PATTERN = "/boot/initrd.img-%s"


def _initramfs_tree(tmp_path, images, inputs):
    """lib/modules/<version> for each kernel; images {version: mtime or None}; inputs
    {host path: mtime}."""
    root = _bare_root(tmp_path)
    for version, mtime in images.items():
        os.makedirs(os.path.join(root, "lib/modules", version))
        if mtime is not None:
            _write(root, (PATTERN % version).lstrip("/"), "image", mtime)
    for path, mtime in inputs.items():
        _write(root, path.lstrip("/"), "options vfio-pci ids=10de:20b5\n", mtime)
    return root


def test_initramfs_older_than_the_newest_input_is_stale(tmp_path):
    root = _initramfs_tree(tmp_path, {"6.1.0-18-amd64": 1_700_000_000, "6.1.0-20-amd64": 1_700_003_000,
                                      "6.5.0-1-amd64": None},
                           {"/etc/modprobe.d/vfio.conf": 1_700_002_000, "/etc/initramfs-tools/modules": 1_700_001_000})
    _write(root, "lib/modules/modules.alias", "not a kernel")
    state = host_facts.read_initramfs(["/etc/modprobe.d/vfio.conf", "/etc/initramfs-tools/modules", "/etc/missing.conf"],
                                      PATTERN, root)
    assert state["inputs"] == {"/etc/modprobe.d/vfio.conf": 1_700_002_000, "/etc/initramfs-tools/modules": 1_700_001_000}
    # the kernel without an image is skipped, the file in lib/modules is no kernel
    assert state["images"] == {"/boot/initrd.img-6.1.0-18-amd64": 1_700_000_000,
                               "/boot/initrd.img-6.1.0-20-amd64": 1_700_003_000}
    assert state["stale"] == ["/boot/initrd.img-6.1.0-18-amd64"]


def test_initramfs_written_in_the_same_second_as_the_input_is_fresh(tmp_path):
    root = _initramfs_tree(tmp_path, {"6.1.0-18-amd64": 1_700_000_000.1}, {"/etc/modprobe.d/vfio.conf": 1_700_000_000.9})
    state = host_facts.read_initramfs(["/etc/modprobe.d/vfio.conf"], PATTERN, root)
    assert state["images"] == {"/boot/initrd.img-6.1.0-18-amd64": 1_700_000_000}
    assert state["inputs"] == {"/etc/modprobe.d/vfio.conf": 1_700_000_000}
    assert state["stale"] == []


def test_initramfs_without_inputs_is_never_stale(tmp_path):
    root = _initramfs_tree(tmp_path, {"6.1.0-18-amd64": 1_000_000_000}, {})
    state = host_facts.read_initramfs(["/etc/modprobe.d/vfio.conf"], PATTERN, root)
    assert state == {"inputs": {}, "images": {"/boot/initrd.img-6.1.0-18-amd64": 1_000_000_000}, "stale": []}
    assert host_facts.read_initramfs([], PATTERN, root)["stale"] == []


def test_initramfs_without_lib_modules_has_no_images(tmp_path):
    root = _bare_root(tmp_path)
    _write(root, "etc/modprobe.d/vfio.conf", "x", 1_700_000_000)
    state = host_facts.read_initramfs(["/etc/modprobe.d/vfio.conf"], "/boot/initramfs-%s.img", root)
    assert state == {"inputs": {"/etc/modprobe.d/vfio.conf": 1_700_000_000}, "images": {}, "stale": []}


@pytest.mark.parametrize("pattern", ["/boot/initrd.img", "/boot/%s-%s", "/boot/initrd-%d", "/boot/%s-%d", "boot/initrd.img-%s",
                                     "initrd.img-%s", "/boot/%%s", "/boot/100%-%s", "", None, 5])
def test_bad_image_pattern_is_refused(tmp_path, pattern):
    root = _bare_root(tmp_path)
    with pytest.raises(GpuhostError) as err:
        host_facts.read_initramfs([], pattern, root)
    assert err.value.field == "initramfs_image_pattern" and err.value.fix
    with pytest.raises(GpuhostError) as err:
        host_facts.check_image_pattern(pattern, field="x")
    assert err.value.field == "x"


@pytest.mark.parametrize("pattern", ["/boot/initrd.img-%s", "/boot/initramfs-%s.img", "/boot/%s/initrd"])
def test_good_image_pattern_is_returned(pattern):
    assert host_facts.check_image_pattern(pattern) == pattern


def test_input_mtimes_are_whole_seconds_keyed_by_host_path(tmp_path):
    root = _bare_root(tmp_path)
    _write(root, "etc/a.conf", "a", 1_700_000_123.75)
    os.makedirs(os.path.join(root, "etc/dir.d"))
    os.utime(os.path.join(root, "etc/dir.d"), (1_700_000_200, 1_700_000_200))
    found = host_facts.input_mtimes(["/etc/a.conf", "/etc/dir.d", "/etc/none.conf"], root)
    assert found == {"/etc/a.conf": 1_700_000_123, "/etc/dir.d": 1_700_000_200}
    assert all(isinstance(value, int) and not isinstance(value, bool) for value in found.values())


# ---------------------------------------------------------------- units

def test_parse_unit_properties_keeps_only_the_decided_properties():
    text = ("Id=gpuhost-numa.service\nActiveState=active\nLoadState=loaded\nUnitFileState=enabled\n"
            "NeedDaemonReload=no\nActiveEnterTimestamp=@1700000000\nDescription=a=b\ngarbage\n ActiveState=failed\n")
    assert units.parse_unit_properties(text) == {
        "ActiveState": "active", "UnitFileState": "enabled", "NeedDaemonReload": "no", "ActiveEnterTimestamp": "@1700000000"}
    assert units.parse_unit_properties(None) == {}
    assert units.parse_unit_properties("ActiveEnterTimestamp=\n") == {"ActiveEnterTimestamp": ""}


ACTIVE = {"ActiveState": "active", "UnitFileState": "enabled", "NeedDaemonReload": "no",
          "ActiveEnterTimestamp": "@1700000000"}


def test_active_unit_started_before_an_input_changed_restarts():
    refresh = units.unit_refresh(ACTIVE, {"/etc/gpuhost/numa.conf": 1_700_000_001, "/etc/systemd/system/x.service": 1_699_999_000})
    assert refresh["active"] is True and refresh["enabled"] is True and refresh["daemon_reload"] is False
    assert refresh["restart"] is True
    assert refresh["reasons"] == ["changed since the unit started: /etc/gpuhost/numa.conf"]


def test_restart_reason_names_every_newer_input_sorted():
    refresh = units.unit_refresh(ACTIVE, {"/etc/b": 1_700_000_005, "/etc/a": 1_700_000_002, "/etc/c": 1_700_000_000})
    assert refresh["reasons"] == ["changed since the unit started: /etc/a, /etc/b"]


def test_input_written_in_the_second_the_unit_started_needs_no_restart():
    refresh = units.unit_refresh(ACTIVE, {"/etc/gpuhost/numa.conf": 1_700_000_000})
    assert refresh["restart"] is False and refresh["reasons"] == []


@pytest.mark.parametrize("state", ["inactive", "failed", "activating"])
def test_unit_that_is_not_active_is_not_restarted(state):
    refresh = units.unit_refresh(dict(ACTIVE, ActiveState=state), {"/etc/gpuhost/numa.conf": 1_800_000_000})
    assert refresh["active"] is False and refresh["restart"] is False and refresh["reasons"] == []


def test_active_unit_without_an_enter_timestamp_is_not_restarted():
    refresh = units.unit_refresh(dict(ACTIVE, ActiveEnterTimestamp=""), {"/etc/a": 1_800_000_000})
    assert refresh["restart"] is False


def test_unit_file_systemd_has_not_loaded_needs_daemon_reload():
    refresh = units.unit_refresh(dict(ACTIVE, NeedDaemonReload="yes", UnitFileState="static"), {})
    assert refresh == {"active": True, "enabled": False, "daemon_reload": True, "restart": False,
                       "reasons": ["systemd has not loaded the unit file on disk"]}


def test_unit_refresh_of_nothing_known():
    assert units.unit_refresh({}, {"/etc/a": 5}) == {"active": False, "enabled": False, "daemon_reload": False,
                                                     "restart": False, "reasons": []}


@pytest.mark.parametrize("stamp", ["Mon 2024-01-01 10:00:00 CET", "Mon 2024-01-01 10:00:00", "2024-01-01 10:00:00 UTC",
                                   "Mon 2024-13-01 10:00:00 UTC", "Fri 2024-02-30 10:00:00 UTC", "1700000000", "@",
                                   "@17000x", "@-5", "@ 1700000000"])
def test_timestamp_neither_in_utc_nor_in_unix_form_is_refused(stamp):
    with pytest.raises(GpuhostError) as err:
        units.unit_refresh(dict(ACTIVE, ActiveEnterTimestamp=stamp), {})
    assert err.value.field == "units" and "TZ=UTC" in err.value.fix


def test_timestamp_in_utc_is_read_to_the_second_as_the_unix_form_is():
    # systemd 247 (Debian 11) refuses --timestamp=unix; with TZ=UTC it prints this form.
    inputs = {"/etc/a": 1_700_000_050, "/etc/b": 1_700_000_051}
    for stamp in ("Tue 2023-11-14 22:14:10 UTC", "@1700000050"):      # 1700000050 both
        refresh = units.unit_refresh(dict(ACTIVE, ActiveEnterTimestamp=stamp), inputs)
        assert refresh["restart"] is True and refresh["reasons"] == ["changed since the unit started: /etc/b"]


def test_timestamp_with_a_superscript_digit_is_refused_not_a_traceback():
    with pytest.raises(GpuhostError) as err:
        units.unit_refresh(dict(ACTIVE, ActiveEnterTimestamp="@17\u00b2"), {})
    assert err.value.field == "units"


def test_unit_refresh_from_systemctl_text_and_files_on_disk(tmp_path):
    root = _bare_root(tmp_path)
    _write(root, "etc/gpuhost/numa.conf", "x", 1_700_000_100)
    _write(root, "etc/systemd/system/gpuhost-numa.service", "x", 1_600_000_000)
    properties = units.parse_unit_properties("ActiveState=active\nActiveEnterTimestamp=@1700000050\n")
    inputs = host_facts.input_mtimes(["/etc/systemd/system/gpuhost-numa.service", "/etc/gpuhost/numa.conf"], root)
    refresh = units.unit_refresh(properties, inputs)
    assert refresh["restart"] is True and refresh["reasons"] == ["changed since the unit started: /etc/gpuhost/numa.conf"]


# ---------------------------------------------------------------- vcpu_pins

def test_vcpu_pins_from_vcpu_pin_info_tuples():
    info = ((False, False, True, True, False, False),
            (True, False, False, False, False, True),
            (False,) * 6,
            (True,) * 6)
    assert host_facts.vcpu_pins(info) == {"0": "2-3", "1": "0,5", "2": "", "3": "0-5"}
    assert host_facts.vcpu_pins(None) == {} and host_facts.vcpu_pins(()) == {}


# ---------------------------------------------------------------- the module

def test_default_gather_returns_only_the_fact_and_changes_nothing(runbook_root, capsys, no_commands):
    before = _snapshot(runbook_root)
    code, result = _run(capsys, root=runbook_root)
    assert code == 0 and result["changed"] is False
    assert list(result["ansible_facts"]) == ["gpuhost_host"]
    facts = result["ansible_facts"]["gpuhost_host"]
    assert set(facts) == {"gathered", "root", "firmware", "cpu_power", "memory"}
    assert facts["gathered"] == ["firmware", "cpu_power", "memory"] and facts["root"] == runbook_root
    assert facts["firmware"] == host_facts.read_firmware(runbook_root)
    assert facts["memory"]["hugepages"]["0"]["2048"] == {"nr": 1024, "free": 1024, "surplus": 0}
    assert _snapshot(runbook_root) == before


def test_every_subset_on_a_recorded_tree_runs_no_command_and_changes_nothing(runbook_root, capsys, no_commands):
    _write(runbook_root, "etc/tuned/active_profile", "virtual-host\n")
    _write(runbook_root, "etc/gpuhost/numa.conf", "x", 1_700_000_000)
    os.makedirs(os.path.join(runbook_root, "lib/modules/6.1.0-18-amd64"))
    _write(runbook_root, "boot/initrd.img-6.1.0-18-amd64", "image", 1_600_000_000)
    before = _snapshot(runbook_root)
    code, result = _run(capsys, root=runbook_root, _ansible_check_mode=True, gather=list(host_facts.GATHER_SUBSETS),
                        devices=["65:00.0"], kernel_log_pattern="BAR", initramfs_inputs=["/etc/gpuhost/numa.conf"],
                        initramfs_image_pattern=PATTERN, domains=["tenant-a"],
                        units=[{"name": "gpuhost-numa.service", "inputs": ["/etc/gpuhost/numa.conf"]}])
    # No dpkg status in the tree: no packages fact; the iommu subset's answer is its own
    # fact; the platform's facts are this machine's own (setup's), whatever the root.
    assert code == 0 and result["changed"] is False
    assert sorted(result["ansible_facts"]) == sorted(["gpuhost_host", "gpuhost_iommu", "gpuhost_mechanisms"]
                                                     + list(host_facts.PLATFORM_FACTS))
    assert result["ansible_facts"]["os_family"] in ("Debian", "RedHat") and result["ansible_facts"]["pkg_mgr"]
    facts = result["ansible_facts"]["gpuhost_host"]
    assert facts["gathered"] == list(host_facts.GATHER_SUBSETS)
    assert facts["packages"]["read"] is False
    assert facts["kernel_log"] == {"source": host_facts_module.NOT_LIVE, "matches": []}
    assert facts["units"] == {"gpuhost-numa.service": {"read": False, "active": False, "enabled": False,
                                                       "daemon_reload": False, "restart": False, "reasons": []}}
    assert facts["libvirt"] == {"read": False, "error": host_facts_module.LIBVIRT_NOT_LIVE, "running": [], "vcpu_pins": {}}
    assert facts["tuned"] == {"active_profile": "virtual-host"}
    assert facts["devices"]["0000:65:00.0"]["driver"] == "nvidia"
    assert facts["initramfs"]["stale"] == ["/boot/initrd.img-6.1.0-18-amd64"]
    assert facts["pci"] == host_facts.read_pci(runbook_root) and facts["pci"]["0000:65:00.0"]["vendor"] == "10de"
    assert facts["platform"] == {"published": list(host_facts.PLATFORM_FACTS)}
    assert _snapshot(runbook_root) == before


def test_kernel_log_file_is_read_instead_of_the_journal(tmp_path, capsys, no_commands):
    log = _write(tmp_path, "dmesg.txt", "\n".join(KERNEL_LOG) + "\n")
    code, result = _run(capsys, root="/", gather=["kernel_log"], kernel_log_file=log,
                        kernel_log_pattern=r"BAR \d+: (no space|failed)")
    assert code == 0
    assert result["ansible_facts"]["gpuhost_host"]["kernel_log"] == {"source": log, "matches": KERNEL_LOG[:2]}


def test_kernel_log_file_with_invalid_utf8_is_still_searched(tmp_path, capsys, no_commands):
    log = str(tmp_path / "dmesg.bin")
    with open(log, "wb") as handle:
        handle.write(b"garbage \xff\xfe\nBAR 1: no space\n")
    code, result = _run(capsys, root="/", gather=["kernel_log"], kernel_log_file=log, kernel_log_pattern="no space")
    assert code == 0 and result["ansible_facts"]["gpuhost_host"]["kernel_log"]["matches"] == ["BAR 1: no space"]


def test_unreadable_kernel_log_file_fails_naming_the_field(tmp_path, capsys, no_commands):
    code, result = _run(capsys, root="/", gather=["kernel_log"], kernel_log_file=str(tmp_path / "nope"),
                        kernel_log_pattern="BAR")
    assert code == 1 and result["failed"] and result["field"] == "kernel_log_file" and "Fix:" in result["msg"]


def test_kernel_log_without_pattern_fails_naming_the_field(runbook_root, capsys, no_commands):
    code, result = _run(capsys, root=runbook_root, gather=["firmware", "kernel_log"])
    assert code == 1 and result["failed"] and result["field"] == "kernel_log_pattern" and "Fix:" in result["msg"]
    # refused before any subset was read, and a failed run returns no partial fact
    assert result["ansible_facts"] == {}


def test_kernel_log_bad_pattern_fails_naming_the_field(tmp_path, capsys, no_commands):
    log = _write(tmp_path, "dmesg.txt", "BAR 1\n")
    code, result = _run(capsys, root="/", gather=["kernel_log"], kernel_log_file=log, kernel_log_pattern="BAR (")
    assert code == 1 and result["field"] == "kernel_log_pattern" and "not a regular expression" in result["msg"]


@pytest.mark.parametrize("args, field", [
    ({"units": [{"name": "-x.service"}]}, "units[0].name"),
    ({"units": [{"name": "a/b.service"}]}, "units[0].name"),
    ({"units": [{"name": "x"}]}, "units[0].name"),
    ({"units": [{"name": "x.service\n"}]}, "units[0].name"),
    ({"units": [{"name": "ok.service"}, {"name": "--now.service"}]}, "units[1].name"),
    ({"units": [{"name": "ok.service", "inputs": ["etc/x.conf"]}]}, "units[0].inputs[0]"),
    ({"domains": ["../etc"]}, "domains[0]"),
    ({"domains": ["-c"]}, "domains[0]"),
    ({"domains": ["a/b"]}, "domains[0]"),
    ({"domains": [""]}, "domains[0]"),
    ({"gather": ["devices"], "devices": ["../../etc"]}, "devices[0]"),
    ({"gather": ["initramfs"]}, "initramfs_image_pattern"),
    ({"gather": ["initramfs"], "initramfs_image_pattern": "/boot/initrd-%d"}, "initramfs_image_pattern"),
    ({"gather": ["initramfs"], "initramfs_image_pattern": PATTERN, "initramfs_inputs": ["etc/x"]}, "initramfs_inputs[0]"),
])
def test_bad_option_fails_naming_the_field(runbook_root, capsys, no_commands, args, field):
    before = _snapshot(runbook_root)
    code, result = _run(capsys, root=runbook_root, **args)
    assert code == 1 and result["failed"] and result["changed"] is False
    assert result["field"] == field and "Fix:" in result["msg"]
    assert _snapshot(runbook_root) == before


@pytest.mark.parametrize("root", ["/does/not/exist", ""])
def test_bad_root_fails_naming_root(capsys, no_commands, root):
    code, result = _run(capsys, root=root)
    assert code == 1 and result["field"] == "root"


def test_units_on_the_live_root_with_systemctl_mocked(tmp_path, capsys, monkeypatch):
    changed = _write(tmp_path, "numa.conf", "x", 1_700_000_100)
    unit_file = _write(tmp_path, "gpuhost-numa.service", "x", 1_600_000_000)
    calls, environs = [], []

    def run_command(self, argv, *args, **kwargs):
        calls.append(list(argv))
        environs.append(kwargs.get("environ_update"))
        # what systemd 247 prints with TZ=UTC (1700000050 seconds)
        return 0, ("ActiveState=active\nUnitFileState=enabled\nNeedDaemonReload=no\n"
                   "ActiveEnterTimestamp=Tue 2023-11-14 22:14:10 UTC\nId=gpuhost-numa.service\n"), ""

    monkeypatch.setattr(commands, "run_to_the_end", run_command)
    code, result = _run(capsys, root="/", gather=["units"],
                        units=[{"name": "gpuhost-numa.service", "inputs": [unit_file, changed, str(tmp_path / "gone")]}])
    assert code == 0
    assert len(calls) == 1
    argv = calls[0]
    assert argv[:2] == ["systemctl", "show"] and "--timestamp=unix" not in argv
    assert environs == [{"TZ": "UTC", "LC_ALL": "C"}]
    assert argv[-2:] == ["--", "gpuhost-numa.service"]
    assert argv.index("--") < argv.index("gpuhost-numa.service")
    assert argv[argv.index("-p") + 1] == ",".join(units.UNIT_PROPERTIES)
    assert result["ansible_facts"]["gpuhost_host"]["units"] == {"gpuhost-numa.service": {
        "read": True, "active": True, "enabled": True, "daemon_reload": False, "restart": True,
        "reasons": ["changed since the unit started: %s" % changed]}}


def test_units_systemctl_failure_fails_naming_gather_with_systemctl_mocked(capsys, monkeypatch):
    monkeypatch.setattr(commands, "run_to_the_end", lambda self, argv, *a, **kw: (1, "", "Failed to connect to bus"))
    code, result = _run(capsys, root="/", gather=["units"], units=[{"name": "gpuhost-numa.service"}])
    assert code == 1 and result["field"] == "gather"
    assert "Failed to connect to bus" in result["msg"] and "-- gpuhost-numa.service" in result["msg"]


def test_units_with_a_timestamp_not_in_utc_fail_with_systemctl_mocked(capsys, monkeypatch):
    # a systemctl that ignored TZ=UTC: its local time cannot be compared with file times
    monkeypatch.setattr(commands, "run_to_the_end", lambda self, argv, *a, **kw: (
        0, "ActiveState=active\nActiveEnterTimestamp=Mon 2024-01-01 10:00:00 CET\n", ""))
    code, result = _run(capsys, root="/", gather=["units"], units=[{"name": "gpuhost-numa.service"}])
    assert code == 1 and result["field"] == "units" and "TZ=UTC" in result["msg"]


def test_kernel_log_on_the_live_root_with_journalctl_mocked(capsys, monkeypatch):
    calls = []

    def run_command(self, argv, *args, **kwargs):
        calls.append(list(argv))
        return 0, "\n".join(KERNEL_LOG) + "\n", ""

    monkeypatch.setattr(commands, "run_to_the_end", run_command)
    code, result = _run(capsys, root="/", gather=["kernel_log"], kernel_log_pattern="DMAR")
    assert code == 0 and calls == [host_facts_module.JOURNAL_KERNEL_LOG_ARGV]
    assert result["ansible_facts"]["gpuhost_host"]["kernel_log"] == {"source": "journal", "matches": [KERNEL_LOG[2]]}


class _NoDomain(libvirt.libvirtError):
    def get_error_code(self):
        return libvirt.VIR_ERR_NO_DOMAIN


class _FakeDomain:
    def __init__(self, name, pins=()):
        self._name = name
        self.pins = pins

    def name(self):
        return self._name

    def vcpuPinInfo(self, flags):
        assert flags == 0
        return self.pins


class _FakeConnection:
    def __init__(self, domains, fail=False):
        self.domains = {dom.name(): dom for dom in domains}
        self.fail = fail
        self.closed = False

    def listAllDomains(self, flags):
        if self.fail:
            raise libvirt.libvirtError("internal error: connection lost")
        assert flags == libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE
        return list(self.domains.values())

    def lookupByName(self, name):
        if name not in self.domains:
            raise _NoDomain("Domain not found: no domain with matching name '%s'" % name)
        return self.domains[name]

    def close(self):
        self.closed = True


def test_libvirt_on_the_live_root_with_libvirt_mocked(capsys, monkeypatch, no_commands):
    conn = _FakeConnection([_FakeDomain("tenant-b", ((True, False),)),
                            _FakeDomain("tenant-a", ((False, False, True, False), (False, False, False, True)))])
    monkeypatch.setattr(host_facts_module, "open_connection", lambda uri: conn)
    code, result = _run(capsys, root="/", gather=["libvirt"], domains=["tenant-a", "ghost"])
    assert code == 0 and conn.closed
    assert result["ansible_facts"]["gpuhost_host"]["libvirt"] == {
        "read": True, "error": None, "running": ["tenant-a", "tenant-b"],
        "vcpu_pins": {"tenant-a": {"0": "2", "1": "3"}, "ghost": None}}


def test_libvirt_error_is_reported_not_failed_with_libvirt_mocked(capsys, monkeypatch, no_commands):
    conn = _FakeConnection([], fail=True)
    monkeypatch.setattr(host_facts_module, "open_connection", lambda uri: conn)
    code, result = _run(capsys, root="/", gather=["libvirt"], libvirt_uri="qemu:///session")
    answer = result["ansible_facts"]["gpuhost_host"]["libvirt"]
    assert code == 0 and conn.closed and answer["read"] is False
    assert answer["error"] == "libvirt at qemu:///session: internal error: connection lost"


def test_libvirt_unreachable_is_reported_not_failed_with_libvirt_mocked(capsys, monkeypatch, no_commands):
    def open_connection(uri):
        raise GpuhostError("cannot connect to libvirt at %s: no socket" % uri, field="uri", fix="start the daemon")

    monkeypatch.setattr(host_facts_module, "open_connection", open_connection)
    code, result = _run(capsys, root="/", gather=["libvirt"])
    assert code == 0
    assert result["ansible_facts"]["gpuhost_host"]["libvirt"] == {
        "read": False, "error": "cannot connect to libvirt at qemu:///system: no socket (start the daemon)",
        "running": [], "vcpu_pins": {}}


def test_initramfs_input_cannot_leave_the_recorded_tree(tmp_path, capsys, no_commands):
    root = _initramfs_tree(tmp_path, {"6.1.0-18-amd64": 1_600_000_000}, {})
    _write(tmp_path, "outside.conf", "not in the tree", 1_700_000_000)
    code, result = _run(capsys, root=root, gather=["initramfs"], initramfs_image_pattern=PATTERN,
                        initramfs_inputs=["/../outside.conf"])
    if code == 1:
        assert result["field"] == "initramfs_inputs[0]"
    else:
        assert result["ansible_facts"]["gpuhost_host"]["initramfs"] == {
            "inputs": {}, "images": {"/boot/initrd.img-6.1.0-18-amd64": 1_600_000_000}, "stale": []}


def test_memory_gives_the_kernel_release_that_decides_the_per_node_hugepages_form(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "proc/sys/kernel"))
    with open(os.path.join(root, "proc/sys/kernel/osrelease"), "w") as handle:
        handle.write("5.14.0-427.13.1.el9_4.x86_64\n")
    assert host_facts.read_memory(root)["kernel_release"] == "5.14.0-427.13.1.el9_4.x86_64"
    os.remove(os.path.join(root, "proc/sys/kernel/osrelease"))
    assert host_facts.read_memory(root)["kernel_release"] is None


# ---------------------------------------------------------------- mechanisms


def test_mechanisms_subset_publishes_the_detector_with_the_given_family(tmp_path, capsys, no_commands):
    # A recorded Debian tree with dracut installed: the fact says dracut, detected.
    os.makedirs(os.path.join(str(tmp_path), "sys"))
    for path in ("usr/bin/dracut", "usr/sbin/update-grub", "etc/default/grub"):
        _write(str(tmp_path), path, "")
    os.makedirs(os.path.join(str(tmp_path), "etc/dracut.conf.d"))
    code, result = _run(capsys, root=str(tmp_path), gather=["mechanisms"], os_family="Debian")
    assert code == 0 and result["changed"] is False
    found = result["ansible_facts"]["gpuhost_mechanisms"]
    assert result["ansible_facts"]["gpuhost_host"]["mechanisms"] == {
        "boot_loader": "grub", "initramfs": "dracut", "libvirt": "monolithic"}
    assert found["initramfs"]["source"] == "detected"
    assert found["initramfs"]["image_pattern"] == "/boot/initrd.img-%s"
    assert found["libvirt"]["source"] == "os_default (none found)"
    assert found["libvirt"]["start_units"] == ["libvirtd.service"]
