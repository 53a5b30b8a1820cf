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



sanitized = mcp_stdio.sanitized_pid


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
            if sanitized(server.pid):
                pass  # ASan's allocator (quarantine, shadow) makes RSS no measure of ours
            else:
                self.check_rss(transport, phase, name, data, idle, peak, after)
            self.check_reply(transport, phase, name, ok, reply, rid)
        return rows

    def check_rss(self, transport, phase, name, data, idle, peak, after):
        self.assertLessEqual(peak - idle, 4 * len(data) / 1024,
                             "%s %s %s: peak %d KiB over idle %d KiB" %
                             (transport, phase, name, peak, idle))
        self.assertLessEqual(after - idle, 16 * 1024,
                             "%s %s %s: RSS did not come back" % (transport, phase, name))

    def check_reply(self, transport, phase, name, ok, reply, rid):
        self.assertIsNotNone(reply, name)
        initialized = phase == "initialized"
        if transport == "http" and not initialized:
            # No session yet: anything but initialize is refused (400, no session).
            self.assertIn("error", reply)
            return
        if ok and initialized:
            self.assertEqual(reply.get("id"), rid, name)
            self.assertIn("result", reply, name)
        elif not ok:
            self.assertIn("error", reply, name)
            self.assertIn("parse budget", reply["error"]["message"], name)
            want = None if name.startswith("[[]") else rid
            self.assertEqual(reply.get("id"), want, name)

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


# ---- clean restart and worker replacement (uds) ----------------------------------------------

LEAF = re.compile(r"^codespace-runner-(\d+)-[0-9a-f]{8}$")


