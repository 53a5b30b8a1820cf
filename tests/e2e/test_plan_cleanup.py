#!/usr/bin/python3
"""No sandbox plan outlives its run (docs/contract/sandbox.md section 1; invariant R9 in
docs/security-model.md), through the real server (codespace-mcp over stdio) and the real helper.

- 1,000 rounds of exec_command (`sleep 5`, yield 0 to 10 ms) immediately followed by
  terminate_process: SIGTERM reaches the helper before, while or after `run` loads its plan, and
  whichever it is, no plan directory of this server is left in the helper's TMPDIR (/dev/shm
  when it is a tmpfs). About 6 s per runner in the release build on 2 cores.
- The start-up sweep: a plan directory named as a dead runner's goes when the server starts; one
  named as a live process's (this test), and a symlink named as a dead runner's, stay untouched.
  So does the workspace of a probe SIGKILLed mid-run, named after its runner like a plan.

Plan directories are codespace-sandbox-<runner pid>-XXXXXX; the runner is the server itself, or
its uds worker (CS_E2E_RUNNER=uds, the e2e_plan_cleanup_uds copy). Only directories naming one
of those pids are counted, so servers of other tests running in parallel do not interfere.

Starts the server with CODESPACE_LINUX_SANDBOX_BIN (CS_SANDBOX_BIN) and
CODESPACE_REQUIRE_LINUX_SANDBOX=1: a host where the sandbox cannot start fails, never skips.
Standard library only. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
    CS_SANDBOX_BIN=build/release/src/main/codespace-linux-sandbox \\
        /usr/bin/python3 -m unittest -v test_plan_cleanup          (from tests/e2e)
"""
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
import unittest

import mcp_stdio

ROUNDS = 1000
YIELDS_MS = (0, 0, 1, 3, 10)
PLAN_RE = re.compile(r"^codespace-sandbox-([1-9][0-9]{0,9})-[A-Za-z0-9]{6}$")


def required_env(name):
    """The path in environment variable name; missing or not executable fails (never skips)."""
    path = os.environ.get(name, "")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("%s=%r is not an executable (this suite never skips)" % (name, path))
    return path


def helper_tmpdir(server_tmpdir):
    """Where the runner has the helper write plans (supervisor_sandbox.c helper_tmpdir): /dev/shm
    when it is a writable tmpfs, else the server's TMPDIR."""
    with open("/proc/self/mounts") as f:
        shm_tmpfs = any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in f)
    if shm_tmpfs and os.access("/dev/shm", os.W_OK | os.X_OK):
        return "/dev/shm"
    return server_tmpdir


def children(pid):
    """The pids of pid's children (every thread's), [] when it is gone."""
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def plan_dirs(where, pids):
    """The plan directories in where that name one of pids."""
    found = []
    for name in os.listdir(where):
        m = PLAN_RE.match(name)
        if m and int(m.group(1)) in pids:
            found.append(name)
    return sorted(found)


