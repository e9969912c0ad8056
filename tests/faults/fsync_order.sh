#!/usr/bin/env bash
# Durability order, checked once with strace: a token-checked write is on disk before
# its 200 is sent.
#
#   fsync_order.sh PATH/TO/fencegate          the test (ctest faults_fsync_order)
#   fsync_order.sh --check-trace TRACE        only the check, on a trace written by strace -f -y
#
# The test starts its own redis-server (unix socket, tests/common/redis.sh) and the gateway
# under strace -f -tt -y, takes a lock and makes one PUT with its token with curl, stops the
# gateway, and reads the trace. What LMDB 0.9 does here on commit (default flags, no
# MDB_WRITEMAP, no MDB_NOSYNC, no MDB_NOMETASYNC): it writes the transaction's pages to
# data.mdb (pwrite64/writev), fdatasync()s data.mdb, then writes the meta page through a
# second descriptor of data.mdb opened with O_DSYNC, so that write returns only once it is on
# disk. The check therefore is, over the syscalls between the last HTTP answer before the PUT's
# (the lock's 200) and the PUT's "HTTP/1.1 200":
#   1. at least one write to data.mdb happened (the commit of this PUT);
#   2. every write to data.mdb there either went through an O_DSYNC descriptor and returned, or
#      was followed by a completed fdatasync, fsync or msync of data.mdb;
#   3. all of that before the syscall that sends the PUT's 200 starts;
#   4. no write to data.mdb after that 200 (only the shutdown follows), and no other answer
#      either (the lock's 200, which follows the ledger's cover of its token) sent while a
#      write to data.mdb was not yet durable.
# strace -f prints syscalls of all threads in the order they happened; a call another event
# interrupted shows as "<unfinished ...>" and counts only once its "resumed" line returned.
#
# The check can fail, and the test proves it each run: it also feeds the check a copy of the
# real trace in which the PUT's 200 is moved before the commit's fdatasync, and that copy must
# be refused. ptrace refused (a container without CAP_SYS_PTRACE, Yama) is a failure with a
# message, never a skip; so is a missing strace, redis-server or curl.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

fail() { echo "faults_fsync_order: FAIL: $*" >&2; exit 1; }
say() { echo "faults_fsync_order: $*"; }

