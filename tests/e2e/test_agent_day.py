#!/usr/bin/python3
"""A coding agent's day (issue #28, docs/contract/workflows.md), played through the real
binaries over stdio (a 2025-11-25 session) and Streamable HTTP (2026-07-28 stateless requests,
progress as SSE), once per runner (CTest e2e_agent_day and e2e_agent_day_uds).

The agent knows only the tool descriptions and the server's instructions. It:
1. discovers its workspaces (`workspace_info {}` lists them, with descriptions) and picks the
   one whose description names the project;
2. unpacks and builds a real C project nobody here wrote (jansson 2.14, MIT, the Debian source
   tarball committed as tests/e2e/data/jansson-2.14.tar.gz) and runs its 213 tests, following
   the build with progress notifications;
3. patches it (the version string, and a test that sleeps 46 s so the next run takes longer
   than 45 s: the seed's 30 s limit would have killed it), rebuilds and retests: the command
   ends by itself, exit 0, after more than 45 s, and the progress it reported grew;
4. starts a dev server with one exec_command and reaches it from a second while it runs, in a
   `shared` + `loopback` workspace and in a `shared` + `enabled` one (the client bypasses the
   proxy: the server is on the workspace's own loopback).

Standard library only; CODESPACE_MCP_BIN names the gateway, CS_E2E_RUNNER adds --runner.
"""

import http.client
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import mcp_stdio

HERE = os.path.dirname(os.path.abspath(__file__))
TARBALL = os.path.join(HERE, "data", "jansson-2.14.tar.gz")
MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "e2e-agent-day", "version": "1"}}
WAIT_MS = 30000  # the cap of yield_ms and wait_ms
BUILD = ("cmake -S jansson-2.14 -B build -DJANSSON_BUILD_DOCS=OFF -DJANSSON_EXAMPLES=OFF"
         " -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 && "
         "ctest --test-dir build -j2 --output-on-failure")
REBUILD = "cmake --build build -j2 && ctest --test-dir build -j2 --output-on-failure"
# The agent's edit: a version string, and a test of 46 s (after the suite's harness line).
PATCH = ("*** Begin Patch\n"
         "*** Update File: jansson-2.14/src/jansson.h\n"
         "@@\n"
         '-#define JANSSON_VERSION "2.14"\n'
         '+#define JANSSON_VERSION "2.14-agent"\n'
         "*** Update File: jansson-2.14/CMakeLists.txt\n"
         "@@\n"
         "+   add_test(agent_slow_test ${CMAKE_COMMAND} -E sleep 46)\n"
         "    # Test harness for the suites tests.\n"
         "*** End Patch\n")
SERVER_PORT = 8000
CLIENT = ("import urllib.request as u\n"
          "o = u.build_opener(u.ProxyHandler({}))\n"
          "print(o.open('http://127.0.0.1:%d/hello.txt', timeout=10).read().decode())\n"
          % SERVER_PORT)


def binary():
    b = os.environ.get("CODESPACE_MCP_BIN")
    if not b:
        raise unittest.SkipTest("CODESPACE_MCP_BIN is not set")
    return b


def server_env(state):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
    env["XDG_STATE_HOME"] = state
    env["CODESPACE_OPERATIONS_DB"] = os.path.join(state, "ops.db")
    return env


def tool_result(msg):
    res = msg["result"]
    text = json.loads(res["content"][0]["text"])
    if res.get("isError"):
        return None, text
    assert text == res["structuredContent"], res
    return res["structuredContent"], None


