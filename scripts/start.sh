#!/bin/sh
# Set up and start: installs missing Debian packages, builds the server, creates a demo
# workspace (./demo-workspace, kept between runs) and serves it over Streamable HTTP on
# http://127.0.0.1:8787/mcp until Ctrl-C. Arguments replace the transport options, e.g.
#   ./scripts/start.sh --http --port 9000 --token s3cret
#   ./scripts/start.sh --transport stdio        (for a client that spawns it)
#
# stdout belongs to the server (with --transport stdio it carries nothing but MCP messages):
# everything this script and the tools it runs print goes to stderr.
#
# The build is its own tree, build/start: release flags and hardening, but not -Werror, so a
# warning from a newer compiler never stops the server from starting (the presets keep -Werror
# for development and CI), and no tests. It is configured once (when it has no CMakeCache.txt;
# later CMakeLists.txt changes are picked up by the build itself), and built only when a file
# the build reads (CMakeLists.txt, cmake/, src/, helper/, schema/, gen/, fuzz/) is newer than
# the stamp its last successful build left: an up-to-date start costs a dpkg-query and a find,
# not a make run. CS_START_BUILD_DIR=DIR uses another build tree instead (the tests point it at
# the one they were built in).
set -eu
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh >&2

build=${CS_START_BUILD_DIR:-build/start}
stamp=$build/.start-stamp
if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "start: configuring $build (release, hardened, warnings are not errors)" >&2
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCS_HARDEN=ON -DCS_WERROR=OFF \
        -DBUILD_TESTING=OFF >&2
fi
bins="codespace-mcp codespace-runtime codespace-linux-sandbox"
stale=""
for b in $bins; do
    [ -x "$build/src/main/$b" ] || stale="$b missing"
done
if [ -z "$stale" ] && [ -f "$stamp" ]; then
    stale=$(find CMakeLists.txt cmake src helper schema gen fuzz -name __pycache__ -prune \
        -o -newer "$stamp" -print 2>/dev/null | head -n 1)
elif [ -z "$stale" ]; then
    stale="no stamp"
fi
if [ -n "$stale" ]; then
    echo "start: building $build ($stale)" >&2
    # The stamp is taken before the build, so a file edited while it runs is seen next time.
    : >"$stamp.new"
    # shellcheck disable=SC2086
    cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target $bins >&2
    mv "$stamp.new" "$stamp"
else
    echo "start: $build is up to date" >&2
fi

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
exec "$build/src/main/codespace-mcp" --workspace "$demo" "$@"
