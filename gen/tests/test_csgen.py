"""Tests of gen/csgen.py: the real schemas compile deterministically, and every schema the
generator cannot honour is refused with a message naming the file and the JSON pointer.

Run: cd gen/tests && /usr/bin/python3 -m unittest -v test_csgen
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "gen"))

import csgen  # noqa: E402

META = "https://json-schema.org/draft/2020-12/schema"


def schema(rel, body, direction="input"):
    doc = {"$schema": META, "$id": f"https://codespace.invalid/schema/{rel}", "x-cs-major": 1,
           "x-cs-direction": direction}
    doc.update(body)
    return doc


def obj(props, required=None):
    return {"type": "object", "properties": props,
            "required": list(props) if required is None else required}


class Gen:
    """A throwaway schema directory."""

    def __init__(self, test):
        self.tmp = tempfile.TemporaryDirectory()
        test.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "schema")
        os.makedirs(self.dir)

    def put(self, rel, doc):
        path = os.path.join(self.dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(doc, f, indent=2)

    def run(self, *args):
        err = io.StringIO()
        out = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = csgen.main(["--schema-dir", self.dir, *args])
        return rc, out.getvalue(), err.getvalue()


class RealSchemas(unittest.TestCase):
    def test_real_schemas_compile_deterministically(self):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            sd = os.path.join(REPO, "schema")
            self.assertEqual(csgen.main(["--schema-dir", sd, "--out", a]), 0)
            self.assertEqual(csgen.main(["--schema-dir", sd, "--out", b]), 0)
            for name in ("csw.h", "csw_tables.c"):
                with open(os.path.join(a, name), "rb") as fa, \
                        open(os.path.join(b, name), "rb") as fb:
                    self.assertEqual(fa.read(), fb.read(), name)
            with open(os.path.join(a, "csw.h")) as f:
                header = f.read()
            # Banner: every schema with its hash; version guard tied to the runtime ABI.
            self.assertIn("do not edit", header)
            for sf in csgen.load_schemas(sd):
                self.assertIn(f"schema/{sf.rel} sha256 {sf.sha256}", header)
            self.assertIn("#error", header)
            self.assertIn(f"CS_WIRE_ABI != {csgen.WIRE_ABI}", header)

    def test_abi_matches_runtime(self):
        with open(os.path.join(REPO, "src", "base", "base_wire.h")) as f:
            m = re.search(r"#define CS_WIRE_ABI (\d+)", f.read())
        self.assertEqual(int(m.group(1)), csgen.WIRE_ABI)

    def test_every_tool_has_both_schemas(self):
        files, _, tops = csgen.build_all(os.path.join(REPO, "schema"))
        tools = sorted((sf.doc["x-cs-tool"]["index"], sf.doc["x-cs-tool"]["name"])
                       for sf, _ in tops if "x-cs-tool" in sf.doc)
        self.assertEqual([n for _, n in tools], [
            "workspace_info", "read", "find", "apply_patch", "operation_status", "exec_command",
            "write_stdin", "read_process", "process_status", "process_resize",
            "terminate_process"])


class Refusals(unittest.TestCase):
    def refused(self, docs, *fragments):
        g = Gen(self)
        for rel, doc in docs.items():
            g.put(rel, doc)
        rc, _, err = g.run("--check")
        self.assertEqual(rc, 1, err)
        for frag in fragments:
            self.assertIn(frag, err)
        return err

    def test_accepts_a_minimal_schema(self):
        g = Gen(self)
        g.put("a.json", schema("a.json", obj({"x": {"type": "string"}})))
        rc, _, err = g.run("--check")
        self.assertEqual(rc, 0, err)

    def test_unsupported_keyword(self):
        self.refused({"a.json": schema("a.json", obj({"x": {"type": "string",
                                                             "pattern": "^a"}}))},
                     "schema/a.json", "/properties/x", "unsupported keyword 'pattern'")

    def test_unknown_generator_keyword(self):
        self.refused({"a.json": schema("a.json", dict(obj({"x": {"type": "string"}}),
                                                      **{"x-cs-colour": "red"}))},
                     "unsupported keyword 'x-cs-colour'")

    def test_meta_schema_violation(self):
        self.refused({"a.json": schema("a.json", obj({"x": {"type": 5}}))},
                     "schema/a.json", "fails the 2020-12 meta-schema")

    def test_wrong_dialect_and_id(self):
        doc = schema("a.json", obj({"x": {"type": "string"}}))
        doc["$schema"] = "http://json-schema.org/draft-07/schema#"
        self.refused({"a.json": doc}, "$schema must be")
        doc = schema("a.json", obj({"x": {"type": "string"}}))
        doc["$id"] = "https://example.com/a.json"
        self.refused({"a.json": doc}, "$id must be")

    def test_missing_major_or_direction(self):
        doc = schema("a.json", obj({"x": {"type": "string"}}))
        del doc["x-cs-major"]
        self.refused({"a.json": doc}, "x-cs-major")
        doc = schema("a.json", obj({"x": {"type": "string"}}))
        doc["x-cs-direction"] = "sideways"
        self.refused({"a.json": doc}, "x-cs-direction")

    def test_recursive_type(self):
        doc = schema("a.json", dict(obj({"n": {"$ref": "#/$defs/node"}}), **{"$defs": {
            "node": obj({"next": {"$ref": "#/$defs/node"}}, [])}}))
        self.refused({"a.json": doc}, "recursive")

    def test_union_needs_discriminator(self):
        doc = schema("a.json", {"oneOf": [obj({"a": {"type": "string"}}),
                                          obj({"b": {"type": "string"}})]})
        self.refused({"a.json": doc}, "no required string const")

    def test_union_duplicate_tag(self):
        doc = schema("a.json", {"oneOf": [{"$ref": "#/$defs/one"}, {"$ref": "#/$defs/two"}],
                                "$defs": {"one": obj({"t": {"const": "x"}}),
                                          "two": obj({"t": {"const": "x"}})}})
        self.refused({"a.json": doc}, "share t='x'")

    def test_closed_objects_are_refused(self):
        doc = schema("a.json", dict(obj({"x": {"type": "string"}}), additionalProperties=False))
        self.refused({"a.json": doc}, "additionalProperties must be absent, true or a schema")

    def test_number_and_multi_types(self):
        self.refused({"a.json": schema("a.json", obj({"x": {"type": "number"}}))},
                     "type 'number' is not supported")
        self.refused({"a.json": schema("a.json", obj({"x": {"type": ["integer", "null"]}}))},
                     "is not supported")

    def test_open_values(self):
        g = Gen(self)
        g.put("a.json", schema("a.json", obj({"any": {"x-cs-json": True},
                                              "id": {"x-cs-json": True,
                                                     "type": ["string", "integer"]},
                                              "o": {"x-cs-json": True, "type": "object"}})))
        rc, _, err = g.run("--check")
        self.assertEqual(rc, 0, err)
        self.refused({"a.json": schema("a.json", obj({"x": {"x-cs-json": False}}))},
                     "x-cs-json must be true")
        self.refused({"a.json": schema("a.json", obj({"x": {"x-cs-json": True,
                                                             "minLength": 1}}))},
                     "not supported with this type")

    def test_required_not_in_properties(self):
        self.refused({"a.json": schema("a.json", obj({"x": {"type": "string"}}, ["y"]))},
                     "required property 'y' is not in properties")

    def test_bad_default(self):
        self.refused({"a.json": schema("a.json", obj(
            {"x": {"type": "integer", "minimum": 1, "default": 0}}, []))}, "default of 'x'")

    def test_dangling_refs(self):
        self.refused({"a.json": schema("a.json", obj({"x": {"$ref": "b.json"}}))},
                     "unknown schema file 'b.json'")
        self.refused({"a.json": schema("a.json", obj({"x": {"$ref": "#/$defs/nope"}}))},
                     "does not exist")

    def test_ref_with_constraints(self):
        doc = schema("a.json", dict(obj({"x": {"$ref": "#/$defs/s", "minLength": 2}}),
                                    **{"$defs": {"s": {"type": "string"}}}))
        self.refused({"a.json": doc}, "$ref with sibling keywords")

    def test_root_must_be_object_or_union(self):
        self.refused({"a.json": schema("a.json", {"type": "string"})},
                     "root must be an object or a oneOf union")

    def test_c_name_collision(self):
        doc = schema("a.json", dict(obj({"x": {"$ref": "#/$defs/e1"}, "y": {"$ref": "#/$defs/e2"}}),
                                    **{"$defs": {
                                        "e1": {"type": "string", "enum": ["a"],
                                               "x-cs-c-name": "same"},
                                        "e2": {"type": "string", "enum": ["b"],
                                               "x-cs-c-name": "same"}}}))
        self.refused({"a.json": doc}, "C name csw_same already used")

    def test_cross_file_refs_share_one_type(self):
        g = Gen(self)
        g.put("e.json", schema("e.json", dict(obj({"code": {"$ref": "#/$defs/code"}}),
                                              **{"$defs": {"code": {"type": "string",
                                                                    "enum": ["A", "B"]}}})))
        g.put("d/u.json", schema("d/u.json", obj({"err": {"$ref": "../e.json"},
                                                  "c": {"$ref": "../e.json#/$defs/code"}})))
        with tempfile.TemporaryDirectory() as out:
            rc, _, err = g.run("--out", out)
            self.assertEqual(rc, 0, err)
            with open(os.path.join(out, "csw.h")) as f:
                h = f.read()
        self.assertIn("struct csw_e err;", h)
        self.assertIn("enum csw_e_code c;", h)
        self.assertEqual(h.count("enum csw_e_code {"), 1)

    def test_caps_and_defaults_are_constants(self):
        g = Gen(self)
        g.put("t.json", schema("t.json", dict(obj({
            "n": {"type": "integer", "minimum": 1, "exclusiveMaximum": 5000000000, "default": 3},
            "s": {"type": "string", "maxLength": 9, "default": "a\"b"},
            "b": {"type": "boolean", "default": True},
            "e": {"type": "string", "enum": ["x-y", "z"], "default": "z"},
            "l": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4},
            "free": {"type": "string"}}, []))))
        with tempfile.TemporaryDirectory() as out:
            rc, _, err = g.run("--out", out)
            self.assertEqual(rc, 0, err)
            with open(os.path.join(out, "csw.h")) as f:
                h = f.read()
        for line in ("#define CSW_T_N_DEFAULT 3", "#define CSW_T_N_MIN 1",
                     "#define CSW_T_N_MAX INT64_C(4999999999)", "#define CSW_T_S_MAX_LEN 9",
                     '#define CSW_T_S_DEFAULT "a\\"b"', "#define CSW_T_B_DEFAULT true",
                     "#define CSW_T_E_DEFAULT CSW_T_E_Z", "#define CSW_T_L_MIN_ITEMS 1",
                     "#define CSW_T_L_MAX_ITEMS 4"):
            self.assertIn(line + "\n", h)
        self.assertNotIn("CSW_T_FREE_", h)

    def test_one_descriptor_per_shape(self):
        g = Gen(self)
        g.put("a.json", schema("a.json", obj({"x": {"type": "string", "maxLength": 9},
                                              "n": {"type": "integer", "minimum": -2},
                                              "l": {"type": "array", "maxItems": 3,
                                                    "items": {"type": "string",
                                                              "maxLength": 9}}})))
        g.put("b.json", schema("b.json", obj({"y": {"type": "string", "maxLength": 9},
                                              "z": {"type": "string"}})))
        with tempfile.TemporaryDirectory() as out:
            rc, _, err = g.run("--out", out)
            self.assertEqual(rc, 0, err)
            with open(os.path.join(out, "csw_tables.c")) as f:
                c = f.read()
        self.assertEqual(c.count("static const struct cs_wire_type csw__string_max9 = {"), 1)
        self.assertIn("/* csw__string_max9 serves\n *   schema/a.json: /properties/x\n"
                      " *   schema/a.json: /properties/l/items\n"
                      " *   schema/b.json: /properties/y\n */", c)
        self.assertIn("static const struct cs_wire_type csw__string = {", c)
        self.assertIn("static const struct cs_wire_type csw__int_minm2 = {", c)
        self.assertIn("static const struct cs_wire_type csw__array_max3_of_string_max9 = {", c)
        self.assertIn(".item = &csw__string_max9,", c)
        self.assertNotIn("cs__t", c)

    def test_allof_embeds_an_object(self):
        g = Gen(self)
        g.put("m.json", schema("m.json", dict(obj({"id": {"type": "string"}}), **{
            "$defs": {"args": obj({"p": {"type": "string", "description": "P."},
                                   "n": {"type": "integer", "default": 2}}, ["p"])},
            "allOf": [{"$ref": "#/$defs/args"}]})))
        g.put("w.json", schema("w.json", dict(obj({"ws": {"type": "string"}}), **{
            "allOf": [{"$ref": "m.json#/$defs/args"}]})))
        with tempfile.TemporaryDirectory() as out:
            rc, _, err = g.run("--out", out)
            self.assertEqual(rc, 0, err)
            with open(os.path.join(out, "csw.h")) as f:
                h = f.read()
            with open(os.path.join(out, "csw_tables.c")) as f:
                c = f.read()
        self.assertIn("struct csw_w {\n    struct cs_str ws;\n    union {", h)
        self.assertIn("        struct csw_m_args args;\n        struct {\n"
                      "            struct cs_str p;\n            bool has_n;\n"
                      "            int64_t n;\n        };\n    };\n};", h)
        self.assertIn("#define CSW_W_N_DEFAULT 2", h)
        self.assertIn("offsetof(struct csw_w, has_n) == offsetof(struct csw_w, args) + "
                      "offsetof(struct csw_m_args, has_n)", c)
        # the descriptor lists own then embedded fields, in that order
        fields = re.findall(r'\.name = "(\w+)"', c.split("csw_w_type_fields[] = {")[1]
                            .split("};")[0])
        self.assertEqual(fields, ["ws", "p", "n"])
        # bundled flat, exactly as if the properties were written out
        text = csgen.bundle(*self.builder(g, "m.json"))
        self.assertEqual(json.loads(text) if isinstance(text, str) else text, {
            "$schema": META, "type": "object",
            "properties": {"id": {"type": "string"}, "p": {"type": "string", "description": "P."},
                           "n": {"type": "integer", "default": 2}},
            "required": ["id", "p"]})

    @staticmethod
    def builder(g, rel):
        files, b, tops = csgen.build_all(g.dir)
        sf = b.files[rel]
        return b, sf, sf.doc

    def test_allof_refusals(self):
        base = {"$defs": {"args": obj({"id": {"type": "string"}}),
                          "u": {"oneOf": [obj({"k": {"const": "a"}})]}}}
        self.refused({"a.json": schema("a.json", dict(obj({"id": {"type": "string"}}), **base,
                                                      allOf=[{"$ref": "#/$defs/args"}]))},
                     "property 'id' is defined twice")
        self.refused({"a.json": schema("a.json", dict(obj({}), **base,
                                                      allOf=[{"$ref": "#/$defs/u"}]))},
                     "/allOf/0", "allOf must name an object")
        self.refused({"a.json": schema("a.json", dict(obj({}), **base,
                                                      allOf=[{"type": "object"}]))},
                     "/allOf/0", "an allOf entry must be a $ref alone")

    def test_constant_collision(self):
        # property "a_b" of type t and property "b" of type t_a print the same constant
        doc = schema("t.json", dict(obj({"a_b": {"type": "integer", "maximum": 1},
                                         "a": {"$ref": "#/$defs/a"}}, []),
                                    **{"$defs": {"a": obj({"b": {"type": "integer",
                                                                 "maximum": 2}}, [])}}))
        self.refused({"t.json": doc}, "C macro CSW_T_A_B_MAX also comes from")

    def test_optional_const(self):
        self.refused({"a.json": schema("a.json", obj({"k": {"const": "x"}}, []))},
                     "const property 'k' must be required")

    def test_arrays_and_maps_of_consts(self):
        self.refused({"a.json": schema("a.json", obj({"k": {"type": "array",
                                                             "items": {"const": 1}}}))},
                     "array items may not be a const")
        self.refused({"a.json": schema("a.json", obj({"k": {"type": "object",
                                                             "additionalProperties":
                                                                 {"const": 1}}}))},
                     "map values may not be a const")

    def test_default_outside_a_property(self):
        self.refused({"a.json": schema("a.json", obj({"k": {"type": "array", "items": {
            "type": "integer", "default": 1}}}))}, "'default' is only supported on object "
                                                   "properties")

    def test_bad_c_name(self):
        self.refused({"a.json": schema("a.json", obj({"k": {"type": "string", "enum": ["a"],
                                                             "x-cs-c-name": "Not-C"}}))},
                     "is not a lower-case C identifier")

    def test_enumerator_collision(self):
        doc = schema("a.json", obj({"k": {"$ref": "#/$defs/e"}, "e": {"$ref": "#/$defs/e_x"}}))
        doc["$defs"] = {"e": {"type": "string", "enum": ["x_y"], "x-cs-c-name": "e"},
                        "e_x": {"type": "string", "enum": ["y"], "x-cs-c-name": "e_x"}}
        self.refused({"a.json": doc}, "C enumerator CSW_E_X_Y also comes from")


class Emission(unittest.TestCase):
    """Generated C compiles cleanly whatever text the schemas hold."""

    def test_awkward_text_compiles(self):
        cc = shutil.which("gcc") or shutil.which("cc")
        if not cc:
            self.skipTest("no C compiler")
        g = Gen(self)
        # Non-ASCII, trigraph-looking, control and astral text in every place text can go.
        enum = ["caf\u00e9", "??/ok", "a\u0001b", "smile \U0001F600", "q\"uote\\"]
        g.put("t/x.input.json", schema("t/x.input.json", dict(
            obj({"e": {"type": "string", "enum": enum, "default": "??/ok",
                       "description": "caf\u00e9 ??= \U0001F600 \u0001"},
                 "k": {"$ref": "#/$defs/kind", "default": "b"},
                 "s": {"type": "string", "default": "tri??/graph"}}, []),
            **{"description": "A tool. " + "Long text. " * 500,
               "x-cs-tool": {"name": "x", "index": 0, "title": "X ??!",
                             "annotations": {"readOnlyHint": True}},
               "$defs": {"kind": {"type": "string", "enum": ["a", "b"]}}})))
        g.put("t/x.output.json", schema("t/x.output.json", obj({"v": {"const": "\u00e9??/"}}),
                                        "output"))
        with tempfile.TemporaryDirectory() as out:
            rc, _, err = g.run("--out", out)
            self.assertEqual(rc, 0, err)
            with open(os.path.join(out, "csw_tables.c")) as f:
                tables = f.read()
            self.assertNotIn("??/", tables)  # no trigraph can survive in a literal
            r = subprocess.run([cc, "-std=c17", "-fsyntax-only", "-Wall", "-Wextra",
                                "-Wpedantic", "-Werror", "-I", out, "-I",
                                os.path.join(REPO, "src", "base"),
                                os.path.join(out, "csw_tables.c")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "csw.h")) as f:
                self.assertIn("CSW_T_X_INPUT_E_CAF", f.read())

    def test_bundled_default_beside_ref_and_no_nested_dialect(self):
        files, b, tops = csgen.build_all(os.path.join(REPO, "schema"))
        for sf, _ in tops:
            text = json.dumps(csgen.bundle(b, sf, sf.doc))
            self.assertEqual(text.count("$schema"), 1, sf.rel)
            self.assertNotIn("$ref", text, sf.rel)


if __name__ == "__main__":
    unittest.main()
