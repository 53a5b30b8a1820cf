#!/usr/bin/python3
"""Benchmark of apply_patch: a patch of 1,000 chunks applied to a 10 MB file, against GNU patch.

Generates under a temporary directory a text file of 200,000 varied lines (about 10 MB; every
line differs, so every chunk's context is unique), the expected new file, a V4A patch of 1,000
Update chunks spread evenly through the file (each: 3 context lines, one removed line, one added
line, 3 context lines) and the equivalent unified diff (`diff -u` of the old and the new file: the
same 1,000 hunks). Then, for each of 3 runs (each on a fresh copy of the file and, so that its
peak memory is its own, a fresh server started over stdio with
`--workspace <tmp>/ws --operations-db <tmp>/ops.db`):

  apply_patch             one tools/call (the request is encoded before the clock starts)
  apply_patch check_only  one tools/call with check_only: parse and match, no write
  GNU patch               `patch -s <file> -i <diff>` on a fresh copy (one process)

Printed: the median wall time of each (and every run), the ratio of ours to GNU patch, the
server's idle VmRSS (after initialize, before the call) and its VmHWM (peak RSS) after the call,
both from /proc/<pid>/status, and GNU patch's peak RSS (GNU time's %M, one untimed run).
Informational row: GNU patch followed by an fsync of the result
(apply_patch fsyncs the new file and its directory before answering; patch does not).
A second table row: a 20-file patch (20 files of 2,000 lines, 10 chunks each, one V4A patch with
20 `*** Update File` sections) against GNU `patch -p1` applying `diff -ru` of the same change:
this is where apply_patch's crash journal (a hard link per old file, one intent file and a few
directory fsyncs per patch, docs/patch-format.md "Crash journal") shows, if anywhere.
Checks: status applied/checked, after_version = SHA-256 of the expected file, the result
byte-identical to the expected new file (ours and GNU patch's), check_only leaving it unchanged.
No target is set: the script exits 0 unless a check fails.

Run: /usr/bin/python3 bench/patch.py [--bin build/release/src/main/codespace-mcp] [--dir PARENT]
     [--runs 3] [--keep]
Standard library only; needs diff and patch on PATH (without patch, its rows are skipped and the
script says so). Not a test: timings are not asserted in CI.
"""
import argparse
import hashlib
import json
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
from rows import Rows  # noqa: E402
LINES = 200000
CHUNKS = 1000
CONTEXT = 3
WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega vector buffer "
         "index count value result error status offset length cursor parser token stream "
         "client server request reply handle table entry record field layout window frame "
         "commit ledger version digest socket thread signal timer queue worker policy the of "
         "and to in is for with from return if else while struct const static void int char "
         "size_t bool true false NULL malloc free memcpy strlen printf assert").split()
PUNCT = ["", ";", ",", ".", " {", " }", ");", " = 0;", " += 1;", " /* note */"]


def generate(rng):
    """(old lines, new lines, V4A patch text); lines without their newline."""
    old = []
    for i in range(LINES):
        indent = " " * (4 * rng.randrange(4))
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 10)))
        old.append("%s%s_%d%s" % (indent, words, i, rng.choice(PUNCT)))
    new = list(old)
    step = LINES // CHUNKS
    body = ["*** Begin Patch", "*** Update File: big.txt"]
    for k in range(CHUNKS):
        at = k * step + step // 2  # the changed line; its context stays inside this stride
        new[at] = old[at] + " // patched %d" % k
        body.append("@@")
        body += [" " + old[j] for j in range(at - CONTEXT, at)]
        body += ["-" + old[at], "+" + new[at]]
        body += [" " + old[j] for j in range(at + 1, at + 1 + CONTEXT)]
    body.append("*** End Patch")
    return old, new, "\n".join(body) + "\n"


