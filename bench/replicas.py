#!/usr/bin/python3
"""Calls per second through two gateways on one remote worker, against one gateway (issue 32).

One `codespace-runtime --listen 127.0.0.1:0` worker (TLS 1.3, a pre-shared key per gateway, two
identities in its `--tls-psk-keys` file), and `codespace-mcp --runner tcp://` gateways in front
of it, each driven over stdio by a client process of its own (raw JSON-RPC, one request in
flight, as fast as the answers come):

  one:  one gateway, one client
  two:  two gateways on the same worker, a client each, started together

The measure is the calls answered by all clients together in SECONDS, as calls per second; the
ratio two / one is judged. The machine's own floor for that ratio is measured in the same run:
the same one-versus-two with in-process gateways (each its own process, no shared worker), so
what the ratio loses to the machine (its cores, the clients' own CPU) shows apart from what it
loses to the shared worker. Calls: tools/call read {"workspace_id": "default", "path":
"small.txt"} (1 KiB). ROUNDS rounds, each measuring every row once in turn; the medians are
reported.

Target (issue 32): two / one >= 1.6x where the worker is not the bottleneck. When the in-process
floor itself is under 1.6x, the machine cannot show it (two cores run two clients, two gateways
and the worker); the row is then judged against the floor: at least 90 % of it. Exits 1 when
missed (never a CTest: timings on a shared machine are not a unit test).

Run (release build):
    cmake --preset release && cmake --build --preset release -j2
    /usr/bin/python3 bench/replicas.py [--seconds S] [--rounds R] [--bin PATH] [--json FILE]
"""
import argparse
import multiprocessing
import os
import secrets
import statistics
import sys
import tempfile
import shutil
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from logproc import LogProc  # noqa: E402
from mcp_roundtrip import StdioPeer, request, unprivileged  # noqa: E402
from rows import Rows, machine_jiffies, table  # noqa: E402

TARGET = 1.6
OF_FLOOR = 0.9


class Worker(LogProc):
    def __init__(self, argv, env):
        super().__init__(argv, env, "runner listening", "codespace-runtime --listen")


def client(argv, env, start, seconds, out):
    """A client process: initialize, wait for start (a shared event), then read as fast as the
    answers come for `seconds`; puts the count of answered calls into out."""
    peer = StdioPeer(argv, env)
    try:
        peer.initialize()
        args = {"name": "read", "arguments": {"workspace_id": "default", "path": "small.txt"}}
        rid = 1
        while True:  # ready: the gateway reaches its worker
            raw = peer.roundtrip(request(rid, "tools/call", args), rid)
            rid += 1
            if b'"isError":true' not in raw:
                break
            time.sleep(0.05)
        for _ in range(20):
            peer.roundtrip(request(rid, "tools/call", args), rid)
            rid += 1
        out.put(("ready", 0))
        start.wait()
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            raw = peer.roundtrip(request(rid, "tools/call", args), rid)
            rid += 1
            if b'"isError":true' in raw:
                raise RuntimeError("read failed: %r" % raw[:300])
            n += 1
        out.put(("done", n))
    finally:
        peer.close()


def cpu_times():
    """(busy, total) jiffies of the whole machine (bench/rows.py machine_jiffies)."""
    v = machine_jiffies()
    idle = v[3] + v[4]  # idle + iowait
    return sum(v) - idle, sum(v)


