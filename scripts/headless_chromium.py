#!/usr/bin/env python3
"""Loads a local page in Debian's headless `chromium` and writes its DOM
after load (--dump-dom) or a screenshot; the page's console messages
(script errors, Content-Security-Policy violations, console.log) are
collected from Chromium's log. Used by test/ecosystem/html-report-browser.test,
bench/html_report.py and scripts/report-screenshot.sh, so that all of them
run the browser the same way.

usage: headless_chromium.py dump URL OUT.html [--no-console]
       headless_chromium.py screenshot URL OUT.png [--size W,H] [--no-console]

--no-console: exit 1 (after writing OUT) if the page logged anything.
Exit 2 when no chromium is found or it fails.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

CONSOLE = re.compile(r":CONSOLE[:(\]]")


def find_chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def run(url, args, timeout=180):
    """Runs chromium on url with extra args; returns (stdout, console lines)."""
    chromium = find_chromium()
    if not chromium:
        raise RuntimeError("no chromium on PATH (scripts/setup.sh installs it)")
    with tempfile.TemporaryDirectory(prefix="torch-tidy-chromium-") as profile:
        cmd = [chromium, "--headless", "--no-sandbox",  # root needs --no-sandbox
               "--disable-gpu", "--no-first-run", "--no-default-browser-check",
               "--disable-extensions", "--user-data-dir=" + profile,
               "--enable-logging=stderr", "--v=0"] + args + [url]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              errors="replace")
    console = [line for line in proc.stderr.splitlines() if CONSOLE.search(line)]
    if proc.returncode != 0:
        raise RuntimeError("chromium exited with %d: %s" % (proc.returncode, proc.stderr[-2000:]))
    return proc.stdout, console


def dump_dom(url):
    return run(url, ["--dump-dom"])


def screenshot(url, png, size="1280,1800"):
    _, console = run(url, ["--hide-scrollbars", "--window-size=" + size,
                           "--screenshot=" + os.path.abspath(png)])
    if not os.path.exists(png):
        raise RuntimeError("chromium wrote no screenshot")
    return console


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["dump", "screenshot"])
    ap.add_argument("url")
    ap.add_argument("out")
    ap.add_argument("--size", default="1280,1800")
    ap.add_argument("--no-console", action="store_true")
    args = ap.parse_args()
    url = args.url
    if "://" not in url:
        path, _, fragment = url.partition("#")
        url = "file://" + os.path.abspath(path) + ("#" + fragment if fragment else "")
    try:
        if args.mode == "dump":
            dom, console = dump_dom(url)
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(dom)
        else:
            console = screenshot(url, args.out, args.size)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print("headless_chromium.py: %s" % e, file=sys.stderr)
        return 2
    for line in console:
        print(line, file=sys.stderr)
    if args.no_console and console:
        print("headless_chromium.py: the page logged %d console message(s)" % len(console),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
