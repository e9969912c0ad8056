# shellcheck shell=bash disable=SC2154,SC2034
# (SC2154: $tmp, $rport, $seed... are run_scenario.sh's; SC2034: it reads faults, steps...)
# multi_gateway: three gateways share one PostgreSQL store and token ledger (--store) and one
# Redis, and the workload's clients send each request to the next gateway in turn (a lock on
# one, its write on the next, its unlock on the third). Sourced by run_scenario.sh.
#
# The faults, in turn:
#   1. Redis loses its data: killed with SIGKILL and restarted empty (no persistence). Every
#      counter is gone; only the shared ledger (fence.c) keeps the next tokens above the ones
#      handed out, by any gateway.
#   2. A gateway (B, not the one run_scenario.sh measures) killed with SIGKILL while requests
#      are in flight, and restarted on the same store.
#   3. PostgreSQL killed with SIGKILL and restarted (crash recovery): locks and writes answer
#      503 meanwhile, and every gateway recovers by itself.
# Expected: the checker's invariants hold over the whole history (tokens per resource never
# handed out twice and increasing, no lower-token write accepted, no acknowledged write lost,
# every answer within its bound); 7 (overlapping leases) is only reported, since a lease is
# lost with Redis's data. Each gateway's /readyz names the store and is 200 at the end.
# ctest: short
# data-loss

# shellcheck source=SCRIPTDIR/aof_regression.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/aof_regression.helpers.bash"
# shellcheck source=../../common/pg.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../common/pg.sh"

persist=(--appendonly no) # a restart loses everything
faults=6 # two of each
[ "$length" = full ] && faults=18
mg_ports=() mg_pids=()
gateways=3        # invariant 9: Redis clients of three gateways
fd_slack_extra=8  # the gateway's PostgreSQL connections, opened as the load needs them
                  # (store_options.pool_size)

# mg_gw_start N: starts extra gateway N (1 or 2) on the shared store, on its own port.
mg_gw_start() {
    local n=$1 port pid
    port=${mg_ports[$n]:-$(free_port)}
    mkdir -p "$tmp/gw$n"
    # gw_extra holds --store (and what a file sourcing this one adds); gw_redis_url another
    # Redis deployment when that file sets one.
    "$gateway" --listen "127.0.0.1:$port" --data "$tmp/gw$n" --threads 4 "${gw_extra[@]}" \
        --redis "${gw_redis_url:-redis://127.0.0.1:$rport}" 2>>"$tmp/extra-gw$n.log" >&2 &
    pid=$!
    extra_pids+=("$pid")
    mg_ports[$n]=$port
    mg_pids[$n]=$pid
    wait_until "gateway $n answering /healthz" 20 healthy "$port"
}

healthy() { curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$1/healthz" 2>/dev/null; }

# ready PORT: /readyz of the gateway on PORT is 200 and names the PostgreSQL store.
ready() {
    curl -fsS --max-time 3 "http://127.0.0.1:$1/readyz" 2>/dev/null | grep -q '"store": *"postgresql://'
}

all_ready() { ready "$gport" && ready "${mg_ports[1]}" && ready "${mg_ports[2]}"; }

# PostgreSQL first (the gateways' store), then the two extra gateways; the one
# run_scenario.sh starts gets --store through gw_extra.
scenario_prestart() {
    chain_cleanup
    mkdir -p "$tmp/pg"
    chmod 755 "$tmp" # the postgres user (initdb refuses root) must reach $tmp/pg
    fg_pg_start "$tmp/pg" || fail "PostgreSQL would not start"
    extra_pids+=("$FG_PG_PID")
    gw_extra+=(--store "$FG_PG_URL")
    say "postgres pid $FG_PG_PID on port $FG_PG_PORT"
}

scenario_setup() {
    mg_gw_start 1
    mg_gw_start 2
    say "gateways B pid ${mg_pids[1]} port ${mg_ports[1]}, C pid ${mg_pids[2]} port ${mg_ports[2]}"
}

scenario_urls() {
    echo "$(gw_url),http://127.0.0.1:${mg_ports[1]},http://127.0.0.1:${mg_ports[2]}"
}

pg_back() { fg_pg_restart 2>/dev/null; }

scenario_fault() {
    progress "$steps"
    case $(($1 % 3)) in
        1)
            redis_kill
            redis_start
            mark heal ;;
        2)
            extra_stop "${mg_pids[1]}"
            mg_gw_start 1
            mark heal ;;
        0)
            extra_forget "$FG_PG_PID"
            fg_pg_kill
            # A killed server's backends hold its shared memory for a moment: retry.
            wait_until "PostgreSQL restarting after kill -9" 30 pg_back
            extra_pids+=("$FG_PG_PID")
            wait_until "every gateway ready on the restarted store" 30 all_ready
            mark heal ;;
    esac
    check_sanitizers
}

scenario_check() {
    all_ready || fail "a gateway's /readyz is not 200 with the store named at the end"
    if grep -nE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$tmp"/extra-gw*.log >&2; then
        fail "sanitizer report in an extra gateway's stderr"
    fi
}
