#!/bin/sh
# Set up and start: installs missing Debian packages, builds the release preset, creates a demo
# workspace (./demo-workspace, kept between runs) and starts codespace-mcp on it. Extra
# arguments go to codespace-mcp (for example --http).
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
exec ./build/release/src/main/codespace-mcp --workspace "$demo" "$@"
