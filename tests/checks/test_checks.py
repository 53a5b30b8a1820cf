#!/usr/bin/python3
"""Proof tests for the three checks of issue #9: each passes on the repository's inputs and fails,
naming the problem, on a copy that breaks one rule.

Run by CTest (label checks) with CODESPACE_MCP_BIN set to the built server; standard library
plus python3-yaml (which check_compose.py needs). Inputs are copied to temporary directories;
the repository is never modified.
"""

import json
import os
import shutil
import stat
import sys
import unittest

from checkcase import CheckCase, run

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
COMPOSE = os.path.join(REPO, "deploy", "compose.yml")
ALLOWLIST = os.path.join(HERE, "deps-allowlist.json")
MCP_BIN = os.environ.get("CODESPACE_MCP_BIN")



class TmpCase(CheckCase):
    PREFIX = "cs-checks-"


class ComposeTest(TmpCase):
    def broken(self, old=None, new=None, append=None):
        with open(COMPOSE, encoding="utf-8") as f:
            text = f.read()
        if old is not None:
            self.assertIn(old, text)
            text = text.replace(old, new)
        if append is not None:
            text += append
        path = os.path.join(self.tmp, "compose.yml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return run("check_compose.py", path)

    def test_repository_file_passes(self):
        self.assertPasses(run("check_compose.py", COMPOSE))

    def test_unmodified_copy_passes(self):
        self.assertPasses(self.broken())

    def test_docker_socket_mount_fails(self):
        self.assertFailsWith(
            self.broken(append="      - /var/run/docker.sock:/var/run/docker.sock\n"),
            "the Docker socket", "2 volumes")

    def test_added_capability_fails(self):
        self.assertFailsWith(
            self.broken("    cap_drop: [ALL]", "    cap_drop: [ALL]\n    cap_add: [SYS_ADMIN]"),
            "cap_add")

    def test_root_user_fails(self):
        self.assertFailsWith(self.broken('user: "10001:10001"', 'user: "0:0"'),
                             "must run as uid 10001")

    def test_network_by_default_fails(self):
        self.assertFailsWith(self.broken(":-none}", ":-bridge}"), "network_mode")

    def test_writable_root_fails(self):
        self.assertFailsWith(self.broken("read_only: true ", "read_only: false "), "read_only")

    def test_published_port_fails(self):
        self.assertFailsWith(self.broken("    pids_limit: 64", "    pids_limit: 64\n"
                                         "    ports: [\"8787:8787\"]"), "ports")

    def test_forbidden_mentions_fail(self):
        for text, what in (("CODESPACE_HTTP_TOKEN", "HTTP token"), ("SSH_AUTH_SOCK", "SSH agent"),
                           ("$HOME/.ssh", "$HOME"), ("./.env", ".env"),
                           ("operations.db", "database file"), ("state.sqlite", "database")):
            with self.subTest(text=text):
                self.assertFailsWith(self.broken(append=f"# {text}\n"), what)

    def test_second_mount_fails(self):
        self.assertFailsWith(self.broken(append="      - /etc:/host-etc:ro\n"), "2 volumes")


@unittest.skipUnless(MCP_BIN, "CODESPACE_MCP_BIN is not set")
class DocsTest(TmpCase):
    def setUp(self):
        super().setUp()
        # README.md and docs/ are copied; everything else the pages link to is symlinked.
        self.root = os.path.join(self.tmp, "repo")
        os.mkdir(self.root)
        for entry in os.listdir(REPO):
            src, dst = os.path.join(REPO, entry), os.path.join(self.root, entry)
            if entry == "README.md":
                shutil.copy(src, dst)
            elif entry == "docs":
                shutil.copytree(src, dst)
            elif entry not in (".git", "build"):
                os.symlink(src, dst)

    def check(self):
        return run("check_docs.py", "--root", self.root, "--mcp-bin", MCP_BIN)

    def append(self, rel, text):
        with open(os.path.join(self.root, rel), "a", encoding="utf-8") as f:
            f.write(text)

    def test_repository_passes(self):
        self.assertPasses(run("check_docs.py", "--mcp-bin", MCP_BIN))

    def test_unmodified_copy_passes(self):
        self.assertPasses(self.check())

    def test_broken_link_fails(self):
        self.append("docs/operations.md", "\nSee [nowhere](no-such-page.md).\n")
        self.assertFailsWith(self.check(), "docs/operations.md:",
                             "docs/no-such-page.md does not exist")

    def test_broken_link_in_readme_fails(self):
        self.append("README.md", "\n[gone](docs/gone.md#intro)\n")
        self.assertFailsWith(self.check(), "README.md:", "docs/gone.md does not exist")

    def test_missing_anchor_fails(self):
        self.append("docs/operations.md", "\n[x](http.md#no-such-heading)\n")
        self.assertFailsWith(self.check(), "no heading with anchor #no-such-heading")

    def test_existing_anchor_passes(self):
        self.append("docs/operations.md", "\n[x](#choices-where-the-spec-is-silent) "
                    "[y](operations.md#logs)\n")
        self.assertPasses(self.check())

    def test_link_inside_code_is_ignored(self):
        self.append("docs/operations.md", "\n`[x](nowhere.md)`\n\n```\n[y](nowhere.md)\n```\n")
        self.assertPasses(self.check())

    def test_korean_section_count(self):
        # A Korean page with the English page's headings (links would point into docs/ko/).
        sys.path.insert(0, HERE)
        import check_docs
        with open(os.path.join(self.root, "docs", "operations.md"), encoding="utf-8") as f:
            headings = check_docs.split_markdown(f.read())[2]
        os.makedirs(os.path.join(self.root, "docs", "ko"), exist_ok=True)
        with open(os.path.join(self.root, "docs", "ko", "operations.md"), "w",
                  encoding="utf-8") as f:
            f.write("".join(f"{'#' * level} {text} (번역)\n\n본문.\n\n"
                            for _, level, text in headings))
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"[1-9][0-9]* English/Korean pairs")
        self.append("docs/ko/operations.md", "\n## 추가 절\n\n```sh\n# not a heading\n```\n")
        self.assertFailsWith(self.check(), "docs/ko/operations.md:", "sections, but "
                             "docs/operations.md has")

    def test_unknown_flag_fails(self):
        self.append("docs/operations.md", "\n```sh\n./build/release/src/main/codespace-mcp "
                    "--http \\\n  --no-such-flag 1\n```\n")
        self.assertFailsWith(self.check(), "codespace-mcp has no flag --no-such-flag")

    def test_unknown_variable_fails(self):
        self.append("docs/operations.md", "\n```sh\nCODESPACE_NO_SUCH_VAR=1 ./scripts/start.sh\n```\n")
        self.assertFailsWith(self.check(), "knows no variable CODESPACE_NO_SUCH_VAR")

    def test_unknown_script_flag_fails(self):
        self.append("README.md", "\n```sh\n./scripts/check-format.sh --fixx\n```\n")
        self.assertFailsWith(self.check(), "has no flag --fixx")

    def test_other_commands_are_not_checked(self):
        self.append("docs/operations.md", "\n```sh\ncmake --preset release --fresh && "
                    "CODESPACE_X=1 make --whatever\n```\n")
        self.assertPasses(self.check())


