#!/usr/bin/python3
"""No child outlives its parent (issue 34), through the real binaries.

The uds worker learns its gateway from the gateway itself: `--gateway-fd N`, the read end of a
pipe whose write end only the gateway holds. Checked here:
- the worker alone, the test playing the gateway: no --gateway-fd (or not a pipe) is refused;
  the pipe's hang-up ends a serving worker (its command too) although its parent, the test,
  lives; no hello within 5 s of the bind ends a worker (a connection that says nothing does not
  count); the parent-death signal ends a worker whose pipe is still open elsewhere;
- the gateway SIGKILLed while its worker is stopped (CODESPACE_TEST_WORKER_STOP, a TEST-ONLY
  hook: docs/runner.md) before the parent-death signal is armed, between it and the first
  accept, and after the accept, and while it serves a command: the worker goes at once when let
  go on, and from the host no codespace-runtime of that runner dir, no leaf directory and no
  process holding the workspace root (/proc/*/fd, cwd) remains;
- hundreds of gateways SIGKILLed at random moments of their worker's start (sandboxed and not,
  bounded to about 70 s): no codespace-runtime is ever left, nor any other child;
- the sandbox helper started ahead (`run --wait-fd 5`): it goes with its supervisor (a gateway
  with the in-process runner, SIGKILLed, also at random moments around the exec that starts
  it), and by the socket's hang-up alone when its parent, without a parent-death signal, dies;
- the helper's `probe` and `prepare`, told of a runner (CODESPACE_SANDBOX_RUNNER_PID) that is no
  longer their parent, stop at once and leave nothing in their TMPDIR.

This process is a child subreaper for the whole module: whatever a killed gateway leaves
becomes our child, so "left behind" is exact (our children that are not our gateways), not a
guess by name among other tests' processes. Binaries: CODESPACE_MCP_BIN, CODESPACE_RUNTIME_BIN,
CS_SANDBOX_BIN (the helper; required, never skipped). Run:
    CODESPACE_MCP_BIN=... CODESPACE_RUNTIME_BIN=... CS_SANDBOX_BIN=... \\
        /usr/bin/python3 -m unittest -v test_lifetime          (from tests/e2e)
"""
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import mcp_stdio
import test_process as tp
import test_uds as tu

SLOW = tp.SLOW
PR_SET_CHILD_SUBREAPER = 36
ACCEPT_BOUND_S = 5.0  # runtime_main.c ACCEPT_BOUND_MS
# "At once": below the accept bound, so a worker that only left by the bound fails. (Generous
# for a loaded machine: a worker in its sandbox probe sees the hang-up when the probe ends.)
PROMPT_S = min(3.0 * SLOW, ACCEPT_BOUND_S - 0.5)
STEPS = ("before-pdeathsig", "before-accept", "after-accept")
# The randomized loop: at most this many rounds, and no longer than this many seconds.
ROUNDS = int(os.environ.get("CS_LIFETIME_ROUNDS", "400"))
BUDGET_S = float(os.environ.get("CS_LIFETIME_BUDGET_S", "70"))
MIN_ROUNDS = 100 if SLOW == 1.0 else 30


def required_env(name):
    path = os.environ.get(name, "")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("%s=%r is not an executable (this suite never skips)" % (name, path))
    return path


