#!/usr/bin/python3
"""End-to-end tests of the remote runner (issue 21, docs/scale-out.md).

Two network namespaces joined by a veth pair stand for two hosts: `codespace-runtime --listen`
runs in one, `codespace-mcp --runner tcp://...` in the other, mutually authenticated with TLS 1.3
and pinned certificates generated here by `openssl req -x509` (no key is ever committed). The
namespaces, the veth pair and the address block (10.231.N.0/30, N random) are unique per test and
deleted in cleanup.

- through the link: read, apply_patch, exec_command; workspace_info reports the worker;
- the worker serves only its own roots: a gateway whose registry names another root is refused;
- the link cut in the middle of an apply_patch (`ip link set down`): the call answers `unknown`,
  the ledger row is `unknown`, the worker finished the patch once, and the retry after the link
  is back applies nothing twice;
- the worker killed (SIGKILL) and started again: the old process handle is PROCESS_NOT_FOUND and
  the workspace is free again;
- a wrong certificate refused in both directions (the gateway with a wrong pin, the worker with a
  wrong pin): nothing runs, the call fails before dispatch;
- pre-shared key mode (TLS 1.3 external PSK; keys made here by `openssl rand -hex 32`): read,
  apply_patch and exec_command through it, workspace_info reports the identity and never the
  key, which no log line holds either; another key on either side and another identity are
  refused (the worker logs it, the gateway's error names the pre-shared key), nothing runs; a
  key shorter than 32 bytes, a key file readable by others and a mix of both modes are refused
  at start by both programs;
- a registry workspace on a remote worker whose root does not exist on the gateway's host (the
  gateway runs in a mount namespace where that path is hidden): served through the worker;
- the gateway's own uds worker killed: the workspace it held is free again, while one on the
  remote worker stays held by its running process (WORKSPACE_BUSY);
- workspace_info's isolation is the worker's own probe (docs/security-model.md R17), checked
  against what a command really gets (its PID namespace and uid): a sandboxed worker claims
  linux-sandbox/enforced and its commands have a PID namespace of their own; an unprivileged
  worker without --sandbox claims none/none, although the gateway's own sandbox works (its local
  workspace says so), and its commands share the host's PID namespace; a gateway with
  CODESPACE_REQUIRE_LINUX_SANDBOX=1 refuses that worker (calls fail before dispatch naming the
  worker and the requirement, nothing runs, the gateway logs it); a worker whose --sandbox
  helper is missing or fails its probe, or that is required to sandbox without one, does not
  start; before the worker's first hello, none/none, and its real report once it is reached.

Needs root (namespaces), `ip` (iproute2) and `openssl`. Outside CI a missing piece skips; in CI
(CI=true) it fails. Run (from tests/e2e):
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp /usr/bin/python3 -m unittest -v test_remote
"""
import hashlib
import json
import os
import random
import shutil
import signal
import stat
import ssl
import subprocess
import tempfile
import threading
import time
import unittest

import mcp_stdio
import test_process as tp

SLOW = tp.SLOW
PORT = 7451


def need(ok, why):
    if ok:
        return
    if os.environ.get("CI") == "true":
        raise AssertionError("CI=true and " + why)
    raise unittest.SkipTest(why)


def runtime_binary():
    mcp = tp.binary()
    path = os.path.join(os.path.dirname(mcp), "codespace-runtime")
    if not os.access(path, os.X_OK):
        path = os.path.join(os.path.dirname(os.path.dirname(mcp)), "runtime", "codespace-runtime")
    return path


def sandbox_args():
    """The worker runs its commands through the Linux sandbox helper beside it, as ids 65533
    (a root worker never runs a command as root)."""
    helper = os.path.join(os.path.dirname(runtime_binary()), "codespace-linux-sandbox")
    if not os.access(helper, os.X_OK):
        helper = os.path.join(os.path.dirname(os.path.dirname(runtime_binary())), "sandbox",
                              "codespace-linux-sandbox")
    return ["--sandbox", helper, "--sandbox-uid", "65533", "--sandbox-gid", "65533"]


def run(*argv, check=True):
    return subprocess.run(list(argv), check=check, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def make_cert(d, name):
    cert, key = os.path.join(d, name + ".pem"), os.path.join(d, name + ".key")
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=" + name)
    with open(cert, encoding="ascii") as f:
        der = ssl.PEM_cert_to_DER_cert(f.read())
    return cert, key, hashlib.sha256(der).hexdigest()


class Worker:
    """codespace-runtime --listen in namespace ns; its log lines are kept."""

    def __init__(self, ns, addr, args, env=None, wrap=()):
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns] + list(wrap)
            + [runtime_binary(), "--listen", "%s:%d" % (addr, PORT)] + args,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=e)
        self.lines = []
        self.listening = threading.Event()
        threading.Thread(target=self._err, daemon=True).start()
        if not self.listening.wait(10 * SLOW):
            self.kill()
            raise AssertionError("the worker did not listen: %s" % self.lines)

    def _err(self):
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if '"runner listening"' in line:
                self.listening.set()

    def saw(self, text):
        return any(text in line for line in self.lines)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


