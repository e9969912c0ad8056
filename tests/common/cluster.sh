# shellcheck shell=bash
# The FG_* variables are set here for the scripts that source this file.
# shellcheck disable=SC2034
# A Redis Cluster for the shell tests (fault scenarios), like the C harness's
# th_cluster_start: MASTERS * (1 + REPLICAS) nodes with cluster-enabled yes
# (cluster-node-timeout 1000, cluster-replica-validity-factor 0), each a child of the calling
# shell on a free loopback port whose bus port (+10000) is free too, with the options of
# tests/common/topo.sh, joined by redis-cli --cluster create. Sourced, never run; call the
# functions directly, not in $(...), except those that only print.
#
#   fg_cluster_start DIR MASTERS REPLICAS [PASSWORD]
#       starts them under DIR (node-I/) and returns once every node says cluster_state:ok
#       with all 16384 slots ok, knows every node, counts MASTERS masters, and every replica
#       is linked. Sets FG_CLUSTER_URL (redis-cluster://[:PASSWORD@]127.0.0.1:P1,...) and the
#       arrays FG_CLUSTER_PORTS and FG_CLUSTER_PIDS.
#   fg_cluster_slot_owner SLOT [FROM_PORT]
#                                prints the port of the master serving SLOT, as the node on
#                                FROM_PORT (default: the first running node) sees it
#   fg_cluster_kill_master PORT  SIGKILLs that node (a master) after noting one of its slots;
#                                sets FG_CLUSTER_KILLED_PORT and FG_CLUSTER_KILLED_SLOT
#   fg_cluster_wait_failover SECS
#                                waits until every running node is whole again and sees the
#                                killed master's slot served by another running node that
#                                answers ROLE as master; sets FG_CLUSTER_MASTER_PORT
#   fg_cluster_wait_ok SECS      waits until every running node sees the whole cluster again
#   fg_cluster_restart PORT SECS restarts a killed node (same port, nodes.conf, AOF): it
#                                rejoins as a replica; waits until the cluster is whole
#   fg_cluster_stop              stops every node by PID
# The caller's EXIT trap should call fg_cluster_stop. Failures print FAIL: and return 1.

# shellcheck source=topo.sh
source "$(dirname "${BASH_SOURCE[0]}")/topo.sh"

FG_CLUSTER_DIR='' FG_CLUSTER_PASSWORD='' FG_CLUSTER_URL='' FG_CLUSTER_MASTERS=''
FG_CLUSTER_KILLED_PORT='' FG_CLUSTER_KILLED_SLOT='' FG_CLUSTER_MASTER_PORT=''
FG_CLUSTER_PORTS=() FG_CLUSTER_PIDS=()

fg_cluster__cli() { fg_topo_cli "$FG_CLUSTER_PASSWORD" "$@"; }

fg_cluster__args() {
    FG_CLUSTER__ARGS=(--cluster-enabled yes --cluster-config-file nodes.conf
        --cluster-node-timeout 1000 --cluster-replica-validity-factor 0)
    [ -z "$FG_CLUSTER_PASSWORD" ] || FG_CLUSTER__ARGS+=(--masterauth "$FG_CLUSTER_PASSWORD")
}

fg_cluster__first_running() {
    local i
    for i in "${!FG_CLUSTER_PORTS[@]}"; do
        [ -z "${FG_CLUSTER_PIDS[$i]}" ] || { echo "${FG_CLUSTER_PORTS[$i]}"; return 0; }
    done
    return 1
}

