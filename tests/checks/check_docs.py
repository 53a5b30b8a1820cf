#!/usr/bin/python3
"""Documentation check (issue #9): links, Korean counterparts, and the flags commands show.

Usage: check_docs.py [--root DIR] [--mcp-bin PATH | --mcp-help FILE]
                     [--runtime-bin PATH | --runtime-help FILE]

Pages: README.md and docs/**/*.md under --root (default: this repository).
1. Every relative link ([text](target), ![alt](target), [ref]: target) outside code resolves to
   an existing file or directory; a #fragment into a markdown page names one of its headings
   (GitHub's anchors: lower case, punctuation dropped, spaces to hyphens, -1, -2 for repeats).
2. Every English page docs/X.md with a Korean counterpart docs/ko/X.md has as many headings
   (# .. ###### outside code fences) as its counterpart.
3. Commands shown in code (fenced blocks and inline code spans) that invoke codespace-mcp or
   codespace-runtime name only --flags and CODESPACE_* variables that the binary's --help
   prints; ones that invoke scripts/*.sh name only flags the script's source mentions (plus the
   server's for scripts/start.sh, which passes its arguments on) and CODESPACE_* variables the
   server knows. Other commands (cmake --preset, ...) are not checked.

The server's --help comes from --mcp-bin (default $CODESPACE_MCP_BIN), run with an empty
environment, or from a saved text (--mcp-help). codespace-runtime lines are checked when its
--help is available and reported as skipped otherwise. Exit status 0 when every rule holds, 1
with one line per problem, 2 on a usage error.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*#*[ \t]*$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
VAR = re.compile(r"\bCODESPACE_[A-Z0-9_]+")
SCRIPT = re.compile(r"(?:^|/)scripts/([A-Za-z0-9_.-]+\.sh)$")
SERVERS = ("codespace-mcp", "codespace-runtime")
WRAPPERS = ("sudo", "env", "exec", "time", "nohup", "command")


def pages(root):
    out = []
    if os.path.isfile(os.path.join(root, "README.md")):
        out.append("README.md")
    for d, subdirs, files in os.walk(os.path.join(root, "docs")):
        subdirs.sort()
        for f in sorted(files):
            if f.endswith(".md"):
                out.append(os.path.relpath(os.path.join(d, f), root))
    return out


def split_markdown(text):
    """-> (prose, fenced blocks, headings). prose is the text with fenced blocks and inline code
    blanked out (same length and line numbers); blocks are (first line number, [lines])."""
    lines = text.split("\n")
    prose_lines, blocks, headings = [], [], []
    fence, block = None, None
    for i, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence, block = m.group(1), (i + 1, [])
            prose_lines.append("")
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and line.strip() == m.group(1):
                blocks.append(block)
                fence, block = None, None
            else:
                block[1].append(line)
            prose_lines.append("")
            continue
        h = HEADING.match(line)
        if h:
            headings.append((i, len(h.group(1)), h.group(2) or ""))
        prose_lines.append(line)
    if block is not None:
        blocks.append(block)
    prose = "\n".join(prose_lines)
    spans = []

    def blank(m):
        spans.append((prose.count("\n", 0, m.start()) + 1, m.group(2)))
        return re.sub(r"[^\n]", " ", m.group(0))

    prose = re.sub(r"(`+)(.+?)\1", blank, prose, flags=re.S)
    return prose, blocks, headings, spans


def anchor(heading_text):
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading_text)  # links -> their text
    t = re.sub(r"<[^>]+>", "", t)                                 # inline html
    t = t.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)                                # punctuation (keeps _ and -)
    return t.replace(" ", "-")


def anchors(headings):
    seen, out = {}, set()
    for _, _, text in headings:
        a = anchor(text)
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f"{a}-{n}")
    return out


class Docs:
    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.cache = {}

    def parsed(self, path):
        if path not in self.cache:
            with open(path, encoding="utf-8") as f:
                self.cache[path] = split_markdown(f.read())
        return self.cache[path]


def check_links(docs, rel, problems):
    path = os.path.join(docs.root, rel)
    prose, _, headings, _ = docs.parsed(path)
    targets = [(m.start(1), m.group(1)) for m in INLINE_LINK.finditer(prose)]
    targets += [(m.start(1), m.group(1)) for m in REF_DEF.finditer(prose)]
    n = 0
    for pos, target in targets:
        line = prose.count("\n", 0, pos) + 1
        if not target or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # absolute URL (http:, mailto:, ...), checked by nobody here
        n += 1
        where = f"{rel}:{line}: link {target!r}"
        file_part, _, frag = target.partition("#")
        file_part = urllib.parse.unquote(file_part.split("?", 1)[0])
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part \
            else path
        if not os.path.exists(dest):
            problems.append(f"{where}: {os.path.relpath(dest, docs.root)} does not exist")
            continue
        if frag and dest.endswith(".md") and os.path.isfile(dest):
            if urllib.parse.unquote(frag).lower() not in anchors(docs.parsed(dest)[2]):
                problems.append(f"{where}: no heading with anchor #{frag} in "
                                f"{os.path.relpath(dest, docs.root)}")
    return n


def check_korean(docs, rels, problems):
    pairs = 0
    for rel in rels:
        parts = rel.split(os.sep)
        if len(parts) != 3 or parts[:2] != ["docs", "ko"]:
            continue
        en = os.path.join("docs", parts[2])
        if en not in rels:
            continue
        pairs += 1
        n_en = len(docs.parsed(os.path.join(docs.root, en))[2])
        n_ko = len(docs.parsed(os.path.join(docs.root, rel))[2])
        if n_en != n_ko:
            problems.append(f"{rel}: {n_ko} sections, but {en} has {n_en}")
    return pairs


def help_text(binary, saved, what, required):
    if saved:
        with open(saved, encoding="utf-8") as f:
            return f.read()
    if not binary:
        if required:
            raise SystemExit(f"check_docs: no {what} binary (--{what}-bin or CODESPACE_MCP_BIN)")
        return None
    try:
        r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30,
                           env={"PATH": "/usr/bin:/bin"})
    except OSError as e:
        raise SystemExit(f"check_docs: cannot run {binary} --help: {e.strerror}")
    if r.returncode != 0:
        raise SystemExit(f"check_docs: {binary} --help exited {r.returncode}")
    return r.stdout + r.stderr


def known(text):
    return set(FLAG.findall(text)), set(VAR.findall(text))


def commands(code_line):
    """Split one shell line into commands (token lists) at | & ; && || and redirections."""
    lex = shlex.shlex(code_line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        tokens = list(lex)
    except ValueError:
        tokens = code_line.split()
    cmd = []
    for t in tokens:
        if t and set(t) <= set("|&;()<>"):
            if cmd:
                yield cmd
            cmd = []
        else:
            cmd.append(t)
    if cmd:
        yield cmd


def logical_lines(lines):
    cur = ""
    for line in lines:
        line = re.sub(r"^\s*[$>] ", "", line) if not cur else line
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        yield cur + line
        cur = ""
    if cur:
        yield cur


class CommandCheck:
    def __init__(self, root, mcp_help, runtime_help):
        self.root = root
        self.mcp_flags, self.mcp_vars = known(mcp_help)
        self.helps = {"codespace-mcp": known(mcp_help),
                      "codespace-runtime": known(runtime_help) if runtime_help else None}
        self.checked, self.skipped = 0, 0

    def script_flags(self, name):
        path = os.path.join(self.root, "scripts", name)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            return set(FLAG.findall(f.read()))

    def check(self, where, code_line, problems):
        for cmd in commands(code_line):
            env_names = []
            while cmd and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[0]) or cmd[0] in WRAPPERS):
                if "=" in cmd[0]:
                    env_names.append(cmd[0].split("=", 1)[0])
                cmd = cmd[1:]
            if not cmd:
                continue
            prog = os.path.basename(cmd[0])
            script = SCRIPT.search(cmd[0])
            if prog in SERVERS:
                h = self.helps[prog]
                if h is None:
                    self.skipped += 1
                    continue
                flags, variables = h
                label = prog
            elif script:
                flags = self.script_flags(script.group(1))
                if flags is None:
                    problems.append(f"{where}: {cmd[0]}: no such script")
                    continue
                if script.group(1) == "start.sh":
                    flags |= self.mcp_flags
                variables, label = self.mcp_vars, cmd[0]
            else:
                continue
            self.checked += 1
            for tok in cmd[1:]:
                m = re.match(r"^\[?(--[A-Za-z0-9][A-Za-z0-9_-]*)", tok)
                if m and m.group(1) not in flags:
                    problems.append(f"{where}: {label} has no flag {m.group(1)} "
                                    f"(in {code_line.strip()!r})")
            for name in env_names + VAR.findall(" ".join(cmd)):
                if name.startswith("CODESPACE_") and name not in variables:
                    problems.append(f"{where}: {label} knows no variable {name} "
                                    f"(in {code_line.strip()!r})")


def check_commands(docs, rel, cc, problems):
    _, blocks, _, spans = docs.parsed(os.path.join(docs.root, rel))
    for first, lines in blocks:
        for i, line in enumerate(logical_lines(lines)):
            cc.check(f"{rel}:{first + i}", line, problems)
    for line, span in spans:
        cc.check(f"{rel}:{line}", span.replace("\n", " "), problems)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=REPO)
    ap.add_argument("--mcp-bin", default=os.environ.get("CODESPACE_MCP_BIN"))
    ap.add_argument("--mcp-help", help="use this saved --help text instead of running the binary")
    ap.add_argument("--runtime-bin")
    ap.add_argument("--runtime-help")
    args = ap.parse_args(argv)

    mcp_help = help_text(args.mcp_bin, args.mcp_help, "mcp", True)
    runtime_help = help_text(args.runtime_bin, args.runtime_help, "runtime", False)
    docs = Docs(args.root)
    problems = []
    if not VAR.search(mcp_help) or not FLAG.search(mcp_help):
        problems.append("codespace-mcp --help lists no --flags or no CODESPACE_* variables")
    rels = pages(docs.root)
    cc = CommandCheck(docs.root, mcp_help, runtime_help)
    n_links = 0
    for rel in rels:
        n_links += check_links(docs, rel, problems)
        check_commands(docs, rel, cc, problems)
    pairs = check_korean(docs, rels, problems)

    for p in problems:
        print(f"check_docs: {p}")
    print(f"check_docs: {len(rels)} pages, {n_links} relative links, {pairs} English/Korean "
          f"pairs, {cc.checked} command lines checked against {len(cc.mcp_flags)} flags and "
          f"{len(cc.mcp_vars)} variables, {cc.skipped} codespace-runtime lines skipped (no "
          f"--help available)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
