#!/usr/bin/python3
"""The remote worker before authentication (issue 29 item 9; docs/contract/runtime.md, "The
remote worker before authentication"; docs/scale-out.md, "Before authentication";
docs/security-model.md R19).

The real binaries on the loopback: `codespace-runtime --listen 127.0.0.1:0` and
`codespace-mcp --runner tcp://127.0.0.1:PORT` in pre-shared key mode (keys made here by
`openssl rand -hex 32`). 127.0.0.0/8 gives the flood many source addresses: a flood socket binds
127.0.0.x before it connects.

- A gateway's link is cut (`ss -K`, the kernel aborts its socket) while 1,000 connections arrive
  that are silent, send garbage, send the 3 bytes of a TLS record header and stop, or trickle a
  ClientHello a byte at a time: once from the gateway's own address (127.0.0.1), once from 250
  others. The gateway is back within its first back-off (0.1 s) plus a handshake: its first
  attempt gets in (no failed attempt in its log) and a call answers within 1.5 s of the cut.
  Every flood connection is closed by the worker: garbage at once, the silent ones at the 2 s
  bound (or sooner, making room), the rest by the 5 s bound.
- Several gateways on one worker, each with its own identity and key (--tls-psk-keys, beside
  --tls-psk and --tls-psk-identity): all served at once, each on its own connection (issue 32).
- An identity removed from the keys file, then SIGHUP: that gateway's link ends at once and it
  is refused from then on (the worker logs why), while the others' links stay up; a keys
  file that cannot be used is not taken (the previous keys stay). A keys file others can read,
  a malformed line and a repeated identity are refused at start.
- Certificate mode: two gateways with their own certificates, one --tls-peer-sha256 each, are
  both served; a third certificate is refused.

Needs root (a root worker sandboxes its commands) and `openssl` and `ss`. Outside CI a missing
piece skips; in CI (CI=true) it fails. Run (from tests/e2e):
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp /usr/bin/python3 -m unittest -v test_preauth
"""
import json
import os
import random
import re
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import mcp_stdio
import test_process as tp
import test_remote as tr

SLOW = tp.SLOW


def close_all(servers):
    """Closes every server; one that died (a test killed it) is not an error here."""
    for s in servers:
        try:
            s.close()
        except AssertionError:
            pass