def runtime_bin():
    b = os.environ.get("CODESPACE_RUNTIME_BIN")
    if not b:
        raise unittest.SkipTest("CODESPACE_RUNTIME_BIN is not set")
    return b


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        if int(st[st.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(d))
    return out


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def wait_until(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def patch(path, old, new):
    return ("*** Begin Patch\n*** Update File: %s\n@@\n-%s\n+%s\n*** End Patch\n"
            % (path, old, new))


class UdsCase(unittest.TestCase):

    def setUp(self):
        binary()
        runtime_bin()
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-e2e-load-uds-"))
        self.rdir = os.path.join(self.tmp, "run")
        os.mkdir(self.rdir, 0o700)
        self.ws = os.path.join(self.tmp, "ws")
        os.makedirs(os.path.join(self.ws, "a"))
        with open(os.path.join(self.ws, "a", "x.txt"), "w") as f:
            f.write("one\n")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, runtime=None):
        env = {"CODESPACE_RUNTIME_BIN": runtime or runtime_bin(),
               "CODESPACE_OPERATIONS_DB": ":memory:"}
        srv = mcp_stdio.StdioServer(binary(), ["--workspace", self.ws, "--runner", "uds",
                                               "--runner-dir", self.rdir],
                                    os.path.join(self.tmp, "state"), env)
        self.servers.append(srv)
        return srv

    def leaves(self):
        return sorted(n for n in os.listdir(self.rdir) if LEAF.match(n))

    def worker(self, srv):
        kids = [c for c in children(srv.proc.pid) if alive(c)]
        self.assertEqual(len(kids), 1, kids)
        return kids[0]

    def log_count(self, srv, msg):
        return sum(1 for line in srv.stderr if ('"msg":"%s"' % msg) in line)


class CleanRestart(UdsCase):
    """R11: a kill -9 leaves litter that the next start removes, and nothing else."""

    def test_runner_dir_after_kill9(self):
        a = self.start()
        b = self.start()  # a live other gateway
        a_leaf = [n for n in self.leaves() if LEAF.match(n).group(1) == str(a.proc.pid)]
        b_leaf = [n for n in self.leaves() if LEAF.match(n).group(1) == str(b.proc.pid)]
        self.assertEqual((len(a_leaf), len(b_leaf)), (1, 1), self.leaves())
        wpid = self.worker(a)
        # The gateway and its worker killed outright together (a kill -9 of both, the OOM
        # killer): a worker that outlives its gateway by a moment removes the leaf itself
        # (issue 34), so it is stopped first and killed after the gateway.
        os.kill(wpid, signal.SIGSTOP)
        a.proc.kill()
        a.proc.wait()
        os.kill(wpid, signal.SIGKILL)
        self.assertTrue(wait_until(lambda: not alive(wpid), 5), "the worker outlived kill -9")
        self.assertIn(a_leaf[0], self.leaves(), "kill -9 left no litter to clean")
        # Decoys that must stay: a leaf of a dead pid owned by someone else, a symlink with a
        # leaf's name, a leaf-like name of another shape, and a dead pid's leaf holding a file.
        dead = 4000000  # above pid_max's default: never alive
        other = os.path.join(self.rdir, "codespace-runner-%d-0badf00d" % dead)
        os.mkdir(other, 0o700)
        os.chown(other, 65534, 65534)
        os.symlink(self.ws, os.path.join(self.rdir, "codespace-runner-%d-00000001" % dead))
        os.mkdir(os.path.join(self.rdir, "codespace-runner-%d-xyz" % dead))
        full = os.path.join(self.rdir, "codespace-runner-%d-00000002" % dead)
        os.mkdir(full)
        open(os.path.join(full, "keep"), "w").close()
        c = self.start()
        names = self.leaves()
        self.assertNotIn(a_leaf[0], names, "the dead gateway's leaf is still there")
        self.assertIn(b_leaf[0], names, "a live gateway's leaf was removed")
        for keep in ("codespace-runner-%d-0badf00d" % dead, "codespace-runner-%d-00000001" % dead,
                     "codespace-runner-%d-00000002" % dead):
            self.assertTrue(os.path.lexists(os.path.join(self.rdir, keep)), keep)
        self.assertTrue(os.path.isdir(os.path.join(self.rdir, "codespace-runner-%d-xyz" % dead)))
        self.assertEqual(self.log_count(c, "removed runner directories left by dead gateways"),
                         1, "".join(c.stderr))
        print("  restart: %s removed, %s kept" % (a_leaf[0], b_leaf[0]), file=sys.stderr)
        self.assertEqual(c.call_raw("read", {"workspace_id": "default", "path": "a/x.txt"})[0]
                         ["content"], "one\n")

    def test_patch_temp_files(self):
        srv = self.start()
        d = os.path.join(self.ws, "a")
        stale = os.path.join(d, ".cs-patch-0123456789abcdef.tmp")
        fresh = os.path.join(d, ".cs-patch-fedcba9876543210.tmp")
        shape = os.path.join(d, ".cs-patch-0123456789ABCDEF.tmp")
        foreign = os.path.join(d, ".cs-patch-00000000000000aa.tmp")
        link = os.path.join(d, ".cs-patch-00000000000000bb.tmp")
        for p in (stale, fresh, shape, foreign):
            with open(p, "w") as f:
                f.write("half a write\n")
        os.symlink("x.txt", link)
        os.chown(foreign, 65534, 65534)
        old = time.time() - 600
        for p in (stale, shape, foreign):
            os.utime(p, (old, old))
        os.utime(link, (old, old), follow_symlinks=False)
        out, err = srv.call_raw("apply_patch", {"workspace_id": "default",
                                                "patch": patch("a/x.txt", "one", "two")})
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "applied", out)
        self.assertFalse(os.path.exists(stale), "the stale temp file is still there")
        for p in (fresh, shape, foreign, link):
            self.assertTrue(os.path.lexists(p), p)
        with open(os.path.join(d, "x.txt")) as f:
            self.assertEqual(f.read(), "two\n")


RUNTIME_WRAPPER = """#!/bin/sh
# Start n of the worker: the real one, except the starts listed in FAIL (exit 1 at once).
n=$(( $(cat "@COUNT@" 2>/dev/null || echo 0) + 1 ))
echo $n > "@COUNT@"
for f in @FAIL@; do
    if [ "$f" = "$n" ] || { [ "$f" = "rest" ] && [ "$n" -gt 1 ]; }; then exit 1; fi
done
exec "@REAL@" "$@"
"""


