#!/usr/bin/env python3
"""Fails when an #include runs against the layers of DEVELOPERS.md:
support <- api <- model <- checks <- driver. A layer may include itself and
the layers to its left; `checks` is the folder's own files (the reporters)."""

import os
import re
import sys

LAYERS = ["support", "api", "model", "checks", "driver"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(repo, path):
    rel = os.path.relpath(path, repo).split(os.sep)
    if rel[0] == "driver":
        return "driver"
    if rel[0] == "checks":
        return rel[1] if len(rel) > 2 and rel[1] in LAYERS else "checks"
    return None


def included_layer(repo, source, name):
    # Quoted includes resolve next to the file first, then from checks/.
    for base in (os.path.dirname(source), os.path.join(repo, "checks"),
                 os.path.join(repo, "driver")):
        target = os.path.join(base, name)
        if os.path.exists(target):
            return layer_of(repo, target)
    return None


def main():
    repo = sys.argv[1]
    errors = []
    for top in ("checks", "driver"):
        for dirpath, _, files in os.walk(os.path.join(repo, top)):
            for f in sorted(files):
                if not f.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, f)
                mine = layer_of(repo, path)
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                for name in INCLUDE.findall(text):
                    theirs = included_layer(repo, path, name)
                    if theirs and LAYERS.index(theirs) > LAYERS.index(mine):
                        errors.append("%s: includes \"%s\" (%s above %s)" % (
                            os.path.relpath(path, repo), name, theirs, mine))
    for e in sorted(errors):
        print(e)
    print("%d include(s) against the layers" % len(errors))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
