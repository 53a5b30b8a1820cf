#!/usr/bin/python3
"""The one bench table: runs every benchmark under bench/ and prints one table of their rows
(measure, ours, baseline, ratio, target, met), as a Markdown table bench/README.md can keep.

Each script is run with `--json FILE` and writes its rows there (bench/rows.py); its own full
output goes to the log (--log, default build/bench-run.log). A script that fails, or writes no
rows, gets one row saying so. Rows whose target is "context" are printed, never judged.

Run (release build; as root, as CI runs: the sandbox rows need it):
    cmake --preset release && cmake --build --preset release -j2
    /usr/bin/python3 bench/run.py            # every script, their default sizes: ~3-5 min
    /usr/bin/python3 bench/run.py --quick    # shorter runs of each: ~2 min, noisier
    /usr/bin/python3 bench/run.py --only uds,concurrency --dir /dev/shm
Exits 1 when a target is missed or a script failed. Not a test: CI never runs it.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from rows import fmt, fmt_diff, machine_jiffies  # noqa: E402

# script, its arguments for --quick, whether it takes --dir
SCRIPTS = [
    ("mcp_roundtrip", ["--calls", "2000", "--warmup", "200", "--runs", "1"], False),
    ("files", ["--runs", "3"], True),
    ("patch", ["--runs", "1"], True),
    ("process", ["--runs", "100", "--warmup", "5", "--big-runs", "3"], False),
    ("sandbox", ["--runs", "50", "--small", "50"], False),
    ("uds", ["--runs", "300", "--warmup", "20"], False),
    ("concurrency", ["--seconds", "5", "--rounds", "1"], True),
    ("replicas", ["--seconds", "2", "--rounds", "1"], False),
]


def markdown(groups):
    """groups: [(script, rows)]; one Markdown table, a bold row opening each script's rows."""
    out = ["| measure | ours | baseline | ratio | target | met |",
           "| --- | ---: | ---: | ---: | --- | --- |"]
    for script, rows in groups:
        out.append("| **%s.py** | | | | | |" % script)
        for r in rows:
            u = r.get("unit", "")
            ours = "-" if r.get("ours") is None else "%s %s" % (fmt(r["ours"]), u)
            base = "-" if r.get("baseline") is None else "%s %s" % (fmt(r["baseline"]), u)
            if r.get("ratio") is None:
                rat = "-"
            elif r.get("diff"):
                rat = "%s %s" % (fmt_diff(r["ratio"]), u)
            else:
                rat = "%.2fx" % r["ratio"]
            met = "-" if r.get("met") is None else ("met" if r["met"] else "**missed**")
            measure = r["measure"].strip()
            if r["measure"].startswith(" "):
                measure = "&nbsp;&nbsp;" + measure
            out.append("| %s | %s | %s | %s | %s | %s |"
                       % (measure.replace("|", "\\|"), ours, base, rat, r.get("target", ""),
                          met))
    return "\n".join(out)


def read_first(path):
    """The first line of a small file, stripped, or None when it cannot be read."""
    try:
        with open(path) as f:
            return f.readline().strip() or None
    except OSError:
        return None


