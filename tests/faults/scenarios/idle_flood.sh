# shellcheck shell=bash disable=SC2154,SC2034 # the runner's variables, and the ones it reads
# idle_flood: one client address floods the gateway with idle connections.
#
# Each fault, while the workload runs (from 127.0.0.1):
#   1. fg_flood keeps 2,000 silent connections open from 127.0.0.2 (an address of its own on
#      the loopback), reopening each as soon as the gateway closes it, at most 2,000 a second;
#   2. once the gateway holds at least half its per-address limit of them, honest clients on
#      127.0.0.1 probe it on fresh connections for FLOOD_S s (past the 10 s request deadline,
#      so the first flood connections are cut and reopened meanwhile): GET /healthz, then a
#      POST /lock (wait_ms 0) and its /unlock on a resource of their own;
#   3. the flood stops; mark heal.
# What must hold:
#   - every probe answered (200; curl gives up at 5 s), and their p99 at most PROBE_P99_MS
#     (printed, with the median): the bound the issue asks of a normal client during the flood;
#   - the gateway never held more connections than its per-address limit (the default, half
#     of --max-connections 1024) plus the honest ones: its descriptors stay under the baseline
#     + 512 + PROBE_FD_SLACK;
#   - the flood was real: the gateway refused some of its connections at accept (the limit)
#     and cut some past the request deadline (GW_REQUEST_DEADLINE_S, 10 s);
#   - its log did not flood: libmicrohttpd's line for each refused connection ("reached
#     connection limit") is written at most GW_MHD_LOG_PER_S (10) times a second (it was
#     once per refusal: 250,000 lines in one short run);
#   - the checker's invariants over the workload, and the gateway back to its baseline.
# Before the per-address limit, the flood took all 1,024 connections and the probes failed.
# ctest: short

faults=1
[ "$length" = full ] && faults=3
FLOOD_CONNS=2000
FLOOD_OPENS_PER_S=2000
FLOOD_S=12
PER_ADDRESS_LIMIT=512 # the default: half of --max-connections (1024 in gw_start)
PROBE_P99_MS=1000
PROBE_FD_SLACK=100    # the workload's and the probes' connections, Redis, the store
flood=$(dirname "$workload")/fg_flood
[ -x "$flood" ] || fail "not executable: $flood"

flood_conns() { ss -Htn state established "( sport = :$gport and dst 127.0.0.2 )" | wc -l; }
limit_lines() { grep -c 'reached connection limit' "$tmp/gateway.log" || true; }
fd_peak=0
fd_sample() { local n; n=$(fd_count); [ "$n" -gt "$fd_peak" ] && fd_peak=$n; true; }
flood_holds() { fd_sample; [ "$(flood_conns)" -ge $((PER_ADDRESS_LIMIT / 2)) ]; }

# probe URL_PATH BODY: one request on a fresh connection; appends "CODE SECONDS" to probes.
probe() {
    curl -sS --max-time 5 -o /dev/null -w '%{http_code} %{time_total}\n' \
        ${2:+-H 'Content-Type: application/json' -d "$2"} "$(gw_url)$1" >>"$tmp/probes" \
        2>/dev/null || true # a failure prints "000 SECONDS" too
}

scenario_fault() {
    local i=$1 flood_pid res="$scenario-$seed-probe-$1" body end line started log_lines
    progress "$steps"
    started=$SECONDS
    log_lines=$(limit_lines)
    : >"$tmp/probes"
    "$flood" 127.0.0.2 "$gport" "$FLOOD_CONNS" "$FLOOD_OPENS_PER_S" >"$tmp/flood.$i" &
    flood_pid=$!
    wait_until "the flood holding $((PER_ADDRESS_LIMIT / 2)) connections" 20 flood_holds
    mark flood
    body="{\"resource\":\"$res\",\"owner\":\"probe-$i\"}"
    end=$((SECONDS + FLOOD_S))
    while [ "$SECONDS" -lt "$end" ]; do
        probe /healthz ""
        probe /lock "$body"
        probe /unlock "$body"
        fd_sample
        sleep 0.1 # the probes' pace, not a wait for anything
    done
    kill -TERM "$flood_pid"
    wait "$flood_pid" || fail "fg_flood exited with status $?"
    read -r line <"$tmp/flood.$i" || line=""
    say "fault $i: $line; gateway fds peaked at $fd_peak (baseline $fd_base)"
    gone() { [ "$(flood_conns)" -eq 0 ]; }
    wait_until "the flood's connections closed" 15 gone
    mark heal
    check_probes "$i" "$line"
    log_lines=$(($(limit_lines) - log_lines))
    say "fault $i: $log_lines log lines about the connection limit in $((SECONDS - started + 1)) s"
    [ "$log_lines" -le $((10 * (SECONDS - started + 2))) ] \
        || fail "the flood wrote $log_lines log lines about the connection limit"
}

# check_probes I FLOOD_LINE: the bounds above, over fault I's probes.
check_probes() {
    local refused cut
    sort -k2,2n "$tmp/probes" | awk -v limit="$PROBE_P99_MS" '
        { n++; if ($1 != 200) bad++; ms[n] = $2 * 1000 }
        END {
            p99 = ms[int(n * 0.99 + 0.999)]
            printf "%d probes on fresh connections, %d not answered 200; median %.1f ms, p99 %.1f ms (bound %d ms)\n",
                n, bad, ms[int((n + 1) / 2)], p99, limit
            exit (n == 0 || bad > 0 || p99 > limit)
        }' || fail "an honest client was not served during the flood (fault $1)"
    [ "$fd_peak" -le $((fd_base + PER_ADDRESS_LIMIT + PROBE_FD_SLACK)) ] \
        || fail "the gateway held $fd_peak descriptors, past its baseline $fd_base + the \
per-address limit $PER_ADDRESS_LIMIT + $PROBE_FD_SLACK"
    refused=$(echo "$2" | awk '{ print $5 }')
    cut=$(echo "$2" | awk '{ print $7 }')
    [ "${refused:-0}" -gt 0 ] || fail "no flood connection was refused at accept: tested nothing"
    [ "${cut:-0}" -gt 0 ] || fail "no flood connection was cut at its request deadline"
}
