# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one set of validators of option values: sizes, numbers, MAC addresses, VLAN IDs,
interface names, config paths and URLs. Each matches the whole value (``fullmatch``,
never ``$``, which also matches before a trailing newline), bounds it, and fails with
the option's name and the fix. A value that passes can never be read as an option by
the command it is given to."""

from __future__ import annotations

import math
import os
import re
import stat
import unicodedata
from urllib.parse import urlsplit

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError

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


def positive_int(value, field, maximum=None, minimum=1, fix=None):
    """``value`` as an int of ``minimum`` (1 unless told) or more, at most ``maximum``;
    bools are refused. ``fix`` replaces the generic advice for a value out of range."""
    advice = "give a whole number of %d or more%s" % (
        minimum, " and at most %d" % maximum if maximum is not None else "")
    if isinstance(value, bool) or not isinstance(value, int):
        raise GpuhostError("%r is not a whole number" % (value,), field=field, fix=advice)
    if value < minimum:
        raise GpuhostError("%s must be at least %d, got %d" % (field, minimum, value), field=field,
                           fix=fix or advice)
    if maximum is not None and value > maximum:
        raise GpuhostError("%s must be at most %d, got %d" % (field, maximum, value),
                           field=field, fix=fix or "give at most %d" % maximum)
    return value


# The largest whole number an option or a plan takes unless its reader bounds it
# otherwise: a million, far past any count of a host, far below slow arithmetic.
MAX_WHOLE = 1 << 20
_WHOLE_TEXT = re.compile(r"[+-]?[0-9]{1,20}")


def whole_number(value, field, minimum=0, maximum=MAX_WHOLE):
    """``value`` as a whole number from ``minimum`` to ``maximum``, or a GpuhostError
    naming ``field``: a templated "16" or a YAML 16.0 counts as 16; NaN and infinities
    (``int()`` of them raises OverflowError or ValueError), fractions, bools and
    absurdly large numbers are refused."""
    number = value
    if isinstance(value, str) and _WHOLE_TEXT.fullmatch(value.strip()):
        number = int(value.strip())
    elif isinstance(value, float):
        finite_number(value, field, minimum=-math.inf)    # NaN and infinities, by name
        if value.is_integer():
            number = int(value)
    if isinstance(number, int) and not isinstance(number, bool) and number < minimum:
        raise GpuhostError("%d is below %d" % (number, minimum), field=field,
                           fix="give a whole number of at least %d" % minimum)
    return positive_int(number, field, minimum=minimum, maximum=maximum)


# The largest count another host's facts may report (GPUs, cores, pages...): far above
# any host, far below what would make the arithmetic on it slow.
MAX_COUNT = 2 ** 40


def is_count(value, maximum=MAX_COUNT):
    """Whether ``value`` is a whole number from 0 to ``maximum`` (no bool): for numbers
    that come from other hosts' facts, which a report lists as unusable rather than
    refuses (a negative count would rank first; 10**400 would not print as a float)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= maximum


# -- names ----------------------------------------------------------------------------------

# A tenant's libvirt domain name: what libvirt accepts, and what never escapes the folders
# named after it (/etc/libvirt/qemu/<name>.xml, the ledger's entries, the state files).
DOMAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")


def domain_name(value, field="name"):
    """``value`` when it is a valid tenant (libvirt domain) name, else a refusal naming
    ``field``."""
    if not isinstance(value, str) or not DOMAIN_NAME.fullmatch(value):
        raise GpuhostError(
            "%r is not a valid tenant (libvirt domain) name" % (value,), field=field,
            fix="use 1-63 characters from A-Z a-z 0-9 _ . -, starting with a letter or "
                "digit and without '/', e.g. tenant-a100")
    return value


# -- shapes -------------------------------------------------------------------------------

def mapping(value, field, fix):
    """``value`` when it is a mapping; a string or a list where an object belongs (a
    fact or plan entry passed through a template as text) is refused naming ``field``."""
    if not isinstance(value, dict):
        raise GpuhostError("%s is a %s, not a mapping" % (field, type(value).__name__),
                           field=field, fix=fix)
    return value