class WorkerReplaced(UdsCase):
    """R12: after a loss, the next calls start a new worker; old handles are gone."""

    def wrapper(self, fail):
        path = os.path.join(self.tmp, "runtime.sh")
        with open(path, "w") as f:
            f.write(RUNTIME_WRAPPER.replace("@COUNT@", os.path.join(self.tmp, "count"))
                    .replace("@FAIL@", fail).replace("@REAL@", runtime_bin()))
        os.chmod(path, 0o755)
        return path

    def works_again(self, srv, timeout=10.0):
        """Retries read until it works; returns (seconds, codes seen before)."""
        t0 = time.monotonic()
        seen = []
        while True:
            out, err = srv.call_raw("read", {"workspace_id": "default", "path": "a/x.txt"})
            if out is not None:
                return time.monotonic() - t0, seen
            self.assertEqual(err["code"], "TIMEOUT", err)
            seen.append(err["message"])
            self.assertLess(time.monotonic() - t0, timeout, seen)
            time.sleep(0.1)

    def all_tools_work(self, srv, n):
        out, err = srv.call_raw("apply_patch", {"workspace_id": "default",
                                                "patch": patch("a/x.txt", "one" if n == 0 else
                                                               "v%d" % n, "v%d" % (n + 1))})
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "applied", out)
        out, err = srv.call_raw("exec_command", {"workspace_id": "default",
                                                 "command": ["true"]})
        self.assertIsNone(err, err)
        self.assertEqual(out["dispatch_status"], "confirmed", out)

    def test_kill_and_term(self):
        srv = self.start()
        out, err = srv.call_raw("exec_command", {"workspace_id": "default",
                                                 "command": ["sleep", "300"]})
        self.assertIsNone(err, err)
        old_pid = out["process_id"]
        n = 0
        for sig in (signal.SIGKILL, signal.SIGTERM):
            wpid = self.worker(srv)
            os.kill(wpid, sig)
            self.assertTrue(wait_until(lambda: not alive(wpid) and
                                       self.log_count(srv, "runner worker lost") > n, 5))
            secs, seen = self.works_again(srv)
            print("  worker %s: read works again after %.0f ms (%d refusals before)"
                  % (sig.name, secs * 1000, len(seen)), file=sys.stderr)
            self.all_tools_work(srv, n)
            n += 1
            self.assertNotEqual(self.worker(srv), wpid)
            _, err = srv.call_raw("process_status", {"process_id": old_pid})
            self.assertEqual(err["code"], "PROCESS_NOT_FOUND", err)
        self.assertEqual(self.log_count(srv, "runner worker replaced"), 2)

    def test_worker_dies_at_its_start(self):
        srv = self.start(self.wrapper("2"))
        wpid = self.worker(srv)
        os.kill(wpid, signal.SIGKILL)
        self.assertTrue(wait_until(lambda: self.log_count(srv, "runner worker lost") == 1, 5))
        secs, seen = self.works_again(srv)
        print("  worker dying at start 2: read works again after %.0f ms (%d refusals, the "
              "first: %s)" % (secs * 1000, len(seen), seen[0][-120:] if seen else None),
              file=sys.stderr)
        self.assertTrue(seen and "did not start" in seen[0], seen)
        self.all_tools_work(srv, 0)
        self.assertEqual(self.log_count(srv, "runner worker did not start"), 1)

    def test_crash_loop_is_held_to_its_backoff(self):
        srv = self.start(self.wrapper("rest"))
        os.kill(self.worker(srv), signal.SIGKILL)
        self.assertTrue(wait_until(lambda: self.log_count(srv, "runner worker lost") == 1, 5))
        t0 = time.monotonic()
        calls = 0
        while time.monotonic() - t0 < 8.0:
            _, err = srv.call_raw("read", {"workspace_id": "default", "path": "a/x.txt"})
            self.assertEqual(err["code"], "TIMEOUT", err)
            calls += 1
            time.sleep(0.05)
        starts = self.log_count(srv, "runner worker starting")
        print("  crash loop: %d calls in 8 s, %d worker starts logged (at most 4 more in the "
              "first minute: 5 a minute, back-off 0, 0.5, 1, 2 s)" % (calls, starts),
              file=sys.stderr)
        self.assertGreaterEqual(calls, 50)
        # At once, then after 0.5 s, 1 s, 2 s; the 5-a-minute cap stops the one due at 3.5 s+4 s.
        self.assertEqual(starts, 4, "".join(srv.stderr[-30:]))
        self.assertEqual(self.log_count(srv, "runner worker did not start"), 4)


if __name__ == "__main__":
    unittest.main()
