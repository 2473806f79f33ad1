# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Opening a libvirt connection, with an error that says what to do next."""

from __future__ import annotations

import traceback

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import libvirt_uri

try:
    import libvirt
    HAS_LIBVIRT = True
    LIBVIRT_IMPORT_ERROR = None
except ImportError:  # reported by the module through missing_required_lib
    libvirt = None
    HAS_LIBVIRT = False
    LIBVIRT_IMPORT_ERROR = traceback.format_exc()

DEFAULT_URI = "qemu:///system"
# The package names, for missing_required_lib's message.
LIBVIRT_REQUIREMENT = "libvirt-python (python3-libvirt on Debian/Ubuntu, python3-libvirt on RHEL)"


def _quiet(_ctx, _err):
    """libvirt prints every error to stderr by default; the module reports them."""


def open_connection(uri=DEFAULT_URI):
    """A read-write connection to ``uri``; GpuhostError naming the uri, the reason and
    the fix when libvirt cannot be reached."""
    if not HAS_LIBVIRT:
        raise GpuhostError("libvirt-python is not installed", field="uri",
                           fix="install %s on the managed host" % LIBVIRT_REQUIREMENT)
    libvirt_uri(uri)
    libvirt.registerErrorHandler(_quiet, None)
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as exc:
        reason = exc.get_error_message() or str(exc)
        raise GpuhostError(
            "cannot connect to libvirt at %s: %s" % (uri, reason), field="uri",
            fix=_fix_for(uri, reason))
    if conn is None:  # older bindings return None instead of raising
        raise GpuhostError("cannot connect to libvirt at %s" % uri, field="uri",
                           fix=_fix_for(uri, ""))
    return conn


def daemon_version(conn):
    """(major, minor, micro) of the libvirt daemon behind ``conn`` (getLibVersion names
    the daemon's version, not the client library's)."""
    number = conn.getLibVersion()
    return (number // 1000000, number // 1000 % 1000, number % 1000)


def _fix_for(uri, reason):
    text = reason.lower()
    if "permission denied" in text or "authentication" in text:
        return ("run the task with become: true, or add the remote user to the libvirt "
                "group")
    if uri.startswith("qemu:///"):
        return ("start the daemon (systemctl enable --now libvirtd, or virtqemud.socket "
                "on modular-daemon hosts) and check that qemu-kvm/qemu-system-x86 is "
                "installed")
    return "check that %s is the right connection uri and that its daemon runs" % uri


def libvirt_error_text(exc):
    """The message of a libvirtError (or any exception) without the Python noise."""
    getter = getattr(exc, "get_error_message", None)
    return (getter() if getter else None) or str(exc)
