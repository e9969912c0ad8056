# shellcheck shell=bash disable=SC2154,SC2034
# transfers_pg: the transfers of scenarios/transfers.sh (fenced transactions between 8
# accounts, paused clients) on three gateways sharing one PostgreSQL store, each client
# sending its requests to the gateways in turn (a lock on one, the transaction on another),
# under multi_gateway.sh's faults: Redis killed and restarted empty, a gateway killed with
# SIGKILL and restarted, PostgreSQL killed with SIGKILL and restarted. Sourced by
# run_scenario.sh.
# Expected: invariant 11 on the shared store (one PostgreSQL transaction per transfer, so no
# gateway sees a half of one), and the usual invariants; 7 is only reported (Redis loses
# its leases).
# data-loss

# shellcheck source=SCRIPTDIR/multi_gateway.sh
source "$(dirname "${BASH_SOURCE[0]}")/multi_gateway.sh"
faults=3
[ "$length" = full ] && faults=9

# At least one paused client's transfer must meet a newer token and be refused whole.
checker_extra=(--expect-fenced 1)

scenario_mode() { mode=(transfers 8); }
