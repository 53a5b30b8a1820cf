#!/usr/bin/python3
"""Progress while a command runs (workflows.md section 5, docs/protocol.md "Progress"), through
the real server over stdio and Streamable HTTP, on the runner CS_E2E_RUNNER names.

A tools/call of exec_command with yield_ms, or read_process with wait_ms, that carries
params._meta.progressToken gets notifications/progress while it waits: at most one a second,
progress = the process's output bytes so far (growing), message = its last non-empty output line,
the token echoed as given; then the reply, which still parses. Without a token nothing is sent;
on HTTP the reply is an SSE stream only when Accept names text/event-stream, else plain JSON as
before. A cancelled call sends nothing more. Every notification is also checked against the
official schema of its revision (tests/protocol/official/) and against ours.

A process exit is one notifications/message (docs/protocol.md "Logging"): level info, logger
codespace, data naming the process, its workspace and how it ended, before the reply the exit
ends; none after logging/setLevel warning; on HTTP only on an SSE reply of the same 2025 session
(the exec's own progress stream), never to a 2026-07-28 request. Checked against the official
LoggingMessageNotification and ours.

The command prints "lineN\\n" (6 bytes) once a second, so a notification's progress says how
many lines were out and its message must be exactly the last of them.

Standard library + python3-jsonschema. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_progress          (from tests/e2e)
"""
import http.client
import json
import os
import queue
import subprocess
import tempfile
import threading
import time
import unittest

from jsonschema import Draft202012Validator, RefResolver

import mcp_stdio

HERE = os.path.dirname(os.path.abspath(__file__))
OFFICIAL = os.path.join(os.path.dirname(HERE), "protocol", "official")
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "e2e-progress", "version": "1"}}
TICK = ["sh", "-c", "for i in 1 2 3 4; do echo line$i; sleep 1; done"]
# Two lines at once, then a silent wait the read_process long poll sits in, then a third.
PAUSE = ["sh", "-c", "echo line1; echo line2; sleep 3; echo line3"]
TIMEOUT = 30.0
SPACING = 0.9  # seconds: "at most one a second", less a little for the clock's rounding


def binary():
    b = os.environ.get("CODESPACE_MCP_BIN")
    if not b:
        raise unittest.SkipTest("CODESPACE_MCP_BIN is not set")
    return b


def official(rev):
    with open(os.path.join(OFFICIAL, rev + ".schema.json"), encoding="utf-8") as f:
        doc = json.load(f)
    return Draft202012Validator({"$schema": doc["$schema"], "$defs": doc["$defs"],
                                 "$ref": "#/$defs/ProgressNotification"})


VALIDATORS = {rev: official(rev) for rev in (LEGACY, MODERN)}
with open(os.path.join(os.path.dirname(os.path.dirname(HERE)), "schema", "protocol",
                       "progress_notification.json"), encoding="utf-8") as _f:
    OURS = Draft202012Validator(json.load(_f))  # the shape the server encodes it through


def official_log(rev):
    with open(os.path.join(OFFICIAL, rev + ".schema.json"), encoding="utf-8") as f:
        doc = json.load(f)
    return Draft202012Validator({"$schema": doc["$schema"], "$defs": doc["$defs"],
                                 "$ref": "#/$defs/LoggingMessageNotification"})


def ours_log():
    """Our schema of the message, with the files it references (common.json, process_status),
    resolved as tests/golden/run_golden.py does (Debian's jsonschema 4.10: RefResolver)."""
    root = os.path.join(os.path.dirname(os.path.dirname(HERE)), "schema")
    store = {}
    for sub in ("protocol", "mcp"):
        for name in os.listdir(os.path.join(root, sub)):
            with open(os.path.join(root, sub, name), encoding="utf-8") as f:
                doc = json.load(f)
            store[doc["$id"]] = doc
    doc = store["https://codespace.invalid/schema/protocol/logging_message_notification.json"]
    return Draft202012Validator(doc, resolver=RefResolver(base_uri=doc["$id"], referrer=doc,
                                                          store=store))


