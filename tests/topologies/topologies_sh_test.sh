#!/usr/bin/env bash
# ctest harness_topologies_sh: the shell side of the topology harness (tests/common/
# sentinel.sh, cluster.sh and redis.sh's Redis set), which fault scenarios source, against
# the real servers. For each: start, URL, SIGKILL of the master, failover (a write then
# succeeds on the new master), restart of the killed node, stop by PID; and no server of
# ours may outlive the stop. Prints the set-up and failover times. A missing redis-server,
# redis-sentinel or redis-cli fails the test; it never skips.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=harness_topologies_sh
fail() { echo "$name: FAIL: $*" >&2; exit 1; }
say() { echo "$name: $*"; }

# shellcheck source=../common/sentinel.sh
source "$here/../common/sentinel.sh"
# shellcheck source=../common/cluster.sh
source "$here/../common/cluster.sh"
# shellcheck source=../common/redis.sh
source "$here/../common/redis.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fg-topo-sh.XXXXXX")
cleanup() {
    fg_sentinel_stop
    fg_cluster_stop
    fg_redis_set_stop
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
pw=topo-sh-s3cret
ms() { echo $(($(date +%s%N) / 1000000)); }
# expect WANT PORT ARGS...: redis-cli on PORT (with the password) answers WANT.
expect() {
    local want=$1 port=$2 got
    shift 2
    got=$(fg_topo_cli "$pw" "$port" "$@" 2>&1 | tr -d '\r')
    [ "$got" = "$want" ] || fail "$* on port $port answered '$got', wanted '$want'"
}
# get_is PORT KEY WANT: GET KEY on PORT answers WANT.
get_is() { [ "$(fg_topo_cli "$pw" "$1" get "$2" 2>/dev/null | tr -d '\r')" = "$3" ]; }
all_dead() {
    local pid
    for pid; do
        if [ -n "$pid" ] && fg_topo__alive "$pid"; then return 1; fi
    done
}

# ---- Sentinel
t0=$(ms)
fg_sentinel_start "$tmp/sentinel" fgmaster 2 3 "$pw" || fail "the sentinel set did not start"
say "sentinel set-up (1 master, 2 replicas, 3 sentinels): $(($(ms) - t0)) ms"
want="redis-sentinel://:$pw@127.0.0.1:${FG_SENTINEL_PORTS[0]},127.0.0.1:${FG_SENTINEL_PORTS[1]}"
want+=",127.0.0.1:${FG_SENTINEL_PORTS[2]}/fgmaster"
[ "$FG_SENTINEL_URL" = "$want" ] || fail "URL $FG_SENTINEL_URL, wanted $want"
master=$(fg_sentinel_master_port) || fail "the sentinels agree on no master"
[ "$master" = "${FG_SENTINEL_REDIS_PORTS[0]}" ] || fail "master $master, not the first node"
expect OK "$master" set before 1
fg_topo_wait 10 "the write reaching replica 1" get_is "${FG_SENTINEL_REDIS_PORTS[1]}" before 1 \
    || fail "replication"
fg_topo_wait 10 "the write reaching replica 2" get_is "${FG_SENTINEL_REDIS_PORTS[2]}" before 1 \
    || fail "replication"
fg_sentinel_kill_master || fail "kill"
t0=$(ms)
fg_sentinel_wait_failover "$FG_SENTINEL_KILLED_PORT" 30 || fail "no failover"
say "sentinel failover after SIGKILL: $(($(ms) - t0)) ms"
[ "$FG_SENTINEL_MASTER_PORT" != "$master" ] || fail "the master did not change"
expect OK "$FG_SENTINEL_MASTER_PORT" set after 2
expect 1 "$FG_SENTINEL_MASTER_PORT" get before
fg_sentinel_wait_ready 90 || fail "the sentinels did not see the other replica move"
fg_sentinel_restart_replica "$master" 90 || fail "restart as a replica"
fg_topo_cli "$pw" "$master" role | head -n 1 | grep -q '^slave' || fail "$master is not a replica"
fg_topo_wait 10 "the new write reaching the old master" get_is "$master" after 2 \
    || fail "replication to the old master"
pids=("${FG_SENTINEL_PIDS[@]}" "${FG_SENTINEL_REDIS_PIDS[@]}")
fg_sentinel_stop
all_dead "${pids[@]}" || fail "a sentinel-set process outlived fg_sentinel_stop"

# ---- Cluster
t0=$(ms)
fg_cluster_start "$tmp/cluster" 3 1 "$pw" || fail "the cluster did not start"
say "cluster create (3 masters, 3 replicas): $(($(ms) - t0)) ms"
[[ $FG_CLUSTER_URL =~ ^redis-cluster://:$pw@(127\.0\.0\.1:[0-9]+,){5}127\.0\.0\.1:[0-9]+$ ]] \
    || fail "URL $FG_CLUSTER_URL"
slot=$(fg_topo_cli "$pw" "${FG_CLUSTER_PORTS[0]}" cluster keyslot '{sh}lock')
owner=$(fg_cluster_slot_owner "$slot")
[ -n "$owner" ] || fail "no owner for slot $slot"
expect OK "$owner" set '{sh}lock' 1
for port in "${FG_CLUSTER_PORTS[@]}"; do
    [ "$port" = "$owner" ] && continue
    if fg_topo_cli "$pw" "$port" role | head -n 1 | grep -q '^master'; then
        expect "MOVED $slot 127.0.0.1:$owner" "$port" set '{sh}lock' 1
    fi
done
expect 1 "$owner" wait 1 5000
fg_cluster_kill_master "$owner" || fail "kill"
t0=$(ms)
fg_cluster_wait_failover 30 || fail "no failover"
say "cluster master failover after SIGKILL: $(($(ms) - t0)) ms"
[ "$FG_CLUSTER_MASTER_PORT" != "$owner" ] || fail "the owner did not change"
[ "$(fg_cluster_slot_owner "$slot")" = "$FG_CLUSTER_MASTER_PORT" ] || fail "slot $slot owner"
expect 1 "$FG_CLUSTER_MASTER_PORT" get '{sh}lock'
expect OK "$FG_CLUSTER_MASTER_PORT" set '{sh}lock' 2
fg_cluster_wait_ok 30 || fail "the cluster is not whole after the failover"
fg_cluster_restart "$owner" 30 || fail "restart"
fg_topo_cli "$pw" "$owner" role | head -n 1 | grep -q '^slave' \
    || fail "$owner did not rejoin as a replica"
pids=("${FG_CLUSTER_PIDS[@]}")
fg_cluster_stop
all_dead "${pids[@]}" || fail "a cluster node outlived fg_cluster_stop"

# ---- Redis set
fg_redis_set_start "$tmp/set" 3 "$pw" || fail "the Redis set did not start"
want="redis://:$pw@127.0.0.1:${FG_REDIS_SET_PORTS[0]}"
want+=",redis://:$pw@127.0.0.1:${FG_REDIS_SET_PORTS[1]}"
want+=",redis://:$pw@127.0.0.1:${FG_REDIS_SET_PORTS[2]}"
[ "$FG_REDIS_SET_URLS" = "$want" ] || fail "URLs $FG_REDIS_SET_URLS, wanted $want"
for i in 0 1 2; do expect OK "${FG_REDIS_SET_PORTS[$i]}" set lock:x "$i"; done
fg_redis_set_kill 1
fg_redis_set_restart 1 || fail "restart"
expect 1 "${FG_REDIS_SET_PORTS[1]}" get lock:x
fg_redis_set_kill 1
fg_redis_set_wipe 1
fg_redis_set_restart 1 || fail "restart after the wipe"
expect 0 "${FG_REDIS_SET_PORTS[1]}" exists lock:x
expect 2 "${FG_REDIS_SET_PORTS[2]}" get lock:x
pids=("${FG_REDIS_SET_PIDS[@]}")
fg_redis_set_stop
all_dead "${pids[@]}" || fail "a Redis-set node outlived fg_redis_set_stop"
say PASS
