# shellcheck shell=bash disable=SC2154,SC2034 # the runner's variables, and the ones it reads
# herd: a thundering herd, 200 waiters on one resource while a holder cycles every 50 ms.
#
# What happens (fg_workload run ... herd 200 MS), next to the usual workload: one process
# keeps 200 waiting POST /lock requests (wait_ms 1 to 4 s) in flight on one resource with
# libcurl multi; a waiter that gets the lock unlocks it at once and asks again, one that
# times out asks again, until MS ms have passed. Another process locks the same resource
# (waiting up to 5 s), holds it 50 ms, unlocks and locks again. Every request is recorded.
# The gateway parks waiters without a thread each (--threads 4 here) and wakes one per
# release.
#
# What it expects:
#   - the herd really waits at once: fencegate_waiters reaches 150 during it;
#   - the checker's invariants over the herd's history: one owner per token, later grants
#     with larger tokens, no lease windows of two owners overlapping (strict leases), no
#     500, every request answered within wait_ms + 5 s;
#   - every request of the herd got an HTTP answer (no reset or refused connection: the
#     gateway's descriptor limit covers its connection limit), the holder cycled again and
#     again while the herd waited, and the herd's waiters were granted the lock too;
#   - afterwards fencegate_waiters returns to 0 and the descriptors to their baseline
#     (run_scenario.sh).
# ctest: short

faults=1
herd_ms=10000
[ "$length" = full ] && herd_ms=60000

scenario_mode() { mode=(herd 200 "$herd_ms"); }

# The gateway must be able to hold every connection it accepts (its --max-connections,
# 1024 by default) plus its own files: else a herd would meet refused connections.
scenario_setup() {
    local limit
    limit=$(awk '/^Max open files/ { print $4 }' "/proc/$gw_pid/limits")
    [ "$limit" = unlimited ] || [ "$limit" -ge $((1024 + 64)) ] \
        || fail "the gateway may open only $limit files, fewer than its 1024 connections + 64"
}

herd_peak=0
herd_seen() {
    local now
    now=$(waiters || echo 0)
    [ "${now:-0}" -gt "$herd_peak" ] && herd_peak=$now
    [ "$herd_peak" -ge 150 ]
}
herd_over() { grep -q "herd_done" "$hist" 2>/dev/null; }

# scenario_fault 1: the herd runs from the start of the workload; see it park, then wait for
# its end.
scenario_fault() {
    wait_until "150 waiters parked at once" 20 herd_seen
    say "fencegate_waiters reached $herd_peak, gateway fds $(fd_count) (baseline $fd_base)"
    wait_until "the herd's end" $((herd_ms / 1000 + 20)) herd_over
    mark heal
}

scenario_check() {
    awk -F'\t' '
        $13 !~ /herd/ { next }
        $6 == 0 { print "no answer: " $0; bad++ }
        $1 == "hh" && $2 == "lock" && $6 == 200 { holder++ }
        $1 != "hh" && $2 == "lock" {
            asked++; if ($6 == 200) granted++; else if ($6 == 409) late++
            d = ($5 - $4) / 1000000; sum += d; if (d > max) max = d
        }
        END {
            fmt = "herd: %d lock requests, %d granted, %d gave up (409), answered in %.0f ms"
            fmt = fmt " on average, %.0f ms at most; holder cycles %d\n"
            printf fmt, asked, granted, late, asked ? sum / asked : 0, max, holder
            exit bad > 0 || holder < 5 || granted < 100
        }' "$hist" || fail "a herd request without an answer, or the holder or the herd starved"
}
