#!/usr/bin/python3
"""The isolation suite of docs/contract/sandbox.md §5 through the real MCP server (exec_command).

Starts codespace-mcp (CODESPACE_MCP_BIN) over stdio with CODESPACE_LINUX_SANDBOX_BIN set to the
helper (CS_SANDBOX_BIN) and CODESPACE_REQUIRE_LINUX_SANDBOX=1: a server that cannot start with
the sandbox FAILS the suite, nothing here is ever skipped (CI requirement). CS_E2E_RUNNER=uds
(the e2e_isolation_uds copy) runs the commands in the uds worker instead.

Every escape attempt first proves it runs inside the sandbox: the command prints PID 1's argv
(the helper's init, `codespace-linux-sandbox run --plan <path>`) and the listing of `/`, and
the test checks both (no `/home`, no `/root`) before it looks at the attempt's result. Attempts
touch only paths this test created: a temporary tree (workspace, "outside" directory, server
TMPDIR, state), a probe directory ~/.cs-isolation-probe-<random> and /tmp, /dev/shm files named
cs-iso-<random>, all removed in tearDownClass. Sleeps that could outlive a test carry a unique
argv word (7nn.<pid>), so a scan of the host's /proc sees any survivor; tearDownClass SIGKILLs
such leftovers by pid.

Scripts run inside with /usr/bin/python3 (bind-mounted from /usr). The host side is standard
library only. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
    CS_SANDBOX_BIN=build/release/helper/codespace-linux-sandbox \\
        /usr/bin/python3 -m unittest -v test_isolation          (from tests/e2e)
"""
import ctypes
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import mcp_stdio

PY = "/usr/bin/python3"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
PIPE_ENV = {"PATH", "HOME", "LANG", "TMPDIR", "TERM", "PAGER", "GIT_PAGER",
            "GIT_TERMINAL_PROMPT", "NO_COLOR", "CI"}
TTY_ENV = PIPE_ENV - {"NO_COLOR"}
EPERM, ENOSYS = 1, 38
TAG = secrets.token_hex(6)


def required_env(name):
    """The path in environment variable name; missing or not executable fails (never skips)."""
    path = os.environ.get(name, "")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("%s=%r is not an executable (the isolation suite never skips)"
                             % (name, path))
    return path



sanitized = mcp_stdio.sanitized


_BIN = os.environ.get("CODESPACE_MCP_BIN")
SLOW = 3.0 if "ASAN_OPTIONS" in os.environ or (
    _BIN and os.access(_BIN, os.R_OK) and sanitized(_BIN)) else 1.0


def uniq(n):
    """A sleep duration no other run uses: 7nn.<pid>."""
    return "%d.%d" % (700 + n, os.getpid())


def pids_with(arg):
    """Host pids of processes having arg as one of their argv words (zombies have none)."""
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


def kill_leftovers():
    tag = (".%d" % os.getpid()).encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if any(re.fullmatch(rb"7\d\d" + re.escape(tag), w) for w in words):
            try:
                os.kill(int(d), signal.SIGKILL)
            except OSError:
                pass


def wait_until(pred, timeout, step=0.01):
    end = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() > end:
            return False
        time.sleep(step)


def host_landlock_abi():
    """The kernel's Landlock ABI (landlock_create_ruleset(NULL, 0, VERSION)), 0 without it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(444), ctypes.c_void_p(0), ctypes.c_size_t(0),
                     ctypes.c_uint(1))
    return r if r > 0 else 0


# The first lines every in-sandbox command prints: PID 1's argv and the listing of /. The
# command itself then stops (exit 99, "NOT-INSIDE") unless PID 1 is the helper's init and / has
# neither home nor root, so no escape attempt ever runs on the host; the test checks again.
SH_PROOF = ("printf 'INIT:'; tr '\\0' ' ' </proc/1/cmdline; printf '\\nROOT:'; "
            "ls -a / | tr '\\n' ' '; printf '\\n'; "
            "case \"$(tr '\\0' ' ' </proc/1/cmdline)\" in "
            "'codespace-linux-sandbox run --plan '*|*'/codespace-linux-sandbox run --plan '*|"
            "'codespace-linux-sandbox run --plan-fd '*|*'/codespace-linux-sandbox run --plan-fd '*|"
            "'codespace-linux-sandbox run --wait-fd '*|*'/codespace-linux-sandbox run --wait-fd '*) ;; "
            "*) echo NOT-INSIDE; exit 99;; esac; "
            "if test -e /home || test -e /root; then echo NOT-INSIDE; exit 99; fi; ")
PY_PROOF = """\
import ctypes, errno, json, os, sys
_init = open('/proc/1/cmdline', 'rb').read().split(b'\\0')
_root = sorted(os.listdir('/'))
sys.stdout.write('INIT:' + ' '.join(w.decode() for w in _init) + '\\nROOT:' + ' '.join(_root)
                 + '\\n')
if (os.path.basename(_init[0]) != b'codespace-linux-sandbox'
        or _init[1:3] not in ([b'run', b'--plan'], [b'run', b'--plan-fd'], [b'run', b'--wait-fd'])
        or 'home' in _root or 'root' in _root):
    sys.stdout.write('NOT-INSIDE\\n')
    sys.stdout.flush()
    os._exit(99)
sys.stdout.flush()
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(n, *a):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(n), *[ctypes.c_long(v) for v in a])
    return r, (ctypes.get_errno() if r == -1 else 0)
def result(x):
    sys.stdout.write('RESULT:' + json.dumps(x) + '\\n')
    sys.stdout.flush()
def attempt(f):
    try:
        return ['ok', f()]
    except OSError as e:
        return ['err', e.errno]
