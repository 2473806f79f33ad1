# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/lanes.py: the lanes of tools/test and tools/acceptance, what each selects, their
environments, the merged record, and real pytest runs side by side (small test files of
their own, no lab)."""

import fnmatch
import io
import json
import os
import re
import textwrap
import time
import xml.etree.ElementTree as ET

import pytest
import yaml

import lanes

LANES_BY_NAME = {lane.name: lane for lane in lanes.LANES}


def _selected(argv):
    return argv[len(argv) - 1 - argv[::-1].index("-m") + 1]       # the last -m (not python's)


def test_the_lanes_cover_every_test_once_with_the_tiers_marker():
    host, modules, site = (LANES_BY_NAME[n] for n in ("host", "lab-modules", "lab-site"))
    argv = host.pytest_argv("py", "test")
    assert _selected(argv) == "(not lab) and (not acceptance)" and argv[-1] == "tests"
    argv = modules.pytest_argv("py", "test", ["-k", "boot"])
    assert _selected(argv) == "(lab) and (not acceptance)"
    assert "--ignore=tests/lab/test_site_on_lab.py" in argv and argv[-3:] == ["-k", "boot", "tests/lab"]
    argv = site.pytest_argv("py", "acceptance")
    assert _selected(argv) == "(lab)" and argv[-1] == "tests/lab/test_site_on_lab.py"
    # The site tests are in exactly one lab lane, and the two labs have their own directories.
    assert [lane.name for lane in lanes.LANES if lanes.SITE_TESTS in lane.paths] == ["lab-site"]
    assert len({lane.lab_run for lane in lanes.LANES if lane.lab_run}) == 2


def test_the_unit_tests_run_in_the_units_gate_unless_the_gates_are_left_out():
    host = LANES_BY_NAME["host"]
    assert "--ignore=tests/unit" in host.pytest_argv("py", "test", environ={})
    assert "--ignore=tests/unit" not in host.pytest_argv("py", "test", environ={"GPUHOST_SKIP_QUALITY": "1"})
    # and the gate that runs them is in the gates lane, not in the host lane
    gates_lane = lanes.GATES_LANE
    assert "tests/quality/test_units.py" in gates_lane.paths
    assert "--ignore=tests/quality/test_units.py" in host.pytest_argv("py", "test", environ={})


def test_the_ansible_test_gates_run_once_in_the_matrix_queue_beside_the_host_lane():
    host, gates_lane = LANES_BY_NAME["host"], lanes.GATES_LANE
    argv = gates_lane.pytest_argv("py", "test")
    assert _selected(argv) == "(not lab) and (not acceptance)"
    assert argv[-2:] == list(lanes.GATE_TESTS)
    assert all("--ignore=%s" % path in host.pytest_argv("py", "test") for path in lanes.GATE_TESTS)
    assert gates_lane.queue == lanes.MATRIX_QUEUE and gates_lane.lab_run is None
    assert all(lane.queue == gates_lane.queue for lane in lanes.matrix_lanes("test"))
    assert all(os.path.exists(os.path.join(lanes.REPO, path)) for path in lanes.GATE_TESTS)


def test_without_the_lab_only_the_lanes_without_a_lab_run():
    assert [lane.name for lane in lanes.lanes_for(False)] == ["host", "gates"]
    assert [lane.name for lane in lanes.lanes_for(True)] == ["host", "lab-modules", "lab-site", "gates"]


def test_the_el9like_lane_runs_in_acceptance_only_after_the_lab_site_lane():
    assert "lab-el9like" not in [lane.name for lane in lanes.lanes_for(True, "test")]
    names = [lane.name for lane in lanes.lanes_for(True, "acceptance")]
    assert names == ["host", "lab-modules", "lab-site", "lab-el9like", "gates"]
    assert [lane.name for lane in lanes.lanes_for(False, "acceptance")] == ["host", "gates"]
    el9like = lanes.ACCEPTANCE_LANES[0]
    site, modules = LANES_BY_NAME["lab-site"], LANES_BY_NAME["lab-modules"]
    # one queue: never three labs at once; its test file in no other lane
    assert el9like.queue == site.queue and el9like.queue is not None and modules.queue is None
    assert el9like.paths == (lanes.EL9LIKE_TESTS,) and lanes.EL9LIKE_TESTS in modules.ignore
    assert el9like.lab_run not in {lane.lab_run for lane in lanes.LANES}
    assert not _port_range(el9like.lab_ports) & (_port_range(site.lab_ports) | _port_range(modules.lab_ports))
    assert os.path.exists(os.path.join(lanes.REPO, lanes.EL9LIKE_TESTS))


def _port_range(text):
    first, last = (int(port) for port in text.split("-"))
    return set(range(first, last + 1))


def test_each_lab_has_its_own_run_directory_and_port_range():
    modules, site = LANES_BY_NAME["lab-modules"], LANES_BY_NAME["lab-site"]
    # Disjoint ranges inside lab/up's default: two boots never race for one port, and a
    # lab booted again after a reset finds another port while its last one lingers.
    assert not _port_range(modules.lab_ports) & _port_range(site.lab_ports)
    assert _port_range(modules.lab_ports) | _port_range(site.lab_ports) <= _port_range("2222-2299")
    base = {"PATH": "/bin", "GPUHOST_LAB_PORT": "2222"}
    env = lanes.lane_environ(modules, base, record_stem="bench/results/acceptance-X")
    assert env["GPUHOST_LAB_RUN"] == os.path.join(lanes.REPO, "lab/.run-modules")
    assert env["GPUHOST_LAB_PORTS"] == modules.lab_ports
    assert "GPUHOST_LAB_PORT" not in env              # a pinned port cannot serve two labs
    assert env["GPUHOST_ACCEPTANCE_RECORD"].endswith("lanes-output/acceptance-X.lab-modules.json")
    host_env = lanes.lane_environ(LANES_BY_NAME["host"], base)
    assert "GPUHOST_LAB_RUN" not in host_env and "GPUHOST_ACCEPTANCE_RECORD" not in host_env


def _part(status, tests, exit_status=0, kernel=None, in_progress=None):
    counts = dict.fromkeys(("passed", "failed", "skipped", "error"), 0)
    for test in tests:
        counts[test["outcome"]] += 1
    return {"status": status, "tests": tests, "counts": counts, "pytest_exitstatus": exit_status,
            "commit": "abc", "dirty": False, "qemu_version": "QEMU 10", "lab_kernel": kernel,
            "in_progress": in_progress, "wall_s": 5.0, "pytest_args": ["-m", "x"]}


def test_the_merged_record_sums_the_lanes_and_finishes_only_with_all_of_them():
    host = _part("finished", [{"nodeid": "a", "outcome": "passed", "duration_s": 1}])
    site = _part("finished", [{"nodeid": "b", "outcome": "failed", "duration_s": 2}], exit_status=1,
                 kernel="6.1.0")
    merged = lanes.merge_records({"host": host, "lab-site": site}, "tools/acceptance", 100.0, 160.0)
    assert merged["status"] == "finished" and merged["wall_s"] == 60.0
    assert merged["counts"] == {"passed": 1, "failed": 1, "skipped": 0, "error": 0}
    assert [(t["nodeid"], t["lane"]) for t in merged["tests"]] == [("a", "host"), ("b", "lab-site")]
    assert merged["lab_kernel"] == "6.1.0" and merged["commit"] == "abc"
    assert merged["pytest_exitstatus"] == 1 and merged["lanes"]["lab-site"]["pytest_exitstatus"] == 1

    site_running = _part("running", [], exit_status=None, in_progress="b")
    running = lanes.merge_records({"host": host, "lab-site": site_running}, "tools/acceptance", 100.0, 130.0)
    assert running["status"] == "running" and running["ended"] is None and running["in_progress"] == ["b"]
    assert running["pytest_exitstatus"] is None
    missing = lanes.merge_records({"host": host, "lab-site": None}, "tools/acceptance", 100.0, 130.0)
    assert missing["status"] == "running" and missing["lanes"]["lab-site"] == {"status": "not started"}
    assert missing["lab_kernel_unavailable"]
    # pytest's "no tests collected" (5) in one lane is not a failure of the run.
    quiet = lanes.merge_records({"host": host, "lab-site": _part("finished", [], exit_status=5)},
                                "tools/acceptance", 100.0, 130.0)
    assert quiet["pytest_exitstatus"] == 0


def test_the_merged_record_names_the_ansible_core_each_lane_ran():
    newest = dict(_part("finished", []), ansible_core_version="2.19.4", python_version="3.11.2")
    oldest = dict(_part("finished", []), ansible_core_version="2.14.18", python_version="3.11.2")
    merged = lanes.merge_records({"host": newest, "ansible-2.14": oldest}, "tools/acceptance", 100.0, 130.0)
    assert merged["lanes"]["host"]["ansible_core_version"] == "2.19.4"
    assert merged["lanes"]["ansible-2.14"]["ansible_core_version"] == "2.14.18"
    assert merged["lanes"]["ansible-2.14"]["python_version"] == "3.11.2"


def test_the_merged_junit_has_a_suite_per_lane(tmp_path):
    for name in ("host", "lab-site"):
        (tmp_path / (name + ".xml")).write_text(
            '<testsuites><testsuite name="pytest" tests="1"><testcase name="t_%s"/></testsuite></testsuites>'
            % name.replace("-", "_"))
    tree = lanes.merge_junit([str(tmp_path / "host.xml"), str(tmp_path / "lab-site.xml"),
                              str(tmp_path / "missing.xml")], ["host", "lab-site", "lab-modules"])
    suites = tree.getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == ["host", "lab-site"]
    assert [c.get("name") for s in suites for c in s] == ["t_host", "t_lab_site"]


def test_the_merged_junit_keeps_the_tests_a_lane_ran_nested(tmp_path):
    stem = str(tmp_path / "acceptance-X")
    host = LANES_BY_NAME["host"]
    nested = tmp_path / "units.xml"
    nested.write_text('<testsuites><testsuite name="pytest" tests="1"><testcase name="t_unit"/></testsuite></testsuites>')
    os.makedirs(lanes.LANE_OUTPUT)
    with open(lanes.part_path(stem, host, "xml"), "w", encoding="utf-8") as handle:
        handle.write('<testsuites><testsuite name="pytest" tests="1"><testcase name="t_gate"/></testsuite></testsuites>')
    with open(lanes.part_path(stem, host, "json"), "w", encoding="utf-8") as handle:
        json.dump(dict(_part("finished", []), nested_junitxml=[str(nested)]), handle)
    recorder = lanes.Recorder.__new__(lanes.Recorder)      # without removing the parts just written
    recorder.stem, recorder.lanes, recorder.command, recorder.started = stem, [host], "tools/acceptance", 0.0
    recorder.cpu_s = {}
    recorder.finish()
    suites = ET.parse(stem + ".xml").getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == ["host", "host (units.xml)"]
    assert [c.get("name") for s in suites for c in s] == ["t_gate", "t_unit"]


@pytest.fixture(autouse=True)
def _lane_output(tmp_path, monkeypatch):
    # The lanes' logs and parts go to the test's own directory, not tests/output/lanes/.
    monkeypatch.setattr(lanes, "LANE_OUTPUT", str(tmp_path / "lanes-output"))


def _lane_files(tmp_path, bodies):
    """A test file per lane and the lanes that run them with real pytest (no conftest of the
    repository: rootdir and ini are the temporary directory's)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    result = []
    for name, body in bodies.items():
        path = tmp_path / ("test_%s.py" % name.replace("-", "_"))
        path.write_text(textwrap.dedent(body))
        result.append(lanes.Lane(name, "", (str(path),)))
    return result


def _environ():
    # A lane is a fresh pytest: not one that inherits the plugins ansible-test units hands
    # its own pytest through the environment (they refuse files outside the collection).
    return {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}


def _extra(tmp_path):
    return ["-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini")]


