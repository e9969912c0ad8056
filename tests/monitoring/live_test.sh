#!/usr/bin/env bash
# ctest monitoring_live: the dashboard and the alert rules against a real Prometheus that
# scrapes real gateways.
#
#   live_test.sh SOURCE_DIR FENCEGATE_BIN
#
# Starts, each in a temp dir and stopped by PID: a redis-server (unix socket) and three more
# for a Redlock set, two fencegate gateways (one on the single Redis, one on Redlock, so the
# Redlock panels have data too), and Debian's prometheus on a free loopback port, scraping
# both every second with deploy/prometheus/alerts.yml loaded. Sends lock traffic (grants,
# a conflict, a renew, a write, a release) so the histograms and counters move, waits (a
# loop with a deadline) until Prometheus holds two scrapes of each gateway and has
# evaluated every rule, then runs check_queries.py: every dashboard expression and every
# alert expression must return a series (see its header). A missing prometheus, promtool,
# redis-server, curl, jq or python3 with PyYAML fails the test; it never skips.
set -euo pipefail

src=${1:?usage: live_test.sh SOURCE_DIR FENCEGATE_BIN}
bin=${2:?usage: live_test.sh SOURCE_DIR FENCEGATE_BIN}
here=$(cd "$(dirname "$0")" && pwd)

fail() { echo "monitoring_live: FAIL: $*" >&2; exit 1; }

for tool in prometheus curl jq redis-server redis-cli /usr/bin/python3; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (scripts/install-deps.sh installs it)"
done
/usr/bin/python3 -c "import yaml" 2>/dev/null || fail "python3 lacks PyYAML (Debian's python3-yaml)"

