#!/usr/bin/env python3
"""Runs one torch-tidy check on a lit test file and verifies its output.

Usage (from a RUN line):
  %check_torch_tidy [-fix-mode=safe|unsafe|none] %s <check-name> %t \
      [-- <clang-tidy args> [-- <compiler args>]]

Lines `// CHECK-MESSAGES: ...` are matched with FileCheck against the
diagnostics (with -implicit-check-not for stray warnings and errors);
`// CHECK-FIXES: ...` against the fixed file. A file with neither expects
no diagnostics at all. The CHECK comments are blanked in the copy that is
analysed so that they cannot match themselves; line numbers are kept.
"""

import argparse
import os
import re
import subprocess
import sys

import check_batch


def run(args, expect_success=True):
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.decode(errors="replace")
    if expect_success and proc.returncode != 0:
        print("command failed (%d): %s\n%s" % (proc.returncode, " ".join(args), out))
        sys.exit(1)
    return out


def provides_torch_headers(compiler_args):
    dirs = [a[2:] if a.startswith("-I") and len(a) > 2 else a
            for a in compiler_args]
    return any(os.path.isfile(os.path.join(d, "torch", "torch.h"))
               for d in dirs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--clang-tidy", required=True)
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--filecheck", required=True)
    parser.add_argument("--inputs", required=True)
    parser.add_argument("-std", default="c++17")
    parser.add_argument("-check-suffix", default="",
                        help="comma-separated; an empty one is the plain prefix")
    parser.add_argument("-no-fix", action="store_true",
                        help="report only; do not apply fix-its")
    parser.add_argument("--batch-with", metavar="TORCH_TIDY",
                        help="take the findings from one torch-tidy run over all "
                        "the plain check tests of the directory (check_batch.py)")
    parser.add_argument("input_file")
    parser.add_argument("check_name")
    parser.add_argument("temp_file")
    args, extra = parser.parse_known_args()

    tidy_args, compiler_args = extra, []
    if "--" in extra:
        i = extra.index("--")
        tidy_args, compiler_args = extra[:i], extra[i + 1:]
    if tidy_args and tidy_args[0] == "--":
        tidy_args = tidy_args[1:]
    if not any(re.match(r"^--?config(-file)?=", a) for a in tidy_args):
        tidy_args.append("--config={}")

    with open(args.input_file, encoding="utf-8") as f:
        text = f.read()
    suffixes = [("-" + s) if s else "" for s in args.check_suffix.split(",")]
    msg_prefix = ",".join("CHECK-MESSAGES" + s for s in suffixes)
    fix_prefix = ",".join("CHECK-FIXES" + s for s in suffixes)
    has_messages = any(p + ":" in text for p in msg_prefix.split(","))
    has_fixes = any(p + ":" in text for p in fix_prefix.split(","))

    temp = args.temp_file + ".cpp"
    os.makedirs(os.path.dirname(os.path.abspath(temp)), exist_ok=True)
    cleaned = re.sub(r"// *CHECK-[A-Z0-9\-]*:[^\r\n]*", "//", text)
    with open(temp, "w", encoding="utf-8") as f:
        f.write(cleaned)

    batch = None
    if args.batch_with and not args.no_fix and tidy_args == ["--config={}"]:
        batch = check_batch.batch_findings(args.batch_with, args.input_file,
                                           args.temp_file, args.std, compiler_args)
    if batch:
        output, fixed = batch
        print("------ torch-tidy output (shared run) ------\n" + output)
        with open(temp, "w", encoding="utf-8") as f:
            f.write(fixed)
        check_output(args, output, temp, has_messages, has_fixes, msg_prefix, fix_prefix)
        return

    cmd = [args.clang_tidy, "--load=" + args.plugin, temp,
           "--checks=-*," + args.check_name]
    if not args.no_fix:
        cmd.append("--fix")
    cmd += tidy_args + ["--", "-std=" + args.std] + compiler_args
    # A test that brings its own LibTorch (%libtorch_flags) parses only the
    # real headers: the mocks share their paths and would shadow them.
    if not provides_torch_headers(compiler_args):
        cmd += ["-isystem", args.inputs]
    out = run(cmd, expect_success=False)
    # clang-tidy's own summary lines are noise for FileCheck.
    lines = [l for l in out.splitlines()
             if not re.match(r"^\d+ (warning|error)s? generated\.$", l)
             and not l.startswith("Suppressed ")
             and not l.startswith("Use -header-filter")
             and not l.startswith("clang-tidy applied")]
    output = "\n".join(lines) + "\n"
    print("------ clang-tidy output ------\n" + output)
    check_output(args, output, temp, has_messages, has_fixes, msg_prefix, fix_prefix)


def check_output(args, output, temp, has_messages, has_fixes, msg_prefix, fix_prefix):
    if not has_messages and not has_fixes:
        if re.search(r"(warning|error):", output):
            sys.exit("no diagnostics were expected, but found the ones above")
        return
    if has_messages:
        msg_file = temp + ".msg"
        with open(msg_file, "w", encoding="utf-8") as f:
            f.write(output)
        run([args.filecheck, "-input-file=" + msg_file, args.input_file,
             "-check-prefixes=" + msg_prefix,
             "-implicit-check-not={{warning|error}}:"])
    if has_fixes:
        run([args.filecheck, "-input-file=" + temp, args.input_file,
             "-check-prefixes=" + fix_prefix, "--strict-whitespace"])


if __name__ == "__main__":
    main()
