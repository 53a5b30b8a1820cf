"""The identity memory of the deny rules (contract section 7, issue 29) through the real binaries,
with the sandbox helper required (never skipped), once per runner (CS_E2E_RUNNER unset: in
process; uds; tcp: a remote worker with --operations-db of its own).

Persistence: a denied file renamed, hard-linked (its denied name removed) and a denied directory
renamed while the server runs are still denied after a restart (the gateway killed with SIGKILL
and started again on the same operations database; for uds also the worker killed with SIGKILL
and replaced by the gateway; for tcp the worker killed and started again on its database) by
every tool: read and apply_patch answer PATH_DENIED, find does not list them, and exec_command's
`cat` reads the mask, never the secret.

Inode reuse: a denied file deleted, then hundreds of files created (ext4 hands the freed inode
number to one of them): none is denied by read, find, apply_patch or the sandbox, before and
after a restart, while a denied file renamed meanwhile stays denied.

    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
    CS_SANDBOX_BIN=build/release/src/main/codespace-linux-sandbox \\
    /usr/bin/python3 -m unittest -v test_deny_ident
"""

import json
import os
import secrets
import shutil
import signal
import tempfile
import time
import unittest

import mcp_stdio

TAG = secrets.token_hex(6)
SECRET = "S3CRET-" + TAG
RULES = [".env", "config/", "*.pem"]
MANY = 300


