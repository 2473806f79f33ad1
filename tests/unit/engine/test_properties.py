# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property-based tests of the parsers and validators, with hypothesis.

Two kinds of property: round trips (what the collection writes, it reads back the
same), and "an answer, never a traceback" (any text at all either parses into a
bounded value or raises GpuhostError, never another exception). The example counts are
modest and the deadline off, so the suite stays fast on a loaded machine.
"""

import os
import shutil
import string

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import cpuset, validators
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import topology
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host.pci import PciAddress

from support import fixturegen

# database=None: no .hypothesis/ folder in the checkout; a failure prints its example.
QUICK = settings(max_examples=60, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow])

cpu_ids = st.integers(min_value=0, max_value=cpuset.MAX_CPUS - 1)
cpu_sets = st.sets(cpu_ids, max_size=64)
# Text close to the notations (digits, separators, the hex digits and a few strangers)
# finds more edge cases than arbitrary unicode, which is tried as well.
near_cpulist = st.text(alphabet="0123456789-,:/ \nabcx\x00", max_size=30)
any_text = st.one_of(st.text(max_size=40), near_cpulist)


# -- CPU lists and masks -----------------------------------------------------------------------

@QUICK
@given(cpu_sets)
def test_a_cpulist_reads_back_what_format_cpulist_wrote(cpus):
    assert cpuset.parse_cpulist(cpuset.format_cpulist(cpus)) == tuple(sorted(cpus))


@QUICK
@given(cpu_sets, st.one_of(st.none(), st.integers(min_value=1, max_value=cpuset.MAX_CPUS)))
def test_a_cpumask_reads_back_what_format_cpumask_wrote(cpus, nr_cpus):
    text = cpuset.format_cpumask(cpus, nr_cpus=nr_cpus)
    assert all(len(word) == 8 for word in text.split(","))
    assert cpuset.parse_cpumask(text) == tuple(sorted(cpus))


@QUICK
@given(cpu_ids, cpu_ids, st.integers(min_value=1, max_value=16), st.integers(min_value=0, max_value=16))
def test_a_stride_takes_used_of_each_group(first, last, used, extra):
    assume(first <= last)
    group = used + extra
    expected = tuple(cpu for cpu in range(first, last + 1) if (cpu - first) % group < used)
    assert cpuset.parse_cpulist("%d-%d:%d/%d" % (first, last, used, group)) == expected


@QUICK
@given(any_text)
def test_any_cpulist_text_is_a_bounded_answer_or_a_refusal(text):
    try:
        cpus = cpuset.parse_cpulist(text, field="cpus")
    except GpuhostError as err:
        assert err.field == "cpus" and err.fix
        return
    assert all(0 <= cpu < cpuset.MAX_CPUS for cpu in cpus) and list(cpus) == sorted(set(cpus))


@QUICK
@given(st.one_of(st.text(alphabet="0123456789abcdefABCDEF,x \n", max_size=2100), st.text(max_size=30)))
def test_any_cpumask_text_is_a_bounded_answer_or_a_refusal(text):
    try:
        cpus = cpuset.parse_cpumask(text, field="mask")
    except GpuhostError as err:
        assert err.field == "mask"
        return
    assert all(0 <= cpu < cpuset.MAX_CPUS for cpu in cpus)


# -- /proc/interrupts ---------------------------------------------------------------------------

@QUICK
@given(st.lists(cpu_ids, min_size=1, max_size=12, unique=True),
       st.lists(st.tuples(st.integers(min_value=0, max_value=4095),
                          st.lists(st.integers(min_value=0, max_value=2 ** 40), min_size=12, max_size=12),
                          st.sampled_from(["IR-PCI-MSI 1048576-edge eno1", "IO-APIC 2-edge timer",
                                           "PCI-MSIX-0000:41:00.0 0-edge mlx5_comp0", ""])),
                max_size=8, unique_by=lambda row: row[0]))
def test_interrupts_rows_pair_each_count_with_its_cpu(cpus, rows):
    columns = sorted(cpus)
    lines = ["  " + " ".join("CPU%d" % cpu for cpu in columns)]
    for number, counts, rest in rows:
        lines.append("%4d: %s  %s" % (number, " ".join(str(c) for c in counts[:len(columns)]), rest))
    irqs = topology.parse_proc_interrupts("\n".join(lines) + "\n")
    assert set(irqs) == {str(number) for number, _counts, _rest in rows}
    for number, counts, rest in rows:
        irq = irqs[str(number)]
        assert irq.number == number and irq.cpus == tuple(columns)
        assert irq.counts == tuple(counts[:len(columns)])
        assert (irq.name or "") == (rest.split()[-1] if rest else "")


@QUICK
@given(st.text(max_size=60), st.text(max_size=60))
def test_any_interrupts_text_is_parsed_or_refused_naming_the_file(header, body):
    try:
        irqs = topology.parse_proc_interrupts(header + "\n" + body, field="root")
    except GpuhostError as err:
        assert err.field == "root" and "/proc/interrupts" in err.message
        return
    for irq in irqs.values():
        assert len(irq.counts) == len(irq.cpus)


# -- PCI addresses ----------------------------------------------------------------------------------

addresses = st.builds(PciAddress, st.integers(min_value=0, max_value=0xFFFFF),
                      st.integers(min_value=0, max_value=0xFF), st.integers(min_value=0, max_value=0x1F),
                      st.integers(min_value=0, max_value=7))


@QUICK
@given(addresses)
def test_a_pci_address_reads_back_in_every_spelling(address):
    text = str(address)
    assert PciAddress.parse(text) == address
    assert PciAddress.parse(text.upper()) == address
    if address.domain == 0:
        assert PciAddress.parse(text[5:]) == address


@QUICK
@given(st.one_of(st.text(max_size=20), st.text(alphabet="0123456789abcdef:.", max_size=16)))
def test_any_pci_address_text_is_an_address_or_a_refusal(text):
    try:
        address = PciAddress.parse(text, field="devices")
    except GpuhostError as err:
        assert err.field == "devices" and "lspci -D" in err.fix
        return
    assert address.slot <= 0x1F and address.function <= 7 and PciAddress.parse(str(address)) == address


# -- names and the other validators ---------------------------------------------------------------

@QUICK
@given(st.one_of(st.text(max_size=20),
                 st.text(alphabet=string.ascii_letters + string.digits + "-_.:/ \n", max_size=18)))
def test_an_interface_name_is_accepted_exactly_when_the_kernel_would_take_it(name):
    kernel_takes = (0 < len(name.encode("utf-8", "surrogatepass")) < 16 and name not in (".", "..")
                    and not any(c in "/:" or c.isspace() for c in name))
    try:
        accepted = validators.interface_name(name, field="pf")
    except GpuhostError as err:
        assert err.field == "pf" and "ip -br link" in err.fix
        return
    assert kernel_takes and accepted == name and not name.startswith("-")


@QUICK
@given(st.one_of(st.text(max_size=20), st.text(alphabet="0123456789abcdefABCDEF:\n", max_size=18)))
def test_a_mac_is_six_lower_case_octets_or_a_refusal(text):
    try:
        mac = validators.validate_mac(text, field="mac")
    except GpuhostError as err:
        assert err.field == "mac"
        return
    assert validators.MAC_RE.fullmatch(mac) and mac == text.lower() and not int(mac[:2], 16) & 1


@QUICK
@given(st.one_of(st.text(max_size=40), st.builds(
    lambda host, port, path: "http://%s:%s%s" % (host, port, path),
    st.text(alphabet=string.ascii_lowercase + string.digits + ".-_[]:", max_size=12),
    st.text(alphabet=string.digits + "+-", max_size=7), st.text(max_size=8))))
def test_a_url_is_scheme_host_and_a_valid_port_or_a_refusal(text):
    try:
        scheme, host, port, path = validators.url(text, field="url")
    except GpuhostError as err:
        assert err.field == "url" and "http://127.0.0.1:8000" in err.fix
        return
    assert scheme in ("http", "https") and host and 1 <= port <= 65535
    assert not any(c.isspace() for c in text)


@QUICK
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10), st.none(),
                 st.booleans(), st.integers()))
def test_a_timeout_is_finite_and_positive_or_a_refusal(value):
    try:
        number = validators.finite_number(value, "timeout_s", maximum=86400)
    except GpuhostError as err:
        assert err.field == "timeout_s"
        return
    assert 0 < number <= 86400


@QUICK
@given(st.one_of(st.text(max_size=12), st.text(alphabet="0123456789.kKMGTPE-", max_size=12)))
def test_a_disk_size_can_never_be_read_as_an_option(text):
    try:
        size = validators.qemu_img_size(text, field="disk.size")
    except GpuhostError:
        return
    assert size == text and not size.startswith("-") and size[0].isdigit()


# -- odd sysfs values: an answer, never a traceback ----------------------------------------------

GPU_DIR = "sys/bus/pci/devices/0000:65:00.0"
ODD_GPU_ATTRIBUTES = ("class", "vendor", "numa_node", "local_cpulist", "local_cpus",
                      "driver_override", "resource", "reset_method")
ODD_FILES = [GPU_DIR + "/" + name for name in ODD_GPU_ATTRIBUTES] + [
    "sys/devices/system/node/node0/distance", "sys/devices/system/node/node0/cpulist",
    "sys/devices/system/node/node0/meminfo", "sys/devices/system/cpu/online",
    "sys/devices/system/cpu/cpu1/topology/thread_siblings_list", "proc/cmdline",
    "sys/devices/system/node/node0/hugepages/hugepages-1048576kB/free_hugepages"]


@pytest.fixture(scope="module", name="runbook_root")
def _runbook_root(tmp_path_factory):
    return fixturegen.build_runbook_host(str(tmp_path_factory.mktemp("odd-sysfs")))


ODD_BYTES = st.one_of(st.binary(max_size=24), st.sampled_from(
    [b"\x00", b"1\x00", b"a b", b"-1", b"0x", b"99999999999999999999", b"(null)"]))


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(ODD_FILES), ODD_BYTES)
def test_odd_bytes_in_a_sysfs_attribute_get_an_answer(runbook_root, rel, content):
    path = os.path.join(runbook_root, rel)
    backup = path + ".orig"
    shutil.copyfile(path, backup)
    try:
        with open(path, "wb") as handle:
            handle.write(content)
        try:
            topology.read_host_topology(runbook_root, with_irqs=False)
        except GpuhostError as err:
            assert err.fix
    finally:
        os.replace(backup, path)
