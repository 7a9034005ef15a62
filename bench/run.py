#!/usr/bin/env python3
"""What do the torch-* checks cost on top of parsing?

For each translation unit of a small LibTorch corpus (examples/*.cpp and
bench/corpus/*.cpp; each includes <torch/torch.h>) this measures, one process
at a time, the wall time and peak RSS (GNU time) of:

  syntax-only  clang++-19 -fsyntax-only <flags> TU
  plugin       clang-tidy-19 --load=BUILD/lib/libTorchTidy.so --checks='-*,torch-*' TU -- <flags>
  torch-tidy   BUILD/bin/torch-tidy --checks='-*,torch-*' -j 1 --no-pch TU -- <flags>
               (when built): one TU parsed in full, system bodies skipped
  all-bodies   the same with --no-skip-system-bodies
  pre-commit   BUILD/bin/torch-tidy ... TU -- <flags> with a warm cache (the
               shared preamble built by one untimed run first): what the
               pre-commit hook costs per changed file

each the median of --runs runs, and prints a table with the per-TU ratios to
syntax-only and their medians (of CPU time, wall time and peak RSS; on a
shared machine, CPU time is the stable one). clang-tidy's own overhead (its driver, option
handling, diagnostic engine) is part of the plugin's and the driver's numbers:
that is what a user pays.

Usage: bench/run.sh [--runs N] [--build-dir build] [--json FILE] [TU...]
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT, libtorch_flags


def measure(cmd, ok_codes, cwd):
    """(wall s, CPU s (user + system), peak RSS KiB, output) of one run of
    cmd."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        full = ["/usr/bin/time", "-o", tf.name, "-f", "%e %U %S %M"] + cmd
        proc = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=cwd)
        fields = tf.read().split()
    if proc.returncode not in ok_codes:
        sys.exit("error: exit %d from: %s\n%s" % (proc.returncode, " ".join(cmd),
                                                 proc.stdout[-3000:]))
    wall, user, system, rss = fields[-4:]
    return float(wall), float(user) + float(system), int(rss), proc.stdout


