#!/usr/bin/env bash
# Installs every Debian package fencegate needs to build, run and test, and nothing
# that is already there. Idempotent: a second run makes no change and needs no network.
# Used by the README's two commands, .ci/run and docker/Dockerfile.
# Extra Debian package names may be given as arguments. With --fuzz first, it also installs
# what scripts/fuzz.sh needs (clang-14 and libFuzzer); with --bench (after --fuzz, if both),
# what tests/bench/run-compare.sh needs (etcd). The default install is unchanged.
# FENCEGATE_SKIP_NODE_TOOLS=1 skips the npm-installed checkers (the Docker build needs none).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

install_node_tools() {
    if [ "${FENCEGATE_SKIP_NODE_TOOLS:-0}" = 1 ]; then
        return 0
    fi
    # The OpenAPI, Dockerfile and Compose checkers, pinned by their package-lock.json files
    # (installs nodejs+npm if missing).
    bash "$here/install-node-tools.sh"
}

# Build and runtime libraries (found by CMake through pkg-config).
build_pkgs=(build-essential cmake pkg-config git
    libhiredis-dev libmicrohttpd-dev libjansson-dev uuid-dev liblmdb-dev
    libcurl4-openssl-dev libcmocka-dev libpq-dev)
# What the run command and the tests start or call: a real Redis, curl and jq for the demo,
# procps for pgrep/ps in the test harness, iproute2 for ss and strace for the fault suite,
# and PostgreSQL 15, whose server the storage tests start in a temp dir of their own
# (initdb and postgres from /usr/lib/postgresql/15/bin).
tool_pkgs=(redis-server redis-tools curl jq procps ca-certificates strace iproute2
    postgresql-15)
# Only with --fuzz: the compiler and runtime of the libFuzzer targets in tests/fuzz/.
fuzz_pkgs=()
if [ "${1:-}" = "--fuzz" ]; then
    shift
    fuzz_pkgs=(clang-14 libfuzzer-14-dev)
fi
# Only with --bench: etcd, the peer that tests/bench/run-compare.sh measures fencegate against.
bench_pkgs=()
if [ "${1:-}" = "--bench" ]; then
    shift
    bench_pkgs=(etcd-server)
fi

missing=()
for p in "${build_pkgs[@]}" "${tool_pkgs[@]}" ${fuzz_pkgs[@]+"${fuzz_pkgs[@]}"} \
    ${bench_pkgs[@]+"${bench_pkgs[@]}"} "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-deps: all Debian packages present"
    install_node_tools
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install-deps: missing packages (${missing[*]}) and not root; run as root" >&2
        exit 1
    fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Debian's redis-server package would start a system Redis on 6379 from its postinst.
# fencegate never uses that one (tests start their own), so keep services from starting
# during the install when no policy exists yet.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    made_policy=1
fi
cleanup() { if [ "$made_policy" -eq 1 ]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT

# Debian's postgresql-15 would also create a system cluster ("main", port 5432) from its
# postinst, enabled to start at boot. The tests never use one, so tell postgresql-common not
# to create it: a drop-in read by pg_createcluster (createcluster.conf itself is a conffile,
# so it is not touched). A cluster that existed before this script ran is left as it was.
if [[ " ${missing[*]} " == *" postgresql-15 "* ]]; then
    $SUDO mkdir -p /etc/postgresql-common/createcluster.d
    printf '# fencegate: its tests start their own PostgreSQL; no system cluster.\ncreate_main_cluster = false\n' \
        | $SUDO tee /etc/postgresql-common/createcluster.d/fencegate.conf >/dev/null
fi

$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
cleanup
made_policy=0
install_node_tools
echo "install-deps: done"
