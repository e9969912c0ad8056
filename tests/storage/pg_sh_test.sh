#!/usr/bin/env bash
# tests/common/pg.sh, the shell side of the PostgreSQL harness the fault scenarios use: start
# in a temp dir, answer over the socket and over TCP with the password, survive a kill -9 and
# a restart with the data kept, stop by PID. A missing initdb fails (never a skip).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../common/pg.sh
source "$here/../common/pg.sh"

dir=$(mktemp -d "${TMPDIR:-/tmp}/fg-pgsh-XXXXXX")
cleanup() { fg_pg_stop; rm -rf "$dir"; }
trap cleanup EXIT

fg_pg_start "$dir"
fg_pg_psql "CREATE TABLE t (x int); INSERT INTO t VALUES (42)"
[ "$(fg_pg_psql 'SELECT x FROM t')" = 42 ] || { echo "FAIL: socket query" >&2; exit 1; }
# TCP needs the password (scram-sha-256), which the URL carries.
got=$(fg_pg_as "$FG_PG_BIN/psql" -X -At "$FG_PG_URL" -c 'SELECT x FROM t')
[ "$got" = 42 ] || { echo "FAIL: TCP query with the URL" >&2; exit 1; }
pid=$FG_PG_PID
fg_pg_kill
if kill -0 "$pid" 2>/dev/null; then echo "FAIL: postmaster $pid survived kill" >&2; exit 1; fi
# The old backends release shared memory as they notice; fg_pg_restart waits for that.
deadline=$((SECONDS + 30))
until fg_pg_restart 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || { echo "FAIL: no restart after kill -9" >&2; exit 1; }
    sleep 0.2
done
[ "$(fg_pg_psql 'SELECT x FROM t')" = 42 ] || { echo "FAIL: data lost across kill -9" >&2; exit 1; }
fg_pg_stop
[ -z "$FG_PG_PID" ] || { echo "FAIL: stop left a PID" >&2; exit 1; }
echo "pg.sh: ok"
