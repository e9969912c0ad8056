#!/usr/bin/env bash
# Installs every Debian package fencegate needs to build, run and test, and nothing
# that is already there. Idempotent: a second run makes no change and needs no network.
# Used by the README's two commands, .ci/run and docker/Dockerfile.
# With --run first, it installs only what scripts/run.sh needs to build and start the
# gateway (see run_only_pkgs), no test tools and no npm checkers.
# Extra Debian package names may be given as arguments. With --fuzz first, it also installs
# what scripts/fuzz.sh needs (clang-14 and libFuzzer); with --bench (after --fuzz, if both),
# what the benchmarks need (etcd, valgrind). The default install is unchanged.
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
    libcurl4-openssl-dev libcmocka-dev libpq-dev libgnutls28-dev)
# What the run command and the tests start or call: a real Redis, curl and jq for the demo,
# procps for pgrep/ps in the test harness, iproute2 for ss and strace for the fault suite.
# redis-sentinel for the Sentinel sets the tests start; redis-tools
# brings redis-cli, whose --cluster create builds their Redis Clusters. PostgreSQL 15, whose
# server the storage tests start in a temp dir of their own (initdb and postgres from
# /usr/lib/postgresql/15/bin). Prometheus (prometheus and promtool) and python3 with PyYAML
# for the dashboard and alert-rule tests (tests/monitoring/). Chromium, which the status
# page's test drives headless through puppeteer-core (tests/ui/). openssl makes the test
# certificates and checks the TLS versions the gateway accepts (openssl s_client).
tool_pkgs=(redis-server redis-sentinel redis-tools curl jq procps ca-certificates strace
    iproute2 postgresql-15 prometheus python3 python3-yaml chromium openssl)
# run_only_pkgs: with --run, keeps of the lists above only what building the binaries
# (cmake -DFENCEGATE_TESTS=OFF) and scripts/run.sh need: the build packages less the test
# framework, plus Redis (redis-cli waits for it) and curl for the first request.
run_only_pkgs() {
    local p kept=()
    for p in "${build_pkgs[@]}"; do
        [ "$p" = libcmocka-dev ] || kept+=("$p")
    done
    build_pkgs=("${kept[@]}")
    tool_pkgs=(redis-server redis-tools curl)
    FENCEGATE_SKIP_NODE_TOOLS=1
}
if [ "${1:-}" = "--run" ]; then
    shift
    run_only_pkgs
fi
# Only with --fuzz: the compiler and runtime of the libFuzzer targets in tests/fuzz/.
fuzz_pkgs=()
if [ "${1:-}" = "--fuzz" ]; then
    shift
    fuzz_pkgs=(clang-14 libfuzzer-14-dev)
fi
# Only with --bench: etcd, the peer that tests/bench/run-compare.sh measures fencegate against,
# and valgrind, whose callgrind counts instructions for tests/bench/run-instructions.sh.
bench_pkgs=()
if [ "${1:-}" = "--bench" ]; then
    shift
    bench_pkgs=(etcd-server valgrind)
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

# keep_services_off before|after PACKAGE...: Debian's server packages enable their system
# service when installed (redis-server on 6379, redis-sentinel on 26379, etcd on 2379,
# prometheus on 9090, postgresql with a "main" cluster on 5432), to start at every boot. fencegate uses none of
# them: run.sh and the tests start their own servers on free ports. For the packages being
# installed:
#   before: for postgresql*, a createcluster.d drop-in with create_main_cluster = false, so
#           no cluster is created (cleanup removes it after the install);
#   after:  their units are disabled (and stopped, when systemd runs), which also disables
#           their SysV init links; without systemctl, deb-systemd-helper and update-rc.d do it.
# Services of packages that were already installed are left as they are.
# FENCEGATE_DEPS_ROOT prefixes the paths it changes (tests/scripts/install_deps_test.sh).
keep_services_off() {
    local phase=$1 p unit units=() pg=0
    local root=${FENCEGATE_DEPS_ROOT:-}
    local dropin=$root/etc/postgresql-common/createcluster.d/fencegate-no-main-cluster.conf
    shift
    for p in "$@"; do
        case "$p" in
            redis-server) units+=(redis-server) ;;
            redis-sentinel) units+=(redis-sentinel) ;;
            etcd-server) units+=(etcd) ;;
            prometheus) units+=(prometheus) ;;
            postgresql | postgresql-[0-9]*) units+=(postgresql); pg=1 ;;
        esac
    done
    if [ "$phase" = before ]; then
        if [ "$pg" -eq 1 ] && [ ! -e "$dropin" ]; then
            $SUDO mkdir -p "${dropin%/*}"
            echo 'create_main_cluster = false' | $SUDO tee "$dropin" >/dev/null
            made_dropin=$dropin
        fi
        return 0
    fi
    for unit in ${units[@]+"${units[@]}"}; do
        echo "install-deps: disabling the system service $unit (fencegate starts its own)"
        if command -v systemctl >/dev/null 2>&1; then
            if [ -z "$root" ] && [ -d /run/systemd/system ]; then
                $SUDO systemctl disable --now --quiet "$unit.service"
            else
                $SUDO systemctl ${root:+"--root=$root"} disable --quiet "$unit.service"
            fi
        else
            $SUDO deb-systemd-helper disable "$unit.service"
            if [ -x "/etc/init.d/$unit" ]; then $SUDO update-rc.d "$unit" disable; fi
        fi
    done
}

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Debian's redis-server package would start a system Redis on 6379 from its postinst.
# fencegate never uses that one (tests start their own), so keep services from starting
# during the install when no policy exists yet.
policy=${FENCEGATE_DEPS_ROOT:-}/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    made_policy=1
fi
made_dropin=""
cleanup() {
    if [ "$made_policy" -eq 1 ]; then $SUDO rm -f "$policy"; fi
    if [ -n "$made_dropin" ]; then $SUDO rm -f "$made_dropin"; fi
}
trap cleanup EXIT

$SUDO apt-get update -q
keep_services_off before "${missing[@]}"
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
keep_services_off after "${missing[@]}"
cleanup
made_policy=0 made_dropin=""
install_node_tools
echo "install-deps: done"
