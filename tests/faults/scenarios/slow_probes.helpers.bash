# shellcheck shell=bash disable=SC2154 # the runner's variables
# Probes of the gateway's latency while a fault loads it, shared by slow_store_stale.sh and
# slow_redis_fair_waiters.sh (sourced by them). Not a scenario: it does not end in .sh.
#
# Each probe is one curl on a fresh connection, its time curl's time_total; a probe loop runs
# in the background until $tmp/probes.stop exists; stats gives the count, the answers that
# were not 200, p50, p99 and the maximum (nearest rank) of a probe file.

# timed METHOD PATH BODY: one request on a fresh connection; prints "CODE SECONDS" ("000
# SECONDS" without an answer within 10 s).
timed() {
    curl -sS --max-time 10 -o /dev/null -w '%{http_code} %{time_total}\n' -X "$1" \
        ${3:+-H 'Content-Type: application/json' -d "$3"} "$(gw_url)$2" 2>/dev/null \
        || true # the code printed tells
}

# lock_unlock RESOURCE OWNER: a lock (wait_ms 0) and its unlock; prints "LOCK UNLOCK SECONDS".
lock_unlock() {
    local lc ls uc us
    read -r lc ls < <(timed POST /lock "{\"resource\":\"$1\",\"owner\":\"$2\",\"ttl_ms\":5000,\"wait_ms\":0}")
    read -r uc us < <(timed POST /unlock "{\"resource\":\"$1\",\"owner\":\"$2\"}")
    echo "$lc $uc $(awk -v a="$ls" -v b="$us" 'BEGIN { printf "%.6f", a + b }')"
}

# probe_loop NAME COMMAND...: runs COMMAND, appending its line to $tmp/probe.NAME, until the
# stop file exists.
probe_loop() {
    local what=$1
    shift
    # Also ends when $tmp is gone: the scenario failed and cleaned up meanwhile.
    while [ -d "$tmp" ] && [ ! -f "$tmp/probes.stop" ]; do
        "$@" >>"$tmp/probe.$what"
        sleep 0.02 # the probes' pace, not a wait for anything
    done
}

# stats FILE COLUMN OKCOLS: "n N bad N p50 X p99 X max X" (ms) over column COLUMN of FILE; a
# line whose first OKCOLS columns are not all 200 counts as bad.
stats() {
    sort -k"$2","$2"n "$1" | awk -v c="$2" -v k="$3" '
        { n++; for (i = 1; i <= k; i++) if ($i != 200) { bad++; break }; ms[n] = $c * 1000 }
        END {
            if (n == 0) { print "n 0 bad 0 p50 0 p99 0 max 0"; exit }
            printf "n %d bad %d p50 %.1f p99 %.1f max %.1f\n", n, bad + 0, ms[int((n + 1) / 2)],
                ms[int(n * 0.99 + 0.999)], ms[n]
        }'
}

# field LINE NAME: the value after NAME in a stats line.
field() { echo "$1" | awk -v f="$2" '{ for (i = 1; i < NF; i++) if ($i == f) print $(i + 1) }'; }

# check_p99 STATS BOUND_MS WHAT: appends to $failed when STATS (a stats line) has no probe, a
# probe not answered 200, or a p99 above BOUND_MS.
check_p99() {
    { [ "$(field "$1" n)" -gt 0 ] && [ "$(field "$1" bad)" = 0 ]; } \
        || failed+="not every $3 probe answered 200; "
    awk -v p="$(field "$1" p99)" -v l="$2" 'BEGIN { exit !(p <= l) }' \
        || failed+="$3 p99 $(field "$1" p99) ms past $2 ms; "
}

# show_bad FILE OKCOLS WHAT: says the first lines of FILE (at most 3) whose first OKCOLS
# columns are not all 200 (curl's 000: no answer within its 10 s).
show_bad() {
    awk -v k="$2" '{ for (i = 1; i <= k; i++) if ($i != 200) { print; break } }' "$1" | head -n 3 \
        | while read -r line; do say "$3 not answered 200: $line"; done
}

# check_probes: the probes' bad answers and p99 bounds of fault $i (st_h, st_g, st_l with
# bound_g and bound_l, set by the caller), each failure added to $failed.
check_probes() {
    show_bad "$tmp/probe.healthz" 1 "fault $i: /healthz"
    show_bad "$tmp/probe.get" 1 "fault $i: GET /locks"
    show_bad "$tmp/probe.lock" 2 "fault $i: lock, unlock"
    check_p99 "$st_h" "$HEALTHZ_P99_MS" "/healthz (a stalled loop thread?)"
    check_p99 "$st_g" "$bound_g" "GET /locks"
    check_p99 "$st_l" "$bound_l" "lock+unlock"
}

# proxy_end_check: proxy_network.sh's own end checks (the proxy back to its baseline), without
# its slow windows, which are not these scenarios'.
proxy_end_check() {
    deadline=$((SECONDS + 15))
    until proxy_settled; do
        [ "$SECONDS" -lt "$deadline" ] || fail "15 s after the run the proxy holds $proxy_open \
connections and $proxy_fds fds (baseline $proxy_fd_base), the gateway $gw_via_proxy through it"
        sleep 0.05
    done
    proxy_cmd stats
    say "proxy: $proxy_answer"
}

# measure_baseline RES: BASELINE_N lock+unlock pairs on RES and GET /locks/RES, one at a
# time through the slow link, for fault $i; sets base_lock and base_get (stats lines) and
# fails unless every request was answered 200.
measure_baseline() {
    local res=$1 j
    : >"$tmp/base.lock"; : >"$tmp/base.get"
    for ((j = 0; j < BASELINE_N; j++)); do
        lock_unlock "$res" "base-$i" >>"$tmp/base.lock"
        timed GET "/locks/$res" >>"$tmp/base.get"
    done
    base_lock=$(stats "$tmp/base.lock" 3 2)
    base_get=$(stats "$tmp/base.get" 2 1)
    say "fault $i: baseline through a ${DELAY_MS} ms delay each way: lock+unlock $base_lock; GET /locks $base_get"
    [ "$(field "$base_lock" bad)" = 0 ] && [ "$(field "$base_get" bad)" = 0 ] \
        || fail "fault $i: the baseline requests through the slow link were not all answered 200"
}
