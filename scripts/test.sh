#!/bin/sh
# The whole test suite, as README.md and .ci/run give it:
#   1. install missing Debian packages (scripts/bootstrap.sh);
#   2. release preset (gcc, -Werror, hardened): build and run every CTest;
#   3. debug preset (gcc, ASan + UBSan): build and run every CTest again;
#   4. fuzz preset (clang, libFuzzer): build every harness and run each for a bounded time.
# Exits non-zero as soon as a step fails. CS_TEST_PRESETS="release debug" narrows the presets.
set -eu
cd "$(dirname "$0")/.."

./scripts/bootstrap.sh

# In CI the sandbox tests must not skip: "no namespaces" is a failure there.
if [ "${CI:-}" = true ]; then
    export CODESPACE_REQUIRE_LINUX_SANDBOX=1
fi

jobs=$(nproc 2>/dev/null || echo 2)
presets=${CS_TEST_PRESETS:-"release debug fuzz"}
for preset in $presets; do
    echo "==== preset $preset: configure, build, test"
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset" -j "$jobs"
    ctest --preset "$preset" -j "$jobs"
done
echo "==== all presets passed: $presets"
