#!/usr/bin/python3
"""End-to-end tests of the uds runner (docs/contract/runtime.md sections 4 and 5, issue 7).

Two halves:
- the worker alone: `codespace-runtime --socket <dir>/runner.sock` driven by a raw client that
  frames JSON with a u32 big-endian length, as the gateway does. Every frame the worker sends is
  validated against schema/runner/wire.json (jsonschema, the oracle). The handshake, a client
  speaking protocol 4, a request before hello, undecodable and schema-violating frames, zero and
  oversize lengths, replay of a cached and of an unknown id, concurrent service with the
  process_exited event, the one connection it accepts, its processes dying with the connection,
  and the leftover probe (a live runner.sock is never unlinked, a stale one is);
- the gateway with `--runner uds`: workspace_info, the private 0700 leaf directory under parents
  of mode 0755 and 0711 (their modes untouched) and its removal at exit, refused runner dirs, a
  fake worker answering hello with protocol 4, SIGKILL of the worker in the middle of an
  apply_patch (ledger `unknown` with reason `unknown`, every file wholly old or new) and of a
  running exec (WORKSPACE_BUSY until the loss is noticed, then every process gone, later calls
  TIMEOUT), and SIGKILL of the gateway (the worker sees its --gateway-fd pipe hang up, kills its
  commands and removes its leaf; test_lifetime.py covers every moment of its start).

Processes that could survive are `sleep` with a unique duration (test_process.uniq) found by a
/proc scan. Binaries: CODESPACE_MCP_BIN, and CODESPACE_RUNTIME_BIN for the worker (default:
codespace-runtime beside codespace-mcp, else the build tree's src/runtime/). Standard library +
jsonschema. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_uds          (from tests/e2e)
"""
import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import tempfile
import time
import unittest
import uuid

from jsonschema import Draft202012Validator, RefResolver

import mcp_stdio
import test_process as tp

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROTOCOL = 7
MAX_FRAME = 16 * 1024 * 1024
SLOW = tp.SLOW
IO_TIMEOUT = 10.0 * SLOW
LEAF = re.compile(r"^codespace-runner-(\d+)-(.+)$")


def mcp_binary():
    return tp.binary()


def runtime_binary():
    path = os.environ.get("CODESPACE_RUNTIME_BIN")
    if not path:
        # Beside codespace-mcp (docs/contract/runtime.md §1), else in the build tree's src/runtime/.
        mcp = os.path.dirname(mcp_binary())
        path = os.path.join(mcp, "codespace-runtime")
        if not os.access(path, os.X_OK):
            path = os.path.join(os.path.dirname(mcp), "runtime", "codespace-runtime")
    if not os.access(path, os.X_OK):
        raise unittest.SkipTest("no codespace-runtime at %s" % path)
    return path


# ---- the wire schema (the oracle for every frame the worker sends) -------------------------


def _load_store():
    store = {}
    for d, _, files in os.walk(os.path.join(REPO, "schema")):
        for n in files:
            if n.endswith(".json"):
                with open(os.path.join(d, n), encoding="utf-8") as f:
                    doc = json.load(f)
                if isinstance(doc, dict) and "$id" in doc:
                    store[doc["$id"]] = doc
    return store


_STORE = _load_store()
_WIRE = next(doc for i, doc in _STORE.items() if i.endswith("/schema/runner/wire.json"))
WIRE = Draft202012Validator(_WIRE, resolver=RefResolver(base_uri=_WIRE["$id"], referrer=_WIRE,
                                                        store=_STORE))


def frame(obj):
    """One frame: the u32 big-endian length, then the compact JSON (or the bytes given)."""
    body = obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack(">I", len(body)) + body


def request(rid, op, data, protocol=PROTOCOL):
    return {"protocol": protocol, "kind": "request", "request_id": rid,
            "op": {"op": op, "data": data}}


def hello(rid="rrpc-1", protocol=PROTOCOL, data_protocol=PROTOCOL):
    return request(rid, "hello", {"protocol": data_protocol, "peer": "test_uds"}, protocol)


def workspace(root, profile="workspace-write"):
    return {"id": "default", "root": root, "profile": profile, "environment_kind": "host",
            "network": "restricted"}


def exec_data(root, argv, yield_ms=None):
    d = {"workspace": workspace(root), "argv": argv, "process_id": "proc-%s" % uuid.uuid4(),
         "cwd": "workspace_root", "env": {"use_runner_defaults": True, "overrides": {}},
         "timeout_ms": 30000, "output_bytes_cap": 262144, "tty": False,
         "policy": {"workspace_profile": "workspace-write", "network": "restricted"}}
    if yield_ms is not None:
        d["yield_ms"] = yield_ms
    return d


class WireClient:
    """A raw connection to a worker's socket."""

    def __init__(self, path, timeout=IO_TIMEOUT):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.events = []

    def send(self, obj):
        self.sock.sendall(frame(obj))

    def send_raw(self, data):
        self.sock.sendall(data)

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_any(self):
        """The next frame (validated against wire.json), or None at EOF (clean or not)."""
        try:
            hdr = self._read(4)
            if hdr is None:
                return None
            (n,) = struct.unpack(">I", hdr)
            assert 0 < n <= MAX_FRAME, "the worker sent a frame of length %d" % n
            body = self._read(n)
        except ConnectionResetError:
            return None
        assert body is not None, "EOF inside a frame"
        msg = json.loads(body)
        errors = sorted(WIRE.iter_errors(msg), key=lambda e: list(e.path))
        assert not errors, "frame outside wire.json: %r\n%s" % (msg, errors[0])
        assert msg["protocol"] == PROTOCOL, msg
        return msg

    def recv(self):
        """The next response (events are kept in self.events), or None at EOF."""
        while True:
            msg = self.recv_any()
            if msg is None or msg["kind"] != "event":
                return msg
            self.events.append(msg)

    def call(self, rid, op, data):
        self.send(request(rid, op, data))
        resp = self.recv()
        assert resp is not None, "EOF instead of the response to %s" % rid
        assert resp["request_id"] == rid, (rid, resp)
        return resp

    def at_eof(self):
        """True when the worker closed the connection (after whatever it still had to send)."""
        while True:
            msg = self.recv()
            if msg is None:
                return True
            raise AssertionError("a frame after the error: %r" % msg)

    def close(self):
        self.sock.close()