def mapping_list(value, field, fix):
    """``value`` as a list of mappings (None: empty), each checked by ``mapping`` with
    the field ``<field>[N]``."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise GpuhostError("%s is a %s, not a list" % (field, type(value).__name__),
                           field=field, fix=fix)
    return [mapping(item, "%s[%d]" % (field, index), fix) for index, item in enumerate(value)]


# -- hugepage sizes -----------------------------------------------------------------------

_HUGEPAGE_SIZE = re.compile(r"\s*([0-9]+)\s*([KMG]?)i?B?\s*", re.IGNORECASE)
# The sizes any kernel offers: 64 KiB (arm64 contiguous PTEs) to 16 GiB (ppc64, arm64).
HUGEPAGE_MIN_KIB = 64
HUGEPAGE_MAX_KIB = 16 * 1024 * 1024


def hugepage_size_name(size_kib):
    """A hugepage size in KiB as the inventory writes it: 1G, 2M, 64K."""
    if size_kib % (1024 * 1024) == 0:
        return "%dG" % (size_kib // (1024 * 1024))
    if size_kib % 1024 == 0:
        return "%dM" % (size_kib // 1024)
    return "%dK" % size_kib


def hugepage_size_kib(value, field="hugepage_size"):
    """A hugepage size (``1G``, ``2M``, ``2048K``, KiB as an int) in KiB, None for none
    (None, "", "none"). A size of 0 (``0M``) is refused, not read as "no hugepages",
    and so is one that is not a power of two between 64 KiB and 16 GiB."""
    fix = "write 1G or 2M (or a size in KiB such as 1048576), or none for no hugepages"
    if value in (None, "", "none"):
        return None
    if isinstance(value, bool):
        raise GpuhostError("%r is not a hugepage size" % (value,), field=field, fix=fix)
    if isinstance(value, int):
        kib = value
    else:
        match = _HUGEPAGE_SIZE.fullmatch(value) if isinstance(value, str) else None
        if not match or len(match.group(1)) > 12:
            raise GpuhostError("cannot read hugepage size %r" % (value,), field=field, fix=fix)
        kib = int(match.group(1)) * {"": 1, "K": 1, "M": 1024,
                                     "G": 1024 * 1024}[match.group(2).upper()]
    if not HUGEPAGE_MIN_KIB <= kib <= HUGEPAGE_MAX_KIB or kib & (kib - 1):
        raise GpuhostError("hugepage size %r is no size a kernel offers (a power of two from "
                           "64 KiB to 16 GiB)" % (value,), field=field, fix=fix)
    return kib


# -- user and group names -----------------------------------------------------------------

# useradd's default NAME_REGEX, with '.' as shadow-utils allows it; at most 32 bytes.
_ACCOUNT_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,30}\$?", re.IGNORECASE)
MAX_ID = 2 ** 32 - 2      # (uid_t)-1 is "no change" to chown


def account_name(value, field):
    """A user or group as chown takes it: a name useradd accepts, or a numeric ID of
    ASCII digits (look-alike digits such as '²' are refused, not a traceback), returned
    as an int for an ID, the name otherwise."""
    fix = "give a user or group name (letters, digits, '_', '.', '-') or a numeric ID"
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        if int(value) <= MAX_ID:
            return int(value)
    elif isinstance(value, str) and _ACCOUNT_NAME.fullmatch(value):
        return value
    raise GpuhostError("%r is not a user or group name" % (value,), field=field, fix=fix)


# -- MAC addresses, VLAN IDs, flags ---------------------------------------------------

# Six colon-separated octets, nothing before or after.
MAC_RE = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
ZERO_MAC = "00:00:00:00:00:00"
VLAN_MAX = 4094             # 802.1Q: 4095 is reserved, 0 means no VLAN tag
MAC_EXAMPLE = "52:54:00:6c:00:01"


def validate_mac(value, field="mac", allow_zero=False):
    """A unicast MAC address in lower case, or a GpuhostError naming ``field``.

    ``allow_zero`` lets 00:00:00:00:00:00 through (sriov_vfs: some PF drivers take it to
    clear a VF's MAC); a tenant's MAC is never all-zero.
    """
    if not isinstance(value, str) or not MAC_RE.fullmatch(value):
        raise GpuhostError("%r is not a MAC address" % (value,), field=field,
                           fix="write six two-digit hex octets separated by colons, e.g. %s"
                               % MAC_EXAMPLE)
    mac = value.lower()
    if mac == ZERO_MAC:
        if allow_zero:
            return mac
        raise GpuhostError("%s is the all-zero MAC address" % mac, field=field,
                           fix="give a real unicast address such as %s, or leave mac out "
                               "for the driver's own" % MAC_EXAMPLE)
    if int(mac[:2], 16) & 1:
        raise GpuhostError("%s is a multicast address (the low bit of the first octet is "
                           "set)" % mac, field=field,
                           fix="give a unicast address: an even first octet, e.g. %s (52 "
                               "is locally administered)" % MAC_EXAMPLE)
    return mac


def validate_vlan(value, field="vlan"):
    """A VLAN ID as an int, 0 (no VLAN) to 4094."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise GpuhostError("%r is not a VLAN ID" % (value,), field=field,
                           fix="give a whole number from 1 to %d, or 0 for no VLAN" % VLAN_MAX)
    if not 0 <= value <= VLAN_MAX:
        raise GpuhostError("VLAN %d is outside 0..%d" % (value, VLAN_MAX), field=field,
                           fix="give a VLAN ID from 1 to %d (4095 is reserved), or 0 for "
                               "no VLAN" % VLAN_MAX)
    return value


