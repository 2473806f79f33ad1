# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kernel_cmdline's from_plan: the arguments a host plan needs (the IOMMU by the CPU's
vendor, the 1G hugepages by the running kernel's release, the isolation, the C-state
limit), and what the running kernel reserved of the plan's 1G pages. The plan is the
planner's own output for the synthetic runbook host; the host is a temporary root tree
with the kernel's files; update-grub is mocked, and the tests that run it say so."""

import pytest

from support.fixturegen import build_runbook_host
from support.sysfs_sim import run_module, snapshot
from support.helpers import read_under as _read, write_under as _write

from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import kernel_cmdline as core
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.topology import read_host_topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import plan_placement
from ansible_collections.gpuhost.kvm.plugins.modules import kernel_cmdline

TENANT = {"name": "tenant-a100", "gpus": ["0000:65:00.0"], "vcpus": 30, "memory_gib": 64,
          "hugepage_size": "1G", "nic_vf": True, "iothreads": 2}
SMALL = {"name": "tenant-b", "gpus": 0, "vcpus": 4, "memory_gib": 8, "hugepage_size": "2M"}
# Two nodes' 1G needs, as the planner writes them (string keys, as JSON keeps them).
TWO_NODES_1G = {"hugepages": {"1": {"1048576": 16}, "0": {"1048576": 64}, "2": {"2048": 512}}}
GIGANTIC_POOL = "sys/devices/system/node/node%d/hugepages/hugepages-1048576kB/%s"
DROPIN = "/etc/default/grub.d/90-gpuhost.cfg"
GRUB_CFG = "/boot/grub/grub.cfg"


@pytest.fixture(scope="module")
def runbook_plan(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("runbook"))
    build_runbook_host(root)
    return plan_placement(read_host_topology(root, with_irqs=False), [TENANT, SMALL])


def _host(root, release="6.1.0-18-amd64", vendor="GenuineIntel", pools=None,
          running="root=/dev/vda1 ro quiet"):
    """A host root: the running kernel's release and command line, the CPU's vendor, each
    node's 1G pool ({node: pages}), and a grub.cfg without our arguments."""
    if release is not None:
        _write(root, "/proc/sys/kernel/osrelease", release + "\n")
    _write(root, "/proc/cpuinfo", "processor\t: 0\nvendor_id\t: %s\nflags\t\t: fpu pdpe1gb\n" % vendor)
    _write(root, "/proc/cmdline", running + "\n")
    _write(root, "/proc/meminfo", "MemTotal:       263000000 kB\n")
    for node, pages in (pools or {0: 0, 1: 0}).items():
        for counter in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
            _write(root, GIGANTIC_POOL % (node, counter), "%d\n" % (0 if counter == "surplus_hugepages" else pages))
    _write(root, GRUB_CFG, "menuentry 'Debian' {\n\tlinux\t/boot/vmlinuz root=/dev/vda1 ro quiet\n}\n")


class UpdateGrub:
    """Plays update-grub: regenerates grub.cfg from the drop-in's arguments."""

    def __init__(self, root):
        self.root, self.calls = str(root), []

    def __call__(self, argv):
        self.calls.append(list(argv))
        args = _read(self.root, DROPIN).split("${GRUB_CMDLINE_LINUX} ", 1)[1].rstrip('"\n')
        _write(self.root, GRUB_CFG, "menuentry 'Debian' {\n\tlinux\t/boot/vmlinuz root=/dev/vda1 ro %s\n}\n" % args)
        return 0, "", ""


def _run(root, from_plan, check_mode=False, commands=None, **args):
    params = dict({"from_plan": from_plan, "root": str(root), "method": "grub"}, **args)
    return run_module(kernel_cmdline, "KernelCmdline", params, HostWriter(str(root)),
                      check_mode=check_mode, run_command=commands)


# -- the arguments, pure ----------------------------------------------------------------

def test_kernel_args_by_vendor_with_hugepages_and_isolation(runbook_plan):
    plan = runbook_plan
    intel = core.plan_kernel_args(plan, "GenuineIntel")
    assert intel == ["intel_iommu=on", "iommu=pt", "kvm.ignore_msrs=1", "hugepagesz=1G",
                     "hugepages=64"]
    amd = core.plan_kernel_args(plan, "AuthenticAMD", iommu_pt=False, ignore_msrs=False)
    assert amd[0] == "amd_iommu=on" and "iommu=pt" not in amd
    isolated = core.plan_kernel_args(plan, "GenuineIntel", isolate=True)
    assert "nohz_full=1-15,17-31,33-47,49-63" in isolated
    assert "isolcpus=managed_irq,domain,1-15,17-31,33-47,49-63" in isolated
    assert "rcu_nocbs=1-15,17-31,33-47,49-63" in isolated


