#!/usr/bin/python3
"""Soak test of the process supervisor (issue 6): 2,000 short commands in a row through the real
server over stdio, each `exec_command ["true"]` with yield_ms 5000 (so each call answers once
the process was reaped and its output collected).

After the first 100 commands (by then the 64 retained exited handles are all in use, so the
server is in its steady state) and again at the end, the server's open descriptors
(/proc/<pid>/fd) and resident memory (VmRSS in /proc/<pid>/status) are read:
- the descriptor count must be the same (a leaked pipe, pidfd or pty is one more per command);
- RSS may grow by at most RSS_SLACK_KIB. Under a sanitizer build (ASan's quarantine keeps freed
  memory resident by design) the RSS comparison is skipped and only printed; the descriptor
  check always runs.
No zombie child may remain either.

Standard library only. Run:
    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_process_soak          (from tests/e2e)
"""
import os
import shutil
import sys
import time
import unittest

import test_process as tp

COMMANDS = 2000
BASELINE_AFTER = 100
RSS_SLACK_KIB = 2048


class SoakCase(tp.ProcCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp, roots, state = tp.make_tree("cs-e2e-proc-soak-", ("ws",))
        cls.srv = tp.Server(["--workspace", roots["ws"], "--operations-db", ":memory:",
                             "--log-level", "error"], state)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.close()
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def one(self):
        out, err = self.srv.call_raw("exec_command", {"workspace_id": "default",
                                                      "command": ["true"], "yield_ms": 5000})
        self.assertIsNone(err, err)
        self.assertEqual((out["state"], out["exit_code"]), ("exited", 0), out)

    def test_two_thousand_short_commands(self):
        pid = self.srv.proc.pid
        t0 = time.monotonic()
        for _ in range(BASELINE_AFTER):
            self.one()
        fds0, rss0 = tp.fd_count(pid), tp.rss_kib(pid)
        for _ in range(COMMANDS - BASELINE_AFTER):
            self.one()
        elapsed = time.monotonic() - t0
        fds1, rss1 = tp.fd_count(pid), tp.rss_kib(pid)
        asan = tp.sanitized(tp.binary())
        sys.stderr.write("\nsoak: %d commands in %.1f s (%.2f ms each); fds %d -> %d; "
                         "VmRSS %d -> %d KiB%s\n"
                         % (COMMANDS, elapsed, elapsed * 1000 / COMMANDS, fds0, fds1, rss0,
                            rss1, " (sanitizer build: RSS not judged)" if asan else ""))
        self.assertEqual(fds1, fds0, "descriptors after %d commands vs after %d: %r"
                         % (COMMANDS, BASELINE_AFTER, sorted(os.listdir("/proc/%d/fd" % pid))))
        if not asan:
            self.assertLessEqual(rss1 - rss0, RSS_SLACK_KIB)
        self.assertEqual(tp.zombies(pid), [])


if __name__ == "__main__":
    unittest.main()
