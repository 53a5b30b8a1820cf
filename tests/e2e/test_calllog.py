"""What the operator sees (workflows.md section 6, docs/operations.md "Logs"), through the real
binary: over stdio and over Streamable HTTP (with a bearer token), each in both protocol eras
(a 2025 session and stateless 2026-07-28 requests), a session calls every tool and provokes every
error code a client can reach, then the server's stderr is read back:

- exactly one `info` line "tool call" per call, with `tool`, `duration_ms`, `result` (`ok` or
  the code the client got), `workspace_id` when the call names a registered workspace (or its
  process belongs to one), `process_id` / `operation_id` when there is one: compared as a
  multiset against what the client saw;
- one `warning` "sandbox denial" (`kind`, `target`, `process_id`) per new denial entry, not
  repeated when a later answer carries the same entry (when the sandbox is available);
- no line holds any argument value, file content, output or the bearer token: each of those
  carries a marker unique to the run, and every line is searched for it.

Also: the `starting` line's sandbox fields, and a helper whose probe fails (a script that exits
1) gives a `warning` naming the helper's reason and what follows.

INTERNAL is the one code no client can provoke (the server's own faults). RESOURCE_QUEUE_FULL
uses the test-only hook CODESPACE_TEST_PATCH_HOLD (docs/patch-format.md) to hold a workspace's
lease while 64 patches queue behind it. Standard library only; CODESPACE_MCP_BIN names the
binary, CS_E2E_RUNNER adds --runner:

    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_calllog          (from tests/e2e/)
"""

import collections
import hashlib
import http.client
import json
import os
import queue
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import mcp_stdio

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TIMEOUT = 30.0
FAKE_PROC = "proc-00000000-0000-4000-8000-000000000000"
FAKE_OP = "op-00000000-0000-4000-8000-000000000000"
QUEUE = 64  # CS_TOOLS_LEASE_MAX_WAITERS


def binary():
    b = os.environ.get("CODESPACE_MCP_BIN")
    if not b:
        raise unittest.SkipTest("CODESPACE_MCP_BIN is not set")
    return b


def meta():
    return {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "e2e-calllog", "version": "1"}}


class Proc:
    """codespace-mcp with stderr read line by line into self.lines (a thread)."""

    def __init__(self, args, env, stdio):
        self.proc = subprocess.Popen(
            [binary()] + args + mcp_stdio.runner_args(), env=env,
            stdin=subprocess.PIPE if stdio else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdio else subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines = []
        self.lock = threading.Lock()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for raw in iter(self.proc.stderr.readline, b""):
            with self.lock:
                self.lines.append(raw.decode("utf-8", "replace"))

    def records(self):
        with self.lock:
            lines = list(self.lines)
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"msg": "(not JSON)", "raw": line})
        return out

    def wait_record(self, pred, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for r in self.records():
                if pred(r):
                    return r
            time.sleep(0.02)
        raise AssertionError("no such log line; log:\n" + "".join(self.lines[-30:]))

    def stop(self):
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def tool_result(reply):
    """(structuredContent, None) or (None, error body) of a tools/call reply."""
    assert "result" in reply, reply
    res = reply["result"]
    text = json.loads(res["content"][0]["text"])
    if res.get("isError"):
        return None, text
    return res["structuredContent"], None


class StdioClient:
    def __init__(self, proc, era):
        self.p = proc
        self.era = era
        self.replies = {}
        self.cv = threading.Condition()
        self.next = 1
        threading.Thread(target=self._read, daemon=True).start()
        if era == LEGACY:
            rid = self._send("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                            "clientInfo": {"name": "e2e-calllog", "version": "1"}})
            assert "result" in self._wait(rid)
            self.p.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            self.p.proc.stdin.flush()

    def _read(self):
        for raw in iter(self.p.proc.stdout.readline, b""):
            msg = json.loads(raw)
            if "id" in msg:
                with self.cv:
                    self.replies[msg["id"]] = msg
                    self.cv.notify_all()

    def _send(self, method, params):
        rid = self.next
        self.next += 1
        self.p.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                            "params": params}).encode() + b"\n")
        self.p.proc.stdin.flush()
        return rid

    def _wait(self, rid):
        with self.cv:
            if not self.cv.wait_for(lambda: rid in self.replies, TIMEOUT):
                raise AssertionError("no reply to %d; log:\n%s" % (rid, "".join(self.p.lines)))
            return self.replies.pop(rid)

    def start(self, tool, args):
        params = {"name": tool, "arguments": args}
        if self.era == MODERN:
            params["_meta"] = meta()
        return self._send("tools/call", params)

    def wait(self, handle):
        return tool_result(self._wait(handle))

    def poll(self, handle):
        """The result of handle when it has arrived, else None."""
        with self.cv:
            if handle not in self.replies:
                return None
            return tool_result(self.replies.pop(handle))

    def call(self, tool, args):
        return self.wait(self.start(tool, args))


