"""Tests for gen/frozen.py, the frozen-schema lock and its check.

Run from gen/tests:  /usr/bin/python3 -m unittest -v test_frozen
(CTest runs exactly that as the gen_frozen test.)

Every test works on copies in a temporary directory and never writes the repository's schema/ or
schema/frozen.lock. The fixtures below follow the project's schema conventions: JSON Schema
2020-12 with x-cs-major and x-cs-direction, a cross-file $ref, a oneOf union with a const
discriminator, a string-keyed map, an array and a recursive definition. The last two test classes
read the real schema/ (the check must pass on it; removing a property from a copy must fail).
"""

import copy
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
GEN = HERE.parent
REPO = GEN.parent
sys.path.insert(0, str(GEN))

import frozen  # noqa: E402  (the module under test lives one directory up)

SCHEMA = "https://json-schema.org/draft/2020-12/schema"
SUFFIX = "(non-additive change without raising x-cs-major)"


def root(rel, direction, body):
    """A schema document with the root keywords every CodeSpace schema carries."""
    doc = {"$schema": SCHEMA, "$id": "https://codespace.invalid/schema/" + rel,
           "x-cs-major": 1, "x-cs-direction": direction}
    doc.update(body)
    return doc


FIXTURES = {
    "errors.json": root("errors.json", "output", {
        "title": "Tool error body",
        "type": "object",
        "properties": {
            "code": {"$ref": "#/$defs/code"},
            "message": {"type": "string", "maxLength": 4096},
            "operation_id": {"type": "string"},
        },
        "required": ["code", "message"],
        "$defs": {
            "code": {"type": "string", "enum": ["INVALID_ARGUMENTS", "NOT_FOUND", "INTERNAL"],
                     "x-cs-c-name": "error",
                     "x-cs-enum-descriptions": ["bad arguments", "no such file", "a bug"]},
            # Referenced from nowhere in this file: a catalogue entry other files may use.
            "retry": {"type": "string", "enum": ["now", "later"]},
        },
    }),
    "mcp/read.input.json": root("mcp/read.input.json", "input", {
        "x-cs-tool": "read",
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 4096},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "limit": {"type": "integer", "exclusiveMinimum": 0, "maximum": 1000},
            "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
        },
        "required": ["path"],
    }),
    "mcp/read.output.json": root("mcp/read.output.json", "output", {
        "x-cs-tool": "read",
        "type": "object",
        "properties": {
            "kind": {"const": "read_result"},
            "content": {"type": "string"},
            "next_offset": {"type": ["integer", "null"], "minimum": 0},
            "truncated": {"type": "boolean"},
            "lines": {"type": "array", "items": {"type": "string"}, "maxItems": 100},
            "meta": {"type": "object", "additionalProperties": {"type": "string"}},
            "error": {"$ref": "../errors.json"},
        },
        "required": ["kind", "content", "truncated"],
    }),
    "runner/wire.json": root("runner/wire.json", "both", {
        "title": "Runner wire message",
        "oneOf": [{"$ref": "#/$defs/read"}, {"$ref": "#/$defs/write"}, {"$ref": "#/$defs/fail"}],
        "$defs": {
            "read": {"type": "object",
                     "properties": {"op": {"const": "read"}, "id": {"$ref": "#/$defs/id"},
                                    "path": {"type": "string"}},
                     "required": ["op", "id", "path"]},
            "write": {"type": "object",
                      "properties": {"op": {"const": "write"}, "id": {"$ref": "#/$defs/id"},
                                     "data": {"type": "string"}},
                      "required": ["op", "id", "data"]},
            "fail": {"type": "object",
                     "properties": {"op": {"const": "fail"}, "id": {"$ref": "#/$defs/id"},
                                    "code": {"$ref": "../errors.json#/$defs/code"}},
                     "required": ["op", "id", "code"]},
            "id": {"type": "integer", "minimum": 1},
        },
    }),
    "sandbox/plan.json": root("sandbox/plan.json", "input", {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/node"}},
        "required": ["root"],
        "$defs": {
            "node": {"type": "object",
                     "properties": {"name": {"type": "string"},
                                    "children": {"type": "array",
                                                 "items": {"$ref": "#/$defs/node"}}},
                     "required": ["name"]},
        },
    }),
}


