# The helpers both demos use (scripts/demo.sh, scripts/demo-transfer.sh), sourced by them:
# the temp dir, the optional bearer token ($FENCEGATE_AUTH_TOKEN), and req, which prints each
# request and its answer. Sets $url from the demo's first argument, $FENCEGATE_URL, or
# http://127.0.0.1:8080. Needs only curl and jq.

url=${1:-${FENCEGATE_URL:-http://127.0.0.1:8080}}
url=${url%/}
for tool in curl jq; do
    command -v "$tool" >/dev/null 2>&1 || { echo "demo: $tool is not installed" >&2; exit 2; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

auth=()
if [ -n "${FENCEGATE_AUTH_TOKEN:-}" ]; then auth=(-H "Authorization: Bearer $FENCEGATE_AUTH_TOKEN"); fi
if [ -n "${FENCEGATE_CACERT:-}" ]; then auth+=(--cacert "$FENCEGATE_CACERT"); fi
if [ -n "${FENCEGATE_CERT:-}" ]; then auth+=(--cert "$FENCEGATE_CERT" --key "${FENCEGATE_KEY:?FENCEGATE_CERT needs FENCEGATE_KEY}"); fi

fail() { echo "demo: FAIL: $*" >&2; exit 1; }
step() { printf '\n## %s\n' "$*"; }

# req [-q] METHOD PATH [BODY [CONTENT-TYPE [EXTRA-HEADER...]]]
# Sends one request, prints it and the answer (unless -q), and leaves the status in $status,
# the body in $body and the response headers in $tmp/headers.
req() {
    local quiet=0
    if [ "$1" = -q ]; then quiet=1; shift; fi
    local method=$1 path=$2 data=${3-} ctype=${4:-application/json}
    shift 2
    if [ $# -gt 0 ]; then shift; fi
    if [ $# -gt 0 ]; then shift; fi
    local args=(-sS -X "$method" -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}'
        --max-time 10 "${auth[@]}")
    local shown=("curl")
    [ "$method" = GET ] || shown+=("-X $method")
    shown+=("$url$path")
    if [ -n "$data" ]; then
        args+=(-H "Content-Type: $ctype" --data-binary "$data")
        shown+=("-H 'Content-Type: $ctype'")
    fi
    local h
    for h in "$@"; do args+=(-H "$h"); shown+=("-H '$h'"); done
    [ -n "$data" ] && shown+=("-d '$data'")
    status=$(curl "${args[@]}" "$url$path") || fail "curl could not reach $url$path"
    body=$(cat "$tmp/body")
    if [ "$quiet" -eq 0 ]; then
        echo "\$ ${shown[*]}"
        echo "< HTTP $status"
        # The headers that matter to the story.
        grep -iE '^(retry-after|fencing-token|etag|content-type):' "$tmp/headers" \
            | tr -d '\r' | sed 's/^/< /' || true
        echo "$body"
    fi
}

expect_status() { [ "$status" = "$1" ] || fail "$2: expected HTTP $1, got $status: $body"; }
json() {
    local v
    v=$(jq -r "$1" <<<"$body" 2>/dev/null) || fail "answer is not JSON: $body"
    [ "$v" != null ] || fail "answer has no $1: $body"
    printf '%s\n' "$v"
}


# await_expiry RESOURCE: polls GET /locks/RESOURCE (quietly) until it is free, for at most
# 10 s (the demos' leases are 2 s), and says how long that took.
await_expiry() {
    local start deadline polls=0
    start=$(date +%s%N)
    deadline=$((start + 10000000000))
    while :; do
        req -q GET "/locks/$1"
        expect_status 200 "lock state"
        polls=$((polls + 1))
        [ "$(json .locked)" = false ] && break
        [ "$(date +%s%N)" -lt "$deadline" ] || fail "the ${lease_ms} ms lease had not expired after 10 s"
        sleep 0.1
    done
    echo "# ... polled $polls times; the lease ran out $(( ($(date +%s%N) - start) / 1000000 )) ms later:"
}
