# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/lib.sh's lab_prune_images, which lab/build runs after a build: the images of older
recipes of the variant just built go, another variant's never do (an acceptance run
boots the default image while the dracut variant is built), nor an
image a current link names. Run on a cache tree of real directories and links."""

import os
import subprocess
import time

from support.helpers import REPO

LIB = os.path.join(REPO, "lab", "lib.sh")


def _image(cache, name, variant=None, age_s=0):
    path = cache / name
    path.mkdir()
    (path / "base.qcow2").write_text("image\n")
    info = "recipe=%s\n" % name + ("variant=%s\n" % variant if variant else "")
    (path / "image.info").write_text(info)
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


def _prune(cache, variant, keep):
    env = dict(os.environ, GPUHOST_LAB_CACHE=str(cache))
    env.pop("GPUHOST_LAB_VARIANT", None)
    if variant != "default":
        env["GPUHOST_LAB_VARIANT"] = variant
    proc = subprocess.run(["bash", "-c", 'set -euo pipefail; . "$1"; lab_prune_images "$2"', "-", LIB, str(keep)],
                          capture_output=True, text=True, timeout=60, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def _left(cache):
    return sorted(p.name for p in cache.iterdir() if p.is_dir() and not p.is_symlink())


def test_a_dracut_build_never_removes_a_default_image(tmp_path):
    # Default images from before variants existed (no variant= line) and from after.
    _image(tmp_path, "a" * 16, age_s=500)
    _image(tmp_path, "b" * 16, "default", age_s=400)
    _image(tmp_path, "c" * 16, age_s=300)
    _image(tmp_path, "d" * 16, "dracut", age_s=200)
    _image(tmp_path, "e" * 16, "dracut", age_s=100)
    new = _image(tmp_path, "f" * 16, "dracut")
    (tmp_path / "apt-archives").mkdir()
    log = _prune(tmp_path, "dracut", new)
    # The newest older dracut image stays besides the new one; the default's all stay.
    assert _left(tmp_path) == ["a" * 16, "apt-archives", "b" * 16, "c" * 16, "e" * 16, "f" * 16]
    assert "removing the image of an older dracut recipe: %s" % (tmp_path / ("d" * 16)) in log


def test_a_default_build_never_removes_a_dracut_image(tmp_path):
    _image(tmp_path, "1" * 16, "dracut", age_s=600)
    _image(tmp_path, "2" * 16, "dracut", age_s=500)
    _image(tmp_path, "3" * 16, age_s=400)
    _image(tmp_path, "4" * 16, "default", age_s=300)
    new = _image(tmp_path, "5" * 16)
    _prune(tmp_path, "default", new)
    assert _left(tmp_path) == ["1" * 16, "2" * 16, "4" * 16, "5" * 16]


def test_an_image_a_current_link_names_is_kept(tmp_path):
    # A run that booted an older default image (its checkout's current link) keeps it,
    # even when two newer ones of its variant exist.
    _image(tmp_path, "7" * 16, age_s=500)
    _image(tmp_path, "8" * 16, age_s=400)
    _image(tmp_path, "9" * 16, age_s=300)
    new = _image(tmp_path, "0" * 16)
    os.symlink("7" * 16, tmp_path / "current")
    _prune(tmp_path, "default", new)
    assert _left(tmp_path) == ["0" * 16, "7" * 16, "9" * 16]
