#!/usr/bin/python3
"""Writes docs/contract/tool-reference.md from the MCP tool schemas and the error catalogue.

Usage: docgen.py [--root DIR] [--check] [--out FILE]

Inputs (all under --root, default this repository):
  schema/mcp/<tool>.input.json   the tools (x-cs-tool: name, index, title, annotations), inputs
  schema/mcp/<tool>.output.json  their results
  schema/errors.json             the error catalogue ($defs/code with x-cs-enum-descriptions)
Each schema is checked against the 2020-12 meta-schema (jsonschema) before it is read.

The page is deterministic: the same schemas give the same bytes. Without --check the page is
written; with --check it is compared with the committed one and the exit status is 1 (with the
command that updates it) when they differ. Exit status 2 on a usage or schema error.

The per-tool error codes are not in the schemas yet (x-cs-tool has no field for them); they are
the TOOL_ERRORS table below, checked against the catalogue and the tool list on every run.
"""

import argparse
import glob
import json
import os
import sys

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PAGE = os.path.join("docs", "contract", "tool-reference.md")
UPDATE = "/usr/bin/python3 gen/docgen.py --root ."

# Every tool answers INVALID_ARGUMENTS for input its schema refuses; the codes below are the
# rest, in the order the tool checks them (docs/contract/tools.md section 3).
TOOL_ERRORS = {
    "workspace_info": ["WORKSPACE_NOT_FOUND"],
    "read": ["WORKSPACE_NOT_FOUND", "UNAUTHORIZED", "PATH_ESCAPE", "PATH_DENIED",
             "SYMLINK_REJECTED", "SPECIAL_FILE_REJECTED", "FILE_NOT_FOUND",
             "PATH_NOT_DIRECTORY", "FILE_OPERATION_FAILED", "OUTPUT_LIMIT", "TIMEOUT"],
    "find": ["WORKSPACE_NOT_FOUND", "UNAUTHORIZED", "PATH_ESCAPE", "SYMLINK_REJECTED", "SPECIAL_FILE_REJECTED", "FILE_NOT_FOUND",
             "PATH_NOT_DIRECTORY", "FILE_OPERATION_FAILED", "OUTPUT_LIMIT", "TIMEOUT"],
    "apply_patch": ["WORKSPACE_NOT_FOUND", "UNAUTHORIZED", "WORKSPACE_BUSY",
                    "RESOURCE_QUEUE_FULL", "OPERATION_KEY_CONFLICT", "VERSION_CONFLICT",
                    "INVALID_PATCH", "PATH_ESCAPE", "PATH_DENIED", "SYMLINK_REJECTED",
                    "SPECIAL_FILE_REJECTED", "PATH_NOT_DIRECTORY", "FILE_NOT_FOUND",
                    "ADD_FILE_EXISTS", "MOVE_DESTINATION_EXISTS", "TIMEOUT"],
    "operation_status": ["OPERATION_NOT_FOUND"],
    "exec_command": ["WORKSPACE_NOT_FOUND", "UNAUTHORIZED", "INVALID_COMMAND", "WORKSPACE_BUSY",
                     "RESOURCE_QUEUE_FULL", "PROCESS_SPAWN_FAILED", "TIMEOUT"],
    "write_stdin": ["PROCESS_NOT_FOUND"],
    "read_process": ["PROCESS_NOT_FOUND", "TIMEOUT"],
    "process_status": ["PROCESS_NOT_FOUND"],
    "process_resize": ["PROCESS_NOT_FOUND", "PROCESS_NOT_TTY", "PROCESS_NOT_RUNNING"],
    "terminate_process": ["PROCESS_NOT_FOUND"],
}

# Limits a tool enforces beyond its schema (the schema admits the value, the tool refuses it).
TOOL_CAPS = {
    "read": ["`limit` 0 or above 1048576 is `OUTPUT_LIMIT`"],
    "find": ["`limit` 0 or above 10000 is `OUTPUT_LIMIT`",
             "the walk stops after 100000 entries (`incomplete: true`)",
             "a `glob` that can never match a normalised path (an empty, `.` or `..` component, "
             "an unclosed `[`, a lone `\\` at the end) is `INVALID_ARGUMENTS` naming `/glob`"],
    "apply_patch": ["at most 64 calls wait for one workspace's lease (`RESOURCE_QUEUE_FULL`)"],
    "exec_command": ["a `command` that is not an array (a command line as a string) is "
                     "`INVALID_ARGUMENTS` saying `use [\"sh\",\"-c\",\"...\"]`",
                     "at most 64 calls wait for one workspace's lease (`RESOURCE_QUEUE_FULL`)",
                     "live processes per workspace: its `limits.max_live_processes` (default 8; "
                     "`WORKSPACE_BUSY` naming the limit), 1024 per runner",
                     "time limit: its `limits.timeout_ms` (default 30 minutes; 0: none)",
                     "output ring: its `limits.output_ring_bytes` per process (default 1 MiB)"],
}