class Worker:
    """codespace-runtime --listen HOST:0 (the loopback, or an address in network namespace ns);
    its log lines are kept, its port read from them."""

    def __init__(self, args, ns=None, host="127.0.0.1"):
        self.host = host
        self.proc = subprocess.Popen(
            (["ip", "netns", "exec", ns] if ns else [])
            + [tr.runtime_binary(), "--listen", "%s:0" % host] + args + tr.sandbox_args(),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines = []
        self.port = None
        self.listening = threading.Event()
        threading.Thread(target=self._err, daemon=True).start()
        if not self.listening.wait(10 * SLOW):
            self.kill()
            raise AssertionError("the worker did not listen: %s" % self.lines)

    def _err(self):
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if '"runner listening"' in line:
                self.port = json.loads(line)["port"]
                self.listening.set()

    def records(self, msg):
        return mcp_stdio.log_records(self.lines, msg)

    def wait_for(self, msg, n=1, timeout=5.0):
        end = time.time() + timeout * SLOW
        while len(self.records(msg)) < n and time.time() < end:
            time.sleep(0.05)
        recs = self.records(msg)
        if len(recs) < n:
            raise AssertionError("the worker logged %d %r lines, not %d:\n%s"
                                 % (len(recs), msg, n, "".join(self.lines[-40:])))
        return recs

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stderr.close()


class Flood:
    """n connections to port from sources, round robin over four kinds, opened as fast as they
    connect; each is watched until the worker closes it (EOF or reset). Kinds: silent; garbage
    (64 bytes that are no TLS record); three (the 3 bytes of a TLS record header, then nothing);
    slow (a record header announcing a 512-byte ClientHello, then one byte every 0.2 s)."""

    KINDS = ("silent", "garbage", "three", "slow")

    def __init__(self, port, sources, n=1000, burst=300, pace=0.0035):
        """The first burst connections at once, then one every pace seconds."""
        self.port, self.sources, self.n = port, sources, n
        self.burst, self.pace = burst, pace
        self.opened = 0
        self.failed_connects = 0
        self.lifetimes = {k: [] for k in self.KINDS}  # seconds from connect to the worker's close
        self.unclosed = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()

    def join(self, timeout):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the flood did not end"

    def _run(self):
        sel = selectors.DefaultSelector()
        live = {}  # socket -> (kind, t0)
        slow = set()
        next_trickle = 0.0

        def watch(timeout):
            nonlocal next_trickle
            for key, _ in sel.select(timeout):
                s = key.fileobj
                try:
                    data = s.recv(4096)
                except (ConnectionError, OSError):
                    data = b""
                if data:
                    continue  # an alert, then the close
                kind, t0 = live.pop(s)
                self.lifetimes[kind].append(time.monotonic() - t0)
                sel.unregister(s)
                slow.discard(s)
                s.close()
            now = time.monotonic()
            if now >= next_trickle:
                next_trickle = now + 0.2
                for s in list(slow):
                    try:
                        s.send(b"\x00")
                    except OSError:
                        pass

        start = time.monotonic()
        for i in range(self.n):
            if i >= self.burst:
                while time.monotonic() < start + (i - self.burst) * self.pace:
                    watch(0.001)
            elif i == self.burst - 1:
                start = time.monotonic()
            kind = self.KINDS[i % len(self.KINDS)]
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((self.sources[i % len(self.sources)], 0))
            s.settimeout(3)
            try:
                s.connect(("127.0.0.1", self.port))
            except OSError:
                self.failed_connects += 1
                s.close()
                continue
            t0 = time.monotonic()
            s.setblocking(False)
            try:
                if kind == "garbage":
                    s.send(b"\x00" + os.urandom(63))
                elif kind == "three":
                    s.send(b"\x16\x03\x01")
                elif kind == "slow":
                    s.send(b"\x16\x03\x01\x02\x00\x01")
                    slow.add(s)
            except OSError:
                pass
            live[s] = (kind, t0)
            sel.register(s, selectors.EVENT_READ)
            self.opened += 1
            if i % 16 == 0:
                watch(0)
        end = time.monotonic() + 10 * SLOW
        while live and time.monotonic() < end:
            watch(0.05)
        self.unclosed = len(live)
        for s in live:
            s.close()
        sel.close()


def run(*argv):
    return subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class PreauthTest(unittest.TestCase):
    def setUp(self):
        tr.need(os.geteuid() == 0, "a root worker (it sandboxes its commands as another uid)")
        tr.need(shutil.which("openssl") is not None, "no openssl")
        tr.need(shutil.which("ss") is not None, "no ss (iproute2)")
        tr.need(os.access(tr.runtime_binary(), os.X_OK), "no codespace-runtime")
        self.tmp = tempfile.mkdtemp(prefix="cs-preauth-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        os.chmod(self.tmp, 0o755)  # the sandboxed commands' uid reads the workspace
        self.ws = os.path.join(self.tmp, "ws")
        os.mkdir(self.ws)
        with open(os.path.join(self.ws, "a.txt"), "w") as f:
            f.write("alpha\n")
        self.servers = []

    def tearDown(self):
        close_all(self.servers)

    def key(self, name):
        """A gateway's key file (made as docs/scale-out.md says); returns (path, hex)."""
        hexkey = run("openssl", "rand", "-hex", "32").stdout.strip()
        return self.write(name + ".psk", hexkey + "\n"), hexkey

    def write(self, name, text, mode=0o600):
        path = os.path.join(self.tmp, name)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def worker(self, args):
        w = Worker(args + ["--root", self.ws])
        self.addCleanup(w.kill)
        return w

    def gateway(self, w, auth):
        self.made = getattr(self, "made", 0) + 1
        state = os.path.join(self.tmp, "state-%d" % self.made)
        os.mkdir(state)
        s = mcp_stdio.StdioServer(tp.binary(), [
            "--workspace", self.ws, "--operations-db", os.path.join(state, "ops.db"),
            "--runner", "tcp://127.0.0.1:%d" % w.port] + auth, state)
        self.servers.append(s)
        return s

    def read_ok(self, srv, timeout=10.0):
        """Reads a.txt until it answers (the gateway connects in the background)."""
        end = time.time() + timeout * SLOW
        while True:
            out, err = srv.call_raw("read", {"workspace_id": "default", "path": "a.txt"})
            if err is None:
                self.assertEqual(out["content"], "alpha\n")
                return
            if time.time() > end:
                self.fail("the gateway was never served: %s\n%s" % (err, "".join(srv.stderr)))
            time.sleep(0.05)

    def close(self, srv):
        self.servers.remove(srv)
        srv.close()

    # ---- a gateway reconnecting under a flood ----

    def cut(self, srv, port):
        """Aborts the gateway's own socket to the worker (the kernel's SOCK_DESTROY)."""
        out = run("ss", "-Htnp", "state", "established", "( dport = :%d )" % port).stdout
        lports = [re.search(r"127\.0\.0\.1:(\d+)\s", line).group(1)
                  for line in out.splitlines() if "pid=%d," % srv.proc.pid in line]
        self.assertEqual(len(lports), 1, out)
        r = run("ss", "-K", "-tn", "state", "established",
                "( sport = :%s and dport = :%d )" % (lports[0], port))
        tr.need(r.returncode == 0, "ss -K failed (no SOCK_DESTROY): %s" % r.stderr)

    def reconnect_under_flood(self, sources):
        key, hexkey = self.key("gw")
        w = self.worker(["--tls-psk", key, "--tls-psk-identity", "gw"])
        srv = self.gateway(w, ["--tls-psk", key, "--tls-psk-identity", "gw"])
        self.read_ok(srv)
        flood = Flood(w.port, sources)
        flood.start()
        while flood.opened < 300 and flood.thread.is_alive():
            time.sleep(0.01)
        self.assertGreaterEqual(flood.opened, 300, "the flood did not get going")
        before = len(srv.stderr)
        t0 = time.monotonic()
        self.cut(srv, w.port)
        self.read_ok(srv, timeout=5.0)
        took = time.monotonic() - t0
        during = flood.opened
        flood.join(30 * SLOW)
        # The flood was on while the gateway came back, and every one of it was closed.
        self.assertLess(during, 1000, "the flood was over before the gateway came back")
        self.assertEqual(flood.opened + flood.failed_connects, 1000)
        self.assertGreaterEqual(flood.opened, 990, flood.failed_connects)
        self.assertEqual(flood.unclosed, 0, flood.lifetimes)
        # Its first attempt got in: the loss, then connected, and no failed attempt between.
        after = [json.loads(line)["msg"] for line in srv.stderr[before:] if line.startswith("{")]
        failed = [m for m in after if m in ("runner connection failed",
                                            "runner authentication failed")]
        self.assertEqual(failed, [], "".join(srv.stderr[before:]))
        self.assertIn("runner connected", after)
        # Within the first back-off (0.1 s) and a handshake, with room for a loaded host.
        self.assertLess(took, 1.5 * SLOW, "%.2f s to get back in" % took)
        # Garbage closed at once; silence by 2 s; nothing held past the 5 s bound.
        lt = flood.lifetimes
        self.assertTrue(all(lt[k] for k in Flood.KINDS), {k: len(v) for k, v in lt.items()})
        self.assertLess(max(lt["garbage"]), 1.0 * SLOW, sorted(lt["garbage"])[-5:])
        self.assertLess(max(lt["silent"]), 2.0 + 1.0 * SLOW, sorted(lt["silent"])[-5:])
        for k in ("three", "slow"):
            self.assertLess(max(lt[k]), 5.0 + 1.0 * SLOW, (k, sorted(lt[k])[-5:]))
        # The worker logged refusals, rate-limited, and no key.
        refused = w.records("runner connection refused")
        self.assertTrue(refused)
        self.assertLessEqual(len(refused), 10 * (took + 12) + 20)
        self.assertNotIn(hexkey, "".join(w.lines))
        self.assertEqual(len(w.records("runner connection accepted")), 2)
        return took

    def test_reconnect_under_flood_from_many_addresses(self):
        took = self.reconnect_under_flood(["127.0.%d.%d" % (1 + i // 250, 2 + i % 250)
                                           for i in range(250)])
        print("back in %.3f s" % took)

    def test_reconnect_under_flood_from_the_gateways_address(self):
        took = self.reconnect_under_flood(["127.0.0.1"])
        print("back in %.3f s" % took)

    # ---- several gateways, one worker ----

    def test_gateways_with_their_own_keys_and_a_revocation(self):
        ka, ha = self.key("a")
        kb, hb = self.key("b")
        kc, _ = self.key("c")
        keys = self.write("keys", "# one line per gateway\ngw-a:%s\n\ngw-b@x:y:%s\n" % (ha, hb))
        w = self.worker(["--tls-psk", kc, "--tls-psk-identity", "gw-c", "--tls-psk-keys", keys])
        # All three at once, each on its own connection (issue 32).
        live = {}
        for n, (ident, key) in enumerate((("gw-a", ka), ("gw-c", kc), ("gw-b@x:y", kb))):
            srv = self.gateway(w, ["--tls-psk", key, "--tls-psk-identity", ident])
            self.read_ok(srv)
            acc = w.wait_for("runner connection accepted", n + 1)
            self.assertEqual(acc[n]["psk_identity"], ident)
            live[ident] = srv
        for srv in live.values():
            self.read_ok(srv)
        self.assertEqual(w.records("runner connection ended"), [])
        gb = live.pop("gw-b@x:y")
        # gw-b removed: its link ends now, and it is refused from then on; the others go on.
        self.write("keys", "gw-a:%s\n" % ha)
        w.proc.send_signal(signal.SIGHUP)
        self.assertEqual(w.wait_for("runner keys reloaded")[0]["psk_identities"], 2)
        ended = w.wait_for("runner connection ended", 1)
        self.assertEqual(len(ended), 1, ended)
        self.assertIn("identity was removed", ended[0]["why"])
        # The ended line names whose link it was, as the accepted line did.
        self.assertEqual(ended[0]["psk_identity"], "gw-b@x:y")
        self.assertEqual(ended[0]["peer"], acc[2]["peer"])
        out, err = gb.call_raw("read", {"workspace_id": "default", "path": "a.txt"})
        self.assertIsNone(out)
        self.assertIn("before dispatch", err["message"])
        refusals = w.wait_for("runner connection refused")
        self.assertIn("another pre-shared key identity", refusals[0]["error"])
        self.close(gb)
        for srv in live.values():
            self.read_ok(srv, timeout=1.0)
            self.assertNotIn('"runner connection lost"', "".join(srv.stderr))
            self.close(srv)
        # A keys file that cannot be used is not taken: the previous keys stay.
        self.write("keys", "gw-a:%s\n" % ha[:40])
        w.proc.send_signal(signal.SIGHUP)
        bad = w.wait_for("runner keys not reloaded")[0]
        self.assertIn("line 1", bad["error"])
        self.assertNotIn(ha[:40], bad["error"])
        # The others keep working.
        for ident, key in (("gw-a", ka), ("gw-c", kc)):
            srv = self.gateway(w, ["--tls-psk", key, "--tls-psk-identity", ident])
            self.read_ok(srv)
            self.close(srv)
        self.assertEqual(w.records("runner connection accepted")[-1]["psk_identity"], "gw-c")
        logs = "".join(w.lines)
        for k in (ha, hb):
            self.assertNotIn(k, logs)

    def test_bad_keys_files_refused_at_start(self):
        _, ha = self.key("a")
        cases = (("loose", "gw-a:%s\n" % ha, 0o644, "by others"),
                 ("nocolon", "gw-a %s\n" % ha, 0o600, "line 1: not IDENTITY:HEXKEY"),
                 ("twice", "gw-a:%s\n# c\ngw-a:%s\n" % (ha, ha), 0o600, "line 3"),
                 ("short", "x:%s\ngw-a:%s\n" % (ha, ha[:20]), 0o600, "less than 32"),
                 ("empty", "# nothing\n", 0o600, "no IDENTITY:HEXKEY"),
                 ("badid", "gw a:%s\n" % ha, 0o600, "identity"))
        for name, text, mode, says in cases:
            path = self.write(name, text, mode)
            p = subprocess.run([tr.runtime_binary(), "--listen", "127.0.0.1:0", "--root", self.ws,
                                "--tls-psk-keys", path] + tr.sandbox_args(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=20)
            self.assertEqual(p.returncode, 2, (name, p.stderr))
            self.assertIn(says, p.stderr, name)
            self.assertNotIn(ha, p.stderr)
            self.assertNotIn(ha[:20], p.stderr)
        # A keys file and a certificate are two modes; an identity without its key file too.
        for extra in (["--tls-cert", "c", "--tls-key", "k", "--tls-peer-sha256", "ab" * 32],
                      ["--tls-psk-identity", "gw"]):
            p = subprocess.run([tr.runtime_binary(), "--listen", "127.0.0.1:0", "--root", self.ws,
                                "--tls-psk-keys", self.write("ok", "gw-a:%s\n" % ha)] + extra
                               + tr.sandbox_args(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=20)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn("--tls-psk-keys", p.stderr)

    def test_certificate_gateways_with_their_own_pins(self):
        certs = [tr.make_cert(self.tmp, n) for n in ("wk", "ga", "gb", "gx")]
        (wc, wk, wpin), (ac, ak, apin), (bc, bk, bpin), (xc, xk, _) = certs
        w = self.worker(["--tls-cert", wc, "--tls-key", wk, "--tls-peer-sha256", apin,
                         "--tls-peer-sha256", bpin])
        for cert, key in ((ac, ak), (bc, bk)):
            srv = self.gateway(w, ["--tls-cert", cert, "--tls-key", key,
                                   "--tls-peer-sha256", wpin])
            self.read_ok(srv)
            self.close(srv)
        self.assertEqual(len(w.records("runner connection accepted")), 2)
        srv = self.gateway(w, ["--tls-cert", xc, "--tls-key", xk, "--tls-peer-sha256", wpin])
        out, err = srv.call_raw("read", {"workspace_id": "default", "path": "a.txt"})
        self.assertIsNone(out)
        self.assertIn("before dispatch", err["message"])
        self.assertIn("does not match", w.wait_for("runner connection refused")[0]["error"])
        self.assertEqual(len(w.records("runner connection accepted")), 2)


if __name__ == "__main__":
    unittest.main()
