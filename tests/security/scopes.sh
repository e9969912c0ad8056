#!/usr/bin/env bash
# Scopes, table-driven over the routes the binary prints (`fencegate --routes`: METHOD /path
# SCOPE WHERE), so a route added without a scope rule fails here:
#   - every route names a known scope and where its resource is;
#   - with --clients, on each route: no token is 401 (public routes: never 401/403); a
#     client allowed only another operation is 403; the client allowed only the route's
#     operation passes (neither 401 nor 403); a client with every operation but only on
#     the prefix "billing:" passes on billing:x and is 403 on sec:x (routes with a resource).
# Usage: scopes.sh PATH/TO/fencegate
source "$(dirname "$0")/sec_common.sh"
bin=${1:?usage: scopes.sh PATH/TO/fencegate}
[ -x "$bin" ] || fail "fencegate binary not found: $bin"

routes=$("$bin" --routes) || fail "'$bin --routes' failed"
[ -n "$routes" ] || fail "'$bin --routes' printed nothing"
ops=(lock write read admin metrics)
while read -r method path scope where extra; do
    [ -z "$extra" ] || fail "'$method $path': more than METHOD /path SCOPE WHERE"
    case "$scope" in
        public | lock | write | read | admin | metrics) ;;
        *) fail "'$method $path' has no scope rule (got '${scope:-nothing}'): name its operation in gateway/src/base/routes.c" ;;
    esac
    case "$where" in path | body | none) ;; *) fail "'$method $path': resource place '$where'" ;; esac
done <<<"$routes"
echo "ok: every route names its scope"

sec_setup "$bin"
token() { printf 'tok-%s-0123456789abcdef' "$1"; }
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
{
    echo '{"clients": ['
    for op in "${ops[@]}"; do
        printf '{"name": "only-%s", "token_sha256": "%s", "allow": [{"prefix": "", "ops": ["%s"]}]},\n' \
            "$op" "$(sha "$(token "$op")")" "$op"
    done
    printf '{"name": "billing", "token_sha256": "%s", "allow": [{"prefix": "billing:", "ops": ["lock", "write", "read", "admin", "metrics"]}]}\n' \
        "$(sha "$(token billing)")"
    echo ']}'
} >"$SEC_DIR/clients.json"
sec_gateway scopes --clients "$SEC_DIR/clients.json"
base=http://127.0.0.1:$SEC_PORT

# call METHOD PATH RESOURCE [TOKEN]: prints the status, and "forbidden" after it when the
# answer is the scope's refusal (a 403 may also be a fencing refusal: unknown_token).
call() {
    local method=$1 p=${2//\{resource\}/$3} auth=() data=()
    [ -z "${4:-}" ] || auth=(-H "Authorization: Bearer $4")
    # A body each route parses up to its resource, so only the scope can refuse it early.
    local body="{\"resource\":\"$3\"}"
    case "$2" in
        /resources) body="{\"writes\":[{\"resource\":\"$3\",\"token\":1,\"value\":\"x\"}]}" ;;
        /admin/release) body="{\"resource\":\"$3\",\"reason\":\"scope test\"}" ;;
    esac
    case "$method" in GET | HEAD) ;; *)
        data=(-H 'Content-Type: application/json' -H 'Fencing-Token: 1' --data-binary "$body") ;;
    esac
    local head=()
    [ "$method" != HEAD ] || head=(-I)
    local code
    code=$(curl -s -o "$SEC_DIR/body" -w '%{http_code}' -X "$method" "${head[@]}" "${auth[@]}" \
        "${data[@]}" --max-time 10 "$base$p") || true
    if grep -q '"error":"forbidden"' "$SEC_DIR/body"; then
        echo "$code forbidden"
    elif [ "$method" = HEAD ] && [ "$code" = 403 ]; then
        echo "$code forbidden" # HEAD has no body; only the scope answers it 403
    else
        echo "$code"
    fi
}
passes() { [ "$1" != 401 ] && [ "$1" != "403 forbidden" ] && [ "$1" != 000 ]; }
n=0
while read -r method path scope where; do
    what="$method $path ($scope)"
    got=$(call "$method" "$path" sec:x)
    if [ "$scope" = public ]; then
        passes "$got" || fail "$what without a token: $got"
        continue
    fi
    [ "$got" = 401 ] || fail "$what without a token: $got, not 401"
    for op in "${ops[@]}"; do
        got=$(call "$method" "$path" sec:x "$(token "$op")")
        if [ "$op" = "$scope" ]; then
            passes "$got" || fail "$what refused the client allowed '$op': $got"
        else
            [ "$got" = "403 forbidden" ] || fail "$what let the client allowed only '$op' through: $got"
        fi
        n=$((n + 1))
    done
    got=$(call "$method" "$path" billing:x "$(token billing)")
    passes "$got" || fail "$what refused billing on billing:x: $got"
    if [ "$where" != none ]; then
        got=$(call "$method" "$path" sec:x "$(token billing)")
        [ "$got" = "403 forbidden" ] || fail "$what let billing through on sec:x: $got"
    fi
