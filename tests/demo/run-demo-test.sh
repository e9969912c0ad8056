#!/usr/bin/env bash
# ctest demo_gc_pause: runs scripts/demo.sh against the real gateway and a real Redis (and
# demo_transfer: scripts/demo-transfer.sh, checked for its own story).
#
#   run-demo-test.sh PATH/TO/fencegate PATH/TO/demo.sh [postgres]
#
# With "postgres" (ctest demo_gc_pause_pg) it also starts a PostgreSQL 15 (tests/common/pg.sh)
# and runs the gateway with --store on it: the demo must run unchanged on the shared store.
# Starts its own redis-server (free loopback port, temp dir, AOF on) and fencegate (free
# loopback port, temp data dir), waits for /healthz, runs the demo, checks its exit status and
# its output, then stops the gateway with SIGTERM (it must exit 0) and Redis, by PID.
# A missing redis-server, redis-cli, curl or jq fails the test: it never skips.
set -euo pipefail

gateway=${1:?usage: run-demo-test.sh PATH/TO/fencegate PATH/TO/demo.sh}
demo=${2:?usage: run-demo-test.sh PATH/TO/fencegate PATH/TO/demo.sh}
backend=${3:-lmdb}

fail() { echo "demo_gc_pause: FAIL: $*" >&2; exit 1; }

for tool in redis-server redis-cli curl jq; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (scripts/install-deps.sh installs it)"
done
[ -x "$gateway" ] || fail "gateway binary not found: $gateway"
[ -f "$demo" ] || fail "demo script not found: $demo"

# shellcheck source=../common/procs.sh
. "$(dirname "$0")/../common/procs.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fg-demo-test.XXXXXX")
redis_pid="" gw_pid=""

cleanup() {
    local rc=$?
    if [ -n "$gw_pid" ]; then fg_stop_pid "$gw_pid" || true; fi
    if [ -n "$redis_pid" ]; then fg_stop_pid "$redis_pid" || true; fi
    if [ "$backend" = postgres ]; then fg_pg_stop || true; fi
    if [ "$rc" -ne 0 ]; then
        for f in "$tmp/gateway.log" "$tmp/redis/redis.log"; do
            [ -f "$f" ] || continue
            echo "----- last lines of $f" >&2
            tail -n 40 "$f" >&2
        done
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


# --- Redis: retried on a new port if another process took the one we picked ------------------
mkdir -p "$tmp/redis" "$tmp/gw"
for attempt in 1 2 3; do
    rport=$(fg_free_port)
    redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp/redis" --save '' \
        --appendonly yes --appendfsync always --maxmemory-policy noeviction \
        --daemonize no --logfile "$tmp/redis/redis.log" &
    redis_pid=$!
    deadline=$((SECONDS + 10))
    while ! redis-cli -h 127.0.0.1 -p "$rport" ping 2>/dev/null | grep -q PONG; do
        kill -0 "$redis_pid" 2>/dev/null || break
        [ "$SECONDS" -lt "$deadline" ] || fail "redis-server did not answer PING within 10 s"
        sleep 0.05
    done
    if kill -0 "$redis_pid" 2>/dev/null; then break; fi
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
    [ "$attempt" -lt 3 ] || fail "redis-server would not start (see its log)"
    echo "demo_gc_pause: redis-server exited on port $rport; trying another port" >&2
done
echo "demo_gc_pause: redis-server pid $redis_pid on 127.0.0.1:$rport"

# --- PostgreSQL, for the shared store --------------------------------------------------------
store=()
if [ "$backend" = postgres ]; then
    # shellcheck source=../common/pg.sh
    . "$(dirname "$0")/../common/pg.sh"
    mkdir -p "$tmp/pg"
    chmod 755 "$tmp" # the postgres user (initdb refuses root) must reach $tmp/pg
    fg_pg_start "$tmp/pg" || fail "PostgreSQL would not start"
    store=(--store "$FG_PG_URL")
    echo "demo_gc_pause: postgres pid $FG_PG_PID on 127.0.0.1:$FG_PG_PORT"
fi

# --- the gateway ---------------------------------------------------------------------------------
for attempt in 1 2 3; do
    gport=$(fg_free_port)
    "$gateway" --listen "127.0.0.1:$gport" --redis "redis://127.0.0.1:$rport" --data "$tmp/gw" \
        "${store[@]}" >"$tmp/gateway.log" 2>&1 &
    gw_pid=$!
    deadline=$((SECONDS + 15))
    until curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$gport/healthz" 2>/dev/null; do
        kill -0 "$gw_pid" 2>/dev/null || break
        [ "$SECONDS" -lt "$deadline" ] || fail "fencegate did not answer /healthz within 15 s"
        sleep 0.05
    done
    if kill -0 "$gw_pid" 2>/dev/null; then break; fi
    rc=0; wait "$gw_pid" 2>/dev/null || rc=$?
    gw_pid=""
    [ "$attempt" -lt 3 ] || fail "fencegate exited at start with status $rc"
    echo "demo_gc_pause: fencegate exited at start on port $gport (status $rc); trying another port" >&2
done
echo "demo_gc_pause: fencegate pid $gw_pid on 127.0.0.1:$gport"

# --- the demo ----------------------------------------------------------------------------------
rc=0
timeout 60 bash "$demo" "http://127.0.0.1:$gport" >"$tmp/demo.out" 2>&1 || rc=$?
cat "$tmp/demo.out"
[ "$rc" -eq 0 ] || fail "scripts/demo.sh exited with status $rc"

# The output must tell the story, not merely exit 0.
expect() { grep -qE -- "$1" "$tmp/demo.out" || fail "demo output lacks: $2"; }
expect '^< HTTP 409$' "the 409 answer to client 1's write"
expect '"error" *: *"stale_token"' "the stale_token error"
expect '^demo: OK: ' "the closing OK line"
if [ "$(basename "$demo")" = demo-transfer.sh ]; then
    # scripts/demo-transfer.sh: client 1's transaction refused whole, the sum unchanged.
    expect '"refused" *: *\[' "the list of refused writes"
    expect '^demo: OK: .* = 200$' "the unchanged sum"
    [ "$(grep -c '^< HTTP 200$' "$tmp/demo.out")" -ge 14 ] || fail "expected at least fourteen 200 answers"
else
    expect '^written by client 2$' "client 2's value read back"
    [ "$(grep -c '^< HTTP 200$' "$tmp/demo.out")" -ge 6 ] || fail "expected at least six 200 answers"
    if grep -q '^written by client 1$' "$tmp/demo.out"; then fail "client 1's value was read back"; fi
fi

# --- a clean shutdown --------------------------------------------------------------------------
rc=0; fg_stop_pid "$gw_pid" || rc=$?
gw_pid=""
[ "$rc" -eq 0 ] || fail "fencegate exited with status $rc after SIGTERM (expected 0)"
echo "demo_gc_pause: PASS"
