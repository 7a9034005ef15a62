#!/usr/bin/env python3
"""Scores torch-tidy on the realistic corpus (test/realistic/).

The corpus is a set of LibTorch programs in which every true bug is marked
with `// BUG(torch-<check>): <why>` right above the statement that check must
flag (the convention of examples/ and scripts/check-examples.py), and the
near-misses that must stay silent are sometimes marked `// OK(torch-<check>)`.

  programs/*.cpp        single-file programs, each with its own main(); they
                        are analysed by one plain run over a generated compile
                        database (`torch-tidy -p DB --all -j2 --format=json`),
                        so no program sees another's summaries;
  projects/<name>/      small multi-file programs; each is analysed on its own
                        with `torch-tidy --audit -p DB --format=json`, so
                        facts cross its translation units.

Matching: a marker is caught when a finding of its check lies on the lines of
the statement after it (scripts/check-examples.py's span rule: from the first
code line after the comment to the line ending in `;` or `{`). A finding of
check C on a line that no BUG(C) marker covers is a false positive; several
findings on one marker's span count once.

Per check it prints: markers, caught, false positives, recall
(caught / markers) and precision (caught / (caught + false positives)), then
the totals, then every missed marker and every false positive with its file
and line. Exit status: 0 when every check has recall and precision 1.0,
1 otherwise, 2 when the tool failed (a compile error, a crash);
`--report-only` always exits 0.

Usage:
  score.py [--torch-tidy PATH] [--libtorch 1.13|2.6] [--only NAME]...
           [--json FILE] [--out-dir DIR] [--report-only]
"""

import argparse
import fnmatch
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROGRAMS = os.path.join(HERE, "programs")
PROJECTS = os.path.join(HERE, "projects")
SOURCE_EXTS = (".cpp", ".cc", ".cxx")
HEADER_EXTS = (".h", ".hpp")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The span rule and the LibTorch header sets are the repository's own.
check_examples = _load("check_examples", os.path.join(ROOT, "scripts", "check-examples.py"))
libtorch_sets = _load("libtorch_sets", os.path.join(ROOT, "scripts", "libtorch_sets.py"))
bug_spans = check_examples.bug_spans

OK = re.compile(r"//\s*OK\(([^)]*)\)")


