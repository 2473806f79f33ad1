# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/image/gpuhost_lab_pyc_cache.py, the lab image's bytecode cache for Ansible's
module payloads: real imports from real zips in fresh Python processes, with the hook
installed as the image's .pth file installs it."""

import json
import marshal
import os
import subprocess
import sys
import zipfile

from support.helpers import REPO

LAB_IMAGE = os.path.join(REPO, "lab", "image")

IMPORTER = r"""
import json, sys
sys.path.insert(0, %(lab_image)r)
import gpuhost_lab_pyc_cache as cache
cache.CachingPayloadImporter.cache_dir = %(cache_dir)r
cache.install()
sys.path.insert(0, %(zip)r)
import pkg.mod
try:
    pkg.mod.fail()
except RuntimeError:
    import traceback
    where = traceback.extract_tb(sys.exc_info()[2])[-1].filename
print(json.dumps({"value": pkg.mod.VALUE, "file": pkg.mod.__file__, "traceback_file": where,
                  "loader": type(pkg.mod.__loader__).__name__}))
"""


def _payload(directory, name, value):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        archive.writestr("pkg/mod.py", "VALUE = %r\n\ndef fail():\n    raise RuntimeError('x')\n" % value)
    return path


def _import(tmp_path, archive):
    script = IMPORTER % {"lab_image": LAB_IMAGE, "cache_dir": str(tmp_path / "cache"), "zip": archive}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_payloads_modules_are_compiled_once_and_then_served_from_the_cache(tmp_path):
    first = _payload(str(tmp_path / "ansible_ping_payload_a1"), "ansible_ping_payload.zip", "one")
    seen = _import(tmp_path, first)
    assert seen["value"] == "one" and seen["loader"] == "CachingPayloadImporter"
    cache = tmp_path / "cache"
    entries = sorted(os.listdir(cache))
    assert len(entries) == 2, entries           # pkg/__init__.py and pkg/mod.py
    # Served from the cache: a cached entry rewritten to another value is what imports.
    for entry in entries:
        with open(cache / entry, "rb") as handle:
            code = marshal.load(handle)
        if "VALUE" in code.co_names:
            with open(cache / entry, "wb") as handle:
                marshal.dump(compile("VALUE = 'from the cache'\n\ndef fail():\n    raise RuntimeError('x')\n",
                                     "elsewhere.py", "exec"), handle)
    # The next task's payload: same source, another temporary directory.
    second = _payload(str(tmp_path / "ansible_ping_payload_b2"), "ansible_ping_payload.zip", "one")
    again = _import(tmp_path, second)
    assert again["value"] == "from the cache"
    # File names are the new zip's, in __file__ and in tracebacks.
    assert again["file"] == again["traceback_file"] == os.path.join(second, "pkg", "mod.py")


def test_a_module_named_by_its_fqcn_is_cached_too(tmp_path):
    # Roles name modules by FQCN, and the payload's name carries it as given.
    archive = _payload(str(tmp_path / "ansible_gpuhost.kvm.vfio_bind_payload_x1"),
                       "ansible_gpuhost.kvm.vfio_bind_payload.zip", "one")
    seen = _import(tmp_path, archive)
    assert seen["loader"] == "CachingPayloadImporter" and len(os.listdir(tmp_path / "cache")) == 2


def test_changed_source_is_compiled_again(tmp_path):
    _import(tmp_path, _payload(str(tmp_path / "a"), "ansible_ping_payload.zip", "one"))
    changed = _import(tmp_path, _payload(str(tmp_path / "b"), "ansible_ping_payload.zip", "two"))
    assert changed["value"] == "two"
    assert len(os.listdir(tmp_path / "cache")) == 3     # one more entry: the new pkg/mod.py


def test_other_zips_are_left_to_zipimport(tmp_path):
    seen = _import(tmp_path, _payload(str(tmp_path / "a"), "library.zip", "one"))
    assert seen["value"] == "one" and seen["loader"] == "zipimporter"
    assert not (tmp_path / "cache").exists()


def test_a_torn_or_foreign_cache_entry_is_compiled_again(tmp_path):
    # A reset right after a write (the interrupted converge's kill and reboot) can leave
    # an empty or partial entry; something else may leave a marshalled non-code object.
    _import(tmp_path, _payload(str(tmp_path / "a"), "ansible_ping_payload.zip", "one"))
    cache = tmp_path / "cache"
    first, second = sorted(os.listdir(cache))
    (cache / first).write_bytes(b"")
    (cache / second).write_bytes(marshal.dumps(42))
    seen = _import(tmp_path, _payload(str(tmp_path / "b"), "ansible_ping_payload.zip", "one"))
    assert seen["value"] == "one" and seen["loader"] == "CachingPayloadImporter"
    # and both were written again, whole
    for entry in (first, second):
        with open(cache / entry, "rb") as handle:
            assert isinstance(marshal.load(handle), type(test_changed_source_is_compiled_again.__code__))


def test_an_unreadable_cache_falls_back_to_compiling(tmp_path):
    (tmp_path / "cache").write_text("not a directory")
    seen = _import(tmp_path, _payload(str(tmp_path / "a"), "ansible_ping_payload.zip", "one"))
    assert seen["value"] == "one"


def test_gpuhost_lab_pyc_cache_0_leaves_the_hook_out():
    sys.path.insert(0, LAB_IMAGE)
    try:
        import gpuhost_lab_pyc_cache as cache      # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(LAB_IMAGE)
    hooks = list(sys.path_hooks)
    cache.install({"GPUHOST_LAB_PYC_CACHE": "0"})
    assert sys.path_hooks == hooks


def test_the_image_installs_the_hook_for_the_labs_python():
    with open(os.path.join(LAB_IMAGE, "customize"), encoding="utf-8") as handle:
        customize = handle.read()
    assert "gpuhost_lab_pyc_cache.py" in customize and ".pth" in customize
