"""One torch-tidy run for all the check tests of a directory on one header set.

A real LibTorch TU costs a parse of <torch/torch.h> (~20 s). The check tests of
test/integration/ all open with it, under the same flags, so instead of one
clang-tidy run per test, the first test of a header set to get here runs
`torch-tidy --audit` (one shared precompiled header) with every torch check
over all of them, and each test then reads its own findings. A test takes
part when its RUN line is the plain form

    // RUN: %check_torch_tidy %s <checks> %t -- -- %libtorch_flags

and it names no header set in REQUIRES/UNSUPPORTED; others run on their own.
The findings of a check do not depend on which other checks run (each check
reports on its own; the output is the same bytes as a run of that check).

The result is computed once per lit run (TORCH_TIDY_LIT_RUN, set by
lit.cfg.py) and shared through a file under a lock.
"""

import fcntl
import glob
import json
import os
import re
import subprocess

PLAIN_RUN = re.compile(
    r"^// RUN: %check_torch_tidy %s (\S+) %t -- -- %libtorch_flags\s*$", re.M)
SET_SPECIFIC = re.compile(r"^// *(REQUIRES|UNSUPPORTED):.*\blibtorch-", re.M)
CHECK_COMMENT = re.compile(r"// *CHECK-[A-Z0-9\-]*:[^\r\n]*")


def plain_checks(text):
    """The checks of a test that can take part, or None."""
    m = PLAIN_RUN.search(text)
    if not m or SET_SPECIFIC.search(text):
        return None
    return m.group(1).split(",")


def cleaned(text):
    """The text that is analysed: CHECK comments blanked, lines kept."""
    return CHECK_COMMENT.sub("//", text)


def _members(directory):
    members = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.cpp"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        checks = plain_checks(text)
        if checks:
            members[os.path.basename(path)] = (checks, cleaned(text))
    return members


def _run(torch_tidy, batch_dir, std, compiler_args, members):
    src = os.path.join(batch_dir, "src")
    os.makedirs(src, exist_ok=True)
    db = []
    for name, (_, text) in members.items():
        with open(os.path.join(src, name), "w", encoding="utf-8") as f:
            f.write(text)
        db.append({"directory": src, "file": name,
                   "arguments": ["clang++", "-std=" + std] + compiler_args + ["-c", name]})
    with open(os.path.join(src, "compile_commands.json"), "w") as f:
        json.dump(db, f, indent=1)
    checks = sorted({c for checks, _ in members.values() for c in checks})
    # The precompiled header is kept between runs (validated by its digests);
    # findings never come from a cache. The tests are separate programs, not
    # one whose functions call each other: no cross-TU phase.
    cmd = [torch_tidy, "--audit", "-p", src, "--cache-dir", os.path.join(batch_dir, "cache"),
           "--no-result-cache", "--no-cross-tu", "--config={}", "--checks=-*," + ",".join(checks), "--format=json", "--quiet",
           "-j", str(os.cpu_count() or 2)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode not in (0, 1, 2) or not proc.stdout.startswith("{"):
        raise RuntimeError("batch run failed (%d): %s\n%s"
                           % (proc.returncode, " ".join(cmd), proc.stderr))
    return {"src": src, "report": json.loads(proc.stdout)}


def batch_findings(torch_tidy, input_file, temp_file, std, compiler_args):
    """(rendered diagnostics, fixed text) of input_file from the shared run,
    or None when this test does not take part."""
    with open(input_file, encoding="utf-8") as f:
        text = f.read()
    checks = plain_checks(text)
    if not checks:
        return None
    batch_dir = os.path.join(os.path.dirname(os.path.abspath(temp_file)), "check-batch")
    os.makedirs(batch_dir, exist_ok=True)
    key = json.dumps([os.environ.get("TORCH_TIDY_LIT_RUN", str(os.getpid())), torch_tidy,
                      std, compiler_args])
    result_file = os.path.join(batch_dir, "result.json")
    with open(os.path.join(batch_dir, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = None
        try:
            with open(result_file) as f:
                result = json.load(f)
        except (OSError, ValueError):
            pass
        if not isinstance(result, dict) or result.get("key") != key:
            result = _run(torch_tidy, batch_dir, std, compiler_args,
                          _members(os.path.dirname(os.path.abspath(input_file))))
            result["key"] = key
            with open(result_file + ".tmp", "w") as f:
                json.dump(result, f)
            os.replace(result_file + ".tmp", result_file)
    copy = os.path.join(result["src"], os.path.basename(input_file))
    return render(result["report"], copy, checks, cleaned(text))


def render(report, copy, checks, text):
    """clang-tidy's diagnostic lines for the findings of `checks` (and the
    compiler errors) in `copy`, and `text` with their fix-its applied."""
    lines, fixes = [], set()
    for f in report["findings"]:
        if f["file"] != copy:
            continue
        if f["check"] not in checks and not f["check"].startswith("clang-diagnostic-"):
            continue
        lines.append("%s:%d:%d: %s: %s [%s]" % (f["file"], f["line"], f["column"],
                                                 f["level"], f["message"], f["check"]))
        for n in f.get("notes", []):
            lines.append("%s:%d:%d: note: %s" % (n["file"], n["line"], n["column"], n["message"]))
        for x in f.get("fixes", []):
            if x["file"] == copy:
                fixes.add((x["offset"], x["length"], x["replacement"]))
    data = text.encode("utf-8")
    for offset, length, replacement in sorted(fixes, reverse=True):
        data = data[:offset] + replacement.encode("utf-8") + data[offset + length:]
    return "\n".join(lines) + "\n", data.decode("utf-8")
