#!/usr/bin/python3
"""Many clients at once (issue 20): 16 HTTP clients against one codespace-mcp --http, each with a
workspace of its own, against the same work done by 16 parallel processes without us, same run.

Part 1, sandboxed spawns: each of the 16 clients (one process each: its own keep-alive socket, its
own MCP session) calls `exec_command {"command": ["true"], "yield_ms": 5000}` on its workspace in
a loop for SECONDS (every command goes through the Linux sandbox helper; the script checks state
exited, exit code 0). Meanwhile a 17th connection sends `ping` every 20 ms, and the script samples
the gateway's memory from /proc every 100 ms. Baseline: 16 processes each running
`bwrap --unshare-all --die-with-parent --ro-bind / / true` through subprocess.run in a loop for
the same time (as bench/sandbox.py does, 16 at once).
  Targets: total execs/s >= 0.8x bwrap's spawns/s; ping p99 < 5 ms; gateway RSS < 32 MB (the
  gateway process alone: VmHWM, its peak since start, read at the end of part 1; VmRSS of the
  gateway with every descendant, sampled, is printed as context).

Part 2, reads: each client pages through a 64 MiB text file of its own workspace (16 different
files) with `read` windows of 1 MiB (the largest `limit`), sequentially, all 16 at once; the
aggregate is 16 x 64 MiB over the wall time until the last client is done. Baseline: 16 parallel
`cat file >/dev/null` of the same files. ROUNDS rounds of each, interleaved, median. Target:
aggregate MB/s >= 0.5x cat's. The page cache is warm on both sides (the files are written just
before; --dir picks the file system, default $TMPDIR; /dev/shm is fine).

The clients speak raw HTTP/1.1 on keep-alive sockets and never parse a 1 MiB reply: they read
it into a preallocated buffer by its Content-Length and check its fields with byte searches, so
a Python client costs about as much as a small C one would per call. The client processes'
own CPU time is printed: on a 2-core machine they share the cores with the server and the
sandbox helpers (and, in the baselines, with bwrap and cat).

The gateway: `codespace-mcp --http --port 0 --token T --config <registry of 16 workspaces>`,
as root with codespace-linux-sandbox beside the binary and CODESPACE_REQUIRE_LINUX_SANDBOX=1
(the live cap is per workspace, 8 by default, and 1024 per runner: 16 clients in 16 workspaces
never meet it). The default runner (in-process).

Run (release build, as root: the sandbox needs it):
    apt-get install bubblewrap
    /usr/bin/python3 bench/concurrency.py [--seconds 20] [--rounds 3] [--dir /dev/shm]
                                          [--clients 16] [--bin PATH] [--json FILE]
Exits 1 when a target is missed. Not a test: timings are never asserted in CI.
"""
import argparse
import json
import multiprocessing
import os
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from logproc import LogProc  # noqa: E402
from mcp_roundtrip import descendants, parse_head  # noqa: E402
from rows import Rows, ratio, table  # noqa: E402

PROTOCOL = "2025-11-25"
MIB = 1024 * 1024
BIG = 64 * MIB
WINDOW = MIB
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"]
TARGET_EXEC = 0.8
TARGET_PING_MS = 5.0
TARGET_RSS_MB = 32.0
TARGET_READ = 0.5
PING_EVERY_S = 0.02
NCPU = os.cpu_count() or 1


# ---- a raw HTTP/1.1 MCP client ----------------------------------------------------------------


