"""Proof that tests/unittest_main.py reports a suite that ran nothing as skipped, not passed.

Each case writes a small unittest module into a temp directory and runs the runner on it as
CTest does; the last case registers such a suite in a throwaway CMake project and checks that
ctest itself prints it as Skipped (CS_CMAKE and CS_CTEST name the tools; without them that case
fails, it never skips). Standard library only.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "unittest_main.py")

MODULES = {
    "all_class_skip": """
        import unittest
        class A(unittest.TestCase):
            @classmethod
            def setUpClass(cls):
                raise unittest.SkipTest("no sandbox here")
            def test_one(self):
                pass
            def test_two(self):
                pass
    """,
    "all_method_skip": """
        import unittest
        class A(unittest.TestCase):
            def test_one(self):
                self.skipTest("nothing to run")
            @unittest.skip("nor here")
            def test_two(self):
                pass
    """,
    "class_skip_and_pass": """
        import unittest
        class A(unittest.TestCase):
            @classmethod
            def setUpClass(cls):
                raise unittest.SkipTest("no sandbox here")
            def test_one(self):
                pass
        class B(unittest.TestCase):
            def test_two(self):
                pass
    """,
    "some_skip": """
        import unittest
        class A(unittest.TestCase):
            def test_one(self):
                self.skipTest("not here")
            def test_two(self):
                pass
    """,
    "fails": """
        import unittest
        class A(unittest.TestCase):
            def test_one(self):
                self.fail("broken")
    """,
    "empty": """
        import unittest
    """,
}


class RunnerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cs-unittest-main-")
        for name, text in MODULES.items():
            with open(os.path.join(cls.tmp, name + ".py"), "w", encoding="utf-8") as f:
                f.write(textwrap.dedent(text))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def status(self, module, ci=None):
        env = dict(os.environ)
        env.pop("CI", None)
        if ci is not None:
            env["CI"] = ci
        p = subprocess.run([sys.executable, RUNNER, module], cwd=self.tmp, env=env,
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr

    def test_setupclass_skip_everything_is_77(self):
        rc, out = self.status("all_class_skip")
        self.assertEqual(rc, 77, out)
        self.assertIn("every test skipped", out)

    def test_every_method_skipped_is_77(self):
        self.assertEqual(self.status("all_method_skip")[0], 77)

    def test_one_test_ran_is_0(self):
        self.assertEqual(self.status("class_skip_and_pass")[0], 0)
        self.assertEqual(self.status("some_skip")[0], 0)

    def test_failure_is_1(self):
        self.assertEqual(self.status("fails")[0], 1)

    def test_no_test_is_1(self):
        self.assertEqual(self.status("empty")[0], 1)

    def test_ci_turns_skip_everything_into_failure(self):
        for ci in ("true", "1"):
            rc, out = self.status("all_class_skip", ci=ci)
            self.assertEqual(rc, 1, out)
            self.assertIn("CI requires", out)
        self.assertEqual(self.status("some_skip", ci="true")[0], 0)

    def test_ctest_reports_skipped(self):
        cmake, ctest = os.environ.get("CS_CMAKE"), os.environ.get("CS_CTEST")
        self.assertTrue(cmake and ctest, "CS_CMAKE and CS_CTEST must name cmake and ctest")
        proj = os.path.join(self.tmp, "proj")
        os.makedirs(proj, exist_ok=True)
        with open(os.path.join(proj, "CMakeLists.txt"), "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(f"""
                cmake_minimum_required(VERSION 3.25)
                project(skipproof NONE)
                enable_testing()
                add_test(NAME skipper COMMAND "{sys.executable}" "{RUNNER}" all_class_skip
                         WORKING_DIRECTORY "{self.tmp}")
                add_test(NAME runner COMMAND "{sys.executable}" "{RUNNER}" some_skip
                         WORKING_DIRECTORY "{self.tmp}")
                set_tests_properties(skipper runner PROPERTIES SKIP_RETURN_CODE 77)
            """))
        build = os.path.join(proj, "b")
        env = dict(os.environ)
        env.pop("CI", None)
        subprocess.run([cmake, "-S", proj, "-B", build], env=env, check=True,
                       capture_output=True, timeout=120)
        p = subprocess.run([ctest, "--test-dir", build], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        lines = p.stdout.splitlines()
        skipper = [ln for ln in lines if " skipper " in ln]
        runner = [ln for ln in lines if " runner " in ln]
        self.assertTrue(skipper and "Skipped" in skipper[0], p.stdout)
        self.assertTrue(runner and "Passed" in runner[0], p.stdout)


class RegistrationTest(unittest.TestCase):
    def test_no_suite_bypasses_the_runner(self):
        """Every Python suite CTest runs goes through CS_UNITTEST, never `python3 -m unittest`
        (which exits 0 when everything skipped)."""
        repo = os.path.dirname(HERE)
        offenders = []
        for top in ("tests", "gen", "fuzz", "src", "helper"):
            for dirpath, dirnames, filenames in os.walk(os.path.join(repo, top)):
                dirnames[:] = [d for d in dirnames if d not in ("node_modules", "__pycache__")]
                if "CMakeLists.txt" not in filenames:
                    continue
                path = os.path.join(dirpath, "CMakeLists.txt")
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        if "-m unittest" in line and not line.lstrip().startswith("#"):
                            offenders.append(f"{os.path.relpath(path, repo)}:{n}")
        self.assertEqual(offenders, [], "register with COMMAND ${CS_UNITTEST} <module> and "
                                        "SKIP_RETURN_CODE 77")


if __name__ == "__main__":
    unittest.main()