def test_the_cstate_limit_comes_last_of_the_plans_arguments():
    # Only 1G pages in the plan: the runbook's plan A, whose default size is 1G too.
    plan = {"hugepages": {"0": {"1048576": 64}}}
    assert core.plan_kernel_args(plan, "GenuineIntel", max_cstate=1) == [
        "intel_iommu=on", "iommu=pt", "kvm.ignore_msrs=1", "default_hugepagesz=1G",
        "hugepagesz=1G", "hugepages=64", "intel_idle.max_cstate=1", "processor.max_cstate=1"]
    assert not [a for a in core.plan_kernel_args(plan, "AuthenticAMD") if "cstate" in a]


def test_1g_pages_are_reserved_per_node_at_boot_on_a_kernel_that_reads_the_node_form(runbook_plan):
    plan = runbook_plan   # the planner's: 64 1G pages on node 0, 2M pages on node 1
    args = core.plan_kernel_args(plan, "GenuineIntel", kernel_release="6.8.0-45-generic")
    # 2M pages are in the plan too: the default size stays 2M (vm.nr_hugepages counts them).
    assert args[3:] == ["hugepagesz=1G", "hugepages=0:64"]
    assert core.gigantic_fallback(plan, "6.8.0-45-generic") == ""
    assert core.gigantic_boot_args(TWO_NODES_1G, "5.16.0") == ["hugepagesz=1G", "hugepages=0:64,1:16"]
    only_1g = {"hugepages": {"0": {"1048576": 4}, "1": {"1048576": 2, "2048": 0}}}
    assert core.gigantic_boot_args(only_1g, "6.1.0-18-amd64") == [
        "default_hugepagesz=1G", "hugepagesz=1G", "hugepages=0:4,1:2"]


@pytest.mark.parametrize("release", ["5.15.0-105-generic", "4.18.0-553.el8_10.x86_64",
                                     "5.14.0-427.13.1.el9_4.x86_64", None, "", "garbage\n6.8"])
def test_an_older_or_unknown_kernel_gets_the_host_wide_count_and_says_why(release):
    assert core.gigantic_boot_args(TWO_NODES_1G, release) == ["hugepagesz=1G", "hugepages=80"]
    why = core.gigantic_fallback(TWO_NODES_1G, release)
    assert "fallback" in why and "fragmented" in why and "section 13" in why
    assert "hugepages=80" in why and "5.16" in why
    if release and release.startswith(("4.", "5.1")):
        assert release in why
    elif not release:
        assert "release is unknown" in why


def test_the_boot_time_check_names_node_wanted_and_got():
    memory = {"kernel_release": "6.8.0",
              "hugepages": {"0": {"1048576": {"nr": 64, "free": 64, "surplus": 0}},
                            "1": {"1048576": {"nr": 9, "free": 9, "surplus": 0}},
                            "2": {"2048": {"nr": 512, "free": 512, "surplus": 0}}}}
    assert core.gigantic_shortfalls(TWO_NODES_1G, memory) == [
        "node 1: wanted 16 pages of 1G reserved at boot, got 9"]
    # Without the node form the kernel spread them: only the total can be held to the plan.
    assert core.gigantic_shortfalls(TWO_NODES_1G, dict(memory, kernel_release="5.15.0")) == [
        "all nodes: wanted 80 pages of 1G reserved at boot, got 73"]
    memory["hugepages"]["1"]["1048576"]["nr"] = 16
    assert core.gigantic_shortfalls(TWO_NODES_1G, memory) == []
    assert core.gigantic_shortfalls(TWO_NODES_1G, {"kernel_release": "6.8.0"}) == [
        "node 0: wanted 64 pages of 1G reserved at boot, got 0",
        "node 1: wanted 16 pages of 1G reserved at boot, got 0"]


