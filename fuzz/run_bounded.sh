#!/bin/sh
# Runs one libFuzzer harness for a bounded time on a scratch copy of its seed corpus, so CTest
# never writes into fuzz/corpus/. Usage: run_bounded.sh <harness> <corpus-dir> <seconds>
set -eu
harness=$1 corpus=$2 secs=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus" "$work/artifacts"
cp -r "$corpus"/. "$work/corpus/" 2>/dev/null || true
exec "$harness" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus"
