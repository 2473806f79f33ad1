# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab image's bytecode cache for Ansible's module payloads (lab image only).

Every Ansible task ships its module and module_utils to the host as a zip
(``ansible_<module>_payload.zip`` in a fresh temporary directory) and imports them from
it. zipimport compiles every source file of that zip again for every task, and writes no
bytecode. Under TCG compiling is slow: the lab's Python took 18.5 to 19 s for the ping
module's payload without bytecode and 11.5 to 15 s with it (2026-12-02, a busy lab), and
a task of this collection imports several thousand more lines than ping.

This path hook serves the modules of such zips from a cache of compiled code, keyed by
the interpreter's cache tag, the file's path inside the zip and the SHA-256 of its
source: the code a task runs is always compiled from the very source it shipped, only
not compiled again. The code objects' file names are set to the current zip, so a
traceback names the file it would name without the cache. Anything unexpected (a module
without source, a cache that cannot be read or written) falls back to zipimport's own
compiling.

lab/image/customize installs it with a .pth file, so it applies to every Python of the
lab and nowhere else: a real host compiles natively, where it costs little (the ping
payload: 0.85 s without bytecode, 0.41 s with it, on this machine's own CPU).
"""

import os
import re
import sys
import zipimport

CACHE_DIR = "/var/cache/gpuhost-lab/pyc"
# The zip, or a package directory inside it (a package's __path__ entry). The module's
# name in it is as the task gave it: ping, or ansible.builtin.ping, gpuhost.kvm.vfio_bind.
PAYLOAD_PATH = re.compile(r"/ansible_[^/]+_payload\.zip(/|\Z)")


def _with_filename(code, filename):
    """The code object and every code object inside it, with co_filename set."""
    consts = tuple(_with_filename(const, filename) if isinstance(const, type(code)) else const
                   for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


class CachingPayloadImporter(zipimport.zipimporter):
    """zipimport for one Ansible payload zip, compiling each source file once."""

    cache_dir = CACHE_DIR

    def _source(self, fullname):
        """(path inside the zip, source bytes) of a module with source, or None."""
        # The private helpers of CPython's zipimport, as its own get_source uses them.
        is_package = zipimport._get_module_info(self, fullname)  # pylint: disable=protected-access
        if is_package is None:
            return None
        path = zipimport._get_module_path(self, fullname)  # pylint: disable=protected-access
        inner = path + ("/__init__.py" if is_package else ".py")
        entry = self._files.get(inner)  # pylint: disable=no-member
        if entry is None:
            return None
        return inner, zipimport._get_data(self.archive, entry)  # pylint: disable=protected-access

    def get_code(self, fullname):
        import hashlib  # pylint: disable=import-outside-toplevel  # only payload imports pay for it
        import marshal  # pylint: disable=import-outside-toplevel
        try:
            found = self._source(fullname)
        except Exception:  # pylint: disable=broad-except  # zipimport's own path decides
            found = None
        if found is None:
            return super().get_code(fullname)
        inner, source = found
        filename = os.path.join(self.archive, inner)
        digest = hashlib.sha256(b"\0".join([sys.implementation.cache_tag.encode(), inner.encode(), source]))
        cached = os.path.join(self.cache_dir, digest.hexdigest())
        try:
            with open(cached, "rb") as handle:
                code = marshal.load(handle)
            if isinstance(code, type(_with_filename.__code__)):
                return _with_filename(code, filename)
        except Exception:  # pylint: disable=broad-except  # a torn or foreign entry: compile
            pass
        code = super().get_code(fullname)
        try:
            os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)
            tmp = "%s.%d.tmp" % (cached, os.getpid())
            with open(tmp, "wb") as handle:
                marshal.dump(code, handle)
            os.replace(tmp, cached)
        except OSError:
            pass
        return code


def payload_hook(path):
    """sys.path_hooks entry: payload zips only; anything else goes to the next hook."""
    if not PAYLOAD_PATH.search(path):
        raise ImportError("not an Ansible payload zip")
    return CachingPayloadImporter(path)


def install(environ=None):
    """The .pth file's call. GPUHOST_LAB_PYC_CACHE=0 in a process's environment leaves it
    out, to measure the lab without it (bench/bench_pyc_cache.py)."""
    if (os.environ if environ is None else environ).get("GPUHOST_LAB_PYC_CACHE") == "0":
        return
    if payload_hook not in sys.path_hooks:
        sys.path_hooks.insert(0, payload_hook)
        sys.path_importer_cache.clear()
