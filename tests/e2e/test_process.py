#!/usr/bin/python3
"""End-to-end tests of the process tools over stdio (docs/contract/tools.md section 3: exec_command,
write_stdin, read_process, process_status, process_resize, terminate_process;
docs/contract/runtime.md section 5: lifetime, environment, output ring, time limit, live-process
cap, workspace lease).

Starts the real binary (CODESPACE_MCP_BIN) with `--workspace <tmp>/ws` (workspace "default"),
`--operations-db :memory:` and a `--config` registry adding "ro" (read-only), "box" (a
linux-container environment) and "w2" (a second workspace-write root). The server's environment
carries FOO_SECRET, which no child may see.

Processes this file starts that could outlive a test are `sleep` with a unique duration
(uniq(n): 9nn.<this test's pid>), so a /proc scan of every process's argv tells whether one
survived; tearDownClass SIGKILLs any such leftover by pid, so a failure never leaves sleeps
behind. Long requests (read_process with wait_ms) are sent with StdioServer.call_start so other
calls can be answered while they are outstanding.

Standard library only. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_process          (from tests/e2e)
"""
import json
import os
import re
import shutil
import signal
import tempfile
import time
import unittest

import mcp_stdio

PROC_ID = re.compile(r"^proc-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
UNKNOWN_ID = "proc-00000000-0000-4000-8000-000000000000"
RING = 1048576  # the default output ring (docs/operations.md, "Process limits")
CAPS = {
    "handles": True, "survives_request_end": True, "write_stdin": True,
    "incremental_read": True, "terminate": True, "output_combined": True, "wait": True,
    "tty": {"supported": True, "default": False, "initial_rows": 24, "initial_cols": 80,
            "resize_supported": True},
    "lifetime": {"owner": "runner", "client_disconnect": "keep_running",
                 "runner_disconnect": "terminate", "gateway_shutdown": "terminate",
                 "restart_recovery": "none"},
    "limits": {"max_live_processes": 8, "timeout_ms": 1800000, "output_ring_bytes": RING},
}
PIPE_ENV = {"PATH", "HOME", "LANG", "TMPDIR", "TERM", "PAGER", "GIT_PAGER",
            "GIT_TERMINAL_PROMPT", "NO_COLOR", "CI"}



sanitized = mcp_stdio.sanitized


def binary():
    path = os.environ.get("CODESPACE_MCP_BIN")
    if not path:
        raise unittest.SkipTest("CODESPACE_MCP_BIN is not set")
    if not os.access(path, os.X_OK):
        raise RuntimeError("CODESPACE_MCP_BIN=%s is not executable" % path)
    return path


_BIN = os.environ.get("CODESPACE_MCP_BIN")
# Scale for the generous time bounds: a sanitizer build on a busy 2-core machine is slower.
SLOW = 3.0 if "ASAN_OPTIONS" in os.environ or (
    _BIN and os.access(_BIN, os.R_OK) and sanitized(_BIN)) else 1.0


# ---- /proc helpers (shared with test_process_http and test_process_soak) --------------------


def uniq(n):
    """A sleep duration no other test run uses: 9nn.<pid>, e.g. '907.12345'."""
    return "%d.%d" % (900 + n, os.getpid())


def pids_with(arg):
    """Pids of live (non-zombie) processes having arg as one of their argv words."""
    want = arg.encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if want in words:
            out.append(int(d))
    return out


def wait_until(pred, timeout, step=0.02):
    """Polls pred until it is true (returns True) or timeout seconds pass (returns False)."""
    end = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() > end:
            return False
        time.sleep(step)


def kill_leftovers(prefix_pid=None):
    """SIGKILLs, by pid, every sleep this test process started (argv 9nn.<our pid>)."""
    tag = ".%d" % (prefix_pid or os.getpid())
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if any(re.fullmatch(rb"9\d\d" + re.escape(tag.encode()), w) for w in words):
            try:
                os.kill(int(d), signal.SIGKILL)
            except OSError:
                pass


def children(pid):
    """Direct children of pid (all threads)."""
    out = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def zombies(pid):
    """Children of pid that are zombies (state Z)."""
    out = []
    for c in children(pid):
        try:
            with open("/proc/%d/stat" % c) as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] == "Z":
            out.append(c)
    return out


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def seq_text(n):
    return "".join("%d\n" % i for i in range(1, n + 1))


# ---- the client side ----------------------------------------------------------------------


class Server(mcp_stdio.StdioServer):
    def __init__(self, args, state_dir, extra_env=None):
        super().__init__(binary(), args, state_dir, extra_env, client="test_process")


