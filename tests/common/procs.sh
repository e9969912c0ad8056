# shellcheck shell=bash
# Sourced by the shell tests that start servers of their own:
#
#   fg_free_port         prints a loopback TCP port nothing listens on right now, below the
#                        kernel's ephemeral range (from 32768), so no outgoing connection
#                        takes it while a server restarts on it; returns 1 when none is found
#   fg_stop_pid PID      SIGTERM, up to 10 s, then SIGKILL (saying so); waits for it and
#                        returns its exit status
fg_free_port() {
    local p i
    for ((i = 0; i < 50; i++)); do
        p=$((10000 + RANDOM % 22000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
    done
    echo "FAIL: found no free loopback port" >&2
    return 1
}

fg_stop_pid() {
    local pid=$1 i rc=0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "pid $pid ignored SIGTERM for 10 s; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || rc=$?
    return "$rc"
}
