#!/usr/bin/python3
"""Citation check (issue 19): code cites the contract in docs/, never a file outside the clone.

Usage: check_citations.py [--root DIR]

Files: every text file under src/, helper/, gen/, fuzz/, tests/ and schema/ (seed corpora,
golden cases, node_modules and this check's own files aside). Only comments are read (C
comments, # comments, Python docstrings; the whole of JSON schemas and markdown), so test data
naming a missing page is not a citation. A problem is
1. a contract file named without its docs/ path: contract.md, runtime.md, sandbox.md or
   patch-format.md not preceded by a directory, or anything under shared/spec/;
2. a docs/ page that does not exist (docs/<path>.md);
3. a numbered section of a docs/ page that the page does not have: "docs/X.md section N",
   "sections N, M and K", "sections N-M", "§N" (the page needs a heading "## N. ..."), or a
   "docs/X.md#anchor" whose anchor is none of the page's headings.
Citations may wrap onto the next comment line ("docs/contract/runtime.md\n * section 5").
Standard library only. Exit status 0 when every rule holds, 1 with one line per problem.
"""

import argparse
import io
import os
import re
import sys
import tokenize

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TREES = ("src", "helper", "gen", "fuzz", "tests", "schema")
SKIP_DIRS = {"node_modules", "__pycache__", "corpus", "golden", ".git"}
SELF = {os.path.join("tests", "checks", n) for n in ("check_citations.py",
                                                     "test_contract_checks.py")}
TEXT_EXT = (".c", ".h", ".rl", ".py", ".sh", ".cmake", ".txt", ".json", ".mjs", ".js", ".md",
            ".yml", ".yaml", ".toml", ".in", ".supp")

# A line break inside a comment: the leader of the next line (" * ", "# ", "// ").
GAP = r"(?:[ \t]*\n[ \t]*(?:\*(?!/)|#|//)?)?[ \t]*"
BARE = re.compile(r"(?<![\w/.-])(contract|runtime|sandbox|patch-format)\.md\b|shared/spec/")
DOC = re.compile(r"(?<![\w/.-])docs/([\w./-]+?\.md)(#[\w-]+)?")
NUM = r"(?:§\s?)?\d+(?:\.\d+)?"
SECTIONS = re.compile(
    rf",?{GAP}(?:(?:sections?|§){GAP}(?:§\s?)?(\d+(?:\.\d+)?)"
    rf"((?:{GAP}(?:,|and|-|–|or){GAP}{NUM})*))")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$", re.M)


def files(root):
    for tree in TREES:
        for d, subdirs, names in os.walk(os.path.join(root, tree)):
            subdirs[:] = sorted(s for s in subdirs if s not in SKIP_DIRS)
            for n in sorted(names):
                path = os.path.join(d, n)
                rel = os.path.relpath(path, root)
                if rel in SELF or not (n.endswith(TEXT_EXT) or n == "CMakeLists.txt"):
                    continue
                yield rel


def blank(text, keep):
    """text with everything outside the spans in keep replaced by spaces (newlines kept)."""
    out = list(re.sub(r"[^\n]", " ", text))
    for a, b in keep:
        out[a:b] = text[a:b]
    return "".join(out)


def c_comments(text):
    spans, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            spans.append((i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            spans.append((i, j))
            i = j
        else:
            i += 1
    return spans


def hash_comments(text):
    return [(m.start(), m.end()) for m in re.finditer(r"#[^\n]*", text)]


def py_comments(text):
    """# comments and triple-quoted strings (docstrings); other string literals are data."""
    spans = []
    try:
        lines = text.splitlines(keepends=True)
        starts = [0]
        for ln in lines:
            starts.append(starts[-1] + len(ln))
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT or (
                    tok.type == tokenize.STRING and re.match(r"^[rRbBuUfF]*(\"\"\"|\'\'\')",
                                                             tok.string)):
                a = starts[tok.start[0] - 1] + tok.start[1]
                b = starts[tok.end[0] - 1] + tok.end[1]
                spans.append((a, b))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return hash_comments(text)
    return spans


def comments(rel, text):
    """The comment text of a file (the rest blanked): C-family comments, # comments and Python
    docstrings; JSON schemas and markdown pages count as prose throughout."""
    if rel.endswith((".c", ".h", ".rl", ".mjs", ".js")):
        return blank(text, c_comments(text))
    if rel.endswith(".py"):
        return blank(text, py_comments(text))
    if rel.endswith((".json", ".md")):
        return text
    return blank(text, hash_comments(text))


def anchor(text):
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    t = re.sub(r"[^\w\- ]", "", t.strip().lower())
    return t.replace(" ", "-")


class Pages:
    def __init__(self, root):
        self.root = root
        self.cache = {}

    def get(self, rel):
        """-> (set of section numbers, set of anchors) of docs/<rel>, or None if missing."""
        if rel not in self.cache:
            path = os.path.join(self.root, "docs", rel)
            if not os.path.isfile(path):
                self.cache[rel] = None
            else:
                with open(path, encoding="utf-8") as f:
                    text = re.sub(r"^```.*?^```", "", f.read(), flags=re.M | re.S)
                numbers, anchors = set(), set()
                for m in HEADING.finditer(text):
                    anchors.add(anchor(m.group(2)))
                    n = re.match(r"(\d+(?:\.\d+)*)\.?\s", m.group(2))
                    if n:
                        numbers.add(n.group(1))
                self.cache[rel] = (numbers, anchors)
        return self.cache[rel]


def check_file(root, rel, pages, problems):
    try:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = comments(rel, f.read())
    except (OSError, UnicodeDecodeError):
        return 0

    def line(pos):
        return text.count("\n", 0, pos) + 1

    n = 0
    for m in BARE.finditer(text):
        n += 1
        problems.append(f"{rel}:{line(m.start())}: cites {m.group(0)!r} outside docs/: cite "
                        f"docs/contract/<page>.md section N (see docs/contract/README.md)")
    for m in DOC.finditer(text):
        n += 1
        page, frag = m.group(1), m.group(2)
        where = f"{rel}:{line(m.start())}: docs/{page}"
        if re.search(r"(^|/)[A-Z]\.md$", page):
            continue  # a placeholder such as docs/X.md in a usage text
        info = pages.get(page)
        if info is None:
            problems.append(f"{where}: no such page")
            continue
        numbers, anchors = info
        if frag and frag[1:].lower() not in anchors:
            problems.append(f"{where}{frag}: no heading with that anchor")
        s = SECTIONS.match(text, m.end())
        if not s:
            continue
        cited = [s.group(1)] + re.findall(r"\d+(?:\.\d+)?", s.group(2) or "")
        if "-" in (s.group(2) or "") or "–" in (s.group(2) or ""):
            lo, hi = int(float(cited[0])), int(float(cited[-1]))
            cited = [str(i) for i in range(lo, hi + 1)]
        for c in cited:
            if c not in numbers:
                problems.append(f"{where}: no section {c} (a heading '## {c}. ...')")
    return n


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=REPO)
    args = ap.parse_args(argv)
    pages = Pages(args.root)
    problems = []
    n_files = n_cites = 0
    for rel in files(args.root):
        n_files += 1
        n_cites += check_file(args.root, rel, pages, problems)
    for p in problems:
        print(f"check_citations: {p}")
    print(f"check_citations: {n_files} files, {n_cites} citations, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