"""


def cmdline(pid):
    """A host process's argv (empty when it is gone)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def descendants(pid):
    """The host pids below pid (children, their children, ...)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
            except OSError:
                continue
            ppid = int(st[st.rindex(")") + 2:].split()[1])
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


class Server(mcp_stdio.StdioServer):
    def __init__(self, args, state_dir, extra_env=None):
        super().__init__(required_env("CODESPACE_MCP_BIN"), args, state_dir, extra_env,
                         client="test_isolation")


class IsolationCase(unittest.TestCase):
    """One sandboxed server for the class; every exec goes through the helper."""

    @classmethod
    def setUpClass(cls):
        cls.helper = required_env("CS_SANDBOX_BIN")
        cls.tmp = tempfile.mkdtemp(prefix="cs-e2e-iso-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.addClassCleanup(kill_leftovers)
        cls.ws = os.path.join(cls.tmp, "ws")
        cls.outside = os.path.join(cls.tmp, "outside")
        cls.srvtmp = os.path.join(cls.tmp, "srvtmp")
        state = os.path.join(cls.tmp, "state")
        for d in (cls.ws, cls.outside, cls.srvtmp, state):
            os.makedirs(d)
        cls.outside_secret = os.path.join(cls.outside, "secret.txt")
        with open(cls.outside_secret, "w") as f:
            f.write("outside-secret-" + TAG)
        # Under the caller's home, which the sandbox must not show at all.
        cls.home_probe = os.path.join(os.path.expanduser("~"), ".cs-isolation-probe-" + TAG)
        os.makedirs(os.path.join(cls.home_probe, "target"))
        cls.addClassCleanup(shutil.rmtree, cls.home_probe, True)
        cls.home_secret = os.path.join(cls.home_probe, "secret.txt")
        with open(cls.home_secret, "w") as f:
            f.write("home-secret-" + TAG)
        cls.host_tmp_file = "/tmp/cs-iso-%s" % TAG
        with open(cls.host_tmp_file, "w") as f:
            f.write("host tmp")
        cls.addClassCleanup(lambda: os.path.exists(cls.host_tmp_file)
                            and os.unlink(cls.host_tmp_file))
        cls.host_shm_file = "/dev/shm/cs-iso-%s" % TAG
        if os.path.isdir("/dev/shm"):
            with open(cls.host_shm_file, "w") as f:
                f.write("host shm")
            cls.addClassCleanup(lambda: os.path.exists(cls.host_shm_file)
                                and os.unlink(cls.host_shm_file))
        # A server that cannot start with the sandbox raises here: the suite fails.
        cls.srv = Server(["--workspace", cls.ws, "--operations-db", ":memory:"], state,
                         {"CODESPACE_LINUX_SANDBOX_BIN": cls.helper,
                          "CODESPACE_REQUIRE_LINUX_SANDBOX": "1",
                          "TMPDIR": cls.srvtmp, "FOO_SECRET": "leak-" + TAG})
        cls.addClassCleanup(cls.srv.close)

    def setUp(self):
        self.live = []

    def tearDown(self):
        for pid in self.live:
            try:
                self.srv.call_raw("terminate_process", {"process_id": pid})
            except AssertionError:
                pass

    # ---- running commands ---------------------------------------------------------------

    def start(self, command, tty=False, yield_ms=0):
        out = self.srv.call("exec_command", {"workspace_id": "default", "command": command,
                                             "tty": tty, "yield_ms": yield_ms})
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        if out.get("state") != "exited":
            self.live.append(out["process_id"])
        return out

    def read_until(self, pid, cursor=0, until=None, timeout=20.0):
        """Reads from cursor until eof, or until `until` appears; returns (text, cursor, eof)."""
        text = ""
        end = time.monotonic() + timeout * SLOW
        while True:
            out = self.srv.call("read_process", {"process_id": pid, "cursor": cursor,
                                                 "wait_ms": 1000})
            text += out["chunk"]
            cursor = out["cursor"]
            if out["eof"] or (until is not None and until in text):
                return text, cursor, out["eof"]
            if time.monotonic() > end:
                self.fail("%s: nothing more within %.0f s; read %r" % (pid, timeout, text))

    def run_cmd(self, command, tty=False):
        """Runs command to its end; returns (its whole output, CR LF as LF; process_status)."""
        out = self.start(command, tty, yield_ms=int(min(30000, 15000 * SLOW)))
        pid = out["process_id"]
        if out["state"] != "exited":
            self.read_until(pid, out["cursor"])
            self.live.remove(pid)
        st = self.srv.call("process_status", {"process_id": pid})
        self.assertEqual(st["state"], "exited", st)
        text = self.srv.call("read_process", {"process_id": pid})["chunk"]
        return text.replace("\r\n", "\n"), st

    def assert_inside(self, text):
        """The proof lines: PID 1 is the helper's init, / holds neither home nor root."""
        m_init = re.search(r"^INIT:(.*)$", text, re.M)
        m_root = re.search(r"^ROOT:(.*)$", text, re.M)
        self.assertTrue(m_init and m_root, "no proof of being inside the sandbox: %r" % text)
        init = m_init.group(1).split()
        self.assertGreaterEqual(len(init), 4, text)
        self.assertEqual(os.path.basename(init[0]), "codespace-linux-sandbox", text)
        # the runner hands the plan over as a sealed memfd (issue 20), to a helper it starts
        # for the command or to the one it started ahead (`run --wait-fd 5`)
        self.assertIn(init[1:4], (["run", "--plan-fd", "5"], ["run", "--wait-fd", "5"]), text)
        root = set(m_root.group(1).split())
        self.assertIn("usr", root, text)
        for name in ("home", "root", "run", "var", "mnt"):
            self.assertNotIn(name, root, "/%s visible inside: %r" % (name, text))
        return init[3]

    def sh(self, script, tty=False):
        text, st = self.run_cmd(["/bin/sh", "-c", SH_PROOF + script], tty)
        self.assert_inside(text)
        return text, st

    def py(self, body, tty=False):
        """Runs PY_PROOF + body inside; returns the value body passed to result()."""
        text, st = self.run_cmd([PY, "-c", PY_PROOF + body], tty)
        self.assert_inside(text)
        m = re.search(r"^RESULT:(.*)$", text, re.M)
        self.assertTrue(m, "no result (status %r): %r" % (st, text))
        self.assertEqual(st.get("exit_code"), 0, (st, text))
        return json.loads(m.group(1))

    def modes(self):
        return ((False, "pipe"), (True, "tty"))

    # ---- workspace_info and start-up ----------------------------------------------------

    def test_workspace_info_reports_sandbox(self):
        info = self.srv.call("workspace_info", {"workspace_id": "default"})
        iso = info["execution"]["isolation"]
        self.assertEqual(iso["command_sandbox"], "linux-sandbox", iso)
        self.assertEqual(iso["runner"], mcp_stdio.runner(), iso)
        self.assertEqual(info["execution"]["network"]["enforcement"], "enforced", info)
        self.assertEqual(info["execution"]["network"]["policy"], "restricted", info)
        abi = host_landlock_abi()
        if abi:
            self.assertIn("landlock_abi", iso, "kernel has Landlock ABI %d" % abi)
            self.assertIs(type(iso["landlock_abi"]), int, iso)
            self.assertGreaterEqual(iso["landlock_abi"], 1, iso)
            self.assertLessEqual(iso["landlock_abi"], abi, iso)
        else:
            self.assertNotIn("landlock_abi", iso)

    def test_commands_run_in_the_sandbox(self):
        """workspace_info says linux-sandbox: every command (pipe and PTY) must really run in
        it, with PID 1 the helper's init and the host's / out of sight."""
        for tty, name in self.modes():
            with self.subTest(mode=name):
                text, st = self.run_cmd(["/bin/sh", "-c", SH_PROOF + "echo INSIDE-OK"], tty)
                self.assertNotIn("NOT-INSIDE", text,
                                 "%s command ran outside the sandbox: %r" % (name, text))
                self.assert_inside(text)
                self.assertIn("INSIDE-OK", text)
                self.assertEqual(st.get("exit_code"), 0, st)

    def test_required_sandbox_missing_helper_stops_server(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env.update({"XDG_STATE_HOME": os.path.join(self.tmp, "state"),
                    "CODESPACE_LINUX_SANDBOX_BIN": os.path.join(self.tmp, "no-such-helper"),
                    "CODESPACE_REQUIRE_LINUX_SANDBOX": "1"})
        p = subprocess.Popen([required_env("CODESPACE_MCP_BIN"), "--workspace", self.ws,
                              "--operations-db", ":memory:"] + mcp_stdio.runner_args(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
        try:
            p.wait(15 * SLOW)  # stdin stays open: only the failed probe can end it
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            self.fail("server kept running without its required sandbox helper")
        finally:
            for f in (p.stdin, p.stdout, p.stderr):
                f.close()
        self.assertNotEqual(p.returncode, 0)

    # ---- the files ----------------------------------------------------------------------

    def test_workspace_writes_visible_on_host(self):
        for tty, name in self.modes():
            with self.subTest(mode=name):
                target = "written-%s.txt" % name
                _, st = self.sh("echo from-%s-%s > %s" % (name, TAG, target), tty)
                self.assertEqual(st.get("exit_code"), 0, st)
                with open(os.path.join(self.ws, target)) as f:
                    self.assertEqual(f.read(), "from-%s-%s\n" % (name, TAG))

    def test_outside_files_unreadable(self):
        paths = [self.outside_secret, self.home_secret, os.path.dirname(self.home_secret),
                 "/proc/self/root" + self.outside_secret, "/proc/1/root" + self.home_secret,
                 os.path.join("..", "outside", "secret.txt")]
        body = ("def rd(p):\n"
                "    with open(p, 'rb') as f: return f.read().decode('latin-1')\n"
                "out = {}\n"
                "for p in %r:\n"
                "    out[p] = attempt(lambda: rd(p) if not os.path.isdir(p) else os.listdir(p))\n"
                "result(out)\n" % paths)
        for tty, name in self.modes():
            with self.subTest(mode=name):
                res = self.py(body, tty)
                for p, (kind, val) in res.items():
                    self.assertEqual(kind, "err", "%s readable inside: %r" % (p, val))
                    self.assertNotIn(TAG, json.dumps(val))

    def test_server_files_and_processes_invisible(self):
        body = ("procs = []\n"
                "for d in os.listdir('/proc'):\n"
                "    if d.isdigit():\n"
                "        try: procs.append(open('/proc/%%s/cmdline' %% d, 'rb').read().decode())\n"
                "        except OSError: pass\n"
                "result({'procs': procs, 'state': os.path.exists(%r), 'srvtmp': os.path.exists(%r),"
                " 'shadow': attempt(lambda: len(open('/etc/shadow', 'rb').read()))})\n"
                % (os.path.join(self.tmp, "state"), self.srvtmp))
        res = self.py(body)
        for c in res["procs"]:
            self.assertNotIn("codespace-mcp", c, res)
            self.assertNotIn("codespace-runtime", c, res)
        self.assertFalse(res["state"], res)
        self.assertFalse(res["srvtmp"], res)
        if os.path.exists("/etc/shadow") and os.path.getsize("/etc/shadow") > 0:
            self.assertIn(res["shadow"], (["ok", 0], ["err", 13], ["err", 2]),
                          "/etc/shadow not masked: %r" % res)

    def test_private_tmp(self):
        inner = "/tmp/cs-iso-inner-%s" % TAG
        body = ("result({'tmp': os.path.exists(%r), 'shm': os.path.exists(%r),"
                " 'tmplist': os.listdir('/tmp'),"
                " 'write': attempt(lambda: open(%r, 'w').write('in')),"
                " 'shmwrite': attempt(lambda: open('/dev/shm/cs-iso-inner-%s', 'w')"
                ".write('in'))})\n"
                % (self.host_tmp_file, self.host_shm_file, inner, TAG))
        for tty, name in self.modes():
            with self.subTest(mode=name):
                res = self.py(body, tty)
                self.assertFalse(res["tmp"], res)
                self.assertFalse(res["shm"], res)
                self.assertNotIn(os.path.basename(self.host_tmp_file), res["tmplist"], res)
                self.assertEqual(res["write"], ["ok", 2], res)  # /tmp is writable, privately
                self.assertFalse(os.path.exists(inner), "sandbox /tmp file reached the host")
                self.assertFalse(os.path.exists("/dev/shm/cs-iso-inner-" + TAG))

    def test_write_escape_attempts(self):
        """Symlinks (made by the host and by the command), hard links, /proc/self/root,
        rename, and `..` out of the workspace: nothing appears outside on the host."""
        target = os.path.join(self.home_probe, "target")
        os.symlink(target, os.path.join(self.ws, "host-link"))
        self.addCleanup(os.unlink, os.path.join(self.ws, "host-link"))
        with open(os.path.join(self.ws, "mv-me"), "w") as f:
            f.write("stay")
        parent = os.path.dirname(self.ws)
        attempts = {
            "host_symlink": "open('host-link/pwned-1', 'w').write('x')",
            "own_symlink": "os.symlink(%r, 'own-link') or open('own-link/pwned-2', 'w').write('x')"
                           % target,
            "own_symlink_outside": "os.symlink(%r, 'own-link2') or "
                                   "open('own-link2/pwned-3', 'w').write('x')" % self.outside,
            "hardlink_outside": "os.link(%r, 'hl-1')" % self.outside_secret,
            "hardlink_home": "os.link(%r, 'hl-2')" % self.home_secret,
            "hardlink_etc": "os.link('/etc/passwd', 'hl-3')",
            "proc_root": "open('/proc/self/root%s/pwned-4', 'w').write('x')" % target,
            "proc1_root": "open('/proc/1/root%s/pwned-5', 'w').write('x')" % self.outside,
            "rename_outside": "os.rename('mv-me', %r)" % os.path.join(self.outside, "moved-1"),
            "rename_home": "os.rename('mv-me', %r)" % os.path.join(target, "moved-2"),
            "rename_parent": "os.rename('mv-me', %r)" % os.path.join(parent, "moved-3"),
            "dotdot": "open('../outside/pwned-6', 'w').write('x')",
            "abs_outside": "open(%r, 'w').write('x')" % os.path.join(self.outside, "pwned-7"),
            "abs_home": "open(%r, 'w').write('x')" % os.path.join(target, "pwned-8"),
            "etc": "open('/etc/cs-iso-pwned-%s', 'w').write('x')" % TAG,
            "usr": "open('/usr/cs-iso-pwned-%s', 'w').write('x')" % TAG,
        }
        body = "out = {}\n"
        for k, v in attempts.items():
            body += "out[%r] = attempt(lambda: %s)\n" % (k, v)
        body += "result(out)\n"
        try:
            res = self.py(body)
        finally:
            # what a broken sandbox could have left on the host (test-owned names only)
            leaked = [p for p in (os.path.join(target, n) for n in
                                  ("pwned-1", "pwned-2", "pwned-4", "pwned-8", "moved-2"))
                      if os.path.lexists(p)]
            leaked += [p for p in (os.path.join(self.outside, n) for n in
                                   ("pwned-3", "pwned-5", "pwned-6", "pwned-7", "moved-1"))
                       if os.path.lexists(p)]
            leaked += [p for p in (os.path.join(parent, "moved-3"),
                                   "/etc/cs-iso-pwned-" + TAG, "/usr/cs-iso-pwned-" + TAG)
                       if os.path.lexists(p)]
            for p in leaked:
                if p.startswith("/etc/") or p.startswith("/usr/"):
                    os.unlink(p)
        self.assertEqual(leaked, [], "written outside the workspace: %r (inside: %r)"
                         % (leaked, res))
        for k in attempts:
            self.assertEqual(res[k][0], "err", "%s succeeded inside: %r" % (k, res))
        for n in ("hl-1", "hl-2", "hl-3"):
            self.assertFalse(os.path.lexists(os.path.join(self.ws, n)), res)
        with open(os.path.join(self.ws, "mv-me")) as f:
            self.assertEqual(f.read(), "stay")
        with open(self.outside_secret) as f:
            self.assertEqual(f.read(), "outside-secret-" + TAG)

    # ---- network ------------------------------------------------------------------------

    def test_socket_families_restricted(self):
        body = ("import socket\n"
                "out = {}\n"
                "for fam, typ in ((socket.AF_INET, socket.SOCK_STREAM),"
                " (socket.AF_INET, socket.SOCK_DGRAM), (socket.AF_INET6, socket.SOCK_STREAM),"
                " (socket.AF_NETLINK, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW)):\n"
                "    out['%d/%d' % (fam, typ)] = attempt(lambda: socket.socket(fam, typ).close())\n"
                "a, b = socket.socketpair(); a.send(b'ping'); out['pair'] = b.recv(4).decode()\n"
                "u = '/tmp/u-%d.sock' % os.getpid()\n"
                "srv = socket.socket(socket.AF_UNIX); srv.bind(u); srv.listen()\n"
                "c = socket.socket(socket.AF_UNIX); c.connect(u)\n"
                "s, _ = srv.accept(); c.send(b'unix'); out['path'] = s.recv(4).decode()\n"
                "result(out)\n")
        for tty, name in self.modes():
            with self.subTest(mode=name):
                res = self.py(body, tty)
                self.assertEqual(res.pop("pair"), "ping", res)
                self.assertEqual(res.pop("path"), "unix", res)
                for fam, r in res.items():
                    self.assertEqual(r, ["err", EPERM], "socket family %s: %r" % (fam, r))

    def test_host_unix_sockets_unreachable(self):
        path = os.path.join(self.outside, "host.sock")
        home_path = os.path.join(self.home_probe, "h.sock")
        abstract = "\0cs-iso-%s" % TAG
        listeners = []
        for addr in (path, home_path, abstract):
            s = socket.socket(socket.AF_UNIX)
            s.bind(addr)
            s.listen(4)
            listeners.append(s)
        try:
            probe = socket.socket(socket.AF_UNIX)  # the host can reach them
            probe.connect(abstract)
            probe.close()
            body = ("import socket\nout = {}\n"
                    "for a in %r:\n"
                    "    s = socket.socket(socket.AF_UNIX)\n"
                    "    out[repr(a)] = attempt(lambda: s.connect(a))\n"
                    "result(out)\n" % ([path, home_path, abstract],))
            res = self.py(body)
            for addr, r in res.items():
                self.assertEqual(r[0], "err", "connected to host socket %s: %r" % (addr, res))
        finally:
            for s in listeners:
                s.close()

    # ---- privileges and the system call filter ------------------------------------------

    def test_no_capabilities_and_no_new_privs(self):
        body = ("st = {}\n"
                "for line in open('/proc/self/status'):\n"
                "    k, _, v = line.partition(':'); st[k] = v.strip()\n"
                "result(st)\n")
        for tty, name in self.modes():
            with self.subTest(mode=name):
                st = self.py(body, tty)
                for cap in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"):
                    self.assertEqual(int(st[cap], 16), 0, "%s=%s" % (cap, st[cap]))
                self.assertEqual(st["NoNewPrivs"], "1", st)
                self.assertEqual(st["Seccomp"], "2", st)

    def test_terminal_injection_refused(self):
        body = ("import fcntl, termios\n"
                "buf = ctypes.create_string_buffer(b'x')\n"
                "out = {'isatty': os.isatty(0),"
                " 'tiocsti': attempt(lambda: fcntl.ioctl(0, termios.TIOCSTI, b'x')),"
                " 'tiocsti_high': sc(16, 0, termios.TIOCSTI | (1 << 32), ctypes.addressof(buf)),"
                " 'tioclinux': sc(16, 0, 0x541C, ctypes.addressof(buf))}\n"
                "result(out)\n")
        for tty, name in self.modes():
            with self.subTest(mode=name):
                res = self.py(body, tty)
                self.assertEqual(res["isatty"], tty, res)
                self.assertEqual(res["tiocsti"], ["err", EPERM], res)
                self.assertEqual(res["tiocsti_high"], [-1, EPERM], res)
                self.assertEqual(res["tioclinux"], [-1, EPERM], res)

    # ---- denial reports (docs/contract/tools.md §6) -----------------------------------------

    def run_exec(self, command):
        """Runs command with a yield long enough to see it end: (exec, status, read) results."""
        out = self.start(command, yield_ms=int(min(30000, 15000 * SLOW)))
        self.assertEqual(out["state"], "exited", out)
        pid = out["process_id"]
        return (out, self.srv.call("process_status", {"process_id": pid}),
                self.srv.call("read_process", {"process_id": pid}))

    def test_workspace_info_denial_reports(self):
        iso = self.srv.call("workspace_info", {"workspace_id": "default"})["execution"]["isolation"]
        with open("/proc/sys/kernel/seccomp/actions_avail") as f:
            notif = "user_notif" in f.read()
        # restricted: no proxy, so no network kind; never the file system kind
        self.assertEqual(iso["denial_reports"], ["syscall"] if notif else [], iso)

    def test_denials_syscalls_reported(self):
        body = """\
import socket
out = {}
out['socket'] = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).fileno())
out['ptrace'] = sc(101, 0, 0, 0, 0)
out['ptrace2'] = sc(101, 0, 0, 0, 0)
out['unshare'] = sc(272, 0x10000000)
result(out)
"""
        ex, st, rd = self.run_exec([PY, "-c", PY_PROOF + body])
        text = rd["chunk"]
        self.assert_inside(text)
        res = json.loads(re.search(r"^RESULT:(.*)$", text, re.M).group(1))
        # reporting never changes what the command sees
        self.assertEqual(res, {"socket": ["err", EPERM], "ptrace": [-1, EPERM],
                               "ptrace2": [-1, EPERM], "unshare": [-1, EPERM]})
        want = sorted([{"kind": "syscall", "target": "socket(AF_INET)", "reason": "denied", "count": 1},
                       {"kind": "syscall", "target": "ptrace", "reason": "denied", "count": 2},
                       {"kind": "syscall", "target": "unshare", "reason": "denied", "count": 1}],
                      key=lambda d: d["target"])
        for name, r in (("exec_command", ex), ("process_status", st), ("read_process", rd)):
            self.assertEqual(sorted(r.get("denials", []), key=lambda d: d["target"]), want, name)

    def test_no_refusal_no_denials(self):
        ex, st, rd = self.run_exec(["/bin/sh", "-c", SH_PROOF + "echo quiet"])
        self.assert_inside(rd["chunk"])
        for name, r in (("exec_command", ex), ("process_status", st), ("read_process", rd)):
            self.assertNotIn("denials", r, name)

    def test_command_cannot_write_its_report(self):
        body = """\
fds = sorted(int(x) for x in os.listdir('/proc/self/fd'))
written = 0
for fd in range(3, 21):
    try:
        os.write(fd, b'\\x00\\x00\\x00\\x2a{"protocol":1,"denials":[]}'); written += 1
    except OSError:
        pass
out = {'fds': fds, 'written': written, 'ptrace': sc(101, 0, 0, 0, 0)}
result(out)
"""
        ex, st, rd = self.run_exec([PY, "-c", PY_PROOF + body])
        self.assert_inside(rd["chunk"])
        res = json.loads(re.search(r"^RESULT:(.*)$", rd["chunk"], re.M).group(1))
        self.assertIn(res["fds"], ([0, 1, 2], [0, 1, 2, 3]), res)  # 3: listdir's own fd
        self.assertEqual(res["written"], 0, res)
        self.assertEqual(st.get("denials"), [{"kind": "syscall", "target": "ptrace",
                                              "reason": "denied", "count": 1}], st)

    def test_forbidden_system_calls(self):
        body = """\
import signal, time
out = {}
out['ptrace_traceme'] = sc(101, 0, 0, 0, 0)
child = os.fork()
if child == 0:
    time.sleep(5); os._exit(0)
out['ptrace_attach'] = sc(101, 16, child, 0, 0)
out['ptrace_seize'] = sc(101, 0x4206, child, 0, 0)
out['process_vm_readv'] = sc(310, child, 0, 0, 0, 0, 0)
os.kill(child, signal.SIGKILL); os.waitpid(child, 0)
params = ctypes.create_string_buffer(120)
out['io_uring_setup'] = sc(425, 8, ctypes.addressof(params))
out['io_uring_enter'] = sc(426, 0, 0, 0, 0, 0, 0)
out['io_uring_register'] = sc(427, 0, 0, 0, 0)
out['keyctl'] = sc(250, 0, -3, 0, 0)
out['add_key'] = sc(248, 0, 0, 0, 0, 0)
out['request_key'] = sc(249, 0, 0, 0, 0)
out['bpf'] = sc(321, 0, 0, 0)
out['userfaultfd'] = sc(323, 0)
out['perf_event_open'] = sc(298, 0, 0, -1, -1, 0)
out['mount'] = sc(165, 0, 0, 0, 0, 0)
out['unshare_user'] = sc(272, 0x10000000)
out['unshare_mount'] = sc(272, 0x00020000)
out['unshare_net'] = sc(272, 0x40000000)
out['setns'] = sc(308, 0, 0)
out['clone3'] = sc(435, 0, 0)
out['personality'] = sc(135, 0x0040000)
result(out)
"""
        res = self.py(body)
        allowed = {"io_uring_setup": (EPERM, ENOSYS), "io_uring_enter": (EPERM, ENOSYS),
                   "io_uring_register": (EPERM, ENOSYS), "clone3": (ENOSYS,)}
        for name, (r, e) in res.items():
            self.assertEqual(r, -1, "%s succeeded inside: %r" % (name, res))
            self.assertIn(e, allowed.get(name, (EPERM,)), "%s: errno %d; %r" % (name, e, res))

    def test_nested_namespaces_refused(self):
        body = ("import subprocess\nout = {}\n"
                "out['os.unshare'] = attempt(lambda: os.unshare(os.CLONE_NEWUSER))"
                " if hasattr(os, 'unshare') else ['err', 1]\n"
                "for args in (['unshare', '-U', 'true'], ['unshare', '-r', 'true'],"
                " ['unshare', '-n', 'true'], ['unshare', '-m', 'true']):\n"
                "    p = subprocess.run(['/usr/bin/' + args[0]] + args[1:], capture_output=True)\n"
                "    out[' '.join(args)] = [p.returncode, p.stderr.decode()[-200:]]\n"
                "result(out)\n")
        res = self.py(body)
        self.assertEqual(res.pop("os.unshare")[0], "err", res)
        for cmd, (rc, err) in res.items():
            self.assertNotEqual(rc, 0, "%s succeeded inside: %r" % (cmd, res))
            self.assertIn("not permitted", err.lower(), "%s: %r" % (cmd, err))

    def test_32bit_abi_killed(self):
        """int 0x80 (the i386 ABI: getpid) from a forked child: the filter kills it."""
        body = """\
import mmap, signal
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(b'\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3')  # mov eax, 20; int 0x80; ret
fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
child = os.fork()
if child == 0:
    r = fn(); os.write(1, b'RETURNED %d\\n' % r); os._exit(0)
_, status = os.waitpid(child, 0)
result({'signaled': os.WIFSIGNALED(status),
        'sig': os.WTERMSIG(status) if os.WIFSIGNALED(status) else None})
"""
        # The host runs the same code to completion: the kill inside is the filter's.
        host = subprocess.run([PY, "-c", "import ctypes, os\nresult = print\n" + body],
                              capture_output=True, text=True, timeout=30)
        res = self.py(body)
        if "RETURNED" in host.stdout:
            self.assertEqual(res, {"signaled": True, "sig": signal.SIGSYS}, res)
        else:
            self.assertTrue(res["signaled"], res)

    # ---- processes ----------------------------------------------------------------------

    def test_background_processes_gone_after_exit(self):
        for n, (tty, name) in enumerate(self.modes()):
            with self.subTest(mode=name):
                a, b, c = uniq(10 + 3 * n), uniq(11 + 3 * n), uniq(12 + 3 * n)
                text, st = self.sh("sleep %s & setsid sleep %s & "
                                   "nohup sleep %s >/dev/null 2>&1 & echo started" % (a, b, c),
                                   tty)
                self.assertIn("started", text)
                self.assertEqual(st.get("exit_code"), 0, st)
                left = pids_with(a) + pids_with(b) + pids_with(c)
                self.assertEqual(left, [], "survived the command's exit (%s): %r" % (name, left))

    def test_terminate_kills_tree_within_a_second(self):
        for n, (tty, name) in enumerate(self.modes()):
            with self.subTest(mode=name):
                a, b = uniq(20 + 2 * n), uniq(21 + 2 * n)
                out = self.start(["/bin/sh", "-c", SH_PROOF + "sleep %s & setsid sleep %s & "
                                  "echo started; wait" % (a, b)], tty)
                pid = out["process_id"]
                text, _, _ = self.read_until(pid, until="started")
                self.assert_inside(text.replace("\r\n", "\n"))
                self.assertTrue(wait_until(lambda: pids_with(a) and pids_with(b), 5 * SLOW),
                                "the tree did not start")
                t0 = time.monotonic()
                res = self.srv.call("terminate_process", {"process_id": pid})
                gone = wait_until(lambda: not pids_with(a) and not pids_with(b), 5)
                elapsed = time.monotonic() - t0
                self.live.remove(pid)
                self.assertTrue(gone, "tree still alive: %r" % (pids_with(a) + pids_with(b)))
                self.assertEqual(res["state"], "exited", res)
                self.assertLess(elapsed, 1.0, "terminate took %.3f s (%s)" % (elapsed, name))

    def test_plan_memfd_never_visible(self):
        """The plan comes as a sealed memfd (`run --plan-fd 5`); the helper closes it before the
        sandbox exists: no descriptor of the command or of the init inside, and none of the
        helper still running on the host, is a memfd; no plan file is written anywhere."""
        body = ("init = open('/proc/1/cmdline', 'rb').read().split(b'\\0')\n"
                "def links(d):\n"
                "    try:\n"
                "        return {f: os.readlink(d + '/' + f) for f in os.listdir(d)"
                " if os.path.lexists(d + '/' + f)}\n"
                "    except OSError as e:\n"
                "        return {'error': e.strerror}\n"
                "result({'argv': [w.decode() for w in init[1:4]],"
                " 'self': links('/proc/self/fd'), 'init': links('/proc/1/fd')})\n"
                "sys.stdin.readline()\n"
                "print('DONE', flush=True)\n")
        for tty, name in self.modes():
            with self.subTest(mode=name):
                out = self.start([PY, "-c", PY_PROOF + body], tty)
                pid = out["process_id"]
                text, cursor = "", 0
                while not re.search(r"^RESULT:.*\n", text, re.M):
                    more, cursor, eof = self.read_until(pid, cursor, until="\n")
                    text = (text + more).replace("\r\n", "\n")
                    self.assertFalse(eof, text)
                self.assert_inside(text)
                res = json.loads(re.search(r"^RESULT:(.*)$", text, re.M).group(1))
                self.assertIn(res["argv"], (["run", "--plan-fd", "5"], ["run", "--wait-fd", "5"]),
                              res)
                self.assertNotIn("5", res["self"], res)
                for where in ("self", "init"):
                    for f, target in res[where].items():
                        self.assertNotIn("memfd", target, (where, res))
                # the command is still running: the helpers of this server on the host (the
                # outer one, the init) hold no memfd either
                helpers = [h for h in descendants(self.srv.proc.pid)
                           if cmdline(h)[:3] in ([b"codespace-linux-sandbox", b"run", b"--plan-fd"],
                                                 [b"codespace-linux-sandbox", b"run", b"--wait-fd"])]
                self.assertTrue(helpers, "no helper of this server found on the host")
                for h in helpers:
                    for f in os.listdir("/proc/%d/fd" % h):
                        try:
                            target = os.readlink("/proc/%d/fd/%s" % (h, f))
                        except OSError:
                            continue
                        self.assertNotIn("memfd", target, (h, f))
                self.srv.call("write_stdin", {"process_id": pid, "data": "go\n"})
                text, _, _ = self.read_until(pid, cursor)
                self.assertIn("DONE", text)
                self.live.remove(pid)
        # nothing of the plans (nor of the probe) is left in the server's TMPDIR; the uds
        # runner's own directory (codespace-runner-*) lives there while the server runs
        left = [n for n in os.listdir(self.srvtmp) if not n.startswith("codespace-runner-")]
        self.assertEqual(left, [], "left in the server's TMPDIR: %r" % left)

    def test_only_std_fds_open(self):
        body = ("fds = os.listdir('/proc/self/fd')\n"
                "extra = [f for f in fds if f not in ('0', '1', '2')"
                " and os.path.lexists('/proc/self/fd/' + f)]\n"
                "result({'fds': sorted(fds), 'extra': {f: os.readlink('/proc/self/fd/' + f)"
                " for f in extra}, 'std': [os.readlink('/proc/self/fd/%d' % i)"
                " for i in range(3)]})\n")
        for tty, name in self.modes():
            with self.subTest(mode=name):
                res = self.py(body, tty)
                self.assertEqual(res["extra"], {}, "descriptors open inside: %r" % res)
                self.assertLessEqual(len(res["fds"]), 4, res)  # 0-2 and the listing's own
                for target in res["std"]:
                    self.assertRegex(target, r"^/dev/pts/\d+$" if tty else r"^pipe:", res)

    def test_environment_only_listed(self):
        for tty, name in self.modes():
            with self.subTest(mode=name):
                text, st = self.run_cmd(["/usr/bin/env"], tty)
                self.assertEqual(st.get("exit_code"), 0, (st, text))
                env = dict(line.split("=", 1) for line in text.splitlines() if line)
                self.assertEqual(set(env), TTY_ENV if tty else PIPE_ENV, env)
                self.assertEqual(env["PATH"], SANDBOX_PATH, env)
                self.assertEqual(env["HOME"], self.ws, env)
                self.assertEqual(env["LANG"], "C.UTF-8", env)
                self.assertEqual(env["TERM"], "xterm-256color" if tty else "dumb", env)
                self.assertEqual(env["PAGER"], "cat")
                self.assertEqual(env["GIT_PAGER"], "cat")
                self.assertEqual(env["GIT_TERMINAL_PROMPT"], "0")
                self.assertEqual(env["CI"], "1")
                if not tty:
                    self.assertEqual(env["NO_COLOR"], "1")
                self.assertNotIn(TAG, text)
        # TMPDIR names a directory that exists (and is writable) inside
        text, st = self.sh('test -d "$TMPDIR" && test -w "$TMPDIR" && echo TMPDIR-OK')
        self.assertIn("TMPDIR-OK", text, (st, text))

    def test_pty_terminal_and_stdin(self):
        out = self.start(["/bin/sh", "-c", SH_PROOF + "test -t 0 && test -t 1 && echo IS-A-TTY; "
                          "(exec 3</dev/tty) && echo CTTY-OK; echo READY; read line; "
                          "echo \"got:$line\""], True)
        pid = out["process_id"]
        text, cursor, _ = self.read_until(pid, until="READY")
        self.assert_inside(text.replace("\r\n", "\n"))
        self.assertIn("IS-A-TTY", text)
        self.assertIn("CTTY-OK", text)  # the terminal is its controlling terminal
        self.srv.call("write_stdin", {"process_id": pid, "data": "hello-%s\n" % TAG})
        rest, _, eof = self.read_until(pid, cursor)
        self.assertTrue(eof)
        self.assertIn("got:hello-%s" % TAG, rest)
        self.live.remove(pid)
        st = self.srv.call("process_status", {"process_id": pid})
        self.assertEqual((st["termination"], st.get("exit_code"), st["tty"]),
                         ("exited", 0, True), st)

    def test_pipe_has_no_terminal(self):
        text, st = self.sh("test -t 0 || test -t 1 && echo HAS-TTY; "
                           "(exec 3</dev/tty) 2>/dev/null && echo DEV-TTY-OPENS; echo END")
        self.assertIn("END", text)
        self.assertNotIn("HAS-TTY", text)
        self.assertNotIn("DEV-TTY-OPENS", text, "the server's controlling terminal leaked")



class _Hits(http.server.BaseHTTPRequestHandler):
    """A loopback HTTP server the sandboxed command tries to reach; counts what arrives."""
    hits = 0

    def log_message(self, *a):
        pass

    def do_GET(self):
        _Hits.hits += 1
        body = b"reached " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


# Inside: CONNECT and absolute-form requests through the proxy; each line is "<what> <status
# line>" (or the error). A 3 s timeout bounds every attempt.
PROXY_PROBE = """
import socket
proxy = os.environ['HTTP_PROXY'].split('//')[1].rsplit(':', 1)
def ask(head):
    try:
        s = socket.create_connection((proxy[0], int(proxy[1])), timeout=3)
        s.sendall(head.encode())
        data = b''
        while not (head.startswith('CONNECT') and b'\\r\\n\\r\\n' in data):
            c = s.recv(4096)
            if not c:
                break
            data += c
        return data.decode('utf-8', 'replace').split('\\r\\n')[0] + ' | ' + data.decode(
            'utf-8', 'replace').split('\\r\\n\\r\\n', 1)[-1]
    except OSError as e:
        return 'error %s' % e
out = []
for host in sys.argv[1:]:
    out.append(['CONNECT ' + host, ask('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (host, host))])
    out.append(['GET ' + host, ask('GET http://%s/probe HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' % host)])
result(out)
"""


# Steps from argv, in order, each refused: "net:HOST:PORT" asks the proxy for HOST:PORT (CONNECT,
# then GET: two refusals of one entry), "sock:N" calls socket(N, SOCK_STREAM, 0), "ptrace" calls
# ptrace(PTRACE_TRACEME). Prints what each step saw.
FLOOD_PROBE = PROXY_PROBE.split("out = []")[0] + """
out = []
for step in sys.argv[1:]:
    if step.startswith('net:'):
        host = step[4:]
        out.append([step, [ask('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (host, host)),
                           ask('GET http://%s/probe HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' % host)]])
    elif step.startswith('sock:'):
        out.append([step, list(sc(41, int(step[5:]), 1, 0))])
    else:
        out.append([step, list(sc(101, 0, 0, 0, 0))])
result(out)
"""


class NetworkAllowCase(unittest.TestCase):
    """network_allow through the real server's exec_command (docs/contract/sandbox.md section 4): a
    workspace with network "enabled" and network_allow [] reaches nothing, not even a loopback
    server on this machine; one listing that server's address reaches it (the control)."""

    @classmethod
    def setUpClass(cls):
        cls.helper = required_env("CS_SANDBOX_BIN")
        cls.tmp = tempfile.mkdtemp(prefix="cs-e2e-netallow-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hits)
        cls.http.daemon_threads = True
        cls.port = cls.http.server_address[1]
        threading.Thread(target=cls.http.serve_forever, daemon=True).start()
        cls.addClassCleanup(cls.http.server_close)
        cls.addClassCleanup(cls.http.shutdown)
        roots = {}
        for wid in ("none", "listed"):
            roots[wid] = os.path.join(cls.tmp, wid)
            os.makedirs(roots[wid])
        state = os.path.join(cls.tmp, "state")
        os.makedirs(state)
        cfg = os.path.join(cls.tmp, "registry.json")
        with open(cfg, "w") as f:
            json.dump({"workspaces": {
                "none": {"root": roots["none"], "profile": "workspace-write",
                         "network": "enabled", "network_allow": []},
                "listed": {"root": roots["listed"], "profile": "workspace-write",
                           "network": "enabled",
                           "network_allow": ["127.0.0.1:%d" % cls.port]}}}, f)
        cls.srv = Server(["--config", cfg, "--operations-db", ":memory:"], state,
                         {"CODESPACE_LINUX_SANDBOX_BIN": cls.helper,
                          "CODESPACE_REQUIRE_LINUX_SANDBOX": "1"})
        cls.addClassCleanup(cls.srv.close)

    def probe(self, wid, hosts):
        out = self.srv.call("exec_command", {
            "workspace_id": wid, "command": [PY, "-c", PY_PROOF + PROXY_PROBE] + hosts,
            "yield_ms": int(min(30000, 20000 * SLOW))})
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        self.assertEqual(out["state"], "exited", out)
        text = self.srv.call("read_process", {"process_id": out["process_id"]})["chunk"]
        self.assertNotIn("NOT-INSIDE", text)
        m = re.search(r"^RESULT:(.*)$", text, re.M)
        self.assertTrue(m, "no result: %r" % text)
        return json.loads(m.group(1))

    def test_empty_list_reaches_nothing(self):
        info = self.srv.call("workspace_info", {"workspace_id": "none"})
        self.assertEqual(info["execution"]["network"]["policy"], "enabled", info)
        self.assertEqual(info["execution"]["network"]["allow"], [], info)
        before = _Hits.hits
        hosts = ["127.0.0.1:%d" % self.port, "localhost:%d" % self.port,
                 "[::ffff:127.0.0.1]:%d" % self.port, "2130706433:%d" % self.port,
                 "1.1.1.1:443", "example.com:443"]
        for what, line in self.probe("none", hosts):
            with self.subTest(request=what):
                self.assertIn(" 403 ", line)
                self.assertIn("network_allow is empty", line)
        self.assertEqual(_Hits.hits, before, "a request reached the loopback server")

    def test_refusals_reported(self):
        hosts = ["127.0.0.1:%d" % self.port, "example.com:443"]
        out = self.srv.call("exec_command", {
            "workspace_id": "none", "command": [PY, "-c", PY_PROOF + PROXY_PROBE] + hosts,
            "yield_ms": int(min(30000, 20000 * SLOW))})
        self.assertEqual(out["state"], "exited", out)
        got = {(d["target"], d["reason"]): d["count"] for d in out["denials"]}
        # each host is asked twice (CONNECT and GET): one entry, count 2
        self.assertEqual(got, {("127.0.0.1:%d" % self.port, "not_allowed"): 2,
                               ("example.com:443", "not_allowed"): 2})
        self.assertTrue(all(d["kind"] == "network" for d in out["denials"]))
        st = self.srv.call("process_status", {"process_id": out["process_id"]})
        self.assertEqual(st["denials"], out["denials"])
        self.assertNotIn("denials_dropped", out)
        self.assertNotIn("denials_dropped", st)
        info = self.srv.call("workspace_info", {"workspace_id": "none"})
        self.assertIn("network", info["execution"]["isolation"]["denial_reports"], info)

    def test_hundred_hosts_give_24_entries_and_a_count(self):
        """A flood of one kind fills the 24 open entries; the 8 kept for other kinds stay empty
        and every refusal not listed is counted (docs/contract/tools.md section 6)."""
        hosts = ["h%d.invalid:80" % i for i in range(100)]
        out = self.srv.call("exec_command", {
            "workspace_id": "none", "command": [PY, "-c", PY_PROOF + PROXY_PROBE] + hosts,
            "yield_ms": int(min(30000, 25000 * SLOW))})
        self.assertEqual(out["state"], "exited", out)
        self.assertEqual(len(out["denials"]), 24, out["denials"])
        self.assertEqual([d["target"] for d in out["denials"]], hosts[:24])
        self.assertTrue(all(d["count"] == 2 for d in out["denials"]), out["denials"])
        # CONNECT and GET for each of the 76 hosts not listed
        self.assertEqual(out.get("denials_dropped"), 2 * 76, out)

    # ---- floods (issue #29 item 6): a refusal of a rarer kind after a flood is listed -------

    def flood(self, steps):
        """Runs FLOOD_PROBE with steps in the "none" workspace (network enabled, nothing
        allowed): (exec, process_status, read_process) results, once the command has ended,
        after checking each step was refused as the command sees it."""
        out = self.srv.call("exec_command", {
            "workspace_id": "none", "command": [PY, "-c", PY_PROOF + FLOOD_PROBE] + steps,
            "yield_ms": int(min(30000, 25000 * SLOW))})
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        self.assertEqual(out["state"], "exited", out)
        pid = out["process_id"]
        st = self.srv.call("process_status", {"process_id": pid})
        rd = self.srv.call("read_process", {"process_id": pid})
        self.assertNotIn("NOT-INSIDE", rd["chunk"])
        m = re.search(r"^RESULT:(.*)$", rd["chunk"], re.M)
        self.assertTrue(m, "no result: %r" % rd["chunk"])
        for step, seen in json.loads(m.group(1)):
            # reporting (or dropping a report) never changes what the command sees
            if step.startswith("net:"):
                self.assertTrue(all(" 403 " in line for line in seen), (step, seen))
            else:
                self.assertEqual(seen, [-1, EPERM], step)
        return out, st, rd

    def assert_all_answers(self, answers, want, dropped):
        for name, r in zip(("exec_command", "process_status", "read_process"), answers):
            got = [(d["kind"], d["target"], d["count"]) for d in r.get("denials", [])]
            self.assertEqual(got, want, name)
            self.assertEqual(r.get("denials_dropped"), dropped, "%s: %r" % (name, r))

    def test_proxy_flood_keeps_a_later_ptrace(self):
        hosts = ["f%d.invalid:80" % i for i in range(60)]
        answers = self.flood(["net:" + h for h in hosts] + ["ptrace", "ptrace"])
        want = [("network", h, 2) for h in hosts[:24]] + [("syscall", "ptrace", 2)]
        self.assert_all_answers(answers, want, 2 * 36)

    def test_syscall_flood_keeps_a_later_proxy_refusal(self):
        # socket() of a family past AF_INET6 is refused and reported per family: 60 distinct
        fams = list(range(20, 80))
        answers = self.flood(["sock:%d" % f for f in fams] + ["net:late.invalid:443"])
        want = ([("syscall", "socket(%d)" % f, 1) for f in fams[:24]] +
                [("network", "late.invalid:443", 2)])
        self.assert_all_answers(answers, want, 36)

    def test_past_32_entries_every_refusal_counted(self):
        """30 syscall entries then 10 hosts: 24 syscall entries, the 8 kept slots take the first
        8 hosts; the 6 syscall and 2 host entries that found no room are counted, and so is a
        ptrace once all 32 are taken (a repeat of a listed entry still raises its count)."""
        fams = list(range(20, 50))
        hosts = ["p%d.invalid:80" % i for i in range(10)]
        answers = self.flood(["sock:%d" % f for f in fams] + ["net:" + h for h in hosts] +
                             ["ptrace", "sock:20"])
        want = ([("syscall", "socket(20)", 2)] +
                [("syscall", "socket(%d)" % f, 1) for f in fams[1:24]] +
                [("network", h, 2) for h in hosts[:8]])
        self.assert_all_answers(answers, want, 6 + 2 * 2 + 1)

    def test_few_refusals_no_drop_count(self):
        answers = self.flood(["sock:20", "net:one.invalid:80", "ptrace"])
        want = [("syscall", "socket(20)", 1), ("network", "one.invalid:80", 2),
                ("syscall", "ptrace", 1)]
        self.assert_all_answers(answers, want, None)

    def test_listed_loopback_address_is_reached(self):
        before = _Hits.hits
        res = dict(self.probe("listed", ["127.0.0.1:%d" % self.port, "localhost:%d" % self.port,
                                         "127.0.0.1:%d" % (self.port % 65535 + 1)]))
        self.assertIn(" 200 ", res["GET 127.0.0.1:%d" % self.port])
        self.assertIn("reached /probe", res["GET 127.0.0.1:%d" % self.port])
        self.assertIn(" 200 ", res["CONNECT 127.0.0.1:%d" % self.port])
        # a name is not the address: "localhost" is not listed
        self.assertIn(" 403 ", res["GET localhost:%d" % self.port])
        self.assertIn(" 403 ", res["GET 127.0.0.1:%d" % (self.port % 65535 + 1)])
        self.assertGreater(_Hits.hits, before)


if __name__ == "__main__":
    unittest.main()