class ProcCase(unittest.TestCase):
    """Helpers; subclasses set cls.srv (a Server) and may use self.live for cleanup."""

    srv = None

    def setUp(self):
        self.live = []

    def tearDown(self):
        # A failed test must not keep a workspace's lease for the next one.
        for pid in self.live:
            try:
                self.srv.call_raw("terminate_process", {"process_id": pid})
            except AssertionError:
                pass

    def exec_raw(self, command, ws="default", **kw):
        args = {"workspace_id": ws, "command": command}
        args.update(kw)
        return self.srv.call_raw("exec_command", args)

    def started(self, command, ws="default", **kw):
        out, err = self.exec_raw(command, ws, **kw)
        self.assertIsNone(err, "exec_command %r: %r" % (command, err))
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        self.assertRegex(out["process_id"], PROC_ID)
        if out.get("state") != "exited":
            self.live.append(out["process_id"])
        return out

    def ran(self, command, ws="default", yield_ms=20000, **kw):
        """Runs command with yield_ms; it must have exited within that time."""
        out = self.started(command, ws, yield_ms=yield_ms, **kw)
        self.assertEqual(out["state"], "exited", out)
        return out

    def refused(self, code, tool, args):
        out, err = self.srv.call_raw(tool, args)
        self.assertIsNone(out, "%s %r: expected %s, got %r" % (tool, args, code, out))
        self.assertEqual(err["code"], code, err)
        self.assertNotIn("operation_id", err)
        return err

    def status(self, pid):
        return self.srv.call("process_status", {"process_id": pid})

    def read(self, pid, cursor=None, wait_ms=None):
        args = {"process_id": pid}
        if cursor is not None:
            args["cursor"] = cursor
        if wait_ms is not None:
            args["wait_ms"] = wait_ms
        out = self.srv.call("read_process", args)
        self.check_read(out, pid)
        return out

    def check_read(self, out, pid):
        self.assertEqual(set(out) - {"process_id", "cursor", "chunk", "eof", "output_lost",
                                     "retained_from"}, set(), out)
        self.assertEqual(out["process_id"], pid)
        self.assertLessEqual(out["retained_from"], out["cursor"], out)
        self.assertEqual(out["output_lost"], out["retained_from"] > 0, out)

    def drain(self, pid, cursor=0, timeout=20.0, until=None):
        """Reads with wait_ms from cursor until eof (or until `until` is in the text read);
        returns (text, last reply)."""
        text = ""
        end = time.monotonic() + timeout * SLOW
        while True:
            out = self.read(pid, cursor, 2000)
            text += out["chunk"]
            cursor = out["cursor"]
            if out["eof"] or (until is not None and until in text):
                return text, out
            if time.monotonic() > end:
                self.fail("no eof for %s within %.0f s; read so far %r" % (pid, timeout, text))

    def wait_exited(self, pid, timeout=20.0):
        st = None

        def done():
            nonlocal st
            st = self.status(pid)
            return st["state"] == "exited"

        self.assertTrue(wait_until(done, timeout * SLOW, 0.05), "still running: %r" % st)
        return st

    def terminate(self, pid):
        t0 = time.monotonic()
        out = self.srv.call("terminate_process", {"process_id": pid})
        elapsed = time.monotonic() - t0
        self.assertEqual(out, {"ok": True, "state": "exited"})
        if pid in self.live:
            self.live.remove(pid)
        return elapsed

    def assert_gone(self, arg, timeout=3.0):
        self.assertTrue(wait_until(lambda: not pids_with(arg), timeout * SLOW),
                        "a process with argv %r survived: %r" % (arg, pids_with(arg)))

    def assert_no_zombies(self):
        pid = self.srv.proc.pid
        self.assertTrue(wait_until(lambda: not zombies(pid), 2.0 * SLOW),
                        "zombie children of the server: %r" % zombies(pid))

    def wait_running(self, arg, timeout=5.0):
        ok = wait_until(lambda: pids_with(arg), timeout * SLOW)
        self.assertTrue(ok, "no process with argv %r appeared" % arg)
        return pids_with(arg)[0]


def make_tree(prefix, names):
    tmp = os.path.realpath(tempfile.mkdtemp(prefix=prefix))
    roots = {}
    for n in names:
        roots[n] = os.path.join(tmp, n)
        os.makedirs(roots[n])
    state = os.path.join(tmp, "state")
    os.makedirs(state)
    return tmp, roots, state