# shellcheck source=../common/redis.sh
. "$src/tests/common/redis.sh"
# shellcheck source=../common/gateway.sh
. "$src/tests/common/gateway.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fg-monitoring.XXXXXX")
gw_pids=() prom_pid=""
cleanup() {
    local rc=$? pid
    if [ -n "$prom_pid" ]; then fg_topo_stop_pid "$prom_pid"; fi
    for pid in ${gw_pids[@]+"${gw_pids[@]}"}; do fg_topo_stop_pid "$pid"; done
    fg_redis_stop
    fg_redis_set_stop
    if [ "$rc" -ne 0 ]; then
        for f in "$tmp"/*.log; do
            [ -f "$f" ] || continue
            echo "----- last lines of $(basename "$f")" >&2
            tail -n 20 "$f" >&2
        done
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# start_gateway NAME REDIS_URL: a gateway on a free port; sets gw_url.
start_gateway() {
    local started=0
    fg_gateway_start "$bin" "$tmp/$1-data" "$2" "$tmp/$1.log" || started=$?
    gw_pids+=("$FG_GATEWAY_PID") # stopped by cleanup even when it did not answer
    [ "$started" -eq 0 ] || fail "gateway $1 did not start"
    gw_url=$FG_GATEWAY_URL
}

# post URL PATH JSON: prints the body; the status is checked by the caller through jq.
post() {
    curl -sS --max-time 5 -X POST "$1$2" -H 'Content-Type: application/json' -d "$3"
}

# traffic URL ROUND: a grant, a conflict (409), a renew, a write, a release.
traffic() {
    local url=$1 r=res-$2 lock token owner
    lock=$(post "$url" /lock "{\"resource\":\"$r\",\"ttl_ms\":10000}")
    token=$(jq -er .token <<<"$lock") || fail "POST /lock on $url answered: $lock"
    owner=$(jq -er .owner <<<"$lock")
    post "$url" /lock "{\"resource\":\"$r\",\"ttl_ms\":10000}" | jq -e '.error' >/dev/null \
        || fail "a second POST /lock of $r on $url was not refused"
    post "$url" /renew "{\"resource\":\"$r\",\"owner\":\"$owner\",\"ttl_ms\":10000}" \
        | jq -e '.token' >/dev/null || fail "POST /renew of $r on $url failed"
    curl -fsS --max-time 5 -X PUT "$url/resources/$r" -H "Fencing-Token: $token" \
        --data-binary "value $2" -o /dev/null || fail "PUT /resources/$r on $url failed"
    post "$url" /unlock "{\"resource\":\"$r\",\"owner\":\"$owner\"}" \
        | jq -e '.released' >/dev/null || fail "POST /unlock of $r on $url failed"
}

fg_redis_start "$tmp"
start_gateway single "unix://$FG_REDIS_SOCK"
url_single=$gw_url
fg_redis_set_start "$tmp/redlock" 3
start_gateway redlock "redlock://127.0.0.1:${FG_REDIS_SET_PORTS[0]},127.0.0.1:${FG_REDIS_SET_PORTS[1]},127.0.0.1:${FG_REDIS_SET_PORTS[2]}"
url_redlock=$gw_url
traffic "$url_single" 0
traffic "$url_redlock" 0

prom_port=$(fg_topo_free_port)
prom="http://127.0.0.1:$prom_port"
cat >"$tmp/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $src/deploy/prometheus/alerts.yml
scrape_configs:
  - job_name: fencegate
    static_configs:
      - targets: ["${url_single#http://}", "${url_redlock#http://}"]
YAML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/prom-data" \
    --web.listen-address="127.0.0.1:$prom_port" >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!

# Ready when both gateways have 2 scrapes and every rule has been evaluated. Traffic goes
# on meanwhile, so the rates over the last scrapes are not all zero.
ready() {
    local scrapes pending
    scrapes=$(curl -fsS --max-time 2 "$prom/api/v1/query" \
        --data-urlencode 'query=min(count_over_time(up{job="fencegate"}[1m]) >= 2) and on() count(up{job="fencegate"} == 1) == 2' \
        2>/dev/null | jq -r '.data.result | length') || return 1
    [ "$scrapes" = 1 ] || return 1
    pending=$(curl -fsS --max-time 2 "$prom/api/v1/rules" 2>/dev/null \
        | jq '[.data.groups[].rules[] | select(.health == "unknown")] | length') || return 1
    [ "$pending" = 0 ]
}
round=1 deadline=$((SECONDS + 30))
until ready; do
    kill -0 "$prom_pid" 2>/dev/null || fail "prometheus exited"
    [ "$SECONDS" -lt "$deadline" ] || fail "prometheus did not scrape both gateways twice in 30 s"
    traffic "$url_single" "$round"
    traffic "$url_redlock" "$round"
    round=$((round + 1))
    sleep 0.2
done
traffic "$url_single" last
traffic "$url_redlock" last
# One scrape after the last traffic, so the latest samples hold it.
last=$(curl -fsS "$prom/api/v1/query" --data-urlencode 'query=max(timestamp(up{job="fencegate"}))' \
    | jq -r '.data.result[0].value[1]')
deadline=$((SECONDS + 10))
until [ "$(curl -fsS "$prom/api/v1/query" --data-urlencode 'query=min(timestamp(up{job="fencegate"}))' \
    | jq -r ".data.result[0].value[1] > $last")" = true ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "prometheus stopped scraping"
    sleep 0.1
done

curl -fsS "$url_single/metrics" >"$tmp/metrics.txt"
curl -fsS "$url_redlock/metrics" >>"$tmp/metrics.txt"
/usr/bin/python3 "$here/check_queries.py" "$prom" "$src/deploy/grafana/fencegate.json" \
    "$src/deploy/prometheus/alerts.yml" "$tmp/metrics.txt"

# The gateways stop cleanly (under the sanitizers, a leak or a report fails here).
for pid in "${gw_pids[@]}"; do
    kill -TERM "$pid"
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" -eq 0 ] || fail "a gateway exited with status $rc on SIGTERM"
done
gw_pids=()
echo "monitoring_live: ok"
