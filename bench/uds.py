#!/usr/bin/python3
"""The runner hop's cost per call: the same tools through `--runner uds` (the gateway talks to
codespace-runtime over a private Unix socket, runtime.md section 4), through `--runner tcp://`
(a `codespace-runtime --listen 127.0.0.1:PORT` worker, TLS 1.3 with pinned certificates made
here by openssl, docs/scale-out.md) and through the in-process runner: three servers in one run.

Calls (sequential, one in flight, stdio transport, this script as the client speaking raw
JSON-RPC over pipes):
  read:  tools/call read {"workspace_id": "default", "path": "small.txt"} (a 1 KiB file)
  exec:  tools/call exec_command {"command": ["true"], "yield_ms": 5000} (answers once `true`
         was reaped and its output collected; the script checks state exited, exit code 0)
  read-after-spawn: the read call again, but before each one (untimed) this script spawns
         /bin/true and waits for it: no spawn on our path, the same spawn as exec's nearby
  read-after-idle: the read call again, but before each one (untimed) this script sleeps
         IDLE_MS: no spawn anywhere, only the pause a spawn makes (on this project's 2-core
         guests /bin/true's start and reap take 1.5-2 ms), longer than the servers' polling
         window (200 µs): what the first call after a pause pays, as an agent's calls do
RUNS calls per server and tool after WARMUP untimed ones, interleaved across the servers in
blocks of RUNS/10, so all see the same machine. Reported: median, p99 and mean of each.

The client's own cost (Python, pipes, JSON-RPC) is the same on every row and cancels out in the
difference; what remains is the extra hop: encode the wire request, frame it, write it to the
socket, the worker's loop wake-up, decode, and the same back. The machine's floor for that hop is
measured in the same run between the blocks: bench/pingpong.c (built with cc), two processes
bouncing one byte over a socketpair, each waiting in epoll_wait, as the gateway and the worker
do; no code of ours runs in it. Beside it, as context, the hop's own shape on one CPU: pingpong's
`chain` (three processes on CPU 0, the byte going out and back through the middle one, as a uds
call goes client -> gateway -> worker and back) minus its `same` (two, as an in-process call):
what the hop costs with the servers on one CPU before any code of ours, and the hop over it.

Target (issue 20): the uds overhead (uds median - in-process median) at most 40 µs above the
ping-pong median, for read and for exec. Under each judged hop the script prints its 95 % interval
(each row's calls resampled with replacement, a fixed seed) and whether the verdict holds
whatever the sample: exec's spawns spread over milliseconds, and on a loaded host 1,000 calls
may not decide a 40 µs bound on the difference of two medians (issue 33). The verdict itself is
the medians', as before.

The floor has no process start in it; exec's hop does, and on some hosts (issue 33: a PVM guest,
both servers on one CPU) every process that runs after a fork and exit on a CPU finds its code
gone from the caches and pays tens of µs to fetch it again. The uds row runs two processes after
exec's spawn where in-process runs one. read-after-spawn measures that cost in the same run,
outside our path: its hop minus read's is what a nearby spawn adds to a hop that has none of its
own, and exec's hop net of it is printed as context. read-after-idle separates the pause from
the spawn: on the host of issue 33 a 1.6 ms sleep costs the unpinned hop as much as a spawn
does (bench/README.md, "a pause, not a spawn"), so most of that cost is waking servers that
went to sleep, which every call made seconds apart pays. The target stays judged against the bare
floor. The floor is judged with one process on each CPU (the
issue's 50 µs); both on one CPU is printed as context (a wake-up that hands the CPU over costs a
few µs, which the scheduler does not give the gateway and worker reliably). The tcp rows are context (issue 21: the TCP hop's cost
against uds and in-process; docs/scale-out.md). The script exits 1 when the target is missed (it
is never a CTest: timings on a shared 2-core machine are not a pass/fail unit test).

Run (release build; a sanitizer build measures the sanitizer):
    cmake --preset release && cmake --build --preset release -j2
    /usr/bin/python3 bench/uds.py [--runs N] [--warmup W] [--tools read,exec,...]
                                  [--runners in-process,uds,tcp] [--bin PATH] [--json FILE]
Needs cc (the floor) and, for the tcp row, openssl (without it the row is skipped, and said so).
"""
import argparse
import hashlib
import json
import ssl
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from logproc import LogProc  # noqa: E402
from mcp_roundtrip import StdioPeer, request, unprivileged  # noqa: E402  (shared stdio client)
from rows import Rows, table  # noqa: E402

