#!/usr/bin/env python3
"""The carrier matrix: every torch-* check x every carrier of the catalog.

The catalog (checks.md, "Where facts travel") names twelve carriers through
which a fact (a device, pinned memory, an autograd graph, a pending copy, a
loop or guard around a statement) must travel. For each check, each carrier
is a cell: a positive (the bug, carried by that carrier: must warn) and a
near-miss (the same shape, correct: must stay silent), or "n/a" with the
reason why nothing can travel there.

The cells live in test/carriers/cases/<check>.cases, one small file per
check (format below). From them this script writes:

  test/carriers/generated/<check>.cpp   one lit test per check
  docs/carriers.md                      the matrix, from the cases and the
                                        last scores (test/carriers/results.json)

Usage:
  generate.py                  write the lit tests and docs/carriers.md
  generate.py --check          exit 1 if any written file is out of date
  generate.py --docs           write docs/carriers.md only
  generate.py --score PLUGIN   run clang-tidy with PLUGIN on every generated
                               file, report per cell, write results.json
                               (then docs/carriers.md)

Case file format. Lines that start with `//@` are directives; everything
else is C++ belonging to the last block opened:

  //@ fact: what the carriers transport for this check
  //@   (a directive's text continues on `//@` lines indented further)
  //@ preamble
  ...C++ shared by every cell (includes, a module, declarations)...
  //@ cell <carrier>: what this cell's shape is
  //@ positive
  ...C++; the line that must warn ends with `// WARN`...
  //@ near-miss
  ...C++ that must stay silent...
  //@ cell <carrier> n/a: why nothing travels through this carrier

In the code, `@` stands for a prefix unique to the cell and the side
(`local_pos`, `local_neg`, ...): write `void @()`, `struct @_Trainer`, so
that the cells of one file never collide.
"""

import argparse
import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CASES_DIR = os.path.join(HERE, "cases")
GENERATED_DIR = os.path.join(HERE, "generated")
RESULTS = os.path.join(HERE, "results.json")
DOCS = os.path.join(REPO, "docs", "carriers.md")
INPUTS = os.path.join(REPO, "test", "Inputs")

# The catalog's rows, in its order: (id, short label for the matrix, title).
CARRIERS = [
    ("local", "local", "local, copy, assignment, reference"),
    ("merge", "merge", "merge of paths, ternary"),
    ("return", "return", "return of a helper, static factory, getter"),
    ("param", "param", "by-value and by-reference parameters (callers agree)"),
    ("outparam", "out-param", "out-parameters and mutating helpers"),
    ("member", "member", "class members"),
    ("field", "field", "struct fields, pairs, tuples"),
    ("container", "container", "container elements"),
    ("lambda", "lambda", "lambdas and callables"),
    ("template", "template", "templates"),
    ("module", "module", "module handles"),
    ("context", "context", "calling context"),
]
CARRIER_IDS = [c[0] for c in CARRIERS]

# The checks of the matrix, in the catalog's order.
CHECKS = [
    "torch-device-mismatch",
    "torch-tensor-to-discarded",
    "torch-cuda-unguarded",
    "torch-device-index-unchecked",
    "torch-non-blocking-pageable",
    "torch-non-blocking-d2h-race",
    "torch-empty-cache-in-loop",
    "torch-empty-cache-oom-retry",
    "torch-loss-accumulation-graph",
    "torch-inference-without-no-grad",
    "torch-host-sync-in-loop",
    "torch-missing-zero-grad",
    "torch-grad-accumulation-unscaled",
    "torch-eval-mode-missing",
    "torch-autocast-region",
]

WARN_MARK = re.compile(r"\s*// WARN$")


class CaseError(Exception):
    pass


# --- Reading the case files -------------------------------------------------


class Cell:
    def __init__(self, carrier, text, na):
        self.carrier = carrier
        self.shape = "" if na else text   # what the cell exercises
        self.reason = text if na else ""  # why it is n/a
        self.na = na
        self.positive = []
        self.near_miss = []

    def digest(self, preamble):
        h = hashlib.sha256()
        for part in (preamble, self.positive, self.near_miss):
            h.update("\n".join(part).encode())
            h.update(b"\0")
        return h.hexdigest()[:16]


