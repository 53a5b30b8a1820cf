"""End-to-end tests of the Streamable HTTP transport (docs/contract/runtime.md §3), real binary.

Starts `$CODESPACE_MCP_BIN --http --port 0 --workspace <tmpdir>` (plus `--token` for the bearer
tests), learns the port from the "listening" line of its JSON log on stderr, and talks to it with
http.client and raw sockets (with `--runner $CS_E2E_RUNNER` when that is set). Standard library
only; run with /usr/bin/python3:

    CODESPACE_MCP_BIN=build/debug/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_http          (from tests/e2e/)
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import mcp_stdio
import test_load  # runner_args(): CS_E2E_RUNNER adds --runner

VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
TOKEN = "s3cret"
START_TIMEOUT = 10.0
IO_TIMEOUT = 10.0


class Server:
    """One codespace-mcp --http process; stderr is drained by a thread into self.lines."""

    def __init__(self, *extra):
        binary = os.environ.get("CODESPACE_MCP_BIN")
        if not binary:
            raise unittest.SkipTest("CODESPACE_MCP_BIN is not set")
        self.tmp = tempfile.TemporaryDirectory(prefix="cs-e2e-http-")
        argv = [binary, "--http", "--port", "0", "--workspace", self.tmp.name, *extra,
                *mcp_stdio.runner_args()]
        env = dict(os.environ)
        for var in ("CODESPACE_HTTP_TOKEN", "CODESPACE_HTTP_HOST", "CODESPACE_HTTP_PORT",
                    "CODESPACE_TRANSPORT", "CODESPACE_CONFIG"):
            env.pop(var, None)
        env.setdefault("CODESPACE_OPERATIONS_DB", ":memory:")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env)
        self.lines = []
        self.lock = threading.Lock()
        self.listening = threading.Event()
        self.port = None
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()
        if not self.listening.wait(START_TIMEOUT) or self.port is None:
            self.stop()
            raise AssertionError("server did not log 'listening':\n" + self.log())

    def _drain(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            with self.lock:
                self.lines.append(line)
            if self.port is None:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if obj.get("msg") == "listening" and obj.get("transport") == "streamable-http":
                    self.port = int(obj["port"])
                    self.listening.set()
        self.listening.set()  # EOF: wake the waiter (it sees port is None)

    def log(self):
        with self.lock:
            return "".join(self.lines)

    def stop(self):
        """SIGTERM, wait, and return the exit code (the whole log is then in self.log())."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(5)
        self.tmp.cleanup()
        return self.proc.returncode


class Reply:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def json(self):
        return json.loads(self.body)


class HttpCase(unittest.TestCase):
    """Helpers shared by the test classes; subclasses set cls.server."""

    server = None
    auth = None  # an Authorization header value sent by default

    def connect(self):
        return http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=IO_TIMEOUT)

    def request(self, method, path="/mcp", body=None, headers=None, conn=None):
        hdrs = {}
        if self.auth:
            hdrs["Authorization"] = self.auth
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        hdrs = {k: v for k, v in hdrs.items() if v is not None}
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        own = conn is None
        conn = conn or self.connect()
        try:
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            data = r.read()
            return Reply(r.status, r.getheaders(), data)
        finally:
            if own:
                conn.close()

    def post(self, msg, sid=None, headers=None, conn=None):
        h = {"Accept": "application/json, text/event-stream"}
        if sid:
            h["Mcp-Session-Id"] = sid
        h.update(headers or {})
        return self.request("POST", "/mcp", msg, h, conn)

    def initialize(self, version="2025-11-25", headers=None):
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": version, "capabilities": {},
                                  "clientInfo": {"name": "e2e", "version": "1"}}},
                      headers=headers)
        self.assertEqual(r.status, 200, r.body)
        sid = r.header("Mcp-Session-Id")
        self.assertIsNotNone(sid, "initialize returned no Mcp-Session-Id")
        return sid, r.json()

    def session(self, version="2025-11-25"):
        sid, _ = self.initialize(version)
        r = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
        self.assertEqual(r.status, 202, r.body)
        return sid

    def call_tool(self, sid, name, arguments, rid=5):
        r = self.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}, sid)
        self.assertEqual(r.status, 200, r.body)
        msg = r.json()
        self.assertEqual(msg.get("id"), rid)
        self.assertIn("result", msg, msg)
        return msg["result"]

    def tool_error(self, result):
        self.assertTrue(result.get("isError"), result)
        self.assertNotIn("structuredContent", result)
        return json.loads(result["content"][0]["text"])

    def raw(self, data, timeout=IO_TIMEOUT):
        """Sends bytes on a fresh socket and returns (status, headers text, body) of the reply."""
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=timeout) as s:
            s.sendall(data)
            return read_response(s)


