# shellcheck shell=bash disable=SC2154,SC2034
# transfers_failover: the transfers of scenarios/transfers.sh (fenced transactions between 8
# accounts, one transfer in 8 paused past its lease) with the locks on Redis Sentinel (1
# master, 1 replica, 3 sentinels) and the balances on LMDB. Sourced by run_scenario.sh.
#
# The faults, in turn:
#   1. the gateway killed with SIGKILL while transactions are in flight, and restarted;
#   2. the master SIGKILLed under load and the replica promoted (sentinel_failover.sh's
#      fault: the gateway finds the new master by itself).
# The last fault is a failover, so the restarted gateway has counted one (scenario_check).
# Expected: invariant 11 (no transaction half visible, none acknowledged lost, no paused
# client's transfer accepted, the balances add up to the total) and the token invariants.
# A failover can lose a grant the old master had not replicated, so overlapping leases
# (invariant 7) are only reported: the store's ledger floor still keeps every token new.
# data-loss

# shellcheck source=SCRIPTDIR/sentinel_failover.sh
source "$(dirname "${BASH_SOURCE[0]}")/sentinel_failover.sh"
faults=2
[ "$length" = full ] && faults=6

# At least one paused client's transfer must meet a newer token and be refused whole.
checker_extra=(--expect-fenced 1)

scenario_mode() { mode=(transfers 8); }

scenario_fault() {
    progress "$steps"
    if [ $(($1 % 2)) -eq 0 ]; then
        sentinel_failover_fault "$1"
    else
        kill -KILL "$gw_pid"; wait "$gw_pid" 2>/dev/null || true
        gw_start
        mark heal
    fi
    check_sanitizers
}
