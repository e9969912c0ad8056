# shellcheck shell=bash
# Sourced by the shell tests that start a fencegate of their own (after redis.sh or topo.sh,
# whose fg_topo_free_port it uses).
#
#   fg_gateway_start BIN DATA_DIR REDIS_URL LOG   starts BIN on a free loopback port with
#       --redis REDIS_URL --data DATA_DIR, its output in LOG, waits up to 15 s for /healthz,
#       and sets FG_GATEWAY_PID and FG_GATEWAY_URL (http://127.0.0.1:PORT). Prints FAIL:
#       and returns 1 when it exits or does not answer. Stop it by PID (fg_topo_stop_pid).
FG_GATEWAY_PID='' FG_GATEWAY_URL=''

fg_gateway_start() {
    local bin=$1 data=$2 redis=$3 log=$4 port deadline
    port=$(fg_topo_free_port) || return 1
    "$bin" --listen "127.0.0.1:$port" --redis "$redis" --data "$data" >"$log" 2>&1 &
    FG_GATEWAY_PID=$!
    FG_GATEWAY_URL="http://127.0.0.1:$port"
    deadline=$((SECONDS + 15))
    until curl -fsS --max-time 2 -o /dev/null "$FG_GATEWAY_URL/healthz" 2>/dev/null; do
        if ! kill -0 "$FG_GATEWAY_PID" 2>/dev/null; then
            echo "FAIL: fencegate exited at start" >&2
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "FAIL: fencegate did not answer /healthz within 15 s" >&2
            return 1
        fi
        sleep 0.05
    done
}
