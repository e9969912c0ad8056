# shellcheck shell=bash disable=SC2154,SC2034 # the runner's variables, and the ones it reads
# slow_store_stale: stale writes against a slow PostgreSQL store must not stall the gateway's
# event loops.
#
# The gateway (--threads 2) has a real PostgreSQL 15 store and token ledger (--store, started
# by tests/common/pg.sh) that it reaches through fg_proxy (the helpers of proxy_network.sh).
# Each fault, while the workload runs:
#   1. on a fresh resource R (the proxy passing): owner a takes R, writes with its token T1,
#      releases; owner b takes R (T2 > T1), writes with T2, releases;
#   2. the proxy holds every chunk DELAY_MS (100 ms) each way: about 200 ms per PostgreSQL
#      round trip;
#   3. the baseline through the slow link, one request at a time: BASELINE_N lock+unlock
#      pairs (a grant on a PostgreSQL store commits to the shared ledger) and BASELINE_N
#      GET /locks/{r} on a resource of their own;
#   4. fg_pool keeps STALE_CONNS (48) keep-alive connections sending PUT /resources/R with
#      Fencing-Token T1 for STALE_S (10) s, each again as soon as it is answered;
#   5. meanwhile, on fresh connections, three probe loops: GET /healthz; GET /locks/{other};
#      POST /lock (wait_ms 0) and its /unlock on another resource;
#   6. the proxy passes again; mark heal.
# What must hold (the figures are printed, p50 and p99):
#   - every stale write answered 409 stale_token, never 200 (nor anything else, nor dropped);
#   - every probe answered 200; /healthz p99 at most HEALTHZ_P99_MS (100 ms): /healthz needs
#     neither Redis nor the store, so only a stalled loop thread breaks it;
#   - GET /locks and lock+unlock: p99 at most the baseline's slowest + PROBE_MARGIN_MS (500 ms);
#   - the checker's invariants over the workload, and the gateway back to its baseline.
# On this tree up to 99916b4 the verdict on a write's token (gw__fence_verdict, fence.c)
# reads the resource's highest token from the store (store_highest) on the loop thread that
# received the write: 48 stale writers through 200 ms keep both loops in PostgreSQL queries
# (the issue measured /healthz p50 153 ms to 4.6 s).
# A short run takes about 40 s.

source "$(dirname "${BASH_SOURCE[0]}")/proxy_network.sh"
# shellcheck source=SCRIPTDIR/slow_probes.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/slow_probes.helpers.bash"
# shellcheck source=../../common/pg.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../common/pg.sh"

faults=1
[ "$length" = full ] && faults=3
steps=30
gw_extra+=(--threads 2)
fd_slack_extra=8 # the gateway's PostgreSQL connections, opened as the load needs them
DELAY_MS=100
BASELINE_N=3
STALE_CONNS=48
STALE_S=10
HEALTHZ_P99_MS=100
PROBE_MARGIN_MS=500
pool_bin=$(dirname "$workload")/fg_pool
[ -x "$pool_bin" ] || fail "not executable: $pool_bin (build the fg_pool target)"

# The EXIT trap: PostgreSQL killed by PID (its clients are about to go), then the proxy's
# trap, which stops the proxy and runs run_scenario.sh's cleanup with the exit status.
store_exit() {
    local rc=$?
    fg_pg_kill >/dev/null 2>&1 || true
    if [ "$rc" -ne 0 ] && [ -f "$tmp/pg/postgres.log" ]; then
        echo "----- last lines of $tmp/pg/postgres.log" >&2
        tail -n 20 "$tmp/pg/postgres.log" >&2 || true
    fi
    if [ "$rc" -eq 0 ]; then proxy_exit; else (exit "$rc") || proxy_exit; fi
}

