#!/usr/bin/env bash
# The README's Run command. On a fresh Debian 12 machine, as root:
#
#   scripts/run.sh [REDIS_URL] [fencegate flags...]
#
# 1. installs the Debian packages that running needs and are missing
#    (scripts/install-deps.sh --run: no test framework, no npm checkers);
# 2. builds the binaries only, optimised (CMakeLists.txt defaults to Release), in build-run/
#    (or $FENCEGATE_BUILD_DIR), a tree scripts/test.sh never touches:
#    cmake -S . -B build-run -DFENCEGATE_TESTS=OFF && cmake --build build-run;
# 3. unless a Redis URL is given (first argument, --redis among the flags, or FENCEGATE_REDIS),
#    starts a private redis-server from Debian's package: AOF on with appendfsync always,
#    maxmemory-policy noeviction, data in ./data/redis. It listens on loopback only,
#    127.0.0.1, on a free port: $FENCEGATE_REDIS_PORT if set, else the first port from 6390 up
#    that nothing answers on (never 6379, so it cannot collide with a system Redis).
# 4. runs build-run/gateway/fencegate in the foreground on 127.0.0.1:8080 with
#    --data ./data/gateway (unless --listen/--data or FENCEGATE_LISTEN/FENCEGATE_DATA say
#    otherwise); every other argument goes to fencegate as it is.
#
# Ctrl-C (or SIGTERM to this script) stops the gateway gracefully, then the Redis it started,
# by PID. The exit status is the gateway's.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

log() { echo "run: $*" >&2; }
die() { log "$*"; exit 1; }

# --- arguments -------------------------------------------------------------------------------
redis_url=""
case "${1:-}" in
    redis://* | rediss://* | unix://*) redis_url=$1; shift ;;
esac
have_listen=0 have_data=0
for a in "$@"; do
    case "$a" in
        --redis | --redis=*) redis_url=given-by-flag ;;
        --listen | --listen=*) have_listen=1 ;;
        --data | --data=*) have_data=1 ;;
    esac
done
if [ -z "$redis_url" ] && [ -n "${FENCEGATE_REDIS:-}" ]; then redis_url=$FENCEGATE_REDIS; fi

# --- install and build -------------------------------------------------------------------------
bash scripts/install-deps.sh --run
# FENCEGATE_BUILD_DIR picks another build tree (default: build-run, as the README says). The
# test command builds in build/ and build-asan/ with tests; sharing a tree, each would
# reconfigure and rebuild what the other left.
build=${FENCEGATE_BUILD_DIR:-build-run}
cmake -S . -B "$build" -DFENCEGATE_TESTS=OFF
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)"
gateway="$(cd "$build" && pwd)/gateway/fencegate"
[ -x "$gateway" ] || die "the build did not produce $gateway"

