# shellcheck shell=bash disable=SC2154,SC2034
# (SC2154: $tmp, $rport, $seed... are run_scenario.sh's; SC2034: it reads faults, steps...)
# Helpers for the scenarios in which Redis's data goes back in time under the running gateway
# (aof_regression.sh, replica_stale.sh). Sourced by them. Not a scenario: it does not end in
# .sh, so neither ctest nor scripts/faults.sh --full runs it.
#
# What they prove about each fault:
#   1. the fault really took Redis back: a fence counter (fg:{R}:fence) of one of the run's
#      resources is lower in the data Redis comes back with than it was just before the
#      fault (fences, fell); otherwise the scenario would test nothing, and it fails;
#   2. the gateway got past it: each counter that fell is lifted above its value from before
#      the fault by the next grant (every acquisition passes a floor, gateway/src/core/fence.c),
#      and fencegate_token_floor_corrections_total went up meanwhile (wait_lifted); also
#      when the gateway was killed with Redis and lost what it remembered (gw_kill).
# The checker then checks the history as in every scenario.

# Redis servers a scenario starts besides run_scenario.sh's own (a probe, a replica), by PID.
extra_pids=()

# extra_forget PID: drops PID from extra_pids once it has been stopped.
extra_forget() {
    local keep=() p
    for p in "${extra_pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    extra_pids=("${keep[@]}")
}

# extra_stop PID: stops one of them by its PID (SIGKILL: what it holds no longer matters).
extra_stop() {
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    extra_forget "$1"
}

# keep_status RC: returns RC, so the next command sees it as $?.
keep_status() { return "$1"; }

# On exit: stop the extra servers (showing their logs' last lines if the run failed), then
# run_scenario.sh's own cleanup, which reads the exit status from $? on entry; in both
# branches below, $? is the status keep_status returned, and an "if" condition does not
# trip set -e.
regress_exit() {
    local rc=$? p log
    for p in "${extra_pids[@]}"; do extra_stop "$p"; done
    if [ "$rc" -ne 0 ]; then
        for log in "$tmp"/extra-*.log; do
            [ -f "$log" ] || continue
            echo "----- last lines of $log" >&2
            tail -n 20 "$log" >&2
        done
    fi
    if keep_status "$rc"; then cleanup; else cleanup; fi
}

# chain_cleanup: puts regress_exit in place of run_scenario.sh's EXIT trap. Called from
# scenario_prestart, since the runner sets its trap after it sourced the scenario file.
chain_cleanup() { trap regress_exit EXIT; }

# serving PORT PID: the redis-server with process id PID answers PING on PORT; another
# server that took the port meanwhile does not count.
serving() {
    redis-cli -h 127.0.0.1 -p "$1" info server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$2" \
        && redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG
}

# extra_start NAME DIR ARGS...: starts a redis-server of the scenario on a free port with its
# data in DIR and its log in $tmp/extra-NAME.log, and waits until it answers PING. Sets
# extra_port and extra_pid. A server that exits before it answers (its port was taken
# between free_port and its bind) is started again on another port, twice at most.
extra_start() {
    local name=$1 dir=$2 attempt deadline
    shift 2
    mkdir -p "$dir"
    for attempt in 1 2 3; do
        extra_port=$(free_port)
        redis-server --port "$extra_port" --bind 127.0.0.1 --dir "$dir" --save '' \
            --maxmemory-policy noeviction --enable-debug-command local "$@" \
            --daemonize no --logfile "$tmp/extra-$name.log" &
        extra_pid=$!
        extra_pids+=("$extra_pid")
        deadline=$((SECONDS + 10))
        while kill -0 "$extra_pid" 2>/dev/null; do
            serving "$extra_port" "$extra_pid" && return 0
            [ "$SECONDS" -lt "$deadline" ] || fail "the $name redis-server did not answer within 10 s"
            sleep 0.05
        done
        extra_stop "$extra_pid"
        say "the $name redis-server exited before answering (attempt $attempt)"
    done
    fail "the $name redis-server did not start (see $tmp/extra-$name.log)"
}

