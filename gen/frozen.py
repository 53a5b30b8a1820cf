#!/usr/bin/python3
"""Frozen-schema lock for CodeSpace: record every wire schema and refuse non-additive changes.

Every JSON Schema under schema/ is listed in schema/frozen.lock with its sha256 and a history of
normalised "shapes" (what the schema accepts or produces, with every $ref resolved). The check
fails when a schema changed without the lock being updated, and when any recorded change between
two consecutive versions of a schema is not additive while its x-cs-major stayed the same. The
updater records changes but never refuses a breaking one: the check is the gate, so CI fails on a
non-additive change even if the lock was updated. See docs/changing-a-schema.md.

Usage (run with /usr/bin/python3 from the repository root):

    /usr/bin/python3 gen/frozen.py check  --schema-dir schema --lock schema/frozen.lock
    /usr/bin/python3 gen/frozen.py update --schema-dir schema --lock schema/frozen.lock

update takes --allow-remove to drop the entries of schema files that were deleted.

Exit status: 0 when the lock matches (check) or was written (update); 1 when check finds problems
or update refuses (bad schema, malformed lock, removed schema without --allow-remove), writing
nothing; 2 on usage errors.

Trust: the schema files and the lock are repository content, written by contributors. A
malformed schema or lock produces an error line naming it, not a traceback.

Lock format (lock_version 1), written with sorted keys, 2-space indent and a trailing newline:

    {"lock_version": 1,
     "schemas": {"mcp/read.input.json": {"history": [
         {"direction": "input", "major": 1, "sha256": "<hex>", "shape": {"/": {...}, ...}},
         ...]}}}

The last history entry is the current one; its sha256 is "the hash" the lock lists.

Shape: a dict from instance paths to facts. Paths: "/" is the document root; "/name" a property
(names escaped as in JSON Pointer: "~" -> "~0", "/" -> "~1"); "/x/[]" the items of array x;
"/x/{}" the values of map x (additionalProperties given as a schema); "/op<read>" the oneOf branch
whose discriminator property "op" has const "read" (a union without a common discriminator uses
"oneOf<0>", "oneOf<1>", ...). A top-level $defs entry that the walk from the root never reaches
(in name order, so one unreached definition may cover another) is walked under "#/$defs/<name>",
so that changes inside a catalogue definition are judged too; removing or renaming a definition is
not itself a wire change and is not reported. Facts:
type (sorted; absent = any; "number" subsumes "integer"), properties, required, closed
(additionalProperties: false), enum, const, minimum/maximum (exclusive bounds folded into
inclusive ones for integers; kept as exclusiveMinimum/exclusiveMaximum for numbers),
minLength/maxLength, minItems/maxItems, union {discriminator, branches}, opaque (keywords this
tool does not model, e.g. pattern, kept verbatim: adding or changing one counts as non-additive),
recursive (a $ref back into its own expansion; the walk stops there).
"""

import argparse
import hashlib
import json
import math
import os
import posixpath
import re
import sys
import tempfile
import urllib.parse
from pathlib import Path

LOCK_VERSION = 1
DIRECTIONS = ("input", "output", "both")
SUFFIX = " (non-additive change without raising x-cs-major)"

# Keywords that describe or label a schema but do not change what it accepts.
ANNOTATIONS = frozenset({
    "$schema", "$id", "$comment", "$defs", "$anchor", "title", "description", "examples",
    "default", "deprecated", "readOnly", "writeOnly",
})
# Keywords the walker models (everything else that is not an annotation or x-cs-* is opaque).
MODELLED = frozenset({
    "$ref", "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
    "minItems", "maxItems", "oneOf", "allOf",
})
LOWER_KEYS = ("minLength", "minItems")   # raising one is a tightening
UPPER_KEYS = ("maxLength", "maxItems")   # lowering or adding one is a tightening
BRANCH_SEG = re.compile(r"^(.+)<(.*)>$")


class FrozenError(Exception):
    """A schema that cannot be summarised (bad JSON, bad $ref, bad x-cs-* root keyword)."""


# ---------------------------------------------------------------------------------------------
# Small helpers


