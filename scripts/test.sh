#!/usr/bin/env bash
# The test command: installs what is missing, then builds twice (a normal build and one with
# AddressSanitizer + UndefinedBehaviorSanitizer) and runs the whole suite under both with ctest.
# Exits non-zero on any failure. .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
run_suite() {
    local dir=$1; shift
    echo "=== build $dir ($*)"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
    cmake --build "$dir" -j "$jobs"
    echo "=== test $dir"
    # Each test program starts its own redis-server on a free port, so they may run in
    # parallel; a failing test names itself.
    (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 900)
}

run_suite build
# Leaks are reported by LeakSanitizer and fail the run; halt on the first UBSan report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
run_suite build-asan -DFENCEGATE_SANITIZE=ON
echo "=== all tests passed (normal and sanitizer builds)"
