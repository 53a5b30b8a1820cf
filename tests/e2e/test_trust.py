#!/usr/bin/python3
"""The trust boundary through the real MCP server (issue 15; docs/contract/runtime.md §2,
docs/contract/sandbox.md §3): identity, set-id bits, held roots, overlapping roots.

Starts codespace-mcp (CODESPACE_MCP_BIN) over stdio with the sandbox helper (CS_SANDBOX_BIN)
required: a server that cannot start with the sandbox fails, nothing is skipped. CS_E2E_RUNNER=uds
(the e2e_trust_uds copy) runs the commands and file tools in the uds worker.

The rules are tested, not one example each:
  - identity: a root server's command is never host uid 0, whoever owns the workspace (root:
    the sandbox id; another user: that user), and what it creates belongs on the host to the
    workspace root's owner; a 0600 root file in a read-only bind is unreadable;
  - set-id bits: every call that can set S_ISUID or S_ISGID (the chmod family, the creation
    modes of open, openat, creat, mkdir, mkdirat, mknod, mknodat) fails with EPERM, openat2 and
    fchmodat2 are refused, file capabilities cannot be set, and afterwards no file in the
    workspace carries either bit; the bind is nosuid,nodev;
  - held roots: an ancestor of a root replaced by a symlink after start redirects neither read,
    find, apply_patch nor exec (each sees the original directory, or fails; never the decoy);
  - overlapping roots (equal, inside, containing, through a symlink alias, a config root and
    --workspace) and bad sandbox ids refuse the start naming what is wrong;
  - a root server whose sandbox probe failed runs no command (PROCESS_SPAWN_FAILED) and
    workspace_info says process.available false.

Every in-sandbox command first proves it runs inside (PID 1 is the helper's init) and touches
only paths this test created (a temporary tree and /etc/codespace-trust-<random>, removed in the
cleanup). Standard library only.
"""
import json
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
import unittest

import mcp_stdio

TAG = secrets.token_hex(6)
PROOF = ('case "$(tr "\\0" " " </proc/1/cmdline)" in '
         '"codespace-linux-sandbox run --plan "*|*"/codespace-linux-sandbox run --plan "*|'
         '"codespace-linux-sandbox run --plan-fd "*|*"/codespace-linux-sandbox run --plan-fd "*|'
         '"codespace-linux-sandbox run --wait-fd "*|*"/codespace-linux-sandbox run --wait-fd "*) ;; '
         '*) echo NOT-INSIDE; exit 99;; esac; ')
PY_PROOF = ("import os,sys\n"
            "c=open('/proc/1/cmdline','rb').read()\n"
            "if b'codespace-linux-sandbox' not in c or b'run' not in c: "
            "print('NOT-INSIDE'); sys.exit(99)\n")
ROOT = os.geteuid() == 0
SANDBOX_ID = 65533  # the default --sandbox-uid


def required_env(name):
    path = os.environ.get(name, "")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("%s=%r is not an executable (this suite never skips)" % (name, path))
    return path


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read()


def start_fails(args, env=None, timeout=20):
    """Runs the server with args on an empty stdin; returns (exit code, stderr)."""
    binary = required_env("CODESPACE_MCP_BIN")
    e = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
    e.update(env or {})
    p = subprocess.run([binary] + args, input=b"", capture_output=True, timeout=timeout, env=e)
    return p.returncode, p.stderr.decode("utf-8", "replace")


