#!/usr/bin/env bash
# Sessions bound to clients (--clients): another client presenting a session id gets 404
# session_not_found on every session route and on POST /lock with it (one resource or a
# set), as for an id that never existed; the creating client uses it. The id is in no log
# line and no metric.
# Usage: sessions.sh PATH/TO/fencegate
source "$(dirname "$0")/sec_common.sh"
sec_setup "${1:?usage: sessions.sh PATH/TO/fencegate}"
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
entry() {
    printf '{"name": "%s", "token_sha256": "%s", "allow": [{"prefix": "", "ops": ["lock", "read", "write", "metrics"]}]}' \
        "$1" "$(sha "$2")"
}
echo "{\"clients\": [$(entry billing tb), $(entry ops to)]}" >"$SEC_DIR/clients.json"
sec_gateway sessions --clients "$SEC_DIR/clients.json"
base=http://127.0.0.1:$SEC_PORT
# call TOKEN METHOD PATH [BODY]: prints "BODY STATUS".
call() {
    local data=()
    [ -z "${4:-}" ] || data=(-H 'Content-Type: application/json' --data-binary "$4")
    curl -s -w ' %{http_code}' -X "$2" -H "Authorization: Bearer $1" "${data[@]}" "$base$3" || true
}
status() { echo "${1##* }"; }

out=$(call tb POST /sessions '{"ttl_ms":30000}')
[ "$(status "$out")" = 201 ] || fail "billing's POST /sessions: $out"
sid=$(echo "${out% *}" | jq -r .session)
out=$(call tb POST /lock "{\"resource\":\"sec:s1\",\"session\":\"$sid\"}")
[ "$(status "$out")" = 200 ] || fail "billing's /lock in its session: $out"
out=$(call tb POST /lock "{\"resources\":[\"sec:s5\",\"sec:s6\"],\"session\":\"$sid\"}")
[ "$(status "$out")" = 200 ] || fail "billing's set /lock in its session: $out"
for req in "GET /sessions/$sid" "POST /sessions/$sid/renew {}" "DELETE /sessions/$sid" \
    "POST /lock {\"resource\":\"sec:s2\",\"session\":\"$sid\"}" \
    "POST /lock {\"resources\":[\"sec:s3\",\"sec:s4\"],\"session\":\"$sid\"}"; do
    read -r method path body <<<"$req"
    out=$(call to "$method" "$path" "$body")
    [ "$(status "$out")" = 404 ] || fail "ops' $method $path with billing's session: $out"
    case "$out" in *session_not_found*) ;; *) fail "ops' $method $path: $out" ;; esac
done
echo "ok: another client's session is 404 session_not_found on every route and on /lock (one or a set)"

out=$(call tb POST "/sessions/$sid/renew" '{}')
[ "$(status "$out")" = 200 ] || fail "billing's renew after ops' attempts: $out"
out=$(call tb GET "/metrics")
[ "$(status "$out")" = 200 ] || fail "GET /metrics: $out"
case "$out" in *"$sid"*) fail "the session id is in /metrics" ;; esac
out=$(call tb DELETE "/sessions/$sid")
[ "$(status "$out")" = 200 ] || fail "billing's DELETE: $out"
sleep_until_logged() {
    local deadline=$((SECONDS + 10))
    until grep -q 'DELETE /sessions/{session}' "$SEC_DIR/sessions/log"; do
        [ "$SECONDS" -lt "$deadline" ] || fail "the DELETE was never logged"
        sleep 0.05
    done
}
sleep_until_logged
if grep -q "$sid" "$SEC_DIR/sessions/log"; then
    fail "the session id is in the gateway's log"
fi
echo "ok: the creating client uses its session, and its id is in no log line or metric"