def canon(value):
    """Canonical JSON text of a value: used for set membership and equality of facts."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def esc(name):
    """Escape one path segment the way JSON Pointer does."""
    return name.replace("~", "~0").replace("/", "~1")


def child(path, seg):
    return ("" if path == "/" else path) + "/" + seg


def is_def_root(path):
    return path.startswith("#/$defs/") and path.count("/") == 2


def parent(path):
    """Parent instance path, or None for the document root and definition roots."""
    if path == "/" or is_def_root(path):
        return None
    return path.rsplit("/", 1)[0] or "/"


def expand_types(types):
    """A type set as the set of JSON types it admits ("number" admits integers too)."""
    out = set(types)
    if "number" in out:
        out.add("integer")
    return out


def json_type(value):
    """The JSON Schema type name of a decoded JSON value ("integer" for whole numbers)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# Loading schemas and resolving $ref


class SchemaSet:
    """All *.json files under a schema directory, parsed, keyed by '/'-separated relative path."""

    def __init__(self, schema_dir):
        self.root = Path(schema_dir)
        if not self.root.is_dir():
            raise FrozenError(f"schema directory {schema_dir} does not exist")
        self.raw = {}      # relpath -> bytes
        self.docs = {}     # relpath -> parsed JSON (or None when unparseable)
        self.errors = {}   # relpath -> message for files that do not parse
        self.by_id = {}    # $id (without fragment) -> relpath
        for path in sorted(self.root.rglob("*.json")):
            if not path.is_file():
                continue
            rel = path.relative_to(self.root).as_posix()
            data = path.read_bytes()
            self.raw[rel] = data
            try:
                doc = json.loads(data.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                self.errors[rel] = f"not valid JSON: {exc}"
                self.docs[rel] = None
                continue
            self.docs[rel] = doc
            if isinstance(doc, dict) and isinstance(doc.get("$id"), str):
                self.by_id[doc["$id"].split("#", 1)[0]] = rel

    def resolve(self, ref, cur):
        """Resolve a $ref found in file `cur`; return (relpath, json_pointer, subschema)."""
        if not isinstance(ref, str):
            raise FrozenError(f"$ref must be a string, got {canon(ref)}")
        uri, _, frag = ref.partition("#")
        if uri == "":
            target = cur
        elif urllib.parse.urlsplit(uri).scheme:
            # An absolute URI: only the $id of a file in this schema set can match it.
            target = self.by_id.get(uri)
            if target is None:
                raise FrozenError(f"$ref {ref}: no schema under the schema dir has $id {uri}")
        else:
            # A relative reference resolves against the referring file's location.
            target = posixpath.normpath(posixpath.join(posixpath.dirname(cur), uri))
            if target.startswith("../") or target == ".." or target not in self.docs:
                raise FrozenError(f"$ref {ref}: {target} is not a schema file under the schema dir")
        node = self.docs.get(target)
        if node is None:
            raise FrozenError(f"$ref {ref}: {target} does not parse")
        frag = urllib.parse.unquote(frag)
        if frag and not frag.startswith("/"):
            raise FrozenError(f"$ref {ref}: only JSON-pointer fragments are supported")
        for token in frag.split("/")[1:] if frag else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise FrozenError(f"$ref {ref}: pointer #{frag} does not exist in {target}")
        return target, frag, node

    def deref(self, node, cur, seen=None):
        """Follow a chain of bare $refs; return (file, node). Used to inspect union branches."""
        seen = set() if seen is None else seen
        while isinstance(node, dict) and "$ref" in node:
            cur, frag, target = self.resolve(node["$ref"], cur)
            key = cur + "#" + frag
            if key in seen:
                break
            seen.add(key)
            node = target
        return cur, node


# ---------------------------------------------------------------------------------------------
# Building a shape


def conjoin(a, b):
    """Merge facts b into a for the same instance path: both must hold (like allOf)."""
    for key, val in b.items():
        if key not in a:
            a[key] = val
        elif key == "type":
            both = expand_types(a[key]) & expand_types(val)
            a[key] = both
        elif key in ("properties", "required"):
            a[key] = a[key] | val
        elif key == "enum":
            keep = {canon(v) for v in val}
            a[key] = [v for v in a[key] if canon(v) in keep]
        elif key in ("minimum", "exclusiveMinimum") + LOWER_KEYS:
            a[key] = max(a[key], val)
        elif key in ("maximum", "exclusiveMaximum") + UPPER_KEYS:
            a[key] = min(a[key], val)
        elif key == "closed":
            a[key] = a[key] or val
        elif key == "opaque":
            a[key] = {**a[key], **val}
        # const, union, recursive: the first contribution wins (conflicts are not expected).
    return a


class ShapeBuilder:
    """Walks one schema file, resolving $ref (across files too), into {path: facts}."""

    def __init__(self, schemas, rel):
        self.schemas = schemas
        self.rel = rel
        self.shape = {}
        self.reached = set()   # file#pointer of every $ref target expanded so far

    def add(self, path, facts):
        conjoin(self.shape.setdefault(path, {}), facts)

    def build(self):
        doc = self.schemas.docs[self.rel]
        self.walk(doc, "/", self.rel, (self.rel + "#",))
        # Definitions the document never reaches (a catalogue such as an error-code list, or a
        # type other files reference) get their own root, so changes inside them are judged too.
        # A definition the walk already expanded is covered by the instance paths above.
        defs = doc.get("$defs") if isinstance(doc, dict) else None
        if isinstance(defs, dict):
            for name in sorted(defs):
                ptr = "/$defs/" + esc(name)
                key = self.rel + "#" + ptr
                if key not in self.reached:
                    self.reached.add(key)
                    self.walk(defs[name], "#" + ptr, self.rel, (key,))
        return {path: finalize(facts) for path, facts in sorted(self.shape.items())}

    def walk(self, node, path, cur, stack):
        """Record what `node` (a subschema of file `cur`) says about instance `path`.

        `stack` holds the file#pointer of every $ref being expanded above this point, so a
        recursive schema stops at its first repetition instead of looping."""
        if node is True:
            self.add(path, {})
            return
        if not isinstance(node, dict):
            self.add(path, {"opaque": {"schema": node}})
            return
        facts = {}
        if "$ref" in node:
            target_file, frag, target = self.schemas.resolve(node["$ref"], cur)
            key = target_file + "#" + frag
            self.reached.add(key)
            if key in stack:
                facts["recursive"] = key
            else:
                self.walk(target, path, target_file, stack + (key,))
        if "type" in node:
            types = node["type"] if isinstance(node["type"], list) else [node["type"]]
            facts["type"] = {t for t in types if isinstance(t, str)}
        if isinstance(node.get("properties"), dict):
            facts["properties"] = set(node["properties"])
            for name, sub in node["properties"].items():
                self.walk(sub, child(path, esc(name)), cur, stack)
        if isinstance(node.get("required"), list):
            facts["required"] = {r for r in node["required"] if isinstance(r, str)}
        if "additionalProperties" in node:
            extra = node["additionalProperties"]
            if extra is False:
                facts["closed"] = True
            elif isinstance(extra, dict):
                self.walk(extra, child(path, "{}"), cur, stack)
        if "items" in node:
            if isinstance(node["items"], dict):
                self.walk(node["items"], child(path, "[]"), cur, stack)
            elif node["items"] is not True:
                facts.setdefault("opaque", {})["items"] = node["items"]
        if "enum" in node:
            facts["enum"] = list(node["enum"]) if isinstance(node["enum"], list) else []
        if "const" in node:
            facts["const"] = node["const"]
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") + LOWER_KEYS \
                + UPPER_KEYS:
            if isinstance(node.get(key), (int, float)) and not isinstance(node[key], bool):
                facts[key] = node[key]
        if isinstance(node.get("allOf"), list):
            for sub in node["allOf"]:
                self.walk(sub, path, cur, stack)
        if isinstance(node.get("oneOf"), list):
            self.walk_union(node["oneOf"], path, cur, stack, facts)
        for key, val in node.items():
            if key not in MODELLED and key not in ANNOTATIONS and not key.startswith("x-"):
                facts.setdefault("opaque", {})[key] = val
        self.add(path, facts)

    def walk_union(self, branches, path, cur, stack, facts):
        """A oneOf: name each branch by its discriminator value and walk it under that name."""
        disc, values = self.discriminator(branches, cur)
        segs = []
        branch_types = set()
        for i, sub in enumerate(branches):
            if disc is None:
                seg = f"oneOf<{i}>"
            else:
                val = values[i]
                seg = esc(disc) + "<" + esc(val if isinstance(val, str) else canon(val)) + ">"
            segs.append(seg)
            bpath = child(path, seg)
            self.walk(sub, bpath, cur, stack)
            btypes = self.shape.get(bpath, {}).get("type")
            branch_types = None if btypes is None or branch_types is None \
                else branch_types | btypes
        facts["union"] = {"discriminator": disc, "branches": sorted(segs)}
        if branch_types is not None:
            # The union node admits what its branches admit (conjoined with its own "type").
            self.add(path, {"type": branch_types})

    def discriminator(self, branches, cur):
        """The required property that has a distinct const in every branch, or (None, None)."""
        per_branch = []
        for sub in branches:
            bfile, node = self.schemas.deref(sub, cur)
            if not isinstance(node, dict) or not isinstance(node.get("properties"), dict):
                return None, None
            required = node.get("required") if isinstance(node.get("required"), list) else []
            consts = {}
            for name, prop in node["properties"].items():
                _, prop = self.schemas.deref(prop, bfile)
                if name in required and isinstance(prop, dict) and "const" in prop:
                    consts[name] = prop["const"]
            per_branch.append(consts)
        if not per_branch:
            return None, None
        common = set(per_branch[0]).intersection(*per_branch[1:])
        for name in sorted(common):
            values = [b[name] for b in per_branch]
            if len({canon(v) for v in values}) == len(values):
                return name, values
        return None, None


def finalize(facts):
    """Turn raw facts (sets, unfolded bounds) into the canonical JSON form stored in the lock."""
    out = {}
    types = None
    if "type" in facts:
        types = expand_types(facts["type"])
        if "number" in types:
            types.discard("integer")
        out["type"] = sorted(types)
    for key in ("properties", "required"):
        if key in facts:
            out[key] = sorted(facts[key])
    if facts.get("closed"):
        out["closed"] = True
    if "enum" in facts:
        uniq = {canon(v): v for v in facts["enum"]}
        out["enum"] = [uniq[k] for k in sorted(uniq)]
    if "const" in facts:
        out["const"] = facts["const"]
    lo = facts.get("minimum")
    hi = facts.get("maximum")
    xlo = facts.get("exclusiveMinimum")
    xhi = facts.get("exclusiveMaximum")
    if types is not None and "integer" in types and "number" not in types:
        # Integer-only: fold exclusive bounds into inclusive ones (exclusiveMinimum 0 == minimum 1).
        if xlo is not None:
            lo = max(lo, math.floor(xlo) + 1) if lo is not None else math.floor(xlo) + 1
        if xhi is not None:
            hi = min(hi, math.ceil(xhi) - 1) if hi is not None else math.ceil(xhi) - 1
        lo = math.ceil(lo) if lo is not None else None
        hi = math.floor(hi) if hi is not None else None
        xlo = xhi = None
    else:
        # Keep only the tighter of an inclusive and an exclusive bound on the same side.
        if lo is not None and xlo is not None:
            lo, xlo = (None, xlo) if xlo >= lo else (lo, None)
        if hi is not None and xhi is not None:
            hi, xhi = (None, xhi) if xhi <= hi else (hi, None)
    for key, val in (("minimum", lo), ("maximum", hi), ("exclusiveMinimum", xlo),
                     ("exclusiveMaximum", xhi)):
        if val is not None:
            out[key] = val
    for key in LOWER_KEYS + UPPER_KEYS:
        if key in facts:
            out[key] = facts[key]
    for key in ("union", "opaque", "recursive"):
        if key in facts:
            out[key] = facts[key]
    return out


def compute_entry(schemas, rel):
    """The history entry {direction, major, sha256, shape} for one schema file as it is now."""
    if rel in schemas.errors:
        raise FrozenError(schemas.errors[rel])
    doc = schemas.docs[rel]
    if not isinstance(doc, dict):
        raise FrozenError("the root of a schema must be an object")
    major = doc.get("x-cs-major")
    if not isinstance(major, int) or isinstance(major, bool) or major < 1:
        raise FrozenError(f"x-cs-major must be an integer >= 1, got {canon(major)}")
    direction = doc.get("x-cs-direction")
    if direction not in DIRECTIONS:
        raise FrozenError(f"x-cs-direction must be one of input, output, both, got "
                          f"{canon(direction)}")
    try:
        shape = ShapeBuilder(schemas, rel).build()
    except RecursionError:
        raise FrozenError("schema nests too deeply to summarise") from None
    return {"direction": direction, "major": major, "sha256": sha256_hex(schemas.raw[rel]),
            "shape": shape}


# ---------------------------------------------------------------------------------------------
# Comparing two versions of a schema


def lower_bound(facts):
    """(value, exclusive) of a numeric lower bound, or None."""
    if "exclusiveMinimum" in facts:
        return (facts["exclusiveMinimum"], True)
    if "minimum" in facts:
        return (facts["minimum"], False)
    return None


def upper_bound(facts):
    if "exclusiveMaximum" in facts:
        return (facts["exclusiveMaximum"], True)
    if "maximum" in facts:
        return (facts["maximum"], False)
    return None


def fmt_bound(bound, lower):
    val, exclusive = bound
    if lower:
        return f"{'>' if exclusive else '>='} {val}"
    return f"{'<' if exclusive else '<='} {val}"


def allowed_values(facts):
    """The set (canonical JSON) of values enum/const admit, or None when unrestricted."""
    allowed = None
    if "enum" in facts:
        allowed = {canon(v) for v in facts["enum"]}
    if "const" in facts:
        allowed = {canon(facts["const"])} & (allowed if allowed is not None
                                             else {canon(facts["const"])})
    return allowed


def compare_facts(path, old, new, input_rules, output_rules):
    """Non-additive differences at one path that exists in both versions: [(path, text)]."""
    out = []

    # Type: a type the old version admitted that the new one does not.
    if "type" in new:
        old_vals = allowed_values(old)
        if "type" not in old and old_vals is not None:
            # an enum/const without a type admits only its values' types: a type that admits
            # every one of them (const "a" -> type string, enum ["a", "b"]) narrows nothing
            gone = {json_type(json.loads(v)) for v in old_vals} - expand_types(new["type"])
            if gone:
                out.append((path, f"type narrowed: {', '.join(sorted(gone))} no longer allowed"))
        elif "type" not in old:
            out.append((path, f"type restricted from any to {', '.join(new['type'])}"))
        else:
            gone = expand_types(old["type"]) - expand_types(new["type"])
            if gone:
                out.append((path, f"type narrowed: {', '.join(sorted(gone))} no longer allowed"))

    # Enum and const.
    old_vals, new_vals = allowed_values(old), allowed_values(new)
    if "const" in old and "const" in new and canon(old["const"]) != canon(new["const"]):
        out.append((path, f"const changed from {canon(old['const'])} to {canon(new['const'])}"))
    elif new_vals is not None:
        if old_vals is None:
            out.append((path, "value set restricted (enum or const added)"))
        elif old_vals - new_vals:
            out.append((path, "enum value removed: " + ", ".join(sorted(old_vals - new_vals))))

    # Numeric bounds.
    olo, nlo = lower_bound(old), lower_bound(new)
    if nlo is not None:
        if olo is None:
            out.append((path, f"lower bound added ({fmt_bound(nlo, True)})"))
        elif nlo[0] > olo[0] or (nlo[0] == olo[0] and nlo[1] and not olo[1]):
            out.append((path, f"lower bound raised from {fmt_bound(olo, True)} to "
                              f"{fmt_bound(nlo, True)}"))
    ohi, nhi = upper_bound(old), upper_bound(new)
    if nhi is not None:
        if ohi is None:
            out.append((path, f"upper bound added ({fmt_bound(nhi, False)})"))
        elif nhi[0] < ohi[0] or (nhi[0] == ohi[0] and nhi[1] and not ohi[1]):
            out.append((path, f"upper bound lowered from {fmt_bound(ohi, False)} to "
                              f"{fmt_bound(nhi, False)}"))

    # Length and item-count bounds.
    for key in LOWER_KEYS:
        if new.get(key, 0) > old.get(key, 0):
            what = f"raised from {old[key]} to {new[key]}" if key in old else f"added ({new[key]})"
            out.append((path, f"{key} {what}"))
    for key in UPPER_KEYS:
        if key in new and (key not in old or new[key] < old[key]):
            what = f"lowered from {old[key]} to {new[key]}" if key in old \
                else f"added ({new[key]})"
            out.append((path, f"{key} {what}"))

    if new.get("closed") and not old.get("closed"):
        out.append((path, "additionalProperties: false added"))

    # Required properties, by direction.
    old_req, new_req = set(old.get("required", ())), set(new.get("required", ()))
    old_props, new_props = set(old.get("properties", ())), set(new.get("properties", ()))
    if input_rules:
        for name in sorted(new_req - old_req):
            what = "optional property became required" if name in old_props \
                else "new required property"
            out.append((child(path, esc(name)), what))
    if output_rules:
        for name in sorted(old_req - new_req):
            if name in new_props or name not in old_props:
                out.append((child(path, esc(name)), "required property became optional"))
            # A required property that vanished is reported once, as "property removed".

    # Unions.
    ou, nu = old.get("union"), new.get("union")
    if ou and not nu:
        out.append((path, "no longer a oneOf union"))
    elif nu and not ou:
        out.append((path, "became a oneOf union"))
    elif ou and nu:
        if ou["discriminator"] != nu["discriminator"]:
            out.append((path, f"union discriminator changed from {ou['discriminator']} to "
                              f"{nu['discriminator']}"))
        else:
            for seg in sorted(set(ou["branches"]) - set(nu["branches"])):
                out.append((child(path, seg), "union branch removed"))

    # Keywords this tool does not model: adding or changing one cannot be proven additive.
    oo, no = old.get("opaque", {}), new.get("opaque", {})
    for key in sorted(no):
        if key not in oo:
            out.append((path, f"keyword {key} added (not modelled: cannot prove it additive)"))
        elif canon(oo[key]) != canon(no[key]):
            out.append((path, f"keyword {key} changed (not modelled: cannot prove it additive)"))
    return out


def breaking_changes(old_shape, new_shape, directions):
    """All non-additive differences from old_shape to new_shape: sorted [(path, text)]."""
    input_rules = bool({"input", "both"} & directions)
    output_rules = bool({"output", "both"} & directions)
    out = []
    for path in sorted(set(old_shape) | set(new_shape)):
        old, new = old_shape.get(path), new_shape.get(path)
        up = parent(path)
        seg = path.rsplit("/", 1)[-1]
        if new is None:
            # Report only the top of a removed subtree; union branches are reported by the union.
            if up is None or up not in new_shape:
                continue
            if seg in (old_shape.get(up) or {}).get("union", {}).get("branches", ()):
                continue
            what = {"[]": "array items schema removed", "{}": "map value schema removed"}
            out.append((path, what.get(seg, "property removed")))
        elif old is None:
            # New paths are additive (a new optional property, a new branch) except a new items
            # or map-value schema under an existing array or object: that constrains values that
            # used to be unconstrained.
            if up is not None and up in old_shape and seg in ("[]", "{}"):
                kind = "array items" if seg == "[]" else "map value"
                out.append((path, f"{kind} schema added"))
        else:
            out.extend(compare_facts(path, old, new, input_rules, output_rules))
    return out


def transition_problems(old, new):
    """Why the step from history entry `old` to `new` is not allowed, as message lines."""
    if new["major"] < old["major"]:
        return [f"x-cs-major lowered from {old['major']} to {new['major']} (a major version "
                f"never goes down)"]
    if new["major"] > old["major"]:
        return []   # A new major may change anything.
    out = []
    if new["direction"] != old["direction"] and new["direction"] != "both":
        out.append(f"x-cs-direction changed from {old['direction']} to {new['direction']}"
                   + SUFFIX)
    directions = {old["direction"], new["direction"]}
    for path, text in breaking_changes(old["shape"], new["shape"], directions):
        out.append(f"{path}: {text}{SUFFIX}")
    return out


def safe_transition_problems(old, new):
    """transition_problems for entries read from the lock, which a person may have edited."""
    try:
        return transition_problems(old, new)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return [f"lock history is malformed, the shapes cannot be compared ({exc!r}); "
                f"restore the lock from version control"]


def same_entry(a, b):
    return canon(a) == canon(b)


# ---------------------------------------------------------------------------------------------
# The lock file


def load_lock(lock_path):
    """Parse and validate a lock; return ({relpath: [entries]}, problems)."""
    try:
        data = json.loads(Path(lock_path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, [f"{lock_path}: cannot read the lock: {exc}"]
    if not isinstance(data, dict) or data.get("lock_version") != LOCK_VERSION \
            or not isinstance(data.get("schemas"), dict):
        return None, [f"{lock_path}: not a lock_version {LOCK_VERSION} lock "
                      f"(expected {{\"lock_version\": 1, \"schemas\": {{...}}}})"]
    schemas, problems = {}, []
    for rel, rec in sorted(data["schemas"].items()):
        history = rec.get("history") if isinstance(rec, dict) else None
        if not isinstance(history, list) or not history:
            problems.append(f"{rel}: lock entry has no history")
            continue
        good = True
        for i, entry in enumerate(history):
            if not (isinstance(entry, dict)
                    and entry.get("direction") in DIRECTIONS
                    and isinstance(entry.get("major"), int) and entry["major"] >= 1
                    and isinstance(entry.get("sha256"), str)
                    and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
                    and isinstance(entry.get("shape"), dict)):
                problems.append(f"{rel}: lock history entry {i} is malformed "
                                f"(needs direction, major, sha256, shape)")
                good = False
        if good:
            schemas[rel] = history
    return schemas, problems


def dump_lock(schemas):
    """The lock text: deterministic (sorted keys, 2-space indent, trailing newline)."""
    body = {"lock_version": LOCK_VERSION,
            "schemas": {rel: {"history": hist} for rel, hist in sorted(schemas.items())}}
    return json.dumps(body, sort_keys=True, indent=2, ensure_ascii=True) + "\n"


def write_atomically(path, text):
    """Replace `path` with `text` via a temporary file, keeping an existing file's mode."""
    path = Path(path)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=".frozen.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def compute_all(schemas):
    """Current entries for every schema file: ({relpath: entry}, [problem lines])."""
    entries, problems = {}, []
    for rel in sorted(schemas.docs):
        try:
            entries[rel] = compute_entry(schemas, rel)
        except FrozenError as exc:
            problems.append(f"{rel}: {exc}")
    return entries, problems


# ---------------------------------------------------------------------------------------------
# Subcommands


def update_hint(args):
    return (f"run /usr/bin/python3 gen/frozen.py update --schema-dir {args.schema_dir} "
            f"--lock {args.lock}")


def cmd_check(args, out, err):
    if not Path(args.lock).is_file():
        print(f"{args.lock}: lock file not found: {update_hint(args)}", file=err)
        return 1
    try:
        schemas = SchemaSet(args.schema_dir)
    except FrozenError as exc:
        print(str(exc), file=err)
        return 1
    locked, problems = load_lock(args.lock)
    if locked is None:
        for line in problems:
            print(line, file=err)
        return 1
    current, bad = compute_all(schemas)
    problems += bad
    for rel in sorted(set(schemas.docs) | set(locked)):
        if rel not in locked:
            if rel in schemas.docs:
                problems.append(f"{rel}: schema is not in the lock: {update_hint(args)}")
            continue
        history = locked[rel]
        if rel not in schemas.docs:
            problems.append(f"{rel}: lock entry has no schema file (removing a frozen schema is "
                            f"breaking; if deliberate, rerun update with --allow-remove)")
        elif rel in current:
            now, latest = current[rel], history[-1]
            if now["sha256"] != latest["sha256"]:
                problems.append(f"{rel}: schema changed without updating the lock: "
                                f"{update_hint(args)}")
            elif not same_entry(now, latest):
                problems.append(f"{rel}: resolved shape changed without updating the lock "
                                f"(a schema it references changed): {update_hint(args)}")
        for old, new in zip(history, history[1:]):
            problems += [f"{rel}: {line}" for line in safe_transition_problems(old, new)]
    if problems:
        for line in problems:
            print(line, file=err)
        print(f"frozen: {len(problems)} problem(s); see docs/changing-a-schema.md", file=err)
        return 1
    print(f"frozen: {len(locked)} schema(s) match {args.lock}", file=out)
    return 0


def cmd_update(args, out, err):
    try:
        schemas = SchemaSet(args.schema_dir)
    except FrozenError as exc:
        print(str(exc), file=err)
        return 1
    if Path(args.lock).exists():
        locked, problems = load_lock(args.lock)
        if problems:
            for line in problems:
                print(line, file=err)
            print("frozen: the lock is malformed; fix or restore it, nothing written", file=err)
            return 1
    else:
        locked = {}
    current, problems = compute_all(schemas)
    if problems:
        for line in problems:
            print(line, file=err)
        print("frozen: nothing written", file=err)
        return 1
    removed = sorted(set(locked) - set(current))
    if removed and not args.allow_remove:
        for rel in removed:
            print(f"{rel}: frozen in the lock but removed from {args.schema_dir}", file=err)
        print("frozen: refusing to drop frozen schemas (removing one is a breaking change); "
              "rerun with --allow-remove if it is deliberate. Nothing written.", file=err)
        return 1

    result = {}
    for rel, entry in sorted(current.items()):
        before = locked.get(rel, [])
        history = list(before)
        # An entry that the check would reject never became a valid contract: the next update
        # replaces it, so that raising x-cs-major (or undoing the edit) clears the failure.
        while len(history) >= 2 and safe_transition_problems(history[-2], history[-1]):
            history.pop()
        if not history or not same_entry(history[-1], entry):
            history.append(entry)
        result[rel] = history
        if history != before:
            state = "new" if not before else "changed"
            print(f"frozen: {rel}: recorded ({state}, major {entry['major']})", file=out)
        if len(history) >= 2:
            for line in safe_transition_problems(history[-2], history[-1]):
                print(f"warning: {rel}: {line}; check will fail unless x-cs-major is raised",
                      file=err)
    for rel in removed:
        print(f"frozen: {rel}: removed from the lock (--allow-remove)", file=out)

    text = dump_lock(result)
    try:
        old_text = Path(args.lock).read_text(encoding="utf-8")
    except OSError:
        old_text = None
    if text != old_text:
        write_atomically(args.lock, text)
        print(f"frozen: wrote {args.lock}", file=out)
    else:
        print(f"frozen: {args.lock} already up to date", file=out)
    return 0


def main(argv=None, out=None, err=None):
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    parser = argparse.ArgumentParser(
        prog="frozen.py", description="Frozen-schema lock: check or update schema/frozen.lock.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("check", "fail unless every schema matches the lock and every recorded "
                                 "change is additive or raises x-cs-major"),
                       ("update", "record changed and new schemas in the lock")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--schema-dir", required=True, help="directory holding the *.json schemas")
        p.add_argument("--lock", required=True, help="lock file (schema/frozen.lock)")
        if name == "update":
            p.add_argument("--allow-remove", action="store_true",
                           help="drop lock entries whose schema file was deleted")
    args = parser.parse_args(argv)
    return cmd_check(args, out, err) if args.command == "check" else cmd_update(args, out, err)


if __name__ == "__main__":
    sys.exit(main())
