# Scenario redis_timeout: Redis drops the gateway's
# connections under it, in the three ways Redis itself can:
#   - CONFIG SET timeout 1 for the whole run: Redis closes a client connection idle for more
#     than 1 s. The gateway's per-thread connections go idle whenever the workload pauses
#     between bursts, which it does here: each fault freezes the workload's processes
#     (SIGSTOP of its process group) until Redis has closed every idle gateway connection,
#     then lets it go on (SIGCONT), so every loop thread meets a closed connection on its
#     next call. (A subscriber with channels is exempt from the timeout; one with none is
#     closed like any other.)
#   - CLIENT KILL TYPE normal and CLIENT KILL TYPE pubsub while the workload runs, so
#     requests in flight lose their connection and parked waiters lose the subscriber.
# Expected: the checker's invariants (no 500, every answer within wait_ms + 5 s, a success
# within 5 s of each heal mark, no stale write accepted, no token regression), and
# run_scenario.sh's end checks. Then, with no other traffic, a waiter must still be woken by
# a release after its subscriber connection was killed: a holder takes a 30 s lease, a
# waiter parks with wait_ms 20 s, the subscriber is killed and the gateway must subscribe
# again (PUBSUB NUMSUB), the gateway's idle connections time out, the holder unlocks, and the
# waiter must be granted the lock with neither a deadline nor an expiry wake counted
# (fencegate_waiter_wakes_total): only a release can have woken it.
# ctest: short

faults=3
[ "$length" = full ] && faults=10
steps=30
[ "$length" = full ] && steps=90

scenario_setup() {
    rcli config set timeout 1 >/dev/null
}

# The ids of the gateway's connections that Redis counts as normal clients (all but our
# CLIENT LIST), one a line; not the one the session reaper polls every 100 ms (its last
# command a TIME, ops/sessions.c), which is never idle for 1 s.
gw_normal_ids() {
    rcli client list type normal \
        | awk '!/cmd=client\|list/ && !/cmd=time / { sub(/^id=/, "", $1); print $1 }'
}
# idle_closed: none of the connections in $idle_ids is left: Redis closed them all. Later ones
# (the subscriber reconnecting) do not count.
idle_closed() { [ -z "$(comm -12 <(echo "$idle_ids") <(gw_normal_ids | sort))" ]; }
# wait_idle_closed: until Redis has closed every normal connection the gateway has now.
wait_idle_closed() {
    idle_ids=$(gw_normal_ids | sort)
    [ -n "$idle_ids" ] || fail "the gateway has no connection to Redis that could time out"
    wait_until "Redis closing the gateway's idle connections (timeout 1)" 15 idle_closed
}

# kill_clients TYPE: CLIENT KILL TYPE TYPE; says how many Redis closed.
kill_clients() {
    local n
    n=$(rcli client kill type "$1")
    [[ $n =~ ^[0-9]+$ ]] || fail "CLIENT KILL TYPE $1 answered '$n'"
    killed=$n
}

scenario_fault() {
    local normal pubsub
    progress "$steps"
    kill_clients pubsub
    pubsub=$killed
    kill_clients normal
    normal=$killed
    mark heal
    progress $((steps / 2))
    # The pause between bursts: the clients stop, the gateway goes idle, and Redis closes
    # its connections after 1 s. How long this lasts is up to Redis's timeout check.
    kill -STOP -- "-$wl_pid"
    frozen_at=$("$workload" now)
    wait_idle_closed
    kill -CONT -- "-$wl_pid"
    mark heal
    say "fault $1: killed $normal normal and $pubsub pub/sub clients; $(echo $idle_ids | wc -w) idle \
gateway connections timed out while the workload was frozen for $(($("$workload" now) - frozen_at)) ms"
}

# metric NAME: the value of one line of the gateway's /metrics.
metric() {
    curl -fsS --max-time 2 "$(gw_url)/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}
channel_subscribed() { [ "$(rcli pubsub numsub "fg:{$wake_res}:released" | sed -n 2p)" = 1 ]; }
waiter_parked() { [ "$(waiters)" = 1 ]; }

scenario_check() {
    local holder waiter code deadline_wakes expiry_wakes waiter_pid
    wake_res="$scenario-$seed-wake"
    holder="{\"resource\":\"$wake_res\",\"owner\":\"wake-holder\""
    waiter="{\"resource\":\"$wake_res\",\"owner\":\"wake-waiter\""
    code=$(post /lock "" "$holder,\"ttl_ms\":30000}" 8)
    [ "$code" = 200 ] || fail "the holder could not take $wake_res: $code $(answer)"
    curl -sS --max-time 30 -o "$tmp/waiter.answer" -w '%{http_code}' \
        -H 'Content-Type: application/json' -d "$waiter,\"ttl_ms\":5000,\"wait_ms\":20000}" \
        "$(gw_url)/lock" >"$tmp/waiter.code" 2>&1 &
    waiter_pid=$!
    wait_until "the waiter parked" 10 waiter_parked
    wait_until "the gateway subscribed to the release channel" 10 channel_subscribed
    deadline_wakes=$(metric 'fencegate_waiter_wakes_total{reason="deadline"}')
    expiry_wakes=$(metric 'fencegate_waiter_wakes_total{reason="expiry"}')
    kill_clients pubsub
    [ "$killed" -ge 1 ] || fail "CLIENT KILL TYPE pubsub found no subscriber to kill"
    wait_until "the gateway subscribing again after CLIENT KILL TYPE pubsub" 15 channel_subscribed
    wait_idle_closed
    code=$(post /unlock "" "$holder}" 8)
    [ "$code" = 200 ] || fail "the holder's unlock answered $code $(answer)"
    wait "$waiter_pid" || true
    code=$(cat "$tmp/waiter.code")
    [ "$code" = 200 ] || fail "the parked waiter answered $code $(cat "$tmp/waiter.answer")"
    [ "$(metric 'fencegate_waiter_wakes_total{reason="deadline"}')" = "$deadline_wakes" ] &&
        [ "$(metric 'fencegate_waiter_wakes_total{reason="expiry"}')" = "$expiry_wakes" ] ||
        fail "the waiter was woken by its deadline or the lease's expiry, not by the release"
    code=$(post /unlock "" "$waiter}" 8)
    [ "$code" = 200 ] || fail "the waiter's unlock answered $code $(answer)"
    say "a parked waiter was woken by the release after its subscriber was killed"
}
