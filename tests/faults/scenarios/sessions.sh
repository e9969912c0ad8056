# shellcheck shell=bash disable=SC2154,SC2034 # the runner's variables, and the ones it reads
# sessions: locks held in sessions (one lease for many locks) on Redis Sentinel (1 master,
# 1 replica, 3 sentinels), with their holders killed, the gateway killed, and Redis failing
# over.
#
# What happens (fg_workload run ... sessions, wl_sessions.c): three clients create sessions
# of 1 s, take two of three shared resources in each (waiting for one another; in every
# third session both as one set, POST /lock {"resources", "session"}), write with
# each token, renew the session, write again, then DELETE the session and write once more
# with each old token; every fourth session is left to expire, for a gateway's reaper to end;
# every fifth round of client 0 forks a holder that takes a lock in a session and writes,
# and kills it with SIGKILL (a holder_killed mark), then takes that lock itself. The faults,
# in turn:
#   odd:  the gateway is killed with SIGKILL and restarted: sessions it created outlive it,
#         and the restarted gateway's reaper ends the ones that expire meanwhile;
#   even: the Sentinel master is killed, a replica is promoted, and the set is made whole
#         again before the next fault.
#
# What it expects (the checker, check.h):
#   - invariant 14: once a DELETE of a session was answered 200, no write with one of its
#     locks' tokens is accepted, through the gateway kill and the failover (the fence is in
#     the store before the answer, so a Redis that lost it does not matter);
#   - the killed holder's lock is granted to the next owner (--expect-takeovers 1);
#   - at least one session ended by DELETE, and every write after it refused.
# A failover can lose grants the old master acknowledged (Sentinel's "last failover wins"):
# a data-loss scenario, so overlapping leases are only reported (a few per run, after the
# faults: a renewal answered 200 whose lock renewals did not all reach the master counts as
# a renewal of every lock of the session in the checker's windows).
# Not in the default suite: a failover takes longer than the default suite may spend.
# data-loss

# shellcheck source=SCRIPTDIR/sentinel_failover.sh
source "$(dirname "${BASH_SOURCE[0]}")/sentinel_failover.sh"

faults=4
[ "$length" = short ] && faults=2
checker_extra=(--expect-takeovers 1)

scenario_mode() { mode=(sessions); }

scenario_fault() {
    progress "$steps"
    if (($1 % 2 == 1)); then
        kill -KILL "$gw_pid"
        wait "$gw_pid" 2>/dev/null || true
        gw_start
        mark heal
        check_sanitizers
        say "fault $1: gateway killed and restarted"
        return
    fi
    sentinel_failover_fault "$1"
}

scenario_check() {
    local ended late refused killed
    ended=$(awk -F'\t' '$2 == "session_end" && $6 == 200' "$hist" | wc -l)
    late=$(awk -F'\t' '$2 == "write" && $13 ~ /stale/ && $1 ~ /^s/' "$hist" | wc -l)
    refused=$(awk -F'\t' '$2 == "write" && $13 ~ /stale/ && $1 ~ /^s/ && $6 == 409' "$hist" | wc -l)
    killed=$(awk -F'\t' '$2 == "mark" && $14 == "holder_killed"' "$hist" | wc -l)
    [ "$ended" -ge 1 ] || fail "no session was ended by DELETE"
    [ "$killed" -ge 1 ] || fail "no holder was killed"
    say "$ended sessions ended by DELETE, $refused of $late writes after their end refused \
(the rest got no answer), $killed holders killed"
}