class Fail(Exception):
    pass


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        jsonschema.Draft202012Validator.check_schema(doc)
    except (OSError, ValueError, jsonschema.exceptions.SchemaError) as e:
        raise Fail(f"{path}: {e}")
    return doc


class Schemas:
    """The schema files, with $ref resolved across files (relative refs and #/$defs/...)."""

    def __init__(self, root):
        self.root = os.path.join(root, "schema")
        self.docs = {}

    def doc(self, rel):
        rel = os.path.normpath(rel)
        if rel not in self.docs:
            self.docs[rel] = load(os.path.join(self.root, rel))
        return self.docs[rel]

    def resolve(self, rel, node):
        """-> (file, node) with every $ref on node itself followed."""
        seen = 0
        while isinstance(node, dict) and "$ref" in node:
            seen += 1
            if seen > 32:
                raise Fail(f"schema/{rel}: $ref loop")
            target, _, frag = node["$ref"].partition("#")
            if target:
                rel = os.path.join(os.path.dirname(rel), target)
            node = self.doc(rel)
            for part in [p for p in frag.split("/") if p]:
                node = node[part.replace("~1", "/").replace("~0", "~")]
        return rel, node


def jtype(node):
    if "const" in node:
        return "const " + json.dumps(node["const"])
    if "enum" in node:
        return " | ".join(json.dumps(v) for v in node["enum"])
    t = node.get("type")
    if isinstance(t, list):
        return " | ".join(t)
    if t:
        return t
    if "oneOf" in node:
        return "one of " + str(len(node["oneOf"]))
    return "any"


def constraints(node):
    out = []
    for key, fmt in (("minimum", "≥ {}"), ("maximum", "≤ {}"), ("minLength", "length ≥ {}"),
                     ("maxLength", "length ≤ {}"), ("minItems", "items ≥ {}"),
                     ("maxItems", "items ≤ {}"), ("pattern", "pattern `{}`")):
        if key in node:
            out.append(fmt.format(node[key]))
    return ", ".join(out)


def cell(text):
    return " ".join(str(text).split()).replace("|", "\\|")


def rows(schemas, rel, node, prefix, out, depth=0):
    """One row per property, nested objects and array items flattened as a.b / a[].b."""
    rel, node = schemas.resolve(rel, node)
    # An allOf entry (a $ref to an object, docs/schema-keywords.md) adds its properties after
    # this object's own, as tools/list shows the object flat.
    props = [(rel, name, sub) for name, sub in node.get("properties", {}).items()]
    required = set(node.get("required", []))
    for entry in node.get("allOf", []):
        erel, e = schemas.resolve(rel, entry)
        props += [(erel, name, sub) for name, sub in e.get("properties", {}).items()]
        required |= set(e.get("required", []))
    for srel, name, sub in props:
        prel, p = schemas.resolve(srel, sub)
        path = f"{prefix}{name}"
        kind = jtype(p)
        items = None
        if p.get("type") == "array" and "items" in p:
            irel, items = schemas.resolve(prel, p["items"])
            kind = f"array of {jtype(items)}"
        default = json.dumps(p["default"]) if "default" in p else ""
        out.append((path, kind, "yes" if name in required else "", default, constraints(p),
                    p.get("description", "")))
        if depth < 8:
            if "properties" in p:
                rows(schemas, prel, p, path + ".", out, depth + 1)
            if items is not None and "properties" in items:
                rows(schemas, irel, items, path + "[].", out, depth + 1)
            if isinstance(p.get("additionalProperties"), dict):
                vrel, v = schemas.resolve(prel, p["additionalProperties"])
                out.append((path + ".{key}", jtype(v), "", "", constraints(v),
                            v.get("description", "")))


def table(schemas, rel, node):
    out = []
    rows(schemas, rel, node, "", out)
    if not out:
        return ["(no fields)"]
    lines = ["| field | type | required | default | limits | description |",
             "| --- | --- | --- | --- | --- | --- |"]
    for path, kind, req, default, lim, desc in out:
        lines.append(f"| `{path}` | {cell(kind)} | {req} | {cell(default)} | {cell(lim)} | "
                     f"{cell(desc)} |")
    return lines


