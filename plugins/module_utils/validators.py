# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Validators of option values that reach a command line or a size: each matches the
whole value (``fullmatch``, never ``$``, which also matches before a trailing newline),
bounds it, and fails with the option's name and the fix. A value that passes can never
be read as an option by the command it is given to."""

from __future__ import annotations

import math
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


def finite_number(value, field, minimum=0.0, allow_minimum=False, maximum=None, unit=""):
    """``value`` as a finite float above ``minimum`` (or equal to it with
    ``allow_minimum``), at most ``maximum``: NaN compares false with everything, so a
    NaN timeout never expires, and an infinite one never either."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if isinstance(value, bool) or number is None or math.isnan(number) or math.isinf(number):
        raise GpuhostError("%r is not a finite number" % (value,), field=field,
                           fix="give a number%s, such as 10" % (" of %s" % unit if unit else ""))
    if number < minimum or (number == minimum and not allow_minimum):
        raise GpuhostError("%s must be %s %s, got %r" % (
            field, "at least" if allow_minimum else "more than", _plain(minimum), value),
            field=field, fix="give a %s number%s" % (
                "non-negative" if allow_minimum and minimum == 0 else "positive",
                " of %s" % unit if unit else ""))
    if maximum is not None and number > maximum:
        raise GpuhostError("%s must be at most %s, got %r" % (field, _plain(maximum), value),
                           field=field, fix="give at most %s%s" % (_plain(maximum),
                                                                   " " + unit if unit else ""))
    return number


def positive_int(value, field, maximum=None):
    """``value`` as an int of 1 or more (at most ``maximum``); bools are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise GpuhostError("%r is not a whole number" % (value,), field=field,
                           fix="give a whole number of 1 or more")
    if value < 1:
        raise GpuhostError("%s must be at least 1, got %d" % (field, value), field=field,
                           fix="give a whole number of 1 or more")
    if maximum is not None and value > maximum:
        raise GpuhostError("%s must be at most %d, got %d" % (field, maximum, value),
                           field=field, fix="give at most %d" % maximum)
    return value


def _plain(number):
    return ("%d" % number) if float(number).is_integer() else ("%s" % number)