def test_lanes_run_side_by_side_with_prefixed_output_and_one_exit_status(tmp_path, capsys):
    started = tmp_path / "started"
    started.mkdir()
    # Each test waits until the other lane's test has started: only side by side do both pass.
    body = """
        import os, time
        def test_waits_for_the_other_lane():
            open(os.path.join(%r, %r), "w").close()
            deadline = time.time() + 60
            while len(os.listdir(%r)) < 2:
                assert time.time() < deadline, "the other lane never started"
                time.sleep(0.1)
            print("lane %s done")
        """
    run = _lane_files(tmp_path, {name: body % (str(started), name, str(started), name)
                                 for name in ("one", "two")})
    out = io.StringIO()
    status = lanes.run_lanes(run, "acceptance", _extra(tmp_path) + ["-s"], "test", out=out,
                             base_env=_environ())
    assert status == 0, out.getvalue()
    lines = out.getvalue().splitlines()
    for name in ("one", "two"):
        assert any(line.startswith("[%s] " % name) and "lane %s done" % name in line for line in lines), name
    said = capsys.readouterr().out
    assert "one exit 0" in said
    # Each lane's CPU time (its pytest and the processes it waited for), from wait4.
    assert re.search(r"lane one ended: exit status 0 after \d+ s, \d+ s of CPU", said), said
    assert re.search(r"two exit 0 in \d+ s, \d+ s of CPU", said), said
    with open(os.path.join(lanes.LANE_OUTPUT, "two.log"), encoding="utf-8") as handle:
        assert "lane two done" in handle.read()


