"""Agreement with the official MCP schemas: the real server, driven over stdio and Streamable
HTTP under 2025-11-25 and 2026-07-28, emits every kind of message it has (initialize and
discover results, tools/list, tools/call results and tool errors for every tool, ping,
logging/setLevel, each kind of JSON-RPC error, the JSON bodies of HTTP errors); each one is
validated with a Draft 2020-12 validator against the definition the official schema of its
revision has for it (tests/protocol/official/, `$defs` names of each file), and against our
own schema under schema/protocol/ for it, so the two cannot drift apart on what is sent.

One documented difference: a 2025 error whose request id could not be read says "id": null, as
JSON-RPC 2.0 requires; the official JSONRPCErrorResponse has no null id, so such a reply is
checked with its id removed, and a 2026-07-28 reply must never carry it (it omits the member).

Standard library + Debian's python3-jsonschema. CODESPACE_MCP_BIN names the binary;
CS_PROTOCOL_TRANSCRIPT=<file> also writes every recorded message text to that file (one line
each, prefixed by its label), to compare the bytes of two builds.

    CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp \\
        /usr/bin/python3 -m unittest -v test_official          (from tests/protocol/)
"""

import http.client
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

from jsonschema import Draft202012Validator, RefResolver  # noqa: E402

import test_modern as tm  # noqa: E402  (the transports of the 2026 e2e tests)

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
PATCH = "*** Begin Patch\n*** Add File: %s\n+hello\n*** End Patch\n"
TOOLS = ("workspace_info", "read", "find", "apply_patch", "operation_status", "exec_command",
         "write_stdin", "read_process", "process_status", "process_resize", "terminate_process")


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


OFFICIAL = {rev: load(os.path.join(HERE, "official", rev + ".schema.json"))
            for rev in (LEGACY, MODERN)}


def ours():
    """Our protocol schemas by file name, with a resolver store for their cross-file $refs."""
    d = os.path.join(ROOT, "schema", "protocol")
    docs = {f: load(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".json")}
    store = {doc["$id"]: doc for doc in docs.values()}
    return docs, store


OURS, STORE = ours()


def official_validator(rev, name):
    doc = OFFICIAL[rev]
    if name not in doc["$defs"]:
        raise AssertionError("%s has no $defs/%s" % (rev, name))
    return Draft202012Validator({"$schema": doc["$schema"], "$defs": doc["$defs"],
                                 "$ref": "#/$defs/" + name})


def our_validator(file):
    doc = OURS[file]
    return Draft202012Validator(doc, resolver=RefResolver.from_schema(doc, store=STORE))


def problems(validator, instance):
    return ["%s: %s" % ("/" + "/".join(str(p) for p in e.absolute_path), e.message)
            for e in validator.iter_errors(instance)]


class Recorder:
    """Every message the server sent, with what it must be."""

    def __init__(self):
        self.records = []  # (label, revision, text, result def or None, our result file)

    def add(self, label, rev, text, result_def=None, our_file=None):
        self.records.append((label, rev, text, result_def, our_file))


