#!/bin/sh
# Runs tests/e2e/node/sdk_client.mjs: the official MCP TypeScript SDK client against
# codespace-mcp over stdio and Streamable HTTP.
#
# Installs the pinned packages (tests/e2e/node/package-lock.json) with `npm ci` when
# node_modules is missing or was installed from another lock file (a sha256 stamp in
# node_modules records which). Needs node (>= 18) and npm on PATH and the npm registry.
#
# CODESPACE_MCP_BIN must name the binary under test. Outside CI (CI unset or not "true") a
# missing node/npm or an unreachable registry skips with exit status 77 (CTest's
# SKIP_RETURN_CODE); in CI it fails.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dir="$here/node"
SKIP=77

in_ci() { [ "${CI:-}" = "true" ] || [ "${CI:-}" = "1" ]; }
skip_or_fail() {
    if in_ci; then
        echo "run_node.sh: FAIL: $1 (CI=$CI: prerequisites are required)" >&2
        exit 1
    fi
    echo "run_node.sh: SKIP: $1" >&2
    exit "$SKIP"
}

if [ -z "${CODESPACE_MCP_BIN:-}" ] || [ ! -x "$CODESPACE_MCP_BIN" ]; then
    echo "run_node.sh: CODESPACE_MCP_BIN must name the built codespace-mcp" >&2
    exit 1
fi
command -v node >/dev/null 2>&1 || skip_or_fail "node is not on PATH (scripts/bootstrap.sh installs it)"
command -v npm >/dev/null 2>&1 || skip_or_fail "npm is not on PATH (scripts/bootstrap.sh installs it)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || skip_or_fail "node $(node --version) is too old: the SDK needs >= 18"

want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
stamp="$dir/node_modules/.codespace-lock.sha256"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "run_node.sh: installing the pinned SDK (npm ci) in $dir"
    log=$(mktemp)
    if ! (cd "$dir" && npm ci --no-audit --no-fund >"$log" 2>&1); then
        cat "$log" >&2
        rm -f "$log"
        skip_or_fail "npm ci failed (is the npm registry reachable?)"
    fi
    rm -f "$log"
    echo "$want" >"$stamp"
fi

cd "$dir"
exec node sdk_client.mjs
