#!/bin/sh
# clang-tidy over the hand-written C of src/ and helper/ (not the generated code, not tests), with
# the checks of .clang-tidy, from a build's compile_commands.json; two files at a time.
#   scripts/clang-tidy.sh BUILD_DIR        (CTest runs it as "clang_tidy"; CS_TIDY_JOBS=N)
# Exits 0 when there is no warning; 1 on any warning; 77 (skipped) when clang-tidy is not
# installed, except in CI (CI=true or 1), where a missing clang-tidy fails: scripts/bootstrap.sh
# installs Debian's clang-tidy package.
# _FORTIFY_SOURCE is undefined for the analysis: with it, vsnprintf becomes __vsnprintf_chk and
# the analyzer reports every va_start/vsnprintf pair as an uninitialized va_list.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: scripts/clang-tidy.sh BUILD_DIR}

in_ci() { [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; }

tidy=$(command -v clang-tidy || command -v clang-tidy-14 || true)
runner=$(command -v run-clang-tidy || command -v run-clang-tidy-14 || true)
if [ -z "$tidy" ] || [ -z "$runner" ]; then
    if in_ci; then
        echo "clang-tidy.sh: FAIL: clang-tidy or run-clang-tidy not found, and CI requires it" \
             "(scripts/bootstrap.sh installs the clang-tidy package)"
        exit 1
    fi
    echo "clang-tidy.sh: clang-tidy not found: skipped (apt-get install clang-tidy)"
    exit 77
fi
if [ ! -f "$build/compile_commands.json" ]; then
    echo "clang-tidy.sh: FAIL: no $build/compile_commands.json (configure and build first)"
    exit 1
fi

# Our own sources only: generated Ragel output and the generated codecs live under the build tree.
re_root=$(printf '%s' "$root" | sed 's/[].[^$*+?(){}|\\]/\\&/g')
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
"$runner" -clang-tidy-binary "$tidy" -p "$build" -j "${CS_TIDY_JOBS:-2}" -quiet \
    -header-filter="^$re_root/(src|helper)/" -extra-arg=-U_FORTIFY_SOURCE \
    "^$re_root/(src|helper)/" >"$out" 2>&1 || rc=$?
sed -i 's/\x1b\[[0-9;]*m//g' "$out" # run-clang-tidy always asks for colours
files=$(grep -c "^\[[ 0-9]*/[0-9]*\]\|clang-tidy.* -p=" "$out" || true)
if grep -q ": \(warning\|error\): " "$out" || [ "$rc" -ne 0 ]; then
    grep -A3 ": \(warning\|error\): " "$out" || cat "$out"
    echo "clang-tidy.sh: FAIL: $(grep -c ": \(warning\|error\): " "$out" || true) finding(s)" \
         "(run-clang-tidy exit $rc); fix the code, or exclude a check with its reason in .clang-tidy"
    exit 1
fi
echo "clang-tidy.sh: no warnings ($files file(s) checked)"
