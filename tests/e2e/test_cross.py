#!/usr/bin/python3
"""Cross-transport end-to-end test: one stdio server and one Streamable HTTP server
(--http --port 0) on the same workspace must publish the same tools/list and give the same
workspace_info answers (docs/contract/runtime.md section 3: the transports carry one MCP core).

Run: CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \
       /usr/bin/python3 -m unittest -v test_cross        (from tests/e2e)
"""
import json
import unittest

import test_stdio as e2e  # the module, not its names: its test classes are not collected here


def canonical(obj):
    """JSON text with sorted keys and no whitespace: equal for equal JSON values."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class TestCrossTransport(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        e2e.binary()
        cls.ws = e2e.Workspace()
        env = e2e.server_env(cls.ws.state)
        args = ["--workspace", cls.ws.link]
        cls.stdio = None
        cls.http_proc = None
        try:
            cls.stdio = e2e.StdioServer(args, env=env)
            cls.http_proc, port, cls.http_log = e2e.start_http(args, env=env)
            cls.http = e2e.HttpClient(port)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.stdio is not None:
            cls.stdio.kill()
        if cls.http_proc is not None:
            e2e.stop_process(cls.http_proc)
        cls.ws.cleanup()

    def both(self, version, method, params=None):
        """(stdio result, http result) of one request on sessions of the given version."""
        s = e2e.StdioServer(["--workspace", self.ws.link], env=e2e.server_env(self.ws.state))
        try:
            init_s = s.initialize(version)["result"]
            r_s = s.request(method, params)
            self.assertEqual(s.close(), 0)
        finally:
            s.kill()
        h = e2e.HttpClient(self.http.port)
        init_h = h.initialize(version)["result"]
        r_h, _ = h.request(method, params)
        self.assertEqual(canonical(init_s), canonical(init_h), "initialize results differ")
        self.assertIn("result", r_s, r_s)
        self.assertIn("result", r_h, r_h)
        return r_s["result"], r_h["result"]

    def test_tools_list_identical(self):
        for version in e2e.VERSIONS:
            with self.subTest(version=version):
                a, b = self.both(version, "tools/list")
                self.assertEqual([t["name"] for t in a["tools"]], e2e.TOOLS)
                self.assertEqual(canonical(a), canonical(b))
                for t in a["tools"]:
                    self.assertIn("outputSchema", t)
                    self.assertIn("inputSchema", t)

    def test_workspace_info_identical(self):
        for args in [{}, {"workspace_id": ""}, {"workspace_id": "default"},
                     {"workspace_id": "nope"}, {"workspace_id": 5}]:
            with self.subTest(arguments=args):
                a, b = self.both("2025-11-25", "tools/call",
                                 {"name": "workspace_info", "arguments": args})
                self.assertEqual(canonical(a), canonical(b))
                # The text item is the same JSON too (it is generated, not copied).
                self.assertEqual(json.loads(a["content"][0]["text"]),
                                 json.loads(b["content"][0]["text"]))
                self.assertEqual(e2e.find_key(a, "environment_id"), [])

    def test_same_session_answers_on_long_lived_servers(self):
        # The class-wide servers: one session each, several calls, answers equal call by call.
        self.stdio.initialize()
        self.http.initialize()
        for args in [{}, {"workspace_id": "default"}, {"workspace_id": "missing"}]:
            with self.subTest(arguments=args):
                params = {"name": "workspace_info", "arguments": args}
                a = self.stdio.request("tools/call", params)["result"]
                b, _ = self.http.request("tools/call", params)
                self.assertEqual(canonical(a), canonical(b["result"]))
        a = self.stdio.request("tools/list")["result"]
        b, _ = self.http.request("tools/list")
        self.assertEqual(canonical(a), canonical(b["result"]))
        self.assertEqual(self.stdio.bad_lines, [])


if __name__ == "__main__":
    unittest.main()
