"""Checks torch-tidy's HTML report (--format=html, `torch-tidy report`) against
the JSON findings it was made from: the summary's counts, unique ids, one
script and the data island of the findings (#report-data: each finding's
check, level, position, numbered steps, source rows, fix-it), a
Content-Security-Policy, no '<' inside the data. On a browser's DOM
(chromium --dump-dom) it also checks what the script drew: one article per
finding shown, with its check, location and steps.

With --new N the page was made against a baseline: FINDINGS.json holds all
the findings (new and unchanged), N of them are marked new in the data and
counted so, and with --drawn --only-new only those are drawn, each marked.

usage: check_html.py PAGE --json FINDINGS.json [--drawn] [--all-visible]
                          [--visible-check CHECK] [--ran-script]
                          [--new N [--only-new]]
"""
import argparse
import collections
import html.parser
import json
import sys


def fail(msg):
    sys.exit("check_html.py: " + msg)


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = collections.Counter()
        self.by_id = {}
        self.text_of = collections.defaultdict(str)  # id -> text inside it
        self.scripts = 0
        self.data = None  # the text of #report-data
        self.in_data = False
        self.csp = None
        self.body = {}
        self.articles = []  # dicts: attrs, steps [(number, text)], fix lines
        self.stack = []  # open elements: (tag, attrs)
        self.step = None
        self.by_file_rows = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids[a["id"]] += 1
            self.by_id[a["id"]] = a
        if tag == "script":
            if a.get("type") == "application/json" and a.get("id") == "report-data":
                self.in_data = True
                self.data = ""
            else:
                self.scripts += 1
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy":
            self.csp = a.get("content", "")
        if tag == "body":
            self.body = a
        cls = a.get("class", "").split()
        if tag == "article" and "f" in cls:
            self.articles.append({"attrs": a, "steps": [], "del": 0, "add": 0, "loc": ""})
        if self.articles and tag == "div" and "st" in cls:
            self.step = [None, ""]
            self.articles[-1]["steps"].append(self.step)
        if self.articles and tag == "div" and "ln" in cls:
            for kind in ("del", "add"):
                if kind in cls:
                    self.articles[-1][kind] += 1
        if tag == "tr" and self.stack_has_id("by-file"):
            self.by_file_rows.append([])
        if tag not in ("meta", "link", "input", "br", "img", "rect"):
            self.stack.append((tag, a))

    def stack_has_id(self, *ids):
        return any(a.get("id") in ids for _, a in self.stack)

    def handle_endtag(self, tag):
        self.in_data = False
        while self.stack:
            t, a = self.stack.pop()
            if a.get("class", "").split()[:1] == ["st"]:
                self.step = None
            if t == tag:
                break

    def handle_data(self, data):
        if self.in_data:
            self.data += data
            return
        for _, a in self.stack:
            if "id" in a:
                self.text_of[a["id"]] += data
        if self.step is not None:
            top = self.stack[-1] if self.stack else ("", {})
            if top[0] == "b" and self.step[0] is None:
                self.step[0] = int(data)
            elif top[0] != "span":
                self.step[1] += data
        if self.articles and self.stack and self.stack[-1][1].get("class") == "loc":
            self.articles[-1]["loc"] += data
        if self.by_file_rows and self.stack and self.stack[-1][0] in ("a", "td"):
            if self.stack_has_id("by-file"):
                self.by_file_rows[-1].append(data)


