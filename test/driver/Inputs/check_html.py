"""Checks torch-tidy's HTML report (--format=html, `torch-tidy report`) against
the JSON findings it was made from: the summary's counts, one article per
finding with its check, location and numbered steps, the fix-its, unique ids,
one script and a Content-Security-Policy. Works on the page as written and on
a browser's DOM (chromium --dump-dom), where it can also check what the
script did.

usage: check_html.py PAGE --json FINDINGS.json [--visible-check CHECK]
                          [--visible N] [--ran-script]
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
        if tag == "tr" and self.stack_has_id("by-file", "by-file-more"):
            self.by_file_rows.append([])
        if tag not in ("meta", "link", "input", "br", "img", "rect"):
            self.stack.append((tag, a))

    def stack_has_id(self, *ids):
        return any(a.get("id") in ids for _, a in self.stack)

    def handle_endtag(self, tag):
        while self.stack:
            t, a = self.stack.pop()
            if a.get("class", "").split()[:1] == ["st"]:
                self.step = None
            if t == tag:
                break

    def handle_data(self, data):
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
            if self.stack_has_id("by-file", "by-file-more"):
                self.by_file_rows[-1].append(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("--json", required=True)
    ap.add_argument("--visible-check", help="only this check's findings are shown")
    ap.add_argument("--visible", type=int, help="this many findings are shown")
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
        fail("%d <script> elements, expected the page's one" % page.scripts)
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
    rows = sorted(int(r[1]) for r in page.by_file_rows if len(r) >= 2)
    if rows != sorted(files.values()):
        fail("by-file counts %r, expected %r" % (rows, sorted(files.values())))

    if len(page.articles) != len(findings):
        fail("%d findings in the page, %d in the JSON" % (len(page.articles), len(findings)))
    for i, (art, f) in enumerate(zip(page.articles, findings), start=1):
        where = "finding #%d" % i
        a = art["attrs"]
        if a.get("id") != "f%d" % i or a.get("data-check") != f["check"]:
            fail("%s: id %r check %r, expected f%d %s" % (where, a.get("id"), a.get("data-check"), i, f["check"]))
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

    if args.visible is not None or args.visible_check:
        shown = [art["attrs"] for art in page.articles if "hidden" not in art["attrs"]]
        want = args.visible if args.visible is not None else checks[args.visible_check]
        if len(shown) != want:
            fail("%d findings visible, expected %d" % (len(shown), want))
        if args.visible_check and any(a["data-check"] != args.visible_check for a in shown):
            fail("a finding of another check than %s is visible" % args.visible_check)
        if int(page.by_id["shown"].get("data-shown", -1)) != want:
            fail("#shown says %r" % page.by_id["shown"].get("data-shown"))
    if args.ran_script:
        if page.body.get("data-ready") != "1":
            fail("the page's script did not run to the end (no body[data-ready])")
        if "script-errors" in page.ids or "data-script-errors" in page.body:
            fail("script errors: %r" % page.text_of.get("script-errors"))
    print("check_html.py: %d findings OK" % len(findings))


if __name__ == "__main__":
    main()