class Worker:
    """codespace-runtime --socket <path> --gateway-fd N, started by the test (not by a gateway).
    The test plays the gateway's part of the lifetime rule: it holds the write end of the pipe
    whose read end is the worker's --gateway-fd (close_gate() is the gateway going away)."""

    def __init__(self, path, extra_args=(), wait=True, env_extra=None, pass_fds=()):
        """wait: until a socket listens on path (seen in /proc/net/unix; never by connecting:
        the worker accepts one connection only)."""
        self.path = path
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        for k, v in os.environ.items():  # the sanitizers' settings, if any
            if k.endswith("SAN_OPTIONS"):
                env[k] = v
        env.update(env_extra or {})
        r, self.gate = os.pipe()  # both close-on-exec; pass_fds keeps r (only) open in the child
        try:
            self.proc = subprocess.Popen(
                [runtime_binary(), "--socket", path, "--gateway-fd", str(r)] + list(extra_args),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                env=env, pass_fds=(r,) + tuple(pass_fds))
        finally:
            os.close(r)
        if wait:
            ok = tp.wait_until(lambda: self.listening() or self.proc.poll() is not None,
                               5.0 * SLOW)
            if not ok or self.proc.poll() is not None:
                if self.proc.poll() is None:
                    self.proc.kill()
                self.proc.wait()
                err = self.stderr()
                self.kill()
                raise AssertionError("the worker did not bind %s: %s" % (path, err))

    def listening(self):
        return listening(self.path)

    def connect(self):
        c = WireClient(self.path)
        return c

    def handshake(self):
        c = self.connect()
        resp = c.call("rrpc-1", "hello", {"protocol": PROTOCOL, "peer": "test_uds"})
        assert resp["ok"] is True, resp
        return c

    def wait(self, timeout=10.0):
        try:
            return self.proc.wait(timeout * SLOW)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("the worker did not exit after its connection closed")

    def stderr(self):
        if self.proc.poll() is None:
            return "(running)"
        return self.proc.stderr.read().decode("utf-8", "replace")

    def close_gate(self):
        if self.gate is not None:
            os.close(self.gate)
            self.gate = None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stderr.close()
        self.close_gate()


# ---- /proc helpers ---------------------------------------------------------------------------


def alive(pid):
    """True while pid exists and is not a zombie."""
    st = mcp_stdio.proc_stat(pid)
    return st is not None and st[0] != "Z"


def worker_of(gateway_pid):
    """Pids of the gateway's children running codespace-runtime."""
    out = []
    for c in tp.children(gateway_pid):
        try:
            name = os.path.basename(os.readlink("/proc/%d/exe" % c))
        except OSError:
            # A non-dumpable process's exe link needs ptrace rights (not root): use its comm,
            # which the kernel cuts to 15 bytes.
            try:
                with open("/proc/%d/comm" % c) as f:
                    name = f.read().strip()
            except OSError:
                continue
        if name.startswith("codespace-runti"):
            out.append(c)
    return out


def listening(path):
    """True when a socket bound to path is listening (flag __SO_ACCEPTCON in /proc/net/unix)."""
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) >= 8 and fields[7] == path and int(fields[3], 16) & 0x10000:
                return True
    return False


def leaves(parent):
    return [n for n in os.listdir(parent) if LEAF.match(n)]


# ---- the worker alone ------------------------------------------------------------------------