# --- process handling ------------------------------------------------------------------------
redis_pid="" gw_pid=""
stop_pid() { # stop_pid PID NAME: SIGTERM, up to 10 s, then SIGKILL
    local pid=$1 name=$2 i
    kill -0 "$pid" 2>/dev/null || return 0
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name (pid $pid) did not stop in 10 s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    if [ -n "$gw_pid" ]; then stop_pid "$gw_pid" fencegate; fi
    if [ -n "$redis_pid" ]; then stop_pid "$redis_pid" redis-server; fi
}
on_signal() {
    # The terminal's Ctrl-C reaches the gateway itself too; a second stop request is harmless.
    if [ -n "$gw_pid" ]; then kill -TERM "$gw_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap on_signal INT TERM

# --- Redis -------------------------------------------------------------------------------------
# Succeeds when something accepts TCP connections on 127.0.0.1:$1.
port_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_redis PORT: starts the private redis-server on 127.0.0.1:PORT and waits for PONG.
# Returns 0 when it answers, 1 when it could not bind the port (try another), dies otherwise.
start_redis() {
    local port=$1 deadline
    : >"$rdir/redis.log"
    # setsid: its own session, so the terminal's Ctrl-C stops only the gateway, and Redis stays
    # up until the gateway has drained. (A background job here is never a group leader, so
    # setsid execs redis-server in place and $! is Redis's own PID.)
    setsid redis-server --bind 127.0.0.1 --port "$port" --protected-mode yes --dir "$rdir" \
        --appendonly yes --appendfsync always --maxmemory-policy noeviction --save '' \
        --daemonize no --pidfile "$rdir/redis.pid" --logfile "$rdir/redis.log" &
    redis_pid=$!
    deadline=$((SECONDS + 15))
    until redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; do
        if ! kill -0 "$redis_pid" 2>/dev/null; then
            wait "$redis_pid" 2>/dev/null || true
            redis_pid=""
            if grep -q "Address already in use" "$rdir/redis.log"; then return 1; fi
            tail -n 20 "$rdir/redis.log" >&2 || true
            die "redis-server exited at start (log above, $rdir/redis.log)"
        fi
        [ "$SECONDS" -lt "$deadline" ] || die "redis-server did not answer PING within 15 s"
        sleep 0.1
    done
}

mkdir -p data/redis data/gateway
if [ -z "$redis_url" ]; then
    command -v redis-server >/dev/null 2>&1 || die "redis-server is missing (install-deps.sh installs it)"
    rdir="$root/data/redis"
    # Two Redis servers on one AOF directory would corrupt it: refuse while an earlier one runs
    # (its pid file names a live redis-server working in this directory).
    if [ -s "$rdir/redis.pid" ]; then
        old_pid=$(cat "$rdir/redis.pid")
        if [ "$(cat "/proc/$old_pid/comm" 2>/dev/null)" = redis-server ] &&
            [ "$(readlink "/proc/$old_pid/cwd" 2>/dev/null)" = "$rdir" ]; then
            die "a redis-server from an earlier run still uses $rdir (pid $old_pid); stop it first"
        fi
    fi
    if [ -n "${FENCEGATE_REDIS_PORT:-}" ]; then
        ports=("$FENCEGATE_REDIS_PORT")
    else
        mapfile -t ports < <(seq 6390 6489)
    fi
    port=""
    for p in "${ports[@]}"; do
        if port_answers "$p"; then continue; fi
        log "starting redis-server on 127.0.0.1:$p (AOF, appendfsync always, data in $rdir)"
        if start_redis "$p"; then port=$p; break; fi
        log "127.0.0.1:$p was taken meanwhile; trying another port"
    done
    [ -n "$port" ] || die "no free port for redis-server among ${ports[0]}..${ports[-1]} (set FENCEGATE_REDIS_PORT)"
    redis_url="redis://127.0.0.1:$port"
    log "redis-server is up at $redis_url (pid $redis_pid)"
elif [ "$redis_url" = given-by-flag ]; then
    log "using the Redis named by --redis"
    redis_url=""
else
    log "using the Redis at $redis_url"
fi

# --- the gateway -----------------------------------------------------------------------------
args=()
[ -n "$redis_url" ] && args+=(--redis "$redis_url")
[ "$have_listen" -eq 1 ] || [ -n "${FENCEGATE_LISTEN:-}" ] || args+=(--listen 127.0.0.1:8080)
[ "$have_data" -eq 1 ] || [ -n "${FENCEGATE_DATA:-}" ] || args+=(--data "$root/data/gateway")
log "starting: $gateway ${args[*]} $*  (Ctrl-C stops it and Redis)"
"$gateway" "${args[@]}" "$@" &
gw_pid=$!
# `wait` returns early (128 + the signal) when a trapped signal arrives, so wait until the
# gateway has exited, then once more: bash keeps the status of an exited job for that last
# `wait`, which is the gateway's own (0 after Ctrl-C), not the interrupted wait's 130.
while kill -0 "$gw_pid" 2>/dev/null; do
    wait "$gw_pid" || true
done
wait "$gw_pid" && status=0 || status=$?
gw_pid=""
log "fencegate exited with status $status"
exit "$status"
