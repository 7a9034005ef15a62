"""Checks the committed <sample>.findings.json of runtime-check/samples."""
import glob
import json
import os
import re
import sys

samples = sys.argv[1]
errors = []
checked = 0
for src in sorted(glob.glob(os.path.join(samples, "*.cpp"))):
    name = os.path.basename(src)[:-4]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    seeded = re.search(r"Seeded bug \((torch-[a-z0-9-]+)\)", text)
    twin = name[:-len("_clean")] if name.endswith("_clean") else None
    if not seeded and not twin:
        continue  # e.g. the recorder's overhead benchmark
    path = os.path.join(samples, name + ".findings.json")
    if not os.path.exists(path):
        errors.append("%s: missing; run regen-findings.sh" % path)
        continue
    with open(path, encoding="utf-8") as f:
        findings = json.load(f)["findings"]
    lines = text.count("\n") + 1
    for fd in findings:
        if not fd["file"].endswith("samples/" + name + ".cpp"):
            errors.append("%s: finding in another file: %s" % (path, fd["file"]))
        if not 1 <= fd["line"] <= lines:
            errors.append("%s: line %d outside the sample" % (path, fd["line"]))
    checks = {fd["check"] for fd in findings}
    if seeded and seeded.group(1) not in checks:
        errors.append("%s: no %s finding" % (path, seeded.group(1)))
    if twin:
        with open(os.path.join(samples, twin + ".cpp"), encoding="utf-8") as f:
            twin_check = re.search(r"Seeded bug \((torch-[a-z0-9-]+)\)", f.read()).group(1)
        if twin_check in checks:
            errors.append("%s: the clean twin has a %s finding" % (path, twin_check))
    checked += 1

print("checked %d samples" % checked)
if checked < 8:
    errors.append("expected at least 4 bug samples and 4 clean twins")
if errors:
    sys.exit("\n".join(errors))
