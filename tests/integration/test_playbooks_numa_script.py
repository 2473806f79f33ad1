"""The numa role's boot-time script, rendered from its real template and run with sh
against a small node tree (GPUHOST_SYSFS points it there instead of /sys)."""

import os
import subprocess

import jinja2

from helpers import REPO

ROLE = os.path.join(REPO, "roles", "numa", "templates")


def _render(tmp_path):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE), keep_trailing_newline=True)
    conf = tmp_path / "numa.conf"
    values = {"__numa_conf": str(conf), "__numa_script": str(tmp_path / "setup"),
              "__numa_unit": "gpuhost-numa.service", "numa_cpu_governor": "",
              "__numa_pages": [{"node": 0, "size_kib": 1048576, "pages": 64},
                               {"node": 1, "size_kib": 2048, "pages": 512}]}
    conf.write_text(env.get_template("numa.conf.j2").render(**values))
    script = tmp_path / "setup"
    script.write_text(env.get_template("gpuhost-numa-setup.sh.j2").render(**values))
    return conf, script


def _pool(sysfs, node, size, value):
    path = sysfs / "devices/system/node" / ("node%d" % node) / "hugepages" / (
        "hugepages-%dkB" % size)
    path.mkdir(parents=True, exist_ok=True)
    (path / "nr_hugepages").write_text("%d\n" % value)
    return path / "nr_hugepages"


def test_pages_move_to_the_planned_nodes(tmp_path):
    conf, script = _render(tmp_path)
    sysfs = tmp_path / "sys"
    # The kernel spread 64 boot-time 1G pages evenly over both nodes.
    n0_1g, n1_1g = _pool(sysfs, 0, 1048576, 32), _pool(sysfs, 1, 1048576, 32)
    n0_2m, n1_2m = _pool(sysfs, 0, 2048, 256), _pool(sysfs, 1, 2048, 256)
    proc = subprocess.run(["sh", str(script), str(conf)], capture_output=True, text=True,
                          env=dict(os.environ, GPUHOST_SYSFS=str(sysfs)), check=False)
    assert proc.returncode == 0, proc.stderr
    assert [p.read_text().strip() for p in (n0_1g, n1_1g, n0_2m, n1_2m)] == \
        ["64", "0", "0", "512"]


def test_missing_pool_fails_with_the_node_named(tmp_path):
    conf, script = _render(tmp_path)
    sysfs = tmp_path / "sys"
    _pool(sysfs, 0, 1048576, 64)
    proc = subprocess.run(["sh", str(script), str(conf)], capture_output=True, text=True,
                          env=dict(os.environ, GPUHOST_SYSFS=str(sysfs)), check=False)
    assert proc.returncode == 1
    assert "no 2048 kB pages on node 1" in proc.stderr


def test_missing_configuration_fails(tmp_path):
    script = _render(tmp_path)[1]
    proc = subprocess.run(["sh", str(script), str(tmp_path / "absent.conf")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "missing" in proc.stderr
