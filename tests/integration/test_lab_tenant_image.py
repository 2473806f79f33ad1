# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab tenant's image (lab/tenant-image/) on this machine: the image archive writer's
format, and the stand-in inference server answering the collection's own KServe v2 load
generator over real loopback HTTP. Loading the archive into Docker and running the
server under systemd and numactl happen on the lab (tests/lab/test_tenant_guest_on_lab.py);
this machine has no container engine."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.guest.kserve_loadgen import run_load
from mlserver_fixture import free_port
from support import REPO

IMAGE_DIR = os.path.join(REPO, "lab", "tenant-image")
SERVER = os.path.join(IMAGE_DIR, "v2server.py")

CLASSIFIER = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 8]}],
              "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}],
              "compute_rounds": 2}


def write_rootfs(path):
    with tarfile.open(path, "w") as rootfs:
        for name, text in (("./etc/os-release", 'PRETTY_NAME="test rootfs"\n'), ("./usr/bin/true", "")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            rootfs.addfile(info, io.BytesIO(text.encode()))


def build_archive(tmp_path, name):
    rootfs = tmp_path / "rootfs.tar"
    if not rootfs.exists():
        write_rootfs(rootfs)
    output = tmp_path / name
    proc = subprocess.run([sys.executable, os.path.join(IMAGE_DIR, "docker_archive.py"),
                           "--rootfs", str(rootfs), "--add", SERVER + ":/opt/v2server/v2server.py",
                           "--tag", "gpuhost-lab/v2server:test", "--cmd=/usr/bin/python3",
                           "--cmd=/opt/v2server/v2server.py", "--cmd=--model-repository=/models",
                           "--port", "8000", "--output", str(output)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return output, proc.stdout


def test_image_archive_is_what_docker_load_reads(tmp_path):
    archive, printed = build_archive(tmp_path, "one.tar")
    with tarfile.open(archive) as image:
        manifest = json.load(image.extractfile("manifest.json"))
        assert len(manifest) == 1 and manifest[0]["RepoTags"] == ["gpuhost-lab/v2server:test"]
        config_bytes = image.extractfile(manifest[0]["Config"]).read()
        config = json.loads(config_bytes)
        # The config is named by its digest, which is the image ID docker load reports.
        assert manifest[0]["Config"] == hashlib.sha256(config_bytes).hexdigest() + ".json"
        assert "sha256:" + manifest[0]["Config"][:-5] in printed
        # Each layer's diff ID is the sha256 of its uncompressed tar, in order.
        layers = [image.extractfile(path).read() for path in manifest[0]["Layers"]]
        assert config["rootfs"] == {"type": "layers", "diff_ids": [
            "sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]}
        assert layers[0] == (tmp_path / "rootfs.tar").read_bytes()
        with tarfile.open(fileobj=io.BytesIO(layers[1])) as files:
            server = files.getmember("opt/v2server/v2server.py")
            assert server.mode == 0o755 and files.getmember("opt/v2server").isdir()
            with open(SERVER, "rb") as handle:
                assert files.extractfile(server).read() == handle.read()
    assert config["architecture"] == "amd64" and config["os"] == "linux"
    assert config["config"]["Cmd"] == ["/usr/bin/python3", "/opt/v2server/v2server.py",
                                       "--model-repository=/models"]
    assert config["config"]["ExposedPorts"] == {"8000/tcp": {}}
    assert len(config["history"]) == 2
    # One recipe, one image ID: a second build is byte-for-byte the same.
    again, dummy = build_archive(tmp_path, "two.tar")
    assert again.read_bytes() == archive.read_bytes()


def start_server(repository, port):
    proc = subprocess.Popen([sys.executable, SERVER, "--model-repository=%s" % repository,
                             "--http-port=%d" % port, "--host=127.0.0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return proc
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/v2/health/ready" % port, timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("v2server did not answer in 30 s")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = tmp_path_factory.mktemp("models")
    (repository / "classifier").mkdir()
    (repository / "classifier" / "config.json").write_text(json.dumps(CLASSIFIER))
    (repository / "not-a-model").mkdir()
    port = free_port()
    proc = start_server(repository, port)
    assert proc.poll() is None, proc.communicate()
    yield "http://127.0.0.1:%d" % port
    proc.terminate()
    # SIGTERM is a clean shutdown (docker stop), not a death by signal.
    assert proc.wait(timeout=10) == 0


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def test_server_speaks_the_v2_protocol(server):
    assert get(server + "/v2/health/live") == (200, {"live": True})
    assert get(server + "/v2/models/classifier/ready") == (200, {"name": "classifier", "ready": True})
    status, metadata = get(server + "/v2/models/classifier/versions/1")
    assert status == 200 and metadata["inputs"] == CLASSIFIER["inputs"]
    status, answer = post(server + "/v2/models/classifier/infer", {"id": "r1", "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [2, 8], "data": [1] * 8 + [0.5] * 8}]})
    assert status == 200 and answer["id"] == "r1"
    assert answer["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [2], "data": [8.0, 4.0]}]
    # Errors are v2 error bodies naming what is wrong.
    assert get(server + "/v2/models/not-a-model/ready") == (404, {"error": "unknown model not-a-model"})
    status, error = post(server + "/v2/models/classifier/infer", {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 8], "data": [0] * 8}]})
    assert status == 400 and error == {"error": "input INPUT0: datatype INT32, the model expects FP32"}
    status, error = post(server + "/v2/models/classifier/infer", {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 8], "data": [0] * 7}]})
    assert status == 400 and "7 elements of data for shape [1, 8]" in error["error"]


def test_load_generator_measures_the_server(server):
    result = run_load(url=server, model="classifier", inputs=[{"name": "INPUT0", "shape": [4, 8], "datatype": "FP32"}],
                      batch_size=4, concurrency=2, warmup_s=0.2, duration_s=1.0)
    assert result["complete"] and result["requests_failed"] == 0 and result["requests_succeeded"] > 20
    latency = result["latency"]
    assert 0 < latency["min_ms"] <= latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    # Headers and body in one segment: no answer waits for a delayed ACK (40 ms on Linux).
    assert latency["p50_ms"] < 40, latency
    assert result["throughput"] == pytest.approx(result["throughput_rps"] * 4, rel=0.01)


def test_load_generator_counts_the_server_refusals(server):
    result = run_load(url=server, model="classifier", inputs=[{"name": "INPUT0", "shape": [4, 9], "datatype": "FP32"}],
                      concurrency=1, warmup_s=0, duration_s=0.3)
    assert result["requests_succeeded"] == 0 and set(result["errors"]) == {"http_400"}
    assert "shape [4, 9] does not match the model's [-1, 8]" in result["error_examples"]["http_400"]
    with pytest.raises(GpuhostError, match="model 'absent' is not ready"):
        run_load(url=server, model="absent", inputs=[{"name": "INPUT0", "shape": [1, 8], "datatype": "FP32"}],
                 concurrency=1, duration_s=0.3)


def test_server_without_models_refuses_to_start(tmp_path):
    proc = start_server(tmp_path, free_port())
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 1 and "no model in %s" % tmp_path in err
