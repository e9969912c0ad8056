#!/usr/bin/env bash
# PostgreSQL over TLS: a PostgreSQL 15 with ssl = on, a test CA's certificate and only
# hostssl connections allowed; the gateway's store works through
# postgres://…?sslmode=verify-full&sslrootcert=CA, its connections are TLS (pg_stat_ssl), and
# a CA that did not sign the server's certificate stops the start.
# Usage: pg_tls.sh PATH/TO/fencegate
source "$(dirname "$0")/sec_common.sh"
# shellcheck source=../common/pg.sh
source "$here/../common/pg.sh"
sec_setup "${1:?usage: pg_tls.sh PATH/TO/fencegate}"
# The gateways first: PostgreSQL's smart shutdown waits for their connections.
stop_all() {
    local rc=$? p
    for p in "${SEC_PIDS[@]}"; do fg_topo_stop_pid "$p"; done
    fg_pg_stop
    (exit "$rc") # sec__cleanup exits with the script's status
    sec__cleanup
}
trap stop_all EXIT
c=$SEC_DIR/certs
sec_make_certs "$c"
sec_make_certs "$SEC_DIR/other"
chmod 755 "$SEC_DIR" # the postgres user reaches its directory inside
mkdir -p "$SEC_DIR/pg"
fg_pg_start "$SEC_DIR/pg"
data=$SEC_DIR/pg/data
cp "$c/server.pem" "$data/server.crt"
cp "$c/server.key" "$data/server.key"
chmod 600 "$data/server.key"
[ "$(id -u)" -ne 0 ] || chown postgres: "$data/server.crt" "$data/server.key"
# TLS only over TCP: the plain host lines become hostssl.
sed -i 's/^host\([[:space:]]\)/hostssl\1/' "$data/pg_hba.conf"
fg_pg_psql "ALTER SYSTEM SET ssl = on"
fg_pg_psql "SELECT pg_reload_conf()" >/dev/null
ssl_on() { [ "$(fg_pg_psql 'SHOW ssl')" = on ]; }
fg_topo_wait 10 "PostgreSQL's ssl = on" ssl_on
tls_url="postgresql://postgres:$FG_PG_PASSWORD@localhost:$FG_PG_PORT/postgres"

# A plain connection is refused by the server: the test really needs TLS.
PGPASSWORD=$FG_PG_PASSWORD "$FG_PG_BIN/psql" "$tls_url?sslmode=disable" -c 'SELECT 1' \
    >/dev/null 2>&1 && fail "PostgreSQL accepted a connection without TLS"

sec_gateway pg --store "$tls_url?sslmode=verify-full&sslrootcert=$c/ca.pem"
base=http://127.0.0.1:$SEC_PORT
lock=$(curl -s -H 'Content-Type: application/json' --data-binary '{"resource":"sec:pg"}' "$base/lock")
token=$(sed -n 's/.*"token":\([0-9]*\).*/\1/p' <<<"$lock")
[ -n "$token" ] || fail "/lock over a TLS store: $lock"
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H "Fencing-Token: $token" \
    --data-binary 'v1' "$base/resources/sec:pg")
[ "$code" = 200 ] || fail "PUT over a TLS store: $code"
[ "$(curl -s "$base/resources/sec:pg")" = v1 ] || fail "GET over a TLS store"
n=$(fg_pg_psql "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
                WHERE application_name = 'fencegate' AND ssl")
[ "$n" -ge 1 ] || fail "no fencegate connection uses TLS (pg_stat_ssl)"
echo "ok: the store over sslmode=verify-full works, its $n connection(s) use TLS"

out=$("$SEC_BIN" --listen "127.0.0.1:$(fg_topo_free_port)" --redis "unix://$FG_REDIS_SOCK" \
    --store "$tls_url?sslmode=verify-full&sslrootcert=$SEC_DIR/other/ca.pem" 2>&1 &
      pid=$!; wait $pid) && fail "a store with a CA that did not sign the server's certificate started"
case "$out" in *"certificate verify failed"* | *"certificate"*) ;; *) fail "the refusal does not say why: $out" ;; esac
echo "ok: a server certificate of another CA stops the start"
