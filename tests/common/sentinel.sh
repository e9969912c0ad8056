# shellcheck shell=bash
# The FG_* variables are set here for the scripts that source this file.
# shellcheck disable=SC2034
# A Redis Sentinel set for the shell tests (fault scenarios), like the C harness's
# th_sentinel_start: 1 master, R replicas, M sentinels (quorum M/2+1, down-after-milliseconds
# 3000, failover-timeout 5000), each a child of the calling shell on a free loopback port in
# its own directory, with the options of tests/common/topo.sh. Sourced, never run; call the
# functions directly, not in $(...), except those that only print.
#
#   fg_sentinel_start DIR NAME REPLICAS SENTINELS [PASSWORD]
#       starts them under DIR (redis-I/, sentinel-I/) and returns once every sentinel knows
#       the master, every replica (linked) and the M-1 other sentinels: a sentinel fails over
#       only to a replica it has discovered. Sets FG_SENTINEL_URL
#       (redis-sentinel://[:PASSWORD@]127.0.0.1:P1,127.0.0.1:P2,.../NAME), the arrays
#       FG_SENTINEL_REDIS_PORTS/_PIDS (index 0 the first master) and FG_SENTINEL_PORTS/_PIDS.
#       PASSWORD guards the data nodes and the sentinels alike.
#   fg_sentinel_master_port      prints the master port every running sentinel agrees on;
#                                returns 1 when they do not agree
#   fg_sentinel_kill_master      SIGKILLs that master; sets FG_SENTINEL_KILLED_PORT
#   fg_sentinel_wait_failover OLD_PORT SECS
#                                waits until the sentinels agree on another master that answers
#                                ROLE as master; sets FG_SENTINEL_MASTER_PORT
#   fg_sentinel_wait_ready SECS  waits until the start condition holds again for the current
#                                master (the other replicas moved to it): call it after a
#                                failover before killing the new master
#   fg_sentinel_restart_replica PORT SECS
#                                restarts the killed node of PORT as a replica of the current
#                                master, and waits until every sentinel lists it healthy again
#   fg_sentinel_stop             stops the sentinels, then the data nodes, by PID
# The caller's EXIT trap should call fg_sentinel_stop. Failures print FAIL: and return 1.

# shellcheck source=topo.sh
source "$(dirname "${BASH_SOURCE[0]}")/topo.sh"

FG_SENTINEL_DIR='' FG_SENTINEL_NAME='' FG_SENTINEL_PASSWORD='' FG_SENTINEL_URL=''
FG_SENTINEL_KILLED_PORT='' FG_SENTINEL_MASTER_PORT=''
FG_SENTINEL_REDIS_PORTS=() FG_SENTINEL_REDIS_PIDS=() FG_SENTINEL_PORTS=() FG_SENTINEL_PIDS=()

fg_sentinel__fail() { echo "FAIL: $*" >&2; return 1; }
fg_sentinel__cli() { fg_topo_cli "$FG_SENTINEL_PASSWORD" "$@"; }

# fg_sentinel__replicas SENTINEL_PORT: one line "PORT FLAGS LINK MASTER_PORT" per replica
# that sentinel lists (redis-cli prints the nested reply one value per line).
fg_sentinel__replicas() {
    fg_sentinel__cli "$1" sentinel replicas "$FG_SENTINEL_NAME" 2>/dev/null | tr -d '\r' | awk '
        function flush() { if (port != "") print port, flags, link, mport; port = "" }
        NR % 2 == 1 { key = $0; next }
        key == "name" { flush() }
        key == "port" { port = $0 }
        key == "flags" { flags = $0 }
        key == "master-link-status" { link = $0 }
        key == "master-port" { mport = $0 }
        END { flush() }'
}

# fg_sentinel__field SENTINEL_PORT FIELD: a field of SENTINEL MASTER NAME.
fg_sentinel__field() {
    fg_sentinel__cli "$1" sentinel master "$FG_SENTINEL_NAME" 2>/dev/null | tr -d '\r' \
        | awk -v f="$2" 'NR % 2 == 1 { key = $0; next } key == f { print; exit }'
}

fg_sentinel__healthy() { case "$1" in *s_down* | *o_down* | *disconnected*) return 1 ;; esac; }

fg_sentinel_master_port() {
    local i port="" p
    for i in "${!FG_SENTINEL_PORTS[@]}"; do
        [ -n "${FG_SENTINEL_PIDS[$i]}" ] || continue
        p=$(fg_sentinel__cli "${FG_SENTINEL_PORTS[$i]}" sentinel get-master-addr-by-name \
            "$FG_SENTINEL_NAME" 2>/dev/null | tr -d '\r' | sed -n 2p)
        [ -n "$p" ] || return 1
        [ -z "$port" ] || [ "$p" = "$port" ] || return 1
        port=$p
    done
    [ -n "$port" ] && echo "$port"
}

