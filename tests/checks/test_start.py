"""scripts/start.sh as an MCP client spawns it (docs/contract/runtime.md section 2; issue 31):
`scripts/start.sh --transport stdio` writes nothing but MCP messages to stdout, and a start on
an up-to-date build neither compiles nor runs cmake.

Runs on the build tree CTest was built in (CS_BUILD_DIR, given to start.sh as
CS_START_BUILD_DIR), which is up to date when CTest runs. A `cmake` earlier in PATH records each
call and hands it to the real one, so "no rebuild" is seen twice: the shim's log, and the
modification times of every object, archive and binary in the tree. Skips (77) when
scripts/bootstrap.sh --check finds a package missing: this test never runs apt.
"""

import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
START = os.path.join(REPO, "scripts", "start.sh")
BOOTSTRAP = os.path.join(REPO, "scripts", "bootstrap.sh")
BINS = ("codespace-mcp", "codespace-runtime", "codespace-linux-sandbox")
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test_start", "version": "1"}}}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TIMEOUT = 240  # a first start may run a no-op `cmake --build` on a busy machine


def build_outputs(build):
    """{path: mtime_ns} of every object, archive and program the build made."""
    out = {}
    for d, subdirs, files in os.walk(build):
        subdirs[:] = [s for s in subdirs if s not in ("Testing", "npm-cache")]
        for f in files:
            p = os.path.join(d, f)
            if f.endswith((".o", ".a")) or (f in BINS and os.path.isfile(p)):
                out[p] = os.stat(p).st_mtime_ns
    return out


