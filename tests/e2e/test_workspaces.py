#!/usr/bin/python3
"""End-to-end tests of discovery and per-workspace limits (issue 28; docs/contract/tools.md
section 4, docs/contract/runtime.md section 5, docs/operations.md "Process limits") and of the
agent-facing answers issue 28 made consistent, through the real binaries over stdio.

- WorkspacesCase: one server with a four-workspace registry (ids given out of order, one upper
  case, descriptions, a shared one, "beta" with limits {timeout_ms 1000, output_ring_bytes 4096,
  max_live_processes 2}, "alpha" on the defaults): the listing of workspace_info {}, the
  instructions, the limits and process_conflict each workspace reports, beta's `sleep 3` ending
  as `timeout` in about 1 s while alpha's 2 s command (default 30 minutes) runs to completion,
  each workspace's ring (output_lost past 4096 bytes in beta, not in alpha);
- AgentAnswersCase: find with a glob that can never match is INVALID_ARGUMENTS naming /glob (not
  []); read's limit 0 is accepted by the schema tools/list serves and answered OUTPUT_LIMIT; an
  exec_command whose command is a string says use ["sh","-c","..."];
- FlagsCase: the --workspace form's --process-timeout, --max-processes, --output-ring and
  --processes (and the variables as fallbacks); --process-timeout 0 is no time limit (a command
  outlives the 1 s the variable says), CODESPACE_PROCESS_TIMEOUT_SECS=0 is refused;
- LoadRefusalsCase: every registry limit at each bound loads and is reported; past each bound,
  and a bad flag or variable, the server exits 2 naming the key (the JSON path) or the flag;
- WorkerLimitsCase: codespace-runtime alone, driven with wire frames (the executor every runner
  and the remote worker share): an exec's max_live_processes is its workspace's own cap and
  the refusal names it, --max-processes is the runner-wide cap, timeout_ms 0 sets no timer
  (the worker's --timeout-ms 1000 does not apply), output_bytes_cap is the process's ring.

Processes that could outlive a test are `sleep` with a unique duration (test_process.uniq).
Standard library + jsonschema. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_workspaces          (from tests/e2e)
"""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import uuid

from jsonschema import Draft202012Validator

import mcp_stdio
import test_process as tp

SLOW = tp.SLOW
MIB = 1024 * 1024
DEFAULT_LIMITS = {"max_live_processes": 8, "timeout_ms": 1800000, "output_ring_bytes": MIB}


def seq_text(n):
    return "".join("%d\n" % i for i in range(1, n + 1))