def become_subreaper():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def argv_of(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")[:-1]
    except OSError:
        return []


def alive(pid):
    st = mcp_stdio.proc_stat(pid)
    return st is not None and st[0] != "Z"


def state(pid):
    st = mcp_stdio.proc_stat(pid)
    return st[0] if st else None


def pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def is_runtime(pid, a=None):
    """True when pid runs codespace-runtime (by its argv, read once: it may go meanwhile)."""
    a = argv_of(pid) if a is None else a
    return bool(a) and os.path.basename(a[0]).startswith(b"codespace-runtime")


def workers_in(rdir):
    """Live codespace-runtime processes whose --socket lies in rdir."""
    pre = (rdir.rstrip("/") + "/").encode()
    out = []
    for p in pids():
        a = argv_of(p)
        if is_runtime(p, a) and any(w.startswith(pre) for w in a[1:]) and alive(p):
            out.append(p)
    return out


def holders(path):
    """Pids (other than ours) with a descriptor or working directory on path or below it."""
    me, out = os.getpid(), []
    real = os.path.realpath(path)
    for p in pids():
        if p == me:
            continue
        links = []
        try:
            links.append(os.readlink("/proc/%d/cwd" % p))
            for fd in os.listdir("/proc/%d/fd" % p):
                try:
                    links.append(os.readlink("/proc/%d/fd/%s" % (p, fd)))
                except OSError:
                    pass
        except OSError:
            continue
        if any(t == real or t.startswith(real + "/") for t in links):
            out.append(p)
    return out


def our_children():
    return tp.children(os.getpid())


def reap_orphans(known=()):
    """Reaps the zombies among our children that are not Popen's (known); returns the live
    ones: what a dead parent left behind."""
    left = []
    for c in our_children():
        if c in known:
            continue
        if state(c) == "Z":
            try:
                os.waitpid(c, os.WNOHANG)
            except ChildProcessError:
                pass
        elif state(c) is not None:
            left.append(c)
    return left


def describe(pid):
    st = mcp_stdio.proc_stat(pid)
    try:
        with open("/proc/%d/wchan" % pid) as f:
            wchan = f.read()
    except OSError:
        wchan = "?"
    return "pid %d %r state %s wchan %s" % (pid, b" ".join(argv_of(pid))[:200], st, wchan)


def wait_until(pred, timeout, step=0.005):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


class LifetimeBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        become_subreaper()

    def setUp(self):
        self.mcp = tp.binary()
        self.runtime = tu.runtime_binary()
        self.helper = required_env("CS_SANDBOX_BIN")
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-e2e-life-"))
        self.ws = os.path.join(self.tmp, "ws")
        self.state = os.path.join(self.tmp, "state")
        self.rdir = os.path.join(self.tmp, "runner")
        for d in (self.ws, self.state, self.rdir):
            os.mkdir(d)
        with open(os.path.join(self.ws, "hello.txt"), "w") as f:
            f.write("hello\n")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        # Nothing of ours may linger into the next test (a failing one may have left some).
        for c in our_children():
            try:
                os.kill(c, signal.SIGKILL)
            except OSError:
                pass
        wait_until(lambda: not reap_orphans(), 5.0)
        tp.kill_leftovers()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def env(self, sandbox=True, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env.update(XDG_STATE_HOME=self.state, CODESPACE_RUNTIME_BIN=self.runtime,
                   CODESPACE_LINUX_SANDBOX_BIN=self.helper if sandbox else
                   os.path.join(self.tmp, "no-such-helper"))
        env.update(extra)
        return env

    def gateway(self, sandbox=True, runner="uds", **extra):
        """codespace-mcp on stdio with stdin held open (it runs until killed), MCP unused: the
        uds worker is started (blocking) before the server reads anything."""
        args = [self.mcp, "--workspace", self.ws, "--operations-db", ":memory:"]
        if runner == "uds":
            args += ["--runner", "uds", "--runner-dir", self.rdir]
        p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=self.env(sandbox, **extra))
        self.procs.append(p)
        return p

    def kill(self, p):
        p.kill()
        p.wait()
        p.stdin.close()

    def assert_nothing_left(self, what):
        """From the host: no worker of the runner dir, no leaf, no holder of the root, and no
        child of a dead process (our orphans) alive."""
        known = {p.pid for p in self.procs if p.returncode is None}
        left = wait_until(lambda: not (workers_in(self.rdir) or reap_orphans(known)), PROMPT_S)
        self.assertTrue(left, "%s: left behind: %s" % (what, [
            describe(p) for p in set(workers_in(self.rdir)) | set(reap_orphans(known))]))
        self.assertEqual(tu.leaves(self.rdir), [], "%s: a leaf directory was left" % what)
        # A killed command may still be tearing down (state R, its memory already gone) when
        # its worker is: the same bound, not a single look (one failed so under ASan).
        wait_until(lambda: not holders(self.ws), PROMPT_S)
        self.assertEqual([describe(p) for p in holders(self.ws)], [],
                         "%s: the workspace root is still held" % what)


# ---- the worker alone: the test is its gateway -----------------------------------------------


class WorkerAloneCase(LifetimeBase):

    def leaf(self):
        d = os.path.join(self.rdir, "leaf")
        os.mkdir(d, 0o700)
        return d

    def start(self, leaf, **kw):
        ws_fd = os.open(self.ws, os.O_RDONLY | os.O_DIRECTORY)
        try:  # the root as an inherited descriptor, as the gateway passes it
            w = tu.Worker(os.path.join(leaf, "runner.sock"),
                          ["--root", "%d:%s" % (ws_fd, self.ws)], pass_fds=(ws_fd,), **kw)
        finally:
            os.close(ws_fd)
        self.addCleanup(w.kill)
        return w

    def test_socket_without_a_gateway_fd_is_refused(self):
        leaf = self.leaf()
        sock = os.path.join(leaf, "runner.sock")
        with open(os.path.join(self.tmp, "plain"), "w") as f:
            plain = f.fileno()
            cases = [([], "--gateway-fd"),
                     (["--gateway-fd", "1x"], "--gateway-fd 1x: not an inherited pipe"),
                     (["--gateway-fd", "2"], "--gateway-fd 2: not an inherited pipe"),
                     (["--gateway-fd", str(plain)], "not an inherited pipe")]
            for extra, want in cases:
                with self.subTest(extra=extra):
                    p = subprocess.run([self.runtime, "--socket", sock] + extra,
                                       capture_output=True, pass_fds=(plain,), timeout=20)
                    err = p.stderr.decode()
                    self.assertEqual(p.returncode, 2, err)
                    self.assertIn(want, err)
                    self.assertFalse(os.path.exists(sock))
        # --listen is never a gateway's child: it takes no gateway fd
        r, w = os.pipe()
        try:
            p = subprocess.run([self.runtime, "--listen", "127.0.0.1:0", "--plaintext", "--root",
                                self.ws, "--gateway-fd", str(r)], capture_output=True,
                               pass_fds=(r,), timeout=20)
        finally:
            os.close(r)
            os.close(w)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(b"not with --socket or --gateway-fd", p.stderr)

    def test_hangup_ends_a_serving_worker(self):
        """The pipe alone (the parent, this test, stays): the worker, its command, its socket
        and its directory go; its descriptor on the root too."""
        leaf = self.leaf()
        w = self.start(leaf)
        c = w.handshake()
        arg = tp.uniq(41)
        resp = c.call("rrpc-2", "exec", tu.exec_data(self.ws, ["sleep", arg]))
        self.assertIs(resp["ok"], True, resp)
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg), 5.0 * SLOW))
        self.assertIn(w.proc.pid, holders(self.ws))
        t0 = time.monotonic()
        w.close_gate()
        try:
            status = w.proc.wait(PROMPT_S)
        except subprocess.TimeoutExpired:
            self.fail("the worker outlived its gateway's hang-up: %s" % describe(w.proc.pid))
        took = time.monotonic() - t0
        self.assertEqual(status, 1)
        self.assertIn("the gateway is gone", w.stderr())
        self.assertLess(took, PROMPT_S)
        self.assertTrue(tp.wait_until(lambda: not tp.pids_with(arg), 3.0 * SLOW),
                        "its command outlived it")
        self.assertFalse(os.path.exists(leaf), "the worker left its directory")
        self.assertEqual(holders(self.ws), [])
        c.close()

    def test_no_hello_within_the_bound(self):
        leaf = self.leaf()
        t0 = time.monotonic()
        w = self.start(leaf)
        # someone probing the socket says nothing: not a gateway, the clock runs on
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(leaf, "runner.sock"))
        s.close()
        try:
            status = w.proc.wait(ACCEPT_BOUND_S + 5.0 * SLOW)
        except subprocess.TimeoutExpired:
            self.fail("a worker nobody said hello to kept running")
        took = time.monotonic() - t0
        self.assertEqual(status, 1)
        self.assertIn("no gateway said hello within 5 s", w.stderr())
        self.assertGreaterEqual(took, ACCEPT_BOUND_S - 0.1)
        self.assertFalse(os.path.exists(leaf), "the worker left its directory")
        self.assertEqual(holders(self.ws), [])

    def test_hello_in_time_stops_the_clock(self):
        leaf = self.leaf()
        w = self.start(leaf)
        c = w.handshake()
        time.sleep(ACCEPT_BOUND_S + 1.0)
        self.assertIsNone(w.proc.poll(), "a worker that said hello left: %s" % w.stderr())
        resp = c.call("rrpc-2", "version", {"workspace": tu.workspace(self.ws),
                                            "path": "hello.txt"})
        self.assertIs(resp["ok"], True, resp)
        c.close()  # the gateway's connection ends: exit 0, its files removed
        self.assertEqual(w.wait(), 0)
        self.assertFalse(os.path.exists(leaf))

    def test_parent_death_signal_without_the_hangup(self):
        """The pipe's write end also held elsewhere (a leak the gateway never makes): the
        parent-death signal still ends the worker, through the same cleanup."""
        leaf = self.leaf()
        sock = os.path.join(leaf, "runner.sock")
        arg = tp.uniq(42)
        # A middle process plays the gateway: it starts the worker, gives the pipe's write end
        # to a sleep as well, and is then SIGKILLed.
        middle = subprocess.Popen([sys.executable, "-c", r'''
import os, subprocess, sys, time
r, w = os.pipe()
ws = os.open(sys.argv[3], os.O_RDONLY | os.O_DIRECTORY)
subprocess.Popen(["sleep", sys.argv[4]], pass_fds=(w,))
subprocess.Popen([sys.argv[1], "--socket", sys.argv[2], "--gateway-fd", str(r),
                  "--root", "%d:%s" % (ws, sys.argv[3])], pass_fds=(r, ws),
                 stdout=subprocess.DEVNULL)
time.sleep(600)
''', self.runtime, sock, self.ws, arg],
                                  env={k: v for k, v in os.environ.items()
                                       if not k.startswith("CODESPACE_")})
        self.procs.append(middle)
        self.assertTrue(wait_until(lambda: tu.listening(sock), 10.0 * SLOW), "no worker bound")
        wpid = workers_in(self.rdir)
        self.assertEqual(len(wpid), 1, wpid)
        middle.kill()
        middle.wait()
        gone = wait_until(lambda: not alive(wpid[0]), PROMPT_S)
        self.assertTrue(gone, "the worker outlived its parent: %s" % describe(wpid[0]))
        self.assertFalse(os.path.exists(leaf), "the worker left its directory")
        self.assertTrue(tp.pids_with(arg), "the sleep holding the pipe is gone: a vacuous test")
        tp.kill_leftovers()