@pytest.mark.parametrize("hugepages, words", [
    ({"0\n1": {"1048576": 4}}, "is not a NUMA node number"),
    ({"-1": {"1048576": 4}}, "is not a NUMA node number"),
    ({"4096": {"1048576": 4}}, "at most 1023"),
    ({"0": {"1048576": float("nan")}}, "is not a whole number"),
    ({"0": {"1048576": True}}, "is not a whole number"),
    ({"0": {"1048576": 10 ** 12}}, "at most 65536"),
    ({"0": {"1048576": "4,1:9"}}, "is not a whole number"),
    ({"0": {"1048576": -3}}, "at least 0"),
    ({"0": [4]}, "is not a mapping of page sizes to counts"),
    ([4], "is not a mapping of NUMA nodes to page counts"),
])
def test_hostile_node_numbers_and_counts_are_refused(hugepages, words):
    with pytest.raises(GpuhostError) as err:
        core.plan_kernel_args({"hugepages": hugepages}, "GenuineIntel", kernel_release="6.8.0")
    assert words in err.value.message
    assert err.value.field.startswith("plan.hugepages")


def test_the_per_node_value_compares_without_a_perpetual_change():
    wanted = ["intel_iommu=on", "hugepagesz=1G", "hugepages=0:64,1:16"]
    # What the module wrote, read back from /proc/cmdline: nothing missing.
    assert core.cmdline_missing("ro intel_iommu=on hugepagesz=1G hugepages=0:64,1:16", wanted) == []
    # The same reservation written by hand in another order is the same reservation.
    assert core.cmdline_missing("intel_iommu=on hugepagesz=1G hugepages=1:16,0:64", wanted) == []
    # The old host-wide count, another node's count, or the count under the 2M size differ.
    for line in ("intel_iommu=on hugepagesz=1G hugepages=80",
                 "intel_iommu=on hugepagesz=1G hugepages=0:64,1:8",
                 "intel_iommu=on hugepagesz=2M hugepages=0:64,1:16 hugepagesz=1G"):
        assert core.cmdline_missing(line, wanted) == ["hugepages=0:64,1:16"], line


def test_cmdline_missing_compares_values():
    wanted = ["intel_iommu=on", "iommu=pt", "hugepagesz=1G", "hugepages=64"]
    line = "BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt hugepagesz=2M hugepages=8 hugepagesz=1G"
    assert core.cmdline_missing(line, wanted) == ["hugepages=64"]
    assert core.cmdline_missing("intel_iommu=off", ["intel_iommu=on"]) == ["intel_iommu=on"]


# -- the module, on a host root ----------------------------------------------------------

def test_from_plan_writes_the_plans_arguments_then_the_extra_ones_with_mocked_update_grub(tmp_path):
    _host(tmp_path, release="6.8.0-45-generic")
    grub = UpdateGrub(tmp_path)
    worker = _run(tmp_path, {"plan": TWO_NODES_1G, "max_cstate": 1}, commands=grub, args=["quiet"])
    result = worker.result
    wanted = ["intel_iommu=on", "iommu=pt", "kvm.ignore_msrs=1", "hugepagesz=1G", "hugepages=0:64,1:16",
              "intel_idle.max_cstate=1", "processor.max_cstate=1", "quiet"]
    assert result["changed"] and result["args"] == wanted
    assert _read(tmp_path, DROPIN).endswith('"${GRUB_CMDLINE_LINUX} %s"\n' % " ".join(wanted))
    assert result["missing_active"] == wanted[:-1] and result["reboot_required"]
    assert result["gigantic_fallback"] == ""
    assert result["gigantic_shortfalls"] == ["node 0: wanted 64 pages of 1G reserved at boot, got 0",
                                             "node 1: wanted 16 pages of 1G reserved at boot, got 0"]
    assert len(grub.calls) == 1
    again = _run(tmp_path, {"plan": TWO_NODES_1G, "max_cstate": 1}, commands=grub, args=["quiet"]).result
    assert not again["changed"] and len(grub.calls) == 1


def test_after_the_reboot_check_mode_finds_nothing_missing_and_every_pool_full(tmp_path):
    """What the iommu role runs after its reboot: the new boot's command line and pools."""
    running = "root=/dev/vda1 ro intel_iommu=on iommu=pt kvm.ignore_msrs=1 hugepagesz=1G hugepages=0:64,1:16"
    _host(tmp_path, release="6.8.0-45-generic", pools={0: 64, 1: 16}, running=running)
    before = snapshot(str(tmp_path))
    result = _run(tmp_path, {"plan": TWO_NODES_1G}, check_mode=True).result
    assert result["missing_active"] == [] and result["gigantic_shortfalls"] == []
    assert not result["reboot_required"]
    assert snapshot(str(tmp_path)) == before


