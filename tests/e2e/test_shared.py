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


if __name__ == "__main__":
    unittest.main()