def proc_status(pid):
    """{field: kB} of the VmRSS and VmHWM lines of /proc/<pid>/status."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, val = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(val.split()[0])
    return out


class Server:
    def __init__(self, binary, ws, db, state):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_")}
        env["XDG_STATE_HOME"] = state
        self.proc = subprocess.Popen([binary, "--workspace", ws, "--operations-db", db,
                                      "--log-level", "error"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.next_id = 1
        reply = self.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                        "clientInfo": {"name": "bench", "version": "1"}})
        if "result" not in reply:
            raise SystemExit("bench: initialize failed: %r" % reply)
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

    def close(self):
        self.proc.stdin.close()
        rc = self.proc.wait(60)
        if rc != 0:
            raise SystemExit("bench: server exited with %d" % rc)


def result(line):
    if not line:
        raise SystemExit("bench: the server closed its output")
    res = json.loads(line)["result"]
    if res.get("isError"):
        raise SystemExit("bench: tool error: " + res["content"][0]["text"])
    return res["structuredContent"]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def one_call(opts, tmp, ws, target, check_only, want_old, want_new):
    """(seconds, idle VmRSS kB, VmHWM kB) of one apply_patch on a fresh copy, fresh server."""
    shutil.copyfile(os.path.join(tmp, "old.txt"), target)
    srv = Server(opts.bin, ws, os.path.join(tmp, "ops.db"), os.path.join(tmp, "state"))
    time.sleep(0.3)
    idle = proc_status(srv.proc.pid)["VmRSS"]
    args = {"workspace_id": "default", "patch": opts.patch_text}
    if check_only:
        args["check_only"] = True
    req = srv.encode("tools/call", {"name": "apply_patch", "arguments": args})
    t = time.perf_counter()
    srv.write(req)
    line = srv.proc.stdout.readline()
    took = time.perf_counter() - t
    peak = proc_status(srv.proc.pid)["VmHWM"]
    srv.close()
    out = result(line)
    want_status = "checked" if check_only else "applied"
    if out["status"] != want_status:
        raise SystemExit("bench: status %r, expected %r" % (out["status"], want_status))
    got = read(target)
    if check_only:
        if got != want_old:
            raise SystemExit("bench: check_only changed the file")
    else:
        if got != want_new:
            raise SystemExit("bench: apply_patch's result differs from the expected file")
        after = out["changes"][0].get("after_version")
        if after != "sha256:" + hashlib.sha256(want_new).hexdigest():
            raise SystemExit("bench: after_version %r is not the expected file's" % after)
    return took, idle, peak


def gnu_patch(patch_bin, tmp, diff_path, want_new, fsync):
    """Seconds of one `patch` run on a fresh copy (plus an fsync of the result if asked)."""
    target = os.path.join(tmp, "gnu", "big.txt")
    shutil.copyfile(os.path.join(tmp, "old.txt"), target)
    t = time.perf_counter()
    subprocess.run([patch_bin, "-s", "--no-backup-if-mismatch", target, "-i", diff_path],
                   check=True, stdout=subprocess.DEVNULL)
    if fsync:
        fd = os.open(target, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        dfd = os.open(os.path.dirname(target), os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
    took = time.perf_counter() - t
    if read(target) != want_new:
        raise SystemExit("bench: GNU patch's result differs from the expected file")
    return took


def gnu_patch_peak(patch_bin, tmp, diff_path):
    """GNU patch's peak RSS in KiB, from GNU time's %M (an untimed run), or None without it.
    Not wait4's ru_maxrss from here: a child forked (or vforked) from this Python process
    carries the interpreter's RSS as its high-water mark across the exec."""
    gnu_time = "/usr/bin/time"
    if not os.access(gnu_time, os.X_OK):
        return None
    target = os.path.join(tmp, "gnu", "big.txt")
    shutil.copyfile(os.path.join(tmp, "old.txt"), target)
    out = os.path.join(tmp, "gnu", "time.txt")
    subprocess.run([gnu_time, "-f", "%M", "-o", out, patch_bin, "-s", "--no-backup-if-mismatch",
                    target, "-i", diff_path], check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return int(f.read().split()[-1])


MANY_FILES = 20
MANY_LINES = 2000
MANY_CHUNKS = 10


def generate_many(rng):
    """{name: (old bytes, new bytes)} and the V4A patch of the 20-file change."""
    files, body = {}, ["*** Begin Patch"]
    for f in range(MANY_FILES):
        name = "f%02d.c" % f
        old = ["%s_%d_%d%s" % (" ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 9))),
                               f, i, rng.choice(PUNCT)) for i in range(MANY_LINES)]
        new = list(old)
        body.append("*** Update File: many/" + name)
        step = MANY_LINES // MANY_CHUNKS
        for k in range(MANY_CHUNKS):
            at = k * step + step // 2
            new[at] = old[at] + " // patched %d" % k
            body.append("@@")
            body += [" " + old[j] for j in range(at - CONTEXT, at)]
            body += ["-" + old[at], "+" + new[at]]
            body += [" " + old[j] for j in range(at + 1, at + 1 + CONTEXT)]
        files[name] = (("\n".join(old) + "\n").encode(), ("\n".join(new) + "\n").encode())
    body.append("*** End Patch")
    return files, "\n".join(body) + "\n"


def put_tree(d, files, which):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, pair in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(pair[which])


def check_tree(d, files, who):
    for name, pair in files.items():
        if read(os.path.join(d, name)) != pair[1]:
            raise SystemExit("bench: %s's %s differs from the expected file" % (who, name))


def many_ours(opts, tmp, ws, files, text):
    """Seconds of one 20-file apply_patch on fresh copies, fresh server."""
    put_tree(os.path.join(ws, "many"), files, 0)
    srv = Server(opts.bin, ws, os.path.join(tmp, "ops.db"), os.path.join(tmp, "state"))
    req = srv.encode("tools/call", {"name": "apply_patch", "arguments": {
        "workspace_id": "default", "patch": text}})
    t = time.perf_counter()
    srv.write(req)
    line = srv.proc.stdout.readline()
    took = time.perf_counter() - t
    srv.close()
    if result(line)["status"] != "applied":
        raise SystemExit("bench: the 20-file patch did not apply")
    check_tree(os.path.join(ws, "many"), files, "apply_patch")
    return took


def many_gnu(patch_bin, tmp, files, diff_path):
    d = os.path.join(tmp, "gnu-many")
    put_tree(d, files, 0)
    t = time.perf_counter()
    subprocess.run([patch_bin, "-s", "-p1", "--no-backup-if-mismatch", "-d", d, "-i", diff_path],
                   check=True, stdout=subprocess.DEVNULL)
    took = time.perf_counter() - t
    check_tree(d, files, "GNU patch")
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get(
        "CODESPACE_MCP_BIN", os.path.join(REPO, "build/release/src/main/codespace-mcp")))
    ap.add_argument("--keep", action="store_true", help="keep the generated data")
    ap.add_argument("--dir", default=None, help="parent directory of the generated data")
    ap.add_argument("--runs", type=int, default=3, help="runs of each measurement")
    ap.add_argument("--json", default=None, help="also write the table rows to FILE (run.py)")
    opts = ap.parse_args()
    if not os.access(opts.bin, os.X_OK):
        raise SystemExit("bench: %s is not executable (build the release preset first)" % opts.bin)
    patch_bin = shutil.which("patch")
    if not shutil.which("diff"):
        raise SystemExit("bench: diff is not on PATH")

    tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-bench-patch-", dir=opts.dir))
    try:
        return run(opts, tmp, patch_bin)
    finally:
        if not opts.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("data kept in", tmp)