class Base(unittest.TestCase):
    @classmethod
    def server(cls, args, extra_env=None):
        env = {"CODESPACE_LINUX_SANDBOX_BIN": cls.helper, "CODESPACE_REQUIRE_LINUX_SANDBOX": "1",
               "TMPDIR": cls.srvtmp}
        env.update(extra_env or {})
        srv = mcp_stdio.StdioServer(required_env("CODESPACE_MCP_BIN"),
                                    args + ["--operations-db", ":memory:"], cls.state, env)
        cls.addClassCleanup(srv.close)
        return srv

    @classmethod
    def setUpClass(cls):
        cls.helper = required_env("CS_SANDBOX_BIN")
        cls.tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-e2e-trust-"))
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.srvtmp = os.path.join(cls.tmp, "srvtmp")
        cls.state = os.path.join(cls.tmp, "state")
        os.makedirs(cls.srvtmp)
        os.makedirs(cls.state)

    def exec_sh(self, srv, ws, script, timeout_ms=20000):
        """Runs script in workspace ws; returns (exit code, output), asserting it ran inside."""
        out = srv.call("exec_command", {"workspace_id": ws, "command": ["/bin/sh", "-c",
                                                                          PROOF + script],
                                        "yield_ms": timeout_ms})
        pid = out["process_id"]
        text = out.get("output", "")
        cursor = out.get("cursor", 0)
        end = time.monotonic() + timeout_ms / 1000
        while out.get("state") == "running" and time.monotonic() < end:
            chunk = srv.call("read_process", {"process_id": pid, "cursor": cursor,
                                              "wait_ms": 1000})
            text += chunk["chunk"]
            cursor = chunk["cursor"]
            if chunk["eof"]:
                out = srv.call("process_status", {"process_id": pid})
        self.assertNotIn("NOT-INSIDE", text)
        self.assertEqual(out.get("state"), "exited", out)
        return out.get("exit_code"), text


class IdentityAndBits(Base):
    """A root server's commands: unprivileged ids, no set-id bits, nosuid/nodev binds."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.ws_root = os.path.join(cls.tmp, "rootws")      # owned by the caller (root in CI)
        cls.ws_user = os.path.join(cls.tmp, "userws")      # owned by 4242:4243 when root
        for d in (cls.ws_root, cls.ws_user):
            os.makedirs(d)
            os.chmod(d, 0o755)
        os.chmod(cls.tmp, 0o755)
        if ROOT:
            os.chown(cls.ws_user, 4242, 4243)
        cfg = os.path.join(cls.tmp, "registry.json")
        write(cfg, json.dumps({"workspaces": {
            "rootws": {"root": cls.ws_root, "profile": "workspace-write"},
            "userws": {"root": cls.ws_user, "profile": "workspace-write"}}}))
        cls.srv = cls.server(["--config", cfg])

    def test_command_never_host_root_and_files_belong_to_the_owner(self):
        for ws, path in (("rootws", self.ws_root), ("userws", self.ws_user)):
            with self.subTest(workspace=ws):
                owner = os.stat(path)
                name = "made-%s" % secrets.token_hex(4)
                code, text = self.exec_sh(self.srv, ws, "id -u; id -g; cat /proc/self/uid_map; "
                                                        "echo x > %s; mkdir %s.d" % (name, name))
                self.assertEqual(code, 0, text)
                lines = text.split()
                uid, gid, inner, host = (int(lines[0]), int(lines[1]), int(lines[2]),
                                         int(lines[3]))
                if ROOT:
                    want = owner.st_uid if owner.st_uid != 0 else SANDBOX_ID
                    self.assertEqual(uid, want)
                    self.assertNotEqual(host, 0, "uid_map maps to host root: " + text)
                    self.assertEqual(gid, owner.st_gid if owner.st_gid != 0 else SANDBOX_ID)
                else:
                    self.assertEqual(uid, os.geteuid())
                self.assertEqual(inner, uid)
                for made in (name, name + ".d"):
                    st = os.lstat(os.path.join(path, made))
                    self.assertEqual((st.st_uid, st.st_gid), (owner.st_uid, owner.st_gid), made)

    def test_root_only_file_in_read_only_bind_is_unreadable(self):
        secret = "/etc/codespace-trust-%s" % TAG
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self.addCleanup(os.unlink, secret)
        os.write(fd, b"root-only-" + TAG.encode())
        os.close(fd)
        for ws in ("rootws", "userws"):
            with self.subTest(workspace=ws):
                code, text = self.exec_sh(self.srv, ws, "ls -l %s; cat %s" % (secret, secret))
                self.assertNotIn("root-only-" + TAG, text)
                if os.stat(secret).st_uid != os.geteuid() or ROOT:
                    self.assertNotEqual(code, 0, text)
                    self.assertIn("Permission denied", text)

    SETID = PY_PROOF + r"""
