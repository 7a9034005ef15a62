#!/usr/bin/env python3
"""How long does an editor wait after a save?

On one real-header TU (default examples/eval.cpp), with a warm cache (the
shared preamble built by one untimed run first), this measures in one run:

  pre-commit   BUILD/bin/torch-tidy --cache-dir=C TU -- <flags>: the wall
               time of the hook on a changed file
  lsp-save     `torch-tidy lsp --cache-dir=C -- <flags>`: the wall time from
               sending textDocument/didSave to receiving its
               textDocument/publishDiagnostics

each the median of --runs runs, and prints the ratio lsp-save/pre-commit
(the issue's bar: within 1.5x).

Usage: bench/lsp.sh [--runs N] [--build-dir build] [--json FILE] [TU]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, libtorch_flags


class Client:
    def __init__(self, cmd, cwd):
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.next_id = 1

    def send(self, method, params, request=False):
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            message["id"] = self.next_id
            self.next_id += 1
        body = json.dumps(message).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def receive(self):
        length = 0
        while True:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit("error: the language server exited")
            line = line.strip()
            if not line:
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(self.proc.stdout.read(length))

    def wait_for(self, method):
        while True:
            message = self.receive()
            if message.get("method") == method:
                return message

    def close(self):
        self.send("shutdown", None, request=True)
        self.send("exit", None)
        self.proc.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("tu", nargs="?", default=os.path.join(ROOT, "examples", "eval.cpp"))
    args = parser.parse_args()

    driver = os.path.join(os.path.abspath(args.build_dir), "bin", "torch-tidy")
    if not os.access(driver, os.X_OK):
        sys.exit("error: %s not built (scripts/setup.sh)" % driver)
    scratch = tempfile.mkdtemp(prefix="torch-tidy-lsp-bench-")
    try:
        src_dir = os.path.dirname(os.path.abspath(args.tu))
        work = os.path.join(scratch, "src")
        shutil.copytree(src_dir, work, ignore=shutil.ignore_patterns(
            "compile_commands.json*", "CMakeLists.txt"))
        tu = os.path.join(work, os.path.basename(args.tu))
        cache = os.path.join(scratch, "cache")
        flags = libtorch_flags()
        common = ["--checks=-*,torch-*", "--quiet", "--cache-dir=" + cache]
        hook = [driver] + common + [tu, "--"] + flags
        subprocess.run(hook, cwd=work, stdout=subprocess.DEVNULL)  # warms the cache

        hook_times = []
        for _ in range(args.runs):
            start = time.monotonic()
            subprocess.run(hook, cwd=work, stdout=subprocess.DEVNULL)
            hook_times.append(time.monotonic() - start)

        client = Client([driver, "lsp"] + common + ["--"] + flags, work)
        client.send("initialize", {"capabilities": {}}, request=True)
        client.receive()
        client.send("initialized", {})
        uri = "file://" + tu
        with open(tu) as f:
            text = f.read()
        client.send("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "cpp", "version": 1, "text": text}})
        opened = client.wait_for("textDocument/publishDiagnostics")
        save_times = []
        for _ in range(args.runs):
            start = time.monotonic()
            client.send("textDocument/didSave", {"textDocument": {"uri": uri}})
            saved = client.wait_for("textDocument/publishDiagnostics")
            save_times.append(time.monotonic() - start)
        client.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    hook_median = statistics.median(hook_times)
    save_median = statistics.median(save_times)
    same = (len(opened["params"]["diagnostics"]) == len(saved["params"]["diagnostics"]))
    print("TU %s, %d run(s), load average %.1f on %d cores"
          % (os.path.relpath(os.path.abspath(args.tu), ROOT), args.runs,
             os.getloadavg()[0], os.cpu_count() or 0))
    print("  pre-commit  wall %6.2f s (median)" % hook_median)
    print("  lsp-save    wall %6.2f s (median, didSave to publishDiagnostics; "
          "%d diagnostics)" % (save_median, len(saved["params"]["diagnostics"])))
    print("ratio(lsp-save/pre-commit): %.3f" % (save_median / hook_median))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pre-commit": hook_times, "lsp-save": save_times,
                       "ratio": save_median / hook_median}, f, indent=2)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
