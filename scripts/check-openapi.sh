#!/usr/bin/env bash
# Checks api/openapi.yaml. Three subcommands:
#
#   install         Installs the pinned OpenAPI validator (@redocly/cli, from api/package.json
#                   and api/package-lock.json) with scripts/install-node-tools.sh, which
#                   scripts/install-deps.sh also calls.
#   lint            Runs `redocly lint` (recommended-strict ruleset, api/redocly.yaml) on the
#                   spec. Fails loudly when the validator is not installed: never skips.
#   routes BINARY   Runs `BINARY --routes` (one "METHOD /path/template SCOPE WHERE" line per
#                   served route; the scope and where its resource is are left out here)
#                   and fails unless the routes it prints and the operations in openapi.yaml
#                   are the same set, both ways.
#   proxy BINARY    Starts a private redis-server, BINARY on a free port, and Stoplight Prism's
#                   proxy (@stoplight/prism-cli, pinned in api/package.json) in front of it,
#                   then sends the API cases below through the proxy. Prism checks each request
#                   and each answer against openapi.yaml and names every mismatch in an
#                   sl-violations header. Fails on any mismatch in an answer (the binary and
#                   the spec disagree), and on any in a request the case calls valid.
#
# The ctest tests api_openapi_lint, api_routes_match_openapi and api_prism_proxy (tests/api/)
# call lint, routes and proxy.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
api="$root/api"
spec="$api/openapi.yaml"
redocly="$api/node_modules/.bin/redocly"

die() { echo "check-openapi: $*" >&2; exit 1; }

cmd_install() {
    bash "$root/scripts/install-node-tools.sh"
}

cmd_lint() {
    command -v node >/dev/null 2>&1 \
        || die "node is not installed: run scripts/install-deps.sh (or scripts/install-node-tools.sh)"
    [ -x "$redocly" ] \
        || die "the OpenAPI validator is not installed in api/node_modules: run scripts/install-deps.sh (or scripts/install-node-tools.sh)"
    echo "check-openapi: redocly $("$redocly" --version) on node $(node --version): lint $spec"
    (cd "$api" && "$redocly" lint --config redocly.yaml openapi.yaml) \
        || die "api/openapi.yaml failed the OpenAPI lint (see above)"
}

