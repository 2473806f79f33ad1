# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files libvirt_pinned_domain makes for a domain: the overlay disk (qemu-img) and
the cloud-init seed ISO, and the record of them under ``state_dir`` (one JSON file per
domain, so that state=absent remove_storage=true removes only what the module made).

Every file goes through the collection's one writer (engine/writer.py HostWriter: temp file,
fsync, rename; never through a link, never over what is not a regular file). ``plan``
decides; ``changes`` turns the plan into steps of the collection's one ChangeSet
(engine/changeset.py), which the module applies together with the define, so that a
refused define undoes the files as any failed step undoes those before it; ``finish``
drops the kept copies of rebuilt seeds once the whole set succeeded."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import List, Optional

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.changeset import ChangeSet
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.reader import read_bytes, read_file_text
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    absolute_path, qemu_img_size)

SEED_TOOLS = ("cloud-localds", "genisoimage", "mkisofs", "xorriso")


@dataclass
class StorageStep:
    """One file to make: the overlay (``argv``, the qemu-img command) or the seed
    (``seed_digest``, the digest of the cloud-init data it is built from)."""

    label: str
    path: str
    argv: Optional[List[str]] = None
    seed_digest: Optional[str] = None


def overlay_argv(get_bin_path, disk):
    """The qemu-img command that creates ``disk.path``: an overlay on
    ``disk.base_image`` or an empty disk of ``disk.size``."""
    qemu_img = get_bin_path("qemu-img")
    if not qemu_img:
        raise GpuhostError("qemu-img is not installed", field="disk",
                           fix="install qemu-img (RHEL) or qemu-utils (Debian)")
    if disk["base_image"]:
        if not os.path.exists(disk["base_image"]):
            raise GpuhostError("base image %s does not exist" % disk["base_image"],
                               field="disk.base_image",
                               fix="download or build the base image first")
        argv = [qemu_img, "create", "-f", "qcow2", "-F", disk["base_format"],
                "-b", disk["base_image"], "--", disk["path"]]
    elif disk["size"]:
        argv = [qemu_img, "create", "-f", "qcow2", "--", disk["path"]]
    else:
        raise GpuhostError("%s does not exist and there is nothing to create it from"
                           % disk["path"], field="disk",
                           fix="give disk.base_image (an overlay) or disk.size "
                               "(an empty disk)")
    if disk["size"]:
        argv.append(disk["size"])
    return argv


def seed_meta_data(name, cloud):
    return cloud["meta_data"] or ("instance-id: %s\nlocal-hostname: %s\n" % (name, name))


def seed_digest(name, cloud):
    text = json.dumps([cloud["user_data"], seed_meta_data(name, cloud), cloud["network_config"]])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seed_builder_argv(label, binary, target, names, with_network):
    """The command that builds ``target`` from the files ``names`` (user-data,
    meta-data, network-config). "--" goes before the paths wherever the tool reads it
    as the end of its options (cloud-localds's getopt, genisoimage/mkisofs). In
    xorriso's mkisofs emulation "--" ends the emulation itself, so there the paths
    (absolute, in a folder of our own) follow the options directly."""
    if label == "cloud-localds":
        argv = [binary]
        if with_network:
            argv += ["--network-config", names[2]]
        return argv + ["--", target, names[0], names[1]]
    if label == "xorriso":
        return [binary, "-as", "mkisofs", "-output", target, "-volid", "cidata",
                "-joliet", "-rock"] + names
    return [binary, "-output", target, "-volid", "cidata", "-joliet", "-rock", "--"] + names


