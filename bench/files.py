#!/usr/bin/python3
"""Benchmark of the file tools (read, find) against cat and GNU find on the same data, same run.

Builds under a temporary directory a workspace holding a 1 KiB text file and a 64 MiB text file,
and a second workspace holding a tree of exactly 100,000 files (100 x 10 directories of 100
files; a separate root, so the walk's cap of 100,000 files is met, not exceeded), starts the real
server over stdio (`codespace-mcp --workspace <files> --config <registry naming "tree">`) and
measures, after one warm-up pass of everything (so every figure is page-cache warm):

  read 1 KiB     one read call (median of sequential round trips)   vs  `cat small.txt`
  read 1 MiB     one 1 MiB window of the 64 MiB file (median of the  vs  `cat big.txt` (the
                 64 windows that cover the file, sequential)              whole file)
  find 100k      one find call (the first page: the full walk, sort   vs  `find -type f |
                 and listing hash of 100,000 paths)                        LC_ALL=C sort`

The baselines run as processes (subprocess, output to /dev/null or a pipe), so their figures
include a fork/exec, as ours include a JSON-RPC round trip over pipes. Targets: read within 3x
of cat, find within 2x of find | sort; the script prints every ratio and exits 1 if a target is
missed. Informational rows: all 64 windows pipelined, a 1 MiB file read in one window, all 10 find
pages, and `openssl dgst -sha256` of the big file (the hash the first window of it computes: the
contract's version is the whole file's SHA-256; later windows of the unchanged file come from the
version cache, which hashes only the blocks under the window; see docs/file-tools.md).

Sequential calls measure what one client waiting for each answer sees. The pipelined row sends
all 64 requests before reading any reply; file work runs on the executor's four threads, so
it measures throughput without the client's turn-around, with some parallelism.

Run: /usr/bin/python3 bench/files.py [--bin build/release/src/main/codespace-mcp] [--dir PARENT]
     [--keep]
(creating 100,000 files takes from seconds on tmpfs to a minute on a slow VM disk; --dir picks
the file system, both sides always run on the same one)
Standard library only; needs cat, find, sort and openssl on PATH. Not a test: timings are not
asserted in CI.
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MIB = 1024 * 1024
BIG = 64 * MIB
WINDOW = MIB
TREE_TOP, TREE_SUB, TREE_FILES = 100, 10, 100  # 100,000 files
TARGETS = {"read 1 KiB": 3.0, "read 1 MiB window": 3.0, "find 100k": 2.0}
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rows import Rows  # noqa: E402


def build(root, tree):
    """small.txt (1 KiB), mid.txt (1 MiB), big.txt (64 MiB) under root; the tree under tree."""
    os.makedirs(root)
    line = b"The quick brown fox jumps over the lazy dog 0123456789 ABCDEFGHIJKLMNOP.\n"
    with open(os.path.join(root, "small.txt"), "wb") as f:
        f.write((line * 20)[:1024])
    chunk = line * (MIB // len(line) + 1)
    with open(os.path.join(root, "mid.txt"), "wb") as f:
        f.write(chunk[:MIB])
    with open(os.path.join(root, "big.txt"), "wb") as f:
        for _ in range(BIG // MIB):
            f.write(chunk[:MIB])
    for a in range(TREE_TOP):
        for b in range(TREE_SUB):
            d = os.path.join(tree, "d%03d" % a, "s%02d" % b)
            os.makedirs(d)
            for c in range(TREE_FILES):
                open(os.path.join(d, "file%03d.txt" % c), "wb").close()


class Server:
    def __init__(self, binary, root, registry, state):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env["XDG_STATE_HOME"] = state
        env["CODESPACE_OPERATIONS_DB"] = ":memory:"
        self.proc = subprocess.Popen([binary, "--workspace", root, "--config", registry,
                                      "--log-level", "error"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.next_id = 1
        self.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "1"}})
        self.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    def write(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def encode(self, method, params):
        rid = self.next_id
        self.next_id += 1
        return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                           "params": params}).encode() + b"\n"

    def rpc(self, method, params):
        self.write(self.encode(method, params))
        return json.loads(self.proc.stdout.readline())

    def tool_raw(self, name, args):
        """One call; returns the raw reply line (parsed later, outside the timing)."""
        self.write(self.encode("tools/call", {"name": name, "arguments": args}))
        return self.proc.stdout.readline()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(30)


def result(line):
    msg = json.loads(line)
    res = msg["result"]
    if res.get("isError"):
        raise SystemExit("bench: tool error: " + res["content"][0]["text"])
    return res["structuredContent"]


def timed(fn, runs):
    """Median wall time of fn() over runs calls, in seconds."""
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def run_cmd(argv, shell=False):
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, shell=shell)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get(
        "CODESPACE_MCP_BIN", os.path.join(REPO, "build/release/src/main/codespace-mcp")))
    ap.add_argument("--keep", action="store_true", help="keep the generated data")
    ap.add_argument("--dir", default=None, help="parent directory of the generated data")
    ap.add_argument("--runs", type=int, default=7, help="runs of each find/cat measurement")
    ap.add_argument("--json", default=None, help="also write the table rows to FILE (run.py)")
    opts = ap.parse_args()
    if not os.access(opts.bin, os.X_OK):
        raise SystemExit("bench: %s is not executable (build the release preset first)" % opts.bin)

    tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-bench-files-", dir=opts.dir))
    root = os.path.join(tmp, "ws")
    tree = os.path.join(tmp, "tree")
    try:
        t = time.perf_counter()
        build(root, tree)
        print("data: 1 KiB file, 64 MiB file, %d files in %d directories (built in %.1f s)"
              % (TREE_TOP * TREE_SUB * TREE_FILES, TREE_TOP * TREE_SUB + TREE_TOP + 1,
                 time.perf_counter() - t))
        registry = os.path.join(tmp, "registry.json")
        with open(registry, "w") as f:
            json.dump({"workspaces": {"tree": {"root": tree}}}, f)
        srv = Server(opts.bin, root, registry, tmp)
        rows = measure(srv, root, tree, opts.runs)
        srv.close()
    finally:
        if not opts.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("data kept in", tmp)
    return report(rows, opts.json)


def measure(srv, root, tree, runs):
    rows = []
    big = os.path.join(root, "big.txt")
    small = os.path.join(root, "small.txt")
    with open(big, "rb") as f:
        big_version = "sha256:" + hashlib.sha256(f.read()).hexdigest()

    # Warm-up: every file and directory in the page cache, both sides.
    run_cmd(["cat", big, small])
    run_cmd("find %s -type f | LC_ALL=C sort" % tree, shell=True)
    result(srv.tool_raw("read", {"workspace_id": "default", "path": "big.txt"}))
    result(srv.tool_raw("find", {"workspace_id": "tree"}))

    # read 1 KiB
    out = result(srv.tool_raw("read", {"workspace_id": "default", "path": "small.txt"}))
    assert out["byte_count"] == 1024 and not out["truncated"], out
    ours = timed(lambda: srv.tool_raw("read", {"workspace_id": "default",
                                               "path": "small.txt"}), 300)
    base = timed(lambda: run_cmd(["cat", small]), 50)
    rows.append(("read 1 KiB", ours, base, "cat small.txt"))

    # read 1 MiB windows over the 64 MiB file, sequential
    times, lines = [], []
    for _ in range(2):
        off = 0
        while True:
            args = {"workspace_id": "default", "path": "big.txt", "offset": off,
                    "limit": WINDOW}
            t = time.perf_counter()
            line = srv.tool_raw("read", args)
            times.append(time.perf_counter() - t)
            lines.append(line)
            out = result(line)
            if not out["truncated"]:
                break
            off = out["next_offset"]
    assert len(lines) == 2 * BIG // WINDOW, len(lines)
    for line in lines:
        out = result(line)
        assert out["version"] == big_version and out["byte_count"] == WINDOW, out["byte_count"]
    ours = statistics.median(times)
    base = timed(lambda: run_cmd(["cat", big]), runs * 3)
    rows.append(("read 1 MiB window", ours, base, "cat big.txt (64 MiB)"))
    sha = timed(lambda: run_cmd(["openssl", "dgst", "-sha256", big]), runs)
    rows.append(("  (info) same window", ours, sha, "openssl dgst -sha256 big.txt"))

    # a 1 MiB file in one window: the cost of a window without the big file's hash
    mid = os.path.join(root, "mid.txt")
    mid_args = {"workspace_id": "default", "path": "mid.txt"}
    assert result(srv.tool_raw("read", mid_args))["byte_count"] == MIB
    ours = timed(lambda: srv.tool_raw("read", mid_args), 30)
    rows.append(("  (info) read 1 MiB file, one window", ours,
                 timed(lambda: run_cmd(["cat", mid]), runs * 3), "cat mid.txt (1 MiB)"))

    # the same 64 windows pipelined: all requests first, then the replies
    reqs = b"".join(srv.encode("tools/call", {"name": "read", "arguments": {
        "workspace_id": "default", "path": "big.txt", "offset": k * WINDOW,
        "limit": WINDOW}}) for k in range(BIG // WINDOW))
    t = time.perf_counter()
    srv.write(reqs)
    got = [srv.proc.stdout.readline() for _ in range(BIG // WINDOW)]
    whole = time.perf_counter() - t
    assert all(result(g)["version"] == big_version for g in got)
    rows.append(("  (info) 64 MiB in 64 windows, pipelined", whole, base,
                 "cat big.txt (64 MiB)"))

    # find: one call (first page) and all pages
    find_args = {"workspace_id": "tree"}
    first = result(srv.tool_raw("find", find_args))
    assert not first["incomplete"] and first["truncated"], first["incomplete"]
    ours = timed(lambda: srv.tool_raw("find", find_args), runs)
    cmd = "cd %s && find . -type f | LC_ALL=C sort" % tree
    base = timed(lambda: run_cmd(cmd, shell=True), runs)
    rows.append(("find 100k", ours, base, "find -type f | LC_ALL=C sort"))

    def all_pages():
        paths, off = [], 0
        while True:
            page = result(srv.tool_raw("find", dict(find_args, offset=off)))
            paths += page["paths"]
            if not page["truncated"]:
                return paths
            off = page["next_offset"]
    t = time.perf_counter()
    paths = all_pages()
    pages = time.perf_counter() - t
    want = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, check=True).stdout
    want = [p[2:] for p in want.decode().splitlines()]  # strip "./"
    assert paths == want, "find and GNU find disagree"
    rows.append(("  (info) find 100k, all 10 pages", pages, base,
                 "find -type f | LC_ALL=C sort"))
    return rows


def report(rows, json_path=None):
    print("%-42s %12s %12s %8s %8s  %s" % ("measure", "ours (ms)", "base (ms)", "ratio",
                                           "target", "baseline"))
    missed = []
    out = Rows()
    for name, ours, base, what in rows:
        ratio = ours / base
        target = TARGETS.get(name)
        verdict = ""
        if target is not None:
            verdict = "ok" if ratio <= target else "MISSED"
            if ratio > target:
                missed.append(name)
        print("%-42s %12.3f %12.3f %7.2fx %8s  %s %s" % (
            name, ours * 1e3, base * 1e3, ratio, "%.0fx" % target if target else "-", what,
            verdict))
        out.add("%s (vs %s)" % (name.replace("(info) ", ""), what), ours * 1e3, base * 1e3,
                "ms", ratio, "<= %.0fx" % target if target else "context",
                target is not None and ratio <= target)
    out.write(json_path)
    if missed:
        print("targets missed: " + ", ".join(missed))
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