def render(root):
    schemas = Schemas(root)
    errors = schemas.doc("errors.json")["$defs"]["code"]
    codes = errors["enum"]
    meanings = errors.get("x-cs-enum-descriptions", [""] * len(codes))
    tools = []
    for path in sorted(glob.glob(os.path.join(root, "schema", "mcp", "*.input.json"))):
        rel = os.path.relpath(path, schemas.root)
        doc = schemas.doc(rel)
        if "x-cs-tool" in doc:
            out_rel = rel[: -len(".input.json")] + ".output.json"
            tools.append((doc["x-cs-tool"]["index"], doc["x-cs-tool"], rel, out_rel))
    tools.sort(key=lambda t: t[0])
    names = [t[1]["name"] for t in tools]
    if sorted(names) != sorted(TOOL_ERRORS):
        raise Fail(f"gen/docgen.py: TOOL_ERRORS names {sorted(TOOL_ERRORS)} but the schemas "
                   f"define {sorted(names)}")
    for name, lst in TOOL_ERRORS.items():
        for code in lst:
            if code not in codes:
                raise Fail(f"gen/docgen.py: TOOL_ERRORS[{name!r}]: {code} is not in "
                           f"schema/errors.json")

    w = []
    w += ["<!-- Generated by gen/docgen.py from schema/mcp/*.json and schema/errors.json.",
          f"     Do not edit: change the schemas, then run `{UPDATE}`. -->",
          "",
          "# Tool reference",
          "",
          "Every tool's inputs, outputs, defaults, limits and error codes, as the schemas under",
          "`schema/mcp/` state them. The rules behind them are in [tools.md](tools.md); a",
          "failed call's body is the error body of `schema/errors.json` ([errors.md](errors.md)).",
          "Nested fields are written `a.b`, array items `a[].b`, map values `a.{key}`.",
          "",
          "| # | tool | title | read-only | destructive | idempotent | open world |",
          "| --- | --- | --- | --- | --- | --- | --- |"]
    for index, tool, _, _ in tools:
        ann = tool["annotations"]
        flags = ["yes" if ann.get(k) else "" for k in
                 ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")]
        w.append(f"| {index} | [`{tool['name']}`](#{tool['name']}) | {cell(tool['title'])} | "
                 + " | ".join(flags) + " |")
    for index, tool, in_rel, out_rel in tools:
        name = tool["name"]
        in_doc = schemas.doc(in_rel)
        out_doc = schemas.doc(out_rel)
        w += ["", f"## {name}", "", cell(in_doc.get("description", "")), "",
              f"Schemas: `schema/{in_rel}`, `schema/{out_rel}`.", "", "### Input", ""]
        w += table(schemas, in_rel, in_doc)
        w += ["", "### Output", ""]
        w += table(schemas, out_rel, out_doc)
        caps = TOOL_CAPS.get(name, [])
        if caps:
            w += ["", "### Limits enforced by the tool", ""]
            w += [f"- {c}" for c in caps]
        w += ["", "### Errors", "",
              ", ".join(f"`{c}`" for c in ["INVALID_ARGUMENTS"] + TOOL_ERRORS[name])]
    w += ["", "## Error catalogue", "",
          "`schema/errors.json`, `$defs/code`, in enum order (the order of `enum csw_error`).",
          "", "| code | meaning |", "| --- | --- |"]
    for code, meaning in zip(codes, meanings):
        w.append(f"| `{code}` | {cell(meaning)} |")
    return "\n".join(w) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=REPO)
    ap.add_argument("--out", help=f"where to write (default <root>/{PAGE})")
    ap.add_argument("--check", action="store_true",
                    help="compare with the committed page instead of writing it")
    args = ap.parse_args(argv)
    out = args.out or os.path.join(args.root, PAGE)
    try:
        text = render(args.root)
    except Fail as e:
        print(f"docgen: {e}", file=sys.stderr)
        return 2
    if args.check:
        try:
            with open(out, encoding="utf-8") as f:
                old = f.read()
        except OSError:
            old = None
        if old != text:
            print(f"docgen: {PAGE} is not what the schemas give; update it with `{UPDATE}` "
                  f"and commit it", file=sys.stderr)
            return 1
        print(f"docgen: {PAGE} is current")
        return 0
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
