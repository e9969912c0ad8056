#!/usr/bin/env bash
# Owners and Idempotency-Keys bound to clients (--clients): another client presenting the
# same owner id gets 409 not_owner on /unlock and /renew, and another client's same key is a
# new key; without --clients, owners are as sent.
# Usage: owners.sh PATH/TO/fencegate
source "$(dirname "$0")/sec_common.sh"
sec_setup "${1:?usage: owners.sh PATH/TO/fencegate}"
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
entry() {
    printf '{"name": "%s", "token_sha256": "%s", "allow": [{"prefix": "", "ops": ["lock", "read"]}]}' \
        "$1" "$(sha "$2")"
}
echo "{\"clients\": [$(entry billing tb), $(entry ops to)]}" >"$SEC_DIR/clients.json"
sec_gateway owners --clients "$SEC_DIR/clients.json"
base=http://127.0.0.1:$SEC_PORT
# post TOKEN PATH BODY [KEY]: prints "STATUS BODY".
post() {
    local key=()
    [ -z "${4:-}" ] || key=(-H "Idempotency-Key: $4")
    curl -s -w ' %{http_code}' -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
        "${key[@]}" --data-binary "$3" "$base$2" || true
}
status() { echo "${1##* }"; }

out=$(post tb /lock '{"resource":"sec:o","owner":"w1","ttl_ms":30000}')
[ "$(status "$out")" = 200 ] || fail "billing's /lock: $out"
case "$out" in *'"owner":"billing:w1"'*) ;; *) fail "the answer's owner is not billing's: $out" ;; esac
for owner in w1 billing:w1; do
    for path in /unlock /renew; do
        out=$(post to $path "{\"resource\":\"sec:o\",\"owner\":\"$owner\"}")
        [ "$(status "$out")" = 409 ] || fail "ops' $path with owner $owner: $out"
        case "$out" in *not_owner*) ;; *) fail "ops' $path: $out" ;; esac
    done
done
out=$(post tb /renew '{"resource":"sec:o","owner":"w1"}')
[ "$(status "$out")" = 200 ] || fail "billing's /renew with its own owner: $out"
out=$(post tb /unlock '{"resource":"sec:o","owner":"billing:w1"}')
[ "$(status "$out")" = 200 ] || fail "billing's /unlock with the answer's owner: $out"
echo "ok: another client's same owner id is 409 not_owner on /unlock and /renew"

key=retry-key-0123456789
first=$(post tb /lock '{"resource":"sec:i"}' $key)
[ "$(status "$first")" = 200 ] || fail "billing's keyed /lock: $first"
again=$(post tb /lock '{"resource":"sec:i"}' $key)
[ "${again% *}" = "${first% *}" ] || fail "billing's retry was not a replay: $first / $again"
other=$(post to /lock '{"resource":"sec:i"}' $key)
[ "$(status "$other")" = 409 ] || fail "ops' same key replayed billing's answer: $other"
echo "ok: an Idempotency-Key is per client"

printf 'plain-token\n' >"$SEC_DIR/token"
sec_gateway plain --auth-token-file "$SEC_DIR/token"
base=http://127.0.0.1:$SEC_PORT
out=$(post plain-token /lock '{"resource":"sec:p","owner":"w1"}')
case "$out" in *'"owner":"w1"'*' 200') ;; *) fail "without --clients the owner changed: $out" ;; esac
echo "ok: without --clients owners are as sent"
