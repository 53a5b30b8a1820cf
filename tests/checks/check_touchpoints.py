#!/usr/bin/python3
"""Touch-point check (issue 19): the guides that list places in the code still match the code.

Usage: check_touchpoints.py [--root DIR]

1. docs/adding-a-tool.md: its "Touch points" table names exactly the touch points below, its
   wire-op table names every tool (and only those), and every existing tool (schema/mcp/*.input.json
   with x-cs-tool) is present in each touch point. A new tool that misses a place, or a guide
   that no longer says where tools live, fails here.
2. docs/fuzzing.md names every harness of fuzz/CMakeLists.txt (cs_add_fuzz) and every
   fuzz/*_fuzz.c source.

Standard library only. Exit status 0 when every rule holds, 1 with one line per problem.
"""

import argparse
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GUIDE = "docs/adding-a-tool.md"
TOOL_LISTS = ("tests/e2e/test_stdio.py", "gen/tests/test_csgen.py", "tests/unit/test_base.c",
              "tests/unit/test_policy.c", "tests/e2e/node/sdk_client.mjs")


class Repo:
    def __init__(self, root):
        self.root = root
        self.cache = {}

    def path(self, rel):
        return os.path.join(self.root, rel)

    def text(self, rel):
        if rel not in self.cache:
            try:
                with open(self.path(rel), encoding="utf-8") as f:
                    self.cache[rel] = f.read()
            except OSError:
                self.cache[rel] = None
        return self.cache[rel]

    def json(self, rel):
        t = self.text(rel)
        return json.loads(t) if t is not None else None

    def cases(self, rel):
        return sorted(glob.glob(os.path.join(self.path(rel), "*.json")))


def quoted(name, text):
    return text is not None and any(q + name + q in text for q in ('"', "'", '\\"'))


# ---- the touch points: each takes (repo, tool, op) and returns a list of problems ----------

def schema_input(r, tool, op):
    doc = r.json(f"schema/mcp/{tool}.input.json")
    if not doc or doc.get("x-cs-tool", {}).get("name") != tool:
        return [f"schema/mcp/{tool}.input.json: no x-cs-tool named {tool}"]
    return []


def schema_output(r, tool, op):
    return [] if r.json(f"schema/mcp/{tool}.output.json") else \
        [f"schema/mcp/{tool}.output.json: missing"]


def frozen_lock(r, tool, op):
    lock = (r.json("schema/frozen.lock") or {}).get("schemas", {})
    return [f"schema/frozen.lock: no entry for mcp/{tool}.{d}.json"
            for d in ("input", "output") if f"mcp/{tool}.{d}.json" not in lock]


def wire_op(r, tool, op):
    if op is None:
        return []
    wire = r.json("schema/runner/wire.json") or {}
    defs = wire.get("$defs", {})
    out = []
    for kind, key in (("op", "op"), ("result", "type")):
        d = defs.get(f"{kind}_{op}")
        const = (d or {}).get("properties", {}).get(key, {}).get("const")
        if const != op:
            out.append(f"schema/runner/wire.json: no $defs/{kind}_{op} with {key} \"{op}\" "
                       f"(tool {tool})")
        elif f'"#/$defs/{kind}_{op}"' not in r.text("schema/runner/wire.json"):
            out.append(f"schema/runner/wire.json: $defs/{kind}_{op} is in no union (tool {tool})")
    return out


def runner_exec(r, tool, op):
    if op is None:
        return []
    text = r.text("src/runner/runner_exec.c") or ""
    up = op.upper()
    out = []
    # The dispatch is cs_runner_exec_op's switch; other switches list every op too (-Wswitch-enum).
    m = re.search(r"^void cs_runner_exec_op\(.*?^}", text, re.M | re.S)
    if not m or not re.search(rf"case\s+CSW_RUNNER_WIRE_OP_{up}\s*:", m.group(0)):
        out.append(f"src/runner/runner_exec.c: cs_runner_exec_op has no case "
                   f"CSW_RUNNER_WIRE_OP_{up} (tool {tool})")
    if f"CSW_RUNNER_WIRE_RESULT_{up}" not in text:
        out.append(f"src/runner/runner_exec.c: never names CSW_RUNNER_WIRE_RESULT_{up} "
                   f"(tool {tool})")
    return out


