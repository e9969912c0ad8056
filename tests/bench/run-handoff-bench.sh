#!/usr/bin/env bash
# Builds and runs the hand-off benchmark (tests/bench/handoff_bench.c):
#   bash tests/bench/run-handoff-bench.sh [--no-aof-run] [--fencegate PATH]
# It starts its own redis-server and fencegate on free loopback ports and prints a table.
# FENCEGATE_BUILD_DIR picks the build directory (default: build-bench, an optimised build of
# its own, so figures never come from a debug or sanitizer build).
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${FENCEGATE_BUILD_DIR:-build-bench}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target handoff_bench fencegate -j"$(nproc)"
exec "$build/tests/bench/handoff_bench" "$@"
