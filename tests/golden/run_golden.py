#!/usr/bin/python3
"""Golden schema conformance: Python jsonschema is the oracle, the generated C decoder must agree.

    /usr/bin/python3 tests/golden/run_golden.py --checker build/release/tests/golden/golden_check \
        --schema-dir schema --golden-dir tests/golden [-v]

Layout: tests/golden/<type>/valid/*.json and tests/golden/<type>/invalid/*.json, one JSON
document (the instance) per file, <type> being the top-level type name csgen gives the schema
(gen/csgen.py --list: the path under schema/ without ".json", every run of other characters than
[A-Za-z0-9] replaced by "_", e.g. mcp/read.input.json -> mcp_read_input).

Every invalid case records where it must be rejected: beside <name>.json, <name>.pointer holds
one line, the RFC 6901 JSON pointer of the offending value (an empty line for the whole
document; for a missing required member, the pointer the member would have). Both validators
must reject the case there: the C decoder's diagnostic location (golden_check prints it) and
the oracle's, which is best_match's error path with two readings that make it name the same
place: a `required` error points at the missing member rather than its object, and a
oneOf/anyOf error stands for the errors of the branch its tag (a const member) selects. The C
decoder stops at its first error, which must be at the recorded pointer; the oracle reports
every error, and one of them must be at the recorded pointer. A case rejected elsewhere fails:
it may be rejected for another reason than the one it was written for.

Every case is validated with Draft202012Validator (cross-file $refs resolve through a store keyed
by each schema's $id), then all cases go to golden_check in one batch. The run fails when:
  - the oracle and the C decoder disagree on a case;
  - an invalid case has no .pointer file, or either validator rejects it at another pointer;
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


def _pointer(parts):
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _location(err):
    """The instance path err is about, as a list: a `required` error names the missing member."""
    parts = list(err.absolute_path)
    if err.validator == "required" and isinstance(err.instance, dict):
        missing = [k for k in err.validator_value if k not in err.instance]
        named = [k for k in missing if err.message.startswith(repr(k) + " ")]
        if named or missing:
            parts.append((named or missing)[0])
    return parts


def _is_tag_error(e, depth):
    """e is a branch's error on a member of the union's object whose schema is a const (a tag),
    the member being wrong or missing."""
    loc = _location(e)
    if len(loc) != depth + 1 or not isinstance(e.schema, dict):
        return False
    if e.validator == "required":
        member = e.schema.get("properties", {}).get(loc[-1])
        return isinstance(member, dict) and "const" in member
    return "const" in e.schema


def _leaves(err):
    """The errors err stands for. A oneOf/anyOf error stands for the errors of the branch its
    tag selects (the branches whose const members all match); when no branch's tag matches, for
    the tag errors; when several branches remain (an untagged union), for itself."""
    if err.validator not in ("oneOf", "anyOf") or not err.context:
        return [err]
    depth = len(err.absolute_path)
    branches = {}
    for e in err.context:
        branches.setdefault(e.relative_schema_path[0], []).append(e)
    tagged = {i: es for i, es in branches.items() if not any(_is_tag_error(e, depth) for e in es)}
    if len(tagged) == 1:
        (errs,) = tagged.values()
        return [leaf for e in errs for leaf in _leaves(e)]
    if not tagged:
        return [e for es in branches.values() for e in es if _is_tag_error(e, depth)]
    return [err]


def oracle(validator, instance):
    """(accepted, pointers, why): every pointer at which the instance is rejected, and the
    best-matching error as text."""
    errors = list(validator.iter_errors(instance))
    if not errors:
        return True, set(), ""
    pointers = {_pointer(_location(leaf)) for e in errors for leaf in _leaves(e)}
    best = best_match(errors)
    leaves = _leaves(best)
    best = best_match(leaves) if len(leaves) > 1 else leaves[0]
    ptr = _pointer(_location(best))
    msg = best.message
    if len(msg) > 160:
        msg = msg[:157] + "..."
    return False, pointers, f"{ptr or '/'}: {msg}"


def read_pointer(case_path):
    """The pointer an invalid case records (see the module docstring), None when it has no
    .pointer file, or raise Unusable."""
    path = case_path[: -len(".json")] + ".pointer"
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Unusable(f"{os.path.basename(path)} is not UTF-8") from None
    if not text.endswith("\n") or "\n" in text[:-1] or "\r" in text:
        raise Unusable(f"{os.path.basename(path)}: want exactly one line")
    ptr = text[:-1]
    if ptr and not ptr.startswith("/"):
        raise Unusable(f"{os.path.basename(path)}: {ptr!r} is not a JSON pointer")
    return ptr


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
                if fn.endswith(".pointer") and os.path.isfile(path):
                    if kind != "invalid":
                        problems.append(f"{entry}/{kind}/{fn}: a pointer beside a valid case")
                    elif not os.path.isfile(path[: -len(".pointer")] + ".json"):
                        problems.append(f"{entry}/{kind}/{fn}: no case of that name")
                    continue
                if not fn.endswith(".json") or not os.path.isfile(path):
                    problems.append(f"{entry}/{kind}/{fn}: not a .json case file")
                    continue
                if "\t" in path or "\n" in path:
                    problems.append(f"{entry}/{kind}/{fn}: tab or newline in the file name")
                    continue
                cases.append((schema, kind, os.path.abspath(path)))
    return cases


def run_checker(checker, batch):
    """{path: (accepted, pointer, text)} from golden_check for batch [(type, path)]."""
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
            verdicts[fields[1]] = (True, None, "")
        elif fields[0] == "reject" and len(fields) == 4:
            verdicts[fields[1]] = (False, fields[2], fields[3])
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
    judged = []  # (schema, kind, path, rel, expected pointer, oracle_ok, oracle_ptr, oracle_why)
    passed = failed = 0
    for schema, kind, path in cases:
        rel = os.path.relpath(path, args.golden_dir)
        counts[schema.name][kind] += 1
        try:
            instance = load_case(path)
            want = read_pointer(path) if kind == "invalid" else None
        except Unusable as e:
            print(f"UNUSABLE {rel}: {e}")
            failed += 1
            continue
        ok, o_ptr, why = oracle(schema.validator, instance)
        judged.append((schema, kind, path, rel, want, ok, o_ptr, why))

    verdicts = run_checker(args.checker, [(j[0].name, j[2]) for j in judged])
    for schema, kind, path, rel, want, ok, o_ptr, why in judged:
        if path not in verdicts:
            print(f"NO VERDICT {rel}: golden_check printed nothing for it")
            failed += 1
            continue
        c_ok, c_ptr, c_text = verdicts[path]
        c_why = f"{c_ptr or '/'}: {c_text}"
        bad = False
        if ok != c_ok:
            o_text = "accept" if ok else f"reject ({why})"
            c_verdict = "accept" if c_ok else f"reject ({c_why})"
            print(f"DISAGREE {rel}: oracle {o_text}, C {c_verdict}")
            bad = True
        if ok != (kind == "valid"):
            detail = f"the oracle rejects it: {why}" if not ok else "the oracle accepts it"
            print(f"MISLABELLED {rel}: under {kind}/ but {detail}")
            bad = True
        if kind == "invalid" and want is None:
            print(f"NO POINTER {rel}: record where it must be rejected in "
                  f"{os.path.basename(path)[:-5]}.pointer (C rejects it at {c_ptr!r}, the "
                  f"oracle at {' '.join(repr(q) for q in sorted(o_ptr))})")
            bad = True
        elif kind == "invalid":
            if not ok and want not in o_ptr:
                print(f"WRONG POINTER {rel}: recorded {want!r}, the oracle rejects it at "
                      f"{' '.join(repr(q) for q in sorted(o_ptr))} ({why})")
                bad = True
            if not c_ok and c_ptr != want:
                print(f"WRONG POINTER {rel}: recorded {want!r}, C rejects it at {c_ptr!r} "
                      f"({c_why})")
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