class Conn:
    """One keep-alive socket, one MCP session. A reply is read by its Content-Length into one
    preallocated buffer and never copied or parsed: has() searches it in place."""

    def __init__(self, port, token):
        self.port, self.token = port, token
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(4 * MIB)
        self.have = 0      # bytes received into buf
        self.consumed = 0  # bytes of buf that belong to the previous reply
        self.body = (0, 0)
        self.session = None
        self.rid = 0

    def _recv(self):
        if self.have == len(self.buf):
            grown = bytearray(2 * len(self.buf))
            grown[:self.have] = self.buf
            self.buf = grown
        with memoryview(self.buf) as v:
            got = self.sock.recv_into(v[self.have:])
        if not got:
            raise RuntimeError("the server closed the connection")
        self.have += got

    def post(self, body):
        """Sends one request; returns the HTTP status and headers (the body: has(), text())."""
        if self.consumed:
            rest = self.have - self.consumed
            self.buf[:rest] = self.buf[self.consumed:self.have]
            self.have, self.consumed = rest, 0
        head = ["POST /mcp HTTP/1.1", "Host: 127.0.0.1:%d" % self.port,
                "Authorization: Bearer " + self.token, "Content-Type: application/json",
                "Accept: application/json, text/event-stream", "Content-Length: %d" % len(body)]
        if self.session:
            head += ["Mcp-Session-Id: " + self.session, "MCP-Protocol-Version: " + PROTOCOL]
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        while True:
            end = self.buf.find(b"\r\n\r\n", 0, self.have)
            if end >= 0:
                break
            self._recv()
        status, hdrs = parse_head(bytes(self.buf[:end]))
        n = int(hdrs.get("content-length", "0"))
        start = end + 4
        while self.have < start + n:
            self._recv()
        self.body = (start, start + n)
        self.consumed = start + n
        return status, hdrs

    def has(self, pat):
        return self.buf.find(pat, *self.body) >= 0

    def has_tail(self, pat, n):
        """Whether pat is in the last n bytes of the body."""
        return self.buf.find(pat, max(self.body[0], self.body[1] - n), self.body[1]) >= 0

    def text(self, n=300):
        return bytes(self.buf[self.body[0]:min(self.body[1], self.body[0] + n)]).decode(
            errors="replace")

    def call(self, method, params):
        """One request; checks HTTP 200; returns the headers."""
        self.rid += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.rid, "method": method, "params": params},
                          separators=(",", ":")).encode()
        status, hdrs = self.post(body)
        if status != 200:
            raise RuntimeError("%s: HTTP %d %s" % (method, status, self.text()))
        return hdrs

    def initialize(self):
        hdrs = self.call("initialize", {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "codespace-bench-concurrency", "version": "1"}})
        self.session = hdrs.get("mcp-session-id")
        if not self.session:
            raise RuntimeError("initialize gave no session: %s" % self.text())
        status, _ = self.post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        if status != 202:
            raise RuntimeError("notifications/initialized: HTTP %d" % status)

    def close(self):
        self.sock.close()


# ---- the gateway ------------------------------------------------------------------------------


class Gateway(LogProc):
    def __init__(self, argv, env):
        super().__init__(argv, env, "listening", "the HTTP server", wait=15)

    def close(self):
        self.stop(timeout=10)


