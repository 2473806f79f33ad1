"""Patterns that validate a whole value end in \\Z, never in $: Python's $ also matches
before a trailing newline, so re.match(r"^name$", "name\\n") accepts a tenant or domain
name, an address or a sysfs entry with a newline in it.
Checked over every pattern in plugins/, and on the names themselves."""

import glob
import os
import re

import pytest

from support.helpers import REPO
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import DOMAIN_NAME, domain_name
from ansible_collections.gpuhost.kvm.plugins.module_utils.planning.placement import tenant_request_from_dict

# A raw string literal that ends in $ and is not compiled or searched with re.M.
_DOLLAR_END = re.compile(r"""r(["'])[^"']*\$\1""")


def test_no_pattern_in_plugins_ends_in_dollar_without_multiline():
    offenders = []
    for path in glob.glob(os.path.join(REPO, "plugins", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if _DOLLAR_END.search(line) and "re.M" not in line:
                    offenders.append("%s:%d: %s" % (os.path.relpath(path, REPO), number, line.strip()))
    assert not offenders, offenders


@pytest.mark.parametrize("name", ["tenant-a\n", "tenant-a\n\n", "\ntenant-a"])
def test_names_with_a_newline_do_not_match(name):
    assert DOMAIN_NAME.match(name) is None and DOMAIN_NAME.fullmatch(name) is None
    with pytest.raises(GpuhostError):
        domain_name(name)


def test_a_tenant_name_with_a_trailing_newline_is_refused():
    with pytest.raises(GpuhostError) as info:
        tenant_request_from_dict({"name": "tenant-a\n", "gpus": 0, "vcpus": 2, "memory_gib": 1,
                                  "hugepage_size": "2M"}, "tenants[0]")
    assert info.value.field.startswith("tenants[0]")
