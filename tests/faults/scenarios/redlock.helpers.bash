# shellcheck shell=bash disable=SC2154,SC2034
# Shared by the redlock_* scenarios (not a scenario: no .sh). The gateway runs on Redlock over
# $rl_n independent redis-servers (tests/common/redis.sh: AOF, appendfsync always), given as
# redlock://127.0.0.1:P0,127.0.0.1:P1,... with node 0 reached through $rl_node0_port when a
# scenario sets it (a proxy). run_scenario.sh's own redis-server is started as usual but
# never given to the gateway. --max-ttl is the workload's longest lease (5 s), so a master
# that lost its data is held out for 5 s and some.

# shellcheck source=../../common/redis.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../common/redis.sh"

rl_n=${rl_n:-3}
# Every Redis connection of the gateway is one per master here: invariant 9's descriptor
# bound gets the connections to the other masters too.
fd_slack_extra=$((7 * (rl_n - 1)))
rl_max_ttl=${rl_max_ttl:-5s} # a scenario may set a longer one before sourcing this file
gw_extra+=(--max-ttl "$rl_max_ttl")

rl_exit() {
    local rc=$?
    set +e # the way out: nothing here may stop it before cleanup has run
    fg_redis_set_stop
    (exit "$rc") # cleanup reads the status from $?
    cleanup
    exit "$rc"
}

command -v jq >/dev/null 2>&1 || fail "jq is not installed (scripts/install-deps.sh)"

# rl_start_set: starts the masters.
rl_start_set() {
    fg_redis_set_start "$tmp/set" "$rl_n" || fail "the $rl_n masters did not start"
}

# rl_set_url: sets gw_redis_url to the masters, node 0 reached through port $rl_node0_port
# when set (a proxy in front of it).
rl_set_url() {
    local i sep="" port url=redlock://
    for ((i = 0; i < rl_n; i++)); do
        port=${FG_REDIS_SET_PORTS[$i]}
        [ "$i" -eq 0 ] && port=${rl_node0_port:-$port}
        url+="${sep}127.0.0.1:$port"
        sep=,
    done
    gw_redis_url=$url
    say "masters: $url"
}

scenario_prestart() {
    trap rl_exit EXIT
    rl_start_set
    rl_set_url
}

# rl_nodes_ready PORT COUNTING HELD: the gateway on PORT answers /readyz 200 with COUNTING
# masters that count and HELD held out.
rl_nodes_ready() {
    local body
    body=$(curl -sS --max-time 3 "http://127.0.0.1:$1/readyz" 2>/dev/null) || return 1
    echo "$body" >"$tmp/readyz.last"
    [ "$(jq '[.topology.nodes[] | select(.counts)] | length' <<<"$body")" = "$2" ] &&
        [ "$(jq '[.topology.nodes[] | select(.held_out)] | length' <<<"$body")" = "$3" ]
}

# rl_lose_data I: SIGKILL master I, wipe its files, restart it empty on its port.
rl_lose_data() {
    fg_redis_set_kill "$1" || fail "could not kill master $1"
    fg_redis_set_wipe "$1"
    fg_redis_set_restart "$1" || fail "master $1 did not restart"
}

# rl_check_reported PORT: /metrics of the gateway on PORT lists the masters.
rl_check_reported() {
    local body
    body=$(curl -fsS --max-time 3 "http://127.0.0.1:$1/metrics") || fail "/metrics did not answer"
    grep -q '^fencegate_redlock_node_counts{' <<<"$body" \
        || fail "/metrics lacks fencegate_redlock_node_counts"
}