# ---- the gateway SIGKILLed while its worker starts -------------------------------------------


class GatewayKillCase(LifetimeBase):

    def stopped_worker(self, gw):
        """The gateway's worker once it has stopped itself at the hook (state T)."""
        def find():
            for c in tp.children(gw.pid):
                if state(c) == "T" and is_runtime(c):
                    return c
            return None
        return wait_until(find, 10.0 * SLOW)

    def test_gateway_sigkill_at_each_start_step(self):
        for sandbox in (True, False):
            for step in STEPS:
                with self.subTest(step=step, sandbox=sandbox):
                    gw = self.gateway(sandbox, CODESPACE_TEST_WORKER_STOP=step)
                    wpid = self.stopped_worker(gw)
                    self.assertTrue(wpid, "the worker never reached %s" % step)
                    leaf = tu.leaves(self.rdir)
                    self.assertEqual(len(leaf), 1, leaf)
                    sock = os.path.join(self.rdir, leaf[0], "runner.sock")
                    # where the hook stopped it: bound or not yet
                    self.assertEqual(os.path.exists(sock), step != "before-pdeathsig", step)
                    # the check below is not vacuous: the stopped worker holds the root
                    self.assertIn(wpid, holders(self.ws))
                    self.kill(gw)
                    time.sleep(0.05)
                    # nothing has let it go on but us
                    self.assertEqual(state(wpid), "T", describe(wpid))
                    self.assertEqual(workers_in(self.rdir), [wpid])
                    os.kill(wpid, signal.SIGCONT)
                    gone = wait_until(lambda: not alive(wpid), PROMPT_S)
                    self.assertTrue(gone, "the worker outlived its gateway (%s): %s"
                                    % (step, describe(wpid)))
                    self.assert_nothing_left(step)

    def test_gateway_sigkill_while_serving(self):
        gw = mcp_stdio.StdioServer(self.mcp, ["--workspace", self.ws, "--runner", "uds",
                                              "--runner-dir", self.rdir, "--operations-db",
                                              ":memory:"], self.state,
                                   {"CODESPACE_RUNTIME_BIN": self.runtime,
                                    "CODESPACE_LINUX_SANDBOX_BIN": self.helper},
                                   client="test_lifetime")
        self.procs.append(gw.proc)
        arg = tp.uniq(43)
        out = gw.call("exec_command", {"workspace_id": "default", "command": ["sleep", arg]})
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        self.assertTrue(tp.wait_until(lambda: tp.pids_with(arg), 5.0 * SLOW))
        self.assertTrue(workers_in(self.rdir))
        gw.kill()
        self.assert_nothing_left("serving")
        self.assertEqual(tp.pids_with(arg), [], "a command outlived the gateway")

    def ready_ms(self, sandbox):
        """How long a gateway takes to answer initialize (its worker started), the slower of
        two starts: the span the random kills fall in."""
        worst = 0.0
        for _ in range(2):
            t0 = time.monotonic()
            gw = self.gateway(sandbox)
            gw.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{'
                           b'"protocolVersion":"2025-06-18","capabilities":{},'
                           b'"clientInfo":{"name":"test_lifetime","version":"1"}}}\n')
            gw.stdin.flush()
            # stdout is /dev/null: the worker's hello is what says it is up
            ok = wait_until(lambda: any(self.phase(gw.pid) == "accepted" for _ in [0]),
                            10.0 * SLOW, 0.002)
            self.assertTrue(ok, "the gateway's worker did not start")
            worst = max(worst, time.monotonic() - t0)
            self.kill(gw)
            self.assert_nothing_left("calibration")
        return worst

    def phase(self, gw_pid):
        """Where the gateway's worker is: none (not spawned or not exec'd), started (no socket
        yet), bound (listening), accepted (a connection on it)."""
        ws = [c for c in tp.children(gw_pid) if is_runtime(c)]
        if not ws:
            return "none"
        leaf = tu.leaves(self.rdir)
        if not leaf:
            return "started"
        sock = os.path.join(self.rdir, leaf[0], "runner.sock")
        bound = accepted = False
        with open("/proc/net/unix") as f:
            next(f)
            for line in f:
                fields = line.split()
                if len(fields) >= 8 and fields[7] == sock:
                    if int(fields[3], 16) & 0x10000:
                        bound = True
                    elif fields[5] == "03":  # SS_CONNECTED: the accepted end
                        accepted = True
        return "accepted" if accepted else "bound" if bound else "started"

    def test_random_gateway_sigkills_during_worker_starts(self):
        seed = int(os.environ.get("CS_LIFETIME_SEED", str(int(time.time()))))
        rnd = random.Random(seed)
        span = {True: self.ready_ms(True), False: self.ready_ms(False)}
        phases, orphans, slowest = {}, {}, 0.0
        t_end = time.monotonic() + BUDGET_S
        rounds = 0
        while rounds < ROUNDS and time.monotonic() < t_end:
            sandbox = rnd.random() < 0.5
            delay = rnd.uniform(0.0, 1.2 * span[sandbox])
            gw = self.gateway(sandbox)
            time.sleep(delay)
            ph = self.phase(gw.pid)
            phases[ph] = phases.get(ph, 0) + 1
            self.kill(gw)
            known = {p.pid for p in self.procs if p.returncode is None}
            for c in our_children():  # the census: what outlived the gateway, if briefly
                a = argv_of(c) if c not in known and alive(c) else []
                if a:
                    name = os.path.basename(a[0]).decode() + " " + b" ".join(a[1:2]).decode()
                    orphans[name] = orphans.get(name, 0) + 1
            t_kill = time.monotonic()
            gone = wait_until(lambda: not (workers_in(self.rdir) or reap_orphans(known)),
                              PROMPT_S)
            slowest = max(slowest, time.monotonic() - t_kill)
            self.assertTrue(gone, "round %d (seed %d, sandbox %s, %.1f ms, phase %s): left %s" % (
                rounds, seed, sandbox, delay * 1000, ph,
                [describe(p) for p in set(workers_in(self.rdir)) | set(reap_orphans(known))]))
            # A leaf may stay only when the gateway died between its mkdir and the worker's
            # exec (nobody to remove it but the next gateway's sweep): never with a socket.
            for name in tu.leaves(self.rdir):
                self.assertFalse(os.path.exists(os.path.join(self.rdir, name, "runner.sock")),
                                 "round %d: a bound worker's leaf was left" % rounds)
            self.procs.remove(gw)
            rounds += 1
        sys.stderr.write("\n  %d rounds in %.0f s (seed %d, spans %.0f/%.0f ms): phases %r; "
                         "alive just after the kill: %r, all gone within %.0f ms\n" % (
                             rounds, BUDGET_S - (t_end - time.monotonic()), seed,
                             span[True] * 1000, span[False] * 1000, phases, orphans,
                             slowest * 1000))
        self.assertGreaterEqual(rounds, min(MIN_ROUNDS, ROUNDS))
        # the kills fell in every part of the start
        for ph in ("none", "started", "bound", "accepted"):
            self.assertGreater(phases.get(ph, 0), 0, "no kill while %s: %r" % (ph, phases))
        self.assertEqual([describe(p) for p in holders(self.ws)], [])
        # what the mkdir..exec window left goes with the next gateway's sweep (R11)
        gw = self.gateway(False)
        self.assertTrue(wait_until(lambda: self.phase(gw.pid) != "none", 10.0 * SLOW))
        gw.stdin.close()
        self.assertEqual(gw.wait(30), 0)
        self.assert_nothing_left("after the loop")


