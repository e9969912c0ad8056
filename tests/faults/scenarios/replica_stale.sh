# shellcheck shell=bash disable=SC2154,SC2034
# (SC2154: $tmp, $rport, $seed... are run_scenario.sh's; SC2034: it reads faults, steps...)
# replica_stale: a replica with stale data is promoted in place of the gateway's Redis.
# Sourced by run_scenario.sh (see README.md here).
#
# The gateway dials one address, so the failover happens on that address, without a proxy.
# A second redis-server B (its own port, no persistence) replicates A, the gateway's Redis.
# Each fault:
#   1. B replicates A (REPLICAOF A, for every fault after the first) and has synced.
#   2. After some operations B is cut loose: REPLICAOF NO ONE. It keeps its copy of that
#      moment, and nobody writes to it from then on.
#   3. The workload goes on against A until a fence counter of the run is past B's copy and
#      a write was acknowledged since (grants and writes that B does not have).
#   4. The failover: A is killed with SIGKILL (in even faults the gateway too, restarted
#      once the new node is up, so only the floor's durable parts, storage's token ledger
#      and the highest token written, can keep the tokens growing) and a new redis-server
#      with no data of its own is started on A's port as a replica of B; once its INFO
#      replication says the link is up and no sync is in progress, it holds B's stale copy
#      (checked: the same fence counters as B), and REPLICAOF NO ONE promotes it. The gateway now talks to a master
#      that has lost the grants and writes of step 3. Meanwhile it met a refused connection,
#      a replica loading B's copy (-LOADING: B gets 30 MB of filler keys in fault 1, so the
#      load takes a few hundred ms), and a read-only replica (-READONLY to every script that
#      writes), held so until a request meets it.
# The new node's counters, read while it is still a replica (the gateway cannot write to
# it), must be lower than A's from before the kill for at least one resource of the run, or
# the fault took nothing back and the scenario fails (aof_regression.helpers.bash).
#
# Expected: the gateway answers 503 while Redis is gone or read-only, never 500 (and never
# 200 to a lock, renew or unlock while read-only: each needs a write), and succeeds
# again within 5 s of the promotion (the "heal" mark); tokens keep growing across the
# failover (every acquisition passes a floor, gateway/src/core/fence.c), so each counter that fell
# is lifted above its old value and fencegate_token_floor_corrections_total goes up; the
# checker's invariants 1-6 and 8 hold, 7 (overlapping leases) is only reported: a lease lost
# with the data can be granted again. B is stopped by its PID at the end, also on failure.
# ctest: short
# data-loss

# shellcheck source=SCRIPTDIR/aof_regression.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/aof_regression.helpers.bash"

# A full resync waits repl-diskless-sync-delay (5 s by default) for more replicas to join.
persist=(--appendonly yes --appendfsync always --repl-diskless-sync-delay 0)
[ "$length" = short ] && faults=4 # two with the gateway killed too

bcli() { redis-cli -h 127.0.0.1 -p "$bport" "$@"; }

# synced CLI: the replica that CLI talks to has its master link up and no sync in progress.
synced() {
    local info
    info=$("$@" info replication 2>/dev/null | tr -d '\r') || return 1
    grep -qx 'role:slave' <<<"$info" && grep -qx 'master_link_status:up' <<<"$info" \
        && grep -qx 'master_sync_in_progress:0' <<<"$info"
}

# B starts as a replica of A, before the gateway, and is stopped on exit (regress_exit).
scenario_prestart() {
    chain_cleanup
    extra_start b "$tmp/b" --appendonly no --repl-diskless-sync-delay 0 \
        --replicaof 127.0.0.1 "$rport"
    bport=$extra_port
    b_replicating=1
}

# refused_since_readonly: a request that started after the last "readonly" mark (its line
# comes after the mark's, since it ended later) was answered 503.
refused_since_readonly() {
    awk -F'\t' '$2 == "mark" && $14 == "readonly" { from = $5; found = 0; next }
        from != "" && $2 != "mark" && $6 == 503 && $4 >= from { found = 1 }
        END { exit !found }' "$hist"
}