def status_kib(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(pid):
    """VmRSS of pid and every descendant."""
    return sum(status_kib(p, "VmRSS") for p in descendants(pid))


# ---- workers (one process each) ---------------------------------------------------------------


def cpu_s(who=resource.RUSAGE_SELF):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def exited0(c):
    return c.has(b'"state":"exited"') and (c.has(b'"exit_code":0,') or c.has(b'"exit_code":0}'))


def exec_worker(port, token, ws, seconds, barrier, out):
    """Loops exec_command true on ws until the deadline; puts (count, errors, latencies, cpu)."""
    try:
        c = Conn(port, token)
        c.initialize()
        params = {"name": "exec_command", "arguments": {"workspace_id": ws, "command": ["true"],
                                                        "yield_ms": 5000}}
        for _ in range(2):  # warm-up, and a check of the answer
            c.call("tools/call", params)
            if not exited0(c):
                raise RuntimeError("exec_command true on %s: %s" % (ws, c.text(500)))
        barrier.wait(60)
        cpu0 = cpu_s()
        deadline = time.monotonic() + seconds
        n, errors, lat, first_error = 0, 0, [], None
        while True:
            t = time.monotonic()
            if t >= deadline:
                break
            c.call("tools/call", params)
            done = time.monotonic()
            if done > deadline:
                break
            if exited0(c):
                n += 1
                lat.append(done - t)
            else:
                errors += 1
                first_error = first_error or c.text()
        out.put(("ok", n, errors, lat, cpu_s() - cpu0, first_error))
        c.close()
    except Exception as e:  # noqa: BLE001  (reported by the parent)
        barrier.abort()  # the others and the parent stop waiting at once
        out.put(("error", "%s: %s" % (ws, e)))


def bwrap_worker(seconds, barrier, out):
    try:
        subprocess.run(BWRAP, check=True)
        barrier.wait(60)
        cpu0 = cpu_s()
        deadline = time.monotonic() + seconds
        n, lat = 0, []
        while True:
            t = time.monotonic()
            if t >= deadline:
                break
            subprocess.run(BWRAP, check=True)
            done = time.monotonic()
            if done > deadline:
                break
            n += 1
            lat.append(done - t)
        out.put(("ok", n, 0, lat, cpu_s() - cpu0, None))
    except Exception as e:  # noqa: BLE001
        barrier.abort()  # the others and the parent stop waiting at once
        out.put(("error", "bwrap: %s" % e))


def ping_worker(port, token, stop, out):
    try:
        c = Conn(port, token)
        c.initialize()
        lat = []
        while not stop.is_set():
            t = time.monotonic()
            c.call("ping", {})
            lat.append(time.monotonic() - t)
            if not c.has(b'"result"'):
                raise RuntimeError("ping: %s" % c.text())
            time.sleep(PING_EVERY_S)
        out.put(("ok", lat))
        c.close()
    except Exception as e:  # noqa: BLE001
        out.put(("error", "ping: %s" % e))


def read_worker(port, token, ws, barrier, out):
    """Pages through big.txt of ws in 1 MiB windows; puts (finish time, cpu)."""
    try:
        c = Conn(port, token)
        c.initialize()
        barrier.wait(60)
        cpu0 = cpu_s()
        off, lat = 0, []
        while off < BIG:
            t = time.monotonic()
            c.call("tools/call", {"name": "read", "arguments": {
                "workspace_id": ws, "path": "big.txt", "offset": off, "limit": WINDOW}})
            # A full window's answer: its structuredContent ends with byte_count (an error has
            # none). Only the tail is searched: scanning 3 MB twice a call made the clients
            # a third of the machine's CPU, taken from the server they measure.
            if not c.has_tail(b'"byte_count":%d' % WINDOW, 512):
                raise RuntimeError("read %s at %d: %s" % (ws, off, c.text()))
            lat.append(time.monotonic() - t)
            off += WINDOW
        out.put(("ok", time.monotonic(), cpu_s() - cpu0, lat))
        c.close()
    except Exception as e:  # noqa: BLE001
        barrier.abort()  # the others and the parent stop waiting at once
        out.put(("error", "%s: %s" % (ws, e)))


def cat_worker(path, barrier, out):
    try:
        barrier.wait(60)
        cpu0 = cpu_s(resource.RUSAGE_CHILDREN)
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
        out.put(("ok", time.monotonic(), cpu_s(resource.RUSAGE_CHILDREN) - cpu0, []))
    except Exception as e:  # noqa: BLE001
        barrier.abort()  # the others and the parent stop waiting at once
        out.put(("error", "cat: %s" % e))


def gang(ctx, n, target, args):
    """Starts n worker processes (target(*args(i), barrier, out)) behind one barrier with the
    parent (a worker that fails breaks it); returns (start monotonic time, queue, processes)."""
    barrier = ctx.Barrier(n + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=tuple(args(i)) + (barrier, out), daemon=True)
             for i in range(n)]
    for p in procs:
        p.start()
    try:
        barrier.wait(120)
    except Exception:  # a worker failed before the barrier (it broke it): say why
        try:
            why = out.get(timeout=10)[1]
        except Exception:  # noqa: BLE001
            why = "no reason given (the barrier timed out)"
        for p in procs:
            p.kill()
        raise RuntimeError("a worker failed to start: %s" % why)
    t0 = time.monotonic()
    return t0, out, procs


def collect(out, procs, n, timeout):
    res = []
    for _ in range(n):
        r = out.get(timeout=timeout)
        if r[0] != "ok":
            for p in procs:
                p.kill()
            raise RuntimeError(r[1])
        res.append(r[1:])
    for p in procs:
        p.join(10)
    return res


def p99(xs):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]


# ---- the parts --------------------------------------------------------------------------------