# Prints "METHOD /path" for every operation in the spec. The spec keeps the usual layout:
# paths at two spaces under `paths:`, methods at four spaces under each path.
spec_routes() {
    awk '
        /^paths:[[:space:]]*$/ { inpaths = 1; next }
        inpaths && /^[^[:space:]#]/ { inpaths = 0 }
        !inpaths { next }
        /^  \/[^[:space:]]*:[[:space:]]*$/ { p = $1; sub(/:$/, "", p); next }
        /^    (get|put|post|delete|patch|head|options|trace):/ {
            m = $1; sub(/:$/, "", m); print toupper(m) " " p
        }
    ' "$spec" | sort -u
}

cmd_routes() {
    local bin=${1:-}
    [ -n "$bin" ] || die "usage: check-openapi.sh routes PATH/TO/fencegate"
    [ -x "$bin" ] || die "gateway binary not found or not executable: $bin"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT

    spec_routes >"$tmp/spec"
    [ -s "$tmp/spec" ] || die "found no operations under paths: in $spec"

    # --routes only prints; a timeout keeps a broken binary from hanging the test.
    local rc=0
    timeout 10 "$bin" --routes >"$tmp/raw" 2>"$tmp/err" || rc=$?
    if [ "$rc" -ne 0 ]; then cat "$tmp/err" >&2; die "'$bin --routes' failed (exit $rc)"; fi
    # Normalise: trim, squeeze blanks, drop empty lines and the scope column (the scope test,
    # tests/security/scopes.sh, checks that one).
    sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e 's/[[:space:]][[:space:]]*/ /g' \
        -e 's/^\([^ ]* [^ ]*\) [a-z]* [a-z]*$/\1/' "$tmp/raw" \
        | grep -v '^$' | sort -u >"$tmp/bin" || true
    [ -s "$tmp/bin" ] || die "'$bin --routes' printed no routes"
    if grep -Ev '^[A-Z]+ /[^ ]*$' "$tmp/bin" >"$tmp/bad"; then
        cat "$tmp/bad" >&2
        die "'$bin --routes' printed lines that are not 'METHOD /path/template' (above)"
    fi

    local fail=0
    comm -23 "$tmp/bin" "$tmp/spec" >"$tmp/undocumented"
    comm -13 "$tmp/bin" "$tmp/spec" >"$tmp/unserved"
    if [ -s "$tmp/undocumented" ]; then
        echo "check-openapi: served by the gateway but missing from api/openapi.yaml:" >&2
        sed 's/^/  /' "$tmp/undocumented" >&2
        fail=1
    fi
    if [ -s "$tmp/unserved" ]; then
        echo "check-openapi: in api/openapi.yaml but not served by the gateway:" >&2
        sed 's/^/  /' "$tmp/unserved" >&2
        fail=1
    fi
    [ "$fail" -eq 0 ] || die "routes and spec differ"
    echo "check-openapi: all $(wc -l <"$tmp/bin") routes match api/openapi.yaml:"
    sed 's/^/  /' "$tmp/bin"
}

# proxy_case valid|invalid WHAT WANT_STATUS [--no-auth] CURL_ARGS...: one request through the
# proxy, with the bearer token of the gateway's client "all" unless --no-auth; fails unless it
# is answered WANT_STATUS with no violation in the answer (nor in the request, for a valid
# case).
proxy_case() {
    local kind=$1 what=$2 want=$3 code violations bad auth=(-H "Authorization: Bearer $token_all")
    shift 3
    if [ "${1:-}" = --no-auth ]; then
        auth=()
        shift
    fi
    code=$(curl -sS --max-time 10 -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' \
        "${auth[@]}" "$@" 2>"$tmp/curl.err") || true
    violations=$(awk 'tolower($1) == "sl-violations:" { sub(/^[^:]*: */, ""); print }' \
        "$tmp/headers" | tr -d '\r')
    cases=$((cases + 1))
    if [ "$code" != "$want" ]; then
        echo "check-openapi: $what: answered $code, not $want: $(head -c 300 "$tmp/body")" >&2
        proxy_fail=1
        return
    fi
    [ -n "$violations" ] || return 0
    # Each violation is {"location":["request"|"response",...],"severity":...,"message":...}.
    bad=$(node -e '
        const kind = process.argv[1];
        const v = JSON.parse(process.argv[2]);
        const bad = v.filter(x => x.location[0] === "response" ||
                                  (kind === "valid" && x.severity === "Error"));
        for (const x of bad) console.log(`${x.location.join(".")}: ${x.message}`);
    ' "$kind" "$violations")
    if [ -n "$bad" ]; then
        echo "check-openapi: $what ($code): the spec and the gateway disagree:" >&2
        echo "$bad" | sed 's/^/  /' >&2
        proxy_fail=1
    fi
}

cmd_proxy() {
    local bin=${1:-} prism="$api/node_modules/.bin/prism" gport pport url
    local json=(-H 'Content-Type: application/json') r
    [ -x "$bin" ] || die "usage: check-openapi.sh proxy PATH/TO/fencegate"
    [ -x "$prism" ] \
        || die "Prism is not installed in api/node_modules: run scripts/install-deps.sh (or scripts/install-node-tools.sh)"
    tmp=$(mktemp -d)
    # shellcheck source=../tests/common/redis.sh
    source "$root/tests/common/redis.sh" # fg_redis_start, and fg_topo_free_port (topo.sh)
    gw_pid="" prism_pid="" # globals: the EXIT trap runs after this function returned
    trap 'for p in $prism_pid $gw_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done;
          fg_redis_stop; rm -rf "$tmp"' EXIT
    fg_redis_start "$tmp" || die "redis-server did not start"
    gport=$(fg_topo_free_port) && pport=$(fg_topo_free_port) || die "found no free port"
    # Two clients: "all" may do everything (every case sends its token), "narrow" may only
    # read resources under "narrow:" (the 403 case).
    token_all="all-$RANDOM$RANDOM" token_narrow="narrow-$RANDOM$RANDOM"
    local sha_all sha_narrow
    sha_all=$(printf '%s' "$token_all" | sha256sum | cut -d' ' -f1)
    sha_narrow=$(printf '%s' "$token_narrow" | sha256sum | cut -d' ' -f1)
    printf '{"clients": [{"name": "all", "token_sha256": "%s", "allow": [{"prefix": "", "ops": ["lock", "write", "read", "admin", "metrics"]}]}, {"name": "narrow", "token_sha256": "%s", "allow": [{"prefix": "narrow:", "ops": ["read"]}]}]}\n' \
        "$sha_all" "$sha_narrow" >"$tmp/clients.json"
    "$bin" --listen "127.0.0.1:$gport" --redis "unix://$FG_REDIS_SOCK" --data "$tmp/data" \
        --clients "$tmp/clients.json" 2>"$tmp/gateway.log" &
    gw_pid=$!
    "$prism" proxy "$spec" "http://127.0.0.1:$gport" --host 127.0.0.1 --port "$pport" \
        >"$tmp/prism.log" 2>&1 &
    prism_pid=$!
    url="http://127.0.0.1:$pport"
    local deadline=$((SECONDS + 60))
    until curl -fsS --max-time 2 -o /dev/null "$url/healthz" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$prism_pid" 2>/dev/null \
            || ! kill -0 "$gw_pid" 2>/dev/null; then
            tail -n 20 "$tmp/gateway.log" "$tmp/prism.log" >&2
            die "the gateway behind Prism did not answer /healthz within 60 s"
        fi
        sleep 0.1
    done
    echo "check-openapi: prism $("$prism" --version) proxying to fencegate on port $gport"
    cases=0 proxy_fail=0 r="prism-$RANDOM$RANDOM"
    local key="prism-key-$RANDOM$RANDOM-0123456789"
    proxy_case valid "GET /healthz" 200 "$url/healthz"
    proxy_case valid "GET /livez" 200 "$url/livez"
    proxy_case valid "GET /readyz" 200 "$url/readyz"
    proxy_case valid "GET /metrics" 200 "$url/metrics"
    proxy_case valid "GET /ui/" 200 "$url/ui/"
    proxy_case valid "GET /ui/{file}" 200 "$url/ui/app.js"
    proxy_case valid "GET /ui/{file}, no such file" 404 "$url/ui/nope.js"
    proxy_case valid "POST /lock" 200 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"a\",\"ttl_ms\":60000}" "$url/lock"
    proxy_case valid "POST /lock, held" 409 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"b\"}" "$url/lock"
    proxy_case valid "POST /lock, held, waiting" 409 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"b\",\"wait_ms\":50}" "$url/lock"
    proxy_case valid "POST /lock, re-entered" 200 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"a\",\"ttl_ms\":60000}" "$url/lock"
    proxy_case valid "GET /locks/{resource}, held" 200 "$url/locks/$r"
    proxy_case valid "GET /locks" 200 "$url/locks"
    proxy_case valid "GET /locks?prefix=&limit=&after=, one page" 200 "$url/locks?prefix=$r&limit=1"
    proxy_case valid "POST /renew" 200 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"a\",\"ttl_ms\":60000}" "$url/renew"
    proxy_case valid "POST /renew, not the owner" 409 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"b\"}" "$url/renew"
    proxy_case valid "PUT /resources/{resource}" 200 -X PUT -H 'Fencing-Token: 1' --data-binary 'plain bytes' "$url/resources/$r"
    proxy_case valid "PUT /resources/{resource}, a JSON value" 200 -X PUT -H 'Fencing-Token: 1' "${json[@]}" --data-binary '{"any":"bytes"}' "$url/resources/$r"
    proxy_case valid "GET /resources/{resource}" 200 "$url/resources/$r"
    proxy_case valid "GET /resources/{resource}, never written" 404 "$url/resources/$r-none"
    proxy_case valid "PUT /resources/{resource}, a token never issued" 403 -X PUT -H 'Fencing-Token: 999999' --data-binary x "$url/resources/$r"
    proxy_case valid "POST /unlock, twice: first" 200 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"a\"}" "$url/unlock"
    proxy_case valid "POST /unlock" 200 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"a\"}" "$url/unlock"
    proxy_case valid "POST /unlock, not held" 409 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"a\"}" "$url/unlock"
    proxy_case valid "GET /locks/{resource}, free" 200 "$url/locks/$r"
    proxy_case valid "POST /lock, next holder" 200 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"b\"}" "$url/lock"
    proxy_case valid "PUT /resources/{resource}, superseded token" 409 -X PUT -H 'Fencing-Token: 1' --data-binary x "$url/resources/$r"
    proxy_case valid "GET /resources/{resource}, fenced, superseded token" 409 -H 'Fencing-Token: 1' "$url/resources/$r"
    proxy_case valid "GET /resources/{resource}, fenced, current token" 200 -H 'Fencing-Token: 2' "$url/resources/$r"
    proxy_case valid "GET /resources/{resource}, fenced, a token never issued" 403 -H 'Fencing-Token: 999999' "$url/resources/$r"
    proxy_case valid "POST /lock, shared" 200 "${json[@]}" -d "{\"resource\":\"$r-s\",\"owner\":\"a\",\"mode\":\"shared\"}" "$url/lock"
    proxy_case valid "POST /lock, shared, a second holder" 200 "${json[@]}" -d "{\"resource\":\"$r-s\",\"owner\":\"b\",\"mode\":\"shared\"}" "$url/lock"
    proxy_case valid "POST /lock, exclusive re-entry of a shared hold" 409 "${json[@]}" -d "{\"resource\":\"$r-s\",\"owner\":\"a\",\"mode\":\"exclusive\"}" "$url/lock"
    proxy_case valid "POST /lock, exclusive while shared" 409 "${json[@]}" -d "{\"resource\":\"$r-s\",\"owner\":\"c\"}" "$url/lock"
    proxy_case valid "GET /locks/{resource}, shared" 200 "$url/locks/$r-s"
    proxy_case valid "GET /locks, shared" 200 "$url/locks?prefix=$r-s"
    proxy_case valid "POST /renew, shared" 200 "${json[@]}" -d "{\"resource\":\"$r-s\",\"owner\":\"b\"}" "$url/renew"
    proxy_case valid "POST /lock, a resource to read" 200 "${json[@]}" -d "{\"resource\":\"$r-w\",\"owner\":\"a\"}" "$url/lock"
    tw=$(jq -r .token "$tmp/body")
    proxy_case valid "PUT /resources/{resource}, the resource to read" 200 -X PUT -H "Fencing-Token: $tw" --data-binary x "$url/resources/$r-w"
    proxy_case valid "POST /unlock, the resource to read" 200 "${json[@]}" -d "{\"resource\":\"$r-w\",\"owner\":\"a\"}" "$url/unlock"
    proxy_case valid "POST /lock, shared, the resource to read" 200 "${json[@]}" -d "{\"resource\":\"$r-w\",\"owner\":\"r\",\"mode\":\"shared\"}" "$url/lock"
    proxy_case valid "PUT /resources/{resource}, a shared token" 409 -X PUT -H "Fencing-Token: $tw" --data-binary y "$url/resources/$r-w"
    proxy_case valid "DELETE /resources/{resource}, a shared token" 409 -X DELETE -H "Fencing-Token: $tw" "$url/resources/$r-w"
    proxy_case valid "POST /resources, a shared token" 409 "${json[@]}" -d "{\"writes\":[{\"resource\":\"$r-w\",\"token\":$tw,\"value\":\"z\"}]}" "$url/resources"
    proxy_case valid "POST /lock, a second resource" 200 "${json[@]}" -d "{\"resource\":\"$r-2\",\"owner\":\"b\"}" "$url/lock"
    t2=$(jq -r .token "$tmp/body")
    proxy_case valid "POST /resources" 200 "${json[@]}" -d "{\"writes\":[{\"resource\":\"$r\",\"token\":2,\"value\":\"70\"},{\"resource\":\"$r-2\",\"token\":$t2,\"value_base64\":\"MzA=\",\"content_type\":\"text/plain\"}]}" "$url/resources"
    proxy_case valid "POST /resources, a superseded token" 409 "${json[@]}" -d "{\"writes\":[{\"resource\":\"$r\",\"token\":1,\"value\":\"0\"},{\"resource\":\"$r-2\",\"token\":$t2,\"delete\":true}]}" "$url/resources"
    proxy_case valid "POST /resources, a token never issued" 403 "${json[@]}" -d "{\"writes\":[{\"resource\":\"$r-2\",\"token\":999999,\"delete\":true}]}" "$url/resources"
    proxy_case valid "DELETE /resources/{resource}" 200 -X DELETE -H "Fencing-Token: $t2" "$url/resources/$r-2"
    proxy_case valid "DELETE /resources/{resource}, superseded token" 409 -X DELETE -H 'Fencing-Token: 1' "$url/resources/$r"
    proxy_case invalid "POST /resources, a resource twice" 400 "${json[@]}" -d "{\"writes\":[{\"resource\":\"$r\",\"token\":2,\"value\":\"a\"},{\"resource\":\"$r\",\"token\":2,\"value\":\"b\"}]}" "$url/resources"
    proxy_case valid "POST /admin/release" 200 "${json[@]}" -d "{\"resource\":\"$r\",\"reason\":\"the proxy check\"}" "$url/admin/release"
    proxy_case valid "POST /admin/release, nothing held" 200 "${json[@]}" -d "{\"resource\":\"$r\",\"reason\":\"again\"}" "$url/admin/release"
    proxy_case valid "POST /unlock, forcibly released" 409 "${json[@]}" -d "{\"resource\":\"$r\",\"owner\":\"b\"}" "$url/unlock"
    set2="\"resources\":[\"$r-s1\",\"$r-s2\"]"
    proxy_case valid "POST /lock, a set" 200 "${json[@]}" -d "{$set2,\"owner\":\"a\",\"ttl_ms\":60000}" "$url/lock"
    proxy_case valid "POST /lock, a set with one held" 409 "${json[@]}" -d "{\"resources\":[\"$r-s3\",\"$r-s2\"],\"owner\":\"b\"}" "$url/lock"
    proxy_case valid "POST /renew, a set" 200 "${json[@]}" -d "{$set2,\"owner\":\"a\",\"ttl_ms\":60000}" "$url/renew"
    proxy_case valid "POST /renew, a set with one not held" 409 "${json[@]}" -d "{\"resources\":[\"$r-s1\",\"$r-s3\"],\"owner\":\"a\"}" "$url/renew"
    proxy_case valid "POST /unlock, a set" 200 "${json[@]}" -d "{$set2,\"owner\":\"a\"}" "$url/unlock"
    proxy_case valid "POST /unlock, a set not held" 409 "${json[@]}" -d "{$set2,\"owner\":\"a\"}" "$url/unlock"
    sets2="\"resources\":[\"$r-ss1\",\"$r-ss2\"],\"mode\":\"shared\""
    proxy_case valid "POST /lock, a shared set" 200 "${json[@]}" -d "{$sets2,\"owner\":\"a\"}" "$url/lock"
    proxy_case valid "POST /lock, a shared set, a second holder" 200 "${json[@]}" -d "{$sets2,\"owner\":\"b\"}" "$url/lock"
    proxy_case valid "POST /lock, a set with a member held shared" 409 "${json[@]}" -d "{\"resources\":[\"$r-ss3\",\"$r-ss2\"],\"owner\":\"c\"}" "$url/lock"
    proxy_case valid "POST /lock, a shared set's owner asks it exclusive" 409 "${json[@]}" -d "{\"resources\":[\"$r-ss1\",\"$r-ss2\"],\"owner\":\"a\"}" "$url/lock"
    proxy_case valid "POST /renew, a shared set" 200 "${json[@]}" -d "{\"resources\":[\"$r-ss1\",\"$r-ss2\"],\"owner\":\"b\"}" "$url/renew"
    proxy_case valid "POST /unlock, a shared set" 200 "${json[@]}" -d "{\"resources\":[\"$r-ss1\",\"$r-ss2\"],\"owner\":\"a\"}" "$url/unlock"
    proxy_case invalid "POST /lock, a set with a bad mode" 400 "${json[@]}" -d "{\"resources\":[\"$r-ss1\",\"$r-ss2\"],\"mode\":\"reader\"}" "$url/lock"
    proxy_case invalid "POST /lock, a set naming a resource twice" 400 "${json[@]}" -d "{\"resources\":[\"$r-s1\",\"$r-s1\"]}" "$url/lock"
    proxy_case valid "POST /lock with an Idempotency-Key" 200 "${json[@]}" -H "Idempotency-Key: $key" -d "{\"resource\":\"$r-idem\"}" "$url/lock"
    proxy_case valid "POST /lock, the same key again (replay)" 200 "${json[@]}" -H "Idempotency-Key: $key" -d "{\"resource\":\"$r-idem\"}" "$url/lock"
    proxy_case valid "POST /lock, the key for another owner" 422 "${json[@]}" -H "Idempotency-Key: $key" -d "{\"resource\":\"$r-idem\",\"owner\":\"c\"}" "$url/lock"
    proxy_case valid "POST /sessions" 201 "${json[@]}" -d '{"ttl_ms":60000}' "$url/sessions"
    local sid
    sid=$(jq -r .session "$tmp/body")
    proxy_case valid "POST /lock in a session" 200 "${json[@]}" -d "{\"resource\":\"$r-ses\",\"session\":\"$sid\"}" "$url/lock"
    proxy_case valid "POST /lock of a set in a session" 200 "${json[@]}" -d "{\"resources\":[\"$r-ses1\",\"$r-ses2\"],\"session\":\"$sid\"}" "$url/lock"
    proxy_case invalid "POST /lock of a set in a session, with ttl_ms" 400 "${json[@]}" -d "{\"resources\":[\"$r-ses3\",\"$r-ses4\"],\"session\":\"$sid\",\"ttl_ms\":1000}" "$url/lock"
    proxy_case valid "POST /sessions/{session}/renew" 200 "${json[@]}" -d '{}' "$url/sessions/$sid/renew"
    proxy_case valid "GET /sessions/{session}" 200 "$url/sessions/$sid"
    proxy_case valid "DELETE /sessions/{session}" 200 -X DELETE "$url/sessions/$sid"
    proxy_case valid "GET /sessions/{session}, ended" 404 "$url/sessions/$sid"
    proxy_case valid "POST /sessions/{session}/renew, ended" 404 "${json[@]}" -d '{}' "$url/sessions/$sid/renew"
    proxy_case valid "DELETE /sessions/{session}, ended" 404 -X DELETE "$url/sessions/$sid"
    proxy_case valid "POST /lock in an ended session" 404 "${json[@]}" -d "{\"resource\":\"$r-ses\",\"session\":\"$sid\"}" "$url/lock"
    proxy_case valid "POST /lock of a set in an ended session" 404 "${json[@]}" -d "{\"resources\":[\"$r-ses1\",\"$r-ses2\"],\"session\":\"$sid\"}" "$url/lock"
    proxy_case invalid "POST /sessions, no ttl_ms" 400 "${json[@]}" -d '{}' "$url/sessions"
    proxy_case invalid "POST /lock, an unknown field" 400 "${json[@]}" -d "{\"resource\":\"$r\",\"tll_ms\":100}" "$url/lock"
    proxy_case invalid "POST /lock, text/plain" 415 -H 'Content-Type: text/plain' -d "{\"resource\":\"$r\"}" "$url/lock"
    proxy_case invalid "POST /lock, a short Idempotency-Key" 400 "${json[@]}" -H 'Idempotency-Key: short' -d "{\"resource\":\"$r\"}" "$url/lock"
    proxy_case invalid "POST /lock, a bad name" 400 "${json[@]}" -d '{"resource":"a b"}' "$url/lock"
    proxy_case invalid "POST /lock, a JSON body over 16 KiB" 413 "${json[@]}" -d "{\"resource\":\"$(head -c 17000 /dev/zero | tr '\0' a)\"}" "$url/lock"
    proxy_case invalid "PUT /resources/{resource}, Fencing-Token 020" 400 -X PUT -H 'Fencing-Token: 020' --data-binary x "$url/resources/$r"
    proxy_case invalid "PUT /resources/{resource}, no Fencing-Token" 400 -X PUT --data-binary x "$url/resources/$r"
    proxy_case invalid "GET /resources/{resource}, Fencing-Token 020" 400 -H 'Fencing-Token: 020' "$url/resources/$r"
    proxy_case invalid "POST /healthz" 405 -X POST "$url/healthz"
    proxy_case invalid "POST /livez" 405 -X POST "$url/livez"
    proxy_case invalid "GET /locks, limit 0" 400 "$url/locks?limit=0"
    proxy_case invalid "POST /admin/release, no reason" 400 "${json[@]}" -d "{\"resource\":\"$r\"}" "$url/admin/release"
    proxy_case invalid "DELETE /locks/{resource}" 405 -X DELETE "$url/locks/$r"
    proxy_case valid "GET /readyz without a token" 401 --no-auth "$url/readyz"
    proxy_case valid "POST /lock with a token no client has" 401 --no-auth -H 'Authorization: Bearer nobody-has-it' "${json[@]}" -d "{\"resource\":\"$r\"}" "$url/lock"
    proxy_case valid "GET /locks/{resource} outside the client's scopes" 403 --no-auth -H "Authorization: Bearer $token_narrow" "$url/locks/$r"
    proxy_case valid "POST /lock, an operation the client may not do" 403 --no-auth -H "Authorization: Bearer $token_narrow" "${json[@]}" -d "{\"resource\":\"narrow:x\"}" "$url/lock"
    proxy_case invalid "headers over 2.5 KiB" 431 -H "X-Pad: $(head -c 4000 /dev/zero | tr '\0' a)" "$url/healthz"
    # HEAD is not sent: Prism 5 reads the empty body of a HEAD answer as JSON and fails itself.
    [ "$proxy_fail" -eq 0 ] || die "Prism found answers that do not match api/openapi.yaml (above)"
    echo "check-openapi: $cases cases through Prism: every answer matches api/openapi.yaml"
}

case "${1:-}" in
    install) cmd_install ;;
    proxy) shift; cmd_proxy "$@" ;;
    lint) cmd_lint ;;
    routes) shift; cmd_routes "$@" ;;
    spec-routes) spec_routes ;;
    *) die "usage: check-openapi.sh install | lint | routes PATH/TO/fencegate | proxy PATH/TO/fencegate | spec-routes" ;;
esac