def tools_c(r, tool, op):
    text = r.text("src/tools/tools.c") or ""
    out = []
    if not re.search(rf'cs_mcp_set_tool\(\s*\w+\s*,\s*"{tool}"\s*,', text):
        out.append(f'src/tools/tools.c: no cs_mcp_set_tool(srv, "{tool}", ...)')
    if op is not None:
        up = op.upper()
        if f"CSW_RUNNER_WIRE_OP_{up}" not in text:
            out.append(f"src/tools/tools.c: never submits CSW_RUNNER_WIRE_OP_{up} (tool {tool})")
        if not re.search(rf"case\s+CSW_RUNNER_WIRE_RESULT_{up}\s*:\s*\n\s*return", text) and \
                not re.search(rf"tag\s*!=\s*CSW_RUNNER_WIRE_RESULT_{up}\b", text):
            out.append(f"src/tools/tools.c: neither mcp_output_of nor a completion of its own "
                       f"unpacks CSW_RUNNER_WIRE_RESULT_{up} (tool {tool})")
    return out


def golden(r, tool, op):
    out = []
    for d in ("input", "output"):
        for v in ("valid", "invalid"):
            rel = f"tests/golden/mcp_{tool}_{d}/{v}"
            if not r.cases(rel):
                out.append(f"{rel}/: no cases")
    if op is not None:
        req = resp = False
        for path in r.cases("tests/golden/runner_wire/valid"):
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                continue
            if not isinstance(doc, dict):
                continue
            if doc.get("kind") == "request" and (doc.get("op") or {}).get("op") == op:
                req = True
            if doc.get("kind") == "response" and (doc.get("result") or {}).get("type") == op:
                resp = True
        if not req:
            out.append(f"tests/golden/runner_wire/valid/: no request case with op \"{op}\"")
        if not resp:
            out.append(f"tests/golden/runner_wire/valid/: no response case with result type "
                       f"\"{op}\"")
    return out


def corpus(r, tool, op):
    out = []
    for d in ("input", "output"):
        rel = f"fuzz/corpus/mcp_{tool}_{d}"
        if not os.path.isdir(r.path(rel)) or not os.listdir(r.path(rel)):
            out.append(f"{rel}/: no seeds")
    return out


def tool_lists(r, tool, op):
    return [f"{rel}: does not name {tool}" for rel in TOOL_LISTS if not quoted(tool, r.text(rel))]


def e2e(r, tool, op):
    for path in sorted(glob.glob(r.path("tests/e2e/test_*.py"))):
        if os.path.basename(path) == "test_stdio.py":
            continue  # its TOOLS list names every tool; a real call must be somewhere else too
        if quoted(tool, r.text(os.path.relpath(path, r.root))):
            return []
    return [f"tests/e2e/: no suite but test_stdio.py calls {tool}"]


def contract_docs(r, tool, op):
    out = []
    tools_md = r.text("docs/contract/tools.md") or ""
    if not re.search(rf"^### 3\.\d+ {re.escape(tool)}\s*$", tools_md, re.M):
        out.append(f"docs/contract/tools.md: no '### 3.N {tool}' in section 3")
    if not re.search(rf"^## {re.escape(tool)}\s*$", r.text("docs/contract/tool-reference.md") or "",
                     re.M):
        out.append(f"docs/contract/tool-reference.md: no '## {tool}' (run gen/docgen.py)")
    if not quoted(tool, r.text("gen/docgen.py")):
        out.append(f"gen/docgen.py: no TOOL_ERRORS entry for {tool}")
    if op is not None and f"`{op}`" not in (r.text("docs/contract/runtime.md") or ""):
        out.append(f"docs/contract/runtime.md: the wire op `{op}` is not listed (section 4)")
    return out


