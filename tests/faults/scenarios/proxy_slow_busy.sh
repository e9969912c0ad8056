# shellcheck shell=bash disable=SC2154,SC2034 # the runner's variables, and the ones it reads
# Scenario proxy_slow_busy: proxy_slow (a Redis link that holds every chunk
# 900 ms each way, in 8 s windows, with four locks on one fresh resource at once at the start
# of each window) on a machine with no spare CPU. One busy loop per CPU runs at normal
# priority from before the workload starts until the last fault has healed, as other work on
# a shared machine would. `scripts/faults.sh --full` once failed proxy_slow on a busy machine
# (four requests answered together, 5.6 s past their wait_ms); the bound is the same here:
# every answer within wait_ms + 5 s (invariant 8, the checker's and fault_probe's), and a
# lock granted inside each slow window.
# ctest: short

source "$(dirname "${BASH_SOURCE[0]}")/proxy_slow.sh"

hog_pids=()

# start_hogs: one busy loop per CPU. Each ends by itself when this script is gone (it checks
# now and then) and after 300 s at most, so a failing run leaves none behind.
start_hogs() {
    local i n parent=$$
    n=$(nproc 2>/dev/null || echo 2)
    for ((i = 0; i < n; i++)); do
        timeout 300 bash -c 'while kill -0 "$1" 2>/dev/null; do
            for ((j = 0; j < 20000; j++)); do :; done; done' hog "$parent" &
        hog_pids+=($!)
    done
    say "$n CPU hogs running beside the gateway"
}

stop_hogs() {
    local pid
    for pid in "${hog_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${hog_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    hog_pids=()
}

# proxy_slow has no scenario_setup of its own; if it gains one, call it from here.
declare -F scenario_setup >/dev/null && fail "proxy_slow_busy would hide proxy_slow's scenario_setup"
scenario_setup() { start_hogs; }

eval "proxy_slow_fault() $(declare -f scenario_fault | tail -n +2)"
scenario_fault() {
    proxy_slow_fault "$1"
    [ "$1" -lt "$faults" ] || stop_hogs
}