class FrozenTestCase(unittest.TestCase):
    """A fresh copy of the fixture schemas with an up-to-date lock, in a temp dir."""

    def setUp(self):
        self.fresh()

    def fresh(self):
        """(Re)create the temp schema set and its lock; the check must pass on it."""
        self.tmp = Path(tempfile.mkdtemp(prefix="frozen-test-"))
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.schema_dir = self.tmp / "schema"
        self.lock = self.schema_dir / "frozen.lock"
        for rel, doc in FIXTURES.items():
            self.save(rel, doc)
        rc, _, err = self.update()
        self.assertEqual(rc, 0, err)
        self.assert_check_passes()

    # -- helpers ----------------------------------------------------------------------------

    def run_tool(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        rc = frozen.main(list(argv), out=out, err=err)
        return rc, out.getvalue(), err.getvalue()

    def update(self, *extra):
        return self.run_tool("update", "--schema-dir", str(self.schema_dir),
                             "--lock", str(self.lock), *extra)

    def check(self):
        return self.run_tool("check", "--schema-dir", str(self.schema_dir),
                             "--lock", str(self.lock))

    def load(self, rel):
        return json.loads((self.schema_dir / rel).read_text(encoding="utf-8"))

    def save(self, rel, doc):
        path = self.schema_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")

    def edit(self, rel, fn):
        doc = copy.deepcopy(self.load(rel))
        fn(doc)
        self.save(rel, doc)

    def lock_data(self):
        return json.loads(self.lock.read_text(encoding="utf-8"))

    def assert_check_passes(self):
        rc, out, err = self.check()
        self.assertEqual(rc, 0, f"check failed:\n{err}")
        self.assertIn("match", out)

    def assert_breaking(self, rel, fn, *expected):
        """Edit, update (records it, warns, exits 0), check fails with every expected line."""
        self.edit(rel, fn)
        rc, _, err = self.update()
        self.assertEqual(rc, 0, err)
        self.assertIn("check will fail unless x-cs-major is raised", err)
        rc, _, err = self.check()
        self.assertNotEqual(rc, 0, "check passed a non-additive change")
        for line in expected:
            self.assertIn(line, err.splitlines())
        return err

    def assert_additive(self, rel, fn):
        self.edit(rel, fn)
        rc, _, err = self.update()
        self.assertEqual(rc, 0, err)
        self.assertNotIn("warning", err)
        self.assert_check_passes()

    def bump(self, *rels):
        """Raise x-cs-major of each schema, update; the check must then pass."""
        for rel in rels:
            self.edit(rel, lambda d: d.__setitem__("x-cs-major", d["x-cs-major"] + 1))
        rc, _, err = self.update()
        self.assertEqual(rc, 0, err)
        self.assertNotIn("warning", err)
        self.assert_check_passes()


def breaking(rel, path, text):
    return f"{rel}: {path}: {text} {SUFFIX}"


# ---------------------------------------------------------------------------------------------


class TestLockBasics(FrozenTestCase):

    def test_fresh_lock_format(self):
        text = self.lock.read_text(encoding="utf-8")
        data = json.loads(text)
        self.assertTrue(text.endswith("}\n"))
        self.assertEqual(text, json.dumps(data, sort_keys=True, indent=2) + "\n")
        self.assertEqual(data["lock_version"], 1)
        self.assertEqual(sorted(data["schemas"]), sorted(FIXTURES))
        for rel, rec in data["schemas"].items():
            (entry,) = rec["history"]
            self.assertEqual(sorted(entry), ["direction", "major", "sha256", "shape"])
            raw = (self.schema_dir / rel).read_bytes()
            self.assertEqual(entry["sha256"], hashlib.sha256(raw).hexdigest())
            self.assertEqual(entry["major"], 1)
            self.assertEqual(entry["direction"], FIXTURES[rel]["x-cs-direction"])

    def test_update_is_idempotent(self):
        before = self.lock.read_bytes()
        rc, out, _ = self.update()
        self.assertEqual(rc, 0)
        self.assertIn("already up to date", out)
        self.assertEqual(self.lock.read_bytes(), before)

    def test_shape_resolves_refs_and_names_paths(self):
        shapes = {rel: rec["history"][-1]["shape"]
                  for rel, rec in self.lock_data()["schemas"].items()}
        inp = shapes["mcp/read.input.json"]
        self.assertEqual(inp["/"]["required"], ["path"])
        self.assertEqual(inp["/"]["properties"], ["encoding", "limit", "offset", "path"])
        self.assertEqual(inp["/limit"], {"type": ["integer"], "minimum": 1, "maximum": 1000})
        self.assertEqual(inp["/encoding"]["enum"], ["base64", "utf-8"])
        out = shapes["mcp/read.output.json"]
        self.assertEqual(out["/next_offset"]["type"], ["integer", "null"])
        self.assertIn("/lines/[]", out)
        self.assertEqual(out["/meta/{}"]["type"], ["string"])
        # Cross-file $ref: the error object and its $defs/code are expanded in place.
        self.assertIn("NOT_FOUND", out["/error/code"]["enum"])
        wire = shapes["runner/wire.json"]
        self.assertEqual(wire["/"]["union"], {"discriminator": "op",
                                              "branches": ["op<fail>", "op<read>", "op<write>"]})
        self.assertEqual(wire["/"]["type"], ["object"])
        self.assertEqual(wire["/op<read>/id"], {"type": ["integer"], "minimum": 1})
        self.assertIn("INTERNAL", wire["/op<fail>/code"]["enum"])
        # Definitions reached from the root are not walked again; unreached ones are.
        self.assertNotIn("#/$defs/write", wire)
        self.assertEqual(shapes["errors.json"]["#/$defs/retry"]["enum"], ["later", "now"])
        self.assertNotIn("#/$defs/code", shapes["errors.json"])
        # A recursive definition stops at its first repetition.
        plan = shapes["sandbox/plan.json"]
        self.assertEqual(plan["/root/children/[]"]["recursive"], "sandbox/plan.json#/$defs/node")

    def test_missing_lock_fails(self):
        self.lock.unlink()
        rc, _, err = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("lock file not found", err)

    def test_edit_without_update_fails_naming_the_file(self):
        self.edit("mcp/read.input.json", lambda d: d.__setitem__("description", "Read a file."))
        rc, _, err = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("mcp/read.input.json: schema changed without updating the lock: run "
                      "/usr/bin/python3 gen/frozen.py update", err)
        # A description is not part of the contract: updating makes the check pass again.
        rc, out, err = self.update()
        self.assertEqual(rc, 0)
        self.assertNotIn("warning", err)
        self.assertIn("mcp/read.input.json: recorded (changed, major 1)", out)
        self.assert_check_passes()
        hist = self.lock_data()["schemas"]["mcp/read.input.json"]["history"]
        self.assertEqual(len(hist), 2)
        self.assertEqual(hist[0]["shape"], hist[1]["shape"])

    def test_referenced_schema_change_needs_update_of_referrers(self):
        self.edit("errors.json", lambda d: d["$defs"]["code"]["enum"].append("TIMEOUT"))
        rc, _, err = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("errors.json: schema changed without updating the lock", err)
        self.assertIn("runner/wire.json: resolved shape changed without updating the lock", err)
        rc, out, _ = self.update()
        self.assertEqual(rc, 0)
        self.assertIn("runner/wire.json: recorded (changed, major 1)", out)
        self.assert_check_passes()

    def test_new_schema_not_in_lock(self):
        self.save("config/registry.json", root("config/registry.json", "input",
                                               {"type": "object"}))
        rc, _, err = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("config/registry.json: schema is not in the lock", err)
        rc, out, _ = self.update()
        self.assertIn("config/registry.json: recorded (new, major 1)", out)
        self.assert_check_passes()

    def test_lock_entry_without_file(self):
        (self.schema_dir / "sandbox/plan.json").unlink()
        rc, _, err = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("sandbox/plan.json: lock entry has no schema file", err)

    def test_removed_schema_refused_without_allow_remove(self):
        (self.schema_dir / "sandbox/plan.json").unlink()
        before = self.lock.read_bytes()
        rc, _, err = self.update()
        self.assertEqual(rc, 1)
        self.assertIn("sandbox/plan.json: frozen in the lock but removed", err)
        self.assertIn("--allow-remove", err)
        self.assertEqual(self.lock.read_bytes(), before)
        rc, out, _ = self.update("--allow-remove")
        self.assertEqual(rc, 0)
        self.assertIn("sandbox/plan.json: removed from the lock", out)
        self.assertNotIn("sandbox/plan.json", self.lock_data()["schemas"])
        self.assert_check_passes()

    def test_malformed_lock(self):
        for text in ("not json", '{"lock_version": 2, "schemas": {}}',
                     '{"lock_version": 1, "schemas": {"errors.json": {"history": [{}]}}}'):
            with self.subTest(text=text):
                self.lock.write_text(text, encoding="utf-8")
                rc, _, err = self.check()
                self.assertEqual(rc, 1)
                self.assertTrue(err.strip(), "no message")
                rc, _, err = self.update()
                self.assertEqual(rc, 1)
                self.assertEqual(self.lock.read_text(encoding="utf-8"), text)

    def test_hand_edited_shape_is_reported_not_a_traceback(self):
        data = self.lock_data()
        hist = data["schemas"]["mcp/read.input.json"]["history"]
        hist.append(copy.deepcopy(hist[0]))
        hist[0]["shape"]["/"]["type"] = 7
        self.lock.write_text(json.dumps(data), encoding="utf-8")
        rc, _, err = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("mcp/read.input.json: lock history is malformed", err)

    def test_bad_root_keywords_are_errors(self):
        self.edit("mcp/read.input.json", lambda d: d.pop("x-cs-major"))
        before = self.lock.read_bytes()
        rc, _, err = self.update()
        self.assertEqual(rc, 1)
        self.assertIn("mcp/read.input.json: x-cs-major must be an integer >= 1", err)
        self.assertEqual(self.lock.read_bytes(), before)
        self.edit("mcp/read.input.json", lambda d: d.update({"x-cs-major": 1,
                                                             "x-cs-direction": "sideways"}))
        rc, _, err = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("mcp/read.input.json: x-cs-direction must be one of", err)

    def test_dangling_ref_is_an_error(self):
        self.edit("mcp/read.output.json",
                  lambda d: d["properties"].update({"x": {"$ref": "../nope.json"}}))
        rc, _, err = self.update()
        self.assertEqual(rc, 1)
        self.assertIn("mcp/read.output.json: $ref ../nope.json", err)

    def test_cli_exit_codes(self):
        tool = [sys.executable, str(GEN / "frozen.py")]
        args = ["--schema-dir", str(self.schema_dir), "--lock", str(self.lock)]
        ok = subprocess.run(tool + ["check"] + args, capture_output=True, text=True)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.edit("mcp/read.input.json", lambda d: d["properties"].pop("offset"))
        bad = subprocess.run(tool + ["check"] + args, capture_output=True, text=True)
        self.assertEqual(bad.returncode, 1)
        usage = subprocess.run(tool + ["check"], capture_output=True, text=True)
        self.assertEqual(usage.returncode, 2)


class TestBreakingChanges(FrozenTestCase):
    """Each rule: edit, update, check fails with the right line; raising x-cs-major fixes it."""

    def test_property_removed(self):
        rel = "mcp/read.input.json"
        self.assert_breaking(rel, lambda d: d["properties"].pop("offset"),
                             breaking(rel, "/offset", "property removed"))
        self.bump(rel)

    def test_property_renamed(self):
        rel = "mcp/read.output.json"

        def rename(d):
            d["properties"]["body"] = d["properties"].pop("content")
            d["required"] = ["kind", "body", "truncated"]
        self.assert_breaking(rel, rename, breaking(rel, "/content", "property removed"))
        self.bump(rel)

    def test_nested_property_removed_through_ref(self):
        rel = "runner/wire.json"
        self.assert_breaking(rel, lambda d: (d["$defs"]["write"]["properties"].pop("data"),
                                             d["$defs"]["write"]["required"].remove("data")),
                             breaking(rel, "/op<write>/data", "property removed"))
        self.bump(rel)

    def test_type_narrowed(self):
        rel = "mcp/read.output.json"
        self.assert_breaking(rel, lambda d: d["properties"]["next_offset"].update(type="integer"),
                             breaking(rel, "/next_offset", "type narrowed: null no longer allowed"))
        self.bump(rel)

    def test_type_number_to_integer_narrowed(self):
        rel = "mcp/read.input.json"
        self.edit(rel, lambda d: d["properties"]["offset"].update(type="number"))
        self.update()
        self.assert_check_passes()   # integer -> number is a widening
        self.assert_breaking(rel, lambda d: d["properties"]["offset"].update(type="integer"),
                             breaking(rel, "/offset", "type narrowed: number no longer allowed"))

    def test_type_added_where_any_was_allowed(self):
        rel = "mcp/read.output.json"
        self.edit(rel, lambda d: d["properties"].update(extra={"description": "any value"}))
        self.update()
        self.assert_breaking(rel, lambda d: d["properties"]["extra"].update(type="string"),
                             breaking(rel, "/extra", "type restricted from any to string"))

    def test_const_to_typed_enum_is_additive(self):
        # a const string already admits only a string: typing it and widening it to an enum
        # narrows nothing (workspace_info's process_conflict "reject" -> "reject" | "share")
        rel = "mcp/read.output.json"
        self.edit(rel, lambda d: d["properties"].update(mode={"const": "reject"}))
        self.update()
        self.edit(rel, lambda d: d["properties"].update(
            mode={"type": "string", "enum": ["reject", "share"]}))
        self.update()
        self.assert_check_passes()
        self.assert_breaking(rel, lambda d: d["properties"].update(
            mode={"type": "integer", "enum": [1]}),
            breaking(rel, "/mode", "type narrowed: string no longer allowed"))

    def test_enum_value_removed(self):
        rel = "mcp/read.input.json"
        self.assert_breaking(rel, lambda d: d["properties"]["encoding"].update(enum=["utf-8"]),
                             breaking(rel, "/encoding", 'enum value removed: "base64"'))
        self.bump(rel)

    def test_enum_added(self):
        rel = "mcp/read.input.json"
        self.assert_breaking(rel, lambda d: d["properties"]["path"].update(enum=["a", "b"]),
                             breaking(rel, "/path", "value set restricted (enum or const added)"))

    def test_unreferenced_definition_enum_value_removed(self):
        rel = "errors.json"
        self.assert_breaking(rel, lambda d: d["$defs"]["retry"].update(enum=["now"]),
                             breaking(rel, "#/$defs/retry", 'enum value removed: "later"'))
        self.bump(rel)

    def test_const_changed(self):
        rel = "mcp/read.output.json"
        self.assert_breaking(rel, lambda d: d["properties"]["kind"].update(const="read_result2"),
                             breaking(rel, "/kind",
                                      'const changed from "read_result" to "read_result2"'))
        self.bump(rel)

    def test_bounds_tightened(self):
        cases = [
            ("mcp/read.input.json", lambda d: d["properties"]["path"].update(minLength=2),
             "/path", "minLength raised from 1 to 2"),
            ("mcp/read.input.json", lambda d: d["properties"]["path"].update(maxLength=100),
             "/path", "maxLength lowered from 4096 to 100"),
            ("mcp/read.input.json", lambda d: d["properties"]["offset"].update(minimum=1),
             "/offset", "lower bound raised from >= 0 to >= 1"),
            ("mcp/read.input.json", lambda d: d["properties"]["limit"].update(maximum=10),
             "/limit", "upper bound lowered from <= 1000 to <= 10"),
            ("mcp/read.input.json", lambda d: d["properties"]["offset"].update(maximum=99),
             "/offset", "upper bound added (<= 99)"),
            ("mcp/read.output.json", lambda d: d["properties"]["lines"].update(maxItems=50),
             "/lines", "maxItems lowered from 100 to 50"),
            ("mcp/read.output.json", lambda d: d["properties"]["lines"].update(minItems=1),
             "/lines", "minItems added (1)"),
            ("mcp/read.output.json", lambda d: d["properties"]["content"].update(maxLength=10),
             "/content", "maxLength added (10)"),
            ("runner/wire.json", lambda d: d["$defs"]["id"].update(exclusiveMinimum=1),
             "/op<read>/id", "lower bound raised from >= 1 to >= 2"),
        ]
        for rel, fn, path, text in cases:
            with self.subTest(rel=rel, path=path, text=text):
                self.fresh()
                self.assert_breaking(rel, fn, breaking(rel, path, text))
                self.bump(rel)

    def test_new_required_input(self):
        rel = "mcp/read.input.json"
        self.assert_breaking(rel, lambda d: d["required"].append("offset"),
                             breaking(rel, "/offset", "optional property became required"))
        self.bump(rel)
        self.assert_breaking(rel, lambda d: (d["properties"].update(mode={"type": "string"}),
                                             d["required"].append("mode")),
                             breaking(rel, "/mode", "new required property"))
        self.bump(rel)

    def test_new_required_both(self):
        rel = "runner/wire.json"
        self.assert_breaking(rel, lambda d: (d["$defs"]["read"]["properties"].update(
                                                 flags={"type": "integer"}),
                                             d["$defs"]["read"]["required"].append("flags")),
                             breaking(rel, "/op<read>/flags", "new required property"))
        self.bump(rel)

    def test_required_became_optional_output(self):
        rel = "mcp/read.output.json"
        self.assert_breaking(rel, lambda d: d["required"].remove("truncated"),
                             breaking(rel, "/truncated", "required property became optional"))
        self.bump(rel)

    def test_required_became_optional_both(self):
        rel = "runner/wire.json"
        self.assert_breaking(rel, lambda d: d["$defs"]["read"]["required"].remove("path"),
                             breaking(rel, "/op<read>/path", "required property became optional"))
        self.bump(rel)

    def test_union_branch_removed(self):
        rel = "runner/wire.json"
        self.assert_breaking(rel, lambda d: d["oneOf"].pop(1),
                             breaking(rel, "/op<write>", "union branch removed"))
        self.bump(rel)

    def test_cross_file_change_breaks_referrers(self):
        self.assert_breaking("errors.json",
                             lambda d: d["$defs"]["code"]["enum"].remove("NOT_FOUND"),
                             breaking("errors.json", "/code", 'enum value removed: "NOT_FOUND"'),
                             breaking("runner/wire.json", "/op<fail>/code",
                                      'enum value removed: "NOT_FOUND"'),
                             breaking("mcp/read.output.json", "/error/code",
                                      'enum value removed: "NOT_FOUND"'))
        # Raising errors.json alone is not enough: the schemas that embed it changed too.
        self.edit("errors.json", lambda d: d.__setitem__("x-cs-major", 2))
        self.update()
        rc, _, err = self.check()
        self.assertEqual(rc, 1)
        self.assertNotIn("errors.json: /code", err)
        self.assertIn("runner/wire.json: /op<fail>/code", err)
        self.bump("runner/wire.json", "mcp/read.output.json")

    def test_closing_an_object(self):
        rel = "mcp/read.input.json"
        self.assert_breaking(rel, lambda d: d.__setitem__("additionalProperties", False),
                             breaking(rel, "/", "additionalProperties: false added"))

    def test_unmodelled_keyword_added(self):
        rel = "mcp/read.input.json"
        self.assert_breaking(rel, lambda d: d["properties"]["path"].update(pattern="^/"),
                             breaking(rel, "/path",
                                      "keyword pattern added (not modelled: cannot prove it "
                                      "additive)"))

    def test_items_schema_added_to_unconstrained_array(self):
        rel = "mcp/read.input.json"
        self.edit(rel, lambda d: d["properties"].update(tags={"type": "array"}))
        self.update()
        self.assert_check_passes()
        self.assert_breaking(rel, lambda d: d["properties"]["tags"].update(
                                 items={"type": "string"}),
                             breaking(rel, "/tags/[]", "array items schema added"))

    def test_direction_narrowed(self):
        rel = "runner/wire.json"
        self.assert_breaking(rel, lambda d: d.__setitem__("x-cs-direction", "input"),
                             f"{rel}: x-cs-direction changed from both to input {SUFFIX}")
        self.bump(rel)

    def test_major_lowered(self):
        rel = "mcp/read.input.json"
        self.bump(rel)
        self.edit(rel, lambda d: d.__setitem__("x-cs-major", 1))
        self.update()
        rc, _, err = self.check()
        self.assertEqual(rc, 1)
        self.assertIn(f"{rel}: x-cs-major lowered from 2 to 1", err)

    def test_update_records_but_check_gates(self):
        rel = "mcp/read.input.json"
        self.assert_breaking(rel, lambda d: d["properties"].pop("offset"),
                             breaking(rel, "/offset", "property removed"))
        hist = self.lock_data()["schemas"][rel]["history"]
        self.assertEqual(len(hist), 2)
        self.assertEqual(hist[-1]["sha256"],
                         hashlib.sha256((self.schema_dir / rel).read_bytes()).hexdigest())
        # A second update does not clear the failure.
        self.update()
        rc, _, _ = self.check()
        self.assertEqual(rc, 1)

    def test_undoing_a_breaking_edit_clears_it(self):
        rel = "mcp/read.input.json"
        original = self.load(rel)
        self.assert_breaking(rel, lambda d: d["properties"].pop("offset"),
                             breaking(rel, "/offset", "property removed"))
        self.save(rel, original)
        rc, _, err = self.update()
        self.assertEqual(rc, 0, err)
        self.assert_check_passes()
        self.assertEqual(len(self.lock_data()["schemas"][rel]["history"]), 1)

    def test_raised_major_replaces_the_rejected_entry(self):
        rel = "mcp/read.input.json"
        self.assert_breaking(rel, lambda d: d["properties"].pop("offset"),
                             breaking(rel, "/offset", "property removed"))
        self.bump(rel)
        majors = [e["major"] for e in self.lock_data()["schemas"][rel]["history"]]
        self.assertEqual(majors, [1, 2])


class TestAdditiveChanges(FrozenTestCase):
    """Each change is additive: update then check passes, with no warning."""

    def test_additive(self):
        cases = [
            ("new optional input field", "mcp/read.input.json",
             lambda d: d["properties"].update(follow={"type": "boolean"})),
            ("new enum value", "mcp/read.input.json",
             lambda d: d["properties"]["encoding"]["enum"].append("latin-1")),
            ("new required output field", "mcp/read.output.json",
             lambda d: (d["properties"].update(size={"type": "integer"}),
                        d["required"].append("size"))),
            ("new optional output field", "mcp/read.output.json",
             lambda d: d["properties"].update(mtime={"type": "string"})),
            ("relaxed maxLength", "mcp/read.input.json",
             lambda d: d["properties"]["path"].update(maxLength=8192)),
            ("relaxed minimum", "mcp/read.input.json",
             lambda d: d["properties"]["limit"].pop("exclusiveMinimum")),
            ("dropped maxItems", "mcp/read.output.json",
             lambda d: d["properties"]["lines"].pop("maxItems")),
            ("widened type", "mcp/read.input.json",
             lambda d: d["properties"]["offset"].update(type=["integer", "null"])),
            ("required input became optional", "mcp/read.input.json",
             lambda d: d["required"].clear()),
            ("equivalent integer bound", "mcp/read.input.json",
             lambda d: (d["properties"]["limit"].pop("exclusiveMinimum"),
                        d["properties"]["limit"].update(minimum=1))),
            ("new union branch", "runner/wire.json",
             lambda d: (d["$defs"].update(ping={"type": "object",
                                                "properties": {"op": {"const": "ping"}},
                                                "required": ["op"]}),
                        d["oneOf"].append({"$ref": "#/$defs/ping"}))),
            ("new optional field in both", "runner/wire.json",
             lambda d: d["$defs"]["read"]["properties"].update(hint={"type": "string"})),
            ("new error code", "errors.json",
             lambda d: d["$defs"]["code"]["enum"].append("TIMEOUT")),
            ("annotations only", "errors.json",
             lambda d: d.update(description="The tool error body.", examples=[{}])),
            ("definition renamed", "runner/wire.json",
             lambda d: (d["$defs"].update(ident=d["$defs"].pop("id")),
                        [b["properties"].update(id={"$ref": "#/$defs/ident"})
                         for k, b in d["$defs"].items() if k in ("read", "write", "fail")])),
            ("direction widened to both", "mcp/read.output.json",
             lambda d: d.__setitem__("x-cs-direction", "both")),
        ]
        for name, rel, fn in cases:
            with self.subTest(name):
                self.fresh()
                self.assert_additive(rel, fn)

    def test_input_rule_does_not_apply_to_output(self):
        # The same edit is breaking for an input schema and additive for an output schema.
        self.assert_additive("mcp/read.output.json",
                             lambda d: d["required"].append("next_offset"))
        self.assert_breaking("mcp/read.input.json", lambda d: d["required"].append("limit"),
                             breaking("mcp/read.input.json", "/limit",
                                      "optional property became required"))

    def test_output_rule_does_not_apply_to_input(self):
        self.assert_additive("mcp/read.input.json", lambda d: d["required"].remove("path"))


# ---------------------------------------------------------------------------------------------
# The real repository schemas (read only; edits happen on copies).

REAL_SCHEMA = REPO / "schema"
REAL_LOCK = REAL_SCHEMA / "frozen.lock"


def find_removable_property(schema_dir):
    """(relpath, properties-dict JSON path, name) of a property in a real schema, or None.

    Only looks where the shape walker looks (properties, items, additionalProperties, oneOf,
    allOf, $defs) and skips const properties, which may be union discriminators."""
    def search(node, trail):
        if not isinstance(node, dict):
            return None
        props = node.get("properties")
        if isinstance(props, dict):
            for name in sorted(props):
                if not (isinstance(props[name], dict) and "const" in props[name]):
                    return trail, name
            for name in sorted(props):
                found = search(props[name], trail + ["properties", name])
                if found:
                    return found
        for key in ("items", "additionalProperties"):
            found = search(node.get(key), trail + [key])
            if found:
                return found
        for key in ("oneOf", "allOf"):
            for i, sub in enumerate(node.get(key) or [] if isinstance(node.get(key), list)
                                    else []):
                found = search(sub, trail + [key, i])
                if found:
                    return found
        defs = node.get("$defs")
        if isinstance(defs, dict):
            for name in sorted(defs):
                found = search(defs[name], trail + ["$defs", name])
                if found:
                    return found
        return None

    for path in sorted(Path(schema_dir).rglob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        found = search(doc, [])
        if found:
            return path.relative_to(schema_dir).as_posix(), found[0], found[1]
    return None


class TestRealRepository(unittest.TestCase):

    @unittest.skipUnless(REAL_LOCK.is_file(), "schema/frozen.lock does not exist yet")
    def test_real_schemas_match_the_lock(self):
        out, err = io.StringIO(), io.StringIO()
        rc = frozen.main(["check", "--schema-dir", str(REAL_SCHEMA), "--lock", str(REAL_LOCK)],
                         out=out, err=err)
        self.assertEqual(rc, 0, err.getvalue())

    def test_removing_a_real_property_fails_the_check(self):
        """Changing a frozen schema non-additively makes a test fail."""
        target = find_removable_property(REAL_SCHEMA) if REAL_SCHEMA.is_dir() else None
        if target is None:
            self.skipTest("schema/ has no schema with a property yet")
        rel, trail, name = target
        tmp = Path(tempfile.mkdtemp(prefix="frozen-real-"))
        self.addCleanup(shutil.rmtree, tmp, True)
        schema_dir = tmp / "schema"
        shutil.copytree(REAL_SCHEMA, schema_dir)
        lock = schema_dir / "frozen.lock"
        args = ["--schema-dir", str(schema_dir), "--lock", str(lock)]

        def run(*argv):
            out, err = io.StringIO(), io.StringIO()
            return frozen.main(list(argv) + args, out=out, err=err), err.getvalue()

        if not lock.is_file():
            rc, err = run("update")   # no real lock yet: freeze the copy as it is
            self.assertEqual(rc, 0, err)
        doc = json.loads((schema_dir / rel).read_text(encoding="utf-8"))
        node = doc
        for key in trail:
            node = node[key]
        del node["properties"][name]
        if isinstance(node.get("required"), list) and name in node["required"]:
            node["required"].remove(name)
        (schema_dir / rel).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")

        rc, err = run("update")
        self.assertEqual(rc, 0, err)
        rc, err = run("check")
        self.assertNotEqual(rc, 0, f"removing {rel} {'/'.join(map(str, trail))}/{name} "
                                   "passed the check")
        self.assertTrue(any(line.startswith(f"{rel}: ") and "property removed" in line
                            and SUFFIX in line for line in err.splitlines()), err)


if __name__ == "__main__":
    unittest.main()
