#!/usr/bin/python3
"""Several gateways on one remote worker at once (issue 32 item 1; docs/scale-out.md, "Several
gateways").

The real binaries, `codespace-runtime --listen`, with its Linux sandbox, and `codespace-mcp
--runner tcp://...`: the real gateways run in one network namespace and their workers in another,
joined by a veth pair (two hosts, as in test_remote); the raw-wire tests talk to a plaintext
worker on the loopback.

- The wire, raw (a plaintext worker, two connections made here): two connections say hello with
  their own gateway names and send the same request id at the same time, in flight together;
  each gets its own answer, and neither sees the other's. A cancel naming that id cancels only
  its own connection's request. A replay answers only the gateway's own calls, on any of its
  connections; a connection that names no gateway replays only its own. A connection closed
  mid-call leaves the other's call and the worker alone.
- Two real gateways (PSK, each its own identity) in front of one worker, the calls alternating
  between them for every tool: a file written through one is read through the other, a process
  started through one is read, waited on and listed through the other; both stay connected the
  whole time (the worker accepts exactly two connections, none ends, neither gateway loses its
  link), also while both are busy at once. The same with three gateways on one worker, and
  with two and three gateways over two workers (a workspace each), every tool, each step through
  another gateway than the last. One gateway SIGKILLed mid-call leaves the other's
  call in flight unaffected.

Needs root (a root worker sandboxes its commands; network namespaces), `ip` and `openssl`. Outside CI a missing piece
skips; in CI (CI=true) it fails. Run (from tests/e2e):
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp /usr/bin/python3 -m unittest -v test_replicas
"""
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import uuid

import mcp_stdio
import test_preauth as tpa
import test_process as tp
import test_remote as tr
import test_uds as tu

SLOW = tp.SLOW
IO_TIMEOUT = 30 * SLOW


class TcpWire(tu.WireClient):
    """A raw connection to a plaintext --listen worker (the frames are the uds runner's)."""

    def __init__(self, port, timeout=IO_TIMEOUT):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.events = []

    def hello(self, gateway=None):
        data = {"protocol": tu.PROTOCOL, "peer": "test_replicas"}
        if gateway is not None:
            data["gateway"] = gateway
        resp = self.call("rrpc-1", "hello", data)
        assert resp["ok"] is True, resp
        return self


def recv_answers(conn, n):
    """The next n answers on conn, by request id (in whatever order they come)."""
    got = {}
    while len(got) < n:
        m = conn.recv()
        got[m["request_id"]] = m
    return got