class HttpClient:
    def __init__(self, port, token, era):
        self.port = port
        self.token = token
        self.era = era
        self.sid = None
        self.next = 1
        self.n_conn = 0
        self.lock = threading.Lock()
        if era == LEGACY:
            status, body, hdrs = self._post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                             "params": {"protocolVersion": LEGACY,
                                                        "capabilities": {},
                                                        "clientInfo": {"name": "e2e-calllog",
                                                                       "version": "1"}}}, {})
            assert status == 200, body
            self.sid = hdrs["mcp-session-id"]
            self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}, {})

    def _post(self, msg, headers):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "Authorization": "Bearer " + self.token}
        if self.sid:
            h["Mcp-Session-Id"] = self.sid
            h["MCP-Protocol-Version"] = LEGACY
        h.update(headers)
        # From several loopback addresses: 66 held requests exceed the server's per-address
        # budget of 64 connections (docs/http.md).
        with self.lock:
            self.n_conn += 1
            src = "127.0.0.%d" % (2 + self.n_conn % 4)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT,
                                          source_address=(src, 0))
        try:
            conn.request("POST", "/mcp", body=json.dumps(msg).encode(), headers=h)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(), {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()

    def call(self, tool, args):
        with self.lock:
            rid = self.next
            self.next += 1
        params = {"name": tool, "arguments": args}
        headers = {}
        if self.era == MODERN:
            params["_meta"] = meta()
            headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                       "Mcp-Name": tool}
        status, body, _ = self._post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                      "params": params}, headers)
        assert status == 200, (status, body)
        return tool_result(json.loads(body))

    # concurrent calls: a thread each
    def start(self, tool, args):
        q = queue.Queue(1)
        threading.Thread(target=lambda: q.put(self.call(tool, args)), daemon=True).start()
        return q

    def wait(self, handle):
        return handle.get(timeout=TIMEOUT)

    def poll(self, handle):
        try:
            return handle.get_nowait()
        except queue.Empty:
            return None


def sha(data):
    return hashlib.sha256(data).hexdigest()


