# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The status of each item of docs/runbook.md, computed from the newest acceptance record
(bench/results/acceptance-*.json) and the tests the item cites, so that the page never
claims more than the record shows.

Usage: tools/runbook-status            print each item's status
       tools/runbook-status --write    write them into docs/runbook.md
       tools/runbook-status --check    exit 1 when a stated status differs from the record
       --record PATH                   another record than the newest

An item is a "### " section with a "- Tests:" line; its "- Status:" line holds the
computed text between <!-- status --> and <!-- /status -->. A citation is a code span
`test_x.py` (every test of that file) or `test_x.py::name` (that test, every parameter of
it); `::name` goes on with the file cited last. A citation of a file or a test that does
not exist is an error, and so is a "- Scope:" that says "proven on the lab" for an item
none of whose cited tests passed on the lab in the record. Exit status: 0 when nothing
is wrong (and, with --check, nothing would change), 1 otherwise, 2 on a usage error.
"""

import argparse
import ast
import glob
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNBOOK = os.path.join(REPO, "docs", "runbook.md")
STATUS_RE = re.compile(r"<!-- status -->(.*?)<!-- /status -->", re.S)
CODE_RE = re.compile(r"`([^`]+)`")
CITATION_RE = re.compile(r"^(?:(?:tests/[\w/]+/)?(test_\w+\.py))?(?:::(\w+))?$")
FIELD_RE = re.compile(r"^- (\w+): ", re.M)


def newest_record(results=os.path.join(REPO, "bench", "results")):
    """The newest record of a whole acceptance run (by its start time in the name): a run
    with pytest options (tools/acceptance -k ...) proves a part only."""
    for path in sorted(glob.glob(os.path.join(results, "acceptance-*.json")), reverse=True):
        if re.search(r"acceptance-\d{8}T\d{4}Z\.json$", path):
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
            if record.get("status") == "finished" and record.get("tests") and \
                    record.get("command") == "tools/acceptance":
                return path, record
    raise SystemExit("runbook-status: no finished acceptance record in %s" % results)


def test_files(root=os.path.join(REPO, "tests")):
    """basename -> paths of every test file, walked without following links and never into
    fixtures/ or output/ (recorded sysfs trees, full of links)."""
    found = {}
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [s for s in subfolders if s not in ("fixtures", "output", "__pycache__")]
        for name in names:
            if name.startswith("test_") and name.endswith(".py"):
                found.setdefault(name, []).append(os.path.relpath(os.path.join(folder, name), REPO))
    return found


_NAMES = {}


def test_names(path):
    """The test functions a file defines (at its top or in its classes)."""
    if path in _NAMES:
        return _NAMES[path]
    with open(os.path.join(REPO, path), encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.add(node.name)
    _NAMES[path] = names
    return names


def sections(text):
    """(title, {field: text}, start, end) of every "### " item that cites tests."""
    heads = list(re.finditer(r"^### (.+)$", text, re.M))
    ends = [m.start() for m in heads[1:]] + [len(text)]
    for head, end in zip(heads, ends):
        body = text[head.end():end]
        stop = re.search(r"^#{1,3} ", body, re.M)
        body = body[:stop.start()] if stop else body
        fields = {}
        marks = list(FIELD_RE.finditer(body))
        for mark, after in zip(marks, marks[1:] + [None]):
            fields[mark.group(1)] = " ".join(body[mark.end():after.start() if after else len(body)].split())
        if "Tests" in fields:
            yield head.group(1).strip(), fields, head.start(), head.end() + len(body)


def citations(tests_text):
    """[(basename, name or None)] in the order cited."""
    out, last = [], None
    for span in CODE_RE.findall(tests_text):
        span = " ".join(span.split())
        match = CITATION_RE.match(span)
        if not match or not (match.group(1) or match.group(2)):
            continue
        base = match.group(1) or last
        if base is None:
            continue
        last = base
        out.append((base, match.group(2)))
    return out


def status_of(title, fields, record_name, by_file, files):
    """(status text, [errors]) of one item."""
    errors, entries = [], []
    cited = citations(fields["Tests"])
    for base, name in cited:
        paths = files.get(base)
        if not paths:
            errors.append("%s: cites %s, which no test file is" % (title, base))
            continue
        if len(paths) > 1:
            errors.append("%s: %s names %d files (%s)" % (title, base, len(paths), ", ".join(paths)))
            continue
        if name and name not in test_names(paths[0]):
            errors.append("%s: cites %s::%s, which %s does not define" % (title, base, name, paths[0]))
            continue
        found = [e for e in by_file.get(base, ())
                 if name is None or e["nodeid"].split("::")[-1].split("[")[0] == name]
        entries.append(("%s::%s" % (base, name) if name else base, found))
    if not cited:
        return "missing: no test cited", errors
    absent = [label for label, found in entries if not found]
    failed = sorted({label for label, found in entries
                     if any(e["outcome"] not in ("passed", "skipped") for e in found)})
    runs = [e for _label, found in entries for e in found]
    passed = [e for e in runs if e["outcome"] == "passed"]
    on_lab = [e for e in passed if (e.get("lane") or "").startswith("lab")]
    where = "on the lab" if on_lab else "on fakes only"
    if failed:
        text = "FAILED in %s: %s" % (record_name, ", ".join("`%s`" % f for f in failed))
    elif not passed:
        text = "not shown: none of the cited tests ran in %s" % record_name
    else:
        text = "proven %s in %s: %d test run(s) passed%s" % (
            where, record_name, len(passed),
            ", %d of them on the lab" % len(on_lab) if on_lab else "")
    if absent and not failed:
        text += "; not in the record: %s" % ", ".join("`%s`" % a for a in absent)
    scope = fields.get("Scope", "")
    if "proven on the lab" in scope and not on_lab:
        errors.append("%s: its Scope says \"proven on the lab\", but none of its cited tests "
                      "passed on the lab in %s" % (title, record_name))
    return text, errors


def compute(text, record_path, record):
    record_name = os.path.basename(record_path)[:-len(".json")]
    record_name = "%s (%s)" % (record_name, (record.get("commit") or "?")[:7])
    # By file name, as the page cites them: a test file that moved to another folder
    # since the record is the same file (a name two files share is refused above).
    by_file = {}
    for entry in record["tests"]:
        by_file.setdefault(os.path.basename(entry["nodeid"].split("::")[0]), []).append(entry)
    files = test_files()
    results, errors = [], []
    for title, fields, start, end in sections(text):
        status, problems = status_of(title, fields, record_name, by_file, files)
        results.append((title, status, start, end))
        errors.extend(problems)
    return results, errors


def rewrite(text, results):
    out, at = [], 0
    for _title, status, start, end in results:
        body = text[start:end]
        if not STATUS_RE.search(body):
            continue
        out.append(text[at:start])
        out.append(STATUS_RE.sub(lambda _m: "<!-- status -->%s<!-- /status -->" % status, body, count=1))
        at = end
    out.append(text[at:])
    return "".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    parser.add_argument("--record")
    parser.add_argument("--runbook", default=RUNBOOK)
    args = parser.parse_args(argv)
    if args.record:
        with open(args.record, encoding="utf-8") as handle:
            record_path, record = args.record, json.load(handle)
    else:
        record_path, record = newest_record()
    with open(args.runbook, encoding="utf-8") as handle:
        text = handle.read()
    results, errors = compute(text, record_path, record)
    missing_marks = [title for title, _s, start, end in results if not STATUS_RE.search(text[start:end])]
    errors.extend("%s: no \"- Status: <!-- status --><!-- /status -->\" line" % t for t in missing_marks)
    new = rewrite(text, results)
    for message in errors:
        print("runbook-status: %s" % message, file=sys.stderr)
    if args.write:
        if new != text:
            with open(args.runbook, "w", encoding="utf-8") as handle:
                handle.write(new)
        return 1 if errors else 0
    if args.check:
        stale = [title for (title, status, start, end) in results
                 if STATUS_RE.search(text[start:end])
                 and STATUS_RE.search(text[start:end]).group(1) != status]
        for title in stale:
            print("runbook-status: %s: the stated status is not the record's; run "
                  "tools/runbook-status --write" % title, file=sys.stderr)
        return 1 if errors or stale else 0
    for title, status, _start, _end in results:
        print("%s\n    %s" % (title, status))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
