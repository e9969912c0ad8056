# shellcheck shell=bash disable=SC2154,SC2034 # the runner's variables, and the ones it reads
# slow_redis_fair_waiters: fair waiters give up on a slow Redis, and the gateway's event loops
# must not wait on Redis for them.
#
# The gateway (--threads 2) reaches Redis through fg_proxy (the helpers of proxy_network.sh).
# Each fault, while the workload runs:
#   1. the proxy holds every chunk DELAY_MS (100 ms) each way: about 200 ms per Redis round
#      trip, well inside the 2 s command timeout (the stall breaker stays closed);
#   2. the baseline through the slow link, one request at a time: BASELINE_N lock+unlock
#      pairs on a resource of their own and BASELINE_N GET /locks/{r};
#   3. holder-I takes HELD (8) resources (30 s leases);
#   4. WAITERS (32) POST /lock with "fair": true and wait_ms WAIT_MS (300) on them at once,
#      each on its own connection (fg_pool burst), 4 per held resource: the acquisition attempts of one
#      resource take their turns one after the other (its floor stripe, gateway/src/fence.c),
#      a 200 ms round trip each, so more per resource would be late however free the loops;
#   5. meanwhile, until every waiter is answered and for at least MIN_PROBE_S s, three
#      probe loops on fresh connections: GET /healthz; GET /locks/{held}; POST /lock (wait_ms
#      0) and its /unlock on a resource of their own;
#   6. the holder unlocks, the proxy passes again; mark heal.
# What must hold (the figures are printed, p50 and p99):
#   - every waiter answered 409 (locked: the holder kept the lock), or 503
#     backend_unavailable when the attempts before it on its resource held the resource's
#     turn past its deadline (the gateway's answer on a slow Redis, gateway/src/locks.c,
#     "Attempts in the pipeline"), within WAIT_MS + WAITER_SLACK_MS (1.5 s: a fair waiter's
#     last attempt and its leaving the queue cost a few Redis round trips of 200 ms);
#   - every probe answered 200; /healthz p99 at most HEALTHZ_P99_MS (100 ms): /healthz needs
#     no Redis, so only a loop thread stalled behind something else breaks it;
#   - GET /locks and lock+unlock on other resources: p99 at most the baseline's slowest +
#     PROBE_MARGIN_MS (500 ms);
#   - the checker's invariants over the workload, and the gateway back to its baseline.
# On this tree up to 99916b4 a fair waiter that gives up leaves the queue with
# lk_fair_cancel() called on its loop thread (gateway/src/locks.c), one Redis round trip each:
# 32 of them through 200 ms hold both loops for seconds (the issue measured /healthz p50
# 0.56 to 4.4 s, and waiters answered 5 s after they were sent).
# A short run takes about 30 s.

source "$(dirname "${BASH_SOURCE[0]}")/proxy_network.sh"
# shellcheck source=SCRIPTDIR/slow_probes.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/slow_probes.helpers.bash"

faults=1
[ "$length" = full ] && faults=3
steps=30
gw_extra+=(--threads 2)
DELAY_MS=100
BASELINE_N=3
HELD=8 # 4 waiters each: the acquisitions of one resource take turns (fence.c), a Redis round trip each
WAITERS=32
WAIT_MS=300
WAITER_SLACK_MS=1500
MIN_PROBE_S=4
HEALTHZ_P99_MS=100
PROBE_MARGIN_MS=500
pool_bin=$(dirname "$workload")/fg_pool
[ -x "$pool_bin" ] || fail "not executable: $pool_bin (build the fg_pool target)"

