#!/usr/bin/env bash
# Runs the commands of docs/operations.md "Securing fencegate" (between <!-- securing:begin -->
# and <!-- securing:end -->) against this build's fencegate and fencectl and a private Redis,
# on a free port instead of 8443, then checks what they claim: billing's lock went through,
# ops' /lock was 403, and after the SIGHUP billing's new token works and its old one is 401.
# Usage: docs.sh PATH/TO/fencegate
source "$(dirname "$0")/sec_common.sh"
sec_setup "${1:?usage: docs.sh PATH/TO/fencegate}"
doc=$here/../../docs/operations.md
block=$(sed -n '/<!-- securing:begin -->/,/<!-- securing:end -->/p' "$doc" | sed '1,2d;$d' | sed '$d')
[ -n "$block" ] || fail "no securing block in $doc"
port=$(fg_topo_free_port)
mkdir -p "$SEC_DIR/doc/bin"
bin_dir=$(cd "$(dirname "$SEC_BIN")" && pwd)
ln -s "$bin_dir/$(basename "$SEC_BIN")" "$SEC_DIR/doc/bin/fencegate"
ln -s "$bin_dir/fencectl/fencectl" "$SEC_DIR/doc/bin/fencectl"
{
    echo 'set -euo pipefail'
    sed -e "s/8443/$port/g" -e "s#redis://127.0.0.1:6379#unix://$FG_REDIS_SOCK#" <<<"$block"
    cat <<'CHECKS'
old=$(cat clients.json.old)
new=$(cat billing.token)
code() { curl -s -o /dev/null -w '%{http_code}' --cacert ca.pem -H "Authorization: Bearer $1" "https://localhost:PORT/locks/billing:x" || true; }
deadline=$((SECONDS + 10))
until [ "$(code "$new")" = 200 ]; do
    [ $SECONDS -lt $deadline ] || { echo "FAIL: the new token after SIGHUP"; exit 1; }
    sleep 0.05
done
[ "$(code "$old")" = 401 ] || { echo "FAIL: the old token after SIGHUP"; exit 1; }
kill %1
wait %1 || true
CHECKS
} >"$SEC_DIR/doc/run.sh"
sed -i "s/PORT/$port/" "$SEC_DIR/doc/run.sh"
# The old token, for the check: saved just before the block replaces it.
sed -i 's/^openssl rand -hex 32 > billing.token$/{ [ -f billing.token ] \&\& cp billing.token clients.json.old; true; }; &/' "$SEC_DIR/doc/run.sh"
(cd "$SEC_DIR/doc" && PATH=$SEC_DIR/doc/bin:$PATH timeout 60 bash run.sh >out 2>&1) \
    || { cat "$SEC_DIR/doc/out" >&2; fail "the commands of 'Securing fencegate' failed"; }
out=$(cat "$SEC_DIR/doc/out")
case "$out" in *"token "[0-9]*) ;; *) fail "billing's fencectl lock did not run: $out" ;; esac
case "$out" in *'"error":"forbidden"'*"may not 'lock'"*) ;; *) fail "ops' /lock was not 403: $out" ;; esac
echo "ok: the commands of docs/operations.md 'Securing fencegate' do what it says"
