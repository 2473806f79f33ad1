# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cpulist and CPU mask helpers, in the kernel's notations."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.cpuset import (
    format_cpulist, format_cpumask, parse_cpulist, parse_cpumask)
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError


@pytest.mark.parametrize("text, cpus", [
    ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
    ("", ()),
    ("  \n", ()),
    ("5", (5,)),
    ("0-15:1/4", (0, 4, 8, 12)),
    ("0-31:2/8", (0, 1, 8, 9, 16, 17, 24, 25)),
    ("2-9:3/4", (2, 3, 4, 6, 7, 8)),
    ("3,1,2,1", (1, 2, 3)),
])
def test_parse_cpulist_plain_and_stride_forms(text, cpus):
    assert parse_cpulist(text) == cpus


def test_parse_cpulist_accepts_ints_and_lists():
    assert parse_cpulist(7) == (7,)
    assert parse_cpulist(["0-1", 4, "6"]) == (0, 1, 4, 6)
    assert parse_cpulist(None) == ()


@pytest.mark.parametrize("text", ["a-b", "3-1", "0-7:0", "0-7:4/2", "1,,2", "-1", "0-"])
def test_parse_cpulist_refuses_what_the_kernel_refuses(text):
    with pytest.raises(GpuhostError) as err:
        parse_cpulist(text, field="housekeeping_cpus")
    assert err.value.field == "housekeeping_cpus"
    assert "Fix:" in err.value.message


def test_format_cpulist_is_the_shortest_plain_form():
    assert format_cpulist([11, 10, 8, 3, 2, 1, 0]) == "0-3,8,10-11"
    assert format_cpulist([]) == ""
    assert format_cpulist(range(0, 32, 2)) == ",".join(str(c) for c in range(0, 32, 2))


def test_cpulist_round_trip_over_a_1152_cpu_host():
    cpus = tuple(c for c in range(1152) if c % 7 not in (3, 4))
    assert parse_cpulist(format_cpulist(cpus)) == cpus


def test_cpumask_is_comma_separated_32_bit_words_beyond_64_cpus():
    # 128 CPUs, CPUs 1-15 and 33-47 banned: four words, most significant first
    mask = format_cpumask(list(range(1, 16)) + list(range(33, 48)), nr_cpus=128)
    assert mask == "00000000,00000000,0000fffe,0000fffe"
    assert parse_cpumask(mask) == tuple(range(1, 16)) + tuple(range(33, 48))


def test_cpumask_for_cpus_above_64_is_not_one_plain_hex_number():
    mask = format_cpumask([0, 64, 95, 255])
    words = mask.split(",")
    assert len(words) == 8 and all(len(w) == 8 for w in words)
    assert words[0] == "80000000" and words[-1] == "00000001"
    assert parse_cpumask(mask) == (0, 64, 95, 255)


def test_cpumask_parses_kernel_and_prefixed_forms():
    assert parse_cpumask("ff") == tuple(range(8))
    assert parse_cpumask("0x0f") == (0, 1, 2, 3)
    assert parse_cpumask("00000000,00010000,00000001") == (0, 48)
    assert format_cpumask([]) == "00000000"


@pytest.mark.parametrize("text", ["", "xyz", "ff,zz", ","])
def test_cpumask_errors_name_the_field(text):
    with pytest.raises(GpuhostError) as err:
        parse_cpumask(text, field="irqbalance_banned_cpus")
    assert err.value.field == "irqbalance_banned_cpus"


def test_stride_without_group_is_rejected_as_the_kernel_does():
    # bitmap_parselist() requires "used/group" after the colon; "0-15:4" is -EINVAL.
    with pytest.raises(GpuhostError) as err:
        parse_cpulist("0-15:4", field="cpus")
    assert "cpus" in str(err.value) and "0-31:1/2" in str(err.value)


@pytest.mark.parametrize("value", ["0-99999999999", "8192", "0-8192", "0-99999999999:1/2",
                                   10 ** 12, ["1", "0-8192"]])
def test_cpu_numbers_are_bounded_by_the_kernels_limit(value):
    # One hostile value must not make a set of billions of CPUs (it would exhaust the
    # controller's or the host's memory before any other check ran).
    with pytest.raises(GpuhostError) as info:
        parse_cpulist(value, field="cpus")
    assert info.value.field == "cpus"
    assert "beyond the kernel's limit of 8192 CPUs" in info.value.message
    assert "below 8192" in info.value.fix


def test_the_highest_possible_cpu_still_parses():
    assert parse_cpulist("8190-8191") == (8190, 8191)
    assert parse_cpumask("8" + "0" * 2047) == (8191,)


def test_a_cpu_mask_wider_than_the_kernels_limit_is_refused():
    with pytest.raises(GpuhostError) as info:
        parse_cpumask("1" + "0" * 2048, field="mask")
    assert info.value.field == "mask" and "limit of 8192 CPUs" in info.value.message
    assert parse_cpumask("0" * 5000 + "f") == (0, 1, 2, 3)     # leading zeros are fine
