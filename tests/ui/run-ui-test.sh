#!/usr/bin/env bash
# ctest ui_status_page: the status page in Debian's Chromium (headless, via puppeteer-core),
# against the real fencegate and a real redis-server.
#
#   run-ui-test.sh PATH/TO/fencegate SCREENSHOT.png
#
# Starts redis-server (free loopback port, temp dir) and fencegate with a bearer token (free
# loopback port, temp data dir), waits for /healthz, runs ui.test.js, then stops both by PID.
# The screenshot stays as the test's artifact. A missing chromium, node or puppeteer-core
# fails the test: it never skips.
set -euo pipefail

gateway=${1:?usage: run-ui-test.sh PATH/TO/fencegate SCREENSHOT.png}
shot=${2:?usage: run-ui-test.sh PATH/TO/fencegate SCREENSHOT.png}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../common/procs.sh
. "$here/../common/procs.sh"

fail() { echo "ui_status_page: FAIL: $*" >&2; exit 1; }

for tool in redis-server redis-cli curl node chromium; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (scripts/install-deps.sh installs it)"
done
[ -f "$here/node_modules/puppeteer-core/package.json" ] \
    || fail "puppeteer-core is not installed (scripts/install-node-tools.sh installs it)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fg-ui-test.XXXXXX")
redis_pid="" gw_pid=""
cleanup() {
    local rc=$?
    if [ -n "$gw_pid" ]; then fg_stop_pid "$gw_pid" || true; fi
    if [ -n "$redis_pid" ]; then fg_stop_pid "$redis_pid" || true; fi
    if [ "$rc" -ne 0 ] && [ -f "$tmp/gateway.log" ]; then
        echo "----- last lines of the gateway's log" >&2
        tail -n 40 "$tmp/gateway.log" >&2
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for WHAT CMD...: runs CMD until it succeeds, for up to 15 s.
wait_for() {
    local what=$1 deadline=$((SECONDS + 15))
    shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || fail "$what did not come up in 15 s"
        sleep 0.05
    done
}

mkdir -p "$tmp/redis"
rport=$(fg_free_port)
redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp/redis" --save '' --appendonly no \
    --daemonize no --logfile "$tmp/redis/redis.log" &
redis_pid=$!
wait_for "redis-server" redis-cli -p "$rport" ping

token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$token" >"$tmp/token"
chmod 600 "$tmp/token"
gport=$(fg_free_port)
"$gateway" --listen "127.0.0.1:$gport" --redis "redis://127.0.0.1:$rport" --data "$tmp/data" \
    --auth-token-file "$tmp/token" >"$tmp/gateway.log" 2>&1 &
gw_pid=$!
wait_for "fencegate" curl -sf "http://127.0.0.1:$gport/healthz"

mkdir -p "$(dirname "$shot")"
GATEWAY="http://127.0.0.1:$gport" TOKEN="$token" SCREENSHOT="$shot" node "$here/ui.test.js"
grep -q "ui test: holder stuck" "$tmp/gateway.log" \
    || fail "the forced release's reason is not in the gateway's log"
echo "ui_status_page: ok (screenshot: $shot)"