TARGET_ABOVE_FLOOR_US = 40.0
RUNNERS = ("in-process", "uds", "tcp")
TOOLS = ("read", "exec", "read-after-spawn", "read-after-idle")
IDLE_MS = 2.0  # read-after-idle's pause before each call


class Peer(StdioPeer):
    """StdioPeer with a running id and a tools/call helper that checks isError."""

    def __init__(self, argv, env, name):
        super().__init__(argv, env)
        self.rid = 0
        self.name = name
        self.initialize()

    def call(self, tool, args):
        self.rid += 1
        raw = self.roundtrip(request(self.rid, "tools/call",
                                     {"name": tool, "arguments": args}), self.rid)
        reply = json.loads(raw)
        res = reply.get("result")
        if not isinstance(res, dict) or res.get("isError"):
            raise RuntimeError("%s failed on the %s server: %r" % (tool, self.name, reply))
        return res["structuredContent"]


def read_fn(peer, size):
    args = {"workspace_id": "default", "path": "small.txt"}

    def one():
        out = peer.call("read", args)
        if len(out["content"]) != size:
            raise RuntimeError("read small.txt: %r" % out)
    return one


def exec_fn(peer):
    args = {"workspace_id": "default", "command": ["true"], "yield_ms": 5000}

    def one():
        out = peer.call("exec_command", args)
        if out.get("state") != "exited" or out.get("exit_code") != 0:
            raise RuntimeError("exec_command true: %r" % out)
    return one


def hop_interval(uds, inproc, rounds=1000):
    """The 95 % interval of median(uds) - median(inproc), by resampling each row's calls with
    replacement (a fixed seed: the same rows give the same interval). It says whether a verdict
    on the difference of two medians is decided by this many calls: exec's spawns spread over
    milliseconds, and the hop is judged to within 40 µs."""
    rng = random.Random(33)
    n, m = len(uds), len(inproc)
    got = sorted(statistics.median(rng.choices(uds, k=n)) -
                 statistics.median(rng.choices(inproc, k=m)) for _ in range(rounds))
    return got[int(0.025 * rounds)], got[int(0.975 * rounds) - 1]


def p99(xs):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]


def timed(fn, pre=None):
    if pre:
        pre()
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def idle():
    """Sleeps IDLE_MS: a pause before the call as long as a spawn's, with no process start
    (read-after-idle)."""
    time.sleep(IDLE_MS / 1000.0)


def spawn_true():
    """Starts /bin/true and reaps it: a process start and exit on this host, outside the servers'
    path (read-after-spawn)."""
    pid = os.posix_spawn("/bin/true", ["true"], {})
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError("/bin/true exited with status %d" % status)


