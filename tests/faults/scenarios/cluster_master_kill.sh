# shellcheck shell=bash disable=SC2154,SC2034
# (SC2154: $tmp, $gport, $seed... are run_scenario.sh's; SC2034: it reads faults, steps...)
# cluster_master_kill: the gateway on a Redis Cluster (3 masters, 3 replicas) loses the
# master that owns the workload's first resource to SIGKILL under load; the cluster promotes
# its replica and the gateway follows the new slot map by itself. Each fault:
#   1. after some operations, the master owning the slot of "<prefix>-0" is SIGKILLed;
#   2. a probe /lock on that resource every 50 ms until one is granted: the time from the
#      kill to that grant is the recovery time, printed for docs/reliability.md
#      ("Recovery times");
#   3. the cluster is whole again with the replica promoted ("heal" mark);
#   4. the killed node is restarted and rejoins as a replica, for the next fault.
# A failover can lose what the old master acknowledged and had not replicated: a data-loss
# scenario (overlapping leases only reported); tokens never repeat and stale writes are
# refused all the same.
# ctest: short
# data-loss

# shellcheck source=SCRIPTDIR/cluster.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/cluster.helpers.bash"

[ "$length" = short ] && faults=2

scenario_fault() {
    local res="$scenario-$seed-0" slot port start took
    progress "$steps"
    slot=$(slot_of "$res")
    port=$(fg_cluster_slot_owner "$slot") || fail "no owner for slot $slot"
    fg_cluster_kill_master "$port" || fail "could not kill master $port"
    start=$(now_ms)
    mark kill_master
    wait_until "a /lock on $res granted after its master was killed" 30 probe_lock "$res"
    took=$(($(now_ms) - start))
    fg_cluster_wait_failover 30 || fail "no failover away from $port"
    mark heal
    say "fault $1: master $port (slot $slot) killed, new master $FG_CLUSTER_MASTER_PORT, \
locks served again after $took ms"
    echo "$took" >>"$tmp/recovery-ms"
    fg_cluster_restart "$port" 60 || fail "the killed node did not rejoin"
}

scenario_check() {
    local failovers
    failovers=$(curl -fsS --max-time 2 "http://127.0.0.1:$gport/metrics" \
        | awk '$1 == "fencegate_redis_failovers_total" { print $2 }')
    say "recovery times (ms): $(tr '\n' ' ' <"$tmp/recovery-ms"); the gateway counted \
$failovers failovers"
    [ "${failovers:-0}" -ge 1 ] || fail "fencegate_redis_failovers_total is ${failovers:-absent}"
}