def validate_flag(value, field):
    if not isinstance(value, bool):
        raise GpuhostError("%r is not true or false" % (value,), field=field,
                           fix="write true or false")
    return value


# -- interface names --------------------------------------------------------------------

# include/uapi/linux/if.h: IFNAMSIZ is 16 bytes with the terminating NUL.
IFNAMSIZ = 16


def interface_name(value, field="interface"):
    """A network interface name as the kernel accepts it (net/core/dev.c
    dev_valid_name(): 1 to 15 bytes, not ``.`` or ``..``, no ``/``, ``:`` or
    whitespace), returned unchanged: names are case-sensitive, so the canonical form is
    the exact name. Two rules go beyond the kernel's, because the name reaches
    command lines, systemd unit names and logs: no control characters, and no leading
    ``-``, which ``ip`` or ``ethtool`` would read as an option."""
    fix = ("give the interface's name exactly as 'ip -br link' shows it: 1 to %d "
           "characters without '/', ':', blanks or a leading '-', e.g. ens1f0np0"
           % (IFNAMSIZ - 1))
    if not isinstance(value, str) or not value:
        raise GpuhostError("%r is not an interface name" % (value,), field=field, fix=fix)
    if len(value.encode("utf-8", "surrogatepass")) >= IFNAMSIZ:
        raise GpuhostError("%r is longer than the kernel's %d-byte limit for interface names"
                           % (value, IFNAMSIZ - 1), field=field, fix=fix)
    if value in (".", "..") or value.startswith("-") or any(
            char in "/:" or char.isspace() or unicodedata.category(char) == "Cc"
            for char in value):
        raise GpuhostError("%r is not an interface name" % (value,), field=field, fix=fix)
    return value


# -- systemd unit names -------------------------------------------------------------------

# systemd.unit(5): at most 255 characters of ASCII letters, digits, ":-_.\\" and "@"
# before the type suffix. A leading "-" is refused too: the name reaches systemctl's
# command line.
_UNIT_NAME_RE = re.compile(r"[A-Za-z0-9:_.\\@][A-Za-z0-9:_.\\@-]{0,240}"
                           r"\.(service|socket|timer|target|path|mount|swap|slice)\Z")


def unit_name(value, field="unit"):
    """A systemd unit name with its type suffix, returned unchanged."""
    if not isinstance(value, str) or not _UNIT_NAME_RE.match(value):
        raise GpuhostError("%r is not a systemd unit name" % (value,), field=field,
                           fix="name the unit as systemctl does, with its suffix, such as "
                               "gpuhost-numa.service")
    return value


# -- container names (the guest's runtime) ---------------------------------------------

# Docker's and Podman's container and image-reference names, matched whole: a name that
# starts with "-" would be read as an option, and the runtime's Go templates never see one.
CONTAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
IMAGE_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")


def container_name(value, field="container"):
    if not isinstance(value, str) or not CONTAINER_NAME.fullmatch(value):
        raise GpuhostError("%r is not a container name" % (value,), field=field,
                           fix="letters, digits, '_', '.' and '-', starting with a letter or digit "
                               "(at most 128 characters), as docker and podman name containers")
    return value


def image_reference(value, field="image"):
    if not isinstance(value, str) or not IMAGE_REFERENCE.fullmatch(value):
        raise GpuhostError("%r is not an image reference" % (value,), field=field,
                           fix="a reference such as nvcr.io/nvidia/tritonserver:24.07-py3 (letters, "
                               "digits and . _ / : @ + -, starting with a letter or digit)")
    return value