class WorkerCase(unittest.TestCase):

    def setUp(self):
        runtime_binary()
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-e2e-uds-"))
        os.chmod(self.tmp, 0o700)
        self.root = os.path.join(self.tmp, "ws")
        os.mkdir(self.root)
        with open(os.path.join(self.root, "hello.txt"), "w") as f:
            f.write("hello\n")
        self.sock = os.path.join(self.tmp, "runner.sock")
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            w.kill()
        tp.kill_leftovers()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def worker(self, path=None, **kw):
        w = Worker(path or self.sock, **kw)
        self.workers.append(w)
        return w

    def assert_error(self, resp, rid, code, *words):
        self.assertEqual(resp["kind"], "response", resp)
        self.assertEqual(resp["request_id"], rid, resp)
        self.assertIs(resp["ok"], False, resp)
        self.assertNotIn("result", resp)
        self.assertEqual(resp["error"]["code"], code, resp)
        for w in words:
            self.assertIn(w, resp["error"]["message"], resp)

    def assert_closed(self, w, c):
        self.assertTrue(c.at_eof())
        c.close()
        w.wait()

    # ---- handshake ----

    def test_handshake_and_a_read(self):
        w = self.worker()
        c = w.connect()
        resp = c.call("rrpc-1", "hello", {"protocol": PROTOCOL, "peer": "test_uds"})
        self.assertEqual(resp["kind"], "response")
        self.assertIs(resp["ok"], True, resp)
        self.assertEqual(resp["result"]["type"], "hello")
        self.assertEqual(resp["result"]["data"]["protocol"], PROTOCOL)
        self.assertRegex(resp["result"]["data"].get("peer", ""), r"^codespace-runtime \S+$")
        self.assertNotIn("error", resp)

        resp = c.call("rrpc-2", "read", {"workspace": workspace(self.root), "path": "hello.txt"})
        self.assertIs(resp["ok"], True, resp)
        self.assertEqual(resp["result"]["type"], "read")
        self.assertEqual(resp["result"]["data"]["content"], "hello\n")
        resp = c.call("rrpc-3", "read", {"workspace": workspace(self.root), "path": "nope.txt"})
        self.assert_error(resp, "rrpc-3", "FILE_NOT_FOUND")
        resp = c.call("rrpc-4", "version", {"workspace": workspace(self.root), "path": "nope"})
        self.assertEqual(resp["result"], {"type": "version", "data": {"version": "absent"}})

        # Exactly one connection: a second one is refused, or never answered.
        try:
            other = WireClient(self.sock, timeout=0.5 * SLOW)
        except OSError:
            pass
        else:
            try:
                other.send(hello())
                self.assertIsNone(other.recv(), "a second connection was served")
            except (socket.timeout, BrokenPipeError, ConnectionResetError):
                pass
            other.close()
        resp = c.call("rrpc-5", "version", {"workspace": workspace(self.root), "path": "nope"})
        self.assertIs(resp["ok"], True, resp)
        c.close()
        self.assertEqual(w.wait(), 0, "the worker exits 0 when its connection closes")

    def test_client_speaking_protocol_4(self):
        cases = [("envelope", hello(protocol=4)), ("hello data", hello(data_protocol=4)),
                 ("both", hello(protocol=4, data_protocol=4))]
        for name, msg in cases:
            with self.subTest(name):
                path = os.path.join(self.tmp, "v4-%s.sock" % name.replace(" ", "-"))
                w = self.worker(path)
                c = w.connect()
                c.send(msg)
                resp = c.recv()
                self.assertIsNotNone(resp, "EOF without an error response")
                self.assert_error(resp, "rrpc-1", "INVALID_ARGUMENTS", "4", str(PROTOCOL))
                self.assert_closed(w, c)

    def test_request_before_hello(self):
        w = self.worker()
        c = w.connect()
        c.send(request("rrpc-1", "read", {"workspace": workspace(self.root),
                                          "path": "hello.txt"}))
        resp = c.recv()
        self.assertIsNotNone(resp, "EOF without an error response")
        self.assertIs(resp["ok"], False, resp)
        self.assertEqual(resp["request_id"], "rrpc-1", resp)
        self.assertNotIn("result", resp)
        self.assert_closed(w, c)

    # ---- bad frames ----

    def bad_after_hello(self, name, raw, rid, *words):
        path = os.path.join(self.tmp, "%s.sock" % name)
        w = self.worker(path)
        c = w.handshake()
        c.send_raw(raw)
        resp = c.recv()
        self.assertIsNotNone(resp, "%s: EOF without an error response" % name)
        self.assert_error(resp, rid, "INVALID_ARGUMENTS", *words)
        self.assert_closed(w, c)

    def test_undecodable_frames(self):
        cases = [
            ("truncated-json", frame(b'{"protocol":5,"kind":"request"'), "rrpc-0"),
            ("not-json", frame(b"\xff\xfe garbage"), "rrpc-0"),
            ("json-array", frame(b"[1,2,3]"), "rrpc-0"),
            ("trailing-garbage", frame(json.dumps(hello("rrpc-2")).encode() + b"}"), "rrpc-0"),
            # decodes, fails the schema, and its request_id is no usable id either
            ("request-id-number", frame(dict(hello("rrpc-2"), request_id=7)), "rrpc-0"),
            ("request-id-empty", frame(dict(hello("rrpc-2"), request_id="")), "rrpc-0"),
        ]
        for name, raw, rid in cases:
            with self.subTest(name):
                self.bad_after_hello(name, raw, rid)

    def test_schema_violations_echo_the_request_id(self):
        ws = workspace(self.root)
        cases = [
            # (name, frame, message must name this JSON pointer)
            ("read-without-path", request("rrpc-2", "read", {"workspace": ws}), "/op/data"),
            ("unknown-op", request("rrpc-2", "format_disk", {}), "/op"),
            ("exec-argv-not-strings",
             request("rrpc-2", "exec", dict(exec_data(self.root, ["true"]), argv=[1])),
             "/op/data/argv/0"),
            ("kind-response", {"protocol": PROTOCOL, "kind": "response", "request_id": "rrpc-2",
                               "ok": True}, ""),
        ]
        for name, msg, pointer in cases:
            with self.subTest(name):
                self.bad_after_hello(name, frame(msg), "rrpc-2", pointer)

    def test_zero_and_oversize_lengths(self):
        cases = [
            ("zero", struct.pack(">I", 0)),
            ("oversize", struct.pack(">I", MAX_FRAME + 1) + b'{"protocol":5'),
            ("max-u32", b"\xff\xff\xff\xff"),
        ]
        for name, raw in cases:
            with self.subTest(name):
                self.bad_after_hello(name, raw, "rrpc-0")

    def test_oversize_before_hello(self):
        w = self.worker()
        c = w.connect()
        c.send_raw(struct.pack(">I", MAX_FRAME + 1))
        resp = c.recv()
        self.assertIsNotNone(resp, "EOF without an error response")
        self.assert_error(resp, "rrpc-0", "INVALID_ARGUMENTS")
        self.assert_closed(w, c)

    # ---- replay ----

    def test_replay(self):
        w = self.worker()
        c = w.handshake()
        ws = workspace(self.root)
        first = c.call("rrpc-2", "read", {"workspace": ws, "path": "hello.txt"})
        self.assertIs(first["ok"], True, first)
        missing = c.call("rrpc-3", "read", {"workspace": ws, "path": "nope.txt"})
        self.assert_error(missing, "rrpc-3", "FILE_NOT_FOUND")

        # The file changes: a replay is the cached response, not a new read.
        with open(os.path.join(self.root, "hello.txt"), "w") as f:
            f.write("changed\n")
        again = c.call("rrpc-4", "replay", {"request_id": "rrpc-2"})
        self.assertEqual(again, dict(first, request_id="rrpc-4"))
        again = c.call("rrpc-5", "replay", {"request_id": "rrpc-3"})
        self.assertEqual(again, dict(missing, request_id="rrpc-5"))

        unknown = c.call("rrpc-6", "replay", {"request_id": "rrpc-999"})
        self.assert_error(unknown, "rrpc-6", "OPERATION_NOT_FOUND")

        # The cache holds the last 32 responses: 40 more push rrpc-2 out, the latest stays.
        for n in range(7, 47):
            resp = c.call("rrpc-%d" % n, "version", {"workspace": ws, "path": "hello.txt"})
            self.assertIs(resp["ok"], True, resp)
        latest = c.call("rrpc-47", "replay", {"request_id": "rrpc-46"})
        self.assertEqual(latest["result"]["type"], "version", latest)
        evicted = c.call("rrpc-48", "replay", {"request_id": "rrpc-2"})
        self.assert_error(evicted, "rrpc-48", "OPERATION_NOT_FOUND")
        c.close()
        self.assertEqual(w.wait(), 0)

    # ---- concurrency, events, process lifetime ----

    def test_concurrent_requests_and_process_exited(self):
        w = self.worker()
        c = w.handshake()
        d = exec_data(self.root, ["sh", "-c", "sleep 0.5; echo done"], yield_ms=10000)
        c.send(request("rrpc-2", "exec", d))
        # Answered while the exec waits for its command.
        resp = c.call("rrpc-3", "read", {"workspace": workspace(self.root), "path": "hello.txt"})
        self.assertIs(resp["ok"], True, resp)
        resp = c.recv()
        self.assertEqual(resp["request_id"], "rrpc-2", resp)
        self.assertIs(resp["ok"], True, resp)
        self.assertEqual(resp["result"]["type"], "exec")
        data = resp["result"]["data"]
        self.assertEqual(data["process_id"], d["process_id"])
        self.assertEqual(data["state"], "exited", data)
        self.assertEqual(data["output"], "done\n", data)
        self.assertEqual(data["exit_code"], 0, data)
        # The event arrives (before or after the response).
        end = time.monotonic() + IO_TIMEOUT
        n = 4
        while not c.events:
            self.assertLess(time.monotonic(), end, "no process_exited event")
            st = c.call("rrpc-%d" % n, "process_status", {"process_id": d["process_id"]})
            self.assertIs(st["ok"], True, st)
            n += 1
            time.sleep(0.05)
        # It says how the process ended (for the gateway's notifications/message), nothing more.
        self.assertEqual(c.events[0], {"protocol": PROTOCOL, "kind": "event", "event": {
            "type": "process_exited", "data": {"process_id": d["process_id"],
                                               "workspace_id": "default", "exit_code": 0,
                                               "termination": "exited"}}})
        c.close()
        self.assertEqual(w.wait(), 0)

    def test_cancel_ends_a_wait_and_kills(self):
        """cancel {request_id}: the long poll is answered at once, before the cancel's own answer;
        cancel {request_id, process_id}: an exec yield ends and its process is killed."""
        w = self.worker()
        c = w.handshake()
        arg = tp.uniq(2)
        d = exec_data(self.root, ["sleep", arg])
        d["workspace"]["processes"] = "shared"  # two live at once (exclusive refuses the second)
        self.assertIs(c.call("rrpc-2", "exec", d)["ok"], True)
        c.send(request("rrpc-3", "read_process", {"process_id": d["process_id"],
                                                  "wait_ms": 20000}))
        time.sleep(0.2)
        t0 = time.monotonic()
        c.send(request("rrpc-4", "cancel", {"request_id": "rrpc-3"}))
        resp = c.recv()
        took = time.monotonic() - t0
        self.assertEqual(resp["request_id"], "rrpc-3", resp)
        self.assertIs(resp["ok"], True, resp)
        self.assertEqual(resp["result"]["data"]["chunk"], "")
        self.assertLess(took, 0.05 + 0.15 * SLOW, "the wait ended after %.0f ms" % (took * 1000))
        resp = c.recv()
        self.assertEqual(resp["request_id"], "rrpc-4", resp)
        self.assertEqual(resp["result"], {"type": "cancel",
                                          "data": {"found": True, "killed": False}})
        # Nothing waits any more: found false; the process still runs.
        resp = c.call("rrpc-5", "cancel", {"request_id": "rrpc-3"})
        self.assertEqual(resp["result"]["data"], {"found": False, "killed": False})
        self.assertTrue(tp.pids_with(arg))
        # An exec with a yield, cancelled with its process id: answered now, process killed.
        arg2 = tp.uniq(3)
        d2 = exec_data(self.root, ["sleep", arg2], yield_ms=20000)
        d2["workspace"]["processes"] = "shared"
        c.send(request("rrpc-6", "exec", d2))
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg2), 5.0 * SLOW))
        c.send(request("rrpc-7", "cancel", {"request_id": "rrpc-6",
                                            "process_id": d2["process_id"]}))
        resp = c.recv()
        self.assertEqual(resp["request_id"], "rrpc-6", resp)
        self.assertEqual(resp["result"]["data"]["process_id"], d2["process_id"])
        resp = c.recv()
        self.assertEqual(resp["result"]["data"], {"found": True, "killed": True})
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg2), 3.0 * SLOW))
        # Gone from /proc before the worker's loop has reaped it: poll its status until it has.
        n = [0]

        def status():
            n[0] += 1
            return c.call("rrpc-8-%d" % n[0], "process_status",
                          {"process_id": d2["process_id"]})["result"]["data"]
        self.assertTrue(tp.wait_until(lambda: "termination" in status(), 3.0 * SLOW))
        st = status()
        self.assertEqual(st["termination"], "terminated", st)
        # The process alone (its exec already answered): killed.
        resp = c.call("rrpc-9", "cancel", {"process_id": d["process_id"]})
        self.assertEqual(resp["result"]["data"], {"found": False, "killed": True})
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 3.0 * SLOW))
        c.close()
        self.assertEqual(w.wait(), 0)

    def test_connection_close_kills_processes(self):
        w = self.worker()
        c = w.handshake()
        arg = tp.uniq(1)
        resp = c.call("rrpc-2", "exec", exec_data(self.root, ["sleep", arg]))
        self.assertIs(resp["ok"], True, resp)
        self.assertEqual(resp["result"]["data"]["process_id"][:5], "proc-")
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg), 5.0 * SLOW))
        c.close()
        self.assertEqual(w.wait(), 0)
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 3.0 * SLOW),
                        "a command survived its worker: %r" % tp.pids_with(arg))

    def test_hardening_no_core(self):
        w = self.worker()
        with open("/proc/%d/limits" % w.proc.pid) as f:
            core = [line for line in f if line.startswith("Max core file size")]
        self.assertEqual(core[0].split()[4:6], ["0", "0"], core)

    # ---- the socket path ----

    def test_live_socket_is_never_unlinked(self):
        first = self.worker()
        ino = os.lstat(self.sock).st_ino
        second = Worker(self.sock, wait=False)
        self.workers.append(second)
        try:
            status = second.proc.wait(10.0 * SLOW)
        except subprocess.TimeoutExpired:
            self.fail("a second worker on a live socket kept running")
        err = second.stderr()
        self.assertEqual(status, 1, err)
        self.assertIn(self.sock, err)
        self.assertEqual(os.lstat(self.sock).st_ino, ino, "the live socket was replaced")
        # The first still serves, on the same path.
        self.assertIsNone(first.proc.poll(), "the first worker exited: %s" % first.stderr())
        c = first.handshake()
        resp = c.call("rrpc-2", "version", {"workspace": workspace(self.root),
                                            "path": "hello.txt"})
        self.assertIs(resp["ok"], True, resp)
        c.close()
        self.assertEqual(first.wait(), 0)

    def test_stale_socket_is_unlinked(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(self.sock)
        s.close()  # a socket file nobody listens on: a leftover
        self.assertTrue(stat.S_ISSOCK(os.lstat(self.sock).st_mode))
        self.assertFalse(listening(self.sock))
        w = self.worker()
        c = w.handshake()
        c.close()
        self.assertEqual(w.wait(), 0)


# ---- the gateway with --runner uds -----------------------------------------------------------


class Gateway(mcp_stdio.StdioServer):
    def __init__(self, args, state_dir, extra_env=None):
        super().__init__(mcp_binary(), list(args) + ["--runner", "uds"], state_dir, extra_env,
                         client="test_uds")


def patch(*lines):
    return "\n".join(("*** Begin Patch",) + lines + ("*** End Patch",)) + "\n"


class GatewayCase(unittest.TestCase):

    def setUp(self):
        mcp_binary()
        runtime_binary()
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-e2e-uds-gw-"))
        self.ws = os.path.join(self.tmp, "ws")
        self.state = os.path.join(self.tmp, "state")
        self.rdir = os.path.join(self.tmp, "runner")
        for d in (self.ws, self.state, self.rdir):
            os.mkdir(d)
        os.chmod(self.rdir, 0o755)
        with open(os.path.join(self.ws, "hello.txt"), "w") as f:
            f.write("hello\n")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            if s.proc.returncode is None:
                s.kill()
        tp.kill_leftovers()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, extra_env=None, runner_dir=None, db=":memory:"):
        s = Gateway(["--workspace", self.ws, "--runner-dir", runner_dir or self.rdir,
                     "--operations-db", db], self.state, extra_env)
        self.servers.append(s)
        return s

    def worker(self, srv):
        pids = worker_of(srv.proc.pid)
        self.assertEqual(len(pids), 1, "workers of the gateway: %r" % pids)
        return pids[0]

    def leaf(self, parent=None):
        names = leaves(parent or self.rdir)
        self.assertEqual(len(names), 1, names)
        return os.path.join(parent or self.rdir, names[0])

    def tool_error(self, srv, tool, args, code):
        out, err = srv.call_raw(tool, args)
        self.assertIsNone(out, "%s: expected %s, got %r" % (tool, code, out))
        self.assertEqual(err["code"], code, err)
        return err

    # ---- start, directory, exit ----

    def test_leaf_directory_and_clean_exit(self):
        for mode in (0o755, 0o711):
            with self.subTest(parent_mode=oct(mode)):
                parent = os.path.join(self.tmp, "parent-%o" % mode)
                os.mkdir(parent)
                os.chmod(parent, mode)
                srv = self.start(runner_dir=parent)
                info = srv.call("workspace_info", {"workspace_id": "default"})
                self.assertEqual(info["execution"]["isolation"]["runner"], "uds")
                self.assertEqual(srv.call("read", {"workspace_id": "default",
                                                   "path": "hello.txt"})["content"], "hello\n")
                leaf = self.leaf(parent)
                m = LEAF.match(os.path.basename(leaf))
                self.assertEqual(int(m.group(1)), srv.proc.pid)
                st = os.lstat(leaf)
                self.assertTrue(stat.S_ISDIR(st.st_mode))
                self.assertEqual(stat.S_IMODE(st.st_mode), 0o700, oct(st.st_mode))
                self.assertTrue(stat.S_ISSOCK(os.lstat(os.path.join(leaf, "runner.sock"))
                                              .st_mode))
                self.assertEqual(stat.S_IMODE(os.stat(parent).st_mode), mode)
                wpid = self.worker(srv)
                srv.close()  # EOF: exit 0 (checked by close)
                self.assertFalse(alive(wpid), "the worker outlived the gateway")
                self.assertEqual(leaves(parent), [], "the leaf directory was left behind")
                self.assertEqual(stat.S_IMODE(os.stat(parent).st_mode), mode)

    def test_sigterm_removes_everything(self):
        # SIGHUP and SIGQUIT too: every catchable signal that would end the gateway goes
        # through the shutdown path.
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            with self.subTest(signal=sig.name):
                srv = self.start()
                arg = tp.uniq(2)
                out = srv.call("exec_command", {"workspace_id": "default",
                                                "command": ["sleep", arg]})
                self.assertEqual(out["dispatch_status"], "confirmed", out)
                self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg), 5.0 * SLOW))
                wpid = self.worker(srv)
                srv.proc.send_signal(sig)
                self.assertEqual(srv.proc.wait(10 * SLOW), 0, "".join(srv.stderr[-20:]))
                self.assertFalse(alive(wpid))
                self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 3.0 * SLOW))
                self.assertEqual(leaves(self.rdir), [])

    def test_worker_does_not_share_the_gateway_stdio(self):
        # docs/contract/runtime.md §3: no child inherits the server's stdout or stderr. The worker's
        # stderr is a pipe of its own, which the gateway relays.
        srv = self.start()
        wpid = self.worker(srv)
        gw_err = os.readlink("/proc/%d/fd/2" % srv.proc.pid)
        gw_out = os.readlink("/proc/%d/fd/1" % srv.proc.pid)
        for fd in (0, 1, 2):
            target = os.readlink("/proc/%d/fd/%d" % (wpid, fd))
            self.assertNotEqual(target, gw_err, "worker fd %d is the gateway's stderr" % fd)
            self.assertNotEqual(target, gw_out, "worker fd %d is the gateway's stdout" % fd)
        self.assertEqual(os.readlink("/proc/%d/fd/1" % wpid), "/dev/null")
        self.assertTrue(os.readlink("/proc/%d/fd/2" % wpid).startswith("pipe:"))
        srv.close()

    def test_busy_poll_setting_reaches_the_worker(self):
        # docs/operations.md "Busy polling": a value out of range is ignored with a warning that
        # names it, from the gateway and from the worker it passes the variable to; 0 is taken.
        for value, warned in (("5000", True), ("x1", True), ("0", False)):
            with self.subTest(value=value):
                srv = self.start(extra_env={"CODESPACE_BUSY_POLL_US": value})
                self.assertEqual(srv.call("read", {"workspace_id": "default",
                                                   "path": "hello.txt"})["content"], "hello\n")

                def warnings():
                    return srv.log_records("CODESPACE_BUSY_POLL_US ignored")
                if warned:
                    self.assertTrue(tp.wait_until(lambda: len(warnings()) == 2, 5.0 * SLOW),
                                    "".join(srv.stderr[-20:]))
                    for rec in warnings():
                        self.assertEqual(rec["given"], value, rec)
                        self.assertEqual(rec["default"], 200, rec)
                srv.close()
                if not warned:
                    self.assertEqual(warnings(), [])

    def test_refused_runner_dirs(self):
        home = os.path.join(self.tmp, "home")
        os.mkdir(home)
        tmp_link = os.path.join(self.tmp, "tmp-link")
        os.symlink("/tmp", tmp_link)
        cases = [(["--runner-dir", "/"], {}, "--runner-dir"),
                 (["--runner-dir", "/var/tmp"], {}, "--runner-dir"),
                 (["--runner-dir", "/tmp"], {}, "--runner-dir"),
                 (["--runner-dir", "/tmp/."], {}, "--runner-dir"),
                 (["--runner-dir", "/tmp/../tmp"], {}, "--runner-dir"),
                 (["--runner-dir", tmp_link], {}, "--runner-dir"),
                 (["--runner-dir", home + "/."], {}, "--runner-dir"),
                 (["--runner-dir", home], {}, "--runner-dir"),
                 ([], {"CODESPACE_RUNNER_DIR": home}, "CODESPACE_RUNNER_DIR"),
                 ([], {"CODESPACE_RUNNER_DIR": "/"}, "CODESPACE_RUNNER_DIR")]
        for args, env, name in cases:
            with self.subTest(args=args, env=env):
                e = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
                e.update(env, HOME=home, XDG_STATE_HOME=self.state)
                p = subprocess.run([mcp_binary(), "--workspace", self.ws, "--runner", "uds"]
                                   + args, stdin=subprocess.DEVNULL, capture_output=True, env=e,
                                   timeout=10 * SLOW)
                err = p.stderr.decode("utf-8", "replace")
                self.assertEqual(p.returncode, 2, err)
                self.assertIn(name, err)
                self.assertEqual(p.stdout, b"")
                self.assertEqual(leaves(home), [])

    def test_fake_worker_speaking_protocol_4(self):
        log = os.path.join(self.tmp, "fake.log")
        fake = os.path.join(self.tmp, "fake-runtime")
        with open(fake, "w") as f:
            f.write(FAKE_WORKER.replace("@LOG@", log))
        os.chmod(fake, 0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env.update(XDG_STATE_HOME=self.state, CODESPACE_RUNTIME_BIN=fake)
        p = subprocess.Popen([mcp_binary(), "--workspace", self.ws, "--runner", "uds",
                              "--runner-dir", self.rdir, "--operations-db", ":memory:"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
        try:
            out, err = p.communicate(
                json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}}).encode() + b"\n",
                timeout=15 * SLOW)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            self.fail("the gateway kept running with a protocol 4 worker")
        err = err.decode("utf-8", "replace")
        self.assertNotEqual(p.returncode, 0, err)
        self.assertEqual(out, b"", "the gateway served MCP with a mismatched worker")
        self.assertIn("protocol", err)
        self.assertRegex(err, r"\b4\b")
        self.assertRegex(err, r"\b%d\b" % PROTOCOL)
        with open(log) as f:
            got = [json.loads(line) for line in f]
        self.assertGreaterEqual(len(got), 1, got)
        first = got[0]
        self.assertEqual(first["protocol"], PROTOCOL, first)
        self.assertEqual(first["request_id"], "rrpc-1", first)
        self.assertEqual(first["op"]["op"], "hello", first)
        self.assertEqual(first["op"]["data"]["protocol"], PROTOCOL, first)
        # What followed the hello (an error response, or nothing before the close) is not
        # checked: the gateway may kill the worker before it reads the close.
        self.assertEqual(leaves(self.rdir), [])

    def test_worker_that_never_serves(self):
        """A worker that exits at once fails the start without waiting the 2 s; one that never
        binds fails it after the 2 s of polling and is killed. Either way the leaf is removed."""
        arg = tp.uniq(7)
        cases = [("exits", "#!/bin/sh\necho 'worker-last-words-%s' >&2\nexit 3\n" % arg, 0.0),
                 ("never-binds", "#!/bin/sh\nexec sleep %s\n" % arg, 1.9)]
        for name, script, at_least in cases:
            with self.subTest(name):
                fake = os.path.join(self.tmp, "fake-" + name)
                with open(fake, "w") as f:
                    f.write(script)
                os.chmod(fake, 0o755)
                env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
                env.update(XDG_STATE_HOME=self.state, CODESPACE_RUNTIME_BIN=fake)
                t0 = time.monotonic()
                p = subprocess.run([mcp_binary(), "--workspace", self.ws, "--runner", "uds",
                                    "--runner-dir", self.rdir, "--operations-db", ":memory:"],
                                   stdin=subprocess.DEVNULL, capture_output=True, env=env,
                                   timeout=20 * SLOW)
                took = time.monotonic() - t0
                err = p.stderr.decode("utf-8", "replace")
                self.assertNotEqual(p.returncode, 0, err)
                self.assertEqual(p.stdout, b"")
                self.assertTrue(err.strip(), "no message")
                if name == "exits":  # what the worker said reaches the gateway's stderr
                    self.assertIn("worker-last-words-" + arg, err)
                self.assertGreaterEqual(took, at_least, err)
                self.assertLess(took, 1.5 * SLOW if at_least == 0 else 6.0 * SLOW, err)
                self.assertEqual(leaves(self.rdir), [])
                self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 2.0 * SLOW),
                                "the worker that never bound was left running")

    # ---- worker loss ----

    def test_worker_sigkill_mid_apply_patch(self):
        n = 20
        old = {"crash/f%02d.txt" % i: ("file %02d old\n" % i) * 200 for i in range(n)}
        new = {k: v.replace(" old", " new") for k, v in old.items()}
        os.mkdir(os.path.join(self.ws, "crash"))
        for rel, text in old.items():
            with open(os.path.join(self.ws, rel), "w") as f:
                f.write(text)
        ops = []
        for rel in sorted(old):
            ops += ["*** Update File: " + rel] + ["-" + x for x in old[rel].splitlines()] + \
                   ["+" + x for x in new[rel].splitlines()]
        db = os.path.join(self.tmp, "ops.db")
        srv = self.start({"CODESPACE_TEST_PATCH_STEP_DELAY_MS": "200"}, db=db)
        wpid = self.worker(srv)
        leaf = self.leaf()
        key = "uds-crash"
        rid = srv.call_start("apply_patch", {"workspace_id": "default", "patch": patch(*ops),
                                             "operation_key": key})

        def get(rel):
            with open(os.path.join(self.ws, rel)) as f:
                return f.read()

        deadline = time.monotonic() + 30 * SLOW
        while True:
            done = sum(1 for rel in new if get(rel) == new[rel])
            if 0 < done < n // 2:
                break
            self.assertLess(done, n, "the patch finished before the kill")
            self.assertLess(time.monotonic(), deadline, "no file changed")
            time.sleep(0.02)
        os.kill(wpid, signal.SIGKILL)

        out, err = srv.call_wait(rid)
        self.assertIsNone(err, "apply_patch in flight at worker loss: %r" % err)
        self.assertEqual(out["status"], "unknown", out)
        self.assertIs(out["replayed"], False)
        # The gateway settles the lost worker's journal before it answers about the workspace
        # (docs/contract/runtime.md §6, "Crash atomicity of apply_patch"): the patch is rolled
        # back, every file is old again, nothing of the journal or the temporary files is left.
        st = srv.call("operation_status", {"operation_key": key})
        self.assertEqual(st["status"], "rolled_back", st)
        self.assertEqual(st["operation_id"], out["operation_id"])
        self.assertEqual([e["name"] for e in st["events"]], ["minted", "finished", "recovered"],
                         st)
        self.assertEqual(st["events"][1].get("reason"), "unknown", st)
        for d, _, files in os.walk(self.ws):
            for name in files:
                rel = os.path.relpath(os.path.join(d, name), self.ws)
                if rel in old:
                    self.assertEqual(get(rel), old[rel], rel)
                else:
                    self.assertEqual(rel, "hello.txt")
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".cs-patch-journal")))

        # The lost worker's leaf is gone; the next call starts a new worker (R12), in a new leaf.
        self.assertTrue(tp.wait_until(lambda: not os.path.exists(leaf), 3.0 * SLOW),
                        "the leaf directory outlived the worker")
        self.assertEqual(srv.call("read", {"workspace_id": "default", "path": "hello.txt"})
                         ["content"], "hello\n")
        self.assertEqual(len(worker_of(srv.proc.pid)), 1)
        self.assertNotEqual(self.leaf(), leaf)
        srv.close()

    def test_worker_sigkill_with_a_live_process(self):
        srv = self.start()
        a, b = tp.uniq(3), tp.uniq(4)
        # b escapes the command's group (its own session): only the subreaper can find it.
        out = srv.call("exec_command", {"workspace_id": "default", "command": [
            "sh", "-c", "setsid sleep %s & exec sleep %s" % (b, a)]})
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        pid = out["process_id"]
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(a) and tp.pids_with(b), 5.0 * SLOW))
        self.tool_error(srv, "exec_command", {"workspace_id": "default", "command": ["true"]},
                        "WORKSPACE_BUSY")
        # A long poll in flight at the loss: neither a patch nor an exec, so TIMEOUT.
        poll = srv.call_start("read_process", {"process_id": pid, "wait_ms": 20000})
        time.sleep(0.1 * SLOW)
        self.assertIsNone(srv.poll(poll), "the long poll answered before the loss")
        wpid = self.worker(srv)
        os.kill(wpid, signal.SIGKILL)
        out, err = srv.call_wait(poll)
        self.assertIsNone(out, out)
        self.assertEqual(err["code"], "TIMEOUT", err)
        self.assertIn("runner transport failed", err["message"])

        # Busy until the loss is noticed, then a new worker runs the command (R12).
        seen = []
        end = time.monotonic() + 10 * SLOW
        while True:
            self.assertLess(time.monotonic(), end, "codes seen: %r" % seen)
            out, err = srv.call_raw("exec_command", {"workspace_id": "default",
                                                     "command": ["true"]})
            if out is not None:
                self.assertEqual(out["dispatch_status"], "confirmed", out)
                break
            self.assertEqual(err["code"], "WORKSPACE_BUSY", err)
            seen.append(err["code"])
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(a) and not tp.pids_with(b),
                                      3.0 * SLOW),
                        "survivors: %r %r" % (tp.pids_with(a), tp.pids_with(b)))
        self.assertEqual(srv.call("read", {"workspace_id": "default", "path": "hello.txt"})
                         ["content"], "hello\n")
        # The lost worker's handle is gone for good.
        self.tool_error(srv, "process_status", {"process_id": pid}, "PROCESS_NOT_FOUND")
        # Nothing of the lost worker is left: the gateway's only child is the new worker.
        self.assertTrue(tp.wait_until(lambda: tp.children(srv.proc.pid) ==
                                      worker_of(srv.proc.pid), 3.0 * SLOW),
                        "children left to the gateway: %r" % tp.children(srv.proc.pid))
        srv.close()

    def test_worker_sigkill_during_exec_yield(self):
        srv = self.start()
        arg = tp.uniq(5)
        rid = srv.call_start("exec_command", {"workspace_id": "default",
                                              "command": ["sleep", arg], "yield_ms": 20000})
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg), 5.0 * SLOW))
        os.kill(self.worker(srv), signal.SIGKILL)
        out, err = srv.call_wait(rid)
        self.assertIsNone(err, "exec_command in flight at worker loss: %r" % err)
        self.assertEqual(out["dispatch_status"], "unknown", out)
        self.assertRegex(out["process_id"], tp.PROC_ID)
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 3.0 * SLOW))
        srv.close()

    def test_gateway_sigkill_leaves_nothing(self):
        srv = self.start()
        arg = tp.uniq(6)
        out = srv.call("exec_command", {"workspace_id": "default", "command": ["sleep", arg]})
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg), 5.0 * SLOW))
        wpid = self.worker(srv)
        srv.kill()
        self.assertTrue(tp.wait_until(lambda: not alive(wpid), 3.0 * SLOW),
                        "the worker outlived a SIGKILLed gateway")
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 3.0 * SLOW),
                        "a command outlived a SIGKILLed gateway: %r" % tp.pids_with(arg))
        # The worker removed its socket and the leaf on its way out (issue 34).
        self.assertEqual(leaves(self.rdir), [], "the leaf of a SIGKILLed gateway was left")


# A worker speaking protocol 4: binds --socket, answers the first request with a protocol 4 hello
# and logs every frame it receives (then "EOF") as JSON lines.
FAKE_WORKER = r'''#!/usr/bin/python3
import json, socket, struct, sys
path = sys.argv[sys.argv.index("--socket") + 1]
log = open("@LOG@", "w")
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(1)
conn, _ = srv.accept()
srv.close()
buf = b""
answered = False
while True:
    data = conn.recv(65536)
    if not data:
        break
    buf += data
    while len(buf) >= 4:
        (n,) = struct.unpack(">I", buf[:4])
        if len(buf) < 4 + n:
            break
        msg = json.loads(buf[4:4 + n])
        buf = buf[4 + n:]
        log.write(json.dumps(msg) + "\n")
        log.flush()
        if not answered:
            answered = True
            body = json.dumps({"protocol": 4, "kind": "response",
                               "request_id": msg.get("request_id", "rrpc-1"), "ok": True,
                               "result": {"type": "hello",
                                          "data": {"protocol": 4, "peer": "fake 0"}}}).encode()
            conn.sendall(struct.pack(">I", len(body)) + body)
log.write(json.dumps("EOF") + "\n")
log.close()
'''


if __name__ == "__main__":
    unittest.main()