def build_seed(module, writer, name, cloud, path):
    """Build the seed ISO of ``cloud`` (the cloud_init option) at ``path``, with the
    first ISO builder found; ``module`` finds and runs it."""
    tool = next(((label, module.get_bin_path(label)) for label in SEED_TOOLS
                 if module.get_bin_path(label)), None)
    if tool is None:
        raise GpuhostError(
            "no ISO builder found (looked for %s)" % ", ".join(SEED_TOOLS),
            field="cloud_init",
            fix="install cloud-utils (cloud-localds) or genisoimage/xorriso, or "
                "give a prebuilt cloud_init.seed_path without user_data")
    work = tempfile.mkdtemp(prefix="gpuhost-seed-")
    try:
        files = {"user-data": cloud["user_data"], "meta-data": seed_meta_data(name, cloud)}
        if cloud["network_config"]:
            files["network-config"] = cloud["network_config"]
        for file_name, content in files.items():
            with open(os.path.join(work, file_name), "w") as out:
                out.write(content)
        names = [os.path.join(work, n) for n in ("user-data", "meta-data", "network-config")
                 if n in files]
        target = os.path.join(work, "seed.iso")
        label, binary = tool
        argv = seed_builder_argv(label, binary, target, names, bool(cloud["network_config"]))
        rc, out, err = module.run_command(argv)
        if rc != 0:
            raise GpuhostError("%s failed (rc %d): %s" % (label, rc, (err or out).strip()),
                               field="cloud_init", fix="check the tool's message")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        writer.write_file(path, read_bytes(target, field="cloud_init"), mode=0o644)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def remove_files(paths):
    """Unlink ``paths``; returns those that were there."""
    removed = []
    for path in paths:
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


