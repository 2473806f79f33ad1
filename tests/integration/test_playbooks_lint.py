"""ansible-lint with the production profile passes on the roles and playbooks (an
acceptance criterion), and on the molecule scenarios, which are playbooks an SRE reads
too. Skips and ignores live in .ansible-lint / .ansible-lint-ignore with reasons."""

from support.helpers import run_tool


def test_ansible_lint_production_profile_passes():
    proc = run_tool("ansible-lint", "--offline", "--nocolor", "-f", "pep8", "--profile",
                    "production", "roles", "playbooks", "site.yml", "molecule", check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert "Profile 'production' was required, and it passed" in proc.stderr + proc.stdout
