#!/usr/bin/python3
"""Differential test of apply_patch against the reference implementation.

The reference is the `apply_patch` command of the Codex CLI: the native binary in the npm
package @openai/codex (pinned below; its platform package @openai/codex-linux-x64 carries it)
behaves as `apply_patch` when invoked under that name, with the patch text as its argument, in
the target directory. It is installed once into a cache under the build tree
($CS_NPM_CACHE_DIR, else <repo>/build/npm-cache, ignored by git), and a symlink named
`apply_patch` pointing at it is made there.

For every case of a corpus (hand-written cases covering each V4A rule, then generated ones from
a seeded PRNG: random files and random edits rendered as V4A), two fresh copies of the initial
tree are made; the reference runs in copy A, and CodeSpace (`codespace-mcp --workspace B
--operations-db <outside B>` over stdio, one server per case) applies the same text through the
apply_patch tool. Accept/reject must agree (reference exit status 0 vs our status "applied"),
and when both accept every file must be byte-identical. Cases where CodeSpace differs on
purpose are listed in EXPECTED with the reason (docs/patch-differences.md); they must still
differ in the documented way, so a change in either implementation shows up.

Outside CI (CI unset or not "true"/"1") a missing npm or an unreachable registry skips with
exit status 77; in CI it fails. Standard library only. Run:
    /usr/bin/python3 tests/patch_diff/run_diff.py --bin build/release/src/main/codespace-mcp
Options: -v (print every case), --only NAME (one case), --keep (keep the temporary trees),
--seed N and --generated N (another or a larger generated corpus).
"""
import argparse
import fcntl
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import mcp_stdio  # noqa: E402  (the shared stdio test client)

CODEX_VERSION = "0.171.0"
SKIP = 77
REF_TIMEOUT = 30.0
SEED = 20261129
GENERATED = 170

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def in_ci():
    return os.environ.get("CI", "") in ("true", "1")


def skip_or_fail(msg):
    if in_ci():
        print("run_diff.py: FAIL: %s (CI is set: prerequisites are required)" % msg,
              file=sys.stderr)
        sys.exit(1)
    print("run_diff.py: SKIP: %s" % msg, file=sys.stderr)
    sys.exit(SKIP)


# ---------------------------------------------------------------------------------------------
# The reference binary
# ---------------------------------------------------------------------------------------------

def find_codex(cache):
    base = os.path.join(cache, "node_modules", "@openai")
    if not os.path.isdir(base):
        return None
    for d, _, files in os.walk(base):
        if "codex" in files and os.sep + "vendor" + os.sep in d + os.sep:
            p = os.path.join(d, "codex")
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    return None


