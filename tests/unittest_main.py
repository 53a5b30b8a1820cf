#!/usr/bin/python3
"""Runs Python unittest suites for CTest, so that a suite that ran nothing reports Skipped.

    /usr/bin/python3 tests/unittest_main.py MODULE [MODULE...]     (from the suite's directory)

The same as `python3 -m unittest -v MODULE...`, with one difference in the exit status:

    0   every test ran and passed (some may have skipped);
    1   a test failed or errored, or no test was found;
    77  every test skipped (a setUpClass or setUpModule that raised SkipTest counts): CTest's
        SKIP_RETURN_CODE, set on every suite registered through this runner, shows it as Skipped
        instead of Passed.

In CI (CI=true or CI=1, as scripts/test.sh and .ci/run see it) a suite that skipped everything
fails with status 1 instead: CI must run every suite (the sandbox suites already turn "no
namespaces" into a failure through CODESPACE_REQUIRE_LINUX_SANDBOX=1).

Standard library only.
"""

import os
import sys
import unittest

SKIP = 77


def in_ci():
    return os.environ.get("CI", "") in ("true", "1")


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.stderr.write("usage: unittest_main.py MODULE [MODULE...]\n")
        return 2
    # `python3 -m unittest` imports from the working directory; a script's sys.path[0] is its
    # own directory instead.
    sys.path.insert(0, os.getcwd())
    suite = unittest.defaultTestLoader.loadTestsFromNames(argv[1:])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if not result.wasSuccessful():
        return 1
    if result.testsRun == 0 and not result.skipped:
        print("unittest_main: no test found", file=sys.stderr)
        return 1
    # A class skipped in setUpClass adds one skip entry and runs none of its tests; a skipped
    # test method counts in testsRun and in skipped.
    ran = result.testsRun - sum(1 for t, _ in result.skipped if isinstance(t, unittest.TestCase))
    if ran > 0:
        return 0
    if in_ci():
        print("unittest_main: FAIL: every test skipped, and CI requires the suite to run",
              file=sys.stderr)
        return 1
    print("unittest_main: every test skipped: reporting Skipped (exit 77)", file=sys.stderr)
    return SKIP


if __name__ == "__main__":
    sys.exit(main(sys.argv))
