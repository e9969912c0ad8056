#!/usr/bin/env bash
# The fenced-transaction demo, a transfer between two accounts, against a running fencegate:
#   1. the two accounts start at 100 each (a sum of 200);
#   2. client 1 locks both (one /lock each, in name order) with a short lease, reads both
#      balances and means to move 30 from A to B;
#   3. it pauses past its lease; client 2 locks both, moves 50 from B to A in one
#      POST /resources with its two tokens;
#   4. client 1 wakes up and sends its transfer with its old tokens: refused whole (409
#      stale_token, both writes named), nothing written;
#   5. the balances are client 2's, and the sum is still 200.
# Prints every request and answer. Exits non-zero if any step's outcome is wrong.
#
# Usage: scripts/demo-transfer.sh [URL]   (URL defaults to $FENCEGATE_URL, then
# http://127.0.0.1:8080). FENCEGATE_DEMO_RESOURCE is the accounts' prefix (default:
# transfer-TIME-PID, new each run). With FENCEGATE_AUTH_TOKEN set, every request sends
# `Authorization: Bearer $FENCEGATE_AUTH_TOKEN`. Needs only curl and jq.
set -euo pipefail

prefix=${FENCEGATE_DEMO_RESOURCE:-transfer-$(date +%s)-$$}
a=$prefix-account-a
b=$prefix-account-b
lease_ms=2000

. "$(dirname "$0")/demo-common.sh"

# lock OWNER RESOURCE TTL_MS: prints the request and answer, leaves the token in $token.
lock() {
    req POST /lock "{\"resource\":\"$2\",\"owner\":\"$1\",\"ttl_ms\":$3}"
    expect_status 200 "$1's lock on $2"
    token=$(json .token)
}

# balance RESOURCE: reads it, leaves the balance in $balance.
balance() {
    req GET "/resources/$1"
    expect_status 200 "read of $1"
    balance=$body
}

echo "fencegate transfer demo against $url, accounts $a and $b"

step "1. The bank opens both accounts with 100 each"
lock bank "$a" 30000
req POST /resources "{\"writes\":[{\"resource\":\"$a\",\"token\":$token,\"value\":\"100\"}]}"
expect_status 200 "opening $a"
req POST /unlock "{\"resource\":\"$a\",\"owner\":\"bank\"}"
lock bank "$b" 30000
req POST /resources "{\"writes\":[{\"resource\":\"$b\",\"token\":$token,\"value\":\"100\"}]}"
expect_status 200 "opening $b"
req POST /unlock "{\"resource\":\"$b\",\"owner\":\"bank\"}"

step "2. Client 1 locks both accounts (in name order) with a ${lease_ms} ms lease and reads them"
lock client-1 "$a" "$lease_ms"
t1a=$token
lock client-1 "$b" "$lease_ms"
t1b=$token
balance "$a"
c1a=$balance
balance "$b"
c1b=$balance
echo "# client 1 holds tokens $t1a and $t1b and means to move 30: $a $c1a -> $((c1a - 30)), $b $c1b -> $((c1b + 30))"

step "3. Client 1 pauses past its lease; client 2 locks both and moves 50 from B to A"
await_expiry "$b"
lock client-2 "$a" 30000
t2a=$token
lock client-2 "$b" 30000
t2b=$token
balance "$a"
c2a=$balance
balance "$b"
c2b=$balance
req POST /resources "{\"writes\":[{\"resource\":\"$a\",\"token\":$t2a,\"value\":\"$((c2a + 50))\"},{\"resource\":\"$b\",\"token\":$t2b,\"value\":\"$((c2b - 50))\"}]}"
expect_status 200 "client 2's transfer"

step "4. Client 1 wakes up and sends its transfer with tokens $t1a and $t1b"
req POST /resources "{\"writes\":[{\"resource\":\"$a\",\"token\":$t1a,\"value\":\"$((c1a - 30))\"},{\"resource\":\"$b\",\"token\":$t1b,\"value\":\"$((c1b + 30))\"}]}"
expect_status 409 "client 1's stale transfer"
[ "$(json .error)" = stale_token ] || fail "expected error stale_token: $body"
[ "$(json '.refused | length')" = 2 ] || fail "both of client 1's writes should be refused: $body"
echo "# refused whole: neither account was written"

step "5. The balances are client 2's, and the sum is unchanged"
balance "$a"
fa=$balance
balance "$b"
fb=$balance
[ "$fa" = "$((c2a + 50))" ] || fail "$a holds $fa, expected client 2's $((c2a + 50))"
[ "$fb" = "$((c2b - 50))" ] || fail "$b holds $fb, expected client 2's $((c2b - 50))"
[ "$((fa + fb))" = 200 ] || fail "the sum is $((fa + fb)), not 200"

step "Client 2 releases both locks"
req POST /unlock "{\"resource\":\"$a\",\"owner\":\"client-2\"}"
expect_status 200 "client 2's unlock of $a"
req POST /unlock "{\"resource\":\"$b\",\"owner\":\"client-2\"}"
expect_status 200 "client 2's unlock of $b"

printf '\ndemo: OK: client 1'"'"'s transfer (tokens %s, %s) was refused whole; %s + %s = 200\n' \
    "$t1a" "$t1b" "$fa" "$fb"
