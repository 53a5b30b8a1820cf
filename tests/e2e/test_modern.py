"""End-to-end tests of MCP 2026-07-28 beside the 2025 revisions (docs/protocol.md), on the real
binary over stdio and Streamable HTTP: server/discover, tools/list with caching hints, every tool
under both eras (same content for the same inputs), each error of the validation order with its
code (and HTTP status), no session for 2026 requests, a 2025 session beside them, and ids echoed
exactly as written (beyond 64 bits, negative; ping, tools/call, batches on 2025-03-26).

Replies are checked as raw text where the id matters (a JSON parser would round the number).
Standard library only; CODESPACE_MCP_BIN names the binary, CS_E2E_RUNNER adds --runner:

    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_modern          (from tests/e2e/)
"""

import base64
import http.client
import json
import os
import queue
import re
import subprocess
import tempfile
import threading
import time
import unittest

import mcp_stdio  # runner_args()

MODERN = "2026-07-28"
TIMEOUT = 30.0
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "e2e-modern", "version": "1"}}
BIG_IDS = ("9223372036854775808", "-9223372036854775809", "12345678901234567890123", "-7", "-0",
           '"\\u0069d-string"')
PATCH = "*** Begin Patch\n*** Add File: %s\n+hello %s\n*** End Patch\n"


def binary():
    b = os.environ.get("CODESPACE_MCP_BIN")
    if not b:
        raise unittest.SkipTest("CODESPACE_MCP_BIN is not set")
    return b


def env_for(state):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
    env["XDG_STATE_HOME"] = state
    env["CODESPACE_OPERATIONS_DB"] = ":memory:"
    return env


def modern_params(extra=None, meta=None):
    p = dict(extra or {})
    p["_meta"] = dict(META if meta is None else meta)
    return p


def raw_id(text):
    """The raw token of the top-level "id" of a reply we produce ({"jsonrpc":"2.0","id":...)."""
    m = re.match(r'\{"jsonrpc":"2\.0","id":("(?:[^"\\]|\\.)*"|[-0-9]+)[,}]', text)
    return m.group(1) if m else None


class StdioTransport:
    """Raw lines over a pipe: send(text) and recv() give and take JSON text."""

    name = "stdio"

    def __init__(self, workspace, state):
        self.proc = subprocess.Popen(
            [binary(), "--workspace", workspace, "--log-level", "error",
             *mcp_stdio.runner_args()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env_for(state))
        self.lines = queue.Queue()
        self.logs = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8").rstrip("\n")
            # Once the 2025 session is initialized, a process exit is announced as a
            # notifications/message line between replies (docs/protocol.md "Logging"); it answers
            # no request here, and test_progress checks it.
            if line.startswith('{"jsonrpc":"2.0","method":"notifications/message",'):
                self.logs.append(line)
                continue
            self.lines.put(line)

    def exchange(self, text, headers=None, want_reply=True):
        """Sends one message; returns (status None, reply text or None)."""
        del headers  # stdio has none
        self.proc.stdin.write(text.encode("utf-8") + b"\n")
        self.proc.stdin.flush()
        if not want_reply:
            return None, None
        return None, self.lines.get(timeout=TIMEOUT)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)
        self.proc.stdout.close()


