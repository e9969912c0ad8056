#!/usr/bin/env bash
# One fault scenario of issue 7 against the real gateway and a real Redis.
#
#   run_scenario.sh SCENARIO short|full PATH/TO/fencegate PATH/TO/fg_workload PATH/TO/fg_checker
#
# SCENARIO is one of:
#   pause         a worker freezes itself (SIGSTOP) right after a grant; the next holder takes
#                 the lock once the lease ran out and writes; then SIGCONT: the late write must
#                 be 409 stale_token, its renew and unlock 409 not_owner
#   steal         the same, but the lease is removed under the frozen holder (DEL, PEXPIRE 1)
#   gateway_kill  the gateway killed with SIGKILL mid-run, restarted on the same data dir
#   redis_kill    Redis killed with SIGKILL and restarted from its AOF (appendfsync always)
#   redis_auth    the same with requirepass, the gateway given the password URL
#   redis_loss    Redis killed and restarted empty (no persistence)
#   script_flush  SCRIPT FLUSH, CLIENT KILL TYPE normal and CLIENT KILL TYPE pubsub in a loop
#
# It starts its own redis-server (free loopback port, temp dir, --enable-debug-command local)
# and the gateway given to it (the ASan+UBSan binary in build-asan), runs fg_workload while
# injecting the fault, reads the resources one last time, and runs fg_checker on the history.
# It fails on any checker violation, on any sanitizer report in the gateway's stderr, on a
# gateway that does not exit 0 on SIGTERM, and when, after the run, the gateway's client
# connections and fencegate_waiters do not return to zero within 15 s or its fd count does
# not come back near its baseline (invariant 9, the cheap part). Every wait is a loop on a
# condition with a deadline. A missing redis-server fails; it never skips.
set -euo pipefail

scenario=${1:?usage: run_scenario.sh SCENARIO short|full GATEWAY WORKLOAD CHECKER}
length=${2:?}
gateway=${3:?}
workload=${4:?}
checker=${5:?}
name="faults_$scenario"

fail() { echo "$name: FAIL: $*" >&2; exit 1; }
say() { echo "$name: $*"; }

for tool in redis-server redis-cli curl ss; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (scripts/install-deps.sh)"
done
for bin in "$gateway" "$workload" "$checker"; do [ -x "$bin" ] || fail "not executable: $bin"; done

# Short: what ctest runs (each scenario well under a minute). Full: more faults, longer runs.
case $length in
    short) faults=3; ops=3000; limit_s=60; steps=40 ;;
    full) faults=10; ops=30000; limit_s=300; steps=120 ;;
    *) fail "length must be short or full" ;;
esac
case $scenario in
    redis_kill | redis_auth) [ "$length" = full ] && faults=5 ;;
    redis_loss) faults=2; [ "$length" = full ] && faults=5 ;;
    script_flush) faults=$((faults * 4)) ;;
    pause | steal | gateway_kill) ;;
    *) fail "unknown scenario $scenario" ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fg-faults-$scenario.XXXXXX")
hist=$tmp/history.tsv
redis_pid="" gw_pid="" wl_pid="" password=""
[ "$scenario" = redis_auth ] && password="fg-faults-$RANDOM$RANDOM"
persist=(--appendonly yes --appendfsync always)
[ "$scenario" = redis_loss ] && persist=(--appendonly no)

