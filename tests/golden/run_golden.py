#!/usr/bin/python3
"""Golden schema conformance: Python jsonschema is the oracle, the generated C decoder must agree.

    /usr/bin/python3 tests/golden/run_golden.py --checker build/release/tests/golden/golden_check \
        --schema-dir schema --golden-dir tests/golden [-v]

Layout: tests/golden/<type>/valid/*.json and tests/golden/<type>/invalid/*.json, one JSON
document (the instance) per file, <type> being the top-level type name csgen gives the schema
(gen/csgen.py --list: the path under schema/ without ".json", every run of other characters than
[A-Za-z0-9] replaced by "_", e.g. mcp/read.input.json -> mcp_read_input).

Every case is validated with Draft202012Validator (cross-file $refs resolve through a store keyed
by each schema's $id), then all cases go to golden_check in one batch. The run fails when:
  - the oracle and the C decoder disagree on a case;
  - a case is mislabelled (valid/ rejected or invalid/ accepted by the oracle);
  - a case cannot serve as a case: not UTF-8 JSON, or content jansson parses differently from
    Python (integers beyond int64, NaN/Infinity, overflowing reals, lone surrogates, NUL in an
    object key, duplicate keys);
  - a golden directory names no schema, a schema has no golden directory, a tool input schema
    has fewer than 10 cases, or a schema has no valid case.
The last line is "golden: N passed, M failed" (N: cases where oracle, C and label agree).

Standard library plus Debian's python3-jsonschema only.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys

from jsonschema import Draft202012Validator, RefResolver
from jsonschema.exceptions import best_match

MIN_TOOL_INPUT_CASES = 10
INT64_MIN = -(2 ** 63)
INT64_MAX = 2 ** 63 - 1
KINDS = ("valid", "invalid")


def type_name(rel):
    """The csgen top-level name of schema file rel (relative to the schema dir)."""
    base = re.sub(r"\.json$", "", rel)
    return re.sub(r"[^A-Za-z0-9]+", "_", base).strip("_").lower()


class Schema:
    def __init__(self, rel, doc):
        self.rel = rel
        self.doc = doc
        self.name = type_name(rel)
        self.id = doc.get("$id")
        tool = doc.get("x-cs-tool")
        self.tool_input = isinstance(tool, dict) and doc.get("x-cs-direction") == "input"
        self.validator = None


def load_schemas(schema_dir):
    schemas = []
    for dirpath, dirnames, filenames in os.walk(schema_dir):
        dirnames.sort()
        for fn in sorted(filenames):
            if not fn.endswith(".json"):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, schema_dir).replace(os.sep, "/")
            with open(path, "rb") as f:
                doc = json.loads(f.read().decode("utf-8"))
            schemas.append(Schema(rel, doc))
    store = {}
    for s in schemas:
        if not s.id:
            raise SystemExit(f"run_golden: schema/{s.rel} has no $id")
        Draft202012Validator.check_schema(s.doc)
        store[s.id] = s.doc
    for s in schemas:
        resolver = RefResolver(base_uri=s.id, referrer=s.doc, store=store)
        s.validator = Draft202012Validator(s.doc, resolver=resolver)
    return schemas


class Unusable(Exception):
    """A case file that cannot serve as a case (see the module docstring)."""


def _reject_constant(name):
    raise Unusable(f"{name} is not JSON (jansson rejects it)")


def _pairs(pairs):
    keys = set()
    for k, _ in pairs:
        if k in keys:
            raise Unusable(f"duplicate key {k!r}")
        keys.add(k)
    return dict(pairs)


def _check_portable(v, where="/"):
    """Raise Unusable for content jansson would parse differently from Python's json."""
    if isinstance(v, bool) or v is None:
        return
    if isinstance(v, int):
        if not INT64_MIN <= v <= INT64_MAX:
            raise Unusable(f"{where}: integer beyond int64 (jansson rejects it)")
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise Unusable(f"{where}: real overflows a double (jansson rejects it)")
    elif isinstance(v, str):
        if any(0xD800 <= ord(ch) <= 0xDFFF for ch in v):
            raise Unusable(f"{where}: lone surrogate (jansson rejects it)")
    elif isinstance(v, list):
        for i, item in enumerate(v):
            _check_portable(item, f"{where.rstrip('/')}/{i}")
    elif isinstance(v, dict):
        for k, item in v.items():
            _check_portable(k, where)
            if "\0" in k:
                raise Unusable(f"{where}: NUL byte in an object key (jansson rejects it)")
            tok = k.replace("~", "~0").replace("/", "~1")
            _check_portable(item, f"{where.rstrip('/')}/{tok}")


def load_case(path):
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_pairs)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise Unusable(f"not UTF-8 JSON: {e}") from None
    _check_portable(doc)
    return doc


def oracle(validator, instance):
    """(accepted, why): why names the best-matching error when rejected."""
    err = best_match(validator.iter_errors(instance))
    if err is None:
        return True, ""
    ptr = "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in err.absolute_path)
    msg = err.message
    if len(msg) > 160:
        msg = msg[:157] + "..."
    return False, f"{ptr or '/'}: {msg}"


