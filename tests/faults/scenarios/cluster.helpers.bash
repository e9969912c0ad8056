# shellcheck shell=bash disable=SC2154,SC2034
# Shared by the cluster_* scenarios (not a scenario: no .sh). The gateway runs on a Redis
# Cluster of 3 masters and 3 replicas (tests/common/cluster.sh); run_scenario.sh's own
# redis-server is started as usual but never given to the gateway.

# shellcheck source=../../common/cluster.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../common/cluster.sh"

cluster_exit() {
    local rc=$?
    fg_cluster_stop || true
    cleanup
    exit "$rc"
}

scenario_prestart() {
    trap cluster_exit EXIT
    fg_cluster_start "$tmp/cluster" 3 1 || fail "the cluster did not start"
    gw_redis_url=$FG_CLUSTER_URL
    say "cluster: $FG_CLUSTER_URL"
}

ccli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }
slot_of() { ccli "${FG_CLUSTER_PORTS[0]}" cluster keyslot "$1" 2>/dev/null || ccli "$FG_CLUSTER_MASTER_PORT" cluster keyslot "$1"; }
node_id() { ccli "$1" cluster myid | tr -d '\r'; }

# masters: the ports of the running masters, one a line.
masters() {
    local p
    for p in "${FG_CLUSTER_PORTS[@]}"; do
        if ccli "$p" role 2>/dev/null | head -1 | grep -qx master; then echo "$p"; fi
    done
    return 0
}
