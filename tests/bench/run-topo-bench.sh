#!/usr/bin/env bash
# The topology rows in one command: fencegate on a single Redis, on Sentinel,
# on a 3-master Cluster and on Redlock over 3 and 5 masters, one run side by side
# (tests/bench/topo_bench.c):
#   bash tests/bench/run-topo-bench.sh [--seconds N] [--conns N] [--only redlockthree,...]
# It builds an optimised tree (FENCEGATE_BUILD_DIR, default build-bench) and starts and
# stops every process itself. About a minute with the default 5 s per row. Progress goes to
# stderr, the table (Markdown, as in docs/performance.md, "Topologies") to stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${FENCEGATE_BUILD_DIR:-build-bench}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target topo_bench fencegate fg_proxy -j2 >&2
exec "$build/tests/bench/topo_bench" "$@"