def proc_ticks(pid, tid=None):
    """utime + stime of a process (all its threads), or of one thread, in clock ticks."""
    path = "/proc/%d/task/%d/stat" % (pid, tid) if tid else "/proc/%d/stat" % pid
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def measure(argvs, env, seconds, watch=None):
    """Runs one client per argv together; returns (the calls per second of all of them, the
    CPUs the machine kept busy meanwhile, all processes counted, and the CPUs used by the
    process watch (the worker's pid) and by its main thread (its event loop), or None)."""
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=client, args=(a, env, start, seconds, out)) for a in argvs]
    for p in procs:
        p.start()
    for _ in procs:
        kind, _n = out.get(timeout=60)
        if kind != "ready":
            raise RuntimeError("a client did not get ready")
    b0, t0 = cpu_times()
    w0 = (proc_ticks(watch), proc_ticks(watch, watch)) if watch else None
    m0 = time.monotonic()
    start.set()
    total = 0
    first = True
    for _ in procs:
        kind, n = out.get(timeout=seconds + 60)
        if first:  # the first client done: the window every client ran in
            b1, t1 = cpu_times()
            w1 = (proc_ticks(watch), proc_ticks(watch, watch)) if watch else None
            m1 = time.monotonic()
            first = False
        total += n
    for p in procs:
        p.join(30)
        if p.exitcode != 0:
            raise RuntimeError("a client failed (exit %s)" % p.exitcode)
    cpus = os.cpu_count() or 1
    hz = os.sysconf("SC_CLK_TCK")
    wk = None
    if watch:
        wk = tuple((w1[i] - w0[i]) / hz / max(1e-9, m1 - m0) for i in range(2))
    return total / seconds, cpus * (b1 - b0) / max(1, t1 - t0), wk


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get(
        "CODESPACE_MCP_BIN", os.path.join(REPO, "build", "release", "src", "main",
                                          "codespace-mcp")))
    ap.add_argument("--seconds", type=float, default=5.0, help="per row and round (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--json", default=None, help="also write the table rows to FILE (run.py)")
    a = ap.parse_args()
    runtime = os.path.join(os.path.dirname(a.bin), "codespace-runtime")
    for exe in (a.bin, runtime):
        if not os.access(exe, os.X_OK):
            sys.exit("replicas: no %s (build the release preset, or --bin)" % exe)
    work = tempfile.mkdtemp(prefix="cs-bench-replicas-")
    worker = None
    try:
        root = os.path.join(work, "root")
        os.mkdir(root)
        with open(os.path.join(root, "small.txt"), "w") as f:
            f.write(("x" * 63 + "\n") * 16)
        keys = {}
        for ident in ("gw-a", "gw-b"):
            keys[ident] = secrets.token_hex(32)
            with open(os.path.join(work, ident + ".psk"), "w") as f:
                f.write(keys[ident] + "\n")
            os.chmod(os.path.join(work, ident + ".psk"), 0o600)
        with open(os.path.join(work, "keys"), "w") as f:
            f.write("".join("%s:%s\n" % kv for kv in keys.items()))
        os.chmod(os.path.join(work, "keys"), 0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        # The hop's cost, not the sandbox's: no helper anywhere (reads run no command).
        env["CODESPACE_LINUX_SANDBOX_BIN"] = "/nonexistent/codespace-linux-sandbox"
        for d in ("state-a", "state-b"):
            os.mkdir(os.path.join(work, d))
        argv_w = unprivileged([runtime, "--listen", "127.0.0.1:0", "--root", root,
                               "--tls-psk-keys", os.path.join(work, "keys")], work)
        worker = Worker(argv_w, env)

        def gateway(ident, remote):
            base = [a.bin, "--workspace", root, "--operations-db", ":memory:"]
            if remote:
                base += ["--runner", "tcp://127.0.0.1:%d" % worker.port,
                         "--tls-psk", os.path.join(work, ident + ".psk"),
                         "--tls-psk-identity", ident]
            else:
                base += ["--runner", "in-process"]
            return unprivileged(base, work)

        rows = {k: [] for k in ("remote one", "remote two", "local one", "local two")}
        busy = {k: [] for k in rows}
        wbusy = {k: [] for k in ("remote one", "remote two")}
        print("%d rounds of %.1f s per row; reads of 1 KiB, one call in flight per client"
              % (a.rounds, a.seconds), flush=True)
        runs = {"local one": [("gw-a", False)], "local two": [("gw-a", False), ("gw-b", False)],
                "remote one": [("gw-a", True)], "remote two": [("gw-a", True), ("gw-b", True)]}
        for r in range(a.rounds):
            for k, gws in runs.items():
                cps, cpus, wk = measure([gateway(i, remote) for i, remote in gws], env,
                                        a.seconds, worker.proc.pid if k in wbusy else None)
                rows[k].append(cps)
                busy[k].append(cpus)
                if wk:
                    wbusy[k].append(wk)
            print("round %d: %s" % (r + 1, ", ".join(
                "%s %.0f/s (%.2f CPUs busy)" % (k, rows[k][-1], busy[k][-1]) for k in rows)),
                flush=True)
            print("         the worker: %s" % ", ".join(
                "%s %.2f CPUs, its loop thread %.2f" % (k, v[-1][0], v[-1][1])
                for k, v in wbusy.items()), flush=True)
    finally:
        if worker:
            worker.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    cpus = os.cpu_count() or 1
    ratio = med["remote two"] / med["remote one"]
    floor = med["local two"] / med["local one"]
    # What the machine allows the remote pair: one gateway's chain (client, gateway, worker)
    # already keeps this many CPUs busy; two chains cannot go past all of them.
    one_busy = statistics.median(busy["remote one"])
    ceiling = cpus / one_busy if one_busy > 0 else float("inf")
    goal = min(TARGET, OF_FLOOR * min(floor, ceiling))
    met = ratio >= goal
    out = Rows()
    out.add("two gateways on one worker, calls/s (vs one gateway)", med["remote two"],
            med["remote one"], "calls/s", ratio, ">= %.2fx (1.6x, or 90%% of the floor)" % goal,
            met)
    out.add("floor: two in-process gateways (vs one), the machine's own", med["local two"],
            med["local one"], "calls/s", floor)
    out.add("floor: CPUs busy with one remote gateway's calls (of %d)" % cpus, one_busy, None,
            "CPUs", None)
    loop2 = statistics.median(v[1] for v in wbusy["remote two"])
    out.add("the worker's loop thread, busy with two gateways' calls", loop2, None, "CPUs", None)
    print(table(out.rows))
    print("One gateway's calls keep %.2f of %d CPUs busy (client, gateway, worker together): "
          "two such chains can reach %.2fx at most here." % (one_busy, cpus, ceiling))
    if min(floor, ceiling) < TARGET:
        print("1.6x is out of this machine's reach (floor %.2fx, CPU ceiling %.2fx); judged "
              "against %.0f%% of the lower." % (floor, ceiling, OF_FLOOR * 100))
    print("two / one through the worker: %.2fx; %s" % (ratio, "met" if met else "MISSED"))
    out.write(a.json)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
