#!/bin/sh
# Runs every libFuzzer harness of a fuzz-preset build for SECONDS each, JOBS at a time, on
# scratch copies of the seed corpora, and prints one line per harness with its executions and
# result. Findings go to OUT/<name>/ (crash-*, leak-*, timeout-*); the exit status is non-zero
# if any harness found something.
# Usage: fuzz/campaign.sh [SECONDS=60] [JOBS=2] [BUILD=build/fuzz] [OUT=/tmp/cs-campaign]
set -eu
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."
secs=${1:-60} jobs=${2:-2} build=${3:-build/fuzz} out=${4:-/tmp/cs-campaign}
mkdir -p "$out"
run_one() {
    h=$1
    name=$(basename "$h" _fuzz)
    mkdir -p "$out/$name/corpus" "$out/$name/artifacts"
    cp -r "fuzz/corpus/$name/." "$out/$name/corpus/" 2>/dev/null || true
    if "$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$out/$name/artifacts/" "$out/$name/corpus" >"$out/$name/log" 2>&1; then
        rc=ok
    else
        rc=FINDING
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$name/log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$out/$name/log" | tail -1 | cut -d' ' -f2)
    printf '%-32s %10s execs  cov %5s  %ss  %s\n' "$name" "${execs:-?}" "${cov:-?}" "$secs" "$rc"
}
# One harness per call of this script with --one (the parallel runs come from xargs -P: a job
# count taken with `jobs -p` inside a pipeline's subshell is always 0 under dash, which once let
# every harness run at the same time).
if [ "${5:-}" = "--one" ]; then
    run_one "$6"
    exit 0
fi
status=0
for h in "$build"/fuzz/*_fuzz; do
    echo "$h"
done | xargs -P "$jobs" -n 1 sh "$self" "$secs" "$jobs" "$build" "$out" --one | sort |
    tee "$out/summary.txt"
grep -q FINDING "$out/summary.txt" && status=1
exit $status
