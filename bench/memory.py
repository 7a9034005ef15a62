#!/usr/bin/env python3
"""Peak memory of one TU with every torch-* check on, against parsing alone.

Measures the maximum resident set size (`/usr/bin/time -v`) of

  syntax-only  clang++-19 -fsyntax-only <flags> TU
  torch-tidy   BUILD/bin/torch-tidy --checks='-*,torch-*' -j1 TU -- <flags>
  plugin       clang-tidy-19 --load=BUILD/lib/libTorchTidy.so --checks='-*,torch-*' TU -- <flags>

each the median of --runs runs, and prints each one's ratio to syntax-only.
The TU includes the real <torch/torch.h> (Debian's libtorch-dev), so the
numbers are those of a real translation unit. Exit status 1 when torch-tidy's
ratio is above --limit (default 1.2), 2 on a usage or tool error.

Usage: bench/memory.py [--build-dir build] [--runs 3] [--limit 1.2] [TU]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT, libtorch_flags
DEFAULT_TU = os.path.join(ROOT, "bench", "corpus", "cnn_train.cpp")


def peak_rss_kib(cmd, ok_codes):
    """Maximum resident set size of one run of cmd, from GNU time -v."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        proc = subprocess.run(["/usr/bin/time", "-v", "-o", report.name] + cmd,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        text = report.read()
    if proc.returncode not in ok_codes:
        sys.exit("error: exit %d from: %s\n%s" %
                 (proc.returncode, " ".join(cmd), proc.stdout[-3000:]))
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if not match:
        sys.exit("error: no peak RSS in /usr/bin/time's report:\n" + text)
    return int(match.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--limit", type=float, default=1.2)
    parser.add_argument("tu", nargs="?", default=DEFAULT_TU)
    args = parser.parse_args()

    if not os.access("/usr/bin/time", os.X_OK):
        sys.exit("error: /usr/bin/time not found (Debian package 'time')")
    clangxx = shutil.which("clang++-19") or sys.exit("error: no clang++-19")
    clang_tidy = shutil.which("clang-tidy-19") or sys.exit("error: no clang-tidy-19")
    driver = os.path.join(args.build_dir, "bin", "torch-tidy")
    plugin = os.path.join(args.build_dir, "lib", "libTorchTidy.so")
    if not os.path.exists(driver):
        sys.exit("error: %s not built" % driver)
    tu = os.path.abspath(args.tu)
    flags = libtorch_flags()
    checks = "--checks=-*,torch-*"
    # A TU's own .clang-tidy must not turn checks off.
    config = "--config={Checks: '-*,torch-*'}"

    commands = [("syntax-only", [clangxx, "-fsyntax-only"] + flags + [tu], {0})]
    commands.append(("torch-tidy", [driver, config, checks, "--quiet", "-j1", "--no-pch",
                                    tu, "--"] + flags, {0, 1}))
    if os.path.exists(plugin):
        commands.append(("plugin", [clang_tidy, "--load=" + plugin, config,
                                    checks, "--quiet", tu, "--"] + flags,
                         {0, 1}))

    peaks = {}
    for name, cmd, ok in commands:
        peaks[name] = statistics.median(peak_rss_kib(cmd, ok)
                                        for _ in range(args.runs))
    base = peaks["syntax-only"]
    print("peak RSS of %s (median of %d runs):" %
          (os.path.relpath(tu, ROOT), args.runs))
    for name, _, _ in commands:
        print("  %-12s %8.1f MiB  %.3fx" % (name, peaks[name] / 1024.0,
                                            peaks[name] / base))
    ratio = peaks["torch-tidy"] / base
    if ratio > args.limit:
        print("torch-tidy's peak RSS is %.3fx that of -fsyntax-only, above "
              "the %.2fx limit" % (ratio, args.limit))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