# fences PORT FILE: writes the fence counters of the run's resources (fg_workload's RESOURCES,
# $scenario-$seed-0 to -2) in the Redis on PORT to FILE, one "key value" line each, the
# value empty for a counter that does not exist. Fails on anything but numbers (an error).
fences() {
    local keys=() r
    for r in 0 1 2; do keys+=("fg:{$scenario-$seed-$r}:fence"); done
    redis-cli -h 127.0.0.1 -p "$1" mget "${keys[@]}" >"$2.values" 2>&1 || true
    paste -d ' ' <(printf '%s\n' "${keys[@]}") "$2.values" >"$2"
    awk 'NF > 2 || $2 !~ /^[0-9]*$/ { bad = 1 } END { exit bad || NR != 3 }' "$2" \
        || fail "reading the fence counters on port $1: $(tr '\n' ' ' <"$2.values")"
    rm -f "$2.values"
}

# fell BEFORE AFTER: the counters that are lower in AFTER than in BEFORE, or missing from
# it, as "key before after" lines (files written by fences).
fell() {
    awk 'NR == FNR { after[$1] = $2; next }
        $2 + 0 > after[$1] + 0 { print $1, $2, after[$1] + 0 }' "$2" "$1"
}

# proof_fell BEFORE AFTER WHAT: fails unless some counter fell (point 1 above); says which.
# Leaves the list in $tmp/fell.
proof_fell() {
    fell "$1" "$2" >"$tmp/fell"
    [ -s "$tmp/fell" ] || fail "$3 took no fence counter back, so it tested nothing: \
before $(tr '\n' ' ' <"$1"), after $(tr '\n' ' ' <"$2")"
    say "$3 took fence counters back (key, before, after): $(paste -sd ';' "$tmp/fell")"
}

# write_ok_since LINE: some write recorded after history line LINE was acknowledged.
write_ok_since() {
    awk -F'\t' -v from="$1" 'NR > from && $2 == "write" && $6 == 200 { found = 1; exit }
        END { exit !found }' "$hist"
}

# moved_past FILE: some counter of the run is above its value in FILE (read from the
# gateway's Redis now).
moved_past() {
    fences "$rport" "$tmp/fences-now"
    [ -n "$(fell "$tmp/fences-now" "$1")" ]
}

# gw_kill: the gateway killed with SIGKILL along with Redis (gw_start brings it back), so
# the floor cannot come from the tokens the process remembers (max_token) but only from what
# is durable: storage's token ledger and the highest token written. The new process counts
# its floor corrections from zero.
gw_kill() {
    kill -KILL "$gw_pid"
    wait "$gw_pid" 2>/dev/null || true
    gw_pid=""
    corrections=0
}

# floor_corrections: the gateway's fencegate_token_floor_corrections_total now.
floor_corrections() {
    curl -fsS --max-time 2 "$(gw_url)/metrics" |
        awk '$1 == "fencegate_token_floor_corrections_total" { print $2 }'
}

# lifted: every counter listed in $tmp/fell is above its value from before the fault.
lifted() {
    local key was now
    while read -r key was _; do
        now=$(rcli get "$key" 2>/dev/null) || return 1
        [[ $now =~ ^[0-9]+$ ]] && [ "$now" -gt "$was" ] || return 1
    done <"$tmp/fell"
}

# wait_lifted CORRECTIONS: point 2 above. CORRECTIONS is the floor corrections counter read
# before the fault. The workload takes each lock again within seconds, so 20 s is generous.
wait_lifted() {
    local now
    wait_until "the gateway lifting the fallen fence counters above their old values" 20 lifted
    now=$(floor_corrections)
    [ "${now:-0}" -gt "$1" ] || fail "fencegate_token_floor_corrections_total did not go up \
across the fault ($1, then ${now:-none})"
    say "counters lifted; floor corrections $1 -> $now"
}