class Scenario:
    """Drives one transport through both eras, recording each reply."""

    def __init__(self, transport, ws, state, rec):
        self.t = transport(ws, state)
        self.rec = rec
        self.n = 100
        self.hdrs = {}

    def close(self):
        self.t.close()

    def send(self, msg, headers=None, text=None, want_reply=True):
        status, body = self.t.exchange(text if text is not None else json.dumps(msg),
                                       headers or {}, want_reply=want_reply)
        return status, body

    def rid(self):
        self.n += 1
        return self.n

    # -- one era --

    def legacy(self, label, method, params=None, result_def=None, our=None, rid=None):
        msg = {"jsonrpc": "2.0", "id": self.rid() if rid is None else rid, "method": method}
        if params is not None:
            msg["params"] = params
        _, body = self.send(msg, self.hdrs)
        self.rec.add(label, LEGACY, body, result_def, our)
        return json.loads(body)

    def modern(self, label, method, params=None, result_def=None, our=None, headers=None,
               meta=None):
        p = dict(params or {})
        p["_meta"] = dict(tm.META if meta is None else meta)
        msg = {"jsonrpc": "2.0", "id": self.rid(), "method": method, "params": p}
        if headers is None:
            headers = tm.modern_headers(method, p.get("name") if method == "tools/call" else None)
        _, body = self.send(msg, headers)
        self.rec.add(label, MODERN, body, result_def, our)
        return json.loads(body)

    def run_legacy(self):
        name = self.t.name
        _, body = self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                             "params": {"protocolVersion": LEGACY, "capabilities": {},
                                        "clientInfo": {"name": "official", "version": "1"}}})
        self.rec.add(name + " initialize", LEGACY, body, "InitializeResult",
                     "initialize_result.json")
        if name == "http":
            self.hdrs = {"Mcp-Session-Id": self.t.last_headers["mcp-session-id"],
                         "MCP-Protocol-Version": LEGACY}
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"}, self.hdrs,
                  want_reply=False)
        self.legacy(name + " ping", "ping", None, "EmptyResult")
        self.legacy(name + " tools/list", "tools/list", {}, "ListToolsResult",
                    "list_tools_result.json")
        self.legacy(name + " logging/setLevel", "logging/setLevel", {"level": "debug"},
                    "EmptyResult")
        self.legacy(name + " logging/setLevel bad", "logging/setLevel", {"level": "warn"})
        self.calls(lambda label, tool, args: self.legacy(
            label, "tools/call", {"name": tool, "arguments": args}, "CallToolResult",
            "call_tool_result.json"), name + " 2025", "legacy")
        self.legacy(name + " unknown tool", "tools/call", {"name": "nope", "arguments": {}})
        self.legacy(name + " unknown method", "resources/list", {})
        self.legacy(name + " initialize again", "initialize", {"protocolVersion": LEGACY})
        self.legacy(name + " tools/call without name", "tools/call", {"arguments": {}})
        _, body = self.send(None, self.hdrs, text="{not json")
        self.rec.add(name + " parse error", LEGACY, body)
        _, body = self.send({"jsonrpc": "1.0", "id": 5, "method": "ping"}, self.hdrs)
        self.rec.add(name + " invalid request", LEGACY, body)

    def run_modern(self):
        name = self.t.name
        self.modern(name + " server/discover", "server/discover", None, "DiscoverResult",
                    "discover_result.json")
        self.modern(name + " tools/list", "tools/list", None, "ListToolsResult",
                    "list_tools_result.json")
        self.calls(lambda label, tool, args: self.modern(
            label, "tools/call", {"name": tool, "arguments": args}, "CallToolResult",
            "call_tool_result.json"), name + " 2026", "modern")
        self.modern(name + " unknown tool", "tools/call", {"name": "nope", "arguments": {}})
        self.modern(name + " removed method", "ping")
        self.modern(name + " missing _meta key", "tools/list",
                    meta={"io.modelcontextprotocol/protocolVersion": MODERN})
        self.modern(name + " unsupported version", "tools/list",
                    meta=dict(tm.META, **{"io.modelcontextprotocol/protocolVersion":
                                          "2099-01-01"}),
                    headers=tm.modern_headers("tools/list", version="2099-01-01"))
        self.modern(name + " bad log level", "tools/list",
                    meta=dict(tm.META, **{"io.modelcontextprotocol/logLevel": "loud"}))
        if name == "http":
            self.modern(name + " header mismatch", "tools/list",
                        headers=tm.modern_headers("tools/call"))
        _, body = self.send({"jsonrpc": "2.0", "id": None, "method": "tools/list",
                             "params": {"_meta": tm.META}}, tm.modern_headers("tools/list"))
        self.rec.add(name + " null id", MODERN, body)

    def calls(self, call, label, era):
        """Every tool: a successful call where one is cheap, and a tool error for each."""
        ok = [("workspace_info", {}),
              ("read", {"workspace_id": "default", "path": "a.txt"}),
              ("read", {"workspace_id": "default", "path": "missing.txt"}),
              ("find", {"workspace_id": "default", "glob": "*.txt"}),
              ("apply_patch", {"workspace_id": "default", "operation_key": "k-" + label,
                               "patch": PATCH % ("new-%s.txt" % label.replace(" ", "-"))}),
              ("operation_status", {"operation_key": "k-" + label})]
        for tool, args in ok:
            call("%s %s" % (label, tool), tool, args)
        proc = call(label + " exec_command", "exec_command",
                    {"workspace_id": "default", "command": ["cat"], "yield_ms": 50})
        pid = proc["result"]["structuredContent"]["process_id"]
        for tool, args in (("write_stdin", {"process_id": pid, "data": "x\n"}),
                           ("read_process", {"process_id": pid, "wait_ms": 100}),
                           ("process_status", {"process_id": pid}),
                           ("process_resize", {"process_id": pid, "rows": 30, "cols": 90}),
                           ("terminate_process", {"process_id": pid})):
            call("%s %s" % (label, tool), tool, args)
        for tool in TOOLS:
            call("%s %s tool error" % (label, tool), tool, {"workspace_id": 5, "process_id": 5,
                                                          "operation_key": 5})
        call(label + " arguments not an object", "read", [1])


