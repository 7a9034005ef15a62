#!/usr/bin/env python3
"""SIGTERM in the middle of `torch-tidy --fix`: every file must be wholly old
or wholly new, and no temporary file may be left behind.

Usage: interrupt_fix.py <torch-tidy> <work dir>

Writes many files that each have one fix-it (-Wextra-semi removes a ';'),
padded with a large comment so that writing them takes a while, runs
`torch-tidy --fix` on them, and sends SIGTERM as soon as the first file (the
driver writes them in path order) has been replaced. The kill must land while
some files are still old; if the run was already done, it tries again.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

FILES = 150
PADDING = "// " + "x" * 1021 + "\n"  # 1 KiB a line
PADDING_LINES = 128                  # 128 KiB a file
OLD = ("struct Model {\n  void forward() {};\n};\n" +
       PADDING * PADDING_LINES)
NEW = OLD.replace("void forward() {};", "void forward() {}", 1)


def attempt(tool, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # Stops the search for a configuration above the work directory.
    with open(os.path.join(work, ".clang-tidy"), "w") as f:
        f.write("Checks: '-*,torch-empty-cache-in-loop,clang-diagnostic-extra-semi'\n")
    names = ["f%03d.cpp" % i for i in range(FILES)]
    for name in names:
        with open(os.path.join(work, name), "w") as f:
            f.write(OLD)
    first = os.path.join(work, names[0])
    inode = os.stat(first).st_ino
    proc = subprocess.Popen(
        [tool, "--fix", "--quiet", "-j2"]
        + names + ["--", "-std=c++17", "-Wextra-semi"],
        cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while os.stat(first).st_ino == inode:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit("torch-tidy ended (%s) before writing any fix: %s" %
                     (proc.returncode, proc.stderr.read().decode()))
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)

    counts = {"old": 0, "new": 0}
    for name in names:
        with open(os.path.join(work, name)) as f:
            text = f.read()
        if text == OLD:
            counts["old"] += 1
        elif text == NEW:
            counts["new"] += 1
        else:
            sys.exit("%s is neither the old nor the new text (%d bytes)" %
                     (name, len(text)))
    leftovers = sorted(set(os.listdir(work)) - set(names) - {".clang-tidy"})
    if leftovers:
        sys.exit("files left behind: %s" % leftovers)
    if b"Stack dump" in err or b"PLEASE submit" in err:
        sys.exit("crashed on SIGTERM:\n" + err.decode())
    return proc.returncode, counts


def main():
    tool, work = sys.argv[1], sys.argv[2]
    for _ in range(5):
        returncode, counts = attempt(tool, work)
        if counts["old"]:
            break
    else:
        sys.exit("the run always finished before SIGTERM landed: %s" % counts)
    # Killed by the signal (LLVM's handler removes the temporary file it is
    # writing, then re-raises), not a normal exit.
    print("returncode %d" % returncode)
    print("interrupted: %d old, %d new" % (counts["old"], counts["new"]))


if __name__ == "__main__":
    main()
