# shellcheck shell=bash
# Sourced by the shell tests that need a real PostgreSQL 15. Never touches a cluster on 5432.
#
#   fg_pg_start DIR   initdb into DIR/data (as the postgres user when run as root: initdb
#                     refuses root; DIR is chowned to it), starts postgres on a free loopback
#                     port with its socket in DIR, waits up to 30 s until it accepts
#                     connections, and sets FG_PG_PID (the postmaster), FG_PG_PORT,
#                     FG_PG_SOCKDIR, FG_PG_PASSWORD and FG_PG_URL (TCP, with the password).
#                     A missing initdb fails loudly: it is never a skip.
#   fg_pg_restart     starts it again on the same port and data (after fg_pg_kill/stop);
#                     fails at once (returns 1) while a killed server's backends still hold
#                     its shared memory: call it in a loop with a deadline.
#   fg_pg_kill        SIGKILL the postmaster and its backends (a crash of the whole server).
#   fg_pg_stop        stops it by PID (SIGTERM: smart shutdown, then SIGQUIT, SIGKILL).
#   fg_pg_psql SQL    runs SQL as the superuser over the socket.
#
# The caller's EXIT trap should call fg_pg_stop and remove DIR.
FG_PG_PID=
FG_PG_PORT=
FG_PG_DIR=
FG_PG_SOCKDIR=
FG_PG_URL=
FG_PG_PASSWORD=
FG_PG_BIN=

fg_pg_bindir() {
    local d
    for d in /usr/lib/postgresql/15/bin "$(pg_config --bindir 2>/dev/null)"; do
        if [ -n "$d" ] && [ -x "$d/initdb" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

# Runs a command as the postgres user when we are root (initdb and postgres refuse root).
fg_pg_as() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

fg_pg_free_port() {
    local port
    for _ in $(seq 1 100); do
        port=$((20000 + RANDOM % 10000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    return 1
}

fg_pg_spawn() {
    local deadline starter
    fg_pg_as "$FG_PG_BIN/postgres" -D "$FG_PG_DIR/data" -p "$FG_PG_PORT" -k "$FG_PG_SOCKDIR" \
        -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on \
        >>"$FG_PG_DIR/postgres.log" 2>&1 &
    starter=$! # runuser (or postgres itself): it exits when the postmaster does
    deadline=$((SECONDS + 30))
    FG_PG_PID=
    until fg_pg_as "$FG_PG_BIN/pg_isready" -q -h "$FG_PG_SOCKDIR" -p "$FG_PG_PORT"; do
        if ! kill -0 "$starter" 2>/dev/null; then
            echo "FAIL: postgres exited at start; its log:" >&2
            tail -n 5 "$FG_PG_DIR/postgres.log" >&2 || true
            return 1
        fi
        if [ $SECONDS -ge $deadline ]; then
            echo "FAIL: postgres did not accept connections in 30 s; its log:" >&2
            tail -n 30 "$FG_PG_DIR/postgres.log" >&2 || true
            return 1
        fi
        sleep 0.05
    done
    # The postmaster's own PID (not runuser's): its first line of postmaster.pid.
    FG_PG_PID=$(head -n 1 "$FG_PG_DIR/data/postmaster.pid")
}

fg_pg_start() {
    FG_PG_DIR=$1
    FG_PG_BIN=$(fg_pg_bindir) \
        || { echo "FAIL: initdb not found; run scripts/install-deps.sh (postgresql-15)" >&2
             return 1; }
    FG_PG_SOCKDIR=$FG_PG_DIR
    FG_PG_PASSWORD=pw-$RANDOM$RANDOM
    printf '%s\n' "$FG_PG_PASSWORD" >"$FG_PG_DIR/pwfile"
    if [ "$(id -u)" -eq 0 ]; then
        chown -R postgres: "$FG_PG_DIR"
    fi
    fg_pg_as "$FG_PG_BIN/initdb" -D "$FG_PG_DIR/data" -U postgres --pwfile="$FG_PG_DIR/pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-instructions \
        >"$FG_PG_DIR/initdb.log" 2>&1 \
        || { echo "FAIL: initdb failed:" >&2; cat "$FG_PG_DIR/initdb.log" >&2; return 1; }
    FG_PG_PORT=$(fg_pg_free_port) || { echo "FAIL: no free port" >&2; return 1; }
    FG_PG_URL="postgresql://postgres:$FG_PG_PASSWORD@127.0.0.1:$FG_PG_PORT/postgres"
    fg_pg_spawn
}

fg_pg_restart() {
    fg_pg_spawn
}

fg_pg_kill() {
    local stat pid ppid
    [ -n "$FG_PG_PID" ] || return 0
    # Backends too, before the postmaster (then they are still its children): a postmaster
    # killed alone leaves its backends serving their connections until they notice.
    for stat in /proc/[0-9]*/stat; do
        read -r pid _ _ ppid _ 2>/dev/null <"$stat" || continue
        [ "$ppid" = "$FG_PG_PID" ] && { kill -KILL "$pid" 2>/dev/null || true; } # it may be gone
    done
    kill -KILL "$FG_PG_PID" 2>/dev/null || true
    while kill -0 "$FG_PG_PID" 2>/dev/null; do sleep 0.05; done
    FG_PG_PID=
}

fg_pg_stop() {
    local i
    [ -n "$FG_PG_PID" ] || return 0
    kill -TERM "$FG_PG_PID" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$FG_PG_PID" 2>/dev/null || break
        [ "$i" -eq 50 ] && kill -QUIT "$FG_PG_PID" 2>/dev/null
        sleep 0.1
    done
    kill -KILL "$FG_PG_PID" 2>/dev/null || true
    while kill -0 "$FG_PG_PID" 2>/dev/null; do sleep 0.05; done
    FG_PG_PID=
}

fg_pg_psql() {
    fg_pg_as "$FG_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$FG_PG_SOCKDIR" -p "$FG_PG_PORT" \
        -U postgres -d postgres -At -c "$1"
}