class DepsTest(TmpCase):
    def fake_ldd(self, *sonames):
        out = os.path.join(self.tmp, "ldd.out")
        with open(out, "w", encoding="utf-8") as f:
            f.write("\tlinux-vdso.so.1 (0x00007fff00000000)\n")
            for s in sonames:
                f.write(f"\t{s} => /lib/x86_64-linux-gnu/{s} (0x00007f0000000000)\n")
            f.write("\t/lib64/ld-linux-x86-64.so.2 (0x00007f0000001000)\n")
        ldd = os.path.join(self.tmp, "fake-ldd")
        with open(ldd, "w", encoding="utf-8") as f:
            f.write(f"#!/bin/sh\ncat '{out}'\n")
        os.chmod(ldd, stat.S_IRWXU)
        return ldd

    def binary(self, name):
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write("not really a binary; the fake ldd answers for it\n")
        return path

    @unittest.skipUnless(MCP_BIN, "CODESPACE_MCP_BIN is not set")
    def test_built_server_passes(self):
        rc, out = run("check_deps.py", f"codespace-mcp={MCP_BIN}",
                      *os.environ.get("CS_CHECK_DEPS_ARGS", "").split())
        self.assertEqual(rc, 0, out)
        self.assertIn("codespace-mcp: " + MCP_BIN, out)

    @unittest.skipUnless(MCP_BIN, "CODESPACE_MCP_BIN is not set")
    def test_library_missing_from_allowlist_fails(self):
        with open(ALLOWLIST, encoding="utf-8") as f:
            allow = json.load(f)
        del allow["binaries"]["codespace-mcp"]["allowed"]["libjansson"]
        path = os.path.join(self.tmp, "allow.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(allow, f)
        self.assertFailsWith(run("check_deps.py", "--allowlist", path, f"codespace-mcp={MCP_BIN}",
                                 "--sanitized"),
                             "codespace-mcp: links libjansson.so.4, which is not in the allowlist")

    def test_fake_ldd_allowed_passes(self):
        ldd = self.fake_ldd("libc.so.6", "libjansson.so.4", "libseccomp.so.2")
        self.assertPasses(run("check_deps.py", "--ldd", ldd,
                              f"codespace-mcp={self.binary('codespace-mcp')}",
                              f"codespace-linux-sandbox={self.binary('helper')}", ""))

    def test_http_library_in_helper_fails(self):
        ldd = self.fake_ldd("libc.so.6", "libjansson.so.4", "libcurl.so.4")
        self.assertFailsWith(run("check_deps.py", "--ldd", ldd,
                                 f"codespace-mcp={self.binary('codespace-mcp')}",
                                 f"codespace-linux-sandbox={self.binary('helper')}"),
                             "codespace-linux-sandbox: links libcurl.so.4, which is denied: "
                             "HTTP library")

    def test_database_library_in_helper_fails_even_if_allowed(self):
        with open(ALLOWLIST, encoding="utf-8") as f:
            allow = json.load(f)
        allow["binaries"]["codespace-linux-sandbox"]["allowed"]["libsqlite3"] = "oops"
        path = os.path.join(self.tmp, "allow.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(allow, f)
        ldd = self.fake_ldd("libc.so.6", "libsqlite3.so.0")
        self.assertFailsWith(run("check_deps.py", "--allowlist", path, "--ldd", ldd,
                                 f"codespace-mcp={self.binary('codespace-mcp')}",
                                 f"codespace-linux-sandbox={self.binary('helper')}"),
                             "links libsqlite3.so.0, which is denied: database library",
                             "both allowed and denied")

    def test_sanitizer_runtime_needs_a_sanitizer_build(self):
        ldd = self.fake_ldd("libc.so.6", "libubsan.so.1", "libstdc++.so.6")
        args = ["--ldd", ldd, f"codespace-mcp={self.binary('codespace-mcp')}"]
        self.assertFailsWith(run("check_deps.py", *args),
                             "links libubsan.so.1, which is not in the allowlist")
        self.assertPasses(run("check_deps.py", "--sanitized", *args))
        self.assertPasses(run("check_deps.py", "--ldd",
                              self.fake_ldd("libasan.so.8", "libubsan.so.1", "libc.so.6"),
                              f"codespace-mcp={self.binary('codespace-mcp')}"))

    def test_missing_server_fails(self):
        ldd = self.fake_ldd("libc.so.6")
        self.assertFailsWith(run("check_deps.py", "--ldd", ldd,
                                 f"codespace-linux-sandbox={self.binary('helper')}"),
                             "codespace-mcp: required but not given")
        self.assertFailsWith(run("check_deps.py", "--ldd", ldd,
                                 f"codespace-mcp={os.path.join(self.tmp, 'nothing')}"),
                             "does not exist")

    def test_binary_without_entry_fails(self):
        ldd = self.fake_ldd("libc.so.6")
        self.assertFailsWith(run("check_deps.py", "--ldd", ldd,
                                 f"codespace-mcp={self.binary('codespace-mcp')}",
                                 f"codespace-extra={self.binary('extra')}"),
                             "codespace-extra: no entry in the allowlist")


if __name__ == "__main__":
    unittest.main()


class HandJsonTest(TmpCase):
    """check_handjson.py: no hand-built or hand-walked JSON outside its allowlist."""

    def copy(self):
        for top in ("src", "helper"):
            shutil.copytree(os.path.join(REPO, top), os.path.join(self.tmp, top))

    def plant(self, rel, text):
        with open(os.path.join(self.tmp, rel), "a") as f:
            f.write(text)

    def test_repository_passes(self):
        self.assertPasses(run("check_handjson.py"))

    def test_json_pack_in_the_envelope_fails(self):
        self.copy()
        self.plant("src/mcp/mcp_server.c",
                   "\njson_t *planted(void);\njson_t *planted(void)\n{\n"
                   "    return json_pack(\"{s:s}\", \"jsonrpc\", \"2.0\");\n}\n")
        self.assertFailsWith(run("check_handjson.py", "--root", self.tmp),
                             "src/mcp/mcp_server.c", "planted: json_pack")

    def test_hand_walk_and_set_fail(self):
        self.copy()
        self.plant("src/jsonrpc/jsonrpc.c",
                   "\nstatic void walk(json_t *m)\n{\n"
                   "    json_object_set_new(m, \"x\", json_object_get(m, \"id\"));\n}\n")
        self.assertFailsWith(run("check_handjson.py", "--root", self.tmp),
                             "walk: json_object_set_new", "walk: json_object_get")

    def test_allowlisted_function_only(self):
        """An allowlist entry for one function does not cover its neighbours."""
        self.copy()
        self.plant("src/runner/runner_uds.c",
                   "\nstatic json_t *other(json_t *e)\n{\n"
                   "    return json_object_get(e, \"code\");\n}\n")
        self.assertFailsWith(run("check_handjson.py", "--root", self.tmp),
                             "src/runner/runner_uds.c", "other: json_object_get")

    def test_hand_walked_loops_fail(self):
        self.copy()
        self.plant("src/store/store_ledger.c",
                   "\nstatic void loop(json_t *a, json_t *o)\n{\n"
                   "    size_t i;\n    json_t *v;\n    const char *k;\n"
                   "    json_array_foreach(a, i, v) { (void)json_array_get(a, i); }\n"
                   "    json_object_foreach(o, k, v) { (void)k; }\n"
                   "    (void)json_object_iter(o);\n}\n")
        self.assertFailsWith(run("check_handjson.py", "--root", self.tmp),
                             "loop: json_array_foreach", "loop: json_array_get",
                             "loop: json_object_foreach", "loop: json_object_iter")

    def test_stale_allowlist_entry_fails(self):
        """An entry whose function no longer builds JSON must be removed from the list."""
        self.copy()
        os.remove(os.path.join(self.tmp, "src/mcp/mcp_server.c"))
        self.assertFailsWith(run("check_handjson.py", "--root", self.tmp),
                             "src/mcp/mcp_server.c: batch_text: allowlist entry matches nothing")
