# shellcheck shell=bash disable=SC2154,SC2034
# (SC2154: $tmp, $gport, $seed... are run_scenario.sh's; SC2034: it reads faults, steps...)
# redlock_minority_kill: the gateway on Redlock over 3 independent masters loses
# one master (a minority) to SIGKILL under load, and that master comes back without its data.
# Each fault, on the next master in turn:
#   1. after some operations the master is SIGKILLed ("rl_kill" mark);
#   2. a probe /lock is granted by the two others: the time from the kill to that grant is
#      printed (it should be one round trip: no failover to wait for);
#   3. its AOF and RDB are wiped and it is restarted empty; /readyz must show it held out
#      ("heal" mark: the service never stopped);
#   4. after the hold-out (--max-ttl 5s plus drift) it counts again by itself, for the next
#      fault.
# No "# data-loss" line: the checker runs with --strict-leases. A master that lost its data
# also lost the leases it held, and only the delayed restart keeps two owners' leases from
# overlapping; tokens never repeat and stale writes are refused.
# ctest: short

# shellcheck source=SCRIPTDIR/redlock.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/redlock.helpers.bash"

faults=2
[ "$length" = full ] && faults=6

scenario_fault() {
    local i=$((($1 - 1) % rl_n)) res="$scenario-$seed-0" start took
    progress "$steps"
    fg_redis_set_kill "$i" || fail "could not kill master $i"
    start=$(now_ms)
    mark rl_kill
    wait_until "a /lock granted with master $i down" 30 probe_lock "$res"
    took=$(($(now_ms) - start))
    fg_redis_set_wipe "$i"
    fg_redis_set_restart "$i" || fail "master $i did not restart"
    wait_until "master $i held out after losing its data" 20 \
        rl_nodes_ready "$gport" $((rl_n - 1)) 1
    mark heal
    say "fault $1: master $i killed, a lock granted $took ms later; restarted empty and held out"
    echo "$took" >>"$tmp/recovery-ms"
    wait_until "master $i counting again after its hold-out" 30 rl_nodes_ready "$gport" "$rl_n" 0
}

scenario_check() {
    say "lock granted after a minority kill (ms): $(tr '\n' ' ' <"$tmp/recovery-ms")"
    rl_check_reported "$gport"
}
