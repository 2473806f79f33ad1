# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Validators of option values that reach a command line or a size: each matches the
whole value (``fullmatch``, never ``$``, which also matches before a trailing newline),
bounds it, and fails with the option's name and the fix. A value that passes can never
be read as an option by the command it is given to."""

from __future__ import annotations

import re

from ansible_collections.gpuhost.kvm.plugins.module_utils.errors import GpuhostError

# qemu-img's size syntax: bytes, or a number with one of its suffixes (k/K = KiB, M, G,
# T, P, E); a fraction only with a suffix.
_QEMU_IMG_SIZE = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<suffix>[kKMGTPE]?)")
_SUFFIX_SHIFT = {"": 0, "k": 10, "K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}
# qemu-img's own ceiling for an image size (INT64_MAX bytes, rounded down to 512).
MAX_IMAGE_BYTES = (2 ** 63 - 1) // 512 * 512


def qemu_img_size(value, field="size"):
    """``value`` as qemu-img's size argument, checked: returns it unchanged."""
    text = value if isinstance(value, str) else None
    match = _QEMU_IMG_SIZE.fullmatch(text) if text is not None else None
    if match is None or ("." in match.group("number") and not match.group("suffix")):
        raise GpuhostError(
            "%r is not a disk size" % (value,), field=field,
            fix="write a size as qemu-img takes it: bytes or a number with k, M, G, T, P or E "
                "(40G, 512M, 1.5T)")
    size = float(match.group("number")) * (1 << _SUFFIX_SHIFT[match.group("suffix")])
    if size < 512:
        raise GpuhostError("%r is smaller than one 512-byte sector" % (value,), field=field,
                           fix="give a size of at least 512 bytes, such as 40G")
    if size > MAX_IMAGE_BYTES:
        raise GpuhostError("%r is larger than qemu-img can create (8 EiB)" % (value,),
                           field=field, fix="give a smaller size, such as 40G")
    return text
