# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Batch reads of host files (one grep instead of one slurp per file), run with the real
grep on the lab's recorded sysfs/procfs, and checked against the module-side readers."""

import os
import shutil
import subprocess

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils import file_batch, pci, plan_query
from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.sysfs import read_text

LAB_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures",
                        "lab-recording", "iommu-pt")


def _read(paths):
    """Run the argv as a role runs it; grep exits 2 when a file is missing."""
    proc = subprocess.run(file_batch.batch_read_argv(paths), capture_output=True, text=True,
                          check=False)
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert proc.stderr == ""                 # --no-messages: a missing file is silent
    # The command module hands the roles stdout without its last newline.
    return proc.stdout.rstrip("\n"), proc.returncode


@pytest.mark.skipif(shutil.which("grep") is None, reason="grep is not installed")
def test_numa_nodes_of_every_lab_pci_function_match_the_module_side_reader():
    functions = pci.read_pci_functions(LAB_ROOT)
    addresses = sorted(functions)
    paths = file_batch.pci_attribute_paths(addresses, "numa_node", LAB_ROOT)
    out, rc = _read(paths)
    assert rc == 0
    texts = file_batch.parse_batch_output(out, paths)
    assert sorted(texts) == sorted(paths)      # colons of the addresses did not confuse it
    for address, path in zip(addresses, paths):
        assert texts[path] == read_text(path)
        if functions[address].numa_node_source == "numa_node":
            assert int(texts[path]) == functions[address].numa_node


def test_a_missing_file_is_left_out_and_the_others_are_still_read():
    cmdline = os.path.join(LAB_ROOT, "proc", "cmdline")
    missing = file_batch.pci_attribute_paths(["0000:ff:1f.7"], "numa_node", LAB_ROOT)[0]
    out, rc = _read([missing, cmdline])
    assert rc == 2
    texts = file_batch.parse_batch_output(out, [missing, cmdline])
    assert texts == {cmdline: read_text(cmdline)}
    assert "intel_iommu=on" in texts[cmdline]
    assert file_batch.parse_batch_output(out, [missing, cmdline], missing="") == {
        cmdline: read_text(cmdline), missing: ""}


def test_a_multi_line_file_keeps_its_lines_and_its_colons():
    meminfo = os.path.join(LAB_ROOT, "proc", "meminfo")
    if not os.path.exists(meminfo):
        pytest.skip("the recording has no proc/meminfo")
    out, dummy = _read([meminfo])
    with open(meminfo, encoding="utf-8") as handle:
        assert file_batch.parse_batch_output(out, [meminfo])[meminfo] == handle.read().rstrip("\n")


def test_a_path_that_prefixes_another_is_told_apart_by_the_longest_match():
    paths = ["/t/a", "/t/a:b"]
    out = "/t/a:b:1\n/t/a:2"
    assert file_batch.parse_batch_output(out, paths) == {"/t/a:b": "1", "/t/a": "2"}


def test_a_nul_in_an_attribute_does_not_turn_the_file_into_binary_output(tmp_path):
    path = tmp_path / "attr"
    path.write_bytes(b"on\x00\n")
    out, rc = _read([str(path)])
    assert rc == 0
    assert file_batch.parse_batch_output(out, [str(path)]) == {str(path): "on\x00"}


def test_the_argv_drops_duplicate_paths_so_a_file_is_not_printed_twice():
    argv = file_batch.batch_read_argv(["/proc/cmdline", "/proc/meminfo", "/proc/cmdline"])
    assert argv[-3:] == ["--", "/proc/cmdline", "/proc/meminfo"]


@pytest.mark.parametrize("paths, field", [
    ("/proc/cmdline", "paths"),                        # a string, not a list
    (["proc/cmdline"], "paths"),                       # relative: no sysfs root
    ([None], "paths"),
])
def test_bad_path_lists_are_refused_naming_the_input(paths, field):
    with pytest.raises(GpuhostError) as error:
        file_batch.batch_read_argv(paths)
    assert error.value.field == field and error.value.fix


def test_bad_pci_attribute_inputs_are_refused():
    with pytest.raises(GpuhostError, match="list of PCI addresses"):
        file_batch.pci_attribute_paths("0000:65:00.0", "numa_node")
    with pytest.raises(GpuhostError, match="not a sysfs attribute name"):
        file_batch.pci_attribute_paths(["0000:65:00.0"], "../numa_node")


def test_output_that_is_not_text_is_refused():
    with pytest.raises(GpuhostError, match="stdout text"):
        file_batch.parse_batch_output({"stdout": ""}, ["/proc/cmdline"])


def test_hugepage_pools_of_the_lab_read_through_one_grep_match_sysfs():
    rows = [{"node": node, "size_kib": size, "pages": 0}
            for node in (0, 1) for size in (2048, 1048576)]
    paths = plan_query.pool_paths(rows, LAB_ROOT)
    assert paths[:2] == [
        os.path.join(LAB_ROOT, "sys/devices/system/node/node0/hugepages/hugepages-2048kB", name)
        for name in ("nr_hugepages", "free_hugepages")]
    out, dummy = _read(paths)
    pools = plan_query.pools_read(rows, file_batch.parse_batch_output(out, paths), LAB_ROOT)
    for row in rows:
        key = "%d/%d" % (row["node"], row["size_kib"])
        for counter, name in (("nr", "nr_hugepages"), ("free", "free_hugepages")):
            expected = read_text(plan_query.pool_path(row, LAB_ROOT, name))
            assert pools[key][counter] == int(expected or 0)


def test_a_pool_the_kernel_lacks_counts_as_no_pages_and_garbage_is_refused():
    row = {"node": 3, "size_kib": 2048, "pages": 8}
    assert plan_query.pools_read([row], {}, "/") == {"3/2048": {"nr": 0, "free": 0}}
    with pytest.raises(GpuhostError, match="not a page count"):
        plan_query.pools_read([row], {plan_query.pool_path(row, "/"): "many"}, "/")
    with pytest.raises(GpuhostError, match="not a hugepage pool counter"):
        plan_query.pool_path(row, "/", "surplus")
