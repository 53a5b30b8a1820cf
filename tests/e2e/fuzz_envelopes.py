#!/usr/bin/python3
"""Envelope fuzzing of codespace-mcp over stdio.

Sends a few thousand randomly mutated JSON-RPC envelopes (seeded PRNG: truncations, wrong types
for jsonrpc/id/method/params, huge numbers, deep nesting up to a few thousand levels, \\u0000
escapes, invalid UTF-8, batches and nested arrays) to ONE stdio server and checks that it never
dies, answers every line that should be answered (and only those) with the right id and error
code, and still answers ping at the end; then stdin EOF must end it with status 0.

Each fuzz line is followed by a sentinel ping with a unique id, and the next line is sent only
once this one is settled, so the replies that arrive meanwhile are exactly the replies to one fuzz
line. read and find answer from the executor's file threads, so their replies (and a batch reply
holding one) may come after the sentinel's: when the replies so far match no outcome, the test
waits up to LATE_WAIT seconds for more. An oracle (Python's json with jansson's
limits mirrored: integers clamped to int64 and reals to double (the server's second reading of a
message jansson refused for a number's range), no lone surrogates, no NUL in object keys,
strict UTF-8) predicts the outcome; where the contract leaves a choice (very deep nesting, an
empty line) every allowed outcome is accepted.

2026-07-28 requests (per-request params._meta, no session) are mixed in, valid and broken: the
oracle applies the classification rule and the check order of docs/protocol.md (-32602 for
missing _meta keys, -32022 for another version, -32601 for methods that revision lacks, never
"id": null). Ids are expected back exactly as written, also past 64 bits.

Only read-only tools are ever called (workspace_info, read, find, operation_status,
process_status, and unknown names): a mutated envelope can never start a process or write.

Run: CODESPACE_MCP_BIN=build/release/src/main/codespace-mcp /usr/bin/python3 fuzz_envelopes.py
     [--seed N] [--count N] [--max-seconds S]      (from tests/e2e)
Exit status 0 when every case matched; 1 otherwise (the first mismatches are printed).
"""
import argparse
import json
import os
import random
import sys
import time

import test_stdio as e2e

sys.setrecursionlimit(20000)

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
SAFE_TOOLS = ["workspace_info", "read", "find", "operation_status", "process_status"]
UNSAFE_TOOLS = set(e2e.TOOLS) - set(SAFE_TOOLS)
VERSIONS = e2e.VERSIONS
BATCH_VERSION = "2025-03-26"
LATE_WAIT = 5.0  # seconds a line's late replies (file tools, off the loop) may take
DEEP = 512  # from this nesting depth on, the server may refuse to parse (-32700) or not
BUDGET_DEPTH = 128  # deeper nesting is over the parse budget (M8): -32600, under a readable id
LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


class ParseError(Exception):
    pass


# ---- the oracle ----------------------------------------------------------------------------


def depth_of(text):
    """Maximum bracket nesting outside strings (an over-estimate is harmless)."""
    depth = best = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def _int(s):
    # jansson refuses integers past int64 (the server then reads the message again with them
    # clamped), but every reply carries the request's id token as written: ids come back exact.
    # Elsewhere the oracle never looks at a number's value.
    return int(s)


def _float(s):
    # Likewise reals past double arrive as +/-DBL_MAX.
    v = float(s)
    if v == float("inf"):
        return sys.float_info.max
    if v == float("-inf"):
        return -sys.float_info.max
    return v


def _const(s):
    raise ParseError("NaN and Infinity are not JSON")


def _check_strings(v):
    """jansson rejects lone surrogates in strings and NUL bytes in object keys."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in x):
                raise ParseError("lone surrogate")
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, dict):
            for k, val in x.items():
                if "\x00" in k or any(0xD800 <= ord(c) <= 0xDFFF for c in k):
                    raise ParseError("bad key")
                stack.append(val)


def parse(line):
    """The JSON value of a line as the server sees it, or ParseError."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError("invalid UTF-8") from None
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_const)
    except (ValueError, RecursionError) as ex:
        raise ParseError(str(ex)) from None
    _check_strings(value)
    return value