cleanup() {
    local rc=$?
    # The workload runs in its own process group (setsid): stop its clients with it.
    [ -n "$wl_pid" ] && { kill -KILL -- "-$wl_pid" 2>/dev/null || true; wait "$wl_pid" 2>/dev/null || true; }
    [ -n "$gw_pid" ] && { kill -KILL "$gw_pid" 2>/dev/null || true; wait "$gw_pid" 2>/dev/null || true; }
    [ -n "$redis_pid" ] && { kill -KILL "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; }
    if [ "$rc" -ne 0 ]; then
        for f in "$tmp/gateway.log" "$tmp/redis/redis.log" "$tmp/workload.log"; do
            [ -f "$f" ] || continue
            echo "----- last lines of $f" >&2
            tail -n 30 "$f" >&2
        done
        if [ -n "${FG_FAULTS_KEEP:-}" ]; then echo "$name: kept $tmp" >&2; return; fi
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    local p i
    for ((i = 0; i < 50; i++)); do
        # Below the kernel's ephemeral range (from 32768), so no outgoing connection takes
        # it while a server restarts on it.
        p=$((10000 + RANDOM % 22000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
    done
    fail "found no free loopback port"
}

# wait_until DESCRIPTION SECONDS COMMAND...: polls COMMAND every 50 ms until it succeeds.
wait_until() {
    local what=$1 secs=$2 deadline
    shift 2
    deadline=$((SECONDS + secs))
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || fail "$what did not happen within $secs s"
        sleep 0.05
    done
}

rcli() { redis-cli -h 127.0.0.1 -p "$rport" ${password:+--no-auth-warning -a "$password"} "$@"; }
redis_up() { rcli ping 2>/dev/null | grep -q PONG; }

redis_start() {
    redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp/redis" --save '' "${persist[@]}" \
        --maxmemory-policy noeviction --enable-debug-command local \
        ${password:+--requirepass "$password"} \
        --daemonize no --logfile "$tmp/redis/redis.log" &
    redis_pid=$!
    wait_until "redis-server answering PING" 10 redis_up
}

redis_kill() {
    kill -KILL "$redis_pid"
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
}

gw_url() { echo "http://127.0.0.1:$gport"; }
gw_healthy() { curl -fsS --max-time 2 -o /dev/null "$(gw_url)/healthz" 2>/dev/null; }
gw_start() {
    "$gateway" --listen "127.0.0.1:$gport" --data "$tmp/gw" --threads 4 \
        --redis "redis://${password:+:$password@}127.0.0.1:$rport" 2>>"$tmp/gateway.log" >&2 &
    gw_pid=$!
    wait_until "the gateway answering /healthz" 20 gw_healthy
}

# Any sanitizer report in the gateway's stderr fails the scenario.
check_sanitizers() {
    if grep -nE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|Undefined|Leak)' \
        "$tmp/gateway.log" >&2; then
        fail "sanitizer report in the gateway's stderr"
    fi
}

lines() { if [ -f "$hist" ]; then wc -l <"$hist"; else echo 0; fi; }
# progress N: waits until the workload has recorded N more operations.
progress_from=0
grown() { [ "$(lines)" -ge $((progress_from + $1)) ]; }
progress() {
    progress_from=$(lines)
    kill -0 "$wl_pid" 2>/dev/null || fail "the workload ended before the faults were done"
    wait_until "$1 more operations" 30 grown "$1"
}
mark() { "$workload" mark "$hist" "$1"; }

# --- start ------------------------------------------------------------------------------------
mkdir -p "$tmp/redis" "$tmp/gw"
rport=$(free_port)
redis_start
gport=$(free_port)
gw_start
say "redis pid $redis_pid on port $rport, gateway pid $gw_pid on port $gport"

# Invariant 9 baseline: after a warm-up, so lazily opened connections exist already.
"$workload" run "$(gw_url)" "$tmp/warmup.tsv" "warm-$scenario" 120 10 1 >>"$tmp/workload.log" 2>&1 \
    || fail "the warm-up workload failed"
fd_count() { ls "/proc/$gw_pid/fd" | wc -l; }
waiters() { curl -fsS --max-time 2 "$(gw_url)/metrics" | awk '$1 == "fencegate_waiters" { print $2 }'; }
http_clients() { ss -Htn state established "( sport = :$gport )" | wc -l; }
fd_base=$(fd_count)

# --- the workload -----------------------------------------------------------------------------
mode=()
case $scenario in
    pause) mode=(pause "$rport") ;;
    steal) mode=(steal "$rport" ${password:+"$password"}) ;;
esac
seed=${FG_FAULTS_SEED:-$((RANDOM * 32768 + RANDOM))}
say "workload seed $seed"
setsid "$workload" run "$(gw_url)" "$hist" "$scenario-$seed" "$ops" "$limit_s" "$seed" "${mode[@]}" \
    >>"$tmp/workload.log" 2>&1 &
wl_pid=$!

# --- the fault --------------------------------------------------------------------------------
expect_fenced=0
for ((i = 1; i <= faults; i++)); do
    case $scenario in
        pause | steal)
            expect_fenced=1 # at least one late write must meet a newer one and be refused
            break ;;
        gateway_kill)
            progress "$steps"
            kill -KILL "$gw_pid"; wait "$gw_pid" 2>/dev/null || true
            gw_start
            mark heal
            check_sanitizers ;;
        redis_kill | redis_auth | redis_loss)
            progress "$steps"
            redis_kill
            [ "$scenario" = redis_loss ] && rm -f "$tmp/redis/"*.aof "$tmp/redis/"*.rdb \
                && rm -rf "$tmp/redis/appendonlydir"
            redis_start
            mark heal ;;
        script_flush)
            progress $((steps / 4))
            rcli script flush >/dev/null
            rcli client kill type normal >/dev/null
            rcli client kill type pubsub >/dev/null ;;
    esac
done
if [ "$scenario" = pause ] || [ "$scenario" = steal ]; then
    # Run until $faults freezes have played out: each records a late write, renew and unlock.
    froze() { [ "$(grep -c 'after_' "$hist" 2>/dev/null || true)" -ge $((faults * 3)) ]; }
    wait_until "$faults freezes of worker 0" "$limit_s" froze
else
    progress "$steps"
fi
touch "$hist.stop"
wl_rc=0; wait "$wl_pid" || wl_rc=$?
wl_pid=""
[ "$wl_rc" -eq 0 ] || fail "the workload exited with status $wl_rc"
"$workload" final "$(gw_url)" "$hist" "$scenario-$seed" || fail "the final reads failed"
say "$(lines) operations recorded, $faults faults"

# --- the checker ------------------------------------------------------------------------------
"$checker" --expect-fenced "$expect_fenced" "$hist" || fail "the checker found violations"

# --- invariant 9 (cheap part) and a clean exit ------------------------------------------------
idle() {
    [ "$(http_clients)" -eq 0 ] && [ "$(waiters)" = 0 ] && [ "$(fd_count)" -le $((fd_base + 2)) ]
}
deadline=$((SECONDS + 15))
until idle; do
    [ "$SECONDS" -lt "$deadline" ] || fail "15 s after the run: $(http_clients) client \
connections, fencegate_waiters $(waiters), $(fd_count) fds (baseline $fd_base)"
    sleep 0.05
done
check_sanitizers
kill -TERM "$gw_pid"
gw_rc=0
stopped() { ! kill -0 "$gw_pid" 2>/dev/null; }
wait_until "the gateway exiting on SIGTERM" 15 stopped
wait "$gw_pid" || gw_rc=$?
gw_pid=""
check_sanitizers
[ "$gw_rc" -eq 0 ] || fail "the gateway exited with status $gw_rc on SIGTERM"
say "PASS"
