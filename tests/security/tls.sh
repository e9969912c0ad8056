#!/usr/bin/env bash
# TLS on the listener against the real binary: start-up refusals naming the file, HTTPS with
# curl --cacert, the protocol versions with openssl s_client (1.1 refused, 1.2 and 1.3
# accepted), no plain HTTP on a TLS listener, and mutual TLS accepted and refused.
# Usage: tls.sh PATH/TO/fencegate
source "$(dirname "$0")/sec_common.sh"
sec_setup "${1:?usage: tls.sh PATH/TO/fencegate}"
c=$SEC_DIR/certs
sec_make_certs "$c" alice
sec_make_certs "$SEC_DIR/other" mallory # another CA: its client certificate must not pass

# Start-up refusals: each stops the start (exit 2) with a message naming the file.
refused() {
    local want=$1 out rc=0
    shift
    out=$("$SEC_BIN" --listen 127.0.0.1:1 --redis "unix://$FG_REDIS_SOCK" --data "$SEC_DIR/x" \
        "$@" 2>&1 >/dev/null) || rc=$?
    [ "$rc" -eq 2 ] || fail "fencegate $* exited $rc, not 2: $out"
    case "$out" in *"$want"*) ;; *) fail "fencegate $*: '$out' does not say '$want'" ;; esac
}
refused "--tls-cert $c/none.pem: cannot open it" --tls-cert "$c/none.pem" --tls-key "$c/server.key"
refused "--tls-key $c: not a regular file (a directory)" --tls-cert "$c/server.pem" --tls-key "$c"
refused "--tls-key $c/alice.key does not go with --tls-cert $c/server.pem" \
    --tls-cert "$c/server.pem" --tls-key "$c/alice.key"
refused "--tls-cert $c/server.key: no PEM certificate" --tls-cert "$c/server.key" \
    --tls-key "$c/server.key"
refused "--tls-key $c/server.pem: no PEM private key" --tls-cert "$c/server.pem" \
    --tls-key "$c/server.pem"
refused "--tls-cert and --tls-key go together" --tls-cert "$c/server.pem"
refused "--tls-client-ca $c/server.key: no PEM certificate" --tls-cert "$c/server.pem" \
    --tls-key "$c/server.key" --tls-client-ca "$c/server.key"
echo "ok: bad certificate files stop the start, naming the file"

# HTTPS only.
sec_gateway tls --tls-cert "$c/server.pem" --tls-key "$c/server.key"
url=https://127.0.0.1:$SEC_PORT
[ "$(curl -sS --cacert "$c/ca.pem" "$url/healthz")" = '{"status":"ok"}' ] || fail "HTTPS /healthz"
[ "$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$c/ca.pem" "$url/readyz")" = 200 ] \
    || fail "HTTPS /readyz"
curl -sS --cacert "$SEC_DIR/other/ca.pem" "$url/healthz" >/dev/null 2>&1 \
    && fail "a client trusting another CA accepted the gateway's certificate"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$SEC_PORT/healthz" || true)
[ "$code" = 000 ] || fail "plain HTTP on the TLS listener answered $code"
echo "ok: HTTPS with curl --cacert; plain HTTP gets no answer"
# The test certificate expires in 2 days: the log says so once, naming the file.
fg_topo_wait 10 "the expiry warning" \
    grep -q "warn --tls-cert $c/server.pem expires in [0-9]* hours" "$SEC_DIR/tls/log" \
    || fail "no expiry warning in the log: $(cat "$SEC_DIR/tls/log")"
[ "$(grep -c 'expires in' "$SEC_DIR/tls/log")" = 1 ] || fail "the expiry warning is repeated"
echo "ok: a certificate that expires within a week is logged once"

# Protocol versions. SECLEVEL=0 lets OpenSSL offer TLS 1.1 at all: the refusal is the
# gateway's.
proto() {
    echo | openssl s_client -connect "127.0.0.1:$SEC_PORT" -CAfile "$c/ca.pem" "$@" 2>&1 \
        | sed -n 's/^New, \(TLSv1\.[0-9]\|(NONE)\), Cipher is .*/\1/p' | head -1
}
[ "$(proto -tls1_1 -cipher 'DEFAULT:@SECLEVEL=0')" = "(NONE)" ] || fail "TLS 1.1 was accepted"
[ "$(proto -tls1_2)" = TLSv1.2 ] || fail "TLS 1.2 was refused"
[ "$(proto -tls1_3)" = TLSv1.3 ] || fail "TLS 1.3 was refused"
echo "ok: TLS 1.1 refused, 1.2 and 1.3 accepted"

# Mutual TLS.
sec_gateway mtls --tls-cert "$c/server.pem" --tls-key "$c/server.key" --tls-client-ca "$c/ca.pem"
url=https://127.0.0.1:$SEC_PORT
get() { curl -s -o "$SEC_DIR/body" -w '%{http_code}' --cacert "$c/ca.pem" "$@" || true; }
[ "$(get "$url/healthz")" = 200 ] || fail "/healthz without a client certificate"
[ "$(get "$url/readyz")" = 401 ] || fail "/readyz without a client certificate: not 401"
grep -q 'needs a client certificate' "$SEC_DIR/body" || fail "401 body: $(cat "$SEC_DIR/body")"
code=$(get --cert "$SEC_DIR/other/mallory.pem" --key "$SEC_DIR/other/mallory.key" "$url/readyz")
[ "$code" = 401 ] || [ "$code" = 000 ] || fail "a certificate of another CA got $code"
[ "$(get --cert "$c/alice.pem" --key "$c/alice.key" "$url/readyz")" = 200 ] \
    || fail "/readyz with a good client certificate: $(cat "$SEC_DIR/body")"
echo "ok: mutual TLS accepts the CA's client certificate, refuses none and another CA's"

# fencectl speaks https:// with --cacert, and shows a client certificate with --cert/--key.
fencectl=$(dirname "$SEC_BIN")/fencectl/fencectl
[ -x "$fencectl" ] || fail "fencectl not found beside $SEC_BIN"
"$fencectl" status sec:a --url "$url" --cacert "$c/ca.pem" --cert "$c/alice.pem" \
    --key "$c/alice.key" >"$SEC_DIR/out" || fail "fencectl over mutual TLS: $(cat "$SEC_DIR/out")"
grep -q '"locked":false' "$SEC_DIR/out" || fail "fencectl status: $(cat "$SEC_DIR/out")"
"$fencectl" status sec:a --url "$url" --cacert "$c/ca.pem" >/dev/null 2>&1 \
    && fail "fencectl without a client certificate was let through"
FENCEGATE_CACERT=$SEC_DIR/other/ca.pem "$fencectl" status sec:a --url "$url" --cert "$c/alice.pem" \
    --key "$c/alice.key" >/dev/null 2>&1 && fail "fencectl trusted a gateway of another CA"
echo "ok: fencectl over https:// with --cacert, --cert and --key"

# The curl demo over mutual TLS.
FENCEGATE_CACERT=$c/ca.pem FENCEGATE_CERT=$c/alice.pem FENCEGATE_KEY=$c/alice.key \
    bash "$here/../../scripts/demo.sh" "$url" >"$SEC_DIR/demo.out" 2>&1 \
    || { cat "$SEC_DIR/demo.out" >&2; fail "the demo over https:// with a client certificate"; }
echo "ok: scripts/demo.sh over https:// with FENCEGATE_CACERT, FENCEGATE_CERT, FENCEGATE_KEY"
