# Scenario proxy_network: the gateway reaches Redis only
# through fg_proxy, a TCP proxy steered by this file, which breaks the link in four ways
# (tc netem is not available here), in turn, while the workload runs:
#   1. slow:      every chunk held 300 ms each way. Redis still answers well inside the
#                 gateway's 2 s command timeout, so locks must still be granted: the fault
#                 lasts until one lock was granted entirely inside it.
#   2. late:      every chunk held 2500 ms each way, past the command timeout: every Redis
#                 call times out, so no lock may be granted and requests get 503. Commands
#                 that were sent still reach Redis 2.5 s later and run there after the gateway
#                 gave up on them (the ambiguous case).
#   3. reset:     every proxied connection, the subscriber's too, is reset (TCP RST), and each
#                 new one is reset as soon as it is accepted: no lock granted, 503s.
#   4. blackhole: nothing forwarded either way, connections kept open, so the gateway's reads
#                 time out: no lock granted, 503s. On healing the held bytes flow again.
# Each fault lasts 3 s, and then until its condition holds (a lock granted inside the slow
# one; three requests answered 503 inside each of the others); then the proxy goes back to
# pass and "heal" is marked. Expected: the checker's
# invariants (no 500, every answer within wait_ms + 5 s, a success within 5 s of healing,
# no stale write accepted, no token regression); no lock granted inside a late, reset or
# blackhole window (checked below from the history); the gateway's Redis connections, the
# proxy's own connections and descriptors back to their baseline afterwards; the proxy
# exits 0 on SIGTERM without a sanitizer report.
# proxy_slow.sh reuses this file's proxy helpers (it sources it and replaces the faults).
# ctest: short

faults=4
[ "$length" = full ] && faults=12
steps=30
[ "$length" = full ] && steps=90

proxy_bin=$(dirname "$workload")/fg_proxy
proxy_port="" proxy_fd_base="" proxy_answer="" proxy_pid=""
hold_s=3 # how long each fault lasts at least

# proxy_cmd COMMAND: sends one command to the proxy and waits for its answer (in
# $proxy_answer), which it sends once the command has taken effect.
proxy_cmd() {
    [ -n "${proxy_io[1]:-}" ] || fail "the proxy is gone (its log: $(tail -n 5 "$tmp/proxy.log"))"
    echo "$1" >&"${proxy_io[1]}" || fail "cannot write to the proxy's control input"
    read -r -t 10 -u "${proxy_io[0]}" proxy_answer || fail "no answer from the proxy to '$1'"
    case $proxy_answer in
        ok* | stats*) ;;
        *) fail "the proxy answered '$proxy_answer' to '$1'" ;;
    esac
}

