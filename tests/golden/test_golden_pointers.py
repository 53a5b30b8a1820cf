"""Proof that the golden test checks where an invalid case is rejected, not only that it is.

Each test copies tests/golden into a temp directory, breaks one thing and runs run_golden.py on
the copy: a recorded pointer that is not where the case fails, a case that now also fails
earlier (the C decoder stops there), a missing .pointer file and a stray one must each fail the
run, naming the case. GOLDEN_CHECK names the golden_check program, SCHEMA_DIR the schemas.
Standard library only.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CASE = os.path.join("mcp_read_input", "invalid", "10-offset-below-min")


class GoldenPointerTest(unittest.TestCase):
    def setUp(self):
        self.checker = os.environ.get("GOLDEN_CHECK")
        self.schema_dir = os.environ.get("SCHEMA_DIR")
        self.assertTrue(self.checker and self.schema_dir, "GOLDEN_CHECK and SCHEMA_DIR must be set")
        self.tmp = tempfile.mkdtemp(prefix="cs-golden-")
        self.addCleanup(shutil.rmtree, self.tmp)
        self.golden = os.path.join(self.tmp, "golden")
        shutil.copytree(HERE, self.golden,
                        ignore=shutil.ignore_patterns("*.py", "*.c", "CMakeLists.txt",
                                                      "__pycache__"))

    def run_golden(self):
        p = subprocess.run([sys.executable, os.path.join(HERE, "run_golden.py"), "--checker",
                            self.checker, "--schema-dir", self.schema_dir, "--golden-dir",
                            self.golden], capture_output=True, text=True, timeout=300)
        return p.returncode, p.stdout

    def path(self, suffix):
        return os.path.join(self.golden, CASE + suffix)

    def test_copy_passes(self):
        rc, out = self.run_golden()
        self.assertEqual(rc, 0, out)
        with open(self.path(".pointer"), encoding="utf-8") as f:
            self.assertEqual(f.read(), "/offset\n")

    def test_wrong_pointer_fails_on_both_sides(self):
        with open(self.path(".pointer"), "w", encoding="utf-8") as f:
            f.write("/limit\n")
        rc, out = self.run_golden()
        self.assertEqual(rc, 1, out)
        lines = [ln for ln in out.splitlines() if ln.startswith("WRONG POINTER " + CASE)]
        self.assertEqual(len(lines), 2, out)
        self.assertTrue(any("oracle rejects it at '/offset'" in ln for ln in lines), out)
        self.assertTrue(any("C rejects it at '/offset'" in ln for ln in lines), out)

    def test_rejected_for_another_reason_fails(self):
        with open(self.path(".json"), encoding="utf-8") as f:
            doc = json.load(f)
        doc["workspace_id"] = 7  # a second fault, met first by the C decoder
        with open(self.path(".json"), "w", encoding="utf-8") as f:
            json.dump(doc, f)
        rc, out = self.run_golden()
        self.assertEqual(rc, 1, out)
        self.assertIn(f"WRONG POINTER {CASE}.json: recorded '/offset', C rejects it at "
                      "'/workspace_id'", out)

    def test_missing_pointer_fails(self):
        os.unlink(self.path(".pointer"))
        rc, out = self.run_golden()
        self.assertEqual(rc, 1, out)
        self.assertIn(f"NO POINTER {CASE}.json: record where it must be rejected in "
                      "10-offset-below-min.pointer (C rejects it at '/offset', the oracle at "
                      "'/offset')", out)

    def test_stray_pointer_fails(self):
        stray = os.path.join(self.golden, "mcp_read_input", "valid", "01-minimal-defaults-omitted.pointer")
        with open(stray, "w", encoding="utf-8") as f:
            f.write("\n")
        rc, out = self.run_golden()
        self.assertEqual(rc, 1, out)
        self.assertIn("a pointer beside a valid case", out)


if __name__ == "__main__":
    unittest.main()
