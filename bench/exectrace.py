#!/usr/bin/python3
"""Where an exec_command call's time goes, in-process against uds, with everything on CPU 0
(issue 33: the one cell left is the uds hop of exec on one CPU). The kernel's own scheduler
tracepoints (tracefs: sched_switch, sched_wakeup, sched_process_fork, _exec, _exit) and a marker
this client writes before and after each call cut every call into the same six segments:

  start->fork         the client's request to the spawn: the gateway's decode (uds: the frame
                      to the worker, the switch, the worker's decode) up to clone()
  fork->parent woken  the vfork child's set-up and execve up to the point that releases its
                      parent (the old address space)
  woken->child back   the parent's turn after posix_spawn returns (pidfd, watchers), until the
                      child runs again
  child back->exec    the rest of execve (the new program's mappings)
  exec->exit          /bin/true itself (the dynamic loader, libc, exit)
  exit->end           from the exit to the client's answer: reap, output, the answer (uds: the
                      worker's frames, the switch, the gateway's turn), and the client's read

Printed: the median of each segment per server, and uds minus in-process. The servers run as
bench/uds.py runs them (no sandbox, as nobody when root), the rounds alternate in-process and
uds so both see the same machine. Tracing adds its own cost to every switch, so the totals are
larger than uds.py's; compare the segments with each other.

Run (root: tracefs; release build):
    /usr/bin/python3 bench/exectrace.py [--calls N] [--rounds R] [--bin PATH]
Exits 0: this explains a row, it judges nothing.
"""
import argparse
import collections
import json
import os
import re
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from mcp_roundtrip import StdioPeer, request, unprivileged  # noqa: E402

TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
EVENTS = ("sched:sched_switch sched:sched_wakeup sched:sched_wakeup_new sched:sched_process_fork "
          "sched:sched_process_exec sched:sched_process_exit")
SEGMENTS = ("start->fork", "fork->parent woken", "woken->child back", "child back->exec",
            "exec->exit", "exit->end", "total")
LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)$")


def tracefs():
    for t in TRACEFS:
        if os.path.exists(os.path.join(t, "trace_marker")):
            return t
    sys.exit("exectrace: no tracefs (mount it, and run as root)")


def put(t, name, text):
    with open(os.path.join(t, name), "w") as f:
        f.write(text)


def one_round(t, a, runner, work, env):
    root = os.path.join(work, "root")
    argv = [a.bin, "--workspace", root, "--operations-db", ":memory:", "--runner", runner]
    if runner == "uds":
        argv += ["--runner-dir", os.path.join(work, "runner")]
    peer = StdioPeer(unprivileged(argv, work), env)
    peer.initialize()
    args = {"name": "exec_command",
            "arguments": {"workspace_id": "default", "command": ["true"], "yield_ms": 5000}}
    rid = 0

    def call():
        nonlocal rid
        rid += 1
        reply = json.loads(peer.roundtrip(request(rid, "tools/call", args), rid))
        out = reply.get("result", {}).get("structuredContent", {})
        if out.get("state") != "exited" or out.get("exit_code") != 0:
            raise RuntimeError("exec_command on the %s server: %r" % (runner, reply))
    for _ in range(50):
        call()
    put(t, "tracing_on", "0")
    put(t, "trace", "")
    put(t, "set_event", EVENTS)
    with open(os.path.join(t, "trace_marker"), "w", buffering=1) as mark:
        put(t, "tracing_on", "1")
        for i in range(a.calls):
            mark.write("C> %d\n" % i)
            call()
            mark.write("C< %d\n" % i)
        put(t, "tracing_on", "0")
    put(t, "set_event", "")
    with open(os.path.join(t, "trace")) as f:
        text = f.read()
    peer.close()
    return text


def segments(text):
    """{segment: [µs per call]} of one trace."""
    calls, cur = [], None
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        comm, pid, cpu, ts, kind, rest = m.groups()
        e = (float(ts) * 1e6, int(pid), kind, rest)
        if "C> " in rest:
            cur = [e]
        elif "C< " in rest and cur is not None:
            cur.append(e)
            calls.append(cur)
            cur = None
        elif cur is not None:
            cur.append(e)
    seg = collections.defaultdict(list)
    for c in calls:
        t0, t1 = c[0][0], c[-1][0]
        fork = next((e for e in c if e[2] == "sched_process_fork"), None)
        if not fork:
            continue
        child = int(re.search(r"child_pid=(\d+)", fork[3]).group(1))
        parent = fork[1]
        woken = next((e for e in c if e[0] > fork[0] and e[2] == "sched_wakeup"
                      and re.search(r"\bpid=%d\b" % parent, e[3])), None)
        ex = next((e for e in c if e[2] == "sched_process_exec" and e[1] == child), None)
        xt = next((e for e in c if e[2] == "sched_process_exit" and e[1] == child), None)
        if not (woken and ex and xt):
            continue
        back = next((e for e in c if woken[0] < e[0] <= ex[0] and e[2] == "sched_switch"
                     and re.search(r"next_pid=%d\b" % child, e[3])), woken)
        for name, v in zip(SEGMENTS, (fork[0] - t0, woken[0] - fork[0], back[0] - woken[0],
                                      ex[0] - back[0], xt[0] - ex[0], t1 - xt[0], t1 - t0)):
            seg[name].append(v)
    return seg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=400, help="traced calls a round (default 400)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per server, alternating")
    ap.add_argument("--bin", default=os.path.join(REPO, "build/release/src/main/codespace-mcp"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("exectrace: run as root (tracefs)")
    t = tracefs()
    os.sched_setaffinity(0, {0})  # the servers inherit CPU 0, and so does the command
    work = tempfile.mkdtemp(prefix="cs-bench-exectrace-")
    medians = {r: collections.defaultdict(list) for r in ("in-process", "uds")}
    try:
        for d in ("root", "state", "runner"):
            os.mkdir(os.path.join(work, d))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env["CODESPACE_LINUX_SANDBOX_BIN"] = "/nonexistent/codespace-linux-sandbox"
        env["XDG_STATE_HOME"] = os.path.join(work, "state")
        put(t, "buffer_size_kb", "20000")
        for _ in range(a.rounds):
            for runner in medians:
                seg = segments(one_round(t, a, runner, work, env))
                for name in SEGMENTS:
                    medians[runner][name].append(statistics.median(seg[name]))
    finally:
        put(t, "tracing_on", "0")
        put(t, "set_event", "")
        shutil.rmtree(work, ignore_errors=True)
    print("exec_command [\"true\"], everything on CPU 0, %d rounds of %d traced calls each way;"
          " per segment the median of each round (µs)" % (a.rounds, a.calls))
    print("%-20s %-24s %-24s %s" % ("segment", "in-process", "uds", "uds - in-process"))
    for name in SEGMENTS:
        i, u = medians["in-process"][name], medians["uds"][name]
        print("%-20s %-24s %-24s %+.0f" % (name, ", ".join("%.0f" % x for x in i),
                                            ", ".join("%.0f" % x for x in u),
                                            statistics.median(u) - statistics.median(i)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
