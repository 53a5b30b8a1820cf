#!/usr/bin/python3
"""Check deploy/Containerfile's syntax and structure (issue 21); no image is built.

Usage: check_containerfile.py [FILE] [--bootstrap SCRIPT] [--bin PATH ...]

No container engine runs on these machines, so this reads the file instead:
1. Syntax: every instruction is a known one, continuation lines join, JSON-form arguments
   parse, and a build stage named in COPY --from exists.
2. Debian only: every FROM is debian:12 or debian:12-slim (or bookworm, bookworm-slim) or an
   earlier stage; nothing is fetched from elsewhere (no ADD of a URL, no curl, wget or git
   clone, no pip or npm install), and apt-get install uses --no-install-recommends.
3. Shape: at least two stages; the build stage runs cmake; the last stage installs no compiler,
   cmake or -dev package, copies only from an earlier stage (no source tree), and ends as a
   fixed non-root USER (numeric uid and gid, neither 0).
4. In step with scripts/bootstrap.sh: the build stage installs every library header package
   (-dev) and build tool the project's bootstrap list names, except the ones only tests, fuzzing
   and formatting need (TEST_ONLY), so a new build dependency cannot be forgotten here.
5. Libraries: with --bin (the built codespace-mcp, codespace-runtime, ...), every shared
   library the binary names (NEEDED entries and the ones it loads with dlopen, found as
   sonames in its bytes) must come from a package the last stage installs, or from libc6
   (part of the base image). The package of each soname is asked of dpkg -S, so this part is
   skipped, and said so, on a machine without dpkg.

Exit status 0 when every rule holds, 1 with one line per problem, 2 on a usage or read error.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_FILE = os.path.join(REPO, "deploy", "Containerfile")
DEFAULT_BOOTSTRAP = os.path.join(REPO, "scripts", "bootstrap.sh")
# Bootstrap packages the image's build does not need: tests (cmocka, yaml), fuzzing and
# sanitizers (clang and its runtime), formatting, and the git used by development scripts.
TEST_ONLY = {"libcmocka-dev", "libclang-rt-dev", "clang", "clang-format", "clang-tidy",
             "python3-yaml", "git", "nodejs", "npm"}
BUILD_TOOLS = {"gcc", "make", "cmake", "pkg-config", "ragel", "python3", "python3-jsonschema"}

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT",
                "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK",
                "SHELL", "MAINTAINER"}
BASES = re.compile(r"^(docker\.io/(library/)?)?debian:(12|12-slim|bookworm|bookworm-slim)$")
FETCHERS = re.compile(r"\b(curl|wget|git\s+clone|pip3?\s+install|npm\s+(install|ci)|"
                      r"apt-key|add-apt-repository)\b")
BUILD_ONLY = re.compile(r"^(gcc|g\+\+|clang.*|make|cmake|ragel|pkg-config|.*-dev)$")
BASE_PACKAGES = {"libc6"}
SONAME = re.compile(rb"(lib[A-Za-z0-9_+-]+\.so(?:\.[0-9]+)+)")


def instructions(text):
    """-> [(line number, INSTRUCTION, argument text)]; raises ValueError on a bad line."""
    out, cur, start = [], "", 0
    for n, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip()
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if cur and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if not cur:
            start = n
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        word, _, rest = cur.strip().partition(" ")
        if word.upper() not in INSTRUCTIONS:
            raise ValueError(f"line {start}: unknown instruction {word!r}")
        if word != word.upper():
            raise ValueError(f"line {start}: instruction {word!r} is not upper case")
        out.append((start, word, rest.strip()))
        cur = ""
    if cur:
        raise ValueError(f"line {start}: the file ends inside a continued line")
    return out


def apt_packages(run):
    """The packages an apt-get install in this RUN text installs."""
    pkgs = []
    for part in re.split(r"&&|;|\|\|", run):
        words = shlex.split(part)
        if len(words) >= 2 and words[0] == "apt-get" and "install" in words:
            pkgs += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return pkgs


def sonames(binary):
    with open(binary, "rb") as f:
        data = f.read()
    return sorted({m.decode() for m in SONAME.findall(data)})


def package_of(soname):
    """The Debian package holding soname in a system library directory, or None."""
    try:
        r = subprocess.run(["dpkg", "-S", soname], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    for line in r.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        if os.path.basename(path) == soname and re.match(r"^(/usr)?/lib/[^/]+-linux-gnu/", path):
            return pkg.split(":")[0]
    return None


def bootstrap_packages(path):
    """The package names in bootstrap.sh's PACKAGES="..." list."""
    with open(path, encoding="utf-8") as f:
        m = re.search(r'^PACKAGES="([^"]*)"', f.read(), re.M)
    if not m:
        raise ValueError(f"{path}: no PACKAGES=\"...\" list")
    return m.group(1).split()