def test_one_failing_lane_fails_the_run_and_serial_runs_one_at_a_time(tmp_path):
    marker = tmp_path / "first-ran"
    run = _lane_files(tmp_path, {
        "first": "import pathlib\ndef test_ok():\n    pathlib.Path(%r).touch()\n" % str(marker),
        "second": "import pathlib\ndef test_after_first():\n    assert pathlib.Path(%r).exists()\n"
                  "def test_fails():\n    assert False\n" % str(marker),
    })
    out = io.StringIO()
    assert lanes.run_lanes(run, "acceptance", _extra(tmp_path), "test", serial=True, out=out,
                           base_env=_environ()) == 1
    assert "1 failed, 1 passed" in out.getvalue()


def test_a_lane_that_selects_nothing_passes(tmp_path):
    run = _lane_files(tmp_path, {"one": "def test_ok():\n    pass\n"})
    out = io.StringIO()
    assert lanes.run_lanes(run, "acceptance", _extra(tmp_path) + ["-k", "nothing_has_this_name"], "test",
                           out=out, base_env=_environ()) == 0


def test_the_deadline_stops_every_lane_and_says_so(tmp_path, capsys):
    run = _lane_files(tmp_path, {"slow": "import time\ndef test_slow():\n    time.sleep(120)\n"})
    out = io.StringIO()
    start = time.monotonic()
    status = lanes.run_lanes(run, "acceptance", _extra(tmp_path), "test", deadline_at=time.time() + 3,
                             out=out, grace_s=2, base_env=_environ())
    assert status == 124
    assert time.monotonic() - start < 60
    assert "the deadline has come: SIGTERM to the lanes still running (slow)" in capsys.readouterr().out


