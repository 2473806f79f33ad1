# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writes a Docker image archive (the "docker save" format: manifest.json, the image
config named by its digest, one layer.tar per layer; "docker load" and "podman load"
read it) from a root file system tar plus files added on top, with no Docker daemon and
no registry. The layers are the tars themselves, so their diff IDs are their sha256.

    docker_archive.py --rootfs rootfs.tar --add src:/dest [--add ...] --tag name:tag
                      --cmd ARG [--cmd ARG ...] [--port 8000] --output image.tar
"""

import argparse
import hashlib
import io
import json
import os
import tarfile

# Fixed, so that one recipe always gives the same image ID.
CREATED = "2026-01-01T00:00:00Z"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_layer(additions, path):
    """A layer tar holding each (source, destination) file, with its parent directories."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as layer:
        made = set()
        for source, dest in additions:
            parts = dest.strip("/").split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory not in made:
                    info = tarfile.TarInfo(directory)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    layer.addfile(info)
                    made.add(directory)
            with open(source, "rb") as handle:
                data = handle.read()
            info = tarfile.TarInfo("/".join(parts))
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            layer.addfile(info, io.BytesIO(data))


def write_archive(rootfs, additions, tag, cmd, ports, output):
    staging = output + ".files-layer.tar"
    files_layer(additions, staging)
    layers = [(rootfs, "mmdebstrap root file system"),
              (staging, "add " + ", ".join(dest for dummy, dest in additions))]
    diff_ids = [sha256_of(path) for path, dummy in layers]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": CREATED,
        "config": {"Env": [PATH_ENV], "Cmd": cmd, "WorkingDir": "/",
                   "ExposedPorts": {"%d/tcp" % port: {} for port in ports}},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + d for d in diff_ids]},
        "history": [{"created": CREATED, "created_by": why} for dummy, why in layers],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [tag],
                 "Layers": ["%s/layer.tar" % d for d in diff_ids]}]
    try:
        with tarfile.open(output, "w", format=tarfile.PAX_FORMAT) as archive:
            for (path, dummy), diff_id in zip(layers, diff_ids):
                info = archive.gettarinfo(path, arcname="%s/layer.tar" % diff_id)
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                with open(path, "rb") as handle:
                    archive.addfile(info, handle)
            for name, data in ((config_name, config_bytes),
                               ("manifest.json", json.dumps(manifest).encode())):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                archive.addfile(info, io.BytesIO(data))
    finally:
        os.unlink(staging)
    return config_name[:-len(".json")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--rootfs", required=True)
    parser.add_argument("--add", action="append", default=[], metavar="SRC:/DEST")
    parser.add_argument("--tag", required=True)
    parser.add_argument("--cmd", action="append", required=True)
    parser.add_argument("--port", action="append", type=int, default=[])
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    additions = [tuple(item.split(":", 1)) for item in args.add]
    image_id = write_archive(args.rootfs, additions, args.tag, args.cmd, args.port, args.output)
    print("image %s (sha256:%s)" % (args.tag, image_id))


if __name__ == "__main__":
    main()