def read_response(s):
    """Reads one response (Content-Length framed) from socket s: (status, headers text, body);
    status is 0 if the connection closed before a status line."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    need = int(m.group(1)) if m else 0
    while len(rest) < need:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return status, head.decode("latin-1"), rest


def peer_closed(s):
    """True when the server closed (or reset) the non-blocking socket s; nothing is consumed."""
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


class TestHttp(HttpCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        if rc != 0:
            raise AssertionError(f"server exited with {rc}:\n" + cls.server.log()[-4000:])

    def test_libmicrohttpd_is_loaded_for_http(self):
        # http_mhd.c loads it with dlopen when --http starts the transport (test_stdio checks
        # that a stdio server never maps it).
        with open(f"/proc/{self.server.proc.pid}/maps") as f:
            self.assertIn("libmicrohttpd.so", f.read())

    # ---- sessions and versions ----

    def test_initialize_each_supported_version(self):
        seen = set()
        for v in VERSIONS:
            with self.subTest(version=v):
                sid, msg = self.initialize(v)
                self.assertRegex(sid, r"^[0-9a-f]{32}$")  # 128 bits, visible ASCII
                self.assertNotIn(sid, seen)
                seen.add(sid)
                self.assertEqual(msg["id"], 1)
                self.assertEqual(msg["result"]["protocolVersion"], v)
                self.assertEqual(msg["result"]["serverInfo"]["name"], "codespace")

    def test_initialize_unknown_version_gets_newest(self):
        sid, msg = self.initialize("1999-01-01")
        self.assertEqual(msg["result"]["protocolVersion"], "2025-11-25")

    def test_initialize_with_bad_version_header_is_not_checked(self):
        sid, _ = self.initialize("2025-06-18", headers={"MCP-Protocol-Version": "bogus"})
        self.assertTrue(sid)

    def test_initialized_notification_202_empty(self):
        sid, _ = self.initialize()
        r = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
        self.assertEqual(r.status, 202)
        self.assertEqual(r.body, b"")

    def test_ping(self):
        sid = self.session()
        r = self.post({"jsonrpc": "2.0", "id": "p1", "method": "ping"}, sid)
        self.assertEqual(r.status, 200)
        self.assertTrue(r.header("Content-Type").startswith("application/json"))
        self.assertEqual(r.json(), {"jsonrpc": "2.0", "id": "p1", "result": {}})

    def test_tools_list(self):
        sid = self.session()
        r = self.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, sid)
        self.assertEqual(r.status, 200, r.body)
        tools = r.json()["result"]["tools"]
        self.assertEqual(len(tools), 11, [t["name"] for t in tools])
        self.assertIn("workspace_info", {t["name"] for t in tools})

    def test_workspace_info(self):
        sid = self.session()
        for args in ({}, {"workspace_id": "default"}):
            with self.subTest(arguments=args):
                res = self.call_tool(sid, "workspace_info", args)
                self.assertFalse(res.get("isError", False), res)
                self.assertIn("structuredContent", res)
                self.assertEqual(json.loads(res["content"][0]["text"]), res["structuredContent"])

    def test_workspace_info_unknown_workspace(self):
        sid = self.session()
        body = self.tool_error(self.call_tool(sid, "workspace_info", {"workspace_id": "nope"}))
        self.assertEqual(body["code"], "WORKSPACE_NOT_FOUND")

    def test_invalid_arguments_names_the_pointer(self):
        sid = self.session()
        body = self.tool_error(self.call_tool(sid, "workspace_info", {"workspace_id": 5}))
        self.assertEqual(body["code"], "INVALID_ARGUMENTS")
        self.assertIn("/workspace_id", body["message"])

    def test_post_without_session_400(self):
        r = self.post({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        self.assertEqual(r.status, 400)
        self.assertEqual(r.json()["error"]["code"], -32600)

    def test_post_unknown_session_404(self):
        r = self.post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, "0" * 32)
        self.assertEqual(r.status, 404)
        r = self.post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, "not-a-session")
        self.assertEqual(r.status, 404)

    def test_delete_ends_session(self):
        sid = self.session()
        r = self.request("DELETE", headers={"Mcp-Session-Id": sid})
        self.assertEqual(r.status, 204)
        r = self.post({"jsonrpc": "2.0", "id": 4, "method": "ping"}, sid)
        self.assertEqual(r.status, 404)
        r = self.request("DELETE", headers={"Mcp-Session-Id": sid})
        self.assertEqual(r.status, 404)

    def test_delete_without_session_400(self):
        self.assertEqual(self.request("DELETE").status, 400)

    def test_protocol_version_header(self):
        sid = self.session("2025-06-18")
        ping = {"jsonrpc": "2.0", "id": 6, "method": "ping"}
        r = self.post(ping, sid, {"MCP-Protocol-Version": "2024-01-01"})
        self.assertEqual(r.status, 400)
        r = self.post(ping, sid, {"MCP-Protocol-Version": "2025-06-18"})
        self.assertEqual(r.status, 200)
        r = self.post(ping, sid)  # absent: the negotiated version is assumed
        self.assertEqual(r.status, 200)

    def test_get_405(self):
        r = self.request("GET", headers={"Accept": "text/event-stream"})
        self.assertEqual(r.status, 405)
        self.assertIn("POST", r.header("Allow") or "")
        self.assertIn("DELETE", r.header("Allow") or "")

    def test_other_methods_405(self):
        for m in ("PUT", "PATCH", "OPTIONS"):
            with self.subTest(method=m):
                self.assertEqual(self.request(m).status, 405)

    def test_unknown_path_404(self):
        sid = self.session()
        r = self.request("POST", "/other", {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                         {"Mcp-Session-Id": sid})
        self.assertEqual(r.status, 404)
        self.assertEqual(self.request("GET", "/").status, 404)

    def test_parse_error_400(self):
        # Input the server cannot accept gets an HTTP error status; the body is still the
        # JSON-RPC error, with id null.
        sid = self.session()
        for raw in ("{not json", "", "[1,]", "NaN"):
            with self.subTest(body=raw):
                r = self.request("POST", body=raw, headers={"Mcp-Session-Id": sid})
                self.assertEqual(r.status, 400, r.body)
                msg = r.json()
                self.assertEqual(msg["error"]["code"], -32700)
                self.assertIsNone(msg["id"])

    def test_invalid_request_without_id_400(self):
        sid = self.session()
        for raw in ('{"jsonrpc":"2.0","id":null,"method":"ping"}', '42', '"ping"', 'null',
                    '{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', '{"jsonrpc":"2.0"}'):
            with self.subTest(body=raw):
                r = self.request("POST", body=raw, headers={"Mcp-Session-Id": sid})
                self.assertEqual(r.status, 400, r.body)
                msg = r.json()
                self.assertEqual(msg["error"]["code"], -32600)
                self.assertIsNone(msg["id"])
        # The session is still usable afterwards.
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, sid)
        self.assertEqual(r.status, 200)

    def test_errors_with_an_id_stay_200(self):
        sid = self.session()
        for raw, rid, code in (('{"jsonrpc":"2.0","id":1,"method":"no/such"}', 1, -32601),
                               ('{"jsonrpc":"2.0","id":"x"}', "x", -32600),
                               ('{"jsonrpc":"1.0","id":2,"method":"ping"}', 2, -32600)):
            with self.subTest(body=raw):
                r = self.request("POST", body=raw, headers={"Mcp-Session-Id": sid})
                self.assertEqual(r.status, 200, r.body)
                msg = r.json()
                self.assertEqual(msg["id"], rid)
                self.assertEqual(msg["error"]["code"], code)

    def test_batch_only_on_2025_03_26(self):
        batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                 {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
        sid = self.session("2025-03-26")
        r = self.post(batch, sid)
        self.assertEqual(r.status, 200, r.body)
        replies = r.json()
        self.assertIsInstance(replies, list)
        self.assertEqual(sorted(x["id"] for x in replies), [1, 2])
        # A batch with an invalid member is still accepted: its reply is a list.
        r = self.post([{"jsonrpc": "2.0", "id": 3, "method": "ping"}, 42], sid)
        self.assertEqual(r.status, 200, r.body)
        self.assertIsInstance(r.json(), list)
        # An empty batch is refused as a whole: 400 with one error, id null.
        r = self.post([], sid)
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(r.json()["error"]["code"], -32600)
        self.assertIsNone(r.json()["id"])
        sid = self.session("2025-11-25")
        r = self.post(batch, sid)
        self.assertEqual(r.status, 400, r.body)
        msg = r.json()
        self.assertIsInstance(msg, dict)
        self.assertEqual(msg["error"]["code"], -32600)
        self.assertIsNone(msg["id"])

    def test_content_type(self):
        sid = self.session()
        ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        r = self.request("POST", body=ping,
                         headers={"Mcp-Session-Id": sid, "Content-Type": "text/plain"})
        self.assertEqual(r.status, 415)
        r = self.request("POST", body=ping, headers={
            "Mcp-Session-Id": sid, "Content-Type": "application/json; charset=utf-8"})
        self.assertEqual(r.status, 200)
        # A missing Content-Type is tolerated.
        status, _, body = self.raw(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Mcp-Session-Id: " + sid.encode() + b"\r\n"
            b"Content-Length: " + str(len(ping)).encode() + b"\r\n\r\n" + ping.encode())
        self.assertEqual(status, 200, body)
        # Two Content-Type headers are refused, whichever comes first (the server counts them).
        for first, second in ((b"application/json", b"text/plain"),
                              (b"text/plain", b"application/json")):
            status, _, body = self.raw(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                b"Mcp-Session-Id: " + sid.encode() + b"\r\n"
                b"Content-Type: " + first + b"\r\nContent-Type: " + second + b"\r\n"
                b"Content-Length: " + str(len(ping)).encode() + b"\r\n\r\n" + ping.encode())
            self.assertEqual(status, 415, body)

    # ---- DNS rebinding ----

    def test_host_checks(self):
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        sid = self.session()
        port = self.server.port
        for host in ("localhost", "localhost:9999", "127.0.0.1", f"127.0.0.1:{port}",
                     "[::1]", "[::1]:1", "LOCALHOST:1"):
            with self.subTest(host=host):
                self.assertEqual(self.post(ping, sid, {"Host": host}).status, 200)
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.2", "localhost.evil",
                     "localhost:x", "[::2]", "127.0.0.1@evil"):
            with self.subTest(host=host):
                r = self.post(ping, sid, {"Host": host})
                self.assertEqual(r.status, 403)
                self.assertEqual(r.json(), {"error": "forbidden"})

    def test_origin_checks(self):
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        sid = self.session()
        for origin in ("http://localhost:1234", "http://localhost", "https://127.0.0.1:8443",
                       "http://[::1]:3000"):
            with self.subTest(origin=origin):
                self.assertEqual(self.post(ping, sid, {"Origin": origin}).status, 200)
        for origin in ("http://evil.example", "https://evil.example:443", "null",
                       "file://localhost", "http://localhost.evil.example",
                       "http://localhost/path"):
            with self.subTest(origin=origin):
                self.assertEqual(self.post(ping, sid, {"Origin": origin}).status, 403)

    def test_forbidden_before_anything_else(self):
        r = self.request("GET", "/nowhere", headers={"Host": "evil.example"})
        self.assertEqual(r.status, 403)

    # ---- bodies ----

    def test_content_length_over_cap_413(self):
        t0 = time.monotonic()
        status, _, body = self.raw(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 17825792\r\n\r\n")  # 17 MiB announced, none sent
        self.assertEqual(status, 413, body)
        self.assertLess(time.monotonic() - t0, 5)

    def test_chunked_over_cap_413(self):
        sid = self.session()
        block = b"x" * (1 << 20)
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=IO_TIMEOUT) as s:
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                      b"\r\nTransfer-Encoding: chunked\r\nMcp-Session-Id: " + sid.encode() +
                      b"\r\n\r\n")
            try:
                for _ in range(17):
                    s.sendall(b"%x\r\n" % len(block) + block + b"\r\n")
                s.sendall(b"0\r\n\r\n")
            except OSError:
                pass  # the server may cut a body that keeps coming; the status still counts
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        self.assertTrue(data.startswith(b"HTTP/1.1 413"), data[:200])

    def test_body_at_cap_boundary_is_read(self):
        # A large but legal body (1 MiB of whitespace around a ping) goes through.
        sid = self.session()
        body = " " * (1 << 20) + json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"})
        r = self.request("POST", body=body, headers={"Mcp-Session-Id": sid})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["id"], 9)

    # ---- connections ----

    def test_keep_alive_reuses_connection(self):
        sid = self.session()
        conn = self.connect()
        try:
            for i in range(5):
                r = self.post({"jsonrpc": "2.0", "id": i, "method": "ping"}, sid, conn=conn)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.json()["id"], i)
            self.assertEqual(self.request("GET", conn=conn).status, 405)
            r = self.post({"jsonrpc": "2.0", "id": 99, "method": "ping"}, sid, conn=conn)
            self.assertEqual(r.status, 200)
        finally:
            conn.close()

    def test_many_overlapping_clients(self):
        sid = self.session()
        errors = []
        gate = threading.Semaphore(32)  # under the per-IP limit (64)

        def client(n):
            with gate:
                conn = self.connect()
                try:
                    for i in range(3):
                        r = self.post({"jsonrpc": "2.0", "id": n * 10 + i, "method": "ping"}, sid,
                                      conn=conn)
                        if r.status != 200 or r.json().get("id") != n * 10 + i:
                            errors.append((n, i, r.status, r.body[:100]))
                except OSError as e:
                    errors.append((n, repr(e)))
                finally:
                    conn.close()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, sid)
        self.assertEqual(r.status, 200)

    def test_connection_burst_does_not_break_server(self):
        # More idle sockets than the per-IP limit: the extra ones are closed by the server,
        # and once the burst is gone it serves normally.
        socks = []
        try:
            for _ in range(100):
                try:
                    socks.append(socket.create_connection(("127.0.0.1", self.server.port),
                                                          timeout=IO_TIMEOUT))
                except OSError:
                    break
            time.sleep(0.2)
        finally:
            for s in socks:
                s.close()
        time.sleep(0.2)
        sid = self.session()
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, sid)
        self.assertEqual(r.status, 200)

    def test_slow_sender_within_deadline_is_served(self):
        # The request deadline (30 s) is for the whole request, not per byte; a request that
        # trickles in over a second is well within it.
        sid = self.session()
        ping = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}).encode()
        req = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Mcp-Session-Id: " + sid.encode() + b"\r\nConnection: close\r\n"
               b"Content-Length: " + str(len(ping)).encode() + b"\r\n\r\n" + ping)
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=IO_TIMEOUT) as s:
            step = len(req) // 10 + 1
            for i in range(0, len(req), step):
                s.sendall(req[i:i + step])
                time.sleep(0.1)
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        self.assertTrue(data.startswith(b"HTTP/1.1 200"), data[:200])
        self.assertTrue(data.endswith(b'"id":7,"result":{}}'), data[-200:])

    def test_half_close_after_request_gets_reply(self):
        # A client may shut down its sending side once the request is out. A reply that is
        # ready at once is still delivered. (One that must wait is abandoned: docs/http.md,
        # "Hang-ups while suspended".)
        sid = self.session()
        ping = json.dumps({"jsonrpc": "2.0", "id": 8, "method": "ping"}).encode()
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=IO_TIMEOUT) as s:
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nMcp-Session-Id: " + sid.encode() +
                      b"\r\nContent-Length: " + str(len(ping)).encode() + b"\r\n\r\n" + ping)
            s.shutdown(socket.SHUT_WR)
            status, _, body = read_response(s)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body), {"jsonrpc": "2.0", "id": 8, "result": {}})


class TestHttpToken(HttpCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--token", TOKEN)

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        log = cls.server.log()
        if rc != 0:
            raise AssertionError(f"server exited with {rc}:\n" + log[-4000:])
        if TOKEN in log:
            raise AssertionError("the token appears in the server log")

    def assert_unauthorized(self, r):
        self.assertEqual(r.status, 401)
        self.assertEqual(r.header("WWW-Authenticate"), "Bearer")
        self.assertEqual(r.body, b'{"error":"unauthorized"}')
        self.assertNotIn(TOKEN.encode(), r.body)
        for k, v in r.headers:
            self.assertNotIn(TOKEN, v)

    def test_no_header_401(self):
        self.auth = None
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        self.assert_unauthorized(r)

    def test_wrong_tokens_401(self):
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "e2e", "version": "1"}}}
        for value in ("Bearer wrong", "Bearer " + TOKEN + "x", "Bearer " + TOKEN[:-1],
                      "Bearer", "Basic " + TOKEN, TOKEN, "Bearer  " + TOKEN):
            with self.subTest(value=value):
                self.auth = value
                self.assert_unauthorized(self.post(init))

    def test_right_token(self):
        self.auth = "Bearer " + TOKEN
        sid = self.session()
        r = self.post({"jsonrpc": "2.0", "id": 2, "method": "ping"}, sid)
        self.assertEqual(r.status, 200)
        r = self.request("DELETE", headers={"Mcp-Session-Id": sid})
        self.assertEqual(r.status, 204)

    def test_token_required_on_every_request(self):
        self.auth = "Bearer " + TOKEN
        sid = self.session()
        self.auth = None
        self.assert_unauthorized(self.post({"jsonrpc": "2.0", "id": 2, "method": "ping"}, sid))
        self.assert_unauthorized(self.request("DELETE", headers={"Mcp-Session-Id": sid}))
        self.assert_unauthorized(self.request("GET"))

    def test_host_checked_before_token(self):
        self.auth = None
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"},
                      headers={"Host": "evil.example"})
        self.assertEqual(r.status, 403)
        self.auth = "Bearer " + TOKEN
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"},
                      headers={"Origin": "http://evil.example"})
        self.assertEqual(r.status, 403)


class ServerPerClass(HttpCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        if rc != 0:
            raise AssertionError(f"server exited with {rc}:\n" + cls.server.log()[-4000:])


class TestHttpSessionCap(ServerPerClass):
    """At the session cap (1024), initialize ends the least recently used session that has no
    request in flight instead of answering 503."""

    CAP = 1024
    INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "e2e", "version": "1"}}})
    PING = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})

    def init_on(self, conn):
        r = self.request("POST", body=self.INIT, conn=conn)
        self.assertEqual(r.status, 200, r.body)
        sid = r.header("Mcp-Session-Id")
        self.assertIsNotNone(sid)
        return sid

    def ping_on(self, conn, sid):
        return self.request("POST", body=self.PING, headers={"Mcp-Session-Id": sid},
                            conn=conn).status

    def test_cap_evicts_least_recently_used_idle_session(self):
        conn = self.connect()  # keep-alive: 1,100 initializes in well under a second
        up = None
        try:
            busy = self.init_on(conn)
            # busy gets a request in flight: its upload stops after the headers. The server
            # has seen them (and counted the session as busy) once it sends 100 Continue.
            up = socket.create_connection(("127.0.0.1", self.server.port), timeout=IO_TIMEOUT)
            up.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
                       b"Mcp-Session-Id: " + busy.encode() + b"\r\n"
                       b"Content-Length: " + str(len(self.PING)).encode() + b"\r\n\r\n")
            cont = b""
            while b"\r\n\r\n" not in cont:
                chunk = up.recv(4096)
                self.assertTrue(chunk, "no 100 Continue")
                cont += chunk
            self.assertTrue(cont.startswith(b"HTTP/1.1 100"), cont)

            xs = [self.init_on(conn) for _ in range(self.CAP - 1)]  # now at the cap
            ys = [self.init_on(conn)]  # evicts xs[0]: busy is older but has a request in flight
            self.assertEqual(self.ping_on(conn, xs[0]), 404)
            self.assertEqual(self.ping_on(conn, xs[1]), 200)  # xs[1] is now recently used
            ys.append(self.init_on(conn))  # evicts xs[2], not xs[1]
            self.assertEqual(self.ping_on(conn, xs[2]), 404)
            self.assertEqual(self.ping_on(conn, xs[1]), 200)

            up.sendall(self.PING.encode())  # the busy session survived all of that
            status, _, body = read_response(up)
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["id"], 2)

            # 1,100 initializes in all, every one answered 200 (init_on checks).
            ys += [self.init_on(conn) for _ in range(1100 - 1 - len(xs) - len(ys))]
            for sid in (busy, xs[1], ys[0], ys[-1]):
                self.assertEqual(self.ping_on(conn, sid), 200)
            self.assertEqual(self.ping_on(conn, xs[3]), 404)
        finally:
            conn.close()
            if up:
                up.close()
        self.assertIn("evicted (least recently used)", self.server.log())


def vm_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class TestHttpSlowSenders(ServerPerClass):
    """Slow clients cannot lock others out (issue 17): 300 connections from 127.0.0.1 (the
    address every local client shares) trickle one byte a second, half stuck in their headers
    and half in their bodies, reconnecting when cut. A new client's initialize and tools/call
    still complete within 1 s, and an active keep-alive client is served all along: a new
    connection evicts the oldest connection still waiting for its request, and the 5 s request
    deadline cuts the rest."""

    FLOOD = 300
    RUN_S = 8.0  # past the 5 s deadline, so tricklers are also cut by it

    def trickler(self):
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=IO_TIMEOUT)
        if len(self.made) % 2:  # stuck in the headers
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ")
        else:  # stuck in the body
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
        s.setblocking(False)
        self.made.append(s)
        return s

    def test_new_client_served_within_a_second_under_300_tricklers(self):
        keep = self.connect()  # an active keep-alive client, connected before the flood
        sid = self.session()
        self.assertEqual(self.post({"jsonrpc": "2.0", "id": 0, "method": "ping"}, sid,
                                   conn=keep).status, 200)
        self.made = []
        open_ = [self.trickler() for _ in range(self.FLOOD)]
        start = time.monotonic()
        worst_new = worst_keep = 0.0
        probes = cut = rid = 0
        try:
            while time.monotonic() - start < self.RUN_S:
                for s in list(open_):  # one byte a second each; a cut one reconnects
                    closed = peer_closed(s)
                    if not closed:
                        try:
                            s.send(b"a")
                        except (BlockingIOError, InterruptedError):
                            pass
                        except OSError:
                            closed = True
                    if closed:
                        cut += 1
                        open_.remove(s)
                        s.close()
                        if len(self.made) < 20 * self.FLOOD:  # bounded
                            open_.append(self.trickler())
                rid += 1
                t0 = time.monotonic()
                r = self.post({"jsonrpc": "2.0", "id": rid, "method": "ping"}, sid, conn=keep)
                worst_keep = max(worst_keep, time.monotonic() - t0)
                self.assertEqual(r.status, 200, "the active keep-alive client was not served")
                # A new client: initialize, then tools/call, within 1 s.
                t0 = time.monotonic()
                new = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=2)
                try:
                    new.request("POST", "/mcp", body=json.dumps(
                        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "e2e", "version": "1"}}}),
                        headers={"Content-Type": "application/json"})
                    resp = new.getresponse()
                    resp.read()
                    self.assertEqual(resp.status, 200)
                    nsid = resp.getheader("Mcp-Session-Id")
                    new.request("POST", "/mcp", body=json.dumps(
                        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "workspace_info", "arguments": {}}}),
                        headers={"Content-Type": "application/json", "Mcp-Session-Id": nsid})
                    resp = new.getresponse()
                    body = json.loads(resp.read())
                    self.assertEqual(resp.status, 200)
                    self.assertIn("result", body, body)
                finally:
                    new.close()
                took = time.monotonic() - t0
                worst_new = max(worst_new, took)
                probes += 1
                self.assertLess(took, 1.0, f"new client took {took:.3f} s")
                time.sleep(max(0.0, 1.0 - took))
        finally:
            keep.close()
            for s in self.made:
                s.close()
        log = self.server.log()
        print(f"\n  slow clients: {self.FLOOD} trickling from 127.0.0.1, {len(self.made)} "
              f"connections made, {cut} cut; {probes} new clients, initialize+tools/call worst "
              f"{worst_new * 1000:.0f} ms; keep-alive ping worst {worst_keep * 1000:.0f} ms; "
              f"{log.count('http_evicted')} evicted, {log.count('http_timeout')} timed out")
        self.assertGreaterEqual(probes, 5)
        self.assertGreater(log.count('"http_evicted"'), 0)


class TestHttpRequestDeadline(HttpCase):
    """--http-request-timeout 2: a head, or a body after its head, that is not in within 2 s
    closes the connection however steadily it trickles; an idle keep-alive connection is left
    to the idle timeout (30 s)."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server("--http-request-timeout", "2")

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        if rc != 0:
            raise AssertionError(f"server exited with {rc}:\n" + cls.server.log()[-4000:])

    def trickle_until_closed(self, s, limit=6.0):
        """Sends a byte every 0.25 s; returns the time until the server closed s (or limit)."""
        t0 = time.monotonic()
        s.setblocking(False)
        while time.monotonic() - t0 < limit:
            if peer_closed(s):
                return time.monotonic() - t0
            try:
                s.send(b"a")
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                return time.monotonic() - t0
            time.sleep(0.25)
        return limit

    def test_head_and_body_deadlines(self):
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=IO_TIMEOUT) as s:
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ")
            head = self.trickle_until_closed(s)
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=IO_TIMEOUT) as s:
            time.sleep(1.0)  # the body's own 2 s count from the end of the head
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            body = self.trickle_until_closed(s)
        print(f"\n  request deadline 2 s: head trickler closed after {head:.2f} s, body "
              f"trickler {body:.2f} s after its head")
        self.assertGreater(head, 1.5)
        self.assertLess(head, 3.6)  # the sweep may be up to a second late
        self.assertGreater(body, 1.5)
        self.assertLess(body, 3.6)

    def test_idle_keep_alive_connection_is_not_cut(self):
        sid = self.session()
        conn = self.connect()
        try:
            self.assertEqual(self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, sid,
                                       conn=conn).status, 200)
            time.sleep(3.5)  # past the 2 s deadline, well within the idle timeout
            self.assertIsNotNone(conn.sock)
            conn.sock.setblocking(False)
            self.assertFalse(peer_closed(conn.sock))
            conn.sock.settimeout(IO_TIMEOUT)
            self.assertEqual(self.post({"jsonrpc": "2.0", "id": 2, "method": "ping"}, sid,
                                       conn=conn).status, 200)
        finally:
            conn.close()