def check(path, binaries, bootstrap=None):
    problems, notes = [], []
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        return [f"cannot read {path}: {e.strerror}"], notes
    try:
        ins = instructions(text)
    except ValueError as e:
        return [str(e)], notes

    stages = []  # [{"name", "from", "lines": [...]}]
    for n, word, arg in ins:
        if word == "FROM":
            m = re.match(r"^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", arg, re.I)
            if not m:
                problems.append(f"line {n}: FROM {arg!r}: expected IMAGE [AS NAME]")
                continue
            image, name = m.group(1), m.group(2)
            known = [s["name"] for s in stages if s["name"]]
            if image not in known and not BASES.match(image):
                problems.append(f"line {n}: FROM {image}: images come from Debian 12 only "
                                "(debian:12, debian:12-slim)")
            stages.append({"name": name, "from": image, "ins": []})
            continue
        if not stages:
            if word != "ARG":
                problems.append(f"line {n}: {word} before the first FROM")
            continue
        stages[-1]["ins"].append((n, word, arg))
        if arg.startswith("[") and word in ("RUN", "CMD", "ENTRYPOINT", "SHELL", "VOLUME"):
            try:
                v = json.loads(arg)
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    raise ValueError
            except ValueError:
                problems.append(f"line {n}: {word} {arg!r}: not a JSON array of strings")
        if word == "ADD" and re.search(r"\b(https?|git)://|\.git\b", arg):
            problems.append(f"line {n}: ADD {arg!r} fetches from outside; use Debian packages")
        if word == "RUN":
            m = FETCHERS.search(arg)
            if m:
                problems.append(f"line {n}: RUN fetches with {m.group(0)!r}; Debian packages only")
            if "apt-get install" in arg and "--no-install-recommends" not in arg:
                problems.append(f"line {n}: apt-get install without --no-install-recommends")
        if word == "COPY":
            m = re.search(r"--from=(\S+)", arg)
            if m and m.group(1) not in [s["name"] for s in stages[:-1]] \
                    and not m.group(1).isdigit():
                problems.append(f"line {n}: COPY --from={m.group(1)} names no earlier stage")

    if len(stages) < 2:
        problems.append(f"{len(stages)} stage(s): a build stage and a slim runtime stage are needed")
        return problems, notes
    if not any(w == "RUN" and "cmake" in a for s in stages[:-1] for _, w, a in s["ins"]):
        problems.append("no build stage runs cmake")

    if bootstrap:
        try:
            wanted = [p for p in bootstrap_packages(bootstrap) if p not in TEST_ONLY
                      and (p.endswith("-dev") or p in BUILD_TOOLS)]
        except (OSError, ValueError) as e:
            return problems + [str(e)], notes
        built = {p for s in stages[:-1] for _, w, a in s["ins"] if w == "RUN"
                 for p in apt_packages(a)}
        for p in wanted:
            if p not in built:
                problems.append(f"scripts/bootstrap.sh needs {p} to build, but no build stage "
                                "installs it")

    last = stages[-1]
    installed = []
    for n, word, arg in last["ins"]:
        if word == "RUN":
            for p in apt_packages(arg):
                installed.append(p)
                if BUILD_ONLY.match(p):
                    problems.append(f"line {n}: the runtime stage installs {p}, a build tool or "
                                    "header package")
        if word in ("COPY", "ADD") and "--from=" not in arg:
            problems.append(f"line {n}: the runtime stage copies {arg!r} from the build "
                            "context; only built files from an earlier stage belong there")
    users = [(n, a) for n, w, a in last["ins"] if w == "USER"]
    if not users:
        problems.append("the runtime stage sets no USER: it would run as root")
    else:
        n, user = users[-1]
        uid, _, gid = user.partition(":")
        if not uid.isdigit() or uid == "0" or (gid and (not gid.isdigit() or gid == "0")):
            problems.append(f"line {n}: USER {user!r}: must be a numeric non-root uid:gid "
                            "(Kubernetes runAsNonRoot checks numbers)")
        later = [w for m, w, _ in last["ins"] if m > n and w == "RUN"]
        if later:
            problems.append(f"line {n}: RUN after USER in the runtime stage")

    if binaries:
        have_dpkg = subprocess.run(["sh", "-c", "command -v dpkg"], capture_output=True).returncode == 0
        if not have_dpkg:
            notes.append("no dpkg here: the runtime packages were not checked against the "
                         "binaries' libraries")
        else:
            for b in binaries:
                for so in sonames(b):
                    pkg = package_of(so)
                    if pkg is None:
                        problems.append(f"{os.path.basename(b)} loads {so}, which no installed "
                                        "Debian package provides")
                    elif pkg not in installed and pkg not in BASE_PACKAGES:
                        problems.append(f"{os.path.basename(b)} loads {so} (package {pkg}), "
                                        "which the runtime stage does not install")
    return problems, notes


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=DEFAULT_FILE)
    ap.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP)
    ap.add_argument("--bin", action="append", default=[])
    args = ap.parse_args(argv)
    problems, notes = check(args.file, args.bin, args.bootstrap)
    for n in notes:
        print(f"check_containerfile: note: {n}")
    for p in problems:
        print(f"check_containerfile: {args.file}: {p}")
    if problems:
        return 1
    print(f"check_containerfile: {args.file}: ok (Debian 12 stages, no outside fetches, slim "
          f"non-root runtime stage, libraries of {len(args.bin)} binaries covered)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