class StartScript(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.build = os.environ.get("CS_BUILD_DIR", "")
        if not cls.build or not os.path.isfile(os.path.join(cls.build, "CMakeCache.txt")):
            raise unittest.SkipTest("CS_BUILD_DIR names no configured build tree")
        for b in BINS:
            if not os.access(os.path.join(cls.build, "src", "main", b), os.X_OK):
                raise unittest.SkipTest(f"{b} is not built in {cls.build}")
        chk = subprocess.run(["sh", BOOTSTRAP, "--check"], capture_output=True, text=True,
                             timeout=60)
        if chk.returncode != 0:
            raise unittest.SkipTest("bootstrap would install packages, which this test never "
                                    f"does: {chk.stderr.strip()}")
        real = shutil.which("cmake")
        if not real:
            raise unittest.SkipTest("no cmake in PATH")
        cls.tmp = tempfile.mkdtemp(prefix="cs-start-")
        cls.shim_dir = os.path.join(cls.tmp, "bin")
        os.mkdir(cls.shim_dir)
        cls.cmake_log = os.path.join(cls.tmp, "cmake-calls")
        shim = os.path.join(cls.shim_dir, "cmake")
        with open(shim, "w", encoding="utf-8") as f:
            f.write(f'#!/bin/sh\necho "$*" >>"{cls.cmake_log}"\nexec "{real}" "$@"\n')
        os.chmod(shim, stat.S_IRWXU)
        cls.stamp = os.path.join(cls.build, ".start-stamp")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def cmake_calls(self):
        try:
            with open(self.cmake_log, encoding="utf-8") as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def start(self):
        """Runs start.sh --transport stdio with an initialize, initialized and tools/list on
        stdin. Returns (stdout lines, stderr, seconds, cmake calls made by this start)."""
        before = len(self.cmake_calls())
        home = os.path.join(self.tmp, "home")
        os.makedirs(home, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env.update({"PATH": self.shim_dir + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
                    "HOME": home, "XDG_STATE_HOME": os.path.join(home, "state"),
                    "CS_START_BUILD_DIR": self.build,
                    "CODESPACE_DEMO_DIR": os.path.join(self.tmp, "demo")})
        stdin = "".join(json.dumps(m) + "\n" for m in (INIT, INITIALIZED, LIST))
        t0 = time.monotonic()
        p = subprocess.run(["sh", START, "--transport", "stdio", "--operations-db", ":memory:"],
                           input=stdin, capture_output=True, text=True, env=env,
                           timeout=TIMEOUT, cwd=self.tmp)
        took = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, p.stderr[-4000:])
        return p.stdout.splitlines(), p.stderr, took, self.cmake_calls()[before:]

    def check_stdout(self, lines, stderr):
        """Every stdout line is a JSON-RPC reply; the first answers the initialize."""
        self.assertTrue(lines, "nothing on stdout; stderr:\n" + stderr[-4000:])
        for i, line in enumerate(lines):
            try:
                msg = json.loads(line)
            except ValueError:
                self.fail(f"stdout line {i + 1} is not JSON: {line[:200]!r}")
            self.assertEqual(msg.get("jsonrpc"), "2.0", line[:200])
        first = json.loads(lines[0])
        self.assertEqual(first.get("id"), 1, lines[0][:300])
        self.assertEqual(first["result"]["protocolVersion"], "2025-06-18")
        self.assertEqual(first["result"]["serverInfo"]["name"], "codespace")
        replies = [json.loads(line) for line in lines if "id" in json.loads(line)]
        self.assertEqual([r["id"] for r in replies], [1, 2], "one reply per request")
        tools = {t["name"] for t in replies[1]["result"]["tools"]}
        self.assertIn("workspace_info", tools)

    def direct_start(self):
        """The same session straight from the binary: the baseline start.sh adds to."""
        stdin = "".join(json.dumps(m) + "\n" for m in (INIT, INITIALIZED, LIST))
        demo = os.path.join(self.tmp, "demo")
        os.makedirs(demo, exist_ok=True)
        t0 = time.monotonic()
        p = subprocess.run([os.path.join(self.build, "src", "main", "codespace-mcp"),
                            "--workspace", demo, "--transport", "stdio",
                            "--operations-db", ":memory:"],
                           input=stdin, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        return time.monotonic() - t0

    def test_stdout_is_mcp_only_and_an_up_to_date_build_is_not_rebuilt(self):
        try:
            os.unlink(self.stamp)
        except FileNotFoundError:
            pass
        outputs = build_outputs(self.build)
        self.assertTrue(any(p.endswith("codespace-mcp") for p in outputs))

        # First start: no stamp, so start.sh runs cmake --build, whose progress lines must all
        # go to stderr; the tree is up to date, so nothing compiles.
        lines, err, took1, calls = self.start()
        self.check_stdout(lines, err)
        self.assertEqual(len(calls), 1, calls)
        self.assertIn("--build", calls[0])
        self.assertIn("start: building", err)
        self.assertTrue("Built target codespace-mcp" in err or "no work to do" in err,
                        "cmake's output belongs on stderr:\n" + err[-2000:])
        self.assertEqual(build_outputs(self.build), outputs,
                         "an up-to-date tree was rebuilt (or CTest ran on a stale build)")
        self.assertTrue(os.path.isfile(self.stamp))

        # Second start: nothing changed, so no cmake at all.
        lines, err, took2, calls = self.start()
        self.check_stdout(lines, err)
        self.assertEqual(calls, [], "a start on an up-to-date build ran cmake")
        self.assertIn("is up to date", err)
        self.assertEqual(build_outputs(self.build), outputs)

        base = min(self.direct_start() for _ in range(2))
        took2 = min(took2, self.start()[2])
        print(f"\nfirst start {took1:.2f} s, up-to-date start {took2:.2f} s, "
              f"the binary alone {base:.2f} s: start.sh adds {took2 - base:.2f} s")
        # bootstrap's one dpkg-query and a find over the sources; a make run would be seconds.
        self.assertLess(took2 - base, 3.0)

    def test_a_source_newer_than_the_stamp_runs_the_build(self):
        # A stamp older than the sources (as after an edit or a checkout): the next start hands
        # the tree to cmake --build again. The sources did not really change, so make still
        # compiles nothing.
        lines, err, _, _ = self.start()  # leaves a fresh stamp
        self.check_stdout(lines, err)
        os.utime(self.stamp, (0, 0))
        outputs = build_outputs(self.build)
        lines, err, _, calls = self.start()
        self.check_stdout(lines, err)
        self.assertEqual(len(calls), 1, calls)
        self.assertIn("start: building", err)
        self.assertEqual(build_outputs(self.build), outputs)
        self.assertGreater(os.stat(self.stamp).st_mtime, 1e9, "the stamp is renewed")


if __name__ == "__main__":
    unittest.main()