class CheckCases:
    def __init__(self, name):
        self.name = name
        self.fact = ""
        self.preamble = []
        self.cells = {}


def parse_cases(check):
    path = os.path.join(CASES_DIR, check + ".cases")
    cases = CheckCases(check)
    block = None  # the list that C++ lines go to
    last = None   # (object, attribute) that a continuation line extends
    cell = None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        where = "%s:%d" % (os.path.relpath(path, REPO), n)
        if not line.startswith("//@"):
            if block is None:
                if line.strip():
                    raise CaseError("%s: code outside a block" % where)
                continue
            block.append(line.rstrip())
            continue
        directive = line[3:]
        if directive.startswith("  ") and last is not None:
            obj, attr = last
            setattr(obj, attr, getattr(obj, attr) + " " + directive.strip())
            continue
        directive = directive.strip()
        last = None
        m = re.match(r"fact:\s*(.*)$", directive)
        if m:
            cases.fact = m.group(1)
            last = (cases, "fact")
            block = None
            continue
        if directive == "preamble":
            block = cases.preamble
            continue
        m = re.match(r"cell\s+([a-z]+)(\s+n/a)?:\s*(.*)$", directive)
        if m:
            carrier, na, text = m.group(1), bool(m.group(2)), m.group(3)
            if carrier not in CARRIER_IDS:
                raise CaseError("%s: unknown carrier '%s'" % (where, carrier))
            if carrier in cases.cells:
                raise CaseError("%s: carrier '%s' twice" % (where, carrier))
            cell = Cell(carrier, text, na)
            cases.cells[carrier] = cell
            last = (cell, "reason" if na else "shape")
            block = None
            continue
        if directive in ("positive", "near-miss"):
            if cell is None or cell.na:
                raise CaseError("%s: '%s' outside an applicable cell" % (where, directive))
            block = cell.positive if directive == "positive" else cell.near_miss
            continue
        raise CaseError("%s: unknown directive '%s'" % (where, directive))

    missing = [c for c in CARRIER_IDS if c not in cases.cells]
    if missing:
        raise CaseError("%s: no cell for %s" % (check, ", ".join(missing)))
    if not cases.fact:
        raise CaseError("%s: no '//@ fact:'" % check)
    for cell in cases.cells.values():
        cell.positive = trim(cell.positive)
        cell.near_miss = trim(cell.near_miss)
        if cell.na:
            if not cell.reason:
                raise CaseError("%s/%s: n/a without a reason" % (check, cell.carrier))
            continue
        if not cell.positive or not cell.near_miss:
            raise CaseError("%s/%s: needs a positive and a near-miss" % (check, cell.carrier))
        if not any(WARN_MARK.search(l) for l in cell.positive):
            raise CaseError("%s/%s: the positive marks no line '// WARN'" % (check, cell.carrier))
        if any(WARN_MARK.search(l) for l in cell.near_miss):
            raise CaseError("%s/%s: the near-miss marks a line '// WARN'" % (check, cell.carrier))
    cases.preamble = trim(cases.preamble)
    return cases


def trim(lines):
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


# --- Writing a lit test -------------------------------------------------------


def banner(text):
    head = "// ===--- %s " % text
    return head + "-" * max(3, 76 - len(head)) + "=== //"


def comment(text, width=80):
    """`text` as `// ` lines no wider than `width`."""
    out, line = [], "//"
    for word in text.split():
        if len(line) + 1 + len(word) > width and line != "//":
            out.append(line)
            line = "//"
        line += " " + word
    out.append(line)
    return out


