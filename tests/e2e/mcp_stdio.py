"""A codespace-mcp server over stdio for tests: one reader thread per pipe, synchronous
requests matched by id, tool results checked for the contract's shape (docs/contract/tools.md §2).

Used by tests/e2e/test_files.py, tests/e2e/test_patch.py, tests/e2e/test_process*.py and
tests/patch_diff/run_diff.py. Several requests may be outstanding at once: start() sends one and
returns its id, wait() collects that reply (replies to other ids are kept until asked for), and
call_start() / call_wait() do the same for tools/call. Standard library only (/usr/bin/python3).

CS_E2E_RUNNER (in-process or uds; the *_uds CTest copies set uds) adds `--runner <value>` to
every server the e2e tests start (runner_args()), and runner() is what workspace_info must then
report. CS_E2E_RUNNER=tcp (the *_tcp copies) starts a `codespace-runtime --listen` per server in
a network namespace joined by a veth pair, serving that server's roots (RemoteWorker). It is not a CODESPACE_* variable because the servers' environments drop those.
"""

import json
import os
import queue
import subprocess
import threading

REPLY_TIMEOUT = 30.0  # seconds; generous for the ASan build on 2 cores


def runner():
    """The runner the e2e servers run with: CS_E2E_RUNNER, else the default "in-process"
    (workspace_info reports "tcp" as "remote")."""
    value = os.environ.get("CS_E2E_RUNNER") or "in-process"
    return "remote" if value == "tcp" else value


def runner_args():
    """["--runner", CS_E2E_RUNNER] when the variable is set, else [] (the server's default).
    For tcp, StdioServer starts a worker of its own (RemoteWorker) and passes its address."""
    value = os.environ.get("CS_E2E_RUNNER")
    if value == "tcp":
        return []
    return ["--runner", value] if value else []


# ---- CS_E2E_RUNNER=tcp: a codespace-runtime --listen per server, in a network namespace of its
# own joined to ours by a veth pair (docs/scale-out.md). The namespace is made once per test
# process and deleted at its exit; plaintext, as the link is private to this machine. ----

_NETNS = {}