class Base:
    """The scenario, once per transport and era (the subclasses)."""

    http = False

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cs-e2e-calllog-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.roots = {}
        for name in ("default", "ro", "box", "short", "q"):
            cls.roots[name] = os.path.join(cls.tmp, "roots", name)
            os.makedirs(cls.roots[name])
        cls.hold = os.path.join(cls.tmp, "hold-file")
        reg = {"environments": {"boxenv": {"kind": "linux-container"}}, "workspaces": {
            "default": {"root": cls.roots["default"], "profile": "workspace-write",
                        "deny": [".env"]},
            "ro": {"root": cls.roots["ro"], "profile": "read-only"},
            "box": {"root": cls.roots["box"], "environment": "boxenv",
                    "profile": "workspace-write"},
            "short": {"root": cls.roots["short"], "profile": "workspace-write",
                      "limits": {"timeout_ms": 1000}},
            "q": {"root": cls.roots["q"], "profile": "workspace-write"}}}
        registry = os.path.join(cls.tmp, "registry.json")
        with open(registry, "w") as f:
            json.dump(reg, f)
        state = os.path.join(cls.tmp, "state")
        os.makedirs(state)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env.update(XDG_STATE_HOME=state, CODESPACE_TEST_PATCH_HOLD=cls.hold,
                   TMPDIR=cls.tmp)
        args = ["--config", registry, "--operations-db", os.path.join(tmp_db(cls.tmp)),
                "--log-level", "info"]
        cls.token = "tok-" + secrets.token_hex(8)
        if cls.http:
            args += ["--http", "--port", "0", "--token", cls.token]
        cls.p = Proc(args, env, stdio=not cls.http)
        cls.addClassCleanup(cls.p.stop)
        cls.start_line = cls.p.wait_record(lambda r: r.get("msg") == "starting")
        if cls.http:
            cls.port = int(cls.p.wait_record(lambda r: r.get("msg") == "listening")["port"])

    def client(self, era):
        if self.http:
            return HttpClient(self.port, self.token, era)
        if not hasattr(type(self), "stdio"):  # one reader of the pipe, one 2025 session
            type(self).stdio = StdioClient(self.p, LEGACY)
        type(self).stdio.era = era
        return type(self).stdio

    def test_starting_line(self):
        s = self.start_line
        self.assertIn(s["command_sandbox"], ("linux-sandbox", "none"), s)
        self.assertEqual(s["network_enforcement"],
                         "enforced" if s["command_sandbox"] == "linux-sandbox" else "none", s)
        self.assertIsInstance(s["landlock_abi"], int)
        if s["command_sandbox"] == "none":
            self.assertEqual(s["landlock_abi"], 0)

    def test_legacy(self):
        self.scenario(LEGACY)

    def test_modern(self):
        self.scenario(MODERN)

    def scenario(self, era):
        c = self.client(era)
        mark = "mk" + secrets.token_hex(6)  # in every argument value, content and output
        ws = self.roots["default"]
        before = len(self.p.records())
        expected = []

        def call(tool, args, code=None, wsid=None, pid=None, opid=None):
            out, err = c.call(tool, args)
            got = err["code"] if err else "ok"
            self.assertEqual(got, code or "ok", (tool, args, out, err))
            if err and err.get("operation_id"):
                opid = err["operation_id"]
            rec = {"tool": tool, "result": got}
            for k, v in (("workspace_id", wsid), ("process_id", pid), ("operation_id", opid)):
                if v:
                    rec[k] = v
            expected.append(rec)
            return out, err

        with open(os.path.join(ws, mark + ".txt"), "w") as f:
            f.write("content-%s\n" % mark)
        os.makedirs(os.path.join(ws, "sub-" + mark), exist_ok=True)
        with open(os.path.join(ws, ".env"), "w") as f:
            f.write("secret-%s\n" % mark)
        link = os.path.join(ws, "link-" + mark)
        if not os.path.lexists(link):
            os.symlink(mark + ".txt", link)
        fifo = os.path.join(ws, "fifo-" + mark)
        os.mkfifo(fifo)

        # workspace_info
        call("workspace_info", {})
        call("workspace_info", {"workspace_id": "default"}, wsid="default")
        call("workspace_info", {"workspace_id": "nope-" + mark}, "WORKSPACE_NOT_FOUND")
        # read and find
        out, _ = call("read", {"workspace_id": "default", "path": mark + ".txt"}, wsid="default")
        self.assertIn(mark, out["content"])
        call("read", {"workspace_id": "default", "path": "missing-" + mark}, "FILE_NOT_FOUND",
             wsid="default")
        call("read", {"workspace_id": "default", "path": "../" + mark}, "PATH_ESCAPE",
             wsid="default")
        call("read", {"workspace_id": "default", "path": mark + ".txt/x"},
             "PATH_NOT_DIRECTORY", wsid="default")
        call("read", {"workspace_id": "default", "path": "sub-" + mark},
             "FILE_OPERATION_FAILED", wsid="default")
        call("read", {"workspace_id": "default", "path": "link-" + mark}, "SYMLINK_REJECTED",
             wsid="default")
        call("read", {"workspace_id": "default", "path": "fifo-" + mark},
             "SPECIAL_FILE_REJECTED", wsid="default")
        call("read", {"workspace_id": "default", "path": ".env"}, "PATH_DENIED", wsid="default")
        call("read", {"workspace_id": "default", "path": mark + ".txt", "limit": 0},
             "OUTPUT_LIMIT", wsid="default")
        call("read", {"workspace_id": "box", "path": mark + ".txt"}, "UNAUTHORIZED", wsid="box")
        # Arguments refused: the line still names the workspace when it is a registered one.
        call("read", {"workspace_id": "default", "bogus-" + mark: mark}, "INVALID_ARGUMENTS",
             wsid="default")
        call("exec_command", {"workspace_id": "default", "command": [1]}, "INVALID_ARGUMENTS",
             wsid="default")
        call("read", {"workspace_id": "nope-" + mark}, "INVALID_ARGUMENTS")
        call("read", {"workspace_id": 7, "path": "x"}, "INVALID_ARGUMENTS")
        out, _ = call("find", {"workspace_id": "default", "glob": "*" + mark + "*"},
                      wsid="default")
        self.assertTrue(any(mark in p for p in out["paths"]), out)
        # apply_patch and operation_status
        add = "*** Begin Patch\n*** Add File: p-%s.txt\n+patched-%s\n*** End Patch\n" % (mark, mark)
        out, _ = c.call("apply_patch", {"workspace_id": "default", "patch": add,
                                        "operation_key": "key-" + mark})
        self.assertEqual(out["status"], "applied", out)
        op = out["operation_id"]
        expected.append({"tool": "apply_patch", "result": "ok", "workspace_id": "default",
                         "operation_id": op})
        # The same key and patch again: answered from the ledger, and the line says so.
        out, _ = c.call("apply_patch", {"workspace_id": "default", "patch": add,
                                        "operation_key": "key-" + mark})
        self.assertEqual((out["operation_id"], out["replayed"]), (op, True), out)
        expected.append({"tool": "apply_patch", "result": "ok", "workspace_id": "default",
                         "operation_id": op, "replayed": True})
        other = add.replace("p-", "q-")
        call("apply_patch", {"workspace_id": "default", "patch": other,
                             "operation_key": "key-" + mark}, "OPERATION_KEY_CONFLICT",
             wsid="default")
        call("apply_patch", {"workspace_id": "default",
                             "patch": "*** Begin Patch\n*** Frob: %s\n" % mark},
             "INVALID_PATCH", wsid="default")
        call("apply_patch", {"workspace_id": "default", "patch": add}, "ADD_FILE_EXISTS",
             wsid="default")
        move = ("*** Begin Patch\n*** Update File: p-%s.txt\n*** Move to: %s.txt\n@@\n-patched-%s\n"
                "+moved-%s\n*** End Patch\n" % (mark, mark, mark, mark))
        call("apply_patch", {"workspace_id": "default", "patch": move},
             "MOVE_DESTINATION_EXISTS", wsid="default")
        upd = ("*** Begin Patch\n*** Update File: p-%s.txt\n@@\n-patched-%s\n+v2-%s\n"
               "*** End Patch\n" % (mark, mark, mark))
        call("apply_patch", {"workspace_id": "default", "patch": upd,
                             "expected_versions": {"p-%s.txt" % mark: sha(b"x")}},
             "VERSION_CONFLICT", wsid="default")
        call("apply_patch", {"workspace_id": "ro", "patch": add}, "UNAUTHORIZED", wsid="ro")
        call("operation_status", {"operation_id": op}, wsid="default", opid=op)
        call("operation_status", {"operation_id": FAKE_OP}, "OPERATION_NOT_FOUND", opid=FAKE_OP)
        call("operation_status", {"operation_key": "nokey-" + mark}, "OPERATION_NOT_FOUND")
        # processes
        call("exec_command", {"workspace_id": "default", "command": []}, "INVALID_COMMAND",
             wsid="default")
        call("exec_command", {"workspace_id": "default", "command": ["cs-none-" + mark]},
             "PROCESS_SPAWN_FAILED", wsid="default")
        script = ("unshare -U true 2>/dev/null; echo out-$0; read line; echo got-$line; "
                  "sleep 60")
        out, _ = c.call("exec_command", {"workspace_id": "default",
                                         "command": ["sh", "-c", script, "arg-" + mark],
                                         "yield_ms": 2000})
        pid = out["process_id"]
        self.assertIn("out-arg-" + mark, out.get("output", ""), out)
        expected.append({"tool": "exec_command", "result": "ok", "workspace_id": "default",
                         "process_id": pid})
        call("exec_command", {"workspace_id": "default", "command": ["true", mark]},
             "WORKSPACE_BUSY", wsid="default")
        call("write_stdin", {"process_id": pid, "data": "in-%s\n" % mark}, wsid="default",
             pid=pid)
        out, _ = call("read_process", {"process_id": pid, "cursor": 0, "wait_ms": 2000},
                      wsid="default", pid=pid)
        call("process_status", {"process_id": pid}, wsid="default", pid=pid)
        call("process_resize", {"process_id": pid, "rows": 30, "cols": 90}, "PROCESS_NOT_TTY",
             wsid="default", pid=pid)
        call("terminate_process", {"process_id": pid}, wsid="default", pid=pid)
        # Once it has exited its answers carry the refused unshare: each of these two does.
        for _ in range(2):
            call("process_status", {"process_id": pid}, wsid="default", pid=pid)
            call("read_process", {"process_id": pid, "cursor": 0}, wsid="default", pid=pid)
        call("write_stdin", {"process_id": pid, "data": mark}, "PROCESS_NOT_FOUND",
             wsid="default", pid=pid)
        out, _ = c.call("exec_command", {"workspace_id": "q", "command": ["true", mark],
                                         "tty": True, "yield_ms": 5000})
        self.assertEqual(out["state"], "exited", out)
        tpid = out["process_id"]
        expected.append({"tool": "exec_command", "result": "ok", "workspace_id": "q",
                         "process_id": tpid})
        call("process_resize", {"process_id": tpid, "rows": 30, "cols": 90},
             "PROCESS_NOT_RUNNING", wsid="q", pid=tpid)
        call("process_status", {"process_id": FAKE_PROC}, "PROCESS_NOT_FOUND", pid=FAKE_PROC)
        call("process_status", {"process_id": "proc-" + mark}, "PROCESS_NOT_FOUND")
        # TIMEOUT: a process past its workspace's 1 s limit, read at its end
        out, _ = c.call("exec_command", {"workspace_id": "short",
                                         "command": ["sh", "-c", "sleep 30", mark], "yield_ms": 5000})
        self.assertEqual(out.get("termination"), "timeout", out)
        spid = out["process_id"]
        expected.append({"tool": "exec_command", "result": "ok", "workspace_id": "short",
                         "process_id": spid})
        call("read_process", {"process_id": spid, "cursor": 0}, "TIMEOUT", wsid="short",
             pid=spid)
        # RESOURCE_QUEUE_FULL: a patch held in preflight holds the lease; 64 wait behind it and
        # one more is refused. Over HTTP the 65 race each other, so whichever arrives last is
        # the refused one: exactly one, answered while the others wait.
        with open(self.hold, "w"):
            pass
        held_at = time.monotonic()
        held = c.start("apply_patch", {"workspace_id": "q", "patch":
                                       "*** Begin Patch\n*** Add File: hold/%s\n+h\n*** End Patch\n"
                                       % mark})
        time.sleep(1.0 if self.http else 0.1)  # the holder first
        waiters = []
        for i in range(QUEUE + 1):
            waiters.append(c.start("apply_patch", {
                "workspace_id": "q", "check_only": True,
                "patch": "*** Begin Patch\n*** Add File: w%d-%s\n+w\n*** End Patch\n" % (i, mark)}))
        results = {}
        deadline = time.monotonic() + TIMEOUT
        while not results and time.monotonic() < deadline:
            for i, h in enumerate(waiters):
                r = c.poll(h)
                if r is not None:
                    results[i] = r
            time.sleep(0.01)
        self.assertEqual(len(results), 1, results)  # the others wait behind the holder
        (out, err), = results.values()
        self.assertEqual(err and err["code"], "RESOURCE_QUEUE_FULL", (out, err))
        expected.append({"tool": "apply_patch", "result": "RESOURCE_QUEUE_FULL",
                         "workspace_id": "q"})
        time.sleep(max(0.0, 1.0 - (time.monotonic() - held_at)))  # held at least 1 s
        os.unlink(self.hold)
        for i, h in enumerate([held] + waiters):
            if i - 1 in results:
                continue
            out, err = c.wait(h)
            self.assertIsNone(err, err)
            expected.append({"tool": "apply_patch", "result": "ok", "workspace_id": "q",
                             "operation_id": out["operation_id"]})

        # Every code a client can reach was provoked.
        seen = {r["result"] for r in expected}
        self.assertEqual(set(error_codes()) - {"INTERNAL"} - seen, set())

        # The log: one line per call, as the client saw it.
        deadline = time.monotonic() + 10
        while True:
            recs = self.p.records()[before:]
            calls = [r for r in recs if r.get("msg") == "tool call"]
            if len(calls) >= len(expected) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for r in calls:
            self.assertEqual(r["level"], "info", r)
            self.assertIsInstance(r["duration_ms"], int, r)
            self.assertGreaterEqual(r["duration_ms"], 0, r)
        got = collections.Counter(json.dumps({k: v for k, v in r.items()
                                               if k not in ("ts", "level", "msg", "duration_ms")},
                                              sort_keys=True) for r in calls)
        want = collections.Counter(json.dumps(r, sort_keys=True) for r in expected)
        self.assertEqual(got - want, collections.Counter(), "logged but not expected")
        self.assertEqual(want - got, collections.Counter(), "expected but not logged")
        # The wait of the held patch is in its duration.
        held_line = [r for r in calls if r["tool"] == "apply_patch" and
                     r.get("workspace_id") == "q" and r["result"] == "ok"]
        self.assertGreaterEqual(max(r["duration_ms"] for r in held_line), 900)

        # Denials: the refused unshare once, though three answers carried it.
        denials = [r for r in recs if r.get("msg") == "sandbox denial"]
        if self.start_line["command_sandbox"] == "linux-sandbox":
            mine = [r for r in denials if r.get("process_id") == pid]
            self.assertEqual(len(mine), 1, denials)
            d = mine[0]
            self.assertEqual((d["level"], d["kind"], d["target"], d["workspace_id"]),
                             ("warning", "syscall", "unshare", "default"), d)
        else:
            self.assertEqual(denials, [])

        # Nothing the client sent, no content, no output, no token, in any line.
        with self.p.lock:
            lines = list(self.p.lines)
        for line in lines:
            self.assertNotIn(mark, line)
            self.assertNotIn(self.token, line)