class TestHttpBodyBudget(HttpCase):
    """20 clients each hold a 15 MiB upload open (headers and 14 MiB of the body sent): the
    bodies in flight stay within the total budget (64 MiB by default), so the 5th and later get
    503 with Retry-After at once, and the server's peak RSS stays bounded."""

    MIB = 1024 * 1024
    HELD = 20
    SIZE = 15 * MIB
    BUDGET = 64 * MIB

    @classmethod
    def setUpClass(cls):
        cls.server = Server("--http-request-timeout", "120")  # the uploads are held on purpose

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        if rc != 0:
            raise AssertionError(f"server exited with {rc}:\n" + cls.server.log()[-4000:])

    def body(self, rid):
        text = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "ping", "params": {}})
        pad = self.SIZE - len(text) - len(',"pad":""')
        out = (text[:-1] + ',"pad":"' + "x" * pad + '"}').encode()
        self.assertEqual(len(out), self.SIZE)
        return out

    def test_held_uploads_stay_within_the_budget(self):
        sid = self.session()
        pid = self.server.proc.pid
        base = vm_kib(pid, "VmRSS")
        held, refused = [], []
        data = self.body(9)
        try:
            for _ in range(self.HELD):
                s = socket.create_connection(("127.0.0.1", self.server.port), timeout=IO_TIMEOUT)
                s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nMcp-Session-Id: " + sid.encode() +
                          b"\r\nContent-Length: " + str(self.SIZE).encode() + b"\r\n\r\n")
                s.settimeout(0.3)
                try:
                    first = s.recv(65536, socket.MSG_PEEK)
                except socket.timeout:
                    first = b""
                s.settimeout(IO_TIMEOUT)
                if first:
                    status, head, body = read_response(s)
                    refused.append((status, head, body))
                    s.close()
                    continue
                s.sendall(data[:-self.MIB])  # most of the body; the connection stays open
                held.append(s)
            time.sleep(0.3)
            hwm = vm_kib(pid, "VmHWM")
            rss = vm_kib(pid, "VmRSS")
            print(f"\n  body budget 64 MiB: {len(held)} uploads of 15 MiB held, "
                  f"{len(refused)} refused; VmRSS before {base / 1024:.1f} MiB, "
                  f"while held {rss / 1024:.1f} MiB, VmHWM {hwm / 1024:.1f} MiB")
            self.assertEqual(len(held), self.BUDGET // self.SIZE)
            self.assertEqual(len(refused), self.HELD - len(held))
            for status, head, body in refused:
                self.assertEqual(status, 503, body)
                self.assertRegex(head, r"(?im)^retry-after:\s*1\s*$")
                self.assertIn("budget", json.loads(body)["error"]["message"])
            asan = mcp_stdio.sanitized_pid(pid)
            if not asan:  # ASan's quarantine and shadow make RSS no measure of ours
                self.assertLess(hwm - base, (self.BUDGET + 24 * self.MIB) // 1024)
            # One held upload finishes and is answered; its share frees for a new one.
            held[0].sendall(data[-self.MIB:])
            status, _, body = read_response(held[0])
            self.assertEqual(status, 200, body[:200])
            self.assertEqual(json.loads(body)["id"], 9)
            r = self.post(data.decode(), sid)
            self.assertEqual(r.status, 200, r.body[:200])
            # A small request still fits beside the held ones (the budget counts bytes).
            r = self.post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, sid)
            self.assertEqual(r.status, 200)
        finally:
            for s in held:
                s.close()
        time.sleep(0.3)
        # Every share was released when its connection went: the full budget is free again.
        big = self.post(data.decode(), sid)
        self.assertEqual(big.status, 200, big.body[:200])


MODERN = "2026-07-28"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN,
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"}}


def chunked(body):
    """body as one chunk and the last chunk (Transfer-Encoding: chunked)."""
    return b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


class TestHttpRepeatedHeaders(HttpCase):
    """docs/http.md "Request handling": a header whose meaning is one value, repeated with equal
    or different values, with a Content-Length body or a chunked one, is refused before anything
    runs: Mcp-Method, Mcp-Name, MCP-Protocol-Version, Mcp-Session-Id and Content-Length with 400
    (Content-Length beside Transfer-Encoding too), like Host and Origin (403), Authorization (401)
    and Content-Type (415). Each request is a tools/call exec_command that would create a marker
    file in the workspace; the same request with each header once creates it (the control)."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server("--token", TOKEN)
        cls.auth = "Bearer " + TOKEN

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        if rc != 0:
            raise AssertionError(f"server exited with {rc}:\n" + cls.server.log()[-4000:])

    def marker_call(self, marker, modern):
        """The body of a tools/call that creates the file marker in the workspace."""
        params = {"name": "exec_command",
                  "arguments": {"workspace_id": "default",
                                "command": ["/bin/sh", "-c", 'touch "$0"', marker],
                                "yield_ms": 5000}}
        if modern:
            params["_meta"] = MODERN_META
        return json.dumps({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
                           "params": params}).encode()

    def send(self, headers, body, framing):
        """POSTs body with the header lines headers ([(name, value)], in order) and the framing
        "length" (one Content-Length), "chunked" (Transfer-Encoding: chunked) or "given" (the
        framing headers are among headers; the body goes chunked if one is Transfer-Encoding)."""
        head = [("Host", "127.0.0.1"), ("Accept", "application/json, text/event-stream"),
                ("Connection", "close")]
        names = [n.lower() for n, _ in headers]
        if "authorization" not in names:
            head.append(("Authorization", self.auth))
        if "content-type" not in names:
            head.append(("Content-Type", "application/json"))
        head += headers
        if framing == "length":
            head.append(("Content-Length", str(len(body))))
        elif framing == "chunked":
            head.append(("Transfer-Encoding", "chunked"))
        if framing == "chunked" or "transfer-encoding" in names:
            payload = chunked(body)
        else:
            payload = body
        data = b"POST /mcp HTTP/1.1\r\n" + b"".join(
            b"%s: %s\r\n" % (n.encode(), v.encode()) for n, v in head) + b"\r\n" + payload
        return self.raw(data)

    def workspace_has(self, marker):
        return os.path.exists(os.path.join(self.server.tmp.name, marker))

    def session_id(self):
        sid = self.session()
        self.addCleanup(self.request, "DELETE", headers={"Mcp-Session-Id": sid})
        return sid

    def cases(self):
        """(label, modern, headers, framing, status, named) for every refused request."""
        sid, other = self.session_id(), self.session_id()
        mod = [("MCP-Protocol-Version", MODERN), ("Mcp-Method", "tools/call"),
               ("Mcp-Name", "exec_command")]
        singles = {  # header: (modern request, its other headers, an equal and a different value)
            "Mcp-Method": (True, [mod[0], mod[2]], "tools/call", "tools/list"),
            "Mcp-Name": (True, mod[:2], "exec_command", "read"),
            "MCP-Protocol-Version": (True, mod[1:], MODERN, "2025-11-25"),
            "Mcp-Session-Id": (False, [], sid, other),
        }
        out = []
        for name, (modern, rest, value, different) in singles.items():
            for kind, second in (("equal", value), ("different", different)):
                for framing in ("length", "chunked"):
                    out.append(("%s twice, %s, %s" % (name, kind, framing), modern,
                                rest + [(name, value), (name, second)], framing, 400, name))
            # the second spelled in another case is the same header
            out.append(("%s twice, other case" % name, modern,
                        rest + [(name, value), (name.upper(), value)], "length", 400, name))
        for kind, delta in (("equal", 0), ("different", 7)):
            for te in (False, True):
                extra = [("Transfer-Encoding", "chunked")] if te else []
                out.append(("Content-Length twice, %s%s" % (kind, ", chunked" if te else ""),
                            True, mod + [("Content-Length", "LEN"),
                                         ("Content-Length", "LEN+%d" % delta)] + extra,
                            "given", 400, "Content-Length"))
        out.append(("Content-Length with Transfer-Encoding", True,
                    mod + [("Content-Length", "LEN"), ("Transfer-Encoding", "chunked")],
                    "given", 400, "Transfer-Encoding"))
        out.append(("Transfer-Encoding with Content-Length", True,
                    mod + [("Transfer-Encoding", "chunked"), ("Content-Length", "LEN")],
                    "given", 400, "Transfer-Encoding"))
        # the headers already refused when repeated, alone and chunked
        for framing in ("length", "chunked"):
            out.append(("Host twice, " + framing, True, mod + [("Host", "127.0.0.1")], framing,
                        403, None))
            out.append(("Origin twice, " + framing, True,
                        mod + [("Origin", "http://localhost"), ("Origin", "http://localhost")],
                        framing, 403, None))
            out.append(("Authorization twice, " + framing, True,
                        mod + [("Authorization", self.auth), ("Authorization", self.auth)],
                        framing, 401, None))
            out.append(("Content-Type twice, " + framing, True,
                        mod + [("Content-Type", "application/json"),
                               ("Content-Type", "application/json")], framing, 415, None))
        return out

    def test_control_each_header_once_runs(self):
        sid = self.session_id()
        mod = [("MCP-Protocol-Version", MODERN), ("Mcp-Method", "tools/call"),
               ("Mcp-Name", "exec_command")]
        for label, modern, headers in (("modern", True, mod),
                                       ("session", False, [("Mcp-Session-Id", sid)])):
            for framing in ("length", "chunked"):
                with self.subTest(request=label, framing=framing):
                    marker = "ran-control-%s-%s" % (label, framing)
                    status, _, body = self.send(headers, self.marker_call(marker, modern),
                                                framing)
                    self.assertEqual(status, 200, body)
                    self.assertIn(b'"id":41', body)
                    self.assertTrue(self.workspace_has(marker), body)

    def test_delete_with_repeated_session_id_ends_nothing(self):
        sid, other = self.session_id(), self.session_id()
        for second in (sid, other):
            with self.subTest(second="equal" if second == sid else "different"):
                status, _, reply = self.raw(
                    b"DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: " +
                    self.auth.encode() + b"\r\nMcp-Session-Id: " + sid.encode() +
                    b"\r\nMcp-Session-Id: " + second.encode() + b"\r\nConnection: close\r\n\r\n")
                self.assertEqual(status, 400, reply)
                self.assertIn(b"Mcp-Session-Id", reply)
        for s in (sid, other):  # both sessions still serve
            r = self.post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, s)
            self.assertEqual(r.status, 200, r.body)

    def test_repeated_single_valued_headers_refused_nothing_runs(self):
        markers = []
        for n, (label, modern, headers, framing, want, named) in enumerate(self.cases()):
            with self.subTest(case=label):
                marker = "ran-repeated-%d" % n
                markers.append((label, marker))
                body = self.marker_call(marker, modern)
                headers = [(h, v.replace("LEN+7", str(len(body) + 7))
                            .replace("LEN+0", str(len(body))).replace("LEN", str(len(body))))
                           for h, v in headers]
                status, _, reply = self.send(headers, body, framing)
                self.assertEqual(status, want, "%s: %r" % (label, reply))
                if named:
                    msg = json.loads(reply)
                    self.assertEqual(msg["error"]["code"], -32600, msg)
                    self.assertIn(named, msg["error"]["message"], msg)
        # A command the server ran would have created its marker within the reply's wait; give
        # any late one time to show before concluding nothing ran.
        time.sleep(1.0)
        for label, marker in markers:
            self.assertFalse(self.workspace_has(marker), "%s: the command ran" % label)
        self.assertEqual(sorted(n for n in os.listdir(self.server.tmp.name)
                                if n.startswith("ran-repeated")), [])


if __name__ == "__main__":
    unittest.main()
