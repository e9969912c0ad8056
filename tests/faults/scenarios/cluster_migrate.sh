# shellcheck shell=bash disable=SC2154,SC2034
# (SC2154: $tmp, $gport, $seed... are run_scenario.sh's; SC2034: it reads faults, steps...)
# cluster_migrate: the slot of a resource the workload uses moves to another master under
# load, the way redis-cli --cluster reshard moves it. Each fault:
#   1. CLUSTER SETSLOT IMPORTING on the target, MIGRATING on the owner: from here the owner
#      answers ASK (or TRYAGAIN, for a script whose keys are split) and the gateway retries;
#   2. the slot's keys are MIGRATEd in small batches (GETKEYSINSLOT, 10 at a time);
#   3. SETSLOT NODE on the target, the old owner, then the other masters: the old owner
#      answers MOVED and the gateway reads the slot map again;
#   4. a probe /lock on the resource until granted: the time from step 1 is printed.
# No data is lost: leases are strict (overlaps fail the scenario), like any other scenario.
# ctest: short

# shellcheck source=SCRIPTDIR/cluster.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/cluster.helpers.bash"

[ "$length" = short ] && faults=3

# migrate_slot SLOT SRC DST: steps 1 to 3.
migrate_slot() {
    local slot=$1 src=$2 dst=$3 src_id dst_id keys p
    src_id=$(node_id "$src") dst_id=$(node_id "$dst")
    ccli "$dst" cluster setslot "$slot" importing "$src_id" >/dev/null
    ccli "$src" cluster setslot "$slot" migrating "$dst_id" >/dev/null
    while :; do
        keys=$(ccli "$src" cluster getkeysinslot "$slot" 10 | tr -d '\r')
        [ -n "$keys" ] || break
        # shellcheck disable=SC2086 # one argument per key
        ccli "$src" migrate 127.0.0.1 "$dst" "" 0 5000 keys $keys >/dev/null
    done
    ccli "$dst" cluster setslot "$slot" node "$dst_id" >/dev/null
    ccli "$src" cluster setslot "$slot" node "$dst_id" >/dev/null
    for p in $(masters); do
        ccli "$p" cluster setslot "$slot" node "$dst_id" >/dev/null
    done
}

scenario_fault() {
    local res="$scenario-$seed-$(($1 % 3))" slot src dst start took
    progress "$steps"
    slot=$(slot_of "$res")
    src=$(fg_cluster_slot_owner "$slot") || fail "no owner for slot $slot"
    dst=$(masters | grep -vx "$src" | head -1)
    start=$(now_ms)
    mark migrate
    migrate_slot "$slot" "$src" "$dst"
    fg_cluster_wait_ok 30 || fail "the cluster is not whole after moving slot $slot"
    [ "$(fg_cluster_slot_owner "$slot")" = "$dst" ] || fail "slot $slot did not move to $dst"
    wait_until "a /lock on $res granted after the migration" 30 probe_lock "$res"
    took=$(($(now_ms) - start))
    mark heal
    say "fault $1: slot $slot of $res moved from $src to $dst; locks on it served again \
$took ms after the migration began"
}