def valid_id(v):
    return isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))


ABSENT = object()  # a reply with no "id" member at all (2026-07-28, id unreadable)
MODERN = "2026-07-28"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPS = "io.modelcontextprotocol/clientCapabilities"
META_LOGLEVEL = "io.modelcontextprotocol/logLevel"


def is_modern(msg):
    """docs/protocol.md's rule on stdio: server/discover, or params._meta names a version."""
    if msg.get("method") == "server/discover":
        return True
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and META_VERSION in meta


def modern_result(res):
    return isinstance(res, dict) and res.get("resultType") == "complete" and \
        res.get("_meta", {}).get("io.modelcontextprotocol/serverInfo", {}).get("name") == \
        "codespace"


class Reply:
    """One expected reply: a result (check(result) must hold) or an error with code."""

    def __init__(self, rid, code=None, check=None, what=""):
        self.rid, self.code, self.check, self.what = rid, code, check, what

    def matches(self, r):
        if not isinstance(r, dict) or r.get("jsonrpc") != "2.0":
            return False
        if self.rid is ABSENT:
            if "id" in r:
                return False
        elif "id" not in r or r["id"] != self.rid or type(r["id"]) is not type(self.rid):
            return False
        if self.code is not None:
            err = r.get("error")
            return ("result" not in r and isinstance(err, dict) and err.get("code") == self.code
                    and isinstance(err.get("message"), str))
        if "error" in r or "result" not in r:
            return False
        return self.check is None or self.check(r["result"])

    def __repr__(self):
        if self.code is not None:
            return "error %d id %r%s" % (self.code, self.rid, self.what)
        return "result id %r%s" % (self.rid, self.what)


class Either:
    """A reply that may be any of several (e.g. logging/setLevel with an odd level)."""

    def __init__(self, *options):
        self.options = options
        self.rid = options[0].rid

    def matches(self, r):
        return any(o.matches(r) for o in self.options)

    def __repr__(self):
        return " or ".join(map(repr, self.options))


def is_tool_result(res):
    c = res.get("content") if isinstance(res, dict) else None
    return (isinstance(c, list) and len(c) >= 1 and all(isinstance(i, dict) for i in c)
            and isinstance(res.get("isError", False), bool))


def expect_modern(msg, rid, method):
    """The expected reply to a well-formed 2026-07-28 request (stdio: no header checks)."""
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    if not isinstance(params, dict) or not isinstance(meta.get(META_VERSION), str) \
            or not isinstance(meta.get(META_CAPS), dict):
        return Reply(rid, -32602, what=" (2026 _meta)")
    if meta[META_VERSION] != MODERN:
        return Reply(rid, -32022, check=None, what=" (2026 version %r)" % meta[META_VERSION][:20])
    if method not in ("server/discover", "tools/list", "tools/call"):
        return Reply(rid, -32601, what=" (2026 method %r)" % method[:40])
    if META_LOGLEVEL in meta and meta[META_LOGLEVEL] not in LEVELS:
        return Reply(rid, -32602, what=" (2026 logLevel)")
    if method == "server/discover":
        return Reply(rid, check=lambda res: modern_result(res)
                     and res.get("supportedVersions", [None])[0] == MODERN
                     and isinstance(res.get("ttlMs"), int), what=" (discover)")
    if method == "tools/list":
        return Reply(rid, check=lambda res: modern_result(res)
                     and [t.get("name") for t in res.get("tools", [])] == e2e.TOOLS
                     and res.get("cacheScope") in ("public", "private"), what=" (2026 tools/list)")
    name = params.get("name")
    if not isinstance(name, str) or name not in e2e.TOOLS:
        return Reply(rid, -32602, what=" (2026 tool name)")
    return Reply(rid, check=lambda res: is_tool_result(res) and modern_result(res),
                 what=" (2026 tool result)")