def part_exec(ctx, a, gw, token, names):
    """{"ours": execs/s, "bwrap": spawns/s, ...}."""
    got = {}
    # bwrap: 16 processes looping subprocess.run; the 17th connection pings the idle gateway
    # meanwhile (what the machine's load alone does to a ping)
    stop = ctx.Event()
    pout = ctx.Queue()
    pinger = ctx.Process(target=ping_worker, args=(gw.port, token, stop, pout), daemon=True)
    pinger.start()
    t0, out, procs = gang(ctx, a.clients, bwrap_worker, lambda i: (a.seconds,))
    res = collect(out, procs, a.clients, a.seconds + 60)
    stop.set()
    pr = pout.get(timeout=30)
    pinger.join(10)
    if pr[0] != "ok":
        raise RuntimeError(pr[1])
    got["ping_bwrap"] = pr[1]
    got["bwrap"] = sum(r[0] for r in res) / a.seconds
    got["bwrap_lat"] = [x for r in res for x in r[2]]
    got["bwrap_cpu"] = sum(r[3] for r in res)

    # ours: 16 sessions looping exec_command, a 17th pinging, the sampler in this process
    stop = ctx.Event()
    pout = ctx.Queue()
    pinger = ctx.Process(target=ping_worker, args=(gw.port, token, stop, pout), daemon=True)
    pinger.start()
    samples = []
    t0, out, procs = gang(ctx, a.clients, exec_worker,
                          lambda i: (gw.port, token, names[i], a.seconds))
    end = t0 + a.seconds
    while time.monotonic() < end:
        samples.append((status_kib(gw.proc.pid, "VmRSS"), tree_rss_kib(gw.proc.pid)))
        time.sleep(0.1)
    res = collect(out, procs, a.clients, 120)
    stop.set()
    pr = pout.get(timeout=30)
    pinger.join(10)
    if pr[0] != "ok":
        raise RuntimeError(pr[1])
    got["ours"] = sum(r[0] for r in res) / a.seconds
    got["errors"] = sum(r[1] for r in res)
    got["first_error"] = next((r[4] for r in res if r[4]), None)
    got["ours_lat"] = [x for r in res for x in r[2]]
    got["ours_cpu"] = sum(r[3] for r in res)
    got["calls"] = sum(r[0] + r[1] for r in res)
    got["ping"] = pr[1]
    got["hwm"] = status_kib(gw.proc.pid, "VmHWM")
    got["rss_max"] = max(s[0] for s in samples) if samples else 0
    got["tree_max"] = max(s[1] for s in samples) if samples else 0
    return got


