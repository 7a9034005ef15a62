"""Rewrites torch-tidy SARIF the way a log that carries a finding's chain of
notes as a thread flow does: each result's relatedLocations become the steps
of one codeFlows threadFlow, the result's own location the last step, and
relatedLocations are dropped.

usage: sarif_code_flows.py IN.sarif OUT.sarif
"""
import json
import sys

with open(sys.argv[1]) as f:
    log = json.load(f)
for result in log["runs"][0]["results"]:
    related = result.pop("relatedLocations", [])
    if not related:
        continue
    steps = [{"location": {"physicalLocation": r["physicalLocation"], "message": r["message"]}}
             for r in related]
    steps.append({"location": {"physicalLocation": result["locations"][0]["physicalLocation"]}})
    result["codeFlows"] = [{"threadFlows": [{"locations": steps}]}]
with open(sys.argv[2], "w") as f:
    json.dump(log, f, indent=2)
