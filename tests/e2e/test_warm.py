#!/usr/bin/python3
"""The sandbox helper started ahead (`run --wait-fd 5`, issue 20) through the real server.

A runner keeps at most one helper waiting for its next sandboxed command, started only after a
sandboxed spawn. Checked here with observables that cannot pass by accident:
- a server that never spawned has no helper below it (in-process runner: no child at all);
- after one exec, a helper waits (its argv `run --wait-fd 5`, no child); the next exec runs in
  that very pid (it has the sandbox's init as child while the command runs, with the command's
  pipes or terminal as its 0-2), and the command's PID 1 is `run --wait-fd 5`;
- stdin, stdout and a PTY (controlling terminal, size) work through it;
- the waiting helper SIGKILLed before a call: the call still succeeds, on a helper started for
  it (`run --plan-fd 5`), and a new one waits afterwards;
- CODESPACE_TEST_SANDBOX_WARM=0: every command has its own helper, none waits;
- SIGKILL of the server: no helper of it is left.

Needs the helper (CS_SANDBOX_BIN) and namespaces: never skips. CS_E2E_RUNNER=uds (the
e2e_warm_uds copy) runs the commands in the uds worker, whose child the helper is.
"""
import os
import shutil
import signal
import tempfile
import time
import unittest

import mcp_stdio

PROOF = ("printf 'INIT:'; tr '\\0' ' ' </proc/1/cmdline; printf '\\n'; "
         'case "$(tr "\\0" " " </proc/1/cmdline)" in '
         '*"codespace-linux-sandbox run --plan-fd 5 "|*"codespace-linux-sandbox run --wait-fd 5 ") '
         ';; *) echo NOT-INSIDE; exit 99;; esac; ')


def required_env(name):
    path = os.environ.get(name, "")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("%s=%r is not an executable (this suite never skips)" % (name, path))
    return path


def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            s = mcp_stdio.proc_stat(int(d))
            if s:
                kids.setdefault(s[1], []).append(int(d))
    return kids


