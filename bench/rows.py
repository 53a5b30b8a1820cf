"""Rows of the one bench table (bench/run.py): every script that takes `--json FILE` writes its
measures there as a JSON list of rows, each

  {"measure": str, "ours": number|null, "baseline": number|null, "unit": str,
   "ratio": number|null, "target": str, "met": true|false|null}

`target` is "context" for rows that are printed but not judged (then `met` is null). `ours` and
`baseline` are in `unit`; `ratio` is whatever the target compares (ours / baseline unless the row
says otherwise in its measure). Standard library only.
"""
import json


class Rows:
    def __init__(self):
        self.rows = []

    def add(self, measure, ours, baseline, unit, ratio=None, target="context", met=None):
        self.rows.append({"measure": measure, "ours": ours, "baseline": baseline, "unit": unit,
                          "ratio": ratio, "target": target,
                          "met": None if target == "context" else bool(met)})

    def write(self, path):
        """Writes the rows to path (nothing when path is None)."""
        if path:
            with open(path, "w") as f:
                json.dump(self.rows, f, indent=1)


def ratio(a, b):
    return a / b if a is not None and b else None
