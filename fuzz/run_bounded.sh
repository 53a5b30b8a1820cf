#!/bin/sh
# Runs one libFuzzer harness for a bounded time on a scratch copy of its seed corpus, so CTest
# never writes into fuzz/corpus/. A finding is kept in ./fuzz-artifacts/ (the test's working
# directory, inside the build tree) and fails the test.
# Usage: run_bounded.sh <harness> <corpus-dir> <seconds>
set -eu
harness=$1 corpus=$2 secs=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
artifacts=${CS_FUZZ_ARTIFACTS:-$PWD/fuzz-artifacts}
mkdir -p "$work/corpus" "$artifacts"
cp -r "$corpus"/. "$work/corpus/" 2>/dev/null || true
"$harness" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/$(basename "$harness")-" -print_final_stats=1 "$work/corpus"