def machine_facts():
    """What the table ran on, as (name, value) pairs: a ratio taken on one host can move on
    another of the same kind (issue 33), so every table says which host it came from."""
    cpu = None
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k.strip() == "model name" and cpu is None:
                    cpu = v.strip()
                elif k.strip() == "flags" and not flags:
                    flags = v
    except OSError:
        pass
    def detect(flag):
        try:
            p = subprocess.run(["systemd-detect-virt", flag], capture_output=True, text=True,
                               timeout=5)
            return p.stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            return None
    vm, container = detect("--vm"), detect("--container")
    dmi = [read_first("/sys/class/dmi/id/" + n) for n in ("sys_vendor", "product_name")]
    dmi = " ".join(x for x in dmi if x) or None
    virt = "vm %s, container %s, cpu flag hypervisor %s" % (
        vm or "?", container or "?", "yes" if " hypervisor" in flags else "no")
    if dmi:
        virt += ", dmi " + dmi
    idle = read_first("/sys/devices/system/cpu/cpuidle/current_driver")
    gov = read_first("/sys/devices/system/cpu/cpuidle/current_governor") or \
        read_first("/sys/devices/system/cpu/cpuidle/current_governor_ro")
    cpuidle = "driver %s, governor %s" % (idle or "?", gov or "?")
    # haltpoll's guest polling: at 0 an idle vCPU halts into the host at once, so waking a
    # sleeping process on it costs a trip through the hypervisor (issue 33's third host).
    poll_ns = read_first("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    if idle == "haltpoll" and poll_ns is not None:
        cpuidle += ", guest_halt_poll_ns %s" % poll_ns
    # The kernel's own scheduling and isolation settings, which move wake-up costs between two
    # builds of one kind (issue 33): the command line's, and sched_vcpu_pack, a vendor knob the
    # PVM guests of 2026-12 have (not upstream).
    cmdline = read_first("/proc/cmdline") or ""
    knobs = [t for t in cmdline.split()
             if t.split("=")[0] in ("pti", "mitigations", "idle", "nohz", "nohz_full",
                                    "isolcpus", "preempt", "clocksource")
             or t.startswith(("pvm", "sched_", "kvm-", "haltpoll"))]
    for name in ("sched_vcpu_pack", "sched_autogroup_enabled"):
        v = read_first("/proc/sys/kernel/" + name)
        if v is not None and not any(t.startswith(name + "=") for t in knobs):
            knobs.append("%s %s" % (name, v))
    mem = None
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = "%.1f GiB" % (kb / 1048576.0)
    except (OSError, ValueError, IndexError):
        pass
    load = os.getloadavg()
    return [
        ("kernel", "%s %s" % (platform.release(), platform.machine())),
        ("cpu", cpu or "?"),
        ("cpus", "%d online (nproc), %d in this process's affinity"
         % (os.cpu_count() or 0, len(os.sched_getaffinity(0)))),
        ("memory", mem or "?"),
        ("virtualization", virt),
        ("cpuidle", cpuidle),
        ("kernel settings", ", ".join(knobs) or "none of note"),
        ("load average at the start", "%.2f %.2f %.2f" % load),
    ]


def cpu_ticks():
    """(stolen, all) jiffies of every CPU from /proc/stat's first line, or None: the time the
    hypervisor ran something else while this guest wanted its vCPUs."""
    try:
        v = machine_jiffies()
    except (OSError, ValueError):
        return None
    return v[7], sum(v)


def steal_row(before, after):
    """A context row: the share of CPU time stolen by the hypervisor while a script ran (a row
    that moves between two hosts of one kind moves with it)."""
    if not before or not after or after[1] <= before[1]:
        return None
    pct = 100.0 * (after[0] - before[0]) / (after[1] - before[1])
    return {"measure": "  host: CPU time stolen by the hypervisor while this script ran",
            "ours": pct, "baseline": None, "unit": "%", "ratio": None, "target": "context",
            "met": None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs of every script")
    ap.add_argument("--only", default=None,
                    help="comma-separated scripts (%s)" % ",".join(s for s, _, _ in SCRIPTS))
    ap.add_argument("--skip", default="", help="comma-separated scripts to leave out")
    ap.add_argument("--bin", default=None, help="the codespace-mcp to measure (passed on)")
    ap.add_argument("--dir", default=None,
                    help="parent of generated data for files, patch, concurrency")
    ap.add_argument("--log", default=os.path.join(REPO, "build", "bench-run.log"),
                    help="every script's own output (default build/bench-run.log)")
    a = ap.parse_args()
    names = [s for s, _, _ in SCRIPTS]
    only = a.only.split(",") if a.only else names
    skip = a.skip.split(",") if a.skip else []
    for n in only + skip:
        if n not in names:
            sys.exit("run: no script %r (one of %s)" % (n, ", ".join(names)))
    os.makedirs(os.path.dirname(os.path.abspath(a.log)), exist_ok=True)
    facts = machine_facts()
    groups = []
    failed = missed = False
    started = time.time()
    tmp = tempfile.mkdtemp(prefix="cs-bench-run-")
    try:
        with open(a.log, "w") as log:
            for name, quick, takes_dir in SCRIPTS:
                if name not in only or name in skip:
                    continue
                rows_path = os.path.join(tmp, name + ".json")
                argv = [sys.executable, os.path.join(HERE, name + ".py"), "--json", rows_path]
                if a.quick:
                    argv += quick
                if a.bin:
                    argv += ["--bin", a.bin]
                if a.dir and takes_dir:
                    argv += ["--dir", a.dir]
                print("running %s ..." % " ".join(argv[1:]), end=" ", flush=True)
                log.write("\n==== %s\n" % " ".join(argv))
                log.flush()
                t = time.time()
                ticks = cpu_ticks()
                rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT).returncode
                stolen = steal_row(ticks, cpu_ticks())
                print("%.0f s, exit %d" % (time.time() - t, rc), flush=True)
                rows = []
                if os.path.exists(rows_path):
                    with open(rows_path) as f:
                        rows = json.load(f)
                if rc not in (0, 1) or not rows:
                    failed = True
                    rows.append({"measure": "%s.py failed (exit %d): see %s" % (name, rc, a.log),
                                 "ours": None, "baseline": None, "unit": "", "ratio": None,
                                 "target": "-", "met": False})
                missed = missed or any(r.get("met") is False for r in rows)
                if stolen:
                    rows.append(stolen)
                groups.append((name, rows))
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    load = os.getloadavg()
    print()
    print("%s UTC, %s, %d CPUs, load average at the end %.1f %.1f %.1f; %.0f s%s"
          % (datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), platform.node() or "?",
             os.cpu_count() or 0, load[0], load[1], load[2], time.time() - started,
             " (--quick)" if a.quick else ""))
    print()
    for k, v in facts:
        print("- %s: %s" % (k, v))
    print()
    print(markdown(groups))
    print()
    print("each script's own output: %s" % a.log)
    return 1 if failed or missed else 0


if __name__ == "__main__":
    sys.exit(main())
