#!/usr/bin/python3
"""End-to-end tests of cancellation (docs/contract/tools.md §2, #16) and of `arguments` that is
present but not an object, over stdio and Streamable HTTP (CTest e2e_cancel, and e2e_cancel_uds
with CS_E2E_RUNNER=uds).

A call that is waiting stops within 50 ms of notifications/cancelled and frees what it held:
- read_process with wait_ms: the wait ends (HTTP: the held POST is answered 202 at once);
- exec_command with yield_ms: its process (whose id the client never learned) is killed, the
  workspace lease goes, and the next exec_command is served, not WORKSPACE_BUSY;
- a mutation queued for the lease behind a running apply_patch leaves the queue: it never runs,
  and the next one proceeds;
- a dispatched apply_patch is not undone: the file is patched and operation_status says so.
On HTTP, closing the connection of a held POST cancels the calls it carried.

An apply_patch holds the lease while others queue for exactly as long as the test wants: the
server runs with the test-only hook CODESPACE_TEST_PATCH_HOLD=<file> (docs/patch-format.md,
"Test hooks"), so the preflight of a file under hold/ waits while that file exists, and the test
removes it to let the patch finish. Commands that could outlive a
test are `sleep` with a unique duration (test_process.uniq), found by a /proc scan.

Standard library only. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_cancel          (from tests/e2e)
"""
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest

import mcp_stdio
import test_http
import test_process as tp

# The cancelled call must stop within 50 ms; the slack covers the client's own turn-around
# (Python threads, the loopback) and, under sanitizers, a slower server.
STOP_BOUND = 0.05 + 0.15 * tp.SLOW
LATENCIES = []  # (what, seconds) measured, printed at the end


