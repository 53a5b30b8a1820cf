#!/usr/bin/python3
"""apply_patch is all-or-nothing across a crash (issue 30; docs/contract/runtime.md section 6 "Crash
atomicity of apply_patch"; docs/patch-format.md "Crash journal").

Through the real binaries (CODESPACE_MCP_BIN; with CS_E2E_RUNNER=uds the patch runs in the uds
worker), the process applying a patch is SIGKILLed at every step boundary of every operation kind
(the TEST-ONLY hook CODESPACE_TEST_PATCH_CRASH_AT=N) and at random moments (a randomized SIGKILL
loop of the gateway under CODESPACE_TEST_PATCH_STEP_DELAY_MS). After a restart every file is
wholly old or wholly new, the ledger says rolled_back or applied accordingly, nothing of the
journal and no temporary file is left, and replaying the key answers that status and writes
nothing. Also: a recovery killed half-way (CODESPACE_TEST_PATCH_RECOVER_DELAY_MS) ends the same
way on the next start; a corrupt journal or one of another version stops that workspace only,
with a message naming the file, and changes nothing; a journal naming a path the deny rules now
deny is not touched either.

Standard library only. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_patch_crash          (from tests/e2e)
"""
import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
import unittest

import mcp_stdio

JOURNAL = ".cs-patch-journal"


def binary():
    path = os.environ.get("CODESPACE_MCP_BIN")
    if not path:
        raise unittest.SkipTest("CODESPACE_MCP_BIN is not set")
    return path


def patch(*body):
    return "*** Begin Patch\n" + "".join(line + "\n" for line in body) + "*** End Patch\n"


def lines(tag, i, n=30):
    return ["f%d %s line %02d" % (i, tag, j) for j in range(n)]


def text(ls):
    return ("".join(line + "\n" for line in ls)).encode()


def update_ops(path, old, new, move_to=None):
    ops = ["*** Update File: " + path]
    if move_to:
        ops.append("*** Move to: " + move_to)
    return ops + ["-" + s for s in old] + ["+" + s for s in new]


def scenario(kind):
    """(old tree, new tree, patch text) for one operation kind: three files each."""
    old, new, ops = {}, {}, []
    for i in range(3):
        o, n = lines("old", i), lines("new", i)
        if kind == "add":
            new["add/d%d/sub/f%d.txt" % (i, i)] = text(n)
            ops += ["*** Add File: add/d%d/sub/f%d.txt" % (i, i)] + ["+" + s for s in n]
        elif kind == "update":
            name = "up/f%d.txt" % i if i < 2 else "up/f%d..v2.txt" % i  # ".." inside a name
            old[name] = text(o)
            new[name] = text(n)
            ops += update_ops(name, o, n)
        elif kind == "delete":
            old["del/f%d.txt" % i] = text(o)
            ops += ["*** Delete File: del/f%d.txt" % i]
        elif kind == "move":
            old["mv/f%d.txt" % i] = text(o)
            new["mv/to%d/f%d.txt" % (i, i)] = text(n)
            ops += update_ops("mv/f%d.txt" % i, o, n, "mv/to%d/f%d.txt" % (i, i))
    if kind == "mixed":
        o = [lines("old", i) for i in range(4)]
        n = [lines("new", i) for i in range(4)]
        old["mix/u.txt"], new["mix/u.txt"] = text(o[0]), text(n[0])
        old["mix/d.txt"] = text(o[1])
        old["mix/m.txt"], new["mix/new/m.txt"] = text(o[2]), text(n[2])
        new["mix/a/b.txt"] = text(n[3])
        ops = (update_ops("mix/u.txt", o[0], n[0]) + ["*** Delete File: mix/d.txt"]
               + update_ops("mix/m.txt", o[2], n[2], "mix/new/m.txt")
               + ["*** Add File: mix/a/b.txt"] + ["+" + s for s in n[3]])
    return old, new, patch(*ops)


KINDS = ("add", "update", "delete", "move", "mixed")
# What also runs on a remote worker (CS_E2E_RUNNER=tcp): the worker recovers its journals and the
# gateway learns the outcomes over the runner (patch_outcomes, docs/patch-format.md).
REMOTE_TOO = ("test_every_step_boundary_of_every_kind", "test_random_sigkill_of_the_gateway",
              "test_remote_worker", "test_remote_gateway_killed_while_its_worker_lives",
              "test_killed_before_the_journal_is_rolled_back",
              "test_corrupt_journal_stops_only_its_workspace",
              "test_journal_of_another_version_stops_its_workspace",
              "test_journal_naming_an_escape_is_refused",
              "test_denied_path_is_never_touched_by_recovery")