def test_a_short_pool_after_the_reboot_is_named_by_node(tmp_path):
    running = "root=/dev/vda1 intel_iommu=on iommu=pt kvm.ignore_msrs=1 hugepagesz=1G hugepages=0:64,1:16"
    _host(tmp_path, release="6.8.0-45-generic", pools={0: 64, 1: 9}, running=running)
    result = _run(tmp_path, {"plan": TWO_NODES_1G}, check_mode=True).result
    assert result["missing_active"] == []
    assert result["gigantic_shortfalls"] == ["node 1: wanted 16 pages of 1G reserved at boot, got 9"]


@pytest.mark.parametrize("release", ["5.10.0-28-amd64", None])
def test_an_old_or_unreadable_release_reserves_host_wide_and_says_why(tmp_path, release):
    _host(tmp_path, release=release)
    result = _run(tmp_path, {"plan": TWO_NODES_1G}, check_mode=True).result
    assert "hugepages=80" in result["args"] and "hugepagesz=1G" in result["args"]
    assert "predates the per-node form" in result["gigantic_fallback"] if release else (
        "release is unknown" in result["gigantic_fallback"])
    assert result["gigantic_shortfalls"] == ["all nodes: wanted 80 pages of 1G reserved at boot, got 0"]


def test_an_amd_host_gets_amd_iommu_and_the_isolation_of_every_non_housekeeping_cpu(tmp_path):
    _host(tmp_path, vendor="AuthenticAMD")
    plan = {"hugepages": {}, "online_cpus": "0-7", "housekeeping_cpus": "0,4"}
    result = _run(tmp_path, {"plan": plan, "isolate_tenant_cpus": True, "iommu_passthrough": False,
                             "ignore_msrs": False}, check_mode=True).result
    assert result["args"] == ["amd_iommu=on", "isolcpus=managed_irq,domain,1-3,5-7",
                              "nohz_full=1-3,5-7", "rcu_nocbs=1-3,5-7"]
    assert result["changed"]     # the drop-in would be written


@pytest.mark.parametrize("from_plan, field, words", [
    ({"plan": {"hugepages": {"0": {"1048576": 10 ** 12}}}}, "from_plan.plan.hugepages['0'][1048576]",
     "at most 65536"),
    ({"plan": {"hugepages": {"0\n1": {"1048576": 4}}}}, "from_plan.plan.hugepages['0\\n1']",
     "is not a NUMA node number"),
    ({"plan": {"hugepages": {}, "online_cpus": "0-7,banana", "housekeeping_cpus": "0"},
      "isolate_tenant_cpus": True}, "from_plan.plan.online_cpus", "banana"),
    ({"plan": {"hugepages": {}}, "max_cstate": 12}, "from_plan.max_cstate", "must be at most 9, got 12"),
])
def test_a_hostile_plan_or_limit_is_refused_before_anything_is_written(tmp_path, from_plan, field, words):
    _host(tmp_path)
    before = snapshot(str(tmp_path))
    grub = UpdateGrub(tmp_path)
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, from_plan, commands=grub)
    assert info.value.field == field and words in info.value.message
    assert snapshot(str(tmp_path)) == before and grub.calls == []


def test_an_extra_argument_that_replaces_the_boot_is_refused_naming_its_entry(tmp_path):
    _host(tmp_path)
    before = snapshot(str(tmp_path))
    with pytest.raises(GpuhostError) as info:
        _run(tmp_path, {"plan": TWO_NODES_1G}, args=["quiet", "init=/bin/sh"])
    assert info.value.field == "args[1]" and "refusing the kernel argument init=/bin/sh" in info.value.message
    assert snapshot(str(tmp_path)) == before


def test_without_args_or_a_plan_the_module_refuses(tmp_path):
    _host(tmp_path)
    with pytest.raises(SystemExit):
        run_module(kernel_cmdline, "KernelCmdline", {"root": str(tmp_path), "method": "grub"},
                   HostWriter(str(tmp_path)))
