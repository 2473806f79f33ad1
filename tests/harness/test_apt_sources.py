"""tools/apt_sources.py: the backports source and the lab images' sources come from the
build machine's own apt configuration (deb822 and one-line files under a root), never
from an address written into the project."""

import os
import subprocess
import sys

import pytest

from support.helpers import REPO

sys.path.insert(0, os.path.join(REPO, "tools"))
import apt_sources  # noqa: E402

MIRROR = "http://mirror.example.internal/archive"
SECURITY = "http://mirror.example.internal/security"


def _root(tmp_path, sources=None, one_line=None, codename="bookworm"):
    etc = tmp_path / "etc"
    (etc / "apt" / "sources.list.d").mkdir(parents=True)
    (etc / "os-release").write_text('NAME="Debian GNU/Linux"\nVERSION_CODENAME=%s\n' % codename)
    if sources is not None:
        (etc / "apt" / "sources.list.d" / "debian.sources").write_text(sources)
    if one_line is not None:
        (etc / "apt" / "sources.list").write_text(one_line)
    return str(tmp_path)


DEB822 = """\
Types: deb
# a comment inside the stanza
URIs: %s
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: %s
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
""" % (MIRROR, SECURITY)


def test_backports_stanza_reuses_the_machines_mirror_and_keyring(tmp_path):
    root = _root(tmp_path, sources=DEB822)
    stanza = apt_sources.backports_stanza(apt_sources.read_sources(root), "bookworm")
    assert "URIs: %s\n" % MIRROR in stanza
    assert "Suites: bookworm-backports\n" in stanza
    assert "Components: main\n" in stanza
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n" in stanza


def test_mmdebstrap_lines_take_the_archive_and_the_security_archive(tmp_path):
    root = _root(tmp_path, sources=DEB822)
    lines = apt_sources.mmdebstrap_lines(apt_sources.read_sources(root), "bookworm", "bookworm")
    assert lines == ["deb %s bookworm main" % MIRROR, "deb %s bookworm-updates main" % MIRROR,
                     "deb %s bookworm-security main" % SECURITY]


def test_one_line_sources_with_options_and_deb_src_are_read(tmp_path):
    root = _root(tmp_path, one_line=(
        "# the machine's mirror\n"
        "deb-src %s bookworm main\n"
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/site.gpg] %s bookworm main contrib\n"
        "deb %s bookworm-security main\n" % (MIRROR, MIRROR, SECURITY)))
    sources = apt_sources.read_sources(root)
    assert [s.uris for s in sources] == [[MIRROR], [SECURITY]]
    assert sources[0].signed_by == "/etc/apt/keyrings/site.gpg"
    assert "Signed-By: /etc/apt/keyrings/site.gpg" in apt_sources.backports_stanza(sources, "bookworm")


def test_an_image_of_another_suite_uses_the_mirror_of_the_machines_release(tmp_path):
    root = _root(tmp_path, sources=DEB822.replace("bookworm", "trixie"), codename="trixie")
    lines = apt_sources.mmdebstrap_lines(apt_sources.read_sources(root), "bookworm", "trixie")
    assert lines[0] == "deb %s bookworm main" % MIRROR
    assert lines[2] == "deb %s bookworm-security main" % SECURITY


def test_disabled_stanzas_and_other_components_do_not_count(tmp_path):
    root = _root(tmp_path, sources=(
        "Types: deb\nURIs: http://disabled.example/archive\nSuites: bookworm\nComponents: main\nEnabled: no\n\n"
        "Types: deb\nURIs: http://contrib-only.example/archive\nSuites: bookworm\nComponents: contrib\n"))
    with pytest.raises(apt_sources.SourcesError) as err:
        apt_sources.backports_stanza(apt_sources.read_sources(root), "bookworm")
    assert "none of the machine's sources serves bookworm or bookworm-updates" in str(err.value)
    assert "configure apt" in str(err.value)


def test_aptopts_pass_proxies_and_release_date_checks_only():
    dump = ('Acquire::http::Proxy "http://proxy.example:3128";\n'
            'Acquire::Check-Valid-Until "false";\n'
            'Acquire::https::Proxy "";\n'
            'APT::Install-Recommends "true";\n')
    assert apt_sources.aptopts(dump) == ['Acquire::http::Proxy "http://proxy.example:3128"',
                                         'Acquire::Check-Valid-Until "false"']


def test_the_command_fails_naming_what_it_looked_for(tmp_path):
    root = _root(tmp_path, sources="")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tools", "apt_sources.py"),
                           "--root", root, "backports"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1
    assert "no apt source of the Debian archive" in proc.stderr


def test_no_archive_address_is_written_into_the_lab_or_tools():
    for path in ("lab/build", "lab/tenant-image/build", "tools/setup", "tools/apt-install"):
        with open(os.path.join(REPO, path), encoding="utf-8") as handle:
            text = handle.read()
        assert "debian.org" not in text, path