scenario_fault() {
    local i=$1 j res_held=() other="$scenario-$seed-other-$1" code pids=() waiter_pids=() t0
    local base_lock base_get st_h st_g st_l st_w bound_l bound_g failed=""
    progress "$steps"
    proxy_cmd "delay $DELAY_MS"
    mark proxy_slow
    # 2. The baseline through the slow link.
    measure_baseline "$other-base"
    # 3. The held resources.
    for ((j = 0; j < HELD; j++)); do
        res_held+=("$scenario-$seed-held-$i-$j")
        code=$(post /lock "" "{\"resource\":\"${res_held[j]}\",\"owner\":\"holder-$i\",\"ttl_ms\":30000}" 10)
        [ "$code" = 200 ] || fail "fault $i: holder-$i could not take ${res_held[j]}: $code $(answer)"
    done
    # 4 and 5. The waiters, and the probes meanwhile.
    rm -f "$tmp/probes.stop" "$tmp"/probe.* "$tmp"/waiters.*
    touch "$tmp/probe.healthz" "$tmp/probe.get" "$tmp/probe.lock"
    probe_loop healthz timed GET /healthz &
    pids+=($!)
    probe_loop get timed GET "/locks/${res_held[0]}" &
    pids+=($!)
    probe_loop lock lock_unlock "$other" "probe-$i" &
    pids+=($!)
    t0=$SECONDS
    # Each fg_pool sends its resource's waiters at once, each on a connection of its own.
    for ((j = 0; j < HELD; j++)); do
        "$pool_bin" burst 127.0.0.1 "$gport" $((WAITERS / HELD)) POST /lock application/json \
            "{\"resource\":\"${res_held[j]}\",\"owner\":\"waiter-$i-$j-%d\",\"ttl_ms\":5000,\"wait_ms\":$WAIT_MS,\"fair\":true}" \
            >"$tmp/waiters.$j" 2>&1 &
        waiter_pids+=($!)
    done
    mark waiters
    for j in "${waiter_pids[@]}"; do wait "$j" || fail "fg_pool burst exited with status $? (fault $i)"; done
    probed() { [ $((SECONDS - t0)) -ge "$MIN_PROBE_S" ]; }
    wait_until "$MIN_PROBE_S s of probes" 30 probed
    touch "$tmp/probes.stop"
    for j in "${pids[@]}"; do wait "$j" || true; done
    # 6. Heal.
    for ((j = 0; j < HELD; j++)); do
        code=$(post /unlock "" "{\"resource\":\"${res_held[j]}\",\"owner\":\"holder-$i\"}" 10)
        [ "$code" = 200 ] || fail "fault $i: holder-$i could not unlock ${res_held[j]}: $code $(answer)"
    done
    mark proxy_up
    proxy_cmd pass
    mark heal
    # The figures and the bounds.
    cat "$tmp"/waiters.[0-9]* >"$tmp/waiters.all"
    # fg_pool prints "INDEX STATUS MS BODY": as "STATUS SECONDS" for stats, a 409 locked or a
    # 503 backend_unavailable counting as good.
    awk '{ ok = ($2 == 409 && /"error":"locked"/) || ($2 == 503 && /"error":"backend_unavailable"/);
           print (ok ? 200 : $2), $3 / 1000 }' "$tmp/waiters.all" >"$tmp/waiters.st"
    awk '!(($2 == 409 && /"error":"locked"/) || ($2 == 503 && /"error":"backend_unavailable"/))' \
        "$tmp/waiters.all" | head -n 5 | while read -r line; do say "fault $i: a waiter: $line"; done
    st_w=$(stats "$tmp/waiters.st" 2 1)
    st_h=$(stats "$tmp/probe.healthz" 2 1)
    st_g=$(stats "$tmp/probe.get" 2 1)
    st_l=$(stats "$tmp/probe.lock" 3 2)
    bound_l=$(awk -v m="$(field "$base_lock" max)" -v p="$PROBE_MARGIN_MS" 'BEGIN { printf "%.0f", m + p }')
    bound_g=$(awk -v m="$(field "$base_get" max)" -v p="$PROBE_MARGIN_MS" 'BEGIN { printf "%.0f", m + p }')
    say "fault $i: waiters (409 or 503 expected, bound $((WAIT_MS + WAITER_SLACK_MS)) ms): $st_w; \
answers $(awk '{ n[$2]++ } END { for (c in n) printf "%s=%d ", c, n[c] }' "$tmp/waiters.all")"
    say "fault $i: GET /healthz (bound p99 $HEALTHZ_P99_MS ms): $st_h"
    say "fault $i: GET /locks/{held} (bound p99 $bound_g ms): $st_g"
    say "fault $i: lock+unlock of $other (bound p99 $bound_l ms): $st_l"
    [ "$(field "$st_w" n)" = "$WAITERS" ] && [ "$(field "$st_w" bad)" = 0 ] \
        || failed+="not every waiter answered 409 locked or 503 backend_unavailable; "
    awk -v b="$(field "$st_w" max)" -v l=$((WAIT_MS + WAITER_SLACK_MS)) 'BEGIN { exit !(b <= l) }' \
        || failed+="a waiter answered after $(field "$st_w" max) ms, past wait_ms + $WAITER_SLACK_MS ms; "
    check_probes
    [ -z "$failed" ] || fail "fault $i: ${failed%; }"
}

# proxy_network.sh's windows (a lock granted in each slow one) are not this scenario's: only
# the proxy's own end checks.
scenario_check() {
    proxy_end_check
}