class DomainStorage:
    """The overlay, the seed and their record for the domain ``name``. ``module``
    finds and runs the tools (get_bin_path, run_command)."""

    def __init__(self, module, name, state_dir, disk=None, cloud_init=None, writer=None):
        self.module = module
        self.name = name
        self.state_dir = state_dir
        self.disk = disk
        self.cloud_init = cloud_init
        self.writer = writer or HostWriter("/")
        self._record = None
        self._replaced = []        # (seed path, its copy from before this run)

    @property
    def record_path(self):
        return os.path.join(self.state_dir, "%s.json" % self.name)

    def record(self):
        """{"created": [paths], "seed_digest": digest}, read once per run."""
        if self._record is None:
            self._check_replaceable(self.record_path, "state_dir")
            try:
                self._record = json.loads(read_file_text(self.record_path, field="state_dir"))
            except FileNotFoundError:
                self._record = {"created": [], "seed_digest": None}
            except (OSError, ValueError) as exc:
                raise GpuhostError("cannot read %s: %s" % (self.record_path, exc),
                                   field="state_dir",
                                   fix="repair or remove the file (it lists the files the "
                                       "module created for %s)" % self.name)
        return self._record

    def check_state_dir(self):
        """The record's folder, refused now as the writer would refuse it later: a
        relative state_dir, a control character or a '..' in it."""
        if self.state_dir is None:
            return
        absolute_path(self.state_dir, "state_dir", kind="folder of the domains' records")
        self._check_replaceable(self.record_path, "state_dir")

    def _check_replaceable(self, path, option):
        """Refuse now, naming ``option``, what the shared writer would refuse later: a
        '..' component, a link or a non-regular file at ``path``."""
        try:
            self.writer.check_replaceable(path, field=option)
        except GpuhostError as err:
            raise GpuhostError(err.msg, field=option, fix=err.fix) from err

    def plan(self):
        """The StorageSteps that create the overlay and (re)build the seed."""
        steps = []
        disk, cloud = self.disk, self.cloud_init
        if disk and disk["size"] is not None:
            qemu_img_size(disk["size"], field="disk.size")
        if disk and not os.path.exists(disk["path"]):
            steps.append(StorageStep("create overlay %s" % disk["path"], disk["path"],
                                     argv=overlay_argv(self.module.get_bin_path, disk)))
        if cloud and cloud["user_data"] is None:
            if not os.path.exists(cloud["seed_path"]):
                raise GpuhostError(
                    "the seed %s does not exist" % cloud["seed_path"],
                    field="cloud_init.seed_path",
                    fix="build it first (cloud-localds seed.iso user-data meta-data), or give "
                        "cloud_init.user_data and the module builds it")
        elif cloud:
            digest = seed_digest(self.name, cloud)
            record = self.record()
            ours = cloud["seed_path"] in record["created"]
            if os.path.exists(cloud["seed_path"]) and not ours:
                raise GpuhostError(
                    "%s exists and this module did not create it" % cloud["seed_path"],
                    field="cloud_init.seed_path",
                    fix="remove cloud_init.user_data to use that seed as it is, or choose "
                        "another seed_path")
            if not os.path.exists(cloud["seed_path"]) or record.get("seed_digest") != digest:
                steps.append(StorageStep("build seed %s" % cloud["seed_path"],
                                         cloud["seed_path"], seed_digest=digest))
        return steps

    def removable(self):
        """The recorded files that are there to remove."""
        return [path for path in self.record()["created"] if os.path.exists(path)]

    def remove(self, paths):
        """Remove recorded ``paths`` and drop them from the record; returns those
        that were there."""
        record = self.record()
        removed = remove_files(paths)
        after = dict(record, created=[p for p in record["created"] if p not in paths])
        changes = ChangeSet()
        self._record_steps(changes, after)
        changes.apply()
        self._record = after
        return removed

    def files_after(self, steps):
        """The recorded files, and those ``steps`` would add."""
        files = list(self.record()["created"])
        return files + [step.path for step in steps if step.path not in files]

    def changes(self, steps):
        """The shared ChangeSet that makes the files of ``steps`` and then updates the
        record, to be applied with whatever follows (the define): a failure anywhere
        undoes every step before it. An overlay's undo removes it; a rebuilt seed is
        kept aside under a fresh name and put back by the undo, and ``finish`` drops the
        kept copies once the whole set succeeded."""
        changes = ChangeSet()
        before = self.record()
        after = copy.deepcopy(before)
        for step in steps:
            if step.argv is None:
                changes.add(step.label, self._seed_apply(step), self._seed_undo(step))
                after["seed_digest"] = step.seed_digest
            else:
                changes.add(step.label, self._overlay_apply(step), self._remove_undo(step.path))
            if step.path not in after["created"]:
                after["created"].append(step.path)
        if after != before:
            self._record_steps(changes, after)
        return changes

    def _overlay_apply(self, step):
        def apply():
            rc, out, err = self.module.run_command(step.argv)
            if rc != 0:
                raise GpuhostError("%s failed (rc %d): %s" % (step.label, rc, (err or out).strip()),
                                   field="disk", fix="check the base image and the "
                                                     "directory's permissions")
        return apply

    @staticmethod
    def _remove_undo(path):
        def undo():
            remove_files([path])
        return undo

    def _seed_apply(self, step):
        def apply():
            self._check_replaceable(step.path, "cloud_init.seed_path")
            if os.path.exists(step.path):
                self._keep_copy(step.path)
            build_seed(self.module, self.writer, self.name, self.cloud_init, step.path)
        return apply

    def _seed_undo(self, step):
        def undo():
            kept = [backup for path, backup in self._replaced if path == step.path]
            if not kept:
                remove_files([step.path])
                return
            self.writer.write_file(step.path, self.writer.read_bytes(kept[0]), mode=0o644)
            remove_files(kept)
            self._replaced = [pair for pair in self._replaced if pair[0] != step.path]
        return undo

    def _record_steps(self, changes, record):
        """The record as one file of the change set (its undo puts the old one back),
        in a state_dir of mode 0700 made first when it is missing."""
        path = self.record_path
        self._check_replaceable(path, "state_dir")
        if not record["created"]:
            changes.put_file(self.writer, path, None, field="state_dir")
            return
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            made = []

            def make_folder():
                made[:] = self.writer.make_folder(folder, 0o700)

            def remove_folder():
                self.writer.remove_empty_folders(made)
            changes.add("create %s" % folder, make_folder, remove_folder)
        changes.put_file(self.writer, path, json.dumps(record, indent=2, sort_keys=True) + "\n",
                         mode=0o600, field="state_dir")

    def _keep_copy(self, path):
        # A fresh name of our own (mkstemp, O_EXCL), never a fixed one: a link planted
        # at "<seed>.gpuhost-previous" would take the copy. The copy is written by the
        # shared writer over that empty file of ours.
        handle, backup = tempfile.mkstemp(dir=os.path.dirname(path),
                                          prefix=".%s.gpuhost-previous." % os.path.basename(path))
        os.close(handle)
        try:
            self.writer.write_file(backup, self.writer.read_bytes(path), mode=0o600)
        except BaseException:
            remove_files([backup])
            raise
        self._replaced.append((path, backup))

    def finish(self):
        """After the whole change set succeeded: drop the kept copies of rebuilt seeds."""
        remove_files([backup for _path, backup in self._replaced])
        self._replaced = []
