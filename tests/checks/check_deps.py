#!/usr/bin/python3
"""Dependency allowlist check (issue #9): each built binary loads only the chosen libraries.

Usage: check_deps.py [--allowlist FILE] [--ldd PROGRAM] [--sanitized] NAME=PATH...

For every NAME=PATH (empty arguments are ignored, so CMake can pass a binary only when its target
exists) runs `ldd PATH` and compares the libraries it lists, by name (the soname up to ".so";
the vDSO and the dynamic loader are not counted), with the binary's entry in the allowlist
(default tests/checks/deps-allowlist.json): every library must be "allowed", none may be
"denied" (checked in addition, and winning over "allowed"). "sanitizer_runtimes" count as
allowed only in a sanitizer build (--sanitized, or the binary links libasan). A binary marked
"required" (codespace-mcp) must be given and exist; a NAME without an allowlist entry is an error.

--ldd replaces ldd (the tests feed a fake one). Exit status 0 when every rule holds, 1 with one
line per problem, 2 on a usage error.
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ALLOWLIST = os.path.join(HERE, "deps-allowlist.json")
NOT_COUNTED = re.compile(r"^(linux-vdso|linux-gate|ld-linux|ld64)")


def lib_name(soname):
    base = os.path.basename(soname)
    m = re.match(r"^(.+?)\.so(\.|$)", base)
    return m.group(1) if m else base


def run_ldd(ldd, path):
    """-> (list of (name, soname), list of problems)."""
    try:
        r = subprocess.run([ldd, path], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    except OSError as e:
        return [], [f"cannot run {ldd}: {e.strerror}"]
    out = r.stdout + r.stderr
    if "not a dynamic executable" in out or "statically linked" in out:
        return [], []
    if r.returncode != 0:
        return [], [f"{ldd} {path} exited {r.returncode}: {out.strip()}"]
    libs, problems = [], []
    for line in out.splitlines():
        line = line.strip()
        if not line:
            continue
        soname = line.split()[0]
        if "=> not found" in line:
            problems.append(f"{soname} is not found by the loader")
        if NOT_COUNTED.match(os.path.basename(soname)):
            continue
        libs.append((lib_name(soname), soname))
    return libs, problems


def check(allow, binaries, ldd, sanitized):
    problems, report = [], []
    entries = allow.get("binaries", {})
    runtimes = allow.get("sanitizer_runtimes", {})
    for name, entry in entries.items():
        both = set(entry.get("allowed", {})) & set(entry.get("denied", {}))
        if both:
            problems.append(f"allowlist: {name}: {', '.join(sorted(both))} both allowed and "
                            "denied")
        if entry.get("required") and name not in binaries:
            problems.append(f"{name}: required but not given (was it built?)")
    for name in entries:
        if name not in binaries and not entries[name].get("required"):
            report.append(f"{name}: not built yet, nothing to check")
    for name, path in binaries.items():
        entry = entries.get(name)
        if entry is None:
            problems.append(f"{name}: no entry in the allowlist")
            continue
        if not os.path.isfile(path):
            problems.append(f"{name}: {path} does not exist")
            continue
        libs, ldd_problems = run_ldd(ldd, path)
        problems += [f"{name}: {p}" for p in ldd_problems]
        names = {n for n, _ in libs}
        san = sanitized or "libasan" in names
        allowed = dict(entry.get("allowed", {}))
        if san:
            allowed.update({k: v for k, v in runtimes.items() if k not in allowed})
        denied = entry.get("denied", {})
        for lib, soname in libs:
            if lib in denied:
                problems.append(f"{name}: links {soname}, which is denied: {denied[lib]}")
            elif lib not in allowed:
                problems.append(f"{name}: links {soname}, which is not in the allowlist"
                                + ("" if san else " (sanitizer runtimes are allowed only in a "
                                   "sanitizer build)"))
        report.append(f"{name}: {path}: {len(libs)} libraries checked"
                      f"{' (sanitizer build)' if san else ''}: "
                      + ", ".join(s for _, s in libs))
    return problems, report


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--allowlist", default=DEFAULT_ALLOWLIST)
    ap.add_argument("--ldd", default="ldd")
    ap.add_argument("--sanitized", action="store_true",
                    help="a sanitizer build: allow the sanitizer runtimes")
    ap.add_argument("binaries", nargs="*", metavar="NAME=PATH")
    args = ap.parse_intermixed_args(argv)

    binaries = {}
    for arg in args.binaries:
        if not arg:
            continue
        name, sep, path = arg.partition("=")
        if not sep or not name or not path:
            ap.error(f"expected NAME=PATH, got {arg!r}")
        binaries[name] = path
    try:
        with open(args.allowlist, encoding="utf-8") as f:
            allow = json.load(f)
    except (OSError, ValueError) as e:
        print(f"check_deps: cannot read the allowlist {args.allowlist}: {e}")
        return 2

    problems, report = check(allow, binaries, args.ldd, args.sanitized)
    for line in report:
        print(f"check_deps: {line}")
    for p in problems:
        print(f"check_deps: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