def tmp_db(tmp):
    return os.path.join(tmp, "ops.db")


def error_codes():
    """Every code of the catalogue (schema/errors.json)."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "schema", "errors.json"), encoding="utf-8") as f:
        return json.load(f)["$defs"]["code"]["enum"]


class CallLogStdio(Base, unittest.TestCase):
    http = False


class CallLogHttp(Base, unittest.TestCase):
    http = True


class ProbeWarning(unittest.TestCase):
    """A helper whose probe fails: the starting line says so, and a warning says why and what
    follows."""

    def test_failed_probe(self):
        with tempfile.TemporaryDirectory(prefix="cs-e2e-calllog-probe-") as tmp:
            helper = os.path.join(tmp, "broken-helper")
            with open(helper, "w") as f:
                f.write("#!/bin/sh\necho 'helper-says-no-userns' >&2\nexit 1\n")
            os.chmod(helper, 0o755)
            env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
            env.update(XDG_STATE_HOME=tmp, CODESPACE_LINUX_SANDBOX_BIN=helper)
            os.makedirs(os.path.join(tmp, "ws"))
            p = Proc(["--workspace", os.path.join(tmp, "ws"), "--operations-db", ":memory:",
                      "--log-level", "warning"], env, stdio=True)
            try:
                w = p.wait_record(lambda r: r.get("msg") == "the Linux sandbox probe failed")
                self.assertEqual(w["level"], "warning")
                self.assertIn("helper-says-no-userns", w["reason"])
                if os.geteuid() == 0:
                    self.assertIn("no command runs", w["consequence"])
                else:
                    self.assertIn("unsandboxed", w["consequence"])
            finally:
                p.stop()
            p2 = Proc(["--workspace", os.path.join(tmp, "ws"), "--operations-db", ":memory:"],
                      env, stdio=True)
            try:
                s = p2.wait_record(lambda r: r.get("msg") == "starting")
                self.assertEqual((s["command_sandbox"], s["network_enforcement"],
                                  s["landlock_abi"]), ("none", "none", 0), s)
            finally:
                p2.stop()


if __name__ == "__main__":
    unittest.main()
