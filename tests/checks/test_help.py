"""The three programs' --help against docs/operations.md (issue 31; docs/operations.md, first
paragraph): every flag (--xxx) and CODESPACE_* variable any --help prints is on that page, and
every one the page names is in some --help; --help and --version exit 0. Nothing is listed here
by hand: both sides are parsed, so a flag added to a program fails this test until the page
has it, and the reverse.

Exemptions, each checked rather than assumed:
- CODESPACE_TEST_* variables are test hooks: never in a --help; the page may name them.
- A variable or flag the page names that is not a program's but one of the repository's own
  files' (deploy/compose.yml's CODESPACE_FIXTURE_*, scripts/start.sh's CODESPACE_DEMO_DIR, a
  script's own option) counts when that file really uses it.
- A name written as a pattern (`--tls-*`, `CODESPACE_RUNNER_*`) is no name.

Also: README.md and docs/ point into the repository, never to a contract outside it
(docs/contract/ is the contract).

Binaries from CODESPACE_MCP_BIN, CODESPACE_RUNTIME_BIN and CODESPACE_LINUX_SANDBOX_BIN (CTest
sets them); each is run with an empty environment.
"""

import glob
import os
import re
import subprocess
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(REPO, "docs", "operations.md")
PROGRAMS = (("codespace-mcp", "CODESPACE_MCP_BIN"),
            ("codespace-runtime", "CODESPACE_RUNTIME_BIN"),
            ("codespace-linux-sandbox", "CODESPACE_LINUX_SANDBOX_BIN"))
TEST_ONLY = "CODESPACE_TEST_"
# A name, not followed by more name characters or by '*' (a pattern such as --tls-*).
FLAG = re.compile(r"(?<![\w-])--[A-Za-z0-9][A-Za-z0-9-]*(?![\w*-])")
VAR = re.compile(r"(?<![\w$])CODESPACE_[A-Z0-9_]*[A-Z0-9](?![\w*])")
# Files of the repository that read variables or options of their own.
OWN_FILES = ("deploy/compose.yml", "scripts/*.sh")
SCRIPT_OPTION = re.compile(r"^\s*(--[a-z][a-z0-9-]*)\)", re.M)


def names(text):
    """-> (flags, variables) named in text."""
    return set(FLAG.findall(text)), set(VAR.findall(text))


def own_names(root):
    """-> (flags, variables) the repository's own files use: the options a script's case
    statement takes, and every CODESPACE_* variable those files mention."""
    flags, variables = set(), set()
    for pattern in OWN_FILES:
        for path in glob.glob(os.path.join(root, pattern)):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            variables |= set(VAR.findall(text))
            if path.endswith(".sh"):
                flags |= set(SCRIPT_OPTION.findall(text))
    return flags, variables


def compare(helps, doc_text, own=(set(), set())):
    """helps: {program: help text}. -> problems, one line each."""
    problems = []
    doc_flags, doc_vars = names(doc_text)
    all_flags, all_vars = set(), set()
    for prog, text in sorted(helps.items()):
        flags, variables = names(text)
        all_flags |= flags
        all_vars |= variables
        for v in sorted(v for v in variables if v.startswith(TEST_ONLY)):
            problems.append(f"{prog} --help names the test-only variable {v}")
        for f in sorted(flags - doc_flags):
            problems.append(f"{prog} --help has {f}, docs/operations.md does not")
        for v in sorted(variables - doc_vars):
            if not v.startswith(TEST_ONLY):
                problems.append(f"{prog} --help has {v}, docs/operations.md does not")
    own_flags, own_vars = own
    for f in sorted(doc_flags - all_flags - own_flags):
        problems.append(f"docs/operations.md names {f}, which no program's --help has")
    for v in sorted(doc_vars - all_vars - own_vars):
        if not v.startswith(TEST_ONLY):
            problems.append(f"docs/operations.md names {v}, which no program's --help has")
    return problems


def run(binary, arg):
    return subprocess.run([binary, arg], env={}, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30)


