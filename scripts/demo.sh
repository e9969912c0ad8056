#!/usr/bin/env bash
# The curl demo of Kleppmann's GC-pause figure, against a running fencegate:
#   1. client 1 locks with a short lease and gets token N;
#   2. it "pauses" past its lease (we watch GET /locks/{r} until the lease is gone);
#   3. client 2 locks, gets a larger token, and writes;
#   4. client 1 wakes up and writes with N: 409 stale_token;
#   5. the stored value is client 2's.
# Prints every request and answer. Exits non-zero if any step's outcome is wrong.
#
# Usage: scripts/demo.sh [URL]   (URL defaults to $FENCEGATE_URL, then http://127.0.0.1:8080)
# FENCEGATE_DEMO_RESOURCE names the resource (default: gc-pause-TIME-PID, new each run).
# With FENCEGATE_AUTH_TOKEN set, every request sends `Authorization: Bearer $FENCEGATE_AUTH_TOKEN`.
# For an https:// URL, FENCEGATE_CACERT names the CA file to trust (as fencectl --cacert), and
# FENCEGATE_CERT and FENCEGATE_KEY a client certificate (mutual TLS).
# Needs only curl and jq.
set -euo pipefail

# A resource name no earlier run used: tokens and values start fresh. FENCEGATE_DEMO_RESOURCE
# names it instead (scripts/transcripts.sh does, against a fresh Redis, for a stable README).
resource=${FENCEGATE_DEMO_RESOURCE:-gc-pause-$(date +%s)-$$}
lease_ms=2000

. "$(dirname "$0")/demo-common.sh"

echo "fencegate GC-pause demo against $url, resource $resource"

step "1. Client 1 takes the lock with a ${lease_ms} ms lease"
req POST /lock "{\"resource\":\"$resource\",\"owner\":\"client-1\",\"ttl_ms\":$lease_ms}"
expect_status 200 "client 1's lock"
token1=$(json .token)
echo "# client 1 holds token $token1"

step "2. Client 1 pauses (a long GC) past its lease; we watch the lock expire"
req GET "/locks/$resource"
expect_status 200 "lock state"
[ "$(json .locked)" = true ] || fail "the lock should still be held right after locking"
await_expiry "$resource"
req GET "/locks/$resource"
[ "$(json .locked)" = false ] || fail "the lock came back"

step "3. Client 2 takes the lock and gets a larger token, then writes"
req POST /lock "{\"resource\":\"$resource\",\"owner\":\"client-2\",\"ttl_ms\":30000}"
expect_status 200 "client 2's lock"
token2=$(json .token)
[ "$token2" -gt "$token1" ] || fail "client 2's token $token2 is not larger than client 1's $token1"
echo "# client 2 holds token $token2 (> $token1)"
req PUT "/resources/$resource" "written by client 2" text/plain "Fencing-Token: $token2"
expect_status 200 "client 2's write"
[ "$(json .token)" = "$token2" ] || fail "client 2's write did not record token $token2"

step "4. Client 1 wakes up, still believing it holds the lock, and writes with token $token1"
req PUT "/resources/$resource" "written by client 1" text/plain "Fencing-Token: $token1"
expect_status 409 "client 1's stale write"
[ "$(json .error)" = stale_token ] || fail "expected error stale_token: $body"
[ "$(json .token)" = "$token1" ] || fail "the 409 should name client 1's token $token1: $body"
[ "$(json .highest_token)" = "$token2" ] || fail "the 409 should name the highest token $token2: $body"
echo "# refused: the storage has already seen token $token2"

step "5. The stored value is client 2's"
req GET "/resources/$resource"
expect_status 200 "read back"
[ "$body" = "written by client 2" ] || fail "stored value is '$body', expected client 2's"
ftok=$(grep -i '^fencing-token:' "$tmp/headers" | tr -d '\r' | awk '{print $2}')
[ "$ftok" = "$token2" ] || fail "Fencing-Token header is '$ftok', expected $token2"

step "Client 2 releases the lock"
req POST /unlock "{\"resource\":\"$resource\",\"owner\":\"client-2\"}"
expect_status 200 "client 2's unlock"

printf '\ndemo: OK: client 1 (token %s) was fenced off; the value is client 2'"'"'s (token %s)\n' \
    "$token1" "$token2"
