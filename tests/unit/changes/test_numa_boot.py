# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The numa role's boot helper (module_utils/changes/numa_boot.py): in process against small
node trees, and as the role installs it (boot_helper_files: the wrapper and its shipped
library, run by a separate python -I that sees nothing else of the collection)."""

import io
import os
import subprocess
import sys

import jinja2
import pytest

from ansible_collections.gpuhost.kvm.plugins.filter.boot_helper import boot_helper_files
from ansible_collections.gpuhost.kvm.plugins.module_utils.changes import numa_boot
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.writer import HostWriter

from support.helpers import REPO

G1, M2 = 1048576, 2048
PLAN_ROWS = ({"node": 0, "size_kib": G1, "pages": 64}, {"node": 1, "size_kib": M2, "pages": 512})


def _conf(root, rows=PLAN_ROWS, governor=""):
    """numa.conf rendered from the role's own template, at its host path below root."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(REPO, "roles", "numa", "templates")),
                             keep_trailing_newline=True)
    text = env.get_template("numa.conf.j2").render(
        __numa_pages=rows, numa_cpu_governor=governor, __numa_script="/usr/local/libexec/gpuhost/gpuhost-numa-setup",
        __numa_unit="gpuhost-numa.service")
    path = root / "etc" / "gpuhost" / "numa.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def _pool(root, node, size, value):
    path = root / "sys/devices/system/node" / ("node%d" % node) / "hugepages" / ("hugepages-%dkB" % size)
    path.mkdir(parents=True, exist_ok=True)
    (path / "nr_hugepages").write_text("%d\n" % value)
    return path / "nr_hugepages"


def _run(root, *args):
    stderr = io.StringIO()
    code = numa_boot.main(list(args) + ["--root", str(root)], stderr=stderr)
    return code, stderr.getvalue()


def test_the_roles_template_parses_to_the_plans_rows_and_governor(tmp_path):
    rows, governor = numa_boot.parse_numa_conf(_conf(tmp_path, governor="performance"))
    assert rows == [numa_boot.NodePages(0, G1, 64), numa_boot.NodePages(1, M2, 512)]
    assert governor == "performance"
    assert numa_boot.parse_numa_conf(_conf(tmp_path))[1] is None


@pytest.mark.parametrize("line", ["HUGEPAGES 0 2048", "HUGEPAGES 0 2048 -1", "HUGEPAGES x 2048 1",
                                  "HUGEPAGES 0 2048 1 extra", "HUGEPAGES 0 2048 \u0661", "GOVERNOR perf ormance",
                                  "GOVERNOR ../../x", "PAGES 0 2048 1", "HUGEPAGES 00 2048 1"])
def test_a_malformed_line_is_refused_with_its_number(line):
    with pytest.raises(GpuhostError) as info:
        numa_boot.parse_numa_conf("# header\nHUGEPAGES 1 2048 4\n%s\n" % line, "/etc/gpuhost/numa.conf")
    assert "/etc/gpuhost/numa.conf line 3" in info.value.message


def test_a_pool_given_twice_is_refused():
    with pytest.raises(GpuhostError, match="given twice"):
        numa_boot.parse_numa_conf("HUGEPAGES 0 2048 4\nHUGEPAGES 0 2048 8\n")


def test_writes_release_first_then_reserve_per_size():
    rows = [numa_boot.NodePages(0, G1, 64), numa_boot.NodePages(1, M2, 512)]
    held = {(0, G1): 32, (1, G1): 32, (0, M2): 256, (1, M2): 256}
    assert numa_boot.plan_page_writes(rows, held) == [
        (0, M2, 0),              # 2M: node 0 holds pages the plan does not give it
        (1, G1, 0),              # 1G: node 1's boot-time share is released first
        (0, G1, 64), (1, M2, 512)]


def test_pages_move_to_the_planned_nodes(tmp_path):
    _conf(tmp_path)
    # The kernel spread 64 boot-time 1G pages evenly over both nodes.
    pools = [_pool(tmp_path, 0, G1, 32), _pool(tmp_path, 1, G1, 32),
             _pool(tmp_path, 0, M2, 256), _pool(tmp_path, 1, M2, 256)]
    code, err = _run(tmp_path)
    # Moving 1G pages at run time is the fallback for a kernel without the per-node
    # boot form, and the helper says so (exit 0: the pages did move).
    assert code == 0
    assert err.splitlines() == ["gpuhost-numa: " + numa_boot.RUNTIME_GIGANTIC_WARNING % (0, 32, 64)]
    assert "fragmented" in err and "section 13" in err
    assert [p.read_text().strip() for p in pools] == ["64", "0", "0", "512"]


