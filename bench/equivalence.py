#!/usr/bin/env python3
"""Are torch-tidy's findings the same however it parses, on real headers?

On a LibTorch header set (--headers, the `torch` directory of an include
root: /usr/include/torch for Debian's libtorch-dev 1.13), for

  inputs     every TU of examples/, bench/corpus/ and test/integration/
  project    a generated corpus of --tus TUs (default 40) shaped like a
             real project (bench/project_corpus.py) from those TUs' bodies

this runs torch-tidy four ways and compares the JSON byte for byte:

  reference  --no-pch --no-skip-system-bodies: every TU parsed in full,
             every function body of the headers parsed
  skipped    --no-pch: the system bodies that no check reads skipped
  audit      --audit: skipped, and the shared preamble built and used
  plain      -p BUILD --all: a plain run, reusing the audit's preamble

It prints the findings count, the audit's summary line and the verdict.
Exit status 0 when everything is identical, 1 otherwise.

Usage: bench/equivalence.py [--headers /usr/include/torch] [--tus 40]
                            [-j 2] [--build-dir build] [--keep DIR]
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT
import project_corpus


def header_flags(torch_dir):
    """The flags that find a header set whose `torch` directory is given."""
    torch_dir = os.path.abspath(torch_dir)
    root = os.path.dirname(torch_dir)
    flags = ["-std=c++17", "-isystem", os.path.join(torch_dir, "csrc", "api", "include")]
    # /usr/include is searched anyway; -isystem on it would break libstdc++'s
    # #include_next.
    if root != "/usr/include":
        flags += ["-isystem", root]
    flags += ["-isystem", os.path.join(ROOT, "test", "shim")]
    if os.path.isdir("/usr/local/cuda/include"):
        flags += ["-isystem", "/usr/local/cuda/include"]
    return flags


def inputs():
    return (sorted(glob.glob(os.path.join(ROOT, "examples", "*.cpp")))
            + sorted(glob.glob(os.path.join(ROOT, "bench", "corpus", "*.cpp")))
            + sorted(glob.glob(os.path.join(ROOT, "test", "integration", "*.cpp"))))


def inputs_database(out, flags):
    """The inputs copied into OUT/src (with the headers they include by a
    quoted name), with their compile_commands.json."""
    src = os.path.join(out, "src")
    build = os.path.join(out, "build")
    os.makedirs(src)
    os.makedirs(build)
    database = []
    for path in inputs():
        # Files of the same name in different directories stay apart.
        sub = os.path.join(src, os.path.basename(os.path.dirname(path)))
        os.makedirs(sub, exist_ok=True)
        shutil.copy(path, sub)
        for header in glob.glob(os.path.join(os.path.dirname(path), "*.h")):
            shutil.copy(header, sub)
        name = os.path.join(sub, os.path.basename(path))
        database.append({"directory": sub, "file": name,
                         "arguments": ["clang++-19"] + flags + ["-c", name]})
    with open(os.path.join(build, "compile_commands.json"), "w") as f:
        json.dump(database, f, indent=2)
    return build


def run(driver, build, args, out, jobs):
    start = time.monotonic()
    proc = subprocess.run([driver, "--config={Checks: 'torch-*'}", "--format=json",
                           "-j%d" % jobs] + args,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=build)
    if proc.returncode not in (0, 1):
        sys.exit("error: exit %d from torch-tidy %s\n%s"
                 % (proc.returncode, " ".join(args), proc.stderr[-3000:]))
    with open(out, "w") as f:
        f.write(proc.stdout)
    return proc.stdout, proc.stderr, time.monotonic() - start


def compare(name, driver, build, work, jobs):
    cache = os.path.join(build, ".torch-tidy-cache")
    ways = [
        ("reference", ["--audit", "-p", build, "--no-pch", "--no-skip-system-bodies",
                       "--no-result-cache", "--cache-dir=" + cache + "-ref"]),
        ("skipped", ["--audit", "-p", build, "--no-pch", "--no-result-cache",
                     "--cache-dir=" + cache + "-ref"]),
        ("audit", ["--audit", "-p", build, "--no-result-cache"]),
        ("plain", ["-p", build, "--all"]),
    ]
    outputs, same = {}, True
    print("%s (%s):" % (name, build), flush=True)
    for way, args in ways:
        text, err, wall = run(driver, build, args, os.path.join(work, "%s-%s.json" % (name, way)),
                              jobs)
        outputs[way] = text
        summary = [l for l in err.splitlines() if "audit:" in l]
        print("  %-10s %6.1f s wall  %s" % (way, wall, summary[-1] if summary else ""),
              flush=True)
        if way != "reference" and text != outputs["reference"]:
            same = False
            print("  %-10s DIFFERS from the reference" % way)
    count = len(json.loads(outputs["reference"])["findings"])
    print("  %d findings; identical: %s" % (count, "yes" if same else "NO"), flush=True)
    return same


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headers", default="/usr/include/torch",
                    help="the `torch` directory of the header set")
    ap.add_argument("--tus", type=int, default=40)
    ap.add_argument("-j", type=int, default=2, dest="jobs")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--keep", help="generate the corpora here and keep them")
    args = ap.parse_args()

    driver = os.path.join(os.path.abspath(args.build_dir), "bin", "torch-tidy")
    if not os.access(driver, os.X_OK):
        sys.exit("error: %s not built" % driver)
    if not os.path.exists(os.path.join(args.headers, "csrc", "api", "include", "torch",
                                       "torch.h")):
        sys.exit("error: no LibTorch header set at %s" % args.headers)
    flags = header_flags(args.headers)
    work = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(
        prefix="torch-tidy-equivalence-")
    if args.keep:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    load = os.getloadavg()
    print("headers: %s; flags: %s; load average %.1f %.1f %.1f"
          % (args.headers, " ".join(flags), *load), flush=True)
    try:
        same = compare("inputs", driver, inputs_database(os.path.join(work, "inputs"), flags),
                       work, args.jobs)
        build, _ = project_corpus.make(os.path.join(work, "project"), inputs(), 5,
                                       args.tus, flags, compiler="clang++-19")
        same = compare("project", driver, build, work, args.jobs) and same
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("all identical: %s" % ("yes" if same else "NO"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