class RemoteTest(unittest.TestCase):
    def setUp(self):
        need(os.geteuid() == 0, "the remote runner tests need root (network namespaces)")
        need(shutil.which("ip") is not None, "no ip (iproute2)")
        need(shutil.which("openssl") is not None, "no openssl")
        need(os.access(runtime_binary(), os.X_OK), "no codespace-runtime")
        self.tmp = tempfile.mkdtemp(prefix="cs-remote-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        tag = "%x%04x" % (os.getpid() % 0xfff, random.randrange(0x10000))
        self.nsg, self.nsw = "csg-" + tag, "csw-" + tag
        self.veg, self.vew = "vg" + tag, "vw" + tag
        n = random.randrange(256)
        self.gaddr, self.waddr = "10.231.%d.1" % n, "10.231.%d.2" % n
        run("ip", "netns", "add", self.nsg)
        self.addCleanup(run, "ip", "netns", "del", self.nsg, check=False)
        run("ip", "netns", "add", self.nsw)
        self.addCleanup(run, "ip", "netns", "del", self.nsw, check=False)
        run("ip", "link", "add", self.veg, "netns", self.nsg, "type", "veth", "peer", "name",
            self.vew, "netns", self.nsw)
        for ns, dev, addr in ((self.nsg, self.veg, self.gaddr), (self.nsw, self.vew, self.waddr)):
            run("ip", "-n", ns, "addr", "add", addr + "/30", "dev", dev)
            run("ip", "-n", ns, "link", "set", dev, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
        self.ws = os.path.join(self.tmp, "ws")
        os.mkdir(self.ws)
        self.gcert, self.gkey, self.gpin = make_cert(self.tmp, "gateway")
        self.wcert, self.wkey, self.wpin = make_cert(self.tmp, "worker")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.close()

    def worker(self, pin=None, env=None, roots=None, auth=None):
        """auth: the TLS flags (certificate mode with the gateway's pin by default)."""
        auth = auth or ["--tls-cert", self.wcert, "--tls-key", self.wkey, "--tls-peer-sha256",
                        pin or self.gpin]
        w = Worker(self.nsw, self.waddr,
                   auth + sandbox_args() + sum((["--root", r] for r in roots or [self.ws]), []),
                   env)
        self.addCleanup(w.kill)
        return w

    def gateway(self, pin=None, ws=None, auth=None, env=None):
        state = os.path.join(self.tmp, "state-%d" % len(self.servers))
        os.mkdir(state)
        auth = auth or ["--tls-cert", self.gcert, "--tls-key", self.gkey,
                        "--tls-peer-sha256", pin or self.wpin]
        args = ["netns", "exec", self.nsg, tp.binary(), "--workspace", ws or self.ws,
                "--operations-db", os.path.join(state, "ops.db"),
                "--runner", "tcp://%s:%d" % (self.waddr, PORT)] + auth
        s = mcp_stdio.StdioServer("ip", args, state, env)
        self.servers.append(s)
        return s

    def registry_gateway(self, workspaces, wrap=(), extra=(), env=None):
        """A gateway in the gateway namespace with a registry of these workspaces; wrap goes
        between `ip netns exec NS` and the binary, extra after its flags."""
        n = len(self.servers)
        cfg = os.path.join(self.tmp, "reg-%d.json" % n)
        with open(cfg, "w") as f:
            json.dump({"workspaces": workspaces}, f)
        state = os.path.join(self.tmp, "state-%d" % n)
        os.mkdir(state)
        srv = mcp_stdio.StdioServer("ip", ["netns", "exec", self.nsg] + list(wrap)
                                    + [tp.binary(), "--config", cfg, "--operations-db", ":memory:"]
                                    + list(extra), state, env)
        self.servers.append(srv)
        return srv

    def psk(self, name, nbytes=32, mode=0o600):
        """A key file made as docs/scale-out.md says; returns (path, hex)."""
        path = os.path.join(self.tmp, name + ".psk")
        key = run("openssl", "rand", "-hex", str(nbytes)).stdout.strip()
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w") as f:
            f.write(key + "\n")
        os.chmod(path, mode)
        return path, key

    def call_until(self, srv, tool, args, ok, timeout):
        """Calls tool until ok(result, error) holds (the gateway reconnects in the background)."""
        end = time.time() + timeout
        while True:
            out, err = srv.call_raw(tool, args)
            if ok(out, err) or time.time() > end:
                return out, err
            time.sleep(0.2)

    # ---- through the link ----

    def test_files_patch_exec_through_tls(self):
        with open(os.path.join(self.ws, "a.txt"), "w") as f:
            f.write("alpha\n")
        w = self.worker()
        srv = self.gateway()
        out = srv.call("read", {"workspace_id": "default", "path": "a.txt"})
        self.assertEqual(out["content"], "alpha\n")
        out, err = srv.call_raw("apply_patch", {"workspace_id": "default", "patch":
                                "*** Begin Patch\n*** Add File: b.txt\n+beta\n*** End Patch\n"})
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "applied")
        with open(os.path.join(self.ws, "b.txt")) as f:
            self.assertEqual(f.read(), "beta\n")
        out = srv.call("exec_command", {"workspace_id": "default",
                                        "command": ["sh", "-c", "cat b.txt"], "yield_ms": 5000})
        self.assertEqual(out["output"], "beta\n")
        self.assertEqual(out["exit_code"], 0)
        self.assertTrue(w.saw('"runner connection accepted"'), w.lines)
        self.assertIn('"tls":true', "".join(w.lines))
        info = srv.call("workspace_info", {"workspace_id": "default"})
        iso = info["execution"]["isolation"]
        self.assertEqual(iso["runner"], "remote")
        text = json.dumps(info)
        # The worker's identity, never a credential.
        self.assertIn("%s:%d" % (self.waddr, PORT), text)
        self.assertIn(self.wpin, text)
        for secret in (self.gkey, self.wkey, self.gpin):
            self.assertNotIn(secret, text)

    def test_worker_serves_only_its_roots(self):
        other = os.path.join(self.tmp, "other")
        os.mkdir(other)
        with open(os.path.join(other, "x.txt"), "w") as f:
            f.write("x\n")
        self.worker()
        srv = self.gateway(ws=other)
        out, err = srv.call_raw("read", {"workspace_id": "default", "path": "x.txt"})
        self.assertIsNone(out)
        self.assertNotEqual(err["code"], "TIMEOUT", err)

    def test_per_workspace_runner(self):
        """Placement: "far" lives on the worker, "near" on the gateway's own runner; process
        handles go back to the runner that started them."""
        near = os.path.join(self.tmp, "near")
        os.mkdir(near)
        with open(os.path.join(self.ws, "f.txt"), "w") as f:
            f.write("far\n")
        with open(os.path.join(near, "n.txt"), "w") as f:
            f.write("near\n")
        w = self.worker()
        srv = self.registry_gateway({
            "near": {"root": near, "profile": "workspace-write"},
            "far": {"root": self.ws, "profile": "workspace-write",
                    "runner": {"url": "tcp://%s:%d" % (self.waddr, PORT),
                               "tls_cert": self.gcert, "tls_key": self.gkey,
                               "tls_peer_sha256": self.wpin}}})
        self.assertEqual(srv.call("read", {"workspace_id": "far", "path": "f.txt"})["content"],
                         "far\n")
        self.assertEqual(srv.call("read", {"workspace_id": "near", "path": "n.txt"})["content"],
                         "near\n")
        far = srv.call("workspace_info", {"workspace_id": "far"})["execution"]["isolation"]
        self.assertEqual(far["runner"], "remote", far)
        self.assertEqual(far["worker"], {"address": "%s:%d" % (self.waddr, PORT),
                                         "certificate_sha256": self.wpin})
        near_iso = srv.call("workspace_info", {"workspace_id": "near"})["execution"]["isolation"]
        self.assertEqual(near_iso["runner"], mcp_stdio.runner() if mcp_stdio.runner() != "remote"
                         else "in-process", near_iso)
        self.assertNotIn("worker", near_iso)
        dur = tp.uniq(301)
        out = srv.call("exec_command", {"workspace_id": "far", "command": ["sleep", dur],
                                        "yield_ms": 100})
        st = srv.call("process_status", {"process_id": out["process_id"]})
        self.assertEqual(st["state"], "running", st)
        srv.call("terminate_process", {"process_id": out["process_id"]})
        self.assertTrue(w.saw('"runner connection accepted"'), w.lines)

    def test_registry_runner_is_validated(self):
        for bad in ({"url": "http://h:1", "plaintext": True},
                    {"url": "tcp://h:1"},
                    {"url": "tcp://h:1", "plaintext": True, "tls_key": "k"},
                    {"url": "tcp://h:1", "tls_cert": "c", "tls_key": "k",
                     "tls_peer_sha256": "xyz"},
                    {"url": "tcp://h:1", "plaintext": True, "tls": "on"}):
            cfg = os.path.join(self.tmp, "bad.json")
            with open(cfg, "w") as f:
                json.dump({"workspaces": {"w": {"root": self.ws, "runner": bad}}}, f)
            p = subprocess.run([tp.binary(), "--config", cfg, "--operations-db", ":memory:"],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn("/workspaces/w/runner", p.stderr, bad)

    # ---- faults ----

    def test_link_cut_mid_patch(self):
        for name in ("p1.txt", "p2.txt"):
            with open(os.path.join(self.ws, name), "w") as f:
                f.write("old\n")
        w = self.worker(env={"CODESPACE_TEST_PATCH_STEP_DELAY_MS": "1500"})
        srv = self.gateway()
        srv.call("read", {"workspace_id": "default", "path": "p1.txt"})  # connected
        patch = ("*** Begin Patch\n*** Update File: p1.txt\n-old\n+new\n"
                 "*** Update File: p2.txt\n-old\n+new\n*** End Patch\n")
        rid = srv.call_start("apply_patch", {"workspace_id": "default", "patch": patch})
        time.sleep(0.5 * SLOW)
        run("ip", "-n", self.nsg, "link", "set", self.veg, "down")
        out, err = mcp_stdio.StdioServer.tool_result(srv.wait(rid, timeout=60))
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "unknown", out)
        out_id = out["operation_id"]
        st = srv.call("operation_status", {"operation_id": out_id})
        self.assertEqual(st["status"], "unknown", st)  # the worker cannot be asked yet
        run("ip", "-n", self.nsg, "link", "set", self.veg, "up")
        # The worker ran the patch to its end, once.
        end = time.time() + 20 * SLOW
        while time.time() < end:
            with open(os.path.join(self.ws, "p2.txt")) as f:
                if f.read() == "new\n":
                    break
            time.sleep(0.2)
        for name in ("p1.txt", "p2.txt"):
            with open(os.path.join(self.ws, name)) as f:
                self.assertEqual(f.read(), "new\n")
        # The retry, once the link is back, applies nothing twice.
        out, err = self.call_until(srv, "apply_patch", {"workspace_id": "default",
                                                        "patch": patch},
                                   lambda o, e: not (e and e["code"] == "TIMEOUT"), 40 * SLOW)
        self.assertIsNone(out, out)
        self.assertNotEqual(err["code"], "TIMEOUT", err)
        for name in ("p1.txt", "p2.txt"):
            with open(os.path.join(self.ws, name)) as f:
                self.assertEqual(f.read(), "new\n")
        self.assertTrue(w.saw('"runner connection ended"') or w.saw("connection accepted"))
        # The row the cut left unknown is settled from the worker's journal once the link is
        # back (patch_outcomes): applied, with a recovered event, and the journal is gone.
        st = srv.call("operation_status", {"operation_id": out_id})
        self.assertEqual(st["status"], "applied", st)
        self.assertIn("recovered", [e["name"] for e in st["events"]], st)
        end = time.time() + 5 * SLOW
        while os.path.exists(os.path.join(self.ws, ".cs-patch-journal")) and time.time() < end:
            time.sleep(0.05)
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".cs-patch-journal")))

    def test_worker_killed(self):
        w = self.worker()
        srv = self.gateway()
        dur = tp.uniq(300)
        out = srv.call("exec_command", {"workspace_id": "default",
                                        "command": ["sleep", dur], "yield_ms": 100})
        self.assertEqual(out["state"], "running", out)
        pid = out["process_id"]
        w.kill()
        self.worker()  # started again by its supervisor
        out, err = self.call_until(srv, "process_status", {"process_id": pid},
                                   lambda o, e: e is not None and e["code"] == "PROCESS_NOT_FOUND",
                                   30 * SLOW)
        self.assertIsNotNone(err, out)
        self.assertEqual(err["code"], "PROCESS_NOT_FOUND", err)
        # The workspace is free again: a new command runs.
        out, err = self.call_until(srv, "exec_command",
                                   {"workspace_id": "default", "command": ["true"],
                                    "yield_ms": 5000}, lambda o, e: e is None, 20 * SLOW)
        self.assertIsNone(err, err)
        self.assertEqual(out["exit_code"], 0)
        tp.kill_leftovers()

    def test_killed_worker_leaves_nothing_behind(self):
        """A worker's connections reach its loop over socketpairs, never a named socket: one
        killed (SIGKILL, as the OOM killer or a supervisor's timeout does) leaves no socket and
        no directory in its TMPDIR. Before, each start left a codespace-listen-* directory."""
        wtmp = os.path.join(self.tmp, "worker-tmp")
        os.mkdir(wtmp)
        with open(os.path.join(self.ws, "a.txt"), "w") as f:
            f.write("alpha\n")
        w = self.worker(env={"TMPDIR": wtmp})
        srv = self.gateway()
        self.assertEqual(srv.call("read", {"workspace_id": "default", "path": "a.txt"})["content"],
                         "alpha\n")

        def named():
            found = []
            for top, dirs, files in os.walk(wtmp):
                for n in dirs + files:
                    p = os.path.join(top, n)
                    if n.startswith("codespace-listen") or stat.S_ISSOCK(os.lstat(p).st_mode):
                        found.append(p)
            return found
        self.assertEqual(named(), [], "a named socket while serving")
        w.kill()
        self.assertEqual(named(), [], "left behind by a killed worker")

    def test_gateway_with_wrong_pin_is_refused(self):
        w = self.worker()
        srv = self.gateway(pin="00" * 32)
        out, err = srv.call_raw("read", {"workspace_id": "default", "path": "a.txt"})
        self.assertIsNone(out)
        self.assertEqual(err["code"], "TIMEOUT", err)
        self.assertIn("before dispatch", err["message"])
        self.assertIn("certificate", err["message"])
        time.sleep(0.5)
        self.assertFalse(w.saw('"runner connection accepted"'), w.lines)
        self.assertIn("pinned", self.auth_warned(srv)["error"])

    def test_key_of_a_call_that_never_left_runs_when_retried(self):
        """Issue 32, item 5: an apply_patch that fails before dispatch (nothing ran) is not
        recorded, so the same operation_key runs once the worker is reachable; before, its
        TIMEOUT was stored and replayed for ever."""
        self.worker()
        state = os.path.join(self.tmp, "state-kept")
        os.mkdir(state)
        db = os.path.join(state, "ops.db")
        p = "*** Begin Patch\n*** Add File: retried.txt\n+once\n*** End Patch\n"

        def gw(pin):
            args = ["netns", "exec", self.nsg, tp.binary(), "--workspace", self.ws,
                    "--operations-db", db, "--runner", "tcp://%s:%d" % (self.waddr, PORT),
                    "--tls-cert", self.gcert, "--tls-key", self.gkey, "--tls-peer-sha256", pin]
            s = mcp_stdio.StdioServer("ip", args, state)
            self.servers.append(s)
            return s
        srv = gw("00" * 32)  # a pin the worker does not match: nothing leaves
        out, err = srv.call_raw("apply_patch", {"workspace_id": "default", "patch": p,
                                                "operation_key": "retry-me"})
        self.assertIsNone(out)
        self.assertEqual(err["code"], "TIMEOUT", err)
        self.assertIn("before dispatch", err["message"])
        self.assertIn("retrying with the same operation_key runs it", err["message"])
        # Not in this gateway's ledger; the worker's (issue 32 item 3) cannot be asked.
        out, err = srv.call_raw("operation_status", {"operation_key": "retry-me"})
        self.assertEqual(err["code"], "TIMEOUT", (out, err))
        self.assertIn("could not be asked", err["message"])
        self.assertFalse(os.path.exists(os.path.join(self.ws, "retried.txt")))
        srv.close()
        srv = gw(self.wpin)  # the same ledger, the right pin
        out, err = self.call_until(srv, "apply_patch", {"workspace_id": "default", "patch": p,
                                                        "operation_key": "retry-me"},
                                   lambda o, e: e is None, 20 * SLOW)
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "applied", out)
        self.assertFalse(out["replayed"], out)
        with open(os.path.join(self.ws, "retried.txt")) as f:
            self.assertEqual(f.read(), "once\n")
        out, err = srv.call_raw("apply_patch", {"workspace_id": "default", "patch": p,
                                                "operation_key": "retry-me"})
        self.assertIsNone(err, err)
        self.assertTrue(out["replayed"], out)  # ran once

    def test_worker_with_wrong_pin_refuses(self):
        w = self.worker(pin="ab" * 32)
        srv = self.gateway()
        out, err = srv.call_raw("read", {"workspace_id": "default", "path": "a.txt"})
        self.assertIsNone(out)
        self.assertEqual(err["code"], "TIMEOUT", err)
        self.assertIn("before dispatch", err["message"])
        end = time.time() + 5
        while not w.saw('"runner connection refused"') and time.time() < end:
            time.sleep(0.1)
        self.assertTrue(w.saw('"runner connection refused"'), w.lines)
        self.assertFalse(w.saw('"runner connection accepted"'), w.lines)
        self.assertIn("alert bad certificate", self.auth_warned(srv)["error"])


    # ---- what workspace_info claims against what the commands get (R17) ----

    def bare_worker(self):
        """A worker without the sandbox: an unprivileged one (uid and gid 65534; a root
        --listen worker insists on --sandbox), on a plaintext link, serving a root it owns."""
        os.chmod(self.tmp, 0o755)
        root = os.path.join(self.tmp, "bare")
        os.mkdir(root)
        os.chown(root, 65534, 65534)
        w = Worker(self.nsw, self.waddr, ["--plaintext", "--root", root],
                   {"TMPDIR": "/tmp", "CODESPACE_REQUIRE_LINUX_SANDBOX": "0"},
                   wrap=["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"])
        self.addCleanup(w.kill)
        self.assertTrue(w.saw('"command_sandbox":"none"'), w.lines)
        return w, root

    def claims(self, srv, ws):
        info = srv.call("workspace_info", {"workspace_id": ws})["execution"]
        return info["isolation"], info["network"]

    def reality(self, srv, ws):
        """What a command really gets: its PID namespace (the sandbox gives every command one of
        its own) and its uid."""
        out = srv.call("exec_command", {"workspace_id": ws, "yield_ms": 10000, "command":
                                        ["sh", "-c", "readlink /proc/self/ns/pid; id -u"]})
        self.assertEqual(out["exit_code"], 0, out)
        pidns, uid = out["output"].split()
        return pidns != os.readlink("/proc/self/ns/pid"), uid

    def test_sandboxed_worker_claims_and_has_the_sandbox(self):
        self.worker()
        srv = self.gateway()
        own_pidns, uid = self.reality(srv, "default")  # after the worker's hello
        self.assertTrue(own_pidns, "a sandboxed command shares the host's PID namespace")
        self.assertEqual(uid, "65533")
        iso, net = self.claims(srv, "default")
        self.assertEqual((iso["runner"], iso["command_sandbox"], net["enforcement"]),
                         ("remote", "linux-sandbox", "enforced"), (iso, net))
        if os.path.exists("/sys/kernel/security/landlock"):
            self.assertGreaterEqual(iso.get("landlock_abi", 0), 1, iso)
        self.assertIn("denial_reports", iso)

    def test_bare_worker_claims_none_although_the_gateway_has_the_sandbox(self):
        w, root = self.bare_worker()
        near = os.path.join(self.tmp, "near")
        os.mkdir(near)
        srv = self.registry_gateway({
            "near": {"root": near, "profile": "workspace-write"},
            "far": {"root": root, "profile": "workspace-write",
                    "runner": {"url": "tcp://%s:%d" % (self.waddr, PORT), "plaintext": True}}},
            env={"CODESPACE_REQUIRE_LINUX_SANDBOX": "0"})
        own_pidns, uid = self.reality(srv, "far")
        self.assertFalse(own_pidns, "the bare worker's command has a PID namespace of its own")
        self.assertEqual(uid, "65534")
        iso, net = self.claims(srv, "far")
        self.assertEqual((iso["runner"], iso["command_sandbox"], net["enforcement"]),
                         ("remote", "none", "none"), (iso, net))
        self.assertNotIn("landlock_abi", iso)
        self.assertNotIn("denial_reports", iso)
        # The gateway's own probe is good, and holds for its own workspace only.
        iso, net = self.claims(srv, "near")
        self.assertEqual((iso["command_sandbox"], net["enforcement"]),
                         ("linux-sandbox", "enforced"), (iso, net))
        own_pidns, _ = self.reality(srv, "near")
        self.assertTrue(own_pidns)
        self.assertTrue(w.saw('"runner connection accepted"'), w.lines)

    def test_required_sandbox_refuses_a_bare_worker(self):
        w, root = self.bare_worker()
        srv = self.gateway(ws=root, auth=["--runner-tls", "off"],
                           env={"CODESPACE_REQUIRE_LINUX_SANDBOX": "1"})
        addr = "%s:%d" % (self.waddr, PORT)
        for _ in range(2):  # the first call waits for the hello; the second meets the back-off
            out, err = srv.call_raw("exec_command", {"workspace_id": "default",
                                                     "command": ["touch", "ran"],
                                                     "yield_ms": 2000})
            self.assertIsNone(out, out)
            self.assertEqual(err["code"], "TIMEOUT", err)
            self.assertIn("before dispatch", err["message"])
            self.assertIn(addr, err["message"])
            self.assertIn("CODESPACE_REQUIRE_LINUX_SANDBOX=1", err["message"])
        out, err = srv.call_raw("read", {"workspace_id": "default", "path": "a.txt"})
        self.assertIsNone(out, out)
        self.assertIn("CODESPACE_REQUIRE_LINUX_SANDBOX=1", err["message"])
        self.assertFalse(os.path.exists(os.path.join(root, "ran")))
        logged = lambda: any('"runner refused"' in l and addr in l for l in srv.stderr)
        end = time.time() + 5 * SLOW
        while not logged() and time.time() < end:
            time.sleep(0.1)
        self.assertTrue(logged(), srv.stderr)
        iso, net = self.claims(srv, "default")
        self.assertEqual((iso["command_sandbox"], net["enforcement"]), ("none", "none"))

    def test_worker_refuses_to_start_without_its_sandbox(self):
        fails = os.path.join(self.tmp, "failing-helper")
        with open(fails, "w") as f:
            f.write("#!/bin/sh\necho 'no user namespaces here' >&2\nexit 3\n")
        os.chmod(fails, 0o755)
        ids = ["--sandbox-uid", "65533", "--sandbox-gid", "65533"]
        for helper, says in (("/nonexistent", "/nonexistent"),
                             (fails, "no user namespaces here")):
            p = subprocess.run([runtime_binary(), "--listen", "127.0.0.1:0", "--plaintext",
                                "--root", self.ws, "--sandbox", helper] + ids,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("the Linux sandbox probe failed", p.stderr)
            self.assertIn("never runs a command without it", p.stderr)
            self.assertIn(says, p.stderr)
            self.assertNotIn("runner listening", p.stderr)
        # Required, and none given: an unprivileged worker (which could run bare) does not start.
        os.chmod(self.tmp, 0o755)
        os.chmod(self.ws, 0o777)
        p = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                            runtime_binary(), "--listen", "127.0.0.1:0", "--plaintext",
                            "--root", self.ws], stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=30,
                           env=dict(os.environ, CODESPACE_REQUIRE_LINUX_SANDBOX="1"))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("CODESPACE_REQUIRE_LINUX_SANDBOX=1", p.stderr)
        self.assertNotIn("runner listening", p.stderr)

    def test_unreached_worker_claims_nothing_until_its_hello(self):
        with open(os.path.join(self.ws, "a.txt"), "w") as f:
            f.write("alpha\n")
        srv = self.gateway()  # no worker yet
        out, err = srv.call_raw("read", {"workspace_id": "default", "path": "a.txt"})
        self.assertIsNone(out, out)
        self.assertIn("before dispatch", err["message"])
        iso, net = self.claims(srv, "default")
        self.assertEqual((iso["runner"], iso["command_sandbox"], net["enforcement"]),
                         ("remote", "none", "none"), (iso, net))
        self.assertNotIn("landlock_abi", iso)
        self.worker()
        out, err = self.call_until(srv, "read", {"workspace_id": "default", "path": "a.txt"},
                                   lambda o, e: e is None, 20 * SLOW)
        self.assertIsNone(err, err)
        iso, net = self.claims(srv, "default")  # the cached answer was rebuilt
        self.assertEqual((iso["command_sandbox"], net["enforcement"]),
                         ("linux-sandbox", "enforced"), (iso, net))

    def test_worker_reached_late_is_scanned_at_its_first_link(self):
        """Contract section 7: denied files' identities are remembered "at start". A worker not
        reachable when the gateway starts never got the start-up scan; it gets it when the
        gateway first reaches it (on its own, with the back-off), not at the client's first
        call on the workspace: a denied file renamed in between stays denied."""
        secret = "S3CRET-%x" % random.getrandbits(48)
        with open(os.path.join(self.ws, ".env"), "w") as f:
            f.write(secret)
        other = os.path.join(self.tmp, "other")
        os.mkdir(other)
        with open(os.path.join(other, "x.txt"), "w") as f:
            f.write("x\n")
        runner = {"url": "tcp://%s:%d" % (self.waddr, PORT), "tls_cert": self.gcert,
                  "tls_key": self.gkey, "tls_peer_sha256": self.wpin}
        srv = self.registry_gateway({
            "default": {"root": self.ws, "profile": "workspace-write", "deny": [".env"],
                        "runner": runner},
            "other": {"root": other, "profile": "workspace-write", "runner": runner}})
        logged = lambda text: any(text in line for line in srv.stderr)
        end = time.time() + 10 * SLOW
        while not logged('"runner connection failed"') and time.time() < end:
            time.sleep(0.05)
        self.assertTrue(logged('"runner connection failed"'), "".join(srv.stderr[-20:]))
        self.worker(roots=[self.ws, other])
        end = time.time() + 20 * SLOW  # the back-off is at most 5 s
        while not logged('"runner connected"') and time.time() < end:
            time.sleep(0.05)
        self.assertTrue(logged('"runner connected"'), "".join(srv.stderr[-20:]))
        # A call on the other workspace goes after whatever the link's hello sent.
        self.assertEqual(srv.call("read", {"workspace_id": "other", "path": "x.txt"})["content"],
                         "x\n")
        os.link(os.path.join(self.ws, ".env"), os.path.join(self.ws, "linked.txt"))
        os.unlink(os.path.join(self.ws, ".env"))
        out, err = srv.call_raw("read", {"workspace_id": "default", "path": "linked.txt"})
        self.assertIsNone(out, out)
        self.assertEqual(err["code"], "PATH_DENIED", err)
        self.assertNotIn(secret, json.dumps(err))

    # ---- pre-shared key mode ----

    def test_psk_files_patch_exec(self):
        key, hexkey = self.psk("k")
        with open(os.path.join(self.ws, "a.txt"), "w") as f:
            f.write("alpha\n")
        w = self.worker(auth=["--tls-psk", key, "--tls-psk-identity", "gw-1@worker"])
        srv = self.gateway(auth=["--tls-psk", key, "--tls-psk-identity", "gw-1@worker"])
        self.assertEqual(srv.call("read", {"workspace_id": "default", "path": "a.txt"})["content"],
                         "alpha\n")
        out, err = srv.call_raw("apply_patch", {"workspace_id": "default", "patch":
                                "*** Begin Patch\n*** Add File: b.txt\n+beta\n*** End Patch\n"})
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "applied")
        out = srv.call("exec_command", {"workspace_id": "default",
                                        "command": ["sh", "-c", "cat b.txt"], "yield_ms": 5000})
        self.assertEqual(out["output"], "beta\n")
        self.assertEqual(out["exit_code"], 0)
        self.assertTrue(w.saw('"runner connection accepted"'), w.lines)
        self.assertTrue(w.saw('"auth":"psk"'), w.lines)
        self.assertTrue(any('"runner connected"' in l and '"auth":"psk"' in l
                            for l in srv.stderr), srv.stderr)
        info = srv.call("workspace_info", {"workspace_id": "default"})
        iso = info["execution"]["isolation"]
        self.assertEqual(iso["runner"], "remote")
        self.assertEqual(iso["worker"], {"address": "%s:%d" % (self.waddr, PORT),
                                         "psk_identity": "gw-1@worker"})
        logs = "".join(w.lines) + "".join(srv.stderr)
        for text in (json.dumps(info), logs):
            self.assertNotIn(hexkey, text)
            self.assertNotIn(hexkey[:16], text)

    def auth_warned(self, srv):
        """The gateway logged the authentication failure at warning (workflows.md section 6),
        not at info like a worker that is not listening yet."""
        end = time.time() + 5
        while time.time() < end:
            for rec in srv.log_records("runner authentication failed"):
                self.assertEqual(rec["level"], "warning", rec)
                self.assertIn("TLS", rec["error"])
                return rec
            time.sleep(0.1)
        self.fail("no 'runner authentication failed' line:\n" + "".join(srv.stderr))

    def refused(self, srv, w, worker_says, gateway_says):
        """The call fails before dispatch naming the PSK; the worker logs why; nothing ran."""
        out, err = srv.call_raw("exec_command", {"workspace_id": "default",
                                                 "command": ["touch", "ran"], "yield_ms": 2000})
        self.assertIsNone(out, out)
        self.assertEqual(err["code"], "TIMEOUT", err)
        self.assertIn("before dispatch", err["message"])
        self.assertIn(gateway_says, err["message"])
        end = time.time() + 5
        while not w.saw('"runner connection refused"') and time.time() < end:
            time.sleep(0.1)
        refusals = [l for l in w.lines if '"runner connection refused"' in l]
        self.assertTrue(refusals, w.lines)
        self.assertIn(worker_says, refusals[0])
        self.assertFalse(w.saw('"runner connection accepted"'), w.lines)
        self.assertFalse(os.path.exists(os.path.join(self.ws, "ran")))
        self.auth_warned(srv)
        return err

    def test_psk_gateway_with_wrong_key_is_refused(self):
        good, hgood = self.psk("good")
        bad, hbad = self.psk("bad")
        w = self.worker(auth=["--tls-psk", good, "--tls-psk-identity", "gw"])
        srv = self.gateway(auth=["--tls-psk", bad, "--tls-psk-identity", "gw"])
        self.refused(srv, w, "pre-shared key is not ours", "pre-shared key")
        logs = "".join(w.lines) + "".join(srv.stderr)
        for k in (hgood, hbad):
            self.assertNotIn(k, logs)

    def test_psk_worker_with_wrong_key_is_refused(self):
        good, _ = self.psk("good")
        bad, _ = self.psk("bad")
        w = self.worker(auth=["--tls-psk", bad, "--tls-psk-identity", "gw"])
        srv = self.gateway(auth=["--tls-psk", good, "--tls-psk-identity", "gw"])
        err = self.refused(srv, w, "pre-shared key is not ours", "pre-shared key")
        self.assertIn("refuses another key or identity", err["message"])

    def test_psk_wrong_identity_is_refused(self):
        key, _ = self.psk("k")
        w = self.worker(auth=["--tls-psk", key, "--tls-psk-identity", "gw-a"])
        srv = self.gateway(auth=["--tls-psk", key, "--tls-psk-identity", "gw-b"])
        self.refused(srv, w, "another pre-shared key identity", "pre-shared key")

    def test_psk_certificate_gateway_is_refused(self):
        """A gateway in certificate mode gets nothing from a PSK worker, and the reverse."""
        key, _ = self.psk("k")
        w = self.worker(auth=["--tls-psk", key, "--tls-psk-identity", "gw"])
        srv = self.gateway()
        out, err = srv.call_raw("read", {"workspace_id": "default", "path": "a.txt"})
        self.assertIsNone(out)
        self.assertIn("before dispatch", err["message"])
        time.sleep(0.5)
        self.assertFalse(w.saw('"runner connection accepted"'), w.lines)

    def test_psk_bad_setups_refused_at_start(self):
        short, hshort = self.psk("short", nbytes=16)
        loose, _ = self.psk("loose", mode=0o644)
        good, _ = self.psk("good")
        cert = ["--tls-cert", self.wcert, "--tls-key", self.wkey, "--tls-peer-sha256", self.gpin]
        for auth, says in ((["--tls-psk", short, "--tls-psk-identity", "gw"], "less than 32"),
                           (["--tls-psk", loose, "--tls-psk-identity", "gw"], "by others"),
                           (["--tls-psk", good], "--tls-psk-identity"),
                           (["--tls-psk", good, "--tls-psk-identity", "a b"], "--tls-psk-identity"),
                           (["--tls-psk", good, "--tls-psk-identity", "gw"] + cert, "either")):
            p = subprocess.run([runtime_binary(), "--listen", "127.0.0.1:0", "--root", self.ws]
                               + auth + sandbox_args(), stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=30)
            # A bad setup is a configuration error: exit 2 (docs/operations.md), not 1.
            self.assertEqual(p.returncode, 2, (auth, p.stderr))
            self.assertIn(says, p.stderr, auth)
            self.assertNotIn(hshort, p.stderr)
        gcert = ["--tls-cert", self.gcert, "--tls-key", self.gkey, "--tls-peer-sha256", self.wpin]
        for auth, says in ((["--tls-psk", short, "--tls-psk-identity", "gw"], "less than 32"),
                           (["--tls-psk", loose, "--tls-psk-identity", "gw"], "by others"),
                           (["--tls-psk", good], "go together"),
                           (["--tls-psk", good, "--tls-psk-identity", "gw"] + gcert, "one mode")):
            p = subprocess.run([tp.binary(), "--workspace", self.ws, "--operations-db", ":memory:",
                                "--runner", "tcp://127.0.0.1:9"] + auth,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(p.returncode, 2, (auth, p.stderr))
            self.assertIn(says, p.stderr, auth)
            self.assertIn('"invalid configuration"', p.stderr, auth)
            self.assertNotIn(hshort, p.stderr)
        # A registry runner's key file is checked at start the same way, named by its path.
        reg = os.path.join(self.tmp, "loose-registry.json")
        with open(reg, "w") as f:
            json.dump({"workspaces": {"far": {
                "root": self.ws, "runner": {"url": "tcp://127.0.0.1:9", "tls_psk_file": loose,
                                            "tls_psk_identity": "gw"}}}}, f)
        p = subprocess.run([tp.binary(), "--config", reg, "--operations-db", ":memory:"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("/workspaces/far/runner", p.stderr)
        self.assertIn("by others", p.stderr)

    def test_registry_psk_runner_root_absent_on_gateway_host(self):
        """Placement with a pre-shared key, and the workspace's root exists only on the worker's
        host: the gateway runs where that path is hidden (an empty tmpfs over its parent)."""
        hidden = os.path.join(self.tmp, "hidden")
        root = os.path.join(hidden, "far")
        os.makedirs(root)
        with open(os.path.join(root, "f.txt"), "w") as f:
            f.write("far\n")
        key, hexkey = self.psk("k")
        w = self.worker(roots=[root], auth=["--tls-psk", key, "--tls-psk-identity", "gw"])
        script = 'mount -t tmpfs none "$1" && test ! -e "$2" && shift 2 && exec "$@"'
        srv = self.registry_gateway(
            {"far": {"root": root, "profile": "workspace-write",
                     "runner": {"url": "tcp://%s:%d" % (self.waddr, PORT),
                                "tls_psk_file": key, "tls_psk_identity": "gw"}}},
            wrap=["unshare", "-m", "sh", "-c", script, "sh", hidden, root])
        self.assertEqual(srv.call("read", {"workspace_id": "far", "path": "f.txt"})["content"],
                         "far\n")
        out, err = srv.call_raw("apply_patch", {"workspace_id": "far", "patch":
                                "*** Begin Patch\n*** Add File: g.txt\n+gee\n*** End Patch\n"})
        self.assertIsNone(err, err)
        with open(os.path.join(root, "g.txt")) as f:
            self.assertEqual(f.read(), "gee\n")
        out = srv.call("exec_command", {"workspace_id": "far", "command": ["cat", "g.txt"],
                                        "yield_ms": 5000})
        self.assertEqual(out["output"], "gee\n")
        iso = srv.call("workspace_info", {"workspace_id": "far"})["execution"]["isolation"]
        self.assertEqual(iso["worker"], {"address": "%s:%d" % (self.waddr, PORT),
                                         "psk_identity": "gw"})
        self.assertTrue(w.saw('"runner connection accepted"'), w.lines)
        self.assertNotIn(hexkey, "".join(w.lines) + "".join(srv.stderr))


    def test_lost_uds_runner_frees_only_its_own(self):
        near = os.path.join(self.tmp, "near")
        os.mkdir(near)
        key, _ = self.psk("k")
        self.worker(auth=["--tls-psk", key, "--tls-psk-identity", "gw"])
        srv = self.registry_gateway({
            "near": {"root": near, "profile": "workspace-write"},
            "far": {"root": self.ws, "profile": "workspace-write",
                    "runner": {"url": "tcp://%s:%d" % (self.waddr, PORT),
                               "tls_psk_file": key, "tls_psk_identity": "gw"}}},
            extra=["--runner", "uds"])
        far = srv.call("exec_command", {"workspace_id": "far", "command": ["sleep", tp.uniq(302)],
                                        "yield_ms": 100})
        self.assertEqual(far["state"], "running", far)
        self.addCleanup(tp.kill_leftovers)
        out, err = srv.call_raw("exec_command", {"workspace_id": "near",
                                                 "command": ["sleep", tp.uniq(303)],
                                                 "yield_ms": 100})
        self.assertIsNone(err, err)  # the uds worker is up, and "near" held by a process
        self.assertEqual(out["state"], "running", out)
        out, err = srv.call_raw("exec_command", {"workspace_id": "near", "command": ["true"],
                                                 "yield_ms": 5000})
        self.assertEqual(err["code"], "WORKSPACE_BUSY", err)
        # The gateway's own worker (a child of the gateway process) dies.
        kids = run("pgrep", "-P", str(srv.proc.pid), "-f", "codespace-runtime",
                   check=False).stdout.split()
        self.assertEqual(len(kids), 1, kids)
        os.kill(int(kids[0]), signal.SIGKILL)
        end = time.time() + 10 * SLOW
        while not any('"runner worker lost"' in l for l in srv.stderr) and time.time() < end:
            time.sleep(0.1)
        self.assertTrue(any('"runner worker lost"' in l for l in srv.stderr), srv.stderr)
        # "far" is still held by its process on the remote worker.
        out, err = srv.call_raw("exec_command", {"workspace_id": "far", "command": ["true"],
                                                 "yield_ms": 5000})
        self.assertIsNone(out, out)
        self.assertEqual(err["code"], "WORKSPACE_BUSY", err)
        st = srv.call("process_status", {"process_id": far["process_id"]})
        self.assertEqual(st["state"], "running", st)
        # "near" is free: its process died with the worker (which starts again for the next
        # call).
        out, err = self.call_until(srv, "exec_command",
                                   {"workspace_id": "near", "command": ["true"],
                                    "yield_ms": 5000}, lambda o, e: e is None, 20 * SLOW)
        self.assertIsNone(err, err)
        srv.call("terminate_process", {"process_id": far["process_id"]})


if __name__ == "__main__":
    unittest.main()
