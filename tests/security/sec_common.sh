# shellcheck shell=bash
# Sourced by the security tests (tests/security/*.sh): a private redis-server and fencegate
# processes on free ports, stopped by PID at exit.
#
#   sec_setup BIN           a temp dir ($SEC_DIR), a redis-server in it; EXIT trap set
#   sec_gateway NAME ARGS…  starts BIN on a free port with ARGS, LMDB in $SEC_DIR/NAME; sets
#                           SEC_PORT and SEC_PID; waits up to 10 s until the port accepts
#   fg_topo_stop_pid PID    (tests/common/topo.sh) stops one of them
#   fail MSG                prints FAIL: MSG and exits 1
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../common/redis.sh
source "$here/../common/redis.sh"

SEC_BIN= SEC_DIR= SEC_PORT= SEC_PID=
SEC_PIDS=()

fail() { echo "FAIL: $*" >&2; exit 1; }

sec__cleanup() {
    local rc=$? p
    for p in "${SEC_PIDS[@]}"; do fg_topo_stop_pid "$p"; done
    fg_redis_stop
    # A sanitizer build reports into the gateways' logs (leaks at exit): any report fails.
    if [ -n "$SEC_DIR" ] && grep -lE 'AddressSanitizer|LeakSanitizer|runtime error:' \
        "$SEC_DIR"/*/log 2>/dev/null; then
        grep -hE -A20 'AddressSanitizer|LeakSanitizer|runtime error:' "$SEC_DIR"/*/log >&2
        echo "FAIL: a sanitizer report in a gateway's log (above)" >&2
        rc=1
    fi
    [ -n "$SEC_DIR" ] && rm -rf "$SEC_DIR"
    exit "$rc"
}

sec_setup() {
    SEC_BIN=$1
    [ -x "$SEC_BIN" ] || fail "fencegate binary not found: $SEC_BIN"
    command -v curl >/dev/null || fail "curl not found; run scripts/install-deps.sh"
    command -v openssl >/dev/null || fail "openssl not found; run scripts/install-deps.sh"
    SEC_DIR=$(mktemp -d)
    trap sec__cleanup EXIT
    fg_redis_start "$SEC_DIR"
}

sec_gateway() {
    local name=$1 deadline
    shift
    SEC_PORT=$(fg_topo_free_port)
    mkdir -p "$SEC_DIR/$name"
    "$SEC_BIN" --listen "127.0.0.1:$SEC_PORT" --redis "unix://$FG_REDIS_SOCK" \
        --data "$SEC_DIR/$name/data" --threads 2 "$@" 2>"$SEC_DIR/$name/log" &
    SEC_PID=$!
    SEC_PIDS+=("$SEC_PID")
    deadline=$((SECONDS + 10))
    until (exec 3<>"/dev/tcp/127.0.0.1/$SEC_PORT") 2>/dev/null; do
        if [ $SECONDS -ge $deadline ] || ! kill -0 "$SEC_PID" 2>/dev/null; then
            cat "$SEC_DIR/$name/log" >&2
            fail "fencegate $name did not start"
        fi
        sleep 0.05
    done
}

# Makes a test CA and, signed by it, a server certificate for 127.0.0.1/localhost and client
# certificates with the given CNs, in DIR: ca.pem, server.pem, server.key, CN.pem, CN.key.
sec_make_certs() {
    local dir=$1 cn
    shift
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj /CN=fencegate-test-ca -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost \
        -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 2 -out "$dir/server.pem" \
        -extfile <(printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n') 2>/dev/null
    for cn in "$@"; do
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$cn" \
            -keyout "$dir/$cn.key" -out "$dir/$cn.csr" 2>/dev/null
        openssl x509 -req -in "$dir/$cn.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 2 -out "$dir/$cn.pem" \
            -extfile <(printf 'extendedKeyUsage=clientAuth\n') 2>/dev/null
    done
}