def clean_env(state_dir, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
    env["XDG_STATE_HOME"] = state_dir
    env.update(extra or {})
    return env


def limits_of(info):
    return info["execution"]["process"]["capabilities"]["limits"]


class Base(tp.ProcCase):
    def timed_call(self, rid):
        out, err = self.srv.call_wait(rid, timeout=30 * SLOW)
        self.assertIsNone(err, err)
        return out


class WorkspacesCase(Base):
    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.roots, state = tp.make_tree("cs-e2e-ws-", ("alpha", "beta", "gamma", "Zed"))
        # Out of order on purpose: the listing is sorted bytewise ("Zed" before "alpha").
        reg = {"workspaces": {
            "gamma": {"root": cls.roots["gamma"], "profile": "read-only", "network": "enabled",
                      "processes": "shared", "description": "Gamma \u2014 the docs, \u00fcber"},
            "beta": {"root": cls.roots["beta"], "profile": "workspace-write",
                     "description": "Beta: short limits",
                     "limits": {"timeout_ms": 1000, "output_ring_bytes": 4096,
                                "max_live_processes": 2}},
            "alpha": {"root": cls.roots["alpha"], "profile": "workspace-write"},
            "Zed": {"root": cls.roots["Zed"]},
        }}
        registry = os.path.join(cls.tmp, "registry.json")
        with open(registry, "w") as f:
            json.dump(reg, f)
        cls.srv = tp.Server(["--config", registry, "--operations-db", ":memory:"], state)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.close()
        finally:
            tp.kill_leftovers()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_listing_without_a_workspace_id(self):
        want = [
            {"workspace_id": "Zed", "profile": "read-only", "network": "restricted",
             "processes": "exclusive"},
            {"workspace_id": "alpha", "profile": "workspace-write", "network": "restricted",
             "processes": "exclusive"},
            {"workspace_id": "beta", "profile": "workspace-write", "network": "restricted",
             "processes": "exclusive", "description": "Beta: short limits"},
            {"workspace_id": "gamma", "profile": "read-only", "network": "enabled",
             "processes": "shared", "description": "Gamma \u2014 the docs, \u00fcber"},
        ]
        for args in ({}, {"workspace_id": ""}):
            info = self.srv.call("workspace_info", args)
            self.assertIsNone(info["workspace_id"])
            self.assertEqual(info["workspaces"], want)
            self.assertNotIn("execution", info)
            self.assertNotIn("root", info)
        # With an id: that workspace only, no listing.
        info = self.srv.call("workspace_info", {"workspace_id": "beta"})
        self.assertNotIn("workspaces", info)

    def test_instructions_say_how_to_list(self):
        text = self.srv.init_result["instructions"]
        self.assertIn("Call workspace_info with no arguments to list them", text)
        self.assertIn("workspace_id", text)

    def test_limits_and_serialization_per_workspace(self):
        beta = self.srv.call("workspace_info", {"workspace_id": "beta"})
        self.assertEqual(limits_of(beta), {"max_live_processes": 2, "timeout_ms": 1000,
                                           "output_ring_bytes": 4096})
        self.assertEqual(beta["execution"]["serialization"]["process_conflict"], "reject")
        alpha = self.srv.call("workspace_info", {"workspace_id": "alpha"})
        self.assertEqual(limits_of(alpha), DEFAULT_LIMITS)
        gamma = self.srv.call("workspace_info", {"workspace_id": "gamma"})
        self.assertEqual(gamma["execution"]["serialization"]["process_conflict"], "share")
        self.assertEqual(gamma["execution"]["process"], {"available": False})  # read-only

    def test_time_limit_is_per_workspace(self):
        t0 = time.monotonic()
        rb = self.srv.call_start("exec_command", {"workspace_id": "beta", "yield_ms": 10000,
                                                  "command": ["sleep", "3"]})
        ra = self.srv.call_start("exec_command", {
            "workspace_id": "alpha", "yield_ms": 10000,
            "command": ["sh", "-c", "sleep 2; echo done"]})
        beta = self.timed_call(rb)
        t_beta = time.monotonic() - t0
        alpha = self.timed_call(ra)
        t_alpha = time.monotonic() - t0
        self.assertEqual((beta["state"], beta["termination"]), ("exited", "timeout"), beta)
        self.assertNotIn("exit_code", beta)
        self.assertGreaterEqual(t_beta, 0.9)
        self.assertLess(t_beta, 1.0 + 1.5 * SLOW)
        self.assertEqual((alpha["state"], alpha["termination"], alpha["exit_code"],
                          alpha["output"]), ("exited", "exited", 0, "done\n"), alpha)
        self.assertGreaterEqual(t_alpha, 1.9)
        # Past the end of a timed-out process: TIMEOUT naming its own limit.
        err = self.refused("TIMEOUT", "read_process",
                           {"process_id": beta["process_id"], "cursor": beta["cursor"]})
        self.assertIn("(1000 ms)", err["message"])

    def test_ring_is_per_workspace(self):
        expected = seq_text(2000)  # 8,893 bytes
        total = len(expected)
        beta = self.ran(["seq", "1", "2000"], ws="beta")
        self.assertEqual((beta["output_lost"], beta["cursor"]), (True, total), beta["cursor"])
        self.assertEqual(beta["output"], expected[total - 4096:])
        st = self.status(beta["process_id"])
        self.assertEqual((st["output_total"], st["output_retained_from"]), (total, total - 4096))
        alpha = self.ran(["seq", "1", "2000"], ws="alpha")
        self.assertEqual((alpha["output_lost"], alpha["output"]), (False, expected))


class AgentAnswersCase(Base):
    @classmethod
    def setUpClass(cls):
        cls.tmp, roots, state = tp.make_tree("cs-e2e-ws-agent-", ("ws",))
        cls.ws = roots["ws"]
        os.makedirs(os.path.join(cls.ws, "src"))
        for name in ("!x.txt", "a.txt", "src/b.c"):
            with open(os.path.join(cls.ws, name), "w") as f:
                f.write("x\n")
        cls.srv = tp.Server(["--workspace", cls.ws, "--operations-db", ":memory:"], state)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.close()
        finally:
            tp.kill_leftovers()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_find_refuses_a_glob_that_can_never_match(self):
        for glob, why in [("src//*.c", "empty path component"), ("[abc", "no closing ']'"),
                          ("../*.c", "'.' or '..' component"), ("src/./b.c", "'.' or '..'"),
                          ("x\\", "lone backslash")]:
            with self.subTest(glob=glob):
                err = self.refused("INVALID_ARGUMENTS", "find",
                                   {"workspace_id": "default", "glob": glob})
                self.assertTrue(err["message"].startswith("/glob: "), err)
                self.assertIn(why, err["message"])
        # Globs that can match still list; one naming the root lists everything; a leading '!'
        # (a deny rule's refused negation) is a literal character in find.
        self.assertEqual(self.srv.call("find", {"workspace_id": "default",
                                                "glob": "*.c"})["paths"], ["src/b.c"])
        for glob in ("/", "/**"):
            self.assertEqual(self.srv.call("find", {"workspace_id": "default", "glob": glob})[
                "paths"], ["!x.txt", "a.txt", "src/b.c"])
        self.assertEqual(self.srv.call("find", {"workspace_id": "default",
                                                "glob": "!x.txt"})["paths"], ["!x.txt"])
        # The workspace is checked first.
        self.refused("WORKSPACE_NOT_FOUND", "find", {"workspace_id": "nope", "glob": "a//b"})

    def test_read_limit_zero_agrees_with_the_schema(self):
        tools = self.srv.request("tools/list", {})["result"]["tools"]
        schema = next(t["inputSchema"] for t in tools if t["name"] == "read")
        args = {"workspace_id": "default", "path": "a.txt", "limit": 0}
        self.assertEqual(self.srv.call("read", dict(args, limit=1))["content"], "x")
        # The schema accepts any non-negative integer; its text says 0 is OUTPUT_LIMIT ...
        self.assertEqual(list(Draft202012Validator(schema).iter_errors(args)), [])
        self.assertIn("OUTPUT_LIMIT", json.dumps(schema))
        # ... and the tool answers exactly that, naming the limit.
        err = self.refused("OUTPUT_LIMIT", "read", args)
        self.assertIn("limit 0", err["message"])
        self.assertNotEqual(list(Draft202012Validator(schema).iter_errors(
            dict(args, limit=-1))), [])
        self.refused("INVALID_ARGUMENTS", "read", dict(args, limit=-1))

    def test_exec_command_string_says_use_sh_c(self):
        err = self.refused("INVALID_ARGUMENTS", "exec_command",
                           {"workspace_id": "default", "command": "echo hi && ls"})
        self.assertTrue(err["message"].startswith("/command: expected array"), err)
        self.assertIn('use ["sh","-c","..."]', err["message"])
        # An argv element of the wrong type gets no such hint: its pointer is /command/0.
        err = self.refused("INVALID_ARGUMENTS", "exec_command",
                           {"workspace_id": "default", "command": [1]})
        self.assertNotIn("sh", err["message"])
        out = self.ran(["sh", "-c", "echo hi"])
        self.assertEqual(out["output"], "hi\n")


class FlagsCase(Base):
    """The --workspace form (workspace "default") with each flag, and the variables."""

    def setUp(self):
        super().setUp()
        self.tmp, roots, self.state = tp.make_tree("cs-e2e-ws-flags-", ("ws",))
        self.ws = roots["ws"]
        self.srv = None

    def tearDown(self):
        try:
            super().tearDown()
            if self.srv:
                self.srv.close()
        finally:
            tp.kill_leftovers()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, flags, env=None):
        self.srv = tp.Server(["--workspace", self.ws, "--operations-db", ":memory:"] + flags,
                             self.state, env)
        return self.srv.call("workspace_info", {"workspace_id": "default"})

    def test_flags(self):
        info = self.start(["--process-timeout", "1", "--output-ring=4096", "--max-processes",
                           "3", "--processes", "shared"],
                          {"CODESPACE_PROCESS_TIMEOUT_SECS": "9",
                           "CODESPACE_OUTPUT_RING_BYTES": "8192", "CODESPACE_PROCESSES":
                           "exclusive"})  # the flags win over their variables
        self.assertEqual(limits_of(info), {"max_live_processes": 3, "timeout_ms": 1000,
                                           "output_ring_bytes": 4096})
        self.assertEqual(info["execution"]["serialization"]["process_conflict"], "share")
        self.assertEqual(self.srv.call("workspace_info", {})["workspaces"],
                         [{"workspace_id": "default", "profile": "workspace-write",
                           "network": "restricted", "processes": "shared"}])
        t0 = time.monotonic()
        out = self.ran(["sleep", "3"])
        self.assertEqual(out["termination"], "timeout", out)
        self.assertLess(time.monotonic() - t0, 1.0 + 1.5 * SLOW)
        out = self.ran(["seq", "1", "2000"])
        self.assertEqual((out["output_lost"], len(out["output"])), (True, 4096))

    def test_variables_are_the_fallbacks(self):
        info = self.start([], {"CODESPACE_PROCESS_TIMEOUT_SECS": "9",
                               "CODESPACE_OUTPUT_RING_BYTES": "8192",
                               "CODESPACE_MAX_PROCESSES": "2", "CODESPACE_PROCESSES": "shared"})
        self.assertEqual(limits_of(info), {"max_live_processes": 2, "timeout_ms": 9000,
                                           "output_ring_bytes": 8192})
        self.assertEqual(info["execution"]["serialization"]["process_conflict"], "share")

    def test_defaults(self):
        info = self.start([])
        self.assertEqual(limits_of(info), DEFAULT_LIMITS)
        self.assertEqual(info["execution"]["serialization"]["process_conflict"], "reject")

    def test_process_timeout_zero_is_no_limit(self):
        # The variable alone would kill the command at 1 s; the flag's 0 sets no timer at all.
        info = self.start(["--process-timeout", "0"], {"CODESPACE_PROCESS_TIMEOUT_SECS": "1"})
        self.assertEqual(limits_of(info)["timeout_ms"], 0)
        out = self.ran(["sh", "-c", "sleep 1.6; echo late"], yield_ms=10000)
        self.assertEqual((out["termination"], out["exit_code"], out["output"]),
                         ("exited", 0, "late\n"), out)


