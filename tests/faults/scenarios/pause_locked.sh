# shellcheck shell=bash disable=SC2154,SC2034 # the runner's variables, and the ones it reads
# pause_locked: a client frozen with SIGSTOP past its lease, then SIGCONT, while the next
# holder has locked but not yet written.
#
# What happens (fg_workload run ... pause_locked): worker 0 freezes itself right after some of
# its grants. The workload's parent waits for the lease to run out and takes the same lock
# (a 15 s lease), then sends SIGCONT at once, without writing. The frozen worker's late
# write, renew and unlock therefore meet a lock held by a newer token that has not written
# anything. Only when the worker says it is done does the parent write and unlock.
#
# What it expects:
#   - the late write is 409 stale_token (the gateway refuses a token below the last one it
#     issued, superseded_by, commit d324885), never 200: the checker's invariant 4 fails on
#     anything else, and it must count one such write per freeze (--expect-superseded),
#     refused while no larger token had written;
#   - the late renew and unlock are 409 not_owner (invariant 4);
#   - the late read with the worker's token (Fencing-Token) is 409 stale_token, never 200
#     (invariant 10), once per freeze (--expect-fenced-reads);
#   - the parent's write after them is 200: the late calls took nothing from the real holder;
#   - no lease windows of two owners overlap (strict leases: Redis loses nothing here),
#     and every other invariant of the checker holds.
#
# It found that the gateway answered the late write 403 unknown_token whenever the next
# holder's floor had lifted the counter past the late token (every time here); since
# 41da3a2 the resource's last 16 tokens tell a superseded token from a foreign one.
# ctest: short

faults=3
[ "$length" = full ] && faults=10
# One late write per freeze refused while no larger token had written yet, and one late
# fenced read per freeze refused.
checker_extra=(--expect-superseded "$faults" --expect-fenced-reads "$faults")

scenario_mode() { mode=(pause_locked "$rport"); }

# late_ops: how many late operations (after_pause) the history holds.
late_ops() { awk -F'\t' '$2 != "mark" && $13 ~ /after_pause/' "$hist" 2>/dev/null | wc -l; }

# Each freeze records 4 late operations: write, fenced read, renew, unlock.
played() { [ "$(late_ops)" -ge $(($1 * 4)) ]; }

# scenario_fault I: the workload makes the freezes on its own; wait until freeze I has played
# out (its late write, fenced read, renew and unlock recorded).
scenario_fault() {
    wait_until "freeze $1 of worker 0 to play out" 30 played "$1"
    mark heal
}

scenario_check() {
    # The next holder's writes, made after the late calls were refused, all succeeded.
    local parent_writes bad
    parent_writes=$(awk -F'\t' '$1 == "p" && $2 == "write"' "$hist" | wc -l)
    bad=$(awk -F'\t' '$1 == "p" && $2 == "write" && $6 != 200' "$hist")
    [ "$parent_writes" -ge "$faults" ] || fail "only $parent_writes writes of the next holder"
    [ -z "$bad" ] || fail "a write of the next holder after the late calls was not 200: $bad"
    say "$parent_writes writes of the next holder, all 200, each after the late calls were refused"
}
