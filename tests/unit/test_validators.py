"""plugins/module_utils/validators.py: values that reach a command line."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.validators import (
    finite_number, positive_int, qemu_img_size)


@pytest.mark.parametrize("size", ["40G", "512M", "1.5T", "1073741824", "8k", "512"])
def test_qemu_img_sizes_pass_unchanged(size):
    assert qemu_img_size(size) == size


@pytest.mark.parametrize("size, message", [
    ("-obacking_file=/etc/shadow", "is not a disk size"),   # would be read as an option
    ("--help", "is not a disk size"),
    ("40G\n", "is not a disk size"),
    (" 40G", "is not a disk size"),
    ("1.5", "is not a disk size"),
    ("40 G", "is not a disk size"),
    ("", "is not a disk size"),
    (40, "is not a disk size"),
    ("0", "smaller than one 512-byte sector"),
    ("0.0001k", "smaller than one 512-byte sector"),
    ("9E", "larger than qemu-img can create"),
])
def test_qemu_img_sizes_are_refused_naming_the_option(size, message):
    with pytest.raises(GpuhostError) as info:
        qemu_img_size(size, field="disk.size")
    assert info.value.field == "disk.size" and message in info.value.message
    assert "qemu-img" in info.value.fix or "512 bytes" in info.value.fix or "smaller" in info.value.fix


@pytest.mark.parametrize("value, message", [
    (float("nan"), "nan is not a finite number"),     # a NaN timeout never expires
    (float("inf"), "inf is not a finite number"),
    ("ten", "'ten' is not a finite number"),
    (True, "True is not a finite number"),
    (None, "None is not a finite number"),
    (0, "timeout_s must be more than 0, got 0"),
    (-1.5, "timeout_s must be more than 0, got -1.5"),
    (86401, "timeout_s must be at most 86400, got 86401"),
])
def test_finite_numbers_refuse_nan_infinity_and_out_of_range(value, message):
    with pytest.raises(GpuhostError) as info:
        finite_number(value, "timeout_s", maximum=86400, unit="seconds")
    assert info.value.field == "timeout_s" and message in info.value.message
    assert "seconds" in info.value.fix


def test_finite_numbers_pass_as_floats_and_zero_only_when_allowed():
    assert finite_number("2.5", "t") == 2.5 and finite_number(3, "t") == 3.0
    assert finite_number(0, "t", allow_minimum=True) == 0.0


@pytest.mark.parametrize("value, message", [(0, "at least 1, got 0"), (-3, "at least 1, got -3"),
                                            (True, "is not a whole number"), (1.5, "is not a whole number"),
                                            (5, "at most 4, got 5")])
def test_positive_ints_refuse_below_one_bools_and_fractions(value, message):
    with pytest.raises(GpuhostError) as info:
        positive_int(value, "batch_size", maximum=4)
    assert info.value.field == "batch_size" and message in info.value.message