class LoadRefusalsCase(unittest.TestCase):
    """Every limit at each bound loads; past it the load fails naming the key."""

    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.roots, cls.state = tp.make_tree("cs-e2e-ws-load-", ("a", "b"))

    @classmethod
    def tearDownClass(cls):
        tp.kill_leftovers()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def registry(self, a, b=None):
        reg = {"workspaces": {"a": dict({"root": self.roots["a"],
                                         "profile": "workspace-write"}, **a)}}
        if b is not None:
            reg["workspaces"]["b"] = dict({"root": self.roots["b"],
                                           "profile": "workspace-write"}, **b)
        path = os.path.join(self.tmp, "registry-%s.json" % uuid.uuid4().hex[:8])
        with open(path, "w") as f:
            json.dump(reg, f)
        return path

    def refused(self, args, env=None):
        """Runs the server, which must exit 2 at once; returns its stderr."""
        p = subprocess.run([tp.binary(), "--operations-db", ":memory:"] + args,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           env=clean_env(self.state, env), timeout=20 * SLOW)
        self.assertEqual(p.returncode, 2, p.stderr)  # a configuration error
        self.assertEqual(p.stdout, "")
        return p.stderr

    def test_at_the_bounds(self):
        reg = self.registry(
            {"description": "\u00e9" * 200,  # 200 characters (400 bytes)
             "limits": {"timeout_ms": 0, "max_live_processes": 1, "output_ring_bytes": 4096}},
            {"limits": {"timeout_ms": 2147483000, "max_live_processes": 1024,
                        "output_ring_bytes": 2 * MIB}})
        srv = tp.Server(["--config", reg, "--operations-db", ":memory:"], self.state)
        try:
            a = srv.call("workspace_info", {"workspace_id": "a"})
            b = srv.call("workspace_info", {"workspace_id": "b"})
            listed = srv.call("workspace_info", {})["workspaces"]
        finally:
            srv.close()
        self.assertEqual(limits_of(a), {"max_live_processes": 1, "timeout_ms": 0,
                                        "output_ring_bytes": 4096})
        self.assertEqual(limits_of(b), {"max_live_processes": 1024, "timeout_ms": 2147483000,
                                        "output_ring_bytes": 2 * MIB})
        self.assertEqual(listed[0]["description"], "\u00e9" * 200)
        # The lowest non-zero time limit.
        reg = self.registry({"limits": {"timeout_ms": 1000}})
        srv = tp.Server(["--config", reg, "--operations-db", ":memory:"], self.state)
        try:
            self.assertEqual(limits_of(srv.call("workspace_info", {"workspace_id": "a"}))[
                "timeout_ms"], 1000)
        finally:
            srv.close()

    def test_past_the_bounds_names_the_key(self):
        cases = [
            ({"limits": {"timeout_ms": 999}}, "/workspaces/a/limits/timeout_ms",
             "expected 0 (no time limit) or 1000..2147483000 milliseconds, got 999"),
            ({"limits": {"timeout_ms": 2147483001}}, "/workspaces/a/limits/timeout_ms",
             "got 2147483001"),
            ({"limits": {"timeout_ms": -1}}, "/workspaces/a/limits/timeout_ms", ">= 0"),
            ({"limits": {"max_live_processes": 0}}, "/workspaces/a/limits/max_live_processes",
             "expected 1..1024 live processes, got 0"),
            ({"limits": {"max_live_processes": 1025}},
             "/workspaces/a/limits/max_live_processes", "got 1025"),
            ({"limits": {"output_ring_bytes": 4095}}, "/workspaces/a/limits/output_ring_bytes",
             "expected 4096..2097152 bytes, got 4095"),
            ({"limits": {"output_ring_bytes": 2 * MIB + 1}},
             "/workspaces/a/limits/output_ring_bytes", "got 2097153"),
            ({"limits": {"timeout": 5}}, "/workspaces/a/limits/timeout", "unknown key"),
            ({"description": "\u00e9" * 201}, "/workspaces/a/description", "200 characters"),
            ({"processes": "parallel"}, "/workspaces/a/processes", "expected one of"),
        ]
        for entry, pointer, words in cases:
            with self.subTest(entry=entry):
                err = self.refused(["--config", self.registry(entry)])
                self.assertIn("invalid configuration", err)
                self.assertIn(pointer + ": ", err)
                self.assertIn(words, err)

    def test_bad_flags_and_variables(self):
        ws = ["--workspace", self.roots["a"]]
        cases = [
            (["--process-timeout", "-1"], None, "--process-timeout: expected an integer from 0"),
            (["--process-timeout", "2147484"], None, "to 2147483, got"),
            (["--max-processes", "0"], None, "--max-processes: expected an integer from 1 to 1024"),
            (["--output-ring", "4095"], None, "--output-ring: expected an integer from 4096 to "
             "2097152"),
            (["--processes", "both"], None, "--processes: expected"),
            ([], {"CODESPACE_PROCESS_TIMEOUT_SECS": "0"},
             "CODESPACE_PROCESS_TIMEOUT_SECS: expected an integer from 1"),
            ([], {"CODESPACE_OUTPUT_RING_BYTES": "2097153"}, "CODESPACE_OUTPUT_RING_BYTES"),
            ([], {"CODESPACE_PROCESSES": "x"}, "CODESPACE_PROCESSES: expected"),
        ]
        for flags, env, words in cases:
            with self.subTest(flags=flags, env=env):
                self.assertIn(words, self.refused(ws + flags, env))