def check_data(page, doc):
    """The data island against the JSON findings."""
    if page.data is None:
        fail("no #report-data")
    if "<" in page.data:
        fail("a '<' inside #report-data")
    data = json.loads(page.data)
    findings = doc["findings"]
    if len(data["findings"]) != len(findings):
        fail("%d findings in #report-data, %d in the JSON" % (len(data["findings"]), len(findings)))

    def same_file(index, path):
        return index == -1 if not path else (
            index >= 0 and (path == data["files"][index] or path.endswith("/" + data["files"][index])))

    for i, (d, f) in enumerate(zip(data["findings"], findings), start=1):
        where = "finding #%d" % i
        if d["check"] != f["check"] or d["level"] != f["level"]:
            fail("%s: %s %s, expected %s %s" % (where, d["level"], d["check"], f["level"], f["check"]))
        expected = [f] + f["notes"]
        if len(d["steps"]) != len(expected):
            fail("%s: %d steps, expected %d" % (where, len(d["steps"]), len(expected)))
        for n, (step, e) in enumerate(zip(d["steps"], expected), start=1):
            file, line, column, message = step
            if not same_file(file, e["file"]) or (line, column) != (e["line"], e["column"]) \
                    or data["messages"][message] != e["message"]:
                fail("%s: step %d is %r, expected %r" % (where, n, step, e))
        placed = []
        for block in d["blocks"]:
            placed += [-r for r in block["rows"] if r < 0] + block.get("listed", [])
            lines = data["sources"].get(str(block["file"]), {})
            for r in block["rows"]:
                if r > 0 and str(r) not in lines:
                    fail("%s: line %d of its block is not in the sources" % (where, r))
        if sorted(placed) != list(range(1, len(expected) + 1)):
            fail("%s: steps placed %r, expected each of 1..%d once" % (where, placed, len(expected)))
        if bool(f["fixes"]) != bool(d.get("fixes")):
            fail("%s: fix-its %r, the JSON has %d" % (where, d.get("fixes"), len(f["fixes"])))


def check_new(page, args):
    """The findings marked new, against --new (none without a baseline)."""
    data = json.loads(page.data)
    marked = [i for i, d in enumerate(data["findings"], start=1) if d.get("new")]
    if args.new is None:
        if marked or data.get("baseline") or "count-new" in page.ids or "filter-new" in page.ids:
            fail("new findings marked in a page made without a baseline")
        return
    if not data.get("baseline") or "filter-new" not in page.ids:
        fail("a page made against a baseline has no 'baseline' data or no #filter-new")
    if len(marked) != args.new or int(page.text_of.get("count-new", -1)) != args.new:
        fail("%d findings marked new, #count-new %r, expected %d"
             % (len(marked), page.text_of.get("count-new"), args.new))
    for art in page.articles:
        number = int(art["attrs"]["id"][1:])
        if ("new" in art["attrs"].get("class", "").split()) != (number in marked):
            fail("finding #%d drawn with class %r" % (number, art["attrs"].get("class")))
    if args.only_new:
        drawn = sorted(int(a["attrs"]["id"][1:]) for a in page.articles)
        if drawn != marked[:100]:
            fail("drawn %r with only the new shown, expected %r" % (drawn, marked))
        if int(page.by_id["shown"].get("data-shown", -1)) != args.new:
            fail("#shown says %r, expected %d" % (page.by_id["shown"].get("data-shown"), args.new))