def run(opts, tmp, patch_bin):
    ws = os.path.join(tmp, "ws")
    for d in (ws, os.path.join(tmp, "gnu"), os.path.join(tmp, "state")):
        os.makedirs(d)
    t = time.perf_counter()
    old, new, opts.patch_text = generate(random.Random(20261129))
    want_old = ("\n".join(old) + "\n").encode()
    want_new = ("\n".join(new) + "\n").encode()
    with open(os.path.join(tmp, "old.txt"), "wb") as f:
        f.write(want_old)
    with open(os.path.join(tmp, "new.txt"), "wb") as f:
        f.write(want_new)
    diff_path = os.path.join(tmp, "unified.diff")
    with open(diff_path, "wb") as f:
        rc = subprocess.run(["diff", "-u", "--label", "big.txt", "--label", "big.txt",
                             os.path.join(tmp, "old.txt"), os.path.join(tmp, "new.txt")],
                            stdout=f).returncode
    if rc != 1:
        raise SystemExit("bench: diff -u exited with %d" % rc)
    hunks = sum(1 for line in open(diff_path, "rb") if line.startswith(b"@@ "))
    if hunks != CHUNKS:
        raise SystemExit("bench: the unified diff has %d hunks, not %d" % (hunks, CHUNKS))
    print("data: %d lines, %.2f MB (%.2f MiB) file; V4A patch %d chunks, %d KiB; unified diff "
          "%d hunks, %d KiB (built in %.1f s)"
          % (LINES, len(want_old) / 1e6, len(want_old) / 2**20, CHUNKS,
             len(opts.patch_text.encode()) // 1024, hunks, os.path.getsize(diff_path) // 1024,
             time.perf_counter() - t))

    target = os.path.join(ws, "big.txt")
    # Warm-up: the binary, the data and patch in the page cache; not measured.
    one_call(opts, tmp, ws, target, True, want_old, want_new)
    gnu_peak = None
    if patch_bin:
        gnu_patch(patch_bin, tmp, diff_path, want_new, False)
        gnu_peak = gnu_patch_peak(patch_bin, tmp, diff_path)

    apply_runs, check_runs, gnu_runs, gnu_sync_runs = [], [], [], []
    for _ in range(opts.runs):  # interleaved, so drift in the machine's load hits every row
        apply_runs.append(one_call(opts, tmp, ws, target, False, want_old, want_new))
        check_runs.append(one_call(opts, tmp, ws, target, True, want_old, want_new))
        if patch_bin:
            gnu_runs.append(gnu_patch(patch_bin, tmp, diff_path, want_new, False))
            gnu_sync_runs.append(gnu_patch(patch_bin, tmp, diff_path, want_new, True))

    def med(xs):
        return statistics.median(xs)

    base = med(gnu_runs) if gnu_runs else None
    print()
    print("%-34s %10s %9s %12s %12s  %s" % ("measure", "median ms", "vs patch", "idle RSS KiB",
                                             "peak RSS KiB", "runs (ms)"))

    def row(name, secs, mem=None, vs=None):
        vs = base if vs is None else vs
        ratio = "%8.2fx" % (med(secs) / vs) if vs else "%9s" % "-"
        idle = "%12d" % med([m[0] for m in mem]) if mem and mem[0][0] else "%12s" % "-"
        peak = "%12d" % max(m[1] for m in mem) if mem else "%12s" % "-"
        print("%-34s %10.1f %s %s %s  %s" % (name, med(secs) * 1e3, ratio, idle, peak,
                                            " ".join("%.1f" % (s * 1e3) for s in secs)))

    row("apply_patch (1,000 chunks)", [r[0] for r in apply_runs],
        [(r[1], r[2]) for r in apply_runs])
    row("apply_patch check_only", [r[0] for r in check_runs],
        [(r[1], r[2]) for r in check_runs])
    out = Rows()
    for name, runs in (("apply_patch, 1,000 chunks in 10 MB (vs GNU patch)", apply_runs),
                       ("  apply_patch check_only (vs GNU patch)", check_runs)):
        ours = med([r[0] for r in runs]) * 1e3
        out.add(name, ours, base * 1e3 if base else None, "ms",
                ours / (base * 1e3) if base else None)
    out.add("  apply_patch peak RSS (vs GNU patch's)", max(r[2] for r in apply_runs) / 1024,
            gnu_peak / 1024 if gnu_peak else None, "MiB",
            max(r[2] for r in apply_runs) / gnu_peak if gnu_peak else None)

    # The 20-file patch (the crash journal's cost per file shows here).
    files, many_text = generate_many(random.Random(20261202))
    put_tree(os.path.join(tmp, "many-a"), files, 0)
    put_tree(os.path.join(tmp, "many-b"), files, 1)
    many_diff = os.path.join(tmp, "many.diff")
    with open(many_diff, "wb") as f:
        rc = subprocess.run(["diff", "-ru", "many-a", "many-b"], cwd=tmp, stdout=f).returncode
    if rc != 1:
        raise SystemExit("bench: diff -ru exited with %d" % rc)
    many_ours(opts, tmp, ws, files, many_text)  # warm-up
    many_runs, many_gnu_runs = [], []
    for _ in range(opts.runs):
        many_runs.append(many_ours(opts, tmp, ws, files, many_text))
        if patch_bin:
            many_gnu_runs.append(many_gnu(patch_bin, tmp, files, many_diff))
    many_base = med(many_gnu_runs) if many_gnu_runs else None
    row("apply_patch (20 files, 200 chunks)", many_runs, vs=many_base)
    if patch_bin:
        row("GNU patch -p1 (20 files)", many_gnu_runs, vs=many_base)
    out.add("apply_patch, 20 files of 10 chunks (vs GNU patch)", med(many_runs) * 1e3,
            many_base * 1e3 if many_base else None, "ms",
            med(many_runs) / many_base if many_base else None)
    out.write(opts.json)
    if patch_bin:
        row("GNU patch (unified diff)", gnu_runs, [(None, gnu_peak)] if gnu_peak else None)
        row("  (info) GNU patch + fsync", gnu_sync_runs)
    else:
        print("GNU patch: not found on PATH; no baseline, no ratios")
    print()
    print("idle RSS: server VmRSS after initialize, before the call (median); peak RSS: VmHWM "
          "after the call (max over runs; each run is a fresh server)%s"
          % ("; GNU patch's peak RSS: /usr/bin/time -f %M, one untimed run" if gnu_peak else ""))
    print("file %.1f MiB: peak - idle = %.1f MiB (apply), %.1f MiB (check_only)"
          % (len(want_old) / 2**20,
             (max(r[2] for r in apply_runs) - med([r[1] for r in apply_runs])) / 1024,
             (max(r[2] for r in check_runs) - med([r[1] for r in check_runs])) / 1024))
    print("checks passed: results byte-identical to the expected file (ours%s), after_version "
          "matches, check_only left the file unchanged" % (" and GNU patch's" if patch_bin else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