def domain_uuid(value, field="uuid"):
    """A libvirt domain UUID (32 hex digits, dashes allowed as libvirt writes them), or
    None to let libvirt choose one; anything else would go into the domain XML as is."""
    if value is None:
        return None
    digits = value.replace("-", "") if isinstance(value, str) else ""
    if len(digits) != 32 or not re.match(r"^[0-9a-fA-F]{32}\Z", digits):
        raise GpuhostError("%r is not a UUID" % (value,), field=field,
                           fix="give 32 hex digits such as 4dea22b3-1d52-d8f3-2516-782e98ab3fa0, "
                               "or leave uuid out to let libvirt choose")
    return value


# -- config paths -------------------------------------------------------------------------

def absolute_path(value, field, kind="file"):
    """An absolute path without control characters, returned normalised. A relative
    path would depend on the directory the module happens to run in."""
    if not isinstance(value, str) or not value.strip():
        raise GpuhostError("%r is not a path" % (value,), field=field,
                           fix="give the absolute path of the %s" % kind)
    if any(unicodedata.category(char) == "Cc" for char in value):
        raise GpuhostError("%r holds control characters" % (value,), field=field,
                           fix="give the absolute path of the %s" % kind)
    if not os.path.isabs(value):
        raise GpuhostError("%r is a relative path" % (value,), field=field,
                           fix="give the absolute path of the %s, starting with /" % kind)
    return os.path.normpath(value)


def config_path(value, field, kind="file", root=None, missing_ok=False):
    """An absolute path to an existing config ``kind`` (file or directory), returned
    normalised. A missing one is a typo more often than a wish: it is refused, never
    created. ``root``: the path is a host path, looked up under that tree (a module's
    ``root`` option). ``missing_ok``: the caller creates the file when it is missing (a
    config it owns a line of); one that is there must still be a ``kind``. A '..' is
    refused, not normalised away: the file it names is not the one the user wrote."""
    path = absolute_path(value, field, kind)
    if ".." in value.split("/"):
        raise GpuhostError("%r has a '..' component" % (value,), field=field,
                           fix="give the absolute path of the %s without '..'" % kind)
    where = os.path.join(root, path.lstrip("/")) if root else path
    if missing_ok and not os.path.lexists(where):
        return path
    exists = os.path.isdir(where) if kind == "directory" else os.path.isfile(where)
    if not exists and (missing_ok or os.path.lexists(where) and root):
        raise GpuhostError("%s is not a %s" % (path, kind), field=field,
                           fix="move it away, or give the path of the %s" % kind)
    if not exists:
        raise GpuhostError("%s does not exist or is not a %s" % (value, kind), field=field,
                           fix="check the path, or create the %s first: it is never created "
                               "for you" % kind)
    return path


def unix_socket_path(value, field, root):
    """An absolute path to an existing UNIX domain socket on the host ``root`` holds,
    returned normalised. Anything else there (a FIFO, a file, a link) is refused: a
    client would block on it, or talk to whatever the link points at."""
    path = absolute_path(value, field, "socket")
    if ".." in value.split("/"):
        raise GpuhostError("%r has a '..' component" % (value,), field=field,
                           fix="give the absolute path of the socket without '..'")
    try:
        mode = os.lstat(os.path.join(root, path.lstrip("/"))).st_mode
    except OSError:
        raise GpuhostError("%s does not exist" % path, field=field,
                           fix="start the service that listens there, or give the path of "
                               "its socket")
    if not stat.S_ISSOCK(mode):
        raise GpuhostError("%s is %s, not a UNIX socket" % (path, file_kind(mode)),
                           field=field, fix="give the path of the service's socket")
    return path


def file_kind(mode):
    """What an lstat mode names, in words ("a FIFO"), for a refusal."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a file"


# -- PCI device selectors -----------------------------------------------------------------

# lspci -nn's vendor:device, and a PCI address as lspci -D prints it (the domain included,
# 5 hex digits under Intel VMD; a slot of at most 1f). Matched whole: "10de:2335\n" is no ID.
PCI_ID_RE = re.compile(r"(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})")
PCI_FULL_ADDRESS_RE = re.compile(
    r"(?P<domain>[0-9a-fA-F]{4,5}):(?P<bus>[0-9a-fA-F]{2}):(?P<slot>[01][0-9a-fA-F])"
    r"\.(?P<function>[0-7])")


def bounded_list(value, field, maximum, fix):
    """``value`` as a list (None: empty) of at most ``maximum`` entries; a string, a
    mapping or a longer list is refused naming ``field``."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise GpuhostError("%s is a %s, not a list" % (field, type(value).__name__),
                           field=field, fix=fix)
    if len(value) > maximum:
        raise GpuhostError("%s has %d entries, more than %d" % (field, len(value), maximum),
                           field=field, fix=fix)
    return list(value)