class Stdio:
    """A 2025-11-25 session over the server's stdin and stdout; notifications are kept."""

    name = "stdio"

    def __init__(self, args, state):
        self.proc = subprocess.Popen([binary(), *args, *mcp_stdio.runner_args()],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=server_env(state))
        self.msgs = queue.Queue()
        self.stderr = []
        self.next_id = 1
        threading.Thread(target=self._out, daemon=True).start()
        threading.Thread(target=self._err, daemon=True).start()
        init = self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                           "clientInfo": {"name": "agent-day", "version": "1"}})
        self.instructions = init[0]["result"].get("instructions", "")
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _out(self):
        for raw in iter(self.proc.stdout.readline, b""):
            self.msgs.put(json.loads(raw))
        self.msgs.put(None)

    def _err(self):
        for raw in iter(self.proc.stderr.readline, b""):
            self.stderr.append(raw.decode("utf-8", "replace"))

    def send(self, msg):
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method, params, timeout=60):
        """(the reply, the notifications that came before it)."""
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        notes = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                msg = self.msgs.get(timeout=max(left, 0.01))
            except queue.Empty:
                raise AssertionError("no reply to %s; stderr:\n%s"
                                     % (method, "".join(self.stderr[-20:])))
            if msg is None:
                raise AssertionError("server exited; stderr:\n" + "".join(self.stderr[-20:]))
            if msg.get("id") == rid:
                return msg, notes
            # Progress only: a process exit's notifications/message is not progress.
            if msg.get("method") == "notifications/progress" and "id" not in msg:
                notes.append(msg)

    def call(self, tool, args, token=None, timeout=60):
        params = {"name": tool, "arguments": args}
        if token is not None:
            params["_meta"] = {"progressToken": token}
        msg, notes = self.request("tools/call", params, timeout)
        out, err = tool_result(msg)
        return out, err, notes

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class Http:
    """2026-07-28 stateless requests on /mcp; a reply that is an SSE stream is read event by
    event (notifications first, the reply last)."""

    name = "http"

    def __init__(self, args, state):
        self.proc = subprocess.Popen([binary(), "--http", "--port", "0", *args,
                                      *mcp_stdio.runner_args()],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=server_env(state))
        self.port = None
        self.stderr = []
        ready = threading.Event()

        def drain():
            for raw in iter(self.proc.stderr.readline, b""):
                line = raw.decode("utf-8", "replace")
                self.stderr.append(line)
                if self.port is None and '"listening"' in line:
                    try:
                        self.port = json.loads(line).get("port")
                    except ValueError:
                        pass
                    ready.set()
            ready.set()
        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(30) or self.port is None:
            raise AssertionError("server did not listen:\n" + "".join(self.stderr))
        self.next_id = 1
        msg, _ = self.request("server/discover", {})
        self.instructions = msg["result"].get("instructions", "")

    def request(self, method, params, timeout=60, name=None):
        rid = self.next_id
        self.next_id += 1
        params = dict(params)
        params["_meta"] = dict(META, **params.get("_meta", {}))
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if name is not None:
            headers["Mcp-Name"] = name
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("POST", "/mcp", body, headers)
            r = conn.getresponse()
            ctype = r.getheader("Content-Type", "")
            if r.status != 200:
                raise AssertionError("HTTP %d: %r" % (r.status, r.read()))
            if ctype.startswith("application/json"):
                return json.loads(r.read()), []
            assert ctype.startswith("text/event-stream"), ctype
            notes, data = [], []
            while True:
                line = r.readline()  # de-chunked by http.client
                if not line:
                    raise AssertionError("the SSE stream ended without the reply")
                line = line.decode("utf-8").rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
                elif line == "" and data:
                    msg = json.loads("\n".join(data))
                    data = []
                    if msg.get("id") == rid:
                        return msg, notes
                    if msg.get("method") == "notifications/progress":
                        notes.append(msg)
        finally:
            conn.close()

    def call(self, tool, args, token=None, timeout=60):
        params = {"name": tool, "arguments": args}
        if token is not None:
            params["_meta"] = {"progressToken": token}
        msg, notes = self.request("tools/call", params, timeout, name=tool)
        out, err = tool_result(msg)
        return out, err, notes

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return 0 if self.proc.returncode in (0, -15) else self.proc.returncode