# fg_sentinel__ready MASTER_PORT: the start() condition for that master.
fg_sentinel__ready() {
    local master=$1 i j running=0 sport line rport listed flags link mport
    for i in "${!FG_SENTINEL_PIDS[@]}"; do
        [ -z "${FG_SENTINEL_PIDS[$i]}" ] || running=$((running + 1))
    done
    for i in "${!FG_SENTINEL_PORTS[@]}"; do
        [ -n "${FG_SENTINEL_PIDS[$i]}" ] || continue
        sport=${FG_SENTINEL_PORTS[$i]}
        [ "$(fg_sentinel_master_port)" = "$master" ] || return 1
        [ "$(fg_sentinel__field "$sport" num-other-sentinels)" = $((running - 1)) ] || return 1
        fg_sentinel__healthy "$(fg_sentinel__field "$sport" flags)" || return 1
        listed=$(fg_sentinel__replicas "$sport")
        for j in "${!FG_SENTINEL_REDIS_PORTS[@]}"; do
            rport=${FG_SENTINEL_REDIS_PORTS[$j]}
            if [ -z "${FG_SENTINEL_REDIS_PIDS[$j]}" ] || [ "$rport" = "$master" ]; then
                continue
            fi
            line=$(awk -v p="$rport" '$1 == p' <<<"$listed")
            [ -n "$line" ] || return 1
            read -r _ flags link mport <<<"$line"
            fg_sentinel__healthy "$flags" || return 1
            [ "$link" = ok ] && [ "$mport" = "$master" ] || return 1
        done
    done
}

# fg_sentinel__spawn_redis I MASTER_PORT|"" [PORT]: data node I, a replica of MASTER_PORT.
fg_sentinel__spawn_redis() {
    local i=$1 master=$2 port=${3:-} dir=$FG_SENTINEL_DIR/redis-$1 args=()
    [ -z "$master" ] || args+=(--replicaof 127.0.0.1 "$master")
    # A full sync at once, not after the default 5 s wait for more replicas (as in C).
    args+=(--repl-diskless-sync-delay 0)
    [ -z "$FG_SENTINEL_PASSWORD" ] || args+=(--masterauth "$FG_SENTINEL_PASSWORD")
    if [ -n "$port" ]; then
        fg_topo_spawn "$dir" "$port" "$FG_SENTINEL_PASSWORD" redis "${args[@]}" || return 1
    else
        fg_topo_start_node "$dir" "$FG_SENTINEL_PASSWORD" redis 0 "${args[@]}" || return 1
    fi
    FG_SENTINEL_REDIS_PORTS[$i]=$FG_TOPO_PORT
    FG_SENTINEL_REDIS_PIDS[$i]=$FG_TOPO_PID
}

fg_sentinel_start() {
    local dir=$1 name=$2 replicas=$3 sentinels=$4 password=${5:-} i quorum sdir sep=""
    FG_SENTINEL_DIR=$dir FG_SENTINEL_NAME=$name FG_SENTINEL_PASSWORD=$password
    FG_SENTINEL_REDIS_PORTS=() FG_SENTINEL_REDIS_PIDS=() FG_SENTINEL_PORTS=() FG_SENTINEL_PIDS=()
    quorum=$((sentinels / 2 + 1))
    for ((i = 0; i <= replicas; i++)); do
        mkdir -p "$dir/redis-$i"
        fg_sentinel__spawn_redis "$i" "${FG_SENTINEL_REDIS_PORTS[0]:-}" || return 1
    done
    for ((i = 0; i < sentinels; i++)); do
        sdir=$dir/sentinel-$i
        mkdir -p "$sdir"
        {
            echo "sentinel monitor $name 127.0.0.1 ${FG_SENTINEL_REDIS_PORTS[0]} $quorum"
            echo "sentinel down-after-milliseconds $name 3000"
            echo "sentinel failover-timeout $name 5000"
            echo "sentinel parallel-syncs $name 1"
            if [ -n "$password" ]; then
                echo "sentinel auth-pass $name $password"
                echo "sentinel sentinel-pass $password"
            fi
        } >"$sdir/sentinel.conf"
        fg_topo_start_node "$sdir" "$password" sentinel 0 || return 1
        # TILT after a 30 s stall (not 2 s) for 1 s (not 30 s), replicas' INFO every 1 s:
        # why, in tests/common/harness_sentinel.c's head.
        if [ "$(fg_topo_cli "$password" "$FG_TOPO_PORT" SENTINEL DEBUG tilt-trigger 30000 \
            tilt-period 1000 info-period 1000)" != OK ]; then
            fg_sentinel__fail "sentinel $FG_TOPO_PORT refused SENTINEL DEBUG (needs Redis 7.0)"
            return 1
        fi
        FG_SENTINEL_PORTS[$i]=$FG_TOPO_PORT
        FG_SENTINEL_PIDS[$i]=$FG_TOPO_PID
    done
    FG_SENTINEL_URL="redis-sentinel://${password:+:$password@}"
    for i in "${!FG_SENTINEL_PORTS[@]}"; do
        FG_SENTINEL_URL+="${sep}127.0.0.1:${FG_SENTINEL_PORTS[$i]}"
        sep=,
    done
    FG_SENTINEL_URL+="/$name"
    fg_topo_wait 30 "the sentinels knowing the master, its replicas and each other" \
        fg_sentinel__ready "${FG_SENTINEL_REDIS_PORTS[0]}"
}