def pci_id_or_address(value, field):
    """An entry of a PCI device list: ``("id", vendor, device)`` for ``10de:2335`` or
    ``("address", "0000:41:00.0")`` (canonical, lower case) for a full address."""
    text = value if isinstance(value, str) else None
    match = PCI_ID_RE.fullmatch(text) if text is not None else None
    if match:
        return ("id", int(match.group("vendor"), 16), int(match.group("device"), 16))
    match = PCI_FULL_ADDRESS_RE.fullmatch(text) if text is not None else None
    if match:
        return ("address", "%04x:%02x:%02x.%d" % (
            int(match.group("domain"), 16), int(match.group("bus"), 16),
            int(match.group("slot"), 16), int(match.group("function"))))
    raise GpuhostError(
        "%r is neither a vendor:device ID nor a PCI address" % (value,), field=field,
        fix="write a vendor:device ID as lspci -nn prints it (10de:2335) or a full PCI "
            "address as lspci -D prints it (0000:41:00.0)")


# -- URLs --------------------------------------------------------------------------------

def libvirt_uri(value, field="uri"):
    """A libvirt connection URI as text without blanks or control characters (a NUL
    makes libvirt-python raise ValueError), returned unchanged; libvirt itself judges
    the rest when it connects."""
    if not isinstance(value, str) or not value or any(
            char.isspace() or unicodedata.category(char) in ("Cc", "Cs") for char in value):
        raise GpuhostError("%r is not a libvirt connection URI" % (value,), field=field,
                           fix="give a URI such as qemu:///system")
    return value


# RFC 3986 reg-name, IPv4 and bracketed IPv6 hosts; a port of 1 to 5 digits.
_URL_NETLOC = re.compile(r"(?P<host>\[[^\]]*\]|[^:\[\]]*)(?::(?P<port>[^:]*))?")
_URL_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\]")


def url(value, field="url", schemes=("http", "https"), example="http://127.0.0.1:8000"):
    """An absolute URL of one of ``schemes`` with a host and a valid port, returned as
    (scheme, host, port, path). The port defaults to the scheme's (80, 443). Refused:
    no scheme, a scheme not in ``schemes``, credentials, blanks or control characters,
    an empty or malformed host, a port out of 1..65535, a query or a fragment."""
    fix = "write it as %s (scheme, host and port, no user or query)" % example
    if not isinstance(value, str) or not value:
        raise GpuhostError("%r is not a URL" % (value,), field=field, fix=fix)
    if any(char.isspace() or unicodedata.category(char) == "Cc" for char in value):
        raise GpuhostError("%r holds blanks or control characters" % (value,), field=field,
                           fix=fix)
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise GpuhostError("%r is not a URL: %s" % (value, exc), field=field, fix=fix)
    if parts.scheme and "://" in value and parts.scheme not in schemes:
        raise GpuhostError("the scheme of %r is %s, not %s" % (
            value, parts.scheme, " or ".join(schemes)), field=field, fix=fix)
    if not parts.scheme or not parts.netloc or parts.scheme not in schemes:
        raise GpuhostError("%r is not an absolute URL" % (value,), field=field, fix=fix)
    if "@" in parts.netloc:
        raise GpuhostError("%r carries credentials" % (value,), field=field, fix=fix)
    where = _URL_NETLOC.fullmatch(parts.netloc)
    if where is None or not _URL_HOST.fullmatch(where.group("host")):
        raise GpuhostError("%r has no valid host" % (value,), field=field, fix=fix)
    port = where.group("port")
    if port is not None and not (re.fullmatch(r"[0-9]{1,5}", port) and 1 <= int(port) <= 65535):
        raise GpuhostError("%r has no valid port (1 to 65535)" % (value,), field=field,
                           fix=fix)
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise GpuhostError("%r has a query or a fragment" % (value,), field=field, fix=fix)
    default_port = {"http": 80, "https": 443}.get(parts.scheme)
    return (parts.scheme, parts.hostname, int(port) if port else default_port,
            parts.path.rstrip("/"))


def _plain(number):
    return ("%d" % number) if float(number).is_integer() else ("%s" % number)