class Day:
    """The agent's day on one transport; subclasses name it."""

    transport = None

    def setUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-e2e-day-"))
        roots = {}
        for ws in ("app", "web"):
            roots[ws] = os.path.join(self.tmp, ws)
            os.makedirs(roots[ws])
        shutil.copy(TARBALL, roots["app"])
        for ws in roots:
            os.makedirs(os.path.join(roots[ws], "site"))
            with open(os.path.join(roots[ws], "site", "hello.txt"), "w") as f:
                f.write("served by %s\n" % ws)
        reg = {"workspaces": {
            "app": {"root": roots["app"], "profile": "workspace-write", "processes": "shared",
                    "network": "loopback",
                    "description": "jansson 2.14, a C JSON library: build with cmake"},
            "web": {"root": roots["web"], "profile": "workspace-write", "processes": "shared",
                    "network": "enabled", "network_allow": [],
                    "description": "a static site"}}}
        self.registry = os.path.join(self.tmp, "registry.json")
        with open(self.registry, "w") as f:
            json.dump(reg, f)
        self.roots = roots
        self.client = self.transport(["--config", self.registry], self.tmp)
        self.tokens = 0

    def tearDown(self):
        rc = self.client.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.assertEqual(rc, 0, "".join(self.client.stderr[-30:]))

    def call(self, tool, args, **kw):
        out, err, notes = self.client.call(tool, args, **kw)
        self.assertIsNone(err, "%s %r: %r" % (tool, args, err))
        return out, notes

    def token(self):
        self.tokens += 1
        return "day-%d" % self.tokens

    def run_to_end(self, ws, command, budget):
        """exec_command then read_process until the process exits, each call with a progress
        token; returns (the final state, its whole output, every progress notification, the
        seconds it took)."""
        t0 = time.monotonic()
        tok = self.token()
        out, notes = self.call("exec_command", {"workspace_id": ws, "command": command,
                                                "yield_ms": WAIT_MS}, token=tok, timeout=90)
        self.assertEqual(out["dispatch_status"], "confirmed")
        pid, text, cursor, progress = out["process_id"], out.get("output", ""), out["cursor"], notes
        state = out
        while state.get("state") != "exited":
            self.assertLess(time.monotonic() - t0, budget, "%r still runs" % (command,))
            tok = self.token()
            rp, notes = self.call("read_process", {"process_id": pid, "cursor": cursor,
                                                   "wait_ms": WAIT_MS}, token=tok, timeout=90)
            progress += notes
            text += rp["chunk"]
            cursor = rp["cursor"]
            state, _ = self.call("process_status", {"process_id": pid})
        while True:  # what is left after the exit
            rp, _ = self.call("read_process", {"process_id": pid, "cursor": cursor})
            text += rp["chunk"]
            cursor = rp["cursor"]
            if rp["eof"]:
                break
        return state, text, progress, time.monotonic() - t0

    def check_progress(self, notes, seconds):
        """At most one a second per call, monotonic per token, a message that is a line."""
        self.assertTrue(notes, "no notifications/progress while a command ran %.0f s" % seconds)
        by_token = {}
        for n in notes:
            self.assertEqual(n["method"], "notifications/progress", n)
            p = n["params"]
            by_token.setdefault(p["progressToken"], []).append(p)
            self.assertIsInstance(p["progress"], (int, float))
            if "message" in p:
                self.assertLessEqual(len(p["message"]), 200)
                self.assertNotIn("\n", p["message"])
        for tok, ps in by_token.items():
            values = [p["progress"] for p in ps]
            self.assertEqual(values, sorted(values), "progress went back for %s" % tok)
        # One a second at most: a command of N seconds cannot report much more than N.
        self.assertLessEqual(len(notes), seconds + 2 * len(by_token), notes)

    def test_the_agents_day(self):
        # 1. Discovery: no id, a list; the instructions say so.
        self.assertIn("workspace_info", self.client.instructions)
        info, _ = self.call("workspace_info", {})
        self.assertIsNone(info["workspace_id"])
        listed = {w["workspace_id"]: w for w in info["workspaces"]}
        self.assertEqual(sorted(listed), ["app", "web"])
        ws = [w for w in info["workspaces"] if "jansson" in w.get("description", "")][0]
        self.assertEqual(ws["workspace_id"], "app")
        self.assertEqual((ws["processes"], ws["network"]), ("shared", "loopback"))
        detail, _ = self.call("workspace_info", {"workspace_id": "app"})
        ex = detail["execution"]
        self.assertEqual(ex["isolation"]["command_sandbox"], "linux-sandbox", ex)
        self.assertEqual(ex["network"]["policy"], "loopback")
        self.assertEqual(ex["serialization"]["process_conflict"], "share")
        self.assertGreaterEqual(ex["process"]["capabilities"]["limits"]["timeout_ms"], 60000)

        # 2. Unpack, build, test.
        state, text, notes, secs = self.run_to_end(
            "app", ["tar", "xzf", "jansson-2.14.tar.gz"], 120)
        self.assertEqual((state["termination"], state.get("exit_code")), ("exited", 0), text)
        state, text, notes, secs = self.run_to_end("app", ["sh", "-c", BUILD], 900)
        self.assertEqual((state["termination"], state.get("exit_code")), ("exited", 0),
                         text[-3000:])
        self.assertIn("100% tests passed, 0 tests failed out of 213", text)
        if secs > 3:
            self.check_progress(notes, secs)

        # 3. Patch, rebuild, retest: longer than 45 s, and it ends by itself.
        found, _ = self.call("find", {"workspace_id": "app", "glob": "jansson-2.14/src/jansson.h"})
        self.assertEqual(found["paths"], ["jansson-2.14/src/jansson.h"])
        applied, _ = self.call("apply_patch", {"workspace_id": "app", "patch": PATCH,
                                               "operation_key": "day-edit-%s" % self.client.name})
        self.assertEqual(applied["status"], "applied", applied)
        state, text, notes, secs = self.run_to_end("app", ["sh", "-c", REBUILD], 900)
        self.assertEqual((state["termination"], state.get("exit_code")), ("exited", 0),
                         text[-3000:])
        self.assertIn("100% tests passed, 0 tests failed out of 214", text)
        self.assertGreater(secs, 45)
        self.check_progress(notes, secs)
        # Progress goes out only when the output grew (its value must rise), and 46 s of this
        # command are one silent test: how many of the other tests' lines land in distinct
        # seconds depends on the machine's load (9 of 54 s under CI's, more when idle). The
        # cadence itself is pinned by test_progress; here, a long build reports more than once.
        self.assertGreaterEqual(len(notes), 4, "a %.0f s command reported %d times"
                                % (secs, len(notes)))
        self.assertTrue(any(n["params"].get("message") for n in notes), notes)
        lib, _, _, _ = self.run_to_end("app", ["sh", "-c",
                                               "grep -c 2.14-agent build/lib/libjansson.a"], 60)
        self.assertEqual(lib.get("exit_code"), 0)
        st, _ = self.call("operation_status", {"operation_key": "day-edit-%s" % self.client.name})
        self.assertEqual(st["status"], "applied")

        # 4. A dev server and its client, side by side, in both networked shared modes.
        for ws in ("app", "web"):
            self.server_and_client(ws)

    def server_and_client(self, ws):
        srv, _ = self.call("exec_command", {"workspace_id": ws, "command": [
            "python3", "-u", "-m", "http.server", str(SERVER_PORT), "--bind", "127.0.0.1",
            "--directory", "site"]})
        pid = srv["process_id"]
        try:
            cursor, seen = 0, ""
            deadline = time.monotonic() + 30
            while "Serving HTTP" not in seen:
                self.assertLess(time.monotonic(), deadline, "%s: the server never listened: %r"
                                % (ws, seen))
                rp, _ = self.call("read_process", {"process_id": pid, "cursor": cursor,
                                                   "wait_ms": 2000})
                seen += rp["chunk"]
                cursor = rp["cursor"]
                st, _ = self.call("process_status", {"process_id": pid})
                self.assertEqual(st["state"], "running", (ws, seen))
            out, _ = self.call("exec_command", {"workspace_id": ws, "command": [
                "python3", "-c", CLIENT], "yield_ms": 20000})
            self.assertEqual((out["state"], out.get("exit_code")), ("exited", 0), (ws, out))
            self.assertIn("served by %s" % ws, out["output"])
            st, _ = self.call("process_status", {"process_id": pid})
            self.assertEqual(st["state"], "running")
        finally:
            self.client.call("terminate_process", {"process_id": pid})


class DayStdio(Day, unittest.TestCase):
    transport = Stdio


class DayHttp(Day, unittest.TestCase):
    transport = Http


if __name__ == "__main__":
    unittest.main()
