#!/bin/sh
# The whole test suite, as README.md and .ci/run give it:
#   1. install missing Debian packages (scripts/bootstrap.sh);
#   2. release preset (gcc, -Werror, hardened): build and run every CTest;
#   3. plain: the packager's build, no preset and no -Werror, exactly
#        cmake -S . -B build/plain -DCMAKE_BUILD_TYPE=Release && cmake --build build/plain
#        && ctest --test-dir build/plain
#      so a warning or a test that only the presets' flags hide shows up in CI too (all its
#      tests but clang_tidy, which the release preset has run over the same sources);
#   4. debug preset (gcc, ASan + UBSan): build and run every CTest again;
#   5. fuzz preset (clang, libFuzzer): build every harness and run each for a bounded time.
# Exits non-zero as soon as a step fails. CS_TEST_PRESETS="release debug" narrows the steps
# (names: release plain debug fuzz).
set -eu
cd "$(dirname "$0")/.."

./scripts/bootstrap.sh

# In CI the sandbox tests must not skip: "no namespaces" is a failure there.
if [ "${CI:-}" = true ]; then
    export CODESPACE_REQUIRE_LINUX_SANDBOX=1
fi

# A failed run ends with the last lines of each failed test's output (a Python suite's
# tracebacks and a C test's failed assertions come last), so the end of a long CI log already
# says what failed and why. Exits with CTest's status.
failed() {
    rc=$?
    log="$1/Testing/Temporary/LastTest.log"
    echo "==== failed tests: the end of each one's output (from $log)"
    if [ -f "$log" ] && [ -f "$1/Testing/Temporary/LastTestsFailed.log" ]; then
        for name in $(cut -d: -f2 "$1/Testing/Temporary/LastTestsFailed.log"); do
            echo "---- $name"
            awk -v t="$name" '$0 ~ ("^[0-9]+/[0-9]+ Test: " t "$") {on = 1; next}
                 on && /^<end of output>$/ {exit} on {print}' "$log" | tail -n 60
        done
    fi
    exit "$rc"
}

jobs=$(nproc 2>/dev/null || echo 2)
presets=${CS_TEST_PRESETS:-"release plain debug fuzz"}
for preset in $presets; do
    if [ "$preset" = plain ]; then
        echo "==== plain build (no preset, no -Werror): configure, build, test"
        cmake -S . -B build/plain -DCMAKE_BUILD_TYPE=Release >/dev/null
        cmake --build build/plain -j "$jobs"
        # clang_tidy reads the same sources as in the release preset, which already ran it.
        ctest --test-dir build/plain -j "$jobs" --output-on-failure -E '^clang_tidy$' ||
            failed build/plain
        continue
    fi
    echo "==== preset $preset: configure, build, test"
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset" -j "$jobs"
    ctest --preset "$preset" -j "$jobs" || failed "build/$preset"
done
echo "==== all presets passed: $presets"
