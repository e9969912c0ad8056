#!/usr/bin/env bash
# --clients against the real binary: a bad file stops the start naming the problem; SIGHUP
# reads it again (a good file takes effect for new requests, a bad one is refused with a log
# line and the old one stays); malformed Authorization headers and a 10 MB token get a clear
# answer; a client certificate's CN names a client.
# Usage: clients.sh PATH/TO/fencegate
source "$(dirname "$0")/sec_common.sh"
sec_setup "${1:?usage: clients.sh PATH/TO/fencegate}"
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
# client NAME TOKEN OPS PREFIX: one entry of a clients file.
client() {
    printf '{"name": "%s", "token_sha256": "%s", "allow": [{"prefix": "%s", "ops": [%s]}]}' \
        "$1" "$(sha "$2")" "$4" "$3"
}
f=$SEC_DIR/clients.json

# A bad file at start: exit 2, the message names the file and the problem.
refused() {
    local want=$1 out rc=0
    out=$("$SEC_BIN" --check-config --clients "$f" --redis "unix://$FG_REDIS_SOCK" 2>&1) || rc=$?
    [ "$rc" -eq 2 ] || fail "a clients file ($want) exited $rc: $out"
    case "$out" in *"--clients $f"*"$want"*) ;; *) fail "'$out' does not say '$want'" ;; esac
}
echo '{"clients": [' >"$f"
refused "line"
echo "{\"clients\": [$(client a ta '"lock"' ''), $(client a tb '"read"' '')]}" >"$f"
refused "the name 'a' is given twice"
echo "{\"clients\": [$(client a ta '"lock"' ''), $(client b ta '"read"' '')]}" >"$f"
refused "clients 'a' and 'b' have the same token_sha256"
echo "{\"clients\": [$(client a ta '"lock", "wirte"' '')]}" >"$f"
refused "unknown operation 'wirte'"
echo '{"clients": [], "extra": 1}' >"$f"
refused "unknown field 'extra'"
echo "{\"clients\": [$(client a ta '"lock"' 'bad prefix')]}" >"$f"
refused "prefix is not the beginning of a resource name"
rm -f "$f" && mkdir "$f"
refused "not a regular file (a directory)"
rmdir "$f"
refused "cannot open it"
out=$("$SEC_BIN" --clients "$f" --auth-token-file "$f" 2>&1) && fail "--clients with --auth-token-file"
echo "ok: bad clients files stop the start, naming the problem"

# SIGHUP: good, then bad, then a directory.
echo "{\"clients\": [$(client a ta '"read"' '')]}" >"$f"
sec_gateway hup --clients "$f"
log=$SEC_DIR/hup/log
url=http://127.0.0.1:$SEC_PORT/locks/sec:x
code() { curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $1" "$url" || true; }
[ "$(code ta)" = 200 ] || fail "client a before the reload"
[ "$(code tb)" = 401 ] || fail "an unknown token before the reload"
echo "{\"clients\": [$(client b tb '"read"' '')]}" >"$f.new" && mv "$f.new" "$f"
kill -HUP "$SEC_PID"
fg_topo_wait 10 "the reloaded clients file in force" bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer tb' '$url')\" = 200 ]"
[ "$(code ta)" = 401 ] || fail "client a, removed by the reload, still passes"
# The log is written by its own thread, up to 20 ms after the line: wait for it, as below.
fg_topo_wait 10 "the reload's log line" grep -q "SIGHUP: $f read again: 1 client(s)" "$log" \
    || fail "no log line for the reload"
echo '{"clients": [' >"$f"
kill -HUP "$SEC_PID"
fg_topo_wait 10 "the bad file's log line" grep -q "SIGHUP: --clients $f: line .*; the previous clients stay in force" "$log"
[ "$(code tb)" = 200 ] || fail "a bad reload changed the clients in force"
rm -f "$f" && mkdir "$f"
kill -HUP "$SEC_PID"
fg_topo_wait 10 "the directory's log line" grep -q "SIGHUP: --clients $f: not a regular file" "$log"
[ "$(code tb)" = 200 ] || fail "a directory reload changed the clients in force"
kill -0 "$SEC_PID" || fail "the gateway died on a reload"
echo "ok: SIGHUP takes a good file at once, refuses a bad one with a log line, keeps the old"

# Malformed Authorization headers and a 10 MB token: a clear answer, the gateway stays up.
hdr() { curl -s -o "$SEC_DIR/body" -w '%{http_code}' -H "$1" "$url" || true; }
[ "$(hdr 'Authorization: Bearer')" = 401 ] || fail "'Bearer' without a token"
[ "$(hdr 'Authorization: Bearer ')" = 401 ] || fail "'Bearer ' with an empty token"
[ "$(hdr 'Authorization: Basic dGI6')" = 401 ] || fail "Basic"
[ "$(hdr 'Authorization: Bearer tb tb')" = 401 ] || fail "a token with a space"
[ "$(hdr 'Authorization: bearer tb')" = 200 ] || fail "the scheme is case-insensitive"
head -c 10485760 /dev/zero | tr '\0' a >"$SEC_DIR/big"
printf 'Authorization: Bearer ' | cat - "$SEC_DIR/big" >"$SEC_DIR/bighdr"
got=$(curl -s -o "$SEC_DIR/body" -w '%{http_code}' -H @"$SEC_DIR/bighdr" "$url" || true)
case "$got" in 431 | 000) ;; *) fail "a 10 MB token answered $got" ;; esac
[ "$(code tb)" = 200 ] || fail "the gateway after a 10 MB token"
grep -q aaaaaaaaaaaaaaaa "$log" && fail "the long token reached the log"
echo "ok: malformed Authorization headers are 401; a 10 MB token is refused (431) early"

