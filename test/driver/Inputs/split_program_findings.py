#!/usr/bin/env python3
"""Split an audit's findings from a plain run's where they may differ.

A plain run sees one TU and cannot know who calls a function, so
torch-cuda-unguarded takes every function as a start. An audit knows the
programs of the database (TUs joined by calls): in a program with a main, a
function no main reaches is not a start. So the audit's torch-cuda-unguarded
findings must be a subset of the plain run's; everything else is compared
byte for byte.

usage: split_program_findings.py PLAIN.json AUDIT.json OUT_PLAIN OUT_AUDIT
"""
import json
import sys


def program_scoped(finding):
    return finding["check"] == "torch-cuda-unguarded"


def main():
    plain_path, audit_path, out_plain, out_audit = sys.argv[1:5]
    plain = json.load(open(plain_path))
    audit = json.load(open(audit_path))
    key = lambda f: json.dumps(f, sort_keys=True)
    plain_scoped = {key(f) for f in plain["findings"] if program_scoped(f)}
    audit_scoped = [f for f in audit["findings"] if program_scoped(f)]
    extra = [f for f in audit_scoped if key(f) not in plain_scoped]
    if extra:
        sys.exit("audit reports program-scoped findings a plain run does not: %s"
                 % [(f["file"], f["line"]) for f in extra])
    if len(audit_scoped) >= len(plain_scoped):
        sys.exit("audit dropped no finding of an uncalled function (%d of %d kept)"
                 % (len(audit_scoped), len(plain_scoped)))
    for doc, out in ((plain, out_plain), (audit, out_audit)):
        doc["findings"] = [f for f in doc["findings"] if not program_scoped(f)]
        with open(out, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
    print("program-scoped: plain %d, audit %d" % (len(plain_scoped), len(audit_scoped)))


if __name__ == "__main__":
    main()
