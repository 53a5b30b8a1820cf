#!/usr/bin/python3
"""End-to-end tests of codespace-mcp over stdio (docs/contract/tools.md, docs/contract/runtime.md).

Starts the real binary (path in CODESPACE_MCP_BIN) with --workspace on a temporary directory
and talks newline-delimited JSON-RPC to it, as a client would. Every success result is validated
against the outputSchema the server itself published in tools/list (jsonschema,
Draft202012Validator); every tool error body against schema/errors.json.

Run: CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \
       /usr/bin/python3 -m unittest -v test_stdio        (from tests/e2e)
The helpers at the top (StdioServer, start_http, HttpClient, ...) are shared with test_cross.py
and fuzz_envelopes.py; import the module (import test_stdio as e2e), never its names, so that
unittest does not collect these test classes twice.
"""
import http.client
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import mcp_stdio  # runner_args(): CS_E2E_RUNNER

try:
    import jsonschema
except ImportError:  # the generator needs it too: scripts/bootstrap.sh installs it
    sys.exit("test_stdio: python3-jsonschema is missing (apt-get install python3-jsonschema)")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
REPLY_TIMEOUT = 15.0  # seconds; generous for the ASan/UBSan build on 2 cores
EXIT_TIMEOUT = 5.0  # "EOF -> exit 0 within a few seconds"
MAX_LINE = 16 * 1024 * 1024  # docs/contract/runtime.md section 3

VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26"]
TOOLS = [  # docs/contract/tools.md section 3, in order
    "workspace_info", "read", "find", "apply_patch", "operation_status", "exec_command",
    "write_stdin", "read_process", "process_status", "process_resize", "terminate_process",
]
READ_ONLY = {"workspace_info", "read", "find", "operation_status", "read_process",
             "process_status"}
DESTRUCTIVE = {"apply_patch", "exec_command", "terminate_process"}
OPEN_WORLD = {"exec_command"}


def binary():
    """The binary under test; a clear failure when CODESPACE_MCP_BIN is not usable."""
    path = os.environ.get("CODESPACE_MCP_BIN")
    if not path:
        raise RuntimeError("CODESPACE_MCP_BIN is not set: point it at the built codespace-mcp "
                           "(e.g. build/release/src/main/codespace-mcp)")
    if not os.access(path, os.X_OK):
        raise RuntimeError("CODESPACE_MCP_BIN=%s is not an executable file" % path)
    return path


def server_env(state_dir, extra=None):
    """The environment for a server: ours, with the ledger's default location in state_dir so
    nothing is written under the user's home, and no CODESPACE_* setting leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
    env["XDG_STATE_HOME"] = state_dir
    env.update(extra or {})
    return env


def find_key(obj, key, where=""):
    """JSON pointers of every object member named key in obj (recursively)."""
    found = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                found.append(where + "/" + k)
            found += find_key(v, key, where + "/" + k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found += find_key(v, key, "%s/%d" % (where, i))
    return found


def is_jsonrpc_message(msg):
    """True when msg is one JSON-RPC 2.0 message a server may send (response or notification),
    or a non-empty batch of responses."""
    if isinstance(msg, list):
        return len(msg) > 0 and all(isinstance(m, dict) and is_jsonrpc_message(m) for m in msg)
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        return False
    if "method" in msg:
        return isinstance(msg["method"], str)
    if ("result" in msg) == ("error" in msg):
        return False
    if "id" not in msg and "error" not in msg:  # 2026-07-28: an error whose id was unreadable
        return False
    if "error" in msg:
        err = msg["error"]
        return (isinstance(err, dict) and isinstance(err.get("code"), int)
                and isinstance(err.get("message"), str))
    return True


def load_errors_schema():
    with open(os.path.join(REPO, "schema", "errors.json"), encoding="utf-8") as f:
        return json.load(f)


class StdioServer:
    """codespace-mcp on pipes. A reader thread parses every stdout line (kept in self.lines and
    queued); another keeps stderr. Lines that are not JSON-RPC are recorded in self.bad_lines."""

    def __init__(self, args, env=None, wait_listening=True):
        self.argv = [binary()] + list(args) + mcp_stdio.runner_args()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self.queue = queue.Queue()
        self.lines = []
        self.bad_lines = []
        self.stderr_lines = []
        self._stderr_cv = threading.Condition()
        self._next_id = 1
        self._stash = []
        self._out = threading.Thread(target=self._read_stdout, daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()
        if wait_listening:
            self.wait_log("listening")

    # ---- plumbing ----

    def _read_stdout(self):
        for raw in iter(self.proc.stdout.readline, b""):
            self.lines.append(raw)
            try:
                msg = json.loads(raw.decode("utf-8"))
            except ValueError:
                self.bad_lines.append(raw)
                continue
            if not raw.endswith(b"\n") or not is_jsonrpc_message(msg):
                self.bad_lines.append(raw)
            self.queue.put(msg)
        self.queue.put(EOFError)

    def _read_stderr(self):
        for raw in iter(self.proc.stderr.readline, b""):
            with self._stderr_cv:
                self.stderr_lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._stderr_cv.notify_all()
        with self._stderr_cv:
            self.stderr_lines.append(None)  # EOF marker
            self._stderr_cv.notify_all()

    def stderr_text(self, tail=40):
        return "\n".join(line for line in self.stderr_lines[-tail:] if line is not None)

    def log_records(self):
        """stderr lines parsed as JSON (lines that are not JSON objects are returned raw)."""
        out = []
        for line in self.stderr_lines:
            if line is None or line == "":
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append(line)
        return out

    def wait_log(self, msg, timeout=REPLY_TIMEOUT):
        """Waits for a JSON log line with "msg": msg on stderr and returns it."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._stderr_cv:
            while True:
                while seen < len(self.stderr_lines):
                    line = self.stderr_lines[seen]
                    seen += 1
                    if line is None:
                        raise AssertionError("server exited (status %s) before logging %r:\n%s"
                                             % (self.proc.wait(), msg, self.stderr_text()))
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict) and rec.get("msg") == msg:
                        return rec
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no %r log line within %.0f s:\n%s"
                                         % (msg, timeout, self.stderr_text()))
                self._stderr_cv.wait(left)

    def send_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg):
        self.send_raw(json.dumps(msg, separators=(",", ":")).encode("utf-8") + b"\n")

    def recv(self, timeout=REPLY_TIMEOUT):
        """The next message on stdout, in order (stashed ones first)."""
        if self._stash:
            return self._stash.pop(0)
        try:
            msg = self.queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no reply within %.0f s; stderr:\n%s"
                                 % (timeout, self.stderr_text())) from None
        if msg is EOFError:
            self.queue.put(EOFError)
            raise AssertionError("stdout closed (status %s); stderr:\n%s"
                                 % (self.proc.poll(), self.stderr_text()))
        return msg

    def recv_id(self, rid, timeout=REPLY_TIMEOUT):
        """The response whose id is rid; other messages are kept for later recv calls."""
        for i, m in enumerate(self._stash):
            if isinstance(m, dict) and "method" not in m and m.get("id") == rid:
                return self._stash.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no reply to id %r within %.0f s; stderr:\n%s"
                                     % (rid, timeout, self.stderr_text())) from None
            if msg is EOFError:
                self.queue.put(EOFError)
                raise AssertionError("stdout closed before the reply to id %r (status %s); "
                                     "stderr:\n%s" % (rid, self.proc.poll(), self.stderr_text()))
            if isinstance(msg, dict) and "method" not in msg and msg.get("id") == rid \
                    and type(msg.get("id")) is type(rid):
                return msg
            self._stash.append(msg)

    def no_message(self, wait=0.3):
        """Asserts nothing arrives on stdout for wait seconds."""
        if self._stash:
            raise AssertionError("unexpected message: %r" % self._stash[0])
        try:
            msg = self.queue.get(timeout=wait)
        except queue.Empty:
            return
        raise AssertionError("unexpected message: %r" % (msg,))

    def new_id(self):
        rid = self._next_id
        self._next_id += 1
        return rid

    def request(self, method, params=None, rid=None):
        """Sends a request and returns its response (the whole JSON-RPC object)."""
        if rid is None:
            rid = self.new_id()
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.recv_id(rid)

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def initialize(self, version="2025-11-25"):
        resp = self.request("initialize", {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "codespace-e2e", "version": "1"}})
        self.notify("notifications/initialized")
        return resp

    def close(self, timeout=EXIT_TIMEOUT):
        """Closes stdin and returns the exit status (killing the server if it hangs)."""
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("server did not exit within %.0f s of stdin EOF" % timeout)
        finally:
            self._out.join(timeout=2)
            self._err.join(timeout=2)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass


