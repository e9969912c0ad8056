#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz/ for SECONDS each (default 60), as the full
# suite asks. Installs clang-14 and libFuzzer (install-deps.sh --fuzz), builds the targets in
# build-fuzz/ with clang and -fsanitize=fuzzer,address,undefined, and fuzzes each one starting
# from its seed corpus tests/fuzz/corpus/<target>/ (read only: what the fuzzer finds goes to
# build-fuzz/fuzz-corpus/<target>/, and a crashing input to build-fuzz/fuzz-artifacts/).
# Exits non-zero when any target crashes, leaks, times out or breaks an invariant.
#
#   bash scripts/fuzz.sh [SECONDS]
#   FUZZ_TARGETS="token route" bash scripts/fuzz.sh 10    # only some targets
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
case "$seconds" in
    '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac

bash scripts/install-deps.sh --fuzz

# One target per seed corpus directory (tests/fuzz/CMakeLists.txt has the same list).
targets=${FUZZ_TARGETS:-$(cd tests/fuzz/corpus && ls)}
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFENCEGATE_FUZZ=ON
cmake --build build-fuzz -j "$jobs" --target fuzz-targets

mkdir -p build-fuzz/fuzz-artifacts
failed=()
summary=()
for t in $targets; do
    bin=build-fuzz/tests/fuzz/fuzz_$t
    work=build-fuzz/fuzz-corpus/$t
    log=build-fuzz/fuzz-$t.log
    mkdir -p "$work"
    echo "=== fuzz $t for ${seconds}s"
    rc=0
    # -rss_limit_mb and -timeout make memory blow-ups and hangs crashes too.
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="build-fuzz/fuzz-artifacts/$t-" "$work" "tests/fuzz/corpus/$t" \
        >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ "$rc" -ne 0 ]; then
        failed+=("$t")
        summary+=("$t: CRASH (exit $rc), see $log and build-fuzz/fuzz-artifacts/$t-*")
        grep -E "^(==[0-9]+==|SUMMARY|fuzz: invariant)" "$log" | head -5 >&2 || true
    else
        summary+=("$t: ${execs:-?} execs, 0 crashes, corpus $(ls "$work" | wc -l) files")
    fi
done

echo "=== fuzz summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -ne 0 ]; then
    echo "fuzz: crashes in: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: no crashes"