# PostgreSQL first, then fg_proxy in front of it (proxy_network.sh's prestart puts it in
# front of Redis instead), and the gateway's --store through the proxy.
scenario_prestart() {
    [ -x "$proxy_bin" ] || fail "not executable: $proxy_bin (build the fg_proxy target)"
    mkdir -p "$tmp/pg"
    chmod 755 "$tmp" # the postgres user (initdb refuses root) must reach $tmp/pg
    trap store_exit EXIT
    fg_pg_start "$tmp/pg" || fail "PostgreSQL would not start"
    say "postgres pid $FG_PG_PID on port $FG_PG_PORT"
    coproc proxy_io { exec "$proxy_bin" "$FG_PG_PORT" 2>>"$tmp/proxy.log"; }
    proxy_pid=$proxy_io_PID
    read -r -t 10 -u "${proxy_io[0]}" proxy_answer || fail "fg_proxy did not start"
    proxy_port=${proxy_answer#port }
    [[ $proxy_port =~ ^[0-9]+$ ]] || fail "fg_proxy printed '$proxy_answer', not its port"
    proxy_fd_base=$(ls "/proc/$proxy_pid/fd" | wc -l)
    gw_extra+=(--store "postgresql://postgres:$FG_PG_PASSWORD@127.0.0.1:$proxy_port/postgres")
    say "fg_proxy pid $proxy_pid on port $proxy_port in front of PostgreSQL"
}


# take RESOURCE OWNER: a lock (30 s lease); sets token.
take() {
    local code
    code=$(post /lock "" "{\"resource\":\"$1\",\"owner\":\"$2\",\"ttl_ms\":30000}" 10)
    [ "$code" = 200 ] || fail "$2 could not take $1: $code $(answer)"
    token=$(answer | grep -o '"token": *[0-9]*' | grep -o '[0-9]*$')
    [ -n "$token" ] || fail "no token in the answer to $2's lock: $(answer)"
}

# write RESOURCE TOKEN: PUT /resources/RESOURCE with Fencing-Token TOKEN; prints the status.
write() {
    curl -sS --max-time 10 -o "$tmp/answer" -w '%{http_code}' -X PUT -H 'Content-Type: text/plain' \
        -H "Fencing-Token: $2" --data-binary "value-$2" "$(gw_url)/resources/$1" 2>/dev/null || true
}

scenario_fault() {
    local i=$1 j res="$scenario-$seed-R-$1" other="$scenario-$seed-other-$1" code t1 t2 pids=()
    local base_lock base_get st_h st_g st_l bound_l bound_g stale_pid failed=""
    local sent answered dropped inflight s200 s409 nstale other_n p50 p99 max
    progress "$steps"
    # 1. Two writes, the second with a newer token.
    take "$res" "a-$i"; t1=$token
    code=$(write "$res" "$t1"); [ "$code" = 200 ] || fail "a-$i's write with token $t1: $code $(answer)"
    code=$(post /unlock "" "{\"resource\":\"$res\",\"owner\":\"a-$i\"}" 10)
    [ "$code" = 200 ] || fail "a-$i could not unlock $res: $code $(answer)"
    take "$res" "b-$i"; t2=$token
    [ "$t2" -gt "$t1" ] || fail "the second token $t2 on $res is not above the first $t1"
    code=$(write "$res" "$t2"); [ "$code" = 200 ] || fail "b-$i's write with token $t2: $code $(answer)"
    code=$(post /unlock "" "{\"resource\":\"$res\",\"owner\":\"b-$i\"}" 10)
    [ "$code" = 200 ] || fail "b-$i could not unlock $res: $code $(answer)"
    code=$(write "$res" "$t1")
    [ "$code" = 409 ] && answer | grep -q stale_token \
        || fail "a write with the old token $t1 after $t2 answered $code $(answer), not 409 stale_token"
    # 2 and 3. The slow link, and the baseline through it.
    proxy_cmd "delay $DELAY_MS"
    mark store_slow
    measure_baseline "$other"
    # 4 and 5. The stale writers, and the probes meanwhile.
    rm -f "$tmp/probes.stop" "$tmp"/probe.*
    touch "$tmp/probe.healthz" "$tmp/probe.get" "$tmp/probe.lock"
    "$pool_bin" repeat 127.0.0.1 "$gport" "$STALE_CONNS" "$STALE_S" PUT "/resources/$res" \
        text/plain "stale-$t1" "Fencing-Token: $t1" >"$tmp/stale.$i" 2>"$tmp/stale-err.$i" &
    stale_pid=$!
    mark stale_writes
    probe_loop healthz timed GET /healthz &
    pids+=($!)
    probe_loop get timed GET "/locks/$other" &
    pids+=($!)
    probe_loop lock lock_unlock "$other" "probe-$i" &
    pids+=($!)
    wait "$stale_pid" || fail "fg_pool repeat exited with status $? (fault $i): $(cat "$tmp/stale-err.$i")"
    touch "$tmp/probes.stop"
    for j in "${pids[@]}"; do wait "$j" || true; done
    # 6. Heal.
    mark proxy_up
    proxy_cmd pass
    mark heal
    # The figures and the bounds.
    read -r _ _ sent _ answered _ dropped _ inflight _ s200 _ s409 _ nstale _ other_n _ p50 _ p99 _ max \
        <"$tmp/stale.$i" || fail "no summary from fg_pool repeat: $(cat "$tmp/stale-err.$i")"
    st_h=$(stats "$tmp/probe.healthz" 2 1)
    st_g=$(stats "$tmp/probe.get" 2 1)
    st_l=$(stats "$tmp/probe.lock" 3 2)
    bound_l=$(awk -v m="$(field "$base_lock" max)" -v p="$PROBE_MARGIN_MS" 'BEGIN { printf "%.0f", m + p }')
    bound_g=$(awk -v m="$(field "$base_get" max)" -v p="$PROBE_MARGIN_MS" 'BEGIN { printf "%.0f", m + p }')
    say "fault $i: stale writes (token $t1 < $t2) on $STALE_CONNS connections for $STALE_S s: $(cat "$tmp/stale.$i")"
    [ -s "$tmp/stale-err.$i" ] && say "fault $i: answers that were not 409: $(head -n 3 "$tmp/stale-err.$i" | tr '\n' ' ')"
    say "fault $i: GET /healthz (bound p99 $HEALTHZ_P99_MS ms): $st_h"
    say "fault $i: GET /locks/{other} (bound p99 $bound_g ms): $st_g"
    say "fault $i: lock+unlock of $other (bound p99 $bound_l ms): $st_l"
    [ "$s200" = 0 ] || failed+="$s200 stale writes answered 200; "
    { [ "$answered" -gt 0 ] && [ "$nstale" = "$answered" ] && [ "$dropped" = 0 ] && [ "$inflight" = 0 ]; } \
        || failed+="of $sent stale writes $answered answered, $nstale of them 409 stale_token, \
$dropped dropped, $inflight unanswered 15 s after the end; "
    check_probes
    [ -z "$failed" ] || fail "fault $i: ${failed%; }"
}

# proxy_network.sh's windows (Redis locks granted in each slow one) are not this scenario's:
# only the proxy's own end checks.
scenario_check() {
    proxy_end_check
}
