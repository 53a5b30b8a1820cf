#!/usr/bin/python3
"""csgen: compile the JSON Schemas under schema/ into C.

Run by the build (cmake/CsGenerate.cmake), never by hand in normal work:

    /usr/bin/python3 gen/csgen.py --schema-dir schema --out build/gen   # emit C
    /usr/bin/python3 gen/csgen.py --schema-dir schema --list            # top-level type names
    /usr/bin/python3 gen/csgen.py --schema-dir schema --check           # validate only

Every schema is validated against the JSON Schema 2020-12 meta-schema, then checked against the
keyword subset this generator supports (docs/schema-keywords.md); anything outside the subset is
an error naming the file and the JSON pointer, never silently ignored. The output is
deterministic (same schemas, same bytes) and consists of:

    csw.h         structs, enums, descriptor declarations, decode/encode/free prototypes
    csw_tables.c  descriptor tables interpreted by src/base/base_wire.c (one per object or
                  union, and one per distinct shape of every other value, csw__<shape>,
                  commented with every schema pointer it serves), the wrappers, the tool
                  table, the top-level type table and the bundled schema texts

Standard library plus Debian's python3-jsonschema only.
"""

import argparse
import hashlib
import json
import os
import re
import sys

import jsonschema

GENERATOR_VERSION = 4
WIRE_ABI = 2  # must match CS_WIRE_ABI in src/base/base_wire.h
META = "https://json-schema.org/draft/2020-12/schema"

# Keywords the generator understands. Annotation-only keywords are accepted anywhere.
ANNOTATIONS = {"title", "description", "$comment", "examples", "default"}
ROOT_ONLY = {"$schema", "$id", "$defs", "x-cs-major", "x-cs-direction", "x-cs-tool"}
STRUCTURAL = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "enum", "const", "$ref", "oneOf", "$defs", "x-cs-c-name", "x-cs-enum-descriptions", "x-cs-json",
    "allOf",
}
# JSON types an x-cs-json value may be restricted to, as the runtime's CS_WIRE_JSON_* bits.
JSON_TYPE_BITS = {"object": 1, "array": 2, "string": 4, "integer": 8, "number": 8 | 16,
                  "boolean": 32, "null": 64}
TOOL_KEYS = {"name", "index", "title", "annotations"}
ANNOTATION_HINTS = {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
C_KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "bool", "true", "false",
    # macros of the C library that would break a struct member of the same name
    "errno", "assert", "stdin", "stdout", "stderr", "NULL", "offsetof", "static_assert",
    "alignas", "alignof", "complex", "imaginary", "noreturn",
}
INT64_MIN = -(2 ** 63)
INT64_MAX = 2 ** 63 - 1


class SchemaError(Exception):
    """A schema the generator refuses; the message names the file and JSON pointer."""


def ident(text):
    """A C identifier fragment from arbitrary text (lower case, [a-z0-9_])."""
    out = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()
    if not out:
        out = "x"
    if out[0].isdigit():
        out = "_" + out
    return out


def field_ident(name):
    out = ident(name)
    return out + "_" if out in C_KEYWORDS else out


def ptr_join(base, *tokens):
    for t in tokens:
        base += "/" + str(t).replace("~", "~0").replace("/", "~1")
    return base


# ---------------------------------------------------------------------------------------------
# Loading and validation