class Hold:
    """The hold file: while it exists, a patch of a file under hold/ waits in its preflight."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        with open(self.path, "w"):
            pass
        return self

    def release(self):
        if os.path.exists(self.path):
            os.unlink(self.path)

    def __exit__(self, *exc):
        self.release()


def add_patch(path, text="x"):
    return "*** Begin Patch\n*** Add File: %s\n+%s\n*** End Patch\n" % (path, text)


def note(what, seconds):
    LATENCIES.append((what, seconds))


def tearDownModule():
    if LATENCIES:
        sys.stderr.write("\n[cancel latencies, runner %s] %s\n" % (
            mcp_stdio.runner(), ", ".join("%s %.1f ms" % (w, s * 1000) for w, s in LATENCIES)))


class CancelStdio(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cs-e2e-cancel-")
        cls.ws = os.path.join(cls.tmp, "ws")
        os.makedirs(cls.ws)
        cls.hold = Hold(os.path.join(cls.tmp, "hold"))
        cls.srv = tp.Server(["--workspace", cls.ws, "--operations-db",
                             os.path.join(cls.tmp, "ops.db")], cls.tmp,
                            {"CODESPACE_TEST_PATCH_HOLD": cls.hold.path})

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.close()
        finally:
            tp.kill_leftovers()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def cancel(self, rid):
        self.srv.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": rid, "reason": "test"}})
        return time.monotonic()

    def ping_after(self, t0):
        """A ping's round trip after the cancellation: the loop serves at once."""
        self.assertIn("result", self.srv.request("ping", {}))
        return time.monotonic() - t0

    def assert_no_reply(self, rid, wait=0.3):
        time.sleep(wait)
        self.assertIsNone(self.srv.poll(rid), "a cancelled request was answered")

    def test_read_process_wait_cancelled(self):
        arg = tp.uniq(61)
        pid = self.srv.call("exec_command", {"workspace_id": "default",
                                             "command": ["sleep", arg]})["process_id"]
        try:
            rid = self.srv.call_start("read_process", {"process_id": pid, "wait_ms": 20000})
            time.sleep(0.2)  # the long poll waits
            t0 = self.cancel(rid)
            note("stdio read_process (ping after)", self.ping_after(t0))
            self.assert_no_reply(rid)
            # Nothing of the process was touched: it still runs.
            st = self.srv.call("process_status", {"process_id": pid})
            self.assertEqual(st["state"], "running")
        finally:
            self.srv.call_raw("terminate_process", {"process_id": pid})

    def test_exec_yield_cancelled_kills_and_frees_the_lease(self):
        arg = tp.uniq(62)
        rid = self.srv.call_start("exec_command", {"workspace_id": "default",
                                                   "command": ["sleep", arg], "yield_ms": 20000})
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg), 5 * tp.SLOW))
        t0 = self.cancel(rid)
        # The next mutation right away: it waits for the kill, never WORKSPACE_BUSY.
        nxt = self.srv.call_start("exec_command", {"workspace_id": "default",
                                                   "command": ["true"], "yield_ms": 5000})
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 5 * tp.SLOW),
                        "the cancelled command still runs")
        note("stdio exec kill", time.monotonic() - t0)
        out, err = self.srv.call_wait(nxt)
        self.assertIsNone(err, err)
        self.assertEqual(out["state"], "exited")
        self.assert_no_reply(rid)

    def test_queued_waiters_cancelled_leave_the_queue(self):
        with self.hold:
            self.queued_waiters_cancelled()

    def queued_waiters_cancelled(self):
        slow = self.srv.call_start("apply_patch", {"workspace_id": "default",
                                                   "patch": add_patch("hold/q/a.txt")})
        time.sleep(0.1)
        arg = tp.uniq(63)
        b1 = self.srv.call_start("apply_patch", {"workspace_id": "default",
                                                 "patch": add_patch("q/b.txt")})
        b2 = self.srv.call_start("exec_command", {"workspace_id": "default",
                                                  "command": ["sleep", arg], "yield_ms": 100})
        c = self.srv.call_start("apply_patch", {"workspace_id": "default",
                                                "patch": add_patch("q/c.txt")})
        time.sleep(0.1)
        self.assertIsNone(self.srv.poll(slow), "the slow patch was too fast to hold the lease")
        t0 = self.cancel(b1)
        self.cancel(b2)
        note("stdio queued waiter (ping after)", self.ping_after(t0))
        self.assertIsNone(self.srv.poll(slow), "the slow patch was too fast to hold the lease")
        self.assertIsNone(self.srv.poll(c), "a waiter ran while the lease was held")
        self.hold.release()
        out, err = self.srv.call_wait(slow, 60 * tp.SLOW)
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "applied")
        out, err = self.srv.call_wait(c)
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "applied")
        self.assertFalse(os.path.exists(os.path.join(self.ws, "q", "b.txt")))
        self.assertEqual(tp.pids_with(arg), [])
        self.assert_no_reply(b1, 0)
        self.assert_no_reply(b2, 0)
        # The lease is free again.
        self.assertIsNone(self.srv.call_raw("apply_patch", {"workspace_id": "default",
                                                           "patch": add_patch("q/d.txt")})[1])

    def test_dispatched_apply_patch_runs_and_the_ledger_tells(self):
        key = "cancel-%d" % os.getpid()
        with self.hold:
            rid = self.srv.call_start("apply_patch", {"workspace_id": "default",
                                                      "patch": add_patch("hold/p/done.txt",
                                                                         "kept"),
                                                      "operation_key": key})
            time.sleep(0.2)  # dispatched: held in its preflight
            self.assertIsNone(self.srv.poll(rid), "the patch was not held")
            self.cancel(rid)
            time.sleep(0.1)

        def finished():
            out, err = self.srv.call_raw("operation_status", {"operation_key": key})
            return err is None and out["status"] != "unknown" and out
        self.assertTrue(tp.wait_until(finished, 60 * tp.SLOW, 0.1))
        out = finished()
        self.assertEqual(out["status"], "applied", out)
        with open(os.path.join(self.ws, "hold", "p", "done.txt")) as f:
            self.assertEqual(f.read(), "kept\n")
        self.assert_no_reply(rid, 0)

    def test_arguments_not_an_object(self):
        for bad in (None, "x", [], [1], 3, 1.5, True):
            rid = self.srv.start("tools/call", {"name": "workspace_info", "arguments": bad})
            out, err = self.srv.tool_result(self.srv.wait(rid))
            self.assertIsNone(out)
            self.assertEqual(err["code"], "INVALID_ARGUMENTS", err)
            self.assertIn("arguments", err["message"])
        rid = self.srv.start("tools/call", {"name": "workspace_info"})
        out, err = self.srv.tool_result(self.srv.wait(rid))
        self.assertIsNone(err, err)
        self.assertEqual(out["server"], "codespace")


