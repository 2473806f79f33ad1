# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The build machine's own apt sources, for what the project fetches with apt beyond the
machine's configured suites: the backports suite QEMU 10 comes from on Debian 12
(tools/setup) and the lab images' mmdebstrap sources (lab/build, lab/tenant-image/build).

No archive address is written into the project: a site with an internal mirror or a
proxy configures apt once, and the lab follows. The Debian archive is the source whose
suites hold the machine's release (``bookworm``, ``bookworm-updates``), the security
archive the one holding ``<release>-security``; their URIs and keyrings are reused for
the suites asked for.

  apt_sources.py backports CODENAME     deb822 stanza of CODENAME-backports (main)
  apt_sources.py mmdebstrap SUITE       one-line sources of SUITE, SUITE-updates and
                                        SUITE-security (main), one per line
  apt_sources.py aptopts                --aptopt arguments carrying the machine's proxy
                                        and Release-date settings, one per line

Every command reads below --root (default /) and fails naming what it looked for."""

import argparse
import glob
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import List, Optional


class SourcesError(Exception):
    pass


@dataclass
class Source:
    """One ``deb`` source: a one-line entry, or a deb822 stanza's whole URI list."""
    uris: List[str]
    suites: List[str]
    components: List[str]
    signed_by: Optional[str] = None
    origin: str = ""
    options: dict = field(default_factory=dict)


_ONE_LINE = re.compile(r"^deb\s+(?:\[(?P<options>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)(?P<components>(?:\s+\S+)*)\s*$")


def parse_one_line(text, origin=""):
    sources = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("deb-src"):
            continue
        match = _ONE_LINE.fullmatch(line)
        if not match:
            continue
        options = dict(item.split("=", 1) for item in (match.group("options") or "").split()
                       if "=" in item)
        sources.append(Source(uris=[match.group("uri")], suites=[match.group("suite")],
                              components=match.group("components").split(),
                              signed_by=options.get("signed-by"),
                              origin="%s:%d" % (origin, number), options=options))
    return sources


def parse_deb822(text, origin=""):
    sources = []
    for number, stanza in enumerate(re.split(r"\n\s*\n", text), 1):
        fields, key = {}, None
        for raw in stanza.splitlines():
            if raw.startswith("#"):
                continue
            if raw[:1] in (" ", "\t") and key:
                fields[key] += "\n" + raw.strip()
                continue
            name, sep, value = raw.partition(":")
            if sep:
                key = name.strip().lower()
                fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        sources.append(Source(uris=fields.get("uris", "").split(),
                              suites=fields.get("suites", "").split(),
                              components=fields.get("components", "").split(),
                              signed_by=fields.get("signed-by") or None,
                              origin="%s stanza %d" % (origin, number)))
    return sources


def read_sources(root="/"):
    """Every enabled ``deb`` source of the machine, in apt's reading order."""
    etc = os.path.join(root, "etc/apt")
    files = [os.path.join(etc, "sources.list")]
    files += sorted(glob.glob(os.path.join(etc, "sources.list.d", "*.list")))
    files += sorted(glob.glob(os.path.join(etc, "sources.list.d", "*.sources")))
    sources = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except FileNotFoundError:
            continue
        parse = parse_deb822 if path.endswith(".sources") else parse_one_line
        sources += parse(text, origin=path)
    return sources


def release_codename(root="/"):
    try:
        with open(os.path.join(root, "etc/os-release"), encoding="utf-8") as handle:
            for line in handle:
                name, sep, value = line.strip().partition("=")
                if sep and name == "VERSION_CODENAME":
                    return value.strip('"\'')
    except FileNotFoundError:
        pass
    raise SourcesError("no VERSION_CODENAME in %s" % os.path.join(root, "etc/os-release"))


def archive_for(sources, suites, what):
    """The first source that serves one of ``suites`` with component main."""
    for source in sources:
        if set(source.suites) & set(suites) and "main" in source.components and source.uris:
            return source
    raise SourcesError(
        "no apt source of the %s: none of the machine's sources serves %s with component "
        "main; configure apt (/etc/apt/sources.list.d) for it and run again"
        % (what, " or ".join(suites)))


def backports_stanza(sources, codename):
    archive = archive_for(sources, [codename, codename + "-updates"], "Debian archive")
    lines = ["# Written by gpuhost.kvm tools/setup from %s: the lab's QEMU comes from here."
             % archive.origin,
             "Types: deb",
             "URIs: %s" % " ".join(archive.uris),
             "Suites: %s-backports" % codename,
             "Components: main"]
    if archive.signed_by and "\n" not in archive.signed_by:
        lines.append("Signed-By: %s" % archive.signed_by)
    return "\n".join(lines) + "\n"


def mmdebstrap_lines(sources, suite, host_codename):
    """Sources for an image of ``suite``, from the archives the machine uses for its own
    release (the same mirror serves every suite)."""
    archive = archive_for(sources, [host_codename, host_codename + "-updates", suite],
                          "Debian archive")
    security = archive_for(sources, [host_codename + "-security", suite + "-security"],
                           "Debian security archive")
    return ["deb %s %s main" % (archive.uris[0], suite),
            "deb %s %s-updates main" % (archive.uris[0], suite),
            "deb %s %s-security main" % (security.uris[0], suite)]


# apt settings that decide whether an archive can be reached at all, passed on to
# mmdebstrap's own apt (which does not read the machine's apt.conf.d).
PASSED_APT_OPTIONS = ("Acquire::http::Proxy", "Acquire::https::Proxy", "Acquire::ftp::Proxy",
                      "Acquire::Check-Valid-Until", "Acquire::Check-Date")


def aptopts(dump):
    """``--aptopt`` values from ``apt-config dump`` output."""
    wanted = []
    for line in dump.splitlines():
        name, sep, value = line.partition(" ")
        if sep and name in PASSED_APT_OPTIONS and value.rstrip(";").strip('"'):
            wanted.append('%s %s' % (name, value.rstrip(";").strip()))
    return wanted


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--root", default="/")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("backports").add_argument("codename", nargs="?")
    sub.add_parser("mmdebstrap").add_argument("suite")
    sub.add_parser("aptopts")
    args = parser.parse_args(argv)
    try:
        if args.command == "aptopts":
            dump = subprocess.run(["apt-config", "dump"], capture_output=True, text=True,
                                  check=True).stdout
            out = aptopts(dump)
        elif args.command == "backports":
            codename = args.codename or release_codename(args.root)
            out = [backports_stanza(read_sources(args.root), codename).rstrip("\n")]
        else:
            out = mmdebstrap_lines(read_sources(args.root), args.suite,
                                   release_codename(args.root))
    except SourcesError as err:
        print("apt_sources.py: %s" % err, file=sys.stderr)
        return 1
    for line in out:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
