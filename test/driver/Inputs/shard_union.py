"""Checks that the findings of the shard runs (--format=json) are disjoint,
apart from findings in headers, and that together they are those of the full
run.

usage: shard_union.py ALL.json PART.json...
"""
import json
import sys


def findings(path):
    with open(path) as f:
        doc = json.load(f)
    return [json.dumps(x, sort_keys=True) for x in doc["findings"]]


def main():
    whole = findings(sys.argv[1])
    parts = [findings(p) for p in sys.argv[2:]]
    if not whole:
        sys.exit("shard_union.py: the full run has no findings")
    for i, part in enumerate(parts):
        if not part:
            sys.exit("shard_union.py: part %d is empty" % (i + 1))
        for j, other in enumerate(parts[:i]):
            shared = [f for f in set(part) & set(other)
                      if json.loads(f)["file"].endswith(".cpp")]
            if shared:
                sys.exit("shard_union.py: parts %d and %d share %s"
                         % (j + 1, i + 1, shared[0]))
    union = sorted(set().union(*map(set, parts)))
    if union != sorted(set(whole)):
        missing = set(whole) - set(union)
        extra = set(union) - set(whole)
        sys.exit("shard_union.py: union differs: missing %s, extra %s"
                 % (sorted(missing)[:1], sorted(extra)[:1]))


if __name__ == "__main__":
    main()