class CancelHttp(test_http.HttpCase):
    rid = 1000

    @classmethod
    def setUpClass(cls):
        cls.holddir = tempfile.mkdtemp(prefix="cs-e2e-cancel-hold-")
        cls.hold = Hold(os.path.join(cls.holddir, "hold"))
        os.environ["CODESPACE_TEST_PATCH_HOLD"] = cls.hold.path
        try:
            cls.server = test_http.Server()
        finally:
            del os.environ["CODESPACE_TEST_PATCH_HOLD"]
        cls.ws = cls.server.tmp.name

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        tp.kill_leftovers()
        shutil.rmtree(cls.holddir, ignore_errors=True)
        if rc != 0:
            raise AssertionError("server exited with %s:\n%s" % (rc, cls.server.log()[-4000:]))

    def setUp(self):
        self.sid = self.session()

    def next_id(self):
        CancelHttp.rid += 1
        return CancelHttp.rid

    def call(self, name, args):
        rid = self.next_id()
        r = self.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": name, "arguments": args}}, self.sid)
        self.assertEqual(r.status, 200, r.body)
        res = r.json()["result"]
        text = json.loads(res["content"][0]["text"])
        return (None, text) if res.get("isError") else (res["structuredContent"], None)

    def held(self, name, args):
        """Posts a tools/call on its own connection in a thread; returns (rid, box) where box
        gets the Reply and the time it arrived."""
        rid = self.next_id()
        box = {}

        def run():
            conn = self.connect()
            conn.timeout = 60
            try:
                box["reply"] = self.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                          "params": {"name": name, "arguments": args}},
                                         self.sid, conn=conn)
            finally:
                box["at"] = time.monotonic()
                conn.close()
        th = threading.Thread(target=run, daemon=True)
        th.start()
        box["thread"] = th
        return rid, box

    def cancel(self, rid):
        t0 = time.monotonic()
        r = self.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": rid}}, self.sid)
        self.assertEqual(r.status, 202, r.body)
        return t0

    def assert_answered_202(self, box, t0, what):
        box["thread"].join(10 * tp.SLOW)
        self.assertIn("reply", box, "the held POST was not answered")
        r = box["reply"]
        self.assertEqual((r.status, r.body), (202, b""))
        took = box["at"] - t0
        note(what, took)
        self.assertLess(took, STOP_BOUND, "%s: the POST was answered after %.0f ms"
                        % (what, took * 1000))

    def test_read_process_wait_cancelled(self):
        arg = tp.uniq(64)
        out, err = self.call("exec_command", {"workspace_id": "default", "command": ["sleep", arg]})
        self.assertIsNone(err, err)
        pid = out["process_id"]
        try:
            rid, box = self.held("read_process", {"process_id": pid, "wait_ms": 20000})
            time.sleep(0.3)
            self.assertNotIn("reply", box)
            t0 = self.cancel(rid)
            self.assert_answered_202(box, t0, "http read_process POST")
            self.assertEqual(self.call("process_status", {"process_id": pid})[0]["state"],
                             "running")
        finally:
            self.call("terminate_process", {"process_id": pid})

    def test_exec_yield_cancelled_kills_and_frees_the_lease(self):
        arg = tp.uniq(65)
        rid, box = self.held("exec_command", {"workspace_id": "default",
                                              "command": ["sleep", arg], "yield_ms": 20000})
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg), 5 * tp.SLOW))
        t0 = self.cancel(rid)
        self.assert_answered_202(box, t0, "http exec POST")
        out, err = self.call("exec_command", {"workspace_id": "default", "command": ["true"],
                                              "yield_ms": 5000})
        self.assertIsNone(err, err)
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 5 * tp.SLOW))
        note("http exec kill", time.monotonic() - t0)

    def test_connection_close_cancels_exec(self):
        arg = tp.uniq(66)
        body = json.dumps({"jsonrpc": "2.0", "id": self.next_id(), "method": "tools/call",
                           "params": {"name": "exec_command",
                                      "arguments": {"workspace_id": "default",
                                                    "command": ["sleep", arg],
                                                    "yield_ms": 20000}}}).encode()
        head = ("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                "Mcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n"
                % (self.server.port, self.sid, len(body))).encode()
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
        s.sendall(head + body)
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg), 5 * tp.SLOW))
        t0 = time.monotonic()
        s.close()
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 5 * tp.SLOW),
                        "closing the connection did not stop the command")
        note("http close -> exec kill", time.monotonic() - t0)
        out, err = self.call("exec_command", {"workspace_id": "default", "command": ["true"],
                                              "yield_ms": 5000})
        self.assertIsNone(err, err)

    def test_connection_close_cancels_read_wait(self):
        arg = tp.uniq(67)
        out, _ = self.call("exec_command", {"workspace_id": "default", "command": ["sleep", arg]})
        pid = out["process_id"]
        try:
            body = json.dumps({"jsonrpc": "2.0", "id": self.next_id(), "method": "tools/call",
                               "params": {"name": "read_process",
                                          "arguments": {"process_id": pid,
                                                        "wait_ms": 20000}}}).encode()
            head = ("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                    "Content-Type: application/json\r\nMcp-Session-Id: %s\r\n"
                    "Content-Length: %d\r\n\r\n" % (self.server.port, self.sid, len(body)))
            s = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
            s.sendall(head.encode() + body)
            time.sleep(0.3)
            s.close()
            # The session is no longer busy once the abandoned request is gone: DELETE and a new
            # one work, and the process runs on (a disconnect never stops it).
            self.assertEqual(self.call("process_status", {"process_id": pid})[0]["state"],
                             "running")
        finally:
            self.call("terminate_process", {"process_id": pid})

    def test_queued_waiter_cancelled_leaves_the_queue(self):
        with self.hold:
            self.queued_waiter_cancelled()

    def queued_waiter_cancelled(self):
        srid, sbox = self.held("apply_patch", {"workspace_id": "default",
                                               "patch": add_patch("hold/hq/a.txt")})
        time.sleep(0.1)
        brid, bbox = self.held("apply_patch", {"workspace_id": "default",
                                               "patch": add_patch("hq/b.txt")})
        time.sleep(0.1)
        self.assertNotIn("reply", sbox, "the slow patch was too fast to hold the lease")
        t0 = self.cancel(brid)
        self.assert_answered_202(bbox, t0, "http queued waiter POST")
        crid, cbox = self.held("apply_patch", {"workspace_id": "default",
                                               "patch": add_patch("hq/c.txt")})
        time.sleep(0.2)
        self.assertNotIn("reply", sbox, "the held patch finished before its release")
        self.assertNotIn("reply", cbox, "a waiter ran while the lease was held")
        self.hold.release()
        sbox["thread"].join(60 * tp.SLOW)
        cbox["thread"].join(60 * tp.SLOW)
        self.assertEqual(sbox["reply"].status, 200)
        self.assertEqual(cbox["reply"].status, 200)
        self.assertFalse(cbox["reply"].json()["result"].get("isError"), cbox["reply"].body)
        self.assertFalse(os.path.exists(os.path.join(self.ws, "hq", "b.txt")))
        self.assertTrue(os.path.exists(os.path.join(self.ws, "hq", "c.txt")))

    def test_dispatched_apply_patch_runs_and_the_ledger_tells(self):
        key = "http-cancel-%d" % os.getpid()
        with self.hold:
            rid, box = self.held("apply_patch", {"workspace_id": "default",
                                                 "patch": add_patch("hold/hp/done.txt", "kept"),
                                                 "operation_key": key})
            time.sleep(0.2)
            self.assertNotIn("reply", box, "the patch was not held")
            t0 = self.cancel(rid)
            self.assert_answered_202(box, t0, "http dispatched apply_patch POST")

        def finished():
            out, err = self.call("operation_status", {"operation_key": key})
            return err is None and out["status"] != "unknown" and out
        self.assertTrue(tp.wait_until(finished, 60 * tp.SLOW, 0.1))
        self.assertEqual(finished()["status"], "applied")
        with open(os.path.join(self.ws, "hold", "hp", "done.txt")) as f:
            self.assertEqual(f.read(), "kept\n")

    def test_arguments_not_an_object(self):
        for bad in (None, "x", [1], 3):
            out, err = self.call("workspace_info", bad)
            self.assertIsNone(out)
            self.assertEqual(err["code"], "INVALID_ARGUMENTS", err)
            self.assertIn("arguments", err["message"])
        r = self.post({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                       "params": {"name": "workspace_info"}}, self.sid)
        self.assertEqual(r.status, 200)
        self.assertFalse(r.json()["result"].get("isError"))


if __name__ == "__main__":
    unittest.main()
