#!/usr/bin/env bash
# The fault suite (tests/faults/): builds, then runs every scenario against a real
# redis-server and the real gateway, and checks the recorded history for violations.
#
#   bash scripts/faults.sh [--short|--full] [BUILD_DIR]
#
# --short (the default) is exactly what ctest runs in the test command (ctest -R faults_), a
# few minutes at most. --full runs each scenario longer with more faults (10 gateway kills,
# 5 Redis kills, 5 total losses, 40 script flushes, 5 each of DEBUG SLEEP, CLIENT PAUSE, -BUSY,
# SIGSTOP of Redis and the ambiguous unlock retry, 3 -OOM episodes) through
# tests/faults/run_scenario.sh, then every libFuzzer target for 60 s (scripts/fuzz.sh).
# BUILD_DIR defaults to build; pass build-asan (configured with -DFENCEGATE_SANITIZE=ON) to
# run the gateway under ASan and UBSan. Exits non-zero on the first failing scenario.
set -euo pipefail
cd "$(dirname "$0")/.."

length=short
case ${1:-} in
    --short) shift ;;
    --full) length=full; shift ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
esac
dir=${1:-build}
extra=()
[ "$dir" = build-asan ] && extra=(-DFENCEGATE_SANITIZE=ON)

cmake -S . -B "$dir" "${extra[@]}"
cmake --build "$dir" -j "$(nproc 2>/dev/null || echo 2)"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [ "$length" = short ]; then
    (cd "$dir" && ctest --output-on-failure -R '^faults_')
    exit 0
fi
"$dir/tests/faults/test_faults_checker"
for scenario in pause steal gateway_kill redis_kill redis_auth redis_loss script_flush \
    redis_sleep redis_pause redis_busy redis_stop redis_oom unlock_retry \
    $(for f in tests/faults/scenarios/*.sh; do [ -e "$f" ] && basename "$f" .sh; done); do
    echo "=== faults_$scenario (full)"
    bash tests/faults/run_scenario.sh "$scenario" full "$dir/gateway/fencegate" \
        "$dir/tests/faults/fg_workload" "$dir/tests/faults/fg_checker"
done
echo "=== all fault scenarios passed (full)"
# The issue's full suite also fuzzes every libFuzzer target for 60 s (clang-14, its own
# build-fuzz/ tree); FG_FAULTS_FUZZ_S changes the time, 0 skips it.
fuzz_s=${FG_FAULTS_FUZZ_S:-60}
if [ "$fuzz_s" != 0 ]; then
    echo "=== fuzzing every target for $fuzz_s s"
    bash scripts/fuzz.sh "$fuzz_s"
fi
echo "=== the full suite passed"
