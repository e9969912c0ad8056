#!/usr/bin/env bash
# The comparison in one command: fencegate vs locklib's scripts straight to Redis vs
# etcd's lock API, one load generator, one run, one table (tests/bench/compare_bench.c), then
# a second table of the gateway over plain HTTP beside HTTPS (tests/bench/tls_bench.c):
#   bash tests/bench/run-compare.sh [--seconds N] [--warmup-ms N] [--perf-dir DIR]
# It installs what is missing (etcd-server with --bench), builds an optimised tree, and
# starts its own redis-server (appendfsync always, then everysec), gateway, etcd and a
# do-nothing libmicrohttpd server on free loopback ports, stopping each by PID at the end.
# About 5.5 minutes with the default 5 s per row. Progress goes to stderr, the table to stdout.
# FENCEGATE_BUILD_DIR picks the build directory (default: build-bench, an optimised build of
# its own, so figures never come from a debug or sanitizer build).
set -euo pipefail
cd "$(dirname "$0")/../.."
FENCEGATE_SKIP_NODE_TOOLS=1 bash scripts/install-deps.sh --bench >&2
# --perf-dir records the gateway with perf (Debian's linux-perf); without it the profile would
# be silently missing, so refuse up front.
if [[ " $* " == *" --perf-dir "* ]] && ! command -v perf >/dev/null; then
    echo "run-compare.sh: --perf-dir needs perf on PATH (Debian: apt-get install linux-perf)" >&2
    exit 2
fi
build="${FENCEGATE_BUILD_DIR:-build-bench}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target compare_bench tls_bench fencegate bench_null_server \
    -j"$(nproc)" >&2
"$build/tests/bench/compare_bench" "$@"
# Then the same gateway over plain HTTP and over HTTPS, side by side (tests/bench/tls_bench.c):
# 6 rows of --seconds each, about 35 s more with the default 5 s.
seconds=()
while [ $# -gt 0 ]; do
    case $1 in
    --seconds) seconds=(--seconds "$2"); shift 2 ;;
    *) shift ;;
    esac
done
echo
"$build/tests/bench/tls_bench" "${seconds[@]}"