class Workspace:
    """A temporary workspace directory, reached through a symlink so that workspace_info must
    report the canonical path, plus a state dir for the ledger."""

    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="cs-e2e-")
        self.real = os.path.join(self.base, "real-root")
        os.mkdir(self.real)
        with open(os.path.join(self.real, "hello.txt"), "w") as f:
            f.write("hello\n")
        self.link = os.path.join(self.base, "link-root")
        os.symlink(self.real, self.link)
        self.state = os.path.join(self.base, "state")
        os.mkdir(self.state)
        self.canonical = os.path.realpath(self.real)

    def cleanup(self):
        shutil.rmtree(self.base, ignore_errors=True)


def start_http(args, env=None, timeout=REPLY_TIMEOUT):
    """Starts codespace-mcp --http --port 0 and returns (proc, port, stderr_lines) once its
    "listening" line names the port. stderr keeps being collected by a thread."""
    proc = subprocess.Popen([binary(), "--http", "--port", "0"] + list(args)
                            + mcp_stdio.runner_args(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    lines = []
    port_q = queue.Queue()

    def pump():
        for raw in iter(proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("msg") == "listening" and "port" in rec:
                port_q.put(rec["port"])
        port_q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
    try:
        port = port_q.get(timeout=timeout)
    except queue.Empty:
        port = None
    if not isinstance(port, int) or port <= 0:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        raise AssertionError("HTTP server did not log a listening port (status %s):\n%s"
                             % (proc.returncode, "\n".join(lines[-20:])))
    return proc, port, lines


def stop_process(proc, timeout=EXIT_TIMEOUT):
    """SIGTERM, then SIGKILL after timeout; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class HttpClient:
    """A minimal Streamable HTTP client: POST one JSON-RPC message to /mcp, keep the session id
    and the negotiated version. Responses may be application/json or a text/event-stream."""

    def __init__(self, port, host="127.0.0.1"):
        self.host = host
        self.port = port
        self.session = None
        self.version = None
        self._next_id = 1

    def post(self, msg, headers=None):
        """Returns (status, headers (lower-case names), parsed body or None)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=REPLY_TIMEOUT)
        h = {"Content-Type": "application/json",
             "Accept": "application/json, text/event-stream"}
        if self.session:
            h["Mcp-Session-Id"] = self.session
        if self.version:
            h["MCP-Protocol-Version"] = self.version
        h.update(headers or {})
        try:
            conn.request("POST", "/mcp", body=json.dumps(msg).encode("utf-8"), headers=h)
            resp = conn.getresponse()
            body = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()
        parsed = None
        if body:
            if hdrs.get("content-type", "").startswith("text/event-stream"):
                data = [line[5:].strip() for line in body.decode("utf-8").splitlines()
                        if line.startswith("data:")]
                parsed = json.loads(data[-1]) if data else None
            else:
                parsed = json.loads(body.decode("utf-8"))
        return resp.status, hdrs, parsed

    def request(self, method, params=None):
        rid = self._next_id
        self._next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        status, hdrs, body = self.post(msg)
        if status != 200:
            raise AssertionError("POST %s: HTTP %d %r" % (method, status, body))
        if not isinstance(body, dict) or body.get("id") != rid:
            raise AssertionError("POST %s: unexpected body %r" % (method, body))
        return body, hdrs

    def initialize(self, version="2025-11-25"):
        body, hdrs = self.request("initialize", {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "codespace-e2e", "version": "1"}})
        self.session = hdrs.get("mcp-session-id")
        if not self.session:
            raise AssertionError("initialize answered without Mcp-Session-Id: %r" % (hdrs,))
        self.version = body["result"]["protocolVersion"]
        status, _, _ = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if status != 202:
            raise AssertionError("notifications/initialized: HTTP %d, expected 202" % status)
        return body


# ---------------------------------------------------------------------------------------------


class StdioCase(unittest.TestCase):
    """One workspace per class; a fresh server per test (they are cheap)."""

    @classmethod
    def setUpClass(cls):
        binary()
        cls.ws = Workspace()
        cls.errors_schema = load_errors_schema()

    @classmethod
    def tearDownClass(cls):
        cls.ws.cleanup()

    def setUp(self):
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.kill()
            self.assertEqual(s.bad_lines, [], "stdout carried something other than JSON-RPC "
                             "lines")

    def start(self, *extra, env=None, wait_listening=True):
        s = StdioServer(["--workspace", self.ws.link] + list(extra),
                        env=server_env(self.ws.state, env), wait_listening=wait_listening)
        self.servers.append(s)
        return s

    def started(self, version="2025-11-25"):
        s = self.start()
        resp = s.initialize(version)
        self.assertIn("result", resp, resp)
        return s

    # ---- assertions shared by the tests ----

    def assertError(self, resp, code, rid="__same__"):
        self.assertTrue(is_jsonrpc_message(resp), resp)
        self.assertIn("error", resp, resp)
        self.assertNotIn("result", resp)
        self.assertEqual(resp["error"]["code"], code, resp)
        self.assertIsInstance(resp["error"]["message"], str)
        if rid != "__same__":
            self.assertIn("id", resp)
            self.assertEqual(resp["id"], rid)

    def tools(self, s):
        resp = s.request("tools/list")
        self.assertIn("result", resp, resp)
        return {t["name"]: t for t in resp["result"]["tools"]}

    def call(self, s, name, args=None):
        params = {"name": name}
        if args is not None:
            params["arguments"] = args
        resp = s.request("tools/call", params)
        self.assertIn("result", resp, "tools/call %s must not be a JSON-RPC error: %r"
                      % (name, resp))
        return resp["result"]

    def call_ok(self, s, name, args=None, tools=None):
        """A successful call: structuredContent valid against the tool's outputSchema and the
        one text item holding the same JSON."""
        tools = tools or self.tools(s)
        result = self.call(s, name, args)
        self.assertFalse(result.get("isError", False), result)
        self.assertIn("structuredContent", result)
        content = result["content"]
        self.assertEqual(len(content), 1, content)
        self.assertEqual(content[0]["type"], "text")
        self.assertEqual(json.loads(content[0]["text"]), result["structuredContent"])
        schema = tools[name]["outputSchema"]
        jsonschema.Draft202012Validator(schema).validate(result["structuredContent"])
        return result["structuredContent"]

    def call_error(self, s, name, args, code):
        """A tool error: isError, one text item with the error body, no structuredContent."""
        result = self.call(s, name, args)
        self.assertIs(result.get("isError"), True, result)
        self.assertNotIn("structuredContent", result)
        content = result["content"]
        self.assertEqual(len(content), 1, content)
        self.assertEqual(content[0]["type"], "text")
        body = json.loads(content[0]["text"])
        jsonschema.Draft202012Validator(self.errors_schema).validate(body)
        self.assertEqual(body["code"], code, body)
        self.assertTrue(body["message"], body)
        return body


class TestLifecycle(StdioCase):

    def test_initialize_each_supported_version(self):
        for version in VERSIONS:
            with self.subTest(version=version):
                s = self.start()
                resp = s.request("initialize", {
                    "protocolVersion": version, "capabilities": {},
                    "clientInfo": {"name": "e2e", "version": "1"}})
                result = resp["result"]
                self.assertEqual(result["protocolVersion"], version)
                self.check_initialize_result(result)
                s.close()

    def test_numbers_beyond_jansson_are_answered_under_their_id(self):
        # Valid JSON, but past int64 / double: clamped and answered as tool errors (contract
        # section 2: never a JSON-RPC error), each under its own id.
        s = self.start()
        s.request("initialize", {"protocolVersion": VERSIONS[0], "capabilities": {},
                                 "clientInfo": {"name": "e2e", "version": "1"}})
        s.notify("notifications/initialized")
        s.send_raw(b'{"jsonrpc":"2.0","id":71,"method":"tools/call","params":{"name":"read",'
                   b'"arguments":{"workspace_id":"default","path":"x.txt",'
                   b'"limit":18446744073709551616}}}\n')
        r = s.recv_id(71)
        body = json.loads(r["result"]["content"][0]["text"])
        self.assertTrue(r["result"]["isError"])
        self.assertEqual(body["code"], "OUTPUT_LIMIT", body)
        s.send_raw(b'{"jsonrpc":"2.0","id":72,"method":"tools/call","params":{"name":"read",'
                   b'"arguments":{"workspace_id":"default","path":"x.txt","offset":1e400}}}\n')
        r = s.recv_id(72)
        body = json.loads(r["result"]["content"][0]["text"])
        self.assertEqual(body["code"], "INVALID_ARGUMENTS", body)
        self.assertIn("/offset", body["message"])
        s.close()

    def test_stdio_server_does_not_map_libmicrohttpd(self):
        # The HTTP library and the GnuTLS it brings are loaded only for --http (http_mhd.c):
        # about 2.3 MiB of resident memory a stdio server does not pay.
        s = self.start()
        s.request("initialize", {"protocolVersion": VERSIONS[0], "capabilities": {},
                                 "clientInfo": {"name": "e2e", "version": "1"}})
        with open(f"/proc/{s.proc.pid}/maps") as f:
            maps = f.read()
        self.assertNotIn("libmicrohttpd", maps)
        self.assertNotIn("libgnutls", maps)
        s.close()

    def test_initialize_unknown_version_gets_preferred(self):
        for asked in ["2024-11-05", "1999-01-01", "draft", ""]:
            with self.subTest(asked=asked):
                s = self.start()
                resp = s.request("initialize", {"protocolVersion": asked, "capabilities": {},
                                                "clientInfo": {"name": "e2e", "version": "1"}})
                self.assertEqual(resp["result"]["protocolVersion"], "2025-11-25")
                self.check_initialize_result(resp["result"])
                s.close()
        # No protocolVersion at all: never fail initialize over a version.
        s = self.start()
        resp = s.request("initialize", {"capabilities": {}})
        self.assertEqual(resp["result"]["protocolVersion"], "2025-11-25")

    def check_initialize_result(self, result):
        self.assertEqual(result["serverInfo"]["name"], "codespace")
        version = subprocess.run([binary(), "--version"], capture_output=True, text=True,
                                 timeout=EXIT_TIMEOUT).stdout.split()[-1]
        self.assertEqual(result["serverInfo"]["version"], version)
        caps = result["capabilities"]
        self.assertEqual(caps["tools"], {"listChanged": False})
        self.assertIsInstance(caps["logging"], dict)
        self.assertNotIn("resources", caps)
        self.assertNotIn("prompts", caps)
        text = result["instructions"]
        self.assertIsInstance(text, str)
        for word in ["workspace_info", "execution", "argv", "shell", "terminate_process",
                     "offset", "limit", "next_offset", "unknown", "operation_status"]:
            self.assertIn(word, text, "instructions must mention %r" % word)

    def test_initialized_notification_gets_no_reply(self):
        s = self.start()
        s.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
        s.notify("notifications/initialized")
        s.notify("notifications/some-unknown-notification", {"x": 1})
        s.send({"jsonrpc": "2.0", "id": "after", "method": "ping"})
        resp = s.recv()  # strictly the next line: nothing was answered in between
        self.assertEqual(resp, {"jsonrpc": "2.0", "id": "after", "result": {}})

    def test_ping_before_initialize(self):
        s = self.start()
        resp = s.request("ping")
        self.assertEqual(resp["result"], {})
        self.assertEqual(s.request("ping", rid="p")["result"], {})

    def test_other_requests_before_initialize_are_invalid(self):
        s = self.start()
        for method, params in [("tools/list", None),
                               ("tools/call", {"name": "workspace_info", "arguments": {}}),
                               ("logging/setLevel", {"level": "info"}),
                               ("no/such/method", None)]:
            with self.subTest(method=method):
                rid = s.new_id()
                self.assertError(s.request(method, params, rid=rid), -32600, rid)
        # Still alive, and initialize still works afterwards.
        self.assertIn("result", s.request("initialize", {"protocolVersion": "2025-11-25"}))
        self.assertIn("result", s.request("tools/list"))

    def test_logging_set_level(self):
        s = self.started()
        for level in ["debug", "info", "notice", "warning", "error", "critical", "alert",
                      "emergency"]:
            self.assertEqual(s.request("logging/setLevel", {"level": level})["result"], {})
        self.assertError(s.request("logging/setLevel", {"level": "loud"}), -32602)
        self.assertError(s.request("logging/setLevel", {}), -32602)

    def test_eof_exits_zero_and_flushes_replies(self):
        s = self.started()
        s.send({"jsonrpc": "2.0", "id": "last", "method": "ping"})
        start = time.monotonic()
        status = s.close()
        self.assertEqual(status, 0, s.stderr_text())
        self.assertLess(time.monotonic() - start, EXIT_TIMEOUT)
        self.assertEqual(s.recv_id("last", timeout=1)["result"], {})

    def test_sigterm_and_sigint_exit_cleanly(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig.name):
                s = self.started()
                self.assertEqual(s.request("ping")["result"], {})
                s.proc.send_signal(sig)
                try:
                    status = s.proc.wait(timeout=EXIT_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.fail("no exit within %.0f s of %s" % (EXIT_TIMEOUT, sig.name))
                self.assertEqual(status, 0, s.stderr_text())

    def test_stderr_is_json_lines_and_stdout_only_jsonrpc(self):
        s = self.started()
        s.request("tools/list")
        s.request("tools/call", {"name": "workspace_info", "arguments": {}})
        s.send_raw(b"not json\n")
        s.recv()
        self.assertEqual(s.close(), 0)
        self.assertEqual(s.bad_lines, [])
        self.assertTrue(s.lines)
        for rec in s.log_records():
            self.assertIsInstance(rec, dict, "stderr line is not a JSON object: %r" % (rec,))
            self.assertIn("level", rec)
            self.assertIn("msg", rec)
        msgs = [r["msg"] for r in s.log_records()]
        self.assertIn("listening", msgs)


class TestTools(StdioCase):

    def test_tools_list(self):
        s = self.started()
        resp = s.request("tools/list")
        tools = resp["result"]["tools"]
        self.assertEqual([t["name"] for t in tools], TOOLS)
        for t in tools:
            name = t["name"]
            with self.subTest(tool=name):
                self.assertIsInstance(t.get("title"), str)
                self.assertTrue(t["title"])
                self.assertIsInstance(t.get("description"), str)
                self.assertTrue(t["description"])
                for key in ("inputSchema", "outputSchema"):
                    schema = t[key]
                    self.assertEqual(schema.get("type"), "object", key)
                    jsonschema.Draft202012Validator.check_schema(schema)
                    self.assertEqual(find_key(schema, "$ref"), [], "%s must be bundled" % key)
                    leaked = re.findall(r'"(x-cs-[^"]*)"\s*:', json.dumps(schema))
                    self.assertEqual(leaked, [], "generator keywords leaked into %s" % key)
                ann = t["annotations"]
                # MCP defaults: readOnly false, destructive true, idempotent false, openWorld true
                self.assertEqual(ann.get("readOnlyHint", False), name in READ_ONLY, ann)
                self.assertEqual(ann.get("destructiveHint", True), name in DESTRUCTIVE, ann)
                self.assertEqual(ann.get("idempotentHint", False), name in READ_ONLY, ann)
                self.assertEqual(ann.get("openWorldHint", True), name in OPEN_WORLD, ann)
        # exec_command has deliberately no cwd/env/timeout/tty_size/environment_id input.
        props = {t["name"]: t["inputSchema"].get("properties", {}) for t in tools}
        for forbidden in ("cwd", "env", "timeout", "tty_size", "environment_id"):
            self.assertNotIn(forbidden, props["exec_command"])
        self.assertEqual(find_key(tools, "environment_id"), [])
        # The same list on every negotiated version.
        for version in VERSIONS[1:]:
            other = self.started(version)
            self.assertEqual(other.request("tools/list")["result"], resp["result"])

    def test_workspace_info_without_id(self):
        s = self.started()
        tools = self.tools(s)
        info = self.call_ok(s, "workspace_info", {}, tools)
        self.check_server_part(info)
        self.assertIsNone(info["workspace_id"])
        for absent in ("execution", "profile", "root"):
            self.assertNotIn(absent, info)
        # No arguments at all, an empty id and ignored claims give the same answer.
        self.assertEqual(self.call_ok(s, "workspace_info", None, tools), info)
        self.assertEqual(self.call_ok(s, "workspace_info", {"workspace_id": ""}, tools), info)
        self.assertEqual(self.call_ok(s, "workspace_info",
                                      {"approved": True, "user_id": "root", "admin": 1}, tools),
                         info)

    def check_server_part(self, info):
        self.assertEqual(info["server"], "codespace")
        self.assertIsInstance(info["version"], str)
        self.assertIs(info["internal_model_calls"], False)
        self.assertEqual(info["tools_exposed"], TOOLS)
        self.assertEqual(info["transports"], ["stdio", "streamable-http"])
        self.assertIn("workspace_id", info)
        self.assertIs(info["workspace_id_is_credential"], False)
        self.assertEqual(find_key(info, "environment_id"), [])

    def test_workspace_info_default(self):
        s = self.started()
        tools = self.tools(s)
        info = self.call_ok(s, "workspace_info", {"workspace_id": "default"}, tools)
        self.check_server_part(info)
        self.assertEqual(info["workspace_id"], "default")
        self.assertEqual(info["profile"], "workspace-write")
        self.assertEqual(info["root"], self.ws.canonical)
        ex = info["execution"]
        for key in ("environment", "permissions", "files", "process", "serialization",
                    "isolation", "network"):
            self.assertIn(key, ex)
        env = ex["environment"]
        self.assertEqual(env["kind"], "host")
        self.assertIs(env["client_selectable"], False)
        for k in ("exec_supported", "file_read_supported", "file_write_supported"):
            self.assertIs(env[k], True, k)
        self.assertEqual(ex["permissions"], {"read": True, "write": True, "exec": True})
        files = ex["files"]
        for k in ("read", "find", "patch"):
            self.assertIsInstance(files[k]["available"], bool)
        self.assertEqual(files["capabilities"], {"read_range": True, "find_pagination": True,
                                                 "read_max_bytes": 1048576,
                                                 "find_max_paths": 10000})
        proc = ex["process"]
        self.assertIsInstance(proc["available"], bool)
        if proc["available"]:
            caps = proc["capabilities"]
            self.assertEqual(caps["lifetime"], {
                "owner": "runner", "client_disconnect": "keep_running",
                "runner_disconnect": "terminate", "gateway_shutdown": "terminate",
                "restart_recovery": "none"})
            self.assertEqual(caps["limits"]["max_live_processes"], 8)
            self.assertEqual(caps["limits"]["timeout_ms"], 1800000)  # 30 minutes
            self.assertEqual(caps["limits"]["output_ring_bytes"], 1048576)
            self.assertIs(caps["tty"]["default"], False)
            self.assertEqual((caps["tty"]["initial_rows"], caps["tty"]["initial_cols"]), (24, 80))
        else:
            self.assertNotIn("capabilities", proc)
        self.assertEqual(ex["serialization"], {
            "scope": "workspace", "request_conflict": "wait-fifo", "process_conflict": "reject",
            "queue_durable": False, "max_waiters_per_resource": 64,
            "conflict_error": "WORKSPACE_BUSY", "queue_full_error": "RESOURCE_QUEUE_FULL"})
        iso = ex["isolation"]
        self.assertIs(iso["file_tools_workspace_scoped"], True)
        self.assertEqual(iso["runner"], mcp_stdio.runner())
        net = ex["network"]
        self.assertEqual(net["policy"], "restricted")
        self.assertIs(net["client_may_escalate"], False)
        self.assertNotIn("allow", net)
        # One probe decides both (docs/contract/tools.md section 4).
        self.assertIn((iso["command_sandbox"], net["enforcement"]),
                      [("none", "none"), ("linux-sandbox", "enforced")])
        self.assertEqual(find_key(info, "environment_id"), [])

    def test_workspace_info_limits_follow_the_environment(self):
        s = self.start(env={"CODESPACE_MAX_PROCESSES": "3",
                            "CODESPACE_PROCESS_TIMEOUT_SECS": "7"})
        s.initialize()
        info = self.call_ok(s, "workspace_info", {"workspace_id": "default"})
        proc = info["execution"]["process"]
        if proc["available"]:
            self.assertEqual(proc["capabilities"]["limits"]["max_live_processes"], 3)
            self.assertEqual(proc["capabilities"]["limits"]["timeout_ms"], 7000)

    def test_workspace_info_unknown_id(self):
        s = self.started()
        for wid in ["nope", "Default", "default ", "../default", "d" * 300, "\u00e9t\u00e9"]:
            with self.subTest(workspace_id=wid):
                body = self.call_error(s, "workspace_info", {"workspace_id": wid},
                                       "WORKSPACE_NOT_FOUND")
                self.assertNotIn("operation_id", body)

    def test_invalid_arguments(self):
        s = self.started()
        tools = self.tools(s)
        cases = [
            ("workspace_info", {"workspace_id": 5}, "/workspace_id"),
            ("workspace_info", {"workspace_id": None}, "/workspace_id"),
            ("workspace_info", {"workspace_id": ["default"]}, "/workspace_id"),
            ("exec_command", {"workspace_id": "default", "command": [1]}, "/command/0"),
            ("exec_command", {"workspace_id": "default", "command": "ls"}, "/command"),
            ("exec_command", {"workspace_id": "default", "command": ["ls"], "yield_ms": 30001},
             "/yield_ms"),
            ("read", {"workspace_id": "default"}, "/path"),
            ("read", {"workspace_id": "default", "path": "a", "offset": -1}, "/offset"),
            ("process_resize", {"process_id": "proc-x", "rows": 0, "cols": 80}, "/rows"),
            ("write_stdin", {"process_id": "proc-x", "data": 3}, "/data"),
        ]
        for name, args, pointer in cases:
            with self.subTest(tool=name, args=args):
                # The published inputSchema agrees that these are invalid.
                errors = list(jsonschema.Draft202012Validator(
                    tools[name]["inputSchema"]).iter_errors(args))
                self.assertTrue(errors, "the inputSchema accepts %r" % (args,))
                body = self.call_error(s, name, args, "INVALID_ARGUMENTS")
                self.assertTrue(body["message"].startswith(pointer), body)
                self.assertNotIn("operation_id", body)
        body = self.call_error(s, "exec_command", {"workspace_id": "default", "command": [1]},
                               "INVALID_ARGUMENTS")
        self.assertEqual(body["message"], "/command/0: expected string")


class TestJsonRpcErrors(StdioCase):

    def test_unparseable_line(self):
        s = self.started()
        for raw in [b"garbage", b"{", b'{"jsonrpc":"2.0","id":1,"method":"ping"',
                    b"\xff\xfe{}", b'{"jsonrpc":"2.0","id":7,"method":"p\xc3\x28"}',
                    b"{'jsonrpc':'2.0'}", b"[1,]", b"NaN"]:
            with self.subTest(raw=raw):
                s.send_raw(raw + b"\n")
                resp = s.recv()
                self.assertError(resp, -32700, None)
                self.assertEqual(s.request("ping")["result"], {})

    def test_invalid_requests(self):
        s = self.started()
        cases = [
            (b'{"jsonrpc":"1.0","id":1,"method":"ping"}', 1),
            (b'{"id":2,"method":"ping"}', 2),
            (b'{"jsonrpc":"2.0","id":3}', 3),
            (b'{"jsonrpc":"2.0","id":"four","method":4}', "four"),
            (b'{"jsonrpc":"2.0","id":5,"method":"ping","params":"x"}', 5),
            (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None),
            (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', None),
            (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', None),
            (b'42', None),
            (b'"ping"', None),
            (b'null', None),
        ]
        for raw, rid in cases:
            with self.subTest(raw=raw):
                s.send_raw(raw + b"\n")
                self.assertError(s.recv(), -32600, rid)
        self.assertEqual(s.request("ping")["result"], {})

    def test_unknown_method_and_tool(self):
        s = self.started()
        self.assertError(s.request("no/such/method", rid="m"), -32601, "m")
        self.assertError(s.request("resources/list", rid=10), -32601, 10)
        self.assertError(s.request("tools/call", {"name": "no_such_tool", "arguments": {}},
                                   rid=11), -32602, 11)
        self.assertError(s.request("tools/call", {"arguments": {}}, rid=12), -32602, 12)
        self.assertError(s.request("tools/call", {"name": 5}, rid=13), -32602, 13)

    def test_ids_are_echoed_exactly(self):
        s = self.started()
        for rid in [0, -1, 2 ** 53 + 1, 2 ** 63 - 1, "", "x" * 1000, "\u2603 snow",
                    "a\"b\\c"]:
            with self.subTest(id=rid):
                resp = s.request("ping", rid=rid)
                self.assertEqual(resp["id"], rid)
                self.assertIs(type(resp["id"]), type(rid))

    def test_client_responses_and_notifications_get_no_reply(self):
        s = self.started()
        s.send({"jsonrpc": "2.0", "id": 99, "result": {}})
        s.send({"jsonrpc": "2.0", "id": "r", "error": {"code": 1, "message": "x"}})
        s.notify("notifications/cancelled", {"requestId": 12345})
        s.notify("notifications/progress", {"progressToken": 1, "progress": 1})
        s.notify("tools/list")  # a request method sent as a notification: no reply either
        s.send({"jsonrpc": "2.0", "id": "after", "method": "ping"})
        self.assertEqual(s.recv(), {"jsonrpc": "2.0", "id": "after", "result": {}})

    def test_batches(self):
        batch = [{"jsonrpc": "2.0", "id": "a", "method": "ping"},
                 {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 {"jsonrpc": "2.0", "id": "b", "method": "no/such"}]
        # Only on 2025-03-26: otherwise one -32600 with id null.
        s = self.started("2025-11-25")
        s.send(batch)
        self.assertError(s.recv(), -32600, None)
        s = self.started("2025-03-26")
        s.send(batch)
        replies = s.recv()
        self.assertIsInstance(replies, list)
        by_id = {r["id"]: r for r in replies}
        self.assertEqual(set(by_id), {"a", "b"})
        self.assertEqual(by_id["a"]["result"], {})
        self.assertError(by_id["b"], -32601, "b")
        s.send([])
        self.assertError(s.recv(), -32600, None)
        s.send([{"jsonrpc": "2.0", "method": "notifications/initialized"}])
        s.send({"jsonrpc": "2.0", "id": "after", "method": "ping"})
        self.assertEqual(s.recv()["id"], "after")  # an all-notification batch: no reply

    def test_nul_inside_names_is_not_truncated(self):
        # A JSON string may hold U+0000; "ping\u0000x" is not "ping" (a C string compare would
        # stop at the NUL and take one for the other).
        s = self.started()
        cases = [
            ("method", b'{"jsonrpc":"2.0","id":1,"method":"ping\\u0000x"}', 1, -32601),
            ("tool name", b'{"jsonrpc":"2.0","id":2,"method":"tools/call",'
                          b'"params":{"name":"workspace_info\\u0000x"}}', 2, -32602),
            ("jsonrpc", b'{"jsonrpc":"2.0\\u0000","id":3,"method":"ping"}', 3, -32600),
            ("log level", b'{"jsonrpc":"2.0","id":4,"method":"logging/setLevel",'
                          b'"params":{"level":"debug\\u0000x"}}', 4, -32602),
        ]
        for what, raw, rid, code in cases:
            with self.subTest(where=what):
                s.send_raw(raw + b"\n")
                self.assertError(s.recv_id(rid), code, rid)
        with self.subTest(where="workspace_id"):
            # A NUL inside an argument is data: an unknown workspace, not "default".
            s.send_raw(b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":'
                       b'"workspace_info","arguments":{"workspace_id":"default\\u0000"}}}\n')
            result = s.recv_id(5)["result"]
            self.assertIs(result["isError"], True)
            self.assertEqual(json.loads(result["content"][0]["text"])["code"],
                             "WORKSPACE_NOT_FOUND")
        with self.subTest(where="protocolVersion"):
            # Not a version we support: the preferred one, never "2025-03-26".
            fresh = self.start()
            fresh.send_raw(b'{"jsonrpc":"2.0","id":6,"method":"initialize","params":'
                           b'{"protocolVersion":"2025-03-26\\u0000"}}\n')
            self.assertEqual(fresh.recv_id(6)["result"]["protocolVersion"], "2025-11-25")

    def test_overlong_line(self):
        s = self.started()
        head = b'{"jsonrpc":"2.0","id":"big","method":"ping","params":{"pad":"'
        tail = b'"}}'
        # Exactly 16 MiB is a line like any other (the limit is on longer lines) ...
        exact = head + b"x" * (MAX_LINE - len(head) - len(tail)) + tail
        self.assertEqual(len(exact), MAX_LINE)
        s.send_raw(exact + b"\n")
        self.assertEqual(s.recv_id("big", timeout=60)["result"], {})
        # ... one byte more is -32700 with id null, and reading goes on at the next newline.
        over = head + b"x" * (MAX_LINE + 1 - len(head) - len(tail)) + tail
        self.assertEqual(len(over), MAX_LINE + 1)
        s.send_raw(over + b"\n" + b'{"jsonrpc":"2.0","id":"next","method":"ping"}\n')
        self.assertError(s.recv(timeout=60), -32700, None)
        self.assertEqual(s.recv(), {"jsonrpc": "2.0", "id": "next", "result": {}})
        # Also when the long line arrives in small pieces.
        s.send_raw(b"[" * 1000)
        for _ in range(16):
            s.send_raw(b" " * (1024 * 1024))
        s.send_raw(b"\n")
        self.assertError(s.recv(timeout=60), -32700, None)
        self.assertEqual(s.request("ping")["result"], {})
        self.assertEqual(s.close(), 0)


# ---------------------------------------------------------------------------------------------


class TestBadConfig(unittest.TestCase):
    """Every invalid value of docs/contract/runtime.md §2 stops the start: exit status 2, fast, and
    one JSON log line on stderr, msg "invalid configuration", whose "error" names the flag,
    variable or file and JSON path. Nothing on stdout."""

    @classmethod
    def setUpClass(cls):
        binary()
        cls.dir = tempfile.mkdtemp(prefix="cs-e2e-config-")
        cls.root = os.path.join(cls.dir, "root")
        os.mkdir(cls.root)
        cls.afile = os.path.join(cls.dir, "a-file")
        with open(cls.afile, "w") as f:
            f.write("x")
        cls.home = os.path.join(cls.dir, "home")
        os.mkdir(cls.home)
        os.mkdir(os.path.join(cls.dir, "state"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_server(self, args, env=None):
        env = server_env(os.path.join(self.dir, "state"), dict({"HOME": self.home}, **(env or {})))
        start = time.monotonic()
        try:
            p = subprocess.run([binary()] + args, stdin=subprocess.DEVNULL, capture_output=True,
                               env=env, timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail("%s did not stop within %.0f s" % (args, EXIT_TIMEOUT))
        return p, time.monotonic() - start

    def assertRefused(self, args, env, *names):
        p, _ = self.run_server(args, env)
        err = p.stderr.decode("utf-8", "replace")
        self.assertEqual(p.returncode, 2, "args %r env %r: status %d, stderr %r"
                         % (args, env, p.returncode, err))
        self.assertEqual(p.stdout, b"", "nothing may reach stdout")
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, "exactly one line on stderr, got %r" % err)
        # A JSON log line like every other line on stderr (docs/contract/runtime.md section 2).
        entry = json.loads(lines[0])
        self.assertEqual(entry["level"], "error", entry)
        self.assertEqual(entry["msg"], "invalid configuration", entry)
        text = entry["error"]
        for name in names:
            self.assertIn(name, text)
        return text

    def config(self, doc, name="registry.json"):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    def test_flags_and_variables(self):
        cases = [
            # (args, env, names the message must contain)
            (["--transport", "tcp"], {}, ["--transport", "tcp"]),
            ([], {"CODESPACE_TRANSPORT": "websocket"}, ["CODESPACE_TRANSPORT", "websocket"]),
            (["--http", "--port", "70000"], {}, ["--port", "70000"]),
            (["--http", "--port", "abc"], {}, ["--port", "abc"]),
            (["--http", "--port", "-1"], {}, ["--port"]),
            (["--http"], {"CODESPACE_HTTP_PORT": "65536"}, ["CODESPACE_HTTP_PORT", "65536"]),
            (["--http"], {"CODESPACE_HTTP_PORT": "8x"}, ["CODESPACE_HTTP_PORT"]),
            (["--runner-dir", "/"], {}, ["--runner-dir", '"/"']),
            (["--runner-dir", "/tmp"], {}, ["--runner-dir", "/tmp"]),
            (["--runner-dir", "/var/tmp/"], {}, ["--runner-dir", "/var/tmp"]),
            (["--runner-dir", "relative/dir"], {}, ["--runner-dir"]),
            ([], {"CODESPACE_RUNNER_DIR": "/"}, ["CODESPACE_RUNNER_DIR"]),
            ([], {"CODESPACE_RUNNER_DIR": self.home}, ["CODESPACE_RUNNER_DIR"]),
            ([], {"CODESPACE_PROCESS_TIMEOUT_SECS": "0"}, ["CODESPACE_PROCESS_TIMEOUT_SECS"]),
            ([], {"CODESPACE_PROCESS_TIMEOUT_SECS": "-5"}, ["CODESPACE_PROCESS_TIMEOUT_SECS"]),
            ([], {"CODESPACE_PROCESS_TIMEOUT_SECS": "ten"}, ["CODESPACE_PROCESS_TIMEOUT_SECS"]),
            ([], {"CODESPACE_MAX_PROCESSES": "0"}, ["CODESPACE_MAX_PROCESSES"]),
            ([], {"CODESPACE_MAX_PROCESSES": ""}, ["CODESPACE_MAX_PROCESSES"]),
            (["--runner", "docker"], {}, ["--runner", "docker"]),
            ([], {"CODESPACE_RUNNER": "thread"}, ["CODESPACE_RUNNER"]),
            (["--log-level", "loud"], {}, ["--log-level", "loud"]),
            ([], {"CODESPACE_LOG": "verbose"}, ["CODESPACE_LOG"]),
            ([], {"CODESPACE_REQUIRE_LINUX_SANDBOX": "yes"}, ["CODESPACE_REQUIRE_LINUX_SANDBOX"]),
            (["--workspace", os.path.join(self.dir, "missing")], {}, ["--workspace", "missing"]),
            (["--workspace", self.afile], {}, ["--workspace", self.afile]),
            ([], {"CODESPACE_WORKSPACE": os.path.join(self.dir, "gone")},
             ["CODESPACE_WORKSPACE", "gone"]),
            (["--config", os.path.join(self.dir, "no-such.json")], {}, ["no-such.json"]),
            (["--no-such-flag"], {}, ["--no-such-flag"]),
            (["--port"], {}, ["--port"]),
            (["stray"], {}, ["stray"]),
            (["--http=yes"], {}, ["--http"]),
        ]
        for args, env, names in cases:
            with self.subTest(args=args, env=env):
                self.assertRefused(args, env, *names)

    def test_registry_values(self):
        ok_ws = {"root": self.root}

        def ws(**fields):
            return {"workspaces": {"demo": dict(ok_ws, **fields)}}

        cases = [
            ("profile host-admin", ws(profile="host-admin"), "/workspaces/demo/profile"),
            ("bad network", ws(network="open"), "/workspaces/demo/network"),
            ("unknown environment id", ws(environment="nosuch"), "/workspaces/demo/environment"),
            ("unknown environment kind",
             {"environments": {"box": {"kind": "vm"}}, "workspaces": {}},
             "/environments/box/kind"),
            ("environment without kind", {"environments": {"box": {}}},
             "/environments/box/kind"),
            ("local redefined",
             {"environments": {"local": {"kind": "linux-container"}}},
             "/environments/local/kind"),
            ("relative root", ws(root="relative/dir"), "/workspaces/demo/root"),
            ("missing root", {"workspaces": {"demo": {"profile": "read-only"}}},
             "/workspaces/demo/root"),
            ("root does not exist", ws(root=os.path.join(self.dir, "absent")),
             "/workspaces/demo/root"),
            ("root not a directory", ws(root=self.afile), "/workspaces/demo/root"),
            ("root not a string", ws(root=5), "/workspaces/demo/root"),
            ("empty root", ws(root=""), "/workspaces/demo/root"),
            ("network_allow not an array", ws(network="enabled", network_allow="x"),
             "/workspaces/demo/network_allow"),
            ("workspaces not an object", {"workspaces": []}, "/workspaces"),
            ("document not an object", [], None),
            ("not JSON", '{"workspaces": {', None),
            ("empty file", "", None),
            ("trailing garbage", '{"workspaces": {}} x', None),
        ]
        for label, doc, pointer in cases:
            with self.subTest(case=label):
                path = self.config(doc)
                names = [path] + ([pointer] if pointer else [])
                self.assertRefused(["--config", path], {}, *names)
                # The same through the variable.
                self.assertRefused([], {"CODESPACE_CONFIG": path}, path)

    def test_registry_bad_network_allow_entries(self):
        """Each entry goes through the proxy's own parser at load: a malformed one stops the
        start (exit 2) with one message naming the entry and its JSON path."""
        bad = ["", " example.com", "http://example.com", "a/b", "*", "*.", "x:0", "x:99999",
               "a..b", "a" * 64 + ".com", "0x7f.1", "2130706433", "127.1", "1.2.3.4.5",
               "*.10.0.0.1", "[::1", "user@example.com"]
        for i, entry in enumerate(bad):
            with self.subTest(entry=entry):
                path = self.config({"workspaces": {"demo": {
                    "root": self.root, "profile": "workspace-write", "network": "enabled",
                    "network_allow": ["example.com", "*.example.org", entry]}}})
                text = self.assertRefused(["--config", path], {}, path,
                                          "/workspaces/demo/network_allow/2",
                                          "invalid entry %s" % json.dumps(entry))
                self.assertIn("host name, *.domain or IP literal", text)

    def test_refused_quickly(self):
        path = self.config({"workspaces": {"demo": {"root": self.root, "profile": "host-admin"}}})
        p, elapsed = self.run_server(["--config", path])
        self.assertEqual(p.returncode, 2)
        self.assertLess(elapsed, 3.0)

    def test_flag_wins_over_variable(self):
        # A bad variable is not consulted when its flag is given: the server starts.
        env = server_env(os.path.join(self.dir, "state"),
                         {"HOME": self.home, "CODESPACE_TRANSPORT": "bogus",
                          "CODESPACE_LOG": "bogus"})
        s = StdioServer(["--transport", "stdio", "--log-level", "info", "--workspace", self.root],
                        env=env)
        try:
            self.assertEqual(s.request("ping")["result"], {})
            self.assertEqual(s.close(), 0)
        finally:
            s.kill()

    def test_good_registry_starts(self):
        path = self.config({
            "environments": {"box": {"kind": "linux-container"}},
            "workspaces": {
                "demo": {"root": self.root, "profile": "workspace-write", "network": "enabled",
                         "network_allow": ["example.com", "*.example.org", "127.0.0.1:8080"]},
                "ro": {"root": self.root + "-ro"},
                "boxed": {"root": self.root + "-boxed", "environment": "box"},
            }}, name="good.json")
        for d in (self.root + "-ro", self.root + "-boxed"):  # roots may not overlap
            os.makedirs(d, exist_ok=True)
        env = server_env(os.path.join(self.dir, "state"), {"HOME": self.home})
        s = StdioServer(["--config", path], env=env)
        try:
            s.initialize()
            tools = s.request("tools/list")["result"]["tools"]
            schema = tools[0]["outputSchema"]
            infos = {}
            for wid in ("demo", "ro", "boxed"):
                r = s.request("tools/call", {"name": "workspace_info",
                                             "arguments": {"workspace_id": wid}})["result"]
                self.assertFalse(r["isError"], r)
                jsonschema.Draft202012Validator(schema).validate(r["structuredContent"])
                infos[wid] = r["structuredContent"]
            demo = infos["demo"]["execution"]
            self.assertEqual(demo["network"]["policy"], "enabled")
            self.assertEqual(demo["network"]["allow"],
                             ["example.com", "*.example.org", "127.0.0.1:8080"])
            ro = infos["ro"]
            self.assertEqual(ro["profile"], "read-only")
            self.assertEqual(ro["execution"]["permissions"],
                             {"read": True, "write": False, "exec": False})
            self.assertEqual(ro["execution"]["network"]["policy"], "restricted")
            boxed = infos["boxed"]["execution"]["environment"]
            self.assertEqual(boxed["kind"], "linux-container")
            for k in ("exec_supported", "file_read_supported", "file_write_supported"):
                self.assertIs(boxed[k], False, k)
            for info in infos.values():
                self.assertEqual(find_key(info, "environment_id"), [])
            self.assertEqual(s.close(), 0)
        finally:
            s.kill()


if __name__ == "__main__":
    unittest.main()
