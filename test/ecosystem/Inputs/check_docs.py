#!/usr/bin/env python3
"""Checks that every check's page in docs/checks has what a user needs.

  check_docs.py --docs docs/checks --index docs/index.md \
                --config dump-config.yaml CHECK...

For each CHECK (a registered check): the page exists and has the sections
Rule, Why (with numbers), Example (a bad and a good one), Fix-it (starting
with "**Fix-it: safe|unsafe|none"), Options (each option the check reads,
from clang-tidy's --dump-config) and Known limits; docs/index.md lists it in
its table with the same fix-it safety. Prints every problem; exits 1 if any.
"""

import argparse
import os
import re
import sys

import yaml

SECTIONS = ["Rule", "Why", "Example", "Fix-it", "Options", "Known limits"]


def sections(text):
    """{heading: body} of the `## ` sections."""
    found = {}
    for block in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        found[heading.strip()] = body
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", required=True)
    parser.add_argument("--index", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("checks", nargs="+")
    args = parser.parse_args()

    with open(args.config) as f:
        options = list(yaml.safe_load(f).get("CheckOptions", {}))
    with open(args.index) as f:
        index = f.read()

    problems = []
    for check in args.checks:
        path = os.path.join(args.docs, check + ".md")
        if not os.path.exists(path):
            problems.append("%s: no page %s" % (check, path))
            continue
        with open(path) as f:
            page = sections(f.read())
        for name in SECTIONS:
            if name not in page:
                problems.append("%s: no '## %s' section" % (check, name))
        why = page.get("Why", "")
        if not re.search(r"\d", why):
            problems.append("%s: 'Why' gives no numbers" % check)
        example = page.get("Example", "")
        if not re.search(r"Bad|// warning", example) or "Good" not in example:
            problems.append("%s: 'Example' needs a bad and a good example" % check)
        m = re.match(r"\s*\*\*Fix-it: (safe|unsafe|none)", page.get("Fix-it", ""))
        if not m:
            problems.append("%s: 'Fix-it' does not start with "
                            "'**Fix-it: safe|unsafe|none'" % check)
        row = re.search(r"^\| \[%s\]\(.*$" % re.escape(check), index, re.M)
        if not row:
            problems.append("%s: not in the table of %s" % (check, args.index))
        elif m and "| %s |" % m.group(1) not in row.group(0):
            problems.append("%s: %s gives another fix-it safety than the page "
                            "('%s')" % (check, args.index, m.group(1)))
        for option in options:
            owner, _, name = option.rpartition(".")
            if owner == check and "`%s`" % name not in page.get("Options", ""):
                problems.append("%s: option %s is not documented under "
                                "'Options'" % (check, name))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
