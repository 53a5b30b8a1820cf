#!/usr/bin/python3
"""Proof tests for the contract checks of issue 19: each passes on the repository and fails,
naming the problem and the fix, on a temporary copy that breaks one rule.

- gen/docgen.py --check: docs/contract/tool-reference.md is what the schemas give.

Standard library (and jsonschema, which docgen.py needs); the repository is never modified.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def run(path, *args):
    r = subprocess.run([sys.executable, path, *args], capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout + r.stderr


class TmpRepo(unittest.TestCase):
    """A copy of the parts of the repository a check reads, under self.root."""

    PARTS = ("schema", "docs", "gen")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cs-contract-")
        self.addCleanup(shutil.rmtree, self.tmp)
        self.root = os.path.join(self.tmp, "repo")
        for part in self.PARTS:
            shutil.copytree(os.path.join(REPO, part), os.path.join(self.root, part),
                            ignore=shutil.ignore_patterns("__pycache__"))

    def edit(self, rel, old, new):
        path = os.path.join(self.root, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.assertIn(old, text, rel)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))

    def assertFailsWith(self, result, *needles):
        rc, out = result
        self.assertEqual(rc, 1, out)
        for n in needles:
            self.assertIn(n, out)

    def assertPasses(self, result):
        rc, out = result
        self.assertEqual(rc, 0, out)


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

    def test_hand_edit_of_the_page_fails(self):
        self.edit("docs/contract/tool-reference.md", "| `rows` |", "| `lines` |")
        self.assertFailsWith(self.check(self.root), "tool-reference.md")

    def test_regenerating_the_copy_makes_it_pass_again(self):
        self.edit("schema/mcp/process_resize.input.json", "Rows, 1 to 1000.", "Rows, 1 to 999.")
        self.assertPasses(run(os.path.join(REPO, "gen", "docgen.py"), "--root", self.root))
        self.assertPasses(self.check(self.root))


if __name__ == "__main__":
    unittest.main()
