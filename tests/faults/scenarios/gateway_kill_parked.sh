# shellcheck shell=bash
# gateway_kill_parked: the gateway killed with SIGKILL while waiters are parked, repeatedly, and
# restarted on the same data directory.
#
# Each fault, on a resource of its own while the workload runs on its three:
#   1. A holder (this script) takes the lock with a 3 s lease.
#   2. Four waiters park on it (curl in the background, wait_ms 4000, 1 s leases, two fair and
#      two not); we wait until /metrics shows them parked (fencegate_waiters >= 4).
#   3. SIGKILL to the gateway. Every waiter's connection is cut: each must end without an
#      answer (or with a grant or 409 it got before the kill, never a 5xx), and at once, not at
#      its curl time limit.
#   4. The gateway is restarted on the same data directory (gw_start), then mark heal.
# What must hold after the restart:
#   - no ghost holds anything longer than it asked: every fg:*:lock key in Redis has a lease
#     (PTTL > 0) of at most 3 s, the longest lease asked in this scenario, and the fair queue
#     keys expire within the 4 s wait of the waiters that vanished with the old process;
#   - a new fair owner asking with wait_ms = the time left until the last ghost's lease or
#     queue deadline ends, plus 5 s, gets the lock (200), with a token above every token handed
#     out on the resource before the kill; its write is 200 and the holder's old token then
#     gets 409 stale_token;
#   - the checker's invariants over the workload's history and these operations.
# ctest: short

# shellcheck source=gateway_stop.sh
source "$(dirname "${BASH_SOURCE[0]}")/gateway_stop.sh" # call, record, park, write_as ...

faults=3
[ "$length" = full ] && faults=10
KP_LEASE_MS=3000   # the holder's lease, the longest in this scenario
KP_WAIT_MS=4000    # the parked waiters' wait

# ghost_keys_ok: every lease key has an expiry within KP_LEASE_MS, and every fair queue key one
# within KP_WAIT_MS (+1 ms, fair_acquire.lua's keep_ms). Prints the first offender.
ghost_keys_ok() {
    local key ttl max
    while read -r key; do
        [ -n "$key" ] || continue
        case $key in *:lock) max=$KP_LEASE_MS ;; *) max=$((KP_WAIT_MS + 1)) ;; esac
        ttl=$(rcli pttl "$key")
        # -2: gone meanwhile. -1: no expiry, a ghost for ever.
        if [ "$ttl" = -1 ] || [ "$ttl" -gt "$max" ]; then
            echo "$key has PTTL $ttl ms, more than the $max ms anyone asked"
            return 1
        fi
    done < <(rcli --scan --pattern 'fg:*' | grep -E ':(lock|queue|qtimeout)$')
}

kill_parked_fault() {
    local res="$scenario-$seed-kp-$1" t_hold w code token max_token killed_at wait_ms
    local all=(fair-1 fair-2 any-1 any-2) cut=0 ghost
    t_hold=$(take_hold "$res" "kp-$1-holder" "$KP_LEASE_MS")
    max_token=$t_hold
    for w in "${all[@]}"; do
        park "$res" "kp-$1-$w" "$KP_WAIT_MS" 1000 "$([ "${w%-*}" = fair ] && echo true || echo false)" 20
    done
    wait_until "four waiters parked on $res" 10 waiters_at_least 4
    killed_at=$(now_ms)
    kill -KILL "$gw_pid"
    wait "$gw_pid" 2>/dev/null || true
    for w in "${all[@]}"; do
        # A cut connection ends curl at once; the bound is far below its 20 s --max-time.
        wait_until "waiter $w of kill $1 ending after the kill" 5 ended "kp-$1-$w"
    done
    wait_parked
    gw_start
    mark heal
    check_sanitizers
    for w in "${all[@]}"; do
        record "kp-$1-$w" runner lock "$res" "kp-$1-$w" 1000 "$KP_WAIT_MS"
        code=$(code_of "kp-$1-$w")
        case $code in
            000) cut=$((cut + 1)) ;;
            200) token=$(field_of "kp-$1-$w" token)
                [ "$token" -gt "$max_token" ] && max_token=$token ;;
            409) ;;
            *) fail "waiter $w of kill $1 answered $code $(cat "$tmp/ops/kp-$1-$w.body")" ;;
        esac
    done
    [ "$cut" -gt 0 ] || fail "no parked waiter of kill $1 was cut by the kill"
    ghost=$(ghost_keys_ok) || fail "after restart $1: $ghost"
    # The last ghost ends by killed_at + KP_WAIT_MS (a fair waiter's queue deadline; the
    # holder's lease and a grant at the very kill end sooner). 5 s more is the checker's grace.
    wait_ms=$((killed_at + KP_WAIT_MS - $(now_ms) + 5000))
    [ "$wait_ms" -ge 5000 ] || wait_ms=5000
    call "kp-$1-after" POST /lock "$(lock_body "$res" "kp-$1-after" 2000 "$wait_ms" true)" \
        $((wait_ms / 1000 + 10))
    record "kp-$1-after" runner lock "$res" "kp-$1-after" 2000 "$wait_ms"
    code=$(code_of "kp-$1-after")
    [ "$code" = 200 ] || fail "after restart $1 a fair owner waiting $wait_ms ms for $res got \
$code $(cat "$tmp/ops/kp-$1-after.body"): a ghost kept it"
    token=$(field_of "kp-$1-after" token)
    [ "$token" -gt "$max_token" ] || fail "after restart $1 token $token, not above $max_token"
    code=$(write_as "kp-$1-w-after" "$res" "kp-$1-after" "$token")
    [ "$code" = 200 ] || fail "the new holder of $res could not write after restart $1: $code"
    stale_write "kp-$1-w-holder" "$res" "kp-$1-holder" "$t_hold"
    say "kill $1: holder token $t_hold, $cut of 4 parked waiters cut; after the restart a fair \
owner got token $token after $(($(cat "$tmp/ops/kp-$1-after.t1") - $(cat "$tmp/ops/kp-$1-after.t0"))) ms \
of its $wait_ms ms wait (the ghosts' deadlines at most $((killed_at + KP_WAIT_MS - $(cat "$tmp/ops/kp-$1-after.t0"))) ms away)"
}

scenario_fault() {
    progress "$steps"
    kill_parked_fault "$1"
}
