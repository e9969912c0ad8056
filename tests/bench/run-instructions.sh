#!/usr/bin/env bash
# The instructions the gateway runs per /lock + /unlock pair, counted by valgrind's callgrind,
# for each gateway binary given, side by side; then, for each, the functions that ran most
# of them:
#   bash tests/bench/run-instructions.sh [--pairs N] [--top K] [FENCEGATE...]
# Default binary: the optimised build's gateway (FENCEGATE_BUILD_DIR, default build-bench, as
# run-compare.sh builds it). Give two builds (a tree before a change and after) to compare
# them.
#
# Why a count and not a rate: a rate on this kind of machine moves by tens of percent from
# one run to the next, a count by tenths, so a change of a few percent in the gateway's own
# work shows only here. This machine has no hardware counters for perf stat, so the count
# comes from callgrind, which runs the gateway about fifty times slower: the count is exact,
# the time is not a figure.
#
# Each binary gets its own redis-server (unix socket, no persistence: tests/common/redis.sh)
# and its own gateway with one HTTP loop, on a free loopback port; one curl sends 200 warm-up
# pairs, then N pairs (default 1000) on one keep-alive connection, each pair on one of 64
# resources with an owner of its own. The count covers every thread of the gateway from the
# first measured pair to the last, in user space only: the kernel's share (system calls) is
# what perf and strace measure (docs/performance.md, "Where the gateway's time goes").
# Every answer must be 200, else the run fails.
set -euo pipefail
die() { echo "run-instructions.sh: $*" >&2; exit 2; }
pairs=1000 top=15 bins=()
while [ $# -gt 0 ]; do
    case $1 in
    --pairs | --top)
        [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "$1 needs a positive whole number"
        if [ "$1" = --pairs ]; then pairs=$2; else top=$2; fi
        shift 2 ;;
    -h | --help) sed -n '2,7p' "$0"; exit 0 ;;
    -*) die "unknown flag $1" ;;
    *)
        # Named from where the script was started, before it moves to the source tree.
        if [ ! -f "$1" ] || [ ! -x "$1" ]; then die "$1 is not an executable file"; fi
        bins+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")")
        shift ;;
    esac
done
cd "$(dirname "$0")/../.."
root=$PWD
FENCEGATE_SKIP_NODE_TOOLS=1 bash scripts/install-deps.sh --bench >&2
for tool in valgrind callgrind_control callgrind_annotate curl; do
    command -v "$tool" >/dev/null || die "$tool not found (scripts/install-deps.sh --bench)"
done
if [ ${#bins[@]} -eq 0 ]; then
    build="${FENCEGATE_BUILD_DIR:-build-bench}"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" --target fencegate -j"$(nproc)" >&2
    bins=("$(cd "$build" && pwd)/gateway/fencegate")
fi

# shellcheck source=../common/redis.sh
source "$root/tests/common/redis.sh" # fg_redis_start/stop, fg_topo_free_port (topo.sh)
tmp=$(mktemp -d)
gw_pid=""
trap 'if [ -n "$gw_pid" ]; then kill -KILL "$gw_pid" 2>/dev/null || true; wait "$gw_pid" 2>/dev/null || true; fi
      fg_redis_stop; rm -rf "$tmp"' EXIT

# A curl config of $1 pairs to port $2: one /lock and one /unlock each, every answer's
# status on its own line.
pairs_config() {
    local i
    for ((i = 1; i <= $1; i++)); do
        local op
        for op in lock unlock; do
            [ "$i$op" = 1lock ] || echo next
            printf 'url = "http://127.0.0.1:%s/%s"\nrequest = "POST"\n' "$2" "$op"
            printf 'header = "Content-Type: application/json"\n'
            printf 'data = "{\\"resource\\":\\"bench.r%d\\",\\"owner\\":\\"bench-owner-%d\\"}"\n' \
                $((i % 64)) "$i"
            printf 'output = "/dev/null"\nwrite-out = "%%{http_code}\\n"\n'
        done
    done
}

# Counts one binary; prints "instructions-per-pair<TAB>binary" to fd 3 and its top functions
# to stdout.
count() {
    local bin=$1 dir port deadline codes
    dir=$(mktemp -d "$tmp/run.XXXX")
    fg_redis_start "$dir" || exit 1
    port=$(fg_topo_free_port) || { echo "run-instructions.sh: no free port" >&2; exit 1; }
    valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$bin" \
        --listen "127.0.0.1:$port" --redis "unix://$FG_REDIS_SOCK" --data "$dir/data" \
        --threads 1 >"$dir/gateway.log" 2>&1 &
    gw_pid=$!
    deadline=$((SECONDS + 60))
    until curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null; do
        if [ $SECONDS -ge $deadline ] || ! kill -0 "$gw_pid" 2>/dev/null; then
            tail -n 20 "$dir/gateway.log" >&2
            echo "run-instructions.sh: $bin did not answer /healthz within 60 s" >&2
            exit 1
        fi
        sleep 0.1
    done
    pairs_config 200 "$port" >"$dir/warm.cfg"
    pairs_config "$pairs" "$port" >"$dir/run.cfg"
    # A request curl could not make shows as 000 in the codes, checked below.
    curl -sS -K "$dir/warm.cfg" >"$dir/warm.codes" || true
    callgrind_control -z "$gw_pid" >/dev/null # the count starts here
    curl -sS -K "$dir/run.cfg" >"$dir/run.codes" || true
    callgrind_control -d "$gw_pid" >/dev/null # and ends here, in cg.out.1
    kill -TERM "$gw_pid"
    wait "$gw_pid" || true
    gw_pid=""
    fg_redis_stop
    codes=$(sort "$dir/warm.codes" "$dir/run.codes" | uniq -c | tr -s ' ')
    if [ "$codes" != " $((2 * (pairs + 200))) 200" ]; then
        echo "run-instructions.sh: $bin answered other than 200:$codes" >&2
        exit 1
    fi
    [ -s "$dir/cg.out.1" ] || { echo "run-instructions.sh: callgrind wrote no count" >&2; exit 1; }
    callgrind_annotate --threshold=100 "$dir/cg.out.1" >"$dir/annotated"
    local total
    total=$(awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }' "$dir/annotated")
    [ -n "$total" ] || { echo "run-instructions.sh: no total in callgrind's count" >&2; exit 1; }
    printf '%s\t%s\n' "$((total / pairs))" "$bin" >&3
    echo
    echo "$bin: the $top functions with the most instructions of their own, per pair"
    awk -v n="$pairs" -v top="$top" '
        /file:function/ { on = 1; next }
        on && /^ *[0-9,]+ \(/ && !/\(100\.0%\)/ && shown < top {
            count = $1; gsub(",", "", count)
            fn = $0; sub(/^ *[0-9,]+ \( *[0-9.]+%\) +/, "", fn); sub(/ \[.*$/, "", fn)
            sub(/^.*\//, "", fn)
            obj = ""
            if (match($0, /\[[^]]*\]$/)) {
                obj = substr($0, RSTART + 1, RLENGTH - 2); sub(/^.*\//, "", obj)
            }
            printf "  %8.0f  %s  (%s)\n", count / n, fn, obj
            shown++
        }' "$dir/annotated"
}

exec 3>"$tmp/totals"
for bin in "${bins[@]}"; do
    count "$bin"
done
exec 3>&-
echo
echo "instructions per /lock + /unlock pair in the gateway (callgrind, $pairs pairs, user space):"
while IFS=$'\t' read -r n bin; do
    printf '  %10s  %s\n' "$(printf "%'d" "$n")" "$bin"
done <"$tmp/totals"