def expect_one(msg, state, in_batch=False):
    """The expected reply (Reply/Either) to one parsed message, or None for no reply."""
    if not isinstance(msg, dict):
        return Reply(None, -32600)
    modern = not in_batch and is_modern(msg)
    rid = msg.get("id")
    rid_ok = "id" in msg and valid_id(rid)
    echo = rid if rid_ok else (ABSENT if modern else None)
    if msg.get("jsonrpc") != "2.0":
        return Reply(echo, -32600, what=" (jsonrpc)")
    if "method" not in msg:
        if "result" in msg or "error" in msg:
            return None if rid_ok else Reply(None, -32600)
        return Reply(echo, -32600, what=" (no method)")
    method = msg["method"]
    if not isinstance(method, str):
        return Reply(echo, -32600, what=" (method type)")
    if "params" in msg and not isinstance(msg["params"], (dict, list)):
        return Reply(echo, -32600, what=" (params type)")
    if "id" not in msg:
        return None  # a notification
    if not rid_ok:
        return Reply(echo, -32600, what=" (id type)")
    if modern:
        return expect_modern(msg, rid, method)
    params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
    if method == "initialize":
        # The session is initialized already: the contract does not say whether a second
        # initialize is refused (-32600) or answered; either way the version it names counts.
        asked = params.get("protocolVersion")
        v = asked if isinstance(asked, str) and asked in VERSIONS else VERSIONS[0]
        return Either(Reply(rid, check=lambda res, v=v: isinstance(res, dict)
                            and res.get("protocolVersion") == v, what=" (initialize -> %s)" % v),
                      Reply(rid, -32600, what=" (initialized already)"))
    if method == "ping":
        return Reply(rid, check=lambda res: res == {}, what=" (ping)")
    if method == "tools/list":
        return Reply(rid, check=lambda res: isinstance(res, dict)
                     and [t.get("name") for t in res.get("tools", [])] == e2e.TOOLS,
                     what=" (tools/list)")
    if method == "tools/call":
        name = params.get("name")
        if not isinstance(name, str) or name not in e2e.TOOLS:
            return Reply(rid, -32602, what=" (tool name)")
        return Reply(rid, check=is_tool_result, what=" (tool result)")
    if method == "logging/setLevel":
        level = params.get("level")
        if isinstance(level, str) and level in LEVELS:
            return Reply(rid, check=lambda res: res == {}, what=" (setLevel)")
        return Reply(rid, -32602, what=" (level %r)" % (level,))
    return Reply(rid, -32601, what=" (method %r)" % method[:40])


def expect(line, state):
    """A list of allowed outcomes for one line; an outcome is None (no reply) or a reply
    expectation (Reply/Either, or a list of them for a batch reply)."""
    body = line[:-1] if line.endswith(b"\r") else line  # the framer drops one trailing CR
    if body.strip(b" \t\r") == b"":
        return [None, Reply(None, -32700)]  # an empty line may be skipped or refused
    try:
        msg = parse(body)
    except ParseError:
        return [Reply(None, -32700)]
    outcomes = []
    if depth_of(body.decode("utf-8")) > BUDGET_DEPTH:
        # Refused by the pre-pass before parsing: under the top-level id when it is a string or
        # an integer (the pre-pass reads an id spelt plainly; with escapes or duplicates, null).
        rid = msg.get("id") if isinstance(msg, dict) else None
        if not isinstance(rid, str) and (not isinstance(rid, int) or isinstance(rid, bool)):
            rid = None
        return [Reply(rid, -32600, what=" (over the parse budget)"),
                Reply(None, -32600, what=" (over the parse budget)")]
    if depth_of(body.decode("utf-8")) >= DEEP:
        outcomes.append(Reply(None, -32700))
    if isinstance(msg, list):
        if state["version"] != BATCH_VERSION:
            outcomes.append(Reply(None, -32600, what=" (batch on %s)" % state["version"]))
        elif not msg:
            outcomes.append(Reply(None, -32600, what=" (empty batch)"))
        else:
            each = [e for e in (expect_one(m, state, True) for m in msg) if e is not None]
            outcomes.append(each if each else None)
    else:
        outcomes.append(expect_one(msg, state))
    return outcomes