TOUCH_POINTS = {
    "schema-input": schema_input,
    "schema-output": schema_output,
    "frozen-lock": frozen_lock,
    "wire-op": wire_op,
    "runner-exec": runner_exec,
    "tools-c": tools_c,
    "golden": golden,
    "corpus": corpus,
    "tool-lists": tool_lists,
    "e2e": e2e,
    "contract-docs": contract_docs,
}


def section(text, heading):
    m = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def guide_tables(text):
    """-> (touch-point ids of the Touch points table, {tool: op or None} of the wire-op table)"""
    ids = re.findall(r"^\| `([a-z0-9-]+)` \|", section(text, "Touch points"), re.M)
    ops = {}
    for tool, op in re.findall(r"^\| `([a-z_]+)` \| (`[a-z_]+`|\(gateway only\)) \|\s*$",
                               section(text, "2. The runner wire op"), re.M):
        ops[tool] = op.strip("`") if op.startswith("`") else None
    return ids, ops


def existing_tools(r):
    tools = []
    for path in sorted(glob.glob(r.path("schema/mcp/*.input.json"))):
        with open(path, encoding="utf-8") as f:
            t = json.load(f).get("x-cs-tool")
        if t:
            tools.append((t["index"], t["name"]))
    return [name for _, name in sorted(tools)]


def check_tools(r, problems):
    text = r.text(GUIDE)
    if text is None:
        problems.append(f"{GUIDE}: missing")
        return 0
    ids, ops = guide_tables(text)
    for i in ids:
        if i not in TOUCH_POINTS:
            problems.append(f"{GUIDE}: names touch point `{i}`, which this check does not "
                            f"verify (add it to TOUCH_POINTS in tests/checks/check_touchpoints.py)")
    for i in TOUCH_POINTS:
        if i not in ids:
            problems.append(f"{GUIDE}: the Touch points table does not name `{i}`")
    tools = existing_tools(r)
    for t in tools:
        if t not in ops:
            problems.append(f"{GUIDE}: the wire-op table has no row for {t}")
    for t in ops:
        if t not in tools:
            problems.append(f"{GUIDE}: the wire-op table names {t}, which is not a tool")
    for t in tools:
        for i, fn in TOUCH_POINTS.items():
            problems.extend(f"{i}: {p}" for p in fn(r, t, ops.get(t)))
    return len(tools)


def check_fuzzing(r, problems):
    cmake = r.text("fuzz/CMakeLists.txt") or ""
    doc = r.text("docs/fuzzing.md") or ""
    names = [n for n in re.findall(r"^\s*cs_add_fuzz\(\s*([A-Za-z0-9_${}]+)", cmake, re.M)
             if not n.startswith("$")]
    for n in names:
        if f"`{n}_fuzz`" not in doc:
            problems.append(f"docs/fuzzing.md: the harness `{n}_fuzz` of fuzz/CMakeLists.txt is "
                            f"not listed")
    for path in sorted(glob.glob(r.path("fuzz/*_fuzz.c"))):
        src = "fuzz/" + os.path.basename(path)
        if f"`{src}`" not in doc:
            problems.append(f"docs/fuzzing.md: the source `{src}` is not listed")
    return len(names)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=REPO)
    args = ap.parse_args(argv)
    r = Repo(args.root)
    problems = []
    n_tools = check_tools(r, problems)
    n_fuzz = check_fuzzing(r, problems)
    for p in problems:
        print(f"check_touchpoints: {p}")
    print(f"check_touchpoints: {n_tools} tools x {len(TOUCH_POINTS)} touch points, "
          f"{n_fuzz} named fuzz harnesses")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