# promote_new_a: the rest of step 4 once A is killed: the new node on A's port, synced from
# B, held read-only a moment, then promoted.
promote_new_a() {
    local saved=("${persist[@]}")
    rm -rf "$tmp/redis/appendonlydir" # a new node: no data but what it syncs from B
    persist+=(--replicaof 127.0.0.1 "$bport")
    redis_start
    persist=("${saved[@]}")
    if [ "$with_gw" = 1 ]; then
        gw_start # it meets the replica first, too
        check_sanitizers
    fi
    wait_until "the new Redis on A's port synced from B" 20 synced rcli
    fences "$rport" "$tmp/fences-loaded"
    fences "$bport" "$tmp/fences-b-now"
    cmp -s "$tmp/fences-loaded" "$tmp/fences-b-now" || fail "the new node's fence counters \
($(tr '\n' ' ' <"$tmp/fences-loaded")) are not B's ($(tr '\n' ' ' <"$tmp/fences-b-now"))"
    # Kept read-only until a request that started after the "readonly" mark was answered
    # 503, so the gateway surely met -READONLY (scenario_check checks the window).
    mark readonly
    wait_until "a request answered 503 by the read-only replica" 20 refused_since_readonly
    mark readonly_end
    rcli replicaof no one >/dev/null
}

# scenario_fault I: steps 1 to 4 of the file comment, then the proof that the counters went
# back and that the gateway lifted them.
scenario_fault() {
    local cut_at
    if [ "$b_replicating" = 0 ]; then
        bcli replicaof 127.0.0.1 "$rport" >/dev/null
        b_replicating=1
    fi
    wait_until "B synced from A" 20 synced bcli
    progress "$steps"
    bcli replicaof no one >/dev/null
    b_replicating=0
    if [ "$1" = 1 ]; then
        # Keys nobody uses (about 30 MB), so that loading B's copy takes the new node a
        # moment in every failover, and the gateway meets -LOADING too. DEBUG POPULATE is
        # not replicated: B is a master now, and the filler reaches A through the failover.
        bcli debug populate 300000 fg-filler 64 >/dev/null
    fi
    fences "$bport" "$tmp/fences-b"
    cut_at=$(lines)
    wait_until "a grant past B's copy" 30 moved_past "$tmp/fences-b"
    wait_until "an acknowledged write past B's copy" 30 write_ok_since "$cut_at"
    corrections=$(floor_corrections)
    fences "$rport" "$tmp/fences-before"
    redis_kill
    with_gw=0
    if (($1 % 2 == 0)); then
        with_gw=1
        gw_kill
    fi
    say "fault $1: A killed $(($(lines) - cut_at)) operations after B was cut loose\
$([ "$with_gw" = 0 ] || echo ", and the gateway with it")"
    promote_new_a
    proof_fell "$tmp/fences-before" "$tmp/fences-loaded" "fault $1"
    mark heal
    wait_lifted "$corrections"
}

# readonly_check: between each "readonly" mark and the next "readonly_end", no lock, renew or
# unlock that started and ended there was answered 200 (each needs a write to Redis), and at
# least one request was answered 503. Two passes: the marks first, since the clients'
# lines may be appended out of order.
readonly_check() {
    awk -F'\t' '
        NR == FNR && $2 == "mark" && $14 == "readonly" { from = $5 }
        NR == FNR && $2 == "mark" && $14 == "readonly_end" { lo[++n] = from; hi[n] = $4 }
        NR == FNR || $2 == "mark" { next }
        {
            for (i = 1; i <= n; i++) {
                if ($4 < lo[i] || $5 > hi[i]) continue
                if ($6 == 503) refused[i]++
                if ($6 == 200 && ($2 == "lock" || $2 == "renew" || $2 == "unlock")) {
                    print "answered 200 while Redis was a read-only replica: " $0; bad++
                }
            }
        }
        END {
            for (i = 1; i <= n; i++) {
                printf "read-only window %d: %d requests answered 503\n", i, refused[i]
                if (refused[i] == 0) bad++
            }
            exit n == 0 || bad > 0
        }' "$hist" "$hist"
}

scenario_check() {
    readonly_check || fail "a read-only replica granted, renewed or released a lock, or no \
request met it"
    # For the record, not asserted (-LOADING lasts a few hundred ms and may be missed):
    say "the gateway logged $(grep -c 'Redis error: LOADING' "$tmp/gateway.log" || true) -LOADING \
and $(grep -c 'Redis error: READONLY' "$tmp/gateway.log" || true) -READONLY answers"
}
