"""Module documentation as users see it: ansible-doc lists exactly the modules in
plugins/modules/, and renders each one's DOCUMENTATION, EXAMPLES and RETURN.

(The schema check of those blocks is ansible-test's validate-modules sanity test, run by
tests/quality/test_sanity.py.)"""

import json
import os

import pytest
import yaml

from support.helpers import REPO, run_tool

MODULES_DIR = os.path.join(REPO, "plugins", "modules")
MODULE_FILES = sorted(os.path.splitext(name)[0] for name in os.listdir(MODULES_DIR)
                      if name.endswith(".py") and not name.startswith("_"))


def test_ansible_doc_lists_every_module_file():
    proc = run_tool("ansible-doc", "-t", "module", "-l", "--json", "gpuhost.kvm")
    listed = sorted(name.split(".", 2)[2] for name in json.loads(proc.stdout))
    assert listed == MODULE_FILES


@pytest.fixture(scope="module")
def module_docs():
    proc = run_tool("ansible-doc", "-t", "module", "--json",
                    *["gpuhost.kvm." + name for name in MODULE_FILES])
    return json.loads(proc.stdout)


@pytest.mark.parametrize("name", MODULE_FILES)
def test_module_doc_renders_with_examples_and_return(module_docs, name):
    doc = module_docs["gpuhost.kvm." + name]
    assert doc["doc"]["module"] == name
    assert doc["doc"]["short_description"]
    assert set(doc["doc"]["attributes"]) >= {"check_mode", "diff_mode"}
    examples = yaml.safe_load(doc["examples"])
    assert examples, "EXAMPLES is empty"
    task_keywords = {"name", "register", "when", "loop", "vars", "check_mode", "diff",
                     "become", "delegate_to", "notify", "tags", "changed_when",
                     "failed_when", "environment", "no_log", "loop_control", "until",
                     "retries", "delay", "ignore_errors", "run_once"}
    for task in examples:
        assert task.get("name"), task
        actions = [key for key in task if key not in task_keywords]
        assert len(actions) == 1 and actions[0].count(".") == 2, \
            "example task %r does not name one action by its FQCN: %r" % (task["name"], actions)
    assert any("gpuhost.kvm." + name in task for task in examples), \
        "no example calls gpuhost.kvm.%s" % name
    assert doc["return"], "RETURN is empty"
