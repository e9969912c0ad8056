#!/usr/bin/env bash
# ctest scripts_run: the README's run command builds and starts only what running needs.
#
#   run_sh_test.sh SOURCE_DIR TREE
#
# Runs scripts/run.sh for real against a redis-server of its own (a unix socket in a temp
# dir, through tests/common/redis.sh), with the build tree TREE (FENCEGATE_BUILD_DIR) and a
# PATH on which node, npm and npx are stand-ins that record the call and fail, and cmake is
# a wrapper that records its arguments. Then checks that:
#   1. the gateway answers /healthz and a POST /lock (the first answer);
#   2. nothing called node, npm or npx (the npm checkers are the test command's);
#   3. the tree was configured with -DFENCEGATE_TESTS=OFF and no build type on the command
#      line, its cache says Release (CMakeLists.txt's default), and it holds no test program;
#   4. SIGTERM to run.sh stops the gateway, and run.sh exits 0.
# TREE's CMakeCache.txt is removed first, so the build type comes from a fresh configure
# (object files are kept: a rerun only relinks what changed). Waits are loops with deadlines.
# A missing redis-server, curl or cmake fails the test; it never skips.
set -euo pipefail

src=${1:?usage: run_sh_test.sh SOURCE_DIR TREE}
tree=${2:?usage: run_sh_test.sh SOURCE_DIR TREE}

fail() { echo "scripts_run: FAIL: $*" >&2; exit 1; }

for tool in curl cmake redis-server redis-cli; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (scripts/install-deps.sh installs it)"
done
real_cmake=$(command -v cmake)

# shellcheck source=../common/redis.sh
. "$src/tests/common/redis.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fg-run-sh-test.XXXXXX")
run_pid=""
cleanup() {
    local rc=$?
    if [ -n "$run_pid" ] && kill -0 "$run_pid" 2>/dev/null; then
        kill -TERM "$run_pid" 2>/dev/null || true
        wait "$run_pid" 2>/dev/null || true
    fi
    fg_redis_stop
    if [ "$rc" -ne 0 ] && [ -f "$tmp/run.log" ]; then
        echo "----- last lines of run.sh's output" >&2
        tail -n 40 "$tmp/run.log" >&2
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# --- stand-ins on PATH ---------------------------------------------------------------------
mkdir -p "$tmp/shims"
for tool in node npm npx; do
    printf '#!/bin/sh\necho "%s $*" >>"%s/forbidden"\nexit 97\n' "$tool" "$tmp" >"$tmp/shims/$tool"
done
printf '#!/bin/sh\necho "$*" >>"%s/cmake.log"\nexec "%s" "$@"\n' "$tmp" "$real_cmake" \
    >"$tmp/shims/cmake"
chmod +x "$tmp/shims/"*

# --- Redis and a free port for the gateway ---------------------------------------------------
fg_redis_start "$tmp"
port=""
for ((i = 0; i < 50; i++)); do
    p=$((10000 + RANDOM % 22000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || fail "found no free loopback port"
url="http://127.0.0.1:$port"

# --- run.sh ----------------------------------------------------------------------------------
mkdir -p "$tree"
rm -f "$tree/CMakeCache.txt"
PATH="$tmp/shims:$PATH" FENCEGATE_BUILD_DIR="$tree" \
    bash "$src/scripts/run.sh" "unix://$FG_REDIS_SOCK" --listen "127.0.0.1:$port" \
    --data "$tmp/gw" >"$tmp/run.log" 2>&1 &
run_pid=$!

# The build may take minutes on a loaded machine.
deadline=$((SECONDS + 600))
until curl -fsS --max-time 2 -o /dev/null "$url/healthz" 2>/dev/null; do
    if ! kill -0 "$run_pid" 2>/dev/null; then
        rc=0; wait "$run_pid" || rc=$?
        run_pid=""
        fail "run.sh exited with status $rc before the gateway answered"
    fi
    [ "$SECONDS" -lt "$deadline" ] || fail "the gateway did not answer /healthz within 600 s"
    sleep 0.2
done

# 1. The first answer.
answer=$(curl -sS --max-time 5 -X POST "$url/lock" -H 'Content-Type: application/json' \
    -d '{"resource":"run-sh-test"}' -w ' %{http_code}') || fail "POST /lock did not answer"
case "$answer" in
    *'"token":'*' 200') echo "scripts_run: POST /lock answered: $answer" ;;
    *) fail "POST /lock answered: $answer" ;;
esac

# 2. No npm.
if [ -s "$tmp/forbidden" ]; then
    fail "run.sh called the npm tools: $(tr '\n' ';' <"$tmp/forbidden")"
fi

# 3. Binaries only, optimised, in TREE.
[ -s "$tmp/cmake.log" ] || fail "run.sh did not call cmake"
configure=$(grep -m1 -- ' -B ' "$tmp/cmake.log") || fail "run.sh never configured a tree"
case " $configure " in
    *" -B $tree "*) ;;
    *) fail "run.sh configured another tree than FENCEGATE_BUILD_DIR: $configure" ;;
esac
case " $configure " in
    *" -DFENCEGATE_TESTS=OFF "*) ;;
    *) fail "run.sh configured the tests too: $configure" ;;
esac
case "$configure" in
    *CMAKE_BUILD_TYPE*) fail "run.sh names a build type; the default must come from CMakeLists.txt: $configure" ;;
esac
grep -qx 'CMAKE_BUILD_TYPE:STRING=Release' "$tree/CMakeCache.txt" \
    || fail "the tree's build type is not Release: $(grep '^CMAKE_BUILD_TYPE' "$tree/CMakeCache.txt")"
grep -qx 'FENCEGATE_TESTS:BOOL=OFF' "$tree/CMakeCache.txt" || fail "the tree was built with tests"
[ -x "$tree/gateway/fencegate" ] && [ -x "$tree/gateway/fencectl/fencectl" ] \
    || fail "fencegate or fencectl is missing from $tree"
[ ! -e "$tree/tests" ] || fail "$tree/tests exists: test programs were configured"

# 4. A clean stop.
kill -TERM "$run_pid"
deadline=$((SECONDS + 30))
while kill -0 "$run_pid" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || fail "run.sh did not exit within 30 s of SIGTERM"
    sleep 0.1
done
rc=0; wait "$run_pid" || rc=$?
run_pid=""
[ "$rc" -eq 0 ] || fail "run.sh exited with status $rc after SIGTERM (expected 0)"
if curl -fsS --max-time 2 -o /dev/null "$url/healthz" 2>/dev/null; then
    fail "the gateway still answers after run.sh exited"
fi
echo "scripts_run: PASS"