class HttpTransport:
    """One codespace-mcp --http; exchange() POSTs and returns (status, body text, headers)."""

    name = "http"

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
        self.last_headers = {}

    def post(self, text, headers):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        h.update(headers or {})
        try:
            conn.request("POST", "/mcp", body=text.encode("utf-8"), headers=h)
            resp = conn.getresponse()
            body = resp.read().decode("utf-8")
            return resp.status, body, {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()

    def exchange(self, text, headers=None, want_reply=True):
        status, body, hdrs = self.post(text, headers)
        self.last_headers = hdrs
        return status, (body if body else None)

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.proc.stderr.close()


def modern_headers(method, name=None, version=MODERN):
    h = {"MCP-Protocol-Version": version, "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    return h


class ModernBase:
    """The tests, once per transport (subclasses set transport)."""

    transport = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cs-e2e-modern-")
        cls.ws = os.path.join(cls.tmp.name, "ws")
        os.mkdir(cls.ws)
        with open(os.path.join(cls.ws, "a.txt"), "w") as f:
            f.write("alpha\nbeta\n")
        cls.t = cls.transport(cls.ws, cls.tmp.name)
        cls.sid = None
        cls.next = 1000

    @classmethod
    def tearDownClass(cls):
        cls.t.close()
        cls.tmp.cleanup()

    # ---- helpers ----

    def new_id(self):
        type(self).next += 1
        return self.next

    def modern(self, method, params=None, rid=None, headers=None, meta=None, name=None):
        """A 2026 request; returns (status, reply dict, reply text)."""
        rid = self.new_id() if rid is None else rid
        msg = {"jsonrpc": "2.0", "id": rid, "method": method,
               "params": modern_params(params, meta)}
        if headers is None:
            headers = modern_headers(method, name)
        status, text = self.t.exchange(json.dumps(msg), headers)
        return status, json.loads(text), text

    def legacy_session(self, version="2025-11-25"):
        """Opens (stdio: the process's) 2025 session once per version; returns its headers."""
        if self.t.name == "stdio":
            if getattr(type(self), "stdio_version", None) is None:
                self.t.exchange(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                            "params": {"protocolVersion": version,
                                                       "capabilities": {},
                                                       "clientInfo": {"name": "e", "version": "1"}}}))
                self.t.exchange(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                                want_reply=False)
                type(self).stdio_version = version
            return {}
        status, text = self.t.exchange(json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": version, "capabilities": {},
                        "clientInfo": {"name": "e", "version": "1"}}}))
        self.assertEqual(status, 200, text)
        sid = self.t.last_headers.get("mcp-session-id")
        self.assertTrue(sid)
        hdrs = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": version}
        self.t.exchange(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                        hdrs)
        return hdrs

    def legacy(self, method, params=None, rid=None, hdrs=None):
        rid = self.new_id() if rid is None else rid
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        status, text = self.t.exchange(json.dumps(msg), hdrs or {})
        return status, json.loads(text), text

    def check_status(self, status, want):
        if self.t.name == "http":
            self.assertEqual(status, want)

    def error(self, reply, code, rid="same"):
        self.assertIn("error", reply, reply)
        self.assertEqual(reply["error"]["code"], code, reply)
        self.assertNotIn("result", reply)

    # ---- discover and tools/list ----

    def test_discover(self):
        status, r, text = self.modern("server/discover")
        self.check_status(status, 200)
        res = r["result"]
        self.assertEqual(res["resultType"], "complete")
        self.assertEqual(res["supportedVersions"][0], MODERN)
        for v in ("2025-11-25", "2025-06-18", "2025-03-26"):
            self.assertIn(v, res["supportedVersions"])
        self.assertEqual(res["capabilities"]["tools"], {"listChanged": False})
        self.assertNotIn("prompts", res["capabilities"])
        self.assertNotIn("resources", res["capabilities"])
        # No request of this revision is ever sent notifications/message (no session), and
        # logging is announced only where it is sent (workflows.md section 5).
        self.assertNotIn("logging", res["capabilities"])
        self.assertIsInstance(res["instructions"], str)
        self.assertIsInstance(res["ttlMs"], int)
        self.assertGreaterEqual(res["ttlMs"], 0)
        self.assertIn(res["cacheScope"], ("public", "private"))
        info = res["_meta"]["io.modelcontextprotocol/serverInfo"]
        self.assertEqual(info["name"], "codespace")
        self.assertNotIn("serverInfo", res)
        if self.t.name == "http":
            self.assertNotIn("mcp-session-id", self.t.last_headers)

    def test_client_info_is_optional(self):
        meta = {k: v for k, v in META.items() if not k.endswith("clientInfo")}
        status, r, _ = self.modern("server/discover", meta=meta)
        self.check_status(status, 200)
        self.assertIn("result", r)

    def test_tools_list_with_hints_same_tools_as_2025(self):
        status, r, _ = self.modern("tools/list")
        self.check_status(status, 200)
        res = r["result"]
        self.assertEqual(res["resultType"], "complete")
        self.assertIsInstance(res["ttlMs"], int)
        self.assertIn(res["cacheScope"], ("public", "private"))
        hdrs = self.legacy_session()
        _, old, _ = self.legacy("tools/list", {}, hdrs=hdrs)
        self.assertEqual(res["tools"], old["result"]["tools"])
        self.assertEqual(len(res["tools"]), 11)
        self.assertNotIn("resultType", old["result"])
        self.assertNotIn("ttlMs", old["result"])

    # ---- every tool, both eras ----

    def call_both(self, name, args, hdrs):
        """tools/call under 2026 and under the 2025 session; returns both results."""
        status, m, _ = self.modern("tools/call", {"name": name, "arguments": args}, name=name)
        self.check_status(status, 200)
        _, l, _ = self.legacy("tools/call", {"name": name, "arguments": args}, hdrs=hdrs)
        mres, lres = m["result"], l["result"]
        self.assertEqual(mres.pop("resultType"), "complete")
        self.assertEqual(mres.pop("_meta")["io.modelcontextprotocol/serverInfo"]["name"],
                         "codespace")
        return mres, lres

    def same(self, name, args, hdrs):
        """Same content in both eras, fresh operation ids aside (each call mints its own)."""
        mres, lres = self.call_both(name, args, hdrs)

        def norm(v):
            return re.sub(r"op-[0-9a-f-]{36}", "op-X", json.dumps(v, sort_keys=True))
        self.assertEqual(norm(mres), norm(lres), name)
        return mres

    def call_modern(self, name, args):
        status, r, _ = self.modern("tools/call", {"name": name, "arguments": args}, name=name)
        self.check_status(status, 200)
        res = r["result"]
        self.assertEqual(res["resultType"], "complete")
        if not res.get("isError"):
            self.assertEqual(json.loads(res["content"][0]["text"]), res["structuredContent"])
        return res

    def test_every_tool_same_content_in_both_eras(self):
        hdrs = self.legacy_session()
        self.same("workspace_info", {}, hdrs)
        self.same("read", {"workspace_id": "default", "path": "a.txt"}, hdrs)
        self.same("read", {"workspace_id": "default", "path": "missing.txt"}, hdrs)
        self.same("read", {"workspace_id": "default", "path": 5}, hdrs)  # INVALID_ARGUMENTS
        self.same("find", {"workspace_id": "default", "glob": "*.txt"}, hdrs)
        self.same("apply_patch", {"workspace_id": "default", "check_only": True,
                                  "patch": PATCH % ("same.txt", "x")}, hdrs)
        self.same("operation_status", {"operation_key": "never-used"}, hdrs)
        self.same("process_status", {"process_id": "proc-00000000-0000-4000-8000-000000000000"},
                  hdrs)
        # Writes and processes: each era its own, checked for shape and outcome.
        for era in ("modern", "legacy"):
            path = "new-%s-%s.txt" % (self.t.name, era)
            args = {"workspace_id": "default", "patch": PATCH % (path, era),
                    "operation_key": "k-%s-%s" % (self.t.name, era)}
            if era == "modern":
                res = self.call_modern("apply_patch", args)["structuredContent"]
            else:
                res = self.legacy("tools/call", {"name": "apply_patch", "arguments": args},
                                  hdrs=hdrs)[1]["result"]["structuredContent"]
            self.assertEqual(res["status"], "applied", res)
            with open(os.path.join(self.ws, path)) as f:
                self.assertEqual(f.read(), "hello %s\n" % era)
        st = self.call_modern("operation_status",
                              {"operation_key": "k-%s-legacy" % self.t.name})
        self.assertFalse(st.get("isError"), st)
        proc = self.call_modern("exec_command", {"workspace_id": "default",
                                                 "command": ["cat"], "yield_ms": 50})
        self.assertFalse(proc.get("isError"), proc)
        pid = proc["structuredContent"]["process_id"]
        self.assertFalse(self.call_modern("write_stdin", {"process_id": pid,
                                                          "data": "ping\n"}).get("isError"))
        out, cursor = "", 0
        deadline = time.time() + 15
        while "ping" not in out and time.time() < deadline:
            rp = self.call_modern("read_process", {"process_id": pid, "cursor": cursor,
                                                   "wait_ms": 500})
            self.assertFalse(rp.get("isError"), rp)
            sc = rp["structuredContent"]
            out += sc.get("chunk", "")
            cursor = sc.get("cursor", cursor)
        self.assertIn("ping", out)
        self.assertFalse(self.call_modern("process_status", {"process_id": pid}).get("isError"))
        resize = self.call_modern("process_resize", {"process_id": pid, "rows": 30, "cols": 100})
        _, l, _ = self.legacy("tools/call", {"name": "process_resize", "arguments": {
            "process_id": pid, "rows": 30, "cols": 100}}, hdrs=hdrs)
        self.assertEqual(resize.get("isError"), l["result"].get("isError"))  # pipes: same answer
        self.assertFalse(self.call_modern("write_stdin", {"process_id": pid, "data": "",
                                                          "close": True}).get("isError"))
        term = self.call_modern("terminate_process", {"process_id": pid})
        self.assertFalse(term.get("isError"), term)

    # ---- the validation order ----

    def test_missing_meta_keys_are_invalid_params(self):
        for rid, params in ((101, {}),
                            (102, {"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}),
                            (104, {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}})):
            msg = {"jsonrpc": "2.0", "id": rid, "method": "server/discover", "params": params}
            status, text = self.t.exchange(json.dumps(msg), modern_headers("server/discover"))
            r = json.loads(text)
            self.error(r, -32602)
            self.assertEqual(r["id"], rid)
            self.check_status(status, 400)

    def test_unsupported_version(self):
        meta = dict(META, **{"io.modelcontextprotocol/protocolVersion": "v999.0.0"})
        status, r, _ = self.modern("server/discover", meta=meta,
                                   headers=modern_headers("server/discover", version="v999.0.0"))
        self.error(r, -32022)
        self.check_status(status, 400)
        self.assertEqual(r["error"]["data"]["requested"], "v999.0.0")
        self.assertIn(MODERN, r["error"]["data"]["supported"])

    def test_removed_and_unknown_methods_are_404(self):
        for method in ("initialize", "ping", "logging/setLevel", "resources/subscribe",
                       "resources/list", "prompts/list", "subscriptions/listen", "unknown/method"):
            with self.subTest(method=method):
                status, r, _ = self.modern(method, {"level": "info"})
                self.error(r, -32601)
                self.check_status(status, 404)

    def test_invalid_log_level(self):
        meta = dict(META, **{"io.modelcontextprotocol/logLevel": "loud"})
        status, r, _ = self.modern("tools/list", meta=meta)
        self.error(r, -32602)
        self.check_status(status, 400)
        meta["io.modelcontextprotocol/logLevel"] = "warning"
        status, r, _ = self.modern("tools/list", meta=meta)
        self.assertIn("result", r)

    def test_unknown_tool(self):
        status, r, _ = self.modern("tools/call", {"name": "nope", "arguments": {}}, name="nope")
        self.error(r, -32602)

    def test_null_id_has_no_id_in_reply(self):
        msg = {"jsonrpc": "2.0", "id": None, "method": "tools/list", "params": modern_params()}
        status, text = self.t.exchange(json.dumps(msg), modern_headers("tools/list"))
        r = json.loads(text)
        self.error(r, -32600)
        self.assertNotIn("id", r)
        self.check_status(status, 400)

    def test_modern_request_before_any_initialize_on_a_fresh_process(self):
        t = self.transport(self.ws, self.tmp.name)
        try:
            msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": modern_params()}
            status, text = t.exchange(json.dumps(msg), modern_headers("tools/list"))
            self.assertIn("result", json.loads(text))
            # ...and a 2025 request there still needs initialize.
            status, text = t.exchange(json.dumps({"jsonrpc": "2.0", "id": 2,
                                                  "method": "tools/list"}))
            self.assertEqual(json.loads(text)["error"]["code"], -32600)
        finally:
            t.close()

    # ---- ids echoed exactly ----

    def test_ids_echoed_exactly(self):
        hdrs = self.legacy_session()
        for tok in BIG_IDS:
            with self.subTest(id=tok):
                text = '{"jsonrpc":"2.0","id":%s,"method":"ping"}' % tok
                _, reply = self.t.exchange(text, hdrs)
                self.assertEqual(raw_id(reply), tok, reply)
                text = ('{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":'
                        '{"name":"workspace_info","arguments":{}}}' % tok)
                _, reply = self.t.exchange(text, hdrs)
                self.assertEqual(raw_id(reply), tok, reply)
                text = ('{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":%s}'
                        % (tok, json.dumps(modern_params({"name": "read", "arguments": {
                            "workspace_id": "default", "path": "a.txt"}}))))
                _, reply = self.t.exchange(text, modern_headers("tools/call", "read"))
                self.assertEqual(raw_id(reply), tok, reply)
                self.assertIn('"resultType":"complete"', reply)

    def test_non_integer_id_is_invalid(self):
        hdrs = self.legacy_session()
        _, reply = self.t.exchange('{"jsonrpc":"2.0","id":1e400,"method":"ping"}', hdrs)
        r = json.loads(reply)
        self.error(r, -32600)
        self.assertIsNone(r["id"])  # 2025: null
        text = ('{"jsonrpc":"2.0","id":1.5,"method":"tools/list","params":%s}'
                % json.dumps(modern_params()))
        _, reply = self.t.exchange(text, modern_headers("tools/list"))
        r = json.loads(reply)
        self.error(r, -32600)
        self.assertNotIn("id", r)  # 2026: never null


class ModernHttpMixin:
    """HTTP only: headers, statuses, sessions."""

    def test_header_checks(self):
        cases = [
            ("version header missing", {"Mcp-Method": "tools/list"}, "tools/list", None, -32020),
            ("version header differs", modern_headers("tools/list", version="2025-11-25"),
             "tools/list", None, -32020),
            ("method header missing", {"MCP-Protocol-Version": MODERN}, "tools/list", None,
             -32020),
            ("method header differs", modern_headers("prompts/list"), "tools/list", None, -32020),
            ("method header case", {"MCP-Protocol-Version": MODERN, "Mcp-Method": "TOOLS/LIST"},
             "tools/list", None, -32020),
            ("name header missing", modern_headers("tools/call"), "tools/call", "workspace_info",
             -32020),
            ("name header differs", modern_headers("tools/call", "read"), "tools/call",
             "workspace_info", -32020),
            ("name bad base64", modern_headers("tools/call", "=?base64?%%%?="), "tools/call",
             "workspace_info", -32020),
        ]
        for what, headers, method, name, code in cases:
            with self.subTest(what):
                params = {"name": name, "arguments": {}} if name else {}
                status, r, _ = self.modern(method, params, headers=headers)
                self.error(r, code)
                self.assertEqual(status, 400)
                self.assertIn("id", r)

    def test_header_forms_accepted(self):
        b64 = "=?base64?%s?=" % base64.b64encode(b"workspace_info").decode()
        for what, headers in (
                ("whitespace", modern_headers("tools/call", "  workspace_info  ")),
                ("base64", modern_headers("tools/call", b64)),
                ("lower-case names", {"mcp-protocol-version": MODERN, "mcp-method": "tools/call",
                                      "mcp-name": "workspace_info"}),
                ("upper-case names", {"MCP-PROTOCOL-VERSION": MODERN, "MCP-METHOD": "tools/call",
                                      "MCP-NAME": "workspace_info"})):
            with self.subTest(what):
                status, r, _ = self.modern("tools/call", {"name": "workspace_info",
                                                          "arguments": {}}, headers=headers)
                self.assertEqual(status, 200, r)
                self.assertIn("result", r)

    def test_meta_checked_before_headers(self):
        msg = {"jsonrpc": "2.0", "id": 5, "method": "server/discover", "params": {}}
        status, text = self.t.exchange(json.dumps(msg), {"MCP-Protocol-Version": MODERN})
        self.assertEqual(json.loads(text)["error"]["code"], -32602)
        self.assertEqual(status, 400)
        # header vs body before support: body v999, header 2026 is a mismatch, not -32022
        meta = dict(META, **{"io.modelcontextprotocol/protocolVersion": "v999.0.0"})
        status, r, _ = self.modern("server/discover", meta=meta)
        self.assertEqual(r["error"]["code"], -32020)
        self.assertEqual(status, 400)

    def test_session_id_on_modern_request_is_ignored(self):
        h = modern_headers("tools/list")
        h["Mcp-Session-Id"] = "0" * 32  # unknown: a 2025 request would get 404
        status, r, _ = self.modern("tools/list", headers=h)
        self.assertEqual(status, 200, r)
        self.assertNotIn("mcp-session-id", self.t.last_headers)

    def test_parse_error_under_2026_header_has_no_id(self):
        status, text = self.t.exchange("{nope", {"MCP-Protocol-Version": MODERN})
        r = json.loads(text)
        self.assertEqual(r["error"]["code"], -32700)
        self.assertNotIn("id", r)
        self.assertEqual(status, 400)

    def test_notification_202(self):
        status, text = self.t.exchange(json.dumps({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 99, "_meta": META}}), {"MCP-Protocol-Version": MODERN})
        self.assertEqual(status, 202)
        self.assertIsNone(text)

    def test_2025_session_beside_2026_requests(self):
        hdrs = self.legacy_session("2025-06-18")
        self.modern("tools/list")
        status, r, _ = self.legacy("ping", rid=3, hdrs=hdrs)
        self.assertEqual((status, r), (200, {"jsonrpc": "2.0", "id": 3, "result": {}}))
        self.modern("server/discover")
        status, r, _ = self.legacy("tools/call", {"name": "workspace_info", "arguments": {}},
                                   hdrs=hdrs)
        self.assertEqual(status, 200)
        self.assertNotIn("resultType", r["result"])
        # without the session a 2025 request is still refused as before
        status, r, _ = self.legacy("ping", rid=4)
        self.assertEqual(status, 400)

    def test_batch_ids_echoed_on_2025_03_26(self):
        hdrs = self.legacy_session("2025-03-26")
        text = "[%s]" % ",".join('{"jsonrpc":"2.0","id":%s,"method":"ping"}' % t
                                 for t in BIG_IDS[:3])
        status, reply = self.t.exchange(text, hdrs)
        self.assertEqual(status, 200)
        for tok in BIG_IDS[:3]:
            self.assertIn('"id":%s,' % tok, reply)


class TestModernStdio(ModernBase, unittest.TestCase):
    transport = StdioTransport

    def test_batch_ids_echoed_on_2025_03_26(self):
        t = StdioTransport(self.ws, self.tmp.name)
        try:
            t.exchange(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-03-26", "capabilities": {},
                "clientInfo": {"name": "e", "version": "1"}}}))
            text = "[%s]" % ",".join(
                '{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":'
                '"workspace_info"}}' % tok for tok in BIG_IDS[:3])
            _, reply = t.exchange(text)
            for tok in BIG_IDS[:3]:
                self.assertIn('"id":%s,' % tok, reply)
        finally:
            t.close()


class TestModernHttp(ModernHttpMixin, ModernBase, unittest.TestCase):
    transport = HttpTransport


if __name__ == "__main__":
    unittest.main()