def build_pingpong(work):
    """Compiles bench/pingpong.c into work; returns its path, or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    exe = os.path.join(work, "pingpong")
    subprocess.run([cc, "-O2", "-D_GNU_SOURCE", "-o", exe, os.path.join(HERE, "pingpong.c")],
                   check=True)
    return exe


# Where the floor's two processes run: one on each CPU (every wake-up crosses CPUs, as the issue's
# 50 µs floor did), or both on CPU 0. Unpinned, a 2-CPU VM flips between the two from run to
# run (3.5 µs or 55 µs here), which made the judged floor a coin toss.
PLACES = ("cross", "same") if (os.cpu_count() or 1) >= 2 else ("",)
# Context beside them: the floor of the hop's own shape on one CPU (pingpong.c `chain` - `same`).
SHAPE = ("chain",) if (os.cpu_count() or 1) >= 2 else ()


def pingpong(exe, n, place=""):
    """Median round trip of n bare ping-pongs, in µs, placed as place says (pingpong.c)."""
    out = subprocess.run([exe, str(n)] + ([place] if place else []), capture_output=True,
                         text=True, check=True).stdout
    return float(out.split()[0])


def runner_of(peer):
    info = peer.call("workspace_info", {"workspace_id": "default"})
    return info["execution"]["isolation"]["runner"]


def make_cert(work, name):
    """A self-signed P-256 certificate and key under work; returns (cert, key, SHA-256 pin of
    the DER certificate), as tests/e2e/test_remote.py makes them."""
    cert, key = os.path.join(work, name + ".pem"), os.path.join(work, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=" + name,
                    "-keyout", key, "-out", cert], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(cert, encoding="ascii") as f:
        der = ssl.PEM_cert_to_DER_cert(f.read())
    return cert, key, hashlib.sha256(der).hexdigest()


class Worker(LogProc):
    """codespace-runtime --listen 127.0.0.1:0; the port is read from its `runner listening` log
    line, and stderr keeps flowing."""

    def __init__(self, argv, env):
        super().__init__(argv, env, "runner listening", "codespace-runtime --listen")

    def close(self):
        self.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get(
        "CODESPACE_MCP_BIN", os.path.join(REPO, "build", "release", "src", "main",
                                          "codespace-mcp")))
    ap.add_argument("--runs", type=int, default=1000, help="timed calls per row (default 1000)")
    ap.add_argument("--warmup", type=int, default=50, help="untimed calls first (default 50)")
    ap.add_argument("--tools", default=",".join(TOOLS),
                    help="comma-separated subset of %s (default all)" % ",".join(TOOLS))
    ap.add_argument("--runners", default=",".join(RUNNERS),
                    help="comma-separated subset of in-process,uds,tcp (default all three; "
                         "in-process is always measured)")
    ap.add_argument("--json", default=None, help="also write the table rows to FILE (run.py)")
    a = ap.parse_args()
    tools = [t for t in TOOLS if t in a.tools.split(",")]
    unknown = set(a.tools.split(",")) - set(TOOLS)
    if not tools or unknown:
        sys.exit("uds: --tools takes a subset of %s" % ",".join(TOOLS))
    runners = [r for r in RUNNERS if r in a.runners.split(",") or r == "in-process"]
    notes = []
    if "tcp" in runners and not shutil.which("openssl"):
        runners.remove("tcp")
        notes.append("tcp row skipped: openssl is not on PATH (apt-get install openssl)")
    runtime = os.path.join(os.path.dirname(a.bin), "codespace-runtime")
    if "tcp" in runners and not os.access(runtime, os.X_OK):
        runners.remove("tcp")
        notes.append("tcp row skipped: no codespace-runtime beside %s" % a.bin)
    if not (shutil.which("cc") or shutil.which("gcc")):
        sys.exit("uds: no C compiler (cc): the judged floor is bench/pingpong.c")
    if not os.access(a.bin, os.X_OK):
        sys.exit("uds: no codespace-mcp at %s (build the release preset, or --bin)" % a.bin)
    version = subprocess.run([a.bin, "--version"], capture_output=True,
                             text=True).stdout.split()[-1]

    work = tempfile.mkdtemp(prefix="cs-bench-uds-")
    peers = {}
    rows = {}
    worker = None
    try:
        root = os.path.join(work, "root")
        os.mkdir(root)
        size = 1024
        with open(os.path.join(root, "small.txt"), "w") as f:
            f.write(("x" * 63 + "\n") * (size // 64))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        # The runner's own cost, without the sandbox's (bench/sandbox.py measures that): no
        # helper, so the probe fails and restricted commands run on the host in both rows.
        env["CODESPACE_LINUX_SANDBOX_BIN"] = "/nonexistent/codespace-linux-sandbox"
        env["XDG_STATE_HOME"] = os.path.join(work, "state")
        os.mkdir(env["XDG_STATE_HOME"])
        rdir = os.path.join(work, "runner")
        os.mkdir(rdir)
        floor_exe = build_pingpong(work)
        floors = {p: [] for p in PLACES + SHAPE}
        base = [a.bin, "--workspace", root, "--operations-db", ":memory:"]
        if "tcp" in runners:
            gcert, gkey, gpin = make_cert(work, "gateway")
            wcert, wkey, wpin = make_cert(work, "worker")
        # No sandbox in any row: as root the servers (and the tcp worker) run as nobody
        # (unprivileged), since a root server runs no command unsandboxed.
        argvs = {"in-process": base + ["--runner", "in-process"],
                 "uds": base + ["--runner", "uds", "--runner-dir", rdir]}
        if "tcp" in runners:
            worker = Worker(unprivileged([runtime, "--listen", "127.0.0.1:0", "--root", root,
                                          "--tls-cert", wcert, "--tls-key", wkey,
                                          "--tls-peer-sha256", gpin], work), env)
            argvs["tcp"] = base + ["--runner", "tcp://127.0.0.1:%d" % worker.port,
                                   "--tls-cert", gcert, "--tls-key", gkey,
                                   "--tls-peer-sha256", wpin]
        for name in runners:
            peers[name] = Peer(unprivileged(argvs[name], work), env, name)
        expect = {"in-process": "in-process", "uds": "uds", "tcp": "remote"}
        for name, peer in peers.items():
            got = runner_of(peer)
            if got != expect[name]:
                raise RuntimeError("the %s server reports runner %r" % (name, got))
        fns = {}
        for name, peer in peers.items():
            if "read" in tools:
                fns[("read", name)] = (read_fn(peer, size), None)
            if "exec" in tools:
                fns[("exec", name)] = (exec_fn(peer), None)
            if "read-after-spawn" in tools:
                fns[("read-after-spawn", name)] = (read_fn(peer, size), spawn_true)
            if "read-after-idle" in tools:
                fns[("read-after-idle", name)] = (read_fn(peer, size), idle)
        print("%d sequential calls per row after %d warm-up, interleaved in blocks of %d"
              % (a.runs, a.warmup, max(1, a.runs // 10)), flush=True)
        for fn, pre in fns.values():
            for _ in range(a.warmup):
                timed(fn, pre)
        rows = {k: [] for k in fns}
        per = max(1, a.runs // 10)
        done = 0
        while done < a.runs:
            n = min(per, a.runs - done)
            for k, (fn, pre) in fns.items():
                rows[k] += [timed(fn, pre) for _ in range(n)]
            if floor_exe:
                for place in PLACES + SHAPE:
                    floors[place].append(pingpong(floor_exe, 20 * n, place))
            done += n
    finally:
        for p in peers.values():
            p.close()
        if worker:
            worker.close()
        shutil.rmtree(work, ignore_errors=True)

    print()
    print("codespace-mcp %s, stdio, one call in flight" % version)
    print("%-50s %11s %11s %11s" % ("round trip", "median µs", "p99 µs", "mean µs"))
    labels = {"read": "read (1 KiB file)", "exec": "exec_command [\"true\"] yield_ms 5000",
              "read-after-spawn": "read (1 KiB file) after a spawn",
              "read-after-idle": "read (1 KiB file) after %g ms idle" % IDLE_MS}
    names = {"in-process": "in-process", "uds": "uds", "tcp": "tcp + TLS 1.3, 127.0.0.1"}
    for tool in tools:
        for name in runners:
            xs = rows[(tool, name)]
            print("%-50s %11.1f %11.1f %11.1f" % ("%s, %s" % (labels[tool], names[name]),
                                                  statistics.median(xs), p99(xs),
                                                  statistics.mean(xs)))
    judged = PLACES[0]
    floor = statistics.median(floors[judged])
    print()
    for place in PLACES:
        xs = floors[place]
        print("the machine's floor (bench/pingpong.c: one byte each way over a socketpair, "
              "epoll%s), median of the blocks: %.1f µs (blocks %.1f..%.1f)%s"
              % ({"cross": ", one process on each CPU", "same": ", both on one CPU"}.get(place, ""),
                 statistics.median(xs), min(xs), max(xs),
                 "  <- judged" if place == judged else "  (context)"))
    shape = None
    if SHAPE:
        shape = statistics.median(floors["chain"]) - statistics.median(floors["same"])
        print("the hop's own shape on one CPU (bench/pingpong.c chain - same: a third process "
              "in the loop, two more switches among three address spaces): %.1f µs  (context)"
              % shape)
    out = Rows()
    ok = True
    med = {k: statistics.median(v) for k, v in rows.items()}
    for tool in tools:
        if "uds" not in runners or tool in ("read-after-spawn", "read-after-idle"):
            continue
        over = med[(tool, "uds")] - med[(tool, "in-process")]
        above = over - floor
        met = above <= TARGET_ABOVE_FLOOR_US
        ok = ok and met
        tail = p99(rows[(tool, "uds")]) - p99(rows[(tool, "in-process")])
        print("uds overhead per call, %-6s median %+8.1f µs, %+8.1f µs above the floor  "
              "(p99 %+9.1f µs)  target <= %.0f µs above  %s"
              % (tool + ":", over, above, tail, TARGET_ABOVE_FLOOR_US,
                 "met" if met else "MISSED"))
        out.add("uds hop, %s: overhead per call (vs the ping-pong floor)" % tool, over, floor,
                "µs", above, "<= +%.0f µs" % TARGET_ABOVE_FLOOR_US, met, diff=True)
        lo, hi = (x - floor for x in hop_interval(rows[(tool, "uds")],
                                                  rows[(tool, "in-process")]))
        decided = ("met whatever the sample" if hi <= TARGET_ABOVE_FLOOR_US else
                   "missed whatever the sample" if lo > TARGET_ABOVE_FLOOR_US else
                   "not decided by %d calls" % len(rows[(tool, "uds")]))
        print("    its 95 %% interval above the floor (calls resampled): %+.1f to %+.1f µs: %s"
              % (lo, hi, decided))
        if shape is not None:
            print("    over the hop's shape on one CPU: %+.1f µs (context: what runs beyond the "
                  "bare switches when the servers share a CPU)" % (over - shape))
            out.add("  the same, over the hop's own shape on one CPU (pingpong chain - same; "
                    "context)", over, shape, "µs", over - shape, diff=True)
        out.add("  the same, 95 %% interval above the floor (ours: low end, baseline: "
                "high end; calls resampled): %s" % decided, lo, hi, "µs")
    if "uds" in runners and "read-after-spawn" in tools and "read" in tools:
        hop = {t: med[(t, "uds")] - med[(t, "in-process")] for t in tools}
        cost = hop["read-after-spawn"] - hop["read"]
        print("uds overhead per call, read after a spawn: median %+8.1f µs, %+8.1f µs over read's:"
              " what a nearby process start adds to a hop (context)"
              % (hop["read-after-spawn"], cost))
        out.add("uds hop, read after the client spawns /bin/true (vs read's hop)",
                hop["read-after-spawn"], hop["read"], "µs", cost, diff=True)
        if "exec" in tools:
            print("uds overhead per call, exec net of that: %+8.1f µs above the floor (context;"
                  " it means something with the servers on one CPU, where exec's own spawn runs)"
                  % (hop["exec"] - cost - floor))
    if "uds" in runners and "read-after-idle" in tools and "read" in tools:
        hop_idle = med[("read-after-idle", "uds")] - med[("read-after-idle", "in-process")]
        hop_read = med[("read", "uds")] - med[("read", "in-process")]
        print("uds overhead per call, read after %g ms idle: median %+8.1f µs, %+8.1f µs over "
              "read's: what the first call after a pause pays for the hop (context)"
              % (IDLE_MS, hop_idle, hop_idle - hop_read))
        out.add("uds hop, read after %g ms idle, no spawn (vs read's hop)" % IDLE_MS,
                hop_idle, hop_read, "µs", hop_idle - hop_read, diff=True)
    for tool in tools:
        for name in runners:
            if name == "in-process":
                continue
            r = med[(tool, name)] / med[(tool, "in-process")]
            out.add("%s %s round trip (vs in-process)" % (labels[tool], names[name]),
                    med[(tool, name)], med[(tool, "in-process")], "µs", r)
        if "tcp" in runners and "uds" in runners:
            print("tcp + TLS over uds, %-6s median %+8.1f µs (context, not judged)"
                  % (tool + ":", med[(tool, "tcp")] - med[(tool, "uds")]))
    for n in notes:
        print(n)
    print()
    print(table(out.rows))
    out.write(a.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
