# shellcheck shell=bash
# handoff_kill: the gateway killed with SIGKILL after Redis granted a parked waiter the lock in
# the pass of the holder's release, and before the gateway read the answer.
#
# The gateway reaches Redis through fg_proxy (proxy_network.sh's helpers). Each fault, on a
# resource of its own while the workload runs on its three:
#   1. A holder (this script) takes the lock with a 3 s lease; one waiter parks on it (curl
#      in the background, wait_ms 8000, a 1.5 s lease; fair in every other fault). We wait
#      until its held answer marked the lock wanted in Redis and /metrics shows it parked.
#   2. The proxy holds every chunk 300 ms each way, and the holder's /unlock goes out: the
#      gateway sends the release and the waiter's attempt in one batch (a hand-off), or, if
#      the waiter was not parked yet, the release wakes it and its attempt follows.
#   3. As soon as Redis shows a new hold (the lock's token above the holder's), read straight
#      from Redis, SIGKILL to the gateway: the answers are still in the proxy, 300 ms away.
#   4. The proxy passes again, the gateway restarts on the same data directory, mark heal.
# What must hold:
#   - the waiter and the /unlock end without an answer (their connections are cut), at once;
#     nothing granted was answered to anybody, so the granted token is handed to nobody;
#   - the granted hold ends with its lease: its PTTL is at most the 1.5 s the waiter asked;
#   - a new fair owner waiting for it gets the lock, with a token above the granted one; its
#     write is 200, and then a write with the granted token, or the holder's, is 409
#     stale_token;
#   - the checker's invariants over the workload's history and these operations.
# Not in ctest (about 17 s, 40 s under ASan): scripts/faults.sh --full runs it.

# shellcheck source=proxy_network.sh
source "$(dirname "${BASH_SOURCE[0]}")/proxy_network.sh" # the proxy and its end checks
# shellcheck source=gateway_stop.sh
source "$(dirname "${BASH_SOURCE[0]}")/gateway_stop.sh" # call, record, park, write_as ...

faults=3
[ "$length" = full ] && faults=8
steps=20
HK_LEASE_MS=3000  # the holder's lease
HK_WAIT_MS=8000   # the waiter's wait
HK_GRANT_MS=1500  # the waiter's lease: the granted hold's

hk_token() { rcli hget "fg:{$1}:lock" '#token'; }
# wanted RES: an attempt found the lock of RES held and marked it (locklib/lua/prelude/wanted.lua).
wanted() { [ "$(rcli hexists "fg:{$1}:lock" '#wait')" = 1 ]; }
# granted_above RES T: Redis holds the lock of RES with a token above T.
granted_above() { local t; t=$(hk_token "$1"); [ -n "$t" ] && [ "$t" -gt "$2" ]; }

handoff_kill_fault() {
    local res="$scenario-$seed-hk-$1" t_hold granted fair=false code token ttl wait_ms
    [ $(($1 % 2)) = 0 ] && fair=true
    t_hold=$(take_hold "$res" "hk-$1-holder" "$HK_LEASE_MS")
    park "$res" "hk-$1-waiter" "$HK_WAIT_MS" "$HK_GRANT_MS" "$fair" 20
    wait_until "the waiter's held answer on $res" 10 wanted "$res"
    wait_until "a parked waiter" 10 waiters_at_least 1
    proxy_cmd "delay 300"
    call "hk-$1-unlock" POST /unlock "{\"resource\":\"$res\",\"owner\":\"hk-$1-holder\"}" 20 &
    parked_pids+=($!)
    wait_until "Redis granting $res to the waiter" 10 granted_above "$res" "$t_hold"
    kill -KILL "$gw_pid"
    wait "$gw_pid" 2>/dev/null || true
    granted=$(hk_token "$res")
    wait_until "the waiter of kill $1 ending after the kill" 5 ended "hk-$1-waiter"
    wait_until "the unlock of kill $1 ending after the kill" 5 ended "hk-$1-unlock"
    wait_parked
    ttl=$(rcli pttl "fg:{$res}:lock")
    proxy_cmd pass
    gw_start
    mark heal
    check_sanitizers
    record "hk-$1-waiter" runner lock "$res" "hk-$1-waiter" "$HK_GRANT_MS" "$HK_WAIT_MS"
    record "hk-$1-unlock" runner unlock "$res" "hk-$1-holder" 0 0 "$t_hold"
    code=$(code_of "hk-$1-waiter")
    [ "$code" = 000 ] || fail "kill $1: the waiter was answered $code \
$(cat "$tmp/ops/hk-$1-waiter.body") before the kill, with Redis's answers held 300 ms in the proxy"
    code=$(code_of "hk-$1-unlock")
    [ "$code" = 000 ] || fail "kill $1: the unlock was answered $code before the kill"
    # -2: the hold ended already. -1: no expiry, a ghost for ever.
    if [ "$ttl" = -1 ] || [ "$ttl" -gt "$HK_GRANT_MS" ]; then
        fail "kill $1: the granted hold (token $granted) has PTTL $ttl ms, more than the \
$HK_GRANT_MS ms its waiter asked"
    fi
    wait_ms=$((HK_GRANT_MS + 5000))
    call "hk-$1-after" POST /lock "$(lock_body "$res" "hk-$1-after" 2000 "$wait_ms" true)" \
        $((wait_ms / 1000 + 10))
    record "hk-$1-after" runner lock "$res" "hk-$1-after" 2000 "$wait_ms"
    code=$(code_of "hk-$1-after")
    [ "$code" = 200 ] || fail "kill $1: a fair owner waiting $wait_ms ms for $res got $code \
$(cat "$tmp/ops/hk-$1-after.body"): the granted hold outlived its lease"
    token=$(field_of "hk-$1-after" token)
    [ "$token" -gt "$granted" ] || fail "kill $1: token $token after the restart, not above the \
granted $granted"
    code=$(write_as "hk-$1-w-after" "$res" "hk-$1-after" "$token")
    [ "$code" = 200 ] || fail "kill $1: the new holder of $res could not write: $code"
    stale_write "hk-$1-w-granted" "$res" "hk-$1-waiter" "$granted"
    stale_write "hk-$1-w-holder" "$res" "hk-$1-holder" "$t_hold"
    say "kill $1 ($([ "$fair" = true ] && echo fair || echo non-fair) waiter): holder token \
$t_hold, granted $granted in Redis and answered to nobody (PTTL $ttl ms at the kill); after the \
restart a fair owner got token $token after $(($(cat "$tmp/ops/hk-$1-after.t1") - \
$(cat "$tmp/ops/hk-$1-after.t0"))) ms"
}

scenario_fault() {
    progress "$steps"
    handoff_kill_fault "$1"
}

# proxy_network.sh's check_windows looks for its own marks, of which this file makes none.
scenario_check() { proxy_check_settled; }