# proxy_stat NAME: sets stat_value to a counter of the proxy's "stats" answer (open,
# accepted, reset, failed).
proxy_stat() {
    local want=$1
    proxy_cmd stats
    set -- $proxy_answer
    while [ $# -ge 2 ]; do
        [ "$1" = "$want" ] && { stat_value=$2; return; }
        shift
    done
    fail "no $want in the proxy's stats: $proxy_answer"
}

# alive PID: the process exists and is not a zombie waiting to be reaped.
alive() { [ -r "/proc/$1/status" ] && ! grep -q "^State:[[:space:]]*Z" "/proc/$1/status" 2>/dev/null; }

# Stops the proxy by its PID: SIGTERM, and SIGKILL if it is still running 5 s later. Sets
# proxy_rc to its exit status. Used on every exit path (from the trap below).
proxy_stop() {
    local i
    proxy_rc=0
    [ -n "$proxy_pid" ] || return 0
    kill -TERM "$proxy_pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        alive "$proxy_pid" || break
        sleep 0.05 # a poll for its exit, bounded by the loop
    done
    alive "$proxy_pid" && kill -KILL "$proxy_pid" 2>/dev/null
    wait "$proxy_pid" 2>/dev/null || proxy_rc=$?
    proxy_pid=""
}

# The EXIT trap: stops the proxy, then runs run_scenario.sh's own cleanup with the exit
# status it would have seen. A run that passed fails here if the proxy did not exit 0 on
# SIGTERM or wrote a sanitizer report.
proxy_exit() {
    local rc=$? why=""
    set +eu # the way out: nothing here may stop it before cleanup has run
    proxy_stop
    if [ "$proxy_rc" -ne 0 ]; then
        why="the proxy exited with status $proxy_rc on SIGTERM"
    elif grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$tmp/proxy.log" 2>/dev/null; then
        why="sanitizer report in the proxy's stderr"
    fi
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then
        echo "----- last lines of $tmp/proxy.log" >&2
        tail -n 30 "$tmp/proxy.log" >&2 2>/dev/null || true
    fi
    if [ -n "$why" ] && [ "$rc" -eq 0 ]; then
        echo "$name: FAIL: $why" >&2
        rc=1
    fi
    if [ "$rc" -eq 0 ]; then
        cleanup
    else
        (exit "$rc") || cleanup # cleanup reads the status from $?
    fi
    exit "$rc"
}

# Starts fg_proxy in front of Redis, as a coprocess (its stdin and stdout are the control
# channel; bash keeps those pipes out of the gateway and the workload), and has the gateway
# dial it instead of Redis.
scenario_prestart() {
    [ -x "$proxy_bin" ] || fail "not executable: $proxy_bin (build the fg_proxy target)"
    coproc proxy_io { exec "$proxy_bin" "$rport" 2>>"$tmp/proxy.log"; }
    # Our own copy: bash unsets proxy_io_PID as soon as it reaps the coprocess.
    proxy_pid=$proxy_io_PID
    trap proxy_exit EXIT
    read -r -t 10 -u "${proxy_io[0]}" proxy_answer || fail "fg_proxy did not start"
    proxy_port=${proxy_answer#port }
    [[ $proxy_port =~ ^[0-9]+$ ]] || fail "fg_proxy printed '$proxy_answer', not its port"
    proxy_fd_base=$(ls "/proc/$proxy_pid/fd" | wc -l)
    gw_redis_port=$proxy_port
    say "fg_proxy pid $proxy_pid on port $proxy_port in front of Redis"
}

# mark_time EVENT: the end time (ns) of the last mark EVENT in the history.
mark_time() {
    # Printed as read: awk would print t + 0 as 1.08018e+13, some ms before the mark.
    awk -F'\t' -v e="$1" '$2 == "mark" && $14 == e { t = $5 } END { print t == "" ? 0 : t }' "$hist"
}

# since_mark STATUS KIND MIN: at least MIN operations (of KIND, or any kind for "any")
# answered STATUS that started after the last mark $window.
since_mark() {
    [ "$(awk -F'\t' -v from="$window_from" -v s="$1" -v k="$2" '
        $2 != "mark" && $4 >= from && $6 == s && (k == "any" || $2 == k) { n++ }
        END { print n + 0 }' "$hist")" -ge "$3" ]
}

# fault_window MODE EVENT WHAT STATUS KIND MIN: puts the proxy in MODE, marks EVENT, and keeps
# the fault for $hold_s s and then until MIN operations of KIND answered STATUS inside it; then
# marks proxy_up, goes back to pass and marks heal.
fault_window() {
    local mode=$1 event=$2 what=$3
    proxy_cmd "$mode"
    if [ "$mode" = reset ]; then
        # The gateway keeps at least its subscriber connection open through the proxy.
        [ "${proxy_answer#ok reset }" -ge 1 ] || fail "the reset found no connection to reset"
    fi
    mark "$event"
    window_from=$(mark_time "$event")
    # A file sourcing this one may add its own probe of the fault here.
    if declare -F fault_probe >/dev/null; then fault_probe; fi
    sleep "$hold_s" # the length of the fault, not a wait for anything
    wait_until "$what" 30 since_mark "$4" "$5" "$6"
    mark proxy_up
    proxy_cmd pass
    mark heal
    say "fault $mode: held until $what"
}

scenario_fault() {
    progress "$steps"
    case $(((${1} - 1) % 4)) in
        0) fault_window "delay 300" proxy_slow "a lock granted through a 300 ms delay" 200 lock 1 ;;
        1) fault_window "delay 2500" proxy_down "3 requests answered 503 under a 2.5 s delay" 503 any 3 ;;
        2) fault_window reset proxy_down "3 requests answered 503 with every connection reset" 503 any 3 ;;
        3) fault_window blackhole proxy_down "3 requests answered 503 in a blackhole" 503 any 3 ;;
    esac
}

# check_windows: from the history, no lock granted by a request that ran entirely inside a
# late, reset or blackhole window (Redis could not have answered it), and at least one lock
# granted entirely inside each slow window. Prints what each window saw.
check_windows() {
    awk -F'\t' '
        $2 == "mark" && ($14 == "proxy_down" || $14 == "proxy_slow") {
            w++; kind[w] = $14; from[w] = $5; to[w] = 9e18; next }
        $2 == "mark" && $14 == "proxy_up" { to[w] = $4; next }
        $2 != "mark" { n++; line[n] = $0; op[n] = $2; st[n] = $4; en[n] = $5; code[n] = $6 }
        END {
            bad = 0
            for (i = 1; i <= w; i++) {
                granted = 0; unavailable = 0
                for (j = 1; j <= n; j++) {
                    if (st[j] < from[i] || en[j] > to[i]) continue
                    if (code[j] == 503) unavailable++
                    if (op[j] != "lock" || code[j] != 200) continue
                    granted++
                    if (kind[i] == "proxy_down") { print "granted with Redis cut off: " line[j]; bad++ }
                }
                printf "window %d (%s): %d locks granted, %d answers 503\n", i, kind[i], granted, unavailable
                if (kind[i] == "proxy_slow" && granted == 0) { print "no lock granted in slow window " i; bad++ }
            }
            exit bad > 0
        }' "$hist" || fail "a lock was granted while the proxy cut Redis off, or none through a slow link"
}

# The proxy holds no connection the gateway does not, and no descriptor beyond its listener
# and two per connection.
proxy_settled() {
    proxy_stat open
    proxy_open=$stat_value
    gw_via_proxy=$(ss -Htnp state established "( dport = :$proxy_port )" | grep -c "pid=$gw_pid," || true)
    proxy_fds=$(ls "/proc/$proxy_pid/fd" | wc -l)
    [ "$proxy_open" -eq "$gw_via_proxy" ] && [ "$proxy_fds" -eq $((proxy_fd_base + 2 * proxy_open)) ]
}

# proxy_check_settled: waits up to 15 s for proxy_settled, then prints the proxy's counters.
proxy_check_settled() {
    deadline=$((SECONDS + 15))
    until proxy_settled; do
        [ "$SECONDS" -lt "$deadline" ] || fail "15 s after the run the proxy holds $proxy_open \
connections and $proxy_fds fds (baseline $proxy_fd_base), the gateway $gw_via_proxy through it"
        sleep 0.05
    done
    proxy_cmd stats
    say "proxy: $proxy_answer"
}

scenario_check() {
    check_windows
    proxy_check_settled
}
