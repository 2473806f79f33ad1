"""The documentation site (tools/docs-site): antsibull-docs plus Sphinx with warnings as
errors, covering every module, every role with its argument spec, and the playbooks."""

import glob
import os
import subprocess

import pytest

import gates
from gates import output_of, run_gate
from support.helpers import REPO

pytestmark = gates.ENABLED


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs")
    proc = run_gate([os.path.join(REPO, "tools", "docs-site"), "build", str(out)])
    return proc, out


def test_site_builds_without_warnings(site):
    proc, out = site
    assert proc.returncode == 0, output_of(proc)
    assert "WARNING" not in proc.stdout + proc.stderr
    assert (out / "html" / "index.html").is_file()


def test_site_has_a_page_per_module_and_role_and_the_playbooks(site):
    out = site[1]
    pages = out / "html" / "collections" / "gpuhost" / "kvm"
    modules = [os.path.splitext(os.path.basename(p))[0]
               for p in glob.glob(os.path.join(REPO, "plugins", "modules", "*.py"))]
    for module in modules:
        assert (pages / ("%s_module.html" % module)).is_file(), module
    for role_spec in glob.glob(os.path.join(REPO, "roles", "*", "meta", "argument_specs.yml")):
        role = role_spec.split(os.sep)[-3]
        page = (pages / ("%s_role.html" % role)).read_text(encoding="utf-8")
        assert "Entry point" in page, role     # the argument spec is rendered
    guide = (pages / "docsite" / "playbooks.html").read_text(encoding="utf-8")
    for playbook in glob.glob(os.path.join(REPO, "playbooks", "*.yml")):
        name = os.path.splitext(os.path.basename(playbook))[0]
        assert ">%s<" % name in guide, "playbooks guide does not describe %s" % name


def test_every_plugin_and_role_documents_itself():
    proc = subprocess.run([os.path.join(REPO, "tools", "docs-site"), "lint"], cwd=REPO,
                          capture_output=True, text=True, timeout=900, check=False)
    problems = [line for line in (proc.stdout + proc.stderr).splitlines()
                if line.startswith(("plugins/", "roles/", "docs/", "meta/"))]
    assert proc.returncode == 0, "\n".join(problems) or output_of(proc)
