"""Structural checks of torch-tidy --format=sarif output (always run; the
SARIF Multitool validation runs where it is installed).

usage: check_sarif.py FILE --results N [--rules CHECK,...] [--rules-from LIST]
                           [--fixes N] [--related N] [--successful yes|no]
--rules: checks that must be among the rules; --rules-from: the output of
`torch-tidy --list-checks` with the same options, which the rules must equal
(registered and enabled checks, in order).
"""
import argparse
import json
import sys

DOCS = "https://github.com/torch-tidy/torch-tidy/blob/main/docs/checks/"


def fail(msg):
    sys.exit("check_sarif.py: " + msg)


def check_location(loc, where):
    phys = loc.get("physicalLocation")
    if phys is None:
        fail("%s: no physicalLocation" % where)
    art = phys.get("artifactLocation", {})
    uri = art.get("uri", "")
    if not uri:
        fail("%s: empty uri" % where)
    if "uriBaseId" in art:
        if uri.startswith("/") or "://" in uri:
            fail("%s: uri %r with a base id must be relative" % (where, uri))
    elif not uri.startswith("file:///"):
        fail("%s: absolute uri %r is not a file URI" % (where, uri))
    region = phys.get("region")
    if region is None or region.get("startLine", 0) < 1 or region.get("startColumn", 0) < 1:
        fail("%s: bad region %r" % (where, region))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--results", type=int, required=True)
    ap.add_argument("--rules", default="")
    ap.add_argument("--rules-from")
    ap.add_argument("--fixes", type=int, default=0)
    ap.add_argument("--related", type=int)
    ap.add_argument("--successful", default="yes")
    args = ap.parse_args()
    with open(args.file) as f:
        doc = json.load(f)
    if doc.get("version") != "2.1.0" or "sarif" not in doc.get("$schema", ""):
        fail("not SARIF 2.1.0: %r %r" % (doc.get("version"), doc.get("$schema")))
    if len(doc.get("runs", [])) != 1:
        fail("expected one run")
    run = doc["runs"][0]
    driver = run["tool"]["driver"]
    if driver["name"] != "torch-tidy" or not driver.get("version") \
            or not driver.get("informationUri"):
        fail("tool.driver %r" % {k: v for k, v in driver.items() if k != "rules"})
    rules = driver.get("rules", [])
    ids = [r["id"] for r in rules]
    for r in args.rules.split(","):
        if r and r not in ids:
            fail("rule %r missing from %r" % (r, ids))
    if args.rules_from:
        with open(args.rules_from) as f:
            listed = [l.split()[0] for l in f.read().splitlines()[1:] if l.strip()]
        if ids != listed:
            fail("rules %r, expected those of --list-checks %r" % (ids, listed))
    for r in rules:
        if not r.get("shortDescription", {}).get("text"):
            fail("rule %s has no shortDescription" % r["id"])
        if r["id"].startswith("torch-") and r.get("helpUri") != DOCS + r["id"] + ".md":
            fail("rule %s helpUri %r" % (r["id"], r.get("helpUri")))
    results = run.get("results", [])
    if len(results) != args.results:
        fail("expected %d results, got %d" % (args.results, len(results)))
    fixes = related = 0
    for i, res in enumerate(results):
        where = "results[%d]" % i
        if res.get("level") not in ("warning", "error"):
            fail("%s level %r" % (where, res.get("level")))
        if not res.get("message", {}).get("text"):
            fail("%s has no message" % where)
        if "ruleIndex" in res and ids[res["ruleIndex"]] != res["ruleId"]:
            fail("%s ruleIndex does not match ruleId" % where)
        if res["ruleId"] in ids and "ruleIndex" not in res:
            fail("%s has no ruleIndex" % where)
        for loc in res.get("locations", []):
            check_location(loc, where)
        for j, rl in enumerate(res.get("relatedLocations", [])):
            related += 1
            if rl.get("id") != j or not rl.get("message", {}).get("text"):
                fail("%s.relatedLocations[%d] %r" % (where, j, rl))
            check_location(rl, where + ".relatedLocations")
        for fx in res.get("fixes", []):
            for ch in fx["artifactChanges"]:
                for rep in ch["replacements"]:
                    fixes += 1
                    if "insertedContent" not in rep or "deletedRegion" not in rep:
                        fail("%s: bad replacement %r" % (where, rep))
    if fixes != args.fixes:
        fail("expected %d fix replacements, got %d" % (args.fixes, fixes))
    if args.related is not None and related != args.related:
        fail("expected %d relatedLocations, got %d" % (args.related, related))
    ok = run["invocations"][0]["executionSuccessful"]
    if ok != (args.successful == "yes"):
        fail("executionSuccessful is %r" % ok)
    for uri in run.get("originalUriBaseIds", {}).values():
        if not uri["uri"].startswith("file:///") or not uri["uri"].endswith("/"):
            fail("originalUriBaseIds %r" % uri)
    print("sarif ok: %d results" % len(results))


main()