done <<<"$routes"
echo "ok: $n scope checks over $(wc -l <<<"$routes") routes"

# The 403 names the operation and the resource, never the token.
body=$(curl -s -H "Authorization: Bearer $(token billing)" "$base/resources/sec:y")
case "$body" in *'"forbidden"'*"may not 'read' on resource 'sec:y'"*) ;; *) fail "403 body: $body" ;; esac
case "$body" in *tok-*) fail "the 403 shows a token: $body" ;; esac
grep -q 'client=billing' "$SEC_DIR/scopes/log" || fail "the access log does not name the client"
grep -q 'tok-' "$SEC_DIR/scopes/log" && fail "a token reached the log"
echo "ok: 403 names operation and resource; the log names the client, never a token"

# Metrics count requests by client name, never by token.
metrics=$(curl -s -H "Authorization: Bearer $(token metrics)" "$base/metrics")
grep -Eq '^fencegate_client_requests_total\{client="billing",code="4xx"\} [1-9]' <<<"$metrics" \
    || fail "no billing 4xx in fencegate_client_requests_total"
grep -Eq '^fencegate_client_requests_total\{client="only-read",code="2xx"\} [1-9]' <<<"$metrics" \
    || fail "no only-read 2xx in fencegate_client_requests_total"
grep -q 'tok-' <<<"$metrics" && fail "a token in the metrics"
echo "ok: fencegate_client_requests_total counts by client name"

# The listing shows a client only the locks under its read prefixes.
for r in sec:listed billing:listed; do
    curl -s -o /dev/null -H "Authorization: Bearer $(token lock)" -H 'Content-Type: application/json' \
        -d "{\"resource\":\"$r\",\"ttl_ms\":60000}" "$base/lock"
done
all=$(curl -s -H "Authorization: Bearer $(token read)" "$base/locks")
mine=$(curl -s -H "Authorization: Bearer $(token billing)" "$base/locks")
grep -q '"sec:listed"' <<<"$all" && grep -q '"billing:listed"' <<<"$all" \
    || fail "the client that may read everything does not see both locks: $all"
grep -q '"billing:listed"' <<<"$mine" || fail "billing does not see billing:listed: $mine"
grep -q '"sec:' <<<"$mine" && fail "billing sees a lock outside its prefixes: $mine"
# Neither a lock nor the page's next cursor may name another team's resource.
other=$(curl -s -w ' %{http_code}' -H "Authorization: Bearer $(token billing)" "$base/locks?prefix=sec:&limit=1")
case "$other" in *'"forbidden"'*' 403') ;; *) fail "billing listed under sec:: $other" ;; esac
grep -q 'sec:listed' <<<"$other" && fail "the refusal names another team's lock: $other"
echo "ok: the listing shows only the locks under the client's read prefixes"

# A set of resources (POST /lock, /unlock, /renew with "resources") needs the route's scope on
# every resource of it: one resource outside the client's prefixes refuses the whole set, and
# nothing of it is taken.
set_call() { # set_call PATH JSON TOKEN: prints the status and body
    curl -s -w ' %{http_code}' -H "Authorization: Bearer $3" -H 'Content-Type: application/json' \
        --data-binary "$2" --max-time 10 "$base$1"
}
got=$(set_call /lock '{"resources":["billing:s1","sec:s2"],"owner":"o1","ttl_ms":60000}' "$(token billing)")
case "$got" in *'"forbidden"'*"sec:s2"*' 403') ;; *) fail "a set with sec:s2 was not refused to billing: $got" ;; esac
status=$(curl -s -H "Authorization: Bearer $(token billing)" "$base/locks/billing:s1")
grep -q '"locked":true' <<<"$status" && fail "the refused set took billing:s1: $status"
got=$(set_call /lock '{"resources":["billing:s1","billing:s2"],"owner":"o1","ttl_ms":60000}' "$(token billing)")
case "$got" in *'"locks"'*' 200') ;; *) fail "billing could not lock its own set: $got" ;; esac
for route in /renew /unlock; do
    got=$(set_call $route '{"resources":["billing:s1","sec:s2"],"owner":"o1"}' "$(token billing)")
    case "$got" in *'"forbidden"'*"sec:s2"*' 403') ;; *) fail "$route of a set with sec:s2 was not refused: $got" ;; esac
done
got=$(set_call /unlock '{"resources":["billing:s1","billing:s2"],"owner":"o1"}' "$(token billing)")
case "$got" in *'"released":true'*' 200') ;; *) fail "billing could not unlock its set: $got" ;; esac
echo "ok: a set needs the scope on every resource of it"
