#!/usr/bin/env python3
"""Size and load time of the HTML report at scale.

Generates --files C++ sources (default 2,000) and a torch-tidy JSON document
with --findings findings over them (default 10,000; each with one to three
notes, some in a shared header as a chain across calls would be, a third
with a fix-it), builds the page with `torch-tidy report`, and loads it in
headless Chromium (scripts/headless_chromium.py), reading the page's own
clock: body[data-load-ms], performance.now() once the page is loaded and
laid out. Prints, against the targets of issue 16 (under 20 MB, under 2 s)
and against an empty page loaded the same way:

  page size      MB, and its ratio to the 20 MB target
  report time    s that `torch-tidy report` took to write it
  load time      ms (median of --runs loads), and its ratio to the 2 s
                 target and to the empty page's

Exit status 1 when the page is over 20 MB or loads in 2 s or more, 2 on a
usage or tool error. Not a test: the figures depend on the machine.

Usage: bench/html_report.py [--build-dir build] [--files 2000]
                            [--findings 10000] [--runs 3] [--keep DIR]
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import headless_chromium  # noqa: E402

MAX_BYTES = 20 * 1000 * 1000
MAX_LOAD_MS = 2000
CHECKS = [
    ("torch-device-mismatch", "module 'net' has its parameters on CUDA but is called with 'x' on CPU",
     ["'net' is on CUDA from here", "'x' is on CPU from here"]),
    ("torch-tensor-to-discarded", "result of 'x.cuda()' is discarded; tensor conversions return a new tensor",
     []),
    ("torch-non-blocking-pageable", "non_blocking copy of 'batch' to 'device' from pageable memory runs synchronously",
     ["'batch' comes from a torch::data loader, which collates batches in pageable memory"]),
    ("torch-empty-cache-in-loop", "'emptyCache()' inside a loop synchronises the device every iteration",
     ["the loop that repeats the call"]),
    ("torch-loss-accumulation-graph", "'loss' is still attached to its autograd graph and is appended to 'losses'",
     ["'loss' joins the autograd graph here", "passed to 'accumulate' here", "stored in 'losses' here"]),
    ("torch-host-sync-in-loop", "'loss.item()' synchronises the host with the device on every training step",
     ["the training loop"]),
]


def source_lines(index):
    """A plausible LibTorch source of about 120 lines."""
    lines = ['#include "model.h"', "#include <torch/torch.h>", ""]
    for fn in range(10):
        lines += ["void step_%d_%d(Net &net, torch::Device device) {" % (index, fn),
                  "  auto x = torch::randn({8, 4});",
                  "  net->to(device);",
                  "  for (int i = 0; i < 100; ++i) {",
                  "    auto y = net->forward(x);",
                  "    auto loss = torch::mse_loss(y, torch::zeros({8, 2}));",
                  "    x.cuda();",
                  "    c10::cuda::CUDACachingAllocator::emptyCache();",
                  "    std::cout << loss.item<float>() << '\\n';",
                  "  }",
                  "}", ""]
    return lines


def generate(directory, files, findings):
    src = os.path.join(directory, "src")
    os.makedirs(src)
    header = os.path.join(src, "model.h")
    with open(header, "w") as f:
        f.write("#pragma once\n" + "\n".join("// model line %d" % i for i in range(60)) + "\n")
    paths, offsets = [], []
    for i in range(files):
        path = os.path.join(src, "dir%02d" % (i % 40), "train_%04d.cpp" % i)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        text = "\n".join(source_lines(i)) + "\n"
        with open(path, "w") as f:
            f.write(text)
        paths.append(path)
        starts = [0]
        for line in text.split("\n"):
            starts.append(starts[-1] + len(line) + 1)
        offsets.append(starts)
    out = []
    for n in range(findings):
        file_index = n % files
        path = paths[file_index]
        fn = (n // files) % 10
        line = 3 + fn * 12 + 5
        check, message, notes = CHECKS[n % len(CHECKS)]
        finding = {"check": check, "level": "warning", "file": path, "line": line, "column": 14,
                   "message": message, "notes": [], "fixes": []}
        for k, note in enumerate(notes):
            in_header = k == 1 and check == "torch-loss-accumulation-graph"
            finding["notes"].append({"file": header if in_header else path,
                                     "line": 20 + k if in_header else line - 2 + k,
                                     "column": 3, "message": note})
        if n % 3 == 0:
            fix_line = 3 + fn * 12 + 7
            offset = offsets[file_index][fix_line - 1] + 4
            finding["fixes"].append({"file": path, "offset": offset, "length": 0,
                                     "replacement": "x = ", "line": fix_line, "column": 5})
        out.append(finding)
    out.sort(key=lambda f: (f["file"], f["line"], f["column"], f["check"], f["message"]))
    digests = {}
    for path in paths + [header]:
        with open(path, "rb") as f:
            digests[path] = {"sha256": hashlib.sha256(f.read()).hexdigest()}
    document = {"version": 1, "tool": {"name": "torch-tidy", "version": "0.1.0"},
                "findings": out, "toolErrors": [], "files": digests}
    path = os.path.join(directory, "findings.json")
    with open(path, "w") as f:
        json.dump(document, f)
    return path


def load_ms(page):
    dom, console = headless_chromium.dump_dom("file://" + page)
    match = re.search(r'data-load-ms="(\d+)"', dom)
    if not match:
        sys.exit("error: %s did not record its load time (console: %r)" % (page, console[:3]))
    if console:
        sys.exit("error: %s logged to the console: %r" % (page, console[:3]))
    return int(match.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--findings", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", help="generate into this directory and keep it")
    args = ap.parse_args()
    tool = os.path.join(args.build_dir, "bin", "torch-tidy")
    if not os.access(tool, os.X_OK):
        sys.exit("error: %s not built" % tool)
    if not headless_chromium.find_chromium():
        sys.exit("error: no chromium on PATH (scripts/setup.sh installs it)")
    work = args.keep or tempfile.mkdtemp(prefix="torch-tidy-html-bench-")
    if args.keep:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    try:
        findings = generate(work, args.files, args.findings)
        page = os.path.join(work, "report.html")
        start = time.monotonic()
        subprocess.run([tool, "report", findings, "-o", page], check=True)
        report_s = time.monotonic() - start
        size = os.path.getsize(page)
        # The same clock on an empty page: what loading anything costs.
        empty = os.path.join(work, "empty.html")
        with open(empty, "w") as f:
            f.write("<!DOCTYPE html><title>empty</title><body><script>addEventListener("
                    "'load', function () { document.body.getBoundingClientRect(); "
                    "document.body.setAttribute('data-load-ms', String(Math.round("
                    "performance.now()))); });</script></body>\n")
        loads = [load_ms(page) for _ in range(args.runs)]
        empties = [load_ms(empty) for _ in range(args.runs)]
    except subprocess.CalledProcessError as e:
        sys.exit("error: %s" % e)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    load, base = statistics.median(loads), statistics.median(empties)
    print("HTML report of %d findings over %d files (median of %d loads in headless Chromium)"
          % (args.findings, args.files, args.runs))
    print("  page size    %6.2f MB   %.2fx the 20 MB target" % (size / 1e6, size / MAX_BYTES))
    print("  report time  %6.2f s    (torch-tidy report)" % report_s)
    print("  load time    %6d ms   %.2fx the 2 s target, %.1fx an empty page (%d ms); runs %s"
          % (load, load / MAX_LOAD_MS, load / max(base, 1), base, loads))
    return 0 if size < MAX_BYTES and load < MAX_LOAD_MS else 1


if __name__ == "__main__":
    sys.exit(main())
