# shellcheck shell=bash
# Sourced by the shell tests that need a real Redis. Never touches a Redis on 6379.
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
