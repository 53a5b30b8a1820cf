#!/bin/sh
# Installs every Debian package the build and the tests need, when missing.
# Idempotent and quiet when everything is present (one dpkg-query, no apt); needs root (or sudo)
# only to install. Everything it prints goes to stderr (scripts/start.sh's stdout is the
# server's). The list is the single place to add a dependency: keep it to packages Debian ships.
#
#   scripts/bootstrap.sh           install what is missing
#   scripts/bootstrap.sh --check   only say what is missing: exit 0 when nothing is, else 1
#
# Names are version-neutral, so the same list holds on Debian 12 and 13 and Ubuntu 22.04 and
# 24.04: each is either an unversioned library -dev package or one of the llvm-defaults
# packages (clang, clang-format, clang-tidy, libclang-rt-dev) that depend on that release's
# default LLVM. The one that needs an argument is clang's libFuzzer runtime (the fuzz preset
# links -fsanitize=fuzzer):
#   - Debian 12: llvm-defaults 0.55.7 ships libclang-rt-dev, which depends on
#     libclang-rt-14-dev, which holds libclang_rt.fuzzer-x86_64.a for the default clang 14
#     (checked with apt-cache depends/show on Debian 12).
#   - Ubuntu 24.04: llvm-defaults 1:18.0-59~exp2 ships libclang-rt-dev (universe, like clang
#     itself), depending on libclang-rt-18-dev for the default clang 18; Debian 13's newer
#     llvm-defaults keeps the package, for clang 19.
#   - Ubuntu 22.04: llvm-defaults 0.55~exp2 predates libclang-rt-dev (added in 0.55.5), and
#     llvm-toolchain-14 1:14.0.0 predates the libclang-rt-14-dev split (1:14.0.6-10~exp4): the
#     runtime is in libclang-common-14-dev, which clang-14 depends on. So libclang-rt-dev is
#     dropped when apt does not know it (after apt-get update): clang alone brings the runtime.
# The other names are the same package on all four (gcc, make, cmake, pkg-config, git, ragel,
# libjansson-dev, libyajl-dev, libseccomp-dev, libcmocka-dev, libsqlite3-dev, libmicrohttpd-dev,
# libssl-dev, python3, python3-jsonschema, python3-yaml, python3-prometheus-client, openssl,
# iproute2). Note that the build needs CMake 3.25 (Ubuntu 22.04 ships 3.22).
set -eu

check=false
case "${1:-}" in
    --check) check=true ;;
    "") ;;
    *)
        echo "usage: bootstrap.sh [--check]" >&2
        exit 2
        ;;
esac

PACKAGES="
  gcc make cmake pkg-config git
  clang libclang-rt-dev clang-format clang-tidy
  ragel
  libjansson-dev libyajl-dev libseccomp-dev libcmocka-dev
  libsqlite3-dev libmicrohttpd-dev libssl-dev
  python3 python3-jsonschema python3-yaml python3-prometheus-client
  openssl iproute2
"
# openssl (the CLI) makes the remote runner tests' certificates at test time; iproute2's ip
# builds their network namespaces and veth pairs (tests/e2e/test_remote.py).
# libyajl-dev: the runner wire's fast JSON path (yajl lexes, jansson builds the tree:
# src/base/base_json_fast.c).
# python3-prometheus-client's text parser reads GET /metrics in tests/e2e/test_metrics.py.
# Node.js (for the end-to-end tests with the official MCP SDK) is checked by command, not by
# package: a machine may carry a newer Node than Debian's under the same package name.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    PACKAGES="$PACKAGES nodejs npm"
fi

# One dpkg-query for the whole list: "ii name" for each installed package.
# shellcheck disable=SC2086
installed=" $(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' $PACKAGES 2>/dev/null |
    awk '$1 == "ii" { printf "%s ", $2 }')"
missing=""
for p in $PACKAGES; do
    case "$installed" in
        *" $p "*) ;;
        *) missing="$missing $p" ;;
    esac
done
# libclang-rt-dev stands for clang's libFuzzer runtime: where another installed package already
# holds it (Ubuntu 22.04's libclang-common-14-dev, or a versioned libclang-rt-N-dev installed by
# hand), nothing is missing. dpkg -S costs a second, and only where libclang-rt-dev is absent.
case " $missing " in
    *" libclang-rt-dev "*)
        if dpkg -S '*/libclang_rt.fuzzer*' >/dev/null 2>&1; then
            missing=$(echo "$missing" | sed 's/ libclang-rt-dev//')
        fi
        ;;
esac
if [ -z "$missing" ]; then
    exit 0
fi
if $check; then
    echo "bootstrap: missing:$missing" >&2
    exit 1
fi

echo "bootstrap: installing:$missing" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
# Update the package lists once, unless they were refreshed in the last day.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
    $SUDO apt-get update -q >&2
fi
# Ubuntu 22.04 has no libclang-rt-dev: clang brings the runtime there (see above). Only apt's
# lists, now fresh, can tell.
case " $missing " in
    *" libclang-rt-dev "*)
        if ! apt-cache show libclang-rt-dev >/dev/null 2>&1; then
            echo "bootstrap: no libclang-rt-dev here (Ubuntu 22.04): clang brings libFuzzer" >&2
            missing=$(echo "$missing" | sed 's/ libclang-rt-dev//')
        fi
        ;;
esac
if [ -z "$missing" ]; then
    exit 0
fi
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing >&2