def check_drawn(page, doc, args):
    """The articles that the page's script drew (a browser's DOM)."""
    findings = doc["findings"]
    checks = collections.Counter(f["check"] for f in findings)
    for art in page.articles:
        a = art["attrs"]
        number = int(a.get("id", "f0")[1:])
        if not 1 <= number <= len(findings):
            fail("an article with id %r" % a.get("id"))
        f = findings[number - 1]
        where = "finding #%d" % number
        if a.get("data-check") != f["check"]:
            fail("%s: check %r, expected %s" % (where, a.get("data-check"), f["check"]))
        if f["file"] and not art["loc"].endswith(":%d:%d" % (f["line"], f["column"])):
            fail("%s: location %r, expected line %d column %d" % (where, art["loc"], f["line"], f["column"]))
        steps = sorted((n, " ".join(t.split())) for n, t in art["steps"] if n is not None)
        messages = [f["message"]] + [n["message"] for n in f["notes"]]
        if [n for n, _ in steps] != list(range(1, len(messages) + 1)):
            fail("%s: steps %r, expected 1..%d" % (where, [n for n, _ in steps], len(messages)))
        for (n, text), message in zip(steps, messages):
            if text != " ".join(message.split()):
                fail("%s: step %d says %r, expected %r" % (where, n, text, message))
        if f["fixes"] and not (art["del"] or art["add"]) and "Replace" not in str(art["steps"]):
            fail("%s: its fix-it is not shown" % where)
    want = None
    if args.all_visible:
        want = len(findings)
    if args.visible_check:
        want = checks[args.visible_check]
        if any(art["attrs"]["data-check"] != args.visible_check for art in page.articles):
            fail("a finding of another check than %s is shown" % args.visible_check)
    if want is not None:
        if len(page.articles) != min(want, 100):
            fail("%d findings drawn, expected %d" % (len(page.articles), min(want, 100)))
        if int(page.by_id["shown"].get("data-shown", -1)) != want:
            fail("#shown says %r, expected %d" % (page.by_id["shown"].get("data-shown"), want))
    if args.ran_script:
        if page.body.get("data-ready") != "1":
            fail("the page's script did not run to the end (no body[data-ready])")
        if "script-errors" in page.ids or "data-script-errors" in page.body:
            fail("script errors: %r" % page.text_of.get("script-errors"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("--json", required=True)
    ap.add_argument("--drawn", action="store_true",
                    help="a browser's DOM: check the articles the script drew")
    ap.add_argument("--all-visible", action="store_true", help="no finding is filtered out")
    ap.add_argument("--visible-check", help="only this check's findings are shown")
    ap.add_argument("--new", type=int, help="made against a baseline: N new findings")
    ap.add_argument("--only-new", action="store_true", help="only the new findings are shown")
    ap.add_argument("--ran-script", action="store_true",
                    help="the page's script ran to the end without an error")
    args = ap.parse_args()
    with open(args.json) as f:
        doc = json.load(f)
    findings = doc["findings"]
    page = Page()
    with open(args.page, encoding="utf-8") as f:
        page.feed(f.read())
    page.close()

    dup = [i for i, n in page.ids.items() if n > 1]
    if dup:
        fail("duplicate ids %r" % dup[:5])
    if page.scripts != 1:
        fail("%d <script> elements besides the data, expected the page's one" % page.scripts)
    if not page.csp or "default-src 'none'" not in page.csp:
        fail("no Content-Security-Policy with default-src 'none': %r" % page.csp)

    def count(id_):
        if id_ not in page.text_of:
            fail("no #%s" % id_)
        return int(page.text_of[id_])

    errors = sum(1 for f in findings if f["level"] == "error")
    checks = collections.Counter(f["check"] for f in findings)
    files = collections.Counter(f["file"] for f in findings)
    expected = {"count-findings": len(findings), "count-errors": errors,
                "count-warnings": len(findings) - errors, "count-files": len(files),
                "count-checks": len(checks), "count-tool-errors": len(doc["toolErrors"])}
    for id_, n in expected.items():
        if count(id_) != n:
            fail("#%s is %d, the JSON says %d" % (id_, count(id_), n))
    for check, n in checks.items():
        bar = page.by_id.get("bar-" + check)
        if bar is None or int(bar["data-count"]) != n:
            fail("bar of %s: %r, expected data-count %d" % (check, bar, n))
    groups = sum(int(a["data-count"]) for i, a in page.by_id.items() if i.startswith("group-"))
    if groups != len(findings):
        fail("the rule groups count %d findings, not %d" % (groups, len(findings)))
    rows = sorted((int(r[1]) for r in page.by_file_rows if len(r) >= 2), reverse=True)
    worst = sorted(files.values(), reverse=True)
    if rows != worst[:len(rows)] or (len(rows) < len(worst)) != ("by-file-rest" in page.ids):
        fail("by-file counts %r, expected the first of %r" % (rows, worst))

    check_data(page, doc)
    check_new(page, args)
    if args.drawn:
        check_drawn(page, doc, args)
    elif page.articles:
        fail("articles in the page as written: the script draws them")
    print("check_html.py: %d findings OK" % len(findings))


if __name__ == "__main__":
    main()