def _netns():
    """(namespace, worker address): made on first use, deleted at exit."""
    if _NETNS:
        return _NETNS["ns"], _NETNS["addr"]
    import atexit
    import random
    tag = "%x%04x" % (os.getpid() % 0xfff, random.randrange(0x10000))
    ns, host_dev, ns_dev = "cse-" + tag, "veh" + tag, "ven" + tag
    # A /30 no interface uses yet: two suites running at once, or a run killed before its exit
    # handlers removed its pair, would otherwise route one worker's address to the other's veth
    # (the gateway then sees "connection refused").
    used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                          text=True).stdout
    free = [k for k in range(256) if " 10.233.%d." % k not in used]
    n = random.choice(free or list(range(256)))
    host_addr, addr = "10.233.%d.1" % n, "10.233.%d.2" % n

    def run(*argv):
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    run("ip", "netns", "add", ns)
    atexit.register(subprocess.run, ["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
    atexit.register(subprocess.run, ["ip", "link", "del", host_dev], stderr=subprocess.DEVNULL)
    run("ip", "link", "add", host_dev, "type", "veth", "peer", "name", ns_dev, "netns", ns)
    run("ip", "addr", "add", host_addr + "/30", "dev", host_dev)
    run("ip", "link", "set", host_dev, "up")
    run("ip", "-n", ns, "addr", "add", addr + "/30", "dev", ns_dev)
    run("ip", "-n", ns, "link", "set", ns_dev, "up")
    run("ip", "-n", ns, "link", "set", "lo", "up")
    _NETNS.update(ns=ns, addr=addr)
    return ns, addr


def _roots(args):
    """The workspace roots a gateway started with args will serve (--workspace, --config)."""
    roots = []
    args = list(args)
    for i, a in enumerate(args):
        val = None
        if a in ("--workspace", "--config") and i + 1 < len(args):
            key, val = a, args[i + 1]
        elif a.startswith("--workspace=") or a.startswith("--config="):
            key, val = a.split("=", 1)
        if val is None:
            continue
        if key == "--workspace":
            roots.append(val)
            continue
        try:
            with open(val, encoding="utf-8") as f:
                doc = json.load(f)
            for ws in (doc.get("workspaces") or {}).values():
                if isinstance(ws, dict) and isinstance(ws.get("root"), str):
                    roots.append(ws["root"])
        except (OSError, ValueError, AttributeError):
            pass
    out = []
    for r in roots:
        r = os.path.realpath(r)
        if os.path.isdir(r) and r not in out:
            out.append(r)
    return out


class RemoteWorker:
    """A codespace-runtime --listen for one gateway: its roots, its limits and test switches."""

    def __init__(self, binary, args, env, operations_db=None):
        self.proc = None
        ns, addr = _netns()
        self.url = "tcp://%s:1" % addr  # nothing listens there: the gateway fails as it should
        roots = _roots(args)
        if not roots:
            return
        d = os.path.dirname(binary)
        runtime = os.path.join(d, "codespace-runtime")
        helper = os.path.join(d, "codespace-linux-sandbox")
        argv = ["ip", "netns", "exec", ns, runtime, "--listen", addr + ":0", "--plaintext"]
        for r in roots:
            argv += ["--root", r]
        if os.geteuid() == 0:
            ids = env.get("CODESPACE_SANDBOX_UID") or "65533"
            argv += ["--sandbox", helper, "--sandbox-uid", ids,
                     "--sandbox-gid", env.get("CODESPACE_SANDBOX_GID") or ids]
        # Each exec carries its workspace's limits; the worker's own flags are its file
        # operations' time limit (30 s, or the gateway's smaller process timeout) and its
        # runner-wide cap (its default, 1024).
        if operations_db:  # the worker's own database (deny identities across restarts)
            argv += ["--operations-db", operations_db]
        secs = env.get("CODESPACE_PROCESS_TIMEOUT_SECS") or "30"
        if secs.isdigit():
            argv += ["--timeout-ms", str(min(int(secs), 30) * 1000)]
        wenv = {k: v for k, v in env.items() if not k.startswith("CODESPACE_")
                or k.startswith("CODESPACE_TEST_") or k == "CODESPACE_NETNS_GRACE_SECS"}
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=wenv)
        line = self.proc.stderr.readline()
        try:
            self.url = "tcp://%s:%d" % (addr, json.loads(line)["port"])
        except (ValueError, KeyError, TypeError):
            self.close()
            raise AssertionError("the tcp worker did not start: %r" % line)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for _ in iter(self.proc.stderr.readline, b""):
            pass

    def args(self):
        return ["--runner", self.url, "--runner-tls", "off"]

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def sanitized(path):
    """True when the binary at path carries AddressSanitizer's runtime (the debug preset links
    libasan, clang's fuzz preset links its runtime in: both define __asan_init)."""
    tail = b""
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                return False
            if b"__asan_init" in tail + block:
                return True
            tail = block[-16:]


def sanitized_pid(pid):
    """sanitized() for a running process: ASan's quarantine and shadow make its RSS no measure
    of ours."""
    return sanitized("/proc/%d/exe" % pid)


def proc_stat(pid):
    """(state, ppid) of a host process from /proc/<pid>/stat, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return None
    rest = st[st.rindex(")") + 2:].split()
    return rest[0], int(rest[1])


class ToolError(Exception):
    """A tool answered isError: the error body is in .body, its code in .code."""

    def __init__(self, body):
        super().__init__("%s: %s" % (body.get("code"), body.get("message")))
        self.body = body
        self.code = body.get("code")


def log_records(lines, msg):
    """The JSON log lines among lines (a list another thread may append to) whose "msg" is msg;
    lines that are not JSON objects are skipped."""
    out = []
    for line in list(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("msg") == msg:
            out.append(rec)
    return out


class StdioServer:
    """Starts binary with args, initializes it and sends notifications/initialized.

    The environment is the caller's minus every CODESPACE_* variable, with XDG_STATE_HOME set to
    state_dir (so nothing is written under $HOME) and extra_env on top."""

    def __init__(self, binary, args, state_dir, extra_env=None, client="e2e", worker_db=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env["XDG_STATE_HOME"] = state_dir
        env.update(extra_env or {})
        self.worker = None
        extra = runner_args()
        if os.environ.get("CS_E2E_RUNNER") == "tcp" and "--runner" not in args:
            self.worker = RemoteWorker(binary, args, env, worker_db)
            extra = self.worker.args()
        self.proc = subprocess.Popen([binary] + list(args) + extra, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.replies = queue.Queue()
        self.stash = {}  # replies that arrived while another id was awaited
        self.stderr = []
        self.next_id = 1
        self.readers = [threading.Thread(target=self._out, daemon=True),
                        threading.Thread(target=self._err, daemon=True)]
        for t in self.readers:
            t.start()
        init = self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                           "clientInfo": {"name": client, "version": "1"}})
        if "result" not in init:
            raise AssertionError("initialize failed: %r" % init)
        self.init_result = init["result"]
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _out(self):
        for raw in iter(self.proc.stdout.readline, b""):
            self.replies.put(json.loads(raw))
        self.replies.put(EOFError)

    def _err(self):
        try:
            for raw in iter(self.proc.stderr.readline, b""):
                self.stderr.append(raw.decode("utf-8", "replace"))
        except (ValueError, OSError):
            pass  # close() closed the pipe under this reader: its lines so far are kept

    def log_records(self, msg):
        """The server's JSON log lines so far whose "msg" is msg."""
        return log_records(self.stderr, msg)

    def send(self, msg):
        self.proc.stdin.write(json.dumps(msg).encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def start(self, method, params):
        """Sends a request without waiting; returns its id for wait()."""
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def wait(self, rid, timeout=REPLY_TIMEOUT, what="request"):
        """The reply to request rid; replies to other ids are kept for their own wait()."""
        if rid in self.stash:
            return self.stash.pop(rid)
        while True:
            try:
                msg = self.replies.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError("no reply to %s within %.0f s; stderr:\n%s"
                                     % (what, timeout, "".join(self.stderr[-20:])))
            if msg is EOFError:
                self.replies.put(EOFError)  # later waits see the exit too
                raise AssertionError("server exited; stderr:\n" + "".join(self.stderr[-20:]))
            if msg.get("id") == rid:
                return msg
            if "id" in msg:
                self.stash[msg["id"]] = msg

    def poll(self, rid):
        """The reply to rid when it has arrived, else None (never blocks)."""
        while rid not in self.stash:
            try:
                msg = self.replies.get_nowait()
            except queue.Empty:
                return None
            if msg is EOFError:
                self.replies.put(EOFError)
                return None
            if "id" in msg:
                self.stash[msg["id"]] = msg
        return self.stash.pop(rid)

    def request(self, method, params):
        return self.wait(self.start(method, params), what=method)

    @staticmethod
    def tool_result(resp):
        """(structuredContent, None) or (None, error body) of a tools/call reply, checked for
        section 2's shape."""
        assert "result" in resp, resp
        res = resp["result"]
        assert len(res["content"]) == 1 and res["content"][0]["type"] == "text", res
        text = json.loads(res["content"][0]["text"])
        if res.get("isError"):
            assert "structuredContent" not in res, res
            assert set(text) <= {"code", "message", "operation_id"}, text
            return None, text
        assert text == res["structuredContent"], res
        return res["structuredContent"], None

    def call_raw(self, tool, args):
        """(structuredContent, None) or (None, error body), checked for section 2's shape."""
        return self.tool_result(self.request("tools/call", {"name": tool, "arguments": args}))

    def call_start(self, tool, args):
        """Sends tools/call without waiting; returns the id for call_wait()."""
        return self.start("tools/call", {"name": tool, "arguments": args})

    def call_wait(self, rid, timeout=REPLY_TIMEOUT):
        """(structuredContent, None) or (None, error body) of the call started as rid."""
        return self.tool_result(self.wait(rid, timeout, "tools/call"))

    def call(self, tool, args):
        out, err = self.call_raw(tool, args)
        if err is not None:
            raise ToolError(err)
        return out

    def kill(self):
        """SIGKILL, as a crash would; the exit status is not checked (close() after it either)."""
        self.killed = True
        self.proc.kill()
        self.proc.wait()
        if self.worker:
            self.worker.close()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass

    def close(self):
        """EOF on stdin, then the exit status (0 expected: a sanitizer finding is not 0)."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.worker:
            self.worker.close()
        # The readers end at EOF, once every holder of the pipes is gone: their last lines are
        # kept (a child still holding a pipe only delays this, by at most the timeout).
        for t in getattr(self, "readers", ()):
            t.join(5)
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()
        if self.proc.returncode != 0 and not getattr(self, "killed", False):
            raise AssertionError("server exited with %s; stderr:\n%s"
                                 % (self.proc.returncode, "".join(self.stderr[-30:])))