def dead_pid():
    """A pid that was a process a moment ago and is no more (reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def make_plan_dir(where, pid):
    """codespace-sandbox-<pid>-XXXXXX (six characters, as mkdtemp(3) makes) with a 0600 plan."""
    for _ in range(100):
        name = "codespace-sandbox-%d-%s" % (pid, secrets.token_hex(3))
        path = os.path.join(where, name)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        fd = os.open(os.path.join(path, "plan"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b'{"argv":["secret"]}')
        os.close(fd)
        return path
    raise AssertionError("no free name")


class PlanCleanup(unittest.TestCase):
    def setUp(self):
        self.helper = required_env("CS_SANDBOX_BIN")
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-e2e-plan-"))
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.ws = os.path.join(self.tmp, "ws")
        self.srvtmp = os.path.join(self.tmp, "srvtmp")
        self.state = os.path.join(self.tmp, "state")
        for d in (self.ws, self.srvtmp, self.state):
            os.makedirs(d)
        self.where = helper_tmpdir(self.srvtmp)

    def server(self):
        srv = mcp_stdio.StdioServer(
            required_env("CODESPACE_MCP_BIN"),
            ["--workspace", self.ws, "--operations-db", ":memory:"], self.state,
            {"CODESPACE_LINUX_SANDBOX_BIN": self.helper, "CODESPACE_REQUIRE_LINUX_SANDBOX": "1",
             "TMPDIR": self.srvtmp}, client="test_plan_cleanup")
        self.addCleanup(srv.close)
        return srv

    @staticmethod
    def runner_pids(srv):
        """The server and its children: the uds worker is the runner there."""
        return {srv.proc.pid} | set(children(srv.proc.pid))

    def test_terminate_right_after_exec_leaves_no_plan(self):
        srv = self.server()
        started = time.monotonic()
        pids = self.runner_pids(srv)
        rounds = 0
        for i in range(ROUNDS):
            # yield 0 answers as soon as the helper is spawned (SIGTERM then mostly lands before
            # `run` has read its plan); the short yields let it get further (plan read, sandbox
            # being built, command running)
            out = srv.call("exec_command", {"workspace_id": "default", "command": ["sleep", "5"],
                                            "yield_ms": YIELDS_MS[i % len(YIELDS_MS)]})
            self.assertEqual(out["dispatch_status"], "confirmed", out)
            term = srv.call("terminate_process", {"process_id": out["process_id"]})
            self.assertEqual(term["state"], "exited", (i, term))
            if i == 0:
                pids = self.runner_pids(srv)  # the uds worker is up by now
            rounds += 1
        elapsed = time.monotonic() - started
        self.assertEqual(rounds, ROUNDS)
        # every process has exited (terminate answered "exited"): its plan is gone already
        self.assertEqual(plan_dirs(self.where, pids), [], "plans left in %s" % self.where)
        srv.close()
        self.assertEqual(plan_dirs(self.where, pids), [], "plans left in %s" % self.where)
        print("\n%d rounds in %.1f s (runner %s)" % (ROUNDS, elapsed, mcp_stdio.runner()))

    def test_start_sweeps_dead_runners_plans_only(self):
        dead = make_plan_dir(self.where, dead_pid())
        live = make_plan_dir(self.where, os.getpid())  # a live process: maybe a server
        self.addCleanup(shutil.rmtree, live, True)
        # a symlink named as a dead runner's plan directory is not followed nor removed
        target = os.path.join(self.tmp, "target")
        os.makedirs(target)
        with open(os.path.join(target, "plan"), "w") as f:
            f.write("not a plan")
        link = os.path.join(self.where, "codespace-sandbox-%d-%s" % (dead_pid(),
                                                                    secrets.token_hex(3)))
        os.symlink(target, link)
        self.addCleanup(lambda: os.path.lexists(link) and os.unlink(link))
        srv = self.server()
        # a command ran: the runner (the uds worker too) has started, and swept
        out = srv.call("exec_command", {"workspace_id": "default", "command": ["true"],
                                        "yield_ms": 10000})
        self.assertEqual(out["state"], "exited", out)
        self.assertFalse(os.path.lexists(dead), dead)
        self.assertTrue(os.path.isfile(os.path.join(live, "plan")), live)
        self.assertTrue(os.path.islink(link), link)
        self.assertTrue(os.path.isfile(os.path.join(target, "plan")), target)

    def test_killed_probe_leaves_only_what_the_sweep_removes(self):
        # A probe SIGKILLed mid-run (the runner's 5 s bound on a hung probe, the OOM killer) has
        # no time to remove its workspace. It is named for its runner, as plan directories are,
        # so the next runner's start-up sweep removes it once that runner is gone. The runner
        # here is a shell (the probe checks that its parent is the pid it was given). What the
        # probe made is what appeared in the helper's TMPDIR named for that shell or as an
        # unowned probe workspace (the name an older helper gave it, which nobody sweeps).
        script = ('CODESPACE_SANDBOX_RUNNER_PID=$$ TMPDIR="$1" PATH=/usr/bin:/bin '
                  '"$2" probe 2>/dev/null; exit 0')

        def probe_dirs(pid):
            return set(plan_dirs(self.where, {pid})) | {
                n for n in os.listdir(self.where) if n.startswith("codespace-sandbox-probe-")}

        left = set()
        for attempt in range(50):
            runner = subprocess.Popen(["sh", "-c", script, "sh", self.where, self.helper])
            before = probe_dirs(runner.pid)
            seen = set()
            deadline = time.monotonic() + 10
            while not seen and runner.poll() is None and time.monotonic() < deadline:
                seen = probe_dirs(runner.pid) - before
                if not seen:
                    time.sleep(0.0005)
            probes = children(runner.pid)
            for pid in probes:
                os.kill(pid, 9)
            runner.wait(10)
            left = probe_dirs(runner.pid) - before
            self.addCleanup(lambda names=left: [shutil.rmtree(os.path.join(self.where, n), True)
                                                for n in names])
            if probes and left:
                break  # killed while its workspace existed
        self.assertTrue(left, "no probe was caught with its workspace in %d attempts"
                        % (attempt + 1))
        srv = self.server()
        out = srv.call("exec_command", {"workspace_id": "default", "command": ["true"],
                                        "yield_ms": 10000})
        self.assertEqual(out["state"], "exited", out)
        stay = sorted(n for n in left if os.path.lexists(os.path.join(self.where, n)))
        self.assertEqual(stay, [], "a killed probe's directories outlived the next start's sweep")


if __name__ == "__main__":
    unittest.main()