import ctypes, errno, json, os, stat
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
res = {}
def tryit(name, f):
    try:
        r = f()
        if isinstance(r, int) and r < 0:
            res[name] = ctypes.get_errno()
        else:
            res[name] = 0
    except OSError as e:
        res[name] = e.errno
open("plain", "w").close()
d = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
for bit, tag in ((stat.S_ISUID, "u"), (stat.S_ISGID, "g")):
    tryit("chmod-" + tag, lambda: os.chmod("plain", 0o755 | bit))
    fd = os.open("plain", os.O_RDONLY)
    tryit("fchmod-" + tag, lambda: os.fchmod(fd, 0o755 | bit))
    os.close(fd)
    tryit("fchmodat-" + tag, lambda: os.chmod("plain", 0o755 | bit, dir_fd=d))
    tryit("open-" + tag, lambda: os.close(os.open("o-" + tag, os.O_CREAT | os.O_WRONLY, 0o755 | bit)))
    tryit("openat-" + tag, lambda: os.close(os.open("oa-" + tag, os.O_CREAT | os.O_WRONLY, 0o755 | bit, dir_fd=d)))
    tryit("creat-" + tag, lambda: libc.creat(("c-" + tag).encode(), 0o755 | bit))
    tryit("mkdir-" + tag, lambda: os.mkdir("m-" + tag, 0o755 | bit))
    tryit("mkdirat-" + tag, lambda: os.mkdir("ma-" + tag, 0o755 | bit, dir_fd=d))
    tryit("mknod-" + tag, lambda: os.mknod("n-" + tag, stat.S_IFIFO | 0o644 | bit))
    tryit("mknodat-" + tag, lambda: os.mknod("na-" + tag, stat.S_IFIFO | 0o644 | bit, dir_fd=d))
# openat2 (437) and fchmodat2 (452): refused whatever the mode
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
tryit("openat2", lambda: libc.syscall(437, -100, b"o2", ctypes.byref(how), 24))
tryit("fchmodat2", lambda: libc.syscall(452, -100, b"plain", 0o4755, 0))
tryit("setcap", lambda: os.setxattr("plain", "security.capability",
      bytes.fromhex("0100000200200000000000000000000000000000")))