def matches(outcome, replies):
    if outcome is None:
        return replies == []
    if len(replies) != 1:
        return False
    r = replies[0]
    if isinstance(outcome, list):
        if not isinstance(r, list) or len(r) != len(outcome):
            return False
        # Replies in a batch may come in any order: match each expectation once.
        left = list(r)
        for exp in outcome:
            hit = next((i for i, x in enumerate(left) if exp.matches(x)), None)
            if hit is None:
                return False
            left.pop(hit)
        return True
    return outcome.matches(r)


# ---- the generator -------------------------------------------------------------------------


def rand_string(rng, n=None):
    n = rng.randint(0, 12) if n is None else n
    alphabet = "abcxyz/_-. \u00e9\u2603\U0001f600\"\\\t"
    return "".join(rng.choice(alphabet) for _ in range(n))


def rand_scalar(rng):
    return rng.choice([
        None, True, False, 0, -1, 1, rng.randint(INT64_MIN, INT64_MAX), 1.5, -0.0, 1e308,
        "", rand_string(rng), "2.0", "ping", "\u0000", [], {}, [1, "a"], {"a": None},
    ])


def rand_id(rng):
    return rng.choice([
        rng.randint(-5, 10 ** 6), rng.randint(INT64_MIN, INT64_MAX), "id-%d" % rng.randint(0, 99),
        "", rand_string(rng), None, True, 1.0, 2.5, [], {}, {"id": 1},
    ])


def base_message(rng):
    """A well-formed envelope (object) that the oracle can reason about."""
    kind = rng.randrange(16)
    rid = rng.choice([rng.randint(0, 10 ** 6), "r-%d" % rng.randint(0, 10 ** 6)])
    if kind >= 12:
        # 2026-07-28: usually a complete _meta, sometimes a key missing or another version.
        meta = {META_VERSION: MODERN, META_CAPS: {}}
        op = rng.randrange(8)
        if op == 0:
            del meta[rng.choice([META_VERSION, META_CAPS])]
        elif op == 1:
            meta[META_VERSION] = rng.choice(["2025-11-25", "v999.0.0", "", 2026, None])
        elif op == 2:
            meta[META_LOGLEVEL] = rng.choice(LEVELS + ["loud", 3, None])
        elif op == 3:
            meta[META_CAPS] = rng.choice([[], None, {"sampling": {}}])
        method = rng.choice(["server/discover", "tools/list", "tools/call", "tools/call", "ping",
                             "initialize", "logging/setLevel", "prompts/list", "x/y"])
        params = {"_meta": meta}
        if method == "tools/call":
            params["name"] = rng.choice(SAFE_TOOLS + ["no_such_tool"])
            params["arguments"] = rng.choice([{}, {"workspace_id": "default"},
                                              {"path": "hello.txt", "workspace_id": "default"}])
        if method == "logging/setLevel":
            params["level"] = "info"
        return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    if kind == 0:
        return {"jsonrpc": "2.0", "id": rid, "method": "ping"}
    if kind == 1:
        return {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {
            "protocolVersion": rng.choice(VERSIONS + ["2024-11-05", "", "x"]),
            "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}
    if kind == 2:
        return {"jsonrpc": "2.0", "id": rid, "method": "tools/list"}
    if kind in (3, 4, 5):
        args = rng.choice([{}, {"workspace_id": "default"}, {"workspace_id": ""},
                           {"workspace_id": "nope"}, {"workspace_id": 7}, None,
                           {"path": "hello.txt", "workspace_id": "default"},
                           {"glob": "*.txt", "workspace_id": "default", "limit": 5},
                           {"operation_id": "op-x"}, {"process_id": "proc-x"}])
        params = {"name": rng.choice(SAFE_TOOLS + ["no_such_tool", ""])}
        if args is not None:
            params["arguments"] = args
        return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    if kind == 6:
        return {"jsonrpc": "2.0", "id": rid, "method": "logging/setLevel",
                "params": {"level": rng.choice(LEVELS + ["warn", "DEBUG", "x", 3, "debug\u0000",
                                                         "error\u0000x"])}}
    if kind == 7:
        return {"jsonrpc": "2.0", "method": rng.choice([
            "notifications/initialized", "notifications/cancelled", "notifications/progress",
            "notifications/x"]), "params": {"requestId": rid}}
    if kind == 8:
        return {"jsonrpc": "2.0", "id": rid, "result": {}}
    if kind == 9:
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -1, "message": "m"}}
    if kind == 10:
        return {"jsonrpc": "2.0", "id": rid, "method": rng.choice([
            "resources/list", "prompts/list", "tools/List", "ping ", "", "x" * 200])}
    return {"jsonrpc": "2.0", "id": rid, "method": "ping", "params": {}}


