# shellcheck shell=bash disable=SC2154,SC2034 # the runner's variables, and the ones it reads
# watchdog_kill: a lock kept alive by a watchdog, whose holder is killed.
#
# What happens (fg_workload run ... watchdog), next to the usual workload, in rounds on a
# resource of their own: a child process takes the lock with a 1 s lease and writes, and a
# watchdog thread in it renews the lease with POST /renew every ttl/3 (like Redisson's
# watchdog). After two renewals the workload's parent
#   - in even rounds kills the child with SIGKILL while it runs (the watchdog dies with it),
#     and writes a holder_killed mark;
#   - in odd rounds freezes it with SIGSTOP (the watchdog freezes with it), writes a
#     holder_frozen mark, and kills it with SIGKILL once the next lock was answered: it is
#     never continued.
# Then the parent asks for the lock with wait_ms = ttl + 3 s, writes and unlocks.
#
# What it expects (the checker, check.h):
#   - that lock is granted, once per round (invariant 8, --expect-takeovers), with a token
#     above every earlier one (invariant 2);
#   - it is granted only after the dead holder's lease, as extended by its watchdog's last
#     renewal, ran out: no lease windows of two owners overlap (strict leases, Redis loses
#     nothing here);
#   - the watchdog did keep the lock past its first lease: at least two successful renewals
#     per round;
#   - both kinds of rounds ran.
# ctest: short

faults=4
[ "$length" = full ] && faults=10
# One takeover per round of a dead holder's lock.
checker_extra=(--expect-takeovers "$faults")

scenario_mode() { mode=(watchdog); }

# parent_locks: how many times the parent asked for the lock after a lost holder.
parent_locks() { awk -F'\t' '$1 == "p" && $2 == "lock"' "$hist" 2>/dev/null | wc -l; }

taken() { [ "$(parent_locks)" -ge "$1" ]; }

# scenario_fault I: the workload runs the rounds on its own; wait until round I is over.
scenario_fault() {
    wait_until "watchdog round $1" 30 taken "$1"
    mark heal
}

scenario_check() {
    local killed frozen renewals
    killed=$(awk -F'\t' '$2 == "mark" && $14 == "holder_killed"' "$hist" | wc -l)
    frozen=$(awk -F'\t' '$2 == "mark" && $14 == "holder_frozen"' "$hist" | wc -l)
    renewals=$(awk -F'\t' '$2 == "renew" && $13 ~ /watchdog/ && $6 == 200' "$hist" | wc -l)
    if [ "$killed" -lt 1 ] || [ "$frozen" -lt 1 ]; then
        fail "$killed holders killed while running and $frozen frozen: both kinds must run"
    fi
    [ "$renewals" -ge $((2 * (killed + frozen))) ] \
        || fail "$renewals watchdog renewals for $((killed + frozen)) rounds, not 2 each"
    say "$killed holders killed running, $frozen frozen then killed, $renewals watchdog renewals"
    # A figure, not asserted: how long after the dead holder's lease could have ended at the
    # latest (its last successful renewal's answer + ttl) the next holder had the lock.
    awk -F'\t' '
        $2 == "renew" && $13 ~ /watchdog/ && $6 == 200 { until[$10] = $5 + $11 * 1000000 }
        $2 == "mark" && $14 ~ /^holder_/ { dead = $10; wait = 1; next }
        wait && $1 == "p" && $2 == "lock" && $6 == 200 {
            d = ($5 - until[dead]) / 1000000; wait = 0; n++; sum += d; if (d > max) max = d
        }
        END { if (n) printf "takeover after the lease ran out: mean %.0f ms, max %.0f ms (%d)\n",
                  sum / n, max, n }' "$hist"
}