def known_state(cases, carrier, results):
    """What the last score says of a cell whose code has not changed since:
    {side: set of side-relative lines that warn unexpectedly}, and the
    positive's missed lines; empty when unscored or changed."""
    r = (results or {}).get("checks", {}).get(cases.name, {}).get("cells", {}).get(carrier)
    cell = cases.cells[carrier]
    if not r or r.get("digest") != cell.digest(cases.preamble):
        return {"missed": set(), "positive": set(), "near-miss": set()}
    return {"missed": set(r.get("positive_missed", [])),
            "positive": set(r.get("positive_extra", [])),
            "near-miss": set(r.get("near_miss_warned", []))}


def generate(cases, results=None):
    """The lit test's text, and where each cell's sides are in it. A cell the
    last score (results.json) found wanting is written as it behaves: a missed
    positive line says KNOWN MISS instead of expecting a warning, and a stray
    warning is expected on its line, marked KNOWN FALSE POSITIVE; so the test
    fails as soon as the engine changes, either way."""
    check = cases.name
    out = ["// RUN: %%check_torch_tidy %%s %s %%t" % check, "//"]
    out += comment("The carrier matrix of %s (docs/carriers.md): for each "
                   "carrier of the catalog's \"Where facts travel\", a positive "
                   "that must warn and a near-miss that must stay silent." % check)
    out += comment("Fact carried: %s" % cases.fact)
    out += ["//",
            "// GENERATED by test/carriers/generate.py from",
            "// test/carriers/cases/%s.cases: edit that file, then run" % check,
            "// `python3 test/carriers/generate.py`.",
            ""]
    out += cases.preamble
    where = {}
    for carrier, _, title in CARRIERS:
        cell = cases.cells[carrier]
        out.append("")
        if cell.na:
            out.append(banner("%s: n/a" % title))
            out += comment(cell.reason)
            continue
        out.append(banner(title))
        out += comment(cell.shape)
        sides = {}
        known = known_state(cases, carrier, results)
        for side, tag, lines in (("positive", "pos", cell.positive),
                                 ("near-miss", "neg", cell.near_miss)):
            out += ["", "// %s" % side]
            start = len(out) + 1
            # Lines this side gained over the scored layout (a known false
            # positive's expectation): results.json counts without them.
            gained = 0
            expect = []
            for line in lines:
                line = line.replace("@", "%s_%s" % (carrier, tag))
                indent = re.match(r"\s*", line).group(0)
                if WARN_MARK.search(line):
                    line = WARN_MARK.sub("", line)
                    out.append(line)
                    expect.append(len(out))
                    if len(out) - start - gained in known["missed"]:
                        out.append("%s// KNOWN MISS: the engine does not carry this "
                                   "yet (docs/carriers.md)" % indent)
                    else:
                        out.append("%s// CHECK-MESSAGES: :[[@LINE-1]]:{{[0-9]+}}: "
                                   "warning: {{.*}}[%s]" % (indent, check))
                else:
                    out.append(line)
                    if len(out) - start - gained in known[side]:
                        # On a line of its own: a diagnostic's source excerpt
                        # must not show the expected text.
                        out.append("%s// KNOWN FALSE POSITIVE; CHECK-MESSAGES: "
                                   ":[[@LINE-1]]:{{[0-9]+}}: warning: {{.*}}[%s]"
                                   % (indent, check))
                        gained += 1
            sides[side] = {"lines": [start, len(out)], "expect": expect}
        where[carrier] = sides
    return "\n".join(out) + "\n", where


def generated_path(check):
    return os.path.join(GENERATED_DIR, check + ".cpp")


# --- Scoring with a plugin ------------------------------------------------------

DIAG = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+): "
                  r"(?P<kind>warning|error): (?P<msg>.*?)(?: \[(?P<check>[\w.-]+)\])?$")


