# shellcheck shell=bash disable=SC2154,SC2034
# (SC2154: $tmp, $gport, $seed... are run_scenario.sh's; SC2034: it reads faults, steps...)
# redlock_multi_gateway: three gateways on the same 3 independent masters (Redlock)
# and one PostgreSQL store and token ledger (the helpers of multi_gateway.sh), racing for the
# same resources: the workload's clients send each request to the next gateway in turn. The
# faults, in turn:
#   1. a master (the next one each time) is SIGKILLed, wiped and restarted empty: every
#      gateway must hold it out (their /readyz shows it held out, "heal" marked), and after the
#      hold-out (--max-ttl 5s) it counts again on every gateway, before the next fault;
#   2. gateway B killed with SIGKILL while requests are in flight, and restarted.
# No "# data-loss" line: the checker runs with --strict-leases. Tokens per resource are never
# handed out twice and increase across the three gateways; no lower-token write is accepted.
# ctest: short

# shellcheck source=SCRIPTDIR/multi_gateway.sh
source "$(dirname "${BASH_SOURCE[0]}")/multi_gateway.sh"
eval "mg_prestart() $(declare -f scenario_prestart | tail -n +2)"
# shellcheck source=SCRIPTDIR/redlock.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/redlock.helpers.bash"

persist=(--appendonly yes --appendfsync always) # run_scenario.sh's own Redis, unused
faults=4
[ "$length" = full ] && faults=10
fd_slack_extra=$((8 + 7 * (rl_n - 1))) # PostgreSQL connections, and one Redis per master
rl_wiped=0

rl_mg_exit() {
    local rc=$?
    set +e
    fg_redis_set_stop
    keep_status "$rc"
    regress_exit
}

scenario_prestart() {
    rl_start_set
    rl_set_url
    mg_prestart
    trap rl_mg_exit EXIT
}

# every_gateway COUNTING HELD: rl_nodes_ready on all three gateways.
every_gateway() {
    rl_nodes_ready "$gport" "$1" "$2" && rl_nodes_ready "${mg_ports[1]}" "$1" "$2" &&
        rl_nodes_ready "${mg_ports[2]}" "$1" "$2"
}

scenario_fault() {
    local i
    progress "$steps"
    case $(($1 % 2)) in
        1)
            i=$((rl_wiped % rl_n))
            rl_wiped=$((rl_wiped + 1))
            rl_lose_data "$i"
            # Each gateway meets the restarted master at its next call (or /readyz).
            wait_until "master $i held out by every gateway" 20 every_gateway $((rl_n - 1)) 1
            mark heal
            wait_until "master $i counting again on every gateway" 30 every_gateway "$rl_n" 0
            say "fault $1: master $i restarted empty, held out by the three gateways, back" ;;
        0)
            extra_stop "${mg_pids[1]}"
            mg_gw_start 1
            mark heal
            say "fault $1: gateway B killed and restarted" ;;
    esac
    check_sanitizers
}

eval "mg_check() $(declare -f scenario_check | tail -n +2)"
scenario_check() {
    mg_check
    rl_check_reported "$gport"
}