def mutate_fields(rng, msg):
    """Structural mutations: wrong types, missing or extra members, NULs in names."""
    msg = dict(msg)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(9)
        if op == 0:
            msg["jsonrpc"] = rng.choice([rand_scalar(rng), "1.0", "2.0\u0000", "2.00", 2.0])
        elif op == 1:
            msg["id"] = rand_id(rng)
        elif op == 2:
            msg["method"] = rng.choice([rand_scalar(rng), "ping\u0000x", "tools/list\u0000",
                                        "\u0000ping", "initialize\u0000"])
        elif op == 3:
            msg["params"] = rand_scalar(rng)
        elif op == 4 and msg:
            del msg[rng.choice(list(msg))]
        elif op == 5:
            msg[rand_string(rng, 4)] = rand_scalar(rng)
        elif op == 6 and isinstance(msg.get("params"), dict) and "name" in msg["params"]:
            p = dict(msg["params"])
            name = p["name"] if isinstance(p["name"], str) else "workspace_info"
            p["name"] = rng.choice([name + "\u0000", "workspace_info\u0000exec_command",
                                    rand_scalar(rng), name.upper()])
            msg["params"] = p
        elif op == 7:
            msg["result" if rng.random() < 0.5 else "error"] = rand_scalar(rng)
        elif op == 8 and isinstance(msg.get("params"), dict):
            p = dict(msg["params"])
            p[rng.choice(["protocolVersion", "arguments", "level"])] = rand_scalar(rng)
            msg["params"] = p
    return msg


ASCII = {"on": True}  # generate() flips it per case: \uXXXX escapes or raw UTF-8


def dumps(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=ASCII["on"]).encode("utf-8")


def deep(rng):
    """A request whose params nest a few thousand levels (built as text)."""
    d = rng.choice([rng.randint(1, 100), rng.randint(100, 600), rng.randint(600, 4000)])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    inner = opener * d + ("1" if opener == "[" else "1") + closer * d
    rid = rng.randint(0, 10 ** 6)
    method = rng.choice(["ping", "tools/call", "x/y"])
    if rng.random() < 0.2:
        return (opener * d + closer * d).encode() if opener == "[" else inner.encode()
    return ('{"jsonrpc":"2.0","id":%d,"method":"%s","params":{"deep":%s}}'
            % (rid, method, inner)).encode()


def huge_numbers(rng):
    rid = rng.choice(["1" + "0" * rng.randint(15, 400), "-" + "9" * rng.randint(18, 60),
                      "9223372036854775807", "-9223372036854775808", "9223372036854775808",
                      "1e999", "-1e400", "1.7976931348623157e308", "4.9e-324", "1e-400",
                      "123456789012345678901234567890.5", "0.0000001", "-0", "1E2"])
    where = rng.randrange(3)
    if where == 0:
        return ('{"jsonrpc":"2.0","id":%s,"method":"ping"}' % rid).encode()
    if where == 1:
        return ('{"jsonrpc":"2.0","id":5,"method":"ping","params":{"n":%s}}' % rid).encode()
    return ('{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"workspace_info",'
            '"arguments":{"workspace_id":%s}}}' % rid).encode()


