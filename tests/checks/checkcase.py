"""What the proof tests of tests/checks/ share: running a check script and judging its exit.

run(path, *args) runs a Python script (a path, or a name under tests/checks/) and returns
(exit status, stdout + stderr); CheckCase gives every test a temporary directory (self.tmp) and
the two assertions the proofs make: the check passed, or it failed naming what was wrong.
Standard library only.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def run(script, *args):
    path = script if os.path.isabs(script) else os.path.join(HERE, script)
    r = subprocess.run([sys.executable, path, *args], capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout + r.stderr


class CheckCase(unittest.TestCase):
    PREFIX = "cs-checks-"

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix=self.PREFIX)
        self.addCleanup(shutil.rmtree, self.tmp)

    def assertFailsWith(self, result, *needles):
        rc, out = result
        self.assertEqual(rc, 1, out)
        for n in needles:
            self.assertIn(n, out)

    def assertPasses(self, result):
        rc, out = result
        self.assertEqual(rc, 0, out)