def required_env(name):
    path = os.environ.get(name, "")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("%s must name an executable (got %r)" % (name, path))
    return path


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(data)


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        if int(st[st.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(d))
    return out


def wait_until(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


class IdentCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cs-e2e-deny-ident-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.ws = os.path.join(self.tmp, "ws")
        self.state = os.path.join(self.tmp, "state")
        self.srvtmp = os.path.join(self.tmp, "srvtmp")
        os.makedirs(self.state)
        os.makedirs(self.srvtmp)
        self.db = os.path.join(self.tmp, "db", "operations.db")
        self.wdb = os.path.join(self.tmp, "db", "worker.db")
        files = {".env": SECRET, "config/prod.json": SECRET, "config/deep/x.json": SECRET,
                 "keys/a.pem": SECRET, "keys/b.pem": SECRET, "keep.pem": SECRET,
                 "victim.pem": SECRET, "env.txt": "env-ok", "src/main.c": "int main;\n"}
        for rel, data in files.items():
            write(os.path.join(self.ws, rel), data)
        self.registry = os.path.join(self.tmp, "registry.json")
        with open(self.registry, "w") as f:
            json.dump({"workspaces": {"default": {"root": self.ws, "profile": "workspace-write",
                                                  "deny": RULES}}}, f)
        self.srv = None

    def tearDown(self):
        if self.srv is not None and self.srv.proc.poll() is None:
            self.srv.kill()

    def start(self, first_read=True):
        env = {"CODESPACE_LINUX_SANDBOX_BIN": required_env("CS_SANDBOX_BIN"),
               "CODESPACE_REQUIRE_LINUX_SANDBOX": "1", "TMPDIR": self.srvtmp}
        self.srv = mcp_stdio.StdioServer(required_env("CODESPACE_MCP_BIN"),
                                         ["--config", self.registry, "--operations-db", self.db],
                                         self.state, env, client="test_deny_ident",
                                         worker_db=self.wdb)
        # The runner scanned the workspace at start; a first read shows the server answers.
        if first_read:
            self.assertEqual(self.read_ok("env.txt"), "env-ok")
        return self.srv

    def restart(self):
        """SIGKILL (gateway and, for tcp, its worker: nothing shut down cleanly), then a new
        server on the same databases."""
        self.srv.kill()
        self.start()

    def kill_uds_worker(self):
        kids = [c for c in children(self.srv.proc.pid)]
        self.assertEqual(len(kids), 1, kids)
        os.kill(kids[0], signal.SIGKILL)
        lost = lambda: any('"msg":"runner worker lost"' in line for line in self.srv.stderr)
        self.assertTrue(wait_until(lost, 10), "".join(self.srv.stderr[-20:]))
        # The gateway starts a replacement (at the next call); it answers (a call during its
        # start may fail: retried), and it is another process.
        for _ in range(100):
            out, err = self.srv.call_raw("read", {"workspace_id": "default", "path": "env.txt"})
            if err is None:
                self.assertEqual(out["content"], "env-ok")
                now = children(self.srv.proc.pid)
                self.assertEqual(len(now), 1, now)
                self.assertNotEqual(now[0], kids[0])
                return
            time.sleep(0.1)
        self.fail("the replaced worker does not answer: %r" % err)

    # ---- tools ---------------------------------------------------------------------------

    def read_raw(self, path):
        return self.srv.call_raw("read", {"workspace_id": "default", "path": path})

    def read_ok(self, path):
        out, err = self.read_raw(path)
        self.assertIsNone(err, (path, err))
        return out["content"]

    def assert_denied_everywhere(self, paths):
        for p in paths:
            with self.subTest(tool="read", path=p):
                out, err = self.read_raw(p)
                self.assertIsNone(out, (p, out))
                self.assertEqual(err["code"], "PATH_DENIED", (p, err))
                self.assertNotIn(SECRET, json.dumps(err))
        listed = self.srv.call("find", {"workspace_id": "default"})["paths"]
        for p in paths:
            with self.subTest(tool="find", path=p):
                self.assertNotIn(p, listed)
        for p in paths:
            with self.subTest(tool="apply_patch", path=p):
                body = ("*** Begin Patch\n*** Update File: %s\n@@\n-%s\n+leaked\n*** End Patch\n"
                        % (p, SECRET))
                out, err = self.srv.call_raw("apply_patch", {"workspace_id": "default",
                                                             "patch": body})
                self.assertIsNone(out, (p, out))
                self.assertEqual(err["code"], "PATH_DENIED", (p, err))
                with open(os.path.join(self.ws, p)) as f:
                    self.assertEqual(f.read(), SECRET)
        text = self.exec_sh("for f in %s; do printf '%%s=[' $f; cat $f; echo ']'; done"
                            % " ".join(paths))
        self.assertNotIn(SECRET, text)
        for p in paths:
            with self.subTest(tool="exec_command", path=p):
                self.assertIn("%s=[]" % p, text)

    def exec_sh(self, script):
        out = self.srv.call("exec_command", {"workspace_id": "default",
                                             "command": ["/bin/sh", "-c", script],
                                             "yield_ms": 20000})
        self.assertEqual(out["state"], "exited", out)
        return self.srv.call("read_process", {"process_id": out["process_id"]})["chunk"]

    # ---- persistence ---------------------------------------------------------------------

    def move_secrets(self):
        """What a command outside the sandbox (or the host) does while the server runs: rename a
        file, hard-link one and remove its denied name, rename a denied directory. No denied
        name is left for a later first scan to find."""
        ws = self.ws
        os.rename(os.path.join(ws, "keys/a.pem"), os.path.join(ws, "keys/a.txt"))
        os.link(os.path.join(ws, ".env"), os.path.join(ws, "linked.txt"))
        os.unlink(os.path.join(ws, ".env"))
        os.rename(os.path.join(ws, "config"), os.path.join(ws, "cfg"))
        return ["keys/a.txt", "linked.txt", "cfg/prod.json", "cfg/deep/x.json"]

    def test_renamed_before_the_first_call(self):
        """The identities are remembered at start (contract section 7), not at the workspace's
        first operation: denied files moved after the server started and before any tool call
        stay denied under their new names, for every tool."""
        self.start(first_read=False)
        # In process and through a uds worker the scans were answered before the server served
        # anything. A remote worker's link may still be coming up then: its scans are the first
        # frames on it, so a call it answers (about no workspace) comes after them.
        if mcp_stdio.runner() == "remote":
            out, err = self.srv.call_raw("process_status", {"process_id": "p-none"})
            self.assertIsNone(out, out)
        moved = self.move_secrets()
        self.assert_denied_everywhere(moved)
        self.assertEqual(self.read_ok("env.txt"), "env-ok")

    def test_database_unopenable_after_start(self):
        """The runner opens its connection to the database at start, when it scans each
        workspace with deny rules (a --listen worker, tcp, opened it at start for its ledger);
        the file gone afterwards (a directory where it was) stops nothing for a runner that
        holds it, and once the file is back the rules still hold. (A uds worker started while
        the file cannot be opened does not start: every call fails before dispatch.)"""
        tcp = mcp_stdio.runner() == "remote"
        db = self.wdb if tcp else self.db
        self.start(first_read=False)
        if tcp:  # the start-up scans come after a call the worker answers (see above)
            out, err = self.srv.call_raw("process_status", {"process_id": "p-none"})
            self.assertIsNone(out, out)
        os.rename(db, db + ".away")
        os.mkdir(db)
        self.assertEqual(self.read_ok("env.txt"), "env-ok")
        out, err = self.read_raw(".env")
        self.assertIsNone(out, out)
        self.assertEqual(err["code"], "PATH_DENIED", err)
        os.rmdir(db)
        os.rename(db + ".away", db)
        self.assertEqual(self.read_ok("env.txt"), "env-ok")
        self.assert_denied_everywhere([".env", "keys/a.pem", "victim.pem"])

    def test_renamed_secrets_survive_a_restart(self):
        self.start()
        moved = self.move_secrets()
        self.assert_denied_everywhere(moved)  # held while the server lives
        if mcp_stdio.runner() == "uds":
            self.kill_uds_worker()
            self.assert_denied_everywhere(moved)
        self.restart()
        self.assert_denied_everywhere(moved)
        # Learned by the restarted server (a spawn's scan) and kept over one more restart.
        write(os.path.join(self.ws, "keys/c.pem"), SECRET)
        self.exec_sh("true")
        os.rename(os.path.join(self.ws, "keys/c.pem"), os.path.join(self.ws, "c.txt"))
        self.restart()
        self.assert_denied_everywhere(moved + ["c.txt"])
        self.assertEqual(self.read_ok("env.txt"), "env-ok")

    def test_renamed_while_the_server_is_down(self):
        # Learned by the first life; moved while nothing runs; denied by the second.
        self.start()
        self.srv.kill()
        moved = self.move_secrets()
        self.start()
        self.assert_denied_everywhere(moved)

    # ---- inode reuse ---------------------------------------------------------------------

    def test_inode_reuse_denies_nothing_new(self):
        self.start()
        ws = self.ws
        old_ino = os.stat(os.path.join(ws, "victim.pem")).st_ino
        self.exec_sh("true")  # a spawn's scan has seen both
        os.rename(os.path.join(ws, "keep.pem"), os.path.join(ws, "keep.txt"))
        os.unlink(os.path.join(ws, "victim.pem"))
        names = []
        for i in range(MANY):
            rel = "f%03d.txt" % i  # beside the deleted file: ext4 hands out its number
            write(os.path.join(ws, rel), "free-%d" % i)
            names.append(rel)
        reused = [n for n in names if os.stat(os.path.join(ws, n)).st_ino == old_ino]
        print("  inode reuse: %d of %d new files took the deleted file's inode number %d"
              % (len(reused), MANY, old_ino))
        self.check_all_free(names, reused)
        self.assert_denied_everywhere(["keep.txt"])
        if mcp_stdio.runner() == "uds":
            self.kill_uds_worker()
            self.check_all_free(names, reused)
        self.restart()
        self.check_all_free(names, reused)
        self.assert_denied_everywhere(["keep.txt"])

    def check_all_free(self, names, reused):
        for n in names:
            with self.subTest(tool="read", path=n):
                self.assertEqual(self.read_ok(n), "free-%d" % int(n[1:4]))
        listed = self.srv.call("find", {"workspace_id": "default", "glob": "f*.txt"})["paths"]
        self.assertEqual(sorted(listed), names)
        for n in (reused or names[:1]):
            i = int(n[1:4])
            body = ("*** Begin Patch\n*** Update File: %s\n@@\n-free-%d\n+patched-%d\n"
                    "*** End Patch\n" % (n, i, i))
            out, err = self.srv.call_raw("apply_patch", {"workspace_id": "default",
                                                         "patch": body})
            self.assertIsNone(err, (n, err))
            self.assertEqual(out["status"], "applied", out)
            write(os.path.join(self.ws, n), "free-%d" % i)
        text = self.exec_sh("for f in f*.txt; do printf '%s=' $f; cat $f; echo; done; "
                            "echo x >> f000.txt && echo WROTE")
        for n in names:
            with self.subTest(tool="exec_command", path=n):
                self.assertIn("%s=free-%d\n" % (n, int(n[1:4])), text)
        self.assertIn("WROTE", text)
        with open(os.path.join(self.ws, "f000.txt"), "w") as f:
            f.write("free-0")


if __name__ == "__main__":
    unittest.main()