def reference_command():
    root = os.environ.get("CS_NPM_CACHE_DIR") or os.path.join(REPO, "build", "npm-cache")
    cache = os.path.join(root, "codex-" + CODEX_VERSION)
    os.makedirs(cache, exist_ok=True)
    link = os.path.join(cache, "bin", "apply_patch")
    with open(os.path.join(root, ".codex.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two presets installing at once must not interleave
        codex = find_codex(cache)
        if codex is None:
            if shutil.which("npm") is None:
                skip_or_fail("npm is not on PATH (scripts/bootstrap.sh installs it)")
            with open(os.path.join(cache, "package.json"), "w") as f:
                json.dump({"name": "codespace-codex-cache", "private": True,
                           "description": "Installed by tests/patch_diff/run_diff.py; "
                                          "safe to delete.",
                           "dependencies": {"@openai/codex": CODEX_VERSION}}, f, indent=2)
            print("run_diff.py: installing @openai/codex@%s into %s" % (CODEX_VERSION, cache))
            log = os.path.join(cache, "npm-install.log")
            with open(log, "w") as out:
                rc = subprocess.call(["npm", "install", "--no-audit", "--no-fund",
                                      "--loglevel=error"], cwd=cache, stdout=out,
                                     stderr=subprocess.STDOUT)
            if rc != 0:
                with open(log) as f:
                    sys.stderr.write(f.read())
                skip_or_fail("npm install failed (is the npm registry reachable?)")
            codex = find_codex(cache)
            if codex is None:
                print("run_diff.py: no codex binary under %s/node_modules/@openai" % cache,
                      file=sys.stderr)
                sys.exit(1)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if not (os.path.islink(link) and os.readlink(link) == codex):
            tmp = link + ".tmp"
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(codex, tmp)
            os.replace(tmp, link)
    return link


def run_reference(cmd, tree, text):
    """(accepted, output) of `apply_patch TEXT` run in tree."""
    p = subprocess.run([cmd, text], cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=REF_TIMEOUT, env={"PATH": "/usr/bin:/bin", "HOME": tree,
                                                 "LANG": "C.UTF-8"})
    return p.returncode == 0, p.stdout.decode("utf-8", "replace").strip()


# ---------------------------------------------------------------------------------------------
# CodeSpace over stdio
# ---------------------------------------------------------------------------------------------

class Server(mcp_stdio.StdioServer):
    def __init__(self, binary, args, state_dir):
        super().__init__(binary, args, state_dir, client="patch_diff")

    def apply(self, text):
        """(accepted, detail)."""
        out, err = self.call_raw("apply_patch", {"workspace_id": "default", "patch": text})
        if err is not None:
            return False, "%s: %s" % (err.get("code"), err.get("message"))
        return out.get("status") == "applied", out.get("status")


# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------

def P(*body):
    """A patch: Begin, the body lines, End, each followed by "\\n"."""
    return "*** Begin Patch\n" + "".join(line + "\n" for line in body) + "*** End Patch\n"


def lines(*ls):
    return "".join(x + "\n" for x in ls)


TEN = lines(*["line %d" % i for i in range(1, 11)])
CODE = lines("def f():", "    x = 1", "    return x", "", "def g():", "    y = 2",
             "    return y", "", "def h():", "    z = 3", "    return z")


def hand_cases():
    """(name, {path: bytes or str}, patch text)."""
    c = []

    def add(name, files, text):
        c.append((name, files, text))

    # --- Add ---
    add("add_simple", {}, P("*** Add File: a.txt", "+hello", "+world"))
    add("add_nested_dirs", {}, P("*** Add File: x/y/z/a.txt", "+deep"))
    add("add_empty", {}, P("*** Add File: empty.txt"))
    add("add_line_with_plus", {}, P("*** Add File: a.txt", "++x", "+ y", "+-z"))
    add("add_utf8", {}, P("*** Add File: u.txt", "+héllo “world” — ok"))
    add("add_two_files", {}, P("*** Add File: a.txt", "+a", "*** Add File: b.txt", "+b"))
    add("add_existing", {"a.txt": "old\n"}, P("*** Add File: a.txt", "+new"))
    add("add_blank_body_line", {}, P("*** Add File: a.txt", "+a", "", "+b"))
    add("add_body_without_plus", {}, P("*** Add File: a.txt", "+a", "b"))
    add("add_trailing_ws_line", {}, P("*** Add File: a.txt", "+a  ", "+\tb"))
    # --- Delete ---
    add("delete_simple", {"a.txt": "x\n", "b.txt": "y\n"}, P("*** Delete File: a.txt"))
    add("delete_nested", {"d/e/a.txt": "x\n"}, P("*** Delete File: d/e/a.txt"))
    add("delete_missing", {"b.txt": "y\n"}, P("*** Delete File: a.txt"))
    add("delete_then_update_other", {"a.txt": "x\n", "b.txt": "1\n2\n"},
        P("*** Delete File: a.txt", "*** Update File: b.txt", "-2", "+two"))
    # --- Update: one chunk ---
    add("update_replace_one", {"f.txt": TEN}, P("*** Update File: f.txt", "@@", " line 4",
                                                 "-line 5", "+line five", " line 6"))
    add("update_no_at_first_chunk", {"f.txt": TEN},
        P("*** Update File: f.txt", " line 4", "-line 5", "+line five", " line 6"))
    add("update_only_minus_plus", {"f.txt": TEN},
        P("*** Update File: f.txt", "-line 7", "+line seven"))
    add("update_delete_lines", {"f.txt": TEN},
        P("*** Update File: f.txt", "@@", " line 2", "-line 3", "-line 4", " line 5"))
    add("update_insert_between", {"f.txt": TEN},
        P("*** Update File: f.txt", "@@", " line 2", "+line 2.5", " line 3"))
    add("update_first_line", {"f.txt": TEN},
        P("*** Update File: f.txt", "-line 1", "+line one", " line 2"))
    add("update_last_line", {"f.txt": TEN},
        P("*** Update File: f.txt", " line 9", "-line 10", "+line ten"))
    add("update_last_line_eof", {"f.txt": TEN},
        P("*** Update File: f.txt", " line 9", "-line 10", "+line ten", "*** End of File"))
    add("update_eof_wrong", {"f.txt": TEN},
        P("*** Update File: f.txt", " line 4", "-line 5", "+x", "*** End of File"))
    add("update_eof_append", {"f.txt": TEN},
        P("*** Update File: f.txt", " line 10", "+line 11", "*** End of File"))
    add("update_no_final_newline", {"f.txt": "a\nb\nc"},
        P("*** Update File: f.txt", " a", "-b", "+B", " c"))
    add("update_no_final_newline_last", {"f.txt": "a\nb\nc"},
        P("*** Update File: f.txt", " b", "-c", "+C"))
    add("update_empty_result", {"f.txt": "a\n"}, P("*** Update File: f.txt", "-a"))
    add("update_context_not_found", {"f.txt": TEN},
        P("*** Update File: f.txt", " line 4", "-line 55", "+x"))
    add("update_missing_file", {}, P("*** Update File: f.txt", "-a", "+b"))
    add("update_no_chunks", {"f.txt": TEN}, P("*** Update File: f.txt"))
    add("update_at_without_lines", {"f.txt": TEN}, P("*** Update File: f.txt", "@@"))
    add("update_blank_context_line", {"f.txt": CODE},
        P("*** Update File: f.txt", "     return x", "", "-def g():", "+def g2():"))
    add("update_trailing_blank_context", {"f.txt": TEN},
        P("*** Update File: f.txt", " line 9", "-line 10", "+line ten", ""))
    add("update_utf8", {"f.txt": "α\nβ\nγ\n"}, P("*** Update File: f.txt", " α", "-β", "+Β"))
    # --- several chunks, @@ seeking ---
    add("update_two_chunks", {"f.txt": TEN},
        P("*** Update File: f.txt", "@@", " line 1", "-line 2", "+two", "@@", " line 8",
          "-line 9", "+nine"))
    add("update_three_chunks_no_first_at", {"f.txt": TEN},
        P("*** Update File: f.txt", "-line 1", "+one", "@@", "-line 5", "+five", "@@",
          "-line 10", "+ten"))
    add("update_nested_at", {"f.txt": CODE},
        P("*** Update File: f.txt", "@@ def g():", "@@     return y", "+    # after g",
          " ", "-def h():", "+def h2():"))
    add("update_nested_at_then_lines", {"f.txt": CODE},
        P("*** Update File: f.txt", "@@ def h():", "@@", "-    z = 3", "+    z = 4"))
    add("update_chunks_out_of_order", {"f.txt": TEN},
        P("*** Update File: f.txt", "@@", "-line 8", "+eight", "@@", "-line 2", "+two"))
    add("seek_at_context", {"f.txt": CODE},
        P("*** Update File: f.txt", "@@ def g():", "-    return y", "+    return y + 1"))
    add("seek_disambiguates", {"f.txt": lines("a", "x", "b", "x", "c", "x")},
        P("*** Update File: f.txt", "@@ c", "-x", "+X"))
    add("seek_two", {"f.txt": CODE},
        P("*** Update File: f.txt", "@@ def f():", "-    return x", "+    return -x",
          "@@ def h():", "-    return z", "+    return -z"))
    add("seek_not_found", {"f.txt": CODE},
        P("*** Update File: f.txt", "@@ def nope():", "-    return x", "+    return -x"))
    add("seek_first_match_wins", {"f.txt": lines("x", "a", "x", "a")},
        P("*** Update File: f.txt", "-a", "+A"))
    add("seek_ws_only", {"f.txt": TEN},
        P("*** Update File: f.txt", "@@   ", "-line 3", "+three"))
    add("unified_hunk_header", {"f.txt": TEN},
        P("*** Update File: f.txt", "@@ -1,3 +1,3 @@", "-line 2", "+two"))
    add("pure_insert_no_at", {"f.txt": TEN}, P("*** Update File: f.txt", "+line 11"))
    add("pure_insert_with_at", {"f.txt": TEN},
        P("*** Update File: f.txt", "@@ line 3", "+line 3.5"))
    # --- matching strategies ---
    add("match_exact", {"f.txt": "a \nb\n"}, P("*** Update File: f.txt", " a ", "-b", "+B"))
    add("match_trailing_ws", {"f.txt": "a  \nb\t\nc\n"},
        P("*** Update File: f.txt", " a", "-b", "+B", " c"))
    add("match_trailing_ws_minus_only", {"f.txt": "a  \nb\t\nc\n"},
        P("*** Update File: f.txt", "-b", "+B"))
    add("match_leading_ws", {"f.txt": "    a\n  b\nc\n"},
        P("*** Update File: f.txt", "-b", "+B", " c"))
    add("match_leading_ws_minus_only", {"f.txt": "    a\n  b\nc\n"},
        P("*** Update File: f.txt", "-  a", "+A"))
    add("match_punct_dash", {"f.txt": "x \u2014 y\nz\n"},
        P("*** Update File: f.txt", "-x - y", "+X"))
    add("match_punct_quotes", {"f.txt": "say \u201chi\u201d and \u2018yo\u2019\n"},
        P("*** Update File: f.txt", "-say \"hi\" and 'yo'", "+said"))
    add("match_punct_nbsp", {"f.txt": "a\u00a0b\n"}, P("*** Update File: f.txt", "-a b", "+c"))
    add("match_punct_context_kept", {"f.txt": "x \u2014 y\nz\n"},
        P("*** Update File: f.txt", " x - y", "-z", "+Z"))
    add("match_unicode_em_space", {"f.txt": "a\u2003b\n"},
        P("*** Update File: f.txt", "-a b", "+c"))
    add("match_loose_context_kept", {"f.txt": "a  \nb\n"},
        P("*** Update File: f.txt", " a", "-b", "+B"))
    add("match_exact_preferred", {"f.txt": "a \nz\na\nz\n"},
        P("*** Update File: f.txt", "-a", "+A"))
    # --- move ---
    add("move_only", {"a.txt": "same\n"},
        P("*** Update File: a.txt", "*** Move to: b/c.txt", "@@", " same"))
    add("move_and_edit", {"a.txt": TEN},
        P("*** Update File: a.txt", "*** Move to: moved.txt", "@@", "-line 3", "+three"))
    add("move_dest_exists", {"a.txt": "a\n", "b.txt": "b\n"},
        P("*** Update File: a.txt", "*** Move to: b.txt", "-a", "+A"))
    add("move_missing_source", {}, P("*** Update File: a.txt", "*** Move to: b.txt", "-a"))
    add("move_no_chunks", {"a.txt": "a\n"}, P("*** Update File: a.txt", "*** Move to: b.txt"))
    add("move_twice", {"a.txt": "a\n"},
        P("*** Update File: a.txt", "*** Move to: b.txt", "*** Move to: c.txt", "-a"))
    add("move_to_self", {"a.txt": "a\n"},
        P("*** Update File: a.txt", "*** Move to: a.txt", "-a", "+A"))
    # --- CRLF ---
    add("crlf_file_replace", {"f.txt": b"a\r\nb\r\nc\r\n"},
        P("*** Update File: f.txt", " a", "-b", "+B", " c"))
    add("crlf_file_delete_line", {"f.txt": b"a\r\nb\r\nc\r\n"},
        P("*** Update File: f.txt", " a", "-b", " c"))
    add("crlf_patch_lf_file", {"f.txt": "a\nb\nc\n"},
        P("*** Update File: f.txt", " a", "-b", "+B", " c").replace("\n", "\r\n"))
    add("crlf_patch_add", {}, P("*** Add File: a.txt", "+x", "+y").replace("\n", "\r\n"))
    add("mixed_endings_file", {"f.txt": b"a\nb\r\nc\n"},
        P("*** Update File: f.txt", "-a", "+A"))
    # --- framing errors ---
    add("missing_begin", {}, "*** Add File: a.txt\n+a\n*** End Patch\n")
    add("missing_end", {}, "*** Begin Patch\n*** Add File: a.txt\n+a\n")
    add("empty_text", {}, "")
    add("only_begin_end", {}, P())
    add("bad_marker", {}, P("*** Frobnicate File: a.txt"))
    add("bad_line_top", {"f.txt": "a\n"}, P("hello", "*** Delete File: f.txt"))
    add("bad_chunk_line", {"f.txt": TEN}, P("*** Update File: f.txt", "-line 1", "xline 2"))
    add("end_patch_in_body", {}, P("*** Add File: a.txt", "+a", "*** End Patch",
                                   "*** Add File: b.txt", "+b"))
    add("no_final_newline", {}, "*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch")
    add("ws_around_markers", {}, " *** Begin Patch \n*** Add File: a.txt\n+a\n  *** End Patch\t\n")
    add("blank_lines_around", {}, "\n\n" + P("*** Add File: a.txt", "+a") + "\n\n")
    add("heredoc_wrapper", {}, "<<'EOF'\n" + P("*** Add File: a.txt", "+a") + "EOF\n")
    add("heredoc_plain", {}, "<<EOF\n" + P("*** Add File: a.txt", "+a") + "EOF\n")
    add("empty_add_path", {}, P("*** Add File: ", "+a"))
    add("add_marker_no_space", {}, P("*** Add File:a.txt", "+a"))
    add("path_trailing_space", {}, P("*** Add File: a.txt ", "+a"))
    add("header_leading_space", {}, P(" *** Add File: a.txt", "+a"))
    # docs/contract/patch.md section 1: tolerated where no chunk is open, as the reference does
    add("header_leading_space_after_add", {}, P("*** Add File: a.txt", "+a", "\t*** Add File: b.txt", "+b"))
    add("header_leading_space_in_chunk", {"f.txt": TEN},
        P("*** Update File: f.txt", "-line 1", "+one", " *** Add File: b.txt"))
    add("blank_between_ops", {}, P("*** Add File: a.txt", "+a", "", "*** Add File: b.txt", "+b"))
    add("blank_after_eof_marker", {"f.txt": TEN},
        P("*** Update File: f.txt", " line 10", "+x", "*** End of File", "",
          "*** Add File: b.txt", "+b"))
    add("delete_then_add_same", {"a.txt": "old\n"},
        P("*** Delete File: a.txt", "*** Add File: a.txt", "+new"))
    add("two_updates_same", {"f.txt": TEN},
        P("*** Update File: f.txt", "-line 1", "+one", "*** Update File: f.txt", "-line 2",
          "+two"))
    add("move_onto_other_op", {"a.txt": "a\n", "b.txt": "b\n"},
        P("*** Update File: a.txt", "*** Move to: b.txt", "-a", "+A", "*** Delete File: b.txt"))
    # --- transactions: a failure in a later operation ---
    add("second_op_fails", {"a.txt": "a\n", "b.txt": "b\n"},
        P("*** Update File: a.txt", "-a", "+A", "*** Update File: b.txt", "-zzz", "+B"))
    add("add_then_missing_delete", {}, P("*** Add File: n.txt", "+n", "*** Delete File: m.txt"))
    # --- paths ---
    add("path_dot_slash", {"a.txt": "a\n"}, P("*** Update File: ./a.txt", "-a", "+A"))
    add("path_escape", {}, P("*** Add File: ../escape.txt", "+a"))
    add("path_with_space_inside", {}, P("*** Add File: my file.txt", "+a"))
    # --- mixed ---
    add("mixed_all_ops", {"u.txt": TEN, "d.txt": "d\n", "m.txt": CODE},
        P("*** Add File: new/n.txt", "+n1", "+n2",
          "*** Delete File: d.txt",
          "*** Update File: u.txt", "@@", " line 1", "-line 2", "+two", "@@", "-line 9",
          "+nine", " line 10", "*** End of File",
          "*** Update File: m.txt", "*** Move to: moved/m.py", "@@ def g():", "-    y = 2",
          "+    y = 22"))
    add("context_minus_interleaved", {"f.txt": TEN},
        P("*** Update File: f.txt", " line 2", "-line 3", " line 4", "-line 5", "+five",
          " line 6"))
    add("context_line_star", {"f.txt": lines("a", "*** End Patch", "b")},
        P("*** Update File: f.txt", " *** End Patch", "-b", "+B"))
    add("duplicate_blocks", {"f.txt": lines("x", "y", "x", "y")},
        P("*** Update File: f.txt", "@@", " x", "-y", "+Y", "@@", " x", "-y", "+Z"))
    add("eof_chunk_then_more", {"f.txt": TEN},
        P("*** Update File: f.txt", "-line 10", "+ten", "*** End of File", "@@", "-line 1",
          "+one"))
    add("eof_after_earlier_chunk", {"f.txt": lines("a", "b", "a", "b")},
        P("*** Update File: f.txt", "@@", "-a", "+A", "@@", " a", "-b", "+B",
          "*** End of File"))
    # --- more framing, seeking and path-policy cases ---
    add("heredoc_with_command", {}, "apply_patch <<'EOF'\n" + P("*** Add File: a.txt", "+a") +
        "EOF\n")
    add("heredoc_unclosed", {}, "<<'EOF'\n" + P("*** Add File: a.txt", "+a"))
    add("seek_trailing_ws", {"f.txt": CODE},
        P("*** Update File: f.txt", "@@ def g():  ", "-    y = 2", "+    y = 3"))
    add("seek_leading_ws", {"f.txt": CODE},
        P("*** Update File: f.txt", "@@ y = 2", "-    return y", "+    return 0"))
    add("seek_punct", {"f.txt": lines("# a \u2014 b", "x", "# a - c", "x")},
        P("*** Update File: f.txt", "@@ # a - b", "-x", "+X"))
    add("eof_marker_trailing_ws", {"f.txt": TEN},
        P("*** Update File: f.txt", "-line 10", "+ten", "*** End of File  "))
    add("move_then_add_source", {"a.txt": "a\n"},
        P("*** Update File: a.txt", "*** Move to: b.txt", "-a", "+A", "*** Add File: a.txt",
          "+again"))
    add("delete_directory", {"d/x.txt": "x\n"}, P("*** Delete File: d"))
    add("update_directory", {"d/x.txt": "x\n"}, P("*** Update File: d", "-x", "+y"))
    add("add_under_file", {"a.txt": "a\n"}, P("*** Add File: a.txt/b.txt", "+b"))
    add("crlf_file_insert_only", {"f.txt": b"a\r\nb\r\n"},
        P("*** Update File: f.txt", " a", "+mid", " b"))
    add("crlf_file_append_eof", {"f.txt": b"a\r\nb\r\n"},
        P("*** Update File: f.txt", " b", "+c", "*** End of File"))
    add("crlf_file_no_final_newline", {"f.txt": b"a\r\nb"},
        P("*** Update File: f.txt", " a", "-b", "+B"))
    add("crlf_last_line_lone_cr", {"f.txt": b"a\r\nb\r\nc\r"},
        P("*** Update File: f.txt", " a", "-b", "+B"))
    add("lf_last_line_lone_cr", {"f.txt": b"a\nb\nc\r"},
        P("*** Update File: f.txt", " a", "-b", "+B"))
    add("retry_trailing_empty_context", {"f.txt": "a\nb"},
        P("*** Update File: f.txt", " a", "-b", "+B", " "))
    add("retry_trailing_empty_minus", {"f.txt": "a\nb"},
        P("*** Update File: f.txt", " a", "-b", "-", "+B"))
    add("lf_first_line_then_crlf", {"f.txt": b"a\nb\r\nc\r\n"},
        P("*** Update File: f.txt", " b", "+new", " c"))
    add("trailing_ws_context_rewritten", {"f.txt": "a\t\nb\n"},
        P("*** Update File: f.txt", " a", "-b", "+B"))
    add("blank_line_matches_ws_line", {"f.txt": "a\n   \nb\n"},
        P("*** Update File: f.txt", " a", "", "-b", "+B"))
    add("update_then_delete_other_missing", {"a.txt": "a\n"},
        P("*** Update File: a.txt", "-a", "+A", "*** Delete File: nope.txt"))
    add("move_into_new_dirs", {"a.txt": "a\n"},
        P("*** Update File: a.txt", "*** Move to: p/q/r.txt", "-a", "+A"))
    add("update_non_utf8_file", {"f.bin": b"a\nb\xff\nc\n"},
        P("*** Update File: f.bin", "-c", "+C"))
    add("blank_after_delete", {"a.txt": "a\n"},
        P("*** Delete File: a.txt", "", "*** Add File: b.txt", "+b"))
    add("blank_after_update_chunk", {"a.txt": "a\nb\n"},
        P("*** Update File: a.txt", "-b", "+B", "", "*** Add File: c.txt", "+c"))
    add("delete_non_utf8_file", {"f.bin": b"\xff\xfe\n"}, P("*** Delete File: f.bin"))
    return c


# --- generated cases ---

WORDS = ["alpha", "beta", "gamma", "delta", "x = 1", "return y", "}", "{", "if (a) {",
         "    indent", "\tTab", "// comment", "foo(bar);", "end", "", "let z = 3;", "#include",
         "print('hi')", "", "done"]


def gen_file(rng, n):
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.15:
            out.append(rng.choice(WORDS))          # repeats (ambiguity)
        elif r < 0.2:
            out.append("")
        else:
            out.append("%s %d" % (rng.choice(WORDS).strip() or "w", rng.randrange(100000)))
    return out


def new_line(rng):
    return "new %s %d" % (rng.choice(["a", "b", "c", "call()", "  ind"]), rng.randrange(10**6))


def render_update(rng, old):
    """(chunk lines, new content lines) for random non-overlapping edits of old."""
    n = len(old)
    k = rng.randint(1, 4)
    starts = sorted(rng.sample(range(n), min(k, n)))
    edits = []
    last_end = -1
    for s in starts:
        if s <= last_end + 6:  # keep edits (and their 3 lines of context) apart
            continue
        dl = rng.choice([0, 1, 1, 2, 3])
        dl = min(dl, n - s)
        ins = [new_line(rng) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        if dl == 0 and not ins:
            ins = [new_line(rng)]
        edits.append((s, dl, ins))
        last_end = s + dl
    body = []
    new = []
    pos = 0
    for (s, dl, ins) in edits:
        new.extend(old[pos:s])
        new.extend(ins)
        pos = s + dl
        pre = old[max(0, s - 3):s]
        post = old[s + dl:s + dl + 3]
        # Unique context: with an @@ anchor on the line before the context when it helps.
        style = rng.random()
        if style < 0.3 and s - 4 >= 0 and old[s - 4].strip():
            body.append("@@ " + old[s - 4])
        elif not (style < 0.5 and not body):  # sometimes omit the first @@
            body.append("@@")
        body.extend(" " + x for x in pre)
        body.extend("-" + x for x in old[s:s + dl])
        body.extend("+" + x for x in ins)
        body.extend(" " + x for x in post)
        if s + dl + 3 >= n and rng.random() < 0.5:
            body.append("*** End of File")
    new.extend(old[pos:])
    return body, new


def unique_match(old, body):
    """True if every chunk's old lines occur once (so both implementations must agree)."""
    chunks = []
    cur = []
    for b in body:
        if b.startswith("@@") or b == "*** End of File":
            if cur:
                chunks.append(cur)
            cur = []
            continue
        if b[:1] in (" ", "-"):
            cur.append(b[1:])
        elif b[:1] == "+":
            pass
    if cur:
        chunks.append(cur)
    for ch in chunks:
        hits = sum(1 for i in range(len(old) - len(ch) + 1) if old[i:i + len(ch)] == ch)
        if hits != 1:
            return False
    return True


def gen_cases(count, seed):
    rng = random.Random(seed)
    out = []
    i = 0
    while len(out) < count:
        i += 1
        name = "gen_%03d" % len(out)
        files = {}
        nfiles = rng.randint(1, 4)
        for j in range(nfiles):
            files["src/f%d.txt" % j] = gen_file(rng, rng.randint(1, 40))
        ops = []
        touched = set()
        expect_ok = True
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(["add", "delete", "update", "update", "update", "move", "bad"])
            if kind == "add":
                p = "gen/n%d.txt" % rng.randrange(1000)
                if p in touched:
                    continue
                touched.add(p)
                ops.append("*** Add File: " + p)
                ops.extend("+" + x for x in gen_file(rng, rng.randint(0, 6)) if x != "")
                continue
            src = rng.choice(sorted(files))
            if src in touched:
                continue
            touched.add(src)
            if kind == "delete":
                ops.append("*** Delete File: " + src)
                continue
            old = files[src]
            body, _ = render_update(rng, old)
            if not unique_match(old, body):
                touched.discard(src)
                continue
            ops.append("*** Update File: " + src)
            if kind == "move":
                dst = "moved/m%d.txt" % rng.randrange(1000)
                if dst in touched or dst in files:
                    continue
                touched.add(dst)
                ops.append("*** Move to: " + dst)
            if kind == "bad":
                # Corrupt one old line: both must reject (context not found).
                idx = [k for k, b in enumerate(body) if b[:1] in (" ", "-") and b[1:].strip()]
                if idx:
                    k = rng.choice(idx)
                    body[k] = body[k][0] + "NOPE " + body[k][1:]
                    expect_ok = False
            ops.extend(body)
        if not ops:
            continue
        if rng.random() < 0.3:  # an empty context line written as a bare blank line
            ops = ["" if o == " " else o for o in ops]
        if rng.random() < 0.15:  # trailing white space in the patch's context lines
            ops = [o + " " if o[:1] == " " and o.strip() else o for o in ops]
        text = P(*ops)
        init = {p: "".join(x + "\n" for x in ls) for p, ls in files.items()}
        for p in list(init):  # some CRLF files
            if rng.random() < 0.15:
                init[p] = init[p].replace("\n", "\r\n")
        # Some files without a final newline (unless the last line is empty: dropping its
        # newline would drop the line, and the patch would name a line that is not there).
        for p in list(init):
            if rng.random() < 0.15 and files[p] and files[p][-1] != "":
                init[p] = init[p][:-2] if init[p].endswith("\r\n") else init[p][:-1]
        out.append((name, init, text))
    return out


# ---------------------------------------------------------------------------------------------
# Deliberate differences: case name -> (how it differs, reason). Kinds:
#   "content"      both accept, files differ;
#   "we_reject"    the reference accepts, CodeSpace rejects;
#   "ref_rejects"  CodeSpace accepts, the reference rejects.
# Filled from the observed runs; each entry is explained in docs/patch-differences.md.
# ---------------------------------------------------------------------------------------------

ONE_OP = ("we_reject", "one operation per path: two operations on one path (or a Move onto a "
          "path another operation names) are INVALID_PATCH; the reference runs them in sequence")
NESTED_AT = ("ref_rejects", "'@@' lines in a row are anchors, each searched after the one "
             "before (as OpenAI's V4A describes them); the reference rejects an '@@' without "
             "lines")
EXPECTED = {
    "add_existing": ("we_reject", "an Add never overwrites: ADD_FILE_EXISTS (the reference "
                                  "silently replaces the file)"),
    "move_dest_exists": ("we_reject", "a Move never overwrites: MOVE_DESTINATION_EXISTS (the "
                                      "reference replaces the destination)"),
    "move_to_self": ONE_OP,
    "delete_then_add_same": ONE_OP,
    "two_updates_same": ONE_OP,
    "move_onto_other_op": ONE_OP,
    "move_then_add_source": ONE_OP,
    "path_escape": ("we_reject", "path policy: a path may not leave the workspace (PATH_ESCAPE); "
                                 "the reference writes ../escape.txt"),
    "path_trailing_space": ("content", "paths are verbatim: the reference trims the header, "
                                       "so it creates 'a.txt' where we create 'a.txt '"),
    "pure_insert_with_at": ("content", "a pure insertion with '@@ text' goes right after that "
                                       "line; the reference appends it at the end of the file"),
    "match_unicode_em_space": ("we_reject", "typographic folding covers only the listed "
                                            "characters; the reference also folds U+2003"),
    "only_begin_end": ("ref_rejects", "a patch with no operations is a valid no-op (status "
                                      "applied, no changes); the reference rejects it with "
                                      "'No files were modified.'"),
    "update_non_utf8_file": ("ref_rejects", "files are bytes: a file that is not UTF-8 can be "
                                            "updated; the reference fails to read it"),
    "crlf_last_line_lone_cr": ("content", "an updated file always ends with a line ending "
                                          "(contract section 6): the last line 'c\\r' has no "
                                          "LF, so we append the file's CRLF ('c\\r\\r\\n'); "
                                          "the reference leaves 'c\\r' as it is"),
    "lf_last_line_lone_cr": ("content", "likewise in an LF file: 'c\\r' gets '\\n' "
                                        "('c\\r\\n'); the reference leaves 'c\\r'"),
    "retry_trailing_empty_minus": ("we_reject", "the retry without a trailing empty line is "
                                                "for an empty context line only; the reference "
                                                "also drops a trailing '-' of an empty line "
                                                "that is not in the file"),
    "update_nested_at": NESTED_AT,
    "update_nested_at_then_lines": NESTED_AT,
    "blank_after_delete": ("ref_rejects", "blank lines between operations are skipped; the "
                                          "reference rejects a blank line after a Delete"),
}


def materialise(root, files):
    os.makedirs(root)
    for p, data in files.items():
        full = os.path.join(root, p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def snapshot(root):
    res = {}
    for d, _, names in os.walk(root):
        for n in names:
            full = os.path.join(d, n)
            with open(full, "rb") as f:
                res[os.path.relpath(full, root)] = f.read()
    return res


def describe_diff(a, b):
    out = []
    for p in sorted(set(a) | set(b)):
        if p not in a:
            out.append("  only ours: %r = %r" % (p, b[p][:200]))
        elif p not in b:
            out.append("  only reference: %r = %r" % (p, a[p][:200]))
        elif a[p] != b[p]:
            out.append("  %r: reference %r / ours %r" % (p, a[p][-300:], b[p][-300:]))
    return "\n".join(out)


def run_case(ref_cmd, binary, tmp, name, files, text):
    """(kind, detail): kind is "same", "content", "we_reject" or "ref_rejects"."""
    base = os.path.join(tmp, name)
    a = os.path.join(base, "A", "t")
    b = os.path.join(base, "B", "t")
    materialise(a, files)
    materialise(b, files)
    os.makedirs(os.path.join(base, "state"))
    ref_ok, ref_out = run_reference(ref_cmd, a, text)
    srv = Server(binary, ["--workspace", b, "--operations-db", os.path.join(base, "ops.db")],
                 os.path.join(base, "state"))
    try:
        our_ok, our_out = srv.apply(text)
    finally:
        srv.close()
    detail = "reference: %s\n  ours: %s" % (ref_out.replace("\n", " | ")[:300], our_out)
    if ref_ok and not our_ok:
        return "we_reject", detail
    if our_ok and not ref_ok:
        return "ref_rejects", detail
    if ref_ok and our_ok:
        sa, sb = snapshot(a), snapshot(b)
        if sa != sb:
            return "content", detail + "\n" + describe_diff(sa, sb)
    return "same", detail


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the codespace-mcp binary")
    ap.add_argument("--only", help="run one case")
    ap.add_argument("--keep", action="store_true", help="keep the temporary trees")
    ap.add_argument("-v", action="store_true", help="print every case")
    ap.add_argument("--seed", type=int, default=SEED, help="seed of the generated cases")
    ap.add_argument("--generated", type=int, default=GENERATED, help="how many to generate")
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    if not os.access(binary, os.X_OK):
        print("run_diff.py: --bin %s is not executable" % binary, file=sys.stderr)
        return 1
    ref_cmd = reference_command()
    cases = hand_cases() + gen_cases(args.generated, args.seed)
    names = [c[0] for c in cases]
    assert len(set(names)) == len(names), "duplicate case names"
    unknown = set(EXPECTED) - set(names)
    assert not unknown, "EXPECTED names unknown cases: %s" % sorted(unknown)
    if args.only:
        cases = [c for c in cases if c[0] == args.only]
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="cs-patch-diff-"))
    t0 = time.time()
    passed = failed = expected = both_ok = 0
    try:
        for name, files, text in cases:
            kind, detail = run_case(ref_cmd, binary, tmp, name, files, text)
            if kind == "same":
                both_ok += detail.startswith("reference: Success")
            want = EXPECTED.get(name, ("same", None))[0]
            if kind == want:
                passed += 1
                if kind != "same":
                    expected += 1
                if args.v:
                    print("ok   %s (%s)" % (name, kind))
            else:
                failed += 1
                print("FAIL %s: expected %s, got %s\n  %s" % (name, want, kind, detail))
                if args.v:
                    print("  patch: %r" % text)
    finally:
        if args.keep:
            print("run_diff.py: trees kept in %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("patch_differential: %d cases (%d hand-written, %d generated), %d agree (%d both "
          "applied, byte-identical), %d expected differences, %.1f s"
          % (passed + failed, len(hand_cases()), args.generated, passed - expected, both_ok,
             expected, time.time() - t0))
    print("patch_differential: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
