#!/usr/bin/python3
"""Proof tests for the contract checks of issue 19: each passes on the repository and fails,
naming the problem and the fix, on a temporary copy that breaks one rule.

- gen/docgen.py --check: docs/contract/tool-reference.md is what the schemas give.
- check_touchpoints.py: every tool is in each place docs/adding-a-tool.md names; the guide's
  tables match the check; docs/fuzzing.md lists every harness.
- check_citations.py: comments cite the contract under docs/, with pages and sections that exist.

Standard library (and jsonschema, which docgen.py needs); the repository is never modified.
"""

import json
import os
import shutil
import unittest

from checkcase import CheckCase, run

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


class TmpRepo(CheckCase):
    """A copy of the parts of the repository a check reads, under self.root."""

    PARTS = ("schema", "docs", "gen", "src/tools", "src/runner", "tests/golden", "tests/e2e",
             "tests/unit", "fuzz")

    PREFIX = "cs-contract-"

    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.tmp, "repo")
        for part in self.PARTS:
            shutil.copytree(os.path.join(REPO, part), os.path.join(self.root, part),
                            ignore=shutil.ignore_patterns("__pycache__", "node_modules"))

    def edit(self, rel, old, new):
        path = os.path.join(self.root, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.assertIn(old, text, rel)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))



class ToolReferenceTest(TmpRepo):
    def check(self, root):
        return run(os.path.join(REPO, "gen", "docgen.py"), "--root", root, "--check")

    def test_repository_is_current(self):
        self.assertPasses(self.check(REPO))

    def test_unmodified_copy_passes(self):
        self.assertPasses(self.check(self.root))

    def test_changed_description_fails_naming_the_command(self):
        self.edit("schema/mcp/process_resize.input.json", "Rows, 1 to 1000.", "Rows, 1 to 999.")
        self.assertFailsWith(self.check(self.root), "docs/contract/tool-reference.md",
                             "gen/docgen.py --root .")

    def test_new_optional_field_fails(self):
        path = os.path.join(self.root, "schema/mcp/read_process.input.json")
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        doc["properties"]["max_bytes"] = {"type": "integer", "minimum": 1}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
        self.assertFailsWith(self.check(self.root), "tool-reference.md")

    def test_fields_taken_through_allof_are_on_the_page(self):
        # read's path comes from its $defs/args, exec_command's cursor from its $defs/process
        # (both through allOf): the page lists them, so changing one is a stale page.
        for rel, old, new in (
                ("schema/mcp/read.input.json", "(for example 'src/main.c')",
                 "(for example 'src/lib.c')"),
                ("schema/mcp/exec_command.output.json", "Cursor to pass to read_process",
                 "Cursor to give read_process")):
            with self.subTest(rel=rel):
                self.edit(rel, old, new)
                self.assertFailsWith(self.check(self.root), "tool-reference.md")
                self.edit(rel, new, old)
                self.assertPasses(self.check(self.root))

    def test_hand_edit_of_the_page_fails(self):
        self.edit("docs/contract/tool-reference.md", "| `rows` |", "| `lines` |")
        self.assertFailsWith(self.check(self.root), "tool-reference.md")

    def test_regenerating_the_copy_makes_it_pass_again(self):
        self.edit("schema/mcp/process_resize.input.json", "Rows, 1 to 1000.", "Rows, 1 to 999.")
        self.assertPasses(run(os.path.join(REPO, "gen", "docgen.py"), "--root", self.root))
        self.assertPasses(self.check(self.root))