# ---- the sandbox helper started ahead --------------------------------------------------------


class WarmHelperCase(LifetimeBase):

    def helpers_below(self, pid):
        real = os.path.realpath(self.helper)
        out = []
        todo = [pid]
        while todo:
            for c in tp.children(todo.pop()):
                todo.append(c)
                try:
                    if os.readlink("/proc/%d/exe" % c) == real:
                        out.append(c)
                except OSError:
                    pass
        return out

    def waiting(self, pid):
        return [h for h in self.helpers_below(pid)
                if argv_of(h)[1:] == [b"run", b"--wait-fd", b"5"] and not tp.children(h)]

    def test_waiting_helper_goes_with_its_supervisor(self):
        """In-process runner: the gateway is the supervisor. SIGKILLed with a helper waiting,
        and at random moments around the exec that starts the next one."""
        rnd = random.Random(int(os.environ.get("CS_LIFETIME_SEED", str(int(time.time())))))
        for i in range(12):
            srv = mcp_stdio.StdioServer(
                self.mcp, ["--workspace", self.ws, "--operations-db", ":memory:"], self.state,
                {"CODESPACE_LINUX_SANDBOX_BIN": self.helper,
                 "CODESPACE_REQUIRE_LINUX_SANDBOX": "1"}, client="test_lifetime")
            self.procs.append(srv.proc)
            if i == 0:
                out = srv.call("exec_command", {"workspace_id": "default",
                                                "command": ["true"], "yield_ms": 10000})
                self.assertEqual(out["state"], "exited", out)
                w = wait_until(lambda: self.waiting(srv.proc.pid), 10.0 * SLOW)
                self.assertEqual(len(w), 1, w)
            else:
                # the exec that arms the helper, and the SIGKILL somewhere around it
                srv.call_start("exec_command", {"workspace_id": "default", "command": ["true"]})
                time.sleep(rnd.uniform(0.0, 0.15))
            srv.kill()
            self.assert_nothing_left("warm round %d" % i)

    def test_wait_fd_hangup_alone(self):
        """Without a parent-death signal (its parent here is a plain Python process), the
        waiting helper goes when its parent dies: the socket's hang-up."""
        middle = subprocess.Popen([sys.executable, "-c", r'''
import os, socket, subprocess, sys, time
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
os.dup2(b.fileno(), 5)
subprocess.Popen([sys.argv[1], "run", "--wait-fd", "5"], pass_fds=(5,), cwd="/",
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
os.close(5)
b.close()
time.sleep(600)
''', self.helper])
        self.procs.append(middle)
        h = wait_until(lambda: self.waiting(middle.pid), 10.0 * SLOW)
        self.assertEqual(len(h), 1, h)
        # blocked in its wait for the runner's message (sleeping), not still starting
        self.assertTrue(wait_until(lambda: state(h[0]) == "S", 10.0 * SLOW), describe(h[0]))
        middle.kill()
        middle.wait()
        gone = wait_until(lambda: not alive(h[0]), PROMPT_S)
        self.assertTrue(gone, "the waiting helper outlived its parent: %s" % describe(h[0]))
        reap_orphans()

    def test_probe_and_prepare_go_with_their_runner(self):
        """A runner that named itself (CODESPACE_SANDBOX_RUNNER_PID) and is no longer the
        parent is gone: probe and prepare stop at once and leave nothing in their TMPDIR. The
        runner alive (this test, their parent) is the control: both work."""
        tmp = os.path.join(self.tmp, "helper-tmp")
        os.mkdir(tmp)
        req = ('{"protocol": 1, "workspace_root": "%s", "command_cwd": "%s", '
               '"writable_workspace": true, "network": "restricted", "argv": ["/bin/true"], '
               '"env": {}, "tty": false}' % (self.ws, self.ws))
        gone = subprocess.Popen(["true"])
        gone.wait()  # a pid that is nobody's parent any more
        for runner, ok in ((os.getpid(), True), (gone.pid, False)):
            env = {"PATH": "/usr/bin:/bin", "TMPDIR": tmp,
                   "CODESPACE_SANDBOX_RUNNER_PID": str(runner)}
            with self.subTest(runner="alive" if ok else "gone"):
                p = subprocess.run([self.helper, "probe"], env=env, capture_output=True,
                                   timeout=20)
                self.assertEqual(p.returncode, 0 if ok else 1, p.stderr)
                if not ok:
                    self.assertIn(b"the runner (pid %d) is gone" % runner, p.stderr)
                self.assertEqual(os.listdir(tmp), [], "the probe left its workspace or plan")
                p = subprocess.run([self.helper, "prepare"], env=env, input=req.encode(),
                                   capture_output=True, timeout=20)
                self.assertEqual(p.returncode, 0 if ok else 1, p.stderr)
                if ok:
                    self.assertIn(b'"prepared"', p.stdout)
                    for d in os.listdir(tmp):  # the plan of a run that never comes
                        shutil.rmtree(os.path.join(tmp, d))
                else:
                    self.assertEqual(p.stdout, b"")
                    self.assertIn(b"the runner (pid %d) is gone" % runner, p.stderr)
                    self.assertEqual(os.listdir(tmp), [], "prepare wrote a plan for nobody")
        # A runner that is gone took the read end of the probe's stderr with it: the line the
        # probe writes then must not kill it (SIGPIPE) before it removed its workspace. Before
        # 2026-12-05 it did, and each runner killed while probing left a directory behind.
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([self.helper, "probe"], env={
                "PATH": "/usr/bin:/bin", "TMPDIR": tmp,
                "CODESPACE_SANDBOX_RUNNER_PID": str(gone.pid)},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=w, timeout=20)
        finally:
            os.close(w)
        self.assertEqual(p.returncode, 1, "the probe with a dead runner's stderr")
        self.assertEqual(os.listdir(tmp), [], "the probe left its workspace or plan")


if __name__ == "__main__":
    unittest.main()
