#!/usr/bin/env bash
# Regenerates the docs' transcripts from a real run, or checks that they still match one.
#
#   scripts/transcripts.sh [--check] [PATH/TO/fencegate]
#
# The binary defaults to build-run/gateway/fencegate (what scripts/run.sh builds). For each
# transcript, in order, it starts a fresh redis-server (a unix socket in a temp dir, no
# persistence) and a fresh fencegate (a free loopback port, a temp data dir), so tokens start
# from 1 every time, runs the steps, and stops both by PID. The transcripts:
#   first-requests  the curl calls of "First requests": a lock with the defaults, its state, a
#                   token-checked write, a read and the unlock;
#   gc-pause        scripts/demo.sh, on the resource gc-pause-demo;
#   transfer        scripts/demo-transfer.sh, on the accounts transfer-demo-account-a and -b.
# Each sits between <!-- transcript:NAME:begin --> and <!-- transcript:NAME:end -->: the
# first two in README.md, transfer in docs/api.md ("The transfer demo"). The gateway's port
# is shown as 8080, the default.
#
# Without --check, the blocks are rewritten with the new run. With --check (the ctest
# scripts_transcripts), nothing is written: it exits 1 with a diff when a block differs from
# the new run once both are normalised (normalise() lists what legitimately varies between
# runs), and 0 when every block matches.
# A missing redis-server, redis-cli, curl or jq fails; it never skips.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# doc_of NAME: the file that holds NAME's transcript.
doc_of() { if [ "$1" = transfer ]; then echo "$root/docs/api.md"; else echo "$root/README.md"; fi; }

check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
gateway=${1:-$root/build-run/gateway/fencegate}

die() { echo "transcripts: $*" >&2; exit 2; }

for tool in redis-server redis-cli curl jq; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (scripts/install-deps.sh installs it)"
done
[ -x "$gateway" ] || die "no fencegate at $gateway (build it: bash scripts/run.sh, or name it)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fg-transcripts.XXXXXX")
redis_pid="" gw_pid="" url=""