def build_floor(work):
    """Compiles bench/readfloor.c (with the project's escaper) into work; its path, or None
    without a C compiler or libcrypto's headers (said)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        print("  no C compiler: the floor (readfloor.c) is not measured")
        return None
    exe = os.path.join(work, "readfloor")
    base = os.path.join(REPO, "src", "base")
    r = subprocess.run([cc, "-O2", "-D_GNU_SOURCE", "-I", base, "-o", exe,
                        os.path.join(HERE, "readfloor.c"), os.path.join(base, "base_json.c"),
                        "-lcrypto", "-lpthread"], capture_output=True, text=True)
    if r.returncode != 0:
        print("  readfloor.c did not build: the floor is not measured\n" + r.stderr[-2000:])
        return None
    return exe


def floor_mbs(exe, files, hashed):
    """Aggregate MB/s of readfloor over files (one server and one client thread per file)."""
    argv = [exe] + (["--hash"] if hashed else []) + [str(WINDOW)] + files
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.split()
    return int(out[1]) / float(out[3]) / 1e6


def part_read(ctx, a, gw, token, names, files, floor_exe):
    ours, cat, ours_cpu, cat_cpu, walls, lat = [], [], [], [], [], []
    floor, floor_nohash = [], []
    total = a.clients * BIG
    for _ in range(a.rounds):
        t0, out, procs = gang(ctx, a.clients, read_worker, lambda i: (gw.port, token, names[i]))
        res = collect(out, procs, a.clients, 600)
        walls.append(max(r[0] for r in res) - t0)
        ours.append(total / walls[-1] / 1e6)
        ours_cpu.append(sum(r[1] for r in res))
        lat += [x for r in res for x in r[2]]
        t0, out, procs = gang(ctx, a.clients, cat_worker, lambda i: (files[i],))
        res = collect(out, procs, a.clients, 600)
        cat.append(total / (max(r[0] for r in res) - t0) / 1e6)
        cat_cpu.append(sum(r[1] for r in res))
        if floor_exe:
            floor.append(floor_mbs(floor_exe, files, True))
            floor_nohash.append(floor_mbs(floor_exe, files, False))
    return {"ours": ours, "cat": cat, "floor": floor, "floor_nohash": floor_nohash,
            "ours_cpu": statistics.median(ours_cpu),
            "cat_cpu": statistics.median(cat_cpu), "hwm": status_kib(gw.proc.pid, "VmHWM"),
            "wall": statistics.median(walls), "lat": lat}


def make_files(work, n):
    """n workspaces w00.. under work, each holding big.txt (64 MiB of text, different per file)."""
    names, files = [], []
    line = b"%02d the quick brown fox jumps over the lazy dog 0123456789 abcdefghijklmnop\n"
    for i in range(n):
        name = "w%02d" % i
        root = os.path.join(work, name)
        os.mkdir(root)
        block = (line % i) * (MIB // len(line % i) + 1)
        block = block[:MIB - 1] + b"\n"
        path = os.path.join(root, "big.txt")
        with open(path, "wb") as f:
            for _ in range(BIG // MIB):
                f.write(block)
        names.append(name)
        files.append(path)
    return names, files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get(
        "CODESPACE_MCP_BIN", os.path.join(REPO, "build", "release", "src", "main",
                                          "codespace-mcp")))
    ap.add_argument("--seconds", type=float, default=20.0,
                    help="duration of each side of part 1 (default 20)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of part 2 per side (default 3)")
    ap.add_argument("--clients", type=int, default=16, help="clients at once (default 16)")
    ap.add_argument("--dir", default=None, help="parent of the generated data (default $TMPDIR)")
    ap.add_argument("--parts", default="exec,read", help="exec, read or both (default both)")
    ap.add_argument("--json", default=None, help="also write the table rows to FILE (run.py)")
    a = ap.parse_args()
    parts = [p for p in ("exec", "read") if p in a.parts.split(",")]
    if not parts:
        sys.exit("concurrency: --parts takes exec, read or both")
    if not os.access(a.bin, os.X_OK):
        sys.exit("concurrency: no codespace-mcp at %s (build the release preset, or --bin)" % a.bin)
    helper = os.path.join(os.path.dirname(a.bin), "codespace-linux-sandbox")
    if "exec" in parts:
        if not os.access(helper, os.X_OK):
            sys.exit("concurrency: no codespace-linux-sandbox beside %s" % a.bin)
        if shutil.which("bwrap") is None:
            sys.exit("concurrency: bwrap is missing (apt-get install bubblewrap): it is the "
                     "baseline of part 1")
        if os.geteuid() != 0:
            sys.exit("concurrency: part 1 runs the sandbox as root (as CI does); run as root or "
                     "--parts read")
    version = subprocess.run([a.bin, "--version"], capture_output=True,
                             text=True).stdout.split()[-1]
    ctx = multiprocessing.get_context("fork")
    work = tempfile.mkdtemp(prefix="cs-bench-conc-", dir=a.dir)
    gw = None
    rows = Rows()
    ok = True
    try:
        os.chmod(work, 0o755)
        print("writing %d x 64 MiB under %s" % (a.clients, work), flush=True)
        names, files = make_files(work, a.clients)
        written = time.time()
        reg = os.path.join(work, "registry.json")
        with open(reg, "w") as f:
            json.dump({"workspaces": {n: {"root": os.path.join(work, n),
                                          "profile": "workspace-write"} for n in names}}, f)
        state = os.path.join(work, "state")
        os.mkdir(state)
        token = secrets.token_hex(16)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env.update(XDG_STATE_HOME=state, CODESPACE_REQUIRE_LINUX_SANDBOX="1")
        gw = Gateway([a.bin, "--http", "--port", "0", "--token", token, "--config", reg,
                      "--operations-db", ":memory:", "--log-level", "info"], env)
        print("codespace-mcp %s --http on port %d, %d clients" % (version, gw.port, a.clients),
              flush=True)
        if "exec" in parts:
            print("part 1: exec_command [\"true\"] sandboxed, %d clients, %.0f s; then bwrap"
                  % (a.clients, a.seconds), flush=True)
            e = part_exec(ctx, a, gw, token, names)
            if e["errors"]:
                print("  %d of %d calls did not answer exited/0; the first: %s"
                      % (e["errors"], e["calls"], e["first_error"]))
            r = ratio(e["ours"], e["bwrap"])
            met = r >= TARGET_EXEC
            ok = ok and met
            rows.add("%d clients: sandboxed exec_command true, total per s (vs %d-way bwrap)"
                     % (a.clients, a.clients), e["ours"], e["bwrap"], "/s", r,
                     ">= %.1fx" % TARGET_EXEC, met)
            pp = p99(e["ping"]) * 1e3
            pb = p99(e["ping_bwrap"]) * 1e3
            met = pp < TARGET_PING_MS
            ok = ok and met
            rows.add("  ping p99, 17th connection (vs idle gateway during the bwrap run)",
                     pp, pb, "ms", pp / pb, "< %.0f ms" % TARGET_PING_MS, met)
            rows.add("  ping median, the same", statistics.median(e["ping"]) * 1e3,
                     statistics.median(e["ping_bwrap"]) * 1e3, "ms")
            hwm = e["hwm"] / 1024.0
            met = hwm < TARGET_RSS_MB
            ok = ok and met
            rows.add("  gateway peak RSS (VmHWM, the process alone)", hwm, None, "MiB", None,
                     "< %.0f MB" % TARGET_RSS_MB, met)
            rows.add("  gateway with descendants, VmRSS sampled, max", e["tree_max"] / 1024.0,
                     None, "MiB")
            rows.add("  exec round trip median (vs one bwrap spawn)",
                     statistics.median(e["ours_lat"]) * 1e3,
                     statistics.median(e["bwrap_lat"]) * 1e3, "ms",
                     ratio(statistics.median(e["ours_lat"]), statistics.median(e["bwrap_lat"])))
            rows.add("  the clients' CPU, share of the machine's (vs the bwrap drivers')",
                     100.0 * e["ours_cpu"] / (NCPU * a.seconds),
                     100.0 * e["bwrap_cpu"] / (NCPU * a.seconds), "%")
        if "read" in parts:
            print("part 2: %d clients paging read through 64 MiB each; %d rounds against cat"
                  % (a.clients, a.rounds), flush=True)
            # A file changed in the last 2.1 s is hashed whole on every window (the version
            # cache's ctime rule, docs/file-tools.md): start once the files are older.
            time.sleep(max(0.0, written + 2.5 - time.time()))
            rd = part_read(ctx, a, gw, token, names, files, build_floor(work))
            o, c = statistics.median(rd["ours"]), statistics.median(rd["cat"])
            met = o / c >= TARGET_READ
            ok = ok and met
            rows.add("%d clients: read 1 MiB windows of 16 x 64 MiB, aggregate (vs %d cat)"
                     % (a.clients, a.clients), o, c, "MB/s", o / c, ">= %.1fx" % TARGET_READ,
                     met)
            if rd["floor"]:
                f, fn = statistics.median(rd["floor"]), statistics.median(rd["floor_nohash"])
                rows.add("  floor: the window hashed, quoted twice, sent over TCP; no MCP "
                         "(readfloor.c, vs %d cat)" % a.clients, f, c, "MB/s", f / c)
                rows.add("  the same floor without the hash (vs %d cat)" % a.clients, fn, c,
                         "MB/s", fn / c)
                rows.add("  ours (vs the floor)", o, f, "MB/s", o / f)
            rows.add("  the clients' CPU, share of the machine's (vs the cat processes')",
                     100.0 * rd["ours_cpu"] / (NCPU * rd["wall"]),
                     100.0 * rd["cat_cpu"] / (NCPU * a.clients * BIG / c / 1e6), "%")
            rows.add("  read window round trip, median (p90 as baseline column)",
                     statistics.median(rd["lat"]) * 1e3,
                     sorted(rd["lat"])[int(0.9 * (len(rd["lat"]) - 1))] * 1e3, "ms")
            rows.add("  gateway peak RSS (VmHWM) after part 2", rd["hwm"] / 1024.0, None, "MiB")
            print("  rounds, MB/s: ours %s; cat %s; floor %s (without the hash %s)"
                  % (" ".join("%.0f" % x for x in rd["ours"]),
                     " ".join("%.0f" % x for x in rd["cat"]),
                     " ".join("%.0f" % x for x in rd["floor"]),
                     " ".join("%.0f" % x for x in rd["floor_nohash"])))
    finally:
        if gw:
            gw.close()
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(table(rows.rows))
    rows.write(a.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