def descendants(pid):
    kids, out, todo = children_map(), [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def argv_of(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [w.decode() for w in f.read().split(b"\0")[:-1]]
    except OSError:
        return []


def exe_of(pid):
    try:
        return os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return None


def wait_until(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            return v
        time.sleep(0.01)


class WarmCase(unittest.TestCase):
    def setUp(self):
        self.helper = required_env("CS_SANDBOX_BIN")
        self.helper_real = os.path.realpath(self.helper)
        self.tmp = tempfile.mkdtemp(prefix="cs-e2e-warm-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.ws = os.path.join(self.tmp, "ws")
        os.makedirs(self.ws)

    def server(self, close=True, **env):
        state = tempfile.mkdtemp(dir=self.tmp)
        srv = mcp_stdio.StdioServer(
            required_env("CODESPACE_MCP_BIN"),
            ["--workspace", self.ws, "--operations-db", ":memory:"], state,
            dict({"CODESPACE_LINUX_SANDBOX_BIN": self.helper,
                  "CODESPACE_REQUIRE_LINUX_SANDBOX": "1"}, **env), client="test_warm")
        self.addCleanup(srv.close if close else srv.kill)
        return srv

    def helpers(self, srv):
        """The server's descendants running the helper binary: {pid: argv}."""
        return {p: argv_of(p) for p in descendants(srv.proc.pid)
                if exe_of(p) == self.helper_real}

    def waiting(self, srv):
        """The helpers of srv waiting for a command (argv run --wait-fd 5, no child)."""
        kids = children_map()
        return [p for p, a in self.helpers(srv).items()
                if a[1:] == ["run", "--wait-fd", "5"] and not kids.get(p)]

    def one_waiting(self, srv):
        w = wait_until(lambda: self.waiting(srv))
        self.assertEqual(len(w), 1, "waiting helpers: %r (all: %r)" % (w, self.helpers(srv)))
        self.assert_holds_nothing(w[0])
        return w[0]

    def assert_holds_nothing(self, pid):
        """Before its message a waiting helper holds nothing of any workspace (S22): /dev/null
        as 0-2, its socket as 5, nothing else open, / as working directory."""
        fds = sorted(int(f) for f in os.listdir("/proc/%d/fd" % pid))
        self.assertEqual(fds, [0, 1, 2, 5], "descriptors of the waiting helper")
        for i in range(3):
            self.assertEqual(os.readlink("/proc/%d/fd/%d" % (pid, i)), "/dev/null")
        self.assertTrue(os.readlink("/proc/%d/fd/5" % pid).startswith("socket:"))
        self.assertEqual(os.readlink("/proc/%d/cwd" % pid), "/")

    def run_cmd(self, srv, command, tty=False):
        out = srv.call("exec_command", {"workspace_id": "default", "command": command,
                                        "tty": tty, "yield_ms": 20000})
        self.assertEqual(out["state"], "exited", out)
        text = srv.call("read_process", {"process_id": out["process_id"]})["chunk"]
        st = srv.call("process_status", {"process_id": out["process_id"]})
        return text.replace("\r\n", "\n"), st

    def init_of(self, text):
        line = [x for x in text.splitlines() if x.startswith("INIT:")]
        self.assertTrue(line, text)
        return line[0][5:].split()[1:4]

    def read_until(self, srv, pid, want, cursor=0, timeout=20.0):
        text, end = "", time.monotonic() + timeout
        while want not in text:
            out = srv.call("read_process", {"process_id": pid, "cursor": cursor,
                                            "wait_ms": 500})
            text += out["chunk"]
            cursor = out["cursor"]
            if out["eof"] and want not in text:
                self.fail("eof before %r: %r" % (want, text))
            if time.monotonic() > end:
                self.fail("no %r within %.0f s: %r" % (want, timeout, text))
        return text, cursor

    # ---- tests ----------------------------------------------------------------------------

    def test_idle_server_has_no_helper(self):
        srv = self.server()
        srv.call("workspace_info", {"workspace_id": "default"})
        time.sleep(0.3)
        self.assertEqual(self.helpers(srv), {})
        if mcp_stdio.runner() != "uds":
            self.assertEqual(descendants(srv.proc.pid), [], "an idle server has a child")
        # the first sandboxed exec starts one
        text, st = self.run_cmd(srv, ["/bin/sh", "-c", PROOF + "echo ok"])
        self.assertEqual(st.get("exit_code"), 0, (st, text))
        self.one_waiting(srv)

    def exec_through_warm(self, srv, tty):
        """Starts a command that waits for a line; proves it runs in the helper that was waiting
        before the call; returns the process id and the helper's pid."""
        w = self.one_waiting(srv)
        script = PROOF + ("test -t 0 && echo IS-A-TTY; (exec 3</dev/tty) 2>/dev/null && "
                          "echo CTTY-OK; stty size 2>/dev/null; echo READY; read line; "
                          "echo \"got:$line\"; echo to-stderr >&2")
        out = srv.call("exec_command", {"workspace_id": "default", "tty": tty, "yield_ms": 0,
                                        "command": ["/bin/sh", "-c", script]})
        pid = out["process_id"]
        text, cursor = self.read_until(srv, pid, "READY")
        text = text.replace("\r\n", "\n")
        self.assertEqual(self.init_of(text), ["run", "--wait-fd", "5"], text)
        # the helper that waited before the call now runs the command: the sandbox's init is
        # its child, and its 0-2 are the command's pipes or terminal, no longer /dev/null
        kids = children_map()
        self.assertTrue(kids.get(w), "helper %d has no child: %r" % (w, self.helpers(srv)))
        std = [os.readlink("/proc/%d/fd/%d" % (w, i)) for i in range(3)]
        for target in std:
            self.assertRegex(target, r"^/dev/pts/\d+$" if tty else r"^pipe:", std)
        if not tty:
            self.assertNotEqual(std[0], std[1], std)
            self.assertEqual(std[1], std[2], std)
        if tty:
            self.assertIn("IS-A-TTY", text)
            self.assertIn("CTTY-OK", text)  # its controlling terminal
            self.assertIn("24 80", text)
        else:
            self.assertNotIn("IS-A-TTY", text)
        srv.call("write_stdin", {"process_id": pid, "data": "hello-warm\n"})
        rest, _ = self.read_until(srv, pid, "to-stderr", cursor)
        self.assertIn("got:hello-warm", rest)
        st = wait_until(lambda: (lambda s: s if s["state"] == "exited" else None)(
            srv.call("process_status", {"process_id": pid})))
        self.assertEqual((st["termination"], st.get("exit_code")), ("exited", 0), st)
        return pid, w

    def test_second_exec_uses_the_waiting_helper_pipes_and_pty(self):
        srv = self.server()
        text, st = self.run_cmd(srv, ["/bin/sh", "-c", PROOF + "echo first"])
        self.assertEqual(st.get("exit_code"), 0, (st, text))
        # the first one had no helper waiting: started for it
        self.assertEqual(self.init_of(text), ["run", "--plan-fd", "5"], text)
        seen = set()
        for tty in (False, True, False):
            with self.subTest(tty=tty):
                _, w = self.exec_through_warm(srv, tty)
                self.assertNotIn(w, seen)  # a new one each time
                seen.add(w)
                self.assertTrue(wait_until(lambda: mcp_stdio.proc_stat(w) is None, 5),
                                "helper %d still there after its command" % w)

    def test_killed_waiting_helper_falls_back(self):
        srv = self.server()
        self.run_cmd(srv, ["/bin/sh", "-c", PROOF + "true"])
        w = self.one_waiting(srv)
        os.kill(w, signal.SIGKILL)
        # dead (a zombie until the runner reaps it, or already gone)
        self.assertTrue(wait_until(lambda: (mcp_stdio.proc_stat(w) or ("Z",))[0] == "Z", 5))
        text, st = self.run_cmd(srv, ["/bin/sh", "-c", PROOF + "echo still-works"])
        self.assertEqual(st.get("exit_code"), 0, (st, text))
        self.assertIn("still-works", text)
        self.assertEqual(self.init_of(text), ["run", "--plan-fd", "5"], text)  # cold
        self.assertTrue(wait_until(lambda: mcp_stdio.proc_stat(w) is None, 5), "not reaped")
        w2 = self.one_waiting(srv)
        self.assertNotEqual(w2, w)
        text, st = self.run_cmd(srv, ["/bin/sh", "-c", PROOF + "echo warm-again"])
        self.assertEqual(self.init_of(text), ["run", "--wait-fd", "5"], text)

    def test_warm_off_every_command_starts_its_own(self):
        srv = self.server(CODESPACE_TEST_SANDBOX_WARM="0")
        for i in range(3):
            text, st = self.run_cmd(srv, ["/bin/sh", "-c", PROOF + "echo n%d" % i])
            self.assertEqual(st.get("exit_code"), 0, (st, text))
            self.assertEqual(self.init_of(text), ["run", "--plan-fd", "5"], text)
        time.sleep(0.3)
        self.assertEqual(self.helpers(srv), {})

    def test_sigkill_of_the_server_leaves_no_helper(self):
        srv = self.server(close=False)
        self.run_cmd(srv, ["/bin/sh", "-c", PROOF + "true"])
        w = self.one_waiting(srv)
        before = set(self.helpers(srv))
        self.assertIn(w, before)
        srv.kill()

        def left():
            return [p for p in before if exe_of(p) == self.helper_real
                    and (mcp_stdio.proc_stat(p) or ("Z",))[0] != "Z"]
        wait_until(lambda: not left(), 10)
        self.assertEqual(left(), [], "helpers left after the server's SIGKILL")


if __name__ == "__main__":
    unittest.main()
