#!/usr/bin/env bash
# The GC-pause demo (Kleppmann's tokens 33 and 34) against the compose stack, with a real
# process freeze: client 1 runs in its own container and `docker pause` freezes it (the cgroup
# freezer stops every thread, as a long GC pause or a stopped VM would).
#
#   docker compose -p fencegate -f docker/compose.yaml up -d --build --wait
#   bash docker/demo.sh
#
#   1. client 1 (a container from the fencegate image, which has curl) locks with a 2 s lease
#      and gets token N;
#   2. `docker pause` freezes it before it writes; we wait until its lease has run out;
#   3. client 2 (this shell) locks, gets a larger token, and writes;
#   4. `docker unpause`: client 1 carries on and writes with N, and gets 409 stale_token;
#   5. the stored value is client 2's.
# Needs docker, curl and jq on the host. Exits non-zero if any step's outcome is wrong.
# Environment: FENCEGATE_URL (default http://127.0.0.1:8080, the host side of the gateway),
# FENCEGATE_COMPOSE_PROJECT (default fencegate, the -p name of the stack).
set -euo pipefail

url=${FENCEGATE_URL:-http://127.0.0.1:8080}
project=${FENCEGATE_COMPOSE_PROJECT:-fencegate}
network=${project}_default
image=fencegate:0.1.0
client=fencegate-demo-client1-$$
resource="docker-gc-pause-$(date +%s)"
lease_ms=2000

for tool in docker curl jq; do
    command -v "$tool" >/dev/null 2>&1 || { echo "demo: $tool is not installed" >&2; exit 2; }
done
fail() { echo "demo: FAIL: $*" >&2; exit 1; }
step() { printf '\n## %s\n' "$*"; }
cleanup() { docker rm -f "$client" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# wait_for WHAT SECONDS COMMAND...: runs COMMAND until it succeeds, at most SECONDS.
wait_for() {
    local what=$1 secs=$2 deadline
    shift 2
    deadline=$((SECONDS + secs))
    until "$@"; do
        [ $SECONDS -lt $deadline ] || fail "$what did not happen within ${secs} s"
        sleep 0.1
    done
}

curl -fsS --max-time 5 "$url/readyz" >/dev/null \
    || fail "no ready gateway at $url: start the stack first (see the header of this script)"

step "1. Client 1 (container $client) takes the lock with a ${lease_ms} ms lease"
# Client 1 locks, prints its token, does its "work" until /tmp/go exists, then writes with the
# token it was given. `docker pause` freezes it in the middle of that work.
docker run -d --name "$client" --network "$network" --entrypoint sh "$image" -c '
    set -e
    out=$(curl -sS -X POST http://gateway:8080/lock -H "Content-Type: application/json" \
        -d "{\"resource\":\"'"$resource"'\",\"owner\":\"client-1\",\"ttl_ms\":'"$lease_ms"'}")
    echo "lock: $out"
    token=$(echo "$out" | sed -n "s/.*\"token\": *\([0-9]*\).*/\1/p")
    echo "token=$token"
    until [ -f /tmp/go ]; do sleep 0.05; done
    code=$(curl -sS -o /tmp/answer -w "%{http_code}" -X PUT \
        "http://gateway:8080/resources/'"$resource"'" -H "Fencing-Token: $token" \
        -H "Content-Type: text/plain" --data-binary "written by client 1")
    echo "write: HTTP $code $(cat /tmp/answer)"
    sleep 3600' >/dev/null
wait_for "client 1's lock" 20 sh -c "docker logs $client 2>&1 | grep -q '^token=[0-9]'"
docker pause "$client" >/dev/null
docker logs "$client" 2>&1 | sed 's/^/client 1> /'
token1=$(docker logs "$client" 2>&1 | sed -n 's/^token=//p')
[ -n "$token1" ] || fail "client 1 got no token"
echo "# client 1 holds token $token1 and is now frozen: docker pause $client"

step "2. While client 1 is frozen, its lease runs out"
lock_free() { [ "$(curl -fsS "$url/locks/$resource" | jq -r .locked)" = false ]; }
wait_for "the lease's expiry" 30 lock_free
curl -sS "$url/locks/$resource"; echo

step "3. Client 2 takes the lock and writes"
out=$(curl -sS -X POST "$url/lock" -H 'Content-Type: application/json' \
    -d "{\"resource\":\"$resource\",\"owner\":\"client-2\",\"ttl_ms\":30000}")
echo "$out"
token2=$(jq -r .token <<<"$out")
[ "$token2" -gt "$token1" ] || fail "client 2's token $token2 is not larger than $token1"
curl -sS -X PUT "$url/resources/$resource" -H "Fencing-Token: $token2" \
    -H 'Content-Type: text/plain' --data-binary 'written by client 2'; echo

step "4. docker unpause: client 1 wakes up and writes with token $token1"
docker unpause "$client" >/dev/null
docker exec "$client" touch /tmp/go
wait_for "client 1's write" 20 sh -c "docker logs $client 2>&1 | grep -q '^write:'"
docker logs "$client" 2>&1 | grep '^write:' | sed 's/^/client 1> /'
docker logs "$client" 2>&1 | grep -q '^write: HTTP 409 .*stale_token' \
    || fail "client 1's late write was not refused with 409 stale_token"

step "5. The stored value is client 2's"
value=$(curl -sS "$url/resources/$resource")
echo "$value"
[ "$value" = "written by client 2" ] || fail "the stored value is '$value'"
curl -sS -o /dev/null -X POST "$url/unlock" -H 'Content-Type: application/json' \
    -d "{\"resource\":\"$resource\",\"owner\":\"client-2\"}"
printf '\ndemo: OK: the frozen client 1 (token %s) was fenced off by client 2 (token %s)\n' \
    "$token1" "$token2"