stop_pid() { # stop_pid PID: SIGTERM, up to 10 s, then SIGKILL
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
stop_all() {
    if [ -n "$gw_pid" ]; then stop_pid "$gw_pid"; gw_pid=""; fi
    if [ -n "$redis_pid" ]; then stop_pid "$redis_pid"; redis_pid=""; fi
}
cleanup() {
    local rc=$?
    stop_all
    # 1 is a difference, shown by the diff; anything else is a failed run.
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ] && [ -f "$tmp/run/gateway.log" ]; then
        echo "----- last lines of the gateway's log" >&2
        tail -n 20 "$tmp/run/gateway.log" >&2
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# fresh: stops the previous Redis and gateway, starts new ones with no data, sets $url.
fresh() {
    local deadline p i
    stop_all
    rm -rf "$tmp/run"
    mkdir -p "$tmp/run/redis" "$tmp/run/gw"
    redis-server --port 0 --unixsocket "$tmp/run/redis/redis.sock" --dir "$tmp/run/redis" \
        --save '' --appendonly no --daemonize no --logfile "$tmp/run/redis/redis.log" &
    redis_pid=$!
    deadline=$((SECONDS + 10))
    until redis-cli -s "$tmp/run/redis/redis.sock" ping 2>/dev/null | grep -q PONG; do
        kill -0 "$redis_pid" 2>/dev/null || die "redis-server exited at start"
        [ "$SECONDS" -lt "$deadline" ] || die "redis-server did not answer PING within 10 s"
        sleep 0.05
    done
    for ((i = 0; i < 5; i++)); do
        # Below the kernel's ephemeral range, and nothing answers there right now.
        p=$((10000 + RANDOM % 22000))
        if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then continue; fi
        "$gateway" --listen "127.0.0.1:$p" --redis "unix://$tmp/run/redis/redis.sock" \
            --data "$tmp/run/gw" >"$tmp/run/gateway.log" 2>&1 &
        gw_pid=$!
        deadline=$((SECONDS + 15))
        until curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$p/healthz" 2>/dev/null; do
            kill -0 "$gw_pid" 2>/dev/null || break
            [ "$SECONDS" -lt "$deadline" ] || die "fencegate did not answer /healthz within 15 s"
            sleep 0.05
        done
        if kill -0 "$gw_pid" 2>/dev/null; then
            url=http://127.0.0.1:$p
            return 0
        fi
        wait "$gw_pid" 2>/dev/null || true
        gw_pid="" # the port was taken meanwhile: try another
    done
    die "fencegate would not start (log: $tmp/run/gateway.log)"
}

# show ARG...: prints "$ ARG..." (an argument with anything but [A-Za-z0-9_./:=@-] in single
# quotes), runs it, and prints its output, ending it with a newline if it has none (curl
# prints JSON answers without one).
show() {
    local a line="\$"
    for a in "$@"; do
        if [[ "$a" =~ ^[A-Za-z0-9_./:=@-]+$ ]]; then line+=" $a"; else line+=" '$a'"; fi
    done
    echo "$line"
    "$@" >"$tmp/out"
    cat "$tmp/out"
    if [ -s "$tmp/out" ] && [ "$(tail -c 1 "$tmp/out" | od -An -c | tr -d ' ')" != '\n' ]; then
        echo
    fi
}

transcript_first_requests() {
    show curl -s -X POST "$url/lock" -H 'Content-Type: application/json' -d '{"resource":"orders"}'
    local owner
    owner=$(jq -r .owner "$tmp/out")
    show curl -s "$url/locks/orders"
    show curl -s -X PUT "$url/resources/orders" -H 'Fencing-Token: 1' -d 'first value'
    show curl -s "$url/resources/orders"
    show curl -s -X POST "$url/unlock" -H 'Content-Type: application/json' -d "{\"resource\":\"orders\",\"owner\":\"$owner\"}"
}

transcript_gc_pause() {
    echo "\$ bash scripts/demo.sh $url"
    FENCEGATE_DEMO_RESOURCE=gc-pause-demo bash "$root/scripts/demo.sh" "$url"
}

transcript_transfer() {
    echo "\$ bash scripts/demo-transfer.sh $url"
    FENCEGATE_DEMO_RESOURCE=transfer-demo bash "$root/scripts/demo-transfer.sh" "$url"
}

# The block of transcript NAME, fences included, from a new run, into FILE.
generate() {
    local name=$1 file=$2
    fresh
    echo '```console' >"$file.raw"
    # A plain statement, so that set -e stops at a failing step (the steps' own output, on
    # stderr, says which).
    "transcript_${name//-/_}" >>"$file.raw"
    echo '```' >>"$file.raw"
    # The port is a free one; the reader's gateway is on the default.
    sed "s#${url//./\\.}#http://127.0.0.1:8080#g" "$file.raw" >"$file"
}

# What legitimately differs between two runs, masked: random owners (32 hex digits), the
# lease left when the state is read, and how long the demo polled for the expiry.
normalise() {
    sed -E -e 's/"owner":"[0-9a-f]{32}"/"owner":"OWNER"/g' \
        -e 's/("locked":true,"token":[0-9]+,"holds":[0-9]+,"ttl_ms":)[0-9]+/\1TTL_LEFT/g' \
        -e 's/polled [0-9]+ times; the lease ran out [0-9]+ ms later/polled N times; the lease ran out N ms later/' \
        "$1"
}

# The lines between NAME's markers in its doc, into FILE. Fails when a marker is missing.
extract() {
    local name=$1 file=$2 doc
    doc=$(doc_of "$name")
    awk -v b="<!-- transcript:$name:begin -->" -v e="<!-- transcript:$name:end -->" '
        $0 == e { inside = 0; ended = 1 }
        inside { print }
        $0 == b { inside = 1; began = 1 }
        END { exit (began && ended) ? 0 : 1 }' "$doc" >"$file" \
        || die "$doc has no <!-- transcript:$name:begin/end --> markers"
}

# Replaces the lines between NAME's markers in its doc with FILE.
replace() {
    local name=$1 file=$2 doc
    doc=$(doc_of "$name")
    awk -v b="<!-- transcript:$name:begin -->" -v e="<!-- transcript:$name:end -->" -v f="$file" '
        $0 == e { inside = 0 }
        !inside { print }
        $0 == b { inside = 1; while ((getline line < f) > 0) print line }' \
        "$doc" >"$tmp/doc.new"
    cat "$tmp/doc.new" >"$doc"
}

status=0
for name in first-requests gc-pause transfer; do
    generate "$name" "$tmp/$name.new"
    extract "$name" "$tmp/$name.old"
    if [ "$check" -eq 1 ]; then
        if ! diff -u --label "$(basename "$(doc_of "$name")") ($name)" --label "a new run ($name)" \
            <(normalise "$tmp/$name.old") <(normalise "$tmp/$name.new"); then
            echo "transcripts: $(basename "$(doc_of "$name")")'s $name transcript differs from a new run (above);" \
                "run: bash scripts/transcripts.sh" >&2
            status=1
        else
            echo "transcripts: $name matches a new run"
        fi
    else
        replace "$name" "$tmp/$name.new"
        echo "transcripts: rewrote $name"
    fi
done
exit "$status"
