#!/usr/bin/python3
"""Workspaces for a coding agent's day through the real MCP server (workflows.md sections 3, 4):
network "loopback" (lo only, AF_INET/AF_INET6 allowed, nothing leaves, no_route denials) and
processes "shared" (many live processes, patches while they run, one network namespace per
workspace).

Starts codespace-mcp (CODESPACE_MCP_BIN) over stdio with the helper (CS_SANDBOX_BIN) required:
nothing here skips. CS_E2E_RUNNER=uds (the *_uds CTest copy) runs the commands in the uds
worker. Scripts run inside with /usr/bin/python3; the host side is standard library only. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
    CS_SANDBOX_BIN=build/release/src/main/codespace-linux-sandbox \\
        /usr/bin/python3 -m unittest -v test_shared          (from tests/e2e)
"""
import json
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import unittest

import mcp_stdio

PY = "/usr/bin/python3"


def required_env(name):
    path = os.environ.get(name, "")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("%s=%r is not an executable (this suite never skips)" % (name, path))
    return path


SLOW = 3.0 if "ASAN_OPTIONS" in os.environ else 1.0

# Each command first proves it runs inside the sandbox (PID 1 is the helper's init).
PY_PROOF = (
    "import os, sys\n"
    "_c = open('/proc/1/cmdline', 'rb').read()\n"
    "if b'codespace-linux-sandbox' not in _c: print('NOT-INSIDE'); sys.exit(99)\n")

CONNECT_PY = PY_PROOF + r"""
import errno, socket
for arg in sys.argv[1:]:
    host, port = arg.rsplit(" ", 1)
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam)
    s.settimeout(5)
    try:
        s.connect((host.strip("[]"), int(port)))
        print(arg, "CONNECTED")
    except OSError as e:
        print(arg, errno.errorcode.get(e.errno, str(e.errno)))
    s.close()
"""


class Server(mcp_stdio.StdioServer):
    def __init__(self, args, state_dir, extra_env=None):
        super().__init__(required_env("CODESPACE_MCP_BIN"), args, state_dir, extra_env,
                         client="test_shared")