def test_acceptance_lanes_leave_one_record_and_one_junit(tmp_path):
    run = _lane_files(tmp_path, {"one": "def test_a():\n    pass\n", "two": "def test_b():\n    pass\n"})
    stem = str(tmp_path / "acceptance-T")
    # The record plugin is registered as tests/conftest.py registers it.
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import os, sys
        sys.path.insert(0, %r)
        import acceptance_record
        def pytest_configure(config):
            record = acceptance_record.from_environ(os.environ, %r)
            if record is not None:
                config.pluginmanager.register(record, "record")
        """ % (os.path.dirname(lanes.__file__), lanes.REPO)))
    recorder = lanes.Recorder(stem, run, "tools/acceptance", time.time())
    status = lanes.run_lanes(run, "acceptance", _extra(tmp_path), "acceptance", record=recorder,
                             out=io.StringIO(), base_env=_environ())
    merged = recorder.finish()
    assert status == 0
    with open(stem + ".json", encoding="utf-8") as handle:
        assert json.load(handle) == merged
    assert merged["status"] == "finished" and merged["counts"]["passed"] == 2
    assert sorted(t["lane"] for t in merged["tests"]) == ["one", "two"]
    assert all(merged["lanes"][name]["cpu_s"] > 0 for name in ("one", "two")), merged["lanes"]
    suites = ET.parse(stem + ".xml").getroot().findall("testsuite")
    assert sorted(s.get("name") for s in suites) == ["one", "two"]
    line, verdict_status = lanes.acceptance_record.verdict(merged, status, stem + ".json")
    assert verdict_status == 0 and "PASSED: 2 passed" in line


def test_the_scripts_run_the_lanes():
    for name in ("test", "acceptance"):
        with open(os.path.join(lanes.REPO, "tools", name), encoding="utf-8") as handle:
            text = handle.read()
        assert 'tests/lanes.py" --tier %s' % name in text, name


def test_the_labs_directories_are_ignored_by_git_and_left_out_of_the_collection():
    # A lab directory holds a multi-GiB overlay and the QEMU monitor's socket, which
    # ansible-galaxy cannot pack (the build fails on it).
    with open(os.path.join(lanes.REPO, "galaxy.yml"), encoding="utf-8") as handle:
        build_ignore = yaml.safe_load(handle)["build_ignore"]
    with open(os.path.join(lanes.REPO, ".gitignore"), encoding="utf-8") as handle:
        gitignore = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
    for lane in lanes.LANES:
        if lane.lab_run:
            assert any(fnmatch.fnmatch(lane.lab_run, pattern) for pattern in build_ignore), lane.lab_run
            # Read as patterns, not through git: ansible-test units runs from a copy without .git.
            assert any(fnmatch.fnmatch(lane.lab_run + "/", pattern) for pattern in gitignore), lane.lab_run


# -- the ansible-core matrix --------------------------------------------------------------
def _minor(version):
    return tuple(int(part) for part in version.split(".")[:2])


def test_the_matrix_spans_every_minor_from_the_stated_floor_to_the_newest():
    matrix = lanes.read_matrix()
    minors = [_minor(version) for version, _tier in matrix]
    with open(os.path.join(lanes.REPO, "requirements.txt"), encoding="utf-8") as handle:
        newest = re.search(r"^ansible-core==(\S+)$", handle.read(), re.M).group(1)
    # The main .venv has the newest; the matrix every minor below it, down to the floor.
    assert minors + [_minor(newest)] == [(2, minor) for minor in range(minors[0][1], _minor(newest)[1] + 1)]
    with open(os.path.join(lanes.REPO, "meta", "runtime.yml"), encoding="utf-8") as handle:
        floor = yaml.safe_load(handle)["requires_ansible"]
    assert floor == ">=%d.%d.0" % minors[0]
    for meta in sorted(os.listdir(os.path.join(lanes.REPO, "roles"))):
        with open(os.path.join(lanes.REPO, "roles", meta, "meta", "main.yml"), encoding="utf-8") as handle:
            assert yaml.safe_load(handle)["galaxy_info"]["min_ansible_version"] == "%d.%d" % minors[0], meta
    # tools/test runs the oldest; tools/acceptance every one.
    assert [tier for _version, tier in matrix] == ["test"] + ["acceptance"] * (len(matrix) - 1)


def test_the_matrix_lanes_run_the_same_tests_each_in_its_versions_venv():
    assert [lane.name for lane in lanes.matrix_lanes("test")] == ["ansible-2.14"]
    every = lanes.matrix_lanes("acceptance")
    assert [lane.name for lane in every] == ["ansible-%d.%d" % _minor(v) for v, _tier in lanes.read_matrix()]
    for lane in every:
        assert lane.paths == lanes.MATRIX_TESTS and lane.queue == lanes.MATRIX_QUEUE and lane.lab_run is None
        assert lane.venv == ".venv-%s" % lane.name
        env = lanes.lane_environ(lane, {"PATH": "/usr/bin"})
        assert env["GPUHOST_VENV"] == os.path.join(lanes.REPO, lane.venv)
        assert env["PATH"] == os.path.join(lanes.REPO, lane.venv, "bin") + os.pathsep + "/usr/bin"
        assert _selected(lane.pytest_argv("py", "test")) == "(not lab) and (not acceptance)"
    for path in lanes.MATRIX_TESTS:
        assert os.path.isfile(os.path.join(lanes.REPO, path)), path
    # every module command-line test, and the playbooks of the runbook: the same files
    # the host lane runs on the newest
    integration = os.path.join(lanes.REPO, "tests", "integration")
    for name in sorted(os.listdir(integration)):
        if name.endswith("_cli.py"):
            assert "tests/integration/" + name in lanes.MATRIX_TESTS, name
    assert "tests/quality/test_sanity.py" in lanes.MATRIX_TESTS


def test_a_malformed_matrix_line_is_refused_with_its_place(tmp_path):
    path = tmp_path / "matrix.txt"
    path.write_text("# comment\n2.14.18 test  # the oldest\n2.15 acceptance\n")
    with pytest.raises(ValueError, match=r"matrix.txt:3: expected 'VERSION TIER'"):
        lanes.read_matrix(str(path))
    path.write_text("2.14.18 nightly\n")
    with pytest.raises(ValueError, match="nightly"):
        lanes.read_matrix(str(path))


def test_tools_setup_builds_the_matrix_with_the_main_venvs_pins():
    with open(os.path.join(lanes.REPO, "tools", "setup"), encoding="utf-8") as handle:
        setup = handle.read()
    assert "tests/ansible-matrix.txt" in setup and ".venv-ansible-$minor" in setup
    pins = re.search(r"^MATRIX_PINS=\(([^)]*)\)$", setup, re.M).group(1).split()
    with open(os.path.join(lanes.REPO, "requirements.txt"), encoding="utf-8") as handle:
        pinned = {line.split("==")[0].lower() for line in handle if "==" in line}
    assert "pytest" in pins and set(pins) <= pinned
    # tools/test builds only its versions, tools/acceptance every one
    with open(os.path.join(lanes.REPO, "tools", "acceptance"), encoding="utf-8") as handle:
        assert '"$here/tools/setup" --tier acceptance' in handle.read()
    # the matrix's venvs are neither committed nor packed into the collection
    with open(os.path.join(lanes.REPO, "galaxy.yml"), encoding="utf-8") as handle:
        build_ignore = yaml.safe_load(handle)["build_ignore"]
    with open(os.path.join(lanes.REPO, ".gitignore"), encoding="utf-8") as handle:
        gitignore = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
    for lane in lanes.matrix_lanes("acceptance"):
        assert any(fnmatch.fnmatch(lane.venv, pattern) for pattern in build_ignore), lane.venv
        assert any(fnmatch.fnmatch(lane.venv + "/", pattern) for pattern in gitignore), lane.venv


def test_a_lane_runs_its_venvs_pytest_and_lanes_of_one_queue_one_after_another(tmp_path):
    import dataclasses
    import sys
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    flags = tmp_path / "flags"
    flags.mkdir()
    first, second, beside = _lane_files(tmp_path, {
        # the first of the queue: its python is the venv's, and the lane beside it runs meanwhile
        "first": """
            import os, sys, time
            def test_first():
                assert sys.executable == %r and os.environ["GPUHOST_VENV"] == %r
                open(os.path.join(%r, "first-started"), "w").close()
                deadline = time.time() + 60
                while not os.path.exists(os.path.join(%r, "beside-started")):
                    assert time.time() < deadline, "the lane beside never started"
                    time.sleep(0.1)
                assert not os.path.exists(os.path.join(%r, "second-started"))
                open(os.path.join(%r, "first-done"), "w").close()
            """ % (str(venv / "bin" / "python"), str(venv), str(flags), str(flags), str(flags), str(flags)),
        "second": """
            import os
            def test_second():
                open(os.path.join(%r, "second-started"), "w").close()
                assert os.path.exists(os.path.join(%r, "first-done"))
            """ % (str(flags), str(flags)),
        "beside": """
            import os
            def test_beside():
                open(os.path.join(%r, "beside-started"), "w").close()
            """ % str(flags),
    })
    run = [dataclasses.replace(first, venv=str(venv), queue="q"), dataclasses.replace(second, queue="q"), beside]
    out = io.StringIO()
    status = lanes.run_lanes(run, "acceptance", _extra(tmp_path), "test", out=out, base_env=_environ())
    assert status == 0, out.getvalue()
    # each lane ran its one test, and passed it
    assert out.getvalue().count("1 passed") == 3, out.getvalue()


def test_a_missing_matrix_venv_is_refused_before_any_lane_starts(monkeypatch, capsys):
    lane = lanes.Lane("ansible-0.1", "not lab", lanes.MATRIX_TESTS, venv=".venv-ansible-0.1",
                      queue=lanes.MATRIX_QUEUE)
    monkeypatch.setattr(lanes, "matrix_lanes", lambda tier: [lane])
    monkeypatch.setattr(lanes, "run_lanes", lambda *args, **kwargs: pytest.fail("a lane started"))
    with pytest.raises(SystemExit) as exit_info:
        lanes.main(["--tier", "test", "--no-lab"])
    assert exit_info.value.code == 2
    said = capsys.readouterr().err
    assert "environments .venv-ansible-0.1 are missing" in said and "run tools/setup --tier test" in said
