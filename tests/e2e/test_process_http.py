#!/usr/bin/python3
"""End-to-end tests of managed processes over Streamable HTTP (docs/contract/runtime.md §3 and 5): a
process belongs to the runner, not to the HTTP session or connection that started it.

- a session ended with DELETE while its process runs; a new session writes, reads and waits;
- a session simply abandoned (its connection closed, even in the middle of a read_process long
  poll) while its process runs; another session reads the output to the end;
- a long poll on one connection never delays calls on other connections;
- SIGTERM to the server kills every owned process group and the server exits 0.

The server is started as tests/e2e/test_http.py does (`--http --port 0 --workspace <tmp>`, the
port learned from the "listening" log line); processes that could survive are `sleep` with a
unique duration (test_process.uniq) found by a /proc scan. Standard library only. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_process_http          (from tests/e2e)
"""
import http.client
import json
import socket
import threading
import time
import unittest

import test_http
import test_process as tp

LONG_IO_TIMEOUT = 60.0  # a connection carrying a long poll


class ProcHttpCase(test_http.HttpCase):
    """Helpers on top of test_http.HttpCase."""

    rid = 100

    def connect(self):
        return http.client.HTTPConnection("127.0.0.1", self.server.port,
                                          timeout=LONG_IO_TIMEOUT)

    def call(self, sid, name, args, conn=None):
        """(structuredContent, None) or (None, error body)."""
        ProcHttpCase.rid += 1
        rid = ProcHttpCase.rid
        r = self.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": name, "arguments": args}}, sid, conn=conn)
        self.assertEqual(r.status, 200, r.body)
        msg = r.json()
        self.assertEqual(msg.get("id"), rid)
        res = msg["result"]
        text = json.loads(res["content"][0]["text"])
        if res.get("isError"):
            self.assertNotIn("structuredContent", res)
            return None, text
        self.assertEqual(text, res["structuredContent"])
        return res["structuredContent"], None

    def ok(self, sid, name, args, conn=None):
        out, err = self.call(sid, name, args, conn)
        self.assertIsNone(err, "%s %r: %r" % (name, args, err))
        return out

    def exec_(self, sid, command, **kw):
        args = {"workspace_id": "default", "command": command}
        args.update(kw)
        out = self.ok(sid, "exec_command", args)
        self.assertEqual(out["dispatch_status"], "confirmed")
        self.assertRegex(out["process_id"], tp.PROC_ID)
        return out["process_id"]

    def drain(self, sid, pid, cursor=0, timeout=20.0):
        text = ""
        end = time.monotonic() + timeout * tp.SLOW
        while True:
            out = self.ok(sid, "read_process", {"process_id": pid, "cursor": cursor,
                                                "wait_ms": 2000})
            text += out["chunk"]
            cursor = out["cursor"]
            if out["eof"]:
                return text
            self.assertLess(time.monotonic(), end, "no eof; read so far %r" % text)

    def delete(self, sid):
        return self.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})

    def raw_post_then_drop(self, sid, msg):
        """Sends msg on a fresh socket and closes it without reading the reply."""
        body = json.dumps(msg).encode()
        head = ("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                "Accept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\n"
                "MCP-Protocol-Version: 2025-11-25\r\nContent-Length: %d\r\n\r\n"
                % (self.server.port, sid, len(body))).encode()
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
        s.sendall(head + body)
        time.sleep(0.3)  # the request is in, the long poll is waiting
        s.close()