class Help(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bins = {}
        for prog, var in PROGRAMS:
            path = os.environ.get(var, "")
            if not os.access(path, os.X_OK):
                raise unittest.SkipTest(f"{var} does not name the built {prog}")
            cls.bins[prog] = path
        with open(DOC, encoding="utf-8") as f:
            cls.doc = f.read()

    def helps(self):
        out = {}
        for prog, path in self.bins.items():
            p = run(path, "--help")
            self.assertEqual(p.returncode, 0, f"{prog} --help: {p.stderr}")
            out[prog] = p.stdout
        return out

    def test_help_and_version_exit_0_on_stdout(self):
        for prog, path in self.bins.items():
            p = run(path, "--help")
            self.assertEqual(p.returncode, 0, f"{prog} --help exited {p.returncode}: {p.stderr}")
            self.assertIn("usage: " + prog, p.stdout, prog)
            self.assertEqual(p.stderr, "", prog)
            self.assertIn("--version", p.stdout, prog)
            p = run(path, "--version")
            self.assertEqual(p.returncode, 0, f"{prog} --version exited {p.returncode}")
            self.assertRegex(p.stdout, r"^" + re.escape(prog) + r" \d+\.\d+\.\d+\n$", prog)

    def test_each_help_and_the_operations_page_agree(self):
        helps = self.helps()
        for prog, text in helps.items():
            flags, _ = names(text)
            self.assertIn("--help", flags, f"{prog}: the parser found no flags in its --help")
        problems = compare(helps, self.doc, own_names(REPO))
        self.assertEqual(problems, [], "\n" + "\n".join(problems))

    def test_the_comparison_fails_both_ways(self):
        # The parser and the comparison on made-up texts: a gap on either side, a test hook in a
        # --help, and a pattern that is no name.
        helps = {"a": "usage: a [--one N] [--two]\n  CODESPACE_ONE  CODESPACE_TEST_X\n",
                 "b": "usage: b --three=V (CODESPACE_THREE)\n"}
        doc = ("`--one`, `--three`, `--four` and `--tls-*`; CODESPACE_ONE, CODESPACE_RUNNER_*, "
               "CODESPACE_FOUR, CODESPACE_TEST_Y and `CODESPACE_FIXTURE_Z`.")
        problems = compare(helps, doc, ({"--five"}, {"CODESPACE_FIXTURE_Z"}))
        self.assertEqual(problems, [
            "a --help names the test-only variable CODESPACE_TEST_X",
            "a --help has --two, docs/operations.md does not",
            "b --help has CODESPACE_THREE, docs/operations.md does not",
            "docs/operations.md names --four, which no program's --help has",
            "docs/operations.md names CODESPACE_FOUR, which no program's --help has",
        ])

    def test_own_files_really_use_what_they_exempt(self):
        flags, variables = own_names(REPO)
        self.assertIn("--check", flags)  # scripts/bootstrap.sh
        self.assertIn("CODESPACE_FIXTURE_WORKSPACE", variables)  # deploy/compose.yml
        self.assertIn("CODESPACE_DEMO_DIR", variables)  # scripts/start.sh

    def test_docs_point_into_the_repository(self):
        pages = [os.path.join(REPO, "README.md")]
        pages += glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True)
        link = re.compile(r"\]\(\s*<?([^)\s>#]+)")
        root = os.path.realpath(REPO)
        problems = []
        for page in pages:
            with open(page, encoding="utf-8") as f:
                text = f.read()
            rel = os.path.relpath(page, REPO)
            if "shared/spec" in text:
                problems.append(f"{rel}: names shared/spec, outside the repository; the contract "
                                "is docs/contract/")
            for target in link.findall(text):
                if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("/"):
                    continue
                dest = os.path.realpath(os.path.join(os.path.dirname(page), target))
                if not (dest + os.sep).startswith(root + os.sep):
                    problems.append(f"{rel}: link {target} leaves the repository")
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


if __name__ == "__main__":
    unittest.main()