class TouchPointsTest(TmpRepo):
    def check(self, root):
        return run(os.path.join(HERE, "check_touchpoints.py"), "--root", root)

    def remove(self, rel):
        path = os.path.join(self.root, rel)
        (shutil.rmtree if os.path.isdir(path) else os.remove)(path)

    def test_repository_passes(self):
        self.assertPasses(self.check(REPO))

    def test_unmodified_copy_passes(self):
        self.assertPasses(self.check(self.root))

    def test_unregistered_handler_fails(self):
        self.edit("src/tools/tools.c", 'cs_mcp_set_tool(srv, "process_resize", ',
                  'cs_mcp_set_tool(srv, "process_resize_x", ')
        self.assertFailsWith(self.check(self.root), "tools-c:", '"process_resize"')

    def test_missing_executor_case_fails(self):
        self.edit("src/runner/runner_exec.c",
                  "case CSW_RUNNER_WIRE_OP_RESIZE:\n        if ((p = pending_new",
                  "case CSW_RUNNER_WIRE_OP_RESIZE_GONE:\n        if ((p = pending_new")
        self.assertFailsWith(self.check(self.root), "runner-exec:", "CSW_RUNNER_WIRE_OP_RESIZE")

    def test_missing_wire_op_fails(self):
        self.edit("schema/runner/wire.json", '"const": "resize"', '"const": "resize2"')
        self.assertFailsWith(self.check(self.root), "wire-op:", "op_resize")

    def test_missing_golden_cases_fail(self):
        self.remove("tests/golden/mcp_process_resize_output/invalid")
        self.remove("tests/golden/runner_wire/valid/10-request-resize.json")
        self.assertFailsWith(self.check(self.root), "golden:",
                             "mcp_process_resize_output/invalid", 'op "resize"')

    def test_missing_corpus_fails(self):
        self.remove("fuzz/corpus/mcp_workspace_info_input")
        self.assertFailsWith(self.check(self.root), "corpus:", "mcp_workspace_info_input")

    def test_missing_lock_entry_fails(self):
        path = os.path.join(self.root, "schema/frozen.lock")
        with open(path, encoding="utf-8") as f:
            lock = json.load(f)
        del lock["schemas"]["mcp/find.output.json"]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(lock, f)
        self.assertFailsWith(self.check(self.root), "frozen-lock:", "mcp/find.output.json")

    def test_tool_missing_from_a_list_fails(self):
        self.edit("tests/unit/test_base.c", '"process_resize"', '"process_resize2"')
        self.assertFailsWith(self.check(self.root), "tool-lists:", "tests/unit/test_base.c")

    def test_tool_missing_from_the_contract_fails(self):
        self.edit("docs/contract/tools.md", "### 3.10 process_resize", "### 3.10 resize")
        self.assertFailsWith(self.check(self.root), "contract-docs:", "3.N process_resize")

    def test_new_tool_without_anything_fails_everywhere(self):
        src = os.path.join(self.root, "schema/mcp/process_resize.input.json")
        with open(src, encoding="utf-8") as f:
            doc = json.load(f)
        doc["x-cs-tool"]["name"], doc["x-cs-tool"]["index"] = "process_rename", 11
        with open(os.path.join(self.root, "schema/mcp/process_rename.input.json"), "w",
                  encoding="utf-8") as f:
            json.dump(doc, f)
        rc, out = self.check(self.root)
        self.assertEqual(rc, 1, out)
        for point in ("wire-op table has no row for process_rename", "schema-output:",
                      "frozen-lock:", "tools-c:", "golden:", "corpus:", "tool-lists:",
                      "e2e:", "contract-docs:"):
            self.assertIn(point, out)

    def test_guide_naming_an_unchecked_place_fails(self):
        self.edit("docs/adding-a-tool.md", "| `e2e` |", "| `e2e-soak` |")
        self.assertFailsWith(self.check(self.root), "`e2e-soak`", "does not name `e2e`")

    def test_guide_without_a_tool_row_fails(self):
        self.edit("docs/adding-a-tool.md", "| `process_resize` | `resize` |\n", "")
        self.assertFailsWith(self.check(self.root), "no row for process_resize")

    def test_unlisted_fuzz_harness_fails(self):
        self.edit("docs/fuzzing.md", "| `deny_match_fuzz` | `fuzz/deny_match_fuzz.c` |",
                  "| `deny_fuzz` | `fuzz/deny.c` |")
        self.assertFailsWith(self.check(self.root), "`deny_match_fuzz`",
                             "`fuzz/deny_match_fuzz.c`")


class CitationsTest(TmpRepo):
    PARTS = ("docs",)

    def setUp(self):
        super().setUp()
        os.makedirs(os.path.join(self.root, "src", "m"))
        os.makedirs(os.path.join(self.root, "tests", "e2e"))

    def write(self, rel, text):
        with open(os.path.join(self.root, rel), "w", encoding="utf-8") as f:
            f.write(text)

    def check(self, root):
        return run(os.path.join(HERE, "check_citations.py"), "--root", root)

    def test_repository_passes(self):
        self.assertPasses(self.check(REPO))

    def test_docs_citations_pass(self):
        self.write("src/m/m.c", "/* m: a module (docs/contract/runtime.md section 5, and\n"
                   " * docs/contract/sandbox.md sections 1, 3 and 4; docs/contract/tools.md\n"
                   " * section 6; docs/contract/errors.md §1; docs/process.md, \"Cancellation\";\n"
                   " * docs/contract/runtime.md sections 3-5). */\nint m;\n")
        self.assertPasses(self.check(self.root))

    def test_spec_file_without_docs_path_fails(self):
        for name in ("runtime.md", "sandbox.md", "contract.md", "patch-format.md",
                     "../shared/spec/sandbox.md"):
            self.write("src/m/m.c", f"/* the worker ({name} section 4) */\nint m;\n")
            self.assertFailsWith(self.check(self.root), "src/m/m.c:1", "outside docs/")

    def test_python_comment_and_docstring_fail(self):
        self.write("tests/e2e/test_x.py", '"""Suite (sandbox.md section 5)."""\n'
                   "X = 1  # runtime.md section 3\n")
        self.assertFailsWith(self.check(self.root), "test_x.py:1", "test_x.py:2")

    def test_missing_page_fails(self):
        self.write("src/m/m.c", "/* see docs/contract/lifetime.md section 2 */\nint m;\n")
        self.assertFailsWith(self.check(self.root), "docs/contract/lifetime.md: no such page")

    def test_missing_section_fails(self):
        self.write("src/m/m.c", "/* docs/contract/runtime.md section 9 */\nint m;\n")
        self.assertFailsWith(self.check(self.root), "no section 9")

    def test_missing_section_on_a_wrapped_line_fails(self):
        self.write("src/m/m.c", "/* the lease (docs/contract/sandbox.md sections 1 and\n"
                   " * 8) */\nint m;\n")
        self.assertFailsWith(self.check(self.root), "no section 8")

    def test_missing_anchor_fails(self):
        self.write("src/m/m.c", "// docs/runner-isolation.md#no-such-heading\nint m;\n")
        self.assertFailsWith(self.check(self.root), "#no-such-heading: no heading")

    def test_string_data_is_not_a_citation(self):
        self.write("tests/e2e/test_x.py", 'PATHS = ["docs/gone.md", "runtime.md"]\n')
        self.write("src/m/m.c", 'const char *p = "docs/gone.md runtime.md";\n')
        self.assertPasses(self.check(self.root))


if __name__ == "__main__":
    unittest.main()
