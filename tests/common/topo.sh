# shellcheck shell=bash
# The FG_* variables are set here for the scripts that source this file.
# shellcheck disable=SC2034
# Shared by tests/common/sentinel.sh, cluster.sh and redis.sh's Redis set: servers on free
# loopback ports, each a child of the calling shell in its own directory, stopped by PID.
# Sourced, never run. Call the functions directly, not in $(...): a subshell's children and
# variables are lost to the caller.
#
#   fg_topo_free_port [BUS]      prints a port below the kernel's ephemeral range that nothing
#                                listens on; with BUS (a cluster's 10000), port + BUS too
#   fg_topo_wait SECS WHAT CMD…  runs CMD every 50 ms until it succeeds; after SECS it prints
#                                "FAIL: WHAT did not happen within SECS s" and returns 1
#   fg_topo_cli PASSWORD PORT ARGS…   redis-cli on 127.0.0.1:PORT (PASSWORD may be "")
#   fg_topo_start_node DIR PASSWORD KIND BUS ARGS…
#                                starts KIND (redis: redis-server with the options of the C
#                                harness's th_redis_start with AOF, appendfsync always;
#                                sentinel: redis-sentinel on DIR/sentinel.conf) on a free port
#                                (BUS as for fg_topo_free_port) plus ARGS, waits up to 10 s for
#                                it to answer PING with its own process id, and sets
#                                FG_TOPO_PORT and FG_TOPO_PID. A port taken meanwhile is
#                                replaced (5 tries). Returns 1, with the log, on failure.
#   fg_topo_spawn DIR PORT PASSWORD KIND ARGS…   the same on a given port (a restart)
#   fg_topo_kill PID             SIGKILL and reap
#   fg_topo_stop_pid PID         SIGTERM, SIGKILL after 5 s, reap
# A missing redis-server, redis-sentinel or redis-cli fails loudly: it is never a skip.

fg_topo__port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

fg_topo_free_port() {
    local bus=${1:-0} low=32768 p i
    if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
        read -r low _ </proc/sys/net/ipv4/ip_local_port_range
    fi
    # Below the ephemeral range, bus port included: no outgoing connection takes it while
    # a server restarts on it.
    low=$((low - bus))
    for ((i = 0; i < 200; i++)); do
        p=$((10000 + (RANDOM * 32768 + RANDOM) % (low - 10000)))
        fg_topo__port_free "$p" || continue
        if [ "$bus" -ne 0 ] && ! fg_topo__port_free $((p + bus)); then continue; fi
        echo "$p"
        return 0
    done
    echo "FAIL: found no free loopback port" >&2
    return 1
}

fg_topo_wait() {
    local secs=$1 what=$2 deadline
    shift 2
    deadline=$((SECONDS + secs))
    until "$@"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "FAIL: $what did not happen within $secs s" >&2
            return 1
        fi
        sleep 0.05
    done
}

fg_topo_cli() {
    local password=$1 port=$2
    shift 2
    redis-cli -h 127.0.0.1 -p "$port" ${password:+--no-auth-warning -a "$password"} "$@"
}

fg_topo_need() {
    local tool
    for tool; do
        command -v "$tool" >/dev/null 2>&1 \
            || { echo "FAIL: $tool not found; run scripts/install-deps.sh" >&2; return 1; }
    done
}

# 0 when the server on PORT answers PING and is process PID (not another test's server that
# took the port after ours failed to bind it).
fg_topo__answers() {
    local password=$1 port=$2 pid=$3
    fg_topo_cli "$password" "$port" info server 2>/dev/null | tr -d '\r' \
        | grep -qx "process_id:$pid" || return 1
    fg_topo_cli "$password" "$port" ping 2>/dev/null | grep -q PONG
}

# 0 while PID runs; an exited child is a zombie until reaped, which kill -0 still finds.
fg_topo__alive() {
    local stat
    stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [ -n "$stat" ] && [ "${stat#Z}" = "$stat" ]
}

fg_topo_spawn() {
    local dir=$1 port=$2 password=$3 kind=$4 deadline
    shift 4
    if [ "$kind" = sentinel ]; then
        fg_topo_need redis-sentinel || return 1
        redis-sentinel "$dir/sentinel.conf" --port "$port" --bind 127.0.0.1 --dir "$dir" \
            --logfile "$dir/sentinel.log" --daemonize no \
            ${password:+--requirepass "$password"} "$@" </dev/null >/dev/null &
    else
        fg_topo_need redis-server || return 1
        redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --logfile "$dir/redis.log" \
            --daemonize no --save '' --enable-debug-command local \
            --appendonly yes --appendfsync always \
            ${password:+--requirepass "$password"} "$@" </dev/null >/dev/null &
    fi
    FG_TOPO_PID=$!
    FG_TOPO_PORT=$port
    deadline=$((SECONDS + 10))
    until fg_topo__answers "$password" "$port" "$FG_TOPO_PID"; do
        if ! fg_topo__alive "$FG_TOPO_PID"; then
            wait "$FG_TOPO_PID" 2>/dev/null || true
            FG_TOPO_PID=
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "FAIL: $kind on port $port did not answer within 10 s; its log:" >&2
            tail -n 20 "$dir"/*.log >&2 || true
            fg_topo_kill "$FG_TOPO_PID"
            FG_TOPO_PID=
            return 2
        fi
        sleep 0.05
    done
}

fg_topo_start_node() {
    local dir=$1 password=$2 kind=$3 bus=$4 attempt port rc
    shift 4
    fg_topo_need redis-cli || return 1
    for ((attempt = 0; attempt < 5; attempt++)); do
        port=$(fg_topo_free_port "$bus") || return 1
        rc=0
        fg_topo_spawn "$dir" "$port" "$password" "$kind" "$@" || rc=$?
        [ "$rc" -eq 0 ] && return 0
        [ "$rc" -eq 1 ] || return 1
    done
    echo "FAIL: $kind did not start on a free port; its log:" >&2
    tail -n 20 "$dir"/*.log >&2 || true
    return 1
}

fg_topo_kill() {
    [ -n "${1:-}" ] || return 0
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

fg_topo_stop_pid() {
    local pid=${1:-} i
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        fg_topo__alive "$pid" || break
        sleep 0.05
    done
    fg_topo_kill "$pid"
}