# check_trace TRACE: exits 0 when the order holds, 1 (saying why) when not.
check_trace() {
    awk '
        # The fd of a syscall line: the first argument, "N</path>" with strace -y.
        function fd_of(s) { sub(/^[^(]*\(/, "", s); sub(/<.*/, "", s); return s }
        function is_mdb(s) { return s ~ /^[^(]*\([0-9]+<[^>]*\/data\.mdb>/ }
        function name_of(s) { sub(/\(.*/, "", s); return s }
        # A finished syscall: name, whether on data.mdb, its fd, its result.
        function finished(name, mdb, fd, ret) {
            if (!mdb || ret ~ /^-1/) return
            if (name ~ /^(pwrite64|pwritev|pwritev2|write|writev)$/) {
                writes++
                if (!dsync[fd]) pending++
            } else if (name ~ /^(fdatasync|fsync|msync)$/) {
                pending = 0; syncs++
            }
        }
        {
            pid = $1; rest = $0; sub(/^[0-9]+ +[0-9:.]+ +/, "", rest)
        }
        rest ~ /^openat\(.*data\.mdb".*= [0-9]+/ {
            fd = rest; sub(/.*= /, "", fd); sub(/<.*/, "", fd)
            dsync[fd] = rest ~ /O_DSYNC|O_SYNC/
            next
        }
        rest ~ /^close\([0-9]+</ { delete dsync[fd_of(rest)] }
        # The answers: the PUT 200 carries highest_token; any other one starts a new window.
        # One client asks one thing at a time, so no answer at all (the health checks, the
        # 200 of the lock after its ledger cover) may leave a write to data.mdb not yet durable.
        rest ~ /^(sendmsg|sendto|write|writev)\([0-9]+<(socket|TCP)/ && rest ~ /HTTP\/1\.1 / {
            if (found) next
            if (pending > 0 || open_calls > 0) {
                printf "an answer was sent with %d write(s) to data.mdb not yet synced and %d sync or O_DSYNC write(s) not returned (line %d)\n", pending, open_calls, NR
                failed = 1; exit 1
            }
            if (rest ~ /HTTP\/1\.1 200/ && rest ~ /highest_token/) {
                found = NR
                if (writes == 0) { print "no write to data.mdb between the request and its 200"; failed = 1; exit 1 }
                verdict = sprintf("ok: %d write(s) to data.mdb, %d sync(s), all durable before the PUT 200 (line %d), none after it", writes, syncs, NR)
                next
            }
            writes = 0; pending = 0; syncs = 0
            next
        }
        # After the 200 no request came but the shutdown: a write to data.mdb there could only
        # be the rest of the PUT commit, made after it was acknowledged.
        found && is_mdb(rest) && name_of(rest) ~ /^(pwrite64|pwritev|pwritev2|write|writev)$/ {
            printf "a write to data.mdb at line %d, after the PUT 200 at line %d\n", NR, found
            failed = 1; exit 1
        }
        found { next }
        # A call interrupted by another thread: remember it until it resumes.
        rest ~ /<unfinished \.\.\.>$/ {
            name = name_of(rest)
            if (is_mdb(rest)) { open_calls++; u_name[pid] = name; u_fd[pid] = fd_of(rest); u_mdb[pid] = 1 }
            next
        }
        rest ~ /^<\.\.\. [a-z0-9_]+ resumed>/ {
            if (u_mdb[pid]) {
                ret = rest; sub(/.*= /, "", ret)
                open_calls--; finished(u_name[pid], 1, u_fd[pid], ret)
                delete u_mdb[pid]
            }
            next
        }
        is_mdb(rest) {
            ret = rest; sub(/.*= /, "", ret)
            finished(name_of(rest), 1, fd_of(rest), ret)
        }
        END {
            if (failed) exit 1
            if (!found) { print "no \"HTTP/1.1 200\" answer of the PUT in the trace"; exit 1 }
            print verdict
        }
    ' "$1"
}

if [ "${1:-}" = --check-trace ]; then
    check_trace "${2:?usage: fsync_order.sh --check-trace TRACE}"
    exit
fi

gateway=${1:?usage: fsync_order.sh PATH/TO/fencegate}
[ -x "$gateway" ] || fail "not executable: $gateway"
for tool in strace curl redis-server redis-cli; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (scripts/install-deps.sh)"
done
# shellcheck source=../common/redis.sh
source "$here/../common/redis.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fg-fsync.XXXXXX")
gw_pid=""
cleanup() {
    local rc=$?
    [ -n "$gw_pid" ] && { kill -KILL "$gw_pid" 2>/dev/null || true; wait "$gw_pid" 2>/dev/null || true; }
    fg_redis_stop
    if [ "$rc" -ne 0 ]; then
        for f in "$tmp/strace.err" "$tmp/gateway.log"; do
            [ -s "$f" ] && { echo "----- last lines of $f" >&2; tail -n 20 "$f" >&2; }
        done
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# ptrace may be refused here; say so plainly instead of failing somewhere later.
strace -f -o /dev/null true 2>"$tmp/strace.err" \
    || fail "strace cannot trace here (ptrace refused?): $(head -n 3 "$tmp/strace.err")"

fg_redis_start "$tmp" || fail "redis-server did not start"
mkdir -p "$tmp/gw"

# One try per port: the gateway exits when the port is taken, and we try another.
url=""
for ((try = 0; try < 10; try++)); do
    port=$((10000 + $(od -An -N2 -tu2 /dev/urandom) % 22000))
    # LeakSanitizer cannot run under ptrace and would fail the exit; leaks are the other
    # tests' business, this one is about the order of syscalls.
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 strace -f -tt -y -s 256 -o "$tmp/trace" \
        -e trace=openat,close,pwrite64,pwritev,pwritev2,write,writev,fdatasync,fsync,msync,sendto,sendmsg \
        "$gateway" --listen "127.0.0.1:$port" --data "$tmp/gw" --threads 2 \
        --redis "unix://$FG_REDIS_SOCK" 2>>"$tmp/gateway.log" >&2 &
    gw_pid=$!
    deadline=$((SECONDS + 30)) # ASan under ptrace starts slowly
    while kill -0 "$gw_pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
        if curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null; then
            url=http://127.0.0.1:$port
            break
        fi
        sleep 0.05
    done
    if [ -z "$url" ]; then
        kill -KILL "$gw_pid" 2>/dev/null || true
        wait "$gw_pid" 2>/dev/null || true
        gw_pid=""
    else
        break
    fi
done
[ -n "$url" ] || fail "the gateway under strace never answered /healthz"

res=fsync-order-$$
lock=$(curl -sS --max-time 10 -H 'Content-Type: application/json' \
    -d "{\"resource\":\"$res\",\"owner\":\"fsync-owner\",\"ttl_ms\":30000}" "$url/lock")
token=$(echo "$lock" | jq -r '.token // empty')
[ -n "$token" ] || fail "no token from POST /lock: $lock"
put=$(curl -sS --max-time 10 -w ' %{http_code}' -X PUT -H 'Content-Type: text/plain' \
    -H "Fencing-Token: $token" --data-binary 'durable before acknowledged' "$url/resources/$res")
[ "${put##* }" = 200 ] || fail "the PUT answered ${put##* }: ${put% *}"

# strace with -o blocks SIGTERM for itself: stop the gateway (its child), and strace ends with it.
gateway_pid=$(cat "/proc/$gw_pid/task/$gw_pid/children" 2>/dev/null | awk "{ print \$1 }")
[ -n "$gateway_pid" ] || fail "no gateway process under strace (pid $gw_pid)"
kill -TERM "$gateway_pid"
deadline=$((SECONDS + 20))
while kill -0 "$gw_pid" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || fail "the gateway under strace did not exit within 20 s of SIGTERM"
    sleep 0.05
done
wait "$gw_pid" || fail "the gateway under strace exited with status $? on SIGTERM"
gw_pid=""

why=$(check_trace "$tmp/trace") || fail "the order in the trace is wrong: $why"
say "$why"

# The check must be able to fail. Two copies of the real trace with the order broken, each
# must be refused: the PUT's 200 moved to just before the commit's fdatasync of data.mdb, and
# the commit's last write to data.mdb (LMDB's meta page) moved to just after the 200.
# move_line FROM TO: the trace with line FROM moved to just before line TO (TO < FROM) or just
# after it (TO > FROM).
move_line() {
    # The line goes through the environment: awk would expand the \r\n of a -v value.
    HELD=$(sed -n "${1}p" "$tmp/trace") awk -v from="$1" -v to="$2" '
        NR == from { next }
        NR == to && to < from { print ENVIRON["HELD"] }
        { print }
        NR == to && to > from { print ENVIRON["HELD"] }
    ' "$tmp/trace"
}
put_line=$(grep -n 'HTTP/1\.1 200.*highest_token' "$tmp/trace" | head -n 1 | cut -d: -f1)
mdb_lines=$(head -n "$put_line" "$tmp/trace" | grep -nE '^[0-9]+ +[0-9:.]+ +[a-z0-9]+\([0-9]+<[^>]*/data\.mdb>')
sync_line=$(echo "$mdb_lines" | grep 'fdatasync(' | tail -n 1 | cut -d: -f1)
write_line=$(echo "$mdb_lines" | grep -E ' (pwrite64|pwritev|writev|write)\(' | tail -n 1 | cut -d: -f1)
[ -n "$put_line" ] && [ -n "$sync_line" ] && [ -n "$write_line" ] \
    || fail "no fdatasync of or write to data.mdb before the PUT's 200"
move_line "$put_line" "$sync_line" >"$tmp/trace.early"
move_line "$write_line" "$put_line" >"$tmp/trace.late"
for broken in early late; do
    if why=$(check_trace "$tmp/trace.$broken"); then
        fail "the check accepted the trace with the order broken ($broken): $why"
    fi
    say "the trace with the order broken ($broken) is refused: $why"
done
say "PASS"