LOG_VALIDATORS = [official_log(LEGACY), ours_log()]


def env_for(state):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
    env["XDG_STATE_HOME"] = state
    env["CODESPACE_OPERATIONS_DB"] = ":memory:"
    return env


class Checks:
    """Assertions on (arrival time, message) lists shared by the transports."""

    def check_progress(self, notes, token, rev=LEGACY, least=2, most=5):
        """notes: [(time, message)] of notifications/progress, in arrival order."""
        self.assertGreaterEqual(len(notes), least, notes)
        self.assertLessEqual(len(notes), most, notes)
        last = -1
        for i, (t, n) in enumerate(notes):
            for v in (VALIDATORS[rev], OURS):
                self.assertEqual([e.message for e in v.iter_errors(n)], [], n)
            p = n["params"]
            self.assertEqual(p["progressToken"], token, n)
            self.assertIs(type(p["progressToken"]), type(token), n)
            self.assertGreater(p["progress"], last, notes)
            last = p["progress"]
            # "lineN\n" is 6 bytes: the message is the last line out at that count.
            self.assertEqual(p["progress"] % 6, 0, n)
            self.assertEqual(p.get("message"), "line%d" % (p["progress"] // 6), n)
            if i > 0:
                self.assertGreaterEqual(t - notes[i - 1][0], SPACING, notes)

    def check_exit_message(self, msg, pid, termination, exit_code=None):
        for v in LOG_VALIDATORS:
            self.assertEqual([e.message for e in v.iter_errors(msg)], [], msg)
        p = msg["params"]
        self.assertEqual(p["level"], "info", msg)
        self.assertEqual(p["logger"], "codespace", msg)
        want = {"event": "process_exited", "process_id": pid, "workspace_id": "default",
                "termination": termination}
        if exit_code is not None:
            want["exit_code"] = exit_code
        self.assertEqual(p["data"], want, msg)

    def check_tick_result(self, res):
        self.assertFalse(res.get("isError"), res)
        out = res["structuredContent"]
        self.assertEqual(json.loads(res["content"][0]["text"]), out)
        self.assertEqual(out["state"], "exited", out)
        self.assertEqual(out["exit_code"], 0, out)
        self.assertEqual(out["output"], "line1\nline2\nline3\nline4\n", out)


# ---- stdio -------------------------------------------------------------------------------------


class Stdio:
    """codespace-mcp over stdio, every line received kept with its arrival time."""

    def __init__(self, workspace, state):
        self.proc = subprocess.Popen(
            [binary(), "--workspace", workspace, "--log-level", "error",
             *mcp_stdio.runner_args()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env_for(state))
        self.lines = queue.Queue()
        self.logs = []  # (time, notifications/message), in arrival order
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 1
        r = self.request("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                        "clientInfo": {"name": "e2e-progress", "version": "1"}})
        assert "result" in r, r
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b""):
            self.lines.put((time.monotonic(), json.loads(raw)))

    def send(self, msg):
        self.proc.stdin.write(json.dumps(msg).encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def start(self, method, params):
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def collect(self, rid, timeout=TIMEOUT):
        """(notifications/progress received before it as [(time, msg)], the reply to rid)."""
        notes, end = [], time.monotonic() + timeout
        while True:
            t, msg = self.lines.get(timeout=max(0.1, end - time.monotonic()))
            if msg.get("method") == "notifications/progress":
                notes.append((t, msg))
            elif msg.get("method") == "notifications/message":
                self.logs.append((t, msg))
            elif msg.get("id") == rid:
                return notes, msg
            else:
                raise AssertionError("unexpected message %r" % msg)

    def request(self, method, params):
        return self.collect(self.start(method, params))[1]

    def quiet(self, seconds):
        """Everything received during the next seconds, but log messages (kept in logs)."""
        got, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                t, msg = self.lines.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                continue
            if msg.get("method") == "notifications/message":
                self.logs.append((t, msg))
            else:
                got.append(msg)
        return got

    def exits(self, pid):
        """The log messages received so far about process pid."""
        return [(t, m) for t, m in self.logs
                if m["params"]["data"].get("process_id") == pid]

    def close(self):
        self.proc.stdin.close()
        rc = self.proc.wait(30)
        self.proc.stdout.close()
        return rc


def call_params(tool, args, token=None, meta=None):
    p = {"name": tool, "arguments": args}
    m = dict(meta or {})
    if token is not None:
        m["progressToken"] = token
    if m:
        p["_meta"] = m
    return p


class TestProgressStdio(Checks, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cs-e2e-progress-")
        os.makedirs(os.path.join(cls.tmp.name, "ws"))
        cls.srv = Stdio(os.path.join(cls.tmp.name, "ws"), cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.close()
        cls.tmp.cleanup()
        if rc != 0:
            raise AssertionError("server exited with %s" % rc)

    def exec_args(self, command, yield_ms=4500):
        return {"workspace_id": "default", "command": command, "yield_ms": yield_ms}

    def test_exec_command_yield_string_token(self):
        rid = self.srv.start("tools/call", call_params("exec_command", self.exec_args(TICK),
                                                       "tok-exec"))
        notes, reply = self.srv.collect(rid)
        self.check_progress(notes, "tok-exec")
        self.check_tick_result(reply["result"])

    def test_exec_command_yield_integer_token(self):
        rid = self.srv.start("tools/call", call_params("exec_command", self.exec_args(TICK), 7))
        notes, reply = self.srv.collect(rid)
        self.check_progress(notes, 7)
        self.check_tick_result(reply["result"])

    def test_exec_command_yield_2026(self):
        """A 2026-07-28 request over stdio: the same notifications, then its result."""
        rid = self.srv.start("tools/call", call_params("exec_command", self.exec_args(TICK),
                                                       "tok-2026", META))
        notes, reply = self.srv.collect(rid)
        self.check_progress(notes, "tok-2026", rev=MODERN)
        self.assertEqual(reply["result"].get("resultType"), "complete", reply)
        self.check_tick_result(reply["result"])

    def test_no_token_no_notification(self):
        rid = self.srv.start("tools/call", call_params("exec_command", self.exec_args(TICK)))
        notes, reply = self.srv.collect(rid)
        self.assertEqual(notes, [])
        self.check_tick_result(reply["result"])

    def test_token_of_another_type_is_ignored(self):
        rid = self.srv.start("tools/call", call_params("exec_command", self.exec_args(TICK),
                                                       {"not": "a token"}))
        notes, reply = self.srv.collect(rid)
        self.assertEqual(notes, [])
        self.check_tick_result(reply["result"])

    def test_no_wait_no_notification(self):
        """yield_ms 0 does not wait: the reply comes at once, with nothing before it."""
        rid = self.srv.start("tools/call", call_params("exec_command",
                                                       self.exec_args(TICK, 0), "t0"))
        notes, reply = self.srv.collect(rid)
        self.assertEqual(notes, [])
        pid = reply["result"]["structuredContent"]["process_id"]
        self.assertEqual(self.srv.quiet(1.5), [])
        self.srv.request("tools/call", call_params("terminate_process", {"process_id": pid}))
        self.finish(pid, {"eof": False, "cursor": 0})

    def test_read_process_wait(self):
        """A long poll that sits in a silent stretch says once how much output there is."""
        first = self.srv.request("tools/call", call_params("exec_command",
                                                           self.exec_args(PAUSE, 0)))
        pid = first["result"]["structuredContent"]["process_id"]
        cursor = 0
        while cursor < 12:  # read line1 and line2 first: the long poll then waits for line3
            r = self.srv.request("tools/call", call_params(
                "read_process", {"process_id": pid, "cursor": cursor, "wait_ms": 2000}))
            cursor = r["result"]["structuredContent"]["cursor"]
        rid = self.srv.start("tools/call", call_params(
            "read_process", {"process_id": pid, "cursor": cursor, "wait_ms": 4500}, "tok-read"))
        notes, reply = self.srv.collect(rid)
        self.check_progress(notes, "tok-read", least=1, most=1)
        self.assertEqual(notes[0][1]["params"]["progress"], 12)
        out = reply["result"]["structuredContent"]
        self.assertEqual(out["chunk"], "line3\n", out)
        self.finish(pid, out)
        # The same wait without a token: no notification.
        first = self.srv.request("tools/call", call_params("exec_command",
                                                           self.exec_args(PAUSE, 0)))
        pid = first["result"]["structuredContent"]["process_id"]
        time.sleep(0.5)
        rid = self.srv.start("tools/call", call_params(
            "read_process", {"process_id": pid, "cursor": 12, "wait_ms": 4500}))
        notes, reply = self.srv.collect(rid)
        self.assertEqual(notes, [])
        out = reply["result"]["structuredContent"]
        self.assertEqual(out["chunk"], "line3\n")
        self.finish(pid, out)

    def finish(self, pid, out):
        """Reads to the end: the workspace is free for the next test once the process ended."""
        while not out["eof"]:
            out = self.srv.request("tools/call", call_params(
                "read_process", {"process_id": pid, "cursor": out["cursor"],
                                 "wait_ms": 2000}))["result"]["structuredContent"]

    def test_cancelled_call_sends_no_more(self):
        rid = self.srv.start("tools/call", call_params(
            "exec_command", self.exec_args(["sh", "-c", "while :; do echo tick; sleep 0.2; done"],
                                           20000), "tok-cancel"))
        t, first = self.srv.lines.get(timeout=TIMEOUT)
        self.assertEqual(first.get("method"), "notifications/progress", first)
        self.assertEqual(first["params"]["message"], "tick")
        self.srv.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": rid}})
        # No reply (the request was cancelled) and no progress after the cancel was handled.
        got = self.srv.quiet(2.5)
        self.assertEqual([m for m in got if m.get("method") == "notifications/progress"
                          and m["params"]["progressToken"] == "tok-cancel"][1:], [], got)
        self.assertEqual([m for m in got if m.get("id") == rid], [], got)


class TestLoggingStdio(Checks, unittest.TestCase):
    """A process exit is one notifications/message, over stdio (docs/protocol.md "Logging")."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cs-e2e-logging-")
        os.makedirs(os.path.join(cls.tmp.name, "ws"))
        cls.srv = Stdio(os.path.join(cls.tmp.name, "ws"), cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.close()
        cls.tmp.cleanup()
        if rc != 0:
            raise AssertionError("server exited with %s" % rc)

    def set_level(self, level):
        r = self.srv.request("logging/setLevel", {"level": level})
        self.assertEqual(r.get("result"), {}, r)

    def run_to_exit(self, command):
        """(process id, reply time, structuredContent) of an exec_command that waits for it."""
        rid = self.srv.start("tools/call", call_params("exec_command", {
            "workspace_id": "default", "command": command, "yield_ms": 10000}))
        _, reply = self.srv.collect(rid)
        t = time.monotonic()
        out = reply["result"]["structuredContent"]
        self.assertEqual(out["state"], "exited", out)
        return out["process_id"], t, out

    def wait_exit(self, pid, timeout=10):
        self.srv.quiet(0)  # takes what already arrived
        end = time.monotonic() + timeout
        while not self.srv.exits(pid) and time.monotonic() < end:
            self.srv.quiet(0.1)
        return self.srv.exits(pid)

    def test_exit_code(self):
        pid, t_reply, out = self.run_to_exit(["sh", "-c", "exit 3"])
        self.assertEqual(out["exit_code"], 3, out)
        self.srv.quiet(0.5)  # one message, not one per something
        logs = self.srv.exits(pid)
        self.assertEqual(len(logs), 1, self.srv.logs)
        t_log, msg = logs[0]
        self.check_exit_message(msg, pid, "exited", 3)
        self.assertLessEqual(t_log, t_reply, "the exit is announced before the reply it ends")

    def test_terminated(self):
        rid = self.srv.start("tools/call", call_params("exec_command", {
            "workspace_id": "default", "command": ["sleep", "30"]}))
        _, reply = self.srv.collect(rid)
        pid = reply["result"]["structuredContent"]["process_id"]
        self.srv.quiet(0.3)
        self.assertEqual(self.srv.exits(pid), [], "announced while it still runs")
        r = self.srv.request("tools/call", call_params("terminate_process", {"process_id": pid}))
        self.assertFalse(r["result"].get("isError"), r)
        logs = self.wait_exit(pid)
        self.srv.quiet(0.3)
        self.assertEqual(len(self.srv.exits(pid)), 1, self.srv.logs)
        self.check_exit_message(logs[0][1], pid, "terminated")

    def test_set_level(self):
        """warning stops the info messages; debug (below info) lets them through again."""
        try:
            self.set_level("warning")
            pid, _, _ = self.run_to_exit(["sh", "-c", "exit 0"])
            self.srv.quiet(1.0)
            self.assertEqual(self.srv.exits(pid), [], self.srv.logs)
            self.set_level("debug")
            pid, _, _ = self.run_to_exit(["true"])
            logs = self.wait_exit(pid)
            self.assertEqual(len(logs), 1, self.srv.logs)
            self.check_exit_message(logs[0][1], pid, "exited", 0)
        finally:
            self.set_level("info")


# ---- Streamable HTTP ----------------------------------------------------------------------------


class HttpServer:
    def __init__(self, workspace, state):
        self.proc = subprocess.Popen(
            [binary(), "--http", "--port", "0", "--workspace", workspace,
             *mcp_stdio.runner_args()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=env_for(state))
        self.port = None
        deadline = time.time() + 10
        while self.port is None and time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("msg") == "listening":
                self.port = int(rec["port"])
        if self.port is None:
            raise AssertionError("the HTTP server did not start")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def post(self, msg, headers):
        """(status, content type, [(time, JSON message)], raw body): an SSE body is read event by
        event as it arrives; a JSON body is one message."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            conn.request("POST", "/mcp", body=json.dumps(msg).encode("utf-8"),
                         headers=dict({"Content-Type": "application/json"}, **headers))
            resp = conn.getresponse()
            ctype = resp.getheader("Content-Type") or ""
            if not ctype.startswith("text/event-stream"):
                body = resp.read()
                msgs = [(time.monotonic(), json.loads(body))] if body else []
                return resp.status, ctype, msgs, body
            events, buf, raw = [], b"", b""
            while True:
                data = resp.read1(65536)
                if not data:
                    break
                raw += data
                buf += data
                while b"\n\n" in buf:
                    block, buf = buf.split(b"\n\n", 1)
                    lines = block.decode("utf-8").split("\n")
                    kinds = [ln for ln in lines if ln.startswith("event:")]
                    assert kinds == ["event: message"], block
                    payload = "".join(ln[len("data: "):] for ln in lines
                                      if ln.startswith("data: "))
                    events.append((time.monotonic(), json.loads(payload)))
            assert buf == b"", buf
            return resp.status, ctype, events, raw
        finally:
            conn.close()

    def close(self):
        self.proc.terminate()
        rc = self.proc.wait(10)
        self.proc.stderr.close()
        return rc


SSE = {"Accept": "application/json, text/event-stream"}
JSON_ONLY = {"Accept": "application/json"}


class TestProgressHttp(Checks, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cs-e2e-progress-http-")
        os.makedirs(os.path.join(cls.tmp.name, "ws"))
        cls.srv = HttpServer(os.path.join(cls.tmp.name, "ws"), cls.tmp.name)
        # The session id comes in a header, which post() does not return.
        conn = http.client.HTTPConnection("127.0.0.1", cls.srv.port, timeout=TIMEOUT)
        conn.request("POST", "/mcp", body=json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": LEGACY, "capabilities": {},
                        "clientInfo": {"name": "e2e-progress", "version": "1"}}}).encode(),
            headers=dict({"Content-Type": "application/json"}, **SSE))
        resp = conn.getresponse()
        resp.read()
        cls.sid = resp.getheader("Mcp-Session-Id")
        conn.close()
        assert cls.sid
        cls.srv.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                     cls.session_headers(SSE))

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.close()
        cls.tmp.cleanup()
        if rc != 0:
            raise AssertionError("server exited with %s" % rc)

    @classmethod
    def session_headers(cls, accept):
        return dict(accept, **{"Mcp-Session-Id": cls.sid, "MCP-Protocol-Version": LEGACY})

    rid = 100

    def call(self, tool, args, accept, token=None, modern=False):
        TestProgressHttp.rid += 1
        rid = TestProgressHttp.rid
        if modern:
            params = call_params(tool, args, token, META)
            headers = dict(accept, **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                                      "Mcp-Name": tool})
        else:
            params = call_params(tool, args, token)
            headers = self.session_headers(accept)
        status, ctype, msgs, raw = self.srv.post(
            {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}, headers)
        self.assertEqual(status, 200, raw)
        self.assertEqual(msgs[-1][1].get("id"), rid, raw)
        # Process exits (notifications/message) may share the stream: kept apart in last_logs.
        self.last_logs = [m for _, m in msgs[:-1] if m.get("method") == "notifications/message"]
        notes = [(t, m) for t, m in msgs[:-1] if m.get("method") != "notifications/message"]
        return ctype, notes, msgs[-1][1], raw

    def tick(self, **kw):
        return self.call("exec_command", {"workspace_id": "default", "command": TICK,
                                          "yield_ms": 4500}, **kw)

    def test_sse_with_token(self):
        ctype, notes, reply, raw = self.tick(accept=SSE, token="tok-http")
        self.assertTrue(ctype.startswith("text/event-stream"), ctype)
        self.assertTrue(all(n.get("method") == "notifications/progress" for _, n in notes), raw)
        self.check_progress(notes, "tok-http")
        self.check_tick_result(reply["result"])
        # The exit of the process this stream waits on is announced on it, once, before the reply.
        pid = reply["result"]["structuredContent"]["process_id"]
        self.assertEqual([m["params"]["data"]["process_id"] for m in self.last_logs], [pid], raw)
        self.check_exit_message(self.last_logs[0], pid, "exited", 0)

    def test_sse_with_token_2026(self):
        ctype, notes, reply, raw = self.tick(accept=SSE, token=99, modern=True)
        self.assertTrue(ctype.startswith("text/event-stream"), ctype)
        self.assertEqual(self.last_logs, [], raw)  # a 2026-07-28 request has no session
        self.check_progress(notes, 99, rev=MODERN)
        self.assertEqual(reply["result"].get("resultType"), "complete", reply)
        self.check_tick_result(reply["result"])

    def test_json_only_accept_gets_plain_json(self):
        for modern in (False, True):
            ctype, notes, reply, raw = self.tick(accept=JSON_ONLY, token="tok-json",
                                                 modern=modern)
            self.assertTrue(ctype.startswith("application/json"), ctype)
            self.assertEqual(notes, [])
            self.check_tick_result(reply["result"])

    def test_no_token_plain_json(self):
        ctype, notes, reply, raw = self.tick(accept=SSE)
        self.assertTrue(ctype.startswith("application/json"), ctype)
        self.assertEqual(notes, [])
        self.check_tick_result(reply["result"])

    def test_read_process_wait_sse(self):
        _, _, first, _ = self.call("exec_command", {"workspace_id": "default", "command": PAUSE},
                                   SSE)
        pid = first["result"]["structuredContent"]["process_id"]
        cursor = 0
        while cursor < 12:
            _, _, r, _ = self.call("read_process", {"process_id": pid, "cursor": cursor,
                                                    "wait_ms": 2000}, SSE)
            cursor = r["result"]["structuredContent"]["cursor"]
        ctype, notes, reply, raw = self.call("read_process", {"process_id": pid,
                                                              "cursor": cursor, "wait_ms": 4500},
                                             SSE, token="tok-read")
        self.assertTrue(ctype.startswith("text/event-stream"), ctype)
        self.check_progress(notes, "tok-read", least=1, most=1)
        out = reply["result"]["structuredContent"]
        self.assertEqual(out["chunk"], "line3\n", reply)
        while not out["eof"]:  # the workspace is free once the process has ended
            _, _, r, _ = self.call("read_process", {"process_id": pid, "cursor": out["cursor"],
                                                    "wait_ms": 2000}, SSE)
            out = r["result"]["structuredContent"]

    def test_client_gone_mid_stream(self):
        """Closing the stream cancels the call: its process is killed (the workspace takes the
        next command), and the server serves on."""
        TestProgressHttp.rid += 1
        body = json.dumps({"jsonrpc": "2.0", "id": TestProgressHttp.rid, "method": "tools/call",
                           "params": call_params("exec_command", {
                               "workspace_id": "default", "yield_ms": 20000,
                               "command": ["sh", "-c", "while :; do echo tick; sleep 0.2; done"]},
                               "tok-gone")}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=TIMEOUT)
        conn.request("POST", "/mcp", body=body, headers=dict(
            {"Content-Type": "application/json"}, **self.session_headers(SSE)))
        resp = conn.getresponse()
        self.assertTrue(resp.getheader("Content-Type", "").startswith("text/event-stream"))
        self.assertEqual(resp.getheader("X-Accel-Buffering"), "no")
        buf = b""
        while b"\n\n" not in buf:
            data = resp.read1(65536)
            self.assertTrue(data, "the stream ended before its first event")
            buf += data
        self.assertIn(b'"tok-gone"', buf)
        conn.sock.close()  # hang up mid-stream
        conn.close()
        deadline = time.monotonic() + 10
        while True:
            ctype, notes, reply, raw = self.tick(accept=JSON_ONLY)
            err = reply["result"].get("isError") and json.loads(
                reply["result"]["content"][0]["text"])["code"]
            if err != "WORKSPACE_BUSY" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.check_tick_result(reply["result"])

    def test_exit_not_queued_without_a_stream(self):
        """An exit while the session has no stream open is not delivered, then or later."""
        ctype, _, reply, raw = self.call("exec_command", {
            "workspace_id": "default", "command": ["sh", "-c", "exit 4"], "yield_ms": 5000},
            JSON_ONLY, token="tok-plain")
        self.assertTrue(ctype.startswith("application/json"), ctype)
        gone = reply["result"]["structuredContent"]["process_id"]
        self.assertEqual(reply["result"]["structuredContent"]["exit_code"], 4, reply)
        ctype, _, reply, raw = self.call("exec_command", {
            "workspace_id": "default", "command": ["sh", "-c", "sleep 1.5; exit 5"],
            "yield_ms": 5000}, SSE, token="tok-next")
        self.assertTrue(ctype.startswith("text/event-stream"), ctype)
        pid = reply["result"]["structuredContent"]["process_id"]
        self.assertNotEqual(pid, gone)
        self.assertEqual([m["params"]["data"]["process_id"] for m in self.last_logs], [pid], raw)
        self.check_exit_message(self.last_logs[0], pid, "exited", 5)

    def test_answer_ready_at_once_is_plain_json(self):
        """A call with a token whose answer is ready when it is handled (here a schema error) is
        answered as plain JSON: a stream is opened only for an answer that waits."""
        ctype, notes, reply, raw = self.call("exec_command", {"workspace_id": "default"}, SSE,
                                             token="tok-bad")
        self.assertTrue(ctype.startswith("application/json"), ctype)
        self.assertTrue(reply["result"]["isError"], reply)


if __name__ == "__main__":
    unittest.main()