# CLUSTER NODES lines: "id ip:port@bus flags master ping pong epoch link slot slot..."; a slot
# entry is "N", "A-B" or a migration note in brackets.
fg_cluster_slot_owner() {
    local slot=$1 from=${2:-}
    [ -n "$from" ] || from=$(fg_cluster__first_running) || return 1
    fg_cluster__cli "$from" cluster nodes 2>/dev/null | tr -d '\r' | awk -v s="$slot" '
        $3 ~ /master/ && $3 !~ /fail/ {
            for (i = 9; i <= NF; i++) {
                if ($i ~ /^\[/) continue
                n = split($i, r, "-"); lo = r[1]; hi = (n == 2) ? r[2] : r[1]
                if (s + 0 >= lo + 0 && s + 0 <= hi + 0) {
                    split($2, a, "@"); split(a[1], hp, ":"); print hp[2]; exit
                }
            }
        }'
}

fg_cluster__node_whole() {
    local port=$1 info role
    info=$(fg_cluster__cli "$port" cluster info 2>/dev/null | tr -d '\r') || return 1
    grep -qx 'cluster_state:ok' <<<"$info" || return 1
    grep -qx 'cluster_slots_assigned:16384' <<<"$info" || return 1
    grep -qx 'cluster_slots_ok:16384' <<<"$info" || return 1
    grep -qx "cluster_known_nodes:${#FG_CLUSTER_PORTS[@]}" <<<"$info" || return 1
    grep -qx "cluster_size:$FG_CLUSTER_MASTERS" <<<"$info" || return 1
    info=$(fg_cluster__cli "$port" info replication 2>/dev/null | tr -d '\r') || return 1
    role=$(sed -n 's/^role://p' <<<"$info")
    [ "$role" = master ] || grep -qx 'master_link_status:up' <<<"$info"
}

fg_cluster__whole() {
    local i
    for i in "${!FG_CLUSTER_PORTS[@]}"; do
        [ -n "${FG_CLUSTER_PIDS[$i]}" ] || continue
        fg_cluster__node_whole "${FG_CLUSTER_PORTS[$i]}" || return 1
    done
}

fg_cluster_start() {
    local dir=$1 masters=$2 replicas=$3 password=${4:-} i n addrs=() sep=""
    FG_CLUSTER_DIR=$dir FG_CLUSTER_PASSWORD=$password FG_CLUSTER_MASTERS=$masters
    FG_CLUSTER_PORTS=() FG_CLUSTER_PIDS=()
    n=$((masters * (1 + replicas)))
    fg_cluster__args
    for ((i = 0; i < n; i++)); do
        mkdir -p "$dir/node-$i"
        fg_topo_start_node "$dir/node-$i" "$password" redis 10000 "${FG_CLUSTER__ARGS[@]}" \
            || return 1
        FG_CLUSTER_PORTS[$i]=$FG_TOPO_PORT
        FG_CLUSTER_PIDS[$i]=$FG_TOPO_PID
        addrs+=("127.0.0.1:$FG_TOPO_PORT")
    done
    if ! redis-cli ${password:+--no-auth-warning -a "$password"} --cluster create "${addrs[@]}" \
        --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1; then
        echo "FAIL: redis-cli --cluster create failed:" >&2
        tail -n 20 "$dir/create.log" >&2
        return 1
    fi
    FG_CLUSTER_URL="redis-cluster://${password:+:$password@}"
    for i in "${!FG_CLUSTER_PORTS[@]}"; do
        FG_CLUSTER_URL+="${sep}127.0.0.1:${FG_CLUSTER_PORTS[$i]}"
        sep=,
    done
    fg_topo_wait 30 "the cluster being whole (state ok, every slot, every node, replicas linked)" \
        fg_cluster__whole
}

fg_cluster_kill_master() {
    local port=$1 i from slot
    for i in "${!FG_CLUSTER_PORTS[@]}"; do
        [ "${FG_CLUSTER_PORTS[$i]}" = "$port" ] || continue
        from=$(fg_cluster__first_running) || return 1
        # The first slot of its first range, noted before the kill.
        slot=$(fg_cluster__cli "$port" cluster nodes 2>/dev/null | tr -d '\r' \
            | awk '$3 ~ /myself/ {
                for (i = 9; i <= NF; i++) if ($i !~ /^\[/) { split($i, r, "-"); print r[1]; exit }
            }')
        [ -n "$slot" ] || { echo "FAIL: node $port serves no slot" >&2; return 1; }
        fg_topo_kill "${FG_CLUSTER_PIDS[$i]}"
        FG_CLUSTER_PIDS[$i]=
        FG_CLUSTER_KILLED_PORT=$port FG_CLUSTER_KILLED_SLOT=$slot
        return 0
    done
    echo "FAIL: no node on port $port" >&2
    return 1
}

fg_cluster__failed_over() {
    local i owner="" o
    fg_cluster__whole || return 1
    for i in "${!FG_CLUSTER_PORTS[@]}"; do
        [ -n "${FG_CLUSTER_PIDS[$i]}" ] || continue
        o=$(fg_cluster_slot_owner "$FG_CLUSTER_KILLED_SLOT" "${FG_CLUSTER_PORTS[$i]}")
        [ -n "$o" ] && [ "$o" != "$FG_CLUSTER_KILLED_PORT" ] || return 1
        [ -z "$owner" ] || [ "$o" = "$owner" ] || return 1
        owner=$o
    done
    fg_cluster__cli "$owner" role 2>/dev/null | head -n 1 | grep -q '^master' || return 1
    FG_CLUSTER_MASTER_PORT=$owner
}

fg_cluster_wait_failover() {
    fg_topo_wait "$1" "a cluster failover away from master $FG_CLUSTER_KILLED_PORT" \
        fg_cluster__failed_over
}

fg_cluster_wait_ok() {
    fg_topo_wait "$1" "the cluster being whole" fg_cluster__whole
}

fg_cluster_restart() {
    local port=$1 secs=$2 i
    fg_cluster__args
    for i in "${!FG_CLUSTER_PORTS[@]}"; do
        [ "${FG_CLUSTER_PORTS[$i]}" = "$port" ] || continue
        [ -z "${FG_CLUSTER_PIDS[$i]}" ] || { echo "FAIL: node $port is running" >&2; return 1; }
        fg_topo_spawn "$FG_CLUSTER_DIR/node-$i" "$port" "$FG_CLUSTER_PASSWORD" redis \
            "${FG_CLUSTER__ARGS[@]}" || return 1
        FG_CLUSTER_PIDS[$i]=$FG_TOPO_PID
        fg_topo_wait "$secs" "the cluster being whole again after restarting $port" \
            fg_cluster__whole
        return
    done
    echo "FAIL: no node on port $port" >&2
    return 1
}

fg_cluster_stop() {
    local pid
    for pid in "${FG_CLUSTER_PIDS[@]}"; do
        fg_topo_stop_pid "$pid"
    done
    FG_CLUSTER_PIDS=()
}
