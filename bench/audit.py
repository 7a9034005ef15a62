#!/usr/bin/env python3
"""How long does auditing a whole LibTorch codebase take?

Generates corpora of --tus translation units (default: 10 and 40) over the
real LibTorch headers, in one or both shapes (--shape):

  homogeneous   the bodies of bench/corpus/ and examples/ in one directory,
                one set of flags; each includes <torch/torch.h> itself or
                through examples/net.h
  project       the same bodies as a project that CMake builds
                (bench/project_corpus.py): five targets, each with its own
                compile directory and -I dir, every TU reaching
                <torch/torch.h> through its project header

and measures on each, one after the other:

  syntax-only     clang++-19 -fsyntax-only, each TU in turn (the sum)
  plugin          clang-tidy-19 --load=libTorchTidy.so, each TU in turn
  tidy            torch-tidy TU by TU (-j1), no shared preamble: what the
                  parse of one TU costs, system bodies skipped
  tidy all-bodies the same with --no-skip-system-bodies
  run-clang-tidy  run-clang-tidy-19 -j J -load libTorchTidy.so
  audit cold      torch-tidy --audit -j J, empty cache
  audit warm      the same command again: nothing changed

For each it prints wall time, CPU time and peak RSS (of the largest process,
GNU time; and of the process tree, sampled every 50 ms), then the ratios,
with the corpora side by side. It checks that every torch-tidy run and
run-clang-tidy report the same findings. The TU-by-TU rows cost minutes per
TU set; --per-tu-max N measures them only on corpora of at most N TUs.

Usage: bench/audit.sh [--tus 10,40] [-j 2] [--shape both] [--per-tu-max N]
                      [--build-dir build] [--json FILE] [--keep DIR]
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
import project_corpus


def bodies():
    return (sorted(glob.glob(os.path.join(ROOT, "bench", "corpus", "*.cpp")))
            + [os.path.join(ROOT, "examples", n) for n in ("train.cpp", "eval.cpp")])


def make_homogeneous(out, count):
    """OUT/src/tu_NN.cpp (+ net.h) and OUT/build/compile_commands.json."""
    src = os.path.join(out, "src")
    build = os.path.join(out, "build")
    os.makedirs(src)
    os.makedirs(build)
    shutil.copy(os.path.join(ROOT, "examples", "net.h"), src)
    templates = bodies()
    database, files = [], []
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
        files.append(os.path.join(src, name))
    with open(os.path.join(build, "compile_commands.json"), "w") as f:
        json.dump(database, f, indent=2)
    return build, files


def make_project(out, count):
    return project_corpus.make(out, bodies(), 5, count, libtorch_flags(),
                               compiler="clang++-19")


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


def summed(commands, ok=(0,)):
    """The rows of (command, directory)s run one after the other, added up
    (peaks: the largest)."""
    total = {"wall": 0.0, "cpu": 0.0, "rss_max": 0, "rss_tree": 0, "stderr": ""}
    for cmd, cwd in commands:
        r = measure(cmd, cwd, ok)
        for k in ("wall", "cpu"):
            total[k] += r[k]
        for k in ("rss_max", "rss_tree"):
            total[k] = max(total[k], r[k])
    return total


def findings(path):
    """(file, line, column, check) of every finding of a JSON report."""
    with open(path) as f:
        return sorted(set((d["file"], d["line"], d["column"], d["check"])
                          for d in json.load(f)["findings"]))


def rct_findings(text, files):
    """The findings of run-clang-tidy's output; clang-tidy names a file as
    its compile command does, relative or not: resolved against \p files."""
    found = set()
    for m in re.finditer(r"^([^\s:\[][^:\n]*):(\d+):(\d+): (?:warning|error): .*\[([\w\-.,]+)\]$",
                         text, re.M):
        path = m.group(1)
        if not os.path.isabs(path):
            path = next((f for f in files if f.endswith(os.sep + path)), path)
        found.add((path, int(m.group(2)), int(m.group(3)),
                   m.group(4).split(",")[0]))
    return sorted(found)


def run_corpus(shape, count, args, tools):
    work = tempfile.mkdtemp(prefix="torch-tidy-audit-")
    if args.keep:
        work = os.path.join(os.path.abspath(args.keep), "%s-%d" % (shape, count))
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    try:
        build, files = (make_project if shape == "project" else make_homogeneous)(
            os.path.join(work, "corpus"), count)
        with open(os.path.join(build, "compile_commands.json")) as f:
            entries = json.load(f)
        cwd = os.path.dirname(files[0])
        load = os.getloadavg()
        print("\n%s corpus: %d TUs in %s; -j%d; load average %.1f %.1f %.1f on %d cores"
              % (shape, len(files), os.path.dirname(build), args.jobs, load[0], load[1],
                 load[2], os.cpu_count() or 0), flush=True)
        rows = {}

        def show(name):
            r = rows[name]
            print("  %-16s wall %7.1f s  cpu %7.1f s  peak RSS %6.0f MiB (largest) %6.0f MiB (tree)"
                  % (name, r["wall"], r["cpu"], r["rss_max"] / 1024, r["rss_tree"] / 1024),
                  flush=True)

        per_tu = count <= args.per_tu_max
        if per_tu:
            rows["syntax-only"] = summed(
                [(["clang++-19", "-fsyntax-only"] + syntax_only_args(e), e["directory"])
                 for e in entries])
            show("syntax-only")
            rows["plugin"] = summed(
                [([tools["clang-tidy"], "--load=" + tools["plugin"], "--checks=-*,torch-*",
                   "--quiet", "-p", build, f], e["directory"])
                 for e, f in zip(entries, files)], ok=(0, 1))
            show("plugin")
        cache = os.path.join(work, "cache")
        outputs = {}
        tidy = [tools["driver"], "--audit", "-p", build, "--format=json",
                "--cache-dir=" + cache]
        if per_tu:
            for name, extra in (("tidy", []), ("tidy all-bodies", ["--no-skip-system-bodies"])):
                outputs[name] = os.path.join(work, name.replace(" ", "-") + ".json")
                rows[name] = measure(tidy + ["-j1", "--no-pch", "--no-result-cache"] + extra,
                                     cwd, ok=(0, 1), stdout=outputs[name])
                show(name)
        rct = "run-clang-tidy -j%d" % args.jobs
        rct_out = os.path.join(work, "run-clang-tidy.txt")
        rows[rct] = measure([tools["run-clang-tidy"], "-j", str(args.jobs), "-p", build,
                             "-load", tools["plugin"], "-clang-tidy-binary", tools["clang-tidy"],
                             "-checks=-*,torch-*", "-quiet"], cwd, stdout=rct_out)
        with open(rct_out) as f:
            rct_found = rct_findings(f.read(), files)
        show(rct)
        for name in ("audit cold", "audit warm"):
            outputs[name] = os.path.join(work, name.replace(" ", "-") + ".json")
            rows[name] = measure(tidy + ["-j%d" % args.jobs], cwd, ok=(0, 1),
                                 stdout=outputs[name])
            show(name)
            summary = [l for l in rows[name]["stderr"].splitlines() if "audit:" in l]
            print("      " + (summary[-1] if summary else "(no summary)"))

        reference = open(outputs["audit cold"]).read()
        same = all(open(p).read() == reference for p in outputs.values())
        same_rct = findings(outputs["audit cold"]) == rct_found
        return {"shape": shape, "tus": len(files), "load_start": load,
                "load_end": os.getloadavg(), "rows": rows, "identical": same,
                "identical_rct": same_rct, "rct_findings": len(rct_found)}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def syntax_only_args(entry):
    """The entry's arguments without the compiler, `-c` and `-o X`."""
    a = list(entry["arguments"][1:])
    while "-o" in a:
        i = a.index("-o")
        del a[i:i + 2]
    return [x for x in a if x != "-c"]