class CrashCase(unittest.TestCase):
    def setUp(self):
        if mcp_stdio.runner() == "remote" and self._testMethodName not in REMOTE_TOO:
            # The rest kill the uds worker or the recovery itself, beside a gateway that reaches
            # the files.
            self.skipTest("the gateway does not reach a remote worker's files")
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-e2e-patch-crash-"))
        self.ws = os.path.join(self.tmp, "ws")
        self.other = os.path.join(self.tmp, "other")
        self.state = os.path.join(self.tmp, "state")
        for d in (self.ws, self.other, self.state):
            os.makedirs(d)
        self.db = os.path.join(self.tmp, "ops.db")
        self.servers = []

    def tearDown(self):
        try:
            for srv in self.servers:
                if srv.proc.returncode is None:
                    srv.kill()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def args(self, deny=None):
        reg = {"workspaces": {"other": {"root": self.other, "profile": "workspace-write"}}}
        if deny:
            reg["workspaces"]["default"] = {"root": self.ws, "profile": "workspace-write",
                                            "deny": deny}
            argv = []
        else:
            argv = ["--workspace", self.ws]
        path = os.path.join(self.tmp, "registry.json")
        with open(path, "w") as f:
            json.dump(reg, f)
        return argv + ["--config", path, "--operations-db", self.db]

    def start(self, deny=None, **env):
        srv = mcp_stdio.StdioServer(binary(), self.args(deny), self.state, env,
                                    client="test_patch_crash")
        self.servers.append(srv)
        return srv

    def snapshot(self):
        """Every file and directory under the workspace (hidden ones too)."""
        files, dirs = {}, set()
        for d, ds, fs in os.walk(self.ws):
            for n in ds:
                dirs.add(os.path.relpath(os.path.join(d, n), self.ws))
            for n in fs:
                p = os.path.join(d, n)
                with open(p, "rb") as f:
                    files[os.path.relpath(p, self.ws)] = f.read()
        return files, dirs

    @staticmethod
    def dirs_of(tree):
        out = set()
        for rel in tree:
            parts = rel.split("/")[:-1]
            for k in range(1, len(parts) + 1):
                out.add("/".join(parts[:k]))
        return out

    def reset(self, old):
        for n in os.listdir(self.ws):
            p = os.path.join(self.ws, n)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        for rel, data in old.items():
            p = os.path.join(self.ws, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)

    def assert_settled(self, srv, key, old, new, p):
        """Files wholly old (status rolled_back) or wholly new (applied); no journal, no
        temporary file, no directory the patch made; a replay answers the status and writes
        nothing. Returns the status."""
        # The status first: on a remote worker it is what makes the gateway ask, and the
        # journal goes once the row holds the outcome (a round trip later).
        st, err = srv.call_raw("operation_status", {"operation_key": key})
        self.assertIsNone(err, err)
        self.wait_journal_gone()
        files, dirs = self.snapshot()
        self.assertIn(files, (old, new), "a mix of old and new files, or leftovers: %s"
                      % sorted(files))
        status = "applied" if files == new and old != new else "rolled_back"
        # A delete or a move leaves its directory (as a patch always does); a rolled back add
        # or move leaves none of the directories it made.
        want = self.dirs_of(old) | (self.dirs_of(new) if status == "applied" else set())
        self.assertEqual(dirs, want, "directories left over or missing")
        self.assertEqual(st["status"], status, st)
        self.assertIn("recovered", [e["name"] for e in st["events"]], st)
        out, err = srv.call_raw("apply_patch", {"workspace_id": "default", "patch": p,
                                                "operation_key": key})
        self.assertIsNone(err, err)
        self.assertTrue(out["replayed"], out)
        self.assertEqual(out["status"], status, out)
        self.assertEqual(self.snapshot(), (files, dirs), "a replay wrote something")
        return status

    def wait_journal_gone(self):
        """No journal: at once where the gateway settles it; within 5 s on a remote worker, which
        removes it when the gateway's settle arrives after the row was recorded."""
        deadline = time.monotonic() + (5 if mcp_stdio.runner() == "remote" else 0)
        path = os.path.join(self.ws, JOURNAL)
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertFalse(os.path.exists(path), "the crash journal is left: %s"
                         % (os.listdir(path) if os.path.isdir(path) else ""))

    def crash_at(self, step, p, key):
        """Applies p with the applying process set to die at its step-th boundary. Returns
        True when it died (the gateway, in-process; the worker, uds), False when the patch
        finished first."""
        srv = self.start(CODESPACE_TEST_PATCH_CRASH_AT=str(step))
        rid = srv.start("tools/call", {"name": "apply_patch", "arguments": {
            "workspace_id": "default", "patch": p, "operation_key": key}})
        try:
            resp = srv.wait(rid, timeout=60)
        except (EOFError, AssertionError):
            resp = None
        finished = (resp is not None and "result" in resp
                    and resp["result"].get("structuredContent", {}).get("status") == "applied")
        srv.kill()
        return not finished

    def test_every_step_boundary_of_every_kind(self):
        for kind in KINDS:
            old, new, p = scenario(kind)
            seen = set()
            for step in range(1, 40):
                with self.subTest(kind=kind, step=step):
                    self.reset(old)
                    key = "%s-%d" % (kind, step)
                    died = self.crash_at(step, p, key)
                    srv = self.start()
                    if not died:  # past the last boundary: the patch simply applied
                        # (a remote worker's journal goes when the new gateway settles it)
                        self.wait_journal_gone()
                        self.assertEqual(self.snapshot()[0], new)
                        srv.kill()
                        break
                    seen.add(self.assert_settled(srv, key, old, new, p))
                    srv.kill()
            else:
                self.fail("%s: the patch never finished within 40 steps" % kind)
            # The first boundary (the journal written, nothing else) rolls back; the last ones
            # (every new file in place, the outcome recorded) roll forward.
            self.assertEqual(seen, {"rolled_back", "applied"}, kind)

    def test_random_sigkill_of_the_gateway(self):
        rnd = random.Random(int(os.environ.get("CS_E2E_SEED", "0")) or None)
        old, new, p = scenario("mixed")
        seen = set()
        for it in range(12):
            with self.subTest(iteration=it):
                self.reset(old)
                key = "random-%d" % it
                srv = self.start(CODESPACE_TEST_PATCH_STEP_DELAY_MS="40")
                srv.start("tools/call", {"name": "apply_patch", "arguments": {
                    "workspace_id": "default", "patch": p, "operation_key": key}})
                time.sleep(rnd.uniform(0.0, 0.35))
                srv.kill()
                srv = self.start()
                st, err = srv.call_raw("operation_status", {"operation_key": key})
                if err is not None:  # killed before the row was minted: nothing was written
                    self.assertEqual(err["code"], "OPERATION_NOT_FOUND", err)
                    self.assertEqual(self.snapshot()[0], old)
                    srv.kill()
                    continue
                names = [e["name"] for e in st["events"]]
                # Killed after the row was minted and before the journal existed (the
                # preflight): no journal, so nothing was written; the row says rolled_back too.
                if st["status"] == "applied" and "recovered" not in names:
                    # Finished before the kill. A remote worker keeps the journal until a
                    # gateway's settle: the killed one's may have been lost, and the new one's
                    # (sent at its start) need not have arrived yet.
                    self.wait_journal_gone()
                    self.assertEqual(self.snapshot()[0], new)
                    srv.kill()
                    continue
                seen.add(self.assert_settled(srv, key, old, new, p))
                srv.kill()
        self.assertTrue(seen, "no kill landed inside a transaction")

    def test_killed_before_the_journal_is_rolled_back(self):
        """Killed after the row was minted and before the journal existed (held in the
        preflight): no journal means nothing was written, so the row says rolled_back, with a
        recovered event, on every runner; the old builds' rows (no journaled mark) are not
        touched (test_store)."""
        old, new, p = scenario("mixed")
        self.reset(old)
        srv = self.start(CODESPACE_TEST_PATCH_PREFLIGHT_DELAY_MS="3000")
        srv.start("tools/call", {"name": "apply_patch", "arguments": {
            "workspace_id": "default", "patch": p, "operation_key": "early"}})
        time.sleep(0.5)
        self.assertFalse(os.path.exists(os.path.join(self.ws, JOURNAL)))
        srv.kill()
        srv = self.start()
        self.assertEqual(self.assert_settled(srv, "early", old, new, p), "rolled_back")
        srv.kill()

    def test_remote_worker(self):
        """tcp: the remote worker dies mid-patch, at every step of a mixed patch and before the
        journal exists. The new worker recovers the journal when the new gateway asks
        (patch_outcomes), the row takes the status, the journal goes; no later transaction is
        needed."""
        if mcp_stdio.runner() != "remote":
            self.skipTest("a remote worker only (CS_E2E_RUNNER=tcp)")
        old, new, p = scenario("mixed")
        seen = set()
        for step in (1, 2, 3, 5, 8):
            with self.subTest(step=step):
                self.reset(old)
                key = "remote-%d" % step
                srv = self.start(CODESPACE_TEST_PATCH_CRASH_AT=str(step))
                out, err = srv.call_raw("apply_patch", {"workspace_id": "default", "patch": p,
                                                        "operation_key": key})
                self.assertIsNone(err, err)
                self.assertEqual(out["status"], "unknown", out)  # the link was lost
                srv.kill()
                srv = self.start()
                seen.add(self.assert_settled(srv, key, old, new, p))
                srv.kill()
        self.assertEqual(seen, {"rolled_back", "applied"})

    def test_remote_gateway_killed_while_its_worker_lives(self):
        """tcp: the gateway is SIGKILLed mid-patch while the worker lives on and finishes the
        patch; a new gateway on the same worker and ledger learns the outcome (applied), then a
        key killed before it reached the worker (nothing written) says rolled_back."""
        if mcp_stdio.runner() != "remote":
            self.skipTest("a remote worker only (CS_E2E_RUNNER=tcp)")
        old, new, p = scenario("mixed")
        self.reset(old)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env["CODESPACE_TEST_PATCH_STEP_DELAY_MS"] = "150"
        worker = mcp_stdio.RemoteWorker(binary(), self.args(), env)
        try:
            args = self.args() + worker.args()
            srv = mcp_stdio.StdioServer(binary(), args, self.state, client="test_patch_crash")
            self.servers.append(srv)
            srv.start("tools/call", {"name": "apply_patch", "arguments": {
                "workspace_id": "default", "patch": p, "operation_key": "lives"}})
            deadline = time.monotonic() + 10
            while not os.path.exists(os.path.join(self.ws, JOURNAL)):
                self.assertLess(time.monotonic(), deadline, "the patch never started")
                time.sleep(0.01)
            srv.kill()  # the gateway alone: the worker runs the patch to its end
            srv = mcp_stdio.StdioServer(binary(), args, self.state, client="test_patch_crash")
            self.servers.append(srv)
            deadline = time.monotonic() + 20
            while True:  # in flight on the worker: unknown until it ends
                st, err = srv.call_raw("operation_status", {"operation_key": "lives"})
                self.assertIsNone(err, err)
                if st["status"] != "unknown" or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            self.assertEqual(st["status"], "applied", st)
            self.assertIn("recovered", [e["name"] for e in st["events"]], st)
            self.wait_journal_gone()
            self.assertEqual(self.snapshot()[0], new)
            out, err = srv.call_raw("apply_patch", {"workspace_id": "default", "patch": p,
                                                    "operation_key": "lives"})
            self.assertIsNone(err, err)
            self.assertTrue(out["replayed"], out)
            self.assertEqual(out["status"], "applied", out)
            srv.kill()
        finally:
            worker.close()

    def test_lost_worker_is_recovered_before_the_next_call(self):
        """uds: the worker dies mid-patch; the same gateway settles the journal before it
        answers the next call on that workspace (operation_status, read)."""
        if mcp_stdio.runner() != "uds":
            self.skipTest("a uds worker only (CS_E2E_RUNNER=uds)")
        old, new, p = scenario("mixed")
        self.reset(old)
        srv = self.start(CODESPACE_TEST_PATCH_CRASH_AT="3")
        out, err = srv.call_raw("apply_patch", {"workspace_id": "default", "patch": p,
                                                "operation_key": "lost"})
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "unknown", out)
        st, err = srv.call_raw("operation_status", {"operation_key": "lost"})
        self.assertIsNone(err, err)
        self.assertEqual(st["status"], "rolled_back", st)
        self.assertEqual(self.snapshot()[0], old)
        self.assertFalse(os.path.exists(os.path.join(self.ws, JOURNAL)))
        srv.kill()

    def crashed_journal(self, kind="update", step=2):
        """A crash that leaves a journal (the first write done): returns its intent's path."""
        old, new, p = scenario(kind)
        self.reset(old)
        self.assertTrue(self.crash_at(step, p, "k"))
        names = os.listdir(os.path.join(self.ws, JOURNAL))
        self.assertEqual(len(names), 1, names)
        return old, new, p, os.path.join(self.ws, JOURNAL, names[0], "intent")

    def test_recovery_killed_half_way_ends_the_same(self):
        old, new, p = scenario("update")
        self.reset(old)
        # Killed after the journal and two of three renames: recovery must roll back.
        self.assertTrue(self.crash_at(3, p, "half2"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env.update(XDG_STATE_HOME=self.state, CODESPACE_TEST_PATCH_RECOVER_DELAY_MS="400")
        cmd = [binary()] + self.args() + mcp_stdio.runner_args()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env)
        time.sleep(0.6)  # one item restored, the next not yet
        proc.kill()
        proc.wait()
        self.assertTrue(os.path.exists(os.path.join(self.ws, JOURNAL)),
                        "the recovery finished before the kill")
        files = self.snapshot()[0]
        self.assertNotEqual(files, old, "the recovery had not started")
        srv = self.start()
        self.assertEqual(self.assert_settled(srv, "half2", old, new, p), "rolled_back")

    def stopped(self, mutate, expect):
        old, new, p, intent = self.crashed_journal()
        mutate(intent)
        before = self.snapshot()
        srv = self.start()
        self.assertEqual(self.snapshot(), before, "a bad journal changed the workspace")
        out, err = srv.call_raw("read", {"workspace_id": "default", "path": "up/f0.txt"})
        self.assertIsNotNone(err, out)
        rel = os.path.relpath(intent, self.ws)
        self.assertIn(rel, err["message"])
        self.assertIn(expect, err["message"])
        self.assertIn("remove that directory", err["message"])
        # Another workspace is served.
        out, err = srv.call_raw("apply_patch", {"workspace_id": "other", "patch": patch(
            "*** Add File: x.txt", "+x")})
        self.assertIsNone(err, err)
        self.assertEqual(out["status"], "applied")
        st, err = srv.call_raw("operation_status", {"operation_key": "k"})
        self.assertIsNone(err, err)
        self.assertEqual(st["status"], "unknown")
        srv.kill()

    def test_corrupt_journal_stops_only_its_workspace(self):
        def flip(path):
            with open(path, "r+b") as f:
                data = bytearray(f.read())
                data[len(data) // 2] ^= 1
                f.seek(0)
                f.write(data)
        self.stopped(flip, "checksum")

    def test_journal_of_another_version_stops_its_workspace(self):
        def bump(path):
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(data.replace(b"cs-patch-journal 1\n", b"cs-patch-journal 2\n", 1))
        self.stopped(bump, "another version")

    def test_journal_naming_an_escape_is_refused(self):
        """A journal whose checksum is right but whose path leaves the workspace is refused,
        not followed (the journal lives in the workspace: its contents are not trusted)."""
        def escape(path):
            with open(path, "rb") as f:
                data = f.read()
            body = data[:data.rindex(b"end sha256:")]
            body = body.replace(b"\n9 up/f0.txt\n", b"\n9 ../f0.txt\n", 1)  # same length
            self.assertIn(b"\n9 ../f0.txt\n", body)
            with open(path, "wb") as f:
                f.write(body + b"end sha256:" + hashlib.sha256(body).hexdigest().encode()
                        + b"\n")
        self.stopped(escape, "malformed")

    def test_denied_path_is_never_touched_by_recovery(self):
        old, new, p, intent = self.crashed_journal()
        before = self.snapshot()
        srv = self.start(deny=["up/f1.txt"])
        self.assertEqual(self.snapshot(), before, "recovery touched the workspace")
        out, err = srv.call_raw("read", {"workspace_id": "default", "path": "up/f0.txt"})
        self.assertIsNotNone(err, out)
        self.assertEqual(err["code"], "PATH_DENIED", err)
        self.assertIn("deny rule \"up/f1.txt\"", err["message"])
        srv.kill()


if __name__ == "__main__":
    unittest.main()