class WorkerLimitsCase(unittest.TestCase):
    """codespace-runtime alone: the limits an exec request carries are enforced by the executor
    every runner shares (in-process, uds, remote)."""

    def setUp(self):
        if os.environ.get("CS_E2E_RUNNER"):
            raise unittest.SkipTest("drives the worker directly: once, in the in-process run")
        import test_uds
        self.u = test_uds
        test_uds.runtime_binary()
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-e2e-ws-worker-"))
        os.chmod(self.tmp, 0o700)
        self.root = os.path.join(self.tmp, "ws")
        os.mkdir(self.root)
        self.workers, self.clients = [], []
        self.rid = 1

    def tearDown(self):
        for c in self.clients:
            c.close()
        for w in self.workers:
            w.kill()
        tp.kill_leftovers()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def client(self, *args):
        w = self.u.Worker(os.path.join(self.tmp, "runner-%d.sock" % len(self.workers)), args)
        self.workers.append(w)
        self.clients.append(w.handshake())
        return self.clients[-1]

    def exec(self, c, ws, argv, processes="shared", **kw):
        """processes: the workspace's (shared by default: processes side by side; None sends
        none, which is exclusive)."""
        d = self.u.exec_data(self.root, argv, kw.pop("yield_ms", None))
        d["workspace"]["id"] = ws
        if processes:
            d["workspace"]["processes"] = processes
        d.update(kw)
        self.rid += 1
        return c.call("rrpc-%d" % self.rid, "exec", d)

    def assert_busy(self, resp, words):
        self.assertIs(resp["ok"], False, resp)
        self.assertEqual(resp["error"]["code"], "WORKSPACE_BUSY", resp)
        self.assertIn(words, resp["error"]["message"])

    def test_live_cap_is_the_workspaces_and_the_runners(self):
        c = self.client("--max-processes", "3")
        s1, s2 = tp.uniq(71), tp.uniq(72)
        self.assertIs(self.exec(c, "a", ["sleep", s1], max_live_processes=2)["ok"], True)
        self.assertIs(self.exec(c, "a", ["sleep", s1], max_live_processes=2)["ok"], True)
        self.assert_busy(self.exec(c, "a", ["sleep", s1], max_live_processes=2),
                         "live process limit reached (max_live_processes 2)")
        # Another workspace has its own count; the runner's cap (3) counts every workspace.
        self.assertIs(self.exec(c, "b", ["sleep", s2], max_live_processes=2)["ok"], True)
        self.assert_busy(self.exec(c, "b", ["sleep", s2], max_live_processes=2),
                         "the runner's cap of 3 processes")
        # An exec answers once its command is started, which under the sandbox helper is before
        # the command inside has replaced the helper's argv: waited for, both workspaces alike.
        self.assertTrue(tp.wait_until(lambda: len(tp.pids_with(s1)) == 2 and
                                      len(tp.pids_with(s2)) >= 1, 5 * SLOW))
        self.assertEqual(len(tp.pids_with(s1)), 2)
        self.assertEqual(len(tp.pids_with(s2)), 1)

    def test_exclusive_workspace_is_held_by_its_live_process(self):
        """No processes in the description is exclusive: the worker itself refuses a second exec
        and a patch while one lives, whichever connection started it (issue 32), and counts
        per workspace id."""
        c = self.client()
        s1 = tp.uniq(73)
        first = self.exec(c, "x", ["sleep", s1], processes=None)
        self.assertIs(first["ok"], True, first)
        pid = first["result"]["data"]["process_id"]
        self.assert_busy(self.exec(c, "x", ["true"], processes=None), pid)
        self.rid += 1
        ws = self.u.workspace(self.root)
        ws["id"] = "x"
        patch = "*** Begin Patch\n*** Add File: held.txt\n+x\n*** End Patch\n"
        self.assert_busy(c.call("rrpc-%d" % self.rid, "apply_patch",
                                {"workspace": ws, "patch": patch}), pid)
        self.assertFalse(os.path.exists(os.path.join(self.root, "held.txt")))
        self.assertIs(self.exec(c, "y", ["true"], processes=None)["ok"], True)
        self.rid += 1
        self.assertIs(c.call("rrpc-%d" % self.rid, "cancel", {"process_id": pid})["ok"], True)
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(s1), 5 * SLOW))
        end = time.time() + 5 * SLOW
        while True:
            r = self.exec(c, "x", ["true"], processes=None)
            if r["ok"] or time.time() > end:
                break
            time.sleep(0.05)
        self.assertIs(r["ok"], True, r)

    def test_no_time_limit_and_the_ring(self):
        # --timeout-ms is the file operations' limit (and a spawn's naming none): an exec with
        # timeout_ms 0 has no timer at all, so it outlives those 1000 ms.
        c = self.client("--timeout-ms", "1000")
        r = self.exec(c, "a", ["sh", "-c", "sleep 1.5; echo late"], timeout_ms=0, yield_ms=8000)
        self.assertIs(r["ok"], True, r)
        data = r["result"]["data"]
        self.assertEqual((data["termination"], data["exit_code"], data["output"]),
                         ("exited", 0, "late\n"), data)
        r = self.exec(c, "a", ["sleep", "5"], timeout_ms=300, yield_ms=8000)
        self.assertEqual(r["result"]["data"]["termination"], "timeout", r)
        expected = seq_text(2000)
        r = self.exec(c, "a", ["seq", "1", "2000"], output_bytes_cap=4096, yield_ms=8000)
        data = r["result"]["data"]
        self.assertEqual((data["output_lost"], data["output"]), (True, expected[-4096:]))
        r = self.exec(c, "a", ["true"], output_bytes_cap=2 * MIB + 1, yield_ms=8000)
        self.assertIs(r["ok"], False, r)
        self.assertEqual(r["error"]["code"], "PROCESS_SPAWN_FAILED", r)
        self.assertIn("output_bytes_cap", r["error"]["message"])


if __name__ == "__main__":
    unittest.main()