def ratios(result):
    rows = result["rows"]
    out = {}
    rct = [k for k in rows if k.startswith("run-clang-tidy")][0]
    out["run-clang-tidy / audit cold (wall)"] = rows[rct]["wall"] / rows["audit cold"]["wall"]
    out["run-clang-tidy / audit cold (CPU)"] = rows[rct]["cpu"] / rows["audit cold"]["cpu"]
    out["audit cold / warm (wall)"] = rows["audit cold"]["wall"] / rows["audit warm"]["wall"]
    if "syntax-only" in rows:
        base = rows["syntax-only"]
        out["syntax-only sum / audit cold (wall)"] = base["wall"] / rows["audit cold"]["wall"]
        for name in ("tidy", "tidy all-bodies", "plugin"):
            out["%s / syntax-only (CPU)" % name] = rows[name]["cpu"] / base["cpu"]
            out["%s / syntax-only (peak RSS)" % name] = rows[name]["rss_max"] / base["rss_max"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tus", default="10,40", help="corpus sizes, comma-separated")
    ap.add_argument("-j", type=int, default=2, dest="jobs")
    ap.add_argument("--shape", choices=("homogeneous", "project", "both"), default="both")
    ap.add_argument("--per-tu-max", type=int, default=1000,
                    help="measure the TU-by-TU rows only up to this many TUs")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--keep", help="generate the corpora under this directory and keep them")
    args = ap.parse_args()

    build_dir = os.path.abspath(args.build_dir)
    tools = {"plugin": os.path.join(build_dir, "lib", "libTorchTidy.so"),
             "driver": os.path.join(build_dir, "bin", "torch-tidy"),
             "clang-tidy": shutil.which("clang-tidy-19"),
             "run-clang-tidy": shutil.which("run-clang-tidy-19")}
    for name in ("clang-tidy", "run-clang-tidy"):
        if not tools[name] or not shutil.which("clang++-19"):
            sys.exit("error: clang++-19, clang-tidy-19 or run-clang-tidy-19 not found "
                     "(run scripts/setup.sh)")
    for path in (tools["plugin"], tools["driver"], "/usr/bin/time"):
        if not os.path.exists(path):
            sys.exit("error: %s not found (build first; apt-get install time)" % path)
    if not any(os.path.isfile(os.path.join(d, "torch", "torch.h")) for d in libtorch_flags()):
        sys.exit("error: the LibTorch headers are not installed (libtorch-dev)")

    shapes = ("homogeneous", "project") if args.shape == "both" else (args.shape,)
    sizes = [int(n) for n in args.tus.split(",")]
    results = [run_corpus(s, n, args, tools) for s in shapes for n in sizes]

    print("\n%-38s" % "" + "".join("%16s" % ("%s %d" % (r["shape"][:7], r["tus"]))
                                    for r in results))
    names = []
    for r in results:
        for k in ratios(r):
            if k not in names:
                names.append(k)
    for name in names:
        cells = []
        for r in results:
            v = ratios(r).get(name)
            cells.append("%15.2fx" % v if v is not None else "%16s" % "-")
        print("%-38s" % name + "".join(cells))
    print("%-38s" % "findings identical (all torch-tidy runs)"
          + "".join("%16s" % ("yes" if r["identical"] else "NO") for r in results))
    print("%-38s" % "... and run-clang-tidy's"
          + "".join("%16s" % ("yes" if r["identical_rct"] else "NO") for r in results))
    print("load average at the end: %.1f %.1f %.1f" % os.getloadavg())
    if args.json:
        for r in results:
            for row in r["rows"].values():
                row.pop("stderr", None)
            r["ratios"] = ratios(r)
        with open(args.json, "w") as f:
            json.dump({"jobs": args.jobs, "results": results}, f, indent=2)
    return 0 if all(r["identical"] and r["identical_rct"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
