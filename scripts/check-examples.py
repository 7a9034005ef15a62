#!/usr/bin/env python3
"""Checks torch-tidy's findings on examples/ against the BUG/OK markers there.

Each `// BUG(torch-<check>): ...` comment in an example sits right above the
statement that check must flag. For every check the plugin implements (its
`--list-checks`), this script asserts that:
  * each BUG line of that check gets a warning of that check (recall), and
  * the check warns nowhere else in the examples (precision: the `// OK`
    code must stay silent).
Markers of checks that are not implemented yet are reported and skipped.

Usage:
  check-examples.py --clang-tidy=clang-tidy-19 --plugin=build/lib/libTorchTidy.so
                    [--out-dir=DIR] [--findings=TEXT] FILE... -- <compiler flags>
Exits 0 when everything matches, 1 otherwise, 2 on a tool error.
"""

import argparse
import concurrent.futures
import os
import re
import subprocess
import sys

BUG = re.compile(r"//\s*BUG\((torch-[a-z0-9-]+)\)")
WARNING = re.compile(r"^(.*?):(\d+):(\d+): warning: .*\[(torch-[a-z0-9-]+)\]$")


def bug_spans(path):
    """{check: [(first, last), ...]}: the lines of the statement after each
    BUG comment, from its first code line to the line that ends it (`;` or
    `{`), since a check may point into a statement that spans lines."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    found = {}
    for i, text in enumerate(lines):
        m = BUG.search(text)
        if not m:
            continue
        j = i + 1
        while j < len(lines) and (not lines[j].strip()
                                  or lines[j].strip().startswith("//")):
            j += 1
        k = j
        while k < len(lines) and not re.sub(r"//.*", "", lines[k]).rstrip().endswith((";", "{")):
            k += 1
        found.setdefault(m.group(1), []).append((j + 1, min(k, len(lines) - 1) + 1))
    return found


def implemented_checks(clang_tidy, plugin):
    out = subprocess.run(
        [clang_tidy, "--load=" + plugin, "--checks=-*,torch-*", "--list-checks"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        sys.exit("error: %s --list-checks failed:\n%s" % (clang_tidy, out.stdout))
    return sorted(set(re.findall(r"^\s+(torch-[a-z0-9-]+)\s*$", out.stdout, re.M)))


def run_tidy(clang_tidy, plugin, path, flags):
    cmd = [clang_tidy, "--load=" + plugin, "--checks=-*,torch-*", path, "--"] + flags
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    return proc.returncode, proc.stdout


def main():
    argv = sys.argv[1:]
    flags = []
    if "--" in argv:
        i = argv.index("--")
        argv, flags = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clang-tidy", default="clang-tidy-19")
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--out-dir", help="write each file's output to DIR/<name>.out")
    parser.add_argument("--findings", metavar="TEXT",
                        help="torch-tidy's text output for FILE... instead of a "
                        "clang-tidy run with the plugin")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)

    checks = implemented_checks(args.clang_tidy, args.plugin)
    if not checks:
        sys.exit("error: the plugin lists no torch-* checks")
    if args.findings:
        with open(args.findings, encoding="utf-8") as f:
            results = [(0, f.read())] * len(args.files)
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            results = list(pool.map(
                lambda f: run_tidy(args.clang_tidy, args.plugin, f, flags), args.files))

    problems, expected_all = [], {}
    for path, (rc, out) in zip(args.files, results):
        name = os.path.basename(path)
        if args.out_dir:
            os.makedirs(args.out_dir, exist_ok=True)
            with open(os.path.join(args.out_dir, name + ".out"), "w") as f:
                f.write(out)
        if rc != 0 or re.search(r"(^|\s)error:", out):
            print(out)
            problems.append("%s: clang-tidy failed (exit %d) or reported errors" % (name, rc))
            continue
        expected = bug_spans(path)
        for check, spans in expected.items():
            expected_all.setdefault(check, []).extend(
                "%s:%d" % (name, first) for first, _ in spans)
        got = {}
        for line in out.splitlines():
            m = WARNING.match(line)
            if m and os.path.basename(m.group(1)) == name:
                got.setdefault(m.group(4), set()).add(int(m.group(2)))
        for check in checks:
            spans = expected.get(check, [])
            have = got.get(check, set())
            for first, last in spans:
                if not any(first <= l <= last for l in have):
                    problems.append("%s:%d: missing [%s] at its BUG line" % (name, first, check))
            for l in sorted(have):
                if not any(first <= l <= last for first, last in spans):
                    problems.append("%s:%d: unexpected [%s] (no BUG marker for it here)"
                                    % (name, l, check))
        for check in sorted(set(got) - set(checks)):
            problems.append("%s: warning from unlisted check %s" % (name, check))

    for check in checks:
        if check not in expected_all:
            problems.append("%s is implemented but has no BUG marker in the examples" % check)
    for check in sorted(set(expected_all) - set(checks)):
        print("not implemented yet, skipped: %s (%s)"
              % (check, ", ".join(expected_all[check])))
    for check in checks:
        if check in expected_all and not any("[%s]" % check in p for p in problems):
            print("ok: %s flagged at %s" % (check, ", ".join(expected_all[check])))
    for p in problems:
        print("FAIL: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
