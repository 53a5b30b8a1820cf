"""Denied symlinks (docs/contract/tools.md §5, issue 29) through the real server, with the sandbox
helper required (CODESPACE_REQUIRE_LINUX_SANDBOX=1): never skipped.

A rule that matches a symlink denies what the link leads to inside the workspace, masked under both
names and resolved at each spawn, chains of links followed within the workspace; inside the sandbox
the link itself can be neither removed nor replaced; a link that leads outside is masked itself.
The cases: a link to a directory (the red team's `.codex` -> a directory of the workspace), to a
file, a chain of links, an absolute link naming the root, a relative one climbing above the root
and back, a link made by a command after the server started (masked for the next command), a
link leading outside, and a link loop (which must not stop a spawn); a link too long to resolve
fails the spawn instead. Under both names: cat, echo >,
rm, mv and ln -sf inside the sandbox fail and leave the host's files as they were; read, find and
apply_patch refuse both names (the target is denied by virtue of the link). Neighbours stay
readable and writable.

Every sandboxed command first proves it runs inside the sandbox (PID 1 is the helper's init, /
holds neither home nor root) and touches only paths of this test's temporary tree.
CS_E2E_RUNNER=uds runs it all through the uds worker.

    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
    CS_SANDBOX_BIN=build/release/src/main/codespace-linux-sandbox \\
    /usr/bin/python3 -m unittest -v test_deny_link
"""

import json
import os
import re
import secrets
import shutil
import tempfile
import unittest

import mcp_stdio

TAG = secrets.token_hex(6)
SECRET = "S3CRET-" + TAG
RULES = [".codex/", "app.env", "*.key"]

PROOF = ("printf 'INIT:'; tr '\\0' ' ' < /proc/1/cmdline; echo; "
         "printf 'ROOT:'; ls / | tr '\\n' ' '; echo; ")

# (link, target) pairs leading inside the workspace, and the secret file each reaches.
# chain.key -> c1 -> links/c2 -> ../vault/inner.txt: a chain through links no rule denies.
INSIDE = [(".codex", "real-codex", "real-codex/config.toml"),
          ("app.env", "store/app-real.env", "store/app-real.env"),
          ("chain.key", "vault/inner.txt", "vault/inner.txt"),
          ("abs.key", "absvault", "absvault/s.txt"),
          ("up.key", "upvault", "upvault/u.txt")]


def required_env(name):
    path = os.environ.get(name, "")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("%s must name an executable (got %r)" % (name, path))
    return path


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(data)


def q(s):
    return "'" + s.replace("'", "'\\''") + "'"


class Server(mcp_stdio.StdioServer):
    def __init__(self, args, state_dir, extra_env=None):
        super().__init__(required_env("CODESPACE_MCP_BIN"), args, state_dir, extra_env,
                         client="test_deny_link")


class DenyLinkCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cs-e2e-denylink-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.ws = os.path.join(cls.tmp, "ws")
        state = os.path.join(cls.tmp, "state")
        srvtmp = os.path.join(cls.tmp, "srvtmp")
        os.makedirs(state)
        os.makedirs(srvtmp)
        for rel in ("real-codex/config.toml", "store/app-real.env", "vault/inner.txt",
                    "absvault/s.txt", "upvault/u.txt"):
            write(os.path.join(cls.ws, rel), SECRET)
        # neighbours: never denied
        write(os.path.join(cls.ws, "store/other.txt"), "other-ok")
        write(os.path.join(cls.ws, "vault/free.txt"), "free-ok")
        write(os.path.join(cls.ws, "src/main.c"), "int main;\n")
        ws = cls.ws
        os.symlink("real-codex", os.path.join(ws, ".codex"))
        os.symlink("store/app-real.env", os.path.join(ws, "app.env"))
        os.makedirs(os.path.join(ws, "links"))
        os.symlink("../vault/inner.txt", os.path.join(ws, "links/c2"))
        os.symlink("links/c2", os.path.join(ws, "c1"))
        os.symlink("c1", os.path.join(ws, "chain.key"))
        os.symlink(os.path.join(ws, "absvault"), os.path.join(ws, "abs.key"))
        os.symlink("../" + os.path.basename(ws) + "/upvault", os.path.join(ws, "up.key"))
        # Leads outside: to a host file the sandbox shows (/etc is bound read-only inside), so
        # without its mask the command would read it through the link. Only read, never written;
        # rm, mv and ln touch the link, which is this test's.
        os.symlink("/etc/passwd", os.path.join(ws, "outside.key"))
        # A loop: nothing to mask beyond the link; it must not stop a spawn.
        os.symlink("loop2", os.path.join(ws, "loop.key"))
        os.symlink("loop.key", os.path.join(ws, "loop2"))
        # A second workspace whose denied link is a chain too long to resolve: its spawns fail.
        cls.ws2 = os.path.join(cls.tmp, "ws2")
        os.makedirs(os.path.join(cls.ws2, "vault"))
        for i in range(3):
            os.symlink("long%d" % (i + 1) + "/." * 1550, os.path.join(cls.ws2, "long%d" % i))
        os.symlink("vault", os.path.join(cls.ws2, "long3"))
        cls.registry = os.path.join(cls.tmp, "registry.json")
        with open(cls.registry, "w") as f:
            json.dump({"workspaces": {
                "default": {"root": ws, "profile": "workspace-write", "deny": RULES},
                "chain": {"root": cls.ws2, "profile": "workspace-write", "deny": ["long0"]}}}, f)
        env = {"CODESPACE_LINUX_SANDBOX_BIN": required_env("CS_SANDBOX_BIN"),
               "CODESPACE_REQUIRE_LINUX_SANDBOX": "1", "TMPDIR": srvtmp}
        cls.srv = Server(["--config", cls.registry, "--operations-db", ":memory:"], state, env)
        cls.addClassCleanup(cls.srv.close)

    # ---- helpers ---------------------------------------------------------------------------

    def read(self, path):
        return self.srv.call_raw("read", {"workspace_id": "default", "path": path})

    def assert_denied(self, path):
        out, err = self.read(path)
        self.assertIsNone(out, "read %r gave %r" % (path, out))
        self.assertEqual(err["code"], "PATH_DENIED", (path, err))
        self.assertNotIn(SECRET, json.dumps(err))

    def exec_sh(self, script):
        """Runs script in the sandbox after the proof lines; returns what it printed after them
        once the proof is checked."""
        out = self.srv.call("exec_command", {"workspace_id": "default",
                                             "command": ["/bin/sh", "-c", PROOF + script],
                                             "yield_ms": 20000})
        self.assertEqual(out["state"], "exited", out)
        text = self.srv.call("read_process", {"process_id": out["process_id"]})["chunk"]
        m_init = re.search(r"^INIT:(.*)$", text, re.M)
        m_root = re.search(r"^ROOT:(.*)$", text, re.M)
        self.assertTrue(m_init and m_root, "no proof of being inside the sandbox: %r" % text)
        self.assertIn("codespace-linux-sandbox", m_init.group(1), text)
        self.assertNotIn("home", m_root.group(1).split(), text)
        self.assertNotIn("root", m_root.group(1).split(), text)
        return text

    def host(self, rel):
        with open(os.path.join(self.ws, rel)) as f:
            return f.read()

    def assert_host_intact(self):
        for link, target, secret in INSIDE:
            self.assertTrue(os.path.islink(os.path.join(self.ws, link)), link)
            self.assertEqual(self.host(secret), SECRET, secret)
        self.assertEqual(os.readlink(os.path.join(self.ws, ".codex")), "real-codex")
        self.assertEqual(os.readlink(os.path.join(self.ws, "outside.key")), "/etc/passwd")
        self.assertEqual(sorted(os.listdir(os.path.join(self.ws, "real-codex"))),
                         ["config.toml"])

    # ---- the sandbox -----------------------------------------------------------------------

    def test_cat_reads_nothing_under_either_name(self):
        names = []
        for link, target, secret in INSIDE:
            names += [link, secret]
            if secret != target:
                names.append(link + secret[len(target):])
        names += ["c1", "links/c2", "outside.key"]
        script = "".join("printf '%%s=[' %s; cat %s 2>/dev/null; echo ']'; " % (q(n), q(n))
                         for n in names)
        script += ("printf 'ls=['; ls -A real-codex absvault upvault | tr '\\n' ' '; echo ']'; "
                   "cat store/other.txt; echo; cat vault/free.txt; echo")
        text = self.exec_sh(script)
        self.assertNotIn(SECRET, text)
        self.assertNotIn("root:x:0:0", text)  # outside.key: masked, /etc/passwd not read
        for n in names:
            self.assertIn("%s=[]" % n, text)
        self.assertIn("other-ok", text)
        self.assertIn("free-ok", text)

    def test_writes_fail_under_either_name(self):
        attempts = []
        for link, target, secret in INSIDE:
            via_link = link + secret[len(target):]
            attempts += ["echo x > %s" % q(secret), "echo x >> %s" % q(via_link),
                         "echo x > %s" % q(via_link)]
        # (never a write through outside.key: its target is the host's, not this test's)
        attempts += ["echo x > real-codex/new.txt", "echo x > .codex/new.txt",
                     "echo x > absvault/new.txt"]
        script = "".join("%s 2>/dev/null && echo ESCAPED:%d; " % (a, i)
                         for i, a in enumerate(attempts))
        script += "echo ok > store/neighbour.txt && echo NEIGHBOUR; rm -f store/neighbour.txt"
        text = self.exec_sh(script)
        self.assertNotIn("ESCAPED", text)
        self.assertIn("NEIGHBOUR", text)
        self.assert_host_intact()
        for p in ("real-codex/new.txt", "absvault/new.txt"):
            self.assertFalse(os.path.exists(os.path.join(self.ws, p)), p)

    def test_link_cannot_be_removed_or_replaced(self):
        attempts = []
        for link, target, secret in INSIDE + [("outside.key", None, None)]:
            attempts += ["rm -f %s" % q(link), "unlink %s" % q(link),
                         "mv %s moved.tmp" % q(link), "ln -sfn decoy %s" % q(link),
                         "ln -sf decoy %s" % q(link),
                         "ln -s decoy tmp.lnk && mv -f tmp.lnk %s" % q(link)]
            if target is not None:
                attempts += ["rm -rf %s" % q(target), "mv %s moved2.tmp" % q(target)]
        script = "mkdir -p decoy; "
        script += "".join("%s 2>/dev/null && echo ESCAPED:%d; " % (a, i)
                          for i, a in enumerate(attempts))
        script += "rm -rf decoy tmp.lnk moved.tmp moved2.tmp; true"
        text = self.exec_sh(script)
        self.assertNotIn("ESCAPED", text)
        self.assert_host_intact()
        self.assertFalse(os.path.lexists(os.path.join(self.ws, "moved.tmp")))
        # and the next command still finds every mask in place
        text = self.exec_sh("cat .codex/config.toml real-codex/config.toml app.env 2>/dev/null; "
                            "echo END")
        self.assertNotIn(SECRET, text)
        self.assertIn("END", text)

    def test_link_made_by_a_command_masks_for_the_next(self):
        write(os.path.join(self.ws, "latevault/l.txt"), SECRET)
        self.addCleanup(shutil.rmtree, os.path.join(self.ws, "latevault"), True)
        self.addCleanup(lambda: os.path.lexists(os.path.join(self.ws, "late.key")) and
                        os.unlink(os.path.join(self.ws, "late.key")))
        # Documented limit: within the command that makes it, nothing is masked yet.
        self.exec_sh("ln -s latevault late.key")
        self.assertEqual(os.readlink(os.path.join(self.ws, "late.key")), "latevault")
        text = self.exec_sh("cat late.key/l.txt latevault/l.txt 2>/dev/null; "
                            "echo x > latevault/l.txt 2>/dev/null && echo ESCAPED:1; "
                            "rm -f late.key 2>/dev/null && echo ESCAPED:2; echo END")
        self.assertIn("END", text)
        self.assertNotIn(SECRET, text)
        self.assertNotIn("ESCAPED", text)
        self.assertEqual(self.host("latevault/l.txt"), SECRET)
        # the spawn's scan remembered the target: the file tools refuse it by its own name
        self.assert_denied("latevault/l.txt")
        self.assert_denied("late.key/l.txt")

    def test_a_spawn_resolves_the_link_again(self):
        # Retargeted on the host between two commands: the next spawn masks the new target.
        write(os.path.join(self.ws, "retarget/one.txt"), SECRET)
        write(os.path.join(self.ws, "retarget2/two.txt"), SECRET)
        ws = self.ws
        self.addCleanup(shutil.rmtree, os.path.join(ws, "retarget"), True)
        self.addCleanup(shutil.rmtree, os.path.join(ws, "retarget2"), True)
        self.addCleanup(lambda: os.path.lexists(os.path.join(ws, "re.key")) and
                        os.unlink(os.path.join(ws, "re.key")))
        os.symlink("retarget", os.path.join(ws, "re.key"))
        text = self.exec_sh("cat retarget/one.txt 2>/dev/null; echo END")
        self.assertNotIn(SECRET, text)
        os.unlink(os.path.join(ws, "re.key"))
        os.symlink("retarget2/two.txt", os.path.join(ws, "re.key"))
        text = self.exec_sh("cat retarget2/two.txt 2>/dev/null; echo END")
        self.assertIn("END", text)
        self.assertNotIn(SECRET, text)

    def test_unresolvable_link_fails_the_spawn(self):
        out, err = self.srv.call_raw("exec_command", {
            "workspace_id": "chain", "command": ["/bin/sh", "-c", "echo ran > ran.txt"],
            "yield_ms": 20000})
        self.assertIsNone(out, out)
        self.assertEqual(err["code"], "PROCESS_SPAWN_FAILED", err)
        self.assertIn("long0", json.dumps(err))
        self.assertFalse(os.path.exists(os.path.join(self.ws2, "ran.txt")))

    # ---- the file tools --------------------------------------------------------------------

    def test_read_refuses_both_names(self):
        # first a spawn, then the tools (the identities are remembered at start too)
        self.exec_sh("true")
        for link, target, secret in INSIDE:
            with self.subTest(link=link):
                self.assert_denied(link)
                self.assert_denied(secret)
                if secret != target:
                    self.assert_denied(link + secret[len(target):])
                    self.assert_denied(target)
                    # below the denied directory, whether or not it exists
                    self.assert_denied(target + "/missing.txt")
        for p in ("outside.key", "loop.key"):
            self.assert_denied(p)
        for p, want in (("store/other.txt", "other-ok"), ("vault/free.txt", "free-ok")):
            out, err = self.read(p)
            self.assertIsNone(err, err)
            self.assertEqual(out["content"], want)

    def test_read_refuses_the_target_before_any_spawn(self):
        # The server's first scan (at its first operation) resolves the links already: a fresh
        # server whose first call is a read of the target.
        state = os.path.join(self.tmp, "state2")
        os.makedirs(state, exist_ok=True)
        env = {"CODESPACE_LINUX_SANDBOX_BIN": required_env("CS_SANDBOX_BIN"),
               "CODESPACE_REQUIRE_LINUX_SANDBOX": "1", "TMPDIR": os.path.join(self.tmp, "srvtmp")}
        srv = Server(["--config", self.registry, "--operations-db", ":memory:"], state, env)
        try:
            for p in ("real-codex/config.toml", "store/app-real.env", "vault/inner.txt"):
                out, err = srv.call_raw("read", {"workspace_id": "default", "path": p})
                self.assertIsNone(out, (p, out))
                self.assertEqual(err["code"], "PATH_DENIED", (p, err))
        finally:
            srv.close()

    def test_find_lists_neither_name(self):
        out = self.srv.call("find", {"workspace_id": "default"})
        paths = out["paths"]
        for link, target, secret in INSIDE:
            self.assertNotIn(secret, paths)
            self.assertFalse(any(p.startswith(link + "/") for p in paths), paths)
        for p in paths:
            self.assertFalse(p.startswith(("real-codex/", "absvault/", "upvault/")), p)
        for p in ("store/other.txt", "vault/free.txt", "src/main.c"):
            self.assertIn(p, paths)
        for glob in ("real-codex/**", "**/config.toml", "store/app-real.env", "vault/inner.txt",
                     "absvault/*"):
            with self.subTest(glob=glob):
                out = self.srv.call("find", {"workspace_id": "default", "glob": glob})
                self.assertEqual(out["paths"], [], out)

    def patch(self, body):
        return self.srv.call_raw("apply_patch", {
            "workspace_id": "default", "patch": "*** Begin Patch\n" + body + "*** End Patch\n"})

    def test_patch_refuses_both_names(self):
        ok = "*** Add File: patch-ok.txt\n+ok\n"
        cases = [
            "*** Update File: real-codex/config.toml\n@@\n-" + SECRET + "\n+y\n",
            "*** Update File: .codex/config.toml\n@@\n-" + SECRET + "\n+y\n",
            "*** Add File: real-codex/new.toml\n+x\n",
            "*** Add File: real-codex/deeper/new.toml\n+x\n",
            "*** Add File: .codex/new.toml\n+x\n",
            "*** Delete File: real-codex/config.toml\n",
            "*** Update File: store/app-real.env\n@@\n-" + SECRET + "\n+y\n",
            "*** Delete File: store/app-real.env\n",
            "*** Update File: app.env\n@@\n-" + SECRET + "\n+y\n",
            "*** Update File: vault/inner.txt\n*** Move to: vault/out.txt\n@@\n-" + SECRET +
            "\n+y\n",
            "*** Update File: store/other.txt\n*** Move to: absvault/in.txt\n@@\n-other-ok\n"
            "+other-ok\n",
            "*** Add File: upvault/new.txt\n+x\n",
        ]
        for body in cases:
            with self.subTest(body=body):
                out, err = self.patch(ok + body)
                self.assertIsNone(out, out)
                self.assertEqual(err["code"], "PATH_DENIED", err)
                self.assertNotIn(SECRET, json.dumps(err))
                self.assertFalse(os.path.exists(os.path.join(self.ws, "patch-ok.txt")))
        self.assert_host_intact()
        self.assertEqual(self.host("store/other.txt"), "other-ok")
        for p in ("real-codex/new.toml", "real-codex/deeper", "absvault/in.txt",
                  "upvault/new.txt", "vault/out.txt"):
            self.assertFalse(os.path.exists(os.path.join(self.ws, p)), p)
        out, err = self.patch("*** Add File: vault/neighbour.txt\n+ok\n")
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "applied")
        os.unlink(os.path.join(self.ws, "vault/neighbour.txt"))


if __name__ == "__main__":
    unittest.main()
