"""ansible-lint gate: the production profile, and no skip without its reason.

The lint run itself (ansible-lint --profile production over roles/, playbooks/ and
site.yml) is tests/integration/test_playbooks_lint.py; running it twice would only cost
time. These tests hold the configuration to the rule that every skip is justified."""

import os

import yaml

import gates
from support.helpers import REPO

pytestmark = gates.ENABLED


def test_lint_config_is_the_production_profile_without_a_skip_list():
    with open(os.path.join(REPO, ".ansible-lint"), encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    assert config["profile"] == "production"
    assert not config.get("skip_list"), \
        "skip rules per file in .ansible-lint-ignore, each with its reason"
    assert not config.get("warn_list"), "a warning that never fails is a silent skip"


def test_every_lint_ignore_line_gives_its_reason():
    path = os.path.join(REPO, ".ansible-lint-ignore")
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        # "path rule # reason", or the reason on the comment line just above.
        reason_here = "#" in line and line.split("#", 1)[1].strip()
        reason_above = number > 1 and lines[number - 2].lstrip().startswith("#")
        assert reason_here or reason_above, \
            ".ansible-lint-ignore:%d skips without a reason: %s" % (number, line)