class SharedBase(unittest.TestCase):
    """A sandboxed server over a registry the subclass describes (WORKSPACES: id -> entry without
    root; each gets a fresh directory)."""

    WORKSPACES = {}
    EXTRA_ENV = {}
    ARGS = []

    @classmethod
    def setUpClass(cls):
        cls.helper = required_env("CS_SANDBOX_BIN")
        cls.tmp = tempfile.mkdtemp(prefix="cs-e2e-shared-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.roots = {}
        reg = {}
        for wid, entry in cls.WORKSPACES.items():
            root = os.path.join(cls.tmp, wid)
            os.makedirs(root)
            cls.roots[wid] = root
            reg[wid] = dict(entry, root=root, profile="workspace-write")
        state = os.path.join(cls.tmp, "state")
        os.makedirs(state)
        cfg = os.path.join(cls.tmp, "registry.json")
        with open(cfg, "w") as f:
            json.dump({"workspaces": reg}, f)
        env = {"CODESPACE_LINUX_SANDBOX_BIN": cls.helper, "CODESPACE_REQUIRE_LINUX_SANDBOX": "1",
               "TMPDIR": cls.tmp}
        env.update(cls.EXTRA_ENV)
        cls.srv = Server(["--config", cfg, "--operations-db", ":memory:"] + cls.ARGS, state, env)
        cls.addClassCleanup(cls.srv.close)

    def setUp(self):
        self.live = []

    def tearDown(self):
        for pid in self.live:
            self.srv.call_raw("terminate_process", {"process_id": pid})

    def run_py(self, wid, code, *args, yield_ms=None):
        """Runs code to its end in wid; returns (exec_command output, combined output text)."""
        out = self.srv.call("exec_command", {
            "workspace_id": wid, "command": [PY, "-c", code] + list(args),
            "yield_ms": yield_ms or int(min(30000, 20000 * SLOW))})
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        self.assertEqual(out["state"], "exited", out)
        text = self.srv.call("read_process", {"process_id": out["process_id"]})["chunk"]
        self.assertNotIn("NOT-INSIDE", text)
        return out, text


class LoopbackCase(SharedBase):
    """network "loopback" (workflows.md section 4) in an exclusive workspace."""

    WORKSPACES = {"lb": {"network": "loopback"}}

    def test_workspace_info(self):
        info = self.srv.call("workspace_info", {"workspace_id": "lb"})
        net = info["execution"]["network"]
        self.assertEqual(net["policy"], "loopback", info)
        self.assertEqual(net["enforcement"], "enforced", info)
        self.assertNotIn("allow", net)
        iso = info["execution"]["isolation"]
        if iso.get("denial_reports") is not None and "syscall" in iso["denial_reports"]:
            self.assertIn("network", iso["denial_reports"], info)

    def test_server_and_client_in_one_command(self):
        code = PY_PROOF + (
            "import threading, http.server, urllib.request\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        self.send_response(200); self.end_headers(); self.wfile.write(b'lo-ok')\n"
            "    def log_message(self, *a): pass\n"
            "srv = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
            "threading.Thread(target=srv.serve_forever, daemon=True).start()\n"
            "print(urllib.request.urlopen('http://127.0.0.1:%d/' % srv.server_address[1],"
            " timeout=10).read().decode())\n")
        _, text = self.run_py("lb", code)
        self.assertEqual(text.strip(), "lo-ok")

    def test_nothing_leaves_and_no_route_reported(self):
        # a host server on 127.0.0.1: the sandbox's own loopback is not the host's
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        self.addCleanup(srv.close)
        port = srv.getsockname()[1]
        out, text = self.run_py("lb", CONNECT_PY, "10.0.0.1 80", "192.0.2.1 9",
                                "2001:db8::1 443", "127.0.0.1 %d" % port)
        res = dict(line.rsplit(" ", 1) for line in text.splitlines())
        self.assertEqual(res, {"10.0.0.1 80": "ENETUNREACH", "192.0.2.1 9": "ENETUNREACH",
                               "2001:db8::1 443": "ENETUNREACH",
                               "127.0.0.1 %d" % port: "ECONNREFUSED"})
        srv.settimeout(0)
        with self.assertRaises(BlockingIOError):
            srv.accept()
        got = {(d["kind"], d["target"], d["reason"]) for d in out.get("denials", [])}
        info = self.srv.call("workspace_info", {"workspace_id": "lb"})
        if "network" in (info["execution"]["isolation"].get("denial_reports") or []):
            self.assertEqual(got, {("network", "10.0.0.1:80", "no_route"),
                                   ("network", "192.0.2.1:9", "no_route"),
                                   ("network", "[2001:db8::1]:443", "no_route")})

    def test_packet_and_netlink_refused(self):
        code = PY_PROOF + (
            "import socket\n"
            "for fam in (socket.AF_PACKET, socket.AF_NETLINK):\n"
            "    try: socket.socket(fam, socket.SOCK_RAW); print('allowed', fam)\n"
            "    except PermissionError: print('refused')\n")
        _, text = self.run_py("lb", code)
        self.assertEqual(text.split(), ["refused", "refused"])


def patch_add(path, text):
    return "*** Begin Patch\n*** Add File: %s\n+%s\n*** End Patch\n" % (path, text)


class SharedCase(SharedBase):
    """processes "shared" (workflows.md section 3) beside an exclusive workspace, with the live
    cap at 3: many live processes, patches while they run, the cap named when reached."""

    WORKSPACES = {"sh": {"processes": "shared"}, "ex": {}}
    EXTRA_ENV = {"CODESPACE_MAX_PROCESSES": "3"}

    def start(self, wid, argv):
        out = self.srv.call("exec_command", {"workspace_id": wid, "command": argv})
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        self.live.append(out["process_id"])
        return out["process_id"]

    def wait_exit(self, pid):
        text, cursor = "", 0
        deadline = time.monotonic() + 20 * SLOW
        while time.monotonic() < deadline:
            st = self.srv.call("read_process", {"process_id": pid, "cursor": cursor,
                                                "wait_ms": 5000})
            text += st["chunk"]
            cursor = st["cursor"]
            if st["eof"]:
                return text
        self.fail("%s did not end" % pid)

    def test_workspace_info_says_share(self):
        sh = self.srv.call("workspace_info", {"workspace_id": "sh"})
        ex = self.srv.call("workspace_info", {"workspace_id": "ex"})
        self.assertEqual(sh["execution"]["serialization"]["process_conflict"], "share", sh)
        self.assertEqual(ex["execution"]["serialization"]["process_conflict"], "reject", ex)

    def test_many_live_patches_meanwhile_and_the_cap(self):
        a = self.start("sh", ["sleep", "60"])
        b = self.start("sh", ["sleep", "60"])
        # a patch runs while both live, and the processes see its file
        out = self.srv.call("apply_patch", {"workspace_id": "sh",
                                            "patch": patch_add("while-live.txt", "patched")})
        self.assertEqual(out["status"], "applied", out)
        c = self.start("sh", ["cat", "while-live.txt"])
        self.assertEqual(self.wait_exit(c).strip(), "patched")
        self.live.remove(c)
        # the third place again, then the cap: refused at once, naming the limit
        c = self.start("sh", ["sleep", "60"])
        t0 = time.monotonic()
        _, err = self.srv.call_raw("exec_command", {"workspace_id": "sh", "command": ["true"]})
        self.assertLess(time.monotonic() - t0, 3 * SLOW)
        self.assertEqual(err["code"], "WORKSPACE_BUSY", err)
        self.assertIn("max_live_processes", err["message"])
        # one ends: its place frees
        self.srv.call("terminate_process", {"process_id": a})
        self.live.remove(a)
        d = self.start("sh", ["sleep", "60"])
        for pid in (b, c, d):
            self.assertEqual(self.srv.call("process_status", {"process_id": pid})["state"],
                             "running")

    def test_exclusive_unchanged(self):
        self.start("ex", ["sleep", "60"])
        for tool, args in (("exec_command", {"workspace_id": "ex", "command": ["true"]}),
                           ("apply_patch", {"workspace_id": "ex",
                                            "patch": patch_add("never.txt", "x")})):
            _, err = self.srv.call_raw(tool, args)
            self.assertEqual(err["code"], "WORKSPACE_BUSY", (tool, err))
            self.assertIn("a live process", err["message"])
        self.assertFalse(os.path.exists(os.path.join(self.roots["ex"], "never.txt")))

    def test_a_failed_spawn_frees_its_place(self):
        for _ in range(5):
            _, err = self.srv.call_raw("exec_command", {"workspace_id": "sh",
                                                        "command": ["/nonexistent/cmd"]})
            self.assertEqual(err["code"], "PROCESS_SPAWN_FAILED", err)
        for _ in range(3):
            self.start("sh", ["sleep", "60"])


TAG = "%x%04x" % (os.getpid() % 0xffff, int(time.time() * 1000) % 0xffff)

# A client that never goes through a proxy (in an enabled workspace HTTP_PROXY points at the
# helper's, which refuses loopback destinations), retrying while the server starts.
CLIENT_PY = PY_PROOF + r"""
import time, urllib.request
op = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for _ in range(int(sys.argv[2])):
    try:
        print(op.open(sys.argv[1], timeout=5).read().decode().strip())
        break
    except OSError:
        time.sleep(0.1)
else:
    print("UNREACHABLE")
"""


def holders(label):
    """Host pids of `codespace-linux-sandbox netns-hold <label>` processes."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if len(words) >= 3 and words[1] == b"netns-hold" and words[2] == label.encode() \
                and words[0].endswith(b"codespace-linux-sandbox"):
            out.append(int(d))
    return out


def netns_inode_users(inode):
    """Host pids whose network namespace is inode."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat("/proc/%s/ns/net" % d).st_ino == inode:
                out.append(int(d))
        except OSError:
            continue
    return out


class WorkspaceNetnsCase(SharedBase):
    """One network namespace per shared workspace (workflows.md section 3): a server started by
    one exec_command is reached by the next, in loopback and enabled workspaces; two workspaces
    never share one; it is gone after the last process and the grace period."""

    LB, LB2, EN, EX = "lb-" + TAG, "lb2-" + TAG, "en-" + TAG, "ex-" + TAG
    WORKSPACES = {LB: {"processes": "shared", "network": "loopback"},
                  LB2: {"processes": "shared", "network": "loopback"},
                  EN: {"processes": "shared", "network": "enabled"},
                  EX: {"network": "loopback"}}
    EXTRA_ENV = {"CODESPACE_NETNS_GRACE_SECS": "2"}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for wid, root in cls.roots.items():
            with open(os.path.join(root, "who.txt"), "w") as f:
                f.write("served by %s\n" % wid)

    def serve(self, wid, port):
        out = self.srv.call("exec_command", {
            "workspace_id": wid,
            "command": [PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"]})
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        self.live.append(out["process_id"])
        return out["process_id"]

    def fetch(self, wid, port, tries=150):
        """The server's answer, retried while it starts (tries of 0.1 s), or UNREACHABLE."""
        _, text = self.run_py(wid, CLIENT_PY, "http://127.0.0.1:%d/who.txt" % port, str(tries))
        return text.strip()

    def stop(self, pid):
        self.srv.call("terminate_process", {"process_id": pid})
        self.live.remove(pid)

    def test_server_reached_from_the_next_command_loopback(self):
        pid = self.serve(self.LB, 18081)
        self.assertEqual(self.fetch(self.LB, 18081), "served by " + self.LB)
        self.assertEqual(len(holders(self.LB)), 1)
        self.stop(pid)

    def test_server_reached_from_the_next_command_enabled(self):
        pid = self.serve(self.EN, 18082)
        self.assertEqual(self.fetch(self.EN, 18082), "served by " + self.EN)
        # the proxy stays per command: the client still got one
        _, text = self.run_py(self.EN, PY_PROOF + "print(os.environ.get('HTTP_PROXY', ''))")
        self.assertTrue(text.strip().startswith("http://127.0.0.1:"), text)
        self.stop(pid)

    def test_joined_commands_run_in_the_helper_started_ahead(self):
        """A shared workspace's command goes to the helper started ahead like any other (its
        message carries the workspace's namespace, issue 28): after the first sandboxed command
        the next ones' PID 1 is `run --wait-fd 5`, and every one is in the holder's network
        namespace."""
        code = PY_PROOF + ("print(open('/proc/1/cmdline', 'rb').read().split(b'\\0')[1:3])\n"
                           "print(os.readlink('/proc/self/ns/net'))\n")
        for i in range(3):
            _, text = self.run_py(self.LB, code)
            lines = text.strip().splitlines()
            h = holders(self.LB)
            self.assertEqual(len(h), 1, h)
            self.assertEqual(lines[-1], os.readlink("/proc/%d/ns/net" % h[0]), (i, text))
            self.assertNotEqual(lines[-1], os.readlink("/proc/self/ns/net"))
            if i > 0:
                self.assertEqual(lines[0], "[b'run', b'--wait-fd']", (i, text))

    def test_two_workspaces_same_port_each_reaches_its_own(self):
        a = self.serve(self.LB, 18090)
        b = self.serve(self.LB2, 18090)
        self.assertEqual(self.fetch(self.LB, 18090), "served by " + self.LB)
        self.assertEqual(self.fetch(self.LB2, 18090), "served by " + self.LB2)
        ha, hb = holders(self.LB), holders(self.LB2)
        self.assertEqual((len(ha), len(hb)), (1, 1))
        self.assertNotEqual(os.stat("/proc/%d/ns/net" % ha[0]).st_ino,
                            os.stat("/proc/%d/ns/net" % hb[0]).st_ino)
        # and a workspace without a server reaches none of them
        self.assertEqual(self.fetch(self.EN, 18090, tries=3), "UNREACHABLE")
        self.stop(a)
        self.stop(b)

    def test_nothing_leaves_a_shared_loopback_namespace(self):
        out, text = self.run_py(self.LB, CONNECT_PY, "10.0.0.1 80", "192.0.2.1 9")
        self.assertEqual(text.split(), ["10.0.0.1", "80", "ENETUNREACH",
                                        "192.0.2.1", "9", "ENETUNREACH"])
        info = self.srv.call("workspace_info", {"workspace_id": self.LB})
        if "network" in (info["execution"]["isolation"].get("denial_reports") or []):
            self.assertEqual({(d["target"], d["reason"]) for d in out.get("denials", [])},
                             {("10.0.0.1:80", "no_route"), ("192.0.2.1:9", "no_route")})

    def test_exclusive_keeps_a_namespace_per_command(self):
        srv = self.serve(self.EX, 18083)
        self.assertEqual(holders(self.EX), [])
        self.stop(srv)
        # the server is gone with its command; a namespace of the next command's own
        self.assertEqual(self.fetch(self.EX, 18083, tries=3), "UNREACHABLE")
        self.assertEqual(holders(self.EX), [])

    def test_namespace_kept_in_grace_then_gone(self):
        self.run_py(self.LB2, PY_PROOF + "print('one')")
        h = holders(self.LB2)
        self.assertEqual(len(h), 1)
        inode = os.stat("/proc/%d/ns/net" % h[0]).st_ino
        # within the grace period the next command joins the same namespace
        _, text = self.run_py(self.LB2, PY_PROOF + "print(os.stat('/proc/self/ns/net').st_ino)")
        self.assertEqual(int(text.strip()), inode)
        self.assertEqual(holders(self.LB2), h)
        # after it: no holder, and no process of the host in that namespace
        deadline = time.monotonic() + 15 * SLOW
        while time.monotonic() < deadline and (holders(self.LB2) or netns_inode_users(inode)):
            time.sleep(0.2)
        self.assertEqual(holders(self.LB2), [])
        self.assertEqual(netns_inode_users(inode), [])
        # and the next command gets a new one
        self.run_py(self.LB2, PY_PROOF + "print('again')")
        h2 = holders(self.LB2)
        self.assertEqual(len(h2), 1)
        self.assertNotEqual(h2, h)



class HolderLifetimeCase(SharedBase):
    """Issue 34's rule for the namespace holder: no child outlives its parent. The gateway is
    SIGKILLed while a shared workspace's namespace is held by a live command: the holder, the
    command and the namespace go with it (checked from the host)."""

    SH = "hold-" + TAG
    WORKSPACES = {SH: {"processes": "shared", "network": "loopback"}}

    def test_gateway_sigkill_leaves_no_holder(self):
        if mcp_stdio.runner() == "remote":
            self.skipTest("a remote worker outlives its gateways by design (docs/scale-out.md)")
        arg = "%d.%03d" % (3000 + os.getpid() % 1000, int(time.time() * 1000) % 1000)
        out = self.srv.call("exec_command", {"workspace_id": self.SH,
                                             "command": ["sleep", arg]})
        self.assertEqual(out["dispatch_status"], "confirmed", out)
        deadline = time.monotonic() + 10 * SLOW
        while time.monotonic() < deadline and len(holders(self.SH)) != 1:
            time.sleep(0.05)
        h = holders(self.SH)
        self.assertEqual(len(h), 1)
        inode = os.stat("/proc/%d/ns/net" % h[0]).st_ino
        self.srv.kill()
        deadline = time.monotonic() + 10 * SLOW
        while time.monotonic() < deadline and (holders(self.SH) or netns_inode_users(inode)):
            time.sleep(0.05)
        self.assertEqual(holders(self.SH), [], "the holder outlived its gateway")
        self.assertEqual(netns_inode_users(inode), [], "the namespace outlived its gateway")
        left = []
        for d in os.listdir("/proc"):
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    if f.read() == b"sleep\0" + arg.encode() + b"\0":
                        left.append(d)
            except OSError:
                pass
        self.assertEqual(left, [], "the command outlived its gateway")


if __name__ == "__main__":
    unittest.main()
