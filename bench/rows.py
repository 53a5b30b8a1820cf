"""Rows of the one bench table (bench/run.py): every script that takes `--json FILE` writes its
measures there as a JSON list of rows, each

  {"measure": str, "ours": number|null, "baseline": number|null, "unit": str,
   "ratio": number|null, "target": str, "met": true|false|null}

`target` is "context" for rows that are printed but not judged (then `met` is null). `ours` and
`baseline` are in `unit`; `ratio` is ours / baseline, or, when "diff" is true, the difference the
target judges (in `unit`, e.g. the uds hop above the ping-pong floor). Standard library only.
"""
import json


class Rows:
    def __init__(self):
        self.rows = []

    def add(self, measure, ours, baseline, unit, ratio=None, target="context", met=None,
            diff=False):
        self.rows.append({"measure": measure, "ours": ours, "baseline": baseline, "unit": unit,
                          "ratio": ratio, "diff": diff, "target": target,
                          "met": None if target == "context" else bool(met)})

    def write(self, path):
        """Writes the rows to path (nothing when path is None)."""
        if path:
            with open(path, "w") as f:
                json.dump(self.rows, f, indent=1)


def machine_jiffies():
    """The machine's CPU time so far, in jiffies, from /proc/stat's first line: [user, nice,
    system, idle, iowait, irq, softirq, steal] (fields a kernel does not give are 0). Raises
    OSError when /proc/stat cannot be read."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return v + [0] * (8 - len(v))


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(x):
    if x is None:
        return "-"
    if abs(x) >= 100:
        return "%.0f" % x
    return "%.3g" % x


def fmt_diff(x):
    return "%+.0f" % x if abs(x) >= 100 else "%+.3g" % x


def table(rows):
    """The rows as one aligned text table (measure, ours, baseline, ratio, target, met)."""
    head = ("measure", "ours", "baseline", "ratio", "target", "met")
    cells = []
    for r in rows:
        u = r["unit"]
        ours = "-" if r["ours"] is None else "%s %s" % (fmt(r["ours"]), u)
        base = "-" if r["baseline"] is None else "%s %s" % (fmt(r["baseline"]), u)
        if r["ratio"] is None:
            rat = "-"
        elif r.get("diff"):
            rat = "%s %s" % (fmt_diff(r["ratio"]), u)
        else:
            rat = "%.2fx" % r["ratio"]
        met = "-" if r["met"] is None else ("met" if r["met"] else "MISSED")
        cells.append((r["measure"], ours, base, rat, r["target"], met))
    w = [max(len(c[i]) for c in cells + [head]) for i in range(6)]
    lines = ["  ".join(h.ljust(w[i]) if i == 0 else h.rjust(w[i]) for i, h in enumerate(head))]
    for c in cells:
        lines.append("  ".join(x.ljust(w[i]) if i == 0 else x.rjust(w[i])
                               for i, x in enumerate(c)))
    return "\n".join(lines)
