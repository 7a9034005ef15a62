"""Validates torch-tidy --format=json output against the schema in
docs/driver.md, then checks the findings against expectations.

usage: check_json.py FILE [--expect LEVEL:CHECK:FILE_SUFFIX:LINE:COLUMN]...
                          [--notes N] [--fixes N] [--tool-errors N]
Every --expect must match one finding, in order, and there must be no others.
"""
import argparse
import hashlib
import json
import os
import sys


def fail(msg):
    sys.exit("check_json.py: " + msg)


def check_type(obj, key, typ, where):
    if key not in obj:
        fail("%s: missing %r" % (where, key))
    if not isinstance(obj[key], typ) or (typ is int and isinstance(obj[key], bool)):
        fail("%s: %r is %r, expected %s" % (where, key, obj[key], typ.__name__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--notes", type=int)
    ap.add_argument("--fixes", type=int)
    ap.add_argument("--tool-errors", type=int, default=0)
    args = ap.parse_args()
    with open(args.file) as f:
        doc = json.load(f)

    if set(doc) != {"version", "tool", "findings", "toolErrors", "files"}:
        fail("top-level keys: %r" % sorted(doc))
    # files: the SHA-256 of every file a finding, note or fix points into.
    pointed = {f["file"] for f in doc["findings"]} | {
        x["file"] for f in doc["findings"] for x in f["notes"] + f["fixes"]}
    pointed.discard("")
    if set(doc["files"]) != {p for p in pointed if os.path.isfile(p)}:
        fail("files %r, expected %r" % (sorted(doc["files"]), sorted(pointed)))
    for path, entry in doc["files"].items():
        with open(path, "rb") as src:
            digest = hashlib.sha256(src.read()).hexdigest()
        if entry != {"sha256": digest}:
            fail("files[%r] is %r, the file's SHA-256 is %s" % (path, entry, digest))
    if doc["version"] != 1:
        fail("version %r" % doc["version"])
    if doc["tool"].get("name") != "torch-tidy":
        fail("tool %r" % doc["tool"])
    keys = {"check", "level", "file", "line", "column", "message", "notes", "fixes",
            "fingerprint"}
    for i, f in enumerate(doc["findings"]):
        where = "findings[%d]" % i
        if set(f) != keys:
            fail("%s keys %r" % (where, sorted(f)))
        for k in ("check", "level", "file", "message"):
            check_type(f, k, str, where)
        for k in ("line", "column"):
            check_type(f, k, int, where)
        if f["level"] not in ("warning", "error"):
            fail("%s level %r" % (where, f["level"]))
        if f["file"] and (f["line"] < 1 or f["column"] < 1):
            fail("%s has a file but no position" % where)
        for j, n in enumerate(f["notes"]):
            w = "%s.notes[%d]" % (where, j)
            if set(n) != {"file", "line", "column", "message"}:
                fail("%s keys %r" % (w, sorted(n)))
            check_type(n, "line", int, w)
            check_type(n, "column", int, w)
        for j, x in enumerate(f["fixes"]):
            w = "%s.fixes[%d]" % (where, j)
            if set(x) != {"file", "offset", "length", "replacement", "line", "column"}:
                fail("%s keys %r" % (w, sorted(x)))
            for k in ("offset", "length", "line", "column"):
                check_type(x, k, int, w)
            # The fix's offset must point at its line and column.
            with open(x["file"], "rb") as src:
                text = src.read()
            line = text.count(b"\n", 0, x["offset"]) + 1
            col = x["offset"] - (text.rfind(b"\n", 0, x["offset"]) + 1) + 1
            if (line, col) != (x["line"], x["column"]):
                fail("%s offset %d is %d:%d, not %d:%d" % (
                    w, x["offset"], line, col, x["line"], x["column"]))

    sort_key = lambda f: (f["file"], f["line"], f["column"], f["check"], f["message"])
    if doc["findings"] != sorted(doc["findings"], key=sort_key):
        fail("findings are not sorted")
    got = ["%s:%s:%s:%d:%d" % (f["level"], f["check"], f["file"], f["line"], f["column"])
           for f in doc["findings"]]
    if len(got) != len(args.expect):
        fail("expected %d findings, got %d: %r" % (len(args.expect), len(got), got))
    for g, e in zip(got, args.expect):
        level, check, suffix, line, col = e.split(":")
        gl, gc, gf, gline, gcol = g.split(":")
        if (gl, gc, gline, gcol) != (level, check, line, col) or not gf.endswith(suffix):
            fail("expected %s, got %s" % (e, g))
    if args.notes is not None:
        n = sum(len(f["notes"]) for f in doc["findings"])
        if n != args.notes:
            fail("expected %d notes, got %d" % (args.notes, n))
    if args.fixes is not None:
        n = sum(len(f["fixes"]) for f in doc["findings"])
        if n != args.fixes:
            fail("expected %d fixes, got %d" % (args.fixes, n))
    if len(doc["toolErrors"]) != args.tool_errors:
        fail("expected %d toolErrors, got %r" % (args.tool_errors, doc["toolErrors"]))
    for e in doc["toolErrors"]:
        if set(e) != {"file", "message"}:
            fail("toolErrors entry %r" % e)
    print("json ok: %d findings" % len(got))


main()
