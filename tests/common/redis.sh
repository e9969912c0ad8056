# shellcheck shell=bash
# Sourced by the shell tests that need a real Redis. Never touches a Redis on 6379.
# (The Redis set for Redlock is at the end of this file.)
#
#   fg_redis_start DIR   starts redis-server on the unix socket DIR/redis.sock (no TCP port,
#                        no persistence), waits up to 10 s for PING, and sets FG_REDIS_PID and
#                        FG_REDIS_SOCK. A missing redis-server fails loudly: it is never a skip.
#   fg_redis_stop        stops it by PID (SIGTERM, then SIGKILL after 10 s) and waits for it.
#
# The caller's EXIT trap should call fg_redis_stop.
FG_REDIS_PID=
FG_REDIS_SOCK=

fg_redis_start() {
    local dir=$1 deadline
    command -v redis-server >/dev/null 2>&1 \
        || { echo "FAIL: redis-server not found; run scripts/install-deps.sh" >&2; return 1; }
    command -v redis-cli >/dev/null 2>&1 \
        || { echo "FAIL: redis-cli not found; run scripts/install-deps.sh" >&2; return 1; }
    FG_REDIS_SOCK=$dir/redis.sock
    redis-server --port 0 --unixsocket "$FG_REDIS_SOCK" --dir "$dir" --save '' \
        --appendonly no --daemonize no --logfile "$dir/redis.log" &
    FG_REDIS_PID=$!
    deadline=$((SECONDS + 10))
    until redis-cli -s "$FG_REDIS_SOCK" ping 2>/dev/null | grep -q PONG; do
        if [ $SECONDS -ge $deadline ] || ! kill -0 "$FG_REDIS_PID" 2>/dev/null; then
            echo "FAIL: redis-server did not start; its log:" >&2
            cat "$dir/redis.log" >&2 || true
            return 1
        fi
        sleep 0.05
    done
}

fg_redis_stop() {
    local i
    [ -n "$FG_REDIS_PID" ] || return 0
    kill -TERM "$FG_REDIS_PID" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$FG_REDIS_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$FG_REDIS_PID" 2>/dev/null || true
    wait "$FG_REDIS_PID" 2>/dev/null || true
    FG_REDIS_PID=
}

# A Redis set for Redlock (N independent masters), over TCP, like the C harness's
# th_redis_set_start: every node as tests/common/topo.sh starts redis-server (AOF,
# appendfsync always), on a free loopback port in DIR/node-I/.
#
#   fg_redis_set_start DIR N [PASSWORD]   sets FG_REDIS_SET_PORTS, FG_REDIS_SET_PIDS and
#                                         FG_REDIS_SET_URLS (their redis:// URLs, comma-separated)
#   fg_redis_set_kill I                   SIGKILL node I (files stay)
#   fg_redis_set_wipe I                   deletes node I's AOF and RDB (after a kill)
#   fg_redis_set_restart I                starts node I again on its port and files
#   fg_redis_set_stop                     stops every node by PID
# Call them directly, not in $(...). Failures print FAIL: and return 1.

# shellcheck source=topo.sh
source "$(dirname "${BASH_SOURCE[0]}")/topo.sh"

# shellcheck disable=SC2034 # read by the scripts that source this file
FG_REDIS_SET_DIR='' FG_REDIS_SET_PASSWORD='' FG_REDIS_SET_URLS=''
FG_REDIS_SET_PORTS=() FG_REDIS_SET_PIDS=()

fg_redis_set_start() {
    local dir=$1 n=$2 password=${3:-} i sep=""
    FG_REDIS_SET_DIR=$dir FG_REDIS_SET_PASSWORD=$password FG_REDIS_SET_URLS=
    FG_REDIS_SET_PORTS=() FG_REDIS_SET_PIDS=()
    for ((i = 0; i < n; i++)); do
        mkdir -p "$dir/node-$i"
        fg_topo_start_node "$dir/node-$i" "$password" redis 0 || return 1
        FG_REDIS_SET_PORTS[$i]=$FG_TOPO_PORT
        FG_REDIS_SET_PIDS[$i]=$FG_TOPO_PID
        FG_REDIS_SET_URLS+="${sep}redis://${password:+:$password@}127.0.0.1:$FG_TOPO_PORT"
        sep=,
    done
}

fg_redis_set_kill() {
    fg_topo_kill "${FG_REDIS_SET_PIDS[$1]}"
    FG_REDIS_SET_PIDS[$1]=
}

fg_redis_set_wipe() {
    # appendonlydir/ (Redis 7) and dump.rdb; the log stays for post-mortems.
    rm -rf "$FG_REDIS_SET_DIR/node-$1/appendonlydir" "$FG_REDIS_SET_DIR/node-$1/dump.rdb"
}

fg_redis_set_restart() {
    [ -z "${FG_REDIS_SET_PIDS[$1]}" ] || { echo "FAIL: node $1 is running" >&2; return 1; }
    fg_topo_spawn "$FG_REDIS_SET_DIR/node-$1" "${FG_REDIS_SET_PORTS[$1]}" \
        "$FG_REDIS_SET_PASSWORD" redis || return 1
    FG_REDIS_SET_PIDS[$1]=$FG_TOPO_PID
}

fg_redis_set_stop() {
    local pid
    for pid in "${FG_REDIS_SET_PIDS[@]}"; do
        fg_topo_stop_pid "$pid"
    done
    FG_REDIS_SET_PIDS=()
}