def collect_cases(golden_dir, by_name, problems):
    """[(schema, kind, path)] for every case; structural problems are appended to problems."""
    cases = []
    for entry in sorted(os.listdir(golden_dir)):
        tdir = os.path.join(golden_dir, entry)
        if not os.path.isdir(tdir) or entry.startswith(".") or entry == "__pycache__":
            continue
        schema = by_name.get(entry)
        if schema is None:
            problems.append(f"{entry}/: golden directory names no schema")
            continue
        for sub in sorted(os.listdir(tdir)):
            if sub not in KINDS:
                problems.append(f"{entry}/{sub}: unexpected entry (only valid/ and invalid/)")
        for kind in KINDS:
            kdir = os.path.join(tdir, kind)
            if not os.path.isdir(kdir):
                continue
            for fn in sorted(os.listdir(kdir)):
                path = os.path.join(kdir, fn)
                if not fn.endswith(".json") or not os.path.isfile(path):
                    problems.append(f"{entry}/{kind}/{fn}: not a .json case file")
                    continue
                if "\t" in path or "\n" in path:
                    problems.append(f"{entry}/{kind}/{fn}: tab or newline in the file name")
                    continue
                cases.append((schema, kind, os.path.abspath(path)))
    return cases


def run_checker(checker, batch):
    """{path: (accepted, diagnostic)} from golden_check for batch [(type, path)]."""
    text = "".join(f"{t}\t{p}\n" for t, p in batch)
    proc = subprocess.run([checker], input=text.encode("utf-8"), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=False)
    sys.stderr.write(proc.stderr.decode("utf-8", "replace"))
    if proc.returncode != 0:
        raise SystemExit(f"run_golden: {checker} exited with status {proc.returncode}")
    verdicts = {}
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        fields = line.split("\t")
        if fields[0] == "accept" and len(fields) == 2:
            verdicts[fields[1]] = (True, "")
        elif fields[0] == "reject" and len(fields) == 3:
            verdicts[fields[1]] = (False, fields[2])
        else:
            raise SystemExit(f"run_golden: unexpected checker output: {line!r}")
    return verdicts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checker", required=True, help="path to the golden_check program")
    ap.add_argument("--schema-dir", required=True)
    ap.add_argument("--golden-dir", required=True)
    ap.add_argument("-v", "--verbose", action="store_true", help="print every verdict")
    args = ap.parse_args()

    schemas = load_schemas(args.schema_dir)
    by_name = {s.name: s for s in schemas}
    problems = []
    cases = collect_cases(args.golden_dir, by_name, problems)

    counts = {s.name: {"valid": 0, "invalid": 0} for s in schemas}
    judged = []  # (schema, kind, path, rel, oracle_ok, oracle_why)
    passed = failed = 0
    for schema, kind, path in cases:
        rel = os.path.relpath(path, args.golden_dir)
        counts[schema.name][kind] += 1
        try:
            instance = load_case(path)
        except Unusable as e:
            print(f"UNUSABLE {rel}: {e}")
            failed += 1
            continue
        ok, why = oracle(schema.validator, instance)
        judged.append((schema, kind, path, rel, ok, why))

    verdicts = run_checker(args.checker, [(s.name, p) for s, _, p, _, _, _ in judged])
    for schema, kind, path, rel, ok, why in judged:
        if path not in verdicts:
            print(f"NO VERDICT {rel}: golden_check printed nothing for it")
            failed += 1
            continue
        c_ok, c_why = verdicts[path]
        bad = False
        if ok != c_ok:
            o_text = "accept" if ok else f"reject ({why})"
            c_text = "accept" if c_ok else f"reject ({c_why})"
            print(f"DISAGREE {rel}: oracle {o_text}, C {c_text}")
            bad = True
        if ok != (kind == "valid"):
            detail = f"the oracle rejects it: {why}" if not ok else "the oracle accepts it"
            print(f"MISLABELLED {rel}: under {kind}/ but {detail}")
            bad = True
        if bad:
            failed += 1
        else:
            passed += 1
            if args.verbose:
                print(f"ok {rel}: {'accept' if ok else 'reject (' + c_why + ')'}")

    for s in schemas:
        n = counts[s.name]
        total = n["valid"] + n["invalid"]
        if total == 0:
            problems.append(f"{s.name}: schema/{s.rel} has no golden directory or no cases")
            continue
        if n["valid"] == 0:
            problems.append(f"{s.name}: no valid case")
        if s.tool_input and total < MIN_TOOL_INPUT_CASES:
            problems.append(f"{s.name}: tool input schema has {total} cases, needs at least "
                            f"{MIN_TOOL_INPUT_CASES}")
        if args.verbose:
            print(f"{s.name}: {n['valid']} valid, {n['invalid']} invalid")

    for p in problems:
        print(f"STRUCTURE {p}")
    print(f"golden: {passed} passed, {failed} failed")
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
