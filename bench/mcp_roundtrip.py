#!/usr/bin/python3
"""MCP round trips and idle memory: codespace-mcp against @modelcontextprotocol/server-filesystem.

Both servers are measured in the same run, by the same client (this script: raw JSON-RPC over
pipes for stdio, raw keep-alive HTTP/1.1 over one socket for Streamable HTTP), on the same kind
of call: a cheap read-only tool, called sequentially (one request in flight).

  ours:   codespace-mcp, tools/call workspace_info {"workspace_id": "default"}
  theirs: server-filesystem (run by Node), tools/call list_allowed_directories {}

For each server and transport: start a fresh server, initialize, let it settle, read its idle
RSS (VmRSS of the process and all its descendants, from /proc), then WARMUP calls, then N timed
calls. That is repeated RUNS times and the median is reported. server-filesystem speaks stdio
only, so the HTTP row is ours alone.

Targets (exit status 1 when missed): ours >= 10x their calls/s over stdio, and ours < 1/10 of
their idle RSS.

Run (release build; a sanitizer build measures the sanitizer):
    cmake --preset release && cmake --build --preset release -j2
    /usr/bin/python3 bench/mcp_roundtrip.py [--calls N] [--runs R] [--bin PATH]
Needs node and npm on PATH and the npm registry once: server-filesystem is installed (pinned)
into build/npm-cache/ ($CS_NPM_CACHE_DIR), which git ignores.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

FILESYSTEM_PKG = "@modelcontextprotocol/server-filesystem"
FILESYSTEM_VERSION = "2026.8.31"
TARGET_SPEEDUP = 10.0
TARGET_MEMORY = 0.10
PROTOCOL = "2025-11-25"

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from logproc import LogProc  # noqa: E402
from rows import Rows  # noqa: E402


# ---- installing the peer -------------------------------------------------------------------


def install_filesystem(cache_root):
    """Installs the pinned server-filesystem once; returns the path of its entry script."""
    cache = os.path.join(cache_root, "bench-server-filesystem-" + FILESYSTEM_VERSION)
    entry = os.path.join(cache, "node_modules", FILESYSTEM_PKG, "dist", "index.js")
    if os.path.isfile(entry):
        return entry
    for tool in ("node", "npm"):
        if not shutil.which(tool):
            sys.exit("mcp_roundtrip: %s is not on PATH (scripts/bootstrap.sh installs it)" % tool)
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, "package.json"), "w") as f:
        json.dump({"name": "codespace-bench-cache", "private": True,
                   "description": "Installed by bench/mcp_roundtrip.py; safe to delete.",
                   "dependencies": {FILESYSTEM_PKG: FILESYSTEM_VERSION}}, f, indent=2)
    print("installing %s@%s into %s" % (FILESYSTEM_PKG, FILESYSTEM_VERSION, cache), flush=True)
    p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=cache, capture_output=True, text=True)
    if p.returncode != 0 or not os.path.isfile(entry):
        sys.exit("mcp_roundtrip: npm install failed (is the npm registry reachable?)\n"
                 + p.stdout + p.stderr)
    return entry


# ---- memory --------------------------------------------------------------------------------


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, task)) as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def rss_kib(pid):
    """VmRSS of pid and every descendant, in KiB."""
    total = 0
    for p in descendants(pid):
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


# ---- clients -------------------------------------------------------------------------------


def unprivileged(argv, *paths):
    """argv for a server measured without its sandbox (the runner's own cost). A root server runs
    no command unsandboxed (sandbox.md section 3: that would be host root), so as root the paths
    (the bench's work tree) are given to nobody and the server runs as nobody through setpriv;
    otherwise argv is returned as it is."""
    if os.geteuid() != 0:
        return argv
    for top in paths:
        for dirpath, _, files in os.walk(top):
            os.chown(dirpath, 65534, 65534)
            for n in files:
                os.lchown(os.path.join(dirpath, n), 65534, 65534)
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] + list(argv)


def request(rid, method, params):
    return (json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
                       separators=(",", ":")) + "\n").encode()


class StdioPeer:
    """A server on pipes; one request in flight; replies found by their id."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.rfd = self.proc.stdout.fileno()
        self.wfd = self.proc.stdin.fileno()
        self.buf = b""

    def roundtrip(self, data, rid):
        os.write(self.wfd, data)
        tag = b'"id":%d' % rid
        while True:
            nl = self.buf.find(b"\n")
            if nl < 0:
                # A line over several reads is gathered in a list and joined once, each read
                # searched alone: appending to one bytes object and searching it from the
                # start after every read copied and scanned a 13.6 MB reply ~200 times over
                # (0.3 s of this client's time in the drain row; issue 33).
                parts = [self.buf]
                while nl < 0:
                    chunk = os.read(self.rfd, 1 << 16)
                    if not chunk:
                        raise RuntimeError("server closed stdout")
                    parts.append(chunk)
                    nl = chunk.find(b"\n")
                nl += sum(len(p) for p in parts) - len(chunk)
                self.buf = b"".join(parts)
            line, self.buf = self.buf[:nl], self.buf[nl + 1:]
            if tag in line:
                return line

    def initialize(self):
        reply = json.loads(self.roundtrip(request(0, "initialize", {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "codespace-bench", "version": "1"}}), 0))
        if "result" not in reply:
            raise RuntimeError("initialize failed: %r" % reply)
        os.write(self.wfd, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def parse_head(head):
    """An HTTP/1.1 response head (bytes, without the blank line) as (status, {lower-case name:
    value})."""
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), hdrs


class HttpPeer(LogProc):
    """codespace-mcp --http --port 0; one keep-alive connection, raw HTTP/1.1."""

    def __init__(self, argv, env):
        super().__init__(argv + ["--http", "--port", "0"], env, "listening",
                         "the HTTP server (log level info?)")
        self.sock = None
        self.buf = b""
        self.session = None

    def _connect(self):
        self.sock = socket.create_connection(("127.0.0.1", self.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def roundtrip(self, body, rid=None):
        if self.sock is None:
            self._connect()
        head = ["POST /mcp HTTP/1.1", "Host: 127.0.0.1:%d" % self.port,
                "Content-Type: application/json", "Accept: application/json, text/event-stream",
                "Content-Length: %d" % len(body)]
        if self.session:
            head += ["Mcp-Session-Id: " + self.session, "MCP-Protocol-Version: " + PROTOCOL]
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk
        header, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status, hdrs = parse_head(header)
        n = int(hdrs.get("content-length", "0"))
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        if hdrs.get("connection", "").lower() == "close":
            self.sock.close()
            self.sock = None
        return status, hdrs, data

    def initialize(self):
        status, hdrs, data = self.roundtrip(request(0, "initialize", {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "codespace-bench", "version": "1"}}).rstrip(b"\n"))
        if status != 200 or "mcp-session-id" not in hdrs:
            raise RuntimeError("initialize failed: %d %r" % (status, data))
        self.session = hdrs["mcp-session-id"]
        status, _, _ = self.roundtrip(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        if status != 202:
            raise RuntimeError("notifications/initialized: HTTP %d" % status)

    def close(self):
        if self.sock:
            self.sock.close()
        self.stop()


# ---- measuring -----------------------------------------------------------------------------


def check_reply(raw, server):
    reply = json.loads(raw)
    result = reply.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        raise RuntimeError("%s: the benchmark call failed: %r" % (server, reply))


def measure(make_peer, method, params, calls, warmup, settle, server, http):
    """One run: (idle RSS KiB, calls per second)."""
    peer = make_peer()
    try:
        peer.initialize()
        time.sleep(settle)
        rss = rss_kib(peer.proc.pid)
        reqs = [request(i, method, params) for i in range(1, warmup + calls + 1)]
        if http:
            reqs = [r.rstrip(b"\n") for r in reqs]

            def one(i):
                status, _, data = peer.roundtrip(reqs[i])
                if status != 200:
                    raise RuntimeError("%s: HTTP %d" % (server, status))
                return data
        else:
            def one(i):
                return peer.roundtrip(reqs[i], i + 1)
        check_reply(one(0), server)
        for i in range(1, warmup):
            one(i)
        start = time.perf_counter()
        for i in range(warmup, warmup + calls):
            one(i)
        elapsed = time.perf_counter() - start
        return rss, calls / elapsed
    finally:
        peer.close()


class Row:
    def __init__(self, server, transport, label, make_peer, method, params, http, target):
        self.server, self.transport, self.label = server, transport, label
        self.make_peer, self.method, self.params, self.http = make_peer, method, params, http
        self.target = target  # one of the two rows the targets compare
        self.rss, self.cps = [], []

    def run(self, common):
        rss, cps = measure(self.make_peer, self.method, self.params, server=self.server,
                           http=self.http, **common)
        self.rss.append(rss)
        self.cps.append(cps)

    @property
    def median_cps(self):
        return statistics.median(self.cps)

    @property
    def median_rss(self):
        return statistics.median(self.rss)


def c_client_rows(work, ours_argv, theirs_argv, env, a):
    """Sequential and pipelined calls/s from the C client, ours and theirs; {} without cc."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return {}
    client = os.path.join(work, "mcp_client")
    subprocess.run([cc, "-O2", "-D_GNU_SOURCE", "-o", client,
                    os.path.join(HERE, "mcp_client.c")], check=True)
    ours_req = ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":'
                '"workspace_info","arguments":{"workspace_id":"default"}}}')
    theirs_req = ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":'
                  '"list_allowed_directories","arguments":{}}}')
    rows = {}
    for label, window in (("stdio tools/call, sequential", 1),
                          ("stdio tools/call, 64 in flight", 64)):
        got = []
        for argv, req in ((ours_argv, ours_req), (theirs_argv, theirs_req)):
            runs = []
            for _ in range(a.runs):
                e = dict(env, MCP_CLIENT_WINDOW=str(window))
                out = subprocess.run([client, "stdio", str(a.calls * 4), str(a.warmup), req,
                                      "--"] + argv, env=e, capture_output=True, text=True,
                                     timeout=300)
                if out.returncode != 0:
                    raise RuntimeError("mcp_client failed: %s" % out.stderr.strip())
                runs.append(float(out.stdout.split()[-1]))
            got.append(statistics.median(runs))
        rows[label] = tuple(got)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get(
        "CODESPACE_MCP_BIN", os.path.join(REPO, "build", "release", "src", "main",
                                          "codespace-mcp")))
    ap.add_argument("--calls", type=int, default=5000, help="timed calls per run (default 5000)")
    ap.add_argument("--warmup", type=int, default=500, help="untimed calls first (default 500)")
    ap.add_argument("--runs", type=int, default=3, help="runs; the median is reported")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds between initialize and the RSS reading (default 1)")
    ap.add_argument("--cache", default=os.environ.get(
        "CS_NPM_CACHE_DIR", os.path.join(REPO, "build", "npm-cache")))
    ap.add_argument("--json", default=None, help="also write the table rows to FILE (run.py)")
    a = ap.parse_args()

    if not os.access(a.bin, os.X_OK):
        sys.exit("mcp_roundtrip: no codespace-mcp at %s (build the release preset, or --bin)"
                 % a.bin)
    entry = install_filesystem(a.cache)
    node = shutil.which("node")
    ours_version = subprocess.run([a.bin, "--version"], capture_output=True,
                                  text=True).stdout.split()[-1]
    node_version = subprocess.run([node, "--version"], capture_output=True,
                                  text=True).stdout.strip()

    work = tempfile.mkdtemp(prefix="cs-bench-")
    try:
        root = os.path.join(work, "root")
        os.mkdir(root)
        with open(os.path.join(root, "hello.txt"), "w") as f:
            f.write("hello\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env["XDG_STATE_HOME"] = os.path.join(work, "state")
        os.mkdir(env["XDG_STATE_HOME"])
        ours_argv = [a.bin, "--workspace", root]  # default settings (log level info)
        theirs_argv = [node, entry, root]
        ours = "codespace-mcp %s" % ours_version
        theirs = "server-filesystem %s (node %s)" % (FILESYSTEM_VERSION, node_version)
        info = ("tools/call", {"name": "workspace_info", "arguments": {"workspace_id": "default"}})
        rows = [
            Row(ours, "stdio", "tools/call workspace_info", lambda: StdioPeer(ours_argv, env),
                *info, http=False, target="ours"),
            Row(ours, "http", "tools/call workspace_info", lambda: HttpPeer(ours_argv, env),
                *info, http=True, target=None),
            Row(theirs, "stdio", "tools/call list_allowed_directories",
                lambda: StdioPeer(theirs_argv, env), "tools/call",
                {"name": "list_allowed_directories", "arguments": {}}, http=False,
                target="theirs"),
            # Protocol overhead alone, for context (not judged).
            Row(ours, "stdio", "ping", lambda: StdioPeer(ours_argv, env), "ping", {},
                http=False, target=None),
            Row(theirs, "stdio", "ping", lambda: StdioPeer(theirs_argv, env), "ping", {},
                http=False, target=None),
        ]
        common = dict(calls=a.calls, warmup=a.warmup, settle=a.settle)
        print("%d timed sequential calls per run after %d warm-up; %d runs interleaved, median"
              % (a.calls, a.warmup, a.runs), flush=True)
        for run in range(a.runs):
            for row in rows:
                row.run(common)
            print("run %d/%d done" % (run + 1, a.runs), flush=True)
        c_rows = c_client_rows(work, ours_argv, theirs_argv, env, a)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print("%-46s %-6s %-36s %10s %10s  %s"
          % ("server", "transp", "call", "calls/s", "idle RSS", "calls/s per run"))
    for r in rows:
        print("%-46s %-6s %-36s %10.0f %6.1f MiB  %s"
              % (r.server, r.transport, r.label, r.median_cps, r.median_rss / 1024.0,
                 " ".join("%.0f" % c for c in r.cps)))
    print("%-46s %-6s %-36s %10s %10s" % ("server-filesystem", "http",
                                          "(stdio only: not measured)", "-", "-"))
    o = next(r for r in rows if r.target == "ours")
    t = next(r for r in rows if r.target == "theirs")
    speedup = o.median_cps / t.median_cps
    memory = o.median_rss / t.median_rss
    pings = [r for r in rows if r.method == "ping"]
    print()
    print("stdio tools/call calls/s, ours / theirs: %6.2fx  (target >= %.0fx)  %s"
          % (speedup, TARGET_SPEEDUP, "met" if speedup >= TARGET_SPEEDUP else "MISSED"))
    print("idle RSS, ours / theirs:                 %6.3f   (target < %.2f)  %s"
          % (memory, TARGET_MEMORY, "met" if memory < TARGET_MEMORY else "MISSED"))
    print("stdio ping calls/s, ours / theirs:       %6.2fx  (context, not judged)"
          % (pings[0].median_cps / pings[1].median_cps))
    out = Rows()
    out.add("stdio tools/call, sequential, python client (vs server-filesystem)", o.median_cps,
            t.median_cps, "/s", speedup, ">= %.0fx" % TARGET_SPEEDUP, speedup >= TARGET_SPEEDUP)
    out.add("idle RSS (vs server-filesystem)", o.median_rss / 1024.0, t.median_rss / 1024.0,
            "MiB", memory, "< %.2fx" % TARGET_MEMORY, memory < TARGET_MEMORY)
    out.add("  stdio ping, sequential (vs server-filesystem)", pings[0].median_cps,
            pings[1].median_cps, "/s", pings[0].median_cps / pings[1].median_cps)
    http = next(r for r in rows if r.transport == "http")
    out.add("  http tools/call, sequential (vs ours over stdio)", http.median_cps, o.median_cps,
            "/s", http.median_cps / o.median_cps)
    if c_rows:
        print()
        print("Context, not judged: the same calls from bench/mcp_client.c (a C client, so the "
              "client's own cost is a few us), median of %d runs:" % a.runs)
        for label, (mine, theirs_cps) in c_rows.items():
            print("  %-44s ours %8.0f  theirs %8.0f  ratio %5.2fx"
                  % (label, mine, theirs_cps, mine / theirs_cps))
            out.add("  %s, C client (vs server-filesystem)" % label, mine, theirs_cps, "/s",
                    mine / theirs_cps)
    out.write(a.json)
    return 0 if speedup >= TARGET_SPEEDUP and memory < TARGET_MEMORY else 1


if __name__ == "__main__":
    sys.exit(main())