class SchemaFile:
    def __init__(self, root, rel):
        self.rel = rel
        self.path = os.path.join(root, rel)
        with open(self.path, "rb") as f:
            self.raw = f.read()
        self.sha256 = hashlib.sha256(self.raw).hexdigest()
        try:
            self.doc = json.loads(self.raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SchemaError(f"schema/{rel}: not valid JSON: {e}") from None
        if not isinstance(self.doc, dict):
            raise SchemaError(f"schema/{rel}: the root must be an object")
        self.base = re.sub(r"\.json$", "", rel)
        self.cname = ident(self.base)


def load_schemas(schema_dir):
    files = []
    for dirpath, dirnames, filenames in os.walk(schema_dir):
        dirnames.sort()
        for fn in sorted(filenames):
            if fn.endswith(".json"):
                rel = os.path.relpath(os.path.join(dirpath, fn), schema_dir)
                files.append(SchemaFile(schema_dir, rel.replace(os.sep, "/")))
    files.sort(key=lambda f: f.rel)
    if not files:
        raise SchemaError(f"{schema_dir}: no schemas found")
    return files


def check_meta(sf):
    """Validate against the 2020-12 meta-schema and our root conventions."""
    doc = sf.doc
    if doc.get("$schema") != META:
        raise SchemaError(f"schema/{sf.rel}: $schema must be \"{META}\"")
    try:
        jsonschema.Draft202012Validator.check_schema(doc)
    except jsonschema.exceptions.SchemaError as e:
        where = "/" + "/".join(str(p) for p in e.absolute_path)
        raise SchemaError(f"schema/{sf.rel}: {where}: fails the 2020-12 meta-schema: "
                          f"{e.message}") from None
    expect_id = f"https://codespace.invalid/schema/{sf.rel}"
    if doc.get("$id") != expect_id:
        raise SchemaError(f"schema/{sf.rel}: $id must be \"{expect_id}\"")
    major = doc.get("x-cs-major")
    if not isinstance(major, int) or isinstance(major, bool) or major < 1:
        raise SchemaError(f"schema/{sf.rel}: x-cs-major must be an integer >= 1")
    if doc.get("x-cs-direction") not in ("input", "output", "both"):
        raise SchemaError(f"schema/{sf.rel}: x-cs-direction must be input, output or both")
    check_keywords(sf, doc, "", root=True)


def check_keywords(sf, node, where, root=False):
    if not isinstance(node, dict):
        raise SchemaError(f"schema/{sf.rel}: {where or '/'}: boolean schemas are not supported")
    allowed = ANNOTATIONS | STRUCTURAL | (ROOT_ONLY if root else set())
    for key in sorted(node):
        if key not in allowed:
            what = "keyword only allowed at the root" if key in ROOT_ONLY else \
                "unsupported keyword"
            raise SchemaError(f"schema/{sf.rel}: {where or '/'}: {what} '{key}' "
                              f"(see docs/schema-keywords.md)")
    for key in ("properties", "$defs"):
        for name, sub in sorted(node.get(key, {}).items()):
            check_keywords(sf, sub, ptr_join(where, key, name))
    if isinstance(node.get("additionalProperties"), dict):
        check_keywords(sf, node["additionalProperties"], ptr_join(where, "additionalProperties"))
    if "items" in node:
        check_keywords(sf, node["items"], ptr_join(where, "items"))
    for i, sub in enumerate(node.get("oneOf", [])):
        check_keywords(sf, sub, ptr_join(where, "oneOf", i))
    for i, sub in enumerate(node.get("allOf", [])):
        check_keywords(sf, sub, ptr_join(where, "allOf", i))
    tool = node.get("x-cs-tool")
    if tool is not None:
        if not isinstance(tool, dict) or set(tool) - TOOL_KEYS or \
                not {"name", "index", "title", "annotations"} <= set(tool):
            raise SchemaError(f"schema/{sf.rel}: x-cs-tool needs exactly name, index, title, "
                              f"annotations")
        if set(tool["annotations"]) - ANNOTATION_HINTS:
            raise SchemaError(f"schema/{sf.rel}: x-cs-tool.annotations: unknown hint")


# ---------------------------------------------------------------------------------------------
# Model


class Node:
    """One value type. kind is string, nstring, int, bool, enum, const, object, array, map,
    union. Named aggregates (object, union, enum, map entries) carry a C name."""

    def __init__(self, kind, cname, where):
        self.kind = kind
        self.cname = cname
        self.where = where  # "schema/<file>: <pointer>" for messages
        self.desc = None  # descriptor identifier, assigned at emission
        self.min_len = self.max_len = -1
        self.min = self.max = None
        self.values = []
        self.value_desc = None
        self.const = None
        self.item = None
        self.min_items = self.max_items = -1
        self.fields = []  # object: list of Field
        self.disc = None  # union: discriminator
        self.branches = []  # union: [(tag, member ident, object Node)]
        self.public = False  # gets decode/encode/free wrappers
        self.embeds = []  # object: [(member ident, object Node)] from allOf, fields included
        self.json_types = 0  # json: CS_WIRE_JSON_* bits


class Field:
    def __init__(self, name, node, required, default):
        self.name = name
        self.cident = field_ident(name)
        self.node = node
        self.required = required
        self.default = default
        self.via = None  # the member ident of the allOf object it comes from, if any


class Builder:
    def __init__(self, files):
        self.files = {f.rel: f for f in files}
        self.memo = {}  # (rel, pointer) -> Node
        self.building = set()
        self.cnames = {}

    def claim(self, cname, where):
        if not re.fullmatch(r"[a-z][a-z0-9_]*", cname):
            raise SchemaError(f"{where}: C name '{cname}' is not a lower-case C identifier")
        if cname in self.cnames:
            raise SchemaError(f"{where}: C name csw_{cname} already used by "
                              f"{self.cnames[cname]}; set x-cs-c-name")
        self.cnames[cname] = where

    def resolve(self, sf, ref, where):
        """Return (file, pointer) a $ref names."""
        if "#" in ref:
            path, frag = ref.split("#", 1)
        else:
            path, frag = ref, ""
        target = sf
        if path:
            rel = os.path.normpath(os.path.join(os.path.dirname(sf.rel), path)).replace(os.sep,
                                                                                         "/")
            if rel not in self.files:
                raise SchemaError(f"{where}: $ref to unknown schema file '{path}'")
            target = self.files[rel]
        if frag and not re.fullmatch(r"/\$defs/[A-Za-z0-9_.-]+", frag):
            raise SchemaError(f"{where}: $ref fragment must be #/$defs/<name>, got '#{frag}'")
        return target, frag

    def node_at(self, sf, pointer):
        cur = sf.doc
        for tok in pointer.split("/")[1:]:
            tok = tok.replace("~1", "/").replace("~0", "~")
            if not isinstance(cur, dict) or tok not in cur:
                raise SchemaError(f"schema/{sf.rel}: $ref target {pointer} does not exist")
            cur = cur[tok]
        return cur

    def named(self, sf, pointer):
        """The Node for a whole file (pointer "") or one of its $defs, built once."""
        key = (sf.rel, pointer)
        if key in self.memo:
            return self.memo[key]
        if key in self.building:
            raise SchemaError(f"schema/{sf.rel}: {pointer or '/'}: recursive types are not "
                              f"supported")
        self.building.add(key)
        schema = self.node_at(sf, pointer)
        if pointer:
            cname = f"{sf.cname}_{ident(pointer.split('/')[-1])}"
        else:
            cname = sf.cname
        node = self.build(sf, schema, pointer, cname)
        node.public = node.kind in ("object", "union")
        self.building.discard(key)
        self.memo[key] = node
        return node

    def build(self, sf, s, pointer, cname, prop=False):
        """The Node for schema s. cname names it if it becomes a C aggregate (x-cs-c-name wins);
        prop says s is a property's schema (only those may carry a default)."""
        where = f"schema/{sf.rel}: {pointer or '/'}"
        if "default" in s and not prop:
            raise SchemaError(f"{where}: 'default' is only supported on object properties")
        if "x-cs-c-name" in s:
            if "$ref" in s or s.get("type") not in ("object", "string", None) or \
                    (s.get("type") == "string" and "enum" not in s) or \
                    (s.get("type") is None and "oneOf" not in s):
                raise SchemaError(f"{where}: x-cs-c-name only names an object, map, enum or "
                                  f"oneOf")
            cname = s["x-cs-c-name"]
        if "$ref" in s:
            extra = set(s) - ANNOTATIONS - {"$ref"}
            if extra:
                raise SchemaError(f"{where}: $ref with sibling keywords {sorted(extra)} is not "
                                  f"supported")
            target, frag = self.resolve(sf, s["$ref"], where)
            return self.named(target, frag)
        if "x-cs-json" in s:
            return self.build_json(s, where)
        if "oneOf" in s:
            return self.build_union(sf, s, pointer, cname, where)
        if "const" in s:
            return self.build_const(s, where)
        t = s.get("type")
        if t is None and "enum" in s:
            # An enum of strings without "type" means the same as with "type": "string"; it is
            # how a "const" widens to more values additively (docs/changing-a-schema.md: adding
            # a "type" where any type was allowed is a narrowing).
            return self.build_enum(s, cname, where)
        if t is None:
            raise SchemaError(f"{where}: a schema needs a 'type' (or $ref, oneOf, const, enum)")
        if t == ["string", "null"] or t == ["null", "string"]:
            n = Node("nstring", None, where)
            self.string_bounds(n, s, where)
            self.only(s, where, {"type", "minLength", "maxLength"})
            return n
        if not isinstance(t, str):
            raise SchemaError(f"{where}: type {t!r} is not supported (only a single type or "
                              f"[\"string\", \"null\"])")
        if t == "string" and "enum" in s:
            return self.build_enum(s, cname, where)
        if t == "string":
            n = Node("string", None, where)
            self.string_bounds(n, s, where)
            self.only(s, where, {"type", "minLength", "maxLength"})
            return n
        if t == "integer":
            return self.build_int(s, where)
        if t == "boolean":
            self.only(s, where, {"type"})
            return Node("bool", None, where)
        if t == "array":
            self.only(s, where, {"type", "items", "minItems", "maxItems"})
            if "items" not in s:
                raise SchemaError(f"{where}: arrays need 'items'")
            n = Node("array", None, where)
            n.item = self.build(sf, s["items"], ptr_join(pointer, "items"), cname + "_item")
            if n.item.kind in ("const", "array", "map"):
                raise SchemaError(f"{where}: array items may not be a const, an array or a map")
            n.min_items = s.get("minItems", -1)
            n.max_items = s.get("maxItems", -1)
            return n
        if t == "object":
            return self.build_object(sf, s, pointer, cname, where)
        raise SchemaError(f"{where}: type '{t}' is not supported")

    @staticmethod
    def only(s, where, allowed):
        extra = set(s) - ANNOTATIONS - {"x-cs-c-name"} - ROOT_ONLY - allowed
        if extra:
            raise SchemaError(f"{where}: keyword(s) {sorted(extra)} not supported with this type")

    @staticmethod
    def string_bounds(n, s, where):
        n.min_len = s.get("minLength", -1)
        n.max_len = s.get("maxLength", -1)

    def build_int(self, s, where):
        self.only(s, where, {"type", "minimum", "maximum", "exclusiveMinimum",
                             "exclusiveMaximum"})
        n = Node("int", None, where)
        lo = [INT64_MIN]
        hi = [INT64_MAX]
        for key, sink, adj in (("minimum", lo, 0), ("exclusiveMinimum", lo, 1),
                               ("maximum", hi, 0), ("exclusiveMaximum", hi, -1)):
            if key in s:
                v = s[key]
                if not isinstance(v, int) or isinstance(v, bool):
                    raise SchemaError(f"{where}: {key} must be an integer")
                sink.append(v + adj)
        n.min = max(lo) if len(lo) > 1 else None
        n.max = min(hi) if len(hi) > 1 else None
        for b in (n.min, n.max):
            if b is not None and not INT64_MIN <= b <= INT64_MAX:
                raise SchemaError(f"{where}: integer bound outside int64")
        return n

    def build_json(self, s, where):
        """A value kept as a jansson value (json_t *): a shape the protocol leaves open (a
        JSON-RPC result before its method is known, error data, a JSON Schema). Only its JSON
        type is checked, against `type` (absent: any; a name or a list of names)."""
        self.only(s, where, {"type", "x-cs-json"})
        if s["x-cs-json"] is not True:
            raise SchemaError(f"{where}: x-cs-json must be true")
        t = s.get("type", list(JSON_TYPE_BITS))
        names = [t] if isinstance(t, str) else t
        if not names or not all(isinstance(x, str) and x in JSON_TYPE_BITS for x in names):
            raise SchemaError(f"{where}: x-cs-json type must name JSON types")
        n = Node("json", None, where)
        n.json_types = 0
        for x in names:
            n.json_types |= JSON_TYPE_BITS[x]
        return n

    def build_enum(self, s, cname, where):
        self.only(s, where, {"type", "enum", "x-cs-enum-descriptions"})
        vals = s["enum"]
        if not vals or not all(isinstance(v, str) for v in vals):
            raise SchemaError(f"{where}: enum values must be strings")
        if len(set(vals)) != len(vals):
            raise SchemaError(f"{where}: duplicate enum values")
        n = Node("enum", cname, where)
        self.claim(n.cname, where)
        n.values = vals
        consts = [ident(v).upper() for v in vals]
        if len(set(consts)) != len(consts):
            raise SchemaError(f"{where}: enum values collide as C names")
        d = s.get("x-cs-enum-descriptions")
        if d is not None:
            if not isinstance(d, list) or len(d) != len(vals) or \
                    not all(isinstance(x, str) for x in d):
                raise SchemaError(f"{where}: x-cs-enum-descriptions must be one string per "
                                  f"enum value")
            n.value_desc = d
        return n

    def build_const(self, s, where):
        self.only(s, where, {"const", "type"})
        v = s["const"]
        n = Node("const", None, where)
        if isinstance(v, bool):
            n.const = ("bool", v)
            want = "boolean"
        elif isinstance(v, int):
            n.const = ("int", v)
            want = "integer"
        elif isinstance(v, str):
            n.const = ("string", v)
            want = "string"
        else:
            raise SchemaError(f"{where}: const must be a string, integer or boolean")
        if "type" in s and s["type"] != want:
            raise SchemaError(f"{where}: const does not match its type")
        return n

    def build_object(self, sf, s, pointer, cname, where):
        self.only(s, where, {"type", "properties", "required", "additionalProperties", "allOf"})
        props = s.get("properties")
        ap = s.get("additionalProperties", True)
        if isinstance(ap, dict):
            if props or s.get("required") or "allOf" in s:
                raise SchemaError(f"{where}: an object is either a struct (properties) or a map "
                                  f"(additionalProperties schema), not both")
            n = Node("map", cname, where)
            self.claim(n.cname + "_entry", where)
            n.item = self.build(sf, ap, ptr_join(pointer, "additionalProperties"),
                                cname + "_value")
            if n.item.kind in ("const", "array", "map"):
                raise SchemaError(f"{where}: map values may not be a const, an array or a map")
            return n
        if ap is not True:
            raise SchemaError(f"{where}: additionalProperties must be absent, true or a schema "
                              f"(unknown properties are always ignored on input)")
        props = props or {}
        required = s.get("required", [])
        for r in required:
            if r not in props:
                raise SchemaError(f"{where}: required property '{r}' is not in properties")
        n = Node("object", cname, where)
        self.claim(cname, where)
        seen = set()
        for name in props:  # schema order is the struct order
            if "\0" in name:
                raise SchemaError(f"{where}: property names may not contain NUL")
            sub = props[name]
            f = Field(name, self.build(sf, sub, ptr_join(pointer, "properties", name),
                                       f"{cname}_{ident(name)}", prop=True), name in required,
                      sub.get("default"))
            if f.node.kind == "const" and not f.required:
                raise SchemaError(f"{where}: const property '{name}' must be required")
            if f.cident in seen or f.cident.startswith("has_"):
                raise SchemaError(f"{where}: property '{name}' collides as a C name")
            seen.add(f.cident)
            if f.default is not None:
                self.check_default(f, where)
            n.fields.append(f)
        self.build_embeds(sf, s, pointer, n, seen, where)
        return n

    def build_embeds(self, sf, s, pointer, n, seen, where):
        """allOf: [{"$ref": <object>}, ...] on an object: the referenced objects' properties join
        this one's (after its own, in order), and the C struct holds each referenced struct as a
        member named after its definition, overlaid by its fields, so `v.path` and `v.args` are
        both valid. Lets one shape (the MCP read input's arguments) be part of another (the
        runner's read request) on the same JSON level, copied in C as one struct."""
        subs = s.get("allOf", [])
        if not isinstance(subs, list):
            raise SchemaError(f"{where}: allOf must be a list")
        for i, sub in enumerate(subs):
            at = f"schema/{sf.rel}: {ptr_join(pointer, 'allOf', i)}"
            if set(sub) - ANNOTATIONS != {"$ref"}:
                raise SchemaError(f"{at}: an allOf entry must be a $ref alone")
            target, frag = self.resolve(sf, sub["$ref"], at)
            e = self.named(target, frag)
            if e.kind != "object" or e.embeds:
                raise SchemaError(f"{at}: allOf must name an object without allOf of its own")
            member = ident(frag.split("/")[-1] if frag else target.base.split("/")[-1])
            member = member + "_" if member in C_KEYWORDS else member
            if member in seen or member.startswith("has_"):
                raise SchemaError(f"{at}: member '{member}' collides as a C name")
            seen.add(member)
            for ef in e.fields:
                if ef.cident in seen:
                    raise SchemaError(f"{at}: property '{ef.name}' is defined twice")
                seen.add(ef.cident)
                f = Field(ef.name, ef.node, ef.required, ef.default)
                f.via = member
                n.fields.append(f)
            n.embeds.append((member, e))

    @staticmethod
    def check_default(f, where):
        if f.required:
            raise SchemaError(f"{where}: required property '{f.name}' has a default")
        k = f.node.kind
        ok = (k == "int" and isinstance(f.default, int) and not isinstance(f.default, bool)) or \
             (k == "bool" and isinstance(f.default, bool)) or \
             (k in ("string", "enum") and isinstance(f.default, str))
        if not ok:
            raise SchemaError(f"{where}: default of '{f.name}' must be a scalar of its type")
        n = f.node
        bad = (k == "enum" and f.default not in n.values) or \
              (k == "int" and ((n.min is not None and f.default < n.min) or
                               (n.max is not None and f.default > n.max))) or \
              (k == "string" and ((n.min_len >= 0 and len(f.default) < n.min_len) or
                                  (n.max_len >= 0 and len(f.default) > n.max_len)))
        if bad:
            raise SchemaError(f"{where}: default of '{f.name}' is invalid for its schema")

    def build_union(self, sf, s, pointer, cname, where):
        self.only(s, where, {"oneOf"})
        n = Node("union", cname, where)
        self.claim(n.cname, where)
        self.claim(n.cname + "_tag", where)
        built = []  # per branch: {property: const value} of its required string consts
        nodes = []
        for i, sub in enumerate(s["oneOf"]):
            bname = f"{cname}_{i}"
            peek = [p.get("const") for k, p in sub.get("properties", {}).items()
                    if k in sub.get("required", []) and isinstance(p.get("const"), str)]
            if "$ref" not in sub and peek:
                bname = f"{cname}_{ident(peek[0])}"
            b = self.build(sf, sub, ptr_join(pointer, "oneOf", i), bname)
            if b.kind != "object":
                raise SchemaError(f"{where}: oneOf branch {i} must be an object")
            nodes.append(b)
            built.append({f.name: f.node.const[1] for f in b.fields
                          if f.node.kind == "const" and f.node.const[0] == "string"
                          and f.required})
            if not built[-1]:
                raise SchemaError(f"{where}: oneOf branch {i} has no required string const "
                                  f"to discriminate on")
        # The discriminator: the first property (in branch 0's order) that every branch
        # holds as a required string const, with a different value in each branch.
        common = [k for k in built[0] if all(k in b for b in built)]
        if not common:
            raise SchemaError(f"{where}: no required string const property is common to every "
                              f"oneOf branch")
        distinct = [k for k in common if len({b[k] for b in built}) == len(built)]
        if not distinct:
            raise SchemaError(f"{where}: two oneOf branches share {common[0]}="
                              f"'{built[0][common[0]]}'")
        disc = distinct[0]
        for i, b in enumerate(nodes):
            tag = built[i][disc]
            n.branches.append((tag, field_ident(tag), b))
        if len({m for _, m, _ in n.branches}) != len(n.branches):
            raise SchemaError(f"{where}: oneOf tags collide as C names")
        n.disc = disc
        return n


# ---------------------------------------------------------------------------------------------
# Bundling (self-contained schema text for tools/list and the tables)


def bundle(builder, sf, s, stack=()):
    """Inline every $ref and drop generator-only keywords, so a client that cannot resolve our
    $id still sees the whole schema."""
    if isinstance(s, list):
        return [bundle(builder, sf, x, stack) for x in s]
    if not isinstance(s, dict):
        return s
    if "$ref" in s:
        target, frag = builder.resolve(sf, s["$ref"], f"schema/{sf.rel}")
        key = (target.rel, frag)
        if key in stack:
            raise SchemaError(f"schema/{sf.rel}: recursive $ref")
        out = bundle(builder, target, builder.node_at(target, frag), stack + (key,))
        out.pop("$schema", None)  # only the root of a bundled document names its dialect
        for k in ("title", "description", "default", "examples"):
            if k in s:
                out[k] = s[k]
        return out
    out = {}
    for k, v in s.items():
        if k.startswith("x-cs-") or k in ("$id", "$defs", "$comment", "allOf"):
            continue
        if k in ("properties", "$defs"):
            out[k] = {name: bundle(builder, sf, sub, stack) for name, sub in v.items()}
        elif k in ("items", "additionalProperties") and isinstance(v, dict):
            out[k] = bundle(builder, sf, v, stack)
        elif k == "oneOf":
            out[k] = [bundle(builder, sf, x, stack) for x in v]
        else:
            out[k] = v
    # allOf (a $ref to an object, see build_embeds) is written out flat: its properties and
    # required names join this object's, so a client sees one plain object.
    for sub in s.get("allOf", []):
        e = bundle(builder, sf, sub, stack)
        out.setdefault("properties", {}).update(e.get("properties", {}))
        req = e.get("required", [])
        if req:
            out["required"] = out.get("required", []) + [r for r in req
                                                         if r not in out.get("required", [])]
    return out


# ---------------------------------------------------------------------------------------------
# Emission


def c_string(s):
    """A C string literal for any text: printable ASCII as is (with \\, \" and \? escaped, so
    no trigraph can form), every other byte of the UTF-8 encoding as a 3-digit octal escape."""
    data = s.encode("utf-8")
    if len(data) > 4000:
        raise SchemaError(f"string too long for a C literal ({len(data)} bytes): {s[:40]}...")
    out = []
    for b in data:
        if b in (0x5C, 0x22, 0x3F):
            out.append("\\" + chr(b))
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def c_bytes(name, text):
    """A char array holding text and a NUL, avoiding overlong string literals. text must be
    ASCII (bundled schemas are dumped with ensure_ascii), so every byte fits a char."""
    if not text.isascii():
        raise SchemaError(f"internal: {name} is not ASCII")
    data = text.encode("utf-8") + b"\0"
    lines = []
    for i in range(0, len(data), 20):
        lines.append("    " + ", ".join(f"0x{b:02x}" for b in data[i:i + 20]) + ",")
    return f"static const char {name}[] = {{\n" + "\n".join(lines) + "\n};\n"


class Emitter:
    def __init__(self, files, builder, tops):
        self.files = files
        self.b = builder
        self.tops = tops  # [(SchemaFile, Node)]
        self.order = []  # nodes in post-order
        self.seen = set()
        self.by_text = {}  # descriptor text (name left out) -> the node that emits it
        self.serves = {}  # descriptor name -> ["schema/<file>: <pointer>", ...] it serves
        for _, node in tops:
            self.visit(node)
        for node in list(self.b.memo.values()):
            self.visit(node)
        self.check_enumerators()

    def check_enumerators(self):
        """Enumerators share one C namespace: refuse two that print the same."""
        seen = self.macro_names = {}  # the constants() macros join the same namespace
        for n in self.order:
            names = []
            if n.kind == "enum":
                names = [f"CSW_{n.cname.upper()}_{ident(v).upper()}" for v in n.values]
                names.append(f"CSW_{n.cname.upper()}__COUNT")
            elif n.kind == "union":
                names = [f"CSW_{n.cname.upper()}_{m.upper().rstrip('_')}" for _, m, _ in
                         n.branches]
            for name in names:
                if name in seen:
                    raise SchemaError(f"{n.where}: C enumerator {name} also comes from "
                                      f"{seen[name]}; set x-cs-c-name")
                seen[name] = n.where

    def visit(self, n):
        if id(n) in self.seen:
            return
        self.seen.add(id(n))
        if n.item is not None:
            self.visit(n.item)
        for f in n.fields:
            self.visit(f.node)
        for _, e in n.embeds:
            self.visit(e)
        for _, _, b in n.branches:
            self.visit(b)
        n.dup = False
        n.shared = not (n.public or n.kind in ("object", "union"))
        if not n.shared:
            n.desc = f"csw_{n.cname}_type"
        else:
            # One descriptor per distinct shape: nodes whose descriptor would read the same
            # share the first one, named after what it checks.
            n.desc = "@"
            key = self.descriptor(n)
            first = self.by_text.get(key)
            if first is not None:
                n.desc = first.desc
                n.dup = True
            else:
                n.desc = self.shape_name(n)
                if n.desc in self.serves:
                    raise SchemaError(f"{n.where}: internal: descriptor name {n.desc} is taken")
                self.by_text[key] = n
        self.serves.setdefault(n.desc, []).append(n.where)
        self.order.append(n)

    @staticmethod
    def bound(v):
        return f"m{-v}" if v < 0 else str(v)

    def shape_name(self, n):
        """csw__<what it checks>: a name that says the shape (the descriptor is static)."""
        k = n.kind
        bounds = ""
        if k in ("string", "nstring"):
            if n.min_len >= 0:
                bounds += f"_min{n.min_len}"
            if n.max_len >= 0:
                bounds += f"_max{n.max_len}"
            return f"csw__{k}{bounds}"
        if k == "int":
            if n.min is not None:
                bounds += f"_min{self.bound(n.min)}"
            if n.max is not None:
                bounds += f"_max{self.bound(n.max)}"
            return f"csw__int{bounds}"
        if k == "bool":
            return "csw__bool"
        if k == "enum":
            return f"csw__enum_{n.cname}"
        if k == "const":
            ck, cv = n.const
            if ck == "string":
                return f"csw__const_{ident(cv).lstrip('_')}"
            if ck == "int":
                return f"csw__const_int_{self.bound(cv)}"
            return f"csw__const_{'true' if cv else 'false'}"
        if k == "json":
            t = n.json_types
            names = [x for x, bit in JSON_TYPE_BITS.items() if t & bit == bit and
                     not (x == "integer" and t & JSON_TYPE_BITS["number"] ==
                          JSON_TYPE_BITS["number"])]
            if t == 127:  # every JSON type
                names = ["any"]
            return "csw__json_" + "_".join(names)
        if k == "array":
            if n.min_items >= 0:
                bounds += f"_min{n.min_items}"
            if n.max_items >= 0:
                bounds += f"_max{n.max_items}"
            item = re.sub(r"^csw__?|_type$", "", n.item.desc)
            return f"csw__array{bounds}_of_{item}"
        if k == "map":
            return f"csw__map_{n.cname}"
        raise AssertionError(k)

    # -- C types --

    def ctype(self, n):
        k = n.kind
        if k in ("string", "nstring"):
            return "struct cs_str"
        if k == "int":
            return "int64_t"
        if k == "bool":
            return "bool"
        if k == "enum":
            return f"enum csw_{n.cname}"
        if k in ("object", "union"):
            return f"struct csw_{n.cname}"
        if k == "json":
            return "json_t *"
        if k == "array":
            return None  # declared inline as { item *v; size_t n; }
        if k == "map":
            return None
        raise AssertionError(k)

    def member(self, n, name):
        if n.kind == "const":
            return None
        if n.kind == "array":
            inner = self.ctype(n.item)
            if inner is None:
                raise SchemaError(f"{n.where}: arrays of arrays or maps are not supported")
            return f"struct {{\n        {inner} *v;\n        size_t n;\n    }} {name};"
        if n.kind == "map":
            return (f"struct {{\n        struct csw_{n.cname}_entry *v;\n        size_t n;\n"
                    f"    }} {name};")
        if n.kind == "json":
            return f"json_t *{name}; /* a reference, released by _free */"
        return f"{self.ctype(n)} {name};"

    def struct_body(self, n):
        """The member lines of object n's own properties (not those it gets from allOf)."""
        lines = []
        for f in n.fields:
            m = self.member(f.node, f.cident) if f.via is None else None
            if m is None:
                continue
            if not f.required:
                lines.append(f"bool has_{f.cident};")
            lines.extend(m.replace("\n    ", "\n").split("\n"))
        return lines

    def header(self):
        out = []
        w = out.append
        w(self.banner())
        w("#ifndef CSW_H\n#define CSW_H\n")
        w("#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n")
        w('#include "base_wire.h"\n')
        w(f"#if !defined(CS_WIRE_ABI) || CS_WIRE_ABI != {WIRE_ABI}")
        w(f'#error "csw.h was generated for base_wire ABI {WIRE_ABI}: rebuild so gen/csgen.py '
          f'regenerates it, or update the generator"')
        w("#endif\n")
        w(f"#define CSW_GENERATOR_VERSION {GENERATOR_VERSION}\n")
        for n in self.order:
            if n.kind == "enum":
                w(f"/* {n.where} */")
                w(f"enum csw_{n.cname} {{")
                for v in n.values:
                    w(f"    CSW_{n.cname.upper()}_{ident(v).upper()},")
                w("};")
                w(f"#define CSW_{n.cname.upper()}__COUNT {len(n.values)}")
                w(f"extern const char *const csw_{n.cname}_names[{len(n.values)}];")
                if n.value_desc:
                    w(f"extern const char *const csw_{n.cname}_messages[{len(n.values)}];")
                w(f"/* Returns the value named s (n bytes), or -1. */")
                w(f"int csw_{n.cname}_from_name(const char *s, size_t n);\n")
        w(self.constants())
        for n in self.order:
            if n.kind == "map":
                vt = self.member(n.item, "value")
                w(f"struct csw_{n.cname}_entry {{\n    struct cs_str key;\n    {vt}\n}};\n")
            elif n.kind == "object":
                w(f"/* {n.where} */")
                w(f"struct csw_{n.cname} {{")
                lines = self.struct_body(n)
                for member, e in n.embeds:
                    lines += [f"union {{ /* {e.where}: its properties are this object's too */",
                              f"    struct csw_{e.cname} {member};", "    struct {"]
                    lines += [f"        {x}" for x in self.struct_body(e)]
                    lines += ["    };", "};"]
                if not lines:
                    lines = ["char unused_; /* every property is a constant */"]
                w("\n".join(f"    {x}" for x in lines))
                w("};\n")
            elif n.kind == "union":
                w(f"/* {n.where}: discriminated by \"{n.disc}\" */")
                w(f"enum csw_{n.cname}_tag {{")
                for tag, m, _ in n.branches:
                    w(f"    CSW_{n.cname.upper()}_{m.upper().rstrip('_')},")
                w("};")
                w(f"struct csw_{n.cname} {{\n    enum csw_{n.cname}_tag tag;\n    union {{")
                for tag, m, b in n.branches:
                    w(f"        struct csw_{b.cname} {m};")
                w("    } u;\n};\n")
        for n in self.order:
            if not n.shared:
                w(f"extern const struct cs_wire_type {n.desc};")
        w("")
        for n in self.order:
            if n.public:
                t = f"struct csw_{n.cname}"
                w(f"/* {n.where}\n * decode: fills *out (release with _free) or returns an error "
                  f"with *out zeroed;\n * encode: checks *v against the schema, sets *out to a new "
                  f"reference or NULL on error;\n * encode_text: the same, straight to JSON text "
                  f"(release with cs_wire_release). */")
                w(f"enum cs_wire_status csw_{n.cname}_decode(const json_t *j, {t} *out,\n"
                  f"                                         struct cs_wire_diag *diag);")
                w(f"enum cs_wire_status csw_{n.cname}_encode(const {t} *v, json_t **out,\n"
                  f"                                         struct cs_wire_diag *diag);")
                w(f"enum cs_wire_status csw_{n.cname}_encode_text(const {t} *v, char **out, "
                  f"size_t *out_n,\n"
                  f"                                              struct cs_wire_diag *diag);")
                w(f"void csw_{n.cname}_free({t} *v);\n")
        w("/* One entry per schema file, sorted by name. */")
        w("struct csw_toplevel {\n    const char *name;        /* e.g. \"mcp_read_input\" */\n"
          "    const char *schema_path; /* relative to schema/ */\n"
          "    const char *sha256;      /* of the schema file */\n"
          "    const char *direction;   /* input, output or both */\n"
          "    const struct cs_wire_type *type;\n"
          "    const char *schema_json; /* bundled: refs inlined, x-cs-* removed */\n};")
        w("extern const struct csw_toplevel csw_toplevel[];")
        w("extern const size_t csw_toplevel_count;")
        w("/* Returns the entry named name, or NULL. */")
        w("const struct csw_toplevel *csw_toplevel_find(const char *name);\n")
        w("/* The MCP tools, in the order of contract.md section 3. */")
        w("struct csw_tool {\n    const char *name;\n    const char *title;\n"
          "    const char *description;\n    const char *annotations_json;\n"
          "    const char *input_schema_json;  /* bundled */\n"
          "    const char *output_schema_json; /* bundled */\n"
          "    const struct cs_wire_type *input;\n    const struct cs_wire_type *output;\n};")
        w("extern const struct csw_tool csw_tools[];")
        w("extern const size_t csw_tool_count;\n")
        w("#endif")
        return "\n".join(out) + "\n"

    def constants(self):
        """The caps and defaults of every object property, as macros C code uses instead of
        repeating the schema's numbers: CSW_<TYPE>_<PROP>_DEFAULT, _MIN, _MAX (integers, bounds
        with exclusive ones folded in), _MIN_LEN, _MAX_LEN (strings, in code points),
        _MIN_ITEMS, _MAX_ITEMS (arrays). <TYPE> is the object's C name (csw_<type>)."""
        out = []
        for n in self.order:
            if n.kind != "object":
                continue
            rows = []
            for f in n.fields:
                base = f"CSW_{n.cname.upper()}_{f.cident.upper().rstrip('_')}"
                fn = f.node
                if f.default is not None:
                    if fn.kind == "int":
                        v = self.c_const(f.default)
                    elif fn.kind == "bool":
                        v = "true" if f.default else "false"
                    elif fn.kind == "enum":
                        v = f"CSW_{fn.cname.upper()}_{ident(f.default).upper()}"
                    else:
                        v = c_string(f.default)
                    rows.append((base + "_DEFAULT", v))
                if fn.kind == "int":
                    if fn.min is not None:
                        rows.append((base + "_MIN", self.c_const(fn.min)))
                    if fn.max is not None:
                        rows.append((base + "_MAX", self.c_const(fn.max)))
                if fn.kind in ("string", "nstring"):
                    if fn.min_len >= 0:
                        rows.append((base + "_MIN_LEN", str(fn.min_len)))
                    if fn.max_len >= 0:
                        rows.append((base + "_MAX_LEN", str(fn.max_len)))
                if fn.kind == "array":
                    if fn.min_items >= 0:
                        rows.append((base + "_MIN_ITEMS", str(fn.min_items)))
                    if fn.max_items >= 0:
                        rows.append((base + "_MAX_ITEMS", str(fn.max_items)))
            if not rows:
                continue
            out.append(f"/* caps and defaults of {n.where} */")
            for name, v in rows:
                if name in self.macro_names:
                    raise SchemaError(f"{n.where}: C macro {name} also comes from "
                                      f"{self.macro_names[name]}; set x-cs-c-name")
                self.macro_names[name] = n.where
                out.append(f"#define {name} {v}")
            out.append("")
        return "\n".join(out)

    @staticmethod
    def c_const(v):
        """An integer constant usable in #if and array sizes; int64 range."""
        if v == INT64_MIN:
            return "INT64_MIN"
        if -2 ** 31 < v < 2 ** 31:
            return str(v)
        return f"INT64_C({v})"

    def banner(self):
        lines = ["/*", " * Generated by gen/csgen.py from the schemas below -- do not edit.",
                 f" * Generator version {GENERATOR_VERSION}, base_wire ABI {WIRE_ABI}.", " *"]
        for f in self.files:
            lines.append(f" *   schema/{f.rel} sha256 {f.sha256}")
        lines.append(" */")
        return "\n".join(lines) + "\n"

    # -- tables --

    def c_int(self, v):
        if v == INT64_MIN:
            return "INT64_MIN"
        return f"INT64_C({v})"

    def tables(self):
        out = []
        w = out.append
        w(self.banner())
        w('#include "csw.h"\n\n#include <string.h>\n')
        for n in self.order:
            if n.kind == "enum":
                names = ", ".join(c_string(v) for v in n.values)
                w(f"const char *const csw_{n.cname}_names[{len(n.values)}] = {{{names}}};")
                if n.value_desc:
                    w(f"const char *const csw_{n.cname}_messages[{len(n.values)}] = {{")
                    for d in n.value_desc:
                        w(f"    {c_string(d)},")
                    w("};")
                w(f"int csw_{n.cname}_from_name(const char *s, size_t n)\n{{\n"
                  f"    for (size_t i = 0; i < {len(n.values)}; i++)\n"
                  f"        if (strlen(csw_{n.cname}_names[i]) == n && "
                  f"memcmp(csw_{n.cname}_names[i], s, n) == 0)\n"
                  f"            return (int)i;\n    return -1;\n}}")
                w(f"_Static_assert(sizeof(enum csw_{n.cname}) == sizeof(int), "
                  f"\"enum storage is int\");\n")
        for n in self.order:
            if n.dup:
                continue
            serves = self.serves[n.desc]
            w(f"/* {n.desc} serves\n" + "".join(f" *   {x}\n" for x in serves) + " */")
            w(self.descriptor(n))
        for n in self.order:
            if n.public:
                t = f"struct csw_{n.cname}"
                w(f"enum cs_wire_status csw_{n.cname}_decode(const json_t *j, {t} *out,\n"
                  f"                                         struct cs_wire_diag *diag)\n{{\n"
                  f"    return cs_wire_decode(&{n.desc}, j, out, diag);\n}}\n"
                  f"enum cs_wire_status csw_{n.cname}_encode(const {t} *v, json_t **out,\n"
                  f"                                         struct cs_wire_diag *diag)\n{{\n"
                  f"    return cs_wire_encode(&{n.desc}, v, out, diag);\n}}\n"
                  f"enum cs_wire_status csw_{n.cname}_encode_text(const {t} *v, char **out, "
                  f"size_t *out_n,\n"
                  f"                                              struct cs_wire_diag *diag)\n"
                  f"{{\n    return cs_wire_encode_text(&{n.desc}, v, out, out_n, diag);\n}}\n"
                  f"void csw_{n.cname}_free({t} *v)\n{{\n"
                  f"    cs_wire_free(&{n.desc}, v);\n}}\n")
        w(self.toplevel_table())
        w(self.tool_table())
        return "\n".join(out)

    def descriptor(self, n):
        out = []
        w = out.append
        static = "static " if n.shared else ""
        head = f"{static}const struct cs_wire_type {n.desc} = {{\n"
        k = n.kind
        if k in ("string", "nstring"):
            kind = "CS_WIRE_STRING" if k == "string" else "CS_WIRE_NSTRING"
            w(head + f"    .kind = {kind},\n    .name = \"{k}\",\n"
                     f"    .size = sizeof(struct cs_str),\n    .min_len = {n.min_len},\n"
                     f"    .max_len = {n.max_len},\n    .min_items = -1,\n    .max_items = -1,\n}};")
        elif k == "int":
            w(head + "    .kind = CS_WIRE_INT,\n    .name = \"integer\",\n"
                     "    .size = sizeof(int64_t),\n    .min_len = -1,\n    .max_len = -1,\n"
                     f"    .has_min = {'true' if n.min is not None else 'false'},\n"
                     f"    .min = {self.c_int(n.min if n.min is not None else 0)},\n"
                     f"    .has_max = {'true' if n.max is not None else 'false'},\n"
                     f"    .max = {self.c_int(n.max if n.max is not None else 0)},\n"
                     "    .min_items = -1,\n    .max_items = -1,\n};")
        elif k == "bool":
            w(head + "    .kind = CS_WIRE_BOOL,\n    .name = \"boolean\",\n"
                     "    .size = sizeof(bool),\n    .min_len = -1,\n    .max_len = -1,\n"
                     "    .min_items = -1,\n    .max_items = -1,\n};")
        elif k == "enum":
            w(head + f"    .kind = CS_WIRE_ENUM,\n    .name = \"enum csw_{n.cname}\",\n"
                     f"    .size = sizeof(enum csw_{n.cname}),\n    .min_len = -1,\n"
                     f"    .max_len = -1,\n    .enum_names = csw_{n.cname}_names,\n"
                     f"    .nenum = {len(n.values)},\n    .min_items = -1,\n"
                     f"    .max_items = -1,\n}};")
        elif k == "const":
            ck, cv = n.const
            if ck == "string":
                val = f"    .const_kind = CS_WIRE_CONST_STRING,\n    .const_str = {c_string(cv)},\n"
            elif ck == "int":
                val = f"    .const_kind = CS_WIRE_CONST_INT,\n    .const_int = {self.c_int(cv)},\n"
            else:
                val = f"    .const_kind = CS_WIRE_CONST_BOOL,\n    .const_int = {1 if cv else 0},\n"
            w(head + "    .kind = CS_WIRE_CONST,\n    .name = \"const\",\n    .size = 0,\n"
                     "    .min_len = -1,\n    .max_len = -1,\n" + val +
              "    .min_items = -1,\n    .max_items = -1,\n};")
        elif k == "json":
            w(head + "    .kind = CS_WIRE_JSON,\n    .name = \"json\",\n"
                     "    .size = sizeof(json_t *),\n    .min_len = -1,\n    .max_len = -1,\n"
                     f"    .json_types = {n.json_types},\n"
                     "    .min_items = -1,\n    .max_items = -1,\n};")
        elif k == "array":
            w(head + "    .kind = CS_WIRE_ARRAY,\n    .name = \"array\",\n"
                     "    .size = sizeof(struct cs_wire_array),\n    .min_len = -1,\n"
                     f"    .max_len = -1,\n    .item = &{n.item.desc},\n"
                     f"    .min_items = {n.min_items},\n    .max_items = {n.max_items},\n}};")
        elif k == "map":
            e = f"struct csw_{n.cname}_entry"
            w(f"_Static_assert(offsetof({e}, key) == 0, \"map entries start with the key\");")
            w(head + "    .kind = CS_WIRE_MAP,\n    .name = \"map\",\n"
                     "    .size = sizeof(struct cs_wire_array),\n    .min_len = -1,\n"
                     f"    .max_len = -1,\n    .item = &{n.item.desc},\n    .min_items = -1,\n"
                     f"    .max_items = -1,\n    .entry_size = sizeof({e}),\n"
                     f"    .value_offset = offsetof({e}, value),\n}};")
        elif k == "object":
            t = f"struct csw_{n.cname}"
            for member, e in n.embeds:
                w(f"_Static_assert(sizeof((({t} *)0)->{member}) == sizeof(struct csw_{e.cname}), "
                  f"\"allOf overlay\");")
                for f in n.fields:
                    if f.via != member or f.node.kind == "const":
                        continue
                    names = [f.cident] + ([] if f.required else [f"has_{f.cident}"])
                    for x in names:
                        w(f"_Static_assert(offsetof({t}, {x}) == offsetof({t}, {member}) + "
                          f"offsetof(struct csw_{e.cname}, {x}), \"allOf overlay\");")
            fields = []
            for f in n.fields:
                if f.node.kind == "array" or f.node.kind == "map":
                    w(f"_Static_assert(sizeof((({t} *)0)->{f.cident}) == "
                      f"sizeof(struct cs_wire_array), \"list layout\");")
                off = "0" if f.node.kind == "const" else f"offsetof({t}, {f.cident})"
                has = "CS_WIRE_NO_HAS" if f.required else f"offsetof({t}, has_{f.cident})"
                d = ""
                if f.default is not None:
                    d = "\n        .has_default = true,"
                    if f.node.kind == "int":
                        d += f"\n        .def_int = {self.c_int(f.default)},"
                    elif f.node.kind == "bool":
                        d += f"\n        .def_int = {1 if f.default else 0},"
                    elif f.node.kind == "enum":
                        d += f"\n        .def_int = {f.node.values.index(f.default)},"
                    else:
                        d += f"\n        .def_str = {c_string(f.default)},"
                fields.append(f"    {{\n        .name = {c_string(f.name)},\n"
                              f"        .offset = {off},\n        .has_offset = {has},\n"
                              f"        .type = &{f.node.desc},\n"
                              f"        .required = {'true' if f.required else 'false'},{d}\n"
                              f"    }},")
            if fields:
                w(f"static const struct cs_wire_field {n.desc}_fields[] = {{\n" +
                  "\n".join(fields) + "\n};")
                w(f"static const struct cs_wire_object {n.desc}_obj = {{{n.desc}_fields, "
                  f"{len(fields)}}};")
            else:
                w(f"static const struct cs_wire_object {n.desc}_obj = {{NULL, 0}};")
            w(head + f"    .kind = CS_WIRE_OBJECT,\n    .name = \"{t}\",\n"
                     f"    .size = sizeof({t}),\n    .min_len = -1,\n    .max_len = -1,\n"
                     f"    .min_items = -1,\n    .max_items = -1,\n    .obj = &{n.desc}_obj,\n}};")
        elif k == "union":
            t = f"struct csw_{n.cname}"
            w(f"_Static_assert(offsetof({t}, tag) == 0, \"union tag first\");")
            w(f"_Static_assert(sizeof(enum csw_{n.cname}_tag) == sizeof(int), \"tag is int\");")
            br = ",\n".join(f"    {{{c_string(tag)}, &{b.desc}}}" for tag, _, b in n.branches)
            w(f"static const struct cs_wire_branch {n.desc}_branches[] = {{\n{br},\n}};")
            w(head + f"    .kind = CS_WIRE_UNION,\n    .name = \"{t}\",\n"
                     f"    .size = sizeof({t}),\n    .min_len = -1,\n    .max_len = -1,\n"
                     f"    .min_items = -1,\n    .max_items = -1,\n"
                     f"    .discriminator = {c_string(n.disc)},\n"
                     f"    .branches = {n.desc}_branches,\n    .nbranches = {len(n.branches)},\n"
                     f"    .union_offset = offsetof({t}, u),\n}};")
        return "\n".join(out) + "\n"

    def toplevel_table(self):
        out = []
        rows = []
        for sf, node in sorted(self.tops, key=lambda x: x[0].cname):
            text = json.dumps(bundle(self.b, sf, sf.doc), sort_keys=False, ensure_ascii=True,
                              separators=(",", ":"))
            out.append(c_bytes(f"schema_{sf.cname}", text))
            rows.append(f"    {{\"{sf.cname}\", \"{sf.rel}\", \"{sf.sha256}\", "
                        f"\"{sf.doc['x-cs-direction']}\", &{node.desc}, schema_{sf.cname}}},")
        out.append("const struct csw_toplevel csw_toplevel[] = {\n" + "\n".join(rows) + "\n};")
        out.append(f"const size_t csw_toplevel_count = {len(rows)};\n")
        out.append("const struct csw_toplevel *csw_toplevel_find(const char *name)\n{\n"
                   "    for (size_t i = 0; i < csw_toplevel_count; i++)\n"
                   "        if (strcmp(csw_toplevel[i].name, name) == 0)\n"
                   "            return &csw_toplevel[i];\n    return NULL;\n}\n")
        return "\n".join(out)

    def tool_table(self):
        tools = []
        by_rel = {sf.rel: (sf, node) for sf, node in self.tops}
        for sf, node in self.tops:
            tool = sf.doc.get("x-cs-tool")
            if not tool:
                continue
            if not sf.rel.endswith(".input.json"):
                raise SchemaError(f"schema/{sf.rel}: x-cs-tool belongs on a *.input.json schema")
            orel = sf.rel[:-len(".input.json")] + ".output.json"
            if orel not in by_rel:
                raise SchemaError(f"schema/{sf.rel}: tool '{tool['name']}' has no {orel}")
            if "description" not in sf.doc:
                raise SchemaError(f"schema/{sf.rel}: a tool input needs a description")
            tools.append((tool["index"], tool, sf, node, by_rel[orel]))
        tools.sort(key=lambda t: t[0])
        if [t[0] for t in tools] != list(range(len(tools))):
            raise SchemaError("x-cs-tool.index values must be 0..N-1 without gaps")
        rows = []
        texts = []
        for idx, tool, sf, node, (osf, onode) in tools:
            ann = json.dumps(tool["annotations"], sort_keys=True, separators=(",", ":"))
            if not sf.doc["description"].isascii():
                raise SchemaError(f"schema/{sf.rel}: a tool description must be ASCII")
            texts.append(c_bytes(f"description_{sf.cname}", sf.doc["description"]))
            rows.append(f"    {{{c_string(tool['name'])}, {c_string(tool['title'])},\n"
                        f"     description_{sf.cname},\n"
                        f"     {c_string(ann)}, schema_{sf.cname}, schema_{osf.cname},\n"
                        f"     &{node.desc}, &{onode.desc}}},")
        if not rows:  # a schema set without tools (generator tests): keep the array non-empty
            rows.append("    {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},")
        return ("".join(texts) + "const struct csw_tool csw_tools[] = {\n" + "\n".join(rows) +
                "\n};\n" f"const size_t csw_tool_count = {len(tools)};\n")


def build_all(schema_dir):
    files = load_schemas(schema_dir)
    for sf in files:
        check_meta(sf)
    b = Builder(files)
    tops = []
    for sf in files:
        node = b.named(sf, "")
        if node.kind not in ("object", "union"):
            raise SchemaError(f"schema/{sf.rel}: the root must be an object or a oneOf union")
        tops.append((sf, node))
        for name in sorted(sf.doc.get("$defs", {})):
            b.named(sf, "/$defs/" + name)
    return files, b, tops


def write_file(path, text):
    """Atomic write; always touches the file so the build sees it as fresh."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schema-dir", required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="directory to write csw.h and csw_tables.c into")
    g.add_argument("--list", action="store_true", help="print the top-level type names")
    g.add_argument("--check", action="store_true", help="validate the schemas only")
    args = ap.parse_args(argv)
    try:
        files, b, tops = build_all(args.schema_dir)
        if args.list:
            for sf, _ in tops:
                print(sf.cname)
            return 0
        em = Emitter(files, b, tops)
        header = em.header()
        tables = em.tables()
        if args.check:  # everything but writing
            return 0
    except SchemaError as e:
        print(f"csgen: {e}", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    write_file(os.path.join(args.out, "csw.h"), header)
    write_file(os.path.join(args.out, "csw_tables.c"), tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
