#!/bin/sh
# Installs every Debian package the build and the tests need, when missing.
# Idempotent and quiet when everything is present; needs root (or sudo) only to install.
# The list is the single place to add a dependency: keep it to packages Debian ships.
set -eu

PACKAGES="
  gcc make cmake pkg-config git
  clang libclang-rt-14-dev clang-format clang-tidy
  ragel
  libjansson-dev libseccomp-dev libcmocka-dev
  libsqlite3-dev libmicrohttpd-dev libssl-dev
  python3 python3-jsonschema python3-yaml
  openssl iproute2
"
# openssl (the CLI) makes the remote runner tests' certificates at test time; iproute2's ip
# builds their network namespaces and veth pairs (tests/e2e/test_remote.py).
# Node.js (for the end-to-end tests with the official MCP SDK) is checked by command, not by
# package: a machine may carry a newer Node than Debian's under the same package name.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    PACKAGES="$PACKAGES nodejs npm"
fi

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    exit 0
fi

echo "bootstrap: installing:$missing"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
# Update the package lists once, unless they were refreshed in the last day.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
    $SUDO apt-get update -q
fi
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
