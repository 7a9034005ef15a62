"""Writes a compile_commands.json with one entry per .cpp file of a
directory, all with the same flags.

usage: make_db.py OUT.json SOURCE_DIR -- FLAGS...
"""
import json
import os
import sys


def main():
    out, src = sys.argv[1], os.path.abspath(sys.argv[2])
    flags = sys.argv[sys.argv.index("--") + 1:]
    entries = [{"directory": src, "file": name,
                "arguments": ["clang++"] + flags + ["-c", name]}
               for name in sorted(os.listdir(src)) if name.endswith(".cpp")]
    if not entries:
        sys.exit("make_db.py: no .cpp files in " + src)
    with open(out, "w") as f:
        json.dump(entries, f, indent=2)


if __name__ == "__main__":
    main()