def run_check(clang_tidy, plugin, check, text, inputs):
    """The warnings and errors of one run of `check` over `text`."""
    cleaned = re.sub(r"// *CHECK-[A-Z0-9\-]*:[^\r\n]*", "//", text)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, check + ".cpp")
        with open(path, "w", encoding="utf-8") as f:
            f.write(cleaned)
        cmd = [clang_tidy, "--load=" + plugin, path, "--checks=-*," + check,
               "--config={}", "--", "-std=c++17", "-isystem", inputs]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = proc.stdout.decode(errors="replace")
        diags = []
        for line in out.splitlines():
            m = DIAG.match(line)
            if m and os.path.basename(m.group("file")) == os.path.basename(path):
                diags.append({"line": int(m.group("line")), "col": int(m.group("col")),
                              "kind": m.group("kind"), "message": m.group("msg"),
                              "check": m.group("check") or ""})
            elif m and m.group("kind") == "error":
                diags.append({"line": 0, "col": 0, "kind": "error",
                              "message": line, "check": ""})
        return diags, out


def score_cell(sides, warnings):
    def inside(side):
        lo, hi = sides[side]["lines"]
        return [w for w in warnings if lo <= w["line"] <= hi]

    pos = inside("positive")
    expect = sides["positive"]["expect"]
    got = {w["line"] for w in pos}
    missed = [l for l in expect if l not in got]
    extra = sorted({w["line"] for w in pos if w["line"] not in expect})
    neg = sorted({w["line"] for w in inside("near-miss")})
    lo = sides["positive"]["lines"][0]
    nlo = sides["near-miss"]["lines"][0]
    result = {
        # Lines relative to the start of each side, so that a result does not
        # move when another cell of the file grows.
        "positive": "caught" if not missed and not extra else
                    ("missed" if missed and not extra else "elsewhere"),
        "positive_missed": [l - lo for l in missed],
        "positive_extra": [l - lo for l in extra],
        "near_miss": "silent" if not neg else "warned",
        "near_miss_warned": [l - nlo for l in neg],
    }
    result["pass"] = result["positive"] == "caught" and result["near_miss"] == "silent"
    return result


def score(args, all_cases):
    results = {"label": args.label, "checks": {}}
    broken = False
    for check in CHECKS:
        cases = all_cases[check]
        text, where = generate(cases)
        diags, raw = run_check(args.clang_tidy, args.score, check, text, args.inputs)
        errors = [d for d in diags if d["kind"] == "error"]
        warnings = [d for d in diags if d["kind"] == "warning" and d["check"] == check]
        if errors:
            broken = True
            sys.stderr.write("%s: the generated file does not compile:\n%s\n" % (check, raw))
        cells = {}
        placed = set()
        for carrier in CARRIER_IDS:
            cell = cases.cells[carrier]
            if cell.na:
                continue
            r = score_cell(where[carrier], warnings)
            if errors:
                r["pass"] = False
                r["error"] = True
            r["digest"] = cell.digest(cases.preamble)
            cells[carrier] = r
            for side in ("positive", "near-miss"):
                lo, hi = where[carrier][side]["lines"]
                placed |= set(range(lo, hi + 1))
        stray = sorted({w["line"] for w in warnings if w["line"] not in placed})
        results["checks"][check] = {"cells": cells, "stray_warning_lines": stray}
    return results, broken


def print_scores(results, all_cases):
    width = max(len(c) for c in CHECKS)
    print("%-*s  %s" % (width, "", " ".join("%-9s" % c[1] for c in CARRIERS)))
    for check in CHECKS:
        row = []
        cells = results["checks"][check]["cells"]
        for carrier in CARRIER_IDS:
            if all_cases[check].cells[carrier].na:
                row.append("n/a")
            else:
                r = cells[carrier]
                if r.get("error"):
                    row.append("ERROR")
                elif r["pass"]:
                    row.append("ok")
                else:
                    why = []
                    if r["positive"] != "caught":
                        why.append("P:" + r["positive"])
                    if r["near_miss"] != "silent":
                        why.append("N:warned")
                    row.append(",".join(why))
        print("%-*s  %s" % (width, check, " ".join("%-9s" % c for c in row)))
        stray = results["checks"][check]["stray_warning_lines"]
        if stray:
            print("%-*s  warnings outside any cell, at lines %s" % (width, "", stray))


# --- docs/carriers.md ---------------------------------------------------------------


