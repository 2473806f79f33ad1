"""plugins/module_utils/validators.py: values that reach a command line."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.validators import qemu_img_size


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