fg_sentinel_kill_master() {
    local port i
    if ! port=$(fg_sentinel_master_port); then
        fg_sentinel__fail "the sentinels agree on no master"
        fg_sentinel__dump
        return 1
    fi
    for i in "${!FG_SENTINEL_REDIS_PORTS[@]}"; do
        if [ "${FG_SENTINEL_REDIS_PORTS[$i]}" = "$port" ]; then
            fg_topo_kill "${FG_SENTINEL_REDIS_PIDS[$i]}"
            FG_SENTINEL_REDIS_PIDS[$i]=
            FG_SENTINEL_KILLED_PORT=$port
            return 0
        fi
    done
    echo "FAIL: the sentinels name master $port, which is not one of ours" >&2
    return 1
}

fg_sentinel__failed_over() {
    local old=$1 port
    port=$(fg_sentinel_master_port) || return 1
    [ "$port" != "$old" ] || return 1
    fg_sentinel__cli "$port" role 2>/dev/null | head -n 1 | grep -q '^master' || return 1
    FG_SENTINEL_MASTER_PORT=$port
}

fg_sentinel_wait_failover() {
    fg_topo_wait "$2" "a sentinel failover away from master $1" fg_sentinel__failed_over "$1"
}

# fg_sentinel__dump: what each sentinel and data node says, and the ends of the sentinels'
# logs, on stderr: why a wait for the set failed.
fg_sentinel__dump() {
    local i port
    for i in "${!FG_SENTINEL_PORTS[@]}"; do
        port=${FG_SENTINEL_PORTS[$i]}
        [ -n "${FG_SENTINEL_PIDS[$i]}" ] || continue
        echo "--- sentinel $port: master $(fg_sentinel__cli "$port" sentinel \
            get-master-addr-by-name "$FG_SENTINEL_NAME" 2>/dev/null | tr -d '\r' | sed -n 2p)," \
            "flags $(fg_sentinel__field "$port" flags)," \
            "other sentinels $(fg_sentinel__field "$port" num-other-sentinels);" \
            "replicas (port flags link master-port):"
        fg_sentinel__replicas "$port"
        tail -n 15 "$FG_SENTINEL_DIR/sentinel-$i"/*.log 2>/dev/null
    done
    for i in "${!FG_SENTINEL_REDIS_PORTS[@]}"; do
        port=${FG_SENTINEL_REDIS_PORTS[$i]}
        [ -n "${FG_SENTINEL_REDIS_PIDS[$i]}" ] || continue
        echo "--- data node $port: $(fg_sentinel__cli "$port" info replication 2>/dev/null \
            | tr -d '\r' | grep -E '^(role|master_port|master_link_status|connected_slaves)' \
            | tr '\n' ' ')"
    done
} >&2

fg_sentinel_wait_ready() {
    local master
    if ! master=$(fg_sentinel_master_port); then
        fg_sentinel__fail "the sentinels agree on no master"
        fg_sentinel__dump
        return 1
    fi
    fg_topo_wait "$1" "the sentinels seeing every replica under master $master" \
        fg_sentinel__ready "$master" || { fg_sentinel__dump; return 1; }
}

fg_sentinel_restart_replica() {
    local port=$1 secs=$2 master i
    if ! master=$(fg_sentinel_master_port); then
        fg_sentinel__fail "the sentinels agree on no master"
        fg_sentinel__dump
        return 1
    fi
    for i in "${!FG_SENTINEL_REDIS_PORTS[@]}"; do
        [ "${FG_SENTINEL_REDIS_PORTS[$i]}" = "$port" ] || continue
        if [ -n "${FG_SENTINEL_REDIS_PIDS[$i]}" ]; then
            fg_sentinel__fail "node $port is running"
            return 1
        fi
        # A replica of the current master at once, so no client ever finds two masters.
        fg_sentinel__spawn_redis "$i" "$master" "$port" || return 1
        fg_topo_wait "$secs" "the sentinels listing $port as a replica again" \
            fg_sentinel__ready "$master" || { fg_sentinel__dump; return 1; }
        return
    done
    echo "FAIL: no node on port $port" >&2
    return 1
}

fg_sentinel_stop() {
    local pid
    for pid in "${FG_SENTINEL_PIDS[@]}" "${FG_SENTINEL_REDIS_PIDS[@]}"; do
        fg_topo_stop_pid "$pid"
    done
    FG_SENTINEL_PIDS=() FG_SENTINEL_REDIS_PIDS=()
}
