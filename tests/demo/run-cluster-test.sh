#!/usr/bin/env bash
# ctest demo_cluster: the curl demo (scripts/demo.sh) and fencectl, unchanged, against a
# gateway on a real Redis Cluster (3 masters, 3 replicas, tests/common/cluster.sh);
# ctest demo_redlock: the same against a gateway on Redlock over 3 independent masters
# (tests/common/redis.sh).
#
#   run-cluster-test.sh PATH/TO/fencegate PATH/TO/demo.sh PATH/TO/fencectl [cluster|redlock]
#
# Checks /readyz names the cluster topology and no password, the demo tells its story (the
# stale write refused with 409), and fencectl lock runs a command that writes with its token
# on resources that land on every master; then stops the gateway (exit 0) and the nodes by
# PID. A missing redis-server, redis-cli, curl or jq fails the test: it never skips.
set -euo pipefail

gateway=${1:?usage: run-cluster-test.sh FENCEGATE DEMO FENCECTL}
demo=${2:?}
fencectl=${3:?}
topology=${4:-cluster}
name=demo_$topology
password=$topology-demo-pw

fail() { echo "$name: FAIL: $*" >&2; exit 1; }
for tool in redis-server redis-cli curl jq; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (scripts/install-deps.sh)"
done

# shellcheck source=../common/cluster.sh
source "$(dirname "$0")/../common/cluster.sh"
# shellcheck source=../common/redis.sh
source "$(dirname "$0")/../common/redis.sh"
# shellcheck source=../common/gateway.sh
source "$(dirname "$0")/../common/gateway.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fg-demo-cluster.XXXXXX")
gw_pid=""
cleanup() {
    local rc=$?
    if [ -n "$gw_pid" ]; then kill -KILL "$gw_pid" 2>/dev/null || true; wait "$gw_pid" 2>/dev/null || true; fi
    if [ "$topology" = cluster ]; then fg_cluster_stop || true; else fg_redis_set_stop || true; fi
    if [ "$rc" -ne 0 ] && [ -f "$tmp/gateway.log" ]; then tail -n 40 "$tmp/gateway.log" >&2; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

case $topology in
cluster)
    fg_cluster_start "$tmp/cluster" 3 1 "$password" || fail "the cluster did not start"
    redis_url=$FG_CLUSTER_URL
    ;;
redlock)
    fg_redis_set_start "$tmp/set" 3 "$password" || fail "the 3 masters did not start"
    redis_url="redlock://:$password@127.0.0.1:$(IFS=,; echo "${FG_REDIS_SET_PORTS[*]}" |
        sed 's/,/,127.0.0.1:/g')"
    ;;
*) fail "unknown topology $topology" ;;
esac
echo "$name: $topology $redis_url" | sed "s/$password/***/"

fg_gateway_start "$gateway" "$tmp/gw" "$redis_url" "$tmp/gateway.log" || {
    gw_pid=$FG_GATEWAY_PID
    fail "the gateway did not start"
}
gw_pid=$FG_GATEWAY_PID
url=$FG_GATEWAY_URL

ready=$(curl -fsS --max-time 5 "$url/readyz") || fail "/readyz did not answer 200"
[ "$(jq -r .topology.kind <<<"$ready")" = "$topology" ] || fail "/readyz topology: $ready"
[ "$(jq -r '.topology.master | split(",") | length' <<<"$ready")" = 3 ] \
    || fail "/readyz does not name the 3 masters: $ready"
if grep -q "$password" <<<"$ready"; then fail "/readyz shows the password"; fi

# --- the curl demo, unchanged ------------------------------------------------------------------
rc=0
timeout 60 bash "$demo" "$url" >"$tmp/demo.out" 2>&1 || rc=$?
cat "$tmp/demo.out"
[ "$rc" -eq 0 ] || fail "scripts/demo.sh exited with status $rc"
grep -qE '^< HTTP 409$' "$tmp/demo.out" || fail "demo output lacks the 409"
grep -qE '^demo: OK: ' "$tmp/demo.out" || fail "demo output lacks the closing OK line"

# --- fencectl, unchanged: resources on every master ---------------------------------------------
for i in 1 2 3 4 5 6; do
    res="fctl-cluster-$i"
    "$fencectl" --url "$url" lock "$res" --ttl 10s -- \
        sh -c 'printf "token %s" "$FENCING_TOKEN" | "$0" --url "$1" write "$2" --token "$FENCING_TOKEN"' \
        "$fencectl" "$url" "$res" || fail "fencectl lock $res failed"
    got=$("$fencectl" --url "$url" read "$res") || fail "fencectl read $res failed"
    [[ "$got" =~ ^token\ [0-9]+$ ]] || fail "fencectl read $res: '$got'"
done
echo "$name: fencectl lock/write/read on 6 resources OK"

kill -TERM "$gw_pid"
rc=0; wait "$gw_pid" || rc=$?
gw_pid=""
[ "$rc" -eq 0 ] || fail "fencegate exited with status $rc after SIGTERM"
echo "$name: PASS"
