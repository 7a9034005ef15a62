#!/usr/bin/env python3
"""Runs a command with stdout or stderr on a pseudo-terminal, as a person
at a terminal would, and saves what each stream received.

  run_in_pty.py [--stdout-tty | --stderr-tty] --out FILE --err FILE -- CMD...

A stream not on the terminal goes to its file directly (a pipe-like, non-tty
file). Exits with the command's status.
"""

import argparse
import os
import pty
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stdout-tty", action="store_true")
    parser.add_argument("--stderr-tty", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--err", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.stdout_tty and args.stderr_tty:
        parser.error("one stream on the terminal at a time")

    master, slave = pty.openpty()
    out_file = open(args.out, "wb")
    err_file = open(args.err, "wb")
    proc = subprocess.Popen(
        command, stdin=subprocess.DEVNULL,
        stdout=slave if args.stdout_tty else out_file,
        stderr=slave if args.stderr_tty else err_file)
    os.close(slave)
    received = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        received += chunk
    status = proc.wait()
    # The terminal turns "\n" into "\r\n"; undo that for the checks.
    text = bytes(received).replace(b"\r\n", b"\n")
    if args.stdout_tty:
        out_file.write(text)
    elif args.stderr_tty:
        err_file.write(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