def cell_status(cases, carrier, results):
    """(symbol, detail) of one cell: its last score, if that is of this case."""
    cell = cases.cells[carrier]
    if cell.na:
        return "n/a", cell.reason
    r = (results or {}).get("checks", {}).get(cases.name, {}).get("cells", {}).get(carrier)
    if r is None or r.get("digest") != cell.digest(cases.preamble):
        return "?", "not scored since the case last changed"
    if r.get("error"):
        return "✘", "the generated test does not compile"
    if r["pass"]:
        return "✔", "positive caught, near-miss silent"
    why = []
    if r["positive"] == "missed":
        why.append("positive missed")
    elif r["positive"] == "elsewhere":
        parts = []
        if r["positive_missed"]:
            parts.append("not on the expected line")
        parts.append("warned on another line of the positive")
        why.append("positive " + ", ".join(parts))
    if r["near_miss"] == "warned":
        why.append("near-miss warned")
    return "✘", "; ".join(why)


def anchor(check):
    return check


def docs_text(all_cases, results):
    out = []
    out.append("# Where facts travel: the carrier matrix")
    out.append("")
    out.append("GENERATED by `test/carriers/generate.py` from `test/carriers/cases/*.cases` "
               "and `test/carriers/results.json`; do not edit.")
    out.append("")
    out.append(
        "Every check needs one or two facts about a value (its device, whether its "
        "memory is pinned, whether it carries an autograd graph, whether a "
        "non-blocking copy into it is still pending) or about the context of a "
        "statement (inside a loop, inside a training loop, under a no-grad guard, "
        "on a path where CUDA was checked). Real code moves those facts through the "
        "twelve carriers of the catalog's \"Where facts travel\". Each cell below is "
        "a pair of lit cases in `test/carriers/generated/<check>.cpp`: a **positive**, "
        "the bug carried by that carrier, which must warn on the expected line, and a "
        "**near-miss**, the same shape written correctly, which must stay silent. "
        "The code of a cell is in the functions and classes whose names start with "
        "`<carrier>_pos` and `<carrier>_neg` (`local_pos`, `local_neg_helper`, ...); "
        "the cases themselves are written in `test/carriers/cases/<check>.cases`.")
    out.append("")
    out.append("- ✔ the positive warns on its line (and nowhere else) and the near-miss is silent;")
    out.append("- ✘ the positive is missed (or warns elsewhere), or the near-miss warns;")
    out.append("- n/a the check has nothing that this carrier could transport (the reason is "
               "in the check's section);")
    out.append("- ? the case changed since it was last scored.")
    out.append("")
    label = (results or {}).get("label")
    if label:
        out.append("Scored with: %s. Re-score with "
                   "`python3 test/carriers/generate.py --score build/lib/libTorchTidy.so`." % label)
    else:
        out.append("Not scored yet: run "
                   "`python3 test/carriers/generate.py --score build/lib/libTorchTidy.so`.")
    out.append("")

    # The matrix.
    out.append("| check | " + " | ".join(c[1] for c in CARRIERS) + " | ✔ |")
    out.append("| --- | " + " | ".join(":-:" for _ in CARRIERS) + " | --: |")
    totals = {"✔": 0, "✘": 0, "n/a": 0, "?": 0}
    for check in CHECKS:
        cases = all_cases[check]
        row, passed, applicable = [], 0, 0
        for carrier in CARRIER_IDS:
            symbol, _ = cell_status(cases, carrier, results)
            totals[symbol] += 1
            if symbol != "n/a":
                applicable += 1
            if symbol == "✔":
                passed += 1
            row.append(symbol)
        out.append("| [%s](#%s) | %s | %d/%d |" % (check, anchor(check), " | ".join(row),
                                                  passed, applicable))
    out.append("")
    applicable = totals["✔"] + totals["✘"] + totals["?"]
    out.append("%d cells: %d applicable (%d ✔, %d ✘%s), %d n/a." % (
        applicable + totals["n/a"], applicable, totals["✔"], totals["✘"],
        ", %d ?" % totals["?"] if totals["?"] else "", totals["n/a"]))
    out.append("")
    out.append("The carriers (the catalog's rows):")
    out.append("")
    for _, short, title in CARRIERS:
        out.append("- **%s**: %s" % (short, title))
    out.append("")

    # One section per check.
    for check in CHECKS:
        cases = all_cases[check]
        out.append("## %s" % check)
        out.append("")
        out.append("Fact carried: %s" % cases.fact)
        out.append("")
        out.append("| carrier | | case (or why nothing travels) | failure |")
        out.append("| --- | :-: | --- | --- |")
        for carrier, short, _ in CARRIERS:
            cell = cases.cells[carrier]
            symbol, detail = cell_status(cases, carrier, results)
            if cell.na:
                text, failure = escape(cell.reason), ""
            else:
                text = escape(cell.shape)
                failure = "" if symbol == "✔" else detail
            out.append("| %s | %s | %s | %s |" % (short, symbol, text, failure))
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def escape(text):
    return text.replace("|", "\\|")


