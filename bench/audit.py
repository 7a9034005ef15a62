#!/usr/bin/env python3
"""How long does auditing a whole LibTorch codebase take?

Generates a corpus of --tus translation units (default 12) from the sources
in bench/corpus/ and examples/ (each includes <torch/torch.h>, directly or
through examples/net.h; every copy gets its own name and one function of its
own), with a compile_commands.json, and measures on it, one after the other:

  syntax-only     clang++-19 -fsyntax-only, each TU in turn (the sum: the
                  floor for anything that parses every TU in full)
  run-clang-tidy  run-clang-tidy-19 -j J -load BUILD/lib/libTorchTidy.so
                  -checks='-*,torch-*'
  audit           torch-tidy --audit -j J, cold cache (PCHs built, all TUs
                  analysed)
  audit (warm)    the same command again: nothing changed
  no-pch -j1      torch-tidy --audit --no-pch --no-result-cache -j1: the
                  checks' cost over syntax-only, TU by TU (the overhead target)

For each it prints wall time, CPU time, peak RSS of the largest process
(GNU time) and of the whole process tree (sampled every 50 ms), and the
ratios. It also checks that the audit's findings equal the no-PCH run's.

Usage: bench/audit.sh [--tus N] [-j J] [--build-dir build] [--json FILE]
                      [--skip-overhead] [--keep DIR]
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import ROOT, libtorch_flags


def make_corpus(out, count):
    """OUT/src/tu_NN.cpp (+ net.h) and OUT/build/compile_commands.json."""
    src = os.path.join(out, "src")
    build = os.path.join(out, "build")
    os.makedirs(src)
    os.makedirs(build)
    shutil.copy(os.path.join(ROOT, "examples", "net.h"), src)
    templates = (sorted(glob.glob(os.path.join(ROOT, "bench", "corpus", "*.cpp")))
                 + [os.path.join(ROOT, "examples", n) for n in ("train.cpp", "eval.cpp")])
    database = []
    for k in range(count):
        template = templates[k % len(templates)]
        with open(template) as f:
            text = f.read()
        # One function of its own, so that no two TUs are the same file.
        text += ("\n// bench copy %d of %s\nint bench_copy_%d() { return %d; }\n"
                 % (k, os.path.basename(template), k, k))
        name = "tu_%02d_%s" % (k, os.path.basename(template))
        with open(os.path.join(src, name), "w") as f:
            f.write(text)
        database.append({"directory": src, "file": name,
                         "arguments": ["clang++-19"] + libtorch_flags()
                         + ["-c", name, "-o", name + ".o"]})
    with open(os.path.join(build, "compile_commands.json"), "w") as f:
        json.dump(database, f, indent=2)
    return src, build, [e["file"] for e in database]


def tree_rss_kib(pid):
    """Sum of VmRSS over pid and its descendants."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
        except OSError:
            pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open("/proc/%d/status" % p) as f:
                m = re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M)
            total += int(m.group(1)) if m else 0
        except OSError:
            pass
    return total


