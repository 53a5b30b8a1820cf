"""End-to-end tests of issue 17 on the real binaries: the parse budget (security-model.md M8),
the clean restart (R11) and the replacement of a lost uds worker (R12).

Memory: for each message shape of about 16 MiB, the gateway's peak RSS (VmHWM, reset before each
message through /proc/<pid>/clear_refs) must stay within 4x the message size above its idle RSS,
an over-budget message must be refused with the JSON-RPC error under its id, and RSS must come
back within 16 MiB of the idle level. Over stdio and over Streamable HTTP, before and after
initialize. The figures are printed.

Standard library only (/usr/bin/python3).
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import mcp_stdio

MIB = 1024 * 1024
START_TIMEOUT = 20.0
IO_TIMEOUT = 60.0
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "e2e-load", "version": "1"}}}
DEPTH_LIMIT = 128  # CS_JSON_BUDGET_DEPTH


def binary():
    b = os.environ.get("CODESPACE_MCP_BIN")
    if not b:
        raise unittest.SkipTest("CODESPACE_MCP_BIN is not set")
    return b


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s for pid %d" % (field, pid))


def reset_peak(pid):
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


def envelope(rid, params_text):
    """A ping request whose params is the given JSON text: the shapes ride inside a message that
    has an id, so a refusal must come back under it."""
    return ('{"jsonrpc":"2.0","id":%d,"method":"ping","params":%s}' % (rid, params_text)).encode()


def shapes(rid):
    """(name, bytes, expect_ok) for every shape, each close to 16 MiB and under the cap."""
    budget = 16 * MIB - 4096
    out = []
    # The headline: a bare top-level array of empty arrays (no id to answer under).
    n = (budget - 2) // 3
    out.append(("[[],[],...] 5.6M", b"[" + b",".join([b"[]"] * n) + b"]", False))
    # Nested arrays to the depth limit (the envelope takes 2 levels), repeated.
    d = DEPTH_LIMIT - 3
    nest = b"[" * d + b"]" * d
    k = (budget - 200) // (len(nest) + 1)
    out.append(("nested x%d deep %d" % (k, d + 3),
                envelope(rid, '{"a":[' + ",".join([nest.decode()] * k) + "]}"), False))
    # 5 M small values.
    out.append(("5M small values", envelope(rid, '{"v":[' + ",".join(["10"] * 5000000) + "]}"),
                False))
    # One 15 MiB string: accepted (ping answers).
    out.append(("one 15 MiB string", envelope(rid, '{"s":"' + "a" * (15 * MIB) + '"}'), True))
    # 100 k keys of about 160 bytes each: accepted.
    keys = ",".join('"%0150d":null' % i for i in range(100000))
    out.append(("100k keys", envelope(rid, "{" + keys + "}"), True))
    return out


class StdioRaw:
    """codespace-mcp over stdio without the helper's automatic initialize."""

    def __init__(self, *extra):
        self.tmp = tempfile.TemporaryDirectory(prefix="cs-e2e-load-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env["XDG_STATE_HOME"] = self.tmp.name
        env["CODESPACE_OPERATIONS_DB"] = ":memory:"
        self.proc = subprocess.Popen([binary(), "--workspace", self.tmp.name, *extra,
                                      *mcp_stdio.runner_args()],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.pid = self.proc.pid

    def exchange(self, data):
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("server exited")
        return json.loads(line)

    def initialize(self):
        r = self.exchange(json.dumps(INIT).encode())
        assert "result" in r, r
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.tmp.cleanup()


class HttpRaw:
    """codespace-mcp --http --port 0; the port from its "listening" log line."""

    def __init__(self, *extra):
        self.tmp = tempfile.TemporaryDirectory(prefix="cs-e2e-load-http-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env["XDG_STATE_HOME"] = self.tmp.name
        env["CODESPACE_OPERATIONS_DB"] = ":memory:"
        self.proc = subprocess.Popen([binary(), "--http", "--port", "0", "--workspace",
                                      self.tmp.name, *extra, *mcp_stdio.runner_args()],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env)
        self.pid = self.proc.pid
        self.port = None
        got = threading.Event()

        def drain():
            for raw in self.proc.stderr:
                if self.port is None:
                    try:
                        obj = json.loads(raw)
                    except ValueError:
                        continue
                    if obj.get("msg") == "listening":
                        self.port = int(obj["port"])
                        got.set()
            got.set()

        threading.Thread(target=drain, daemon=True).start()
        if not got.wait(START_TIMEOUT) or self.port is None:
            self.stop()
            raise AssertionError("the HTTP server did not start")
        self.sid = None

    def post(self, data):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=IO_TIMEOUT)
        try:
            h = {"Content-Type": "application/json",
                 "Accept": "application/json, text/event-stream"}
            if self.sid:
                h["Mcp-Session-Id"] = self.sid
            conn.request("POST", "/mcp", body=data, headers=h)
            r = conn.getresponse()
            body = r.read()
            sid = r.getheader("Mcp-Session-Id")
            return r.status, (json.loads(body) if body else None), sid
        finally:
            conn.close()

    def exchange(self, data):
        return self.post(data)[1]

    def initialize(self):
        status, body, sid = self.post(json.dumps(INIT).encode())
        assert status == 200 and sid, (status, body)
        self.sid = sid
        self.post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.tmp.cleanup()


class ParseBudget(unittest.TestCase):
    """M8: any one message costs at most 4x its size above idle, and memory comes back."""

    def measure(self, server, transport, phase):
        rid = 4242
        rows = []
        for name, data, ok in shapes(rid):
            time.sleep(0.2)
            idle = status_kib(server.pid, "VmRSS")
            reset_peak(server.pid)
            reply = server.exchange(data)
            peak = status_kib(server.pid, "VmHWM")
            end = time.monotonic() + 2.0  # a trim may be a short timer away
            while True:
                time.sleep(0.2)
                after = status_kib(server.pid, "VmRSS")
                if after - idle <= 16 * 1024 or time.monotonic() > end:
                    break
            size_mib = len(data) / MIB
            over = (peak - idle) / 1024
            print("  %-5s %-16s %-24s %6.1f MiB: idle %6.1f MiB, peak +%6.1f MiB (%.2fx), "
                  "after %+6.1f MiB, %s" % (transport, phase, name, size_mib, idle / 1024, over,
                                             over / size_mib, (after - idle) / 1024,
                                             "answered" if reply and "result" in reply
                                             else "refused: %s" % (reply or {}).get(
                                                 "error", {}).get("message", reply)[:70]),
                  file=sys.stderr)
            rows.append((name, data, ok, reply, idle, peak, after))
            self.assertLessEqual(peak - idle, 4 * len(data) / 1024,
                                 "%s %s %s: peak %d KiB over idle %d KiB" %
                                 (transport, phase, name, peak, idle))
            self.assertLessEqual(after - idle, 16 * 1024,
                                 "%s %s %s: RSS did not come back" % (transport, phase, name))
            self.assertIsNotNone(reply, name)
            initialized = phase == "initialized"
            if transport == "http" and not initialized:
                # No session yet: anything but initialize is refused (400, no session).
                self.assertIn("error", reply)
                continue
            if ok and initialized:
                self.assertEqual(reply.get("id"), rid, name)
                self.assertIn("result", reply, name)
            elif not ok:
                self.assertIn("error", reply, name)
                self.assertIn("parse budget", reply["error"]["message"], name)
                want = None if name.startswith("[[]") else rid
                self.assertEqual(reply.get("id"), want, name)
        return rows

    def run_transport(self, cls, transport):
        for phase in ("before initialize", "initialized"):
            server = cls()
            try:
                if phase == "initialized":
                    server.initialize()
                self.measure(server, transport, phase)
                # Still serving.
                if phase == "initialized":
                    r = server.exchange(b'{"jsonrpc":"2.0","id":9,"method":"ping"}')
                    self.assertEqual(r.get("result"), {}, r)
            finally:
                server.stop()

    def test_stdio(self):
        self.run_transport(StdioRaw, "stdio")

    def test_http(self):
        self.run_transport(HttpRaw, "http")

    def test_depth_limit(self):
        """One nest past the limit is refused under its id; at the limit it is answered."""
        server = StdioRaw()
        try:
            server.initialize()
            r = server.exchange(envelope(7, '{"a":' + "[" * (DEPTH_LIMIT - 2) +
                                         "]" * (DEPTH_LIMIT - 2) + "}"))
            self.assertEqual(r.get("result"), {}, r)
            r = server.exchange(envelope(8, '{"a":' + "[" * (DEPTH_LIMIT - 1) +
                                         "]" * (DEPTH_LIMIT - 1) + "}"))
            self.assertEqual(r.get("id"), 8, r)
            self.assertIn("nested %d deep" % (DEPTH_LIMIT + 1), r["error"]["message"])
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