print("RESULT " + json.dumps(res))
mi = open("/proc/self/mountinfo").read().splitlines()
ws = os.path.dirname(os.getcwd())
print("MOUNT " + json.dumps([l for l in mi if l.split()[4] == ws]))
"""

    def test_set_id_bits_cannot_be_set(self):
        for ws, path in (("rootws", self.ws_root), ("userws", self.ws_user)):
            with self.subTest(workspace=ws):
                work = os.path.join(path, "setid-" + TAG)
                os.mkdir(work)
                if ROOT:
                    st = os.stat(path)
                    os.chown(work, st.st_uid, st.st_gid)
                script = "cd setid-%s && /usr/bin/python3 -c %s" % (
                    TAG, "'" + self.SETID.replace("'", "'\\''") + "'")
                code, text = self.exec_sh(self.srv, ws, script)
                self.assertEqual(code, 0, text)
                res = json.loads(text.split("RESULT ", 1)[1].splitlines()[0])
                for k, v in res.items():
                    want = 38 if k in ("openat2", "fchmodat2") else 1  # ENOSYS / EPERM
                    self.assertEqual(v, want, "%s: errno %s (%s)" % (k, v, text))
                mounts = json.loads(text.split("MOUNT ", 1)[1].splitlines()[0])
                self.assertTrue(mounts, text)
                opts = mounts[-1].split()[5].split(",")
                self.assertIn("nosuid", opts, mounts)
                self.assertIn("nodev", opts, mounts)
                # The classic: copy a binary, make it set-user-ID.
                code, text = self.exec_sh(self.srv, ws, "cp /usr/bin/id ./suid-%s; chmod 4755 "
                                          "./suid-%s; chmod g+s ./suid-%s; true" % (TAG, TAG, TAG))
                for dirpath, dirnames, filenames in os.walk(path):
                    for n in dirnames + filenames:
                        m = os.lstat(os.path.join(dirpath, n)).st_mode
                        self.assertFalse(m & (stat.S_ISUID | stat.S_ISGID),
                                         "%s has a set-id bit" % os.path.join(dirpath, n))


class HeldRoots(Base):
    """An ancestor of a root swapped for a symlink after start redirects no tool, no command."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.parent = os.path.join(cls.tmp, "parent")
        cls.ws = os.path.join(cls.parent, "ws")
        cls.decoy = os.path.join(cls.tmp, "decoy")
        cls.moved = os.path.join(cls.tmp, "parent-moved")
        for base, word in ((cls.ws, "original"), (os.path.join(cls.decoy, "ws"), "decoy")):
            os.makedirs(base)
            write(os.path.join(base, "marker.txt"), word + "\n")
            write(os.path.join(base, word + "-only.txt"), word + "\n")
        cfg = os.path.join(cls.tmp, "registry.json")
        write(cfg, json.dumps({"workspaces": {"w": {"root": cls.ws,
                                                    "profile": "workspace-write"}}}))
        cls.srv = cls.server(["--config", cfg])

    def swap(self):
        os.rename(self.parent, self.moved)
        os.symlink(self.decoy, self.parent)

        def restore():
            os.unlink(self.parent)
            os.rename(self.moved, self.parent)
        self.addCleanup(restore)

    def decoy_files(self):
        out = {}
        for dirpath, _, files in os.walk(self.decoy):
            for n in files:
                p = os.path.join(dirpath, n)
                out[p] = read(p)
        return out

    def test_swapped_ancestor_redirects_nothing(self):
        before = self.decoy_files()
        self.swap()
        # read: the original directory (the held one), never the decoy
        out, err = self.srv.call_raw("read", {"workspace_id": "w", "path": "marker.txt"})
        if err is None:
            self.assertIn("original", json.dumps(out))
        self.assertNotIn("decoy", json.dumps(out or err))
        # find
        out, err = self.srv.call_raw("find", {"workspace_id": "w", "glob": "**"})
        self.assertNotIn("decoy-only.txt", json.dumps(out or err))
        if err is None:
            self.assertIn("original-only.txt", json.dumps(out))
        # apply_patch: lands in the held directory or fails; the decoy is untouched
        patch = "*** Begin Patch\n*** Add File: patched.txt\n+patched\n*** End Patch\n"
        out, err = self.srv.call_raw("apply_patch", {"workspace_id": "w", "patch": patch})
        if err is None:
            self.assertEqual(read(os.path.join(self.moved, "ws", "patched.txt")), "patched\n")
        # exec: the command sees the held directory (or cannot start); writes land there
        code, text = self.exec_sh(self.srv, "w", "cat marker.txt; echo exec > by-exec.txt")
        self.assertNotIn("decoy", text)
        if code == 0:
            self.assertIn("original", text)
            self.assertEqual(read(os.path.join(self.moved, "ws", "by-exec.txt")), "exec\n")
        self.assertEqual(self.decoy_files(), before)