class ProcessHttpCase(ProcHttpCase):
    @classmethod
    def setUpClass(cls):
        cls.server = test_http.Server()

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        tp.kill_leftovers()
        if rc != 0:
            raise AssertionError("server exited with %s:\n%s" % (rc, cls.server.log()[-4000:]))

    def test_session_deleted_while_process_runs(self):
        a = self.session()
        pid = self.exec_(a, ["cat"])
        self.assertEqual(self.ok(a, "write_stdin", {"process_id": pid, "data": "one\n"}),
                         {"ok": True, "bytes_written": 4})
        r = self.delete(a)
        self.assertEqual(r.status, 204, r.body)
        self.assertEqual(self.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, a).status, 404)
        b = self.session()
        st = self.ok(b, "process_status", {"process_id": pid})
        self.assertEqual(st["state"], "running", st)
        self.ok(b, "write_stdin", {"process_id": pid, "data": "two\n", "close": True})
        self.assertEqual(self.drain(b, pid), "one\ntwo\n")
        st = self.ok(b, "process_status", {"process_id": pid})
        self.assertEqual((st["state"], st["exit_code"], st["termination"]),
                         ("exited", 0, "exited"))

    def test_session_abandoned_during_a_long_poll(self):
        a = self.session()
        arg = tp.uniq(70)
        pid = self.exec_(a, ["sh", "-c", "read x; echo got $x; exec sleep %s" % arg])
        # A long poll whose connection goes away before the answer, then nothing more from a.
        self.raw_post_then_drop(a, {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                    "params": {"name": "read_process",
                                               "arguments": {"process_id": pid,
                                                             "wait_ms": 20000}}})
        b = self.session()
        self.assertEqual(self.ok(b, "process_status", {"process_id": pid})["state"], "running")
        self.ok(b, "write_stdin", {"process_id": pid, "data": "it\n"})
        out = self.ok(b, "read_process", {"process_id": pid, "wait_ms": 10000})
        self.assertEqual(out["chunk"], "got it\n")
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg), 5 * tp.SLOW))
        self.assertEqual(self.ok(b, "terminate_process", {"process_id": pid}),
                         {"ok": True, "state": "exited"})
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 3 * tp.SLOW))
        # The abandoned session can still be used: it was never ended.
        st = self.ok(a, "process_status", {"process_id": pid})
        self.assertEqual(st["termination"], "terminated")

    def test_output_read_from_a_new_session(self):
        a = self.session()
        pid = self.exec_(a, ["sh", "-c", "sleep 0.5; echo done"])
        self.delete(a)
        b = self.session()
        self.assertEqual(self.drain(b, pid), "done\n")

    def test_long_poll_does_not_delay_other_connections(self):
        a = self.session()
        pid = self.exec_(a, ["cat"])
        got = {}

        def poll():
            conn = self.connect()
            try:
                got["t0"] = time.monotonic()
                got["out"] = self.call(a, "read_process",
                                       {"process_id": pid, "wait_ms": 20000}, conn)
                got["t1"] = time.monotonic()
            finally:
                conn.close()

        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        r = self.post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, a)
        self.assertEqual(r.json().get("result"), {})
        self.assertEqual(self.ok(a, "process_status", {"process_id": pid})["state"], "running")
        self.assertLess(time.monotonic() - t0, 2 * tp.SLOW)
        self.assertNotIn("out", got, "read_process answered before any output")
        t_write = time.monotonic()
        self.ok(a, "write_stdin", {"process_id": pid, "data": "x\n", "close": True})
        th.join(20)
        self.assertFalse(th.is_alive())
        out, err = got["out"]
        self.assertIsNone(err, err)
        self.assertEqual(out["chunk"], "x\n")
        self.assertLess(got["t1"] - t_write, 2 * tp.SLOW)
        # cat exits after its stdin closed; wait for it (it holds the workspace until then).
        self.drain(a, pid, out["cursor"])


class HttpShutdownCase(ProcHttpCase):
    def test_sigterm_kills_every_process(self):
        self.server = test_http.Server()
        try:
            sid = self.session()
            args = [tp.uniq(80), tp.uniq(81)]
            self.exec_(sid, ["sh", "-c", "sleep %s & sleep %s & wait" % tuple(args)])
            for a in args:
                self.assertTrue(tp.wait_until(lambda: tp.pids_with(a), 5 * tp.SLOW))
        finally:
            rc = self.server.stop()
        try:
            self.assertEqual(rc, 0, self.server.log()[-4000:])
            for a in args:
                self.assertTrue(tp.wait_until(lambda: not tp.pids_with(a), 3 * tp.SLOW),
                                "%s survived the server" % a)
        finally:
            tp.kill_leftovers()


if __name__ == "__main__":
    unittest.main()