def median_of(runs, cmd, ok_codes, cwd):
    """The medians of wall, CPU and peak RSS, and the first run's output."""
    samples = [measure(cmd, ok_codes, cwd) for _ in range(runs)]
    return tuple(statistics.median(s[i] for s in samples)
                 for i in range(3)) + (samples[0][3],)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("tus", nargs="*", help="TUs (default: examples/ and bench/corpus/)")
    args = parser.parse_args()

    for tool in ("clang++-19", "clang-tidy-19"):
        if not shutil.which(tool):
            sys.exit("error: %s not found (run scripts/setup.sh)" % tool)
    if not os.path.exists("/usr/bin/time"):
        sys.exit("error: /usr/bin/time not found (apt-get install time)")
    plugin = os.path.join(os.path.abspath(args.build_dir), "lib", "libTorchTidy.so")
    if not os.path.exists(plugin):
        sys.exit("error: %s not found (build first: scripts/setup.sh)" % plugin)
    driver = os.path.join(os.path.abspath(args.build_dir), "bin", "torch-tidy")
    tus = args.tus or (sorted(glob.glob(os.path.join(ROOT, "examples", "*.cpp")))
                       + sorted(glob.glob(os.path.join(ROOT, "bench", "corpus", "*.cpp"))))
    if len(tus) < 1:
        sys.exit("error: no translation units")

    # Run each TU from a scratch copy of its directory's sources, so that the
    # driver finds no compile_commands.json above it and uses the flags.
    scratch = tempfile.mkdtemp(prefix="torch-tidy-bench-")
    flags = libtorch_flags()
    tools = [("syntax-only", lambda tu: ["clang++-19", "-fsyntax-only"] + flags + [tu], (0,)),
             ("plugin", lambda tu: ["clang-tidy-19", "--load=" + plugin,
                                    "--checks=-*,torch-*", "--quiet", tu, "--"] + flags, (0,))]
    cache = os.path.join(scratch, "cache")
    if os.access(driver, os.X_OK):
        tidy = [driver, "--checks=-*,torch-*", "-j", "1", "--quiet"]
        tools += [("torch-tidy", lambda tu: tidy + ["--no-pch", tu, "--"] + flags, (0, 1)),
                  ("all-bodies", lambda tu: tidy + ["--no-pch", "--no-skip-system-bodies",
                                                    tu, "--"] + flags, (0, 1)),
                  ("pre-commit", lambda tu: tidy + ["--cache-dir=" + cache, tu, "--"]
                   + flags, (0, 1))]
    else:
        print("note: %s not built; measuring the plugin only" % driver)

    load = os.getloadavg()[0]
    print("corpus: %d TUs, %d run(s) each, load average %.1f on %d cores%s"
          % (len(tus), args.runs, load, os.cpu_count() or 0,
             " (busy machine: numbers are noisy)" if load > 1.0 else ""))
    results = []
    identical = True
    try:
        for tu in tus:
            src_dir = os.path.dirname(os.path.abspath(tu))
            work = os.path.join(scratch, os.path.basename(src_dir))
            if not os.path.isdir(work):
                shutil.copytree(src_dir, work, ignore=shutil.ignore_patterns(
                    "compile_commands.json*", "CMakeLists.txt"))
            local = os.path.join(work, os.path.basename(tu))
            row = {"tu": os.path.relpath(os.path.abspath(tu), ROOT)}
            if any(t[0] == "pre-commit" for t in tools):
                measure([t for t in tools if t[0] == "pre-commit"][0][1](local),
                        (0, 1), work)  # warms the cache (untimed)
            outputs = {}
            for name, make, ok in tools:
                *row[name], outputs[name] = median_of(args.runs, make(local), ok, work)
                print("  %-32s %-12s wall %6.2f s  cpu %6.2f s  %6.0f MiB"
                      % (row["tu"], name, row[name][0], row[name][1], row[name][2] / 1024),
                      flush=True)
            # The driver's findings, however it parses, are the same bytes.
            driver_outputs = {outputs[n] for n in outputs if n not in ("syntax-only", "plugin")}
            row["identical"] = len(driver_outputs) <= 1
            identical = identical and row["identical"]
            results.append(row)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    names = [t[0] for t in tools]
    print()
    print("%-32s" % "TU" + "".join("%13s" % n for n in names)
          + "".join("%18s" % ("%s/syn" % n) for n in names[1:]) + "   (CPU s, user+sys)")
    for row in results:
        base = row["syntax-only"][1]
        print("%-32s" % row["tu"] + "".join("%13.2f" % row[n][1] for n in names)
              + "".join("%18.3f" % (row[n][1] / base) for n in names[1:]))
    print()
    summary = {}
    for n in names[1:]:
        ratio = {k: statistics.median(r[n][i] / r["syntax-only"][i] for r in results)
                 for i, k in enumerate(("wall", "cpu", "rss"))}
        summary[n] = ratio
        print("ratio(%s/syntax-only): median over %d TUs: CPU time %.3f (%+.1f%%), "
              "wall %.3f (%+.1f%%), peak RSS %.3f (%+.1f%%)"
              % (n, len(results), ratio["cpu"], (ratio["cpu"] - 1) * 100,
                 ratio["wall"], (ratio["wall"] - 1) * 100,
                 ratio["rss"], (ratio["rss"] - 1) * 100))
    print("torch-tidy's findings identical with and without skipping and with the "
          "warm preamble: %s" % ("yes" if identical else "NO"))
    end_load = os.getloadavg()[0]
    print("load average: %.1f at the start, %.1f at the end" % (load, end_load))
    if load > 1.0:
        print("(the machine was busy: CPU time is the more trustworthy figure)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": args.runs, "load": load, "results": results,
                       "summary": summary, "identical": identical}, f, indent=2)
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