def ok_spans(path):
    """{check: [(first, last)]}: the statement after each OK marker, by the
    same span rule as the BUG markers (an OK marker may name several checks,
    comma-separated)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    found = {}
    for i, text in enumerate(lines):
        m = OK.search(text)
        if not m:
            continue
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or lines[j].strip().startswith("//")):
            j += 1
        k = j
        while k < len(lines) and not re.sub(r"//.*", "", lines[k]).rstrip().endswith((";", "{")):
            k += 1
        for check in re.findall(r"torch-[a-z0-9-]+", m.group(1)):
            found.setdefault(check, []).append((j + 1, min(k, len(lines) - 1) + 1))
    return found


def build_dirs():
    """Where to look for build/libtorch-2.6: this checkout's build/, then the
    main worktree's (a `git worktree` has no build of its own)."""
    dirs = [os.path.join(ROOT, "build")]
    try:
        common = subprocess.run(["git", "-C", ROOT, "rev-parse", "--git-common-dir"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, check=True).stdout.strip()
        main = os.path.dirname(os.path.abspath(os.path.join(ROOT, common)))
        dirs.append(os.path.join(main, "build"))
    except (OSError, subprocess.CalledProcessError):
        pass
    return dirs


def header_flags(version, build_dir):
    name = "libtorch-" + version
    candidates = [build_dir] if build_dir else build_dirs()
    for d in candidates:
        if libtorch_sets.present(name, d):
            return libtorch_sets.flags(name, d)
    sys.exit("error: LibTorch header set %s is not present (looked in %s)"
             % (name, ", ".join(candidates)))


def write_db(directory, sources, flags, include_dirs=()):
    os.makedirs(directory, exist_ok=True)
    entries = []
    for src in sources:
        args = ["clang++-19"] + flags + ["-I" + d for d in include_dirs] + [
            "-c", src, "-o", os.devnull]
        entries.append({"directory": os.path.dirname(src), "file": src, "arguments": args})
    with open(os.path.join(directory, "compile_commands.json"), "w") as f:
        json.dump(entries, f, indent=1)


def run_tidy(cmd, log):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log.append({"command": cmd, "returncode": proc.returncode, "stderr": proc.stderr})
    if proc.returncode not in (0, 1):
        print("torch-tidy exited %d: %s\n%s" % (proc.returncode, " ".join(cmd),
                                                 proc.stderr.strip()), file=sys.stderr)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        print("error: torch-tidy printed no JSON for: %s\n%s" % (" ".join(cmd), proc.stderr),
              file=sys.stderr)
        return [], ["no JSON output (exit %d)" % proc.returncode]
    errors = [e.get("message", str(e)) for e in doc.get("toolErrors", [])]
    if proc.returncode not in (0, 1) and not errors:
        errors.append("exit status %d" % proc.returncode)
    return doc.get("findings", []), errors


def selected(name, only):
    return not only or any(fnmatch.fnmatch(name, pat) or pat in name for pat in only)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--torch-tidy", default=os.path.join(ROOT, "build", "bin", "torch-tidy"),
                        help="the torch-tidy binary (default: build/bin/torch-tidy)")
    parser.add_argument("--libtorch", choices=("1.13", "2.6"), default="1.13",
                        help="the LibTorch header set to compile against (default 1.13)")
    parser.add_argument("--build-dir", help="the build directory that holds libtorch-2.6/ "
                        "(default: build/, then the main worktree's build/)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="only the programs/projects whose name contains NAME or "
                        "matches the glob NAME (repeatable)")
    parser.add_argument("--json", metavar="FILE", help="also write the score as JSON to FILE")
    parser.add_argument("--out-dir", metavar="DIR",
                        help="keep the generated databases and torch-tidy's JSON in DIR")
    parser.add_argument("-j", type=int, default=2, help="torch-tidy's -j (default 2)")
    parser.add_argument("--report-only", action="store_true", help="always exit 0")
    args = parser.parse_args()

    if not os.access(args.torch_tidy, os.X_OK):
        sys.exit("error: no torch-tidy at %s (use --torch-tidy)" % args.torch_tidy)
    flags = header_flags(args.libtorch, args.build_dir)

    programs = sorted(os.path.realpath(p) for p in glob.glob(os.path.join(PROGRAMS, "*"))
                      if p.endswith(SOURCE_EXTS)
                      and selected(os.path.splitext(os.path.basename(p))[0], args.only))
    projects = sorted(os.path.realpath(p) for p in glob.glob(os.path.join(PROJECTS, "*"))
                      if os.path.isdir(p) and selected(os.path.basename(p), args.only))
    if not programs and not projects:
        sys.exit("error: nothing selected")

    work = args.out_dir or tempfile.mkdtemp(prefix="torch-tidy-realistic-")
    os.makedirs(work, exist_ok=True)
    findings, tool_errors, log = [], [], []
    scanned = []  # every file whose markers count

    if programs:
        db = os.path.join(work, "programs")
        write_db(db, programs, flags)
        got, errors = run_tidy([args.torch_tidy, "-p", db, "--all", "-j", str(args.j),
                                "--format=json", "--quiet"], log)
        findings += got
        tool_errors += ["programs: " + e for e in errors]
        scanned += programs
        with open(os.path.join(db, "findings.json"), "w") as f:
            json.dump(got, f, indent=1)

    for project in projects:
        name = os.path.basename(project)
        files = sorted(os.path.join(d, f) for d, _, fs in os.walk(project) for f in fs)
        sources = [f for f in files if f.endswith(SOURCE_EXTS)]
        headers = [f for f in files if f.endswith(HEADER_EXTS)]
        db = os.path.join(work, "projects", name)
        write_db(db, sources, flags, include_dirs=[project])
        got, errors = run_tidy([args.torch_tidy, "--audit", "-p", db,
                                "--cache-dir=" + os.path.join(db, "cache"),
                                "--header-filter=" + re.escape(project + os.sep),
                                "-j", str(args.j), "--format=json", "--quiet"], log)
        findings += got
        tool_errors += ["%s: %s" % (name, e) for e in errors]
        scanned += sources + headers
        with open(os.path.join(db, "findings.json"), "w") as f:
            json.dump(got, f, indent=1)

    # Markers.
    spans = {}  # (file, check) -> [(first, last)]
    oks = {}    # (file, check) -> [(first, last)]
    for path in scanned:
        for check, ss in bug_spans(path).items():
            spans.setdefault((path, check), []).extend(ss)
        for check, ss in ok_spans(path).items():
            oks.setdefault((path, check), []).extend(ss)

    checks = sorted({c for (_, c) in spans} | {f["check"] for f in findings})
    per = {c: {"markers": 0, "caught": 0, "false_positives": 0} for c in checks}
    missed, false_positives = [], []
    caught_keys = set()
    relative = lambda p: os.path.relpath(p, os.path.realpath(HERE))

    for f in findings:
        path, check, line = os.path.realpath(f["file"]), f["check"], f["line"]
        hit = None
        for first, last in spans.get((path, check), []):
            if first <= line <= last:
                hit = (path, check, first)
        if hit:
            caught_keys.add(hit)
            continue
        ok_here = any(first <= line <= last for first, last in oks.get((path, check), []))
        false_positives.append({"file": relative(path), "line": line, "check": check,
                                "message": f.get("message", ""), "ok_marker": ok_here})
        per[check]["false_positives"] += 1

    for (path, check), ss in sorted(spans.items()):
        for first, _ in ss:
            per[check]["markers"] += 1
            if (path, check, first) in caught_keys:
                per[check]["caught"] += 1
            else:
                missed.append({"file": relative(path), "line": first, "check": check})

    def ratios(d):
        d["recall"] = d["caught"] / d["markers"] if d["markers"] else 1.0
        flagged = d["caught"] + d["false_positives"]
        d["precision"] = d["caught"] / flagged if flagged else 1.0
        return d

    total = {"markers": sum(d["markers"] for d in per.values()),
             "caught": sum(d["caught"] for d in per.values()),
             "false_positives": sum(d["false_positives"] for d in per.values())}
    for d in per.values():
        ratios(d)
    ratios(total)
    near_misses = sum(len(v) for v in oks.values())

    width = max([len(c) for c in checks] + [5])
    print("torch-tidy on test/realistic (LibTorch %s): %d program(s), %d project(s)"
          % (args.libtorch, len(programs), len(projects)))
    print("%-*s %7s %6s %4s %7s %9s" % (width, "check", "markers", "caught", "FP",
                                        "recall", "precision"))
    for c in checks:
        d = per[c]
        print("%-*s %7d %6d %4d %7.2f %9.2f" % (width, c, d["markers"], d["caught"],
                                                d["false_positives"], d["recall"],
                                                d["precision"]))
    print("%-*s %7d %6d %4d %7.2f %9.2f" % (width, "total", total["markers"], total["caught"],
                                            total["false_positives"], total["recall"],
                                            total["precision"]))
    print("OK markers (near-misses that must stay silent): %d" % near_misses)
    for m in missed:
        print("MISS %s:%d [%s]" % (m["file"], m["line"], m["check"]))
    for fp in false_positives:
        print("FP   %s:%d [%s]%s %s" % (fp["file"], fp["line"], fp["check"],
                                        " (under an OK marker)" if fp["ok_marker"] else "",
                                        fp["message"]))
    for e in tool_errors:
        print("TOOL ERROR " + e)

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"libtorch": args.libtorch, "programs": [relative(p) for p in programs],
                       "projects": [relative(p) for p in projects], "checks": per,
                       "total": total, "ok_markers": near_misses, "missed": missed,
                       "false_positives": false_positives, "tool_errors": tool_errors},
                      f, indent=1)
    if not args.out_dir:
        shutil.rmtree(work, ignore_errors=True)

    if args.report_only:
        return 0
    if tool_errors:
        return 2
    perfect = all(d["recall"] == 1.0 and d["precision"] == 1.0 for d in per.values())
    return 0 if perfect else 1


if __name__ == "__main__":
    sys.exit(main())
