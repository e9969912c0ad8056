# shellcheck shell=bash disable=SC2154,SC2034 # the runner's variables, and the ones it reads
# shared_rw: shared (read) and exclusive (write) locks on the same resources, under gateway
# freezes and gateway kills.
#
# What happens (fg_workload run ... shared): half of the workers' locks are shared, a third
# of those a shared set of two resources in one /lock; a shared holder (each member of a set
# in turn) reads with its token (Fencing-Token), may try to write with it, may renew, and
# unlocks; the exclusive holders write as usual; the contenders make stale and forged writes
# and reads. The faults alternate: odd ones freeze the gateway with SIGSTOP for FREEZE_S
# (longer than every lease in play, so leases of both modes run out in Redis meanwhile), even
# ones kill it with SIGKILL and start it again on the same data directory.
#
# What it expects: every invariant of the checker, in particular 13 (no exclusive grant is
# answered inside another owner's shared lease, nor a shared grant inside an exclusive one:
# shared leases are per holder, cut by unlocks and renewed by renewals), 1, 2 and 7 over the
# exclusive grants (shared grants share their token and overlap each other), 12 (a fenced
# read of a reader is never 200 after a writer's newer grant was answered) and 15 (no write is
# accepted with a token granted in shared mode: neither a reader's nor a frozen writer's whose
# token readers were granted meanwhile).
# Short: 2 faults (one freeze, one kill), about 19 s in the plain build; full: 8. Not in
# ctest (scripts/faults.sh --full runs it): the short form is at the 20 s bound.

faults=2
[ "$length" = full ] && faults=8
FREEZE_S=2.5

scenario_mode() { mode=(shared); }

scenario_fault() {
    progress "$steps"
    if [ $(($1 % 2)) = 1 ]; then
        mark freeze
        kill -STOP "$gw_pid"
        sleep "$FREEZE_S" # the length of the fault, not a wait for anything
        kill -CONT "$gw_pid"
        mark thaw
        wait_until "the gateway answering /healthz after SIGCONT" 10 gw_healthy
    else
        kill -KILL "$gw_pid"
        wait "$gw_pid" 2>/dev/null || true
        gw_start
        check_sanitizers
    fi
    mark heal
}

scenario_check() {
    local shared
    shared=$(awk -F'\t' '$2 == "lock" && $6 == 200 && $13 ~ /shared/' "$hist" | wc -l)
    [ "$shared" -ge 1 ] || fail "no shared lock was granted"
    local refused
    refused=$(awk -F'\t' '$2 == "write" && $7 == "not_exclusive"' "$hist" | wc -l)
    say "$shared shared grants, $refused writes refused not_exclusive"
}
