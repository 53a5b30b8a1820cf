"""`codespace-mcp --doctor` (workflows.md section 6, docs/operations.md "Doctor"), the real binary.

Each check prints one line, "<ok|warn|fail> <check>: <finding>[; remedy: <what to do>]"; the exit
status is 0 when no check fails (commands would run sandboxed), 1 otherwise. Every failure is
faked the way the probe tests fake one: a helper that exits 1 (CODESPACE_LINUX_SANDBOX_BIN), an
operations database path that cannot be opened, sysctl files under a test root
(CODESPACE_TEST_PROC_SYS, test-only) saying what a restricted host says, a registry that does not
load. The restrictions that bind only a non-root server are checked both as root (a warning) and,
when the tests run as root, as nobody through setpriv (a failure).

    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_doctor          (from tests/e2e/)
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

CHECKS = ("user namespaces", "unprivileged user namespaces",
          "apparmor user namespace restriction", "seccomp", "landlock",
          "sandbox helper", "operations database", "registry")
LINE = re.compile(r"^(ok|warn|fail) +([a-z ]+): (.+)$")


def binary():
    b = os.environ.get("CODESPACE_MCP_BIN")
    if not b:
        raise unittest.SkipTest("CODESPACE_MCP_BIN is not set")
    return b


class Doctor(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cs-e2e-doctor-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        os.chmod(self.tmp, 0o755)
        self.ws = os.path.join(self.tmp, "ws")
        os.makedirs(self.ws)
        # A healthy host's sysctls, under a test root.
        self.sys = os.path.join(self.tmp, "sys")
        self.sysctl("user/max_user_namespaces", "15000")
        self.sysctl("kernel/seccomp/actions_avail",
                    "kill_process kill_thread trap errno user_notif trace log allow")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        self.env.update(XDG_STATE_HOME=self.tmp, CODESPACE_TEST_PROC_SYS=self.sys)

    def sysctl(self, rel, value):
        path = os.path.join(self.sys, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(value + "\n")
        for d, _, files in os.walk(self.sys):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)

    def doctor(self, *args, env=None, user=None):
        """(exit status, {check: (verdict, text)}) of --doctor with args."""
        argv = [binary(), "--doctor", *args]
        if user:
            argv = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + argv
        r = subprocess.run(argv, env=env or self.env, capture_output=True, text=True, timeout=60)
        lines = r.stdout.splitlines()
        found = {}
        for line in lines:
            m = LINE.match(line)
            self.assertIsNotNone(m, "not a doctor line: %r\n%s" % (line, r.stdout))
            self.assertNotIn(m.group(2), found, "two lines for one check:\n" + r.stdout)
            found[m.group(2)] = (m.group(1), m.group(3))
            if m.group(1) == "fail":
                self.assertIn("; remedy: ", m.group(3), line)
        self.assertEqual(tuple(found), CHECKS, r.stdout)
        self.assertEqual(r.returncode, 1 if any(v == "fail" for v, _ in found.values()) else 0,
                         r.stdout + r.stderr)
        return r.returncode, found

    def healthy_args(self):
        return ["--workspace", self.ws, "--operations-db", os.path.join(self.tmp, "ops.db")]

    def require_sandbox(self):
        rc, found = self.doctor(*self.healthy_args())
        if found["sandbox helper"][0] != "ok":
            self.skipTest("this host cannot run the sandbox: " + found["sandbox helper"][1])
        return rc, found

    def test_healthy(self):
        rc, found = self.require_sandbox()
        self.assertEqual(rc, 0)
        self.assertEqual(found["user namespaces"], ("ok", "user.max_user_namespaces=15000"))
        self.assertEqual(found["unprivileged user namespaces"][0], "ok")
        self.assertEqual(found["apparmor user namespace restriction"][0], "ok")
        self.assertEqual(found["seccomp"], ("ok", "filters and user notification available"))
        self.assertIn("probe succeeded", found["sandbox helper"][1])
        self.assertEqual(found["registry"], ("ok", "loads: 1 workspace"))
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "ops.db")))

    def test_helper_fails(self):
        helper = os.path.join(self.tmp, "broken-helper")
        with open(helper, "w") as f:
            f.write("#!/bin/sh\necho 'doctor-fake: user namespaces refused' >&2\nexit 1\n")
        os.chmod(helper, 0o755)
        env = dict(self.env, CODESPACE_LINUX_SANDBOX_BIN=helper)
        rc, found = self.doctor(*self.healthy_args(), env=env)
        self.assertEqual(rc, 1)
        verdict, text = found["sandbox helper"]
        self.assertEqual(verdict, "fail")
        self.assertIn("doctor-fake: user namespaces refused", text)
        self.assertIn("no command would run" if os.geteuid() == 0 else "unsandboxed", text)
        # The other checks still ran and passed.
        self.assertEqual(found["registry"][0], "ok")
        self.assertEqual(found["operations database"][0], "ok")

    def test_database_unopenable(self):
        self.require_sandbox()
        afile = os.path.join(self.tmp, "a-file")
        open(afile, "w").close()
        bad = os.path.join(afile, "ops.db")  # its parent is a regular file: even root fails
        rc, found = self.doctor("--workspace", self.ws, "--operations-db", bad)
        self.assertEqual(rc, 1)
        verdict, text = found["operations database"]
        self.assertEqual(verdict, "fail")
        self.assertIn(bad, text)
        self.assertEqual(found["sandbox helper"][0], "ok")

    def test_database_not_sqlite(self):
        self.require_sandbox()
        junk = os.path.join(self.tmp, "junk.db")
        with open(junk, "wb") as f:
            f.write(b"this is not an SQLite database, and it is longer than a header" * 10)
        rc, found = self.doctor("--workspace", self.ws, "--operations-db", junk)
        self.assertEqual((rc, found["operations database"][0]), (1, "fail"), found)
        with open(junk, "rb") as f:  # never replaced
            self.assertTrue(f.read().startswith(b"this is not"))

    def test_bad_registry(self):
        self.require_sandbox()
        reg = os.path.join(self.tmp, "registry.json")
        with open(reg, "w") as f:
            f.write('{"workspaces": {"w": {"root": 42}}}')
        rc, found = self.doctor("--config", reg)
        self.assertEqual(rc, 1)
        verdict, text = found["registry"]
        self.assertEqual(verdict, "fail")
        self.assertIn("/workspaces/w/root", text)
        self.assertEqual(found["operations database"][0], "warn")
        self.assertEqual(found["sandbox helper"][0], "ok")  # the helper is probed all the same

    def test_no_user_namespaces(self):
        self.require_sandbox()
        self.sysctl("user/max_user_namespaces", "0")
        rc, found = self.doctor(*self.healthy_args())
        self.assertEqual(rc, 1)
        verdict, text = found["user namespaces"]
        self.assertEqual(verdict, "fail")
        self.assertIn("user.max_user_namespaces=0", text)
        self.assertIn("remedy: sysctl -w user.max_user_namespaces=", text)

    def test_no_user_notification(self):
        self.require_sandbox()
        self.sysctl("kernel/seccomp/actions_avail", "kill_process kill_thread trap errno allow")
        rc, found = self.doctor(*self.healthy_args())
        self.assertEqual(rc, 0)  # commands still run sandboxed; denials go unreported
        self.assertEqual(found["seccomp"][0], "warn")

    def test_no_seccomp(self):
        self.require_sandbox()
        os.unlink(os.path.join(self.sys, "kernel/seccomp/actions_avail"))
        rc, found = self.doctor(*self.healthy_args())
        self.assertEqual((rc, found["seccomp"][0]), (1, "fail"), found)
        self.assertIn("no seccomp filters", found["seccomp"][1])

    def restricted(self, rel, value, setting):
        self.require_sandbox()
        self.sysctl(rel, value)
        rc, found = self.doctor(*self.healthy_args())
        check = ("apparmor user namespace restriction" if "apparmor" in rel
                 else "unprivileged user namespaces")
        verdict, text = found[check]
        self.assertIn("%s=%s" % (setting, value), text)
        self.assertIn("remedy: sysctl -w %s=" % setting, text)
        if os.geteuid() != 0:
            self.assertEqual((rc, verdict), (1, "fail"))
            return
        # A root server is not bound by it: a warning.
        self.assertEqual((rc, verdict), (0, "warn"))
        self.assertIn("runs as root", text)
        # The same host as nobody: a failure.
        if not shutil.which("setpriv"):
            self.skipTest("setpriv is not installed")
        db = os.path.join(self.tmp, "nobody")
        os.makedirs(db)
        os.chown(db, 65534, 65534)
        rc, found = self.doctor("--workspace", self.ws, "--operations-db",
                                os.path.join(db, "ops.db"), user=65534)
        self.assertEqual((rc, found[check][0]), (1, "fail"), found)
        self.assertNotIn("runs as root", found[check][1])

    def test_apparmor_restriction(self):
        self.restricted("kernel/apparmor_restrict_unprivileged_userns", "1",
                        "kernel.apparmor_restrict_unprivileged_userns")

    def test_debian_userns_clone_off(self):
        self.restricted("kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone")

    def test_help_names_doctor(self):
        r = subprocess.run([binary(), "--help"], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 0)
        self.assertIn("--doctor", r.stdout)


if __name__ == "__main__":
    unittest.main()
