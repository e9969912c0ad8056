#!/usr/bin/env bash
# Installs the build into a temp prefix, compiles the README's locklib example using only
# `pkg-config --cflags --libs locklib`, checks the README shows exactly that file, and runs
# it against a real redis-server on a unix socket in a temp dir (stopped by PID).
# Usage: example_test.sh BUILD_DIR SOURCE_DIR [EXTRA_CFLAGS]
set -euo pipefail
build=$1
src=$2
extra=${3:-}

# shellcheck source=../common/redis.sh
. "$src/tests/common/redis.sh"
tmp=$(mktemp -d /tmp/fg-example-XXXXXX)
cleanup() {
    fg_redis_stop
    rm -rf "$tmp"
}
trap cleanup EXIT

# 1. The README shows this very file.
awk '/<!-- example:begin -->/{f=1;next} /<!-- example:end -->/{f=0} f' "$src/README.md" \
    | sed '1{/^```/d};${/^```/d}' > "$tmp/readme_example.c"
if ! diff -u "$src/tests/locklib/example.c" "$tmp/readme_example.c"; then
    echo "FAIL: README.md's example differs from tests/locklib/example.c" >&2
    exit 1
fi

# 2. Install and build against the installed library only.
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name locklib.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: locklib.pc was not installed" >&2; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror $extra "$src/tests/locklib/example.c" \
    $(pkg-config --cflags --libs locklib) -o "$tmp/example"
libdir=$(pkg-config --variable=libdir locklib)
[ -f "$libdir/liblocklib.a" ] || { echo "FAIL: static library not installed" >&2; exit 1; }
[ -f "$tmp/prefix/include/locklib/locklib.h" ] || { echo "FAIL: header not installed" >&2; exit 1; }

# 3. Run it against a real Redis.
fg_redis_start "$tmp"
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/example" "unix://$FG_REDIS_SOCK")
echo "$out"
echo "$out" | grep -q '^holding orders with fencing token 1$'
echo "$out" | grep -q '^release: RELEASED$'
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/example" "unix://$FG_REDIS_SOCK")
echo "$out" | grep -q '^holding orders with fencing token 2$'
echo "PASS: example builds from the installed locklib.pc and runs"
