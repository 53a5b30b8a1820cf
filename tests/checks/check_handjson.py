#!/usr/bin/python3
"""check_handjson: wire shapes go through the generated code (issue 16, style.md "One way to
build a wire shape").

Fails when json_pack, json_object_set* or json_object_get (a shape built or walked by hand)
appear in src/ or helper/ outside the allowlist below. Each entry names a file, or a file and
its functions, with the reason that shape has no schema. Everything else builds and reads its
JSON through csw_<type>_encode / _encode_text / _decode (schema/).

    /usr/bin/python3 tests/checks/check_handjson.py [--root DIR]

Standard library only. Prints one line per violation ("file:line: function: call") and exits 1.
"""

import argparse
import os
import re
import sys

# file -> {function: reason} ("*" for the whole file). Keep it short.
ALLOWLIST = {
    "src/base/base_wire.c": {
        "*": "the generic wire runtime: it builds and reads every generated shape"},
    "src/base/base_log.c": {
        "*": "logging: a log line carries whatever fields its caller passes"},
    "src/main/main.c": {
        "*": "logging fields of the boundary's log lines (no fixed shape)"},
    "src/runner/runner_uds.c": {
        "lose": "logging fields of the worker-lost log line (no fixed shape)",
        "replace_worker": "logging fields of the worker start/replace log lines",
        "cs_runner_uds_new": "logging fields of the start-up sweep's log line"},
}

CALL = re.compile(r"\b(json_pack|json_object_set\w*|json_object_get)\s*\(")
FUNC = re.compile(r"^(?:static\s+)?[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\(")


def scan(root):
    bad = []
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
                                continue
                            bad.append("%s:%d: %s: %s (build or read it through the generated "
                                       "code, or allowlist it with its reason)"
                                       % (rel, n, func or "?", c.group(1)))
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
