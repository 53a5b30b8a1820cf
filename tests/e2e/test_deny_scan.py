"""Deny rules: the spawn-time scan is complete or the spawn fails (issue 29, contract section 7),
through the real server with the sandbox helper required (CODESPACE_REQUIRE_LINUX_SANDBOX=1).

- Masks past every length limit: a denied file and directory moved below 17 nested 250-byte
  directories (deeper than PATH_MAX), a 255-byte denied name at that depth: masked for the
  command, never listed by find.
- Every scan cap at and past it: the entry cap (100,000 entries: runs at it, fails closed one
  past it, naming the path and a remedy), the mask count (4096 masks run, 4097 fail closed), the
  plan's byte budget for mask paths (fails closed naming the path): PROCESS_SPAWN_FAILED, nothing
  started, never a partial mask list.
- Names that are not UTF-8 at every position (the denied file, an ancestor, a sibling): carried in
  the plan's byte form (deny_mask_hex), masked, never blocking the workspace; read, find and
  apply_patch neither crash nor leak.
- workspace_info lists the documented limits (deny_limits) word for word as docs/security-model.md
  states them.

CS_E2E_RUNNER=uds runs it all through the uds worker.

    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
    CS_SANDBOX_BIN=build/release/src/main/codespace-linux-sandbox \\
    /usr/bin/python3 -m unittest -v test_deny_scan
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
RULES = [".env", "secrets/", "**/*.pem", "*.key"]
SCAN_CAP = 100000
SMALL_CAP = 2000  # the registry's limits.deny_scan_entries of workspace "small"
MAX_MASKS = 4096
LONG = "x" * 250  # one directory name; 17 of them nest past PATH_MAX (4096)
DEPTH = 17


def required_env(name):
    path = os.environ.get(name, "")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("%s must name an executable (got %r)" % (name, path))
    return path


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(data)


def touch_many(dirpath, prefix, n, suffix=""):
    """n empty files dirpath/<prefix><i><suffix>, made through a directory fd (quick)."""
    os.makedirs(dirpath, exist_ok=True)
    dfd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(n):
            os.close(os.open("%s%d%s" % (prefix, i, suffix), os.O_CREAT | os.O_WRONLY, 0o644,
                             dir_fd=dfd))
    finally:
        os.close(dfd)


def deep_dir(base, depth, name=LONG):
    """base/name/name/... depth times, made relative to fds (no path string past PATH_MAX).
    Returns an fd of the deepest directory."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        try:
            os.mkdir(name, dir_fd=fd)
        except FileExistsError:
            pass
        nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    return fd


def rm_deep(base, name=LONG):
    """Removes base/name/... (deeper than PATH_MAX: shutil.rmtree handles it by fds)."""
    shutil.rmtree(os.path.join(base, name), ignore_errors=True)


class Server(mcp_stdio.StdioServer):
    def __init__(self, args, state_dir, extra_env=None):
        super().__init__(required_env("CODESPACE_MCP_BIN"), args, state_dir, extra_env,
                         client="test_deny_scan")


class ScanCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cs-e2e-denyscan-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.roots = {}
        for w in ("deep", "flood", "many", "bytes", "small"):
            cls.roots[w] = os.path.join(cls.tmp, "ws-" + w)
            os.makedirs(cls.roots[w])
        state = os.path.join(cls.tmp, "state")
        srvtmp = os.path.join(cls.tmp, "srvtmp")
        os.makedirs(state)
        os.makedirs(srvtmp)
        registry = os.path.join(cls.tmp, "registry.json")
        with open(registry, "w") as f:
            reg = {w: {"root": r, "profile": "workspace-write", "deny": RULES}
                   for w, r in cls.roots.items()}
            reg["small"]["limits"] = {"deny_scan_entries": SMALL_CAP}
            json.dump({"workspaces": reg}, f)
        cls.srv = Server(["--config", registry, "--operations-db", ":memory:"], state,
                         {"CODESPACE_LINUX_SANDBOX_BIN": required_env("CS_SANDBOX_BIN"),
                          "CODESPACE_REQUIRE_LINUX_SANDBOX": "1", "TMPDIR": srvtmp})
        cls.addClassCleanup(cls.srv.close)

    def app(self, ws, rel="app"):
        """rel/.env, rel/secrets/s.txt (both denied) and rel/ok.txt in workspace ws."""
        root = self.roots[ws]
        write(os.path.join(root, rel, ".env"), SECRET)
        write(os.path.join(root, rel, "secrets", "s.txt"), SECRET)
        write(os.path.join(root, rel, "ok.txt"), "ok-" + TAG)

    def exec_raw(self, ws, script):
        return self.srv.call_raw("exec_command", {"workspace_id": ws,
                                                  "command": ["/bin/sh", "-c", script],
                                                  "yield_ms": 30000})

    def exec_sh(self, ws, script):
        out, err = self.exec_raw(ws, script)
        self.assertIsNone(err, err)
        self.assertEqual(out["state"], "exited", out)
        return self.srv.call("read_process", {"process_id": out["process_id"]})["chunk"]

    def assert_spawn_refused(self, ws, script, *needles):
        out, err = self.exec_raw(ws, script + "; echo RAN > ran.txt")
        self.assertIsNone(out, out)
        self.assertEqual(err["code"], "PROCESS_SPAWN_FAILED", err)
        msg = err["message"]
        self.assertIn("deny rules cannot be enforced", msg)
        for n in needles:
            self.assertIn(n, msg)
        self.assertNotIn(SECRET, json.dumps(err))
        self.assertFalse(os.path.exists(os.path.join(self.roots[ws], "ran.txt")))
        return msg

    def find_paths(self, ws):
        out = self.srv.call("find", {"workspace_id": ws})
        return [e["path"] for e in out["entries"]] if "entries" in out else json.dumps(out)

    # ---- length limits -----------------------------------------------------------------

    def test_masks_past_path_max(self):
        ws, root = "deep", self.roots["deep"]
        self.app(ws)
        fd = deep_dir(root, DEPTH)
        try:
            os.rename("app", "app", src_dir_fd=os.open(root, os.O_RDONLY), dst_dir_fd=fd)
            # a 255-byte denied name at that depth, and a long allowed one beside it
            for name, data in (("k" * 251 + ".pem", SECRET), ("n" * 255, "long-ok-" + TAG)):
                f = os.open(name, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
                os.write(f, data.encode())
                os.close(f)
        finally:
            os.close(fd)
        walk = "for i in $(seq %d); do cd -P %s || exit 9; done; " % (DEPTH, LONG)
        text = self.exec_sh(ws, walk +
                            "printf 'env=['; cat app/.env; echo ']'; "
                            "printf 'sec=['; ls -A app/secrets | tr '\\n' ' '; echo ']'; "
                            "cat app/secrets/s.txt; printf 'pem=['; cat k*.pem; echo ']'; "
                            "cat app/ok.txt; echo; cat nnnn*; echo; "
                            "echo x > app/.env && echo WROTE")
        self.assertNotIn(SECRET, text)
        self.assertIn("env=[]", text)
        self.assertIn("sec=[]", text)
        self.assertIn("pem=[]", text)
        self.assertIn("ok-" + TAG, text)
        self.assertIn("long-ok-" + TAG, text)
        self.assertNotIn("WROTE", text)
        paths = self.find_paths(ws)
        self.assertFalse([p for p in paths if ".env" in p or "secrets" in p or ".pem" in p],
                         paths)

    # ---- scan caps ---------------------------------------------------------------------

    def test_entry_cap_at_and_past(self):
        ws, root = "flood", self.roots["flood"]
        self.app(ws)
        # entries: app, app/.env, app/secrets, app/secrets/s.txt, app/ok.txt, flood = 6
        touch_many(os.path.join(root, "flood"), "f", SCAN_CAP - 6)
        os.rename(os.path.join(root, "app"), os.path.join(root, "flood", "app"))
        # The workspace holds exactly the cap: the spawn covers it all.
        text = self.exec_sh(ws, "printf 'env=['; cat flood/app/.env; echo ']'")
        self.assertIn("env=[]", text)
        self.assertNotIn(SECRET, text)
        # One entry past the cap: refused, the path named, a remedy given; nothing ran.
        touch_many(os.path.join(root, "flood"), "g", 1)
        msg = self.assert_spawn_refused(ws, "cat flood/app/.env", str(SCAN_CAP), "remedy")
        self.assertTrue(re.search(r'at "flood(/[^"]*)?"', msg), msg)
        os.unlink(os.path.join(root, "flood", "g0"))
        text = self.exec_sh(ws, "printf 'env=['; cat flood/app/.env; echo ']'")
        self.assertIn("env=[]", text)

    def test_entry_cap_set_by_the_registry(self):
        """limits.deny_scan_entries moves the cap for one workspace: the spawn covers exactly
        that many entries, refuses one more naming the cap, and workspace_info says so."""
        ws, root = "small", self.roots["small"]
        self.app(ws)
        touch_many(os.path.join(root, "flood"), "f", SMALL_CAP - 6)
        os.rename(os.path.join(root, "app"), os.path.join(root, "flood", "app"))
        text = self.exec_sh(ws, "printf 'env=['; cat flood/app/.env; echo ']'")
        self.assertIn("env=[]", text)
        self.assertNotIn(SECRET, text)
        touch_many(os.path.join(root, "flood"), "g", 1)
        msg = self.assert_spawn_refused(ws, "cat flood/app/.env", "(%d," % SMALL_CAP,
                                        "limits.deny_scan_entries")
        info = self.srv.call("workspace_info", {"workspace_id": ws})
        limits = info["execution"]["permissions"]["deny_limits"]
        self.assertIn("more than %d files and directories" % SMALL_CAP, " ".join(limits), msg)
        other = self.srv.call("workspace_info", {"workspace_id": "flood"})
        self.assertIn("more than %d files and directories" % SCAN_CAP,
                      " ".join(other["execution"]["permissions"]["deny_limits"]))
        os.unlink(os.path.join(root, "flood", "g0"))
        self.exec_sh(ws, "true")

    def test_mask_count_at_and_past(self):
        ws, root = "many", self.roots["many"]
        touch_many(os.path.join(root, "keys"), "k", MAX_MASKS - 1, ".pem")
        write(os.path.join(root, ".env"), SECRET)  # the 4096th mask
        text = self.exec_sh(ws, "printf 'env=['; cat .env keys/k0.pem keys/k4094.pem; echo ']'")
        self.assertIn("env=[]", text)
        touch_many(os.path.join(root, "keys"), "z", 1, ".pem")
        self.assert_spawn_refused(ws, "cat .env", str(MAX_MASKS), "keys/", "remedy")
        os.unlink(os.path.join(root, "keys", "z0.pem"))
        self.exec_sh(ws, "true")

    def test_plan_bytes_past(self):
        ws, root = "bytes", self.roots["bytes"]
        fd = deep_dir(root, 16)  # 16 * 251 bytes deep, then 255-byte denied names
        pem = lambda i: ("%03d" % i) + "p" * 248 + ".pem"  # noqa: E731
        try:
            # 300 paths of 4,271 bytes (1.28 MB of plan): under the budget, every one masked
            for i in range(300):
                f = os.open(pem(i), os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
                os.write(f, SECRET.encode())
                os.close(f)
            walk = "for i in $(seq 16); do cd -P %s || exit 9; done; " % LONG
            text = self.exec_sh(ws, walk + "cat *.pem; echo; ls | wc -l")
            self.assertNotIn(SECRET, text)
            self.assertIn("300", text)
            # 420 of them (1.8 MB): past the budget, refused
            for i in range(300, 420):
                os.close(os.open(pem(i), os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
        finally:
            os.close(fd)
        msg = self.assert_spawn_refused(ws, "true", "plan", "remedy")
        self.assertIn(LONG[:20], msg)
        rm_deep(root)
        self.exec_sh(ws, "true")

    # ---- names that are not UTF-8 ------------------------------------------------------

    def test_non_utf8_every_position(self):
        ws, root = "bytes", self.roots["bytes"]
        broot = os.fsencode(root)
        self.app(ws)
        os.rename(os.path.join(broot, b"app"), os.path.join(broot, b"\xffapp"))  # an ancestor
        write(os.path.join(root, "plain", "ok.txt"), "plain-ok")
        with open(os.path.join(broot, b"plain", b"k\xfe.key"), "w") as f:  # the denied file
            f.write(SECRET)
        with open(os.path.join(broot, b"plain", b"sib\xfe.txt"), "w") as f:  # a sibling
            f.write("sib-ok")
        os.makedirs(os.path.join(broot, b"\xfesecrets.key"))  # a denied directory
        with open(os.path.join(broot, b"\xfesecrets.key", b"in.txt"), "w") as f:
            f.write(SECRET)
        try:
            text = self.exec_sh(
                ws, "A=$(printf '\\377app'); K=$(printf 'k\\376.key'); "
                "D=$(printf '\\376secrets.key'); S=$(printf 'sib\\376.txt'); "
                "printf 'env=['; cat \"$A/.env\"; echo ']'; "
                "printf 'sec=['; ls -A \"$A/secrets\"; echo ']'; "
                "printf 'key=['; cat \"plain/$K\"; echo ']'; "
                "printf 'dir=['; ls -A \"$D\"; echo ']'; "
                "cat \"plain/$S\"; echo; cat \"$A/ok.txt\"; echo")
            self.assertNotIn(SECRET, text)
            for want in ("env=[]", "sec=[]", "key=[]", "dir=[]", "sib-ok", "ok-" + TAG):
                self.assertIn(want, text)
            # The file tools: no crash, no leak, nothing denied or unnameable listed.
            paths = self.find_paths(ws)
            self.assertIn("plain/ok.txt", paths)
            self.assertFalse([p for p in paths if "\ufffd" in p or ".env" in p or ".key" in p],
                             paths)
            for p in ("\ufffdapp/.env", "\ufffdapp/secrets/s.txt", "plain/k\ufffd.key",
                      "\ufffdsecrets.key/in.txt", "\ufffdapp/ok.txt"):
                out, err = self.srv.call_raw("read", {"workspace_id": ws, "path": p})
                self.assertIsNone(out, (p, out))
                self.assertIn(err["code"], ("PATH_DENIED", "FILE_NOT_FOUND"), (p, err))
                self.assertNotIn(SECRET, json.dumps(err))
            for p in ("\ufffdapp/.env", "plain/k\ufffd.key"):
                patch = "*** Begin Patch\n*** Add File: %s\n+x\n*** End Patch\n" % p
                out, err = self.srv.call_raw("apply_patch", {"workspace_id": ws, "patch": patch})
                self.assertIsNone(out, (p, out))
                self.assertEqual(err["code"], "PATH_DENIED", (p, err))
            with open(os.path.join(broot, b"\xffapp", b".env")) as f:
                self.assertEqual(f.read(), SECRET)
        finally:
            shutil.rmtree(os.path.join(broot, b"\xffapp"), True)
            shutil.rmtree(os.path.join(broot, b"\xfesecrets.key"), True)
            shutil.rmtree(os.path.join(root, "plain"), True)

    # ---- workspace_info ----------------------------------------------------------------

    def test_deny_limits_as_documented(self):
        out = self.srv.call("workspace_info", {"workspace_id": "deep"})
        limits = out["execution"]["permissions"]["deny_limits"]
        self.assertTrue(limits and all(isinstance(s, str) and s for s in limits), limits)
        doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "security-model.md")
        with open(doc) as f:
            text = f.read()
        for s in limits:
            self.assertIn(s, text)
        self.assertTrue(any("100000" in s for s in limits), limits)
        self.assertTrue(any("4096" in s for s in limits), limits)


if __name__ == "__main__":
    unittest.main()