class ProcessCase(ProcCase):
    """One server for the class (FOO_SECRET in its environment)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp, roots, state = make_tree("cs-e2e-proc-", ("ws", "ro", "box", "w2"))
        cls.ws = roots["ws"]
        reg = {"environments": {"boxenv": {"kind": "linux-container"}},
               "workspaces": {"ro": {"root": roots["ro"], "profile": "read-only"},
                              "box": {"root": roots["box"], "environment": "boxenv",
                                      "profile": "workspace-write"},
                              "w2": {"root": roots["w2"], "profile": "workspace-write"}}}
        registry = os.path.join(cls.tmp, "registry.json")
        with open(registry, "w") as f:
            json.dump(reg, f)
        with open(os.path.join(cls.ws, "hello.txt"), "w") as f:
            f.write("hello\n")
        cls.srv = Server(["--workspace", cls.ws, "--operations-db", ":memory:",
                          "--config", registry], state, {"FOO_SECRET": "x"})

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.close()
        finally:
            kill_leftovers()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- basics ----

    def test_echo_output_and_exit_code(self):
        out = self.ran(["echo", "hello"])
        self.assertEqual(set(out), {"process_id", "dispatch_status", "state", "output", "cursor",
                                    "output_lost", "exit_code", "termination"}, out)
        self.assertEqual(out["output"], "hello\n")
        self.assertEqual((out["cursor"], out["output_lost"]), (6, False))
        self.assertEqual((out["exit_code"], out["termination"]), (0, "exited"))
        pid = out["process_id"]
        st = self.status(pid)
        self.assertEqual(st, {"process_id": pid, "state": "exited", "exit_code": 0,
                              "termination": "exited", "output_total": 6,
                              "output_retained_from": 0, "eof": True, "tty": False})
        r = self.read(pid)
        self.assertEqual((r["chunk"], r["cursor"], r["eof"], r["output_lost"],
                          r["retained_from"]), ("hello\n", 6, True, False, 0))
        r = self.read(pid, 6)
        self.assertEqual((r["chunk"], r["cursor"], r["eof"]), ("", 6, True))
        r = self.read(pid, 2)
        self.assertEqual((r["chunk"], r["cursor"]), ("llo\n", 6))
        # A non-zero exit code, and a read that waits on an exited process answers at once.
        out = self.ran(["sh", "-c", "exit 3"])
        self.assertEqual((out["exit_code"], out["termination"], out["output"]), (3, "exited", ""))
        t0 = time.monotonic()
        r = self.read(out["process_id"], 0, 20000)
        self.assertLess(time.monotonic() - t0, 5 * SLOW)
        self.assertEqual((r["chunk"], r["eof"]), ("", True))
        self.assert_no_zombies()

    def test_yield_zero_and_running_yield(self):
        out = self.started(["sleep", uniq(1)])
        self.assertEqual(set(out), {"process_id", "dispatch_status"}, out)
        pid = out["process_id"]
        st = self.status(pid)
        self.assertEqual(st["state"], "running")
        for k in ("exit_code", "termination", "signal"):
            self.assertNotIn(k, st)
        self.assertEqual((st["tty"], st["eof"], st["output_total"]), (False, False, 0))
        self.terminate(pid)
        # yield_ms on a process that outlives it: state running, no exit fields.
        t0 = time.monotonic()
        out = self.started(["sleep", uniq(2)], yield_ms=300)
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 0.25)
        self.assertLess(elapsed, 5 * SLOW)
        self.assertEqual(out["state"], "running", out)
        self.assertEqual((out["output"], out["cursor"], out["output_lost"]), ("", 0, False))
        self.assertNotIn("exit_code", out)
        self.assertNotIn("termination", out)
        self.terminate(out["process_id"])
        self.assert_gone(uniq(2))

    def test_stdout_and_stderr_in_one_stream(self):
        out = self.ran(["sh", "-c", "echo to-out; echo to-err >&2; echo again-out"])
        self.assertEqual(sorted(out["output"].splitlines()), ["again-out", "to-err", "to-out"])
        self.assertEqual(out["exit_code"], 0)

    def test_stdin_round_trip_and_close(self):
        pid = self.started(["cat"])["process_id"]
        self.assertEqual(self.srv.call("write_stdin", {"process_id": pid, "data": "hello\n"}),
                         {"ok": True, "bytes_written": 6})
        text, r = self.drain(pid, 0, until="hello\n")
        self.assertEqual(text, "hello\n")
        self.assertFalse(r["eof"])
        data = "h\u00e9llo \u2713\n"  # 11 bytes of UTF-8
        self.assertEqual(self.srv.call("write_stdin", {"process_id": pid, "data": data}),
                         {"ok": True, "bytes_written": 11})
        self.assertEqual(self.srv.call("write_stdin",
                                       {"process_id": pid, "data": "bye", "close": True}),
                         {"ok": True, "bytes_written": 3})
        text, r = self.drain(pid, r["cursor"])
        self.assertEqual(text, data + "bye")
        self.assertEqual(r["cursor"], 6 + 11 + 3)
        st = self.wait_exited(pid)
        self.assertEqual((st["exit_code"], st["termination"]), (0, "exited"))
        self.live.remove(pid)
        # stdin closed, then exited: both PROCESS_NOT_FOUND.
        self.refused("PROCESS_NOT_FOUND", "write_stdin", {"process_id": pid, "data": "x"})
        # Closed but still running: PROCESS_NOT_FOUND too.
        pid = self.started(["sh", "-c", "cat; sleep %s" % uniq(3)])["process_id"]
        self.srv.call("write_stdin", {"process_id": pid, "data": "", "close": True})
        self.refused("PROCESS_NOT_FOUND", "write_stdin", {"process_id": pid, "data": "x"})
        self.assertEqual(self.status(pid)["state"], "running")
        self.terminate(pid)

    def test_write_stdin_waits_for_the_pipe_to_drain(self):
        # 300 KB is more than a pipe holds, and the command reads nothing for 0.5 s: the write
        # completes later, while other calls are answered.
        pid = self.started(["sh", "-c", "sleep 0.5; exec wc -c"])["process_id"]
        t0 = time.monotonic()
        rid = self.srv.call_start("write_stdin", {"process_id": pid, "data": "x" * 300000,
                                                  "close": True})
        self.assertEqual(self.srv.request("ping", {}).get("result"), {})
        self.assertEqual(self.status(pid)["state"], "running")
        out, err = self.srv.call_wait(rid)
        self.assertIsNone(err, err)
        self.assertEqual(out, {"ok": True, "bytes_written": 300000})
        self.assertGreaterEqual(time.monotonic() - t0, 0.4)
        text, _ = self.drain(pid)
        self.assertEqual(text.strip(), "300000")
        self.live.remove(pid)

    def test_output_ring_keeps_the_tail(self):
        n = 200000
        expected = seq_text(n)  # 1,288,895 bytes, every position identifiable
        total = len(expected)
        out = self.ran(["seq", "1", str(n)])
        self.assertEqual((out["exit_code"], out["cursor"], out["output_lost"]),
                         (0, total, True))
        self.assertEqual(out["output"], expected[total - RING:])
        pid = out["process_id"]
        r = self.read(pid, 0)
        self.assertEqual(r["retained_from"], total - RING)
        self.assertTrue(r["output_lost"])
        self.assertEqual(r["chunk"], expected[total - RING:])
        self.assertEqual((r["cursor"], r["eof"]), (total, True))
        r = self.read(pid, total - 14)
        self.assertEqual(r["chunk"], expected[-14:])
        self.assertEqual(r["chunk"], "199999\n200000\n")
        st = self.status(pid)
        self.assertEqual((st["output_total"], st["output_retained_from"]), (total, total - RING))

    def test_utf8_held_back_while_running_lossy_at_exit(self):
        # 'a', then the first two bytes of U+2713; the last byte comes after a line on stdin.
        pid = self.started(["sh", "-c", r"printf 'a\342\234'; read x; printf '\223b'"])[
            "process_id"]
        text, r = self.drain(pid, 0, until="a")
        self.assertEqual((text, r["cursor"]), ("a", 1))
        st = self.status(pid)
        self.assertTrue(wait_until(lambda: self.status(pid)["output_total"] == 3, 5 * SLOW))
        r = self.read(pid, 1)
        self.assertEqual((r["chunk"], r["cursor"], r["eof"]), ("", 1, False), st)
        self.srv.call("write_stdin", {"process_id": pid, "data": "\n"})
        text, r = self.drain(pid, 1)
        self.assertEqual((text, r["cursor"]), ("\u2713b", 5))
        self.live.remove(pid)
        # At exit an invalid or truncated sequence is replaced, never held back.
        out = self.ran(["sh", "-c", r"printf 'x\377y\342\234'"])
        self.assertTrue(out["output"].startswith("x\ufffdy\ufffd"), out)
        self.assertEqual(out["cursor"], 5)
        r = self.read(out["process_id"], 0)
        self.assertEqual((r["chunk"], r["cursor"], r["eof"]), (out["output"], 5, True))

    # ---- environment and descriptors ----

    def test_environment_and_cwd(self):
        out = self.ran(["env"])
        env = dict(line.split("=", 1) for line in out["output"].splitlines())
        self.assertNotIn("FOO_SECRET", env)
        self.assertNotIn("XDG_STATE_HOME", env)
        self.assertEqual(set(env), PIPE_ENV, env)
        self.assertEqual(env["HOME"], self.ws)
        self.assertEqual(env["LANG"], "C.UTF-8")
        self.assertEqual(env["TERM"], "dumb")
        for k, v in (("PAGER", "cat"), ("GIT_PAGER", "cat"), ("GIT_TERMINAL_PROMPT", "0"),
                     ("NO_COLOR", "1"), ("CI", "1")):
            self.assertEqual(env[k], v, k)
        self.assertTrue(env["PATH"] and env["TMPDIR"], env)
        out = self.ran(["pwd"])
        self.assertEqual(out["output"], self.ws + "\n")
        out = self.ran(["env"], tty=True)
        env = dict(line.split("=", 1) for line in out["output"].replace("\r", "").splitlines())
        self.assertEqual(env["TERM"], "xterm-256color")
        self.assertNotIn("NO_COLOR", env)
        self.assertNotIn("FOO_SECRET", env)
        self.assertEqual(set(env), PIPE_ENV - {"NO_COLOR"}, env)

    def test_only_three_descriptors_and_none_of_the_server(self):
        out = self.ran(["sh", "-c", "ls /proc/$$/fd"])
        self.assertEqual(sorted(out["output"].split()), ["0", "1", "2"], out)
        out = self.ran(["sh", "-c", "readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2"])
        links = out["output"].split()
        self.assertEqual(len(links), 3, out)
        srv = self.srv.proc.pid
        server_std = {os.readlink("/proc/%d/fd/%d" % (srv, fd)) for fd in (0, 1, 2)}
        self.assertEqual(set(links) & server_std, set(), (links, server_std))
        for link in links:
            self.assertTrue(link.startswith("pipe:"), links)

    # ---- errors ----

    def test_invalid_command(self):
        self.refused("INVALID_COMMAND", "exec_command", {"workspace_id": "default",
                                                         "command": []})
        self.refused("INVALID_COMMAND", "exec_command", {"workspace_id": "default",
                                                         "command": [""]})
        self.refused("INVALID_COMMAND", "exec_command", {"workspace_id": "default",
                                                         "command": ["", "x"]})
        self.refused("INVALID_ARGUMENTS", "exec_command", {"workspace_id": "default"})
        self.refused("INVALID_ARGUMENTS", "exec_command", {"workspace_id": "default",
                                                           "command": ["echo", 1]})
        self.refused("INVALID_ARGUMENTS", "exec_command", {"workspace_id": "default",
                                                           "command": ["true"],
                                                           "yield_ms": 30001})
        # Check order: the workspace and the profile come before the command.
        self.refused("WORKSPACE_NOT_FOUND", "exec_command", {"workspace_id": "nope",
                                                             "command": []})
        self.refused("UNAUTHORIZED", "exec_command", {"workspace_id": "ro", "command": []})
        # The lease is free afterwards.
        self.ran(["true"])

    def test_unknown_process_ids(self):
        for pid in (UNKNOWN_ID, "abc", ""):
            self.refused("PROCESS_NOT_FOUND", "read_process", {"process_id": pid})
            self.refused("PROCESS_NOT_FOUND", "process_status", {"process_id": pid})
            self.refused("PROCESS_NOT_FOUND", "write_stdin", {"process_id": pid, "data": "x"})
            self.refused("PROCESS_NOT_FOUND", "terminate_process", {"process_id": pid})
            self.refused("PROCESS_NOT_FOUND", "process_resize",
                         {"process_id": pid, "rows": 10, "cols": 10})

    def test_read_only_and_container_workspaces(self):
        err = self.refused("UNAUTHORIZED", "exec_command", {"workspace_id": "ro",
                                                            "command": ["true"]})
        self.assertTrue(err["message"])
        self.refused("UNAUTHORIZED", "exec_command", {"workspace_id": "box",
                                                      "command": ["true"]})
        self.refused("WORKSPACE_NOT_FOUND", "exec_command", {"workspace_id": "nope",
                                                             "command": ["true"]})

    def test_missing_executable_releases_the_lease(self):
        for argv in (["cs-no-such-program-%d" % os.getpid()], ["/nonexistent/bin/x"],
                     [self.ws]):  # a directory
            err = self.refused("PROCESS_SPAWN_FAILED", "exec_command",
                               {"workspace_id": "default", "command": argv})
            self.assertTrue(err["message"])
            out = self.ran(["echo", "after"])
            self.assertEqual(out["output"], "after\n")

    def test_workspace_info_process(self):
        info = self.srv.call("workspace_info", {"workspace_id": "default"})
        proc = info["execution"]["process"]
        self.assertEqual(proc, {"available": True, "capabilities": CAPS})
        info = self.srv.call("workspace_info", {"workspace_id": "ro"})
        self.assertEqual(info["execution"]["process"], {"available": False})
        info = self.srv.call("workspace_info", {"workspace_id": "box"})
        self.assertEqual(info["execution"]["process"], {"available": False})

    # ---- the workspace lease ----

    def test_lease_read_find_work_mutations_busy(self):
        pid = self.started(["sleep", uniq(10)])["process_id"]
        r = self.srv.call("read", {"workspace_id": "default", "path": "hello.txt"})
        self.assertIn("hello", json.dumps(r))
        f = self.srv.call("find", {"workspace_id": "default"})
        self.assertIn("hello.txt", json.dumps(f))
        patch = "*** Begin Patch\n*** Add File: added.txt\n+new\n*** End Patch\n"
        t0 = time.monotonic()
        self.refused("WORKSPACE_BUSY", "apply_patch", {"workspace_id": "default",
                                                       "patch": patch})
        self.refused("WORKSPACE_BUSY", "exec_command", {"workspace_id": "default",
                                                        "command": ["true"]})
        self.refused("WORKSPACE_BUSY", "exec_command", {"workspace_id": "default",
                                                        "command": ["true"], "yield_ms": 5000})
        self.assertLess(time.monotonic() - t0, 3 * SLOW, "WORKSPACE_BUSY must come at once")
        # Check order: INVALID_COMMAND comes before WORKSPACE_BUSY.
        self.refused("INVALID_COMMAND", "exec_command", {"workspace_id": "default",
                                                         "command": []})
        self.assertFalse(os.path.exists(os.path.join(self.ws, "added.txt")))
        # Another workspace is not affected.
        self.assertEqual(self.ran(["echo", "w2"], ws="w2")["output"], "w2\n")
        self.terminate(pid)
        # Released once the process has finished.
        self.assertEqual(self.ran(["echo", "free"])["output"], "free\n")
        out = self.srv.call("apply_patch", {"workspace_id": "default", "patch": patch})
        self.assertEqual(out["status"], "applied", out)
        os.unlink(os.path.join(self.ws, "added.txt"))

    def test_lease_released_when_the_process_exits_by_itself(self):
        pid = self.started(["sleep", "0.3"])["process_id"]
        self.refused("WORKSPACE_BUSY", "exec_command", {"workspace_id": "default",
                                                        "command": ["true"]})
        self.wait_exited(pid)
        self.live.remove(pid)
        self.ran(["true"])

    # ---- TTY ----

    def test_tty_sees_a_terminal(self):
        # /dev/tty opens: the terminal is the controlling one; `tty` names it (/dev/pts/N on the
        # host, /dev/console inside the Linux sandbox, whose devpts is its own).
        out = self.ran(["sh", "-c", "test -t 0 && test -t 1 && test -t 2 && echo is-a-tty; "
                                    "{ : </dev/tty; } && echo has-ctty; tty; echo TERM=$TERM; "
                                    "stty size"], tty=True)
        text = out["output"].replace("\r", "")
        self.assertIn("is-a-tty\n", text)
        self.assertIn("has-ctty\n", text)
        self.assertRegex(text, r"(?m)^/dev/(pts/\d+|console)$")
        self.assertIn("TERM=xterm-256color\n", text)
        self.assertRegex(text, r"(?m)^24 80$")
        self.assertEqual(out["exit_code"], 0)
        self.assertIs(self.status(out["process_id"])["tty"], True)
        # Pipes are not a terminal.
        out = self.ran(["sh", "-c", "test -t 0 || test -t 1 || echo no-tty"])
        self.assertEqual(out["output"], "no-tty\n")

    def test_tty_resize(self):
        pid = self.started(["sh", "-c", "stty size; read x; stty size"], tty=True)["process_id"]
        text, r = self.drain(pid, 0, until="24 80")
        self.assertEqual(self.srv.call("process_resize",
                                       {"process_id": pid, "rows": 40, "cols": 120}),
                         {"ok": True, "rows": 40, "cols": 120})
        self.srv.call("write_stdin", {"process_id": pid, "data": "\n"})
        more, r = self.drain(pid, r["cursor"])
        self.assertRegex(more.replace("\r", ""), r"(?m)^40 120$")
        self.live.remove(pid)
        st = self.status(pid)
        self.assertEqual((st["exit_code"], st["tty"]), (0, True))

    def test_tty_close_sends_eof(self):
        pid = self.started(["cat"], tty=True)["process_id"]
        self.srv.call("write_stdin", {"process_id": pid, "data": "abc\n"})
        self.drain(pid, 0, until="abc")
        out = self.srv.call("write_stdin", {"process_id": pid, "data": "", "close": True})
        self.assertEqual(out, {"ok": True, "bytes_written": 0})
        self.drain(pid, 0)
        st = self.wait_exited(pid)
        self.live.remove(pid)
        self.assertEqual((st["termination"], st["exit_code"]), ("exited", 0))
        self.refused("PROCESS_NOT_FOUND", "write_stdin", {"process_id": pid, "data": "x"})

    def test_resize_errors(self):
        pid = self.started(["sleep", uniq(20)])["process_id"]
        args = {"process_id": pid, "rows": 40, "cols": 120}
        self.refused("PROCESS_NOT_TTY", "process_resize", args)
        self.terminate(pid)
        self.refused("PROCESS_NOT_TTY", "process_resize", args)
        out = self.ran(["true"], tty=True)
        self.refused("PROCESS_NOT_RUNNING", "process_resize",
                     {"process_id": out["process_id"], "rows": 40, "cols": 120})
        self.refused("PROCESS_NOT_FOUND", "process_resize",
                     {"process_id": UNKNOWN_ID, "rows": 40, "cols": 120})
        self.refused("INVALID_ARGUMENTS", "process_resize",
                     {"process_id": UNKNOWN_ID, "rows": 0, "cols": 120})
        self.refused("INVALID_ARGUMENTS", "process_resize",
                     {"process_id": UNKNOWN_ID, "rows": 24, "cols": 1001})

    # ---- termination ----

    def test_background_child_dies_with_its_leader(self):
        arg = uniq(30)
        out = self.ran(["sh", "-c", "sleep %s &" % arg], yield_ms=10000)
        self.assertEqual((out["exit_code"], out["termination"]), (0, "exited"))
        self.assert_gone(arg)
        self.ran(["true"])  # lease released
        self.assert_no_zombies()

    def test_terminate_kills_the_group(self):
        arg = uniq(31)
        pid = self.started(["sh", "-c", "sleep %s & wait" % arg])["process_id"]
        self.wait_running(arg)
        elapsed = self.terminate(pid)
        self.assertLess(elapsed, 2.5 * SLOW)
        st = self.status(pid)
        self.assertEqual((st["state"], st["termination"]), ("exited", "terminated"), st)
        self.assertNotIn("exit_code", st)
        self.assertNotIn("signal", st)
        self.assert_gone(arg)
        # An exited handle: ok, state exited, and its status unchanged.
        self.assertEqual(self.srv.call("terminate_process", {"process_id": pid}),
                         {"ok": True, "state": "exited"})
        self.assertEqual(self.status(pid), st)
        out = self.ran(["true"])
        self.assertEqual(self.srv.call("terminate_process", {"process_id": out["process_id"]}),
                         {"ok": True, "state": "exited"})
        self.assertEqual(self.status(out["process_id"])["termination"], "exited")
        self.assert_no_zombies()

    def test_terminate_escalates_to_sigkill(self):
        arg = uniq(32)
        pid = self.started(["sh", "-c", "trap '' TERM; echo ready; "
                                        "while :; do sleep %s; done" % arg])["process_id"]
        self.drain(pid, 0, until="ready")
        elapsed = self.terminate(pid)
        self.assertGreaterEqual(elapsed, 1.8)
        self.assertLess(elapsed, 2.5 + 2 * SLOW)
        st = self.status(pid)
        self.assertEqual(st["termination"], "terminated", st)
        self.assertNotIn("signal", st)
        self.assert_gone(arg)

    def test_terminate_wakes_a_long_poll(self):
        pid = self.started(["sleep", uniq(37)])["process_id"]
        rid = self.srv.call_start("read_process", {"process_id": pid, "wait_ms": 20000})
        time.sleep(0.2)
        self.assertIsNone(self.srv.poll(rid))
        self.terminate(pid)
        out, err = self.srv.call_wait(rid, 5 * SLOW)
        self.assertIsNone(err, err)
        self.assertEqual((out["chunk"], out["eof"]), ("", True))

    def test_signal_during_a_yield(self):
        arg = uniq(38)
        rid = self.srv.call_start("exec_command", {"workspace_id": "default", "yield_ms": 20000,
                                                   "command": ["sleep", arg]})
        os.kill(self.wait_running(arg), signal.SIGKILL)
        out, err = self.srv.call_wait(rid, 10 * SLOW)
        self.assertIsNone(err, err)
        self.assertEqual((out["state"], out["termination"]), ("exited", "signaled"), out)
        self.assertNotIn("exit_code", out)
        st = self.status(out["process_id"])
        self.assertEqual(st["signal"], {"number": 9, "name": "SIGKILL"}, st)

    def test_killed_by_someone_else(self):
        for sig, name in ((signal.SIGKILL, "SIGKILL"), (signal.SIGTERM, "SIGTERM")):
            arg = uniq(35 if sig == signal.SIGKILL else 36)
            pid = self.started(["sleep", arg])["process_id"]
            os.kill(self.wait_running(arg), sig)
            st = self.wait_exited(pid)
            self.live.remove(pid)
            self.assertEqual(st["termination"], "signaled", st)
            self.assertEqual(st["signal"], {"number": int(sig), "name": name}, st)
            self.assertNotIn("exit_code", st)

    # ---- long polls ----

    def test_long_poll_wakes_on_output_and_ping_is_answered(self):
        pid = self.started(["cat"])["process_id"]
        t0 = time.monotonic()
        rid = self.srv.call_start("read_process", {"process_id": pid, "wait_ms": 20000})
        time.sleep(0.2)
        self.assertEqual(self.srv.request("ping", {}).get("result"), {})
        self.assertIsNone(self.srv.poll(rid), "read_process answered before any output")
        st = self.status(pid)
        self.assertEqual(st["state"], "running")
        self.assertIsNone(self.srv.poll(rid), "read_process answered before any output")
        t_write = time.monotonic()
        self.srv.call("write_stdin", {"process_id": pid, "data": "wake\n"})
        out, err = self.srv.call_wait(rid)
        woke = time.monotonic()
        self.assertIsNone(err, err)
        self.check_read(out, pid)
        self.assertEqual((out["chunk"], out["cursor"], out["eof"]), ("wake\n", 5, False))
        self.assertLess(woke - t_write, 2 * SLOW)
        self.assertLess(woke - t0, 10)
        # A poll with nothing to come waits its time, then answers empty.
        t0 = time.monotonic()
        r = self.read(pid, 5, 300)
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 0.25)
        self.assertEqual((r["chunk"], r["cursor"], r["eof"]), ("", 5, False))
        # A poll wakes when the process ends.
        rid = self.srv.call_start("read_process", {"process_id": pid, "cursor": 5,
                                                   "wait_ms": 20000})
        time.sleep(0.1)
        t_close = time.monotonic()
        self.srv.call("write_stdin", {"process_id": pid, "data": "", "close": True})
        out, err = self.srv.call_wait(rid)
        self.assertIsNone(err, err)
        self.assertLess(time.monotonic() - t_close, 2 * SLOW)
        self.assertEqual((out["chunk"], out["eof"]), ("", True))
        self.live.remove(pid)

    def test_yield_is_concurrent_with_other_calls(self):
        t0 = time.monotonic()
        rid = self.srv.call_start("exec_command", {"workspace_id": "w2", "yield_ms": 20000,
                                                   "command": ["sh", "-c", "sleep 1; echo done"]})
        self.assertEqual(self.srv.request("ping", {}).get("result"), {})
        info = self.srv.call("workspace_info", {"workspace_id": "default"})
        self.assertEqual(info["workspace_id"], "default")
        self.assertIsNone(self.srv.poll(rid), "exec_command answered before its process exited")
        out, err = self.srv.call_wait(rid)
        self.assertIsNone(err, err)
        self.assertEqual((out["state"], out["output"], out["exit_code"]), ("exited", "done\n", 0))
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)

    # ---- handles ----

    def test_exited_handles_are_capped_at_64(self):
        ids = [self.ran(["true"], ws="w2")["process_id"] for _ in range(66)]
        self.refused("PROCESS_NOT_FOUND", "process_status", {"process_id": ids[0]})
        self.refused("PROCESS_NOT_FOUND", "read_process", {"process_id": ids[1]})
        for pid in ids[2:]:
            self.assertEqual(self.status(pid)["state"], "exited")


class TimeLimitCase(ProcCase):
    """CODESPACE_PROCESS_TIMEOUT_SECS=1."""

    @classmethod
    def setUpClass(cls):
        cls.tmp, roots, state = make_tree("cs-e2e-proc-tl-", ("ws",))
        cls.srv = Server(["--workspace", roots["ws"], "--operations-db", ":memory:"], state,
                         {"CODESPACE_PROCESS_TIMEOUT_SECS": "1"})

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.close()
        finally:
            kill_leftovers()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_time_limit(self):
        info = self.srv.call("workspace_info", {"workspace_id": "default"})
        self.assertEqual(info["execution"]["process"]["capabilities"]["limits"]["timeout_ms"],
                         1000)
        arg = uniq(40)
        t0 = time.monotonic()
        out = self.started(["sh", "-c", "echo started; sleep %s" % arg], yield_ms=20000)
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 0.9)
        self.assertLess(elapsed, 1 + 3 * SLOW)
        self.assertEqual((out["state"], out["termination"], out["output"], out["cursor"]),
                         ("exited", "timeout", "started\n", 8), out)
        self.assertNotIn("exit_code", out)
        pid = out["process_id"]
        self.assert_gone(arg)
        st = self.status(pid)
        self.assertEqual((st["state"], st["termination"], st["eof"]),
                         ("exited", "timeout", True), st)
        self.assertNotIn("signal", st)
        self.assertNotIn("exit_code", st)
        r = self.read(pid, 0)
        self.assertEqual((r["chunk"], r["cursor"]), ("started\n", 8))
        self.refused("TIMEOUT", "read_process", {"process_id": pid, "cursor": 8})
        t0 = time.monotonic()
        self.refused("TIMEOUT", "read_process", {"process_id": pid, "cursor": 8,
                                                 "wait_ms": 20000})
        self.assertLess(time.monotonic() - t0, 3 * SLOW)
        # The lease is released.
        self.ran(["true"])

    def test_long_poll_wakes_with_timeout(self):
        arg = uniq(41)
        pid = self.started(["sleep", arg])["process_id"]
        t0 = time.monotonic()
        out, err = self.srv.call_raw("read_process", {"process_id": pid, "wait_ms": 20000})
        elapsed = time.monotonic() - t0
        self.assertIsNone(out, out)
        self.assertEqual(err["code"], "TIMEOUT", err)
        self.assertLess(elapsed, 1 + 3 * SLOW)
        self.live.remove(pid)
        self.assertEqual(self.status(pid)["termination"], "timeout")
        self.assert_gone(arg)


class NineWorkspacesCase(ProcCase):
    """Nine workspaces; CODESPACE_MAX_PROCESSES is left at its default, 8, which is each
    workspace's own cap now (docs/operations.md, "Process limits"), not the runner's."""

    @classmethod
    def setUpClass(cls):
        names = ["w%d" % i for i in range(1, 10)]
        cls.tmp, cls.roots, state = make_tree("cs-e2e-proc-cap-", names)
        reg = {"workspaces": {n: {"root": cls.roots[n], "profile": "workspace-write"}
                              for n in names}}
        registry = os.path.join(cls.tmp, "registry.json")
        with open(registry, "w") as f:
            json.dump(reg, f)
        cls.srv = Server(["--config", registry, "--operations-db", ":memory:"], state)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.close()
        finally:
            kill_leftovers()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_live_cap_is_per_workspace(self):
        """Nine exclusive workspaces run a process each at once: no runner-wide cap of 8 stops
        the ninth (the runner's own safety cap is 1024); a second process in a workspace is
        still refused by its lease, before anything spawns."""
        info = self.srv.call("workspace_info", {"workspace_id": "w1"})
        self.assertEqual(
            info["execution"]["process"]["capabilities"]["limits"]["max_live_processes"], 8)
        ids = []
        for i in range(1, 10):
            ids.append(self.started(["sleep", uniq(50 + i)], ws="w%d" % i)["process_id"])
        for i in range(1, 10):
            self.wait_running(uniq(50 + i))
        marker = os.path.join(self.roots["w9"], "spawned")
        err = self.refused("WORKSPACE_BUSY", "exec_command",
                           {"workspace_id": "w9", "command": ["sh", "-c", "touch spawned"]})
        self.assertIn("holds this workspace", err["message"])
        time.sleep(0.3)
        self.assertFalse(os.path.exists(marker), "a second command ran in w9")
        # One ends: its workspace can start a process again.
        self.terminate(ids[8])
        out = self.ran(["sh", "-c", "touch spawned; echo ok"], ws="w9")
        self.assertEqual(out["output"], "ok\n")
        self.assertTrue(os.path.exists(marker))
        for pid in ids[:8]:
            self.terminate(pid)
        for i in range(1, 10):
            self.assert_gone(uniq(50 + i))
        self.assert_no_zombies()


class ShutdownCase(ProcCase):
    """stdio EOF and SIGTERM: every owned process group dies, the server exits 0."""

    def start(self, extra_env=None):
        self.tmp, roots, state = make_tree("cs-e2e-proc-eof-", ("w1", "w2", "w3"))
        reg = {"workspaces": {n: {"root": r, "profile": "workspace-write"}
                              for n, r in roots.items()}}
        registry = os.path.join(self.tmp, "registry.json")
        with open(registry, "w") as f:
            json.dump(reg, f)
        self.srv = Server(["--config", registry, "--operations-db", ":memory:"], state,
                          extra_env)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.addCleanup(kill_leftovers)  # runs last: after the server is gone
        self.addCleanup(lambda: self.srv.proc.poll() is None and self.srv.kill())
        args = [uniq(60 + i) for i in range(4)]
        self.started(["sleep", args[0]], ws="w1")
        self.started(["sh", "-c", "sleep %s & sleep %s & wait" % (args[1], args[2])], ws="w2")
        self.started(["sleep", args[3]], ws="w3", tty=True)
        for a in args:
            self.wait_running(a)
        self.live = []
        return args

    def test_stdio_eof_leaves_no_process(self):
        args = self.start()
        t0 = time.monotonic()
        self.srv.close()  # EOF on stdin; asserts exit status 0
        self.assertLess(time.monotonic() - t0, 10 * SLOW)
        for a in args:
            self.assert_gone(a)

    def test_sigterm_leaves_no_process(self):
        args = self.start()
        self.srv.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.srv.proc.wait(10 * SLOW), 0, "".join(self.srv.stderr[-20:]))
        self.srv.proc.stdin.close()
        self.srv.close()
        for a in args:
            self.assert_gone(a)


if __name__ == "__main__":
    unittest.main()
