#!/usr/bin/python3
"""check_handjson: wire shapes go through the generated code (issue 16, issue 19, style.md "One
way to build a wire shape").

Fails when JSON is built or walked by hand in src/ or helper/ outside the allowlist below:
json_pack, json_object_set*, json_object_del*, json_array_append*, json_array_insert*,
json_array_remove (building or editing a shape), json_object_get, json_array_get,
json_object_iter*, json_object_foreach, json_array_foreach (walking one). Each allowlist entry
names a file, or a file and its functions, with the reason that JSON has no schema; an entry that
no longer matches anything is a failure too, so the list only shrinks. Everything else builds
and reads its JSON through csw_<type>_encode / _encode_text / _decode (schema/).

    /usr/bin/python3 tests/checks/check_handjson.py [--root DIR]

Standard library only. Prints one line per violation ("file:line: function: call") and exits 1.
"""

import argparse
import os
import re
import sys

LOG = "logging: a log line carries whatever fields its caller passes (no fixed shape)"

# file -> {function: reason} ("*" for the whole file). Keep it short.
ALLOWLIST = {
    # The generic runtime the generated tables drive: it builds and reads every generated shape.
    "src/base/base_wire.c": {
        "*": "the generic wire runtime: it builds and reads every generated shape"},
    # The fast JSON loader builds whatever tree the text holds, as jansson's loader does.
    "src/base/base_json_fast.c": {
        "put": "the fast loader builds the text's own tree (no fixed shape), as json_loadb"},
    # Logging has no schema: a line is a timestamp, a level, a message and free-form fields.
    "src/base/base_log.c": {
        "direct_line": LOG,
        "cs_log_line_json": LOG},
    "src/base/base_loop.c": {
        "cs_loop_busy_poll_from_env": LOG},
    "src/main/main.c": {
        "on_signal": LOG,
        "http_log": LOG,
        "serve": LOG,
        "log_start": LOG,
        "log_recovery": LOG,
        "main": LOG},
    "src/main/main_calls.c": {
        "log_denials": LOG,
        "cs_main_calls_report": LOG},
    "src/runner/runner_uds.c": {
        "lose": LOG,
        "replace_worker": LOG,
        "cs_runner_uds_new": LOG},
    "src/runner/runner_tcp.c": {
        "drop": LOG,
        "up": LOG,
        "status_done": LOG,
        "hello_isolation": LOG},
    "src/runner/runner_exec.c": {
        "exec_store": LOG,
        "ledger_begin": LOG,
        "ledger_finish": LOG},
    "src/runner/runner_tls.c": {
        "conn_main": LOG,
        "refusal": LOG},
    "src/runtime/runtime_main.c": {
        "run": LOG,
        "on_signal": LOG},
    # Walks a registry document along the generated descriptor (not a field list) to refuse the
    # keys the schema does not name, which the decoder would ignore.
    "src/policy/policy_registry.c": {
        "unknown_keys_at": "generic walk over the generated descriptor: refuses unknown keys"},
    # A JSON-RPC batch is a bare array of messages: each element is read and answered through
    # the generated protocol types; only the array around them is held by hand.
    # One member's presence, so that a transport decodes a reply's envelope only for an error.
    "src/jsonrpc/jsonrpc.c": {
        "cs_jsonrpc_reply_has_error": "tests one member's presence before the generated decode"},
    "src/mcp/mcp_server.c": {
        "add_reply_text": "collects the replies of a JSON-RPC batch (an array, no schema)",
        "batch_text": "joins the replies of a JSON-RPC batch (an array, no schema)",
        "cs_mcp_session_handle_msg": "splits a JSON-RPC batch into its messages",
        "tools_call": "arguments the generated decoder refused: reads their workspace_id string "
                      "for the operator's log line only (logged when it is a registered id)"},
}

CALL = re.compile(r"\b(json_pack|json_object_set\w*|json_object_del\w*|json_array_append\w*|"
                  r"json_array_insert\w*|json_array_remove|json_object_get|json_array_get|"
                  r"json_object_iter\w*|json_object_foreach|json_array_foreach)\s*\(")
FUNC = re.compile(r"^(?:static\s+)?[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\(")


def scan(root):
    bad = []
    used = set()
    for top in ("src", "helper"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith((".c", ".h", ".rl")):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                allowed = ALLOWLIST.get(rel, {})
                func = None
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = FUNC.match(line)
                        if m and not line.startswith((" ", "\t", "#", "/", "*")):
                            func = m.group(1)
                        code = line.split("//")[0]
                        for c in CALL.finditer(code):
                            if "*" in allowed or func in allowed:
                                used.add((rel, "*" if "*" in allowed else func))
                                continue
                            bad.append("%s:%d: %s: %s (build or read it through the generated "
                                       "code, or allowlist it with its reason)"
                                       % (rel, n, func or "?", c.group(1)))
    for rel in sorted(ALLOWLIST):
        for func in sorted(ALLOWLIST[rel]):
            if (rel, func) not in used:
                bad.append("%s: %s: allowlist entry matches nothing (remove it)" % (rel, func))
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    a = ap.parse_args(argv)
    bad = scan(a.root)
    for b in bad:
        print(b)
    if bad:
        print("check_handjson: %d hand-built or hand-walked JSON shape(s)" % len(bad))
        return 1
    print("check_handjson: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