def test_1g_pages_reserved_per_node_at_boot_need_no_run_time_allocation(tmp_path):
    _conf(tmp_path)
    # hugepagesz=1G hugepages=0:64 put them on node 0 at boot: nothing to raise, no warning.
    pools = [_pool(tmp_path, 0, G1, 64), _pool(tmp_path, 1, G1, 0),
             _pool(tmp_path, 0, M2, 0), _pool(tmp_path, 1, M2, 0)]
    code, err = _run(tmp_path)
    assert (code, err) == (0, "")
    assert [p.read_text().strip() for p in pools] == ["64", "0", "0", "512"]


def test_a_missing_pool_fails_naming_the_node(tmp_path):
    _conf(tmp_path)
    _pool(tmp_path, 0, G1, 64)
    code, err = _run(tmp_path)
    assert code == 1 and "no 2048 kB pages on node 1" in err


def test_a_pool_the_kernel_does_not_fill_fails_with_the_way_out(tmp_path, monkeypatch):
    _conf(tmp_path, rows=[{"node": 0, "size_kib": M2, "pages": 512}])
    pool = _pool(tmp_path, 0, M2, 0)
    real_write = HostWriter.write

    def short_write(self, host_path, value):   # the kernel found memory for 100 pages only
        real_write(self, host_path, "100" if int(value) > 100 else value)
    monkeypatch.setattr(HostWriter, "write", short_write)
    code, err = _run(tmp_path)
    assert code == 1 and pool.read_text() == "100"
    assert "node 0 has 100 of 512 pages of 2048 kB; free memory on node 0 or reboot" in err


@pytest.mark.parametrize("content, expected", [(None, "missing"), ("HUGEPAGES 0\n", "line 1")])
def test_a_missing_or_malformed_configuration_exits_2_and_touches_nothing(tmp_path, content, expected):
    pool = _pool(tmp_path, 0, M2, 7)
    if content is not None:
        (tmp_path / "etc/gpuhost").mkdir(parents=True)
        (tmp_path / "etc/gpuhost/numa.conf").write_text(content)
    code, err = _run(tmp_path)
    assert code == 2 and expected in err and pool.read_text() == "7\n"


def test_the_governor_is_set_on_every_cpu_with_cpufreq(tmp_path):
    _conf(tmp_path, rows=[], governor="performance")
    for cpu in (0, 1, 10):
        folder = tmp_path / "sys/devices/system/cpu" / ("cpu%d" % cpu) / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_governor").write_text("powersave\n")
    (tmp_path / "sys/devices/system/cpu/cpu2").mkdir()          # no cpufreq driver: left alone
    assert _run(tmp_path) == (0, "")
    assert sorted(p.read_text() for p in tmp_path.glob("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")) == \
        ["performance"] * 3


def test_the_installed_helper_runs_from_its_shipped_library_alone(tmp_path):
    """What the numa role writes (boot_helper_files), below a root, then run as systemd
    would, by the wrapper itself, with python -I: the library it ships is enough."""
    host = tmp_path / "host"
    library = str(tmp_path / "lib")
    entries = boot_helper_files(str(tmp_path / "gpuhost-numa-setup"), "changes.numa_boot", library=library,
                                interpreter=sys.executable + " -I")
    assert entries[0]["mode"] == "0755" and {e["mode"] for e in entries[1:]} == {"0644"}
    assert any(e["path"].endswith("/module_utils/changes/numa_boot.py") for e in entries)
    for entry in entries:
        os.makedirs(os.path.dirname(entry["path"]), exist_ok=True)
        with open(entry["path"], "w", encoding="utf-8") as handle:
            handle.write(entry["content"])
        os.chmod(entry["path"], int(entry["mode"], 8))
    _conf(host)
    pools = [_pool(host, 0, G1, 32), _pool(host, 1, G1, 32), _pool(host, 0, M2, 0), _pool(host, 1, M2, 0)]
    proc = subprocess.run([entries[0]["path"], "/etc/gpuhost/numa.conf", "--root", str(host)],
                          capture_output=True, text=True, check=False, env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    assert [p.read_text().strip() for p in pools] == ["64", "0", "0", "512"]