class StartRules(Base):
    """What refuses the start, and a root server without its sandbox."""

    def roots(self, *names):
        paths = []
        for n in names:
            p = os.path.join(self.tmp, n)
            os.makedirs(p, exist_ok=True)
            paths.append(p)
        return paths

    def config(self, roots):
        path = os.path.join(self.tmp, "reg-%s.json" % secrets.token_hex(3))
        write(path, json.dumps({"workspaces": {"w%d" % i: {"root": r}
                                               for i, r in enumerate(roots)}}))
        return path

    def test_overlapping_roots_refuse_the_start(self):
        a, inner = self.roots("ov/a", "ov/a/b/inner")
        other, = self.roots("ov/other")
        alias = os.path.join(self.tmp, "ov/alias")
        os.symlink(a, alias)
        cases = {
            "equal": [a, a],
            "inside": [a, inner],
            "containing": [inner, a],
            "alias": [other, os.path.join(alias, "b")],
            "alias-equal": [a, alias],
        }
        for name, roots in cases.items():
            with self.subTest(case=name):
                if name == "alias":
                    roots = [a, os.path.join(alias, "b")]
                code, err = start_fails(["--config", self.config(roots)])
                self.assertEqual(code, 2, err)
                self.assertIn("overlap", err)
                self.assertIn('\\"w0\\"', err)
                self.assertIn('\\"w1\\"', err)
        # a config root and the quick-start workspace
        code, err = start_fails(["--config", self.config([a]), "--workspace", inner])
        self.assertEqual(code, 2, err)
        self.assertIn("overlap", err)
        self.assertIn("default", err)

    def test_bad_sandbox_ids_refuse_the_start(self):
        ws, = self.roots("ids/ws")
        for args, env, word in ((["--sandbox-uid", "0"], None, "--sandbox-uid"),
                                (["--sandbox-gid", "-5"], None, "--sandbox-gid"),
                                ([], {"CODESPACE_SANDBOX_UID": "abc"}, "CODESPACE_SANDBOX_UID"),
                                (["--sandbox-uid", "4294967295"], None, "--sandbox-uid")):
            with self.subTest(args=args, env=env):
                code, err = start_fails(["--workspace", ws] + args, env)
                self.assertEqual(code, 2, err)
                self.assertIn(word, err)
        if ROOT:
            owner = os.stat("/etc").st_gid
            if owner != 0:
                code, err = start_fails(["--workspace", ws, "--sandbox-gid", str(owner)])
                self.assertEqual(code, 2, err)

    def test_sandbox_uid_flag_sets_the_command_id(self):
        ws, = self.roots("flag/ws")
        srv = self.server(["--workspace", ws, "--sandbox-uid", "4343", "--sandbox-gid", "4344"])
        code, text = self.exec_sh(srv, "default", "id -u; id -g; echo y > f")
        self.assertEqual(code, 0, text)
        if ROOT and os.stat(ws).st_uid == 0:
            self.assertEqual(text.split()[:2], ["4343", "4344"])
            st = os.stat(os.path.join(ws, "f"))
            self.assertEqual((st.st_uid, st.st_gid), (0, os.stat(ws).st_gid))

    def test_root_server_without_sandbox_runs_nothing(self):
        if not ROOT:
            self.assertTrue(True)
            return
        ws, = self.roots("nosbx/ws")
        srv = mcp_stdio.StdioServer(required_env("CODESPACE_MCP_BIN"),
                                    ["--workspace", ws, "--operations-db", ":memory:"],
                                    self.state, {"CODESPACE_LINUX_SANDBOX_BIN":
                                                 os.path.join(self.tmp, "no-such-helper"),
                                                 "TMPDIR": self.srvtmp})
        self.addCleanup(srv.close)
        info = srv.call("workspace_info", {"workspace_id": "default"})
        self.assertFalse(info["execution"]["process"]["available"], info)
        self.assertEqual(info["execution"]["isolation"]["command_sandbox"], "none")
        out, err = srv.call_raw("exec_command", {"workspace_id": "default",
                                                 "command": ["/usr/bin/touch", "ran"]})
        self.assertIsNone(out)
        self.assertEqual(err["code"], "PROCESS_SPAWN_FAILED", err)
        self.assertIn("root", err["message"])
        time.sleep(0.2)
        self.assertFalse(os.path.exists(os.path.join(ws, "ran")))


if __name__ == "__main__":
    unittest.main()