BAD_UTF8 = [b"\xff", b"\xfe", b"\xc0\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x80",
            b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xef\xbb\xbf"]
RAW = [b"\x00", b"\x01", b"\x1f", b"\x7f", b"\t", b"\r", b" ", b"\\", b'"', b"{", b"}", b"[",
       b"]", b",", b":", b"\\u0000", b"\\ud800", b"\\udc00", b"\\ud83d\\ude00", b"\\u00e9",
       b"\\x", b"\\u12"]


def mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randint(0, len(data))
        if op == 0:
            del data[pos:]  # truncation
        elif op == 1:
            data[pos:pos] = rng.choice(BAD_UTF8)
        elif op == 2:
            data[pos:pos] = rng.choice(RAW)
        elif op == 3 and data:
            i = rng.randrange(len(data))
            data[i] = rng.randrange(256)
        elif op == 4 and data:
            j = rng.randint(pos, min(len(data), pos + 20))
            data[pos:pos] = data[pos:j]  # duplicate a chunk
        elif op == 5 and data:
            del data[pos:pos + rng.randint(1, 5)]
    return bytes(data).replace(b"\n", b" ")


def batch(rng):
    n = rng.choice([0, 1, 2, 3, 5])
    items = []
    for _ in range(n):
        r = rng.random()
        if r < 0.6:
            items.append(base_message(rng))
        elif r < 0.85:
            items.append(mutate_fields(rng, base_message(rng)))
        elif r < 0.95:
            items.append(rand_scalar(rng))
        else:
            items.append([base_message(rng)])
    return dumps(items)


def generate(rng):
    r = rng.random()
    ASCII["on"] = rng.random() < 0.5
    if r < 0.15:
        line = dumps(base_message(rng))
    elif r < 0.40:
        line = dumps(mutate_fields(rng, base_message(rng)))
    elif r < 0.60:
        line = mutate_bytes(rng, dumps(base_message(rng)))
    elif r < 0.68:
        line = deep(rng)
    elif r < 0.76:
        line = huge_numbers(rng)
    elif r < 0.90:
        line = batch(rng)
    elif r < 0.95:
        line = mutate_bytes(rng, batch(rng))
    else:
        line = rng.choice([b"", b" ", b"\r", b"null", b"[]", b"{}", b"[[]]", b"\x00",
                           b'"\\u0000"', b"1", b"true", b"[1,2", b"}{"])
    return line


def unsafe(line):
    """True when the line could call a tool that writes or starts processes."""
    try:
        v = parse(line[:-1] if line.endswith(b"\r") else line)
    except (ParseError, RecursionError):
        return False
    msgs = v if isinstance(v, list) else [v]
    for m in msgs:
        if isinstance(m, dict) and isinstance(m.get("params"), dict):
            name = m["params"].get("name")
            # Also "exec_command\u0000...": a C string compare would stop at the NUL.
            if isinstance(name, str) and name.split("\x00")[0] in UNSAFE_TOOLS:
                return True
    return False


# ---- the run -------------------------------------------------------------------------------


def run(seed, count, max_seconds, verbose):
    rng = random.Random(seed)
    ws = e2e.Workspace()
    try:
        server = e2e.StdioServer(["--workspace", ws.link], env=e2e.server_env(ws.state))
    except BaseException:
        ws.cleanup()
        raise
    failures = []
    stats = {"cases": 0, "replied": 0, "silent": 0, "parse_errors": 0, "batches": 0}
    state = {"version": BATCH_VERSION}
    started = time.monotonic()
    try:
        init = server.request("initialize", {"protocolVersion": BATCH_VERSION,
                                             "capabilities": {}})
        assert init["result"]["protocolVersion"] == BATCH_VERSION, init
        server.notify("notifications/initialized")
        chunk = 25
        sent = 0
        while sent < count and time.monotonic() - started < max_seconds:
            # Back to the batch-accepting version now and then, so that batches get handled.
            if rng.random() < 0.5 and state["version"] != BATCH_VERSION:
                r = server.request("initialize", {"protocolVersion": BATCH_VERSION},
                                   rid="fz-reinit-%d" % sent)
                if r.get("result", {}).get("protocolVersion") != BATCH_VERSION:
                    failures.append((b"", [], [r], "re-initialize failed"))
                state["version"] = BATCH_VERSION
            cases = []
            for i in range(min(chunk, count - sent)):
                line = generate(rng)
                while unsafe(line):
                    line = generate(rng)
                sentinel = "fz-sentinel-%d" % (sent + i)
                cases.append((line, sentinel))
            sent += len(cases)
            for line, sentinel in cases:
                # One line in flight: a late file-tool reply cannot mix with the next line's.
                server.send_raw(line + b"\n" + json.dumps(
                    {"jsonrpc": "2.0", "id": sentinel, "method": "ping"}).encode() + b"\n")
                outcomes = expect(line, state)
                replies = []
                while True:
                    r = server.recv(timeout=e2e.REPLY_TIMEOUT)
                    if isinstance(r, dict) and r.get("id") == sentinel:
                        if r.get("result") != {}:
                            failures.append((line, outcomes, [r], "sentinel ping failed"))
                        break
                    replies.append(r)
                deadline = time.monotonic() + LATE_WAIT
                while not any(matches(o, replies) for o in outcomes) \
                        and time.monotonic() < deadline:
                    try:
                        replies.append(server.recv(timeout=deadline - time.monotonic()))
                    except AssertionError:
                        break
                stats["cases"] += 1
                stats["replied" if replies else "silent"] += 1
                if any(isinstance(r, dict) and isinstance(r.get("error"), dict)
                       and r["error"].get("code") == -32700 for r in replies):
                    stats["parse_errors"] += 1
                if any(isinstance(r, list) for r in replies):
                    stats["batches"] += 1
                if not any(matches(o, replies) for o in outcomes):
                    failures.append((line, outcomes, replies, "mismatch"))
                # The session's version follows what initialize really answered.
                for r in replies:
                    for x in (r if isinstance(r, list) else [r]):
                        res = x.get("result") if isinstance(x, dict) else None
                        if isinstance(res, dict) and isinstance(res.get("protocolVersion"), str) \
                                and "serverInfo" in res:
                            state["version"] = res["protocolVersion"]
        # Still alive and answering, then a clean EOF.
        final = server.request("ping", rid="fz-final")
        if final.get("result") != {}:
            failures.append((b"", [], [final], "final ping"))
        if server.bad_lines:
            failures.append((b"", [], server.bad_lines[:3], "stdout carried non-JSON-RPC"))
        status = server.close()
        if status != 0:
            failures.append((b"", [], [], "exit status %s after EOF" % status))
    except AssertionError as ex:
        failures.append((b"", [], [], "server stopped answering: %s" % ex))
    finally:
        server.kill()
        ws.cleanup()
    elapsed = time.monotonic() - started
    for line, outcomes, replies, why in failures[:15]:
        print("MISMATCH (%s)\n  line:     %r\n  expected: %s\n  got:      %s"
              % (why, line[:300], " | ".join(repr(o) for o in outcomes),
                 json.dumps(replies, default=repr)[:400]))
    if len(failures) > 15:
        print("... and %d more mismatches" % (len(failures) - 15))
    if failures or verbose:
        print("stderr tail:\n" + server.stderr_text(10))
    print("fuzz_envelopes: seed %d, %d cases in %.1f s (%d answered, %d silent, %d parse errors,"
          " %d batch replies): %d failed"
          % (seed, stats["cases"], elapsed, stats["replied"], stats["silent"],
             stats["parse_errors"], stats["batches"], len(failures)))
    if stats["cases"] < min(count, 500):
        print("fuzz_envelopes: too few cases ran within %.0f s" % max_seconds)
        return 1
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CS_FUZZ_SEED", "20251125")))
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--max-seconds", type=float, default=20.0)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    try:
        e2e.binary()
    except RuntimeError as ex:
        print("fuzz_envelopes: %s" % ex)
        return 1
    return run(a.seed, a.count, a.max_seconds, a.verbose)


if __name__ == "__main__":
    sys.exit(main())