# --- Main -------------------------------------------------------------------------


def load_results():
    if not os.path.exists(RESULTS):
        return None
    with open(RESULTS, encoding="utf-8") as f:
        return json.load(f)


def outputs(all_cases, results):
    files = {}
    for check in CHECKS:
        files[generated_path(check)] = generate(all_cases[check], results)[0]
    files[DOCS] = docs_text(all_cases, results)
    return files


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    old = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = f.read()
    if old != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print("wrote %s" % os.path.relpath(path, REPO))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if a generated file differs from what would be written")
    mode.add_argument("--docs", action="store_true", help="write docs/carriers.md only")
    mode.add_argument("--score", metavar="PLUGIN",
                      help="score every cell with this libTorchTidy.so")
    parser.add_argument("--clang-tidy", default="clang-tidy-19")
    parser.add_argument("--inputs", default=INPUTS, help="the mock LibTorch headers")
    parser.add_argument("--label", default=None,
                        help="what the scores were made with, for docs/carriers.md")
    args = parser.parse_args()

    try:
        all_cases = {check: parse_cases(check) for check in CHECKS}
    except CaseError as e:
        sys.exit("generate.py: %s" % e)
    known = {c + ".cases" for c in CHECKS}
    for name in sorted(os.listdir(CASES_DIR)):
        if name.endswith(".cases") and name not in known:
            sys.exit("generate.py: %s is not a check of the matrix" % name)

    if args.score:
        args.label = args.label or os.path.abspath(args.score)
        results, broken = score(args, all_cases)
        print_scores(results, all_cases)
        with open(RESULTS, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, sort_keys=True)
            f.write("\n")
        print("wrote %s" % os.path.relpath(RESULTS, REPO))
        for path, text in outputs(all_cases, results).items():
            write(path, text)
        sys.exit(1 if broken else 0)

    results = load_results()
    files = outputs(all_cases, results)
    if args.docs:
        write(DOCS, files[DOCS])
        return
    if args.check:
        stale = []
        for path, text in sorted(files.items()):
            old = None
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    old = f.read()
            if old != text:
                stale.append(path)
                diff = difflib.unified_diff((old or "").splitlines(True), text.splitlines(True),
                                            os.path.relpath(path, REPO) + " (committed)",
                                            os.path.relpath(path, REPO) + " (generated)", n=1)
                sys.stdout.writelines(list(diff)[:40])
        extra = [os.path.join(GENERATED_DIR, n) for n in sorted(os.listdir(GENERATED_DIR))
                 if os.path.join(GENERATED_DIR, n) not in files] \
            if os.path.isdir(GENERATED_DIR) else []
        for path in stale + extra:
            print("out of date: %s" % os.path.relpath(path, REPO))
        if stale or extra:
            print("run `python3 test/carriers/generate.py` and commit the result")
            sys.exit(1)
        return
    for path, text in sorted(files.items()):
        write(path, text)


if __name__ == "__main__":
    main()
