# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/runbook.md claims no more than the newest acceptance record shows: every item's
Status is the one tools/runbook-status computes from that record and the tests the item
cites, every cited test exists, and a Scope that says "proven on the lab" has a cited test
that passed on the lab. The tool's own refusals are shown on a small page and record."""

import json
import os
import subprocess
import sys

import pytest
from support.helpers import REPO

TOOL = os.path.join(REPO, "tools", "runbook_status.py")
CONVERGE = "test_site_on_lab.py::test_site_converges_reboots_for_the_kernel_arguments_and_validates"
UNIT = "test_placement.py::test_vf_needs_a_pf_on_the_tenant_node"


def run_tool(*args):
    return subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True,
                          cwd=REPO, timeout=120, check=False)


def test_the_runbook_states_the_newest_records_status_for_every_item():
    proc = run_tool("--check")
    assert proc.returncode == 0, proc.stderr


def _page(tmp_path, tests, scope="on fakes only", status="to be written"):
    page = tmp_path / "runbook.md"
    page.write_text("# R\n\n### Item\n\nWhat it does.\n\n- Tests: %s\n- Scope: %s\n"
                    "- Status: <!-- status -->%s<!-- /status -->\n" % (tests, scope, status))
    return page


def _record(tmp_path, outcomes):
    record = tmp_path / "acceptance-20990101T0000Z.json"
    record.write_text(json.dumps({"status": "finished", "commit": "0123456789abcdef", "tests": [
        {"nodeid": nodeid, "lane": lane, "outcome": outcome} for nodeid, lane, outcome in outcomes]}))
    return record


PASSED_ON_LAB = [("tests/unit/planning/test_placement.py::test_vf_needs_a_pf_on_the_tenant_node", "host", "passed"),
                 ("tests/lab/test_site_on_lab.py::" + CONVERGE.split("::")[1], "lab-site", "passed")]


def test_write_then_check_agree_and_the_status_names_the_record(tmp_path):
    page = _page(tmp_path, "`%s`, `%s`" % (UNIT, CONVERGE), scope="proven on the lab")
    record = _record(tmp_path, PASSED_ON_LAB)
    assert run_tool("--check", "--runbook", str(page), "--record", str(record)).returncode == 1
    assert run_tool("--write", "--runbook", str(page), "--record", str(record)).returncode == 0
    assert "<!-- status -->proven on the lab in acceptance-20990101T0000Z (0123456): 2 test run(s) " \
           "passed, 1 of them on the lab<!-- /status -->" in page.read_text()
    assert run_tool("--check", "--runbook", str(page), "--record", str(record)).returncode == 0


@pytest.mark.parametrize("tests, words", [
    ("`test_no_such_file.py`", "cites test_no_such_file.py, which no test file is"),
    ("`test_placement.py::test_no_such_test`", "test_placement.py::test_no_such_test, which "
                                               "tests/unit/planning/test_placement.py does not define")])
def test_a_citation_of_a_test_that_does_not_exist_is_an_error(tmp_path, tests, words):
    proc = run_tool("--check", "--runbook", str(_page(tmp_path, tests)),
                    "--record", str(_record(tmp_path, PASSED_ON_LAB)))
    assert proc.returncode == 1 and words in proc.stderr


def test_a_lab_claim_without_a_lab_test_that_passed_is_an_error(tmp_path):
    page = _page(tmp_path, "`%s`" % UNIT, scope="proven on the lab")
    proc = run_tool("--write", "--runbook", str(page), "--record", str(_record(tmp_path, PASSED_ON_LAB)))
    assert proc.returncode == 1 and 'its Scope says "proven on the lab"' in proc.stderr
    assert "proven on fakes only in acceptance-20990101T0000Z" in page.read_text()


def test_a_failed_cited_test_makes_the_item_failed(tmp_path):
    outcomes = [(PASSED_ON_LAB[0][0], "host", "failed"), PASSED_ON_LAB[1]]
    page = _page(tmp_path, "`%s`, `%s`" % (UNIT, CONVERGE))
    assert run_tool("--write", "--runbook", str(page), "--record", str(_record(tmp_path, outcomes))).returncode == 0
    assert "<!-- status -->FAILED in acceptance-20990101T0000Z (0123456): `%s`<!-- /status -->" % UNIT \
        in page.read_text()
