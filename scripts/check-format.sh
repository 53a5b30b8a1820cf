#!/bin/sh
# Fails when a hand-written C file differs from .clang-format (LLVM base, 4 spaces, 100 columns,
# Linux braces). Generated code lives in the build tree and is not checked, nor is what npm
# installs under tests/e2e/*/node_modules (Node 22 ships C headers).
# Usage: scripts/check-format.sh [--fix]
set -eu
cd "$(dirname "$0")/.."
files=$(find src helper tests fuzz bench -name node_modules -prune -o -name '*.[ch]' -print 2>/dev/null | sort)
if [ "${1:-}" = "--fix" ]; then
    # shellcheck disable=SC2086
    clang-format -i $files
    exit 0
fi
# shellcheck disable=SC2086
clang-format --dry-run -Werror $files
echo "format: $(echo "$files" | wc -l) files clean"