def measure(cmd, cwd, ok=(0,), stdout=None):
    """{wall, cpu, rss_max (KiB, largest process), rss_tree (KiB, sampled)}."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        full = ["/usr/bin/time", "-v", "-o", tf.name] + cmd
        out = open(stdout, "w") if stdout else subprocess.DEVNULL
        start = time.monotonic()
        proc = subprocess.Popen(full, cwd=cwd, stdout=out, stderr=subprocess.PIPE, text=True)
        peak = [0]

        def sample():
            while proc.poll() is None:
                peak[0] = max(peak[0], tree_rss_kib(proc.pid))
                time.sleep(0.05)
        sampler = threading.Thread(target=sample)
        sampler.start()
        _, err = proc.communicate()
        sampler.join()
        wall = time.monotonic() - start
        if stdout:
            out.close()
        report = tf.read()
    if proc.returncode not in ok:
        sys.exit("error: exit %d from %s\n%s" % (proc.returncode, " ".join(cmd), err[-3000:]))

    def field(name):
        m = re.search(r"%s: ([\d.:]+)" % re.escape(name), report)
        return m.group(1) if m else "0"
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    return {"wall": wall, "cpu": cpu, "rss_max": int(field("Maximum resident set size (kbytes)")),
            "rss_tree": peak[0], "stderr": err}


def fmt(row):
    return "wall %7.1f s  cpu %7.1f s  peak RSS %6.0f MiB (largest process) %6.0f MiB (tree)" % (
        row["wall"], row["cpu"], row["rss_max"] / 1024, row["rss_tree"] / 1024)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tus", type=int, default=12)
    ap.add_argument("-j", type=int, default=2, dest="jobs")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--skip-overhead", action="store_true",
                    help="skip the slow TU-by-TU no-PCH run")
    ap.add_argument("--keep", help="generate the corpus here and keep it")
    args = ap.parse_args()

    build_dir = os.path.abspath(args.build_dir)
    plugin = os.path.join(build_dir, "lib", "libTorchTidy.so")
    driver = os.path.join(build_dir, "bin", "torch-tidy")
    for tool in ("clang++-19", "run-clang-tidy-19", "clang-tidy-19"):
        if not shutil.which(tool):
            sys.exit("error: %s not found (run scripts/setup.sh)" % tool)
    for path in (plugin, driver, "/usr/bin/time"):
        if not os.path.exists(path):
            sys.exit("error: %s not found (build first; apt-get install time)" % path)
    if not any(os.path.isfile(os.path.join(d, "torch", "torch.h")) for d in libtorch_flags()):
        sys.exit("error: the LibTorch headers are not installed (libtorch-dev)")

    work = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="torch-tidy-audit-")
    if args.keep and os.path.exists(work):
        shutil.rmtree(work)
    try:
        src, build, tus = make_corpus(work, args.tus)
        cache = os.path.join(work, "cache")
        load = os.getloadavg()
        print("corpus: %d TUs in %s; -j%d; load average %.1f %.1f %.1f on %d cores"
              % (len(tus), src, args.jobs, load[0], load[1], load[2], os.cpu_count() or 0),
              flush=True)
        rows = {}

        total = {"wall": 0.0, "cpu": 0.0, "rss_max": 0, "rss_tree": 0}
        for tu in tus:
            r = measure(["clang++-19", "-fsyntax-only"] + libtorch_flags() + [tu], src)
            total["wall"] += r["wall"]
            total["cpu"] += r["cpu"]
            total["rss_max"] = max(total["rss_max"], r["rss_max"])
            total["rss_tree"] = max(total["rss_tree"], r["rss_tree"])
        rows["syntax-only (sum)"] = total
        print("  %-22s %s" % ("syntax-only (sum)", fmt(total)), flush=True)

        rows["run-clang-tidy -j%d" % args.jobs] = measure(
            ["run-clang-tidy-19", "-j", str(args.jobs), "-p", build, "-load", plugin,
             "-clang-tidy-binary", shutil.which("clang-tidy-19"),
             "-checks=-*,torch-*", "-quiet"], src)
        print("  %-22s %s" % ("run-clang-tidy -j%d" % args.jobs,
                              fmt(rows["run-clang-tidy -j%d" % args.jobs])), flush=True)

        audit_cmd = [driver, "--audit", "-p", build, "-j%d" % args.jobs,
                     "--cache-dir=" + cache, "--format=json"]
        audit_json = os.path.join(work, "audit.json")
        rows["audit -j%d" % args.jobs] = measure(audit_cmd, src, ok=(0, 1), stdout=audit_json)
        print("  %-22s %s" % ("audit -j%d" % args.jobs, fmt(rows["audit -j%d" % args.jobs])),
              flush=True)
        summary = [l for l in rows["audit -j%d" % args.jobs]["stderr"].splitlines()
                   if "audit:" in l]
        print("      " + (summary[-1] if summary else "(no summary)"))
        warm_json = os.path.join(work, "warm.json")
        rows["audit (warm)"] = measure(audit_cmd, src, ok=(0, 1), stdout=warm_json)
        print("  %-22s %s" % ("audit (warm)", fmt(rows["audit (warm)"])), flush=True)

        same = open(audit_json).read() == open(warm_json).read()
        if not args.skip_overhead:
            full_json = os.path.join(work, "full.json")
            rows["no-pch -j1"] = measure(
                [driver, "--audit", "-p", build, "-j1", "--no-pch", "--no-result-cache",
                 "--cache-dir=" + cache, "--format=json"], src, ok=(0, 1), stdout=full_json)
            print("  %-22s %s" % ("no-pch -j1", fmt(rows["no-pch -j1"])), flush=True)
            same = same and open(audit_json).read() == open(full_json).read()

        rct = rows["run-clang-tidy -j%d" % args.jobs]
        audit = rows["audit -j%d" % args.jobs]
        ratios = {
            "run-clang-tidy / audit (wall)": rct["wall"] / audit["wall"],
            "audit cold / warm (wall)": audit["wall"] / rows["audit (warm)"]["wall"],
            "syntax-only sum / audit (wall)": total["wall"] / audit["wall"],
        }
        if "no-pch -j1" in rows:
            ratios["no-pch -j1 / syntax-only (CPU)"] = rows["no-pch -j1"]["cpu"] / total["cpu"]
            ratios["no-pch -j1 / syntax-only (wall)"] = rows["no-pch -j1"]["wall"] / total["wall"]
        print()
        for name, value in ratios.items():
            print("  %-34s %6.2fx" % (name, value))
        print("  findings identical (cold, warm%s): %s"
              % ("" if args.skip_overhead else ", no-pch", "yes" if same else "NO"))
        end_load = os.getloadavg()
        print("  load average at the end: %.1f %.1f %.1f" % end_load)
        if args.json:
            for row in rows.values():
                row.pop("stderr", None)
            with open(args.json, "w") as f:
                json.dump({"tus": len(tus), "jobs": args.jobs, "load_start": load,
                           "load_end": end_load, "rows": rows, "ratios": ratios,
                           "identical": same}, f, indent=2)
        return 0 if same else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
