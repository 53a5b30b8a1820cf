#!/bin/sh
# Set up and start: installs missing Debian packages, builds the release preset, creates a demo
# workspace (./demo-workspace, kept between runs) and serves it over Streamable HTTP on
# http://127.0.0.1:8787/mcp until Ctrl-C. Arguments replace the transport options, e.g.
#   ./scripts/start.sh --http --port 9000 --token s3cret
#   ./scripts/start.sh --transport stdio        (for a client that spawns it)
set -eu
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
demo=${CODESPACE_DEMO_DIR:-$PWD/demo-workspace}
if [ ! -d "$demo" ]; then
    mkdir -p "$demo/src"
    printf 'Hello from the CodeSpace demo workspace.\n' >"$demo/README.txt"
    printf '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n' >"$demo/src/hello.c"
fi
if [ $# -eq 0 ]; then
    set -- --http --port 8787
    echo "codespace-mcp: serving $demo at http://127.0.0.1:8787/mcp (Ctrl-C stops)" >&2
fi
exec ./build/release/src/main/codespace-mcp --workspace "$demo" "$@"