def run(*argv):
    return subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class ReplicaTest(unittest.TestCase):
    def setUp(self):
        tr.need(os.geteuid() == 0, "a root worker (it sandboxes its commands as another uid)")
        tr.need(shutil.which("openssl") is not None, "no openssl")
        tr.need(os.access(tr.runtime_binary(), os.X_OK), "no codespace-runtime")
        tr.need(shutil.which("ip") is not None, "no ip (iproute2)")
        # Two hosts: the gateways' namespace and the workers', a veth pair between them.
        tag = "%x%04x" % (os.getpid() % 0xfff, random.randrange(0x10000))
        self.nsg, self.nsw = "crg-" + tag, "crw-" + tag
        veg, vew = "rg" + tag, "rw" + tag
        n = random.randrange(256)
        self.gaddr, self.waddr = "10.232.%d.1" % n, "10.232.%d.2" % n
        for ns in (self.nsg, self.nsw):
            tr.run("ip", "netns", "add", ns)
            self.addCleanup(tr.run, "ip", "netns", "del", ns, check=False)
        tr.run("ip", "link", "add", veg, "netns", self.nsg, "type", "veth", "peer", "name", vew,
               "netns", self.nsw)
        for ns, dev, addr in ((self.nsg, veg, self.gaddr), (self.nsw, vew, self.waddr)):
            tr.run("ip", "-n", ns, "addr", "add", addr + "/30", "dev", dev)
            tr.run("ip", "-n", ns, "link", "set", dev, "up")
            tr.run("ip", "-n", ns, "link", "set", "lo", "up")
        self.tmp = tempfile.mkdtemp(prefix="cs-replicas-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        os.chmod(self.tmp, 0o755)  # the sandboxed commands' uid reads the workspace
        self.ws = os.path.join(self.tmp, "ws")
        os.mkdir(self.ws)
        os.chmod(self.ws, 0o777)
        with open(os.path.join(self.ws, "a.txt"), "w") as f:
            f.write("alpha\n")
        self.servers = []

    def tearDown(self):
        tpa.close_all(self.servers)

    def worker(self, args, far=False):
        """A worker of the workspace: on the loopback (the raw-wire tests), or far (in the
        workers' namespace, for the real gateways)."""
        w = tpa.Worker(args + ["--root", self.ws], **(
            {"ns": self.nsw, "host": self.waddr} if far else {}))
        self.addCleanup(w.kill)
        return w

    def in_gateways_ns(self, argv):
        """The command and arguments of a program run in the gateways' namespace."""
        return "ip", ["netns", "exec", self.nsg] + list(argv)

    def exec_data(self, argv, yield_ms=None):
        """An exec in a shared workspace: processes side by side (an exclusive one would refuse
        the second, test_exclusive_holds_across_gateways)."""
        d = tu.exec_data(self.ws, argv, yield_ms)
        d["workspace"]["processes"] = "shared"
        return d

    # ---- the wire ----

    def test_same_request_id_from_two_gateways_at_once(self):
        w = self.worker(["--plaintext"])
        a = TcpWire(w.port).hello("gateway-a")
        b = TcpWire(w.port).hello("gateway-b")
        # The same id on both, both in flight together: each command outlives the other's send.
        a.send(tu.request("rrpc-2", "exec", self.exec_data(
            ["sh", "-c", "sleep 1; echo from-a"], yield_ms=10000)))
        b.send(tu.request("rrpc-2", "exec", self.exec_data(
            ["sh", "-c", "sleep 1; echo from-b"], yield_ms=10000)))
        ra, rb = a.recv(), b.recv()
        for resp, me, other in ((ra, "from-a", "from-b"), (rb, "from-b", "from-a")):
            self.assertEqual(resp["request_id"], "rrpc-2", resp)
            self.assertTrue(resp["ok"], resp)
            out = resp["result"]["data"]["output"]
            self.assertIn(me, out)
            self.assertNotIn(other, out)
        # A cancel naming rrpc-3 cancels only its own connection's rrpc-3.
        a.send(tu.request("rrpc-3", "exec", self.exec_data(
            ["sh", "-c", "sleep 1.5; echo slow-a"], yield_ms=10000)))
        b.send(tu.request("rrpc-3", "exec", self.exec_data(
            ["sh", "-c", "sleep 1.5; echo slow-b"], yield_ms=10000)))
        time.sleep(0.3)
        b.send(tu.request("rrpc-4", "cancel", {"request_id": "rrpc-3"}))
        got = recv_answers(b, 2)
        ra = a.recv()
        self.assertEqual(ra["request_id"], "rrpc-3")
        self.assertIn("slow-a", ra["result"]["data"]["output"], ra)  # waited its 1.5 s out
        self.assertNotIn("slow-b", json.dumps(got["rrpc-3"]), got)  # answered at the cancel
        self.assertTrue(got["rrpc-4"]["result"]["data"]["found"], got)
        # Replay: a gateway's own answers, on any of its connections; never another's.
        self.assertIn("from-a", json.dumps(a.call("rrpc-5", "replay", {"request_id": "rrpc-2"})))
        self.assertIn("from-b", json.dumps(b.call("rrpc-5", "replay", {"request_id": "rrpc-2"})))
        a.close()
        a2 = TcpWire(w.port).hello("gateway-a")
        again = a2.call("rrpc-6", "replay", {"request_id": "rrpc-2"})
        self.assertIn("from-a", json.dumps(again))
        self.assertNotIn("from-b", json.dumps(again))
        anon = TcpWire(w.port).hello()
        none = anon.call("rrpc-2", "replay", {"request_id": "rrpc-2"})
        self.assertFalse(none["ok"], none)
        self.assertEqual(none["error"]["code"], "OPERATION_NOT_FOUND", none)
        # A connection closed mid-call: the other's call and the worker go on.
        a2.send(tu.request("rrpc-7", "exec", self.exec_data(["sleep", "5"], yield_ms=10000)))
        b.send(tu.request("rrpc-6", "exec", self.exec_data(
            ["sh", "-c", "sleep 1; echo still-b"], yield_ms=10000)))
        time.sleep(0.2)
        a2.close()
        rb = b.recv()
        self.assertEqual(rb["request_id"], "rrpc-6")
        self.assertIn("still-b", rb["result"]["data"]["output"], rb)
        got = anon.call("rrpc-3", "read", {"workspace": tu.workspace(self.ws), "path": "a.txt"})
        self.assertEqual(got["result"]["data"]["content"], "alpha\n")
        self.assertIsNone(w.proc.poll())
        for c in (b, anon):
            c.close()

    def test_patches_of_one_workspace_run_one_at_a_time(self):
        """Two connections patch the same line at once: the worker runs the patches of one
        workspace one at a time, first come first served, so the second sees the first's result
        (one applied, the other refused on its context: no update lost). A command in the
        exclusive workspace waits while a patch of it runs or waits, then runs (and sees the
        patched file); one in a shared workspace runs meanwhile; a waiting command cancelled
        never runs. The first patch is held in its preflight (CODESPACE_TEST_PATCH_HOLD)."""
        hold = os.path.join(self.tmp, "hold-flag")
        open(hold, "w").close()
        os.environ["CODESPACE_TEST_PATCH_HOLD"] = hold
        try:
            w = self.worker(["--plaintext"])
        finally:
            del os.environ["CODESPACE_TEST_PATCH_HOLD"]
        os.mkdir(os.path.join(self.ws, "hold"))
        with open(os.path.join(self.ws, "hold", "x.txt"), "w") as f:
            f.write("a\n")
        os.chmod(os.path.join(self.ws, "hold"), 0o777)
        a = TcpWire(w.port).hello("gateway-a")
        b = TcpWire(w.port).hello("gateway-b")

        def patch(frm, to):
            return {"workspace": tu.workspace(self.ws), "patch": (
                "*** Begin Patch\n*** Update File: hold/x.txt\n@@\n-%s\n+%s\n*** End Patch\n"
                % (frm, to))}

        a.send(tu.request("rrpc-2", "apply_patch", patch("a", "b")))
        time.sleep(1.0)  # a's patch has come first and is in its preflight, held (a slow build)
        b.send(tu.request("rrpc-2", "apply_patch", patch("a", "c")))
        time.sleep(0.5)
        # Exclusive (absent means exclusive): waits for both patches, then runs.
        b.send(tu.request("rrpc-3", "exec", tu.exec_data(
            self.ws, ["cat", "hold/x.txt"], yield_ms=5000)))
        ran = b.call("rrpc-4", "exec", self.exec_data(["true"], yield_ms=5000))  # shared
        self.assertTrue(ran["ok"], ran)
        os.unlink(hold)
        ra = a.recv()
        rb, rcat = b.recv(), b.recv()
        self.assertEqual((ra["request_id"], rb["request_id"], rcat["request_id"]),
                         ("rrpc-2", "rrpc-2", "rrpc-3"), "the command did not wait its turn")
        applied = [r for r in (ra, rb) if r["ok"] and r["result"]["data"]["status"] == "applied"]
        self.assertEqual(len(applied), 1, (ra, rb))
        self.assertIs(applied[0], ra, "the first to come was not the first to run")
        self.assertFalse(rb["ok"] and rb["result"]["data"]["status"] == "applied", rb)
        self.assertTrue(rcat["ok"], rcat)
        self.assertEqual(rcat["result"]["data"]["output"], "b\n", rcat)
        with open(os.path.join(self.ws, "hold", "x.txt")) as f:
            self.assertEqual(f.read(), "b\n")
        # A waiting command cancelled: answered at the cancel, and never started.
        open(hold, "w").close()
        a.send(tu.request("rrpc-5", "apply_patch", patch("b", "d")))
        time.sleep(1.0)
        b.send(tu.request("rrpc-5", "exec", tu.exec_data(
            self.ws, ["touch", "hold/never"], yield_ms=5000)))
        time.sleep(0.3)
        b.send(tu.request("rrpc-6", "cancel", {"request_id": "rrpc-5"}))
        got = recv_answers(b, 2)
        self.assertFalse(got["rrpc-5"]["ok"], got)
        self.assertIn("nothing ran", got["rrpc-5"]["error"]["message"], got)
        self.assertTrue(got["rrpc-6"]["result"]["data"]["found"], got)
        os.unlink(hold)
        ra = a.recv()
        self.assertEqual(ra["result"]["data"]["status"], "applied", ra)
        done = b.call("rrpc-7", "exec", tu.exec_data(self.ws, ["ls", "hold"], yield_ms=5000))
        self.assertTrue(done["ok"], done)
        self.assertEqual(done["result"]["data"]["output"], "x.txt\n", done)
        for c in (a, b):
            c.close()

    def test_the_workers_ledger_on_the_wire(self):
        """The worker's ledger seen raw: a key sent on a second connection under a new id is a
        replay of the first (its id, replayed), and that new id is then known to
        patch_outcomes with the key's outcome, not absent (a gateway whose replay answer was
        lost asks about its own id: it must not read as rolled back). The same key and
        workspace id on another root is a conflict, never a replay of the first root's patch."""
        w = self.worker(["--plaintext"])
        a = TcpWire(w.port).hello("gateway-a")
        b = TcpWire(w.port).hello("gateway-b")
        first_id, second_id = "op-%s" % uuid.uuid4(), "op-%s" % uuid.uuid4()

        def patch(op_id, ws):
            return {"workspace": ws, "operation_id": op_id, "operation_key": "wire-1",
                    "patch": "*** Begin Patch\n*** Add File: wired.txt\n+w\n*** End Patch\n"}

        ra = a.call("rrpc-2", "apply_patch", patch(first_id, tu.workspace(self.ws)))
        self.assertTrue(ra["ok"], ra)
        self.assertEqual(ra["result"]["data"]["status"], "applied")
        self.assertNotIn("replayed", ra["result"]["data"])
        rb = b.call("rrpc-2", "apply_patch", patch(second_id, tu.workspace(self.ws)))
        self.assertEqual((rb["result"]["data"]["operation_id"], rb["result"]["data"]["replayed"]),
                         (first_id, True), rb)
        out = b.call("rrpc-3", "patch_outcomes", {"workspace": tu.workspace(self.ws),
                                                  "ask": [second_id]})
        self.assertIn({"operation_id": second_id, "status": "applied"},
                      out["result"]["data"]["outcomes"], out)
        self.assertEqual(out["result"]["data"]["absent"], [], out)
        st = b.call("rrpc-4", "operation_status", {"operation_key": "wire-1"})
        self.assertEqual((st["result"]["data"]["operation_id"], st["result"]["data"]["status"]),
                         (first_id, "applied"), st)
        # Another root under the same workspace id (two gateways' registries disagree).
        other = os.path.join(self.tmp, "other-root")
        os.mkdir(other)
        os.chmod(other, 0o777)
        rc = b.call("rrpc-5", "apply_patch", patch("op-%s" % uuid.uuid4(), tu.workspace(other)))
        self.assertFalse(rc["ok"], rc)
        self.assertEqual(rc["error"]["code"], "OPERATION_KEY_CONFLICT", rc)
        self.assertFalse(os.path.exists(os.path.join(other, "wired.txt")))
        for c in (a, b):
            c.close()

    def test_both_gateways_are_told_of_an_exit(self):
        w = self.worker(["--plaintext"])
        a = TcpWire(w.port).hello("gateway-a")
        b = TcpWire(w.port).hello("gateway-b")
        d = self.exec_data(["sh", "-c", "sleep 0.5"], yield_ms=0)
        started = a.call("rrpc-2", "exec", d)
        self.assertTrue(started["ok"], started)
        pid = d["process_id"]
        for c in (a, b):
            end = time.time() + 10 * SLOW
            while not any(e["event"]["data"]["process_id"] == pid for e in c.events
                          if e["event"]["type"] == "process_exited"):
                self.assertLess(time.time(), end, "no process_exited on a connection")
                c.sock.settimeout(1)
                try:
                    m = c.recv_any()
                except socket.timeout:
                    continue
                finally:
                    c.sock.settimeout(IO_TIMEOUT)
                if m is not None and m["kind"] == "event":
                    c.events.append(m)
            c.close()

    def test_past_eight_gateway_connections_one_is_refused(self):
        """The front bridges 8 authenticated connections at once (runner_tls.c BRIDGE_MAX): a
        ninth is refused with its reason, none of the eight is ended for it, and one ending makes
        room."""
        w = self.worker(["--plaintext"])
        conns = [TcpWire(w.port).hello("gw-%d" % i) for i in range(8)]
        ninth = TcpWire(w.port)
        ninth.send(tu.request("rrpc-1", "hello", {"protocol": tu.PROTOCOL}))
        self.assertIsNone(ninth.recv(), "a ninth connection was served")
        ninth.close()
        refused = w.wait_for("runner connection refused")
        self.assertIn("8 gateway connections", refused[0]["error"])
        for i, c in enumerate(conns):
            r = c.call("rrpc-2", "read", {"workspace": tu.workspace(self.ws), "path": "a.txt"})
            self.assertEqual(r["result"]["data"]["content"], "alpha\n", i)
        conns.pop().close()
        end = time.time() + 5 * SLOW
        while True:  # the bridge's end is seen by the front a moment later
            c = TcpWire(w.port)
            c.send(tu.request("rrpc-1", "hello", {"protocol": tu.PROTOCOL}))
            if c.recv() is not None:
                break
            c.close()
            self.assertLess(time.time(), end, "no room after a connection ended")
            time.sleep(0.05)
        conns.append(c)
        self.assertEqual(w.records("runner connection ended")[0]["why"] != "", True)
        for c in conns:
            c.close()

    # ---- two real gateways ----

    def gateway(self, w, ident, key):
        self.made = getattr(self, "made", 0) + 1
        state = os.path.join(self.tmp, "state-%d" % self.made)
        os.mkdir(state)
        s = mcp_stdio.StdioServer(*self.in_gateways_ns([
            tp.binary(), "--workspace", self.ws, "--operations-db",
            os.path.join(state, "ops.db"), "--runner", "tcp://%s:%d" % (w.host, w.port),
            "--tls-psk", key, "--tls-psk-identity", ident]), state)
        self.servers.append(s)
        return s

    def key(self, name):
        hexkey = run("openssl", "rand", "-hex", "32").stdout.strip()
        path = os.path.join(self.tmp, name + ".psk")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(hexkey + "\n")
        return path, hexkey

    def keys_for(self, names):
        """A worker's keys file for the identities gw-<name>: (its path, {name: that key's
        file})."""
        files, lines = {}, []
        for name in names:
            files[name], hexkey = self.key(name)
            lines.append("gw-%s:%s\n" % (name, hexkey))
        keys = os.path.join(self.tmp, "keys")
        with open(os.open(keys, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write("".join(lines))
        return keys, files

    def keys_file(self):
        """A worker's keys file for the identities gw-a and gw-b: (it, a's key, b's key)."""
        keys, files = self.keys_for("ab")
        return keys, files["a"], files["b"]

    def two_gateways(self):
        """One PSK worker and two gateways on it, each its own identity, both served."""
        keys, ka, kb = self.keys_file()
        w = self.worker(["--tls-psk-keys", keys], far=True)
        ga, gb = self.gateway(w, "gw-a", ka), self.gateway(w, "gw-b", kb)
        self.ready(ga)
        self.ready(gb)
        return w, ga, gb

    def ready(self, srv):
        end = time.time() + 10 * SLOW
        while True:
            out, err = srv.call_raw("read", {"workspace_id": "default", "path": "a.txt"})
            if err is None:
                return
            self.assertLess(time.time(), end, "never served: %s" % err)
            time.sleep(0.05)

    def call(self, srv, tool, args):
        out, err = srv.call_raw(tool, args)
        self.assertIsNone(err, (tool, err, "".join(srv.stderr[-20:])))
        return out

    def lost(self, srv):
        return [line for line in srv.stderr if '"runner connection lost"' in line
                or '"runner connection failed"' in line]

    def test_two_gateways_alternate_on_every_tool(self):
        w, ga, gb = self.two_gateways()
        pair = (ga, gb)
        for i in range(6):
            one, two = pair[i % 2], pair[(i + 1) % 2]
            name = "f%d.txt" % i
            patch = "*** Begin Patch\n*** Add File: %s\n+round %d\n*** End Patch\n" % (name, i)
            out = self.call(one, "apply_patch", {"workspace_id": "default", "patch": patch,
                                                 "operation_key": "k-%d" % i})
            self.assertEqual(out["status"], "applied", out)
            self.assertEqual(self.call(two, "read", {"workspace_id": "default",
                                                     "path": name})["content"],
                             "round %d\n" % i)
            self.assertIn(name, self.call(two, "find", {"workspace_id": "default",
                                                        "glob": "*.txt"})["paths"])
            started = self.call(one, "exec_command", {
                "workspace_id": "default", "yield_ms": 0,
                "command": ["sh", "-c", "sleep 0.3; echo run-%d" % i]})
            pid = started["process_id"]
            text, cursor = "", 0
            end = time.time() + 15 * SLOW
            while True:
                rp = self.call(two, "read_process", {"process_id": pid, "cursor": cursor,
                                                     "wait_ms": 2000})
                text += rp["chunk"]
                cursor = rp["cursor"]
                if rp["eof"]:
                    break
                self.assertLess(time.time(), end)
            self.assertIn("run-%d" % i, text)
            st = self.call(two, "process_status", {"process_id": pid})
            self.assertEqual(st["state"], "exited", st)
        # Both busy at once: a long poll through each on one process, side by side.
        pid = self.call(ga, "exec_command", {"workspace_id": "default", "yield_ms": 0,
                                             "command": ["sh", "-c", "sleep 1; echo busy"]})[
            "process_id"]
        results = {}

        def wait_through(srv, tag):
            rp = self.call(srv, "read_process", {"process_id": pid, "wait_ms": 10000})
            results[tag] = rp["chunk"]

        threads = [threading.Thread(target=wait_through, args=(srv, tag))
                   for srv, tag in ((ga, "a"), (gb, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30 * SLOW)
        self.assertIn("busy", results.get("a", ""))
        self.assertIn("busy", results.get("b", ""))
        # No link lost, no connection made twice, none ended.
        self.assertEqual(len(w.records("runner connection accepted")), 2,
                         "".join(w.lines[-20:]))
        self.assertEqual(w.records("runner connection ended"), [])
        self.assertEqual(self.lost(ga), [])
        self.assertEqual(self.lost(gb), [])
        idents = sorted(r["psk_identity"] for r in w.records("runner connection accepted"))
        self.assertEqual(idents, ["gw-a", "gw-b"])
        # From the other host: the gateways' namespace address, not the loopback.
        for r in w.records("runner connection accepted"):
            self.assertEqual(r["peer"], self.gaddr, r)

    def test_exclusive_holds_across_gateways(self):
        """An exclusive workspace held by a live process started through one gateway: the other
        gateway's exec_command and apply_patch are refused WORKSPACE_BUSY naming that process
        (the worker's check; each gateway's own lease knows only its own processes), a
        check_only patch and reads still work, and once the holder is terminated (through the
        other gateway) both run."""
        w, ga, gb = self.two_gateways()
        info = self.call(gb, "workspace_info", {"workspace_id": "default"})
        self.assertEqual(info["execution"]["serialization"]["process_conflict"], "reject", info)
        held = self.call(ga, "exec_command", {"workspace_id": "default", "yield_ms": 0,
                                              "command": ["sleep", "30"]})["process_id"]
        patch = "*** Begin Patch\n*** Add File: b.txt\n+beta\n*** End Patch\n"
        for tool, args in (("exec_command", {"workspace_id": "default", "yield_ms": 0,
                                             "command": ["true"]}),
                           ("apply_patch", {"workspace_id": "default", "patch": patch,
                                            "operation_key": "busy-b"})):
            out, err = gb.call_raw(tool, args)
            self.assertIsNone(out, (tool, out))
            self.assertEqual(err["code"], "WORKSPACE_BUSY", (tool, err))
            self.assertIn(held, err["message"])
        self.assertFalse(os.path.exists(os.path.join(self.ws, "b.txt")))
        checked = self.call(gb, "apply_patch", {"workspace_id": "default", "patch": patch,
                                                "check_only": True})
        self.assertNotEqual(checked.get("status"), "applied", checked)
        self.assertEqual(self.call(gb, "read", {"workspace_id": "default",
                                                "path": "a.txt"})["content"], "alpha\n")
        self.call(gb, "terminate_process", {"process_id": held})
        end = time.time() + 10 * SLOW
        while self.call(gb, "process_status", {"process_id": held})["state"] != "exited":
            self.assertLess(time.time(), end)
            time.sleep(0.05)
        out = self.call(gb, "apply_patch", {"workspace_id": "default", "patch": patch,
                                            "operation_key": "free-b"})
        self.assertEqual(out["status"], "applied", out)
        out = self.call(gb, "exec_command", {"workspace_id": "default", "yield_ms": 5000,
                                             "command": ["cat", "b.txt"]})
        self.assertEqual(out.get("output"), "beta\n", out)
        # The gateway that started the holder was told of its end: its own lease is free too.
        out = self.call(ga, "exec_command", {"workspace_id": "default", "yield_ms": 5000,
                                             "command": ["cat", "b.txt"]})
        self.assertEqual(out.get("output"), "beta\n", out)

    def two_workers(self, keys):
        """Two PSK workers on one keys file, each holding its own workspace ("one", "two"):
        {name: (its root, its worker)}."""
        workers = {}
        for name in ("one", "two"):
            root = os.path.join(self.tmp, "ws-" + name)
            os.mkdir(root)
            os.chmod(root, 0o777)
            w = tpa.Worker(["--tls-psk-keys", keys, "--root", root], ns=self.nsw,
                           host=self.waddr)
            self.addCleanup(w.kill)
            workers[name] = (root, w)
        return workers

    def registry_gateway(self, workers, ident, key):
        """A gateway whose registry names every workspace of workers on its own worker, reached
        with this identity; returned once it reached each of them."""
        self.made = getattr(self, "made", 0) + 1
        state = os.path.join(self.tmp, "state-%d" % self.made)
        os.mkdir(state)
        cfg = os.path.join(state, "registry.json")
        with open(cfg, "w") as f:
            json.dump({"workspaces": {name: {
                "root": root, "profile": "workspace-write",
                "runner": {"url": "tcp://%s:%d" % (w.host, w.port),
                           "tls_psk_file": key, "tls_psk_identity": ident}}
                for name, (root, w) in workers.items()}}, f)
        srv = mcp_stdio.StdioServer(*self.in_gateways_ns([
            tp.binary(), "--config", cfg, "--operations-db", ":memory:"]), state)
        self.servers.append(srv)
        for name in workers:
            end = time.time() + 10 * SLOW
            while srv.call_raw("find", {"workspace_id": name, "glob": "*"})[1] is not None:
                self.assertLess(time.time(), end, "%s never reached" % name)
                time.sleep(0.05)
        return srv

    def wait_exited(self, srv, pid):
        end = time.time() + 10 * SLOW
        while self.call(srv, "process_status", {"process_id": pid})["state"] != "exited":
            self.assertLess(time.time(), end, pid)
            time.sleep(0.05)

    def read_until(self, srv, pid, want, cursor=0):
        """read_process through srv until want is in the output; (the text, the cursor)."""
        text = ""
        end = time.time() + 15 * SLOW
        while want not in text:
            self.assertLess(time.time(), end, (want, text))
            rp = self.call(srv, "read_process", {"process_id": pid, "cursor": cursor,
                                                 "wait_ms": 2000})
            text += rp["chunk"]
            cursor = rp["cursor"]
            self.assertFalse(rp["eof"] and want not in text, (want, text))
        return text, cursor

    def every_tool_round(self, gws, workspace, root, i):
        """One round of every tool on one workspace, each step through the next gateway in turn
        (the one that writes is never the one that reads it back)."""
        n = len(gws)
        g = [gws[(i + k) % n] for k in range(n)]
        at = lambda k: g[k % n]  # noqa: E731
        name = "r%d.txt" % i
        key = "k-%s-%d" % (workspace, i)
        patch = "*** Begin Patch\n*** Add File: %s\n+%s round %d\n*** End Patch\n" % (
            name, workspace, i)
        args = {"workspace_id": workspace, "patch": patch, "operation_key": key}
        out = self.call(at(0), "apply_patch", args)
        self.assertEqual(out["status"], "applied", out)
        # Every gateway answers for the key: its own ledger, or the worker's (issue 32 item 3).
        for gw in (at(0), at(1), at(2)):
            again = self.call(gw, "apply_patch", args)
            self.assertEqual((again["operation_id"], again.get("replayed"), again["status"]),
                             (out["operation_id"], True, "applied"), again)
            for by in ({"operation_key": key}, {"operation_id": out["operation_id"]}):
                st = self.call(gw, "operation_status", by)
                self.assertEqual((st["status"], st["operation_id"]),
                                 ("applied", out["operation_id"]), (by, st))
        with open(os.path.join(root, name)) as f:
            self.assertEqual(f.read(), "%s round %d\n" % (workspace, i))
        self.assertEqual(self.call(at(1), "read", {"workspace_id": workspace,
                                                   "path": name})["content"],
                         "%s round %d\n" % (workspace, i))
        self.assertIn(name, self.call(at(2), "find", {"workspace_id": workspace,
                                                      "glob": "*.txt"})["paths"])
        info = self.call(at(1), "workspace_info", {"workspace_id": workspace})
        self.assertEqual(info["workspace_id"], workspace, info)
        # Pipes: started through one, written through the next, read through the third,
        # terminated through the first's neighbour; its end seen by the one that started it.
        pid = self.call(at(0), "exec_command", {
            "workspace_id": workspace, "yield_ms": 0,
            "command": ["sh", "-c", "read line; echo got-$line-%d; sleep 30" % i]})["process_id"]
        self.call(at(1), "write_stdin", {"process_id": pid, "data": "in-%s\n" % workspace})
        self.read_until(at(2), pid, "got-in-%s-%d" % (workspace, i))
        self.assertEqual(self.call(at(1), "process_status", {"process_id": pid})["state"],
                         "running")
        self.call(at(2), "terminate_process", {"process_id": pid})
        self.wait_exited(at(0), pid)
        # A terminal: resized through another gateway than the one that started it.
        tty = self.call(at(1), "exec_command", {
            "workspace_id": workspace, "yield_ms": 0, "tty": True,
            "command": ["sh", "-c", "read line; stty size; sleep 30"]})["process_id"]
        self.call(at(2), "process_resize", {"process_id": tty, "rows": 31 + i, "cols": 97})
        self.call(at(0), "write_stdin", {"process_id": tty, "data": "go\n"})
        self.read_until(at(0), tty, "%d 97" % (31 + i))
        self.call(at(0), "terminate_process", {"process_id": tty})
        self.wait_exited(at(1), tty)

    def test_the_workers_ledger_answers_through_every_gateway(self):
        """An operation_key is the worker's, not one gateway's (issue 32 item 3): a patch applied
        through one gateway is replayed through the other (nothing applied twice: the patch
        would add its line again), operation_status by key and by id agree through both, a
        different request under the key is a conflict through either, a refused patch is refused
        again under its key through the other, and a gateway started afresh (an empty ledger of
        its own) still replays the key."""
        w, ga, gb = self.two_gateways()
        grow = ("*** Begin Patch\n*** Update File: a.txt\n@@\n alpha\n+beta\n"
                "*** End Patch\n")
        args = {"workspace_id": "default", "patch": grow, "operation_key": "grow-1"}
        first = self.call(ga, "apply_patch", args)
        self.assertEqual(first["status"], "applied", first)
        op = first["operation_id"]
        again = self.call(gb, "apply_patch", args)
        self.assertEqual((again["status"], again["operation_id"], again.get("replayed")),
                         ("applied", op, True), again)
        with open(os.path.join(self.ws, "a.txt")) as f:
            self.assertEqual(f.read(), "alpha\nbeta\n", "applied twice")
        for g in (ga, gb):
            for by in ({"operation_key": "grow-1"}, {"operation_id": op}):
                st = self.call(g, "operation_status", by)
                self.assertEqual((st["operation_id"], st["status"], st["workspace_id"]),
                                 (op, "applied", "default"), (by, st))
        # The other way round: first through B, replayed through A.
        other = dict(args, operation_key="grow-2", patch=grow.replace("+beta", "+gamma"))
        second = self.call(gb, "apply_patch", other)
        self.assertEqual(second["status"], "applied", second)
        back = self.call(ga, "apply_patch", other)
        self.assertEqual((back["operation_id"], back.get("replayed")),
                         (second["operation_id"], True), back)
        # Another request under a key: a conflict through either gateway.
        for g in (ga, gb):
            out, err = g.call_raw("apply_patch", dict(args, patch=grow.replace("+beta", "+x")))
            self.assertIsNone(out, out)
            self.assertEqual(err["code"], "OPERATION_KEY_CONFLICT", err)
            self.assertIn(op, err["message"])
        # Refused (the file is missing): refused again under its key through the other.
        bad = {"workspace_id": "default", "operation_key": "bad-1", "patch": (
            "*** Begin Patch\n*** Update File: missing.txt\n@@\n-x\n+y\n*** End Patch\n")}
        out_a, err_a = ga.call_raw("apply_patch", bad)
        self.assertIsNone(out_a, out_a)
        with open(os.path.join(self.ws, "missing.txt"), "w") as f:
            f.write("x\n")
        out_b, err_b = gb.call_raw("apply_patch", bad)
        self.assertIsNone(out_b, out_b)
        self.assertEqual(err_b["code"], err_a["code"], (err_a, err_b))
        with open(os.path.join(self.ws, "missing.txt")) as f:
            self.assertEqual(f.read(), "x\n", "a refused key ran through the other gateway")
        # A patch without a key: its operation_id is known through the other gateway too.
        plain = self.call(ga, "apply_patch", {"workspace_id": "default", "patch": (
            "*** Begin Patch\n*** Add File: plain.txt\n+p\n*** End Patch\n")})
        st = self.call(gb, "operation_status", {"operation_id": plain["operation_id"]})
        self.assertEqual((st["status"], st["workspace_id"]), ("applied", "default"), st)
        # Unknown everywhere (also an id or a key no worker could hold: no TIMEOUT).
        for by in ({"operation_key": "never"}, {"operation_id": "op-%s" % uuid.uuid4()},
                   {"operation_id": "x" * 100}, {"operation_key": "k" * 300}):
            out, err = gb.call_raw("operation_status", by)
            self.assertIsNone(out, out)
            self.assertEqual(err["code"], "OPERATION_NOT_FOUND", err)
        # A gateway started afresh, its own ledger empty: the worker still knows the key.
        keys = os.path.join(self.tmp, "a.psk")
        gc = self.gateway(w, "gw-a", keys)
        self.ready(gc)
        fresh = self.call(gc, "apply_patch", args)
        self.assertEqual((fresh["operation_id"], fresh.get("replayed")), (op, True), fresh)
        with open(os.path.join(self.ws, "a.txt")) as f:
            self.assertEqual(f.read(), "alpha\ngamma\nbeta\n")  # each applied once

    def test_a_gateway_killed_mid_patch_leaves_its_outcome_to_the_worker(self):
        """A keyed patch in flight through one gateway when that gateway is SIGKILLed: the worker
        finishes it and records its outcome, and the other gateway reports it (unknown while it
        runs, then applied) and replays it without applying it again. The patch is held in its
        preflight (CODESPACE_TEST_PATCH_HOLD) until the kill."""
        hold = os.path.join(self.tmp, "hold-flag")
        open(hold, "w").close()
        os.environ["CODESPACE_TEST_PATCH_HOLD"] = hold
        try:
            w, ga, gb = self.two_gateways()
        finally:
            del os.environ["CODESPACE_TEST_PATCH_HOLD"]
        os.mkdir(os.path.join(self.ws, "hold"))
        os.chmod(os.path.join(self.ws, "hold"), 0o777)
        args = {"workspace_id": "default", "operation_key": "held-1", "patch": (
            "*** Begin Patch\n*** Add File: hold/made.txt\n+made once\n*** End Patch\n")}
        ga.start("tools/call", {"name": "apply_patch", "arguments": args})
        time.sleep(1.0)  # the patch is in its preflight on the worker, held
        ga.kill()
        running = self.call(gb, "operation_status", {"operation_key": "held-1"})
        self.assertEqual(running["status"], "unknown", running)
        self.assertNotIn("finished_at", running)
        os.unlink(hold)
        end = time.time() + 10 * SLOW
        while True:
            st = self.call(gb, "operation_status", {"operation_key": "held-1"})
            if st["status"] != "unknown":
                break
            self.assertLess(time.time(), end, st)
            time.sleep(0.05)
        self.assertEqual((st["status"], st["operation_id"]),
                         ("applied", running["operation_id"]), st)
        again = self.call(gb, "apply_patch", args)
        self.assertEqual((again["status"], again["operation_id"], again.get("replayed")),
                         ("applied", running["operation_id"], True), again)
        with open(os.path.join(self.ws, "hold", "made.txt")) as f:
            self.assertEqual(f.read(), "made once\n")

    def test_three_gateways_alternate_on_every_tool(self):
        """Three gateways, each its own identity, on one worker: every tool, each step through
        another gateway, for three rounds; the worker accepted exactly three connections and
        ended none, and no gateway lost its link."""
        keys, files = self.keys_for("abc")
        w = self.worker(["--tls-psk-keys", keys], far=True)
        gws = [self.gateway(w, "gw-" + n, files[n]) for n in "abc"]
        for g in gws:
            self.ready(g)
        for i in range(3):
            self.every_tool_round(gws, "default", self.ws, i)
        self.assertEqual(len(w.records("runner connection accepted")), 3,
                         "".join(w.lines[-20:]))
        self.assertEqual(w.records("runner connection ended"), [])
        for g in gws:
            self.assertEqual(self.lost(g), [])

    def test_two_and_three_gateways_over_two_workers_on_every_tool(self):
        """Two workers, a workspace each, and three registry gateways: every tool on both
        workspaces, first through two of the gateways, then through all three, each step through
        another gateway; each worker accepted one connection per gateway and ended none."""
        keys, files = self.keys_for("abc")
        workers = self.two_workers(keys)
        gws = [self.registry_gateway(workers, "gw-" + n, files[n]) for n in "abc"]
        for i in range(4):
            pick = gws[:2] if i < 2 else gws
            for name, (root, _) in workers.items():
                self.every_tool_round(pick, name, root, i)
        for name, (_, w) in workers.items():
            idents = sorted(r["psk_identity"] for r in w.records("runner connection accepted"))
            self.assertEqual(idents, ["gw-a", "gw-b", "gw-c"], (name, "".join(w.lines[-20:])))
            self.assertEqual(w.records("runner connection ended"), [], name)
        for g in gws:
            self.assertEqual(self.lost(g), [])

    def test_a_process_is_found_on_its_worker_through_any_gateway(self):
        """Two workers, each holding one workspace, and two gateways with the same registry: a
        process started through one gateway on the second worker is read, written to, waited on
        and terminated through the other gateway, which never started it (it asks its runners in
        turn, then remembers); an id no worker knows is PROCESS_NOT_FOUND."""
        keys, ka, kb = self.keys_file()
        workers = self.two_workers(keys)
        ga, gb = self.registry_gateway(workers, "gw-a", ka), self.registry_gateway(
            workers, "gw-b", kb)
        pid = self.call(ga, "exec_command", {
            "workspace_id": "two", "yield_ms": 0,
            "command": ["sh", "-c", "read line; echo got-$line; sleep 30"]})["process_id"]
        self.assertEqual(self.call(gb, "process_status", {"process_id": pid})["state"], "running")
        self.call(gb, "write_stdin", {"process_id": pid, "data": "hello\n"})
        text, cursor = "", 0
        end = time.time() + 10 * SLOW
        while "got-hello" not in text:
            self.assertLess(time.time(), end, text)
            rp = self.call(gb, "read_process", {"process_id": pid, "cursor": cursor,
                                                "wait_ms": 2000})
            text += rp["chunk"]
            cursor = rp["cursor"]
        self.call(gb, "terminate_process", {"process_id": pid})
        end = time.time() + 10 * SLOW
        while self.call(ga, "process_status", {"process_id": pid})["state"] != "exited":
            self.assertLess(time.time(), end)
            time.sleep(0.05)
        out, err = gb.call_raw("process_status", {"process_id": "proc-%s" % uuid.uuid4()})
        self.assertIsNone(out)
        self.assertEqual(err["code"], "PROCESS_NOT_FOUND", err)

    def test_one_gateway_killed_mid_call_leaves_the_other(self):
        w, ga, gb = self.two_gateways()
        pid = self.call(gb, "exec_command", {
            "workspace_id": "default", "yield_ms": 0,
            "command": ["sh", "-c", "sleep 1.5; echo survived"]})["process_id"]
        # Both wait on it; A is killed while its call is in flight.
        ga.start("tools/call", {"name": "read_process", "arguments": {
            "process_id": pid, "wait_ms": 10000}})
        rid_b = gb.start("tools/call", {"name": "read_process", "arguments": {
            "process_id": pid, "wait_ms": 10000}})
        time.sleep(0.5)
        ga.kill()
        resp = gb.wait(rid_b, timeout=30)
        out = resp["result"]["structuredContent"]
        self.assertIn("survived", out.get("chunk", ""), out)
        self.assertEqual(self.lost(gb), [])
        self.assertEqual(w.wait_for("runner connection ended")[0]["why"] != "", True)
        self.assertEqual(len(w.records("runner connection accepted")), 2)
        self.assertEqual(self.call(gb, "read", {"workspace_id": "default",
                                                "path": "a.txt"})["content"], "alpha\n")


if __name__ == "__main__":
    unittest.main()