# A client certificate's CN names a client: alice (CN alice) needs no token.
c=$SEC_DIR/certs
sec_make_certs "$c" alice carol
echo "{\"clients\": [$(client alice ta '"read"' '')]}" >"$SEC_DIR/cn.json"
sec_gateway cn --clients "$SEC_DIR/cn.json" --tls-cert "$c/server.pem" --tls-key "$c/server.key" \
    --tls-client-ca "$c/ca.pem"
turl=https://127.0.0.1:$SEC_PORT/locks/sec:x
tcode() { curl -s -o /dev/null -w '%{http_code}' --cacert "$c/ca.pem" "$@" "$turl" || true; }
[ "$(tcode --cert "$c/alice.pem" --key "$c/alice.key")" = 200 ] || fail "alice by certificate"
[ "$(tcode --cert "$c/carol.pem" --key "$c/carol.key")" = 401 ] || fail "carol names no client"
[ "$(tcode --cert "$c/carol.pem" --key "$c/carol.key" -H 'Authorization: Bearer ta')" = 200 ] \
    || fail "carol's certificate with alice's token"
[ "$(tcode -H 'Authorization: Bearer ta')" = 401 ] || fail "a token without a client certificate"
echo "ok: a client certificate's CN names a client; a token still needs a certificate"

# Per-client waiters: one client parks at most all but an eighth of --max-waiters (12 here:
# 11); its next waiting /lock is 503 too_many_waiters naming the client, while another
# client may still wait.
all='"lock", "read", "metrics"'
echo "{\"clients\": [$(client holder th "$all" ''), $(client greedy tg "$all" ''), $(client other to "$all" '')]}" \
    >"$SEC_DIR/w.json"
sec_gateway waiters --clients "$SEC_DIR/w.json" --max-connections 64 --max-waiters 12 \
    --max-connections-per-address 0
wbase=http://127.0.0.1:$SEC_PORT
lock() { # TOKEN WAIT_MS: prints the status and the body
    curl -s -w ' %{http_code}' -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
        --data-binary "{\"resource\":\"sec:w\",\"ttl_ms\":20000,\"wait_ms\":$2}" "$wbase/lock" || true
}
case "$(lock th 0)" in *' 200') ;; *) fail "the holder's /lock" ;; esac
pids=()
for ((i = 0; i < 11; i++)); do
    lock tg 15000 >/dev/null &
    pids+=($!)
done
parked() { curl -s -H 'Authorization: Bearer th' "$wbase/metrics" | grep -q '^fencegate_waiters 11$'; }
fg_topo_wait 10 "11 parked waiters of one client" parked
out=$(lock tg 15000)
case "$out" in *too_many_waiters*"client 'greedy'"*' 503') ;; *) fail "greedy's 12th waiter: $out" ;; esac
out=$(lock to 200)
case "$out" in *'"locked"'*' 409') ;; *) fail "another client could not wait: $out" ;; esac
fg_topo_stop_pid "$SEC_PID" # the parked requests end with it
wait "${pids[@]}"
echo "ok: one client's waiters are capped below --max-waiters; another client still waits"

# Per-client connections: a connection counts under the client of its first request; one
# client holds at most half of --max-connections (16 here: 8); its next is 503
# too_many_connections and closed, while another client still connects.
sec_gateway conns --clients "$SEC_DIR/w.json" --max-connections 16 --max-connections-per-address 0
# ask FD TOKEN: one keep-alive request on the open connection FD; prints its status.
ask() {
    local fd=$1 line status len=0
    printf 'GET /locks/sec:c HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n\r\n' "$2" >&"$fd"
    IFS= read -r -t 5 line <&"$fd" || { echo none; return; }
    status=$(cut -d' ' -f2 <<<"$line")
    while IFS= read -r -t 5 line <&"$fd" && [ -n "${line%$'\r'}" ]; do
        case "${line,,}" in content-length:*) len=${line#*: } len=${len%$'\r'} ;; esac
    done
    [ "$len" -eq 0 ] || IFS= read -r -t 5 -N "$len" line <&"$fd" || true
    echo "$status"
}
fds=()
for ((i = 0; i < 8; i++)); do
    exec {fd}<>"/dev/tcp/127.0.0.1/$SEC_PORT"
    fds+=("$fd")
    [ "$(ask "$fd" tg)" = 200 ] || fail "greedy's connection $i"
done
exec {fd}<>"/dev/tcp/127.0.0.1/$SEC_PORT"
[ "$(ask "$fd" tg)" = 503 ] || fail "greedy's 9th connection was not refused"
exec {fd}>&-
exec {fd}<>"/dev/tcp/127.0.0.1/$SEC_PORT"
[ "$(ask "$fd" to)" = 200 ] || fail "another client could not connect"
exec {fd}>&-
eval "exec ${fds[0]}>&-" # one of greedy's closes
ok_again() {
    local f r
    exec {f}<>"/dev/tcp/127.0.0.1/$SEC_PORT"
    r=$(ask "$f" tg)
    exec {f}>&-
    [ "$r" = 200 ]
}
fg_topo_wait 10 "greedy connecting again after closing one" ok_again
for fd in "${fds[@]:1}"; do eval "exec $fd>&-"; done
echo "ok: one client's connections are capped at half of --max-connections"