class HttpErrors:
    """The JSON bodies of the HTTP transport's own errors (no MCP exchange behind them)."""

    @staticmethod
    def run(port, rec):
        def req(label, method, path, body=b"{}", headers=None, our=None):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            h = {"Content-Type": "application/json",
                 "Accept": "application/json, text/event-stream"}
            h.update(headers or {})
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            text = resp.read().decode("utf-8")
            conn.close()
            rec.add("http " + label, "http", text, None, our)
        ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        req("no session", "POST", "/mcp", ping)
        req("unknown session", "POST", "/mcp", ping, {"Mcp-Session-Id": "0" * 32})
        req("bad version header", "POST", "/mcp", ping, {"Mcp-Session-Id": "0" * 32,
                                                         "MCP-Protocol-Version": "1999-01-01"})
        req("wrong content type", "POST", "/mcp", ping, {"Content-Type": "text/plain"})
        req("unknown path", "POST", "/elsewhere", ping, our="http_error.json")
        req("method not allowed", "PUT", "/mcp", ping, our="http_error.json")


class OfficialAgreement(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tm.binary()  # skips without CODESPACE_MCP_BIN
        cls.rec = Recorder()
        cls.tmp = tempfile.TemporaryDirectory(prefix="cs-official-")
        for transport in (tm.StdioTransport, tm.HttpTransport):
            ws = os.path.join(cls.tmp.name, transport.name)
            os.mkdir(ws)
            with open(os.path.join(ws, "a.txt"), "w") as f:
                f.write("alpha\nbeta\n")
            s = Scenario(transport, ws, cls.tmp.name, cls.rec)
            try:
                s.run_legacy()
                s.run_modern()
                if transport.name == "http":
                    HttpErrors.run(s.t.port, cls.rec)
            finally:
                s.close()
        out = os.environ.get("CS_PROTOCOL_TRANSCRIPT")
        if out:
            with open(out, "w", encoding="utf-8") as f:
                for label, _, text, _, _ in cls.rec.records:
                    f.write("%s\t%s\n" % (label, text))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_every_message_matches_the_official_schema(self):
        bad = []
        kinds = set()
        for label, rev, text, result_def, our in self.rec.records:
            msg = json.loads(text)
            if rev == "http" and "jsonrpc" not in msg:
                kinds.add("http body")
                continue  # not an MCP message: our http_error.json below
            orev = LEGACY if rev == "http" else rev
            if "error" in msg:
                kinds.add("error %d" % msg["error"]["code"])
                if "id" in msg and msg["id"] is None:
                    if rev == MODERN:
                        bad.append("%s: a 2026-07-28 reply has \"id\": null" % label)
                    msg = {k: v for k, v in msg.items() if k != "id"}  # JSON-RPC 2.0's null id
                bad += ["%s: JSONRPCErrorResponse %s" % (label, p)
                        for p in problems(official_validator(orev, "JSONRPCErrorResponse"), msg)]
                bad += ["%s: ours jsonrpc_error.json %s" % (label, p)
                        for p in problems(our_validator("jsonrpc_error.json"), json.loads(text))]
                continue
            kinds.add(result_def)
            bad += ["%s: JSONRPCResultResponse %s" % (label, p)
                    for p in problems(official_validator(orev, "JSONRPCResultResponse"), msg)]
            bad += ["%s: ours jsonrpc_result.json %s" % (label, p)
                    for p in problems(our_validator("jsonrpc_result.json"), msg)]
            if result_def:
                bad += ["%s: %s %s" % (label, result_def, p)
                        for p in problems(official_validator(orev, result_def), msg["result"])]
            if our:
                bad += ["%s: ours %s %s" % (label, our, p)
                        for p in problems(our_validator(our), msg["result"])]
            if rev == MODERN and msg["result"].get("resultType") != "complete":
                bad.append("%s: a 2026-07-28 result without resultType" % label)
        self.assertEqual(bad, [], "\n".join(bad))
        for want in ("InitializeResult", "DiscoverResult", "ListToolsResult", "CallToolResult",
                     "EmptyResult", "error -32700", "error -32600", "error -32601",
                     "error -32602", "error -32022", "error -32020", "http body"):
            self.assertIn(want, kinds)

    def test_http_bodies_match_our_schema(self):
        bad = []
        for label, rev, text, _, our in self.rec.records:
            if our == "http_error.json":
                bad += ["%s: %s" % (label, p)
                        for p in problems(our_validator(our), json.loads(text))]
        self.assertEqual(bad, [], "\n".join(bad))

    def test_tool_results_are_the_same_in_both_eras(self):
        """Tool content does not depend on the revision (the e2e tests compare more)."""
        by = {}
        for label, rev, text, result_def, _ in self.rec.records:
            if result_def == "CallToolResult" and "tool error" in label:
                r = json.loads(text)["result"]
                key = label.replace(" 2025 ", " * ").replace(" 2026 ", " * ")
                by.setdefault(key, []).append(r["content"])
        for key, contents in by.items():
            self.assertEqual(len(contents), 2, key)
            self.assertEqual(contents[0], contents[1], key)


if __name__ == "__main__":
    unittest.main()
